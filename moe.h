// moe.h: the mixture-of-experts layer (--experts): a router Linear(H,E) with softmax picks the top k
// experts of each row, each expert a Linear(H,H)+ReLU, the output their gate-weighted sum; a capacity per
// expert and Switch's load-balancing loss. model.c runs it in place of a hidden layer's Linear+ReLU.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "base/ops.h"

// The layer's options: E experts (0: a dense model), every `every`th hidden layer (global layers l >= 1
// with l % every == 0; layer 0, whose fan-in is the input width D, is never one), top_k experts per row,
// capacity factor and the auxiliary loss's coefficient. Routing runs over groups of `group` rows (a
// micro-batch's; 0: the whole call): capacity, drops and the auxiliary loss are per group. Expert
// parallelism (--ep): this rank is rank `shard` of `shards` (0 or 1: none) and holds only its experts
// (moe_held), the layer's range then the router and those experts.
typedef struct {
    int experts, every, top_k;
    float capacity, aux;
    int group;
    int shards, shard;
} MoeSpec;

static inline int moe_layer(const MoeSpec *m, int l) { return m->experts > 0 && l >= 1 && l % m->every == 0; }
// Capacity of one expert in a group of `rows` rows: ceil(capacity x rows x k / E).
int moe_capacity(const MoeSpec *m, int rows);

// Parameters of an MoE layer, where a dense layer's W and b would be in the stage's flat buffer (one
// contiguous range, model.h's stage_layer_off/len): the router's weight [E, H] and bias [E], then per
// expert e (0..E-1) its weight [H, H] (out, in) and bias [H]. Expert e's floats are the range
// [moe_expert_off(H, E, e), + moe_expert_len(H)) of the layer: expert parallelism treats them apart
// (their gradients are summed over a different group), the router's [0, moe_router_len) like a dense layer.
static inline size_t moe_router_len(int H, int E) { return (size_t)E * H + (size_t)E; }
static inline size_t moe_expert_len(int H) { return (size_t)H * H + (size_t)H; }
static inline size_t moe_expert_off(int H, int E, int e) {
    return moe_router_len(H, E) + (size_t)e * moe_expert_len(H);
}
static inline size_t moe_layer_len(int H, int E) { return moe_expert_off(H, E, E); }
// The experts this rank holds, the one rule every walk of the flat buffer follows (init, the optimizer's
// buffers, checkpoints, --verify, the gradient sync's groups, the planner's bytes): rank `shard` of
// `shards` holds E/shards experts in a row, returned, from global expert *first on; its local expert i
// (global *first + i) lies at moe_expert_off(H, E, i) of its layer's range, whose length is
// moe_held_len. Without expert parallelism: all E, from 0 (the range is moe_layer_len).
static inline int moe_held(const MoeSpec *m, int *first) {
    int n = m->shards > 1 ? m->experts / m->shards : m->experts;
    *first = m->shards > 1 ? m->shard * n : 0;
    return n;
}
static inline size_t moe_held_len(const MoeSpec *m, int H) {
    int first, n = moe_held(m, &first);
    return moe_expert_off(H, m->experts, n);
}
// Checkpoints' tensor j (0 .. 2 + 2E - 1) of MoE layer l: layers.l.router.weight [E, H], .router.bias [E],
// then per expert e layers.l.experts.e.weight [H, H] and .bias [H]: its name, shape, and its offset in the
// layer's range added to *off; returns its dimensions (1 or 2).
int moe_tensor(int H, int E, int l, int j, char *name, size_t n, int64_t shape[2], size_t *off);
// The initial parameters of global layer l (host, moe_layer_len floats): the router as a dense layer's
// init_layer_host(seed, l, H, E) (nn.Linear's ranges), expert e from (seed, l, e) in the same ranges.
void moe_init_host(uint64_t seed, int l, int H, int E, float *p);

// The hook expert parallelism sets (NULL: every expert is local). The group has `size` ranks; this rank
// holds experts [rank*E/size, (rank+1)*E/size) (size and rank: the spec's shards and shard). Host buffers.
typedef struct {
    int size, rank;  // the expert group; this rank holds experts [rank*E/size, (rank+1)*E/size)
    // counts first: send[E] rows this rank routes to each global expert (experts grouped by owner, so
    // owner r's slice is send[r*E/size ...]); recv[size * E/size]: rows each rank sends to each of my experts
    void (*exchange_counts)(void *ctx, const int *send, int *recv);
    // then rows of w floats: send holds rows grouped by global expert (owner order), recv the rows for
    // my experts grouped by source rank then expert; back = 1 runs the same exchange in reverse:
    // `send` then holds rows in the recv layout and `recv` gets them in the send layout (send_counts and
    // recv_counts keep their meaning: the counts of the forward exchange)
    void (*exchange_rows)(void *ctx, const float *send, const int *send_counts, float *recv, const int *recv_counts,
                          int w, int back);
    // the same in two halves, so that the layer computes while the rows travel (NULL: exchange_rows, whole,
    // at the start): start_rows leaves the rows this rank sends itself to the caller (moe.c moves them; their
    // place in recv is not written), wait_rows returns once recv holds every other rank's. Between the two
    // the layer neither writes send nor reads recv's other rows.
    void (*start_rows)(void *ctx, const float *send, const int *send_counts, float *recv, const int *recv_counts,
                       int w, int back);
    void (*wait_rows)(void *ctx);
    // where the layer writes the rows of its next start_rows (floats of them, packed as start_rows takes
    // them; back as start_rows's), so that the start copies nothing (shm's window); NULL, or NULL returned:
    // the layer's own buffer. The rows stay there until that start, which is given the same pointer as send.
    float *(*send_buffer)(void *ctx, size_t floats, int back);
    // in place (shm's windows; NULL: not offered): a dispatch's start_rows is given recv NULL and copies no rows
    // in; once wait_rows returns, rows_at(ctx, r) is where rank r's rows for my experts lie (read-only, packed
    // as in recv), until release_rows, which the layer calls before its next exchange
    const float *(*rows_at)(void *ctx, int r);
    void (*release_rows)(void *ctx);
    void *ctx;
} MoeExchange;

