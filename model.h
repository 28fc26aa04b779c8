// model.h: a Stage of the MLP: global hidden layers [lo, hi) (layer 0 Linear(D,H)+ReLU, the others
// Linear(H,H)+ReLU) and, on the last stage, the head Linear(H,C) with softmax cross-entropy.
// Parameters, gradients and Adam moments each live in ONE flat buffer per stage. Activations are
// stashed per micro-batch slot, in fp32 or (bf16 stashes) rounded to bf16 at half the bytes.
// With tensor parallelism a stage is one rank's shard of the layers (which part: the pairs below).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "base/det.h"
#include "base/ops.h"
#include "moe.h"

enum { OPTIM_ADAM, OPTIM_SGD };
#define OPTIM_CHOICES "adam|sgd"
enum { LR_CONSTANT, LR_COSINE };
#define LR_CHOICES "constant|cosine"

// Tensor parallelism (Megatron-LM's pairs): inside a stage split T ways, local layers go in pairs,
// the first column-parallel (each rank holds H/T output features of W and b, its slice of the
// activation, ReLU applied locally), the second row-parallel (H/T input features of W; the partial
// products summed by one all-reduce, the bias, whole on every rank, added once). An odd last layer
// of a stage is whole on every rank (replicated), as is the head. T = 1: every layer whole.
enum { TP_FULL, TP_COL, TP_ROW };
static inline int tp_layer_kind(int T, int n_layers, int i) {
    if (T <= 1 || (n_layers % 2 && i == n_layers - 1)) return TP_FULL;
    return i % 2 ? TP_ROW : TP_COL;
}

// The stashed tensors (void *): fp32 values, or with bf16 stashes uint16_t bf16 values (the backend's
// to_bf16 rounds them in, from_bf16 widens them out; every reader of them rounds to bf16 anyway).
typedef struct {
    int mb;          // micro-batch id held, -1 when free
    void *in;        // [rows, D] stage input (always kept)
    void **act;      // [n_layers] of [rows, H] layer outputs (not kept with checkpointing; with a
                     // split backward the recompute at I fills them, and they stay until W)
    void **dz;       // split backward: [n_layers] of [rows, H] pre-activation gradients, I until W
    void *logits;    // head: [rows, C], turned into dlogits by forward
    int32_t *labels; // head: [rows] device labels
    size_t bytes;    // activation bytes this slot holds now (its share of act_bytes)
} Slot;

// The activation memory of all the chunks one rank holds (interleaved: v Stages on a rank).
typedef struct {
    size_t bytes, peak_bytes;
    int inflight, peak_inflight;  // micro-batches between F and their B or I (the simulator's peak_inflight)
    int deferred, peak_deferred;  // micro-batches between I and W
} MemTally;

// The head's loss: the sum of row losses and hits since the last stage_zero_grads (after stage_take_loss).
// The head's forwards add their loss sum and hits to tally (two doubles in the backend's memory: no host
// wait per micro-batch on a GPU); stage_take_loss brings them into sum and correct.
typedef struct {
    double sum;
    int correct, rows;
    void *tally;
    int pending;  // a forward added to the tally since the last take
    long reads;   // takes that read the tally (one per step: tests/unit_core checks)
} StageLoss;

// Activation memory accounting: bytes of stashed activations (the rank's, with its micro-batches in flight,
// in *tally: optional, updated with this stage's counters).
typedef struct {
    size_t act_bytes, peak_act_bytes;
    MemTally *tally;
} StageMemory;

