// axes/axis.h: what the axes of parallelism share, and the contract each follows. The Plan's type (a
// part per axis), the Facts it is made from besides the options, the rules' error line, the memory an
// axis reckons, and the kinds of events an axis records for the observers: the types an axis needs,
// below train/ (which makes the Plan, train/plan.c) so that an axis includes nothing above it.
//
// THE CONTRACT OF AN AXIS (the pipeline, data parallelism with ZeRO, tensor parallelism, expert
// parallelism). An axis is one file (a second only where the 800-line limit forces it) and its header,
// which exports under its own prefix, the same five parts:
//   rules   <axis>_rules: the checks of the options that concern it (one line and -1 on a mistake, the
//           same on every rank) and its part of the Plan (Plan.<part>); train/plan.c calls them in turn.
//           Its option rows name it (Option.axes, base/config.h): the one rule of axes/degrees.c refuses
//           them for a run without it.
//   sizes   what one rank holds for it, from the Plan alone (planner/memory.c adds them up, train checks
//           them before it allocates, `micropp plan` prints them)
//   set-up  <axis>_setup: what a run does for it before the first step, over the parts it touches
//   report  <Axis>Report, its part of the Summary: <axis>_report_fill (collective over the world),
//           <axis>_report_text and <axis>_report_json; train/report.c calls them in turn
//   price   <axis>_price: its part of a step in plain numbers (the collectives it runs, what hides them,
//           the slices it cuts), which planner/predict.c prices with its profile
// and its degree in Degrees (axes/degrees.h), resolved once with the others.
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/config.h"
#include "comms.h"         // PLACEMENT_*, the comm_grid_* helpers, Hardware (the devices' facts)
#include "schedule.h"      // the chunk order's helpers, SchedFile, ACT_KINDS
#include "axes/degrees.h"  // Degrees: the plan's input, and MODE_* (--mode, a spelling of them)

#define MAX_STAGES 4096
enum { APART_PIPELINE = 1, APART_ALLREDUCE = 2 };  // Plan.placement_apart's bits
#define MAX_LAYERS 4096  // --layers' range (train/options.c)

// What the run found out before the plan, the same on every rank: the plan's inputs besides the
// options. A fact left at its zero value is not known yet: the rules that need it wait (train plans
// once before it reads any file, so an option's mistake is named first, and again with every fact;
// the unit tests give only the facts a rule needs).
typedef struct {
    int world;                       // ranks started
    long long tag_ub;                // MPI_TAG_UB: the largest tag this MPI accepts
    const SchedFile *schedule_file;  // --schedule-file, read and proven (NULL: none)
    const Hardware *devices;        // comm_choose_hardware: every rank's GPU, node and /dev/shm (NULL: unknown)
    int blas_max_threads;            // the threads this OpenBLAS was built for (0: unknown)
    int data_known;                  // the data's headers were read (data_open): the rows below hold
    long long train_rows, test_rows; // rows of the training set and of the test split (0: synthetic, none)
    long long resume_step;           // --resume: the checkpoint's step (0: no --resume, or its manifest
                                     // unreadable: ckpt_setup and ckpt_resume then say why)
} Facts;

// Each axis' part of the Plan: its options as this run takes them (an inactive axis keeps its defaults),
// so that nothing downstream of the plan reads the options to decide a layout question.
typedef struct {
    int zero;           // ZeRO stage over the replicas: 0 (none; always without data parallelism), 1, 2 or 3
    int sync;           // SYNC_* (axes/data.h): naive, or bucketed (overlapped with the backward)
    int algo;           // ALLREDUCE_*: the replicas' collectives, auto resolved (shm or mpi) once the facts are known
    double bucket_mb;   // a gradient bucket's capacity, MiB
    int bucket_layers;  // the capacity is --bucket-mb's default: this many layers' gradients (0: given, or 25 MiB)
    int sync_every;     // local SGD (axes/localsgd.c): the replicas step alone, an outer step every H (0: ddp)
    double outer_lr, outer_momentum;  // its outer optimizer's (Nesterov SGD)
    double topk;        // --compress topk:F (axes/compress.c): the share of each bucket sent (0: the exact sum)
    int compress;       // COMPRESS_* (axes/data.h): --compress's method (COMPRESS_NONE: the exact sum)
    int psgd_rank;      // --compress powersgd:R: R, the rank of each weight matrix's approximation
} DataPlan;
typedef struct {
    int algo;     // ALLREDUCE_*: the group's all-reduce (auto: shm when every group sits on one node and the
                  // buffers are on the host, else mpi; mpi until the facts are known)
    int nccl;     // 1: the group sums over NCCL instead (--transport nccl, T > 1)
    int message;  // TP_MESSAGE_* (axes/tensor.h): pipeline messages between groups whole or sliced (slice only
                  // with --tp and a pipeline)
} TensorPlan;
typedef struct {
    int N;     // expert parallelism: the expert group's ranks, N consecutive replicas of a stage (1: none)
    int algo;  // ALLTOALL_* (comms/alltoall.h) or ALLTOALL_AUTO (axes/expert.h): the group's all-to-all
    int overlap;  // --ep-overlap: a layer's own rows computed while the others' travel (axes/expert.c)
    int nccl;     // 1: the all-to-all over NCCL (--transport nccl with --alltoall auto; algo is then unused)
} ExpertPlan;
typedef struct {
    int ckpt;          // activation checkpointing: a stage keeps its inputs and recomputes in the backward
    int max_inflight;  // zb-auto: its search's limit of micro-batches a stage holds from F to W (default 2 x K)
} PipelinePlan;

