#!/usr/bin/env bash
# tests/t_bf16.sh: --precision bf16 end to end: bad values refused (exit 2, one line), the header
# and --json name oneDNN's kernel, every mode and schedule passes --verify against the bf16
# monolith reference, checkpoints (fp32 master weights) resume bf16 -> bf16 exactly and
# bf16 <-> fp32 across precisions, stashed activations take half the bytes (peak_activation_bytes)
# and so does each pipeline message (p2p_message_bytes).
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
S="--layers 6 --hidden 32 --classes 4 --batch 16 --log-every 0"

if ! run 60 "$MICROPP" train $S --steps 1 --precision bf16 || [ "$RC" -ne 0 ]; then
    if printf '%s' "$ERR" | grep -q "built without oneDNN"; then
        expect_user_error "bf16/a build without oneDNN names the package" "libdnnl-dev" 30 "$MICROPP" train $S --precision bf16
        skip "bf16/the rest" "this micropp was built without oneDNN"
        exit 0
    fi
fi

# ---- bad input ----
expect_user_error "bf16/--precision fp16 refused" "precision.*fp16.*fp32.bf16" 30 "$MICROPP" train $S --precision fp16
echo '{"precision": "half"}' >"$TMP/bad.json"
expect_user_error "bf16/config key precision: half refused" "precision.*half" 30 "$MICROPP" train $S --config "$TMP/bad.json"
expect_user_error "bf16/--precision fp16 refused on every rank of a pipeline" "precision.*fp16" 60 mpiexec -n 2 "$MICROPP" train $S --mode pp --precision fp16

# ---- what the run says ----
run 60 "$MICROPP" train $S --steps 2 --precision bf16
if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -qE "^precision bf16: .*onednn [0-9]+\.[0-9]+\.[0-9]+ [a-z]"; then pass "bf16/header names the oneDNN version and kernel"
else fail "bf16/header names the oneDNN version and kernel" "exit $RC: $(printf '%s' "$OUT" | head -c 400)"; fi
run 60 "$MICROPP" train $S --steps 2 --precision bf16 --json
if [ "$RC" -eq 0 ] && [ "$(json_get '["precision"]')" = bf16 ] && json_get '["onednn"]' | grep -q "^onednn "; then pass "bf16/--json precision and onednn keys"
else fail "bf16/--json precision and onednn keys" "exit $RC: $(printf '%s' "$OUT" | head -c 400)"; fi
BF=$(json_get '["losses"]')
run 60 "$MICROPP" train $S --steps 2 --json
FP=$(json_get '["losses"]')
if [ "$(json_get '["precision"]')" = fp32 ] && [ "$BF" != "$FP" ]; then pass "bf16/fp32 stays the default, and bf16 really rounds (losses differ)"
else fail "bf16/fp32 stays the default, and bf16 really rounds (losses differ)" "fp32 $FP bf16 $BF"; fi

# ---- every mode passes --verify against the bf16 reference ----
verify() {  # verify NAME RANKS ARGS...
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then run 120 "$MICROPP" train $S --steps 1 --precision bf16 --verify --json "$@"
    else run 120 mpiexec -n "$n" "$MICROPP" train $S --steps 1 --precision bf16 --verify --json "$@"; fi
    local ok; ok=$([ "$RC" -eq 0 ] && json_get '["verify_ok"]' 2>/dev/null)
    if [ "$ok" = True ]; then pass "bf16/verify $name"
    else fail "bf16/verify $name" "exit $RC: $(printf '%s' "$OUT$ERR" | tail -c 400)"; fi
}
verify "monolith, grad-accum 2" 1 --grad-accum 2
verify "manual 3 parts" 1 --mode manual --parts 3
verify "pp naive" 2 --mode pp --schedule naive
verify "pp gpipe, checkpointing" 2 --mode pp --schedule gpipe --checkpoint-activations
verify "pp 1f1b M=4" 2 --mode pp --schedule 1f1b --micro-batches 4
verify "pp interleaved v=2" 2 --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 4
verify "pp zb-h1, checkpointing" 2 --mode pp --schedule zb-h1 --micro-batches 4 --checkpoint-activations
verify "pp zb-h2" 2 --mode pp --schedule zb-h2 --micro-batches 4
verify "pp interleaved v=2, checkpointing" 2 --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 4 --checkpoint-activations
verify "pp zb-v" 2 --mode pp --schedule zb-v --micro-batches 4
verify "pp dualpipev" 2 --mode pp --schedule dualpipev --micro-batches 4
verify "ddp bucketed" 2 --mode ddp
verify "ddp naive, ZeRO-1" 2 --mode ddp --ddp-sync naive --zero 1
verify "hybrid 2x2" 4 --mode hybrid --pp 2 --dp 2 --micro-batches 2

