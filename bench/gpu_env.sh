# bench/gpu_env.sh: sourced by bench/gpu.sh and bench/gpu_first.sh. Finds or makes the toolchain on a
# GPU machine that reaches no package registry: MPICH, OpenBLAS, cJSON and zlib from .debs/ (made here
# by bench/gpu_prepare.sh) unpacked into /tmp/sysroot unless MPICH, cJSON and OpenBLAS are here; cuBLAS and NCCL from the
# toolkit, else the nvidia-* Python wheels (CUDA 12's nvidia/<lib>/ or CUDA 13's nvidia/cu13/ layout).
# Sets PATH, LD_LIBRARY_PATH, DEPS=0 (no make probes apt there) and the array MAKEARGS; returns 1 when
# no toolchain can be made (the reason printed).
export DEPS=0
MAKEARGS=(-j"$(nproc)" WERROR= DEPS=0)
gpu_env_sysroot() {
    local SR=/tmp/sysroot L f
    if ! ls .debs/*.deb >/dev/null 2>&1; then
        echo "gpu_env: no mpicc here and no .debs/: run 'bash bench/gpu_prepare.sh' on the development machine and carry .debs"
        return 1
    fi
    rm -rf "$SR" && mkdir -p "$SR/bin"
    for f in .debs/*.deb; do dpkg-deb -x "$f" "$SR" || { echo "gpu_env: cannot unpack $f"; return 1; }; done
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
    MAKEARGS+=("OPT=-O3 -march=native -fno-math-errno -I$SR/usr/include -I$SR/usr/include/x86_64-linux-gnu/openblas-pthread -L$L -L$L/openblas-pthread")
    # oneDNN (bf16 on the CPU: --verify's reference, micropp-cpu): the Makefile looks in /usr/include only.
    [ -f "$SR/usr/include/oneapi/dnnl/dnnl.h" ] && MAKEARGS+=(ONEDNN=1)
    echo "gpu_env: MPICH, OpenBLAS, cJSON, zlib, oneDNN unpacked into $SR"
}
# gpu_env_wheel LIB HEADER: the folder of a Python wheel that holds include/HEADER (CUDA 12 wheels:
# nvidia/LIB; CUDA 13 wheels: nvidia/cu13 for the toolkit's libraries), or nothing.
gpu_env_wheel() {
    local m d
    for m in "$1" cu13; do
        d=$(python3 -c "import nvidia.$m as m; print(list(m.__path__)[0])" 2>/dev/null) || continue
        [ -n "$d" ] && [ -f "$d/include/$2" ] && { echo "$d"; return 0; }
    done
    return 1
}
gpu_env() {
    local NVCC d
    # The sysroot unless this machine has all of MPICH, cJSON and OpenBLAS: a GPU image may carry
    # Open MPI's mpicc (seen on the H100 image: no cJSON, and its mpiexec refuses root).
    if ! mpicc -show 2>/dev/null | grep -q mpich || [ ! -f /usr/include/cjson/cJSON.h ] ||
       ! ls /usr/include/x86_64-linux-gnu/openblas*/cblas.h >/dev/null 2>&1; then
        echo "gpu_env: $(command -v mpicc >/dev/null && echo "mpicc here is not MPICH or lacks cJSON/OpenBLAS" || echo "no mpicc here"): the sysroot"
        gpu_env_sysroot || return 1
    fi
    NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    CUDA_HOME=/usr/local/cuda
    d=$(dirname "$(dirname "$NVCC")"); [ -f "$d/include/cuda_runtime.h" ] && CUDA_HOME=$d
    if ! ls "$CUDA_HOME/include/nccl.h" /usr/include/nccl.h >/dev/null 2>&1; then
        d=$(gpu_env_wheel nccl nccl.h) && MAKEARGS+=("NCCL_HOME=$d") && echo "gpu_env: NCCL from the wheel: $d"
    fi
    if ! ls "$CUDA_HOME/lib64/libcublas.so" >/dev/null 2>&1; then
        d=$(gpu_env_wheel cublas cublas_v2.h) && MAKEARGS+=("CUBLAS_HOME=$d") && echo "gpu_env: cuBLAS from the wheel: $d"
    fi
    echo "gpu_env: make ${MAKEARGS[*]}"
}
