// kernels.cu: the CUDA backend of ops.h: cuBLAS for every matrix product (sgemm in fp32 and TF32,
// cublasGemmEx on bf16 inputs) and one small kernel per element-wise operation, each calling the very
// ops_math.h function the CPU loops call. The compute runs on ONE non-blocking stream; every host wait
// polls through the wire's bounded wait (backend_cuda_set_wait), and the training rows' copies wait for
// none (to_device_queued: each pinned input buffer's own fence guards its refill). The NCCL transport
// (nccl.cu) queues after the same stream and waits the same way (kernels.h). No MPI here. Every
// CUDA/cuBLAS call and launch is checked.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include "base/ops_math.h"
#include "kernels.h"
extern "C" {
#include "base/ops.h"
#include "base/util.h"
}

// ---- checks: "[rank r] kernels.cu:LINE: cublasXxx(...) failed: <the library's message>" ----
// (CUDA_CHECK: kernels.h)

static void cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        fatal_at(file, line, "%s failed: %s (%s)", what, cublasGetStatusString(s), cublasGetStatusName(s));
}
#define CUBLAS_CHECK(call) cublas_check_at((call), #call, __FILE__, __LINE__)
#define LAUNCH_CHECK(kernel) cuda_check_at(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__)

// ---- the device, its stream and cuBLAS handle ----

static int g_device, g_devices;
cudaStream_t g_stream;  // every kernel, copy and gemm runs here, in order (nccl.cu queues after it)
static cublasHandle_t g_cublas;
static int g_tf32;
static struct Result { double loss_sum; int hits; } *g_result_host, *g_result_dev;  // softmax_xent
static int *g_bad_host, *g_bad_dev;  // the optimizer updates' non-finite flag
static float *g_row_loss;  // softmax_xent: per-row losses and hits, grown as needed
static int *g_row_hit, g_row_cap;
static float *g_synth_x;  // synthetic: the features a head makes its labels from, grown as needed
static size_t g_synth_cap;
static uint64_t g_key;  // device_key: a hash of the GPU's UUID

constexpr int THREADS = 256;
static unsigned blocks_for(size_t n) {  // kernels below loop with a grid stride, so a cap is fine
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
#define GRID_STRIDE(i, n)                                                                                              \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---- host waits: every one polls, through the wire's bounded wait when it has handed one in ----

static DeviceWait g_wait;  // comm_init: the watchdog's (--timeout, the action named); NULL: unbounded
static DeviceCall g_call;  // its backstop's marks for a blocking library call; NULL: none
extern "C" void backend_cuda_set_wait(DeviceWait wait, DeviceCall call) { g_wait = wait; g_call = call; }
void host_call(const char *call) {
    if (g_call) g_call(call);
}
void host_wait(int (*ready)(void *), void *ctx, int peer, const char *what) {
    if (g_wait) g_wait(ready, ctx, peer, what);
    else
        while (!ready(ctx)) {}
}
static int stream_idle(void *ctx) {
    cudaError_t e = cudaStreamQuery((cudaStream_t)ctx);
    if (e == cudaErrorNotReady) return 0;
    CUDA_CHECK(e);
    return 1;
}
// Everything queued on the compute stream has run (it never waits on an NCCL stream, so this cannot
// wait on the network). what: "GPU (...)", for the watchdog's "this rank's GPU (...)".
void stream_wait(const char *what) { host_wait(stream_idle, g_stream, -2, what); }

// ---- memory ----

void *cu_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));  // plain device memory, never managed memory
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_stream));
    return p;
}
// cudaFree, cudaMallocHost and cudaFreeHost may wait for the whole device (NCCL's kernels of a send in
// flight included): marked for the watchdog's backstop, so a rank stuck in one ends at --timeout.
void cu_free(void *p) {
    host_call("cudaFree");
    CUDA_CHECK(cudaFree(p));
    host_call(NULL);
}
static void *cu_alloc_host(size_t bytes) {
    void *p = NULL;
    host_call("cudaMallocHost");
    CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));  // pinned: DMA-able, copies at full speed
    host_call(NULL);
    memset(p, 0, bytes);
    return p;
}
static void cu_free_host(void *p) {
    host_call("cudaFreeHost");
    CUDA_CHECK(cudaFreeHost(p));
    host_call(NULL);
}
// Host memory the driver copies to or from by DMA (cudaMallocHost's); pageable memory it stages itself,
// and then may wait for the stream inside the call (CUDA's runtime API: "might be synchronous"),
// outside any poll of ours.
static int pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeHost;
}
// Small reads (the step's loss tally, a flag) land in this pinned buffer and are copied out on the host.
#define BOUNCE_BYTES 4096
static void *g_bounce;

