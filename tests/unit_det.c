// tests/unit_det.c: --deterministic's arithmetic (base/det.c): the rows' tree gives the same bits
// whatever the order and grouping its subtrees arrive in (micro-batches, replicas, one row at a time),
// equals a plain recursive pairwise sum over the rows padded to a power of two, and differs from the
// rows summed left to right (so the tree is what decides); det_gemm's rows do not depend on how many
// rows a call carries, and det_tree_chunks's leaves not on how the micro-batches group them; the exact sum
// of squares (DetSum) and the loss's rows (det_loss_row) give the same bits in any order and grouping.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "base/det.h"
#include "base/util.h"

#define LEN 5
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

static void fill(float *x, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 37 + (size_t)seed * 101) % 211) - 105) / 13.0f;
}

// det_gemm: the rows of a product computed in one call equal those computed a chunk or two at a time
// (from any chunk's first row), for every transpose, bf16 too; a small shape (chunk by chunk) and one of
// DET_BIG (one sgemm over the chunks: this checks that OpenBLAS gives a row the same bits whatever M is
// at that size); the last rows of a call, padded to a chunk, equal the same rows inside a longer call.
static int gemm_case(int ta, int tb, int M, int N, int K, int chunk, int bf16) {
    float *A = xmalloc(sizeof(float) * (size_t)M * K), *B = xmalloc(sizeof(float) * (size_t)K * N);
    float *C = xcalloc((size_t)M * N, sizeof(float)), *D = xcalloc((size_t)M * N, sizeof(float));
    fill(A, (size_t)M * K, 1); fill(B, (size_t)K * N, 2);
    int lda = ta ? M : K, ldb = tb ? K : N;
    det_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N, chunk, bf16);
    for (int m0 = 0, step = chunk; m0 < M; m0 += step, step = step == chunk ? 2 * chunk : chunk) {
        int r = M - m0 < step ? M - m0 : step;
        det_gemm(ta, tb, r, N, K, 1.0f, ta ? A + m0 : A + (size_t)m0 * K, lda, B, ldb, 0.0f, D + (size_t)m0 * N, N, chunk,
                 bf16);
    }
    int bad = memcmp(C, D, sizeof(float) * (size_t)M * N) != 0;
    int tail = M - chunk / 2;  // a call of the first `tail` rows: its last chunk padded
    memset(D, 0, sizeof(float) * (size_t)M * N);
    det_gemm(ta, tb, tail, N, K, 1.0f, A, lda, B, ldb, 0.0f, D, N, chunk, bf16);
    bad += memcmp(C, D, sizeof(float) * (size_t)tail * N) != 0;
    if (bad) fprintf(stderr, "case ta %d tb %d M %d bf16 %d: %d\n", ta, tb, M, bf16, bad);
    free(A); free(B); free(C); free(D);
    return bad;
}

static void test_gemm(void) {
    int bad = 0, n = 0;
    for (int t = 0; t < 4; t++)
        for (int big = 0; big < 2; big++)
            for (int bf16 = 0; bf16 < 2; bf16++, n++)
                bad += big ? gemm_case(t & 1, t >> 1, 160, 256, 256, 32, bf16) : gemm_case(t & 1, t >> 1, 56, 9, 33, 8, bf16);

    EXPECT("det/det_gemm: a chunk or two at a time, or padded, gives the whole call's bits (transposes, sizes, bf16)",
           bad == 0, "%d of %d cases differ", bad, n);
}

// det_tree_chunks: a layer's gradient over R rows is the same whether its chunks come in one call (two
// siblings at a time: the right one added by sgemm's beta 1), in micro-batches of two chunks or of one
// (siblings added by the tree), the micro-batches in any order; small and large shapes, bf16 too.
static int chunks_case(int R, int H, int K, int CH, int bf16) {
    size_t len = (size_t)H * K + H;
    float *dz = xmalloc(sizeof(float) * (size_t)R * H), *x = xmalloc(sizeof(float) * (size_t)R * K);
    float *one = xmalloc(sizeof(float) * len), *many = xmalloc(sizeof(float) * len);
    fill(dz, (size_t)R * H, 3); fill(x, (size_t)R * K, 4);
    DetTree t;
    det_tree_init(&t, len);
    det_tree_chunks(&t, dz, x, R, H, K, 0, CH, bf16);
    det_tree_finish(&t, one);
    int bad = 0;
    for (int per = 1; per <= 2; per++) {
        int n = R / (per * CH), rows = per * CH;
        for (int i = 0; i < n; i++) {
            int mb = (i * 5 + 3) % n;  // (n a power of two: every micro-batch once, out of order)
            det_tree_chunks(&t, dz + (size_t)mb * rows * H, x + (size_t)mb * rows * K, rows, H, K, (long)mb * rows, CH,
                            bf16);
        }
        det_tree_finish(&t, many);
        bad += memcmp(one, many, sizeof(float) * len) != 0;
    }
    det_tree_free(&t);
    free(dz); free(x); free(one); free(many);
    return bad;
}

