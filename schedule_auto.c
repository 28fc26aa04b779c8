// schedule_auto.c: zb-auto, the schedule the zero-bubble paper's ZB-1p/ZB-2p search builds: the
// authors' heuristic (8 variants) and a greedy list scheduler (several policies) place F, I and W
// under a memory limit; every candidate runs through the simulator (schedule.c) and the best is kept
// (zb-auto-v: then polished, its passes moved a few places on their rank while the span gets shorter).
#include <math.h>
#include <string.h>
#include "schedule_auto.h"
#include "schedule_v.h"
#include "base/util.h"

// One greedy policy. w_fits: a W goes into idle time only when it ends before the next message
// already on its way (else the stage waits for it); 0: whenever nothing else is ready. f_first: a
// ready F goes before a ready I (the warm-up runs longer); 0: I first (the gradient's critical
// path). cap: the most a stage holds in this candidate (<= the limit, in micro-batches in flight).
// f1_wait (the V's greedy only): a chunk-0 forward is held back when the chunk-1 forward arrives before it
// would end, so the V's way back up does not wait behind the ranks' chunk-0 forwards.
typedef struct { int w_fits, f_first; double cap; int f1_wait; } Policy;

typedef struct {
    const AutoSpec *a;
    Policy pol;
    double *e, *tf, *ti;  // e[K]: each stage's clock; tf, ti [K*M]: when F / I of (s, mb) ended (< 0: not yet)
    int *nf, *ni, *nw;    // [K] passes placed of each kind (each kind runs its micro-batches in order)
    ActionList *lists;
} Greedy;

// When F (I) of micro-batch mb can start on stage s: its message's arrival, or INFINITY when the
// pass it waits for has not run yet.
static double arrive_f(const Greedy *g, int s, int mb) {
    if (s == 0) return 0;
    double t = g->tf[(size_t)(s - 1) * g->a->M + mb];
    return t < 0 ? INFINITY : t + g->a->comm;
}
static double arrive_i(const Greedy *g, int s, int mb) {
    int K = g->a->K, M = g->a->M;
    if (s == K - 1) return g->tf[(size_t)s * M + mb] < 0 ? INFINITY : g->tf[(size_t)s * M + mb];
    double t = g->ti[(size_t)(s + 1) * M + mb];
    return t < 0 ? INFINITY : t + g->a->comm;
}

static void place(Greedy *g, int s, int kind, double start) {
    const AutoSpec *a = g->a;
    int mb = kind == ACT_FORWARD ? g->nf[s]++ : kind == ACT_BACKWARD_INPUT ? g->ni[s]++ : g->nw[s]++;
    double cost = kind == ACT_FORWARD ? a->f[s] : kind == ACT_BACKWARD_INPUT ? a->b[s] : a->w[s];
    g->e[s] = start + cost;
    if (kind == ACT_FORWARD) g->tf[(size_t)s * a->M + mb] = g->e[s];
    if (kind == ACT_BACKWARD_INPUT) g->ti[(size_t)s * a->M + mb] = g->e[s];
    schedule_push_pass(&g->lists[s], CHUNKS_LOOP, a->K, 1, s, kind, 0, mb);
}

// The earliest a message not yet known can reach stage s: its neighbours' next pass ends no sooner
// than their clock plus their cheapest pass.
static double unknown_bound(const Greedy *g, int s) {
    double lb = INFINITY;
    for (int j = s - 1; j <= s + 1; j += 2) {
        if (j < 0 || j >= g->a->K || g->nw[j] == g->a->M) continue;
        double c = fmin(g->a->f[j], fmin(g->a->b[j], g->a->w[j]));
        lb = fmin(lb, g->e[j] + c + g->a->comm);
    }
    return lb;
}

// One decision of stage s at its clock: run a pass, or wait. Returns 0, or -1 when s can never go on.
static int step(Greedy *g, int s) {
    const AutoSpec *a = g->a;
    int M = a->M;
    double t = g->e[s], hold = g->nf[s] - g->ni[s] + a->w_share * (g->ni[s] - g->nw[s]);
    double f_at = g->nf[s] < M ? arrive_f(g, s, g->nf[s]) : INFINITY;
    double i_at = g->ni[s] < g->nf[s] ? arrive_i(g, s, g->ni[s]) : INFINITY;
    int room = hold + 1 <= g->pol.cap + 1e-9, w_ok = g->nw[s] < g->ni[s];
    if (f_at <= t && room && (g->pol.f_first || !(i_at <= t))) { place(g, s, ACT_FORWARD, t); return 0; }
    if (i_at <= t) { place(g, s, ACT_BACKWARD_INPUT, t); return 0; }
    if (f_at <= t && w_ok && a->w_share > 0) { place(g, s, ACT_BACKWARD_WEIGHT, t); return 0; }  // room for the F
    double next = fmin(room ? f_at : INFINITY, i_at);
    if (w_ok && (!g->pol.w_fits || t + a->w[s] <= next)) { place(g, s, ACT_BACKWARD_WEIGHT, t); return 0; }
    next = fmin(next, unknown_bound(g, s));
    if (!(next > t) || isinf(next)) return -1;
    g->e[s] = next;  // idle until something can arrive
    return 0;
}

