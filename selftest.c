// selftest.c: `micropp selftest`: every backend operation on random data, run on the device under
// test and on a reference, with a table of the worst errors; then one training step of a small
// model on both. --device cuda checks the CUDA backend against the CPU one; --device cpu checks the
// CPU backend against naive loops in double precision, so the check is real on any machine.
// Exit 0 when every error is within its tolerance, 1 when one is not, 2 on bad input or no GPU.
#include <math.h>
#include <string.h>
#include "comms.h"
#include "base/config.h"
#include "base/data.h"
#include "model.h"
#include "base/ops.h"
#include "commands.h"
#include "comms/devcomm.h"
#include "p2p.h"
#include "base/util.h"

typedef struct {
    int device;
    int tf32, emulate_tf32, nccl;
    int64_t seed;
    double tol_scale, timeout;
} SelftestConfig;

#define S(field) offsetof(SelftestConfig, field)
static const Option selftest_options[] = {
    {"device", 0, OPT_CHOICE, S(device), DEVICE_CHOICES, 0, 0, "DEV",
     "cuda: the CUDA backend against the CPU one; cpu: the CPU backend against naive loops; auto: cuda when a GPU is "
     "visible",
     0},
    {"tf32", 0, OPT_BOOL, S(tf32), 0, 0, 0, 0, "cuda: cuBLAS with TF32 (gemm tolerances widen to match)", 0},
    {"emulate-tf32", 0, OPT_BOOL, S(emulate_tf32), 0, 0, 0, 0,
     "cpu: cut every gemm input to TF32 as the tensor cores read it, to check --tf32's tolerances without a GPU", 0},
    {"nccl", 0, OPT_BOOL, S(nccl), 0, 0, 0, 0,
     "cuda: also NCCL on one rank (init, the four splits, a grouped send and receive to itself on each, teardown; "
     "a group's all-reduce; the watchdog's abort)",
     0},
    {"seed", 's', OPT_INT, S(seed), 0, 0, 9.0e15, "S", "seed of the random inputs", 0},
    {"tol-scale", 0, OPT_FLOAT, S(tol_scale), 0, 0, 1e6, "F",
     "multiply every tolerance by F (0: demand bitwise equality)", 0},
    {"timeout", 0, OPT_FLOAT, S(timeout), 0, 0, 1e7, "S",
     "watchdog: a wait for the GPU (or a call into the driver or NCCL) longer than S seconds ends selftest with "
     "one line naming it, exit 1 (0: wait forever; else at least 1)",
     0},
    {0},
};
#undef S

// ---- the reference of --device cpu: naive loops, accumulating in double ----

static void naive_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (double)(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            float *c = &C[(size_t)i * ldc + j];
            *c = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *c));  // beta 0: C is not read
        }
}
static void naive_bias_act(float *y, const float *b, int rows, int cols, int relu) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float v = y[(size_t)r * cols + c] + b[c];
            y[(size_t)r * cols + c] = relu && !(v > 0) ? 0.0f : v;
        }
}
static void naive_relu_backward(float *dz, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dz[i] = y[i] > 0 ? dy[i] : 0.0f;
}
static void naive_bias_grad(float *db, const float *dz, int rows, int cols) {
    for (int c = 0; c < cols; c++) {
        double s = 0;
        for (int r = 0; r < rows; r++) s += dz[(size_t)r * cols + c];
        db[c] = (float)(db[c] + s);
    }
}
static double naive_softmax_xent(const float *logits, const int32_t *labels, int rows, int C, float scale,
                                 float *dlogits, int *correct) {
    double total = 0;
    double *x = xmalloc(sizeof(double) * (size_t)C);
    for (int r = 0; r < rows; r++) {
        int arg = 0;
        for (int j = 0; j < C; j++) {
            x[j] = logits[(size_t)r * C + j];
            if (x[j] > x[arg]) arg = j;
        }
        double z = 0;
        for (int j = 0; j < C; j++) z += exp(x[j] - x[arg]);
        // cppcheck-suppress invalidFunctionArg ; z >= 1: C >= 1, and the max's own term is exp(0) = 1
        double lse = x[arg] + log(z);
        total += lse - x[labels[r]];
        *correct += arg == labels[r];
        for (int j = 0; j < C; j++) dlogits[(size_t)r * C + j] = (float)((exp(x[j] - lse) - (j == labels[r])) * scale);
    }
    free(x);
    return total;
}
static long naive_first_nonfinite(const float *p, size_t n) {
    for (size_t i = 0; i < n; i++) if (!isfinite(p[i])) return (long)i;
    return -1;
}
static void naive_softmax_xent_tally(const float *logits, const int32_t *labels, int rows, int C, float scale,
                                     float *dlogits, double *tally) {
    int correct = 0;
    tally[0] += naive_softmax_xent(logits, labels, rows, C, scale, dlogits, &correct);
    tally[1] += correct;
}
static long naive_adam(float *p, const float *g, float *m, float *v, size_t n, AdamArgs a) {
    for (size_t i = 0; i < n; i++) {
        double mi = (double)a.beta1 * m[i] + (1.0 - a.beta1) * g[i];
        double vi = (double)a.beta2 * v[i] + (1.0 - a.beta2) * (double)g[i] * g[i];
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)(p[i] - (double)a.lr / a.bias_correction1 * mi / (sqrt(vi) / a.bias_correction2_sqrt + a.eps));
    }
    return naive_first_nonfinite(p, n);
}
static long naive_sgd(float *p, const float *g, size_t n, float lr) {
    for (size_t i = 0; i < n; i++) p[i] = (float)(p[i] - (double)lr * g[i]);
    return naive_first_nonfinite(p, n);
}
static void naive_axpy(float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = (float)(y[i] + (double)a * x[i]);
}
static void naive_scale(float *x, float a, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * a);
}
static double naive_sumsq(const float *x, size_t n) {
    double s = 0;
    for (size_t i = n; i-- > 0;) s += (double)x[i] * x[i];  // (the other order: a sum the backend did not take)
    return s;
}
static void naive_fill(float *x, float v, size_t n) { for (size_t i = 0; i < n; i++) x[i] = v; }
static void naive_describe(char *out, size_t n) { snprintf(out, n, "naive loops in double precision"); }

