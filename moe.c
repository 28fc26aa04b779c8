// moe.c: the mixture-of-experts layer (moe.h) in the order expert parallelism needs it: route (router
// product on the backend, softmax, top-k, capacity on the host) -> pack rows per expert -> [exchange] ->
// experts (backend products) -> [exchange back] -> combine; the backward the same way round.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "base/data.h"
#include "base/util.h"
#include "moe.h"

// One layer's stash for one slot: the routing (host) and the expert side's rows (device, expert order).
struct MoeState {
    int rows, nsend, nrecv, cap_recv;
    float *p;       // [rows, E] router probabilities
    int *idx;       // [rows, k] the chosen experts, best first
    float *gate;    // [rows, k] their gates (renormalised over the k)
    int *pos;       // [rows, k] the assignment's row in the send order, -1: dropped
    int *send;      // [E] rows sent to each global expert
    int *recv;      // [size x E/size] rows each source sends to each of my experts
    float *hs;      // [rows x k, H] the experts' outputs for the sent rows, send order
    float *xe, *he; // device [cap_recv, H]: my experts' input and output rows, expert order
};

// Host and device work buffers shared by the layers (one pass at a time).
typedef struct {
    size_t cap_rows, cap_recv;
    float *xh, *yh, *lg, *dp, *xs, *xo;  // host
    float *dl, *dz, *dh;                        // device
} Scratch;

int moe_capacity(const MoeSpec *m, int rows) {
    return (int)ceil((double)m->capacity * rows * m->top_k / m->experts);
}

// n values of U(-1/sqrt(H), 1/sqrt(H)) (nn.Linear's range for fan-in H) from key k.
static void uniform(uint64_t k, float *v, size_t n, int H) {
    float bound = 1.0f / sqrtf((float)H);
    for (size_t i = 0; i < n; i++) v[i] = (2.0f * rng_uniform(k, i) - 1.0f) * bound;
}

void moe_init_host(uint64_t seed, int l, int H, int E, float *p) {
    // the router: model.c's init_layer_host(seed, l, H, E) (the keys of a dense layer l)
    uniform(rng_key(seed, RNG_PARAM, 2 * (uint64_t)l), p, (size_t)E * H, H);
    uniform(rng_key(seed, RNG_PARAM, 2 * (uint64_t)l + 1), p + (size_t)E * H, (size_t)E, H);
    for (int e = 0; e < E; e++) {
        float *w = p + moe_expert_off(H, E, e);
        uniform(rng_key(seed, RNG_EXPERT, ((uint64_t)l << 32) + 2 * (uint64_t)e), w, (size_t)H * H, H);
        uniform(rng_key(seed, RNG_EXPERT, ((uint64_t)l << 32) + 2 * (uint64_t)e + 1), w + (size_t)H * H, (size_t)H, H);
    }
}

int moe_tensor(int H, int E, int l, int j, char *name, size_t n, int64_t shape[2], size_t *off) {
    int e = (j - 2) / 2, bias = j % 2;
    if (j < 2) snprintf(name, n, "layers.%d.router.%s", l, bias ? "bias" : "weight");
    else snprintf(name, n, "layers.%d.experts.%d.%s", l, e, bias ? "bias" : "weight");
    shape[0] = j < 2 ? E : H;
    shape[1] = bias ? 0 : H;
    *off += j < 2 ? (bias ? (size_t)E * H : 0) : moe_expert_off(H, E, e) + (bias ? (size_t)H * H : 0);
    return bias ? 1 : 2;
}

static int ex_size(const Moe *m) { return m->ex ? m->ex->size : 1; }
static int local_experts(const Moe *m) {  // (the exchange's group is the spec's: moe_held)
    int first, n = moe_held(&m->spec, &first);
    CHECK(m->ex ? m->ex->size == m->spec.shards && first == m->ex->rank * n : m->spec.shards <= 1,
          "an MoE layer holding %d experts from expert %d exchanges over %d rank(s)", n, first, ex_size(m));
    return n;
}

