#!/usr/bin/env bash
# bench/gpu.sh: everything a session with a GPU machine runs, in ONE device call:
#   here:    bash bench/gpu_prepare.sh          # once: Debian's MPICH/OpenBLAS/cJSON .debs -> .debs/
#   device:  run(command="bash bench/gpu.sh", carry=[".debs"], timeout_s=600)
# Steps: machine facts; MPICH, OpenBLAS and cJSON from .debs/ unpacked into /tmp/sysroot when mpicc
# is missing; cuBLAS/NCCL from the toolkit or else the nvidia-* Python wheels; the build; selftest
# (fp32, TF32); the GPU tests; the cuBLAS ceiling for the model's shapes; configs/medium.json on the
# GPU (fp32 with and without gemm timing, TF32, and a 2-rank 1F1B pipeline sharing the GPU over the
# MPI transport): step time, samples/s, the share of the step inside cuBLAS; pingpong between GPU
# buffers; then the whole test suite on the GPU-enabled binary (FULL=0 skips it).
# Output in $OUT (the device tool's folder) or bench/results: gpu.log (everything), gpu.jsonl (one
# JSON line per measurement), tests_gpu.log, tests_full.log.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/bench/results}
mkdir -p "$OUT"
RESULTS=$OUT/gpu.jsonl
: > "$RESULTS"
exec > >(tee "$OUT/gpu.log") 2>&1
STEPS=${STEPS:-30}
FULL=${FULL:-1}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu: a dry run of this script on a machine without a GPU
BUDGET=${BUDGET:-560}  # seconds; the device tool stops a call at 600
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
section() { printf '\n## %s (t=%ss)\n' "$*" "$(elapsed)"; }