// ---- --emulate-tf32: the CPU backend with every fp32 gemm input cut to TF32 (10 mantissa bits), for
// --tf32's tolerances on a machine without a GPU. Truncated, the worse of the two ways: the tensor
// cores read an fp32 operand's top 19 bits (cuBLAS may round to nearest first, which errs half as much).
// In bf16 precision the inputs are bf16 already (cublasGemmEx ignores the TF32 mode): left alone ----

static int tf32_precision;  // PRECISION_* set through the emulated backend
static float tf32_round(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;  // Inf, NaN
    return f32_from_bits(u & 0xffffe000u);
}
static int tf32_set_precision(int precision, char *err, size_t errlen) {
    int rc = backend_cpu.set_precision(precision, err, errlen);
    if (!rc) tf32_precision = precision;
    return rc;
}
static float *tf32_copy(const float *x, int rows, int ld) {
    size_t n = (size_t)rows * ld;
    float *y = xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) y[i] = tf32_round(x[i]);
    return y;
}
static void tf32_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    if (tf32_precision == PRECISION_BF16) {
        backend_cpu.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    float *a = tf32_copy(A, ta ? K : M, lda), *b = tf32_copy(B, tb ? N : K, ldb);
    backend_cpu.gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
    free(a);
    free(b);
}
static void tf32_describe(char *out, size_t n) { snprintf(out, n, "cpu, gemm inputs cut to TF32 (emulated)"); }

static Backend naive_backend(void) {
    Backend b = backend_cpu;  // its host memory functions; every operation replaced
    b.name = "naive";
    b.gemm = naive_gemm; b.bias_act = naive_bias_act; b.relu_backward = naive_relu_backward;
    b.bias_grad = naive_bias_grad; b.adam = naive_adam;
    b.softmax_xent_tally = naive_softmax_xent_tally;
    b.sgd = naive_sgd; b.axpy = naive_axpy; b.scale = naive_scale; b.sumsq = naive_sumsq; b.fill = naive_fill;
    b.describe = naive_describe;
    return b;
}

// ---- the comparison table ----

typedef struct {
    const Backend *dut, *ref;  // device under test, reference
    uint64_t seed;
    double scale;              // --tol-scale
    int checks, failed;
} Test;

// Reports one row: the worst |got - want| and the same divided by max |want| (the "error"); the
// row passes when the error is within tol (times --tol-scale).
static void report(Test *t, const char *op, const char *shape, const float *got, const float *want, size_t n,
                   double tol) {
    double diff = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= diff)) diff = d;  // a NaN sticks
        if (fabs((double)want[i]) > mag) mag = fabs((double)want[i]);
    }
    double err = mag > 0 ? diff / mag : diff;
    int ok = err <= tol * t->scale;
    t->checks++;
    t->failed += !ok;
    printf("%-34s %-16s %11.3g %11.3g %10.1g  %s\n", op, shape, diff, err, tol * t->scale, ok ? "ok" : "FAIL");
}

static void rand_fill(float *x, size_t n, uint64_t key, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(key, i);
}
// Host array of n random floats in [lo, hi), from stream `stream` of the test's seed.
static float *rnd(Test *t, int stream, size_t n, float lo, float hi) {
    float *x = xmalloc(sizeof(float) * (n ? n : 1));
    rand_fill(x, n, rng_key(t->seed, 100, (uint64_t)stream), lo, hi);
    return x;
}
static float *up(const Backend *be, const float *h, size_t n) {
    float *d = be->alloc(sizeof(float) * n);
    be->to_device(d, h, sizeof(float) * n);
    return d;
}
static float *down(const Backend *be, const float *d, size_t n) {
    float *h = xmalloc(sizeof(float) * (n ? n : 1));
    be->to_host(h, d, sizeof(float) * n);
    return h;
}

