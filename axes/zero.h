// axes/zero.h: ZeRO 1 to 3 of one Stage over its dp group, on GradSync's buckets (the data axis' second
// file): each rank updates only its shard of every bucket (1: of the optimizer state; 2: and gradients
// reduce-scattered bucket by bucket as each backward produces them, into this rank's shard; 3: and
// parameters held only as this rank's shard, gathered bucket by bucket, one ahead, around every pass that
// reads them). The working buffers of 2 and 3 are a small pool: ZERO_BUFS units of each (axes/data.h).
#pragma once
#include "axes/data.h"

#define ZERO_UNIT 2  // the most buckets of one unit (--ep: an MoE layer's router and its experts)

// A unit: the buckets of the same local layers [lo, hi), adjacent in the flat buffer, whose gradients (or
// weights) a working buffer holds together: one bucket, or (--ep) an MoE layer's router and experts, each
// bucket summed (and sharded) over its own group (Bucket.comm).
typedef struct {
    int first, n;       // its buckets: GradSync.b[first .. first + n)
    size_t off, len;    // the range of the flat buffer they cover together
} ZeroUnit;

typedef struct {
    float *buf;                 // [largest unit] floats
    int unit;                   // the unit it holds, -1: free
    CommReq *req[ZERO_UNIT];    // its buckets' collectives in flight (req[0] NULL: none)
    int span[ZERO_UNIT];        // those collectives' spans in GradSync.spans
    long seq;                   // when they were started (the oldest in flight is waited for first)
    int direct;     // its reduce-scatters write this rank's chunks straight into the gradient shard
} ZeroBuf;

typedef struct Zero {
    GradSync *g;
    int level;               // 2: gradients sharded; 3: parameters too
    ZeroUnit *units;         // [n_units] the units, in the buckets' order
    int n_units;
    int *unit_of;            // [n_layers + 1] the unit holding local layer j (the head: n_layers)
    size_t most;             // floats of the largest unit
    float *gshard;           // [shard_total] this rank's gradient shards, summed over the step's backwards
    int *gfresh;  // [n_units] the unit's first reduce-scatter of the step (overwriting the shard) is to come
    float *pshard;           // ZeRO-3: [shard_total] this rank's parameter shards (the parameters at rest)
    ZeroBuf gb[ZERO_BUFS];   // a unit's whole gradient while a backward writes it and it is reduce-scattered
    ZeroBuf pb[ZERO_BUFS];   // ZeRO-3: a unit's gathered weights while a pass reads them (or prefetched)
    long seq;
    int span_cap;            // GradSync.spans' capacity
    double gathered, peak_gathered;  // bytes of gathered weights held now, and the most at once
    long prefetches;                 // gathers started for the layer read after the one computing now ...
    long prefetch_mark, step_prefetches;  // ... and in a whole step (the last one begun after a full one)
} Zero;

// The shards of GradSync's buckets, and its step taken over (ShardOps) at `level`: ZeRO-1 keeps the sync's
// bucketed hooks, whose collectives become reduce-scatters; 2 and 3 take over the stage's gradient hooks
// (and, for 3, its weight hook) and allocate the shards; ZeRO-3 initialises its parameter shards from
// (seed, global layer), as stage_init would the whole. For 2 the stage was made with StageSpec.grads_elsewhere
// (and params_elsewhere for 3). From then on GradSync's step runs zero.c's: begin_step; finish (waits for
// every reduce-scatter in flight, adds it into the shards); the optimizer step of this rank's shards (1, 2:
// then the updated weights all-gathered); gather_grads (the whole averaged gradient into s->grads, for
// --verify); free; unshard and reshard (the moments, and 3's parameters, for gradsync_unshard).
void zero_init(GradSync *g, int level, uint64_t seed, int layers);
// set-up: ZeRO's part of the data axis' (after data_setup): zero_init on every local stage's sync at the
// plan's level (nothing at 0).
void zero_setup(const Plan *p, GradSync *sync, int n_sync, uint64_t seed, int layers);
// Bytes this rank holds for the stage's working buffers (ZeRO-2, 3).
double zero_working_bytes(const GradSync *g);
// report: ZeRO's figures of the data axis' part (collective over the world): the working buffers, the
// gathered weights held at once, the prefetched gathers of a step (the largest over the ranks).
void zero_report_fill(DataReport *r, const Plan *p, const GradSync *sync, int n_sync);
