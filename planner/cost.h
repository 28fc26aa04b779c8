// planner/cost.h: the cost model of a training step: what one layer's forward (F), full backward (B),
// input-gradient (I) and weight-gradient (W) passes cost at a number of rows, what a message, an
// all-reduce, a reduce-scatter and an all-gather of some bytes cost among D ranks, what the optimizer
// costs per parameter, and a step's fixed overheads. One Profile holds them, read from a JSON file
// that either `micropp plan --calibrate` measured on the world it ran on (planner/calibrate.c), or a
// machine file describes from public specifications (configs/machines/). planner/predict.c turns a
// Profile and a layout into a predicted step; planner/auto.c searches the layouts.
#pragma once
#include <stddef.h>
#include "base/config.h"
#include "comms.h"  // ALLREDUCE_ALGOS: the collectives' algorithms, rows of comm_algos
#include "moe.h"    // MoeSpec

#define LAYOUT_PARTITION 200  // a balanced --partition's text ("17,16,16,15")
// A layout: one point of `plan --auto`'s search, every axis a training run is laid out by.
typedef struct {
    int pp, dp, tp;       // pipeline stages, data-parallel replicas, tensor-parallel width: world = pp x dp x tp
    int zero;             // ZeRO stage over dp (0: none; 1: optimizer state, 2: and gradients, 3: and weights)
    int ep;               // --ep: replicas sharing each MoE layer's experts (0 or 1: none; axes/expert.c)
    int schedule, v, M;   // pp > 1: the schedule (SCHED_*), chunks per rank, micro-batches per replica
    int ckpt;             // activation checkpointing (pipelines)
    int precision;        // PRECISION_*
    // plan --auto's ddp rows (auto.c try_methods): the data-parallel method, which changes the numerics
    int compress;         // --compress's method (COMPRESS_*, axes/data.h; 0: the exact sum)
    double compress_arg;  // ... its number: topk's F, powersgd's R
    int sync_every;       // --sync-every H (0: none)
    // what the search's second pass varies on its leaders (auto_search): 0 or "" = train's default
    int placement;        // PLACEMENT_* (--placement)
    double bucket_mb;     // --bucket-mb
    char partition[LAYOUT_PARTITION];  // --partition: layers per (virtual) stage, balanced by cost
} Layout;

enum { PASS_F, PASS_B, PASS_I, PASS_W, PASSES };                 // a layer's passes
enum { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLLS };  // the data-parallel collectives
enum { LAYER_MID, LAYER_FIRST, LAYER_HEAD, LAYER_KINDS };         // hidden H->H, input D->H, head H->C
#define COST_PRECISIONS 2  // PRECISION_FP32, PRECISION_BF16 (base/ops.h)
#define COST_GRID 32       // points of a measured curve
#define COST_MAX_D 16      // data-parallel group sizes a calibration measures (D = 2 .. world)
// A layout's family (auto_family's words): what `plan --auto --validate` refits a scale factor for.
enum { FAMILY_PIPELINE, FAMILY_HYBRID, FAMILY_DDP, FAMILY_TP, FAMILY_MONOLITH, FAMILIES };
extern const char *const family_names[FAMILIES];

// A collective as a training step meets it (issue 32), beyond the curve a barrier-started calibration timed:
// entry_s more for each one a rank waits for, and the ranks' drift: a share of the compute since they last
// met (the rank that arrives last keeps the others waiting). Both 0: a profile without the term.
typedef struct { double entry_s, drift; } CollWait;

// Seconds at each of n points x[] (rows, or bytes), interpolated linearly between them and beyond the
// last along its last segment's slope; below the first, the first's time.
typedef struct { int n; double x[COST_GRID], s[COST_GRID]; } Curve;