static void test_memory(Test *t) {
    size_t n = 10007;
    float *zeros = xcalloc(n, sizeof(float)), *x = rnd(t, 1, n, -1, 1);
    const Backend *be = t->dut;
    float *d = be->alloc(sizeof(float) * n), *h = down(be, d, n);
    report(t, "alloc is zero-filled", "10007", h, zeros, n, 0);
    free(h);
    float *e = be->alloc(sizeof(float) * n);
    be->to_device(d, x, sizeof(float) * n);
    be->copy(e, d, sizeof(float) * n);
    h = down(be, e, n);
    report(t, "to_device, copy, to_host", "10007", h, x, n, 0);
    free(h);
    float *pinned = be->alloc_host(sizeof(float) * n);
    report(t, "alloc_host is zero-filled", "10007", pinned, zeros, n, 0);
    be->to_host(pinned, d, sizeof(float) * n);
    report(t, "to_host into alloc_host memory", "10007", pinned, x, n, 0);
    // The training path's input ring (train/executor.c): a copy queued from pinned memory, its fence
    // waited for, then the source overwritten: the device holds what was there before.
    Fence *f = be->fence_new();
    be->fill(e, -1.0f, n);  // (e held x already)
    be->to_device_queued(e, pinned, sizeof(float) * n);
    be->fence_record(f);
    be->fence_wait(f, "GPU (selftest's queued copy)");
    memset(pinned, 0, sizeof(float) * n);
    h = down(be, e, n);
    report(t, "to_device_queued, fence", "10007", h, x, n, 0);
    free(h);
    be->fence_free(f);
    be->free_host(pinned);
    be->fill(e, 0.375f, n);
    for (size_t i = 0; i < n; i++) zeros[i] = 0.375f;
    h = down(be, e, n);
    report(t, "fill", "10007", h, zeros, n, 0);
    free(h);
    be->free(d); be->free(e);
    free(zeros); free(x);
}

typedef struct { const char *name; int ta, tb, M, N, K, pad; float alpha, beta; } GemmCase;

static void test_gemm(Test *t, double tol) {
    // The model's shapes (rows=128, H=256, C=10) and odd ones: both transposed, padded leading
    // dimensions with alpha and beta, sizes no tile divides.
    static const GemmCase cases[] = {
        {"gemm NT (layer forward)", 0, 1, 128, 256, 256, 0, 1.0f, 0.0f},
        {"gemm TN (weight grad, +=)", 1, 0, 256, 256, 128, 0, 1.0f, 1.0f},
        {"gemm NN (input grad)", 0, 0, 128, 256, 256, 0, 1.0f, 0.0f},
        {"gemm NT (head forward)", 0, 1, 128, 10, 256, 0, 1.0f, 0.0f},
        {"gemm TN (head weight grad)", 1, 0, 10, 256, 128, 0, 1.0f, 1.0f},
        {"gemm NN (head input grad)", 0, 0, 128, 256, 10, 0, 1.0f, 0.0f},
        {"gemm TT (odd sizes)", 1, 1, 37, 53, 29, 0, 1.0f, 0.0f},
        {"gemm NN padded ld, a=.5 b=.25", 0, 0, 37, 53, 29, 5, 0.5f, 0.25f},
        {"gemm TN padded ld, a=2 b=-1", 1, 0, 61, 17, 45, 3, 2.0f, -1.0f},
        {"gemm NT padded ld, a=1 b=1", 0, 1, 1, 33, 70, 7, 1.0f, 1.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const GemmCase *g = &cases[c];
        int ar = g->ta ? g->K : g->M, ac = g->ta ? g->M : g->K;  // A as stored: ar x ac row-major
        int br = g->tb ? g->N : g->K, bc = g->tb ? g->K : g->N;
        int lda = ac + g->pad, ldb = bc + g->pad, ldc = g->N + g->pad;
        size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)g->M * ldc;
        float *A = rnd(t, 10 + (int)c, na, -1, 1), *B = rnd(t, 30 + (int)c, nb, -1, 1),
              *C = rnd(t, 50 + (int)c, nc, -1, 1);
        float *out[2];
        for (int k = 0; k < 2; k++) {
            const Backend *be = k ? t->ref : t->dut;
            float *dA = up(be, A, na), *dB = up(be, B, nb), *dC = up(be, C, nc);
            be->gemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, dA, lda, dB, ldb, g->beta, dC, ldc);
            out[k] = down(be, dC, nc);  // the padding columns too: they must be left alone
            be->free(dA); be->free(dB); be->free(dC);
        }
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%dx%d", g->M, g->N, g->K);
        report(t, g->name, shape, out[0], out[1], nc, tol);
        free(out[0]); free(out[1]); free(A); free(B); free(C);
    }
    // Gemm timing: a timed gemm must take some time.
    const Backend *be = t->dut;
    size_t n = 256 * 256;
    float *A = rnd(t, 70, n, -1, 1), *dA = up(be, A, n), *dC = be->alloc(sizeof(float) * n);
    be->gemm_timing(1);
    be->gemm(0, 0, 256, 256, 256, 1.0f, dA, 256, dA, 256, 0.0f, dC, 256);
    double s = be->gemm_seconds();
    be->gemm_timing(0);
    t->checks++;
    t->failed += !(s > 0 && s < 10);
    printf("%-34s %-16s %11.3g %11s %10s  %s\n", "gemm timing (seconds)", "256x256x256", s, "", "> 0",
           s > 0 && s < 10 ? "ok" : "FAIL");
    be->free(dA); be->free(dC); free(A);
}

