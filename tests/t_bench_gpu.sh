#!/usr/bin/env bash
# tests/t_bench_gpu.sh: bench/gpu.sh's logic without a GPU. Its --dry-run builds everything, runs
# every step it can on the CPU (selftest with its bf16 rows, TF32 emulated, medium in fp32 and bf16,
# the pipeline config over 2 ranks), names each step it skips and why, and ends in the one table; a
# failing step (selftest --tol-scale 0) shows as FAIL there and makes the script exit 1.
source "$(dirname "$0")/lib.sh"
GPU_SH=$ROOT/bench/gpu.sh
run 900 env OUT="$TMP/dry" bash "$GPU_SH" --dry-run
T=$TMP/dry/table.md
row() { grep -F "| $1 |" "$T" 2>/dev/null; }
miss=""
for s in "build | ok" "selftest fp32 + bf16 rows | ok" "selftest tf32 (emulated on the CPU) | ok" \
         "nccl smoke (1 rank: init, 4 splits, self send, group all-reduce, teardown) | skipped | dry run: needs a GPU" \
         "medium fp32 | ok" "medium bf16 | ok" "medium tf32 | skipped" "pipeline 1f1b M=8, 2 ranks, 1 GPU, mpi | ok"; do
    grep -qF "| $s" "$T" 2>/dev/null || miss="$miss [$s]"
done
for r in "medium fp32 | 1" "medium bf16 | 1" "pipeline 1f1b M=8, 2 ranks, 1 GPU, mpi | 2"; do
    grep -qE "^\| ${r//|/\\|} \| [0-9.]+ \| [0-9]+ \| " "$T" 2>/dev/null || miss="$miss [run row $r]"
done
if [ "$RC" -eq 0 ] && [ -z "$miss" ] && grep -q '^0 steps failed$' "$T" && grep -q 'GPU support: ' "$TMP/dry/gpu.log"; then
    pass "bench/gpu.sh --dry-run: builds, runs every step it can, one table ($(grep -c '| ok |' "$T") ok, $(grep -c '| skipped |' "$T") skipped)"
else fail "bench/gpu.sh --dry-run" "exit $RC, missing:$miss: $(tail -n 20 "$TMP/dry/gpu.log" 2>/dev/null | head -c 600)"; fi

run 900 env OUT="$TMP/bad" TOL_SCALE=0 STEPS=1 bash "$GPU_SH" --dry-run
if [ "$RC" -eq 1 ] && grep -qF "| selftest fp32 + bf16 rows | FAIL | exit 1 |" "$TMP/bad/table.md" && grep -q '^2 steps failed$' "$TMP/bad/table.md"; then
    pass "bench/gpu.sh: a failing step shows as FAIL in the table and the script exits 1"
else fail "bench/gpu.sh: a failing step shows as FAIL and exits 1" "exit $RC: $(grep -E 'FAIL|failed' "$TMP/bad/table.md" 2>/dev/null | head -c 400)"; fi
run 10 bash "$GPU_SH" --dryrun
if [ "$RC" -eq 2 ] && grep -q "unknown argument '--dryrun'" <<<"$OUT"; then pass "bench/gpu.sh: an unknown argument -> exit 2"
else fail "bench/gpu.sh: an unknown argument -> exit 2" "exit $RC: $OUT"; fi