// What a stage's owners hook into its passes (model.c makes no MPI call: the hooks' owners talk to the
// other ranks).
typedef struct {
    // Gradient hook (data parallelism): when set, stage_backward calls it right after local layer
    // i's dW and db are computed in this backward (i = n_layers for the head), in the order the
    // backward runs: head, then n_layers-1 down to 0. A bucket can start its all-reduce there.
    void (*on_layer_grad)(void *ctx, int layer);
    void *hook_ctx;
    // Called after every layer of every compute pass when set: the pipeline executor keeps MPI's
    // progress engine moving (a large message moves only while its sender is inside MPI).
    void (*progress)(void);
    // Tensor parallelism: sums n floats in place over the group (set by axes/tensor.c): Megatron's g,
    // after a row-parallel layer's product in every forward (recompute and evaluation included), and f's
    // conjugate, after a column-parallel layer's input gradient in the backward (or its I half). Every
    // rank of the group runs the same passes, so the all-reduces come in the same order on all of them.
    void (*tp_allreduce)(void *ctx, float *x, size_t n);
    void *tp_ctx;
    // Sharded state (ZeRO-2 and 3, axes/zero.c), where params or grads are not all here (NULL).
    // on_weights: called before a pass reads local layer j's W and b (j == n_layers: the head), in
    // the order it reads them, with the layer it reads next (-1: none); it must leave W[j] and b[j]
    // (Wh, bh) pointing at the whole layer until its next call; layer -1: the pass is over. on_grad:
    // called before layer j's dW and db are written; it may point them elsewhere (marking the layer
    // fresh: overwritten, not added to).
    void (*on_weights)(void *ctx, int layer, int next);
    void (*on_grad)(void *ctx, int layer);
    void *zero_ctx;
} StageHooks;

// --deterministic (stage_enable_det): each layer's gradient as the pairwise tree over the step's rows
// (base/det.h); a micro-batch mb holds rows row0 + mb x rows .. (the executor sets row0 per micro-step).
typedef struct {
    DetTree *tree;  // [n_layers + 1]: the head's last
    long row0;
    int chunk;      // the canonical chunk's rows (--det-rows): the tree's leaves
    float *part[2];  // det_slices' partial products, part_n floats each
    size_t part_n;
} StageDet;

typedef struct {
    const Backend *be;
    int H, C, lo, hi, n_layers, has_head;
    int D;           // width of the stage input: --inputs on the stage holding layer 0, else H
    int rows;        // rows per micro-batch
    int ckpt;        // activation checkpointing
    int bf16;        // stashes (and the activations this stage sends and receives) hold bf16
    struct {
        float *work[3];  // bf16 stashes: fp32 [rows, max(D,H,C)] each, where values are computed and read
        float *gbuf[2];  // backward ping-pong [rows, H]
    } buf;
    size_t n_params;
    float *params, *grads, *adam_m, *adam_v;  // flat, n_params each (moments lazily allocated)
    int shared;               // params and grads (2: params only) live in a shared window (stage_share)
    // views into params/grads: layer i (local) weight [H,fan_in] (out,in) and bias [H]; head [C,H], [C]
    float **W, **b, **dW, **db;
    int *grad_fresh;  // per layer (n_layers + 1: the head last): its gradient is still to be overwritten, not added to
    float *Wh, *bh, *dWh, *dbh;
    int n_slots;
    Slot *slots;
    void **scratch;           // checkpointing: one recompute set of [rows,H] x n_layers (stash precision)
    // dlogits scale: 1 / rows of the whole optimizer step (all micro-batches, accumulation micro-steps and replicas)
    float grad_scale;
    StageLoss loss;   // the head's loss (below)
    StageMemory mem;  // its activation memory (below)
    int split;        // backward split into I and W (stage_enable_split)
    // Tensor parallelism: tp ranks share this stage's layers, this one is tp_rank; kind[i] is local
    // layer i's TP_FULL, TP_COL or TP_ROW (tp_layer_kind).
    int tp, tp_rank;
    unsigned char *kind;
    StageHooks hooks;  // what its owners hook into its passes (below)
    StageDet *det;     // --deterministic, else NULL
    Moe *moe;          // its mixture-of-experts layers (moe.h), NULL when it has none
} Stage;