# ---- bf16 stashes and messages: half the bytes ----
half() {  # half NAME RANKS ARGS...: peak_activation_bytes (every rank) and p2p_message_bytes halve
    local name=$1 n=$2; shift 2
    local fp bf fm bm
    run 120 mpiexec -n "$n" "$MICROPP" train $S --steps 2 --json "$@"; fp=$(json_get '["peak_activation_bytes"]'); fm=$(json_get '.get("p2p_message_bytes", 0)')
    run 120 mpiexec -n "$n" "$MICROPP" train $S --steps 2 --json --precision bf16 "$@"; bf=$(json_get '["peak_activation_bytes"]'); bm=$(json_get '.get("p2p_message_bytes", 0)')
    if [ "$RC" -eq 0 ] && python3 -c "
import json,sys
f,b=json.loads(sys.argv[1]),json.loads(sys.argv[2])
sys.exit(0 if len(f)==len(b)>0 and all(x>0 and abs(2*y-x)<=0.01*x for x,y in zip(f,b)) and float(sys.argv[3])==2*float(sys.argv[4]) else 1)" "$fp" "$bf" "$fm" "$bm"
    then pass "bf16/$name: peak activation bytes $fp -> $bf, message bytes $fm -> $bm"
    else fail "bf16/$name: peak activation bytes and message bytes halve" "exit $RC: fp32 $fp $fm, bf16 $bf $bm"; fi
}
half "monolith" 1
half "pp 1f1b" 2 --mode pp --schedule 1f1b --micro-batches 4
half "pp gpipe" 2 --mode pp --schedule gpipe --micro-batches 4
half "pp interleaved v=2" 2 --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 4
run 60 mpiexec -n 2 "$MICROPP" train $S --steps 1 --json --precision bf16 --mode pp --micro-batches 4
if [ "$(json_get '["p2p_message_bytes"]')" = 256 ]; then pass "bf16/a pp message is rows x hidden x 2 bytes (4 x 32 x 2 = 256)"
else fail "bf16/a pp message is rows x hidden x 2 bytes (4 x 32 x 2 = 256)" "got $(json_get '["p2p_message_bytes"]')"; fi