// det_tree_home: the caller's buffer holds the first subtree and det_tree_finish writes there without a copy:
// one call or micro-batches out of order, finished into home or elsewhere, give the bits of a tree without
// it, and the tree never keeps home as a spare or frees it (home is an interior pointer: freeing it aborts).
static int home_case(int R, int H, int K, int CH) {
    size_t len = (size_t)H * K + H;
    float *dz = xmalloc(sizeof(float) * (size_t)R * H), *x = xmalloc(sizeof(float) * (size_t)R * K);
    float *want = xmalloc(sizeof(float) * len), *other = xmalloc(sizeof(float) * len);
    float *block = xmalloc(sizeof(float) * (len + 1)), *home = block + 1;
    fill(dz, (size_t)R * H, 5); fill(x, (size_t)R * K, 6);
    DetTree t;
    det_tree_init(&t, len);
    det_tree_chunks(&t, dz, x, R, H, K, 0, CH, 0);
    det_tree_finish(&t, want);
    int bad = 0, n = R / CH;
    for (int form = 0; form < 3; form++) {  // one call into home; micro-batches into home; into another buffer
        det_tree_home(&t, home);
        int spares = t.n_spare;
        if (form == 0) det_tree_chunks(&t, dz, x, R, H, K, 0, CH, 0);
        bad += form == 0 && (t.n != 1 || t.nodes[0].v != home || t.n_spare != spares);  // (summed in home itself)
        for (int i = 0; form && i < n; i++) {
            int mb = (i * 5 + 3) % n;
            det_tree_chunks(&t, dz + (size_t)mb * CH * H, x + (size_t)mb * CH * K, CH, H, K, (long)mb * CH, CH, 0);
        }
        float *out = form == 2 ? other : home;
        det_tree_finish(&t, out);
        bad += memcmp(want, out, sizeof(float) * len) != 0;
        bad += t.home != NULL;  // (forgotten)
    }
    det_tree_free(&t);
    free(dz); free(x); free(want); free(other); free(block);
    return bad;
}

// The leaves' arithmetic (base/det.c's own kernel) as docs/determinism.md defines it: a weight element of a
// chunk is its rows' fmaf chain in row order from +0, the chunks added in their pairwise tree; the bias
// its rows added one by one, then the same tree. Widths that are not whole tiles (h 13, k 37) and 8 chunks.
static int leaf_case(void) {
    enum { R = 64, H = 13, K = 37, CH = 8 };
    static float dz[R * H], x[R * K], got[H * K + H], want[H * K + H], c[R / CH][H * K + H];
    fill(dz, R * H, 11); fill(x, R * K, 12);
    for (int i = 0; i < R * K; i++) x[i] *= 1.0f + (float)(i % 5) / 32.0f;
    DetTree t;
    det_tree_init(&t, H * K + H);
    det_tree_chunks(&t, dz, x, R, H, K, 0, CH, 0);
    det_tree_finish(&t, got);
    det_tree_free(&t);
    for (int q = 0; q < R / CH; q++)
        for (int o = 0; o < H; o++) {
            float w = 0.0f, b = 0.0f;
            for (int j = 0; j < K; j++, w = 0.0f) {
                for (int r = q * CH; r < (q + 1) * CH; r++) w = fmaf(dz[r * H + o], x[r * K + j], w);
                c[q][o * K + j] = w;
            }
            for (int r = q * CH; r < (q + 1) * CH; r++) b += dz[r * H + o];
            c[q][H * K + o] = b;
        }
    for (int i = 0; i < H * K + H; i++)
        want[i] = ((c[0][i] + c[1][i]) + (c[2][i] + c[3][i])) + ((c[4][i] + c[5][i]) + (c[6][i] + c[7][i]));
    return memcmp(got, want, sizeof want) != 0;
}