static Scratch *scratch_new(const Backend *be, int rows, int H, int E, int k) {
    Scratch *w = xcalloc(1, sizeof *w);
    size_t rH = (size_t)rows * H, rE = (size_t)rows * E, rk = (size_t)rows * k * H;
    w->xh = xmalloc(rH * sizeof(float)); w->yh = xmalloc(rH * sizeof(float));
    w->lg = xmalloc(rE * sizeof(float)); w->dp = xmalloc(rE * sizeof(float));
    w->xs = xmalloc(rk * sizeof(float));
    w->dl = be->alloc(rE * sizeof(float));
    w->cap_rows = (size_t)rows;
    return w;
}
static void scratch_free(const Backend *be, Scratch *w) {
    if (!w) return;
    free(w->xh); free(w->yh); free(w->lg); free(w->dp); free(w->xs); free(w->xo);
    be->free(w->dl);
    if (w->dz) { be->free(w->dz); be->free(w->dh); }
    free(w);
}

Moe *moe_new(const Backend *be, MoeSpec spec, int H, int lo, int n_layers, int rows, int n_slots) {
    int any = 0;
    for (int i = 0; i < n_layers; i++) any |= moe_layer(&spec, lo + i);
    if (!any) return NULL;
    Moe *m = xcalloc(1, sizeof *m);
    *m = (Moe){.be = be, .spec = spec, .H = H, .n_layers = n_layers, .rows = rows, .n_slots = n_slots};
    m->is = xcalloc((size_t)n_layers, 1);
    for (int i = 0; i < n_layers; i++) m->is[i] = (unsigned char)moe_layer(&spec, lo + i);
    m->st = xcalloc((size_t)(n_slots + 1) * n_layers, sizeof(MoeState));
    int E = spec.experts, k = spec.top_k;
    for (int j = 0; j < (n_slots + 1) * n_layers; j++) {
        MoeState *s = &m->st[j];
        if (!m->is[j % n_layers]) continue;
        s->p = xcalloc((size_t)rows * E, sizeof(float));
        s->idx = xcalloc((size_t)rows * k, sizeof(int));
        s->gate = xcalloc((size_t)rows * k, sizeof(float));
        s->pos = xcalloc((size_t)rows * k, sizeof(int));
        s->send = xcalloc((size_t)E, sizeof(int));
        s->recv = xcalloc((size_t)E, sizeof(int));
        s->hs = xcalloc((size_t)rows * k * H, sizeof(float));
    }
    m->scratch = m->lane_scratch[0] = scratch_new(be, rows, H, E, k);
    m->stats.load = xcalloc((size_t)E, sizeof(long));
    return m;
}

void moe_free(Moe *m) {
    if (!m) return;
    for (int j = 0; j < (m->n_slots + 1) * m->n_layers; j++) {
        MoeState *s = &m->st[j];
        free(s->p); free(s->idx); free(s->gate); free(s->pos); free(s->send); free(s->recv); free(s->hs);
        if (s->xe) { m->be->free(s->xe); m->be->free(s->he); }
    }
    scratch_free(m->be, m->lane_scratch[0]);
    scratch_free(m->be, m->lane_scratch[1]);
    free(m->st); free(m->is); free(m->stats.load);
    free(m);
}

void moe_stats_reset(Moe *m) {
    if (!m) return;
    memset(m->stats.load, 0, sizeof(long) * (size_t)m->spec.experts);
    m->stats.assigned = m->stats.dropped = 0;
    m->stats.aux_wsum = m->stats.aux_rows = 0;
}

// The expert side's buffers for n rows (state and scratch), grown when a forward receives more.
static void expert_room(Moe *m, MoeState *s, int n) {
    Scratch *w = m->scratch;
    size_t H = (size_t)m->H, need = n > 0 ? (size_t)n : 1;
    if ((size_t)s->cap_recv < need) {
        if (s->xe) { m->be->free(s->xe); m->be->free(s->he); }
        s->xe = m->be->alloc(need * H * sizeof(float));
        s->he = m->be->alloc(need * H * sizeof(float));
        s->cap_recv = (int)need;
    }
    if (w->cap_recv < need) {
        if (w->dz) { m->be->free(w->dz); m->be->free(w->dh); }
        w->dz = m->be->alloc(need * H * sizeof(float));
        w->dh = m->be->alloc(need * H * sizeof(float));
        w->xo = xrealloc(w->xo, need * H * sizeof(float));
        w->cap_recv = need;
    }
}

