// schedule_auto.c: zb-auto, the schedule the zero-bubble paper's ZB-1p/ZB-2p search builds: a greedy
// placement of F, I and W in simulated time under a memory limit, tried with several policies, each
// candidate run through the simulator (schedule.c) and the best kept.
#include <math.h>
#include <string.h>
#include "schedule_auto.h"
#include "base/util.h"

// One greedy policy. w_fits: a W goes into idle time only when it ends before the next message
// already on its way (else the stage waits for it); 0: whenever nothing else is ready. f_first: a
// ready F goes before a ready I (the warm-up runs longer); 0: I first (the gradient's critical
// path). cap: the most micro-batches a stage holds in this candidate (<= the limit).
typedef struct { int w_fits, f_first, cap; } Policy;

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
    int M = a->M, hold = g->nf[s] - g->nw[s];
    double t = g->e[s];
    double f_at = g->nf[s] < M ? arrive_f(g, s, g->nf[s]) : INFINITY;
    double i_at = g->ni[s] < g->nf[s] ? arrive_i(g, s, g->ni[s]) : INFINITY;
    int room = hold < g->pol.cap, w_ok = g->nw[s] < g->ni[s];
    if (f_at <= t && room && (g->pol.f_first || !(i_at <= t))) { place(g, s, ACT_FORWARD, t); return 0; }
    if (i_at <= t) { place(g, s, ACT_BACKWARD_INPUT, t); return 0; }
    if (f_at <= t && w_ok) { place(g, s, ACT_BACKWARD_WEIGHT, t); return 0; }  // a W frees the F's room
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

// A candidate through the simulator with the spec's costs: 0 and *r, or -1 (deadlock, or a stage
// over the memory limit: never kept).
static int judge(const AutoSpec *a, int kind, const SchedFile *f, SimResult *r) {
    SimSpec sp = {.kind = kind, .file = f, .K = a->K, .M = a->M, .v = 1, .comm = a->comm,
                  .stage_f = a->f, .stage_b = a->b, .stage_w = a->w};
    schedule_sim(&sp, r);
    int ok = !r->deadlock;
    for (int s = 0; s < a->K && ok; s++) ok = r->peak_slots[s] <= a->limit;
    if (!ok) sim_result_free(r);
    return ok ? 0 : -1;
}

// Better: a shorter longest span (the overlapped step), then a shorter makespan (the synchronous step).
static int better(const SimResult *x, const SimResult *best) {
    double eps = 1e-12 * best->makespan;
    if (x->span < best->span - eps) return 1;
    return x->span <= best->span + eps && x->makespan < best->makespan - eps;
}

// A built-in kind's lists as a SchedFile (zb-h1 and zb-h2 compete where they fit the limit).
static void builtin(int kind, int K, int M, SchedFile *f) {
    *f = (SchedFile){xcalloc((size_t)K + 1, sizeof(ActionList)), K, M, 1, CHUNKS_LOOP, 1};
    for (int s = 0; s < K; s++) schedule_build(kind, NULL, K, M, 1, s, &f->lists[s]);
}

void schedule_auto(const AutoSpec *a, SchedFile *out, int *tried) {
    CHECK(a->K >= 1 && a->M >= 1 && a->limit >= 1, "schedule_auto: K %d M %d limit %d", a->K, a->M, a->limit);
    SimResult best = {0};
    int n = 0, have = 0, lo = a->limit > a->K ? a->limit - a->K : 1;
    int caps[8] = {0}, n_caps = 0;  // the limit and up to 7 smaller caps spread down to lo
    for (int i = 0; i < 8; i++) {
        int c = a->limit - (int)((long)(a->limit - lo) * i / 7);
        if (!n_caps || c != caps[n_caps - 1]) caps[n_caps++] = c;
    }
    for (int k = 0; k < 2 + 4 * n_caps; k++) {
        SchedFile cand;
        int kind = SCHED_ZBAUTO;
        if (k < 2) {
            int bk = k == 0 ? SCHED_ZBH1 : SCHED_ZBH2;
            if (bk == SCHED_ZBH1 && a->M < a->K) continue;  // only as its own figures hold
            builtin(bk, a->K, a->M, &cand);
        } else {
            int j = k - 2;
            Policy pol = {j & 1, j >> 1 & 1, caps[j >> 2]};
            if (greedy(a, pol, &cand)) continue;
        }
        SimResult r;
        n++;
        if (judge(a, kind, &cand, &r)) { sched_file_free(&cand); continue; }
        if (!have || better(&r, &best)) {
            if (have) { sim_result_free(&best); sched_file_free(out); }
            best = r;
            *out = cand;
            have = 1;
        } else {
            sim_result_free(&r);
            sched_file_free(&cand);
        }
    }
    // the greedy with cap 1 (F I W per micro-batch down the pipeline) always completes
    CHECK(have, "schedule_auto: no candidate for K %d M %d limit %d", a->K, a->M, a->limit);
    sim_result_free(&best);
    if (tried) *tried = n;
}

