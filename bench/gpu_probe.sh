#!/usr/bin/env bash
# bench/gpu_probe.sh: a short second call on a GPU machine after bench/gpu_first.sh: selftest (the
# synthetic rows made on the GPU against the host's, bit for bit), the monolith's step at growing batch
# beside PyTorch's (where host work shows: it grows with the rows, the GPU's barely), the gemm share,
# the 2-rank pipeline's stage table on the one GPU, and pingpong on host buffers beside device buffers.
#   device:  run(command="bash bench/gpu_probe.sh", carry=[".debs"], timeout_s=300)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/probe}; mkdir -p "$OUT"
exec > >(tee "$OUT/probe.log") 2>&1
. bench/gpu_env.sh
gpu_env || exit 1
make "${MAKEARGS[@]}" micropp 2>&1 | grep -E "GPU support|error"
echo "== selftest"; timeout 60 ./micropp selftest --device cuda | grep -E "synthetic|selftest:"
M=(--layers 16 --hidden 1024 --classes 2 --steps 20 --device cuda --log-every 0)
for b in 256 2048; do
    echo "== monolith, batch $b (micropp, then PyTorch)"
    timeout 60 ./micropp train "${M[@]}" --batch "$b" | grep -E "^step|^final"
    [ "${TORCH:-1}" = 1 ] && env -u LD_LIBRARY_PATH timeout 120 python3 bench/torch_mlp.py --layers 16 --hidden 1024 \
        --classes 2 --batch "$b" --precision fp32 --steps 20 --device cuda | tail -n 1 | head -c 300 && echo
done
echo "== monolith, batch 2048, --gemm-timing"
timeout 60 ./micropp train "${M[@]}" --batch 2048 --gemm-timing | grep -E "^step|gemm"
echo "== pipeline 1f1b M=8, 2 ranks, mpi"
timeout 90 mpiexec -n 2 ./micropp train --config configs/pipeline.json --hidden 1024 --steps 20 --batch 2048 \
    --device cuda --log-every 0 --transport mpi | sed -n '/^final/,$p'
echo "== pingpong host buffers"; timeout 60 mpiexec -n 2 ./micropp pingpong -b 4 -e 1M -f 16 -n 200
echo "== pingpong cuda buffers"
timeout 60 mpiexec -n 2 ./micropp pingpong --device cuda --transport mpi -b 4 -e 1M -f 16 -n 200
