// schedule.c: the schedule generators (naive stop-and-wait, GPipe fill-drain, 1F1B) as per-stage
// action lists, and the discrete-event simulator that runs those very lists against each other.
#include <string.h>
#include "schedule.h"
#include "util.h"

const char *const action_names[ACT_KINDS] = {"F", "B", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};

static void push(ActionList *l, int kind, int mb) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->a = realloc(l->a, sizeof(Action) * (size_t)l->cap);
        CHECK(l->a, "out of memory building a schedule");
    }
    l->a[l->n++] = (Action){kind, mb};
}

// One forward of mb on stage s of K, with its hand-offs: receive input, compute, send output.
static void forward(ActionList *l, int s, int K, int mb) {
    if (s > 0) push(l, ACT_RECV_ACT, mb);
    push(l, ACT_FORWARD, mb);
    if (s < K - 1) push(l, ACT_SEND_ACT, mb);
}
// One backward of mb: receive the output's gradient, compute, send the input's gradient.
static void backward(ActionList *l, int s, int K, int mb) {
    if (s < K - 1) push(l, ACT_RECV_GRAD, mb);
    push(l, ACT_BACKWARD, mb);
    if (s > 0) push(l, ACT_SEND_GRAD, mb);
}

void schedule_build(int kind, int K, int M, int s, ActionList *l) {
    l->n = 0;
    switch (kind) {
    case SCHED_NAIVE:  // stop-and-wait: one micro-batch all the way forward and back before the next
        for (int mb = 0; mb < M; mb++) { forward(l, s, K, mb); backward(l, s, K, mb); }
        break;
    case SCHED_GPIPE:  // fill with every forward, then drain with every backward
        for (int mb = 0; mb < M; mb++) forward(l, s, K, mb);
        for (int mb = 0; mb < M; mb++) backward(l, s, K, mb);
        break;
    case SCHED_1F1B: {  // warm-up forwards, steady one-forward-one-backward, cool-down backwards
        int warmup = K - s - 1 < M ? K - s - 1 : M;
        for (int mb = 0; mb < warmup; mb++) forward(l, s, K, mb);
        for (int i = 0; i < M - warmup; i++) { forward(l, s, K, warmup + i); backward(l, s, K, i); }
        for (int mb = M - warmup; mb < M; mb++) backward(l, s, K, mb);
        break;
    }
    default:
        fatal("unknown schedule kind %d", kind);
    }
}

void action_list_free(ActionList *l) { free(l->a); memset(l, 0, sizeof *l); }

double schedule_bubble_formula(int kind, int K, int M) {
    if (kind == SCHED_NAIVE) return (double)(K - 1) / K;
    return (double)(K - 1) / (M + K - 1);
}

void schedule_simulate(int kind, int K, int M, double cost_f, double cost_b, double cost_comm, SimResult *r) {
    double *f = xmalloc(sizeof(double) * (size_t)K), *b = xmalloc(sizeof(double) * (size_t)K);
    for (int s = 0; s < K; s++) { f[s] = cost_f; b[s] = cost_b; }
    schedule_simulate_stages(kind, K, M, f, b, cost_comm, r);
    free(f); free(b);
}

void schedule_simulate_stages(int kind, int K, int M, const double *cost_f, const double *cost_b, double cost_comm,
                              SimResult *r) {
    memset(r, 0, sizeof *r);
    r->K = K; r->M = M;
    r->busy = xcalloc((size_t)K, sizeof(double));
    r->bubble = xcalloc((size_t)K, sizeof(double));
    r->peak_inflight = xcalloc((size_t)K, sizeof(int));
    r->slices = xcalloc((size_t)K, sizeof(Interval *));
    r->n_slices = xcalloc((size_t)K, sizeof(int));
    ActionList *lists = xcalloc((size_t)K, sizeof(ActionList));
    int *pc = xcalloc((size_t)K, sizeof(int)), *inflight = xcalloc((size_t)K, sizeof(int));
    double *clock = xcalloc((size_t)K, sizeof(double));
    // arrival[(s * 2 + dir) * M + mb]: when the message for stage s arrives; < 0 = not yet sent.
    // dir 0: activation from s-1, dir 1: gradient from s+1.
    double *arrival = xmalloc(sizeof(double) * (size_t)K * 2 * (size_t)M);
    for (size_t i = 0; i < (size_t)K * 2 * M; i++) arrival[i] = -1;
    for (int s = 0; s < K; s++) {
        schedule_build(kind, K, M, s, &lists[s]);
        r->slices[s] = xcalloc((size_t)2 * M + 1, sizeof(Interval));
    }
    int progress = 1;
    while (progress) {
        progress = 0;
        for (int s = 0; s < K; s++) {
            while (pc[s] < lists[s].n) {
                Action a = lists[s].a[pc[s]];
                double *t = &clock[s];
                if (a.kind == ACT_RECV_ACT || a.kind == ACT_RECV_GRAD) {
                    double at = arrival[((size_t)s * 2 + (a.kind == ACT_RECV_GRAD)) * M + a.mb];
                    if (at < 0) break;  // blocked: the message has not been sent yet
                    if (at > *t) *t = at;
                } else if (a.kind == ACT_SEND_ACT) {
                    CHECK(s + 1 < K, "stage %d sends an activation past the last stage", s);
                    arrival[((size_t)(s + 1) * 2 + 0) * M + a.mb] = *t + cost_comm;
                } else if (a.kind == ACT_SEND_GRAD) {
                    CHECK(s > 0, "stage 0 sends a gradient before the first stage");
                    arrival[((size_t)(s - 1) * 2 + 1) * M + a.mb] = *t + cost_comm;
                } else {
                    double c = a.kind == ACT_FORWARD ? cost_f[s] : cost_b[s];
                    r->slices[s][r->n_slices[s]++] = (Interval){a.kind, a.mb, *t, *t + c};
                    *t += c;
                    r->busy[s] += c;
                    inflight[s] += a.kind == ACT_FORWARD ? 1 : -1;
                    if (inflight[s] > r->peak_inflight[s]) r->peak_inflight[s] = inflight[s];
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
            snprintf(r->why, sizeof r->why, "stage %d waits forever at action %d (%s of micro-batch %d)",
                     s, pc[s], action_names[a.kind], a.mb);
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
    free(lists); free(pc); free(inflight); free(clock); free(arrival);
}

void sim_result_free(SimResult *r) {
    for (int s = 0; s < r->K; s++) free(r->slices[s]);
    free(r->slices); free(r->n_slices); free(r->busy); free(r->bubble); free(r->peak_inflight);
    memset(r, 0, sizeof *r);
}