// What the layers' training forwards counted since moe_stats_reset: rows each global expert got
// (kept assignments, summed over the stage's MoE layers), assignments made and dropped, and the
// auxiliary loss as each group's value x its rows (aux_rows: rows x MoE layers routed).
typedef struct {
    long *load;  // [E]
    long assigned, dropped;
    double aux_wsum, aux_rows;
} MoeStats;

typedef struct MoeState MoeState;
// The MoE layers of one stage: which local layers they are, what each stashes per micro-batch slot
// (n_slots states, and one more for evaluation), scratch, the counters.
typedef struct {
    const Backend *be;
    MoeSpec spec;
    int H, n_layers, rows, n_slots;
    unsigned char *is;        // [n_layers]: local layer i is an MoE layer
    MoeState *st;             // [(n_slots + 1) x n_layers]
    const MoeExchange *ex;    // NULL: every expert local (the running pass's lane's, set by moe_pass_step)
    const MoeExchange *lane_ex[2];  // each lane's (moe_set_exchange); lane 1: a pass running in turn with another
    MoeStats stats;
    void *scratch;            // moe.c's host and device work buffers (the running pass's lane's)
    void *lane_scratch[2];    // each lane's (lane 1's made at its first pass)
    int bf16;                 // --precision bf16: x and dy rounded to bf16 where read (moe.c read_rows)
} Moe;

// The MoE layers of a stage of global layers [lo, lo + n_layers) with micro-batches of at most `rows`
// rows and n_slots slots; NULL when none of its layers is one.
Moe *moe_new(const Backend *be, MoeSpec spec, int H, int lo, int n_layers, int rows, int n_slots);
void moe_free(Moe *m);
static inline int moe_is(const Moe *m, int i) { return m && m->is[i]; }
void moe_stats_reset(Moe *m);

// Local layer i on x [rows, H] (device) -> y [rows, H], its parameters P (device, the layer's range);
// slot: the slot whose state it stashes for the backward (-1: evaluation, nothing kept, and no capacity:
// nothing dropped); count: add to the counters (a training forward, not a recompute).
void moe_forward(Moe *m, int i, int slot, const float *P, const float *x, float *y, int rows, int count);
// The backward of slot's last forward of layer i: adds the parameters' gradients into dP (the layer's
// range) and writes dx (NULL: none) from dy. grad_scale: the weight of one row in the step's loss (the
// auxiliary loss of a group of G rows weighs G x grad_scale).
void moe_backward(Moe *m, int i, int slot, const float *P, float *dP, const float *x, const float *dy, float *dx,
                  float grad_scale);
// The same passes in pieces, for a stage whose forward of one micro-batch and backward of another advance in
// turn: moe_forward_begin / moe_backward_begin take moe_forward's / moe_backward's arguments, then each
// moe_pass_step runs the pass up to the start of its next exchange of rows and returns 1 (the rows in flight:
// call it again to wait for them and go on), or to its end and returns 0. Every expert local: one step, 0.
// Run to its end a pass is moe_forward's or moe_backward's, bit for bit (they are these steps in a loop).
typedef struct {
    Moe *m;
    int i, slot, back, phase, rows, count;
    const float *P, *x, *dy;
    float *y, *dP, *dx, *dg, grad_scale;  // dg: the backward's gates' gradients, [rows, k]
    int lane;  // 0, or 1 for the second of two passes in turn: its own scratch and exchange (moe_set_exchange)
} MoePass;
void moe_forward_begin(MoePass *q, Moe *m, int i, int slot, const float *P, const float *x, float *y, int rows,
                       int count);
void moe_backward_begin(MoePass *q, Moe *m, int i, int slot, const float *P, float *dP, const float *x,
                        const float *dy, float *dx, float grad_scale);
int moe_pass_step(MoePass *q);
// The exchange lane (0 or 1) of m's passes calls: two passes in turn, each with its exchange in flight, need
// two (the group's rows exchanges are matched in order, one in flight each). Lane 0's is also m->ex.
void moe_set_exchange(Moe *m, int lane, const MoeExchange *ex);