// Candidate `pol` into *out: 0, or -1 when the greedy gets stuck (it then frees what it built).
static int greedy(const AutoSpec *a, Policy pol, SchedFile *out) {
    int K = a->K, M = a->M;
    size_t KM = (size_t)K * M;
    Greedy g = {a, pol, xcalloc((size_t)K, sizeof(double)), xmalloc(sizeof(double) * KM),
                xmalloc(sizeof(double) * KM), xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K, sizeof(int)),
                xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K + 1, sizeof(ActionList))};
    for (size_t i = 0; i < KM; i++) g.tf[i] = g.ti[i] = -1;
    int rc = 0;
    for (;;) {
        int s = -1;  // the unfinished stage with the earliest clock
        for (int j = 0; j < K; j++)
            if (g.nw[j] < M && (s < 0 || g.e[j] < g.e[s])) s = j;
        if (s < 0 || (rc = step(&g, s))) break;
    }
    *out = (SchedFile){g.lists, K, M, 1, CHUNKS_LOOP, 1};
    if (rc) sched_file_free(out);
    free(g.e); free(g.tf); free(g.ti); free(g.nf); free(g.ni); free(g.nw);
    return rc;
}

// The greedy in the V (zb-auto-v): rank s holds chunk 0 (virtual stage s, down) and chunk 1 (2K-1-s,
// back up); a chunk pass costs half the stage's. Its passes: F0 after F0 of s-1, F1 after F1 of s+1 (on
// the last rank after its own F0), I1 after I1 of s-1 (on rank 0 after its own F1), I0 after I0 of s+1
// (on the last rank after its own I1); each kind of each chunk in micro-batch order. Memory in chunk
// passes against 2 x the cap: a chunk-0 F keeps room for its micro-batch's chunk-1 F, so the V's way
// back never waits for room.
typedef struct {
    const AutoSpec *a;
    Policy pol;
    double *e, *t;  // e[K]: each rank's clock; t[4][K][M]: when F0, F1, I1, I0 of (s, mb) ended (< 0: not yet)
    int *n;         // [K][6] passes placed of F0, F1, I1, I0, W1, W0
    ActionList *lists;
} VGreedy;
enum { V_F0, V_F1, V_I1, V_I0, V_W1, V_W0 };

static double *vg_t(const VGreedy *g, int type, int s, int mb) {
    return &g->t[((size_t)type * g->a->K + s) * g->a->M + mb];
}
// When pass `type` of rank s's next micro-batch of it can start: its input's arrival, INFINITY if not yet known.
static double vg_arrive(const VGreedy *g, int s, int type) {
    int K = g->a->K, mb = g->n[s * 6 + type], local = 0, from = s, dep = type;
    if (mb >= g->a->M) return INFINITY;
    if (type == V_F0 && s == 0) return 0;
    if (type == V_F0) from = s - 1;
    if (type == V_F1) { if (s == K - 1) { local = 1; dep = V_F0; } else from = s + 1; }
    if (type == V_I1) { if (s == 0) { local = 1; dep = V_F1; } else from = s - 1; }
    if (type == V_I0) { if (s == K - 1) { local = 1; dep = V_I1; } else from = s + 1; }
    double t = *vg_t(g, dep, from, mb);
    return t < 0 ? INFINITY : t + (local ? 0 : g->a->comm);
}

static void vg_place(VGreedy *g, int s, int type, double start) {
    static const int kind[6] = {ACT_FORWARD, ACT_FORWARD, ACT_BACKWARD_INPUT, ACT_BACKWARD_INPUT,
                                ACT_BACKWARD_WEIGHT, ACT_BACKWARD_WEIGHT};
    static const int chunk[6] = {0, 1, 1, 0, 1, 0};
    const AutoSpec *a = g->a;
    int mb = g->n[s * 6 + type]++;
    double cost = (type <= V_F1 ? a->f[s] : type <= V_I0 ? a->b[s] : a->w[s]) / 2;
    g->e[s] = start + cost;
    if (type <= V_I0) *vg_t(g, type, s, mb) = g->e[s];
    if (g->lists) schedule_push_pass(&g->lists[s], CHUNKS_V, a->K, 2, s, kind[type], chunk[type], mb);
}

