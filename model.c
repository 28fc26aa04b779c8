// model.c: the forward and backward pass of one pipeline stage of the MLP (or of one rank's shard of
// it, tensor-parallel: the layers' local widths, and the two all-reduces of a Megatron pair through
// the stage's hook), weight init keyed by the global layer index (so every partition starts from the
// same weights), SGD and Adam, and the stage's activation-memory counters.
#include <math.h>
#include <string.h>
#include "base/data.h"
#include "model.h"
#include "base/util.h"

size_t model_param_count(int L, int D, int H, int C) {
    return ((size_t)H * D + H) + (size_t)(L - 1) * ((size_t)H * H + H) + (size_t)C * H + C;
}

double model_row_flops(double params, int D, int H) { return 6 * params - 2 * (double)D * H; }


void init_layer_host(uint64_t seed, int l, int fan_in, int fan_out, float *W, float *b) {
    float bound = 1.0f / sqrtf((float)fan_in);  // nn.Linear: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in))
    uint64_t kw = rng_key(seed, RNG_PARAM, 2 * (uint64_t)l), kb = rng_key(seed, RNG_PARAM, 2 * (uint64_t)l + 1);
    for (size_t i = 0; i < (size_t)fan_in * fan_out; i++) W[i] = (2.0f * rng_uniform(kw, i) - 1.0f) * bound;
    for (int i = 0; i < fan_out; i++) b[i] = (2.0f * rng_uniform(kb, (uint64_t)i) - 1.0f) * bound;
}

// A stash holds fp32 values (computed and read in place) or, with bf16 stashes, the values rounded
// to bf16: computed in an fp32 work buffer and rounded in (put), widened into one to be read (get).
// Every reader rounds to bf16 anyway (ops.h), so a bf16 stash changes no result.
static size_t esz(const Stage *s) { return s->bf16 ? sizeof(uint16_t) : sizeof(float); }
static void *stash_alloc(const Stage *s, size_t n) { return s->be->alloc((n * esz(s) + 3) / 4 * 4); }  // whole floats
static float *work_for(const Stage *s, void *dst, int w) { return s->bf16 ? s->buf.work[w] : dst; }
static void put(const Stage *s, void *dst, const float *src, size_t n) { if (s->bf16) s->be->to_bf16(dst, src, n); }
static const float *get(const Stage *s, const void *src, int w, size_t n) {
    if (!s->bf16) return src;
    s->be->from_bf16(s->buf.work[w], src, n);
    return s->buf.work[w];
}
size_t stage_wire_floats(const Stage *s, size_t n) { return s->bf16 ? (n + 1) / 2 : n; }

// Activation bytes a slot holds. stash: from F to the backward (the input, and every layer's output
// unless checkpointing; the head's logits). all: everything the backward reads at once.
// deferred: from I to W with a split backward: every layer's input (the stage input and the outputs
// but the last; the head's input too) and every layer's dz (and the head's dlogits). A layer's
// output (and dz) is its local width: a column-parallel layer's H/T, else H.
static size_t rows_out(const Stage *s, int i) { return (size_t)s->rows * stage_out_w(s, i) * esz(s); }
static size_t outputs(const Stage *s, int from, int to) {  // layers [from, to)
    size_t b = 0;
    for (int i = from; i < to; i++) b += rows_out(s, i);
    return b;
}
static size_t rowsIn(const Stage *s) { return (size_t)s->rows * s->D * esz(s); }
static size_t logits_bytes(const Stage *s) { return s->has_head ? (size_t)s->rows * s->C * esz(s) : 0; }
static size_t stash_bytes(const Stage *s) {
    return rowsIn(s) + (s->ckpt ? 0 : outputs(s, 0, s->n_layers)) + logits_bytes(s);
}
static size_t all_bytes(const Stage *s) { return rowsIn(s) + outputs(s, 0, s->n_layers) + logits_bytes(s); }
static size_t deferred_bytes(const Stage *s) {
    int n = s->n_layers;
    return rowsIn(s) + outputs(s, 0, n - 1) + (s->has_head && n ? rows_out(s, n - 1) : 0) + outputs(s, 0, n) +
           logits_bytes(s);
}

// The slot now holds `bytes`: moves the stage's (and the rank's) live and peak counters.
static void slot_bytes(Stage *s, Slot *sl, size_t bytes) {
    s->mem.act_bytes = s->mem.act_bytes - sl->bytes + bytes;
    if (s->mem.act_bytes > s->mem.peak_act_bytes) s->mem.peak_act_bytes = s->mem.act_bytes;
    if (s->mem.tally) {
        MemTally *t = s->mem.tally;
        t->bytes = t->bytes - sl->bytes + bytes;
        if (t->bytes > t->peak_bytes) t->peak_bytes = t->bytes;
    }
    sl->bytes = bytes;
}
// Micro-batches moving between the stash (F .. B or I) and the deferred (I .. W) states.
static void count(Stage *s, int dstash, int ddeferred) {
    MemTally *t = s->mem.tally;
    if (!t) return;
    t->inflight += dstash;
    t->deferred += ddeferred;
    if (t->inflight > t->peak_inflight) t->peak_inflight = t->inflight;
    if (t->deferred > t->peak_deferred) t->peak_deferred = t->deferred;
}