section machine
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
nvidia-smi -L 2>&1
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" --version 2>&1 | tail -n 2
( . /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" ); uname -m; echo "cpus: $(nproc)"
command -v gcc make python3 mpicc dpkg-deb 2>&1

section toolchain
MAKEARGS=(-j"$(nproc)")
if ! command -v mpicc >/dev/null 2>&1; then
    if ! ls .debs/*.deb >/dev/null 2>&1; then
        echo "gpu.sh: no mpicc here and no .debs/: run 'bash bench/gpu_prepare.sh' on the development machine and carry .debs"
        exit 1
    fi
    SR=/tmp/sysroot
    rm -rf "$SR" && mkdir -p "$SR/bin"
    for f in .debs/*.deb; do dpkg-deb -x "$f" "$SR" || { echo "gpu.sh: cannot unpack $f"; exit 1; }; done
    L=$SR/usr/lib/x86_64-linux-gnu
    # libudev1 came along in case the image lacks it (hwloc needs it); the system's wins when present.
    ldconfig -p 2>/dev/null | grep -q 'libudev.so.1 ' && rm -f "$L"/libudev.so.1*
    # MPICH's wrappers name their install prefix; point it at the sysroot. mpiexec must be called by
    # its real path: hydra finds hydra_pmi_proxy beside itself.
    sed -e "s|^prefix=.*|prefix=$SR/usr|" -e "s|^exec_prefix=.*|exec_prefix=$SR/usr|" \
        -e "s|^includedir=/usr|includedir=$SR/usr|" -e "s|^libdir=/usr|libdir=$SR/usr|" "$SR/usr/bin/mpicc.mpich" > "$SR/bin/mpicc"
    printf '#!/bin/sh\nexec %s "$@"\n' "$SR/usr/bin/mpiexec.hydra" > "$SR/bin/mpiexec"
    chmod +x "$SR/bin/mpicc" "$SR/bin/mpiexec"
    export PATH="$SR/bin:$PATH"
    export LD_LIBRARY_PATH="$L:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    MAKEARGS+=(DEPS=0 "OPT=-O3 -march=native -fno-math-errno -I$SR/usr/include -I$SR/usr/include/x86_64-linux-gnu/openblas-pthread -L$L -L$L/openblas-pthread")
    echo "MPICH, OpenBLAS, cJSON unpacked into $SR"
fi
# cuBLAS and NCCL: the toolkit's if it has them, else the Python wheels' (PyTorch brings them).
wheel_dir() { python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null; }
# The toolkit folder as the Makefile finds it (an nvcc on PATH may be a wrapper script elsewhere).
CUDA_HOME=/usr/local/cuda
d=$(dirname "$(dirname "$NVCC")"); [ -f "$d/include/cuda_runtime.h" ] && CUDA_HOME=$d
if ! ls "$CUDA_HOME/include/nccl.h" /usr/include/nccl.h >/dev/null 2>&1; then
    d=$(wheel_dir nccl); [ -n "$d" ] && [ -f "$d/include/nccl.h" ] && MAKEARGS+=("NCCL_HOME=$d") && echo "NCCL from the wheel: $d"
fi
if ! ls "$CUDA_HOME/lib64/libcublas.so" >/dev/null 2>&1; then
    d=$(wheel_dir cublas); [ -n "$d" ] && [ -f "$d/include/cublas_v2.h" ] && MAKEARGS+=("CUBLAS_HOME=$d") && echo "cuBLAS from the wheel: $d"
fi
echo "make ${MAKEARGS[*]}"

section build
make "${MAKEARGS[@]}" micropp micropp-cpu tests/bin/unit_core bench/gpu_sgemm 2>&1 | grep -vE '^(mpicc|/.*nvcc) ' || true
[ -x micropp ] || { echo "gpu.sh: the build failed"; exit 1; }
ldd micropp | grep -E 'cublas|nccl|cudart|mpich|openblas|cjson'

section "selftest (fp32, then TF32)"
./micropp selftest --device "$DEVICE"; echo "# selftest fp32 exit $?"
./micropp selftest --device "$DEVICE" --tf32 | tail -n 3; echo "# selftest tf32 exit $?"

section "GPU tests"
bash tests/run.sh t_gpu 2>&1 | tee "$OUT/tests_gpu.log" | grep -vE '^PASS'

section "cuBLAS ceiling for the medium model's shapes"
./bench/gpu_sgemm 1024 256 | tee -a "$OUT/gpu_sgemm.jsonl"

# measure LABEL NRANKS ARGS...: one training run, its JSON kept in gpu.jsonl, the figures printed.
measure() {
    local label=$1 n=$2; shift 2
    local out
    if [ "$n" -gt 1 ]; then out=$(timeout 300 mpiexec -n "$n" ./micropp train "$@" --json --log-every 0)
    else out=$(timeout 300 ./micropp train "$@" --json --log-every 0); fi
    local rc=$?
    [ "$rc" -eq 0 ] && [ -n "$out" ] || { echo "$label: exit $rc"; return; }
    printf '{"label": "%s", "ranks": %d, "result": %s}\n' "$label" "$n" "$out" >> "$RESULTS"
    python3 -c '
import json, sys
r = json.loads(sys.argv[2])
share = r.get("gemm_share"); g = r.get("gemm_gflops")
print("%-44s step %8.3f ms | %9.0f samples/s | %8.1f GFLOP/s | %s" % (sys.argv[1], r["step_ms_median"], r["samples_per_s"], r["gflops"],
      "gemm %.1f%% of the step at %.0f GFLOP/s" % (100 * share, g) if share is not None else "no gemm timing"))' "$label" "$out"
}

section "configs/medium.json on the GPU ($STEPS steps; median step)"
M=(--config configs/medium.json --steps "$STEPS" --device "$DEVICE")
measure "medium fp32" 1 "${M[@]}"
measure "medium fp32 --gemm-timing" 1 "${M[@]}" --gemm-timing
measure "medium tf32 --gemm-timing" 1 "${M[@]}" --tf32 --gemm-timing
measure "medium fp32 --verify (vs CPU)" 1 --config configs/medium.json --steps 3 --device "$DEVICE" --verify
measure "medium pp 1f1b M=8, 2 ranks, 1 GPU, mpi" 2 "${M[@]}" --mode pp --schedule 1f1b --micro-batches 8 --transport mpi --gemm-timing

section "pingpong between GPU buffers (MPI through pinned host memory)"
timeout 180 mpiexec -n 2 ./micropp pingpong --sweep --device "$DEVICE" --transport mpi -b 4 -e 16M -f 4 -n 100

if [ "$FULL" = 1 ]; then
    left=$(( BUDGET - $(elapsed) ))
    section "the whole suite on the GPU-enabled binary (${left}s left)"
    if [ "$left" -gt 60 ]; then
        timeout "$left" bash tests/run.sh > "$OUT/tests_full.log" 2>&1
        echo "# suite exit $?"; grep -E '^(FAIL|SKIP)' "$OUT/tests_full.log"; tail -n 1 "$OUT/tests_full.log"
    else echo "too little time left: run FULL=1 in a call of its own"; fi
fi
section done
