#!/usr/bin/env bash
# tests/t_gpu.sh: the device flags and the GPU path. Everywhere: the one-line error of --device
# cuda without a GPU (GPU-enabled and CPU-only binaries), auto falling back to the CPU, refused
# flag combinations, selftest on the CPU (and that it fails when it should), gemm timing. With a
# GPU: selftest on cuda, and CPU-vs-GPU loss and gradients (--verify computes its reference on the
# CPU) for 1 rank and for 2 ranks on one GPU over the MPI transport, each schedule; NCCL's rules; with 2
# GPUs the NCCL transport, the tensor group's all-reduce and the experts' all-to-all (--ep) over NCCL.
source "$(dirname "$0")/lib.sh"
TINY=(--layers 4 --hidden 32 --batch 16 --steps 3 --log-every 0)
# tiny_but OPTIONS...: TINY without the flags OPTIONS give again (micropp refuses a flag given twice).
tiny_but() { local i; for ((i = 0; i < ${#TINY[@]}; i += 2)); do [[ " $* " == *" ${TINY[i]} "* ]] || printf '%s\n' "${TINY[i]}" "${TINY[i + 1]}"; done; }
CPU_BIN=$ROOT/micropp-cpu
# The toolkit, found as the Makefile should find it: the first of $CUDA_HOME, the folder above the
# nvcc on PATH, /usr/local/cuda with the CUDA runtime, cuBLAS and NCCL headers (NCCL also in /usr).
TOOLKIT=""
for d in ${CUDA_HOME:-} "$(dirname "$(dirname "$(command -v nvcc || echo /nonexistent/bin/nvcc)")")" /usr/local/cuda; do
    if [ -x "$d/bin/nvcc" ] && [ -f "$d/include/cuda_runtime.h" ] && [ -f "$d/include/cublas_v2.h" ] &&
       { [ -f "$d/include/nccl.h" ] || [ -f /usr/include/nccl.h ]; }; then TOOLKIT=$d; break; fi
done

# Probe: does this binary see a GPU? (exit 0: yes; exit 2 "no CUDA device": no)
run 120 "$MICROPP" train $(tiny_but --steps) --steps 1 --device cuda --json
GPU=0
if [ "$RC" -eq 0 ]; then GPU=1
elif [ "$RC" -eq 2 ] && grep -q "no CUDA device" <<<"$ERR"; then GPU=0
else fail "gpu/probe --device cuda" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
NOGPU="no GPU"
gpu_only() { [ "$GPU" = 1 ] || { skip "$1" "$NOGPU"; return 1; }; }
nogpu_only() { [ "$GPU" = 0 ] || { skip "$1" "a GPU is visible"; return 1; }; }

# ---- the build: with nvcc, ./micropp is the GPU-enabled binary and ./micropp-cpu its CPU twin ----
if [ -n "$TOOLKIT" ] && [ "${CUDA:-1}" != 0 ]; then
    if [ "$GPU" = 1 ] || ! grep -q "built without CUDA" <<<"$ERR"; then pass "gpu/build: ./micropp is GPU-enabled (toolkit in $TOOLKIT)"
    else fail "gpu/build: ./micropp is GPU-enabled (toolkit in $TOOLKIT)" "it says: $ERR"; fi
    # An nvcc on PATH that is only a wrapper script (as /usr/local/bin/nvcc is on some machines) must
    # not hide the toolkit: the Makefile looks for the headers, not just the first nvcc.
    wrap=$(mktemp -d); mkdir -p "$wrap/bin"
    printf '#!/bin/sh\nexec %s/bin/nvcc "$@"\n' "$TOOLKIT" >"$wrap/bin/nvcc"; chmod +x "$wrap/bin/nvcc"
    feat=$(env -u CUDA -u CUDA_HOME PATH="$wrap/bin:/usr/bin:/bin" make -s -C "$ROOT" features 2>&1)
    if grep -q "GPU support: on" <<<"$feat" && grep -q "CUDA (nvcc): found at $TOOLKIT" <<<"$feat"; then
        pass "gpu/build: a wrapper nvcc first on PATH still finds the toolkit"
    else fail "gpu/build: a wrapper nvcc first on PATH still finds the toolkit" "$(tr '\n' ' ' <<<"$feat")"; fi
    rm -rf "$wrap"
    if [ -x "$CPU_BIN" ]; then
        expect_user_error "gpu/CPU-only build: --device cuda says built without CUDA" \
            '^micropp: no CUDA device: this micropp was built without CUDA' 60 "$CPU_BIN" train "${TINY[@]}" --device cuda
        run 60 "$CPU_BIN" train "${TINY[@]}" --json
        if [ "$RC" -eq 0 ] && [ "$(json_get '["device"]')" = cpu ]; then pass "gpu/CPU-only build trains on --device auto"
        else fail "gpu/CPU-only build trains on --device auto" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
    else
        fail "gpu/CPU-only build exists" "$CPU_BIN missing: make test builds it when the toolkit is found"
    fi
else
    skip "gpu/build: GPU-enabled binary" "no CUDA toolkit with cuBLAS and NCCL (or CUDA=0)"
fi

# ---- no GPU: one line, exit 2, on every path that asks for one ----
if nogpu_only "gpu/--device cuda without a GPU: one line, exit 2"; then
    expect_user_error "gpu/--device cuda without a GPU: one line, exit 2" '^micropp: no CUDA device: .+' 60 \
        "$MICROPP" train "${TINY[@]}" --device cuda
fi
if nogpu_only "gpu/--device cuda without a GPU, 2 ranks pp: one line, exit 2"; then
    expect_user_error "gpu/--device cuda without a GPU, 2 ranks pp: one line, exit 2" '^micropp: no CUDA device: .+' 60 \
        mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --device cuda
fi
if nogpu_only "gpu/selftest --device cuda without a GPU: one line, exit 2"; then
    expect_user_error "gpu/selftest --device cuda without a GPU: one line, exit 2" '^micropp: no CUDA device: .+' 60 \
        "$MICROPP" selftest --device cuda
fi
if nogpu_only "gpu/--transport nccl without a GPU is refused"; then
    expect_user_error "gpu/--transport nccl without a GPU is refused" 'transport nccl needs a GPU on every rank, but there is no CUDA device' 60 \
        mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --transport nccl
fi
if nogpu_only "gpu/--tp 2 --transport nccl without a GPU is refused"; then
    expect_user_error "gpu/--tp 2 --transport nccl without a GPU is refused" 'transport nccl needs a GPU on every rank, but there is no CUDA device' 60 \
        mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --tp 2 --transport nccl
fi

if nogpu_only "gpu/pingpong --device cuda without a GPU: one line, exit 2"; then
    expect_user_error "gpu/pingpong --device cuda without a GPU: one line, exit 2" '^micropp: no CUDA device: .+' 60 \
        mpiexec -n 2 "$MICROPP" pingpong --sweep --device cuda
fi

# ---- flags that need a GPU, asked of the CPU ----
expect_user_error "gpu/--transport nccl with --device cpu is refused" 'transport nccl.*--device is cpu' 60 \
    mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --device cpu --transport nccl
expect_user_error "gpu/--tf32 with --device cpu is refused" 'tf32.*--device is cpu' 60 \
    "$MICROPP" train "${TINY[@]}" --device cpu --tf32
expect_user_error "gpu/selftest --tf32 on the CPU is refused" 'tf32 applies to cuBLAS' 60 \
    "$MICROPP" selftest --device cpu --tf32
expect_user_error "gpu/--device with an unknown value" "--device = 'tpu' is not one of auto\|cpu\|cuda" 60 \
    "$MICROPP" train --device tpu

# ---- auto picks cuda when a GPU is visible, else the CPU ----
run 120 "$MICROPP" train "${TINY[@]}" --json
want=$([ "$GPU" = 1 ] && echo cuda || echo cpu)
if [ "$RC" -eq 0 ] && [ "$(json_get '["device"]')" = "$want" ]; then pass "gpu/--device auto picks $want"
else fail "gpu/--device auto picks $want" "exit $RC, device $(json_get '["device"]' 2>/dev/null): $(head -c 300 <<<"$ERR")"; fi

# ---- selftest on the CPU: the CPU backend against naive double loops ----
run 120 "$MICROPP" selftest --device cpu
checks=$(sed -n 's/^selftest: \([0-9]*\) checks, 0 failed: ok$/\1/p' <<<"$OUT")
if [ "$RC" -eq 0 ] && [ -n "$checks" ] && [ "$checks" -ge 30 ]; then pass "gpu/selftest --device cpu passes ($checks checks)"
else fail "gpu/selftest --device cpu passes" "exit $RC: $(tail -n 3 <<<"$OUT") $(head -c 200 <<<"$ERR")"; fi
# the backend's synthetic rows against the host's, bit for bit (features, labels, labels alone), and their
# time a value (what a machine file's data rates take)
if [ "$(grep -cE '^synthetic rows: (features|labels|labels alone) +300x77 C5 +0 +0 +0 +ok$' <<<"$OUT")" = 3 ] &&
    grep -qE '^synthetic labels timing \(s/value\) +64x32768 C2 +[0-9.e+-]+ +> 0 +ok$' <<<"$OUT"; then
    pass "gpu/selftest's synthetic rows: the host's bits, and their time a value"
else fail "gpu/selftest's synthetic rows: the host's bits, and their time a value" "$(grep synthetic <<<"$OUT")"; fi
run 120 "$MICROPP" selftest --device cpu --tol-scale 0
if [ "$RC" -eq 1 ] && grep -qE '^gemm NT \(layer forward\).*FAIL$' <<<"$OUT" && grep -q 'FAILED$' <<<"$OUT"; then
    pass "gpu/selftest fails (exit 1) when an error exceeds its tolerance"
else fail "gpu/selftest fails (exit 1) when an error exceeds its tolerance" "exit $RC: $(tail -n 2 <<<"$OUT")"; fi

# --tf32's tolerances without a GPU: the CPU with every gemm input cut to TF32 passes, and its train
# step's loss moves past fp32's 1e-5 (a selftest --tf32 on a GPU with the loss held to 1e-5 failed).
run 120 "$MICROPP" selftest --device cpu --emulate-tf32
lrow=$(grep '^train step: loss ' <<<"$OUT")
lerr=$(awk '{print $(NF-2)}' <<<"$lrow"); ltol=$(awk '{print $(NF-1)}' <<<"$lrow")
if [ "$RC" -eq 0 ] && python3 -c "import sys; sys.exit(not (float('$lerr') > 1e-5 and float('$ltol') == 1e-3))" 2>/dev/null; then
    pass "gpu/selftest --emulate-tf32 passes; the loss moved $lerr (> fp32's 1e-5, within TF32's 1e-3)"
else fail "gpu/selftest --emulate-tf32 passes; the loss moved past 1e-5" "exit $RC, loss row '$lrow': $(grep FAIL <<<"$OUT" | head -n 3)"; fi
expect_user_error "gpu/selftest --emulate-tf32 with --device cuda is refused" 'emulate-tf32 emulates TF32 on the CPU, and --device is cuda' 60 \
    "$MICROPP" selftest --device cuda --emulate-tf32
expect_user_error "gpu/selftest --nccl on the CPU is refused" 'selftest: --nccl checks NCCL on a GPU, and this run is on the CPU' 60 \
    "$MICROPP" selftest --device cpu --nccl
if gpu_only "gpu/selftest --nccl: NCCL on one rank (init, 4 splits, self send, teardown)"; then
    run 300 "$MICROPP" selftest --device cuda --nccl
    if [ "$RC" -eq 0 ] && grep -qE '^nccl: 1 rank, 4 splits, self send .* ok$' <<<"$OUT" &&
        grep -qE '^nccl: 1 rank, all-reduce, timed .* ok$' <<<"$OUT" && grep -qE '^nccl: 1 rank, all-to-all, floats and ints .* ok$' <<<"$OUT" &&
        grep -qE '^nccl: 2 transports aborted together .* ok$' <<<"$OUT"; then
        pass "gpu/selftest --nccl: NCCL on one rank"
    else fail "gpu/selftest --nccl: NCCL on one rank" "exit $RC: $(grep -E 'nccl|FAIL' <<<"$OUT" | head -n 3) $(head -c 300 <<<"$ERR")"; fi
fi
# bf16 without oneDNN's help in the check: the rounding, gemm and bias gradient against the naive
# product of bf16-rounded inputs (on the CPU the gemm under test is oneDNN's; on a GPU cublasGemmEx).
run 120 "$MICROPP" selftest --device cpu
nb=$(grep -cE '^bf16[: ].* ok$' <<<"$OUT")
if grep -q '^bf16 rows .*skipped' <<<"$OUT"; then skip "gpu/selftest's bf16 rows on the CPU" "$(grep '^bf16 rows' <<<"$OUT" | sed 's/.*skipped: //')"
elif [ "$RC" -eq 0 ] && [ "$nb" -eq 8 ]; then pass "gpu/selftest's bf16 rows on the CPU: $nb rows against the naive product"
else fail "gpu/selftest's bf16 rows on the CPU" "exit $RC, $nb bf16 rows ok: $(grep '^bf16' <<<"$OUT" | grep -v ' ok$' | head -n 3)"; fi

# ---- pingpong: --device applies to the sweep; auto falls back to host buffers ----
expect_user_error "gpu/pingpong --device without --sweep is refused" 'apply to the measurement: add --sweep' 60 \
    mpiexec -n 2 "$MICROPP" pingpong --device cuda
run 60 mpiexec -n 2 "$MICROPP" pingpong --sweep --device auto -e 1K -f 4 -n 5 -w 1 --json
want=$([ "$GPU" = 1 ] && echo cuda || echo cpu)
if [ "$RC" -eq 0 ] && [ "$(json_get '["device"]')" = "$want" ] && [ "$(json_get '["rows"][0]["wrong"]')" = 0 ]; then
    pass "gpu/pingpong --device auto sweeps on $want"
else fail "gpu/pingpong --device auto sweeps on $want" "exit $RC: $(head -c 300 <<<"$OUT$ERR")"; fi

# ---- gemm timing: a share of the step in (0, 1] and a positive rate ----
run 120 "$MICROPP" train "${TINY[@]}" --device cpu --gemm-timing --json
share=$(json_get '["gemm_share"]' 2>/dev/null); rate=$(json_get '["gemm_gflops"]' 2>/dev/null)
if [ "$RC" -eq 0 ] && python3 -c "import sys; s,r=float('$share'),float('$rate'); sys.exit(not (0 < s <= 1 and r > 0))" 2>/dev/null; then
    pass "gpu/--gemm-timing on cpu: share $share, $rate GFLOP/s"
else fail "gpu/--gemm-timing on cpu" "exit $RC share '$share' rate '$rate': $(head -c 300 <<<"$ERR")"; fi

# ---- the MPI transport's staging path (pinned host memory on a GPU; plain on the CPU) ----
run 120 mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --device cpu --transport mpi --verify --json
if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] && [ "$(json_get '["transport"]')" = mpi ]; then
    pass "gpu/pp over --transport mpi on the CPU verifies"
else fail "gpu/pp over --transport mpi on the CPU verifies" "exit $RC: $(head -c 300 <<<"$ERR")"; fi

# ---- with a GPU ----
# losses_close A B: the two JSON runs' loss lists agree to 1e-4 relative.
losses_close() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = (json.loads(x)["losses"] for x in sys.argv[1:3])
sys.exit(not (len(a) == len(b) and all(abs(x - y) <= 1e-4 * max(abs(y), 1e-30) for x, y in zip(a, b))))
EOF
}
# gpu_vs_cpu NAME NRANKS ARGS...: the run on cuda verifies against its CPU reference (step 1
# gradients) and its losses over the steps match the same run on the CPU.
gpu_vs_cpu() {
    local name=$1 n=$2; shift 2
    gpu_only "$name" || return 0
    local launch=("$MICROPP"); [ "$n" -gt 1 ] && launch=(mpiexec -n "$n" "$MICROPP")
    local a cpu_args=() skip=0  # the CPU run without --transport (nccl is refused with --device cpu)
    for a in "$@"; do
        if [ "$skip" = 1 ]; then skip=0; elif [ "$a" = --transport ]; then skip=1; else cpu_args+=("$a"); fi
    done
    run 300 "${launch[@]}" train $(tiny_but "$@") --verify --json --device cpu "${cpu_args[@]}"
    local cpu=$OUT
    [ "$RC" -eq 0 ] || { fail "$name" "cpu run exit $RC: $(head -c 300 <<<"$ERR")"; return 0; }
    run 300 "${launch[@]}" train $(tiny_but "$@") --verify --json --device cuda "$@"
    [ "$RC" -eq 0 ] || { fail "$name" "cuda run exit $RC: $(head -c 300 <<<"$ERR")"; return 0; }
    if [ "$(json_get '["verify_ok"]')" != True ]; then fail "$name" "gradients vs the CPU: $(json_get '["verify_max_rel_err"]')"
    elif ! losses_close "$OUT" "$cpu"; then fail "$name" "losses differ: cuda $(json_get '["losses"]') cpu $(OUT=$cpu json_get '["losses"]')"
    else pass "$name"; fi
}

# ep_nccl NAME NRANKS ARGS...: gpu_vs_cpu, then the cuda run's --json says the experts' all-to-all ran over nccl.
ep_nccl() {
    local name=$1
    gpu_vs_cpu "$@"
    [ "$RC" -eq 0 ] || return 0  # (gpu_vs_cpu said why)
    if [ "$(json_get '["alltoall"]')" = nccl ]; then pass "$name: --json's alltoall is nccl"
    else fail "$name: --json's alltoall is nccl" "alltoall '$(json_get '["alltoall"]')'"; fi
}

if gpu_only "gpu/selftest --device cuda"; then
    run 300 "$MICROPP" selftest --device cuda
    if [ "$RC" -eq 0 ] && grep -q '0 failed: ok$' <<<"$OUT"; then pass "gpu/selftest --device cuda"
    else fail "gpu/selftest --device cuda" "exit $RC: $(grep FAIL <<<"$OUT" | head -n 5) $(head -c 300 <<<"$ERR")"; fi
fi
if gpu_only "gpu/selftest --device cuda --tf32"; then
    run 300 "$MICROPP" selftest --device cuda --tf32
    if [ "$RC" -eq 0 ]; then pass "gpu/selftest --device cuda --tf32"
    else fail "gpu/selftest --device cuda --tf32" "exit $RC: $(grep FAIL <<<"$OUT" | head -n 5)"; fi
fi
gpu_vs_cpu "gpu/cuda vs cpu: monolith, 1 rank" 1 --mode monolith
gpu_vs_cpu "gpu/cuda vs cpu: monolith sgd, 1 rank" 1 --mode monolith --optimizer sgd --lr 0.1
gpu_vs_cpu "gpu/cuda vs cpu: manual split, 1 rank" 1 --mode manual --parts 2
for s in naive gpipe 1f1b; do
    gpu_vs_cpu "gpu/cuda vs cpu: pp $s, 2 ranks on one GPU over mpi" 2 --mode pp --schedule "$s" --micro-batches 4 --transport mpi
done
gpu_vs_cpu "gpu/cuda vs cpu: pp 1f1b checkpointing, 2 ranks over mpi" 2 --mode pp --schedule 1f1b --micro-batches 4 --transport mpi --checkpoint-activations
gpu_vs_cpu "gpu/cuda vs cpu: pp gpipe, 4 ranks over mpi, uneven partition" 4 --mode pp --schedule gpipe --micro-batches 8 --transport mpi --layers 5 --partition 2,1,1,1
gpu_vs_cpu "gpu/cuda vs cpu: ddp, 2 ranks on one GPU (cpu takes shm, cuda mpi)" 2 --mode ddp
if gpu_only "gpu/ddp on cuda: auto all-reduce is mpi, shm refused"; then
    run 300 mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode ddp --device cuda --json
    if [ "$RC" -eq 0 ] && [ "$(json_get '["allreduce"]')" = mpi ]; then pass "gpu/ddp on cuda: --allreduce auto picks mpi"
    else fail "gpu/ddp on cuda: --allreduce auto picks mpi" "exit $RC, allreduce $(json_get '["allreduce"]' 2>/dev/null): $(head -c 300 <<<"$ERR")"; fi
    expect_user_error "gpu/ddp on cuda: --allreduce shm is refused" 'allreduce shm sums host memory.*use --allreduce mpi or ring with --device cuda' 120 \
        mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode ddp --device cuda --allreduce shm
fi

# NCCL needs one GPU per rank: with one GPU it is refused and auto picks mpi; with two, auto still
# takes mpi (NCCL has not yet run on such a machine) and says why, and --transport nccl runs.
GPUS=0
[ "$GPU" = 1 ] && GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if gpu_only "gpu/nccl rules"; then
    if [ "$GPUS" -lt 2 ]; then
        expect_user_error "gpu/--transport nccl, 2 ranks on 1 GPU is refused" 'needs one GPU per rank, but a node runs 2 ranks on 1 GPU' 120 \
            mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --device cuda --transport nccl
        expect_user_error "gpu/--tp 2 --transport nccl, 2 ranks on 1 GPU is refused" 'needs one GPU per rank, but a node runs 2 ranks on 1 GPU' 120 \
            mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --tp 2 --device cuda --transport nccl
        run 300 mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --device cuda --json
        if [ "$RC" -eq 0 ] && [ "$(json_get '["transport"]')" = mpi ]; then pass "gpu/--transport auto, 2 ranks on 1 GPU picks mpi"
        else fail "gpu/--transport auto, 2 ranks on 1 GPU picks mpi" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
    else
        run 300 mpiexec -n 2 "$MICROPP" train "${TINY[@]}" --mode pp --device cuda
        if [ "$RC" -eq 0 ] && grep -q 'transport mpi$' <<<"$OUT" && grep -q '^--transport auto takes mpi: the NCCL transport has not yet run' <<<"$OUT"; then
            pass "gpu/--transport auto, a GPU per rank, takes mpi and says why"
        else fail "gpu/--transport auto, a GPU per rank, takes mpi and says why" "exit $RC: $(head -c 400 <<<"$OUT$ERR")"; fi
        for s in naive gpipe 1f1b; do
            gpu_vs_cpu "gpu/cuda vs cpu: pp $s, 2 ranks over nccl" 2 --mode pp --schedule "$s" --micro-batches 4 --transport nccl
        done
        # the tensor-parallel group's all-reduce over NCCL (devcomm_allreduce_sum): never run on a GPU yet
        gpu_vs_cpu "gpu/cuda vs cpu: --tp 2, the group's all-reduce over nccl" 2 --tp 2 --transport nccl
        if [ "$GPUS" -ge 4 ]; then
            gpu_vs_cpu "gpu/cuda vs cpu: pp 2 x tp 2, 1f1b over nccl" 4 --mode pp --tp 2 --schedule 1f1b --micro-batches 4 --transport nccl
        else skip "gpu/cuda vs cpu: pp 2 x tp 2, 1f1b over nccl" "needs 4 GPUs, $GPUS visible"; fi
        # the expert group's all-to-all over NCCL (comms/alltoall.c's nccl row: the host's rows through GPU
        # buffers, counts then rows): never run between GPUs yet. --verify against the monolith, the losses as
        # the CPU's --ep 2 (shm there), and --json saying nccl; overlapped, not, and (4 GPUs) in pairs on 1F1B's
        # stage 0 (two lanes, two communicators; dualpipev's chunks need tags, so it runs over mpi only).
        for ov in on off; do
            ep_nccl "gpu/cuda vs cpu: --dp 2 --ep 2, --ep-overlap $ov, the experts' all-to-all over nccl" 2 \
                --dp 2 --experts 4 --ep 2 --ep-overlap "$ov" --transport nccl
        done
        if [ "$GPUS" -ge 4 ]; then
            ep_nccl "gpu/cuda vs cpu: pp 2 x ep 2, 1f1b, --ep-overlap pair over nccl" 4 --pp 2 --dp 2 --experts 4 --ep 2 \
                --schedule 1f1b --micro-batches 4 --ep-overlap pair --transport nccl
        else skip "gpu/cuda vs cpu: pp 2 x ep 2, 1f1b, --ep-overlap pair over nccl" "needs 4 GPUs, $GPUS visible"; fi
        run 300 mpiexec -n 2 "$MICROPP" alltoall --algo nccl -b 1K -e 16M -f 16 --iters 5 --warmup 1 --json
        got=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); r=d['results']; print(len(r), sorted({x['algo'] for x in r}), sum(x['wrong'] for x in r))" "$OUT" 2>/dev/null)
        if [ "$RC" -eq 0 ] && [ "$got" = "4 ['nccl'] 0" ]; then pass "gpu/alltoall --algo nccl on 2 GPUs: 1K .. 16M, nothing wrong"
        else fail "gpu/alltoall --algo nccl on 2 GPUs: 1K .. 16M, nothing wrong" "exit $RC, '$got': $(head -c 300 <<<"$ERR")"; fi
    fi
fi
[ "$GPUS" -lt 2 ] && skip "gpu/--ep 2 over nccl (the experts' all-to-all): --verify vs the monolith, alltoall --algo nccl" \
    "needs 2 GPUs, $GPUS visible"
# pingpong between GPU buffers: every byte arrives (over mpi always; over nccl with 2 GPUs)
ping_gpu() {
    local name=$1; shift
    gpu_only "$name" || return 0
    run 300 mpiexec -n 2 "$MICROPP" pingpong --sweep --device cuda -b 4 -e 4M -f 16 -n 20 -w 2 --json "$@"
    if [ "$RC" -eq 0 ] && python3 -c "import json,sys; o=json.loads(sys.argv[1]); sys.exit(not (o['device']=='cuda' and len(o['rows'])==6 and all(r['wrong']==0 and r['bandwidth_gbs']>0 for r in o['rows'])))" "$OUT"; then
        pass "$name"
    else fail "$name" "exit $RC: $(head -c 300 <<<"$OUT$ERR")"; fi
}
ping_gpu "gpu/pingpong --device cuda over mpi (pinned staging)" --transport mpi
if [ "$GPU" = 1 ] && [ "$GPUS" -lt 2 ]; then skip "gpu/pingpong --device cuda over nccl" "needs 2 GPUs, $GPUS visible"
else ping_gpu "gpu/pingpong --device cuda over nccl" --transport nccl; fi

if gpu_only "gpu/--gemm-timing on cuda"; then
    run 300 "$MICROPP" train "${TINY[@]}" --device cuda --gemm-timing --json
    share=$(json_get '["gemm_share"]' 2>/dev/null)
    if [ "$RC" -eq 0 ] && python3 -c "import sys; s=float('$share'); sys.exit(not 0 < s <= 1)" 2>/dev/null; then pass "gpu/--gemm-timing on cuda: share $share"
    else fail "gpu/--gemm-timing on cuda" "exit $RC share '$share'"; fi
fi
# The memory check on a GPU compares the reckoning with the device's free memory (cudaMemGetInfo):
# a model far over any GPU's memory is refused before allocating, with both figures.
if gpu_only "gpu/a model too large for the GPU is refused with its free memory"; then
    e_line='needs about 2\.50 TiB \(weights 640\.01 GiB, .*and the GPU has [0-9.]+ [KMGT]?i?B free: use '
    expect_user_error "gpu/a model too large for the GPU is refused with its free memory" "$e_line" 60 \
        "$MICROPP" train --device cuda --hidden 65536 --layers 40 --batch 8 --steps 1
fi

# ---- the GPU path's watchdog, without a GPU (tests/mpi_devwait: the waits and hooks the CUDA backend
# and the NCCL transport are handed) ----
# The end-of-job hook (the NCCL abort) that never returns, as an ncclCommAbort waiting on a kernel of
# another communicator: the alarm is set before it, so every rank still ends within seconds.
DEVWAIT=$ROOT/tests/bin/mpi_devwait
if [ -x "$DEVWAIT" ]; then
    t0=$(date +%s)
    run 60 mpiexec -n 2 "$DEVWAIT" "$TMP/devwait-hang" hang-at-end
    secs=$(( $(date +%s) - t0 )); sleep 0.3; left=$(left_behind "$TMP/devwait-hang")
    if [ "$RC" -ne 0 ] && [ "$secs" -le 15 ] && grep -q '^\[rank 0\] watchdog: waited 3\.[0-9] s (--timeout 3) for this rank.s GPU' <<<"$ERR" &&
       grep -q '^\[rank 0\] mpi_devwait: wd_at_end blocks' <<<"$ERR" && grep -q '^\[rank 1\] mpi_devwait: wd_at_end blocks' <<<"$ERR" &&
       [ -z "$left" ]; then
        pass "gpu/watchdog: an abort hook that blocks on both ranks still ends the job (${secs}s, exit $RC)"
    else fail "gpu/watchdog: an abort hook that blocks still ends the job" "exit $RC after ${secs}s, left '$left': $(head -c 500 <<<"$ERR")"; fi
    # selftest's watchdog: one process without MPI, a device wait and a blocking library call each bounded
    run 30 "$DEVWAIT" "$TMP/devwait-local" local
    if [ "$RC" -eq 1 ] && grep -q 'watchdog: waited 2\.[0-9] s (--timeout 2) for this rank.s GPU (its queued work, then the loss) in the test.s device wait' <<<"$ERR" &&
       grep -q 'mpi_devwait: wd_at_end ran' <<<"$ERR"; then pass "gpu/watchdog without MPI (selftest's): a device wait that never ends -> its line, exit 1"
    else fail "gpu/watchdog without MPI: a device wait that never ends" "exit $RC: $(head -c 400 <<<"$ERR")"; fi
    run 30 "$DEVWAIT" "$TMP/devwait-call" local-call
    if [ "$RC" -eq 1 ] && grep -q 'watchdog: waited [0-9.]* s (--timeout 2) inside ncclCommInitRank in the test.s device wait' <<<"$ERR"; then
        pass "gpu/watchdog without MPI: a library call that blocks (ncclCommInitRank) -> the backstop's line, exit 1"
    else fail "gpu/watchdog without MPI: a library call that blocks" "exit $RC: $(head -c 400 <<<"$ERR")"; fi
else fail "gpu/watchdog: the abort hook, and without MPI" "$DEVWAIT is missing: make tests/bin/mpi_devwait"; fi
expect_user_error "gpu/selftest --timeout 0.5 -> one line, exit 2" "--timeout = 0.5 is below 1 s" 30 "$MICROPP" selftest --timeout 0.5
# The wire's host staging for a device (the send pool, the receive staging, the collectives' buffers:
# pinned on a GPU) is freed at the end, before the CUDA backend closes (a leak check lists none).
TEARDOWN=$ROOT/tests/bin/mpi_teardown
run 60 "$TEARDOWN"
if [ "$RC" -eq 0 ] && grep -qE 'alive before the end [1-9][0-9]*, after 0; message ok' <<<"$OUT"; then pass "gpu/teardown: the wire's host staging freed at the end ($OUT)"
else fail "gpu/teardown: the wire's host staging freed at the end" "exit $RC: $OUT $(head -c 300 <<<"$ERR")"; fi
# CUDA_DEVICE_MAX_CONNECTIONS below 32 (Megatron's 1): raised before CUDA starts, one line once the GPU
# is open; on a machine without a GPU nothing is said.
run 120 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$MICROPP" train "${TINY[@]}" --json
qline="micropp: CUDA_DEVICE_MAX_CONNECTIONS was '1', now 32: the NCCL transport's streams must not share hardware queues (docs/gpus.md)"
if [ "$GPU" = 1 ]; then
    if [ "$RC" -eq 0 ] && [ "$(grep -cxF "$qline" <<<"$ERR")" = 1 ]; then pass "gpu/CUDA_DEVICE_MAX_CONNECTIONS=1 -> 32, said in one line"
    else fail "gpu/CUDA_DEVICE_MAX_CONNECTIONS=1 -> 32, said in one line" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
elif [ "$RC" -eq 0 ] && ! grep -q CUDA_DEVICE_MAX_CONNECTIONS <<<"$ERR"; then pass "gpu/CUDA_DEVICE_MAX_CONNECTIONS=1 without a GPU: nothing said"
else fail "gpu/CUDA_DEVICE_MAX_CONNECTIONS=1 without a GPU: nothing said" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