// One decision of rank s at its clock, as step's: an I first (chunk 0's, the older), an F while there is
// room (f_first: before the I), a W, or a wait. 0, or -1 when s can never go on.
static int vg_step(VGreedy *g, int s) {
    const AutoSpec *a = g->a;
    int *n = &g->n[s * 6];
    double t = g->e[s], cap = 2 * g->pol.cap + 1e-9;
    double hold = n[V_F0] + n[V_F1] - n[V_I1] - n[V_I0] + a->w_share * (n[V_I1] + n[V_I0] - n[V_W1] - n[V_W0]);
    double at[4];
    for (int k = 0; k < 4; k++) at[k] = vg_arrive(g, s, k);
    int room0 = hold + 2 + (n[V_F0] - n[V_F1]) <= cap, room1 = hold + 1 <= cap;
    if (g->pol.f1_wait && room1 && at[V_F1] > t && at[V_F1] < t + a->f[s] / 2) room0 = 0;  // (an F1 on its way)
    int f = at[V_F1] <= t && room1 ? V_F1 : at[V_F0] <= t && room0 ? V_F0 : -1;
    int i = at[V_I0] <= t ? V_I0 : at[V_I1] <= t ? V_I1 : -1;
    int w = n[V_W0] < n[V_I0] ? V_W0 : n[V_W1] < n[V_I1] ? V_W1 : -1;
    if (f >= 0 && (g->pol.f_first || i < 0)) { vg_place(g, s, f, t); return 0; }
    if (i >= 0) { vg_place(g, s, i, t); return 0; }
    double next = fmin(fmin(room0 ? at[V_F0] : INFINITY, room1 ? at[V_F1] : INFINITY), fmin(at[V_I0], at[V_I1]));
    if (w >= 0 && (!g->pol.w_fits || t + a->w[s] / 2 <= next)) { vg_place(g, s, w, t); return 0; }
    for (int j = s - 1; j <= s + 1; j += 2)  // the earliest a message not yet known can come (from a rank not done)
        if (j >= 0 && j < a->K && g->n[j * 6 + V_W0] + g->n[j * 6 + V_W1] < 2 * a->M)
            next = fmin(next, g->e[j] + fmin(a->f[j], fmin(a->b[j], a->w[j])) / 2 + a->comm);
    if (!(next > t) || isinf(next)) return -1;
    g->e[s] = next;
    return 0;
}

static int vgreedy(const AutoSpec *a, Policy pol, SchedFile *out) {
    int K = a->K, M = a->M, rc = 0;
    size_t KM = (size_t)K * M;
    VGreedy g = {a, pol, xcalloc((size_t)K, sizeof(double)), xmalloc(sizeof(double) * 4 * KM),
                 xcalloc((size_t)K * 6, sizeof(int)), xcalloc((size_t)K + 1, sizeof(ActionList))};
    for (size_t i = 0; i < 4 * KM; i++) g.t[i] = -1;
    for (;;) {
        int s = -1;  // the unfinished rank with the earliest clock
        for (int j = 0; j < K; j++)
            if (g.n[j * 6 + V_W0] + g.n[j * 6 + V_W1] < 2 * M && (s < 0 || g.e[j] < g.e[s])) s = j;
        if (s < 0 || (rc = vg_step(&g, s))) break;
    }
    *out = (SchedFile){g.lists, K, M, 2, CHUNKS_V, 1};
    if (rc) sched_file_free(out);
    free(g.e); free(g.t); free(g.n);
    return rc;
}

// A built-in V's order of F and I passes kept, its W passes placed again as late as they can go: a W
// runs when the next F or I of the order has not arrived (w_fits: only when it ends before that
// arrival) or has no room, so W passes pile up and fill the end, where the last micro-batch's
// gradient goes down and up the V and the order's own W passes leave gaps. t: the order's lists.
static int vg_type(const Action *x) {
    if (x->kind == ACT_FORWARD) return x->chunk ? V_F1 : V_F0;
    if (x->kind == ACT_BACKWARD_INPUT) return x->chunk ? V_I1 : V_I0;
    return -1;
}
static int vlazy_step(VGreedy *g, int s, const ActionList *order, int *at) {
    const AutoSpec *a = g->a;
    int *n = &g->n[s * 6];
    double t = g->e[s], cap = 2 * g->pol.cap + 1e-9, next = INFINITY;
    while (*at < order->n && vg_type(&order->a[*at]) < 0) (*at)++;
    int w = n[V_W0] < n[V_I0] ? V_W0 : n[V_W1] < n[V_I1] ? V_W1 : -1, room = 1;
    if (*at < order->n) {
        int type = vg_type(&order->a[*at]);
        if (order->a[*at].mb != n[type]) return -1;  // each kind in micro-batch order, as vg_arrive takes it
        double hold = n[V_F0] + n[V_F1] - n[V_I1] - n[V_I0] + a->w_share * (n[V_I1] + n[V_I0] - n[V_W1] - n[V_W0]);
        room = type == V_F0 ? hold + 2 + (n[V_F0] - n[V_F1]) <= cap : type == V_F1 ? hold + 1 <= cap : 1;
        if (!room && w < 0) return -1;  // only this rank's W frees room, and its I passes come later in the order
        next = room ? vg_arrive(g, s, type) : INFINITY;
        if (next <= t) { vg_place(g, s, type, t); (*at)++; return 0; }
    }
    if (w >= 0 && (!room || !g->pol.w_fits || t + a->w[s] / 2 <= next || *at >= order->n)) {
        vg_place(g, s, w, t);
        return 0;
    }
    for (int j = s - 1; j <= s + 1; j += 2)  // as vg_step: the earliest a message not yet known can come
        if (j >= 0 && j < a->K && g->n[j * 6 + V_W0] + g->n[j * 6 + V_W1] < 2 * a->M)
            next = fmin(next, g->e[j] + fmin(a->f[j], fmin(a->b[j], a->w[j])) / 2 + a->comm);
    if (!(next > t) || isinf(next)) return -1;
    g->e[s] = next;
    return 0;
}