static void test_chunks(void) {
    EXPECT("det/det_tree_chunks: the leaves are the rows' fmaf chains, summed in the chunks' pairwise tree",
           leaf_case() == 0, "the kernel's bits are not the definition's");
    int bad = chunks_case(64, 24, 40, 8, 0) + chunks_case(64, 24, 40, 8, 1) + chunks_case(256, 256, 192, 32, 0) +
              chunks_case(256, 64, 64, 64, 0);
    EXPECT("det/det_tree_chunks: micro-batches of 1 or 2 chunks, in any order, give the one call's bits", bad == 0,
           "%d of 8 cases differ", bad);
    bad = home_case(64, 24, 40, 8) + home_case(256, 64, 64, 32);
    EXPECT("det/det_tree_home: the sum kept in the caller's buffer gives the same bits, with no copy and no free",
           bad == 0, "%d checks failed", bad);
}

// DetSum: squares of floats from 1e-30 to 1e30, summed whole, in three shuffled shards exported and added as
// an all-reduce would (in two orders), give one value, bit for bit; that value is within 1e-15 of the sum
// in long double (sorted, smallest first), and differs from a plain double sum in some order (so the
// order would matter without it); a non-finite square makes it Inf.
static void test_sum(void) {
    enum { N = 3000 };
    static float x[N];
    srand(11);
    for (int i = 0; i < N; i++) x[i] = (float)((rand() % 2 ? 1 : -1) * (rand() + 1.0) / RAND_MAX *
                                                pow(10.0, rand() % 61 - 30));
    DetSum whole, part[3];
    memset(&whole, 0, sizeof whole);
    memset(part, 0, sizeof part);
    det_sum_sumsq(&whole, x, N);
    double w[DET_SUM_LIMBS + 1], a[DET_SUM_LIMBS + 1] = {0}, b[DET_SUM_LIMBS + 1] = {0}, p[3][DET_SUM_LIMBS + 1];
    int perm[N];
    for (int i = 0; i < N; i++) perm[i] = i;
    for (int i = N - 1; i > 0; i--) { int k = rand() % (i + 1), t = perm[i]; perm[i] = perm[k]; perm[k] = t; }
    for (int i = 0; i < N; i++) det_sum_sumsq(&part[i % 3], &x[perm[i]], 1);
    det_sum_export(&whole, w);
    for (int r = 0; r < 3; r++) det_sum_export(&part[r], p[r]);
    for (int i = 0; i <= DET_SUM_LIMBS; i++) {
        a[i] = (p[0][i] + p[1][i]) + p[2][i];
        b[i] = p[2][i] + (p[1][i] + p[0][i]);
    }
    double v = det_sum_value(w), va = det_sum_value(a), vb = det_sum_value(b), fwd = 0, bwd = 0;
    long double ref = 0;
    static double sq[N];
    for (int i = 0; i < N; i++) sq[i] = (double)x[i] * x[i];
    for (int i = 0; i < N; i++) fwd += sq[i];
    for (int i = N - 1; i >= 0; i--) bwd += sq[perm[i]];
    qsort(sq, N, sizeof(double), cmp_double);
    for (int i = 0; i < N; i++) ref += sq[i];
    EXPECT("det/DetSum: whole, or three shuffled shards added in two orders, one value bit for bit",
           memcmp(&v, &va, sizeof v) == 0 && memcmp(&v, &vb, sizeof v) == 0, "%a %a %a", v, va, vb);
    EXPECT("det/DetSum: within 1e-15 of the long double sum", fabsl((long double)v - ref) <= 1e-15L * ref,
           "%a vs %La", v, ref);
    EXPECT("det/DetSum: plain double sums in two orders differ (the order matters without it)", fwd != bwd,
           "%a == %a", fwd, bwd);
    float inf = INFINITY;
    det_sum_sumsq(&whole, &inf, 1);
    det_sum_export(&whole, w);
    EXPECT("det/DetSum: a non-finite square makes the sum Inf", isinf(det_sum_value(w)), "%a", det_sum_value(w));
    // the loss: rows (floats, every other one about 6, the rest from 1e-12 to 1e-3) rounded to 2^-32 add
    // exactly, so one by one or in micro-batches of 3 rows backwards give one sum; unrounded, they differ
    static double l[60];
    for (int i = 0; i < 60; i++)
        l[i] = (float)((rand() + 1.0) / RAND_MAX * (i % 2 ? 6.0 : pow(10.0, rand() % 10 - 12)));
    double l1 = 0, l2 = 0, m1 = 0, m2 = 0;
    for (int i = 0; i < 60; i++) l1 += det_loss_row(l[i]);
    for (int g = 19; g >= 0; g--)
        l2 += det_loss_row(l[3 * g]) + det_loss_row(l[3 * g + 1]) + det_loss_row(l[3 * g + 2]);
    for (int i = 0; i < 60; i++) m1 += l[i];
    for (int g = 19; g >= 0; g--) m2 += l[3 * g] + l[3 * g + 1] + l[3 * g + 2];
    EXPECT("det/det_loss_row: rows one by one or in micro-batches backwards, one sum (unrounded: two)",
           l1 == l2 && m1 != m2, "%a %a (unrounded: %a %a)", l1, l2, m1, m2);
}