static void test_elementwise(Test *t) {
    const int rows = 67, cols = 77;
    size_t n = (size_t)rows * cols;
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", rows, cols);
    float *y = rnd(t, 80, n, -1, 1), *b = rnd(t, 81, (size_t)cols, -0.5f, 0.5f), *dy = rnd(t, 82, n, -1, 1);
    float *db0 = rnd(t, 83, (size_t)cols, -1, 1);
    float *out[2][6], sumsq[2];
    for (int k = 0; k < 2; k++) {
        const Backend *be = k ? t->ref : t->dut;
        float *dY = up(be, y, n), *dB = up(be, b, (size_t)cols), *dDY = up(be, dy, n),
              *dZ = be->alloc(sizeof(float) * n);
        float *dY2 = up(be, y, n), *dDB = up(be, db0, (size_t)cols);
        be->bias_act(dY, dB, rows, cols, 1);
        out[k][0] = down(be, dY, n);
        be->bias_act(dY2, dB, rows, cols, 0);
        out[k][1] = down(be, dY2, n);
        be->relu_backward(dZ, dDY, dY, n);
        out[k][2] = down(be, dZ, n);
        be->relu_backward(dDY, dDY, dY, n);  // in place, as the model runs it
        out[k][3] = down(be, dDY, n);
        be->bias_grad(dDB, dY2, rows, cols);
        out[k][4] = down(be, dDB, (size_t)cols);
        be->axpy(dY2, -0.75f, dY, n);
        be->scale(dY2, 1.5f, n);
        out[k][5] = down(be, dY2, n);
        sumsq[k] = (float)be->sumsq(dY2, n);
        be->free(dY); be->free(dB); be->free(dDY); be->free(dZ); be->free(dY2); be->free(dDB);
    }
    report(t, "bias_act (ReLU)", shape, out[0][0], out[1][0], n, 1e-6);
    report(t, "bias_act (identity)", shape, out[0][1], out[1][1], n, 1e-6);
    report(t, "relu_backward", shape, out[0][2], out[1][2], n, 1e-6);
    report(t, "relu_backward (in place)", shape, out[0][3], out[1][3], n, 1e-6);
    report(t, "bias_grad (+= column sums)", shape, out[0][4], out[1][4], (size_t)cols, 1e-5);
    report(t, "axpy then scale", shape, out[0][5], out[1][5], n, 1e-6);
    report(t, "sumsq (the sum of squares)", shape, &sumsq[0], &sumsq[1], 1, 1e-6);
    for (int k = 0; k < 2; k++) for (int i = 0; i < 6; i++) free(out[k][i]);
    free(y); free(b); free(dy); free(db0);
}

static void test_softmax(Test *t) {
    const int rows = 300, C = 13;
    size_t n = (size_t)rows * C;
    float *logits = rnd(t, 90, n, -4, 4);
    int32_t *labels = xmalloc(sizeof(int32_t) * rows);
    for (int r = 0; r < rows; r++) labels[r] = (int32_t)(rng_uniform(rng_key(t->seed, 91, 0), (uint64_t)r) * C);
    float *dl[2], *dl_alias[2], loss[2], hits[2], tallied[2][2];
    for (int k = 0; k < 2; k++) {
        const Backend *be = k ? t->ref : t->dut;
        float *dL = up(be, logits, n), *dD = be->alloc(sizeof(float) * n);
        int32_t *dLab = be->alloc(sizeof(int32_t) * rows);
        be->to_device(dLab, labels, sizeof(int32_t) * rows);
        double *tally = be->alloc(2 * sizeof(double)), got[2];  // one call into a zeroed tally ...
        be->softmax_xent_tally(dL, dLab, rows, C, 1.0f / rows, dD, tally);
        be->to_host(got, tally, sizeof got);
        loss[k] = (float)got[0];
        hits[k] = (float)got[1];
        dl[k] = down(be, dD, n);
        be->softmax_xent_tally(dL, dLab, rows, C, 1.0f / rows, dD, tally);  // ... then a second one added
        be->to_host(got, tally, sizeof got);
        tallied[k][0] = (float)got[0];
        tallied[k][1] = (float)got[1];
        be->softmax_xent_tally(dL, dLab, rows, C, 1.0f / rows, dL, tally);  // dlogits over the logits
        be->free(tally);
        dl_alias[k] = down(be, dL, n);
        be->free(dL); be->free(dD); be->free(dLab);
    }
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", rows, C);
    report(t, "softmax_xent loss (sum of rows)", shape, &loss[0], &loss[1], 1, 1e-5);
    report(t, "softmax_xent correct count", shape, &hits[0], &hits[1], 1, 0);
    report(t, "softmax_xent dlogits", shape, dl[0], dl[1], n, 1e-5);
    report(t, "softmax_xent dlogits (in place)", shape, dl_alias[0], dl_alias[1], n, 1e-5);
    report(t, "softmax_xent tally: loss (2 calls)", shape, &tallied[0][0], &tallied[1][0], 1, 1e-5);
    report(t, "softmax_xent tally: hits (2 calls)", shape, &tallied[0][1], &tallied[1][1], 1, 0);
    for (int k = 0; k < 2; k++) { free(dl[k]); free(dl_alias[k]); }
    free(logits); free(labels);
}

