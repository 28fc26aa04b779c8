#!/usr/bin/env bash
# bench/gpu.sh: everything a session with a GPU machine runs, in ONE device call, ending in one table:
#   here:    bash bench/gpu_prepare.sh          # once: Debian's MPICH/OpenBLAS/cJSON/zlib .debs -> .debs/
#   device:  run(command="bash bench/gpu.sh", carry=[".debs"], timeout_s=600)
# Steps: machine facts; MPICH, OpenBLAS, cJSON and zlib from .debs/ unpacked into /tmp/sysroot when
# mpicc is missing; cuBLAS/NCCL from the toolkit or else the nvidia-* Python wheels; the build of
# everything (micropp, micropp-cpu, every test program, gpu_sgemm; WERROR= so an unmet compiler's new
# warning does not stop it), which must say "GPU support: on"; selftest in fp32 (with its bf16 rows)
# and TF32; a one-rank NCCL smoke test (selftest --nccl: init, the four splits, a grouped send and
# receive to itself, the tensor-parallel group's all-reduce on a group of one, teardown); the GPU tests; the cuBLAS ceiling; configs/medium.json in fp32, TF32
# and bf16 and configs/pipeline.json (2 ranks sharing the GPU over MPI), each against the same model
# in PyTorch (bench/torch_mlp.py, same precision, same machine); pingpong; the whole suite (FULL=0
# skips it). Then one table: every step's verdict and every measurement beside PyTorch's.
#   --dry-run: the same script on a machine without a GPU (DEVICE=cpu, 2 steps a run, layers of 256, no suite):
#   builds and checks every step it can, and says which it skipped; tests/t_bench_gpu.sh runs it.
# Output in $OUT (the device tool's folder) or bench/results: gpu.log (everything), gpu.jsonl (one
# JSON line per measurement), table.md, tests_gpu.log, tests_full.log. Exit 1 when a step failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DRY=0
for arg in "$@"; do
    case $arg in
    --dry-run) DRY=1 ;;
    *) echo "gpu.sh: unknown argument '$arg': the only one is --dry-run"; exit 2 ;;
    esac
done
OUT=${OUT:-$ROOT/bench/results}
mkdir -p "$OUT"
RESULTS=$OUT/gpu.jsonl
VERDICTS=$OUT/steps.tsv
: > "$RESULTS"
: > "$VERDICTS"
exec > >(tee "$OUT/gpu.log") 2>&1
if [ "$DRY" = 1 ]; then DEVICE=cpu STEPS=${STEPS:-2} FULL=0; fi
STEPS=${STEPS:-30}
FULL=${FULL:-1}
DEVICE=${DEVICE:-cuda}
TOL_SCALE=${TOL_SCALE:-1}  # selftest's --tol-scale (tests/t_bench_gpu.sh sets 0 to see a failed step reported)
BUDGET=${BUDGET:-560}  # seconds; the device tool stops a call at 600
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
section() { printf '\n## %s (t=%ss)\n' "$*" "$(elapsed)"; }
# verdict STEP ok|FAIL|skipped [WHY]: a row of the final table.
verdict() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$VERDICTS"; }
# check STEP CMD...: runs CMD (its output shown), a verdict from its exit status.
check() {
    local step=$1; shift
    "$@"; local rc=$?
    if [ "$rc" -eq 0 ]; then verdict "$step" ok; else verdict "$step" FAIL "exit $rc"; fi
    return $rc
}
dry_skip() { verdict "$1" skipped "dry run: ${2:-needs a GPU}"; echo "$1: skipped (dry run: ${2:-needs a GPU})"; }

