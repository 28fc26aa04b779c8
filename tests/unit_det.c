// tests/unit_det.c: --deterministic's arithmetic (base/det.c): the rows' tree gives the same bits
// whatever the order and grouping its subtrees arrive in (micro-batches, replicas, one row at a time),
// equals a plain recursive pairwise sum over the rows padded to a power of two, and differs from the
// rows summed left to right (so the tree is what decides); det_gemm's values do not depend on how many
// rows or columns a call carries.
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "base/det.h"
#include "base/util.h"

#define LEN 5
static float leaf[200][LEN];

// The canonical sum of rows [a, a + n) of a padded tree: its left half, plus its right half where rows are.
static void pairwise(int a, int n, int rows, float *out) {
    if (n == 1) { memcpy(out, leaf[a], sizeof(float) * LEN); return; }
    float l[LEN], r[LEN];
    pairwise(a, n / 2, rows, l);
    if (a + n / 2 >= rows) { memcpy(out, l, sizeof l); return; }
    pairwise(a + n / 2, n / 2, rows, r);
    for (int j = 0; j < LEN; j++) out[j] = l[j] + r[j];
}

// Rows [0, rows) into a tree as the subtrees of chunks of `chunk` rows (each chunk split into its
// aligned power-of-two runs), the chunks in the order perm gives.
static void tree_sum(int rows, int chunk, const int *perm, float *out) {
    DetTree t;
    det_tree_init(&t, LEN);
    int n_chunks = (rows + chunk - 1) / chunk;
    for (int c = 0; c < n_chunks; c++) {
        int a = perm[c] * chunk, end = a + chunk < rows ? a + chunk : rows;
        for (int i = a; i < end; i++) {  // one leaf a row, as det_tree_rows adds them
            float *v = det_tree_buffer(&t);
            memcpy(v, leaf[i], sizeof(float) * LEN);
            det_tree_add(&t, 0, i, v);
        }
    }
    det_tree_finish(&t, out);
    det_tree_free(&t);
}

static void test_tree(void) {
    srand(7);
    for (int i = 0; i < 200; i++)
        for (int j = 0; j < LEN; j++) leaf[i][j] = (float)(rand() - RAND_MAX / 2) / (float)(rand() % 1000 + 1);
    int perm[200], bad = 0, rows_seen = 0;
    for (int rows = 1; rows <= 200; rows += rows < 40 ? 1 : 13) {
        float want[LEN], got[LEN];
        int pad = 1;
        while (pad < rows) pad *= 2;
        pairwise(0, pad, rows, want);
        for (int chunk = 1; chunk <= rows; chunk = chunk * 2 + 1) {
            int n = (rows + chunk - 1) / chunk;
            for (int c = 0; c < n; c++) perm[c] = c;
            for (int c = n - 1; c > 0; c--) { int k = rand() % (c + 1), x = perm[c]; perm[c] = perm[k]; perm[k] = x; }
            tree_sum(rows, chunk, perm, got);
            bad += memcmp(got, want, sizeof want) != 0;
        }
        rows_seen++;
    }
    EXPECT("det/the rows' tree: the padded pairwise sum, bit for bit, whatever the chunks and their order", bad == 0,
           "%d of the cases differ (%d row counts)", bad, rows_seen);
    float seq[LEN] = {0}, tree[LEN];
    for (int i = 0; i < 200; i++) for (int j = 0; j < LEN; j++) seq[j] += leaf[i][j];
    for (int c = 0; c < 200; c++) perm[c] = c;
    tree_sum(200, 1, perm, tree);
    EXPECT("det/the tree is not the left-to-right sum (the order decides the bits)", memcmp(seq, tree, sizeof seq) != 0,
           "they agree: the test data cannot tell the orders apart");
}

// det_gemm: the rows of a product computed in one call equal those computed a row or a column block at
// a time, for every transpose (the sums over K in one order).
static void test_gemm(void) {
    enum { M = 7, N = 9, K = 33 };
    float A[M * K], At[K * M], B[K * N], Bt[N * K], C[M * N], D[M * N] = {0};
    for (int i = 0; i < M * K; i++) A[i] = (float)((i * 37) % 101 - 50) / 7.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((i * 53) % 97 - 48) / 11.0f;
    for (int m = 0; m < M; m++) for (int k = 0; k < K; k++) At[k * M + m] = A[m * K + k];
    for (int k = 0; k < K; k++) for (int n = 0; n < N; n++) Bt[n * K + k] = B[k * N + n];
    int bad = 0;
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        const float *a = ta ? At : A, *b = tb ? Bt : B;
        int lda = ta ? M : K, ldb = tb ? K : N;
        det_gemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, C, N, 0);
        for (int m = 0; m < M; m++)  // a row at a time, and its columns in two calls
            for (int half = 0; half < 2; half++) {
                int n0 = half ? 4 : 0, nn = half ? N - 4 : 4;
                det_gemm(ta, tb, 1, nn, K, 1.0f, ta ? a + m : a + (size_t)m * K, lda, tb ? b + (size_t)n0 * K : b + n0,
                         ldb, 0.0f, D + m * N + n0, N, 0);
            }
        bad += memcmp(C, D, sizeof C) != 0;
    }
    EXPECT("det/det_gemm: a row or a column block at a time gives the whole call's bits (4 transposes)", bad == 0,
           "%d of 4 differ", bad);
}

int main(void) {
    test_tree();
    test_gemm();
    return unit_failures ? 1 : 0;
}