// Synthetic rows made by the backend against the host's, bit for bit: features, labels with and without
// features made beside them (the head of a pipeline makes only labels), from a row past 2^32.
static void test_synthetic(Test *t) {
    const int rows = 300, D = 77, C = 5;
    float *teacher = rnd(t, 95, (size_t)C * D, -1, 1), *x[2], *y[2][2];
    for (int k = 0; k < 2; k++) {
        const Backend *be = k ? t->ref : t->dut;
        float *dT = up(be, teacher, (size_t)C * D), *dX = be->alloc(sizeof(float) * (size_t)rows * D);
        int32_t *dY = be->alloc(sizeof(int32_t) * rows), *hy = xmalloc(sizeof(int32_t) * rows);
        SyntheticBatch b = {.seed = t->seed, .first = (1ULL << 33) + 7, .rows = rows, .inputs = D, .classes = C,
                            .teacher = dT};
        for (int both = 0; both < 2; both++) {
            be->synthetic(both ? dX : NULL, dY, &b);
            be->to_host(hy, dY, sizeof(int32_t) * rows);
            y[k][both] = xmalloc(sizeof(float) * rows);
            for (int r = 0; r < rows; r++) y[k][both][r] = (float)hy[r];
        }
        x[k] = down(be, dX, (size_t)rows * D);
        be->free(dT); be->free(dX); be->free(dY); free(hy);
    }
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d C%d", rows, D, C);
    report(t, "synthetic rows: features", shape, x[0], x[1], (size_t)rows * D, 0);
    report(t, "synthetic rows: labels", shape, y[0][1], y[1][1], rows, 0);
    report(t, "synthetic rows: labels alone", shape, y[0][0], y[1][1], rows, 0);
    for (int k = 0; k < 2; k++) { free(x[k]); free(y[k][0]); free(y[k][1]); }
    free(teacher);
}

// The device's time to make synthetic rows at the --params 70B shape's width (32768 inputs): the features
// alone (the first stage's) and the labels alone (the head's, its features made again), seconds a value:
// the rates a machine file's data_s_per_value and label_s_per_value take (configs/machines/).
static void time_synthetic(Test *t) {
    const Backend *be = t->dut;
    const int rows = 64, D = 32768, C = 2, reps = 3;
    float *dT = be->alloc(sizeof(float) * (size_t)C * D), *dX = be->alloc(sizeof(float) * (size_t)rows * D);
    int32_t *dY = be->alloc(sizeof(int32_t) * rows);
    SyntheticBatch b = {.seed = t->seed, .first = 0, .rows = rows, .inputs = D, .classes = C, .teacher = dT};
    double per_value[2];
    for (int which = 0; which < 2; which++) {
        be->synthetic(which ? NULL : dX, which ? dY : NULL, &b);  // (warm: the kernels, the scratch)
        be->sync();
        double t0 = now_sec();
        for (int r = 0; r < reps; r++) be->synthetic(which ? NULL : dX, which ? dY : NULL, &b);
        be->sync();
        per_value[which] = (now_sec() - t0) / reps / ((double)rows * D);
    }
    const char *name[2] = {"synthetic rows timing (s/value)", "synthetic labels timing (s/value)"};
    for (int which = 0; which < 2; which++) {
        int ok = per_value[which] > 0 && per_value[which] < 1e-3;
        t->checks++;
        t->failed += !ok;
        printf("%-34s %-16s %11.3g %11s %10s  %s\n", name[which], "64x32768 C2", per_value[which], "", "> 0",
               ok ? "ok" : "FAIL");
    }
    be->free(dT); be->free(dX); be->free(dY);
}

