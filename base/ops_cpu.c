// base/ops_cpu.c: the CPU backend: OpenBLAS sgemm for the fp32 matrix products (oneDNN for bf16, in
// ops_onednn.c), plain loops over the element-wise functions of ops_math.h for everything else.
#include <pmmintrin.h>
#include <xmmintrin.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>
#include "base/det.h"
#include "base/ops.h"
#include "base/util.h"

static void *cpu_alloc(size_t bytes) {
    // 64-byte aligned, zero-filled: gemm and the vector loops like aligned rows.
    size_t n = (bytes + 63) / 64 * 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) fatal("out of memory allocating %zu bytes", bytes);
    memset(p, 0, n);
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_memcpy(void *dst, const void *src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }

// The host's copies are done when they return: a fence has always passed, so one address stands for all.
static char cpu_fence;
static Fence *cpu_fence_new(void) { return (Fence *)&cpu_fence; }
static void cpu_fence_nop(Fence *f) { (void)f; }
static void cpu_fence_wait(Fence *f, const char *what) { (void)f; (void)what; }

static void cpu_fill(float *x, float v, size_t n) { for (size_t i = 0; i < n; i++) x[i] = v; }

static int gemm_timing_on;
static double gemm_s;  // seconds inside the gemm since the last cpu_gemm_seconds()
static int precision;  // PRECISION_*: fp32 on OpenBLAS, bf16 on oneDNN
static int det_rows;  // --deterministic: base/det.c's products on chunks of det_rows rows instead (0: off)

void cpu_sgemm_fp32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}
static void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    double t0 = gemm_timing_on ? now_sec() : 0;
    if (det_rows) det_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, det_rows, precision == PRECISION_BF16);
    else if (precision == PRECISION_BF16) onednn_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else cpu_sgemm_fp32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (gemm_timing_on) gemm_s += now_sec() - t0;
}
static int cpu_set_precision(int p, char *err, size_t errlen) {
    if (p == PRECISION_BF16 && !onednn_available(err, errlen)) return -1;
    precision = p;
    return 0;
}
static int cpu_set_deterministic(int chunk, char *err, size_t errlen) {
    (void)err; (void)errlen;
    det_rows = chunk;
    return 0;
}
static void cpu_gemm_timing(int on) { gemm_timing_on = on; gemm_s = 0; }
static double cpu_gemm_seconds(void) { double s = gemm_s; gemm_s = 0; return s; }

static void cpu_bias_act(float *y, const float *b, int rows, int cols, int relu) {
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) row[c] = bias_act_f(row[c], b[c], relu);
    }
}

static void cpu_relu_backward(float *dz, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dz[i] = relu_backward_f(dy[i], y[i]);
}

static void cpu_bias_grad(float *db, const float *dz, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const float *row = dz + (size_t)r * cols;
        if (precision == PRECISION_BF16) for (int c = 0; c < cols; c++) db[c] += bf16_round(row[c]);
        else for (int c = 0; c < cols; c++) db[c] += row[c];
    }
}
static void cpu_to_bf16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}
static void cpu_from_bf16(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

static double cpu_softmax_xent(const float *logits, const int32_t *labels, int rows, int C,
                               float scale, float *dlogits, int *correct) {
    double sum = 0.0;
    for (int r = 0; r < rows; r++) {
        int hit = 0;
        double loss = softmax_xent_row(logits + (size_t)r * C, C, labels[r], scale, dlogits + (size_t)r * C, &hit);
        sum += det_rows ? det_loss_row(loss) : loss;  // --deterministic: sums of rows exact in any order
        *correct += hit;
    }
    return sum;
}
static void cpu_softmax_xent_tally(const float *logits, const int32_t *labels, int rows, int C, float scale,
                                   float *dlogits, double *tally) {
    int correct = 0;
    tally[0] += cpu_softmax_xent(logits, labels, rows, C, scale, dlogits, &correct);
    tally[1] += correct;
}

static long first_nonfinite(const float *p, size_t n) {
    for (size_t i = 0; i < n; i++) if (!isfinite(p[i])) return (long)i;
    return -1;
}
static long cpu_adam(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                     AdamArgs a) {
    int bad = 0;  // an OR over the loop keeps it vectorised; the index is looked for only when set
    for (size_t i = 0; i < n; i++) { adam_update(&p[i], g[i], &m[i], &v[i], a); bad |= !isfinite(p[i]); }
    return bad ? first_nonfinite(p, n) : -1;
}
static long cpu_sgd(float *p, const float *g, size_t n, float lr) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) { p[i] = sgd_update(p[i], g[i], lr); bad |= !isfinite(p[i]); }
    return bad ? first_nonfinite(p, n) : -1;
}
static void cpu_axpy(float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = axpy_f(y[i], a, x[i]);
}
static void cpu_scale(float *x, float a, size_t n) { for (size_t i = 0; i < n; i++) x[i] *= a; }
static double cpu_sumsq(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}
static void cpu_sync(void) {}
static void cpu_set_tf32(int on) { CHECK(!on, "TF32 asked of the cpu backend (validation should have refused it)"); }
static void cpu_describe(char *out, size_t n) { snprintf(out, n, "cpu"); }

