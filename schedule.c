// schedule.c: the schedule generators (naive stop-and-wait, GPipe fill-drain, 1F1B, Megatron's
// interleaved 1F1B, zero-bubble ZB-H1) as per-rank action lists, and the discrete-event simulator
// that runs those very lists against each other.
#include <string.h>
#include "schedule.h"
#include "util.h"

const char *const action_names[ACT_KINDS] = {"F", "B", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD", "I", "W"};

int action_is_compute(int kind) {
    return kind == ACT_FORWARD || kind == ACT_BACKWARD || kind == ACT_BACKWARD_INPUT || kind == ACT_BACKWARD_WEIGHT;
}

int schedule_splits_backward(int kind) { return kind == SCHED_ZBH1; }

static void push(ActionList *l, int kind, int mb, int chunk) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->a = realloc(l->a, sizeof(Action) * (size_t)l->cap);
        CHECK(l->a, "out of memory building a schedule");
    }
    l->a[l->n++] = (Action){kind, mb, chunk};
}

// Where an action runs: rank s of K, chunk c of v, so virtual stage vs = c*K + s of V = K*v.
typedef struct { ActionList *l; int s, K, V; } At;
static int vstage(const At *at, int c) { return c * at->K + at->s; }

// One forward of mb on chunk c, with its hand-offs: receive input, compute, send output.
static void forward(const At *at, int c, int mb) {
    int vs = vstage(at, c);
    if (vs > 0) push(at->l, ACT_RECV_ACT, mb, c);
    push(at->l, ACT_FORWARD, mb, c);
    if (vs < at->V - 1) push(at->l, ACT_SEND_ACT, mb, c);
}
// One backward of mb on chunk c: receive the output's gradient, compute (the full backward, or
// only its input part I when split), send the input's gradient.
static void backward(const At *at, int c, int mb, int kind) {
    int vs = vstage(at, c);
    if (vs < at->V - 1) push(at->l, ACT_RECV_GRAD, mb, c);
    push(at->l, kind, mb, c);
    if (vs > 0) push(at->l, ACT_SEND_GRAD, mb, c);
}

const char *schedule_check(int kind, int K, int M, int v) {
    if (kind == SCHED_INTERLEAVED) {
        if (v < 2) return "--schedule interleaved needs --virtual-stages >= 2 (with 1 it is 1f1b: use --schedule 1f1b)";
        if (M % K) return "--schedule interleaved needs --micro-batches to be a multiple of the number of stages (Megatron's rule)";
    } else if (v != 1) {
        return "--virtual-stages applies to --schedule interleaved only";
    }
    return NULL;
}

// Megatron's interleaved 1F1B (arXiv:2104.04473; Megatron-LM's forward_backward_pipelining_with_
// interleaving, PyTorch's ScheduleInterleaved1F1B). The rank runs M*v chunk-passes each way. Its
// k-th forward takes micro-batches in groups of K: group g = k / (K*v) covers micro-batches
// g*K .. g*K+K-1, first through chunk 0, then chunk 1, ... ; its k-th backward walks the chunks
// the other way (v-1 first). Warm-up: 2*(K-s-1) + (v-1)*K forwards, then one forward one
// backward, then the remaining backwards.
static void interleaved(const At *at, int M, int v) {
    int K = at->K, s = at->s, total = M * v;
    int warmup = 2 * (K - s - 1) + (v - 1) * K;
    if (warmup > total) warmup = total;
#define CHUNK_OF(k, fwd) ((fwd) ? ((k) % (K * v)) / K : v - 1 - ((k) % (K * v)) / K)
#define MB_OF(k) ((k) / (K * v) * K + (k) % K)
    for (int k = 0; k < warmup; k++) forward(at, CHUNK_OF(k, 1), MB_OF(k));
    for (int i = 0; i < total - warmup; i++) {
        int kf = warmup + i;
        forward(at, CHUNK_OF(kf, 1), MB_OF(kf));
        backward(at, CHUNK_OF(i, 0), MB_OF(i), ACT_BACKWARD);
    }
    for (int k = total - warmup; k < total; k++) backward(at, CHUNK_OF(k, 0), MB_OF(k), ACT_BACKWARD);
#undef CHUNK_OF
#undef MB_OF
}