// to_device waits for completion (the whole queue): its callers (weights at start-up, checkpoints,
// evaluation, selftest) may reuse or free the source at once. The training path's input rows and
// labels use to_device_queued instead: no wait, the source is one of a ring of pinned buffers whose
// fence (an event recorded after its copies) the producer waits on before refilling it, alone.
// Device-to-host copies wait because the caller reads the result.
// A copy from pageable memory waits for the queue to drain first, under the wire's bound, so the
// driver's own wait in the call finds nothing queued before it.
void cu_to_device(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (!pinned(src)) stream_wait("GPU (its queued work, before a copy to it)");
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream));
    stream_wait("GPU (its queued work, then a copy to it)");
}
static void cu_to_device_queued(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream));  // src: pinned
}
// A fence is an event (no timing) on the compute stream; a new one, never recorded, has passed.
static Fence *cu_fence_new(void) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return (Fence *)ev;
}
static void cu_fence_record(Fence *f) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)f, g_stream)); }
static int fence_passed(void *ctx) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ctx);
    if (e == cudaErrorNotReady) return 0;
    CUDA_CHECK(e);
    return 1;
}
// Only the queue up to the fence: the work queued after it runs on. Under the wire's bound, as every wait.
static void cu_fence_wait(Fence *f, const char *what) { host_wait(fence_passed, f, -2, what); }
static void cu_fence_free(Fence *f) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)f)); }
// Into pinned memory: the copy queued, then one bounded wait. Into pageable memory: a small read (the
// loss tally) through the pinned bounce buffer; a large one after the queue has drained (as cu_to_device).
void cu_to_host(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    void *to = dst;
    if (bytes <= BOUNCE_BYTES && !pinned(dst)) to = g_bounce;
    else if (!pinned(dst)) stream_wait("GPU (its queued work, before a copy from it)");
    CUDA_CHECK(cudaMemcpyAsync(to, src, bytes, cudaMemcpyDeviceToHost, g_stream));
    stream_wait("GPU (its queued work, then a copy from it)");
    if (to != dst) memcpy(dst, to, bytes);
}
static void cu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream));
}
static void cu_sync(void) { stream_wait("GPU (its queued work)"); }

// Time marks: an event per mark, recorded on the compute stream (created once, as marks are first asked for).
static cudaEvent_t *g_marks;
static int g_marks_cap;
static double cu_stamp(int i) {
    if (i >= g_marks_cap) {
        int cap = i + 1 > 2 * g_marks_cap ? i + 1 : 2 * g_marks_cap;
        cudaEvent_t *grown = (cudaEvent_t *)realloc(g_marks, sizeof(cudaEvent_t) * (size_t)cap);
        CHECK(grown, "out of memory for time marks");
        g_marks = grown;
        for (int k = g_marks_cap; k < cap; k++) CUDA_CHECK(cudaEventCreate(&g_marks[k]));  // with timing
        g_marks_cap = cap;
    }
    CUDA_CHECK(cudaEventRecord(g_marks[i], g_stream));
    return now_sec();
}
static void cu_stamps(int n, double *t) {
    if (n <= 0) return;
    stream_wait("GPU (its queued work, then the step's action times)");
    for (int i = 0; i < n; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g_marks[0], g_marks[i]));
        t[i] = 1e-3 * ms;
    }
}

// ---- gemm: the one place where row-major meets cuBLAS's column-major ----

static cudaEvent_t *g_ev;  // gemm timing: start/stop event pairs of the gemms since the last read
static int g_ev_n, g_ev_cap, g_timing;