// --tp 2 and 4 under --deterministic (model.c's det_slices): a rank computes a half or a quarter of the
// columns of a product, or of the rows or columns of a weight gradient's leaves, of the shapes the whole
// layer's call has; those must carry the whole call's bits. Checked for the forward (B transposed) and
// the input gradient, each column part against the whole product, and for det_tree_chunks's tree, the
// first row and column part of [dz^T x, the bias] against the whole layer's: small and medium.json shapes.
static int halves_case(int M, int N, int K, int chunk, int parts) {
    float *A = xmalloc(sizeof(float) * (size_t)M * K), *B = xmalloc(sizeof(float) * (size_t)N * K),
          *C = xmalloc(sizeof(float) * (size_t)M * N), *D = xmalloc(sizeof(float) * (size_t)M * N);
    fill(A, (size_t)M * K, 3);
    fill(B, (size_t)N * K, 5);
    int bad = 0, n = N / parts;
    for (int tb = 0; tb <= 1; tb++) {
        det_gemm(0, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, C, N, chunk, 0);
        for (int half = 0; half < parts; half++) {
            const float *Bh = tb ? B + (size_t)half * n * K : B + (size_t)half * n;
            det_gemm(0, tb, M, n, K, 1.0f, A, K, Bh, tb ? K : N, 0.0f, D, n, chunk, 0);
            for (int i = 0; i < M; i++)
                bad += memcmp(C + (size_t)i * N + half * n, D + (size_t)i * n, sizeof(float) * n) != 0;
        }
    }
    free(A); free(B); free(C); free(D);
    return bad;
}

// The tree of a [h, k] layer over rows, and of its halves: rows [0, h/2) (a column-parallel rank) and
// columns [0, k/2) of every row (a row-parallel rank: x's first k/2 columns; the bias whole).
static int tree_halves_case(int R, int h, int k, int chunk, int parts) {
    float *dz = xmalloc(sizeof(float) * (size_t)R * h), *x = xmalloc(sizeof(float) * (size_t)R * k),
          *xs = xmalloc(sizeof(float) * (size_t)R * k), *whole = xmalloc(sizeof(float) * ((size_t)h * k + h)),
          *part = xmalloc(sizeof(float) * ((size_t)h * k + h)), *dzs = xmalloc(sizeof(float) * (size_t)R * h);
    fill(dz, (size_t)R * h, 7);
    fill(x, (size_t)R * k, 9);
    DetTree t;
    det_tree_init(&t, (size_t)h * k + h);
    det_tree_chunks(&t, dz, x, R, h, k, 0, chunk, 0);
    det_tree_finish(&t, whole);
    det_tree_free(&t);
    int bad = 0, hh = h / parts, kh = k / parts;
    for (int r = 0; r < R; r++) memcpy(dzs + (size_t)r * hh, dz + (size_t)r * h, sizeof(float) * hh);
    det_tree_init(&t, (size_t)hh * k + hh);  // rows [0, h/2): W's first rows, then their bias
    det_tree_chunks(&t, dzs, x, R, hh, k, 0, chunk, 0);
    det_tree_finish(&t, part);
    det_tree_free(&t);
    bad += memcmp(part, whole, sizeof(float) * (size_t)hh * k) != 0;
    bad += memcmp(part + (size_t)hh * k, whole + (size_t)h * k, sizeof(float) * hh) != 0;
    for (int r = 0; r < R; r++) memcpy(xs + (size_t)r * kh, x + (size_t)r * k, sizeof(float) * kh);
    det_tree_init(&t, (size_t)h * kh + h);  // columns [0, k/2) of every row, the bias whole
    det_tree_chunks(&t, dz, xs, R, h, kh, 0, chunk, 0);
    det_tree_finish(&t, part);
    det_tree_free(&t);
    for (int o = 0; o < h; o++) bad += memcmp(part + (size_t)o * kh, whole + (size_t)o * k, sizeof(float) * kh) != 0;
    bad += memcmp(part + (size_t)h * kh, whole + (size_t)h * k, sizeof(float) * h) != 0;
    free(dz); free(x); free(xs); free(whole); free(part); free(dzs);
    return bad;
}

