// base/ops_onednn.c: the CPU backend's bf16 matrix product: oneDNN's matmul primitive with bf16 inputs
// (rounded here by ops_math.h's bf16_from_f32) and fp32 accumulation and output, one primitive per
// shape, created once and kept in a small cache. Built as stubs that refuse when libdnnl is absent.
#include <string.h>
#include "base/ops.h"
#include "base/util.h"

#ifdef MICROPP_NO_ONEDNN
int onednn_available(char *err, size_t n) {
    snprintf(err, n,
             "this micropp was built without oneDNN: install Debian's libdnnl-dev (make deps does) and rebuild");
    return 0;
}
void onednn_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    (void)ta;
    (void)tb;
    (void)M;
    (void)N;
    (void)K;
    (void)alpha;
    (void)A;
    (void)lda;
    (void)B;
    (void)ldb;
    (void)beta;
    (void)C;
    (void)ldc;
    fatal("bf16 gemm in a build without oneDNN (validation should have refused --precision bf16)");
}
void onednn_describe(int M, int N, int K, char *out, size_t n) {
    (void)M;
    (void)N;
    (void)K;
    snprintf(out, n, "onednn not built in");
}
int onednn_native_bf16(void) { return 0; }
void onednn_set_threads(int threads) { (void)threads; }
#else
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#define DNNL_CHECK(call) do { dnnl_status_t st_ = (call); \
    if (st_ != dnnl_success) fatal("oneDNN: %s failed: %s", #call, dnnl_status2str(st_)); } while (0)

int onednn_available(char *err, size_t n) { (void)err; (void)n; return 1; }

// One primitive per (transposes, shape, C's row stride, alpha, beta), with its three memory objects
// whose data handles are set per call. Full: the oldest entry makes room (round robin).
typedef struct {
    int ta, tb, M, N, K, ldc;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    char impl[64];
} Entry;
enum { CACHE_MAX = 64 };
static Entry cache[CACHE_MAX];
static int n_cache, next_evict;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static uint16_t *abuf, *bbuf;  // the inputs rounded to bf16, packed (no padding beyond the row)
static size_t acap, bcap;

static uint16_t *grow(uint16_t *p, size_t *cap, size_t n) {
    if (n <= *cap) return p;
    free(p);
    void *q = NULL;
    if (posix_memalign(&q, 64, n * sizeof(uint16_t)) != 0) fatal("out of memory allocating %zu bf16 values", n);
    *cap = n;
    return q;
}

// rows x cols of src (row stride ld) rounded to bf16 into dst (row stride cols).
static void to_bf16(uint16_t *restrict dst, const float *restrict src, int rows, int cols, int ld) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
        for (int c = 0; c < cols; c++) d[c] = bf16_from_f32(s[c]);
    }
}

static void entry_free(Entry *e) {
    dnnl_primitive_destroy(e->prim);
    dnnl_memory_destroy(e->a); dnnl_memory_destroy(e->b); dnnl_memory_destroy(e->c);
    memset(e, 0, sizeof *e);
}

// A [M,K] (stored transposed, K x M, when ta) times B [K,N] (N x K when tb), both packed bf16;
// C [M,N] fp32 with row stride ldc, = alpha * A B + beta * C.
static void entry_make(Entry *e) {
    if (!engine) {
        DNNL_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
        DNNL_CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    }
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {e->M, e->K}, as = {e->ta ? 1 : e->K, e->ta ? e->M : 1};
    dnnl_dims_t bd = {e->K, e->N}, bs = {e->tb ? 1 : e->N, e->tb ? e->K : 1};
    dnnl_dims_t cd = {e->M, e->N}, cs = {e->ldc, 1};
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs));
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd));
    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    if (e->alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &e->alpha));
    if (e->beta != 0.0f) {  // C = alpha A B + beta C: the sum post-op reads C before it is written
        dnnl_post_ops_t po;
        DNNL_CHECK(dnnl_post_ops_create(&po));
        DNNL_CHECK(dnnl_post_ops_append_sum(po, e->beta));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL));
    dnnl_primitive_attr_destroy(attr);
    const char *impl = "?";
    DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(e->impl, sizeof e->impl, "%s", impl);
    DNNL_CHECK(dnnl_primitive_create(&e->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    DNNL_CHECK(dnnl_memory_create(&e->a, &amd, engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&e->b, &bmd, engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&e->c, &cmd, engine, DNNL_MEMORY_NONE));
}

static Entry *entry_get(int ta, int tb, int M, int N, int K, int ldc, float alpha, float beta) {
    for (int i = 0; i < n_cache; i++) {
        Entry *e = &cache[i];
        if (e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K && e->ldc == ldc &&
            e->alpha == alpha && e->beta == beta)
            return e;
    }
    Entry *e;
    if (n_cache < CACHE_MAX) e = &cache[n_cache++];
    else { e = &cache[next_evict]; next_evict = (next_evict + 1) % CACHE_MAX; entry_free(e); }
    *e = (Entry){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .ldc = ldc, .alpha = alpha, .beta = beta};
    entry_make(e);
    return e;
}

void onednn_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // an empty sum: C = beta C, as BLAS does
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    abuf = grow(abuf, &acap, (size_t)M * K);
    bbuf = grow(bbuf, &bcap, (size_t)K * N);
    if (ta) to_bf16(abuf, A, K, M, lda); else to_bf16(abuf, A, M, K, lda);
    if (tb) to_bf16(bbuf, B, N, K, ldb); else to_bf16(bbuf, B, K, N, ldb);
    Entry *e = entry_get(ta, tb, M, N, K, ldc, alpha, beta);
    DNNL_CHECK(dnnl_memory_set_data_handle(e->a, abuf));
    DNNL_CHECK(dnnl_memory_set_data_handle(e->b, bbuf));
    DNNL_CHECK(dnnl_memory_set_data_handle(e->c, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    DNNL_CHECK(dnnl_primitive_execute(e->prim, stream, 3, args));
    DNNL_CHECK(dnnl_stream_wait(stream));
}

void onednn_describe(int M, int N, int K, char *out, size_t n) {
    const dnnl_version_t *v = dnnl_version();
    Entry *e = entry_get(0, 1, M, N, K, N, 1.0f, 0.0f);  // the forward product of a hidden layer
    snprintf(out, n, "onednn %d.%d.%d %s", v->major, v->minor, v->patch, e->impl);
}

int onednn_native_bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
}

// oneDNN here runs on OpenMP: its threads follow --threads as OpenBLAS's do.
void onednn_set_threads(int threads) { omp_set_num_threads(threads); }
#endif
