// base/det.h: --deterministic's arithmetic: products whose every value is its inner sum taken index by
// index, whatever the call's shape, and the rows' pairwise tree that a weight's gradient is summed in,
// kept as subtrees until their siblings arrive, so no layout changes a bit (docs/deterministic.md).
#pragma once
#include <stddef.h>

// C[M,N] = alpha * op(A) op(B) + beta * C as Backend.gemm, each value's sum over K taken in order,
// k = 0, 1, ..., K-1 (bf16: the operands rounded to bf16 first, as the bf16 gemm does).
void det_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, int bf16);

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
} DetTree;

void det_tree_init(DetTree *t, size_t len);
void det_tree_free(DetTree *t);
float *det_tree_buffer(DetTree *t);  // len floats (contents undefined) for det_tree_add
// Adds the subtree (level, start) whose sum is v (from det_tree_buffer; the tree owns it now).
void det_tree_add(DetTree *t, int level, long start, float *v);
// The leaves of one layer's gradient for rows row0.. of a micro-batch: leaf i is [dz_i x_i^T, dz_i],
// the layer's weight [h, k] then its bias [h] (bf16: dz and x rounded first, as the bf16 gemm reads them).
void det_tree_rows(DetTree *t, const float *dz, const float *x, int rows, int h, int k, long row0, int bf16);
// The sum of every row that arrived, folded in the canonical order (the subtrees left, right to left:
// the pairwise tree over the rows padded to a power of two), written to out[len]; the tree is emptied.
// Nothing arrived: out is zeroed.
void det_tree_finish(DetTree *t, float *out);
// The subtrees held, in order of start (for an exchange between replicas): count, and node i.
static inline int det_tree_count(const DetTree *t) { return t->n; }
