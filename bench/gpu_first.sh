#!/usr/bin/env bash
# bench/gpu_first.sh: the FIRST call on a GPU machine lent for minutes: the most telling steps first,
# each under its own timeout and none past BUDGET, the log and the verdicts written after every step
# (a call cut short still says how far it got), one table at the end. About 6 minutes of script.
#   here:    bash bench/gpu_prepare.sh          # once: Debian's MPICH/OpenBLAS/cJSON/zlib .debs -> .debs/
#   device:  run(command="bash bench/gpu_first.sh", carry=[".debs"], timeout_s=480)
# Steps: machine facts; toolchain (bench/gpu_env.sh); build micropp + micropp-cpu ("GPU support: on"
# or stop); selftest fp32 (with its bf16 rows), TF32, the one-rank NCCL smoke test, each under its
# own watchdog (--timeout); a training run under compute-sanitizer's leak check (nothing left at exit)
# and CUDA_DEVICE_MAX_CONNECTIONS's line; medium --verify against the CPU; medium fp32/TF32/bf16 each
# beside PyTorch (bench/torch_mlp.py; TORCH=0 skips the yardstick); a 2-rank 1F1B pipeline sharing the
# GPU over MPI, --verify; --tp 2 and ddp on 2 ranks sharing the GPU, with their communication times
# (the all-reduce's, the exposed); the 2-rank pipeline and selftest --nccl under the leak check;
# tests/t_gpu.sh with what is left. bench/gpu.sh is the longer run (gpu_sgemm, pingpong, the whole
# suite) for a second call.
#   --dry-run: the same logic on a machine without a GPU (DEVICE=cpu; GPU-only steps skipped, named);
#   tests/t_bench_gpu.sh runs it, with BUDGET small, to see the cut-off.
# Files in $OUT (the device tool's folder) or bench/results/first: first.log, steps.tsv, gpu.jsonl,
# table.md, t_gpu.log. Exit 1 when a step failed or timed out.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DRY=0
for arg in "$@"; do
    case $arg in
    --dry-run) DRY=1 ;;
    *) echo "gpu_first.sh: unknown argument '$arg': the only one is --dry-run"; exit 2 ;;
    esac