static MoeState *state(Moe *m, int i, int slot) { return &m->st[(slot < 0 ? m->n_slots : slot) * m->n_layers + i]; }

// ---- routing (host) ----

// Row r's softmax over its E logits into p, and its top k (larger first, the lower index on a tie)
// with gates renormalised over them.
static void route_row(const MoeSpec *ms, const float *lg, float *p, int *idx, float *gate) {
    int E = ms->experts, k = ms->top_k;
    float mx = lg[0];
    for (int e = 1; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
    double z = 0;
    for (int e = 0; e < E; e++) { p[e] = expf(lg[e] - mx); z += p[e]; }
    for (int e = 0; e < E; e++) p[e] = (float)(p[e] / z);
    float sum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int t = 0; t < j; t++) taken |= idx[t] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        idx[j] = best;
        sum += p[best];
    }
    for (int j = 0; j < k; j++) gate[j] = p[idx[j]] / sum;
}

// Every row's experts, then the capacity per group in row order (an assignment over it dropped: pos
// -1), then each kept assignment's place in the send order (by expert, then row). Returns the
// groups' auxiliary loss, each x its rows; counts into the stats when count is set. Evaluation (train 0)
// drops nothing: the capacity bounds a training step's work, and a held-out row's answer should not
// depend on which rows share its batch (GShard and Switch evaluate with a larger capacity for this).
static double route(Moe *m, MoeState *s, const float *lg, int rows, int count, int train) {
    const MoeSpec *ms = &m->spec;
    int E = ms->experts, k = ms->top_k, G = ms->group > 0 && ms->group < rows ? ms->group : rows;
    int *fill = xcalloc((size_t)E, sizeof(int)), *off = xcalloc((size_t)E, sizeof(int));
    double *P = xcalloc((size_t)E, sizeof(double)), aux = 0;
    memset(s->send, 0, sizeof(int) * (size_t)E);
    for (int g0 = 0; g0 < rows; g0 += G) {
        int n = rows - g0 < G ? rows - g0 : G, cap = train ? moe_capacity(ms, n) : n;
        memset(fill, 0, sizeof(int) * (size_t)E);  // (assignments per expert, capacity or not: f_e)
        memset(P, 0, sizeof(double) * (size_t)E);
        for (int r = g0; r < g0 + n; r++) {
            route_row(ms, lg + (size_t)r * E, s->p + (size_t)r * E, s->idx + (size_t)r * k, s->gate + (size_t)r * k);
            for (int e = 0; e < E; e++) P[e] += s->p[(size_t)r * E + e];
            for (int j = 0; j < k; j++) {
                int e = s->idx[(size_t)r * k + j];
                s->pos[(size_t)r * k + j] = fill[e] < cap ? 0 : -1;
                if (fill[e]++ < cap) s->send[e]++;
            }
        }
        double sum = 0;
        for (int e = 0; e < E; e++) sum += (double)fill[e] / ((double)n * k) * (P[e] / n);
        aux += (double)n * ms->aux * E * sum;
    }
    for (int e = 1; e < E; e++) off[e] = off[e - 1] + s->send[e - 1];
    s->nsend = 0;
    long dropped = 0;
    for (int a = 0; a < rows * k; a++) {
        if (s->pos[a] < 0) { dropped++; continue; }
        s->pos[a] = off[s->idx[a]]++;
        s->nsend++;
    }
    if (count) {
        for (int e = 0; e < E; e++) m->stats.load[e] += s->send[e];
        m->stats.assigned += (long)rows * k;
        m->stats.dropped += dropped;
        m->stats.aux_wsum += aux;
        m->stats.aux_rows += rows;
    }
    free(fill); free(off); free(P);
    return aux;
}

