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

# bench/gpu_first.sh, the first call on a lent GPU: its dry run builds and runs every step it can, in
# one table (the --tp 2 and ddp runs with their communication figures included; the leak checks and
# the queues' line named as needing a GPU); a BUDGET too short for any step skips them, saying so, and still
# ends in the table; a failed
# step is FAIL there and exit 1; the toolchain takes the sysroot where the machine's mpicc is not
# MPICH (the H100 image's Open MPI), and without .debs/ says how to make them.
FIRST=$ROOT/bench/gpu_first.sh
run 600 env OUT="$TMP/first" bash "$FIRST" --dry-run
T=$TMP/first/table.md
if [ "$RC" -eq 0 ] && grep -qF '| selftest fp32 + bf16 rows | ok |' "$T" && grep -qF '| medium --verify against the CPU (3 steps) | ok |' "$T" &&
   grep -qF '| selftest --nccl (1 rank) | skipped | dry run: needs a GPU |' "$T" && grep -qE '^\| medium bf16 \| 1 \| [0-9.]+ \|' "$T" &&
   grep -qF "| tp 2, 2 ranks on 1 GPU, --verify: the all-reduce's time | ok |" "$T" &&
   grep -qF '| ddp, 2 ranks on 1 GPU: comm and exposed times | ok |' "$T" &&
   grep -qF '| leak check: train bf16 + gemm timing, 1 rank | skipped | dry run: needs a GPU |' "$T" &&
   grep -qF '| leak check: pp 1f1b, 2 ranks on 1 GPU over mpi | skipped | dry run: needs a GPU |' "$T" &&
   grep -qE "^\{'step_ms_median': [0-9.]+, .*'tp_allreduce_ms_per_step': [0-9.]+" "$TMP/first/first.log" &&
   grep -q '^0 steps failed$' "$T" && [ -s "$TMP/first/first.log" ]; then
    pass "bench/gpu_first.sh --dry-run: every step it can, one table ($(grep -c '| ok |' "$T") ok)"
else fail "bench/gpu_first.sh --dry-run" "exit $RC: $(tail -n 25 "$T" 2>/dev/null | head -c 800)"; fi
# (BUDGET=14: under the 15 s a step needs from the start, so the cut does not hang on this machine's speed;
# 20 let a dry run of layers of 256, done in 5 s on a quiet machine, end before the cut)
run 600 env OUT="$TMP/first_cut" BUDGET=14 bash "$FIRST" --dry-run
T=$TMP/first_cut/table.md
if grep -qF '| tests/t_gpu.sh | skipped | dry run' "$T" && grep -qE '\| skipped \| no time left \(BUDGET=14s\) \|' "$T"; then
    pass "bench/gpu_first.sh: past BUDGET the steps are skipped and named, and the table still comes"
else fail "bench/gpu_first.sh: past BUDGET the steps are skipped" "exit $RC: $(head -c 800 "$T" 2>/dev/null)"; fi
run 600 env OUT="$TMP/first_bad" TOL_SCALE=0 STEPS=1 bash "$FIRST" --dry-run
if [ "$RC" -eq 1 ] && grep -qF '| selftest fp32 + bf16 rows | FAIL | exit 1' "$TMP/first_bad/table.md"; then
    pass "bench/gpu_first.sh: a failing step is FAIL in the table and the script exits 1"
else fail "bench/gpu_first.sh: a failing step is FAIL and exit 1" "exit $RC"; fi
run 10 bash "$FIRST" --dryrun
if [ "$RC" -eq 2 ] && grep -q "unknown argument '--dryrun'" <<<"$OUT"; then pass "bench/gpu_first.sh: an unknown argument -> exit 2"
else fail "bench/gpu_first.sh: an unknown argument -> exit 2" "exit $RC: $OUT"; fi
mkdir -p "$TMP/fakempi/bin" "$TMP/nodebs"
printf '#!/bin/sh\necho "gcc -I/usr/lib/x86_64-linux-gnu/openmpi/include -lmpi"\n' > "$TMP/fakempi/bin/mpicc"; chmod +x "$TMP/fakempi/bin/mpicc"
run 30 env PATH="$TMP/fakempi/bin:$PATH" bash -c 'cd "$1" && . "$2/bench/gpu_env.sh" && gpu_env' _ "$TMP/nodebs" "$ROOT"
if [ "$RC" -ne 0 ] && grep -q 'mpicc here is not MPICH' <<<"$OUT" && grep -q "run 'bash bench/gpu_prepare.sh'" <<<"$OUT"; then
    pass "bench/gpu_env.sh: an mpicc that is not MPICH takes the sysroot; without .debs/ it says how to make them"
else fail "bench/gpu_env.sh: an mpicc that is not MPICH takes the sysroot" "exit $RC: $OUT"; fi