static void test_optimizers(Test *t) {
    size_t n = 5003;
    float *p = rnd(t, 100, n, -1, 1), *g1 = rnd(t, 101, n, -1, 1), *g2 = rnd(t, 102, n, -0.01f, 0.01f);
    float *out[2][4];
    for (int k = 0; k < 2; k++) {
        const Backend *be = k ? t->ref : t->dut;
        float *dP = up(be, p, n), *dM = be->alloc(sizeof(float) * n), *dV = be->alloc(sizeof(float) * n);
        float *dG1 = up(be, g1, n), *dG2 = up(be, g2, n), *dQ = up(be, p, n);
        for (int step = 1; step <= 2; step++) {
            AdamArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .bias_correction1 = (float)(1.0 - pow(0.9, step)),
                          .bias_correction2_sqrt = (float)sqrt(1.0 - pow(0.999, step))};
            be->adam(dP, step == 1 ? dG1 : dG2, dM, dV, n, a);
        }
        out[k][0] = down(be, dP, n);
        out[k][1] = down(be, dM, n);
        out[k][2] = down(be, dV, n);
        be->sgd(dQ, dG1, n, 0.1f);
        out[k][3] = down(be, dQ, n);
        be->free(dP); be->free(dM); be->free(dV); be->free(dG1); be->free(dG2); be->free(dQ);
    }
    report(t, "adam, 2 steps: parameters", "5003", out[0][0], out[1][0], n, 1e-6);
    report(t, "adam, 2 steps: first moment", "5003", out[0][1], out[1][1], n, 1e-6);
    report(t, "adam, 2 steps: second moment", "5003", out[0][2], out[1][2], n, 1e-6);
    report(t, "sgd", "5003", out[0][3], out[1][3], n, 1e-6);
    for (int k = 0; k < 2; k++) for (int i = 0; i < 4; i++) free(out[k][i]);
    free(p); free(g1); free(g2);
}

// --precision bf16 on the device under test, against the naive product (double accumulation) of the
// same inputs rounded to bf16 on the host (ops_math.h's bf16_round), so no other bf16 library is needed:
// the rounding kernels bitwise, gemm (cublasGemmEx on cuda, oneDNN on the CPU) and the bias gradient
// (a column sum of dz rounded to bf16). Skipped, with the reason, where the backend has no bf16.
static void test_bf16(Test *t) {
    const Backend *be = t->dut;
    char err[256];
    if (be->set_precision(PRECISION_BF16, err, sizeof err)) {
        printf("%-34s %-16s %11s %11s %10s  skipped: %s\n", "bf16 rows", "", "", "", "", err);
        return;
    }
    size_t n = 10007;
    float *x = rnd(t, 120, n, -3, 3), *want = xmalloc(sizeof(float) * n);
    x[0] = 3.3895314e38f;  // rounds up to Inf
    x[1] = 1e-40f;         // a subnormal
    x[2] = f32_from_bits(0x3f808000u);  // a tie, to even (down)
    x[3] = f32_from_bits(0x3f818000u);  // a tie, to even (up)
    x[4] = -0.0f;
    for (size_t i = 0; i < n; i++) want[i] = bf16_round(x[i]);
    float *dX = up(be, x, n), *dY = be->alloc(sizeof(float) * n);
    uint16_t *dH = be->alloc(sizeof(uint16_t) * n);
    be->to_bf16(dH, dX, n);
    be->from_bf16(dY, dH, n);
    float *got = down(be, dY, n);
    report(t, "bf16: to_bf16 then from_bf16", "10007", got, want, n, 0);
    free(got);
    be->free(dX); be->free(dY); be->free(dH);
    free(x); free(want);
    static const GemmCase cases[] = {
        {"bf16 gemm NT (layer forward)", 0, 1, 128, 256, 256, 0, 1.0f, 0.0f},
        {"bf16 gemm TN (weight grad, +=)", 1, 0, 256, 256, 128, 0, 1.0f, 1.0f},
        {"bf16 gemm NN (input grad)", 0, 0, 128, 256, 256, 0, 1.0f, 0.0f},
        {"bf16 gemm TT (odd sizes)", 1, 1, 37, 53, 29, 0, 1.0f, 0.0f},
        {"bf16 gemm NN padded ld, a=.5 b=.25", 0, 0, 37, 53, 29, 5, 0.5f, 0.25f},
        {"bf16 gemm TN padded ld, a=2 b=-1", 1, 0, 61, 17, 45, 3, 2.0f, -1.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const GemmCase *g = &cases[c];
        int ar = g->ta ? g->K : g->M, ac = g->ta ? g->M : g->K, br = g->tb ? g->N : g->K, bc = g->tb ? g->K : g->N;
        int lda = ac + g->pad, ldb = bc + g->pad, ldc = g->N + g->pad;
        size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)g->M * ldc;
        float *A = rnd(t, 130 + (int)c, na, -1, 1), *B = rnd(t, 150 + (int)c, nb, -1, 1),
              *C = rnd(t, 170 + (int)c, nc, -1, 1), *ref = xmalloc(sizeof(float) * nc);
        float *dA = up(be, A, na), *dB = up(be, B, nb), *dC = up(be, C, nc);
        be->gemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, dA, lda, dB, ldb, g->beta, dC, ldc);
        float *out = down(be, dC, nc);
        for (size_t i = 0; i < na; i++) A[i] = bf16_round(A[i]);
        for (size_t i = 0; i < nb; i++) B[i] = bf16_round(B[i]);
        memcpy(ref, C, sizeof(float) * nc);
        naive_gemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, A, lda, B, ldb, g->beta, ref, ldc);
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%dx%d", g->M, g->N, g->K);
        report(t, g->name, shape, out, ref, nc, 1e-5);
        be->free(dA); be->free(dB); be->free(dC);
        free(out); free(A); free(B); free(C); free(ref);
    }
    const int rows = 67, cols = 77;
    float *dz = rnd(t, 190, (size_t)rows * cols, -1, 1), *db = rnd(t, 191, (size_t)cols, -1, 1);
    float *dDZ = up(be, dz, (size_t)rows * cols), *dDB = up(be, db, (size_t)cols);
    be->bias_grad(dDB, dDZ, rows, cols);
    float *out = down(be, dDB, (size_t)cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) dz[i] = bf16_round(dz[i]);
    naive_bias_grad(db, dz, rows, cols);
    report(t, "bf16 bias_grad (+= column sums)", "67x77", out, db, (size_t)cols, 1e-5);
    be->free(dDZ); be->free(dDB);
    free(out); free(dz); free(db);
    CHECK(be->set_precision(PRECISION_FP32, err, sizeof err) == 0, "back to fp32: %s", err);
}

