// axes/compress.h: compressed gradients on the data axis (--compress topk:F, powersgd:R, sign), each with error
// feedback: each rank adds its error buffer e to its bucket's gradient (g' = g + e), sends a compressed g'
// (topk: the ceil(F n) entries largest in magnitude as (index, value) pairs; powersgd and sign: axes/lowrank.c),
// keeps e = g' - its share of what arrived, and every rank sums the all-gathered messages of all replicas in
// rank order (the same bits on every replica). Their state (e; PowerSGD's Q) in checkpoints.
#pragma once
#include <stddef.h>
#include "axes/data.h"  // GradSync, DataReport

// One stage's compressor (GradSync.cx): its error buffer and the buffers of one bucket's exchange, on the host.
typedef struct Compress {
    int method;          // COMPRESS_TOPK, COMPRESS_POWERSGD or COMPRESS_SIGN (axes/data.h)
    double fraction;     // topk: F, the share of a bucket's entries sent
    int rank;            // powersgd: R
    float *err;          // [n_params]: what this rank has not sent yet (error feedback)
    float *q;            // powersgd: each weight matrix's Q [in, R], the replicas' last sum (warm start); else NULL
    size_t *q_off, q_n;  // powersgd: where local layer j's Q starts in q, and q's floats
    float *work, *mag;   // [largest bucket]: g' of the bucket, and its magnitudes (topk's selection; lowrank: the
                         // bucket's sum)
    float *tx, *rx;      // powersgd, sign: a bucket's message, and every replica's (rank after rank)
    float *sum;          // ... and their floats summed
    int *idx;            // [D * most]: the replicas' indices ...
    float *val;          // ... and values, rank after rank (most: the largest bucket's k)
    float *plain;        // [n_params] or NULL: --verify's exact sum of step 1 (compress_swap_plain)
    long long steps;     // the steps summed so far in this run (the exact sum: the first one's alone)
    double sent, exact;  // this step's bytes a rank sends: the ring all-gather's of the pairs, and a ring
                         // all-reduce's of the whole buckets (what the exact sum would send)
} Compress;

// rules: --compress topk:F with 0 < F <= 1, powersgd:R with 1 <= R <= min(--hidden, --inputs), or sign; on
// data parallelism without ZeRO, --deterministic, --sync-every and --tp (one line each, the reason). 0, or -1
// with one line (refuse).
int compress_rules(const TrainConfig *c, const Plan *p, Err *e);

// set-up: a compressor on each gradient sync (keep_plain: --verify, step 1's exact sum kept too).
void compress_setup(const Plan *p, struct GradSync *sync, int n_sync, int keep_plain);
void compress_free(struct GradSync *sync, int n_sync);
// gradsync_finish's part: every bucket compressed, all-gathered and summed into the stage's gradients.
void compress_finish(struct GradSync *g);
// --verify: swaps the stages' summed gradients with step 1's exact sums (twice: back again).
// report: the last step's bytes a rank sent and the exact sum's, the largest over the ranks (collective).
void compress_report_fill(DataReport *r, const struct GradSync *sync, int n_sync);
void compress_swap_plain(struct GradSync *sync, int n_sync);

// Checkpoints: each rank's file DIR/compress-rank-R.safetensors (its stages' error buffers), tagged with the
// step and the world. A resume whose checkpoint holds none ends every rank with one line (exit 2).
void compress_save(const struct GradSync *sync, int n_sync, const char *dir, long long step);
void compress_resume(struct GradSync *sync, int n_sync, const char *dir, long long step);
int compress_owns(const char *name);  // is name one of its files (train/checkpoint.c's ckpt_owns)?

// price: what one rank of pipeline stage `stage` sends per step under `method` (COMPRESS_*; arg: topk's F,
// powersgd's R), the (D-1) copies of its messages a ring all-gather sends (topk: F x the parameters as
// (index, value) pairs; powersgd: (out + in) min(R, out, in) a matrix; sign: a bit a weight and a scale a
// matrix; the biases whole), the stage's parameters, and its host work: COMPRESS_PASSES element-wise passes
// over them, PowerSGD's products (3 out x in r multiply-adds a matrix) and its Gram-Schmidt of P (out r (2 r + 3)
// element operations a matrix: two passes of a dot and an update against each earlier column, in double, in
// plain loops). Mixture-of-experts layers priced as plain ones.
#define COMPRESS_PASSES 4  // the bucket copied out, the error added, the error kept, the sum copied back
typedef struct {
    double bytes, params, mults, ortho;
} CompressTraffic;
CompressTraffic compress_price(const TrainConfig *c, const Plan *p, int stage, int method, double arg);

// axes/lowrank.c: powersgd and sign. The floats of a bucket's largest message; PowerSGD's Q allocated and drawn
// (a standard normal per matrix keyed by its global layer: the same on every replica), its floats returned;
// one bucket compressed, exchanged and summed into the stage's gradients.
size_t lowrank_message_floats(const Compress *x, const Stage *s, const Bucket *b);
size_t lowrank_q_setup(Compress *x, const Stage *s);
void lowrank_exchange(struct GradSync *g, const Bucket *b);
// PowerSGD's Gram-Schmidt on the R columns of P [rows, R] in place (exported for plan --calibrate's timing):
// rows R (2 R + 3) element operations, compress_price's `ortho`.
void lowrank_orthogonalise(float *P, size_t rows, size_t R);