// Local layer i's whole tensors Wf [H, fan_in] and bf [H] -> rank t's shard W [out_w, in_w], b [out_w]
// (unshard: the other way, writing only the part rank t holds; a replicated part is written whole).
static void layer_copy(const Stage *s, int i, int t, float *Wf, float *bf, float *W, float *b, int to_shard) {
    int H = s->H, k = stage_fan_in(s, i), hs = H / s->tp;
    size_t wlen = (size_t)H * k, blen = (size_t)H, woff = 0, boff = 0;
    if (s->kind[i] == TP_COL) {  // rows [t H/T, (t+1) H/T) of W and b: contiguous
        wlen = (size_t)hs * k;
        blen = (size_t)hs;
        woff = (size_t)t * wlen;
        boff = (size_t)t * blen;
    } else if (s->kind[i] == TP_ROW) {  // columns [t H/T, (t+1) H/T) of every row of W; b whole
        for (int o = 0; o < H; o++) {
            float *whole = Wf + (size_t)o * H + (size_t)t * hs, *part = W + (size_t)o * hs;
            memcpy(to_shard ? part : whole, to_shard ? whole : part, sizeof(float) * (size_t)hs);
        }
        wlen = 0;
    }
    if (wlen) memcpy(to_shard ? W : Wf + woff, to_shard ? Wf + woff : W, sizeof(float) * wlen);
    memcpy(to_shard ? b : bf + boff, to_shard ? bf + boff : b, sizeof(float) * blen);
}

void stage_shard_layer(const Stage *s, int i, int t, const float *Wf, const float *bf, float *W, float *b) {
    layer_copy(s, i, t, (float *)Wf, (float *)bf, W, b, 1);  // (reads Wf and bf only)
}
void stage_unshard_layer(const Stage *s, int i, int t, const float *W, const float *b, float *Wf, float *bf) {
    layer_copy(s, i, t, Wf, bf, (float *)W, (float *)b, 0);  // (reads W and b only)
}

// The flat parameter and gradient buffers, each layer's views into them, the weights initialised
// from (seed, global layer). A buffer kept elsewhere (StageSpec: ZeRO) is not allocated, and its
// views stay NULL until its owner sets them.
static void init_params(Stage *s, const StageSpec *spec, int L, uint64_t seed) {
    const Backend *be = s->be;
    int n = s->n_layers;
    if (!spec->params_elsewhere) s->params = be->alloc(s->n_params * sizeof(float));
    if (!spec->grads_elsewhere) {
        s->grads = be->alloc(s->n_params * sizeof(float));
        be->fill(s->grads, 0.0f, s->n_params);  // (read before any backward only by tests and --verify)
    }
    float *host = xmalloc(stage_whole_layer_len(s) * sizeof(float));
    float *work = xmalloc(stage_whole_layer_len(s) * sizeof(float));
    for (int j = 0; j < n + s->has_head; j++) {  // j == n: the head
        size_t off = stage_layer_off(s, j), w = stage_weight_len(s, j);
        float **W = j == n ? &s->Wh : &s->W[j], **b = j == n ? &s->bh : &s->b[j];
        float **dW = j == n ? &s->dWh : &s->dW[j], **db = j == n ? &s->dbh : &s->db[j];
        if (s->grads) { *dW = s->grads + off; *db = s->grads + off + w; }
        if (!s->params) continue;
        *W = s->params + off; *b = s->params + off + w;
        stage_layer_host(s, j, L, seed, host, work);
        be->to_device(*W, host, stage_layer_len(s, j) * sizeof(float));
    }
    free(host); free(work);
}

size_t stage_whole_layer_len(const Stage *s) {
    int H = s->H;
    size_t full = (size_t)H * (s->D > H ? s->D : H) + H, head = (size_t)s->C * H + s->C;  // a whole layer, the largest
    if (s->moe && moe_layer_len(H, s->moe->spec.experts) > full) full = moe_layer_len(H, s->moe->spec.experts);
    return full > head ? full : head;
}

void stage_layer_host(const Stage *s, int j, int L, uint64_t seed, float *at, float *work) {
    int H = s->H;
    size_t w = stage_weight_len(s, j);
    if (j == s->n_layers) {  // the head, whole on every rank
        init_layer_host(seed, L, H, s->C, at, at + w);
        return;
    }
    if (moe_is(s->moe, j)) {  // router and experts (moe.h) drawn whole, then the experts this rank holds
        int E = s->moe->spec.experts, first, held = moe_held(&s->moe->spec, &first);
        moe_init_host(seed, s->lo + j, H, E, work);
        memcpy(at, work, moe_router_len(H, E) * sizeof(float));
        memcpy(at + moe_expert_off(H, E, 0), work + moe_expert_off(H, E, first),
               moe_expert_len(H) * (size_t)held * sizeof(float));
        return;
    }
    // the whole layer from (seed, global layer), then this rank's shard of it
    size_t in = (size_t)stage_fan_in(s, j);
    init_layer_host(seed, s->lo + j, (int)in, H, work, work + (size_t)H * in);
    stage_shard_layer(s, j, s->tp_rank, work, work + (size_t)H * in, at, at + w);
}

