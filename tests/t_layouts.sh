#!/usr/bin/env bash
# tests/t_layouts.sh: behaviour kept bit for bit. Every layout below trains the same small model for
# 4 steps, and its per-step losses (printed with 17 digits: a double's every bit) must equal the ones
# recorded in tests/expected/layouts.txt, line for line. A change that is meant to move no number
# (a refactor) keeps this file; one that is meant to move some says so and re-records with
#   bash tests/t_layouts.sh --update
# Each layout differs from the monolith in the last bits (its own order of sums); that is recorded too.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
EXPECTED=$ROOT/tests/expected/layouts.txt
UPDATE=0
[ "${1:-}" = --update ] && UPDATE=1
M=(--layers 8 --hidden 32 --batch 32 --log-every 0 --json)
"$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4 --dump-csv "$TMP/s.csv" >/dev/null 2>&1
# layout NAME NRANKS ARGS...: one run; prints "NAME<TAB>losses" (or "NAME<TAB>exit N: why").
layout() {
    local name=$1 n=$2; shift 2
    if [ "$n" -gt 1 ]; then run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" --steps 4 "$@"
    else run 240 "$MICROPP" train "${M[@]}" --steps 4 "$@"; fi
    if [ "$RC" -ne 0 ]; then printf '%s\texit %s: %s\n' "$name" "$RC" "$(head -c 200 <<<"$ERR" | tr '\n' ' ')"; return; fi
    printf '%s\t%s\n' "$name" "$(python3 -c 'import json,sys; print(" ".join(repr(x) for x in json.loads(sys.stdin.read().strip().splitlines()[-1])["losses"]))' <<<"$OUT")"
}
all() {
    layout "monolith" 1
    layout "monolith sgd" 1 --optimizer sgd --lr 0.05
    layout "monolith grad-accum 2" 1 --grad-accum 2
    layout "manual 2 parts" 1 --mode manual --parts 2
    layout "pp naive 2" 2 --mode pp --schedule naive
    layout "pp gpipe 2 M=4" 2 --mode pp --schedule gpipe --micro-batches 4
    layout "pp 1f1b 4 M=8" 4 --mode pp --schedule 1f1b --micro-batches 8
    layout "pp 1f1b 2 uneven partition" 2 --mode pp --partition 5,3
    layout "pp 1f1b 2 checkpointing" 2 --mode pp --checkpoint-activations
    layout "pp interleaved 2 V=2 M=4" 2 --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 4
    layout "pp zb-h1 2 M=4" 2 --mode pp --schedule zb-h1 --micro-batches 4
    layout "pp zb-h2 2 M=4" 2 --mode pp --schedule zb-h2 --micro-batches 4
    layout "pp zb-v 2 M=4" 2 --mode pp --schedule zb-v --micro-batches 4
    layout "pp dualpipev 2 M=4" 2 --mode pp --schedule dualpipev --micro-batches 4
    layout "pp zb-auto 2 M=4" 2 --mode pp --schedule zb-auto --micro-batches 4
    layout "pp schedule file 2 M=4" 2 --mode pp --schedule-file "$TMP/s.csv" --micro-batches 4
    layout "pp 1f1b 2 bf16" 2 --mode pp --precision bf16
    layout "monolith bf16" 1 --precision bf16
    layout "ddp 2 bucketed small buckets" 2 --mode ddp --bucket-mb 0.002
    layout "ddp 2 naive" 2 --mode ddp --ddp-sync naive
    layout "ddp 2 ring" 2 --mode ddp --allreduce ring
    layout "ddp 2 mpi" 2 --mode ddp --allreduce mpi
    layout "ddp 2 shm" 2 --mode ddp --allreduce shm
    layout "ddp 2 zero 1" 2 --mode ddp --zero 1
    layout "ddp 2 zero 2" 2 --mode ddp --zero 2
    layout "ddp 2 zero 3" 2 --mode ddp --zero 3
    layout "ddp 2 grad-accum 2" 2 --mode ddp --grad-accum 2
    layout "tp 2" 2 --tp 2
    layout "tp 4" 4 --tp 4
    layout "pp 2 x tp 2" 4 --mode pp --tp 2
    layout "hybrid pp 2 x dp 2" 4 --mode hybrid --pp 2 --dp 2
    layout "hybrid pp 2 x dp 2 zero 1" 4 --mode hybrid --pp 2 --dp 2 --zero 1
    layout "hybrid pp 2 x dp 2 x tp 2" 8 --mode hybrid --pp 2 --dp 2 --tp 2
    layout "ddp 2 x tp 2 zero 3" 4 --mode ddp --tp 2 --zero 3
    # resume across layouts: 2 steps as a 2-stage pipeline, then steps 3-4 as 2 data-parallel replicas
    run 240 mpiexec -n 2 "$MICROPP" train "${M[@]}" --mode pp --steps 2 --save "$TMP/ck"
    layout "resume: pp 2 -> ddp 2" 2 --mode ddp --resume "$TMP/ck"
    layout "pp looped-bfs 2 V=2 M=4" 2 --mode pp --schedule looped-bfs --virtual-stages 2 --micro-batches 4
}
if [ "$UPDATE" = 1 ]; then
    all > "$EXPECTED"
    echo "recorded $(wc -l < "$EXPECTED") layouts in $EXPECTED"; grep -P '\texit ' "$EXPECTED" && exit 1
    exit 0
fi
all > "$TMP/now.txt"
n=$(wc -l < "$EXPECTED")
[ "$n" -ge 20 ] || fail "layouts/the record holds at least 20 layouts" "it holds $n"
while IFS=$'\t' read -r name want; do
    got=$(grep -F -- "$name"$'\t' "$TMP/now.txt" | head -n 1 | cut -f2-)
    if [ "$got" = "$want" ]; then pass "layouts/$name: the same losses, bit for bit"
    else fail "layouts/$name: the same losses, bit for bit" "recorded [$want], now [$got]"; fi
done < "$EXPECTED"
