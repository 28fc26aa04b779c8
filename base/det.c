// base/det.c: --deterministic's arithmetic (base/det.h): products summed index by index, and the rows'
// pairwise tree. Compiled without contraction into fused multiply-adds (-std=c11 sets -ffp-contract=off),
// so a product and a sum round the same on every call.
#include <string.h>
#include "base/det.h"
#include "base/ops_math.h"
#include "base/util.h"

static float operand(float x, int bf16) { return bf16 ? bf16_round(x) : x; }

// op(B) as a plain [K, N] matrix (rounded to bf16 when asked), so the products below read its rows.
static float *b_rows(int tb, int N, int K, const float *B, int ldb, int bf16) {
    float *b = xmalloc(sizeof(float) * (size_t)K * (size_t)N + sizeof(float));
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++)
            b[(size_t)k * N + n] = operand(tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n], bf16);
    return b;
}

// Rows m0 .. m0+R-1 (R <= DET_RB) of the product: acc[r][n] = sum over k in order of A(m0+r, k) b[k][n].
// The loop over n inside the loop over k keeps each value's sum in k's order (and vectorises over n);
// the R rows share each row of b while it is in cache.
enum { DET_RB = 4 };
static void det_rows(int ta, int m0, int R, int N, int K, const float *A, int lda, const float *b, float *acc,
                     int bf16) {
    for (size_t i = 0; i < (size_t)R * N; i++) acc[i] = 0.0f;
    for (int k = 0; k < K; k++) {
        const float *bk = b + (size_t)k * N;
        for (int r = 0; r < R; r++) {
            int m = m0 + r;
            float a = operand(ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k], bf16), *o = acc + (size_t)r * N;
            for (int n = 0; n < N; n++) o[n] += a * bk[n];
        }
    }
}

void det_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int bf16) {
    float *b = b_rows(tb, N, K, B, ldb, bf16), *acc = xmalloc(sizeof(float) * DET_RB * (size_t)(N > 0 ? N : 1));
    for (int m0 = 0; m0 < M; m0 += DET_RB) {
        int R = M - m0 < DET_RB ? M - m0 : DET_RB;
        det_rows(ta, m0, R, N, K, A, lda, b, acc, bf16);
        for (int r = 0; r < R; r++) {
            float *c = C + (size_t)(m0 + r) * ldc;
            const float *x = acc + (size_t)r * N;
            if (beta == 0.0f) for (int n = 0; n < N; n++) c[n] = alpha * x[n];
            else for (int n = 0; n < N; n++) c[n] = alpha * x[n] + beta * c[n];
        }
    }
    free(acc); free(b);
}

void det_tree_init(DetTree *t, size_t len) { memset(t, 0, sizeof *t); t->len = len; }

void det_tree_free(DetTree *t) {
    for (int i = 0; i < t->n; i++) free(t->nodes[i].v);
    for (int i = 0; i < t->n_spare; i++) free(t->spare[i]);
    free(t->nodes); free(t->spare);
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
    for (int i = 0; i < t->n; i++) if (t->nodes[i].level == level && t->nodes[i].start == start) return i;
    return -1;
}

void det_tree_add(DetTree *t, int level, long start, float *v) {
    CHECK(start % (1L << level) == 0, "det: subtree at row %ld is not aligned to 2^%d", start, level);
    for (;;) {
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

void det_tree_rows(DetTree *t, const float *dz, const float *x, int rows, int h, int k, long row0, int bf16) {
    for (int i = 0; i < rows; i++) {
        const float *d = dz + (size_t)i * h, *xi = x + (size_t)i * k;
        float *v = det_tree_buffer(t);
        for (int o = 0; o < h; o++) {
            float g = operand(d[o], bf16);
            float *w = v + (size_t)o * k;
            for (int c = 0; c < k; c++) w[c] = g * operand(xi[c], bf16);
            v[(size_t)h * k + o] = g;
        }
        det_tree_add(t, 0, row0 + i, v);
    }
}

static int by_start(const void *a, const void *b) {
    long x = ((const DetNode *)a)->start, y = ((const DetNode *)b)->start;
    return (x > y) - (x < y);
}

void det_tree_finish(DetTree *t, float *out) {
    if (!t->n) { memset(out, 0, sizeof(float) * t->len); return; }
    qsort(t->nodes, (size_t)t->n, sizeof(DetNode), by_start);
    float *acc = t->nodes[t->n - 1].v;
    for (int i = t->n - 2; i >= 0; i--) {
        const float *v = t->nodes[i].v;
        for (size_t j = 0; j < t->len; j++) acc[j] += v[j];
        give_back(t, t->nodes[i].v);
    }
    memcpy(out, acc, sizeof(float) * t->len);
    give_back(t, acc);
    t->n = 0;
}