// --precision bf16: the inputs rounded by ops_math.h's bf16_from_f32 (the CPU path's very function)
// into packed device scratch, then cublasGemmEx with bf16 inputs, fp32 compute and fp32 C.
static int g_precision;
static uint16_t *g_bf16[2];
static size_t g_bf16_cap[2];
__global__ void k_to_bf16(uint16_t *dst, const float *src, size_t n, int cols, int ld) {
    GRID_STRIDE(i, n) dst[i] = bf16_from_f32(src[(i / cols) * (size_t)ld + i % cols]);
}
static const uint16_t *to_bf16(int which, const float *src, int rows, int cols, int ld) {
    size_t n = (size_t)rows * cols;
    if (n > g_bf16_cap[which]) {  // stream-ordered: cudaFree may wait for the whole device (see take_staging)
        if (g_bf16[which]) CUDA_CHECK(cudaFreeAsync(g_bf16[which], g_stream));
        CUDA_CHECK(cudaMallocAsync((void **)&g_bf16[which], n * sizeof(uint16_t), g_stream));
        g_bf16_cap[which] = n;
    }
    if (n) {
        k_to_bf16<<<blocks_for(n), THREADS, 0, g_stream>>>(g_bf16[which], src, n, cols, ld);
        LAUNCH_CHECK(k_to_bf16);
    }
    return g_bf16[which];
}
static void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    const uint16_t *a = ta ? to_bf16(0, A, K, M, lda) : to_bf16(0, A, M, K, lda);  // packed: ld = columns stored
    const uint16_t *b = tb ? to_bf16(1, B, N, K, ldb) : to_bf16(1, B, K, N, ldb);
    CUBLAS_CHECK(cublasGemmEx(g_cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                              b, CUDA_R_16BF, tb ? K : N, a, CUDA_R_16BF, ta ? M : K, &beta, C, CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
static int cu_set_precision(int p, char *err, size_t errlen) {
    (void)err; (void)errlen;
    g_precision = p;
    return 0;
}

static void cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
    // A row-major matrix with leading dimension ld IS its transpose in column-major with the same
    // ld. So row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: hand cuBLAS
    // B before A, N before M, each with its own transpose flag unchanged.
    if (g_timing) {
        if (g_ev_n + 2 > g_ev_cap) {
            int cap = g_ev_cap ? 2 * g_ev_cap : 256;
            g_ev = (cudaEvent_t *)realloc(g_ev, sizeof(cudaEvent_t) * (size_t)cap);
            CHECK(g_ev, "out of memory for gemm timing events");
            for (int i = g_ev_cap; i < cap; i++) CUDA_CHECK(cudaEventCreate(&g_ev[i]));
            g_ev_cap = cap;
        }
        CUDA_CHECK(cudaEventRecord(g_ev[g_ev_n++], g_stream));
    }
    if (g_precision == PRECISION_BF16) gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else CUBLAS_CHECK(cublasSgemm(g_cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    if (g_timing) CUDA_CHECK(cudaEventRecord(g_ev[g_ev_n++], g_stream));
}
static void cu_gemm_timing(int on) {
    cu_sync();
    g_timing = on;
    g_ev_n = 0;
}
static double cu_gemm_seconds(void) {
    cu_sync();
    double s = 0;
    for (int i = 0; i + 1 < g_ev_n; i += 2) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g_ev[i], g_ev[i + 1]));
        s += ms * 1e-3;
    }
    g_ev_n = 0;
    return s;
}
static void cu_set_tf32(int on) {
    g_tf32 = on;
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

// ---- element-wise kernels: each thread calls the ops_math.h function the CPU loop calls ----

__global__ void k_fill(float *x, float v, size_t n) { GRID_STRIDE(i, n) x[i] = v; }

__global__ void k_bias_act(float *y, const float *b, size_t n, int cols, int relu) {
    GRID_STRIDE(i, n) y[i] = bias_act_f(y[i], b[i % cols], relu);
}

__global__ void k_relu_backward(float *dz, const float *dy, const float *y, size_t n) {
    GRID_STRIDE(i, n) dz[i] = relu_backward_f(dy[i], y[i]);
}

// The updates raise *bad when a parameter is not finite afterwards (every writer stores the same 1).
__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, AdamArgs a, int *bad) {
    GRID_STRIDE(i, n) {
        adam_update(&p[i], g[i], &m[i], &v[i], a);
        if (!isfinite(p[i])) *bad = 1;
    }
}

__global__ void k_sgd(float *p, const float *g, size_t n, float lr, int *bad) {
    GRID_STRIDE(i, n) {
        p[i] = sgd_update(p[i], g[i], lr);
        if (!isfinite(p[i])) *bad = 1;
    }
}

