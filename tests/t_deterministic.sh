#!/usr/bin/env bash
# tests/t_deterministic.sh: --deterministic's claim (docs/determinism.md): after the same steps, every
# layout below holds the same weights and Adam moments as the monolith, every tensor, every bit (the
# checkpoints' tensors compared exactly, as tests/ckpt_tool.py dumps them); bf16 layouts against the
# bf16 monolith. Without --deterministic two of them differ (so the comparison can fail), and the
# layouts not in the canonical order yet, and micro-batches finer than its chunk, are refused in one line.
# Every layout trains with --clip-grad clipping each step, and its --json losses, gradient norms, which
# steps clipped and the held-out accuracy must equal the reference's too, every bit (as hex).
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
M=(--layers 6 --hidden 32 --seed 7 --deterministic --det-rows 8 --log-every 0)
C=(--clip-grad 0.05 --json)  # (clips every step of these runs)
TOOL="python3 $ROOT/tests/ckpt_tool.py"
"$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4 --dump-csv "$TMP/s.csv" >/dev/null 2>&1
# trained NAME NRANKS ARGS...: trains 3 steps, saves, dumps the tensors to $TMP/NAME.json and the --json
# report's sums to $TMP/NAME.sums (a line per step: its loss, gradient norm, clipped; then the accuracy); ""
# or why not
trained() {
    local name=$1 n=$2 b=(--batch 64); shift 2
    [[ " $* " == *" --batch "* ]] && b=()  # (64 rows a step, unless the layout says how: grad-accum)
    if [ "$n" -gt 1 ]; then run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" "${C[@]}" "${b[@]}" --save "$TMP/$name" "$@"
    else run 240 "$MICROPP" train "${M[@]}" "${C[@]}" "${b[@]}" --save "$TMP/$name" "$@"; fi
    [ "$RC" -ne 0 ] && { echo "exit $RC: $(head -c 300 <<<"$ERR$OUT" | tr '\n' ' ')"; return; }
    $TOOL dump "$TMP/$name" "$TMP/$name.json" >/dev/null 2>&1 || echo "no dump of $TMP/$name"
    python3 -c '
import json, sys
d = json.load(sys.stdin)
for i, (l, g, c) in enumerate(zip(d["losses"], d["grad_norms"], d["clipped"])):
    print("step %d loss %s norm %s clipped %s" % (d["start_step"] + i + 1, l.hex(), g.hex(), c))
print("accuracy %s" % d["accuracy"].hex())' <<<"$OUT" >"$TMP/$name.sums" 2>/dev/null || echo "no --json report: $(head -c 200 <<<"$OUT")"
}
# sums_differ A B: B's report lines (a resume: its steps) that A's lacks; and whether any step clipped
sums_differ() {
    grep -q "clipped True" "$TMP/$1.sums" || { echo "no step of $1 clipped"; return; }
    grep -vxF -f "$TMP/$1.sums" "$TMP/$2.sums" | head -2 | tr '\n' ' ' | sed 's/^./report differs: &/'
}
# differs A B: the names of the tensors whose bits differ (empty: identical, every tensor)
differs() {
    python3 - "$TMP/$1.json" "$TMP/$2.json" <<'PY'
import json, struct, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
bits = lambda v: [struct.pack("<f", x) for x in v]
bad = [n for n in sorted(set(a) | set(b)) if n not in a or n not in b or bits(a[n]) != bits(b[n])]
print(" ".join(bad[:4]) + (" and %d more" % (len(bad) - 4) if len(bad) > 4 else ""))
PY
}
same() {  # same NAME NRANKS ARGS...: NAME's weights equal the reference's ($REF), bit for bit
    local name=$1 why
    why=$(trained "$@")
    [ -z "$why" ] && why=$(differs "$REF" "$name" | sed 's/^./differs: &/')
    [ -z "$why" ] && why=$(sums_differ "$REF" "$name")
    [ -z "$why" ] && pass "deterministic/$name: the $REF's weights, losses and clipped norms, bit for bit" \
        || fail "deterministic/$name" "$why"
}
REF=monolith
why=$(trained monolith 1 --steps 3)
[ -z "$why" ] && pass "deterministic/the monolith trains and saves" || fail "deterministic/the monolith trains and saves" "$why"
same "grad-accum 2" 1 --steps 3 --batch 32 --grad-accum 2
same "manual 2 parts" 1 --steps 3 --mode manual --parts 2
same "pp naive 2" 2 --steps 3 --pp 2 --schedule naive
same "pp gpipe 2 M=4" 2 --steps 3 --pp 2 --schedule gpipe --micro-batches 4
same "pp 1f1b 4 M=8" 4 --steps 3 --pp 4 --micro-batches 8
same "pp 1f1b 2 uneven 4,2" 2 --steps 3 --pp 2 --micro-batches 4 --partition 4,2
same "pp 1f1b 2 checkpointing" 2 --steps 3 --pp 2 --micro-batches 4 --checkpoint-activations
same "pp interleaved 2 V=3 M=4" 2 --steps 3 --pp 2 --schedule interleaved --virtual-stages 3 --micro-batches 4
same "pp looped-bfs 2 V=2 M=4" 2 --steps 3 --pp 2 --schedule looped-bfs --virtual-stages 2 --micro-batches 4
same "pp zb-h1 4 M=8" 4 --steps 3 --pp 4 --schedule zb-h1 --micro-batches 8
same "pp zb-h2 2 M=8 checkpointing" 2 --steps 3 --pp 2 --schedule zb-h2 --micro-batches 8 --checkpoint-activations
same "pp zb-v 2 M=4" 2 --steps 3 --pp 2 --schedule zb-v --micro-batches 4
same "pp dualpipev 2 M=8" 2 --steps 3 --pp 2 --schedule dualpipev --micro-batches 8
same "pp zb-auto 2 M=4" 2 --steps 3 --pp 2 --schedule zb-auto --micro-batches 4
same "pp schedule file 2 M=4" 2 --steps 3 --pp 2 --schedule-file "$TMP/s.csv" --micro-batches 4
same "ddp 2 buckets ring" 2 --steps 3 --dp 2 --allreduce ring --bucket-mb 0.01
same "ddp 4 mpi" 4 --steps 3 --dp 4 --allreduce mpi
same "ddp 2 shm" 2 --steps 3 --dp 2 --allreduce shm
same "ddp 2 naive sync" 2 --steps 3 --dp 2 --ddp-sync naive
same "ddp 2 grad-accum 2" 2 --steps 3 --dp 2 --batch 32 --grad-accum 2
same "zero 1, 2 replicas" 2 --steps 3 --dp 2 --zero 1
same "zero 2, 2 replicas" 2 --steps 3 --dp 2 --zero 2
same "zero 3, 2 replicas shm" 2 --steps 3 --dp 2 --zero 3 --allreduce shm
same "zero 2, 4 replicas mpi" 4 --steps 3 --dp 4 --zero 2 --allreduce mpi
same "zero 3, 4 replicas ring" 4 --steps 3 --dp 4 --zero 3 --allreduce ring
same "tp 2" 2 --steps 3 --tp 2
same "tp 4" 4 --steps 3 --tp 4
same "tp 4 ring" 4 --steps 3 --tp 4 --allreduce ring
same "tp 2 x pp 2 1f1b" 4 --steps 3 --tp 2 --pp 2 --micro-batches 4
same "tp 2 x dp 2 zero 2" 4 --steps 3 --tp 2 --dp 2 --zero 2
same "pp 2 x dp 2 x tp 2 (3D)" 8 --steps 3 --pp 2 --dp 2 --tp 2 --micro-batches 2
same "pp 2 x dp 2 1f1b" 4 --steps 3 --pp 2 --dp 2 --micro-batches 2
same "pp 2 x dp 2 zb-v zero 1" 4 --steps 3 --pp 2 --dp 2 --zero 1 --schedule zb-v --micro-batches 4
same "pp 2 x dp 2 1f1b zero 3" 4 --steps 3 --pp 2 --dp 2 --zero 3 --micro-batches 2
same "pp 2 x dp 2 placement replicas, checkpointing" 4 --steps 3 --pp 2 --dp 2 --placement replicas --checkpoint-activations
# a resume that re-partitions: 2 steps on a pipeline, the third on 2 replicas
why=$(trained "resume part 1" 2 --steps 2 --pp 2 --micro-batches 4)
[ -z "$why" ] && same "resume pp 2 -> ddp 2" 2 --steps 3 --dp 2 --resume "$TMP/resume part 1" \
    || fail "deterministic/resume pp 2 -> ddp 2" "$why"