// One training step of a small model (3 x Linear(48,48)+ReLU -> Linear(48,5), 32 rows, SGD) on
// both backends from the same weights and batch: the loss, every gradient, the updated weights.
static void test_train_step(Test *t, double gemm_tol, double loss_tol) {
    const int L = 3, H = 48, C = 5, rows = 32;
    float *x = rnd(t, 110, (size_t)rows * H, -1, 1);
    int32_t *y = xmalloc(sizeof(int32_t) * rows);
    for (int r = 0; r < rows; r++) y[r] = (int32_t)(rng_uniform(rng_key(t->seed, 111, 0), (uint64_t)r) * C);
    float loss[2], *grads[2], *params[2];
    size_t np = 0;
    for (int k = 0; k < 2; k++) {
        const Backend *be = k ? t->ref : t->dut;
        Stage s;
        stage_init(&s, be,
                   (StageSpec){.layers = L,
                               .hidden = H,
                               .classes = C,
                               .lo = 0,
                               .hi = L,
                               .head = 1,
                               .rows = rows,
                               .slots = 1,
                               .ckpt = 0,
                               .seed = t->seed});
        stage_zero_grads(&s);
        int slot = stage_slot_acquire(&s, 0);
        be->to_device(stage_slot_input(&s, slot), x, sizeof(float) * (size_t)rows * H);
        stage_set_labels(&s, slot, y);
        stage_forward(&s, slot);
        stage_backward(&s, slot, NULL, NULL);
        stage_take_loss(&s);
        loss[k] = (float)(s.loss.sum / rows);
        np = s.n_params;
        grads[k] = down(be, s.grads, np);
        OptimStep o = {OPTIM_SGD, 0.1f, 0.0f, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, 1};
        stage_optimizer_step(&s, &o);
        params[k] = down(be, s.params, np);
        stage_free(&s);
    }
    const char *shape = "L3 H48 C5 B32";
    report(t, "train step: loss", shape, &loss[0], &loss[1], 1, loss_tol);
    report(t, "train step: gradients", shape, grads[0], grads[1], np, 10 * gemm_tol);
    report(t, "train step: weights after sgd", shape, params[0], params[1], np, gemm_tol);
    for (int k = 0; k < 2; k++) { free(grads[k]); free(params[k]); }
    free(x); free(y);
}

// --nccl: the NCCL calls of the transport on this one GPU (NCCL refuses two ranks on one GPU, so the
// pairing of ranks is p2p.c's to prove): devcomm_open on a world of one rank, on each of the four
// channels a grouped ncclSend and ncclRecv of 1M floats to itself, devcomm_close; then the tensor-
// parallel group's all-reduce on a group of one rank (the sum is the input), and the expert group's
// all-to-all on one (a grouped send and receive to itself). Exact, or it fails. Last,
// the watchdog's abort of both kinds of transport together (devcomm_abort_all) must return.
static void test_nccl(Test *t) {
    char why[400];
    if (p2p_nccl_env(why, sizeof why)) printf("note: %s\n", why);
    float diff = (float)devcomm_smoke((size_t)1 << 20), zero = 0;
    report(t, "nccl: 1 rank, 4 splits, self send", "1048576", &diff, &zero, 1, 0);
    diff = (float)devcomm_allreduce_smoke((size_t)1 << 20);
    report(t, "nccl: 1 rank, all-reduce, timed", "1048576", &diff, &zero, 1, 0);
    diff = (float)devcomm_alltoall_smoke((size_t)1 << 20);  // (expert parallelism's: floats, then ints)
    report(t, "nccl: 1 rank, all-to-all, floats and ints", "1048576", &diff, &zero, 1, 0);
    // the watchdog's hook (devcomm_abort_all): both transports' communicators aborted in one group,
    // within 10 s (0 when it did, else the seconds it took)
    double took = devcomm_abort_smoke();
    diff = took < 10.0 ? 0.0f : (float)took;
    report(t, "nccl: 2 transports aborted together", "1 rank", &diff, &zero, 1, 0);
}