__global__ void k_axpy(float *y, float a, const float *x, size_t n) { GRID_STRIDE(i, n) y[i] = axpy_f(y[i], a, x[i]); }

__global__ void k_scale(float *x, float a, size_t n) { GRID_STRIDE(i, n) x[i] *= a; }

// *out += the sum of x[i]^2: each block sums its share in double, then adds it in (sm_60+ double atomics).
__global__ void k_sumsq(const float *x, size_t n, double *out) {
    __shared__ double ls[THREADS];
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)x[i] * x[i];
    ls[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) ls[threadIdx.x] += ls[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, ls[0]);
}

// db[cols] += column sums of dz[rows,cols]. A block owns 32 columns: its 32x32 threads each sum a
// stride of rows of one column (reads coalesced along the row), then fold the 32 partial sums in
// shared memory. Deterministic: the same order on every run.
// In bf16 precision dz is rounded to bf16 first, as the CPU does (bias_grad is a product too).
__global__ void k_bias_grad(float *db, const float *dz, int rows, int cols, int round) {
    __shared__ float part[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += 32)
            s += round ? bf16_round(dz[(size_t)r * cols + c]) : dz[(size_t)r * cols + c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = 16; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols) db[c] += part[0][threadIdx.x];
}

// One thread per row: softmax_xent_row, the CPU's function, writes the row's dlogits and loss.
__global__ void k_softmax_xent(const float *logits, const int32_t *labels, int rows, int C, float scale,
                               float *dlogits, float *row_loss, int *row_hit) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int hit = 0;
    row_loss[r] = softmax_xent_row(logits + (size_t)r * C, C, labels[r], scale, dlogits + (size_t)r * C, &hit);
    row_hit[r] = hit;
}

// One block sums the rows' losses (in double, as the CPU does) and hits, added to tally[0] and tally[1]
// (softmax_xent_tally: read by the host once a step).
__global__ void k_sum_rows(const float *row_loss, const int *row_hit, int rows, double *tally) {
    __shared__ double ls[THREADS];
    __shared__ int hs[THREADS];
    double s = 0.0;
    int h = 0;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) { s += row_loss[r]; h += row_hit[r]; }
    ls[threadIdx.x] = s;
    hs[threadIdx.x] = h;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) { ls[threadIdx.x] += ls[threadIdx.x + k]; hs[threadIdx.x] += hs[threadIdx.x + k]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) { tally[0] += ls[0]; tally[1] += hs[0]; }
}

// Synthetic rows (base/data.h's functions, the host's bits): one thread a feature; a warp a row's label,
// its lanes summing the parts of each dot product (synthetic_part) and adding them in the host's tree.
__global__ void k_synthetic_x(float *x, SyntheticBatch b) {
    GRID_STRIDE(i, (size_t)b.rows * b.inputs) {
        uint64_t row = b.first + i / (size_t)b.inputs;
        x[i] = synthetic_feature(rng_key(b.seed, RNG_FEATURES, row), (int)(i % (size_t)b.inputs));
    }
}
__global__ void k_synthetic_y(int32_t *y, const float *x, SyntheticBatch b) {
    int lane = (int)(threadIdx.x % SYNTHETIC_LANES);
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / SYNTHETIC_LANES;
    size_t warps = (size_t)gridDim.x * blockDim.x / SYNTHETIC_LANES;
    for (size_t r = warp; r < (size_t)b.rows; r += warps) {  // (a whole warp takes each row)
        int32_t best = 0;
        float best_v = -INFINITY;
        for (int c = 0; c < b.classes; c++) {
            float s = synthetic_part(x + r * b.inputs, b.teacher + (size_t)c * b.inputs, b.inputs, lane);
            for (int h = SYNTHETIC_LANES / 2; h > 0; h /= 2) s += __shfl_down_sync(0xffffffffu, s, h);
            s = __shfl_sync(0xffffffffu, s, 0);
            if (s > best_v) { best_v = s; best = c; }
        }
        if (lane == 0) y[r] = best;
    }
}

// ---- the Backend functions that launch them ----