// ---- the exchange and the expert order ----

// Where a block of rows lies: (my expert e, source r) in expert order (by expert, then source), (source r, my
// expert e) in source order (as received: by source, then expert), and my own rows in the send order (after
// those for the experts of the ranks before me; as many as source me's in the others).
static size_t expert_at(const Moe *m, const MoeState *s, int e, int r) {
    int El = local_experts(m), R = ex_size(m);
    size_t n = 0;
    for (int e2 = 0; e2 < e; e2++) for (int r2 = 0; r2 < R; r2++) n += (size_t)s->recv[r2 * El + e2];
    for (int r2 = 0; r2 < r; r2++) n += (size_t)s->recv[r2 * El + e];
    return n;
}
static size_t source_at(const Moe *m, const MoeState *s, int r, int e) {
    int El = local_experts(m);
    size_t n = 0;
    for (int j = 0; j < r * El + e; j++) n += (size_t)s->recv[j];
    return n;
}
static int me(const Moe *m) { return m->ex ? m->ex->rank : 0; }
// My experts' output rows (device, expert order) to the host in source order, the order they go back in: block
// by block, straight where they are sent from (no copy in expert order between).
static void to_sources(const Moe *m, const MoeState *s, const float *dev, float *host) {
    size_t H = (size_t)m->H;
    for (int r = 0; r < ex_size(m); r++)
        for (int e = 0; e < local_experts(m); e++) {
            size_t n = (size_t)s->recv[r * local_experts(m) + e] * H;
            if (n) m->be->to_host(host + source_at(m, s, r, e) * H, dev + expert_at(m, s, e, r) * H, n * sizeof(float));
        }
}
static size_t own_at(const Moe *m, const MoeState *s) {
    size_t n = 0;
    for (int g = 0; g < me(m) * local_experts(m); g++) n += (size_t)s->send[g];
    return n;
}

// The rows' exchange (expert parallelism only), started: forward (back 0) from send order into source order,
// back (1) the other way; my own rows moved here, the others' on their way until rows_wait.
static void rows_start(Moe *m, MoeState *s, const float *send, float *recv, int back) {
    const MoeExchange *x = m->ex;
    size_t H = (size_t)m->H, mine = source_at(m, s, me(m), 0), own = own_at(m, s);
    size_t n = source_at(m, s, me(m) + 1, 0) - mine;
    if (!x->start_rows) { x->exchange_rows(x->ctx, send, s->send, recv, s->recv, m->H, back); return; }
    x->start_rows(x->ctx, send, s->send, recv, s->recv, m->H, back);
    if (back) memcpy(recv + own * H, send + mine * H, n * H * sizeof(float));  // (a dispatch's: read from send)
}
static void rows_wait(Moe *m) {
    if (m->ex->start_rows) m->ex->wait_rows(m->ex->ctx);
}
// Where the layer writes n rows it is about to send (back: as rows_start's): the exchange's own buffer where
// it offers one (shm's window: the rows packed straight into place, no copy at the start), else mine.
static float *send_rows(Moe *m, float *mine, size_t n, int back) {
    const MoeExchange *x = m->ex;
    float *b = x && x->start_rows && x->send_buffer ? x->send_buffer(x->ctx, n * (size_t)m->H, back) : NULL;
    return b ? b : mine;
}

// Counts first (the forward's): what my experts receive from each rank; their buffers made room for.
static void exchange_counts(Moe *m, MoeState *s) {
    if (!m->ex) {
        memcpy(s->recv, s->send, sizeof(int) * (size_t)m->spec.experts);
        s->nrecv = s->nsend;
    } else {
        m->ex->exchange_counts(m->ex->ctx, s->send, s->recv);
        s->nrecv = 0;
        for (int j = 0; j < m->ex->size * local_experts(m); j++) s->nrecv += s->recv[j];
    }
    expert_room(m, s, s->nrecv);
}

