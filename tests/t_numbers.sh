#!/usr/bin/env bash
# tests/t_numbers.sh: numbers that are not numbers. Non-finite features are refused at load (file,
# row, column); a checkpoint holding NaN or Inf is refused at resume (tensor, index); an update that
# leaves a parameter non-finite ends every rank (exit 1) naming the step, the tensor and the stage, in
# every mode; a diverged loss ends the run by a stated rule that --diverge-factor changes.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$TMP"
S="--layers 4 --hidden 16 --classes 3 --batch 16 --log-every 0"

# .npy features with one NaN / Inf at a known place (numpy's format written by hand)
python3 - <<'PY'
import struct
def npy(path, descr, shape, fmt, values):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
x = [0.5] * (32 * 16)
x[5 * 16 + 7] = float("nan"); npy("nan.npy", "<f4", "(32, 16)", "f", x)
x[5 * 16 + 7] = 0.5; x[31 * 16 + 15] = float("-inf"); npy("inf.npy", "<f4", "(32, 16)", "f", x)
npy("y.npy", "<i4", "(32,)", "i", [i % 3 for i in range(32)])
PY
expect_user_error "numbers/a NaN feature is refused with its row and column" "nan.npy: row 5, column 7 is NaN: features must be finite" 20 "$MICROPP" train $S --data nan.npy --labels y.npy
expect_user_error "numbers/an Inf feature is refused with its row and column" "inf.npy: row 31, column 15 is Inf" 20 "$MICROPP" train $S --data inf.npy --labels y.npy
expect_user_error "numbers/... on every rank of a pipeline" "nan.npy: row 5, column 7 is NaN" 60 mpiexec -n 2 "$MICROPP" train --mode pp $S --data nan.npy --labels y.npy

# a checkpoint with a NaN (CRC fixed, so only the value is wrong) is refused at resume
run 60 "$MICROPP" train $S --steps 2 --save ck
python3 - <<'PY'
import json, struct, zlib
m = json.load(open("ck/manifest.json"))
fr = m["files"][0]
raw = bytearray(open("ck/" + fr["file"], "rb").read())
(n,) = struct.unpack("<Q", raw[:8]); head = json.loads(raw[8:8 + n])
begin = head["layers.1.weight"]["data_offsets"][0] + 8 + n + 4 * 9
raw[begin:begin + 4] = struct.pack("<f", float("nan"))
open("ck/" + fr["file"], "wb").write(raw)
fr["crc32"] = zlib.crc32(bytes(raw)); json.dump(m, open("ck/manifest.json", "w"))
PY
expect_user_error "numbers/a checkpoint holding NaN is refused at resume, naming the tensor and index" "tensor 'layers.1.weight' holds NaN at index 9: it was saved from a run that diverged" 30 "$MICROPP" train $S --steps 4 --resume ck
expect_user_error "numbers/... in a pipeline too" "tensor 'layers.1.weight' holds NaN at index 9" 60 mpiexec -n 2 "$MICROPP" train --mode pp $S --steps 4 --resume ck

# an update that leaves a parameter non-finite (MICROPP_FAULT nangrad: a NaN gradient, the loss finite)
f() {  # NAME N SPEC PATTERN ARGS...
    local name=$1 n=$2 spec=$3 pat=$4; shift 4
    if [ "$n" = 1 ]; then expect_failure "numbers/non-finite update ends the run: $name" "$pat" 60 env MICROPP_FAULT=$spec "$MICROPP" train $S "$@"
    else expect_failure "numbers/non-finite update ends every rank: $name" "$pat" 90 env MICROPP_FAULT=$spec mpiexec -n "$n" "$MICROPP" train $S "$@"; fi
}
f monolith 1 0:3:nangrad "step 3's update left layers\.[0-9]+\.(weight|bias)\[[0-9]+\] of part 0 not finite" --steps 5
f "manual split" 1 0:2:nangrad "step 2's update left layers\.[0-9]+\.(weight|bias)\[[0-9]+\] of part 0 not finite" --mode manual --parts 2 --steps 5
f "pp, the last stage" 2 1:3:nangrad "step 3's update left .* of stage 1 not finite" --mode pp --steps 5
f "pp 1f1b x interleaved" 2 0:2:nangrad "step 2's update left .* of stage 0 not finite" --mode pp --schedule interleaved --micro-batches 4 --steps 5
f "ddp" 2 1:3:nangrad "step 3's update left .* of part 0 not finite" --mode ddp --steps 5
f "ddp ZeRO-1 (a shard)" 2 1:3:nangrad "step 3's update left .* not finite" --mode ddp --zero 1 --steps 5
f "hybrid" 4 3:2:nangrad "step 2's update left .* of stage 1 not finite" --mode hybrid --pp 2 --dp 2 --steps 5
f "the last step (no next step to carry it)" 2 0:5:nangrad "step 5's update left" --mode pp --steps 5
run 60 env MICROPP_FAULT=0:3:nangrad "$MICROPP" train $S --steps 5 --save nanck --save-every 1
[ "$(python3 -c "import json; print(json.load(open('nanck/manifest.json'))['step'])")" = 2 ] \
    && pass "numbers/the step whose update went non-finite is never saved (the checkpoint stays at step 2)" || fail "numbers/no save of a non-finite state" "$(cat nanck/manifest.json | head -c 200)"

# divergence: the rule, and the flag that changes it
expect_failure "numbers/a diverged loss ends the run, saying the rule" "the loss diverged: .* at step 4, above 1.5 x the first step's 0.\w+ for 3 steps in a row: lower --lr \(now 10\), or change the rule with --diverge-factor" \
    30 "$MICROPP" train --optimizer sgd --lr 10 --steps 8 --diverge-factor 1.5
expect_failure "numbers/... on every rank of a pipeline" "the loss diverged" 60 mpiexec -n 2 "$MICROPP" train --mode pp --optimizer sgd --lr 10 --steps 8 --diverge-factor 1.5
run 30 "$MICROPP" train --optimizer sgd --lr 10 --steps 8 --diverge-factor 0 --json
[ $RC -eq 0 ] && pass "numbers/--diverge-factor 0 turns the rule off" || fail "numbers/--diverge-factor 0" "rc $RC ${ERR:0:200}"
run 30 "$MICROPP" train --optimizer sgd --lr 10 --steps 8 --json
[ $RC -eq 0 ] && pass "numbers/the default rule (100 x) leaves a noisy but bounded run alone" || fail "numbers/default rule" "rc $RC ${ERR:0:200}"
expect_user_error "numbers/--diverge-factor must not be negative" "diverge-factor = -1 is out of range" 10 "$MICROPP" train --diverge-factor -1

# Subnormals are flushed on the cpu (ops.h: cpu_flush_subnormals): Adam's first moment of units
# without gradient decays to zero instead of lingering in the slow subnormal range. Without the flush
# this run's checkpoint held 90 subnormal values; with it, none.
run 120 "$MICROPP" train --layers 8 --hidden 64 --lr 0.01 --steps 400 --log-every 0 --save "$TMP/sub"
python3 "$ROOT/tests/ckpt_tool.py" dump "$TMP/sub" "$TMP/sub.json"
got=$(python3 -c "import json, sys; print(sum(1 for t in json.load(open(sys.argv[1])).values() for x in t if x != 0 and abs(x) < 1.1754943508222875e-38))" "$TMP/sub.json")
[ "$RC" -eq 0 ] && [ "$got" = 0 ] && pass "numbers/no subnormal value in a trained checkpoint (flushed to zero)" ||
    fail "numbers/no subnormal value in a trained checkpoint (flushed to zero)" "exit $RC, $got subnormal values"
