// axes/data.h: data parallelism, the axis (axes/axis.h's contract): its rules, sizes, set-up, report part
// and price; and its runtime, the gradient synchronisation of one Stage across its dp group (the same
// stage in every replica): buckets (contiguous ranges of the flat gradient buffer, in reverse layer
// order), naive or bucketed all-reduce (bucketed ones start from the stage's gradient hook while the
// backward still runs), and the measured overlap of that communication with compute. ZeRO 1 to 3, which
// shards what the buckets sum, is axes/zero.c's: it takes a GradSync's step over through ShardOps.
#pragma once
#include <stdint.h>
#include "comms.h"
#include "model.h"
#include "axes/axis.h"  // Plan, Facts, Err, MemNeed, Span

enum { SYNC_NAIVE, SYNC_BUCKETED };
#define SYNC_CHOICES "naive|bucketed"
#define ZERO_BUFS 2  // ZeRO-2, 3's working buffers of each kind: the bucket in use and the one in flight (prefetch)

typedef struct {
    size_t off, n;              // range of the stage's flat params/grads
    int lo, hi;                 // the local layers it covers, [lo, hi) (head = n_layers)
    size_t shard_off, shard_n;  // ZeRO: this rank's part, relative to off (axes/zero.c sets them)
    size_t moment_off;          // ZeRO: where that part's Adam moments start in GradSync.m/.v
    CommReq *req;
    Comm *comm;                 // the group that sums it: the sync's replicas, or (--ep) an MoE layer's experts'
    int algo;                   // holders, the replicas of the same expert rank (GradSync.peers), and by what
} Bucket;

struct GradSync;
// ZeRO (axes/zero.c, zero_setup) takes a GradSync's step over through these; NULL: the sync's own.
typedef struct {
    void (*begin_step)(struct GradSync *g);
    void (*finish)(struct GradSync *g);
    long (*optimizer_step)(struct GradSync *g, const OptimStep *o);
    void (*gather_grads)(struct GradSync *g);
    float *(*grad_shard)(struct GradSync *g, int bucket);  // where this rank's shard of the bucket's gradient lies
    void (*free)(struct GradSync *g);
    void (*unshard)(struct GradSync *g);  // the whole moments (ZeRO-3: and parameters) into the stage, and back
    void (*reshard)(struct GradSync *g);
} ShardOps;

typedef struct GradSync {
    Comm *comm;
    Comm *peers;  // --ep: the D/N replicas holding this rank's experts (axes/expert.c), NULL: none
    Stage *s;
    int sync, algo, zero, D;
    int scatter;  // 1: a bucket's collective is a reduce-scatter, each rank keeping its shard (ZeRO-1)
    int det_pair;  // --deterministic: 2 replicas whose rows are sibling subtrees (data_setup): buckets as usual
    Bucket *b;
    int nb;
    int next;              // bucketed: the next bucket to start (they start in order)
    int final;             // the backward now running is the step's last: its hook starts buckets
    int calls;             // collectives started this step
    double t_compute_end;  // when this step's forward/backward work ended on this rank
    Span *spans;           // this step's collectives
    int n_spans;
    float *m, *v;  // ZeRO: Adam moments of this rank's shards (shard_total floats each)
    size_t shard_total;
    double ag_bytes, rs_bytes;  // ZeRO: this step's all-gathered and reduce-scattered bytes (buffer sizes) ...
    double step_ag, step_rs;    // ... and the last completed step's (gradsync_end_step)
    int step_calls;             // the last completed step's collectives (an evaluation's gathers come after)
    struct Zero *zs;            // ZeRO (axes/zero.h): the shards' state ...
    const ShardOps *sharded;    // ... and what runs their step (NULL: no ZeRO)
    struct Compress *cx;        // --compress (axes/compress.h): its state, and what sums the buckets after the
    void (*compressed)(struct GradSync *g);  // backward instead (compress_setup sets both; NULL: no --compress)
} GradSync;