// ZB-H1 (arXiv:2401.10241, section 3; its authors' ZeroBubbleH1Pipeline): 1F1B's warm-up of K-s-1
// forwards, then on stage s, s rounds of F + I whose W are deferred, then F + I + W rounds, then
// the cool-down I + W, and last the s deferred W. The gradient a stage waits for (I) is sent
// before the weight gradient is computed, and the deferred W fill the cool-down's idle slots.
// Between F and I at most min(K-s, M) micro-batches, as 1F1B; at most s+1 wait for their W.
static void zbh1(const At *at, int M) {
    int s = at->s, f = 0, b = 0, w = 0;
    int warmup = at->K - s - 1 < M ? at->K - s - 1 : M;
    while (f < warmup) forward(at, 0, f++);
    for (int j = 0; j < s && f < M; j++) { forward(at, 0, f++); backward(at, 0, b++, ACT_BACKWARD_INPUT); }
    while (f < M) { forward(at, 0, f++); backward(at, 0, b++, ACT_BACKWARD_INPUT); push(at->l, ACT_BACKWARD_WEIGHT, w++, 0); }
    while (b < M) { backward(at, 0, b++, ACT_BACKWARD_INPUT); push(at->l, ACT_BACKWARD_WEIGHT, w++, 0); }
    while (w < M) push(at->l, ACT_BACKWARD_WEIGHT, w++, 0);
}

void schedule_build(int kind, int K, int M, int v, int s, ActionList *l) {
    const char *why = schedule_check(kind, K, M, v);
    if (why) fatal("schedule_build(kind %d, K %d, M %d, v %d): %s", kind, K, M, v, why);
    l->n = 0;
    At at = {l, s, K, K * v};
    switch (kind) {
    case SCHED_NAIVE:  // stop-and-wait: one micro-batch all the way forward and back before the next
        for (int mb = 0; mb < M; mb++) { forward(&at, 0, mb); backward(&at, 0, mb, ACT_BACKWARD); }
        break;
    case SCHED_GPIPE:  // fill with every forward, then drain with every backward
        for (int mb = 0; mb < M; mb++) forward(&at, 0, mb);
        for (int mb = 0; mb < M; mb++) backward(&at, 0, mb, ACT_BACKWARD);
        break;
    case SCHED_1F1B: {  // warm-up forwards, steady one-forward-one-backward, cool-down backwards
        int warmup = K - s - 1 < M ? K - s - 1 : M;
        for (int mb = 0; mb < warmup; mb++) forward(&at, 0, mb);
        for (int i = 0; i < M - warmup; i++) { forward(&at, 0, warmup + i); backward(&at, 0, i, ACT_BACKWARD); }
        for (int mb = M - warmup; mb < M; mb++) backward(&at, 0, mb, ACT_BACKWARD);
        break;
    }
    case SCHED_INTERLEAVED:
        interleaved(&at, M, v);
        break;
    case SCHED_ZBH1:
        zbh1(&at, M);
        break;
    default:
        fatal("unknown schedule kind %d", kind);
    }
}

void schedule_build_forward(int K, int v, int s, int batches, ActionList *l) {
    l->n = 0;
    At at = {l, s, K, K * v};
    for (int mb = 0; mb < batches; mb++)
        for (int c = 0; c < v; c++) forward(&at, c, mb);
}

void action_list_free(ActionList *l) { free(l->a); memset(l, 0, sizeof *l); }

double schedule_bubble_formula(int kind, int K, int M, int v) {
    switch (kind) {
    case SCHED_NAIVE: return (double)(K - 1) / K;
    case SCHED_INTERLEAVED: return (double)(K - 1) / ((double)v * M + K - 1);
    case SCHED_ZBH1: return (double)(K - 1) / (3.0 * M + K - 1);
    default: return (double)(K - 1) / (M + K - 1);
    }
}