static int vlazy(const AutoSpec *a, Policy pol, const SchedFile *order, SchedFile *out) {
    int K = a->K, M = a->M, rc = 0;
    size_t KM = (size_t)K * M;
    VGreedy g = {a, pol, xcalloc((size_t)K, sizeof(double)), xmalloc(sizeof(double) * 4 * KM),
                 xcalloc((size_t)K * 6, sizeof(int)), xcalloc((size_t)K + 1, sizeof(ActionList))};
    int *at = xcalloc((size_t)K, sizeof(int));
    for (size_t i = 0; i < 4 * KM; i++) g.t[i] = -1;
    for (long steps = 0;; steps++) {  // a wait that never ends (the order stuck) is dropped, not looped
        int s = -1;  // the unfinished rank with the earliest clock
        for (int j = 0; j < K; j++)
            if (g.n[j * 6 + V_W0] + g.n[j * 6 + V_W1] < 2 * M && (s < 0 || g.e[j] < g.e[s])) s = j;
        if (steps > 64L * 6 * (long)KM) rc = -1;
        if (rc || s < 0 || (rc = vlazy_step(&g, s, &order->lists[s], &at[s]))) break;
    }
    *out = (SchedFile){g.lists, K, M, 2, CHUNKS_V, 1};
    if (rc) sched_file_free(out);
    free(g.e); free(g.t); free(g.n); free(at);
    return rc;
}

// The local improvement pass (zb-auto-v): the candidate's passes as each rank's order of pass types, polished
// (schedule_v_polish: one pass at a time moved up to `reach` places on its rank while the longest rank span gets
// shorter, within the limit, until none helps or `budget` runs are spent), then as lists again.
// Into *out: 0, or -1 when `from` is not a complete V within the limit.
static int polish(const AutoSpec *a, int reach, long budget, const SchedFile *from, SchedFile *out) {
    static const int kind[6] = {ACT_FORWARD, ACT_FORWARD, ACT_BACKWARD_INPUT, ACT_BACKWARD_INPUT,
                                ACT_BACKWARD_WEIGHT, ACT_BACKWARD_WEIGHT};
    static const int chunk[6] = {0, 1, 1, 0, 1, 0};
    int K = a->K, M = a->M, P = 6 * M, *order = xmalloc(sizeof(int) * (size_t)K * P), rc = 0;
    for (int s = 0; s < K && !rc; s++) {
        int n = 0;
        for (int i = 0; i < from->lists[s].n && n <= P; i++) {
            const Action *y = &from->lists[s].a[i];
            int ty = y->kind == ACT_BACKWARD_WEIGHT ? (y->chunk ? V_W1 : V_W0) : vg_type(y);
            if (action_is_compute(y->kind) && n < P) order[(size_t)s * P + n] = ty;
            n += action_is_compute(y->kind);
        }
        rc = n == P ? 0 : -1;
    }
    VPolish p = {K, M, a->f, a->b, a->w, a->comm, a->limit, a->w_share, reach, budget, 0};
    if (!rc && schedule_v_polish(&p, order) < 0) rc = -1;
    *out = (SchedFile){xcalloc((size_t)K + 1, sizeof(ActionList)), K, M, 2, CHUNKS_V, 1};
    for (int s = 0; s < K && !rc; s++) {
        int n[6] = {0};
        for (int k = 0; k < P; k++) {
            int ty = order[(size_t)s * P + k];
            schedule_push_pass(&out->lists[s], CHUNKS_V, K, 2, s, kind[ty], chunk[ty], n[ty]++);
        }
    }
    if (rc) sched_file_free(out);
    free(order);
    return rc;
}

// The authors' heuristic (auto_schedule.py's manual_order in sail-sg/zero-bubble-pipeline-
// parallelism, written again here): micro-batch by micro-batch, every stage places the forwards it
// can afford and then the I of micro-batch i, bottom stage first, and fills the wait before each
// with W passes where they fit, or where the wait is no longer than the worst stage's bubble so
// far. Three switches make its 8 variants: a bubble allowed before the first I (the warm-up runs
// one forward more), the I preferred when the next stage lags two forwards behind, and a W put into
// a wait it overfills.
typedef struct { int bubble_before_b, prioritize_b, greedy_w; } Switches;
typedef struct {
    const AutoSpec *a;
    Switches sw;
    double *e, *bub, *mem, *t;  // [K] clock, own bubble, memory held; t [3 K M] each pass's end
    double worst;               // the largest bubble of any stage so far (bubbles only grow)
    int *n[3];                  // [K] F, I, W placed (each in micro-batch order)
    ActionList *lists;
} Hand;