void stage_init(Stage *s, const Backend *be, StageSpec spec) {
    int L = spec.layers, H = spec.hidden, C = spec.classes, lo = spec.lo, hi = spec.hi, has_head = spec.head;
    int rows = spec.rows, n_slots = spec.slots, ckpt = spec.ckpt;
    uint64_t seed = spec.seed;
    memset(s, 0, sizeof *s);
    s->be = be; s->H = H; s->C = C; s->lo = lo; s->hi = hi; s->n_layers = hi - lo;
    s->D = lo == 0 && spec.inputs > 0 ? spec.inputs : H;
    s->has_head = has_head; s->rows = rows; s->ckpt = ckpt; s->n_slots = n_slots; s->bf16 = spec.bf16;
    s->grad_scale = 1.0f / rows;
    s->tp = spec.tp > 1 ? spec.tp : 1;
    s->tp_rank = s->tp > 1 ? spec.tp_rank : 0;
    CHECK(H % s->tp == 0 && s->tp_rank < s->tp, "a stage of hidden %d split %d ways (rank %d)", H, s->tp, s->tp_rank);
    s->kind = xcalloc((size_t)s->n_layers + 1, 1);
    for (int i = 0; i < s->n_layers; i++) s->kind[i] = (unsigned char)tp_layer_kind(s->tp, s->n_layers, i);
    s->moe = moe_new(be, spec.moe, H, lo, s->n_layers, rows, n_slots);
    if (s->moe) s->moe->bf16 = spec.bf16;
    CHECK(!s->moe || s->tp == 1, "a stage with MoE layers split %d ways", s->tp);
    s->n_params = has_head ? (size_t)C * H + C : 0;
    for (int i = 0; i < s->n_layers; i++) s->n_params += stage_layer_len(s, i);
    int n = s->n_layers;
    s->W = xcalloc((size_t)n + 1, sizeof(float *)); s->b = xcalloc((size_t)n + 1, sizeof(float *));
    s->dW = xcalloc((size_t)n + 1, sizeof(float *)); s->db = xcalloc((size_t)n + 1, sizeof(float *));
    s->grad_fresh = xcalloc((size_t)n + 1, sizeof(int));
    init_params(s, &spec, L, seed);
    size_t one_act = (size_t)rows * H,
           wide = (size_t)rows * (size_t)(s->D > H ? (s->D > C ? s->D : C) : (H > C ? H : C));
    s->slots = xcalloc((size_t)n_slots, sizeof(Slot));
    for (int k = 0; k < n_slots; k++) {
        Slot *sl = &s->slots[k];
        sl->mb = -1;
        sl->in = stash_alloc(s, (size_t)rows * s->D);
        if (!ckpt) {
            sl->act = xcalloc((size_t)n, sizeof(void *));
            for (int i = 0; i < n; i++) sl->act[i] = stash_alloc(s, (size_t)rows * stage_out_w(s, i));
        }
        if (has_head) {
            sl->logits = stash_alloc(s, (size_t)rows * C);
            sl->labels = be->alloc((size_t)rows * sizeof(int32_t));
        }
    }
    if (ckpt) {
        s->scratch = xcalloc((size_t)n, sizeof(void *));
        for (int i = 0; i < n; i++) s->scratch[i] = stash_alloc(s, (size_t)rows * stage_out_w(s, i));
    }
    s->buf.gbuf[0] = be->alloc(one_act * sizeof(float));
    s->buf.gbuf[1] = be->alloc(one_act * sizeof(float));
    for (int w = 0; w < 3 && s->bf16; w++) s->buf.work[w] = be->alloc(wide * sizeof(float));
    if (has_head) s->loss.tally = be->alloc(2 * sizeof(double));  // zero-filled
}

void stage_share(Stage *s, float *params, float *grads) {
    s->be->copy(params, s->params, s->n_params * sizeof(float));
    if (grads) s->be->copy(grads, s->grads, s->n_params * sizeof(float));
    for (int i = 0; i < s->n_layers; i++) {
        s->W[i] = params + (s->W[i] - s->params); s->b[i] = params + (s->b[i] - s->params);
        if (grads) { s->dW[i] = grads + (s->dW[i] - s->grads); s->db[i] = grads + (s->db[i] - s->grads); }
    }
    if (s->has_head) {
        s->Wh = params + (s->Wh - s->params); s->bh = params + (s->bh - s->params);
        if (grads) { s->dWh = grads + (s->dWh - s->grads); s->dbh = grads + (s->dbh - s->grads); }
    }
    s->be->free(s->params);
    if (grads) s->be->free(s->grads);
    s->params = params;
    if (grads) s->grads = grads;
    s->shared = grads ? 1 : 2;
}

void stage_free(Stage *s) {
    if (s->det) {
        for (int j = 0; j <= s->n_layers; j++) det_tree_free(&s->det->tree[j]);
        free(s->det->tree);
        free(s->det->part[0]);
        free(s->det->part[1]);
        free(s->det);
    }
    const Backend *be = s->be;
    for (int k = 0; k < s->n_slots; k++) {
        Slot *sl = &s->slots[k];
        be->free(sl->in);
        if (sl->act) { for (int i = 0; i < s->n_layers; i++) be->free(sl->act[i]); free(sl->act); }
        if (sl->dz) { for (int i = 0; i < s->n_layers; i++) be->free(sl->dz[i]); free(sl->dz); }
        if (sl->logits) { be->free(sl->logits); be->free(sl->labels); }
    }
    if (s->scratch) { for (int i = 0; i < s->n_layers; i++) be->free(s->scratch[i]); free(s->scratch); }
    if (s->loss.tally) be->free(s->loss.tally);
    moe_free(s->moe);
    be->free(s->buf.gbuf[0]); be->free(s->buf.gbuf[1]);
    for (int w = 0; w < 3; w++) if (s->buf.work[w]) be->free(s->buf.work[w]);
    if (!s->shared) be->free(s->params);
    if (s->shared != 1) be->free(s->grads);  // (2: only the params are shared)
    if (s->adam_m) { be->free(s->adam_m); be->free(s->adam_v); }
    free(s->slots); free(s->W); free(s->b); free(s->dW); free(s->db); free(s->grad_fresh); free(s->kind);
    memset(s, 0, sizeof *s);
}

int stage_slot_of(const Stage *s, int mb) {
    for (int k = 0; k < s->n_slots; k++) if (s->slots[k].mb == mb) return k;
    return -1;
}

int stage_slot_acquire(Stage *s, int mb) {
    int k = stage_slot_of(s, mb);
    if (k >= 0) return k;
    for (k = 0; k < s->n_slots; k++) if (s->slots[k].mb < 0) break;
    if (k == s->n_slots) fatal("stage %d..%d: micro-batch %d needs a slot but all %d are in flight (schedule bug)",
                               s->lo, s->hi, mb, s->n_slots);
    s->slots[k].mb = mb;
    s->slots[k].bytes = 0;
    slot_bytes(s, &s->slots[k], stash_bytes(s));
    count(s, 1, 0);
    return k;
}

static void slot_release(Stage *s, int slot) {
    slot_bytes(s, &s->slots[slot], 0);
    s->slots[slot].mb = -1;
}