# ---- checkpoints: fp32 master weights, so precision may change at a resume ----
C="$S --samples 64 --json"
losses() { json_get '["losses"]'; }
run 120 "$MICROPP" train $C --steps 8 --precision bf16; REF_BF=$(losses)
run 120 "$MICROPP" train $C --steps 8; REF_FP=$(losses)
run 120 "$MICROPP" train $C --steps 4 --precision bf16 --save "$TMP/bf"
run 120 "$MICROPP" train $C --steps 8 --precision bf16 --resume "$TMP/bf"
want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_BF")
if [ "$RC" -eq 0 ] && [ "$(losses)" = "$want" ]; then pass "bf16/resume bf16 -> bf16: 4+4 steps == 8 steps, bit for bit"
else fail "bf16/resume bf16 -> bf16: 4+4 steps == 8 steps, bit for bit" "exit $RC: $(losses) vs $want"; fi
close() {  # close NAME GOT_JSON REF_JSON RTOL: element-wise within RTOL
    python3 -c "
import json,sys
a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2])
sys.exit(0 if len(a)==len(b) and all(abs(x-y)<=float(sys.argv[3])*abs(y) for x,y in zip(a,b)) else 1)" "$2" "$3" "$4"
}
run 120 "$MICROPP" train $C --steps 8 --resume "$TMP/bf"
got=$(losses); want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_FP")
if [ "$RC" -eq 0 ] && [ "$(json_get '["precision"]')" = fp32 ] && close x "$got" "$want" 0.02; then pass "bf16/resume bf16 checkpoint in fp32: within 2% of the fp32 run"
else fail "bf16/resume bf16 checkpoint in fp32: within 2% of the fp32 run" "exit $RC: $got vs $want $(printf '%s' "$ERR" | head -c 200)"; fi
run 120 "$MICROPP" train $C --steps 4 --save "$TMP/fp"
run 120 "$MICROPP" train $C --steps 8 --precision bf16 --resume "$TMP/fp"
got=$(losses); want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_BF")
if [ "$RC" -eq 0 ] && close x "$got" "$want" 0.02; then pass "bf16/resume fp32 checkpoint in bf16: within 2% of the bf16 run"
else fail "bf16/resume fp32 checkpoint in bf16: within 2% of the bf16 run" "exit $RC: $got vs $want $(printf '%s' "$ERR" | head -c 200)"; fi
run 120 mpiexec -n 2 "$MICROPP" train $C --mode pp --micro-batches 4 --steps 8 --precision bf16 --resume "$TMP/bf"
got=$(losses)
if [ "$RC" -eq 0 ] && close x "$got" "$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_BF")" 0.02; then pass "bf16/resume a monolith bf16 checkpoint as a bf16 pipeline"
else fail "bf16/resume a monolith bf16 checkpoint as a bf16 pipeline" "exit $RC: $got $(printf '%s' "$ERR" | head -c 200)"; fi
# fp32 -> bf16 -> fp32: 4 steps each, the last four within 2% of an uninterrupted fp32 run
run 120 "$MICROPP" train $C --steps 12; REF12=$(losses)
run 120 "$MICROPP" train $C --steps 4 --save "$TMP/c1"
run 120 "$MICROPP" train $C --steps 8 --precision bf16 --resume "$TMP/c1" --save "$TMP/c2"
run 120 "$MICROPP" train $C --steps 12 --resume "$TMP/c2"
got=$(losses); want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[8:]))" "$REF12")
if [ "$RC" -eq 0 ] && [ "$(json_get '["precision"]')" = fp32 ] && close x "$got" "$want" 0.02; then pass "bf16/resume fp32 -> bf16 -> fp32: within 2% of the fp32 run"
else fail "bf16/resume fp32 -> bf16 -> fp32: within 2% of the fp32 run" "exit $RC: $got vs $want $(printf '%s' "$ERR" | head -c 200)"; fi
# The trace shows what crossed the wire: every send and receive carries its bytes, halved in bf16.
for p in fp32 bf16; do
    run 60 mpiexec -n 2 "$MICROPP" train --mode pp --layers 4 --hidden 32 --batch 16 --steps 2 --log-every 0 --precision $p --trace "$TMP/wire-$p.json"
done
got=$(python3 -c "
import json, sys
def sizes(f):
    d = json.load(open(f)); ev = d['traceEvents'] if isinstance(d, dict) else d
    return sorted(set((e['name'].split()[0], e['args']['bytes']) for e in ev if 'bytes' in e.get('args', {})))
print(sizes(sys.argv[1]), sizes(sys.argv[2]))" "$TMP/wire-fp32.json" "$TMP/wire-bf16.json" 2>&1)
want="[('RECV_ACT', 512), ('RECV_GRAD', 512), ('SEND_ACT', 512), ('SEND_GRAD', 512)] [('RECV_ACT', 256), ('RECV_GRAD', 256), ('SEND_ACT', 256), ('SEND_GRAD', 256)]"
[ "$got" = "$want" ] && pass "bf16/the trace's sends and receives carry their bytes: 512 in fp32, 256 in bf16 (16 rows / 4 micro-batches x 32)" ||
    fail "bf16/the trace's sends and receives carry their bytes, halved in bf16" "$got"
