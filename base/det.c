// base/det.c: --deterministic's arithmetic (base/det.h): OpenBLAS products on fixed row chunks, the rows'
// pairwise tree over the chunks, and the exact sum of squares. Compiled without contraction into fused
// multiply-adds (-std=c11 sets -ffp-contract=off), so the tree's sums round the same on every call.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>
#include "base/det.h"
#include "base/ops_math.h"
#include "base/util.h"

static float operand(float x, int bf16) { return bf16 ? bf16_round(x) : x; }

static void sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

// op(X) of R rows and K columns as a plain [R, K] matrix, rounded to bf16 when asked (rows R.. of out,
// up to pad_rows, zero): the padded last chunk, and bf16's operands.
static float *plain(int tx, int R, int K, const float *X, int ldx, int pad_rows, int bf16) {
    float *out = xcalloc((size_t)(pad_rows > R ? pad_rows : R) * (size_t)K + 1, sizeof(float));
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++)
            out[(size_t)r * K + k] = operand(tx ? X[(size_t)k * ldx + r] : X[(size_t)r * ldx + k], bf16);
    return out;
}

// The last r (< chunk) rows: padded with zero rows to a whole chunk, so the product keeps the chunk's shape
// and transposes (OpenBLAS's small kernels differ by both).
static void last_rows(int ta, int tb, int r, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc, int chunk) {
    float *a = xcalloc((size_t)chunk * (size_t)K + 1, sizeof(float)),
          *c = xcalloc((size_t)chunk * (size_t)N + 1, sizeof(float));
    for (int i = 0; i < r; i++)
        for (int k = 0; k < K; k++)
            a[ta ? (size_t)k * chunk + i : (size_t)i * K + k] = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
    for (int i = 0; i < r; i++) memcpy(c + (size_t)i * N, C + (size_t)i * ldc, sizeof(float) * (size_t)N);
    sgemm(ta, tb, chunk, N, K, alpha, a, ta ? chunk : K, B, ldb, beta, c, N);
    for (int i = 0; i < r; i++) memcpy(C + (size_t)i * ldc, c + (size_t)i * N, sizeof(float) * (size_t)N);
    free(c);
    free(a);
}