void *stage_slot_input(Stage *s, int slot) { return s->slots[slot].in; }

// copy: the backend's to_device (waits) or to_device_queued (the training path's ring: no wait).
static void load_input(Stage *s, int slot, const float *x_host, void (*copy)(void *, const void *, size_t)) {
    size_t n = (size_t)s->rows * s->D;
    float *x = work_for(s, s->slots[slot].in, 2);
    copy(x, x_host, n * sizeof(float));
    put(s, s->slots[slot].in, x, n);
}
void stage_load_input(Stage *s, int slot, const float *x_host) { load_input(s, slot, x_host, s->be->to_device); }
void stage_queue_input(Stage *s, int slot, const float *x_host) {
    load_input(s, slot, x_host, s->be->to_device_queued);
}

// Synthetic rows made in place by the backend (its synthetic): the input when x, the labels when y.
void stage_make_synthetic(Stage *s, int slot, int x, int y, const SyntheticBatch *b) {
    size_t n = (size_t)s->rows * s->D;
    float *in = x ? work_for(s, s->slots[slot].in, 2) : NULL;
    s->be->synthetic(in, y ? s->slots[slot].labels : NULL, b);
    if (x) put(s, s->slots[slot].in, in, n);
}

void stage_set_labels(Stage *s, int slot, const int32_t *labels_host) {
    s->be->to_device(s->slots[slot].labels, labels_host, (size_t)s->rows * sizeof(int32_t));
}
void stage_queue_labels(Stage *s, int slot, const int32_t *labels_host) {
    s->be->to_device_queued(s->slots[slot].labels, labels_host, (size_t)s->rows * sizeof(int32_t));
}

// --deterministic: a hidden layer's product C[M, N] = A B over its inner dimension K (forward: the inputs;
// input gradient: the outputs) in the canonical split (docs/determinism.md): DET_SLICES products over
// the slices [K j / DET_SLICES, K (j + 1) / DET_SLICES) of K, added in a pairwise tree, (a0 + a1) +
// (a2 + a3). --tp T holds DET_SLICES / T of those slices of the inner dimension it splits: a rank sums its
// own in the tree's lower levels here (L = DET_SLICES / T), and the group adds the ranks' sums above them
// (tp_allreduce: a + b for 2, the tree for 4). An inner dimension the rank does not split it computes in
// all the slices (a column's bits do not depend on how many columns a product carries: tests/unit_det.c).
// tb: B is [N, K] (the forward's W), else [K, N]. Slices j0 .. j0 + n of L, into C.
// One slice j of L: C = its product (beta 0), or C + its product (beta 1).
static void det_slice(Stage *s, int tb, int M, int N, int K, const float *A, const float *B, float *C, int j, int L,
                      float beta) {
    int k0 = (int)((long)K * j / L), k1 = (int)((long)K * (j + 1) / L);
    s->be->gemm(0, tb, M, N, k1 - k0, 1.0f, A + k0, K, tb ? B + k0 : B + (size_t)k0 * N, tb ? K : N, beta, C, N);
}

static void det_slices(Stage *s, int tb, int M, int N, int K, const float *A, const float *B, float *C, int j0, int n,
                       int L) {
    if (n == 1) {
        det_slice(s, tb, M, N, K, A, B, C, j0, L, 0.0f);
        return;
    }
    if (n == 2 && ((long)K + L - 1) / L <= DET_FUSE_MAX) {  // two sibling slices: the right one added by its gemm
        det_slice(s, tb, M, N, K, A, B, C, j0, L, 0.0f);       // (beta 1: C + product rounded once, the
        det_slice(s, tb, M, N, K, A, B, C, j0 + 1, L, 1.0f);   // tree's add; tests/unit_det.c checks it)
        return;
    }
    float *t = s->det->part[n == L ? 0 : 1];  // (L <= 4: the top level's right half, then the level below's)
    det_slices(s, tb, M, N, K, A, B, C, j0, n / 2, L);
    det_slices(s, tb, M, N, K, A, B, t, j0 + n / 2, n / 2, L);
    for (size_t j = 0; j < (size_t)M * N; j++) C[j] += t[j];
}

// split: how many ways this rank's group splits the inner dimension K (1: K is the layer's whole).
static void det_product(Stage *s, int tb, int M, int N, int K, const float *A, const float *B, float *C, int split) {
    int L = DET_SLICES / split;
    if ((long)K * split < DET_SLICES) L = 1;  // (a layer narrower than the slices: one product, never split)
    if (s->det->part_n < (size_t)M * N) {
        for (int i = 0; i < 2; i++) {
            free(s->det->part[i]);
            s->det->part[i] = xmalloc(sizeof(float) * (size_t)M * N);
        }
        s->det->part_n = (size_t)M * N;
    }
    det_slices(s, tb, M, N, K, A, B, C, 0, L, L);
}

// One layer's product o[rows, h] = in[rows, k] W^T (this rank's widths). A row-parallel layer's is
// a partial sum over its H/T inputs: the group's all-reduce (Megatron's g; fp32 partials, in bf16
// too) makes it the whole layer's before the bias, which every rank holds whole, is added once.
static void layer_product(Stage *s, int i, const float *in, float *o, int rows) {
    int h = stage_out_w(s, i), k = stage_in_w(s, i);
    if (s->det) det_product(s, 1, rows, h, k, in, s->W[i], o, s->kind[i] == TP_ROW ? s->tp : 1);
    else s->be->gemm(0, 1, rows, h, k, 1.0f, in, k, s->W[i], k, 0.0f, o, h);
    if (s->kind[i] == TP_ROW) s->hooks.tp_allreduce(s->hooks.tp_ctx, o, (size_t)rows * h);
    s->be->bias_act(o, s->b[i], rows, h, 1);
}