static double *hand_t(Hand *h, int type, int s, int mb) { return &h->t[((size_t)type * h->a->K + s) * h->a->M + mb]; }
static double hand_cost(const Hand *h, int type, int s) {
    return type == 0 ? h->a->f[s] : type == 1 ? h->a->b[s] : h->a->w[s];
}
static double hand_mem(const Hand *h, int type) {
    return type == 0 ? 1 : type == 1 ? h->a->w_share - 1 : -h->a->w_share;
}
static double max_bubble(const Hand *h) { return h->worst; }
static int hand_put(Hand *h, int s, int type) {
    const AutoSpec *a = h->a;
    int mb = h->n[type][s];
    if (mb >= a->M || h->mem[s] + hand_mem(h, type) > a->limit + 1e-9) return -1;
    double c = hand_cost(h, type, s), end = h->e[s] + c, free_end = end;
    if (s > 0 && type == 0) end = fmax(end, *hand_t(h, 0, s - 1, mb) + a->comm + c);
    if (s < a->K - 1 && type == 1) end = fmax(end, *hand_t(h, 1, s + 1, mb) + a->comm + c);
    if (h->n[0][s] > 0) h->bub[s] += end - free_end;
    h->worst = fmax(h->worst, h->bub[s]);
    h->e[s] = end;
    *hand_t(h, type, s, mb) = end;
    h->mem[s] += hand_mem(h, type);
    h->n[type][s]++;
    schedule_push_pass(&h->lists[s], CHUNKS_LOOP, a->K, 1, s,
                       type == 0   ? ACT_FORWARD
                       : type == 1 ? ACT_BACKWARD_INPUT
                                   : ACT_BACKWARD_WEIGHT,
                       0, mb);
    return 0;
}
// Before a pass of `type` that waits for a message arriving at `at`: W passes to make room for it,
// then those that end before `at`, then one more into the wait if the switches allow.
static int hand_fill(Hand *h, int s, int type, double at) {
    while (h->mem[s] + hand_mem(h, type) > h->a->limit + 1e-9)
        if (h->n[2][s] >= h->n[1][s] || hand_put(h, s, 2)) return -1;
    if (isnan(at)) return 0;
    while (h->n[2][s] < h->n[1][s] && h->e[s] + h->a->w[s] <= at) hand_put(h, s, 2);
    if (h->n[2][s] < h->n[1][s] && h->e[s] < at && (at - h->e[s] > max_bubble(h) - h->bub[s] || h->sw.greedy_w))
        hand_put(h, s, 2);
    return 0;
}
// Micro-batch 0: every stage's first F, then as many more as keep it busy until the first I comes
// back (within the memory), each stage at most as many as the one before it, then the first I.
static int hand_warmup(Hand *h) {
    const AutoSpec *a = h->a;
    int K = a->K, *need = xcalloc((size_t)K, sizeof(int)), rc = 0;
    for (int s = 0; s < K && !rc; s++) rc = hand_put(h, s, 0);
    double last = rc ? 0 : *hand_t(h, 0, K - 1, 0) + a->b[K - 1];
    for (int s = K - 2; s >= 0 && !rc; s--) {
        double mem = h->mem[s], t = h->e[s];
        while (h->n[0][s] + need[s] < a->M && mem + 1 <= a->limit + 1e-9 &&
               (h->sw.bubble_before_b ? t + a->f[s] <= last + a->comm : t < last + a->comm)) {
            mem += 1;
            t += a->f[s];
            need[s]++;
        }
        last = fmax(t, last + a->comm) + a->b[s];
    }
    for (int s = 1; s < K; s++)
        while (need[s] > 0 && need[s] >= need[s - 1] && h->n[0][s] + need[s] < a->M) need[s]--;
    for (int s = 0; s < K && !rc; s++)
        for (int k = 0; k < need[s] && !rc; k++) rc = hand_put(h, s, 0);
    for (int s = K - 1; s >= 0 && !rc; s--) rc = hand_put(h, s, 1);
    free(need);
    return rc;
}
// Micro-batch i > 0: which stages place one more F (a stage only if the next one does, and, with
// prioritize_b, not when its next stage lags and the F would delay that stage's I), then the Fs and
// the I of micro-batch i, each after the W passes that fit before it.
static int hand_round(Hand *h, int i) {
    const AutoSpec *a = h->a;
    int K = a->K, *need = xcalloc((size_t)K, sizeof(int)), rc = 0;
    for (int s = 0; s < K; s++) {
        if (h->n[0][s] >= a->M) continue;
        need[s] = 1;
        if (!(h->sw.prioritize_b && s + 1 < K && h->n[0][s] >= h->n[0][s + 1] + 2)) continue;
        double next = h->e[s + 1] + a->f[s + 1] + a->b[s + 1] + a->comm, mem = h->mem[s] + 1, wc = 0;
        if (h->e[s] >= next) {
            need[s] = 0;
            continue;
        }
        for (int k = 0; mem > a->limit + 1e-9 && h->n[2][s] + k < h->n[1][s]; k++) {
            wc += a->w[s];
            mem -= a->w_share;
        }
        if (h->e[s] + a->f[s] + wc <= next) continue;
        if (next - h->e[s] <= max_bubble(h) - h->bub[s]) need[s] = 0;
    }
    for (int s = K - 2; s >= 0; s--) need[s] = need[s] < need[s + 1] ? need[s] : need[s + 1];
    for (int s = 0; s < K && !rc; s++)
        if (need[s])
            rc = hand_fill(h, s, 0, s > 0 ? *hand_t(h, 0, s - 1, h->n[0][s]) + a->comm : NAN) || hand_put(h, s, 0);
    for (int s = K - 1; s >= 0 && !rc; s--) {
        CHECK(h->n[1][s] == i, "schedule_auto: stage %d placed %d I before micro-batch %d", s, h->n[1][s], i);
        rc = hand_fill(h, s, 1, s + 1 < K ? *hand_t(h, 1, s + 1, i) + a->comm : NAN);
        while (!rc && s == 0 && h->n[0][0] == a->M && h->n[2][0] < h->n[1][0]) rc = hand_put(h, 0, 2);
        if (!rc) rc = hand_put(h, s, 1);
    }
    free(need);
    return rc;
}
// Candidate `sw` into *out: 0, or -1 when the memory cannot fit (it then frees what it built).
static int hand(const AutoSpec *a, Switches sw, SchedFile *out) {
    int K = a->K, M = a->M, rc = 0;
    Hand h = {a, sw, xcalloc((size_t)K, sizeof(double)), xcalloc((size_t)K, sizeof(double)),
              xcalloc((size_t)K, sizeof(double)), xmalloc(sizeof(double) * 3 * (size_t)K * M), 0,
              {xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K, sizeof(int))},
              xcalloc((size_t)K + 1, sizeof(ActionList))};
    for (size_t i = 0; i < 3 * (size_t)K * M; i++) h.t[i] = -1;
    rc = hand_warmup(&h);
    for (int i = 1; i < M && !rc; i++) rc = hand_round(&h, i);
    for (int s = 0; s < K && !rc; s++)
        while (!rc && h.n[2][s] < M) rc = hand_put(&h, s, 2);
    *out = (SchedFile){h.lists, K, M, 1, CHUNKS_LOOP, 1};
    if (rc) sched_file_free(out);
    free(h.e); free(h.bub); free(h.mem); free(h.t); free(h.n[0]); free(h.n[1]); free(h.n[2]);
    return rc;
}

