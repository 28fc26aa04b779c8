// base/det.c: --deterministic's arithmetic (base/det.h): OpenBLAS products on fixed row chunks, the weight
// gradients' leaves (an own fmaf kernel) and the rows' pairwise tree over the chunks, and the exact sum of
// squares. Compiled without contraction into fused multiply-adds (-std=c11 sets -ffp-contract=off): the
// only fused ones are the kernel's, named, so the tree's sums round the same on every call.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif
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
    for (int i = 0; i < t->n; i++)
        if (t->nodes[i].v != t->home) free(t->nodes[i].v);
    for (int i = 0; i < t->n_spare; i++) free(t->spare[i]);
    free(t->nodes);
    free(t->spare);
    memset(t, 0, sizeof *t);
}

void det_tree_home(DetTree *t, float *home) {
    if (t->n) return;
    t->home = home;
    t->home_held = 0;
}

float *det_tree_buffer(DetTree *t) {
    if (t->home && !t->home_held) {
        t->home_held = 1;
        return t->home;
    }
    if (t->n_spare) return t->spare[--t->n_spare];
    return xmalloc(sizeof(float) * (t->len ? t->len : 1));
}

static void give_back(DetTree *t, float *v) {
    if (v == t->home) {  // (free again: not a spare, and not ours to free)
        t->home_held = 0;
        return;
    }
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

// The weight gradient's leaves, our own kernel: a chunk's leaf is, for every (o, j), the sum over the
// chunk's rows in row order, each step one fused multiply-add (fmaf: rounded once), from +0. Its bits are
// the arithmetic's, not a library's choice of kernel: no tile, width or vector path changes them. The
// leaves of an aligned run of 2^L chunks are added in their pairwise tree tile by tile while the tile is
// in registers and cache: one pass over the inputs and one write of the run's sum, no sgemm per chunk.
#define WG_O 8            // a tile's rows of W (outputs): dz's columns
#define WG_V 2            // a tile's 16-float vectors a row
#define WG_J (16 * WG_V)  // a tile's columns of W (inputs): x's columns
#define WG_G 4            // tiles of outputs whose dz panels a pass over x's panels reuses from cache

// src[rows, w] (row stride ld) packed as panels of `tile` columns, panel b's row r at (b rows + r) tile,
// columns past w zero (every (o, j) then goes through the same code), rounded to bf16 when asked.
static void pack(float *p, const float *src, int rows, int w, int ld, int tile, int bf16) {
    int nb = (w + tile - 1) / tile;
    for (int b = 0; b < nb; b++)
        for (int r = 0; r < rows; r++) {
            float *d = p + ((size_t)b * rows + r) * tile;
            const float *row = src + (size_t)r * ld + (size_t)b * tile;
            for (int t = 0; t < tile; t++) d[t] = b * tile + t < w ? operand(row[t], bf16) : 0;
        }
}

// One chunk's leaf for one tile: acc[o][j] = the fmaf chain over the chunk's rows (pd, px: the panels at
// the chunk's first row).
static void tile_leaf(const float *pd, const float *px, int chunk, float *acc) {
#ifdef __AVX512F__
    __m512 c[WG_O][WG_V], b[WG_V];
    for (int o = 0; o < WG_O; o++)
        for (int u = 0; u < WG_V; u++) c[o][u] = _mm512_setzero_ps();
    for (int r = 0; r < chunk; r++) {
        for (int u = 0; u < WG_V; u++) b[u] = _mm512_loadu_ps(px + (size_t)r * WG_J + 16 * u);
#pragma GCC unroll 16
        for (int o = 0; o < WG_O; o++) {
            __m512 a = _mm512_set1_ps(pd[(size_t)r * WG_O + o]);
#pragma GCC unroll 4
            for (int u = 0; u < WG_V; u++) c[o][u] = _mm512_fmadd_ps(a, b[u], c[o][u]);
        }
    }
    for (int o = 0; o < WG_O; o++)
        for (int u = 0; u < WG_V; u++) _mm512_storeu_ps(acc + o * WG_J + 16 * u, c[o][u]);
#elif defined(__FMA__)  // AVX2: 16 registers, so the tile in quarters of 4 x 16, each over the chunk's rows
    for (int q = 0; q < 4; q++) {
        const int o0 = q / 2 * 4, j0 = q % 2 * 16;
        __m256 c[4][2];
        for (int o = 0; o < 4; o++) c[o][0] = c[o][1] = _mm256_setzero_ps();
        for (int r = 0; r < chunk; r++) {
            const float *row = px + (size_t)r * WG_J + j0;
            __m256 b0 = _mm256_loadu_ps(row), b1 = _mm256_loadu_ps(row + 8);
#pragma GCC unroll 4
            for (int o = 0; o < 4; o++) {
                __m256 a = _mm256_broadcast_ss(pd + (size_t)r * WG_O + o0 + o);
                c[o][0] = _mm256_fmadd_ps(a, b0, c[o][0]);
                c[o][1] = _mm256_fmadd_ps(a, b1, c[o][1]);
            }
        }
        for (int o = 0; o < 4; o++) {
            _mm256_storeu_ps(acc + (o0 + o) * WG_J + j0, c[o][0]);
            _mm256_storeu_ps(acc + (o0 + o) * WG_J + j0 + 8, c[o][1]);
        }
    }
#else
    for (int i = 0; i < WG_O * WG_J; i++) acc[i] = 0.0f;
    for (int r = 0; r < chunk; r++)
        for (int o = 0; o < WG_O; o++)
            for (int j = 0; j < WG_J; j++)
                acc[o * WG_J + j] = fmaf(pd[(size_t)r * WG_O + o], px[(size_t)r * WG_J + j], acc[o * WG_J + j]);
#endif
}

// Adds leaf c (0, 1, ...) of a run, v, into the pairwise tree whose open left siblings are stack[level]
// (len floats each): v climbs while it is a right child, its sums written straight into the slot of the
// level it is left at (free: its last occupant was added into a lower one); returns that level.
static int climb(float *stack, size_t len, long c, const float *v) {
    int top = 0;
    while (c >> top & 1) top++;
    float *d = stack + (size_t)top * len;
    if (!top) {
        memcpy(d, v, sizeof(float) * len);
        return 0;
    }
    for (size_t i = 0; i < len; i++) d[i] = stack[i] + v[i];
    for (int lv = 1; lv < top; lv++)
        for (size_t i = 0; i < len; i++) d[i] = stack[(size_t)lv * len + i] + d[i];
    return top;
}

// Where a run's sum goes: the subtrees already in the tree it climbs past (sib[0] its sibling, sib[1] the
// sibling of their sum, ...: what det_tree_add would add it to, one after the other), and dst (sib[m - 1],
// or a fresh buffer when m is 0). Writing sib[m-1] + (... + (sib[0] + s)) while s is in cache spares a
// micro-batch's run a pass over its sum and one over each sibling (a pipeline's 64 rows: 3 a step).
#define DET_CHAIN 16  // (more levels are added by det_tree_add, as before)
typedef struct {
    float *dst;
    float *sib[DET_CHAIN];
    int m;
} RunOut;

// n sums s[0..n) at offset i of the run's sum, through the chain into out->dst.
static inline void put_sums(const RunOut *out, size_t i, const float *s, int n) {
    for (int c0 = 0; c0 < n; c0 += WG_J) {
        int w = n - c0 < WG_J ? n - c0 : WG_J;
        float v[WG_J], *d = out->dst + i + c0;
        const float *in = s + c0;
        if (!out->m) {
            for (int j = 0; j < w; j++) d[j] = in[j];
            continue;
        }
        for (int j = 0; j < w; j++) v[j] = out->sib[0][i + c0 + j] + in[j];  // a + b == b + a
        for (int q = 1; q < out->m; q++)
            for (int j = 0; j < w; j++) v[j] = out->sib[q][i + c0 + j] + v[j];
        for (int j = 0; j < w; j++) d[j] = v[j];
    }
}

// The sum of n (a power of two) leaves of chunks starting at packed row r0, through out: W's [h, k] then the
// bias [h] (a chunk's rows of dz added one by one, then the same tree). A leaf that is a left child is
// computed in its stack slot (no copy).
static void run_sum(const float *pd, const float *px, const float *dz, int rows, int h, int k, int r0, int n, int chunk,
                    int bf16, const RunOut *out) {
    int L = 0;
    while (1 << L < n) L++;
    size_t slot = (size_t)WG_O * WG_J + (size_t)h;
    float *stack = xmalloc(sizeof(float) * ((size_t)(L + 1) * slot + (size_t)h)), acc[WG_O * WG_J];
    for (int og = 0; og * WG_O < h; og += WG_G)
        for (int jb = 0; jb * WG_J < k; jb++)
            for (int ob = og; ob < og + WG_G && ob * WG_O < h; ob++) {
                const float *d = pd + ((size_t)ob * rows + r0) * WG_O, *x = px + ((size_t)jb * rows + r0) * WG_J;
                // The tile's lines of the siblings and of dst, asked for while its leaves are computed: a few
                // micro-batch rows give the leaves too little time to hide the misses of the stride's pages
                // otherwise (perf: the siblings' adds took a third of run_sum's samples on 1F1B's 64 rows).
                // (Here, not in a function of its own: GCC drops a call to one that only prefetches.)
                for (int o = 0; o < WG_O && ob * WG_O + o < h; o++)
                    for (int j = 0; j < WG_J; j += 16) {
                        size_t at = (size_t)(ob * WG_O + o) * k + (size_t)jb * WG_J + j;
                        for (int q = 0; q + 1 < out->m; q++) __builtin_prefetch(out->sib[q] + at, 0, 3);
                        __builtin_prefetch(out->dst + at, 1, 3);  // (sib[m - 1] when m > 0)
                    }
                int lv = 0;
                for (int c = 0; c < n; c++) {
                    float *leaf = c & 1 ? acc : stack;
                    tile_leaf(d + (size_t)c * chunk * WG_O, x + (size_t)c * chunk * WG_J, chunk, leaf);
                    lv = c & 1 ? climb(stack, WG_O * WG_J, c, acc) : 0;
                }
                const float *s = stack + (size_t)lv * WG_O * WG_J;
                int jn = k - jb * WG_J < WG_J ? k - jb * WG_J : WG_J;
                for (int o = 0; o < WG_O && ob * WG_O + o < h; o++)
                    put_sums(out, (size_t)(ob * WG_O + o) * k + (size_t)jb * WG_J, s + o * WG_J, jn);
            }
    float *db = stack + (size_t)(L + 1) * slot;
    int lv = 0;
    for (int c = 0; c < n; c++) {
        for (int o = 0; o < h; o++) db[o] = 0.0f;
        for (int r = r0 + c * chunk; r < r0 + (c + 1) * chunk; r++)
            for (int o = 0; o < h; o++) db[o] += operand(dz[(size_t)r * h + o], bf16);
        lv = climb(stack, (size_t)h, c, db);
    }
    put_sums(out, (size_t)h * k, stack + (size_t)lv * h, h);
    free(stack);
}

// The chain of subtrees a run at (level, start) would be added to by det_tree_add (none when reordered):
// taken out of the tree (all but the last given back once the run is written: the caller's job).
static int take_chain(DetTree *t, int level, long start, RunOut *out) {
    CHECK(find(t, level, start) < 0, "det: rows %ld.. (2^%d) arrived twice", start, level);
    out->m = 0;
    while (!reordered() && out->m < DET_CHAIN) {
        int s = find(t, level, start ^ (1L << level));
        if (s < 0) break;
        out->sib[out->m++] = t->nodes[s].v;
        t->nodes[s] = t->nodes[--t->n];
        start &= ~(1L << level);
        level++;
    }
    out->dst = out->m ? out->sib[out->m - 1] : det_tree_buffer(t);
    return level;
}

void det_tree_chunks(DetTree *t, const float *dz, const float *x, int rows, int h, int k, long row0, int chunk,
                     int bf16) {
    CHECK(rows % chunk == 0 && row0 % chunk == 0, "det: rows %ld.. (%d) are not whole chunks of %d", row0, rows, chunk);
    int level = 0;
    while (1 << level < chunk) level++;
    size_t nd = (size_t)(h + WG_O - 1) / WG_O * WG_O * rows, need = nd + (size_t)(k + WG_J - 1) / WG_J * WG_J * rows;
    static _Thread_local float *packed;  // kept for the next call: no fresh pages each layer (one per thread)
    static _Thread_local size_t packed_n;
    if (packed_n < need) {
        free(packed);
        packed = xmalloc(sizeof(float) * need);
        packed_n = need;
    }
    float *pd = packed, *px = packed + nd;
    pack(pd, dz, rows, h, h, WG_O, bf16);
    pack(px, x, rows, k, k, WG_J, bf16);
    for (int c = 0; c < rows;) {
        // The largest aligned run of chunks from here (its first chunk's index a multiple of its length),
        // summed as one subtree (reordered: each chunk a leaf of its own).
        long at = (row0 + c) / chunk;
        int n = 1, left = (rows - c) / chunk;
        while (!reordered() && at % (2L * n) == 0 && 2 * n <= left) n *= 2;
        int L = 0;
        while (1 << L < n) L++;
        RunOut out;
        int top = take_chain(t, level + L, row0 + c, &out);
        run_sum(pd, px, dz, rows, h, k, c, n, chunk, bf16, &out);
        for (int q = 0; q + 1 < out.m; q++) give_back(t, out.sib[q]);
        det_tree_add(t, top, (row0 + c) & ~((1L << top) - 1), out.dst);
        c += n * chunk;
    }
}

static int by_start(const void *a, const void *b) {
    long x = ((const DetNode *)a)->start, y = ((const DetNode *)b)->start;
    return (x > y) - (x < y);
}

void det_tree_finish(DetTree *t, float *out) {
    if (!t->n) {
        memset(out, 0, sizeof(float) * t->len);
        t->home = NULL;
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
    if (acc != out) memcpy(out, acc, sizeof(float) * t->len);  // (out == acc: home held the last subtree)
    give_back(t, acc);
    t->n = 0;
    t->home = NULL;
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