// A layer's input gradient dx[rows, k] = dz[rows, h] W (this rank's widths). A column-parallel
// layer's is a partial sum over its H/T outputs: the all-reduce (f's conjugate) makes it whole.
static void layer_input_grad(Stage *s, int i, const float *dz, float *dx, int rows) {
    int h = stage_out_w(s, i), k = stage_in_w(s, i);
    if (s->det) det_product(s, 0, rows, k, h, dz, s->W[i], dx, s->kind[i] == TP_COL ? s->tp : 1);
    else s->be->gemm(0, 0, rows, k, h, 1.0f, dz, h, s->W[i], k, 0.0f, dx, k);
    if (s->kind[i] == TP_COL) s->hooks.tp_allreduce(s->hooks.tp_ctx, dx, (size_t)rows * k);
}
// ZeRO's hooks (Stage.on_weights, on_grad): nothing when the stage holds its whole state.
static void weights(Stage *s, int layer, int next) {
    if (s->hooks.on_weights) s->hooks.on_weights(s->hooks.zero_ctx, layer, next);
}
static void grad_target(Stage *s, int layer) {
    if (s->hooks.on_grad) s->hooks.on_grad(s->hooks.zero_ctx, layer);
}
// The layer below i whose input gradient a backward computes (so whose weights it reads), or -1:
// local layer 0 computes one only when there is a previous stage (din).
static int below(int i, const float *din) { return i - 1 > 0 || (i - 1 == 0 && din) ? i - 1 : -1; }

// The layers of this stage from p->layer on: x[rows,D] -> out[i] = ReLU(in W_i^T + b_i) for each local
// layer i, stashed; p->in ends as the last output (x when there are no layers) in fp32: itself, or a work
// buffer (bf16 stashes: the outputs are computed in work 0 and 1 by turns, the input widened into work 2).
// then: the layer whose weights are read after these (the head: n_layers), or -1. An MoE layer stashes
// its routing in the slot's state (count: a training forward, counted in its stats; not a recompute).
// Returns 1 when an MoE layer's exchange is in flight (call again to go on), 0 at the end.
static int layers_forward_step(StagePass *p) {
    Stage *s = p->s;
    for (; p->layer < s->n_layers; p->layer++) {
        int i = p->layer;
        float *o = work_for(s, p->out[i], i & 1);
        if (!p->in_moe) {
            weights(s, i, i + 1 < s->n_layers ? i + 1 : p->then);
            if (!moe_is(s->moe, i)) layer_product(s, i, p->in, o, p->rows);
            else moe_forward_begin(&p->moe, s->moe, i, p->slot, s->W[i], p->in, o, p->rows, p->count);
            p->moe.lane = p->lane;
            p->in_moe = moe_is(s->moe, i);
        }
        if (p->in_moe && moe_pass_step(&p->moe)) return 1;
        p->in_moe = 0;
        put(s, p->out[i], o, (size_t)p->rows * stage_out_w(s, i));
        p->in = o;
        if (s->hooks.progress) s->hooks.progress();
    }
    return 0;
}
static const float *layers_forward(Stage *s, const void *x, void **out, int rows, int then, int slot, int count) {
    StagePass p = {.s = s, .slot = slot, .rows = rows, .then = then, .count = count, .out = out,
                   .in = get(s, x, 2, (size_t)rows * s->D)};
    while (layers_forward_step(&p)) {}
    return p.in;
}

void stage_pass_forward(StagePass *p, Stage *s, int slot) {
    // Checkpointing: run the layers in the shared scratch; only sl->in stays stashed. The output
    // must survive until it is sent (the executor sends it right after), and the head stage needs
    // only its dlogits.
    *p = (StagePass){.s = s, .slot = slot, .rows = s->rows, .then = s->has_head ? s->n_layers : -1, .count = 1,
                     .out = s->ckpt ? s->scratch : s->slots[slot].act,
                     .in = get(s, s->slots[slot].in, 2, (size_t)s->rows * s->D)};
}
static int forward_step(StagePass *p) {
    Stage *s = p->s;
    Slot *sl = &s->slots[p->slot];
    if (layers_forward_step(p)) return 1;
    if (s->has_head) {
        float *lg = work_for(s, sl->logits, s->n_layers & 1);  // (not the work buffer holding the last output)
        weights(s, s->n_layers, -1);
        s->be->gemm(0, 1, s->rows, s->C, s->H, 1.0f, p->in, s->H, s->Wh, s->H, 0.0f, lg, s->C);
        s->be->bias_act(lg, s->bh, s->rows, s->C, 0);
        // the loss and hits stay on the device until stage_take_loss: no host wait per micro-batch
        s->be->softmax_xent_tally(lg, sl->labels, s->rows, s->C, s->grad_scale, lg, s->loss.tally);
        s->loss.pending = 1;
        put(s, sl->logits, lg, (size_t)s->rows * s->C);
        s->loss.rows += s->rows;
    }
    weights(s, -1, -1);
    return 0;
}
void stage_forward(Stage *s, int slot) {
    StagePass p;
    stage_pass_forward(&p, s, slot);
    while (stage_pass_step(&p)) {}
}

const void *stage_output(const Stage *s, int slot) {
    return s->ckpt ? s->scratch[s->n_layers - 1] : s->slots[slot].act[s->n_layers - 1];
}

// Checkpointing: recomputes the layer outputs from the stashed input into out (counted as live).
static void recompute(Stage *s, Slot *sl, void **out) {
    slot_bytes(s, sl, all_bytes(s));
    layers_forward(s, sl->in, out, s->rows, -1, (int)(sl - s->slots), 0);
    weights(s, -1, -1);
}

// The beta of layer j's weight-gradient gemm: 0 for the first gradient since stage_zero_grads
// (which only marks the layers: overwriting saves a pass over every gradient each step), then 1 to
// accumulate micro-batches. The bias gradient (a sum into db) is zeroed here instead.
static float grad_beta(Stage *s, int j, float *db, int n) {
    if (!s->grad_fresh[j]) return 1.0f;
    s->be->fill(db, 0.0f, (size_t)n);
    s->grad_fresh[j] = 0;
    return 0.0f;
}