// A candidate through the simulator with the spec's costs: 0 and *r, or -1 (deadlock, or a stage
// over the memory limit: never kept).
static int judge(const AutoSpec *a, int kind, const SchedFile *f, SimResult *r) {
    SimSpec sp = {.kind = kind, .file = f, .K = a->K, .M = a->M, .v = f->v, .comm = a->comm,
                  .stage_f = a->f, .stage_b = a->b, .stage_w = a->w};
    schedule_sim(&sp, r);
    int ok = !r->deadlock;
    for (int s = 0; s < a->K && ok; s++) ok = schedule_auto_peak(&f->lists[s], a->w_share) / f->v <= a->limit + 1e-9;
    if (!ok) sim_result_free(r);
    return ok ? 0 : -1;
}

// Rank s's passes of micro-batch 0 as one chain, times from the start of its first pass (the forward of
// virtual stage s): the forwards from s to the last virtual stage, then the I back to s, a message at each
// change of rank, every other rank free. Each of the rank's pass kinds (one chunk: F, I, W; the V: F0, F1,
// I0, W0, F1, I1, W1) gets its head (the earliest start) and its tail (from its end to the end of the rank's
// last pass of the same micro-batch, W0 or W); *n: how many kinds. Any micro-batch's chain starts no sooner
// than the rank's first pass, so its passes' heads and tails are at least these.
typedef struct { double head, cost, tail; } PassKind;
static int rank_of(int K, int v) { return v < K ? v : 2 * K - 1 - v; }
static int bound_kinds(const AutoSpec *a, int s, PassKind *k) {
    int K = a->K, V = a->v == 2, n = V ? 2 * K : K, last = V ? 2 * K - 1 - s : s;
    double div = V ? 2 : 1, t = 0, *fs = xmalloc(sizeof(double) * 2 * (size_t)n);
    double *is = fs + n;
    for (int v = s; v < n; v++) {  // forwards: fs[v] the start of virtual stage v's
        if (v > s && rank_of(K, v) != rank_of(K, v - 1)) t += a->comm;
        fs[v] = t;
        t += a->f[rank_of(K, v)] / div;
    }
    for (int v = n - 1; v >= s; v--) {  // the I passes back down: is[v] the start of v's
        if (v < n - 1 && rank_of(K, v) != rank_of(K, v + 1)) t += a->comm;
        is[v] = t;
        t += a->b[rank_of(K, v)] / div;
    }
    double fc = a->f[s] / div, ic = a->b[s] / div, wc = a->w[s] / div, end = is[s] + ic + wc;
    k[0] = (PassKind){0, fc, end - fc};  // F (the V: F0)
    k[1] = (PassKind){is[s], ic, wc};    // I (I0)
    k[2] = (PassKind){is[s] + ic, wc, 0};  // W (W0)
    if (V) {
        k[3] = (PassKind){fs[last], fc, end - fs[last] - fc};  // F1
        k[4] = (PassKind){is[last], ic, end - is[last] - ic};  // I1
        k[5] = (PassKind){is[last] + ic, wc, 0};               // W1
    }
    free(fs);
    return V ? 6 : 3;
}