done
OUT=${OUT:-$ROOT/bench/results/first}
mkdir -p "$OUT"
V=$OUT/steps.tsv
RESULTS=$OUT/gpu.jsonl
: > "$V"; : > "$RESULTS"
exec > >(tee "$OUT/first.log") 2>&1
T0=$(date +%s)
BUDGET=${BUDGET:-300}  # seconds of script; the call's timeout_s should be ~60 s above it
STEPS=${STEPS:-20}
DEVICE=${DEVICE:-cuda}
TOL_SCALE=${TOL_SCALE:-1}  # selftest's --tol-scale (tests/t_bench_gpu.sh sets 0 to see a failed step reported)
TORCH=${TORCH:-1}          # 0: no PyTorch yardstick beside the training runs (saves about a minute)
[ "$DRY" = 1 ] && DEVICE=cpu STEPS=2
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
now() { echo $(( $(date +%s) - T0 )); }
verdict() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$V"; }
table() { python3 bench/gpu_table.py "$V" "$RESULTS" | tee "$OUT/table.md"; }
# step NAME LIMIT CMD...: CMD under timeout (cut to what is left of BUDGET), its output shown; one
# verdict line: ok, FAIL (exit N), TIMEOUT, or skipped when under 15 s are left.
step() {
    local name=$1 lim=$2; shift 2
    local left=$(( BUDGET - $(now) ))
    if [ "$left" -lt 15 ]; then verdict "$name" skipped "no time left (BUDGET=${BUDGET}s)"; echo "$name: skipped, no time left"; return 3; fi
    [ "$lim" -gt "$left" ] && lim=$left
    printf '\n== [t=%ss] %s (limit %ss)\n' "$(now)" "$name" "$lim"
    local t=$(date +%s)
    timeout -k 5 "$lim" "$@"
    local rc=$? took=$(( $(date +%s) - t ))
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict "$name" FAIL "TIMEOUT after ${lim}s"
    elif [ "$rc" -ne 0 ]; then verdict "$name" FAIL "exit $rc (${took}s)"
    else verdict "$name" ok "${took}s"; fi
    return "$rc"
}
dry_skip() { verdict "$1" skipped "dry run: ${2:-needs a GPU}"; echo "$1: skipped (dry run: ${2:-needs a GPU})"; }
# train_run LABEL NRANKS TORCH-ARGS -- MICROPP-ARGS: one training run (--json), its line and the
# same model's line from bench/torch_mlp.py (TORCH-ARGS; "" for none) kept in gpu.jsonl.
train_run() {
    local label=$1 n=$2 targs=$3; shift 4
    local out torch='{"skipped": "no yardstick for this run"}' launch=()
    [ "$n" -gt 1 ] && launch=(mpiexec -n "$n")
    out=$("${launch[@]}" ./micropp train "$@" --json --log-every 0) || return $?
    out=$(tail -n 1 <<<"$out")
    echo "$out" | head -c 600; echo
    if [ -n "$targs" ] && [ "$TORCH" = 1 ]; then
        # shellcheck disable=SC2086
        torch=$(env -u LD_LIBRARY_PATH python3 bench/torch_mlp.py $targs --steps "$STEPS" --device "$DEVICE" | tail -n 1)
        [ -n "$torch" ] || torch='{"skipped": "bench/torch_mlp.py failed"}'
        echo "torch: $torch" | head -c 400; echo
    fi
    printf '{"label": "%s", "ranks": %d, "result": %s, "torch": %s}\n' "$label" "$n" "$out" "$torch" >> "$RESULTS"
}
# figures LABEL NRANKS COND -- MICROPP-ARGS: one training run (--json) kept in gpu.jsonl as train_run's,
# its communication figures shown; ok when COND (Python over the JSON object o) holds.
figures() {
    local label=$1 n=$2 cond=$3; shift 4
    local out launch=()
    [ "$n" -gt 1 ] && launch=(mpiexec -n "$n")
    out=$("${launch[@]}" ./micropp train "$@" --json --log-every 0) || return $?
    out=$(tail -n 1 <<<"$out")
    printf '{"label": "%s", "ranks": %d, "result": %s, "torch": {"skipped": "a figures run"}}\n' "$label" "$n" "$out" >> "$RESULTS"
    python3 -c 'import json, sys
o = json.loads(sys.argv[1])
print({k: o[k] for k in o if k.startswith(("step_ms", "tp_allreduce", "comm_", "verify_ok", "verify_max"))})
sys.exit(0 if eval(sys.argv[2]) else 1)' "$out" "$cond"
}
# leaks NRANKS CMD...: CMD (under mpiexec when NRANKS > 1) under compute-sanitizer's memcheck with the
# full leak check: every rank's summary says 0 errors and nothing is listed as leaked.
leaks() {
    local n=$1 out rc launch=(); shift
    [ "$n" -gt 1 ] && launch=(mpiexec -n "$n")
    # SAN_EXTRA: e.g. --report-api-errors no where a library probes on purpose (NCCL asks for the
    # attributes of kernels not built for this GPU and expects the error: not ours, not a leak)
    out=$("${launch[@]}" "$SANITIZER" --tool memcheck --leak-check full --error-exitcode 3 ${SAN_EXTRA:-} "$@" 2>&1); rc=$?
    grep -E "Leaked|LEAK SUMMARY|ERROR SUMMARY|Invalid|Program hit" <<<"$out" | head -n 30
    [ "$rc" -eq 0 ] && [ "$(grep -c 'ERROR SUMMARY: 0 errors' <<<"$out")" -eq "$n" ] && ! grep -q 'Leaked ' <<<"$out"
}
export -f train_run figures leaks
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export STEPS DEVICE RESULTS TORCH SANITIZER