// Buckets of whole layers, each closed once it reaches bucket_bytes (bucketed: so a bucket exceeds
// the cap by less than one layer), or one per parameter tensor (naive). Bucketed installs the
// stage's gradient hook. peers (--ep, else NULL): an MoE layer's experts are summed over them, in a
// bucket of their own after its router's (summed over c like every other range; the same mean over the
// global batch: a replica's gradient is scaled by 1/the step's rows of all replicas, and an expert's
// rows reached its holders only).
void gradsync_init(GradSync *g, Comm *c, Comm *peers, Stage *s, int sync, int algo, double bucket_bytes);
void gradsync_free(GradSync *g);
void gradsync_begin_step(GradSync *g);
// Says whether the next stage_backward is the step's last one on this stage (the last micro-batch
// of the last accumulation micro-step): only then are the gradients final and buckets start.
void gradsync_set_final(GradSync *g, int final);
// After the step's compute: starts what has not started (naive: everything, one tensor at a time,
// blocking) and waits for it. Afterwards the gradients are averaged over dp (ZeRO: only this rank's
// shards are).
void gradsync_finish(GradSync *g);
// The optimizer step: the whole stage, or (ZeRO) this rank's shards, then the all-gather of the
// parameters. Returns the index (in the stage's flat buffer) of the first parameter this rank updated
// that is not finite afterwards, or -1.
long gradsync_optimizer_step(GradSync *g, const OptimStep *o);
// ZeRO only, for --verify: the averaged gradient made whole in the stage's buffer.
void gradsync_gather_grads(GradSync *g);
// --clip-grad, after gradsync_finish: the sum of the squares of the gradient this rank holds for the stage
// (the whole of it on replica 0 alone, every replica holding the same; with ZeRO this rank's shards), the
// parts a tensor-parallel group holds whole on every rank counted only when replicated_too (stage_grad_sumsq);
// and that gradient scaled by a (every replica scales its own copy, ZeRO its shards).
double gradsync_grad_sumsq(GradSync *g, int replicated_too, DetSum *exact);
// --deterministic, replicas other than det_pair's: every replica's subtrees of the stage's gradients added
// into every replica's trees (an all-gather over dp), so each holds the whole step's tree; not folded yet.
void gradsync_det_gather(GradSync *g);
void gradsync_grad_scale(GradSync *g, float a);
// Checkpoints of sharded runs are the unsharded files: before a save (and around a resume) the
// sharded state is made whole in the stage (s->adam_m, s->adam_v; ZeRO-3: s->params), and afterwards
// cut back into this rank's shards, the whole copies freed. Nothing without ZeRO. Collective over dp.
void gradsync_unshard(GradSync *g);
void gradsync_reshard(GradSync *g);
// The step's communication: in-flight time (the union of the collectives' spans) and the part of
// it after compute_end (exposed: nothing computed meanwhile, it delayed the optimizer step).
// compute_end: g->t_compute_end (this rank's work), or later in a pipeline (its other stages' work).
void gradsync_end_step(GradSync *g, double compute_end, double *comm_s, double *exposed_s);

// A checksum of the stage's parameters (bit-exact: equal only when every float is identical); shared_only:
// of those every replica holds alike (--ep: all but the MoE layers' experts, which only their peers share).
uint64_t stage_param_checksum(const Stage *s, int shared_only);

// ---- the axis (axes/axis.h's contract) ----

// rules: its part of the Plan (p->data: the ZeRO level of the degrees, the sync, the all-reduce as asked,
// the bucket capacity), --bucket-mb positive, ZeRO-2 and 3's reduce-scatters need the bucketed sync, a
// --bucket-mb typed for the naive one, and --trace of data parallelism alone draws ZeRO's collectives.
// With the facts (every rank's node and /dev/shm), the all-reduce: --allreduce shm where it can run (else
// refused), auto: shm on the host where it can, else mpi. 0, or -1 with one line (refuse).
int data_rules(const TrainConfig *c, const Degrees *d, Plan *p, Err *e);
#define DATA_BUCKET_LAYERS 2  // --bucket-mb's default: a bucket per 2 layers' gradients (at most 25 MiB)
double data_bucket_mb(const TrainConfig *c, const Degrees *d);    // --bucket-mb, or its default for this model
void data_part(const TrainConfig *c, const Degrees *d, Plan *p);  // (the part alone: plan_layout's)
// --compress's method: topk:F, powersgd:R, sign (COMPRESS_NONE: ""), with its number in *arg (F, R; sign: 0),
// or -1 when the text is none of them with a finite number (compress_rules refuses it).
enum { COMPRESS_NONE, COMPRESS_TOPK, COMPRESS_POWERSGD, COMPRESS_SIGN };
int data_compress_parse(const char *text, double *arg);
int data_rules_facts(const TrainConfig *c, const Facts *f, Plan *p, Err *e);

// sizes: floats of virtual stage vs's largest gradient bucket on one rank, cut as gradsync_init cuts
// them (whole layers from the top, the head first, each closed once it holds --bucket-mb); the shm
// windows (--allreduce shm) one rank holds for it (params and grads; ZeRO-2: params and ZERO_BUFS
// gradient buckets; ZeRO-3: ZERO_BUFS of gradients and of weights); and its model state's bytes on one rank
// added to m (the weights, gradients and Adam's moments of params floats, each sharded over the replicas
// from the ZeRO level that shards it, and ZeRO-2, 3's working buckets).
double data_largest_bucket(const TrainConfig *c, const Plan *p, int vs);
double data_shm_floats(const TrainConfig *c, const Plan *p, int vs);
void data_sizes(const TrainConfig *c, const Plan *p, int vs, double params, MemNeed *m);

// set-up: replicas must start from identical parameters (checksums compared within each dp group, every
// rank learning the verdict); with shm windows the stages' parameters (and but for ZeRO-2 their
// gradients) move into windows shared by each stage's dp group; then a gradient sync per local stage
// (*sync, n_local of them). ZeRO's shards follow (axes/zero.c's zero_setup). Collective over the world.
// peers (--ep, else NULL): the replicas holding the same experts (axes/expert.c), who sum them.
void data_setup(const Plan *p, Comm *comm, Comm *peers, Stage *local, int n_local, GradSync **sync);