// Rows of my local expert e (0-based here) start at *at in expert order; returns their count.
// Combine: each row's sum over its kept assignments of gate x that assignment's row of src (gates NULL:
// 1, exact), or, for a row with every assignment dropped, its row of pass (forward: x; backward: dy).
static void combine_rows(const MoeState *s, int rows, int k, int H, const float *src, const float *gates,
                         const float *pass, float *out) {
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * H;
        int kept = 0;
        memset(o, 0, sizeof(float) * H);
        for (int j = 0; j < k; j++) {
            int p = s->pos[(size_t)r * k + j];
            if (p < 0) continue;
            kept = 1;
            float g = gates ? gates[(size_t)r * k + j] : 1.0f;
            const float *h = src + (size_t)p * H;
            for (int c = 0; c < H; c++) o[c] += g * h[c];
        }
        if (!kept) memcpy(o, pass + (size_t)r * H, sizeof(float) * H);
    }
}

static int expert_rows(const Moe *m, const MoeState *s, int e) {
    int n = 0;
    for (int r = 0; r < ex_size(m); r++) n += s->recv[r * local_experts(m) + e];
    return n;
}

// ---- forward ----

// Block (my expert e, source r) of the rows, host rows (H floats each), onto the device (NULL: already there,
// dispatch_finish's) and through expert e.
static void block_forward(Moe *m, MoeState *s, const float *P, int e, int r, const float *rows) {
    const Backend *be = m->be;
    size_t H = (size_t)m->H, at = expert_at(m, s, e, r);
    int n = s->recv[r * local_experts(m) + e], E = m->spec.experts;
    if (!n) return;
    const float *We = P + moe_expert_off(m->H, E, e);
    if (rows) be->to_device(s->xe + at * H, rows, (size_t)n * H * sizeof(float));
    be->gemm(0, 1, n, m->H, m->H, 1.0f, s->xe + at * H, m->H, We, m->H, 0.0f, s->he + at * H, m->H);
    be->bias_act(s->he + at * H, We + H * H, n, m->H, 1);
}

// The rows packed in xs (send_rows's) dispatched to my experts, and `block` run on each (expert, source) block:
// my own rows, read where I packed them, while the others' travel (expert parallelism; dispatch_start), then
// theirs (dispatch_finish), the same blocks whenever the rows arrive (the forward's products, the backward's dz
// and dx; every expert local: the send order is the source order, and dispatch_start runs every block).
typedef void BlockFn(Moe *m, MoeState *s, const float *P, int e, int r, const float *rows);
static void dispatch_start(Moe *m, MoeState *s, const float *P, const float *xs, BlockFn *block) {
    const MoeExchange *x = m->ex;
    if (x) rows_start(m, s, xs, x->rows_at ? NULL : ((Scratch *)m->scratch)->xo, 0);  // (NULL: read in place)
    size_t mine = source_at(m, s, me(m), 0), own = own_at(m, s);
    for (int e = 0; e < local_experts(m); e++)
        block(m, s, P, e, me(m), xs + (own + source_at(m, s, me(m), e) - mine) * m->H);
}
// The others' rows, each block onto the device at `into` (s->xe or dh, expert order) straight from where it
// arrived (in the sender's window where the exchange offers it: the window is then let go before the products)
// or the source order of xo, then `block` on each.
static void dispatch_finish(Moe *m, MoeState *s, const float *P, BlockFn *block, float *into) {
    const MoeExchange *x = m->ex;
    const Scratch *w = m->scratch;
    size_t H = (size_t)m->H;
    if (!x) return;
    rows_wait(m);
    for (int e = 0; e < local_experts(m); e++)
        for (int r = 0; r < ex_size(m); r++) {
            size_t n = (size_t)s->recv[r * local_experts(m) + e] * H, at = source_at(m, s, r, e);
            if (r == me(m) || !n) continue;
            const float *rows = x->rows_at ? x->rows_at(x->ctx, r) + (at - source_at(m, s, r, 0)) * H : w->xo + at * H;
            m->be->to_device(into + expert_at(m, s, e, r) * H, rows, n * sizeof(float));
        }
    if (x->rows_at) x->release_rows(x->ctx);
    for (int e = 0; e < local_experts(m); e++)
        for (int r = 0; r < ex_size(m); r++)
            if (r != me(m)) block(m, s, P, e, r, NULL);
}