void cu_fill(float *x, float v, size_t n) {
    if (!n) return;
    k_fill<<<blocks_for(n), THREADS, 0, g_stream>>>(x, v, n);
    LAUNCH_CHECK(k_fill);
}
static void cu_bias_act(float *y, const float *b, int rows, int cols, int relu) {
    size_t n = (size_t)rows * cols;
    if (!n) return;
    k_bias_act<<<blocks_for(n), THREADS, 0, g_stream>>>(y, b, n, cols, relu);
    LAUNCH_CHECK(k_bias_act);
}
static void cu_relu_backward(float *dz, const float *dy, const float *y, size_t n) {
    if (!n) return;
    k_relu_backward<<<blocks_for(n), THREADS, 0, g_stream>>>(dz, dy, y, n);
    LAUNCH_CHECK(k_relu_backward);
}
static void cu_bias_grad(float *db, const float *dz, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    k_bias_grad<<<(unsigned)((cols + 31) / 32), dim3(32, 32), 0, g_stream>>>(db, dz, rows, cols,
                                                                             g_precision == PRECISION_BF16);
    LAUNCH_CHECK(k_bias_grad);
}
__global__ void k_pack_bf16(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = bf16_from_f32(src[i]);
}
__global__ void k_unpack_bf16(float *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = bf16_to_f32(src[i]);
}
static void cu_to_bf16(uint16_t *dst, const float *src, size_t n) {
    if (!n) return;
    k_pack_bf16<<<blocks_for(n), THREADS, 0, g_stream>>>(dst, src, n);
    LAUNCH_CHECK(k_pack_bf16);
}
static void cu_from_bf16(float *dst, const uint16_t *src, size_t n) {
    if (!n) return;
    k_unpack_bf16<<<blocks_for(n), THREADS, 0, g_stream>>>(dst, src, n);
    LAUNCH_CHECK(k_unpack_bf16);
}
// The rows' losses and hits summed on the device, added to tally (nothing waits).
static void xent_rows(const float *logits, const int32_t *labels, int rows, int C, float scale, float *dlogits,
                      double *tally) {
    if (rows > g_row_cap) {  // stream-ordered, as to_bf16's scratch
        if (g_row_loss) CUDA_CHECK(cudaFreeAsync(g_row_loss, g_stream));
        if (g_row_hit) CUDA_CHECK(cudaFreeAsync(g_row_hit, g_stream));
        CUDA_CHECK(cudaMallocAsync((void **)&g_row_loss, sizeof(float) * (size_t)rows, g_stream));
        CUDA_CHECK(cudaMallocAsync((void **)&g_row_hit, sizeof(int) * (size_t)rows, g_stream));
        g_row_cap = rows;
    }
    k_softmax_xent<<<(unsigned)((rows + THREADS - 1) / THREADS), THREADS, 0, g_stream>>>(
        logits, labels, rows, C, scale, dlogits, g_row_loss, g_row_hit);
    LAUNCH_CHECK(k_softmax_xent);
    k_sum_rows<<<1, THREADS, 0, g_stream>>>(g_row_loss, g_row_hit, rows, tally);
    LAUNCH_CHECK(k_sum_rows);
}
static void cu_softmax_xent_tally(const float *logits, const int32_t *labels, int rows, int C, float scale,
                                  float *dlogits, double *tally) {
    if (rows > 0) xent_rows(logits, labels, rows, C, scale, dlogits, tally);
}
// The labels read the features: x's when made beside them, else a scratch of them (grown as needed).
static void cu_synthetic(float *x, int32_t *y, const SyntheticBatch *b) {
    size_t n = (size_t)b->rows * b->inputs;
    if (!n) return;
    if (!x && y && n > g_synth_cap) {  // stream-ordered, as xent_rows' scratch
        if (g_synth_x) CUDA_CHECK(cudaFreeAsync(g_synth_x, g_stream));
        CUDA_CHECK(cudaMallocAsync((void **)&g_synth_x, sizeof(float) * n, g_stream));
        g_synth_cap = n;
    }
    float *rows = x ? x : g_synth_x;
    if (x || y) {
        k_synthetic_x<<<blocks_for(n), THREADS, 0, g_stream>>>(rows, *b);
        LAUNCH_CHECK(k_synthetic_x);
    }
    if (y) {
        k_synthetic_y<<<blocks_for((size_t)b->rows * SYNTHETIC_LANES), THREADS, 0, g_stream>>>(y, rows, *b);
        LAUNCH_CHECK(k_synthetic_y);
    }
}
// After an update: the flag the kernel raised; when set, the parameters come to the host to find
// the first bad one (the rare path).
static long first_nonfinite_after(const float *p, size_t n) {
    CUDA_CHECK(cudaMemcpyAsync(g_bad_host, g_bad_dev, sizeof(int), cudaMemcpyDeviceToHost, g_stream));
    stream_wait("GPU (its queued work, then the update's check)");
    if (!*g_bad_host) return -1;
    float *h = (float *)xmalloc(n * sizeof(float));
    cu_to_host(h, p, n * sizeof(float));
    long at = 0;
    while ((size_t)at < n && isfinite(h[at])) at++;
    free(h);
    return (size_t)at < n ? at : -1;
}
static long cu_adam(float *p, const float *g, float *m, float *v, size_t n, AdamArgs a) {
    if (!n) return -1;
    CUDA_CHECK(cudaMemsetAsync(g_bad_dev, 0, sizeof(int), g_stream));
    k_adam<<<blocks_for(n), THREADS, 0, g_stream>>>(p, g, m, v, n, a, g_bad_dev);
    LAUNCH_CHECK(k_adam);
    return first_nonfinite_after(p, n);
}
static long cu_sgd(float *p, const float *g, size_t n, float lr) {
    if (!n) return -1;
    CUDA_CHECK(cudaMemsetAsync(g_bad_dev, 0, sizeof(int), g_stream));
    k_sgd<<<blocks_for(n), THREADS, 0, g_stream>>>(p, g, n, lr, g_bad_dev);
    LAUNCH_CHECK(k_sgd);
    return first_nonfinite_after(p, n);
}
static void cu_axpy(float *y, float a, const float *x, size_t n) {
    if (!n) return;
    k_axpy<<<blocks_for(n), THREADS, 0, g_stream>>>(y, a, x, n);
    LAUNCH_CHECK(k_axpy);
}
static void cu_scale(float *x, float a, size_t n) {
    if (!n) return;
    k_scale<<<blocks_for(n), THREADS, 0, g_stream>>>(x, a, n);
    LAUNCH_CHECK(k_scale);
}
static double cu_sumsq(const float *x, size_t n) {  // (softmax_xent's result buffer holds the sum)
    if (!n) return 0.0;
    CUDA_CHECK(cudaMemsetAsync(g_result_dev, 0, sizeof(Result), g_stream));
    k_sumsq<<<blocks_for(n), THREADS, 0, g_stream>>>(x, n, &g_result_dev->loss_sum);
    LAUNCH_CHECK(k_sumsq);
    CUDA_CHECK(cudaMemcpyAsync(g_result_host, g_result_dev, sizeof(Result), cudaMemcpyDeviceToHost, g_stream));
    stream_wait("GPU (its queued work, then the gradient norm)");
    return g_result_host->loss_sum;
}