void schedule_sim(const SimSpec *sp, SimResult *r) {
    int K = sp->K, M = sp->M, v = sp->v, V = K * v;
    memset(r, 0, sizeof *r);
    r->K = K; r->M = M; r->v = v;
    r->busy = xcalloc((size_t)K, sizeof(double));
    r->bubble = xcalloc((size_t)K, sizeof(double));
    r->peak_inflight = xcalloc((size_t)K, sizeof(int));
    r->peak_deferred = xcalloc((size_t)K, sizeof(int));
    r->peak_slots = xcalloc((size_t)V, sizeof(int));
    r->slices = xcalloc((size_t)K, sizeof(Interval *));
    r->n_slices = xcalloc((size_t)K, sizeof(int));
    ActionList *lists = xcalloc((size_t)K, sizeof(ActionList));
    int *pc = xcalloc((size_t)K, sizeof(int)), *inflight = xcalloc((size_t)K, sizeof(int));
    int *deferred = xcalloc((size_t)K, sizeof(int)), *slots = xcalloc((size_t)V, sizeof(int));
    double *clock = xcalloc((size_t)K, sizeof(double));
    // Time runs v times faster inside: a chunk action then costs the stage's f, b or w exactly
    // (integer costs stay integers, so the bubble comes out exact); reported times are divided by v.
    // arrival[(vs * 2 + dir) * M + mb]: when the message for virtual stage vs arrives; < 0 = not yet
    // sent. dir 0: activation from vs-1, dir 1: gradient from vs+1.
    double *arrival = xmalloc(sizeof(double) * (size_t)V * 2 * (size_t)M);
    for (size_t i = 0; i < (size_t)V * 2 * M; i++) arrival[i] = -1;
    for (int s = 0; s < K; s++) {
        schedule_build(sp->kind, K, M, v, s, &lists[s]);
        r->slices[s] = xcalloc((size_t)3 * M * v + 1, sizeof(Interval));
    }
    int progress = 1;
    while (progress) {
        progress = 0;
        for (int s = 0; s < K; s++) {
            while (pc[s] < lists[s].n) {
                Action a = lists[s].a[pc[s]];
                int vs = a.chunk * K + s;
                double *t = &clock[s];
                if (a.kind == ACT_RECV_ACT || a.kind == ACT_RECV_GRAD) {
                    double at = arrival[((size_t)vs * 2 + (a.kind == ACT_RECV_GRAD)) * M + a.mb];
                    if (at < 0) break;  // blocked: the message has not been sent yet
                    if (at > *t) *t = at;
                } else if (a.kind == ACT_SEND_ACT) {
                    CHECK(vs + 1 < V, "rank %d chunk %d sends an activation past the last stage", s, a.chunk);
                    arrival[((size_t)(vs + 1) * 2 + 0) * M + a.mb] = *t + sp->comm * v;
                } else if (a.kind == ACT_SEND_GRAD) {
                    CHECK(vs > 0, "rank %d chunk %d sends a gradient before the first stage", s, a.chunk);
                    arrival[((size_t)(vs - 1) * 2 + 1) * M + a.mb] = *t + sp->comm * v;
                } else {
                    double f = sp->stage_f ? sp->stage_f[s] : sp->f, b = sp->stage_b ? sp->stage_b[s] : sp->b;
                    double w = sp->stage_w ? sp->stage_w[s] : sp->w;
                    double c = a.kind == ACT_FORWARD ? f : a.kind == ACT_BACKWARD ? b + w : a.kind == ACT_BACKWARD_INPUT ? b : w;
                    r->slices[s][r->n_slices[s]++] = (Interval){a.kind, a.mb, *t, *t + c, a.chunk};
                    *t += c;
                    r->busy[s] += c;
                    if (a.kind == ACT_FORWARD) { inflight[s]++; slots[vs]++; }
                    if (a.kind == ACT_BACKWARD) { inflight[s]--; slots[vs]--; }
                    if (a.kind == ACT_BACKWARD_INPUT) { inflight[s]--; deferred[s]++; }
                    if (a.kind == ACT_BACKWARD_WEIGHT) { deferred[s]--; slots[vs]--; }
                    if (inflight[s] > r->peak_inflight[s]) r->peak_inflight[s] = inflight[s];
                    if (deferred[s] > r->peak_deferred[s]) r->peak_deferred[s] = deferred[s];
                    if (slots[vs] > r->peak_slots[vs]) r->peak_slots[vs] = slots[vs];
                }
                pc[s]++;
                progress = 1;
            }
        }
    }
    for (int s = 0; s < K; s++) {
        if (pc[s] < lists[s].n && !r->deadlock) {
            Action a = lists[s].a[pc[s]];
            r->deadlock = 1;
            snprintf(r->why, sizeof r->why, "rank %d waits forever at action %d (%s of micro-batch %d, chunk %d)",
                     s, pc[s], action_names[a.kind], a.mb, a.chunk);
        }
        if (clock[s] > r->makespan) r->makespan = clock[s];
    }
    // idle / makespan rather than 1 - busy / makespan: with integer costs both terms are exact, so
    // the simulated bubble equals the textbook fraction to the last bit.
    double busy_all = 0;
    for (int s = 0; s < K; s++) {
        r->bubble[s] = r->makespan > 0 ? (r->makespan - r->busy[s]) / r->makespan : 0;
        busy_all += r->busy[s];
        action_list_free(&lists[s]);
    }
    r->bubble_mean = r->makespan > 0 ? (K * r->makespan - busy_all) / (K * r->makespan) : 0;
    if (v > 1) {  // back to the time of whole-stage costs
        r->makespan /= v;
        for (int s = 0; s < K; s++) {
            r->busy[s] /= v;
            for (int i = 0; i < r->n_slices[s]; i++) { r->slices[s][i].t0 /= v; r->slices[s][i].t1 /= v; }
        }
    }
    free(lists); free(pc); free(inflight); free(deferred); free(slots); free(clock); free(arrival);
}

void sim_result_free(SimResult *r) {
    for (int s = 0; s < r->K; s++) free(r->slices[s]);
    free(r->slices); free(r->n_slices); free(r->busy); free(r->bubble); free(r->peak_inflight);
    free(r->peak_deferred); free(r->peak_slots);
    memset(r, 0, sizeof *r);
}