void det_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int chunk, int bf16) {
    if (bf16) {  // the operands rounded first, then the fp32 products of bf16 values (exact) summed in fp32
        float *a = plain(ta, M, K, A, lda, 0, 1), *b = plain(!tb, N, K, B, ldb, 0, 1);  // b: op(B)^T, [N, K]
        det_gemm(0, 1, M, N, K, alpha, a, K, b, K, beta, C, ldc, chunk, 0);
        free(b);
        free(a);
        return;
    }
    int full = M / chunk * chunk;
    if (full && (double)chunk * N * K >= DET_BIG)  // one call: a row's bits do not depend on M at this size
        sgemm(ta, tb, full, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        for (int m0 = 0; m0 < full; m0 += chunk)
            sgemm(ta, tb, chunk, N, K, alpha, ta ? A + m0 : A + (size_t)m0 * lda, lda, B, ldb, beta,
                  C + (size_t)m0 * ldc, ldc);
    if (M > full)
        last_rows(ta, tb, M - full, N, K, alpha, ta ? A + full : A + (size_t)full * lda, lda, B, ldb, beta,
                  C + (size_t)full * ldc, ldc, chunk);
}

void det_tree_init(DetTree *t, size_t len) {
    memset(t, 0, sizeof *t);
    t->len = len;
}

void det_tree_free(DetTree *t) {
    for (int i = 0; i < t->n; i++) free(t->nodes[i].v);
    for (int i = 0; i < t->n_spare; i++) free(t->spare[i]);
    free(t->nodes);
    free(t->spare);
    memset(t, 0, sizeof *t);
}

float *det_tree_buffer(DetTree *t) {
    if (t->n_spare) return t->spare[--t->n_spare];
    return xmalloc(sizeof(float) * (t->len ? t->len : 1));
}

static void give_back(DetTree *t, float *v) {
    t->spare = xrealloc(t->spare, sizeof(float *) * (size_t)(t->n_spare + 1));
    t->spare[t->n_spare++] = v;
}

static int find(const DetTree *t, int level, long start) {
    for (int i = 0; i < t->n; i++)
        if (t->nodes[i].level == level && t->nodes[i].start == start) return i;
    return -1;
}

// Testing (tests/t_deterministic.sh): MICROPP_DET_REORDER=1 sums every tree's subtrees (each chunk a
// leaf of its own) one after the other, left to right, instead of pairwise: a reduction in another
// order, which comparing the weights of two layouts must catch.
static int reordered(void) {
    static int r = -1;
    if (r < 0) {
        const char *e = getenv("MICROPP_DET_REORDER");
        r = e && strcmp(e, "1") == 0;
    }
    return r;
}

void det_tree_add(DetTree *t, int level, long start, float *v) {
    CHECK(start % (1L << level) == 0, "det: subtree at row %ld is not aligned to 2^%d", start, level);
    while (!reordered()) {
        int s = find(t, level, start ^ (1L << level));
        if (s < 0) break;
        float *w = t->nodes[s].v;
        for (size_t j = 0; j < t->len; j++) w[j] += v[j];  // a + b == b + a: left or right first is the same
        give_back(t, v);
        v = w;
        t->nodes[s] = t->nodes[--t->n];
        start &= ~(1L << level);
        level++;
    }
    CHECK(find(t, level, start) < 0, "det: rows %ld.. (2^%d) arrived twice", start, level);
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 8;
        t->nodes = xrealloc(t->nodes, sizeof(DetNode) * (size_t)t->cap);
    }
    t->nodes[t->n++] = (DetNode){level, start, v};
}

// One chunk's leaf added into v (beta 0: written; 1: added, one rounding per float, as v + leaf would be)
// and its bias part, the chunk's rows of dz summed row by row, into db.
static void leaf(const float *dz, const float *x, int h, int k, int chunk, int bf16, float beta, float *v, float *db) {
    float *dr = bf16 ? plain(0, chunk, h, dz, h, 0, 1) : NULL, *xr = bf16 ? plain(0, chunk, k, x, k, 0, 1) : NULL;
    const float *d = dr ? dr : dz;
    sgemm(1, 0, h, k, chunk, 1.0f, d, h, xr ? xr : x, k, beta, v, k);
    for (int o = 0; o < h; o++) db[o] = 0.0f;
    for (int r = 0; r < chunk; r++)
        for (int o = 0; o < h; o++) db[o] += d[(size_t)r * h + o];
    free(xr);
    free(dr);
}

void det_tree_chunks(DetTree *t, const float *dz, const float *x, int rows, int h, int k, long row0, int chunk,
                     int bf16) {
    CHECK(rows % chunk == 0 && row0 % chunk == 0, "det: rows %ld.. (%d) are not whole chunks of %d", row0, rows, chunk);
    int level = 0;
    while (1 << level < chunk) level++;
    float *right = xmalloc(sizeof(float) * (size_t)h);  // a right sibling's bias part
    for (int c = 0; c < rows;) {
        float *v = det_tree_buffer(t), *db = v + (size_t)h * k;
        leaf(dz + (size_t)c * h, x + (size_t)c * k, h, k, chunk, bf16, 0.0f, v, db);
        // Two sibling chunks in this call: the right one's product added by its sgemm (beta 1: v + leaf
        // rounded once, the same bits as the tree's add; tests/unit_det.c checks it), a pass over v saved.
        int pair = (row0 + c) % (2L * chunk) == 0 && c + chunk < rows && chunk <= DET_FUSE_MAX && !reordered();
        if (pair) {
            leaf(dz + (size_t)(c + chunk) * h, x + (size_t)(c + chunk) * k, h, k, chunk, bf16, 1.0f, v, right);
            for (int o = 0; o < h; o++) db[o] += right[o];
        }
        det_tree_add(t, level + pair, row0 + c, v);
        c += chunk << pair;
    }
    free(right);
}

