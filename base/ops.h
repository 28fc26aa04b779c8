// base/ops.h: the backend interface, the few operations training needs. All float pointers are
// device pointers of the chosen backend (plain host memory for "cpu"). Row-major throughout.
// One implementation per device: ops_cpu.c (cblas + loops) and kernels.cu (cuBLAS + kernels).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "base/ops_math.h"
#include "base/data.h"  // SyntheticBatch

// Precision of the matrix products (--precision). bf16: gemm rounds its inputs A and B to bf16
// (bf16_from_f32: nearest, ties to even) and accumulates and writes C in fp32, and bias_grad (a
// product with a vector of ones) rounds dz alike; everything else (element-wise math, weights,
// gradients, optimizer state, loss) stays fp32. So every value the backward reads from a stash or a
// message feeds only rounding readers (or the ReLU mask, a sign): model.c keeps them in bf16.
enum { PRECISION_FP32, PRECISION_BF16 };
#define PRECISION_CHOICES "fp32|bf16"

// A point on the device's queue (fence_new/record/wait below): cuda, an event; cpu, always passed.
typedef struct Fence Fence;

typedef struct Backend {
    const char *name;  // "cpu" or "cuda"
    int on_host;       // 1 when device pointers are ordinary host pointers
    int device_count;  // cuda: devices visible to this process (0 on cpu)
    void *(*alloc)(size_t bytes);  // zero-filled
    void (*free)(void *p);
    // Waits until the copy is done (cuda: for the whole queue), so the caller may reuse src_host at once.
    void (*to_device)(void *dst, const void *src_host, size_t bytes);
    // The same copy queued without a host wait: src_host (alloc_host memory) must stay unchanged until a
    // fence recorded after this call has passed (the training path's input ring, train/executor.c).
    void (*to_device_queued)(void *dst, const void *src_host, size_t bytes);
    // Fences: fence_new returns one already passed; fence_record moves it to the queue's end now;
    // fence_wait waits on the host until the queue has passed it, no further (cuda: that event alone,
    // through the wire's bounded wait, naming `what`: "GPU (...)"). cpu: every fence has passed.
    Fence *(*fence_new)(void);
    void (*fence_record)(Fence *f);
    void (*fence_wait)(Fence *f, const char *what);
    void (*fence_free)(Fence *f);
    void (*to_host)(void *dst_host, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);  // device to device
    void (*fill)(float *x, float value, size_t n);
    // C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C; op transposes when ta/tb is 1.
    void (*gemm)(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);
    // y[rows,cols] = act(y + b) with act = ReLU when relu, else identity.
    void (*bias_act)(float *y, const float *b, int rows, int cols, int relu);
    // dz = dy * (y > 0), n elements; dz may alias dy.
    void (*relu_backward)(float *dz, const float *dy, const float *y, size_t n);
    // db[cols] += sum over rows of dz[rows,cols] (in bf16 precision: of dz rounded to bf16).
    void (*bias_grad)(float *db, const float *dz, int rows, int cols);
    // Softmax cross-entropy over rows: dlogits = (softmax - onehot) * scale (dlogits may alias logits),
    // and the rows' loss sum and count of argmax hits ADDED to tally[0] and tally[1] (two doubles from
    // alloc, in the backend's memory): on a GPU nothing waits for it, and the step reads the tally once
    // (model.c's stage_take_loss).
    void (*softmax_xent_tally)(const float *logits, const int32_t *labels, int rows, int C, float scale,
                               float *dlogits, double *tally);
    // Synthetic rows made where they are used (base/data.h's SyntheticBatch, b->teacher in this backend's
    // memory): b's features into x [rows, inputs] and labels into y [rows], either NULL to skip; the same
    // bits as data_features/data_labels (cpu: data_synthetic_rows; cuda: a kernel, no host work or copy).
    void (*synthetic)(float *x, int32_t *y, const SyntheticBatch *b);
    // The updates return the index of the first parameter that is not finite afterwards (a NaN or
    // Inf gradient, or a parameter already gone), or -1: the check rides on the pass that writes them.
    long (*adam)(float *p, const float *g, float *m, float *v, size_t n, AdamArgs a);
    long (*sgd)(float *p, const float *g, size_t n, float lr);
    void (*axpy)(float *y, float a, const float *x, size_t n);  // y += a * x
    void (*scale)(float *x, float a, size_t n);                 // x *= a
    double (*sumsq)(const float *x, size_t n);  // the sum of x[i]^2, accumulated in double (--clip-grad's norm)
    // n values rounded to bf16 (bf16_from_f32) and back (exact): bf16 stashes and messages.
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
    void (*sync)(void);  // wait for queued device work (no-op on cpu)
    // Time marks on the device's queue, so the executor times its actions without waiting after each:
    // stamp(i) marks the queue now (i = 0, 1, 2, ... within a step; cuda: an event, cpu: the clock) and
    // returns the host's clock (now_sec) as it did; stamps(n, t) waits for the queue and writes marks
    // 0..n-1 as seconds after mark 0.
    double (*stamp)(int i);
    void (*stamps)(int n, double *t);
    // Host memory for staging transfers (the MPI transport, the input ring): pinned (page-locked) on cuda, so
    // copies to and from the device run at full speed; plain memory on cpu. Zero-filled.
    void *(*alloc_host)(size_t bytes);
    void (*free_host)(void *p);
    void (*set_tf32)(int on);      // cuda: let cuBLAS round fp32 inputs to TF32 (tensor cores)
    // PRECISION_*: what gemm computes from now on. Returns 0, or -1 with one line in err saying
    // why this backend or build cannot (the package to install, or the device that lacks it).
    int (*set_precision)(int precision, char *err, size_t errlen);
    // --deterministic: chunk > 0 makes every gemm from now on run on fixed chunks of that many rows
    // (base/det.h's det_gemm), so a row's bits do not depend on the call's rows; 0: off. Returns 0, or -1
    // with one line in err when this backend cannot (cuda).
    int (*set_deterministic)(int chunk, char *err, size_t errlen);
    // Gemm timing, for the share of step time spent in BLAS: once on, every gemm is timed (device
    // time: cudaEvents on cuda, a clock on cpu); gemm_seconds() waits for queued work and returns
    // the time summed since its last call.
    void (*gemm_timing)(int on);
    double (*gemm_seconds)(void);
    void (*describe)(char *out, size_t n);  // e.g. "cuda:0 NVIDIA H100 80GB HBM3 (1 of 1 visible)"
    double (*memory_free)(void);  // a device's free bytes now (NULL on the host: memory.c reads MemAvailable)
    // cuda: this rank's GPU as the hardware names it (a hash of its UUID), the same for every process
    // that uses it whatever CUDA_VISIBLE_DEVICES says: how ranks sharing one GPU are found (NULL on the host).
    uint64_t (*device_key)(void);
} Backend;