typedef struct {
    int mode;          // MODE_*: the spelling of the degrees (--json's "mode", a checkpoint's manifest)
    int schedule;      // SCHED_*: --schedule, or SCHED_FILE when a pipeline runs --schedule-file
    const SchedFile *file;  // SCHED_FILE: the file's schedule (the plan's input), else NULL
    int split;         // the schedule splits backwards into I and W (a stage keeps what W needs)
    int world;         // ranks started
    int K;             // stages: the degree pp (a pipeline's ranks; manual: its parts in one process)
    int D;             // data-parallel replicas: the degree dp
    int T;             // tensor-parallel ranks per group: the degree tp (1: none), adjacent world ranks
    int M;             // micro-batches per step (per replica); 1 without a pipeline
    int N;             // gradient-accumulation micro-steps per step (monolith, ddp)
    int V;             // chunks per rank: --virtual-stages for interleaved, else 1
    int S;             // virtual stages K*V, placed on ranks by `chunk_order`
    int chunk_order;   // CHUNKS_LOOP (chunk c of stage s is vs = c*K + s) or CHUNKS_V (zb-v, dualpipev)
    int rows;          // rows per micro-batch (per replica)
    int inputs;        // the input layer's width: --inputs, or --hidden when 0
    int placement;     // PLACEMENT_STAGES or PLACEMENT_REPLICAS (comms.h; --placement auto resolved)
    int placement_auto;  // 1 when --placement auto chose it from the two traffics below
    int placement_apart;  // on several nodes: the traffics that cross nodes (APART_PIPELINE | APART_ALLREDUCE)
    double pp_bytes;   // a step's pipeline traffic, all replicas: activations and their gradients
                       // at each boundary between ranks, x M micro-batches x D replicas
    double dp_bytes;   // a step's all-reduce traffic, all stages: 2 (D-1)/D x gradient bytes per rank
    int lo[MAX_STAGES + 1];  // virtual stage vs holds global layers [lo[vs], lo[vs+1])
    int pipelined;           // pp > 1 over ranks: a pipeline executor with action lists
    int data_parallel;       // dp > 1: gradients all-reduced over D replicas
    int distributed;         // more than one process takes part (pp x dp x tp > 1)
    // How long: --steps, or --epochs over the training set (whole steps; the last partial batch
    // dropped). steps is the run's total either way (0 until the data's rows are known, with epochs).
    long long steps;
    int epochs;
    long long steps_per_epoch, epoch_rows, dropped;  // epoch_rows = steps_per_epoch x batch x grad-accum
    long long eval_rows;   // held-out rows the accuracy is measured on (0 until the data is known)
    long long synthetic_samples;  // synthetic data: the training set the stream cycles through (--samples,
                                  // or one step's batch x grad-accum rows); 0 for a data set (data.c maps it)
    // Where and how (from the devices' facts; before them: cpu, mpi, --allreduce as given)
    int device;            // DEVICE_CPU or DEVICE_CUDA
    int transport;         // TRANSPORT_MPI or TRANSPORT_NCCL: how the pipeline's stages exchange
    const char *transport_why;  // why MPI though NCCL could run ("" when not so decided)
    DataPlan data;              // the axes' parts (above)
    TensorPlan tensor;
    PipelinePlan pipe;
    ExpertPlan expert;
    int grad_accum_given;  // --grad-accum was set (the report shows it even at 1)
} Plan;