typedef struct {
    int calibrated;            // 1: measured (the tables below), 0: a machine file (the figures below)
    char source[512];          // where the figures come from, in words
    char file[PATH_LEN];       // the file it was read from ("" when made in memory)
    int world, threads;        // calibrated: the ranks that ran at once, BLAS threads each
    // compute, calibrated: per layer kind and precision, each pass's seconds by rows; the widths measured
    int hidden, inputs, classes;
    int has_precision[COST_PRECISIONS];
    Curve layer[COST_PRECISIONS][LAYER_KINDS][PASSES];
    double data_s_per_value;   // the first stage's input rows (synthetic data), per value (rows x inputs)
    double label_s_per_value;  // the head's labels, per value of the rows they are made from (rows x inputs)
    double adam_s, sgd_s;      // the optimizer step, per parameter
    double ortho_s;            // PowerSGD's Gram-Schmidt (lowrank_orthogonalise), per element operation (0: unmeasured)
    // communication, calibrated: seconds by bytes; coll[algo][op][D]
    Curve p2p;
    Curve coll[ALLREDUCE_ALGOS][COLLS][COST_MAX_D + 1];  // (a machine file's links stand for every algorithm)
    double overlap[ALLREDUCE_ALGOS];  // how much of a collective in flight during compute is hidden (1 all, 0 none)
    double step_fixed_s;         // every step: the loss all-reduce over the world, the barrier
    CollWait wait;               // calibrated: what a collective waits for beyond its curve (calibrate_wait)
    double refit[FAMILIES];      // `plan --validate`'s measured over predicted step per family (0: none, as 1)
    // a machine file: devices and links
    int devices_per_node;
    double device_memory;         // bytes of one device (0: not given)
    double flops[COST_PRECISIONS];  // dense gemm peak per device, FLOP/s (0: the precision is not there)
    double gemm_efficiency;       // the share of that peak a large gemm reaches
    double mem_bw;                // device memory bandwidth, bytes/s (element-wise passes, the optimizer)
    double launch_s;              // per kernel
    double intra_bw, intra_lat, inter_bw, inter_lat;  // bytes/s per direction per device, seconds
    double machine_overlap;       // collectives hidden behind compute (dedicated copy engines, NCCL)
} Profile;

// Reads a profile (`plan --calibrate`'s JSON) or a machine file (configs/machines/*.json) into pf.
// Returns 0, or -1 with one line in why naming the file and what is wrong.
int cost_load(const char *path, Profile *pf, char *why, size_t n);
// The profile as JSON text (malloc'd), the format cost_load reads back.
char *cost_to_json(const Profile *pf);
// NULL when the profile can price layers of this model (a calibration measured its widths, or a
// machine file prices any), else why not in words ("the profile measured hidden 1024, not 512 ...").
const char *cost_fits_model(const Profile *pf, const TrainConfig *c, char *why, size_t n);

double cost_curve_at(const Curve *c, double x);
// A measured curve made non-decreasing: a point above a later one (a rank descheduled while it was
// timed, on a loaded machine) takes the later one's time. More rows or bytes never cost less.
void cost_monotone(Curve *c);
// Parses a profile or machine file's text (file: its name for the messages); as cost_load.
int cost_parse(const char *text, const char *file, Profile *pf, char *why, size_t n);
// One pass (PASS_*) of one layer (LAYER_*) at `rows` rows, fan-in `in`, fan-out `out`, at precision.
double cost_layer(const Profile *pf, int kind, int pass, int precision, double rows, double in, double out);
// A message of `bytes` between two ranks; intra: on one node (a machine file's links differ).
double cost_p2p(const Profile *pf, double bytes, int intra);
// One pass of an MoE layer (moe.h) of hidden H at `rows` rows, its experts shared by ep ranks (1: all
// local), priced from the hidden layer's curves by rows: the router Linear(H,E) as rows x E / H rows of a
// hidden layer (the same FLOPs; a machine file takes its widths), then this rank's E/ep experts, each at
// the most rows the capacity lets it take from the ep ranks, ep x min(capacity, rows): the capacity is the
// imbalance the price allows for. W is 0 (moe.c runs the layer's whole backward in I, priced as B).
double cost_moe(const Profile *pf, int pass, int precision, int rows, int H, const MoeSpec *m, int ep);
// One all-to-all among N ranks, each sending `bytes` spread evenly over them (comms/alltoall.c's pair
// algorithm): N - 1 rounds of a message of bytes / N. 0 for N <= 1.
double cost_alltoall(const Profile *pf, int N, double bytes, int intra);
// A collective (COLL_*) of `bytes` (the whole buffer) among D ranks by algo (ALLREDUCE_*); local: how many
// of the D share each node (D or more: the group is on one node). A machine file's ring across nodes runs
// over every NIC the group has on a node (one per device, as NCCL drives a DGX's eight), up to NVLink's rate.
double cost_collective(const Profile *pf, int op, int algo, int D, double bytes, int local);
double cost_overlap(const Profile *pf, int algo);
// The wait beyond the curves of n collectives a rank meets after `compute` seconds of its own work since the
// ranks last met: n x entry_s + drift x compute (0 when n is 0, or for a profile without the term).
double cost_coll_wait(const Profile *pf, double n, double compute);
// The optimizer step over `params` parameters (OPTIM_*).
double cost_optimizer(const Profile *pf, int optimizer, double params);