// Parameter count of the whole model (L layers, D inputs, H hidden, C classes).
size_t model_param_count(int L, int D, int H, int C);
// The FLOPs one row costs a step through `params` parameters (model_param_count's, or an MoE row's): 2 a
// parameter forward, 4 backward (input and weight gradients), less the input gradient of the first layer (D ->
// H), which no pass computes: 6 x params - 2 x D x H.
double model_row_flops(double params, int D, int H);
// Input width of local layer i: D for the model's layer 0, else H.
static inline int stage_fan_in(const Stage *s, int i) { return i == 0 ? s->D : s->H; }
// This rank's part of local layer i: W [out_w, in_w] and b [out_w]. Column-parallel: H/T outputs;
// row-parallel: H/T inputs; else the whole layer (out H, in fan_in). (T = 1: always the whole.)
static inline int stage_out_w(const Stage *s, int i) { return s->kind[i] == TP_COL ? s->H / s->tp : s->H; }
static inline int stage_in_w(const Stage *s, int i) { return s->kind[i] == TP_ROW ? s->H / s->tp : stage_fan_in(s, i); }
// Floats of local layer j's weight in this rank's flat buffer (j == n_layers: the head's, C x H).
// An MoE layer's range (moe.h: the router and the experts this rank holds, moe_held) is cut the same way:
// all but its last H floats, then H.
static inline size_t stage_weight_len(const Stage *s, int j) {
    if (j < s->n_layers && moe_is(s->moe, j)) return moe_held_len(&s->moe->spec, s->H) - (size_t)s->H;
    return j == s->n_layers ? (size_t)s->C * s->H : (size_t)stage_out_w(s, j) * stage_in_w(s, j);
}
// Offset (floats, in params/grads) and length of local layer j's weight and bias; j == n_layers: the head.
// (Reckoned, not read from the pointers: a ZeRO-3 stage holds no flat params.)
static inline size_t stage_layer_len(const Stage *s, int j) {
    return stage_weight_len(s, j) + (j == s->n_layers ? (size_t)s->C : (size_t)stage_out_w(s, j));
}
static inline size_t stage_layer_off(const Stage *s, int j) {
    size_t off = 0;
    for (int i = 0; i < j; i++) off += stage_layer_len(s, i);
    return off;
}
// What a Stage holds: global layers [lo, hi) of a model of `layers` hidden layers (and the head when
// head is set), micro-batches of `rows`, `slots` micro-batches stashed at once, checkpointing.
typedef struct {
    int layers, hidden, classes;  // the whole model: Linear(D,H)+ReLU, (L-1) x Linear(H,H)+ReLU, Linear(H,C)
    int inputs;                   // D, the width of the model's input (0: = hidden)
    int lo, hi, head;
    int rows, slots, ckpt;
    int bf16;                     // stash activations in bf16 (with --precision bf16)
    uint64_t seed;                // initialisation, keyed by the global layer index
    int tp, tp_rank;              // tensor parallelism: the group's size (0 or 1: none) and this rank's
                                  // index: it holds its shard of each layer's initial weights
    int grads_elsewhere;          // no flat grads: on_grad points dW/db at the owner's buffers (ZeRO-2, 3)
    int params_elsewhere;         // no flat params either: on_weights points W/b at gathered layers,
                                  // and the owner initialises its shards (ZeRO-3; init_layer_host)
    MoeSpec moe;                  // mixture-of-experts layers (experts 0: none)
} StageSpec;
void stage_init(Stage *s, const Backend *be, StageSpec spec);
// Moves params and grads (values and views) into the given buffers of n_params floats each, e.g.
// a shared-memory window of --allreduce shm; stage_free leaves them to their owner. grads NULL: the
// params only (ZeRO-2, whose gradients live in zero.c's working buckets).
void stage_share(Stage *s, float *params, float *grads);
void stage_free(Stage *s);
// Parameters of global layer l (or the head when l == L) from (seed, l): PyTorch nn.Linear ranges.
void init_layer_host(uint64_t seed, int l, int fan_in, int fan_out, float *W, float *b);
// This rank's part of local layer j (j == n_layers: the head) as stage_init draws it, on the host: at gets
// stage_layer_len(s, j) floats (--tp: its shard; an MoE layer: the router and the experts it holds), work is
// scratch of stage_whole_layer_len floats (the largest whole layer).
void stage_layer_host(const Stage *s, int j, int L, uint64_t seed, float *at, float *work);
size_t stage_whole_layer_len(const Stage *s);