extern const Backend backend_cpu;

// The CUDA backend (kernels.cu) on device local_rank % device_count, or NULL with the reason in
// err (the driver's message, or "built without CUDA") when this binary or machine has none.
// Opens once; later calls return the same backend. Before CUDA starts it sets CUDA_DEVICE_MAX_CONNECTIONS
// to 32 (the most) when unset or lower, saying so in one line on rank 0 when it held another value:
// the NCCL transport's ~18 streams must not share the default 8 hardware queues (NCCL issues 783, 522).
const Backend *backend_cuda_open(int local_rank, char *err, size_t errlen);
// Frees what the backend holds (its stream, cuBLAS handle, events, pinned and device buffers), after
// its queue has drained; the end of a process that opened it, once every buffer of its callers is
// freed (comm_finalize, selftest). A later backend_cuda_open opens it afresh. No-op when not open.
void backend_cuda_close(void);
// How the CUDA backend and the NCCL transport wait on the host (the GPU's queue, an event): poll
// ready(ctx) until it returns nonzero. The wire hands in the watchdog's bounded poll (comm_init), so
// a hung kernel or a deadlocked NCCL exchange ends the job at --timeout, the line naming `what`, the
// peer (-1: several; -2: none, this rank's own GPU) and the action; until then the waits are unbounded.
// call marks a library call that can block inside the driver (ncclCommInitRank, ncclCommSplit,
// ncclCommDestroy, cudaFree, cudaMallocHost, cudaFreeHost): call(name) as it begins, call(NULL) once
// it returned, so the watchdog's backstop thread ends a rank stuck in one (wd_mark_call).
typedef void (*DeviceWait)(int (*ready)(void *ctx), void *ctx, int peer, const char *what);
typedef void (*DeviceCall)(const char *call);
void backend_cuda_set_wait(DeviceWait wait, DeviceCall call);

// BLAS in use, for the header line: e.g. "openblas 0.3.21 core=SkylakeX threads=1".
void blas_describe(char *out, size_t n);
void blas_set_threads(int threads);
// Subnormal floats (below 1.2e-38) read and written as zero on this thread (x86 MXCSR FTZ + DAZ).
// Adam's first moment of a unit whose gradient stays 0 decays through the subnormal range, where
// each multiply takes a microcode assist: measured on Fashion-MNIST, 8% of exp_avg was subnormal
// after 3 epochs and each epoch ran slower than the last. Values that small change no weight.
void cpu_flush_subnormals(void);
int blas_max_threads(void);  // the most threads this BLAS was built for (more are silently cut)
// Re-executes the program with OPENBLAS_CORETYPE set when OpenBLAS chose a kernel weaker than the
// CPU supports (and the user set none); returns when nothing needs changing.
void blas_pick_kernel(char **argv);

// OpenBLAS's sgemm in fp32 on host memory, whatever --precision and --deterministic set for the model's
// products (Backend.gemm's arguments): host-side maths that must not round to bf16 (PowerSGD's factors).
void cpu_sgemm_fp32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc);

// oneDNN (ops_onednn.c), the CPU backend's bf16 gemm: the same arguments as Backend.gemm, inputs
// rounded to bf16, fp32 accumulation and output; one primitive per shape, created once.
int onednn_available(char *err, size_t n);  // 1, or 0 with the reason (built without libdnnl-dev)
void onednn_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
// "onednn 2.6.3 brg:avx512_core_bf16": the version and the kernel chosen for a [M,K] x [N,K]^T product.
void onednn_describe(int M, int N, int K, char *out, size_t n);
int onednn_native_bf16(void);  // the CPU computes bf16 products natively (AVX512_BF16)
void onednn_set_threads(int threads);