// report: its part of the Summary. The header's line (after the set-up: buckets, the sync, ZeRO's
// shards); filled after the last step (collective: reductions over the world); its lines of the text
// summary (weights, grads, optimizer: the memory each rank allocated, for ZeRO's line) and its keys of the
// --json object (mem: its "memory_per_rank" object).
typedef struct {
    char sync[32], algo[32];      // the sync's and the all-reduce's names
    double comm_ms, comm_hidden;  // collectives in flight per step (mean over the ranks, median over the steps),
                                  // and the share of it hidden behind compute
    double optimizer_bytes;       // Adam's moments per rank (the largest)
    double collectives, buckets;  // a replica's per step (the sum over its stages and chunks)
    double shm_collectives;       // --allreduce shm: rank 0's collectives run in its windows, the whole run
    double allgather_bytes, reduce_scatter_bytes, prefetches;  // ZeRO: one step's, per rank (the largest)
    double working_bytes, gathered_peak_bytes;                 // ZeRO-2, 3: working buckets; gathered weights at once
    double outer_syncs, outer_ms, outer_bytes;  // --sync-every: outer steps, the slowest rank's mean time and
                                                // the bytes a rank all-reduces in one (the largest)
    double compress_sent, compress_exact;  // --compress: the last step's bytes a rank sent (ring all-gather of
                                           // the pairs), and a ring all-reduce's of the same buckets (the largest)
} DataReport;
void data_report_header(const Plan *p, const GradSync *sync, int n_sync);
// comm_s, exposed_s: this rank's in-flight and exposed seconds of steps [start, start + n) (reduced in place);
// the first skip are a warm-up left out of the medians.
void data_report_fill(DataReport *r, const Plan *p, const Comm *comm, const GradSync *sync, int n_sync, int optimizer,
                      double *comm_s, double *exposed_s, int start, int n, int skip);
// --sync-every (no buckets): the outer steps' figures, in place of data_report_fill. Collective over the world.
void data_report_fill_outer(DataReport *r, const Plan *p, int optimizer, double optimizer_floats, int syncs,
                            double seconds, double floats);
void data_report_text(const Plan *p, const DataReport *r, double weights, double grads, double optimizer);
struct cJSON;
void data_report_json(struct cJSON *o, struct cJSON *mem, const Plan *p, const DataReport *r);

// price: a rank's gradient sync in one step, in plain numbers for the planner (planner/predict.c prices
// the collectives with its profile): its parameters' bytes, the pieces they travel in, which collectives
// run and when.
typedef struct {
    double params, bytes;  // the rank's parameters (all its chunks) and their bytes
    double pieces;         // ddp's and ZeRO-1's buckets of --bucket-mb (naive: two tensors a layer)
    double zpieces;        // ZeRO-2 and 3's: whole layers up to --bucket-mb (a larger layer alone)
    int scatter;           // the sync reduce-scatters (ZeRO), else it all-reduces
    int per_backward;      // ZeRO-2, 3: the sync follows every backward of the step, behind the next
    int gather_after;      // ZeRO-1, 2: the updated weights all-gathered after the optimizer
    int gathers_around;    // ZeRO-3: the weights gathered around every pass (data_price_gathers)
    int overlapped;        // bucketed: the sync hides behind compute; naive: never
    double expert_bytes;   // --ep: the part of bytes that is the rank's experts, summed over `peers` replicas
    double epieces;        // (dp/N, those holding the same experts) in buckets of their own, one per MoE layer
    int peers;             // (axes/data.c's expert buckets); the rest of bytes goes over all dp in `pieces`
} DataTraffic;
DataTraffic data_price(const TrainConfig *c, const Plan *p, int stage);
// The algorithm train would run: the one asked for, or auto's: shm where the profile measured the
// collectives the sync runs there (shm_measured), else mpi.
int data_price_algo(const Plan *p, int shm_measured);
// The parameters this rank's optimizer steps: its shard with ZeRO.
double data_price_optimizer_params(const Plan *p, const DataTraffic *t);
// The sync's seconds a rank waits for after its action list: sync_s (its collectives of a step; ZeRO-2, 3:
// of one backward, times backwards) less the share overlap (0..1) of what hides behind `window` seconds of
// compute (all but the last bucket, which starts when the backward ends), plus the gather after (gather_s).
double data_price_exposed(const DataTraffic *t, double sync_s, double gather_s, double overlap, double window,
                          int backwards);
// ZeRO-3's all-gathers around one pass of `compute` seconds (all_s: all of its pieces): the first bucket
// waited for, the rest prefetched one ahead behind the pass's compute (the overlap share hidden).
double data_price_gathers(const DataTraffic *t, double all_s, double overlap, double compute);
