// axes/compress.h: compressed gradients on the data axis (--compress topk:F), the simple baseline with error
// feedback: each rank adds its error buffer e to its bucket's gradient (g' = g + e), sends the ceil(F n)
// entries of g' largest in magnitude as (index, value) pairs, keeps e = g' - what it sent, and every rank sums
// the all-gathered pairs of all replicas in rank order (the same bits on every replica). State in checkpoints.
#pragma once
#include <stddef.h>
#include "axes/data.h"  // GradSync, DataReport

// One stage's compressor (GradSync.cx): its error buffer and the buffers of one bucket's exchange, on the host.
typedef struct Compress {
    double fraction;     // F: the share of a bucket's entries sent
    float *err;          // [n_params]: what this rank has not sent yet (error feedback)
    float *work, *mag;   // [largest bucket]: g' of the bucket, and its magnitudes (the selection's scratch)
    int *idx;            // [D * most]: the replicas' indices ...
    float *val;          // ... and values, rank after rank (most: the largest bucket's k)
    float *plain;        // [n_params] or NULL: --verify's exact sum of step 1 (compress_swap_plain)
    long long steps;     // the steps summed so far in this run (the exact sum: the first one's alone)
    double sent, exact;  // this step's bytes a rank sends: the ring all-gather's of the pairs, and a ring
                         // all-reduce's of the whole buckets (what the exact sum would send)
} Compress;

// rules: --compress topk:F with 0 < F <= 1, on data parallelism without ZeRO, --deterministic, --sync-every
// and --tp (one line each, the reason). 0, or -1 with one line (refuse).
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