// n floats of a layer input (x) or output gradient (dy) from the device into host h. bf16: rounded to bf16,
// as every other reader of a stash or message rounds it (base/ops.h): the host maths below (a dropped row's
// pass-through, gate x dy, dy . h) then see the same values whether the producer's fp32 result came
// straight from the layer before (the monolith) or rounded through a stash or a pipeline message.
static void read_rows(const Moe *m, float *h, const float *dev, size_t n) {
    m->be->to_host(h, dev, sizeof(float) * n);
    if (m->bf16) for (size_t j = 0; j < n; j++) h[j] = bf16_round(h[j]);
}

void moe_forward_begin(MoePass *q, Moe *m, int i, int slot, const float *P, const float *x, float *y, int rows,
                       int count) {
    CHECK(rows <= m->rows, "an MoE layer of %d rows called with %d", m->rows, rows);
    *q = (MoePass){.m = m, .i = i, .slot = slot, .rows = rows, .count = count, .P = P, .x = x, .y = y};
}

// The forward's pieces: route, pack, the counts, the rows dispatched and my experts on my own rows (1) |
// the others' rows through my experts, their outputs sent back (2) | the gate-weighted sum.
static int forward_step(MoePass *q) {
    Moe *m = q->m;
    const Backend *be = m->be;
    Scratch *w = m->scratch;
    MoeState *s = state(m, q->i, q->slot);
    int E = m->spec.experts, k = m->spec.top_k, H = m->H, rows = q->rows;
    const float *P = q->P, *x = q->x;
    if (q->phase == 0) {
        s->rows = rows;
        be->gemm(0, 1, rows, E, H, 1.0f, x, H, P, H, 0.0f, w->dl, E);  // router logits
        be->bias_act(w->dl, P + (size_t)E * H, rows, E, 0);
        be->to_host(w->lg, w->dl, sizeof(float) * (size_t)rows * E);
        read_rows(m, w->xh, x, (size_t)rows * H);
        route(m, s, w->lg, rows, q->count, q->slot >= 0);
        float *xs = send_rows(m, w->xs, (size_t)s->nsend, 0);
        for (int a = 0; a < rows * k; a++)  // pack: each kept assignment's row at its place
            if (s->pos[a] >= 0) memcpy(xs + (size_t)s->pos[a] * H, w->xh + (size_t)(a / k) * H, sizeof(float) * H);
        exchange_counts(m, s);
        dispatch_start(m, s, P, xs, block_forward);  // my experts on the rows routed to them
        q->phase = 1;
        if (m->ex) return 1;
    }
    if (q->phase == 1) {
        dispatch_finish(m, s, P, block_forward, s->xe);
        q->phase = 2;
        if (!m->ex) be->to_host(s->hs, s->he, sizeof(float) * (size_t)s->nrecv * H);  // (the send order)
        if (m->ex) {
            float *xo = send_rows(m, w->xo, (size_t)s->nrecv, 1);
            to_sources(m, s, s->he, xo);
            rows_start(m, s, xo, s->hs, 1);
            return 1;
        }
    }
    if (m->ex) rows_wait(m);
    combine_rows(s, rows, k, H, s->hs, s->gate, w->xh, w->yh);  // the gate-weighted sum; nothing kept: x
    be->to_device(q->y, w->yh, sizeof(float) * (size_t)rows * H);
    return 0;
}

void moe_forward(Moe *m, int i, int slot, const float *P, const float *x, float *y, int rows, int count) {
    MoePass q;
    moe_forward_begin(&q, m, i, slot, P, x, y, rows, count);
    while (moe_pass_step(&q)) {}
}

// ---- backward ----