static void test_halves(void) {
    int bad = 0;
    for (int parts = 2; parts <= 4; parts += 2)
        bad += halves_case(16, 32, 8, 8, parts) + halves_case(16, 32, 16, 8, parts) +
               halves_case(64, 1024, 256, 32, parts) + halves_case(64, 512, 1024, 32, parts);
    EXPECT("det/--tp 2 and 4's part of a product's columns: the whole product's bits (forward and input gradient)",
           bad == 0, "%d rows differ", bad);
    bad = 0;
    for (int parts = 2; parts <= 4; parts += 2)
        bad += tree_halves_case(16, 32, 32, 8, parts) + tree_halves_case(64, 1024, 1024, 32, parts);
    EXPECT("det/--tp 2 and 4's part of a weight gradient's rows or columns: the whole layer's tree's bits", bad == 0,
           "%d rows differ", bad);
}

// model.c's det_slices: two sibling slices of the inner dimension (up to DET_FUSE_MAX wide), the right one
// added into C by det_gemm's beta 1, give the bits of the two products added after (a + b), forward (B is
// [N, K]) and input gradient (B is [K, N]); small shapes chunk by chunk, medium.json's in one call, bf16 too.
static int fuse_case(int tb, int M, int N, int K, int chunk, int bf16) {
    int w = K / 4;
    float *A = xmalloc(sizeof(float) * (size_t)M * K), *B = xmalloc(sizeof(float) * (size_t)K * N),
          *C = xmalloc(sizeof(float) * (size_t)M * N), *D = xmalloc(sizeof(float) * (size_t)M * N),
          *T = xmalloc(sizeof(float) * (size_t)M * N);
    fill(A, (size_t)M * K, 5); fill(B, (size_t)K * N, 6);
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] *= 1.0f + (float)(i % 7) / 64.0f;  // (less regular)
    int ldb = tb ? K : N, bad = 0;
    for (int j = 0; j < 4; j += 2) {
        const float *B0 = tb ? B + j * w : B + (size_t)j * w * N, *B1 = tb ? B + (j + 1) * w : B + (size_t)(j + 1) * w * N;
        det_gemm(0, tb, M, N, w, 1.0f, A + j * w, K, B0, ldb, 0.0f, C, N, chunk, bf16);
        det_gemm(0, tb, M, N, w, 1.0f, A + (j + 1) * w, K, B1, ldb, 1.0f, C, N, chunk, bf16);
        det_gemm(0, tb, M, N, w, 1.0f, A + j * w, K, B0, ldb, 0.0f, D, N, chunk, bf16);
        det_gemm(0, tb, M, N, w, 1.0f, A + (j + 1) * w, K, B1, ldb, 0.0f, T, N, chunk, bf16);
        for (size_t i = 0; i < (size_t)M * N; i++) D[i] += T[i];
        bad += memcmp(C, D, sizeof(float) * (size_t)M * N) != 0;
    }
    free(A); free(B); free(C); free(D); free(T);
    return bad;
}

static void test_fuse(void) {
    int bad = 0;
    for (int tb = 0; tb < 2; tb++)
        bad += fuse_case(tb, 40, 24, 32, 8, 0) + fuse_case(tb, 40, 24, 32, 8, 1) +
               fuse_case(tb, 64, 1024, 4 * DET_FUSE_MAX, 32, 0) + fuse_case(tb, 64, 512, 1024, 32, 1);
    EXPECT("det/det_slices: a sibling slice added by the gemm's beta 1 gives the bits of the add after it", bad == 0,
           "%d of 16 pairs differ", bad);
}

int main(void) {
    test_fuse();
    test_halves();
    test_sum();
    test_tree();
    test_gemm();
    test_chunks();
    return unit_failures ? 1 : 0;
}