same "resume pp 2 -> monolith" 1 --steps 3 --resume "$TMP/resume part 1"
# and from ZeRO-3's shards (2 steps on 2 replicas) onto a pipeline
why=$(trained "resume part zero" 2 --steps 2 --dp 2 --zero 3)
[ -z "$why" ] && same "resume zero 3 dp 2 -> pp 2" 2 --steps 3 --pp 2 --micro-batches 4 --resume "$TMP/resume part zero" \
    || fail "deterministic/resume zero 3 dp 2 -> pp 2" "$why"
# bf16: against its own bf16 monolith
REF="monolith bf16"
why=$(trained "monolith bf16" 1 --steps 3 --precision bf16)
[ -z "$why" ] && pass "deterministic/the bf16 monolith trains and saves" || fail "deterministic/the bf16 monolith" "$why"
same "pp 1f1b 2 bf16" 2 --steps 3 --pp 2 --micro-batches 4 --precision bf16
same "pp zb-v 2 bf16 checkpointing" 2 --steps 3 --pp 2 --schedule zb-v --micro-batches 4 --precision bf16 --checkpoint-activations
same "ddp 2 bf16" 2 --steps 3 --dp 2 --precision bf16
same "tp 2 bf16" 2 --steps 3 --tp 2 --precision bf16
same "tp 4 bf16" 4 --steps 3 --tp 4 --precision bf16
same "zero 2, 4 replicas bf16" 4 --steps 3 --dp 4 --zero 2 --precision bf16
# one reduction in another order is caught: MICROPP_DET_REORDER=1 (base/det.c) sums each tree's subtrees
# left to right instead of pairwise; ddp 2's weights then differ from the (pairwise) monolith's
why=$(MICROPP_DET_REORDER=1 trained "reordered ddp 2" 2 --steps 3 --dp 2)
[ -z "$why" ] && why=$(differs monolith "reordered ddp 2")
[ -n "$why" ] && [[ "$why" != exit* ]] && pass "deterministic/one reduction reordered: ddp 2 differs from the monolith ($why)" \
    || fail "deterministic/one reduction reordered is caught" "${why:-identical: the comparison cannot fail}"
