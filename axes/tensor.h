// axes/tensor.h: tensor parallelism, the axis: its rules, sizes, set-up, report part and price (axes/axis.h's
// contract), the layout of a stage cut T ways (its whole tensors and a rank's shards), and its wire: the
// all-reduce model.h's Stage calls through its hook (after a row-parallel layer's product, Megatron's g;
// after a column-parallel layer's input gradient, f's conjugate), run over the group's communicator by
// collectives.c's paths (shm on one node, else MPI or the ring; a GPU's buffers staged through the host as
// data parallelism's are), and counted.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "comms.h"
#include "model.h"
#include "axes/axis.h"  // Span, EV_*

// A pipeline message between two tensor-parallel groups (every rank of a group holds the whole
// activation, or its gradient): full = each rank sends the whole to its counterpart (T copies cross);
// slice = each sends its 1/T chunk (comm_shard's), and the receiving group all-gathers the chunks;
// auto = both timed at start-up (tp_choose_message), the faster kept.
enum { TP_MESSAGE_FULL, TP_MESSAGE_SLICE, TP_MESSAGE_AUTO };
#define TP_MESSAGE_CHOICES "full|slice|auto"


typedef struct {
    Comm comm;            // the group's collectives: comm.dp is the grid's tp communicator (not owned)
    int algo;             // ALLREDUCE_SHM, _MPI or _RING (the plan's tp_allreduce)
    struct DevComm *dev;  // the plan's tp_nccl: the all-reduce over NCCL on the GPU (else NULL)
    int group;            // this group's number (comm_rank_group), for the recorder
    FILE *log;            // the recorder (MICROPP_COLLECTIVE_LOG, testing), or NULL
    float *window;        // shm: the shared buffer each sum goes through, window_n floats (host)
    size_t window_n;
    long calls;  // this rank's all-reduces so far, the floats they summed and their time
    double floats, seconds;
    int message;  // the pipeline's messages between groups: TP_MESSAGE_FULL or _SLICE (never auto)
    int timed;    // 1: auto chose message from these two times, one message each way (the same on every rank)
    double full_ms, slice_ms;
    int trace;    // 1: keep each collective's span in spans (the observers draw them)
    Span *spans;  // since tp_spans_clear, n_spans of them: EV_TP_ALLREDUCE or EV_GATHER
    int n_spans, cap_spans;
    int det;  // --deterministic: more than 2 ranks add their partial sums in the slices' tree (tp_allreduce)
} TpGroup;

// The group of this rank's grid (grid->tp), summing with algo, or over NCCL when nccl (the plan's
// tp_nccl: the all-reduce only; the all-gather stays on algo, staged through the host); most: the
// largest all-reduce in floats (rows x the widest layer input). Collective over the world (every rank
// calls it, T = 1 included).
void tp_setup(TpGroup *g, const Comm *grid, const Backend *be, int algo, int nccl, size_t most);
// Points stage s's hook at the group (a stage split T > 1 ways cannot run without it).
void tp_attach(TpGroup *g, Stage *s);
// All-gather over the group: every rank's chunk (comm_shard(n, T, tp rank)) of x, n floats, into every
// rank's x (the slice message's second half). Counted with the all-reduces' time.
void tp_allgather(TpGroup *g, float *x, size_t n);
// Sets g->message: asked (full or slice) as is; auto times reps round trips of an n-float message
// between stage 0's group and stage 1's each way, on the grid c (every rank of the world calls it: the
// others wait in the agreement), and keeps the faster. The times are the slowest rank's, reduced over
// the world, so every rank keeps the same way. A pipeline of one stage has no messages: full.
void tp_choose_message(TpGroup *g, Comm *c, int asked, size_t n, int reps);
#define TP_MESSAGE_REPS 5
void tp_spans_clear(TpGroup *g);  // (train.c: at each step's start)
// The step's end (train.c, after its queue drained): over NCCL, the all-reduces' device time (CUDA
// events on the group's stream) added to seconds; otherwise nothing (timed as they ran).
void tp_step_end(TpGroup *g);
void tp_free(TpGroup *g);

// ---- the layout of a stage cut T ways (model.c cuts one layer: stage_shard_layer) ----

// "layers.3.weight[17]": the tensor and element (its index in the whole tensor) of index in this rank's
// flat parameter buffer.
void stage_tensor_name(const Stage *s, size_t index, char *out, size_t n);
// The stage unsharded: the monolith's layout of its layers (and head), which checkpoints write and
// --verify's reference holds: floats in all, and where local layer j (n_layers: the head) starts, its length.
size_t stage_full_params(const Stage *s);
size_t stage_full_off(const Stage *s, int j);
size_t stage_full_len(const Stage *s, int j);
// The group a stage's flat buffer is cut over, never both: --tp's (a slice of each split layer) or --ep's
// (each MoE layer's router and the experts rank t holds, moe.h's moe_held); its size and this rank's
// place (1 and 0: none, the stage is whole).
static inline int stage_shards(const Stage *s) {
    return s->tp > 1 ? s->tp : s->moe && s->moe->spec.shards > 1 ? s->moe->spec.shards : 1;
}
static inline int stage_shard_rank(const Stage *s) {
    return s->tp > 1 ? s->tp_rank : s->moe && s->moe->spec.shards > 1 ? s->moe->spec.shard : 0;
}
// A whole flat buffer (host, stage_full_params floats) -> rank t's flat buffer (host, n_params
// floats: every rank's shards have the same sizes), and back (unshard writes rank t's parts).
void stage_shard(const Stage *s, int t, const float *full, float *local);
void stage_unshard(const Stage *s, int t, const float *local, float *full);

