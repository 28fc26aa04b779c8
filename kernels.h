// kernels.h: what the CUDA backend (kernels.cu) lends the NCCL transport (nccl.cu), for nvcc (C++) only:
// the CUDA check, the compute stream, the host's bounded wait, and the device-memory helpers that
// selftest's one-GPU NCCL checks use.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
extern "C" {
#include "base/util.h"
}

// "[rank r] FILE:LINE: cudaXxx(...) failed: <the library's message>", then the job ends (fatal_at).
static inline void cuda_check_at(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) fatal_at(file, line, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CUDA_CHECK(call) cuda_check_at((call), #call, __FILE__, __LINE__)

extern cudaStream_t g_stream;  // the compute stream: every kernel, copy and gemm runs there, in order
int cuda_opened(void);         // backend_cuda_open has opened the device
// Every host wait polls ready(ctx) through the wire's bounded wait (backend_cuda_set_wait: the
// watchdog's, under --timeout; peer and what name it), or spins when none was handed in.
void host_wait(int (*ready)(void *), void *ctx, int peer, const char *what);
// A library call that can block inside the driver: host_call("ncclCommInitRank") before it,
// host_call(NULL) after, so the watchdog's backstop bounds it (backend_cuda_set_wait's call; none: nothing).
void host_call(const char *call);
// Everything queued on the compute stream has run. what: "GPU (...)", for the watchdog's line.
void stream_wait(const char *what);
// The backend's own (ops.h): device memory (zeroed), copies that wait, a fill.
void *cu_alloc(size_t bytes);
void cu_free(void *p);
void cu_to_device(void *dst, const void *src, size_t bytes);
void cu_to_host(void *dst, const void *src, size_t bytes);
void cu_fill(float *x, float v, size_t n);