// The router's probabilities' gradient dp [rows, E] from the gates' (dg, [rows, k], 0 where dropped)
// and the auxiliary loss, then the logits' (softmax's backward) in place.
static void router_grad(Moe *m, MoeState *s, const float *dg, float *dp, float grad_scale) {
    const MoeSpec *ms = &m->spec;
    int E = ms->experts, k = ms->top_k, rows = s->rows, G = ms->group > 0 && ms->group < rows ? ms->group : rows;
    int *fill = xcalloc((size_t)E, sizeof(int));
    for (int g0 = 0; g0 < rows; g0 += G) {
        int n = rows - g0 < G ? rows - g0 : G;
        memset(fill, 0, sizeof(int) * (size_t)E);
        for (int a = g0 * k; a < (g0 + n) * k; a++) fill[s->idx[a]]++;
        for (int r = g0; r < g0 + n; r++) {
            float *d = dp + (size_t)r * E;
            const float *p = s->p + (size_t)r * E;
            const int *idx = s->idx + (size_t)r * k;
            for (int e = 0; e < E; e++)  // Switch: coef E sum_e f_e P_e, f_e = fill/(n k), P_e = mean p
                d[e] = ms->aux * E * ((float)fill[e] / ((float)n * k)) * grad_scale;
            float sum = 0, c = 0;
            for (int j = 0; j < k; j++) sum += p[idx[j]];
            for (int j = 0; j < k; j++) c += dg[(size_t)r * k + j] * s->gate[(size_t)r * k + j];
            for (int j = 0; j < k; j++) d[idx[j]] += (dg[(size_t)r * k + j] - c) / sum;  // g_j = p_j / sum
            float dot = 0;
            for (int e = 0; e < E; e++) dot += p[e] * d[e];
            for (int e = 0; e < E; e++) d[e] = p[e] * (d[e] - dot);
        }
    }
    free(fill);
}

// Block (my expert e, source r) of the rows' output gradients, host rows: onto the device (NULL: already in dh,
// dispatch_finish's), through the ReLU's backward (dz, kept for the weight gradient) and the expert's input
// gradient (into dh, in place).
static void block_backward(Moe *m, MoeState *s, const float *P, int e, int r, const float *rows) {
    const Backend *be = m->be;
    Scratch *w = m->scratch;
    size_t H = (size_t)m->H, at = expert_at(m, s, e, r);
    int n = s->recv[r * local_experts(m) + e];
    if (!n) return;
    const float *We = P + moe_expert_off(m->H, m->spec.experts, e);
    if (rows) be->to_device(w->dh + at * H, rows, (size_t)n * H * sizeof(float));
    be->relu_backward(w->dz + at * H, w->dh + at * H, s->he + at * H, (size_t)n * H);
    be->gemm(0, 0, n, m->H, m->H, 1.0f, w->dz + at * H, m->H, We, m->H, 0.0f, w->dh + at * H, m->H);
}

// Each of my experts' weight and bias gradients over all its rows at once (dz and the inputs xe, expert order).
static void expert_weight_grads(Moe *m, const MoeState *s, float *dP) {
    const Backend *be = m->be;
    const Scratch *w = m->scratch;
    int H = m->H;
    for (int e = 0, at = 0; e < local_experts(m); e++) {
        int n = expert_rows(m, s, e);
        size_t o = moe_expert_off(H, m->spec.experts, e);
        if (n) {
            const float *dz = w->dz + (size_t)at * H;
            be->gemm(1, 0, H, H, n, 1.0f, dz, H, s->xe + (size_t)at * H, H, 1.0f, dP + o, H);
            be->bias_grad(dP + o + (size_t)H * H, dz, n, H);
        }
        at += n;
    }
}

void moe_backward_begin(MoePass *q, Moe *m, int i, int slot, const float *P, float *dP, const float *x,
                        const float *dy, float *dx, float grad_scale) {
    *q = (MoePass){.m = m, .i = i, .slot = slot, .back = 1, .P = P, .x = x, .dy = dy, .dP = dP, .dx = dx,
                   .grad_scale = grad_scale};
}