// Bytes free on this rank's device now (what train's memory check compares its reckoning with).
static double cu_memory_free(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) { cudaGetLastError(); return -1; }
    return (double)free_b;
}

static void cu_describe(char *out, size_t n) {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g_device));
    int ver = 0;
    CUBLAS_CHECK(cublasGetVersion(g_cublas, &ver));
    snprintf(out, n, "cuda:%d %s (%d of %d visible) cuBLAS %d.%d%s", g_device, prop.name, g_device + 1, g_devices,
             ver / 10000, ver / 100 % 100, g_tf32 ? " tf32" : " fp32");
}

static uint64_t cu_device_key(void) { return g_key; }

// The architectures this file was built for ("800,900": nvcc's __CUDA_ARCH_LIST__).
#define ARCH_STR(...) #__VA_ARGS__
#define ARCH_LIST(...) ARCH_STR(__VA_ARGS__)
// A GPU whose architecture none of the built ones serves (an older one: sm_80 machine code runs on
// 8.x, the compute_90 PTX on 9.0 and newer) would fail at the first kernel: refused here with the
// fix, so --device auto takes the CPU and --device cuda says why. It also loads every kernel of this
// file now: under lazy loading (CUDA's default since 12.2) a kernel's first launch waits for the whole
// device to drain, NCCL's kernels of a send in flight included. 0, or -1 with err.
static int check_kernel_image(char *err, size_t errlen) {
    const void *kernels[] = {(const void *)k_to_bf16,   (const void *)k_fill,         (const void *)k_bias_act,
                             (const void *)k_relu_backward, (const void *)k_adam,     (const void *)k_sgd,
                             (const void *)k_axpy,      (const void *)k_scale,        (const void *)k_sumsq,
                             (const void *)k_bias_grad,
                             (const void *)k_softmax_xent, (const void *)k_sum_rows, (const void *)k_pack_bf16,
                             (const void *)k_unpack_bf16, (const void *)k_synthetic_x, (const void *)k_synthetic_y};
    cudaFuncAttributes fa;
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < sizeof kernels / sizeof *kernels && e == cudaSuccess; i++)
        e = cudaFuncGetAttributes(&fa, kernels[i]);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    cudaDeviceProp prop;
    int arch = e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion ||
               e == cudaErrorInvalidKernelImage;
    if (!arch || cudaGetDeviceProperties(&prop, g_device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "device %d: loading micropp's kernels: %s", g_device, cudaGetErrorString(e));
        return -1;
    }
    snprintf(err, errlen,
             "device %d (%s) is compute capability %d.%d, and this micropp's kernels were built for %s (%s): rebuild "
             "for it with make NVCC_ARCH='-gencode arch=compute_%d%d,code=sm_%d%d'",
             g_device, prop.name, prop.major, prop.minor, ARCH_LIST(__CUDA_ARCH_LIST__), cudaGetErrorName(e),
             prop.major, prop.minor, prop.major, prop.minor);
    return -1;
}