int cmd_selftest(int argc, char **argv) {
    SelftestConfig cfg = {.device = DEVICE_AUTO, .seed = 1, .tol_scale = 1.0, .timeout = WD_DEFAULT_TIMEOUT};
    single_process("selftest");
    options_parse("selftest", selftest_options, &cfg, NULL, argc, argv, "micropp selftest [options]",
                  "  micropp selftest                 # the GPU against the CPU, or the CPU against naive loops\n"
                  "  micropp selftest --device cuda --tf32\n"
                  "  micropp selftest --device cuda --nccl\n"
                  "  micropp selftest --device cpu\n");
    if (cfg.emulate_tf32 && cfg.device == DEVICE_CUDA)
        user_error("selftest: --emulate-tf32 emulates TF32 on the CPU, and --device is cuda: use --device cpu, or "
                   "--tf32 for the GPU's own");
    if (cfg.timeout > 0 && cfg.timeout < WD_MIN_TIMEOUT)
        user_error("selftest: --timeout = %g is below %g s: give 0 (wait forever) or at least %g", cfg.timeout,
                   WD_MIN_TIMEOUT, WD_MIN_TIMEOUT);
    // The watchdog of one process: every wait on the GPU polls under --timeout, and the backstop thread
    // bounds the driver and NCCL calls that block (a hung device or NCCL init ends selftest, exit 1).
    wd_set_timeout(cfg.timeout);
    wd_init_local();
    backend_cuda_set_wait(comm_device_wait, wd_mark_call);
    const Backend *dut = &backend_cpu;
    if (cfg.device != DEVICE_CPU && !cfg.emulate_tf32) {  // (--emulate-tf32: the CPU under auto too)
        char err[256];
        const Backend *cuda = backend_cuda_open(0, err, sizeof err);
        if (cuda) dut = cuda;
        else if (cfg.device == DEVICE_CUDA) user_error("no CUDA device: %s", err);
    }
    if (cfg.tf32 && dut->on_host)
        user_error("selftest: --tf32 applies to cuBLAS on a GPU, and this run is on the CPU: drop --tf32 or use "
                   "--device cuda on a GPU machine");
    if (cfg.nccl && dut->on_host)
        user_error("selftest: --nccl checks NCCL on a GPU, and this run is on the CPU: drop --nccl or use --device "
                   "cuda on a GPU machine");
    if (cfg.tf32) dut->set_tf32(1);
    Backend naive = naive_backend(), emulated = backend_cpu;
    if (cfg.emulate_tf32) {
        emulated.gemm = tf32_gemm;
        emulated.set_precision = tf32_set_precision;
        emulated.describe = tf32_describe;
        dut = &emulated;
    }
    const Backend *ref = dut->on_host ? &naive : &backend_cpu;
    // TF32 keeps 10 mantissa bits of each gemm input: about 1e-3 relative error instead of 1e-7; the
    // train step's loss moves by up to 2e-5 (--emulate-tf32, seed 1), past fp32's 1e-5.
    int tf32 = cfg.tf32 || cfg.emulate_tf32;
    double gemm_tol = tf32 ? 1e-2 : 1e-5, loss_tol = tf32 ? 1e-3 : 1e-5;

    char a[192], b[192];
    dut->describe(a, sizeof a);
    if (dut == &backend_cpu) {
        char blas[160];
        blas_describe(blas, sizeof blas);
        snprintf(a, sizeof a, "cpu (%s)", blas);
    }
    if (ref == &backend_cpu) {
        char blas[160];
        blas_describe(blas, sizeof blas);
        snprintf(b, sizeof b, "cpu (%s)", blas);
    } else ref->describe(b, sizeof b);
    printf("micropp selftest | device %s | reference %s | seed %lld\n\n", a, b, (long long)cfg.seed);
    printf("%-34s %-16s %11s %11s %10s  %s\n", "operation", "shape", "max |diff|", "error", "tolerance", "result");
    Test t = {.dut = dut, .ref = ref, .seed = (uint64_t)cfg.seed, .scale = cfg.tol_scale};
    wd_phase("selftest's memory rows", 0);  // (what the watchdog's line names)
    test_memory(&t);
    wd_phase("selftest's gemm rows", 0);
    test_gemm(&t, gemm_tol);
    wd_phase("selftest's element-wise, softmax and optimizer rows", 0);
    test_elementwise(&t);
    test_softmax(&t);
    test_synthetic(&t);
    time_synthetic(&t);
    test_optimizers(&t);
    wd_phase("selftest's bf16 rows", 0);
    test_bf16(&t);
    wd_phase("selftest's train step", 0);
    test_train_step(&t, gemm_tol, loss_tol);
    wd_phase("selftest's NCCL rows", 0);
    if (cfg.nccl) test_nccl(&t);
    wd_phase("selftest's end", 0);
    printf("\nerror = max |diff| / max |reference|\n");
    printf("selftest: %d checks, %d failed: %s\n", t.checks, t.failed, t.failed ? "FAILED" : "ok");
    fflush(stdout);
    backend_cuda_close();  // (every buffer of the rows above is freed: a leak check lists nothing)
    return t.failed ? 1 : 0;
}