// The degrees the plan runs.
static inline Degrees plan_degrees(const Plan *p) {
    return (Degrees){.pp = p->K, .dp = p->D, .tp = p->T, .zero = p->data.zero, .ep = p->expert.N,
                     .manual = p->mode == MODE_MANUAL};
}
// The chunk order (which rank holds which virtual stage) is the schedule's (p->chunk_order, schedule.h). The
// executor, checkpoints, verify, the report and the trace all ask these, never vs % K.
static inline int plan_vstage(const Plan *p, int stage, int chunk) {
    return vstage_of(p->chunk_order, p->K, stage, chunk);
}
static inline int plan_stage_of(const Plan *p, int vs) { return stage_of_vstage(p->chunk_order, p->K, vs); }
static inline int plan_chunk_of(const Plan *p, int vs) { return chunk_of_vstage(p->K, vs); }
static inline int plan_layers(const Plan *p, int vs) { return p->lo[vs + 1] - p->lo[vs]; }
// The training stream (base/data.c maps it to rows): a step reads N accumulation micro-steps of a
// batch of B = rows x M x D consecutive samples; replica d takes samples [d B/D, (d+1) B/D) of each,
// cut into M micro-batches of rows. A run that starts step `start` at sample `sample0` (0, or where
// its checkpoint left the stream) starts step `step` at plan_step_sample ...
static inline uint64_t plan_step_sample(const Plan *p, uint64_t sample0, int start, int step) {
    return sample0 + (uint64_t)(step - start) * (uint64_t)p->N * (uint64_t)p->rows * (uint64_t)p->M * (uint64_t)p->D;
}
// ... and its micro-batch mb of replica d in micro-step k at plan_sample (synthetic data cycles).
static inline uint64_t plan_sample(const Plan *p, uint64_t step_sample, int k, int d, int mb) {
    uint64_t rows = (uint64_t)p->rows, per_replica = rows * (uint64_t)p->M, batch = per_replica * (uint64_t)p->D;
    uint64_t i = step_sample + (uint64_t)k * batch + (uint64_t)d * per_replica + (uint64_t)mb * rows;
    return p->synthetic_samples ? i % (uint64_t)p->synthetic_samples : i;
}
// The row of the step (0 .. N x batch - 1) where micro-batch mb of replica d in micro-step k starts, as
// plan_sample lays the samples out: --deterministic's tree (base/det.h) sums the rows in this order.
static inline long plan_row(const Plan *p, int k, int d, int mb) {
    long rows = p->rows, per_replica = rows * p->M;
    return (long)k * per_replica * p->D + (long)d * per_replica + (long)mb * rows;
}
// The grid on world ranks: T adjacent ranks form a tensor-parallel group; the groups are laid out on
// stages x replicas by --placement. The stage, replica and tensor-parallel rank of a world rank.
static inline int plan_rank_stage(const Plan *p, int rank) {
    return comm_grid_stage(p->placement, p->K, p->D, comm_rank_group(p->T, rank));
}
static inline int plan_rank_replica(const Plan *p, int rank) {
    return comm_grid_replica(p->placement, p->K, p->D, comm_rank_group(p->T, rank));
}
static inline int plan_rank_tp(const Plan *p, int rank) { return comm_rank_tp(p->T, rank); }

// The rules' error line: each rule returns 0, or -1 after writing its one-line message (refuse); the
// rules that ask which options were set or typed read them from seen.
typedef struct {
    char *buf;
    size_t n;
    const OptionsSeen *seen;
} Err;
__attribute__((format(printf, 2, 3))) static inline int refuse(Err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf, e->n, fmt, ap);
    va_end(ap);
    return -1;
}

// What one rank holds, bytes: the axes' sizes add into it (planner/memory.c's memory_reckon).
typedef struct { double weights, grads, optimizer, activations, buffers, total; } MemNeed;

// Event kinds: the schedule's action kinds, then the work of a step outside its action list. Data
// parallelism (--trace, --timeline): each bucket's all-reduce (ZeRO: its reduce-scatter, and at 2 and 3
// its all-gather); --tp: the group's all-reduces (and --tp-message slice's all-gathers), inside the forwards
// and backwards: on a track of their own (train/trace.h draws them).
enum {
    EV_ALLREDUCE = ACT_KINDS,  // the step's loss all-reduce (drawn as "loss wait": ranks wait for the last stage)
    EV_OPTIMIZER,
    EV_GATHER,
    EV_REDUCE_SCATTER,
    EV_TP_ALLREDUCE,
    EV_GRAD_ALLREDUCE,
    EV_A2A_DISPATCH,  // --ep: a wait in the all-to-all that takes rows to their experts (forward: x, backward: dy)
    EV_A2A_COMBINE,   // --ep: a wait in the one that brings the experts' rows back (forward: h, backward: dx)
    EV_KINDS
};
// One collective as an axis ran it, for the observers: now_sec() times, its kind (EV_GATHER,
// EV_REDUCE_SCATTER, EV_TP_ALLREDUCE, EV_GRAD_ALLREDUCE, EV_A2A_*; 0: not drawn) and its buffer's bytes.
typedef struct {
    double t0, t1;
    int kind;
    double bytes;
} Span;