static Backend g_backend;
int cuda_opened(void) { return g_backend.name != NULL; }

// CUDA_DEVICE_MAX_CONNECTIONS: the hardware work queues the streams of this process share (8 by
// default, 32 at most). The NCCL transport runs about 18 streams (the compute stream, 4 channels, the
// tensor-parallel group's, and NCCL's two per communicator), and two kernels that must progress at once
// must not wait behind each other in one queue (NCCL issues 783, 522). Read when CUDA starts: set before
// the first CUDA call, to 32 unless the environment asks for as many; a lower value (Megatron's 1) is
// overridden, since this process runs one compute stream and loses nothing: once the device is open,
// rank 0 says so in one line (say_device_queues; on a machine without a GPU nothing is said).
#define CUDA_QUEUES 32
static char g_queues_was[32];  // the value overridden ("": none)
static void set_device_queues(void) {
    const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (v && atoi(v) >= CUDA_QUEUES) return;
    if (v) snprintf(g_queues_was, sizeof g_queues_was, "%s", v);
    char n[16];
    snprintf(n, sizeof n, "%d", CUDA_QUEUES);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", n, 1);
}
static void say_device_queues(void) {
    if (g_queues_was[0] && g_rank == 0)
        fprintf(stderr, "micropp: CUDA_DEVICE_MAX_CONNECTIONS was '%s', now %d: the NCCL transport's streams must "
                "not share hardware queues (docs/gpus.md)\n", g_queues_was, CUDA_QUEUES);
    g_queues_was[0] = 0;  // (once)
}