static int by_start(const void *a, const void *b) {
    long x = ((const DetNode *)a)->start, y = ((const DetNode *)b)->start;
    return (x > y) - (x < y);
}

void det_tree_finish(DetTree *t, float *out) {
    if (!t->n) {
        memset(out, 0, sizeof(float) * t->len);
        return;
    }
    qsort(t->nodes, (size_t)t->n, sizeof(DetNode), by_start);
    int last = reordered() ? 0 : t->n - 1, step = reordered() ? 1 : -1;  // (reordered: left to right)
    float *acc = t->nodes[last].v;
    for (int i = last + step; i >= 0 && i < t->n; i += step) {
        const float *v = t->nodes[i].v;
        for (size_t j = 0; j < t->len; j++) acc[j] += v[j];
        give_back(t, t->nodes[i].v);
    }
    memcpy(out, acc, sizeof(float) * t->len);
    give_back(t, acc);
    t->n = 0;
}

// Limbs back to [0, 2^32) each, the carries moved up (the top limb keeps what is above it).
static void carry(long long *limb) {
    for (int i = 0; i + 1 < DET_SUM_LIMBS; i++) {
        limb[i + 1] += limb[i] >> 32;
        limb[i] &= 0xffffffffLL;
    }
}

// t = m x 2^(e - 1075) exactly (a double's fields), its bits from 2^-DET_SUM_LOW up added into the limbs.
static void add_square(DetSum *s, double t) {
    if (!isfinite(t)) {
        s->nonfinite += t;
        return;
    }
    uint64_t u;
    memcpy(&u, &t, sizeof u);
    int e = (int)(u >> 52 & 0x7ff);
    uint64_t m = u & ((1ULL << 52) - 1);
    if (e) m |= 1ULL << 52;
    else e = 1;  // subnormal
    int p = e - 1075 + DET_SUM_LOW;  // the bit position of m's lowest bit
    if (p < 0) {
        m = p > -64 ? m >> -p : 0;
        p = 0;
    }
    if (!m) return;
    int i = p / 32;
    CHECK(i + 2 < DET_SUM_LIMBS, "det: a square of 2^%d is past the sum's limbs", p - DET_SUM_LOW);
    unsigned __int128 v = (unsigned __int128)m << (p % 32);
    s->limb[i] += (long long)(v & 0xffffffffU);
    s->limb[i + 1] += (long long)(v >> 32 & 0xffffffffU);
    s->limb[i + 2] += (long long)(v >> 64);
    if (++s->adds == 1L << 30) {
        carry(s->limb);
        s->adds = 0;
    }
}

void det_sum_sumsq(DetSum *s, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) add_square(s, (double)x[i] * x[i]);  // exact: 24 bits squared fit in 53
}

void det_sum_export(DetSum *s, double *out) {
    carry(s->limb);
    s->adds = 0;
    for (int i = 0; i < DET_SUM_LIMBS; i++) out[i] = (double)s->limb[i];
    out[DET_SUM_LIMBS] = s->nonfinite;
}

double det_sum_value(const double *in) {
    if (in[DET_SUM_LIMBS] != 0) return in[DET_SUM_LIMBS];  // Inf or NaN
    long long limb[DET_SUM_LIMBS];
    for (int i = 0; i < DET_SUM_LIMBS; i++) limb[i] = (long long)in[i];
    carry(limb);  // one form for one sum, whatever the ranks' parts were: then one fixed order of adds
    double v = 0;
    for (int i = DET_SUM_LIMBS - 1; i >= 0; i--) v += ldexp((double)limb[i], 32 * i - DET_SUM_LOW);
    return v;
}