// Layer j's weight and bias gradients from a micro-batch: dW += dz^T x, db += the sum of dz's rows
// (beta 0: overwritten, the first since stage_zero_grads). --deterministic: the rows go into the
// layer's pairwise tree instead (base/det.h), as the leaves of the step's rows they are; stage_det_finish
// writes the sums. The tree keeps its first subtree in [dW, db] itself (det_tree_home: no copy at the
// finish when the rows end as one) unless ZeRO-2/3's hook places the gradients, in buffers the layers share.
static void weight_grad(Stage *s, int j, const Slot *sl, const float *dz, const float *x, int h, int k) {
    float *dW = j == s->n_layers ? s->dWh : s->dW[j], *db = j == s->n_layers ? s->dbh : s->db[j];
    if (s->det) {
        long row0 = s->det->row0 + (long)sl->mb * s->rows;
        det_tree_home(&s->det->tree[j], s->hooks.on_grad ? NULL : dW);
        det_tree_chunks(&s->det->tree[j], dz, x, s->rows, h, k, row0, s->det->chunk, s->bf16);
        return;
    }
    float beta = grad_beta(s, j, db, h);
    s->be->gemm(1, 0, h, k, s->rows, 1.0f, dz, h, x, k, beta, dW, k);
    s->be->bias_grad(db, dz, s->rows, h);
}

// MoE layer i's backward (moe.c) from dy, the gradient of its output (not where dx is): dx, and its
// gradients added into its range of the flat gradient (zeroed first when fresh); begun into q.
static void moe_grads_begin(Stage *s, MoePass *q, Slot *sl, int i, const float *dy, float *dx, void **act,
                            const float *din) {
    const float *in = get(s, i == 0 ? sl->in : act[i - 1], 1, (size_t)s->rows * s->H);
    if (dx) weights(s, i, below(i, din));
    grad_target(s, i);
    if (s->grad_fresh[i]) {
        s->be->fill(s->dW[i], 0.0f, stage_layer_len(s, i));
        s->grad_fresh[i] = 0;
    }
    moe_backward_begin(q, s->moe, i, (int)(sl - s->slots), s->W[i], s->dW[i], in, dy, dx, s->grad_scale);
}
static void moe_layer_grads(Stage *s, Slot *sl, int i, const float *dy, float *dx, void **act, const float *din) {
    MoePass q;
    moe_grads_begin(s, &q, sl, i, dy, dx, act, din);
    while (moe_pass_step(&q)) {}
    if (s->hooks.progress) s->hooks.progress();
}
// The backward's MoE layer p->layer from g (p->in): g copied into the ping-pong buffer pp first (dx, the
// other one, may be where g lies), the gradient hook called after; p->in becomes dx. Returns 1 while an
// exchange is in flight.
static int moe_layer_backward(StagePass *p) {
    Stage *s = p->s;
    int i = p->layer;
    float *dx = i == 0 ? p->din : s->buf.gbuf[p->pp ^ 1];
    if (!p->in_moe) {
        float *dy = s->buf.gbuf[p->pp];
        if (p->in != dy) s->be->copy(dy, p->in, (size_t)s->rows * s->H * sizeof(float));
        moe_grads_begin(s, &p->moe, &s->slots[p->slot], i, dy, dx, p->out, p->din);
        p->moe.lane = p->lane;
        p->in_moe = 1;
    }
    if (moe_pass_step(&p->moe)) return 1;
    p->in_moe = 0;
    if (s->hooks.progress) s->hooks.progress();
    if (s->hooks.on_layer_grad) s->hooks.on_layer_grad(s->hooks.hook_ctx, i);
    p->in = dx;
    return 0;
}

void stage_pass_backward(StagePass *p, Stage *s, int slot, const float *dout, float *din) {
    const Backend *be = s->be;
    Slot *sl = &s->slots[slot];
    int H = s->H, rows = s->rows;
    *p = (StagePass){.s = s, .slot = slot, .back = 1, .layer = s->n_layers - 1, .rows = rows, .out = sl->act,
                     .in = dout, .din = din};  // in: the gradient w.r.t. the current layer's output
    if (s->ckpt) {  // recompute the inside from the stashed input
        recompute(s, sl, s->scratch);
        p->out = s->scratch;
    }
    if (s->has_head) {
        size_t rH = (size_t)rows * H;
        const float *last =
            s->n_layers ? get(s, p->out[s->n_layers - 1], 0, rH) : get(s, sl->in, 0, (size_t)rows * s->D);
        const float *dl = get(s, sl->logits, 1, (size_t)rows * s->C);  // already dlogits
        float *dx = s->n_layers ? s->buf.gbuf[0] : din;
        if (dx) weights(s, s->n_layers, s->n_layers ? below(s->n_layers, din) : -1);
        grad_target(s, s->n_layers);
        weight_grad(s, s->n_layers, sl, dl, last, s->C, H);
        if (s->hooks.on_layer_grad) s->hooks.on_layer_grad(s->hooks.hook_ctx, s->n_layers);
        if (dx) be->gemm(0, 0, rows, H, s->C, 1.0f, dl, s->C, s->Wh, H, 0.0f, dx, H);
        p->in = dx;
        p->pp = 1;
    }
}
static int backward_step(StagePass *p) {
    Stage *s = p->s;
    Slot *sl = &s->slots[p->slot];
    int rows = s->rows;
    for (; p->layer >= 0; p->layer--, p->pp ^= 1) {
        int i = p->layer;
        if (moe_is(s->moe, i)) {
            if (moe_layer_backward(p)) return 1;
            continue;
        }
        float *dz = s->buf.gbuf[p->pp];
        int h = stage_out_w(s, i), k = stage_in_w(s, i);
        size_t rh = (size_t)rows * h;
        s->be->relu_backward(dz, p->in, get(s, p->out[i], 0, rh), rh);  // may alias g (in place) when g == dz
        const float *in = get(s, i == 0 ? sl->in : p->out[i - 1], 1, (size_t)rows * k);
        float *dx = i == 0 ? p->din : s->buf.gbuf[p->pp ^ 1];
        if (dx) weights(s, i, below(i, p->din));
        grad_target(s, i);
        weight_grad(s, i, sl, dz, in, h, k);
        if (s->hooks.on_layer_grad) s->hooks.on_layer_grad(s->hooks.hook_ctx, i);
        if (dx) layer_input_grad(s, i, dz, dx, rows);
        p->in = dx;
        if (s->hooks.progress) s->hooks.progress();
    }
    weights(s, -1, -1);
    count(s, -1, 0);
    slot_release(s, p->slot);
    return 0;
}
void stage_backward(Stage *s, int slot, const float *dout, float *din) {
    StagePass p;
    stage_pass_backward(&p, s, slot, dout, din);
    while (stage_pass_step(&p)) {}
}
int stage_pass_step(StagePass *p) { return p->back ? backward_step(p) : forward_step(p); }
int stage_can_pair(const Stage *s) {
    return s->moe && s->moe->ex && !s->bf16 && !s->ckpt && !s->hooks.on_weights && !s->det;
}