// The backward's pieces: gate x dy and the gates' gradients, dispatched, my experts' backward on my own
// rows (1) | the others' rows, the rows' input gradients sent back while each expert's weight gradient (over
// all its rows at once) and the router's backward run (2) | dx.
static int backward_step(MoePass *q) {
    Moe *m = q->m;
    const Backend *be = m->be;
    Scratch *w = m->scratch;
    MoeState *s = state(m, q->i, q->slot);
    int E = m->spec.experts, k = m->spec.top_k, H = m->H, rows = s->rows;
    if (q->phase == 0) {
        expert_room(m, s, s->nrecv);  // (this lane's scratch: the forward grew its own lane's)
        q->dg = xcalloc((size_t)rows * k, sizeof(float));
        read_rows(m, w->yh, q->dy, (size_t)rows * H);
        float *xs = send_rows(m, w->xs, (size_t)s->nsend, 0);
        for (int a = 0; a < rows * k; a++) {  // each kept assignment: dh = gate x dy, dgate = dy . h
            int p = s->pos[a];
            if (p < 0) continue;
            const float *d = w->yh + (size_t)(a / k) * H, *h = s->hs + (size_t)p * H;
            float *o = xs + (size_t)p * H, g = s->gate[a], dot = 0;
            for (int c = 0; c < H; c++) { o[c] = g * d[c]; dot += d[c] * h[c]; }
            q->dg[a] = dot;
        }
        dispatch_start(m, s, q->P, xs, block_backward);  // the rows' gradients to my experts (the forward's blocks)
        q->phase = 1;
        if (m->ex) return 1;
    }
    if (q->phase == 1) {
        dispatch_finish(m, s, q->P, block_backward, w->dh);
        if (!m->ex) be->to_host(w->xs, w->dh, sizeof(float) * (size_t)s->nrecv * H);  // (the send order)
        if (m->ex) {  // the rows' input gradients back to their senders, while the weights' gradients are made
            float *xo = send_rows(m, w->xo, (size_t)s->nrecv, 1);
            to_sources(m, s, w->dh, xo);
            rows_start(m, s, xo, w->xs, 1);
        }
        expert_weight_grads(m, s, q->dP);  // each expert's over all its rows at once
        router_grad(m, s, q->dg, w->dp, q->grad_scale);
        be->to_device(w->dl, w->dp, sizeof(float) * (size_t)rows * E);
        be->gemm(1, 0, E, H, rows, 1.0f, w->dl, E, q->x, H, 1.0f, q->dP, H);
        be->bias_grad(q->dP + (size_t)E * H, w->dl, rows, E);
        q->phase = 2;
        if (m->ex) return 1;
    }
    if (m->ex) rows_wait(m);  // (local: already in send order, in xs)
    if (q->dx) {
        combine_rows(s, rows, k, H, w->xs, NULL, w->yh, w->xh);  // the experts' gradients; nothing kept: dy
        be->to_device(q->dx, w->xh, sizeof(float) * (size_t)rows * H);
        be->gemm(0, 0, rows, H, E, 1.0f, w->dl, E, q->P, H, 1.0f, q->dx, H);
    }
    free(q->dg);
    q->dg = NULL;
    return 0;
}

void moe_backward(Moe *m, int i, int slot, const float *P, float *dP, const float *x, const float *dy, float *dx,
                  float grad_scale) {
    MoePass q;
    moe_backward_begin(&q, m, i, slot, P, dP, x, dy, dx, grad_scale);
    while (moe_pass_step(&q)) {}
}

void moe_set_exchange(Moe *m, int lane, const MoeExchange *ex) {
    m->lane_ex[lane] = ex;
    if (lane == 0) m->ex = ex;
}

int moe_pass_step(MoePass *q) {
    Moe *m = q->m;
    if (q->lane && !m->lane_scratch[1])
        m->lane_scratch[1] = scratch_new(m->be, m->rows, m->H, m->spec.experts, m->spec.top_k);
    m->scratch = m->lane_scratch[q->lane];
    m->ex = m->lane_ex[q->lane] ? m->lane_ex[q->lane] : m->lane_ex[0];
    return q->back ? backward_step(q) : forward_step(q);
}
