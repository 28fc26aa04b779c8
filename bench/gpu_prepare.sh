#!/usr/bin/env bash
# bench/gpu_prepare.sh: run HERE (Debian 12, apt works) before a session with a GPU machine. That
# machine has CUDA but no MPICH, no OpenBLAS, no cJSON, no zlib headers, no oneDNN and no package registry, so Debian's .deb
# files travel with the working tree: this downloads them into .debs/ (git-ignored, ~30 MB), and
# bench/gpu.sh unpacks them there into /tmp/sysroot (never into /). Then, with the device tool:
#   run(command="bash bench/gpu.sh", carry=[".debs"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(mpich libmpich12 libmpich-dev libhwloc15 libucx0 libslurm38 libnuma1 libgfortran5 libquadmath0
      libopenblas0-pthread libopenblas-pthread-dev libcjson1 libcjson-dev libudev1 zlib1g zlib1g-dev
      libdnnl2 libdnnl-dev ocl-icd-libopencl1)  # oneDNN: the CPU reference of --precision bf16
mkdir -p .debs
cd .debs
apt-get download "${PKGS[@]}"
ls -1 *.deb
du -sh .