void stage_enable_split(Stage *s) {
    if (s->split) return;
    s->split = 1;
    for (int k = 0; k < s->n_slots; k++) {
        Slot *sl = &s->slots[k];
        sl->dz = xcalloc((size_t)s->n_layers, sizeof(void *));
        for (int i = 0; i < s->n_layers; i++) sl->dz[i] = stash_alloc(s, (size_t)s->rows * stage_out_w(s, i));
        if (!sl->act) {  // checkpointing: the recompute at I lands here and stays until W
            sl->act = xcalloc((size_t)s->n_layers, sizeof(void *));
            for (int i = 0; i < s->n_layers; i++) sl->act[i] = stash_alloc(s, (size_t)s->rows * stage_out_w(s, i));
        }
    }
}

void stage_backward_input(Stage *s, int slot, const float *dout, float *din) {
    CHECK(s->split, "stage_backward_input on a stage without stage_enable_split");
    const Backend *be = s->be;
    Slot *sl = &s->slots[slot];
    int H = s->H, rows = s->rows, n = s->n_layers;
    if (s->ckpt) recompute(s, sl, sl->act);  // once, here; W reads these outputs later
    slot_bytes(s, sl, all_bytes(s) + outputs(s, 0, n));  // every output and, by the end, every dz
    const float *g = dout;  // gradient w.r.t. the current layer's output
    if (s->has_head) {  // dx of the head = dlogits W_h; its dW waits for W
        float *dx = n ? s->buf.gbuf[0] : din;
        if (dx) {
            weights(s, n, n ? below(n, din) : -1);
            be->gemm(0, 0, rows, H, s->C, 1.0f, get(s, sl->logits, 1, (size_t)rows * s->C), s->C, s->Wh, H, 0.0f, dx,
                     H);
        }
        g = dx;
    }
    for (int i = n - 1; i >= 0; i--) {
        if (moe_is(s->moe, i)) {  // an MoE layer's whole backward, its weights' gradients too (W has none left)
            float *dx = i == 0 ? din : s->buf.gbuf[(n - i) & 1];
            moe_layer_grads(s, sl, i, g, dx, sl->act, din);
            // ZeRO-2, 3 (on_grad placed them in a working bucket, --ep: the layer's own): reduce-scattered now,
            // whole for this micro-batch (zero.c on_layer_grad; W's call finds nothing left). The ddp sync's
            // hook waits for W's call.
            if (s->hooks.on_grad && s->hooks.on_layer_grad) s->hooks.on_layer_grad(s->hooks.hook_ctx, i);
            g = dx;
            continue;
        }
        float *dz = work_for(s, sl->dz[i], 2);
        size_t rh = (size_t)rows * stage_out_w(s, i);
        be->relu_backward(dz, g, get(s, sl->act[i], 0, rh), rh);
        put(s, sl->dz[i], dz, rh);
        float *dx = i == 0 ? din : s->buf.gbuf[(n - i) & 1];
        if (dx) {  // (a column-parallel layer's all-reduce belongs to I)
            weights(s, i, below(i, din));
            layer_input_grad(s, i, dz, dx, rows);
        }
        g = dx;
        if (s->hooks.progress) s->hooks.progress();
    }
    weights(s, -1, -1);
    slot_bytes(s, sl, deferred_bytes(s));  // the last layer's output is no longer needed (but by the head)
    count(s, -1, 1);
}

void stage_backward_weight(Stage *s, int slot) {
    CHECK(s->split, "stage_backward_weight on a stage without stage_enable_split");
    Slot *sl = &s->slots[slot];
    int H = s->H, rows = s->rows, n = s->n_layers;
    if (s->has_head) {
        const float *last = n ? get(s, sl->act[n - 1], 0, (size_t)rows * H) : get(s, sl->in, 0, (size_t)rows * s->D);
        const float *dl = get(s, sl->logits, 1, (size_t)rows * s->C);
        grad_target(s, n);
        weight_grad(s, n, sl, dl, last, s->C, H);
        if (s->hooks.on_layer_grad) s->hooks.on_layer_grad(s->hooks.hook_ctx, n);
    }
    for (int i = n - 1; i >= 0; i--) {  // the order of stage_backward, so the gradient hooks fire alike
        int h = stage_out_w(s, i), k = stage_in_w(s, i);
        if (!moe_is(s->moe, i)) {  // (an MoE layer's were added at I)
            const float *in = get(s, i == 0 ? sl->in : sl->act[i - 1], 1, (size_t)rows * k);
            const float *dz = get(s, sl->dz[i], 0, (size_t)rows * h);
            grad_target(s, i);
            weight_grad(s, i, sl, dz, in, h, k);
        }
        if (s->hooks.on_layer_grad) s->hooks.on_layer_grad(s->hooks.hook_ctx, i);
        if (s->hooks.progress) s->hooks.progress();
    }
    count(s, 0, -1);
    slot_release(s, slot);
}