section machine
if [ "$DRY" = 1 ]; then echo "dry run: no GPU looked for (DEVICE=cpu, STEPS=$STEPS)"
else
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
    nvidia-smi -L 2>&1
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" --version 2>&1 | tail -n 2
( . /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" ); uname -m; echo "cpus: $(nproc)"
command -v gcc make python3 mpicc dpkg-deb 2>&1
gcc --version 2>&1 | head -n 1

section toolchain
. bench/gpu_env.sh
gpu_env || exit 1

section build
# Everything the steps below run, by make's own verdict (a stale ./micropp from an earlier call must
# not pass for this one's), and a GPU build: a silent CUDA=0 (no libnccl.so, say) would waste the call.
make "${MAKEARGS[@]}" micropp micropp-cpu test-bins bench/gpu_sgemm 2>&1 | grep -vE '^(mpicc|/.*nvcc) '
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then verdict build FAIL "make exit $rc"; echo "gpu.sh: the build failed (make exit $rc)"; BUILD_OK=0
else verdict build ok; BUILD_OK=1; fi
features=$(make "${MAKEARGS[@]}" -s features 2>&1)
echo "$features"
if grep -q "GPU support: on" <<<"$features"; then verdict "GPU support: on" ok
elif [ "$DRY" = 1 ]; then verdict "GPU support: on" skipped "dry run: $(grep 'GPU support' <<<"$features" | sed 's/.*GPU support: //')"
else verdict "GPU support: on" FAIL "$(grep 'GPU support' <<<"$features")"; BUILD_OK=0; fi
if [ "$BUILD_OK" = 0 ]; then
    echo "gpu.sh: stopping: nothing below would prove anything"
else
ldd micropp | grep -E 'cublas|nccl|cudart|mpich|openblas|cjson|libz'

section "selftest: fp32 (with its bf16 rows), TF32, and NCCL on one rank"
check "selftest fp32 + bf16 rows" ./micropp selftest --device "$DEVICE" --tol-scale "$TOL_SCALE"
if [ "$DRY" = 1 ]; then check "selftest tf32 (emulated on the CPU)" ./micropp selftest --device cpu --emulate-tf32 --tol-scale "$TOL_SCALE"
else check "selftest tf32" ./micropp selftest --device "$DEVICE" --tf32 --tol-scale "$TOL_SCALE"; fi
if [ "$DRY" = 1 ]; then dry_skip "nccl smoke (1 rank: init, 4 splits, self send, group all-reduce, teardown)"
else check "nccl smoke (1 rank: init, 4 splits, self send, group all-reduce, teardown)" ./micropp selftest --device cuda --nccl | tail -n 6; fi

section "GPU tests"
if [ "$DRY" = 1 ]; then dry_skip "tests/t_gpu.sh" "its GPU rows skip without one; make test runs it"
else
    bash tests/run.sh t_gpu 2>&1 | tee "$OUT/tests_gpu.log" | grep -vE '^PASS'
    if grep -q '^FAIL' "$OUT/tests_gpu.log"; then verdict "tests/t_gpu.sh" FAIL "$(grep -c '^FAIL' "$OUT/tests_gpu.log") FAIL lines"
    else verdict "tests/t_gpu.sh" ok "$(tail -n 1 "$OUT/tests_gpu.log")"; fi
fi

section "cuBLAS ceiling for the medium model's shapes"
if [ "$DRY" = 1 ]; then dry_skip "gpu_sgemm"; else check gpu_sgemm ./bench/gpu_sgemm 1024 256 | tee -a "$OUT/gpu_sgemm.jsonl"; fi

# measure LABEL NRANKS TORCH-ARGS -- MICROPP-ARGS...: one training run, its JSON kept in gpu.jsonl, the same
# model's step in PyTorch beside it (TORCH-ARGS: bench/torch_mlp.py's; "" for none).
HAVE_TORCH=0
python3 -c "import torch" 2>/dev/null && HAVE_TORCH=1
measure() {
    local label=$1 n=$2 targs=$3; shift 3
    local out torch='{"skipped": "no PyTorch here"}'
    if [ "$n" -gt 1 ]; then out=$(timeout 300 mpiexec -n "$n" ./micropp train "$@" --json --log-every 0)
    else out=$(timeout 300 ./micropp train "$@" --json --log-every 0); fi
    local rc=$?
    if [ "$rc" -ne 0 ] || [ -z "$out" ]; then verdict "$label" FAIL "exit $rc"; echo "$label: exit $rc"; return; fi
    if [ -z "$targs" ]; then torch='{"skipped": "no yardstick for this run"}'
    elif [ "$HAVE_TORCH" = 1 ]; then
        # shellcheck disable=SC2086
        torch=$(timeout 300 python3 bench/torch_mlp.py $targs --steps "$STEPS" --device "$DEVICE" | tail -n 1)
        [ -n "$torch" ] || torch='{"skipped": "bench/torch_mlp.py failed"}'
    fi
    verdict "$label" ok
    printf '{"label": "%s", "ranks": %d, "result": %s, "torch": %s}\n' "$label" "$n" "$out" "$torch" >> "$RESULTS"
    python3 -c '
import json, sys
r = json.loads(sys.argv[2])
share = r.get("gemm_share"); g = r.get("gemm_gflops")
print("%-44s step %8.3f ms | %9.0f samples/s | %8.1f GFLOP/s | %s" % (sys.argv[1], r["step_ms_median"], r["samples_per_s"], r["gflops"],
      "gemm %.1f%% of the step at %.0f GFLOP/s" % (100 * share, g) if share is not None else "no gemm timing"))' "$label" "$out"
}

section "configs/medium.json and configs/pipeline.json against PyTorch ($STEPS steps; median step)"
# a dry run checks the logic, not the speed: smaller batches, and layers of 256 (a sixteenth of the work)
MB=256 MH=1024; [ "$DRY" = 1 ] && MB=64 MH=256
MED="--layers 16 --hidden $MH --classes 2 --batch $MB --lr 0.001"
M=(--config configs/medium.json --hidden "$MH" --steps "$STEPS" --batch "$MB" --device "$DEVICE")
measure "medium fp32" 1 "$MED --precision fp32" "${M[@]}"
measure "medium fp32 --gemm-timing" 1 "" "${M[@]}" --gemm-timing
if [ "$DRY" = 1 ]; then dry_skip "medium tf32"; else measure "medium tf32" 1 "$MED --precision tf32" "${M[@]}" --tf32; fi
measure "medium bf16" 1 "$MED --precision bf16" "${M[@]}" --precision bf16
measure "medium fp32 --verify (vs CPU)" 1 "" --config configs/medium.json --hidden "$MH" --steps 3 --batch "$MB" \
    --device "$DEVICE" --verify
# configs/pipeline.json: 2 ranks share the one GPU over the MPI transport (NCCL needs a GPU per rank);
# the yardstick trains the same model whole
PB=2048; [ "$DRY" = 1 ] && PB=64
measure "pipeline 1f1b M=8, 2 ranks, 1 GPU, mpi" 2 "--layers 16 --hidden $MH --classes 2 --batch $PB --precision fp32" \
    --config configs/pipeline.json --hidden "$MH" --steps "$STEPS" --batch "$PB" --device "$DEVICE" --transport mpi

section "pingpong between GPU buffers (MPI through pinned host memory)"
if [ "$DRY" = 1 ]; then dry_skip "pingpong --device cuda"
else check "pingpong --device cuda" timeout 180 mpiexec -n 2 ./micropp pingpong --sweep --device "$DEVICE" --transport mpi -b 4 -e 16M -f 4 -n 100; fi

if [ "$FULL" = 1 ]; then
    left=$(( BUDGET - $(elapsed) ))
    section "the whole suite on the GPU-enabled binary (${left}s left)"
    if [ "$left" -gt 60 ]; then
        timeout "$left" bash tests/run.sh > "$OUT/tests_full.log" 2>&1
        rc=$?
        grep -E '^(FAIL|SKIP)' "$OUT/tests_full.log"; tail -n 1 "$OUT/tests_full.log"
        if [ "$rc" -eq 0 ]; then verdict "the whole suite" ok "$(tail -n 1 "$OUT/tests_full.log")"
        else verdict "the whole suite" FAIL "exit $rc: $(tail -n 1 "$OUT/tests_full.log")"; fi
    else verdict "the whole suite" skipped "too little time left: run FULL=1 in a call of its own"; fi
else verdict "the whole suite" skipped "FULL=0"; fi
fi  # BUILD_OK

section table
python3 bench/gpu_table.py "$VERDICTS" "$RESULTS" | tee "$OUT/table.md"
section done
! grep -qP '\tFAIL\t' "$VERDICTS"
