// axes/ddp.h: data-parallel gradient synchronisation of one Stage across its dp group (the same stage
// in every replica): buckets (contiguous ranges of the flat gradient buffer, in reverse layer
// order), naive or bucketed all-reduce (bucketed ones start from the stage's gradient hook while
// the backward still runs), ZeRO-1 (reduce-scatter, sharded optimizer step, all-gather), and the
// measured overlap of that communication with compute.
#pragma once
#include <stdint.h>
#include "comms.h"
#include "model.h"
#include "axes/axis.h"  // Span

enum { SYNC_NAIVE, SYNC_BUCKETED };
#define SYNC_CHOICES "naive|bucketed"

typedef struct {
    size_t off, n;              // range of the stage's flat params/grads
    int lo, hi;                 // the local layers it covers, [lo, hi) (head = n_layers)
    size_t shard_off, shard_n;  // ZeRO-1: this rank's part, relative to off
    size_t moment_off;          // ZeRO-1: where that part's Adam moments start in GradSync.m/.v
    CommReq *req;
} Bucket;


struct GradSync;
// ZeRO-2 and 3 (axes/zero.c, zero_init) take a GradSync's step over through these.
typedef struct {
    void (*begin_step)(struct GradSync *g);
    void (*finish)(struct GradSync *g);
    long (*optimizer_step)(struct GradSync *g, int optimizer, float lr, float wd, int t);
    void (*gather_grads)(struct GradSync *g);
    void (*free)(struct GradSync *g);
    void (*unshard)(struct GradSync *g);  // ZeRO-3: the whole parameters into s->params, and back
    void (*reshard)(struct GradSync *g);
} ShardOps;  // a collective in flight: started, completion observed

typedef struct GradSync {
    Comm *comm;
    Stage *s;
    int sync, algo, zero, D;
    Bucket *b;
    int nb;
    int next;             // bucketed: the next bucket to start (they start in order)
    int final;            // the backward now running is the step's last: its hook starts buckets
    int calls;            // collectives started this step
    double t_compute_end; // when this step's forward/backward work ended on this rank
    Span *spans;          // this step's collectives
    int n_spans;
    float *m, *v;         // ZeRO-1, 2, 3: Adam moments of this rank's shards (shard_total floats each)
    size_t shard_total;
    double ag_bytes, rs_bytes;      // ZeRO: this step's all-gathered and reduce-scattered bytes (buffer sizes) ...
    double step_ag, step_rs;        // ... and the last completed step's (gradsync_end_step)
    int step_calls;                 // the last completed step's collectives (an evaluation's gathers come after)
    struct Zero *zs;      // ZeRO-2 and 3 (axes/zero.h): the sharded gradients (and weights) ...
    const ShardOps *sharded;  // ... and what runs their step (NULL: ddp or ZeRO-1)
} GradSync;

// Buckets of whole layers, each closed once it reaches bucket_bytes (bucketed: so a bucket exceeds
// the cap by less than one layer), or one per parameter tensor (naive). Bucketed installs the
// stage's gradient hook.
void gradsync_init(GradSync *g, Comm *c, Stage *s, int sync, int algo, int zero, double bucket_bytes);
void gradsync_free(GradSync *g);
void gradsync_begin_step(GradSync *g);
// Says whether the next stage_backward is the step's last one on this stage (the last micro-batch
// of the last accumulation micro-step): only then are the gradients final and buckets start.
void gradsync_set_final(GradSync *g, int final);
// After the step's compute: starts what has not started (naive: everything, one tensor at a time,
// blocking) and waits for it. Afterwards the gradients are averaged over dp (ZeRO-1: only this
// rank's shards are).
void gradsync_finish(GradSync *g);
// The optimizer step: the whole stage, or (ZeRO-1) this rank's shards, then the all-gather of
// the parameters.
// Returns the index (in the stage's flat buffer) of the first parameter this rank updated that is
// not finite afterwards, or -1.
long gradsync_optimizer_step(GradSync *g, int optimizer, float lr, float wd, int t);
// ZeRO-1 only, for --verify: all-gathers the averaged gradient shards so the whole buffer holds them.
void gradsync_gather_grads(GradSync *g);
// The shards of src (shard_total floats, bucket by bucket at moment_off) made whole in dst
// (n_params floats) on every rank of dp: copied in place, then all-gathered.
void gradsync_whole(GradSync *g, float *dst, const float *src);
// Checkpoints of sharded runs are the unsharded files: before a save (and around a resume) the
// sharded state is made whole in the stage (s->adam_m, s->adam_v; ZeRO-3: s->params), and afterwards
// cut back into this rank's shards, the whole copies freed. Nothing without ZeRO. Collective over dp.
void gradsync_unshard(GradSync *g);
void gradsync_reshard(GradSync *g);
// The step's communication: in-flight time (the union of the collectives' spans) and the part of
// it after compute_end (exposed: nothing computed meanwhile, it delayed the optimizer step).
// compute_end: g->t_compute_end (this rank's work), or later in a pipeline (its other stages' work).
void gradsync_end_step(GradSync *g, double compute_end, double *comm_s, double *exposed_s);

// A checksum of the stage's parameters (bit-exact: equal only when every float is identical).
uint64_t stage_param_checksum(const Stage *s);