extern "C" const Backend *backend_cuda_open(int local_rank, char *err, size_t errlen) {
    if (g_backend.name) return &g_backend;
    set_device_queues();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {  // no driver, no device, driver too old: the driver's own words
        snprintf(err, errlen, "%s", cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    if (n <= 0) { snprintf(err, errlen, "cudaGetDeviceCount found no device"); return NULL; }
    g_devices = n;
    g_device = local_rank % n;
    e = cudaSetDevice(g_device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);  // creates the context
    if (e != cudaSuccess) {
        snprintf(err, errlen, "device %d: %s", g_device, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    if (check_kernel_image(err, errlen)) return NULL;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g_device));
    g_key = 1469598103934665603ULL;  // FNV-1a over the UUID: the same GPU whatever CUDA_VISIBLE_DEVICES says
    for (int i = 0; i < 16; i++) g_key = (g_key ^ (unsigned char)prop.uuid.bytes[i]) * 1099511628211ULL;
    cublasStatus_t s = cublasCreate(&g_cublas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "device %d: cublasCreate: %s", g_device, cublasGetStatusString(s));
        return NULL;
    }
    CUBLAS_CHECK(cublasSetStream(g_cublas, g_stream));
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));  // fp32 unless --tf32
    CUDA_CHECK(cudaMallocHost(&g_result_host, sizeof(Result)));
    CUDA_CHECK(cudaMalloc(&g_result_dev, sizeof(Result)));
    CUDA_CHECK(cudaMallocHost(&g_bad_host, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&g_bad_dev, sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&g_bounce, BOUNCE_BYTES));
    Backend b = {};
    b.name = "cuda"; b.on_host = 0; b.device_count = n;
    b.alloc = cu_alloc; b.free = cu_free; b.to_device = cu_to_device; b.to_host = cu_to_host; b.copy = cu_copy;
    b.to_device_queued = cu_to_device_queued; b.fence_new = cu_fence_new; b.fence_record = cu_fence_record;
    b.fence_wait = cu_fence_wait; b.fence_free = cu_fence_free;
    b.fill = cu_fill; b.gemm = cu_gemm; b.bias_act = cu_bias_act; b.relu_backward = cu_relu_backward;
    b.bias_grad = cu_bias_grad; b.synthetic = cu_synthetic;
    b.softmax_xent_tally = cu_softmax_xent_tally; b.adam = cu_adam; b.sgd = cu_sgd;
    b.axpy = cu_axpy; b.scale = cu_scale; b.sumsq = cu_sumsq;
    b.sync = cu_sync; b.stamp = cu_stamp; b.stamps = cu_stamps;
    b.to_bf16 = cu_to_bf16; b.from_bf16 = cu_from_bf16;
    b.alloc_host = cu_alloc_host; b.free_host = cu_free_host; b.set_tf32 = cu_set_tf32;
    b.set_precision = cu_set_precision;
    b.gemm_timing = cu_gemm_timing; b.gemm_seconds = cu_gemm_seconds; b.describe = cu_describe;
    b.memory_free = cu_memory_free; b.device_key = cu_device_key;
    g_backend = b;
    say_device_queues();
    return &g_backend;
}

// Everything backend_cuda_open and the calls since made, freed in the reverse order: the stream-ordered
// scratch on the stream, whose drain the host waits for (under the wire's bound), then the buffers,
// the events, the cuBLAS handle (its workspace) and last the stream. The scratch's pool keeps no
// memory past it (trimmed), so a leak check (compute-sanitizer --leak-check full) lists nothing.
extern "C" void backend_cuda_close(void) {
    if (!g_backend.name) return;
    for (int i = 0; i < 2; i++)
        if (g_bf16[i]) CUDA_CHECK(cudaFreeAsync(g_bf16[i], g_stream));
    if (g_row_loss) CUDA_CHECK(cudaFreeAsync(g_row_loss, g_stream));
    if (g_row_hit) CUDA_CHECK(cudaFreeAsync(g_row_hit, g_stream));
    if (g_synth_x) CUDA_CHECK(cudaFreeAsync(g_synth_x, g_stream));
    stream_wait("GPU (its queued work, then the backend's scratch freed)");
    cu_free(g_result_dev);
    cu_free(g_bad_dev);
    cu_free_host(g_result_host);
    cu_free_host(g_bad_host);
    cu_free_host(g_bounce);
    for (int i = 0; i < g_marks_cap; i++) CUDA_CHECK(cudaEventDestroy(g_marks[i]));
    for (int i = 0; i < g_ev_cap; i++) CUDA_CHECK(cudaEventDestroy(g_ev[i]));
    free(g_marks);
    free(g_ev);
    host_call("cublasDestroy");  // (it may synchronise the device)
    CUBLAS_CHECK(cublasDestroy(g_cublas));
    host_call(NULL);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, g_device) == cudaSuccess) CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    cudaGetLastError();
    g_bf16[0] = g_bf16[1] = NULL;
    g_bf16_cap[0] = g_bf16_cap[1] = 0;
    g_row_loss = NULL;
    g_row_hit = NULL;
    g_row_cap = 0;
    g_synth_x = NULL;
    g_synth_cap = 0;
    g_result_host = g_result_dev = NULL;
    g_bad_host = g_bad_dev = NULL;
    g_bounce = NULL;
    g_marks = g_ev = NULL;
    g_marks_cap = g_ev_cap = g_ev_n = g_timing = 0;
    g_cublas = NULL;
    g_stream = NULL;
    memset(&g_backend, 0, sizeof g_backend);
}