# --verify is exact under --deterministic, and says so
run 120 mpiexec -n 2 "$MICROPP" train "${M[@]}" --batch 64 --steps 1 --pp 2 --micro-batches 4 --verify
[ "$RC" -eq 0 ] && grep -q "deterministic: exact, every gradient the reference's bit for bit (0 ulp)" <<<"$OUT" \
    && grep -q "worst relative error per stage: 0.00e+00 0.00e+00 -> ok" <<<"$OUT" \
    && pass "deterministic/--verify: 0 ulp from the monolith reference, and says so" \
    || fail "deterministic/--verify exact" "rc $RC: $(grep -A4 '^verify' <<<"$OUT$ERR" | tr '\n' ' ')"
run 120 env MICROPP_DET_REORDER=1 mpiexec -n 2 "$MICROPP" train "${M[@]}" --batch 64 --steps 1 --dp 2 --verify
[ "$RC" -ne 0 ] && grep -q "deterministic: a gradient lies [0-9]* ulp from the reference's" <<<"$OUT" \
    && pass "deterministic/--verify: a reordered sum fails it, naming the ulps" \
    || fail "deterministic/--verify catches a reordered sum" "rc $RC: $(grep -A4 '^verify' <<<"$OUT$ERR" | tr '\n' ' ')"
# the claim is the option's: without it the same layouts differ from the monolith
M=(--layers 6 --hidden 32 --seed 7 --log-every 0)
REF="plain monolith"
trained "plain monolith" 1 --steps 3 >/dev/null
why=$(trained "plain interleaved" 2 --steps 3 --pp 2 --schedule interleaved --virtual-stages 3 --micro-batches 4)
[ -z "$why" ] && why=$(differs "plain monolith" "plain interleaved")
[ -n "$why" ] && pass "deterministic/without it, interleaved's weights differ from the monolith's ($why)" \
    || fail "deterministic/without it, interleaved differs" "identical: the comparison cannot fail"
why=$(trained "plain ddp" 4 --steps 3 --dp 4 --allreduce ring)
[ -z "$why" ] && why=$(differs "plain monolith" "plain ddp")
[ -n "$why" ] && pass "deterministic/without it, ddp 4's weights differ from the monolith's" \
    || fail "deterministic/without it, ddp 4 differs" "identical: the comparison cannot fail"
# refused, one line, exit 2
refused() {  # refused NAME NRANKS EXPECT ARGS...
    local name=$1 n=$2 expect=$3; shift 3
    if [ "$n" -gt 1 ]; then run 60 mpiexec -n "$n" "$MICROPP" train --deterministic --steps 1 "$@"
    else run 60 "$MICROPP" train --deterministic --steps 1 "$@"; fi
    [ "$RC" -eq 2 ] && grep -q -- "$expect" <<<"$ERR" \
        && [ "$(grep -c . <<<"$ERR")" -eq 1 ] && pass "deterministic/$name: refused in one line, exit 2" \
        || fail "deterministic/$name" "rc $RC: $ERR"
}
refused "--tp 8" 8 "inner dimension in 4 slices, which --tp 8 cannot hold whole" --tp 8 --hidden 32 --layers 4
refused "a micro-batch finer than the chunk" 2 "a micro-batch of 8 rows is finer than the canonical chunk of 32 rows" \
    --pp 2 --micro-batches 8 --batch 64 --layers 4 --hidden 32
refused "--det-rows 12" 1 "the canonical chunk is a power of two" --det-rows 12