// ---- the axis (axes/axis.h's contract) ----

// rules: --hidden split T ways (each rank holds H/T features of every split layer), and the messages
// between groups (p->tensor.message: a pipeline's; else full). With the facts, the group's all-reduce:
// --allreduce's, or auto's (shm when every group sits on one node and the buffers are on the host, else
// mpi), or NCCL's with --transport nccl (p->tensor). 0, or -1 with one line (refuse).
int tensor_rules(const TrainConfig *c, Plan *p, Err *e);
// The bytes of /dev/shm each rank's group window takes (tp_setup's: rows x the widest layer input), 0
// unless the plan sums the group in shm (p->tensor.algo, decided by tensor_rules_facts).
double tensor_shm_bytes(const TrainConfig *c, const Plan *p);
int tensor_rules_facts(const TrainConfig *c, const Facts *f, Plan *p, Err *e);

// sizes: the floats one rank holds of local layer i of virtual stage vs (i == its layers: the head, whole on
// every rank; a column layer's H/T outputs, a row layer's H/T inputs with the bias whole, else the whole
// layer; an MoE layer's router and its experts, E/N under --ep: moe_held_len), of the whole virtual stage
// (what stage_init allocates); the output widths of its local layers [from, to) summed (a column layer's output is H/T
// wide); and the floats its group's all-reduces move per micro-batch (its row layers' outputs forward,
// recomputes included; its column layers' input gradients backward, but the model's first layer's), each
// all-reduced over T ranks; 0 without --tp.
double tensor_layer_floats(const TrainConfig *c, const Plan *p, int vs, int i);
double tensor_params(const TrainConfig *c, const Plan *p, int vs);
double tensor_out_widths(const TrainConfig *c, const Plan *p, int vs, int from, int to);
double tensor_allreduce_floats(const TrainConfig *c, const Plan *p, int vs);

// set-up: the group of the grid's tp communicator sums behind every local stage's hook (shm: a window as
// large as the largest sum, rows x the widest layer input; evaluation's batches are no larger), and the
// pipeline's message way is chosen (auto: timed). Collective over the world.
void tensor_setup(const Plan *p, TpGroup *g, Comm *grid, const Backend *be, Stage *local, int n_local);

// report: its part of the Summary. The header's grid line (before the first step) and the messages' way
// (after the set-up); filled after the last step (collective: the means over the ranks), then its line
// of the text summary and its keys of the --json object.
typedef struct {
    char algo[32];                   // the group's all-reduce: shm, mpi, ring or nccl
    double calls, bytes, ms, share;  // all-reduces per step and rank, their bytes and time (the mean over the
                                     // ranks), the time's share of the step
    int message, timed;              // the pipeline's message way (TP_MESSAGE_FULL or _SLICE), auto's timing
    double full_ms, slice_ms;        // ... and its two times
} TensorReport;
void tensor_report_header(const Plan *p);
void tensor_report_messages(const Plan *p, const TpGroup *g);
// calls, floats: this rank's all-reduces over the n_run steps measured (train/measure.h's); seconds: the
// median step's time in them (as step_ms is the median step's: a mean over the first step's set-up
// against a median step reported 685% of the step on short runs)
void tensor_report_fill(TensorReport *r, const Plan *p, const TpGroup *g, double calls, double floats, double seconds,
                        int n_run, double step_ms);
void tensor_report_text(const Plan *p, const TensorReport *r);
struct cJSON;
void tensor_report_json(struct cJSON *o, const Plan *p, const TensorReport *r);

// price: its part of one pass of local layer i of virtual stage vs, in plain numbers for the planner
// (planner/predict.c prices them with its profile): the layer's kind (TP_FULL, TP_COL, TP_ROW), the slice
// a rank computes (in x out of the whole fan_in x H), and the floats the group all-reduces after it: the
// forward's after a row layer (rows x H; again in a recompute), the backward's after a column layer's
// input gradient (rows x fan_in; none after the model's first layer, which computes none).
typedef struct {
    int kind;
    double in, out;
    double fwd_floats, bwd_floats;
} TensorPiece;
TensorPiece tensor_price(const Plan *p, int vs, int i, double rows, double fan_in, double H);
// The group's all-reduce as the rules would pick it on the planner's machine: shm where its ranks share a
// node and sum host buffers (shm_measured: the profile measured shm's all-reduce of T ranks), else mpi.
int tensor_price_algo(int shm_measured);