// Rank s runs M passes of each kind on one worker: for any set of them, its span is at least the least head
// in the set, their costs, and the least tail (the one-machine bound with heads and tails, the passes of
// micro-batch 0 standing for every micro-batch's). With the whole set from the rank's first pass: its
// work, and the first I's wait for the chain where the forwards cannot fill it; with the passes that come
// after a later head (the V's F1, I1, I0): the waits the V cannot fill at small M.
double schedule_auto_bound(const AutoSpec *a) {
    double most = 0;
    for (int s = 0; s < a->K; s++) {
        PassKind k[6];
        int n = bound_kinds(a, s, k);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {  // the set: the kinds with head >= k[i]'s and tail >= k[j]'s
                double work = 0;
                int any = 0;
                for (int x = 0; x < n; x++)
                    if (k[x].head >= k[i].head && k[x].tail >= k[j].tail) work += a->M * k[x].cost, any = 1;
                if (any) most = fmax(most, k[i].head + work + k[j].tail);
            }
    }
    return most;
}

// The memory's bound on rank s (see schedule_auto_bound_memory). n counts the rank's forwards in the order they
// run (any chunk, any micro-batch), S the least start of the n-th, E the least end of the n-th freeing pass
// (W where w_share is 1, else I). chain: the least time from a forward's start to its own freeing pass's end.
static double memory_rank(const AutoSpec *a, int s) {
    PassKind k[6];
    int V = bound_kinds(a, s, k) == 6, N = V ? 2 * a->M : a->M, cap = a->limit * (V ? 2 : 1);
    int by_w = a->w_share >= 1 - 1e-12;
    double fc = k[0].cost, ic = k[1].cost, wc = k[2].cost, fr = by_w ? wc : ic, per = by_w ? ic + wc : ic;
    double chain = by_w ? fc + k[0].tail : k[1].head + ic;  // F -> W (or I); the V: F0 -> W0 (I0), F1 -> W1 (I1)
    if (V) chain = fmin(chain, (by_w ? k[5].head + wc : k[4].head + ic) - k[3].head);
    double *S = xmalloc(sizeof(double) * 2 * (size_t)(N + 1)), *E = S + N + 1;
    S[0] = -fc, E[0] = -fr;
    for (int i = 1; i <= N; i++) {
        S[i] = fmax(S[i - 1] + fc, (i - 1) * fc + (i > cap ? (i - cap) * per : 0));
        if (i > cap) S[i] = fmax(S[i], E[i - cap]);
        E[i] = fmax(fmax(E[i - 1] + fr, S[i] + chain), i * (fc + per));
    }
    double span = E[N] + (by_w ? 0 : wc);
    free(S);
    return span;
}

// With room for a->limit micro-batches (a forward takes 1 from its start, held as schedule_auto_peak counts it,
// a chunk pass 1/2), on each rank: the n-th forward to run starts only when held - 1 <= cap - 1, so after the
// (n - cap)-th freeing pass has ended (held >= forwards - I's run, since each W follows its I on the rank; with
// w_share 1 held = forwards - W's run); the n-th freeing pass to end is one of n distinct micro-batch chunks, so
// one of their forwards is the n-th or later to start and its pass ends >= that start + chain; and the rank runs
// one pass at a time. The largest over the ranks of the last freeing pass's least end (plus a W after an I).
double schedule_auto_bound_memory(const AutoSpec *a) {
    double most = 0;
    for (int s = 0; s < a->K; s++) most = fmax(most, memory_rank(a, s));
    return most;
}

double schedule_auto_peak(const ActionList *l, double w_share) {
    double held = 0, peak = 0;
    for (int i = 0; i < l->n; i++) {
        int k = l->a[i].kind;
        held += k == ACT_FORWARD ? 1 : k == ACT_BACKWARD_INPUT ? w_share - 1 : k == ACT_BACKWARD_WEIGHT ? -w_share : 0;
        if (held > peak) peak = held;
    }
    return peak;
}

// 1 when V candidate f leaves a gap to schedule_auto_bound (or is not one the search keeps), else 0.
static int gap_left(const AutoSpec *a, const SchedFile *f) {
    SimResult r;
    if (judge(a, SCHED_ZBAUTOV, f, &r)) return 1;
    int left = r.span > schedule_auto_bound(a) * (1 + 1e-12);
    sim_result_free(&r);
    return left;
}

// Better: a shorter longest span (the overlapped step), then a shorter makespan (the synchronous step).
static int better(const SimResult *x, const SimResult *best) {
    double eps = 1e-12 * best->makespan;
    if (x->span < best->span - eps) return 1;
    return x->span <= best->span + eps && x->makespan < best->makespan - eps;
}

// A built-in kind's lists as a SchedFile (zb-h1 and zb-h2 compete where they fit the limit; zb-v,
// v-half and v-min in the V).
static void builtin(int kind, int K, int M, SchedFile *f) {
    int v = schedule_chunks(kind, 1, NULL);
    *f = (SchedFile){xcalloc((size_t)K + 1, sizeof(ActionList)), K, M, v, schedule_chunk_order(kind, NULL), 1};
    for (int s = 0; s < K; s++) schedule_build(kind, NULL, K, M, v, s, &f->lists[s]);
}

// The search's state: the best candidate so far (have: one is kept) and how many were simulated.
typedef struct { const AutoSpec *a; SchedFile *out; SimResult best; int have, tried; } Search;

