// base/det.h: --deterministic's arithmetic: products computed on fixed chunks of rows, so a row's bits do
// not depend on how many rows a call carries, and the rows' pairwise tree that a weight's gradient is
// summed in, kept as subtrees until their siblings arrive, so no layout changes a bit; and the scalar sums
// (the loss, the gradient norm) made exact, so no order changes them (docs/determinism.md).
#pragma once
#include <math.h>
#include <stddef.h>

// From this many multiply-adds per chunk (chunk x N x K) on, one sgemm over many whole chunks gives each row
// the bits a chunk-sized call gives it: OpenBLAS's small-matrix kernels, whose order of sums depends on M,
// stop at 1e6 (tests/unit_det.c checks it on the library it links).
#define DET_BIG (1 << 21)

// C[M,N] = alpha * op(A) op(B) + beta * C as Backend.gemm, computed on chunks of `chunk` rows of C: each
// chunk one sgemm of shape [chunk, N, K] (the last rows padded to a whole chunk), or, for shapes of
// DET_BIG and more, the whole chunks in one call. A row starting a chunk in one call starts one in any
// call whose first row is a multiple of chunk. bf16: the operands rounded to bf16 first, as the bf16
// gemm does (their products are exact in fp32).
void det_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int chunk, int bf16);

// The canonical split of a hidden layer's inner dimension (model.c's det_slices): --tp 2 and 4 divide it.
#define DET_SLICES 4
// Up to this inner dimension a product's sgemm with beta = 1 adds it into C with one rounding per float
// (the slice is one block of OpenBLAS's inner dimension): det_slices adds a right sibling slice that way,
// a pass over C saved (tests/unit_det.c checks it at medium.json's shapes).
#define DET_FUSE_MAX 256

// A subtree of the rows' tree: rows [start, start + 2^level) summed pairwise, len floats.
typedef struct {
    int level;
    long start;
    float *v;
} DetNode;

// The subtrees a gradient has so far. Two siblings are added (one add per float, which IEEE makes the
// same in either order) as soon as both are here, so what the tree holds depends only on which rows
// have arrived, never on who computed them or when.
typedef struct {
    size_t len;
    int n, cap;
    DetNode *nodes;
    float **spare;  // freed buffers, reused
    int n_spare;
    float *home;    // det_tree_home's: the caller's buffer, handed out first (never freed or kept as a spare)
    int home_held;  // whether a subtree is in home now
} DetTree;

void det_tree_init(DetTree *t, size_t len);
void det_tree_free(DetTree *t);
float *det_tree_buffer(DetTree *t);  // len floats (contents undefined) for det_tree_add
// While the tree is empty: home (len floats, or NULL: none) is where det_tree_finish will be asked to write,
// and the tree's first buffer until then, so a step whose rows end as one subtree is summed there and
// finished without a copy. Nothing else may read or write home until that det_tree_finish, which forgets it.
void det_tree_home(DetTree *t, float *home);
// Adds the subtree (level, start) whose sum is v (from det_tree_buffer; the tree owns it now).
void det_tree_add(DetTree *t, int level, long start, float *v);
// The leaves of one layer's gradient for rows row0 .. row0 + rows - 1 of the step (whole chunks): leaf c
// is the chunk's [dz^T x, the sum of dz's rows], the layer's weight [h, k] then its bias [h]: each weight
// element the chunk's rows in order, one fmaf each from +0 (det.c's own kernel, not a library's), the bias
// its rows added one by one (bf16: dz and x rounded first, as the bf16 gemm reads them). Each aligned run of
// 2^L chunks in the call is summed in its pairwise tree in one pass and added as one subtree.
void det_tree_chunks(DetTree *t, const float *dz, const float *x, int rows, int h, int k, long row0, int chunk,
                     int bf16);
// The sum of every row that arrived, folded in the canonical order (the subtrees left, right to left:
// the pairwise tree over the rows padded to a power of two), written to out[len]; the tree is emptied.
// Nothing arrived: out is zeroed.
void det_tree_finish(DetTree *t, float *out);
// --deterministic's scalar sums. The loss: each row's loss (a float) rounded to a multiple of 2^-32, so every
// sum of rows (a micro-batch's, a step's, the ranks' all-reduce, in double) is exact, and so the same in any
// order, while the step's summed loss stays below 2^21 (65536 rows at a loss of 32 each).
static inline double det_loss_row(double loss) { return nearbyint(loss * 0x1p32) * 0x1p-32; }

// The gradient norm's square (--clip-grad): the squares of floats summed exactly in fixed point, 32 bits a
// limb from 2^-DET_SUM_LOW (a square's bits below it dropped, term by term) up past a float's largest
// square, so no order of the terms, the shards or the ranks changes a bit. The exported form is
// DET_SUM_LIMBS + 1 doubles (limbs below 2^32, then the sum of any non-finite squares): one process's
// arrays added by an all-reduce in any order stay exact, and det_sum_value reads the sum back.
#define DET_SUM_LIMBS 20
#define DET_SUM_LOW 320
typedef struct {
    long long limb[DET_SUM_LIMBS];
    double nonfinite;  // the non-finite squares' sum (Inf or NaN), else 0
    long adds;         // since the last carry (a limb takes 2^31 adds of 2^32)
} DetSum;
void det_sum_sumsq(DetSum *s, const float *x, size_t n);  // adds x[i]^2, i < n
void det_sum_export(DetSum *s, double *out);                // out[DET_SUM_LIMBS + 1]
double det_sum_value(const double *in);                     // the sum an exported (or summed) array holds

// The subtrees held, in order of start (for an exchange between replicas): count, and node i.
static inline int det_tree_count(const DetTree *t) { return t->n; }