void stage_forward_eval(Stage *s, const float *x, int rows, float *out) {
    // Ping-pong through the two gradient buffers (free outside backward); rows <= s->rows.
    const Backend *be = s->be;
    int H = s->H;
    const float *in = x;
    for (int i = 0; i < s->n_layers; i++) {
        float *o = (!s->has_head && i == s->n_layers - 1) ? out : s->buf.gbuf[i & 1];
        weights(s, i, i + 1 < s->n_layers ? i + 1 : s->has_head ? s->n_layers : -1);
        if (moe_is(s->moe, i)) moe_forward(s->moe, i, -1, s->W[i], in, o, rows, 0);
        else layer_product(s, i, in, o, rows);
        in = o;
    }
    if (s->has_head) {
        weights(s, s->n_layers, -1);
        be->gemm(0, 1, rows, s->C, H, 1.0f, in, H, s->Wh, H, 0.0f, out, s->C);
        be->bias_act(out, s->bh, rows, s->C, 0);
    }
    weights(s, -1, -1);
}

void stage_take_loss(Stage *s) {
    if (!s->loss.pending) return;
    double t[2];
    s->be->to_host(t, s->loss.tally, sizeof t);  // (waits for the queue: the step's last forward included)
    s->be->fill(s->loss.tally, 0.0f, 2 * sizeof(double) / sizeof(float));  // all-zero bits: 0.0, 0.0
    s->loss.sum += t[0];
    s->loss.correct += (int)t[1];
    s->loss.pending = 0;
    s->loss.reads++;
}

void stage_zero_grads(Stage *s) {
    for (int j = 0; j <= s->n_layers; j++) s->grad_fresh[j] = 1;  // (j == n_layers: the head)
    if (s->loss.pending) stage_take_loss(s);                      // (a tally not read: dropped with the rest)
    s->loss.sum = 0;
    s->loss.correct = 0;
    s->loss.rows = 0;
}

void stage_enable_det(Stage *s, int chunk) {
    if (s->det) return;
    CHECK(!s->moe, "--deterministic on a stage with MoE layers (train/plan.c refuses it)");
    s->det = xcalloc(1, sizeof *s->det);
    s->det->chunk = chunk;
    s->det->tree = xcalloc((size_t)s->n_layers + 1, sizeof(DetTree));
    for (int j = 0; j < s->n_layers + s->has_head; j++) det_tree_init(&s->det->tree[j], stage_layer_len(s, j));
}

void stage_det_finish_layer(Stage *s, int j) {
    if (s->det->tree[j].n) det_tree_finish(&s->det->tree[j], j == s->n_layers ? s->dWh : s->dW[j]);  // [W, b] together
}

void stage_det_finish(Stage *s) {
    for (int j = 0; j < s->n_layers + s->has_head; j++) stage_det_finish_layer(s, j);
}

double lr_at(int schedule, double lr, double min_lr, long long warmup, long long step, long long total) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    if (schedule != LR_COSINE || total - warmup <= 1) return lr;
    double progress = (double)(step - warmup) / (double)(total - warmup - 1);  // 0 .. 1 over the rest
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.14159265358979323846 * progress));  // (min_lr 0: as before)
}

long optimizer_update(const Backend *be, const OptimStep *o, float *p, const float *g, float *m, float *v, size_t n) {
    float lr = o->lr;
    if (o->wd > 0) be->scale(p, 1.0f - lr * o->wd, n);  // torch.optim.AdamW: param.mul_(1 - lr * weight_decay) first
    if (o->optimizer == OPTIM_SGD) return be->sgd(p, g, n, lr);
    AdamArgs a = {.lr = lr, .beta1 = (float)o->beta1, .beta2 = (float)o->beta2, .eps = (float)o->eps,
                  .bias_correction1 = (float)(1.0 - pow(o->beta1, o->t)),
                  .bias_correction2_sqrt = (float)sqrt(1.0 - pow(o->beta2, o->t))};
    return be->adam(p, g, m, v, n, a);
}

// --deterministic (exact): the squares added into it exactly, in no order that matters; 0 returned.
static double sumsq(const Stage *s, const float *g, size_t n, DetSum *exact) {
    if (!exact) return s->be->sumsq(g, n);
    det_sum_sumsq(exact, g, n);
    return 0;
}

double stage_grad_sumsq(const Stage *s, const float *g, size_t from, size_t n, int replicated_too, DetSum *exact) {
    if (replicated_too || s->tp <= 1) return sumsq(s, g, n, exact);
    double sum = 0;
    size_t off = 0, to = from + n;
    for (int j = 0; j <= s->n_layers; j++) {  // [off, own): the part of layer j this rank alone holds
        int kind = j == s->n_layers ? TP_FULL : s->kind[j];
        size_t len = stage_layer_len(s, j);
        size_t own = off + (kind == TP_COL ? len : kind == TP_ROW ? stage_weight_len(s, j) : 0);
        size_t a = off > from ? off : from, b = own < to ? own : to;
        if (a < b) sum += sumsq(s, g + (a - from), b - a, exact);
        off += len;
    }
    return sum;
}

long stage_optimizer_step(Stage *s, const OptimStep *o) {
    if (o->optimizer != OPTIM_SGD && !s->adam_m) {
        s->adam_m = s->be->alloc(s->n_params * sizeof(float));
        s->adam_v = s->be->alloc(s->n_params * sizeof(float));
    }
    return optimizer_update(s->be, o, s->params, s->grads, s->adam_m, s->adam_v, s->n_params);
}