// A candidate built (built == 0) into the search: kept when it is the best so far, else freed.
static void consider(Search *q, int built, SchedFile *cand) {
    if (built != 0) return;
    SimResult r;
    q->tried++;
    if (judge(q->a, cand->v == 2 ? SCHED_ZBAUTOV : SCHED_ZBAUTO, cand, &r)) { sched_file_free(cand); return; }
    if (q->have && !better(&r, &q->best)) {
        sim_result_free(&r);
        sched_file_free(cand);
        return;
    }
    if (q->have) { sim_result_free(&q->best); sched_file_free(q->out); }
    q->best = r;
    *q->out = *cand;
    q->have = 1;
}

void schedule_auto_polish(const AutoSpec *a, int reach, long budget, SchedFile *out, int *tried) {
    CHECK(a->K >= 1 && a->M >= 1 && a->limit >= 1 && a->w_share >= 0 && a->w_share <= 1,
          "schedule_auto: K %d M %d limit %d share %g", a->K, a->M, a->limit, a->w_share);
    Search q = {.a = a, .out = out};
    SchedFile cand;
    if (a->v == 2) {  // the V's placement: its three orders, the one holding least kept if none fits
        static const int v_kinds[3] = {SCHED_ZBV, SCHED_VHALF, SCHED_VMIN};
        SchedFile order[3];
        for (int k = 0; k < 3; k++) {  // the V's three orders
            order[k].lists = NULL;
            if (schedule_check(v_kinds[k], a->K, a->M, 2)) continue;
            builtin(v_kinds[k], a->K, a->M, &cand);
            consider(&q, 0, &cand);
            builtin(v_kinds[k], a->K, a->M, &order[k]);
        }
        for (int i = 0, last = 0; i < 8; i++) {  // the late-W copies and the greedy at each cap (as below)
            int lo = a->limit > a->K ? a->limit - a->K : 1, cap = a->limit - (int)((long)(a->limit - lo) * i / 7);
            if (i && cap == last) continue;
            last = cap;
            for (int k = 0; k < 3; k++)  // (a late-W copy that only ties its order, holding more, is not kept)
                for (int p = 0; p < 2 && order[k].lists; p++)
                    consider(&q, vlazy(a, (Policy){p, 0, cap, 0}, &order[k], &cand), &cand);
            for (int p = 0; p < 8; p++) consider(&q, vgreedy(a, (Policy){p % 2, p / 2 % 2, cap, p / 4}, &cand), &cand);
        }
        for (int k = 0; k < 3; k++)
            if (order[k].lists) sched_file_free(&order[k]);
        // The best polished with the reach of 12 places and 2 x 10^7 passes' worth of runs and, with room for 2K
        // (ZB-2p's) or more where that leaves a gap to the bound, with reach and budget; the better kept (a local
        // search: each ends where the other may not).
        if (q.have) {
            SchedFile best = *q.out, wide;
            int near = polish(a, 12, 20000000L / (6L * a->M) / a->K, &best, &cand), far = -1;
            if (budget > 0 && a->limit >= 2 * a->K && (near || gap_left(a, &cand)))
                far = polish(a, reach, budget, &best, &wide);
            consider(&q, near, &cand);
            consider(&q, far, &wide);
        }
        if (!q.have) {
            builtin(SCHED_VMIN, a->K, a->M, &cand);
            AutoSpec any = *a;
            any.limit = 4 * a->K * a->M;
            q.a = &any;
            consider(&q, 0, &cand);
            q.a = a;
        }
        CHECK(q.have, "schedule_auto: no V candidate for K %d M %d", a->K, a->M);
        sim_result_free(&q.best);
        if (tried) *tried = q.tried;
        return;
    }
    if (a->M >= a->K) {  // zb-h1 (as its own figures hold), zb-h2
        builtin(SCHED_ZBH1, a->K, a->M, &cand);
        consider(&q, 0, &cand);
    }
    builtin(SCHED_ZBH2, a->K, a->M, &cand);
    consider(&q, 0, &cand);
    for (int v = 0; v < 8; v++) {  // the authors' heuristic
        Switches sw = {v % 2, v / 2 % 2, v / 4};
        consider(&q, hand(a, sw, &cand), &cand);
    }
    int lo = a->limit > a->K ? a->limit - a->K : 1, last = 0;
    for (int i = 0; i < 8; i++) {  // the greedy: the limit and up to 7 smaller caps spread down to lo
        int cap = a->limit - (int)((long)(a->limit - lo) * i / 7);
        if (i && cap == last) continue;
        last = cap;
        for (int p = 0; p < 4; p++) {
            Policy pol = {p % 2, p / 2, cap, 0};
            consider(&q, greedy(a, pol, &cand), &cand);
        }
    }
    // the greedy completes at any cap >= 1 (the last stage can always run an I: its F is its own)
    CHECK(q.have, "schedule_auto: no candidate for K %d M %d limit %d", a->K, a->M, a->limit);
    sim_result_free(&q.best);
    if (tried) *tried = q.tried;
}

void schedule_auto(const AutoSpec *a, SchedFile *out, int *tried) {
    schedule_auto_polish(a, 20, 220000000L / (6L * a->M) / a->K, out, tried);  // (about 0.3 s of CPU at p 8, m 32)
}