// The host's work is done when it returns: a mark is the clock.
static double *cpu_marks;
static int cpu_marks_cap;
static double cpu_stamp(int i) {
    if (i >= cpu_marks_cap) {
        int cap = i + 1 > 2 * cpu_marks_cap ? i + 1 : 2 * cpu_marks_cap;
        double *grown = realloc(cpu_marks, sizeof(double) * (size_t)cap);
        CHECK(grown, "out of memory for time marks");
        cpu_marks = grown;
        cpu_marks_cap = cap;
    }
    return cpu_marks[i] = now_sec();
}
static void cpu_stamps(int n, double *t) {
    for (int i = 0; i < n; i++) t[i] = cpu_marks[i] - cpu_marks[0];
}

const Backend backend_cpu = {
    .name = "cpu", .on_host = 1,
    .alloc = cpu_alloc, .free = cpu_free,
    .to_device = cpu_memcpy, .to_host = cpu_memcpy, .copy = cpu_memcpy, .to_device_queued = cpu_memcpy,
    .fence_new = cpu_fence_new, .fence_record = cpu_fence_nop, .fence_wait = cpu_fence_wait,
    .fence_free = cpu_fence_nop,
    .fill = cpu_fill, .gemm = cpu_gemm, .bias_act = cpu_bias_act,
    .relu_backward = cpu_relu_backward, .bias_grad = cpu_bias_grad,
    .to_bf16 = cpu_to_bf16, .from_bf16 = cpu_from_bf16,
    .softmax_xent_tally = cpu_softmax_xent_tally, .synthetic = data_synthetic_rows,
    .adam = cpu_adam, .sgd = cpu_sgd,
    .axpy = cpu_axpy, .scale = cpu_scale, .sumsq = cpu_sumsq,
    .sync = cpu_sync, .stamp = cpu_stamp, .stamps = cpu_stamps,
    .alloc_host = cpu_alloc, .free_host = cpu_free, .set_tf32 = cpu_set_tf32,
    .set_precision = cpu_set_precision, .set_deterministic = cpu_set_deterministic,
    .gemm_timing = cpu_gemm_timing, .gemm_seconds = cpu_gemm_seconds, .describe = cpu_describe,
};

void cpu_flush_subnormals(void) { _mm_setcsr(_mm_getcsr() | _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON); }

void blas_set_threads(int threads) {
    openblas_set_num_threads(threads);
    onednn_set_threads(threads);  // the bf16 products follow --threads too
}

int blas_max_threads(void) {
    // openblas_get_config() ends with MAX_THREADS=N: the most threads the library was built for.
    const char *m = strstr(openblas_get_config(), "MAX_THREADS=");
    return m ? atoi(m + strlen("MAX_THREADS=")) : 1 << 20;
}

void blas_describe(char *out, size_t n) {
    // openblas_get_config() reads like "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64".
    char version[32] = "?";
    sscanf(openblas_get_config(), "OpenBLAS %31s", version);
    snprintf(out, n, "openblas %s core=%s threads=%d", version, openblas_get_corename(),
             openblas_get_num_threads());
}

// OpenBLAS picks its kernel when it loads. On virtual machines it may not recognise the CPU and fall
// back to an old SSE3 kernel ("Prescott"), 3-4x slower. When the user did not choose a core and the
// chosen one is weaker than what the CPU supports, re-run ourselves with OPENBLAS_CORETYPE set.
void blas_pick_kernel(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("MICROPP_BLAS_PICKED")) return;
    static const char *const good[] = {"Haswell", "Zen", "SkylakeX", "CooperLake", "SapphireRapids", "Excavator"};
    const char *core = openblas_get_corename();
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) if (!strcasecmp(core, good[i])) return;
    __builtin_cpu_init();
    const char *want = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : NULL;
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("MICROPP_BLAS_PICKED", core, 1);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with the kernel we have
}