step "machine facts" 30 bash -c '
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
    ( . /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" ); uname -r; echo "cpus: $(nproc)"
    command -v gcc make python3 mpicc nvcc dpkg-deb; nvcc --version 2>&1 | tail -n 1
    ls -l /usr/local/cuda/lib64/libcublas.so /usr/local/cuda/lib64/libnccl.so* /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>&1
    python3 -c "import torch; print(\"torch\", torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0))" 2>&1
    df -h /dev/shm | tail -n 1'

printf '\n== [t=%ss] toolchain\n' "$(now)"
. bench/gpu_env.sh
if gpu_env; then verdict toolchain ok; else verdict toolchain FAIL "see first.log"; table; exit 1; fi

# A warm machine keeps ignored build outputs between calls: objects an earlier call compiled with
# another toolchain (the image's Open MPI) would link here, so a change of toolchain starts afresh.
stamp="${MAKEARGS[*]} $(command -v mpicc)"
if [ "$DRY" = 0 ] && [ "$(cat build/.toolchain 2>/dev/null)" != "$stamp" ]; then  # (a dry run: this machine's build, shared)
    rm -rf build build-cpu micropp micropp-cpu
    mkdir -p build && printf '%s' "$stamp" > build/.toolchain
fi
MPI_TESTS=(tests/bin/mpi_devwait tests/bin/mpi_teardown)  # (tests/t_gpu.sh runs them)
step "build micropp + micropp-cpu" 240 bash -c 'make "$@" micropp micropp-cpu '"${MPI_TESTS[*]}"' 2>&1 | grep -vE "^(mpicc|/.*nvcc) "; exit ${PIPESTATUS[0]}' _ "${MAKEARGS[@]}"
if [ ! -x micropp ]; then verdict "GPU support: on" FAIL "stop: the build made no ./micropp"; table; exit 1; fi
features=$(make "${MAKEARGS[@]}" -s features 2>&1); echo "$features"
if grep -q "GPU support: on" <<<"$features"; then verdict "GPU support: on" ok
elif [ "$DRY" = 1 ]; then verdict "GPU support: on" skipped "dry run: $(grep 'GPU support' <<<"$features" | sed 's/.*GPU support: //')"
else verdict "GPU support: on" FAIL "stop: nothing below would prove anything"; table; exit 1; fi
ldd micropp | grep -E 'cublas|nccl|cudart|mpich|openblas|cjson|libz'

# ---- 1. every backend operation against the CPU, one rank ----
step "selftest fp32 + bf16 rows" 90 ./micropp selftest --device "$DEVICE" --tol-scale "$TOL_SCALE" --timeout 60
if [ "$DRY" = 1 ]; then step "selftest tf32 (emulated on the CPU)" 90 ./micropp selftest --device cpu --emulate-tf32
else step "selftest tf32" 90 ./micropp selftest --device "$DEVICE" --tf32 --timeout 60; fi
if [ "$DRY" = 1 ]; then dry_skip "selftest --nccl (1 rank)"
else step "selftest --nccl (1 rank)" 90 ./micropp selftest --device "$DEVICE" --nccl --timeout 60; fi

# ---- 1b. the end of a run frees everything (compute-sanitizer's leak check); the queues' setting ----
SMALL=(--layers 4 --hidden 256 --batch 64 --steps 2 --device "$DEVICE" --log-every 0)
if [ "$DRY" = 1 ]; then dry_skip "leak check: train bf16 + gemm timing, 1 rank"
else step "leak check: train bf16 + gemm timing, 1 rank" 120 bash -c 'leaks 1 "$@"' _ ./micropp train "${SMALL[@]}" \
    --precision bf16 --gemm-timing --json; fi
if [ "$DRY" = 1 ]; then dry_skip "CUDA_DEVICE_MAX_CONNECTIONS=1 -> 32, one line"
else step "CUDA_DEVICE_MAX_CONNECTIONS=1 -> 32, one line" 60 bash -c 'CUDA_DEVICE_MAX_CONNECTIONS=1 ./micropp train "$@" 2>&1 |
    tee /dev/stderr | grep -qx "micropp: CUDA_DEVICE_MAX_CONNECTIONS was .1., now 32: .*"' _ "${SMALL[@]}"; fi

# ---- 2. real training: gradients against the CPU, then step times beside PyTorch's ----
MB=256 MH=1024; [ "$DRY" = 1 ] && MB=32 MH=256  # (a dry run checks the logic: layers of 256, a sixteenth of the work)
MED="--layers 16 --hidden $MH --classes 2 --batch $MB --lr 0.001"
M=(--config configs/medium.json --hidden "$MH" --batch "$MB" --device "$DEVICE")
step "medium --verify against the CPU (3 steps)" 120 ./micropp train "${M[@]}" --steps 3 --verify --log-every 0
step "medium fp32" 90 bash -c 'train_run "$@"' _ "medium fp32" 1 "$MED --precision fp32" -- "${M[@]}" --steps "$STEPS"
if [ "$DRY" = 1 ]; then dry_skip "medium tf32"
else step "medium tf32" 90 bash -c 'train_run "$@"' _ "medium tf32" 1 "$MED --precision tf32" -- "${M[@]}" --steps "$STEPS" --tf32; fi
step "medium bf16" 90 bash -c 'train_run "$@"' _ "medium bf16" 1 "$MED --precision bf16" -- "${M[@]}" --steps "$STEPS" --precision bf16

# ---- 3. two ranks sharing the GPU over MPI: the pipeline's staging path, verified ----
step "pp 1f1b, 2 ranks on 1 GPU over mpi, --verify" 120 mpiexec -n 2 ./micropp train --layers 4 --hidden 64 --batch 32 \
    --steps 3 --mode pp --schedule 1f1b --micro-batches 4 --device "$DEVICE" --transport mpi --verify --log-every 0
# ---- 3b. tensor and data parallelism on 2 ranks sharing the GPU (over MPI): their communication
# times on the device's timeline (the compute queued before a collective is not counted as it) ----
TB=256 TH=512; [ "$DRY" = 1 ] && TB=32 TH=128
step "tp 2, 2 ranks on 1 GPU, --verify: the all-reduce's time" 120 bash -c 'figures "$@"' _ "tp 2, 2 ranks, 1 GPU" 2 \
    'o["verify_ok"] and o["tp_allreduce_ms_per_step"] > 0' -- --layers 4 --hidden "$TH" --classes 2 --batch "$TB" \
    --steps "$STEPS" --tp 2 --device "$DEVICE" --verify
step "ddp, 2 ranks on 1 GPU: comm and exposed times" 120 bash -c 'figures "$@"' _ "ddp, 2 ranks, 1 GPU" 2 \
    '0 < o["comm_ms"] and 0 <= o["comm_hidden_fraction"] <= 1' -- --layers 4 --hidden "$TH" --classes 2 --batch "$TB" \
    --steps "$STEPS" --mode ddp --device "$DEVICE"
if [ "$DRY" = 1 ]; then dry_skip "leak check: pp 1f1b, 2 ranks on 1 GPU over mpi"; dry_skip "leak check: selftest --nccl"
else
    step "leak check: pp 1f1b, 2 ranks on 1 GPU over mpi" 150 bash -c 'leaks 2 "$@"' _ ./micropp train "${SMALL[@]}" \
        --mode pp --schedule 1f1b --micro-batches 4 --transport mpi --json
    SAN_EXTRA="--report-api-errors no" step "leak check: selftest --nccl" 150 bash -c 'leaks 1 "$@"' _ ./micropp selftest --device "$DEVICE" --nccl --timeout 120
fi

PB=2048; [ "$DRY" = 1 ] && PB=32
step "pipeline.json 1f1b M=8, 2 ranks on 1 GPU over mpi" 120 bash -c 'train_run "$@"' _ "pipeline 1f1b M=8, 2 ranks, 1 GPU, mpi" 2 \
    "--layers 16 --hidden $MH --classes 2 --batch $PB --precision fp32" -- \
    --config configs/pipeline.json --hidden "$MH" --steps "$STEPS" --batch "$PB" --device "$DEVICE" --transport mpi

# ---- 4. the GPU test file with what is left ----
if [ "$DRY" = 1 ]; then dry_skip "tests/t_gpu.sh" "its GPU rows skip without one; make test runs it"
else
    step "tests/t_gpu.sh" 240 bash -c 'bash tests/run.sh t_gpu > "$1/t_gpu.log" 2>&1; rc=$?
        grep -E "^(FAIL|SKIP)" "$1/t_gpu.log"; tail -n 1 "$1/t_gpu.log"; exit $rc' _ "$OUT"
fi

printf '\n== [t=%ss] table\n' "$(now)"
table
! grep -qP '\tFAIL\t' "$V"