int stage_slot_acquire(Stage *s, int mb);   // returns slot index holding mb
int stage_slot_of(const Stage *s, int mb);  // -1 when mb is not in flight
// The slot's stashed input: what a pipeline receives into, stage_wire_floats(s, rows x D) floats.
void *stage_slot_input(Stage *s, int slot);
// Loads the slot's input from host rows x_host[rows, D] (fp32), rounding it for a bf16 stash.
void stage_load_input(Stage *s, int slot, const float *x_host);
// stage_load_input and stage_set_labels without a host wait (Backend.to_device_queued): x_host and
// labels_host stay unchanged until a fence recorded after the call has passed (train/executor.c's ring).
void stage_queue_input(Stage *s, int slot, const float *x_host);
void stage_queue_labels(Stage *s, int slot, const int32_t *labels_host);
// The slot's input (when x) and labels (when y) as synthetic rows b made by the backend on its device.
void stage_make_synthetic(Stage *s, int slot, int x, int y, const SyntheticBatch *b);
// Floats of a message carrying n stashed values: n, or with bf16 stashes (n + 1) / 2 (bf16 pairs).
size_t stage_wire_floats(const Stage *s, size_t n);
void stage_set_labels(Stage *s, int slot, const int32_t *labels_host);
void stage_forward(Stage *s, int slot);              // fills activations; head: loss + dlogits
// A forward (stage_pass_forward) or backward (stage_pass_backward, stage_backward's arguments) of one
// micro-batch in pieces, so that two can advance in turn: stage_pass_step runs it layer by layer up to the
// start of an MoE layer's next exchange of rows (moe.h's MoePass) and returns 1 (the rows in flight: call it
// again to wait for them and go on), or to its end and returns 0. stage_forward and stage_backward are one
// run to the end. out: the forward's layer outputs (the backward's: the ones it reads); in: the current
// layer's input (the backward's: the gradient of its output).
typedef struct {
    Stage *s;
    int slot, back, layer, pp, in_moe, rows, then, count;
    int lane;  // its MoE layers' exchange lane (moe.h's MoePass.lane): 1 for the second of two passes in turn
    MoePass moe;
    const float *in;
    void **out;
    float *din;
} StagePass;
void stage_pass_forward(StagePass *p, Stage *s, int slot);
void stage_pass_backward(StagePass *p, Stage *s, int slot, const float *dout, float *din);
int stage_pass_step(StagePass *p);
// Whether a pass of this stage can run in turn with another one's (of another micro-batch, or of another
// stage of this rank): its MoE layers exchange rows, and the two touch no buffer in common (fp32 stashes,
// no checkpointing's shared scratch, no ZeRO-3 gather of each layer's weights, no --deterministic trees).
int stage_can_pair(const Stage *s);
const void *stage_output(const Stage *s, int slot);  // [rows, H] last layer output (non-head), stashed
// dout: gradient of the stage output [rows,H] (ignored on the head stage); din: where to write the
// gradient of the stage input (NULL on the first stage). Releases the slot.
void stage_backward(Stage *s, int slot, const float *dout, float *din);
// The split backward (zero-bubble schedules). stage_enable_split allocates, per slot, what W needs
// kept: the pre-activation gradients dz of every layer (and, with checkpointing, the layer outputs
// the recompute at I produces). stage_backward_input computes only din (what the previous stage
// waits for) and keeps each layer's input and dz; stage_backward_weight then adds
// dW += dz^T x and db += sum(dz) for every layer (and the head), calling the gradient hook as
// stage_backward does, and releases the slot.
// An MoE layer (moe.c) runs its whole backward, its weights' gradients too, at I (W calls only its hook).
void stage_enable_split(Stage *s);
void stage_backward_input(Stage *s, int slot, const float *dout, float *din);
void stage_backward_weight(Stage *s, int slot);
// --deterministic: the weight gradients summed in the rows' canonical tree (base/det.h) rather than
// added per micro-batch; stage_det_finish writes the step's sums into dW/db (after the last backward).
void stage_enable_det(Stage *s, int chunk);
void stage_det_finish(Stage *s);
void stage_det_finish_layer(Stage *s, int j);  // layer j's (the head: n_layers) alone, if rows arrived
// Forward only, no stash, for evaluation: x[rows,D] in, logits or output written to out.
void stage_forward_eval(Stage *s, const float *x, int rows, float *out);
// Starts a new gradient: marks every layer so its next backward overwrites dW/db instead of adding.
void stage_zero_grads(Stage *s);
// The head: adds the loss and hits its forwards tallied since the last take to loss_sum and correct
// (one host wait on a GPU; nothing when no forward ran). Call before reading them.
void stage_take_loss(Stage *s);
// Adam's betas and eps as PyTorch's defaults (--adam-beta1, --adam-beta2, --adam-eps): doubles, so the
// bias corrections 1 - beta^t are reckoned as they always were.
#define ADAM_BETA1 0.9
#define ADAM_BETA2 0.999
#define ADAM_EPS 1e-8
// One optimizer step: the kind (OPTIM_*), this step's learning rate and decoupled weight decay, Adam's
// betas and eps, and t, the 1-based step count.
typedef struct {
    int optimizer;
    float lr, wd;
    double beta1, beta2, eps;
    int t;
} OptimStep;
// t: 1-based step count. Returns the index (in the flat buffer) of the first parameter that is not
// finite after the update, or -1 (ops.h: the check rides on the update's own pass).
long stage_optimizer_step(Stage *s, const OptimStep *o);
// The sum of the squares of g[0, n), the values of the stage's flat gradient at [from, from + n), in
// double (--clip-grad's norm). Without replicated_too the parts every rank of a tensor-parallel group
// holds whole (an odd last layer, a row-parallel layer's bias, the head) are left out: the group's rank 0
// counts them, the others only their own shards, so that the group counts every parameter once.
// --deterministic: exact (base/det.h) takes the squares, exactly, and 0 is returned.
double stage_grad_sumsq(const Stage *s, const float *g, size_t from, size_t n, int replicated_too, DetSum *exact);
// A rank's part of local layer i: the whole tensors Wf [H, fan_in] and bf [H] (host) -> rank t's shard
// W [out_w, in_w] and b [out_w] (host); unshard writes rank t's part of the whole tensors (replicated parts
// whole). (The whole stage's tensors and shards are tensor parallelism's: axes/tensor.h.)
void stage_shard_layer(const Stage *s, int i, int t, const float *Wf, const float *bf, float *W, float *b);
void stage_unshard_layer(const Stage *s, int i, int t, const float *W, const float *b, float *Wf, float *bf);
// The learning rate of 0-based step `step` of `total`: a linear warm-up over the first `warmup`
// steps (lr x (step+1)/warmup), then constant, or cosine from lr down to min_lr at the last step.
double lr_at(int schedule, double lr, double min_lr, long long warmup, long long step, long long total);
// Decoupled weight decay (AdamW, PyTorch semantics): p *= 1 - lr x wd, before the update.
// The same update on n elements (p, g, and for Adam its moments m, v): ZeRO-1 updates a shard.
long optimizer_update(const Backend *be, const OptimStep *o, float *p, const float *g, float *m, float *v, size_t n);
