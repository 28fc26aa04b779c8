// tests/unit_schedules.c: the schedules beyond 1F1B and their table. Simulator sweeps: every schedule is
// deadlock-free and complete over K <= 8, M <= 32, v <= 4; interleaved's simulated bubble equals its
// formula exactly; zb-h1's is below 1f1b's for every K >= 2 and every M with comparable costs, equals
// its formula for M >= K, and its peak in-flight equals 1f1b's. Generators: Megatron's interleaved
// order on a small case. Model: the split backward (I then W) gives the full backward's gradients
// and counts its memory; the progress hook runs between layers.
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
#include "unit.h"
#include "comms.h"
#include "base/util.h"
#include "base/data.h"
#include "model.h"
#include "base/ops.h"
#include "schedule.h"
#include "sim_helpers.h"

static const Backend *be = &backend_cpu;
#define NAME(kind) (schedule_kind(kind)->name)

// v values a schedule runs with for (K, M): interleaved needs v >= 2, zb-v and dualpipev v = 2,
// dualpipev M >= 2K.
static int runs(int kind, int K, int M, int v) { return schedule_check(kind, K, M, v) == NULL; }

// Every rank's list: each (chunk, mb) forward once, then its backward once (or I once then W
// once), and every message sent is received exactly once by its virtual stage (and none other).
static int list_complete(int kind, int K, int M, int v, char *why, size_t n) {
    int V = K * v;
    int *sent = calloc((size_t)V * 2 * M, sizeof(int)), *recvd = calloc((size_t)V * 2 * M, sizeof(int));
    int ok = 1;
    for (int s = 0; s < K && ok; s++) {
        ActionList l = {0};
        schedule_build(kind, NULL, K, M, v, s, &l);
        int *f = calloc((size_t)v * M, sizeof(int)), *b = calloc((size_t)v * M, sizeof(int));
        int *in = calloc((size_t)v * M, sizeof(int)), *w = calloc((size_t)v * M, sizeof(int));
        for (int i = 0; i < l.n && ok; i++) {
            Action a = l.a[i];
            int vs = vstage_of(schedule_chunk_order(kind, NULL), K, s, a.chunk), k = a.chunk * M + a.mb;
            if (a.chunk < 0 || a.chunk >= v || a.mb < 0 || a.mb >= M) { snprintf(why, n, "rank %d: action %d out of range", s, i); ok = 0; break; }
            switch (a.kind) {
            case ACT_FORWARD: f[k]++; break;
            case ACT_BACKWARD: if (!f[k]) ok = 0; b[k]++; break;
            case ACT_BACKWARD_INPUT: if (!f[k]) ok = 0; in[k]++; break;
            case ACT_BACKWARD_WEIGHT: if (!in[k]) ok = 0; w[k]++; break;
            case ACT_SEND_ACT: sent[((size_t)(vs + 1) * 2 + 0) * M + a.mb]++; break;
            case ACT_SEND_GRAD: sent[((size_t)(vs - 1) * 2 + 1) * M + a.mb]++; break;
            case ACT_RECV_ACT: recvd[((size_t)vs * 2 + 0) * M + a.mb]++; break;
            case ACT_RECV_GRAD: recvd[((size_t)vs * 2 + 1) * M + a.mb]++; break;
            }
            if (!ok) snprintf(why, n, "%s K=%d M=%d v=%d rank %d: %s of mb %d chunk %d before its forward/input pass",
                              NAME(kind), K, M, v, s, action_names[a.kind], a.mb, a.chunk);
        }
        int split = schedule_splits_backward(kind, NULL);
        for (int k = 0; k < v * M && ok; k++)
            // dualpipev runs some backwards whole and splits others: each (chunk, mb) one way
            if (f[k] != 1 || (split && b[k] == 0 ? (in[k] != 1 || w[k] != 1) : (b[k] != 1 || in[k] || w[k])) || (!split && b[k] != 1)) {
                snprintf(why, n, "%s K=%d M=%d v=%d rank %d chunk %d mb %d: F %d B %d I %d W %d",
                         NAME(kind), K, M, v, s, k / M, k % M, f[k], b[k], in[k], w[k]);
                ok = 0;
            }
        free(f); free(b); free(in); free(w);
        action_list_free(&l);
    }
    for (int i = 0; i < V * 2 * M && ok; i++)
        if (sent[i] != 1 - (i / (2 * M) == 0 && i / M % 2 == 0) - (i / (2 * M) == V - 1 && i / M % 2 == 1) || recvd[i] != sent[i]) {
            snprintf(why, n, "%s K=%d M=%d v=%d: virtual stage %d mb %d %s: sent %d received %d",
                     NAME(kind), K, M, v, i / (2 * M), i % M, i / M % 2 ? "gradient" : "activation", sent[i], recvd[i]);
            ok = 0;
        }
    free(sent); free(recvd);
    return ok;
}

static void test_sweep(void) {
    int bad = 0, incomplete = 0, cases = 0;
    char why[300] = "", why2[300] = "";
    for (int kind = 0; kind < SCHED_KINDS; kind++)  // every kind with a generator
        for (int K = 1; K <= 8; K++)
            for (int M = 1; M <= 32; M++)
                for (int v = 1; v <= 4; v++) {
                    if (!schedule_kind(kind)->generate || !runs(kind, K, M, v)) continue;
                    cases++;
                    SimSpec sp = {.kind = kind, .K = K, .M = M, .v = v, .f = 1, .b = 1, .w = 1};
                    SimResult r;
                    schedule_sim(&sp, &r);
                    if (r.deadlock && !bad++) snprintf(why, sizeof why, "%s K=%d M=%d v=%d: %s", NAME(kind), K, M, v, r.why);
                    sim_result_free(&r);
                    if (!list_complete(kind, K, M, v, why2, sizeof why2)) incomplete++;
                }
    char name[96];
    snprintf(name, sizeof name, "schedules/no deadlock over K<=8, M<=32, v<=4 (%d runnable cases)", cases);
    EXPECT(name, !bad && cases > 1000, "%d deadlocks: %s", bad, why);
    EXPECT("schedules/every (chunk, mb): one F then one B (or I then W); every message received once", !incomplete,
           "%d incomplete: %s", incomplete, why2);
}

// The formula is exact: costs are integers and the simulator runs chunk time v times faster, so
// makespan and busy time are exact and the two fractions are the same rational, rounded once.
static void test_interleaved_formula(void) {
    double costs[][3] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 3}};
    int bad = 0, n = 0;
    char why[300] = "";
    for (size_t c = 0; c < sizeof costs / sizeof *costs; c++)
        for (int K = 2; K <= 8; K++)
            for (int v = 2; v <= 4; v++)
                for (int M = K; M <= 32; M += K) {
                    SimSpec sp = {.kind = SCHED_INTERLEAVED, .K = K, .M = M, .v = v, .f = costs[c][0], .b = costs[c][1], .w = costs[c][2]};
                    SimResult r;
                    schedule_sim(&sp, &r);
                    double f = schedule_bubble_formula(SCHED_INTERLEAVED, K, M, v);
                    n++;
                    for (int s = 0; s < K; s++)
                        if (r.bubble[s] != f && !bad++)
                            snprintf(why, sizeof why, "F=%g I=%g W=%g K=%d M=%d v=%d rank %d: simulated %.17g formula %.17g",
                                     costs[c][0], costs[c][1], costs[c][2], K, M, v, s, r.bubble[s], f);
                    if (r.bubble_mean != f && !bad++)
                        snprintf(why, sizeof why, "K=%d M=%d v=%d: mean %.17g formula %.17g", K, M, v, r.bubble_mean, f);
                    sim_result_free(&r);
                }
    EXPECT("interleaved/simulated bubble == (K-1)/(v*M+K-1) exactly, every rank (4 cost ratios)", !bad && n > 100, "%s", why);
    // and v chunks really cut it: below 1f1b's (K-1)/(M+K-1)
    SimSpec a = {.kind = SCHED_INTERLEAVED, .K = 4, .M = 8, .v = 2, .f = 1, .b = 1, .w = 1}, o = a;
    o.kind = SCHED_1F1B; o.v = 1;
    SimResult ra, ro;
    schedule_sim(&a, &ra); schedule_sim(&o, &ro);
    EXPECT("interleaved/K=4 M=8 v=2: bubble 3/19, 1f1b 3/11, same total work",
           ra.bubble_mean == 3.0 / 19 && ro.bubble_mean == 3.0 / 11 && ra.busy[0] == ro.busy[0],
           "%.17g %.17g busy %g %g", ra.bubble_mean, ro.bubble_mean, ra.busy[0], ro.busy[0]);
    sim_result_free(&ra); sim_result_free(&ro);
}

static void test_zbh1(void) {
    // comparable costs: 1f1b's full backward costs I + W
    double costs[][3] = {{1, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 1, 1}, {1, 1.5, 0.5}, {1, 1, 0.25}};
    int below = 0, n = 0, formula_bad = 0, peak_bad = 0, defer_bad = 0;
    char why[300] = "", why2[300] = "", why3[300] = "";
    for (size_t c = 0; c < sizeof costs / sizeof *costs; c++)
        for (int K = 2; K <= 8; K++)
            for (int M = 1; M <= 32; M++) {
                SimSpec z = {.kind = SCHED_ZBH1, .K = K, .M = M, .v = 1, .f = costs[c][0], .b = costs[c][1], .w = costs[c][2]}, o = z;
                o.kind = SCHED_1F1B;
                SimResult rz, ro;
                schedule_sim(&z, &rz); schedule_sim(&o, &ro);
                n++;
                if (rz.bubble_mean < ro.bubble_mean && rz.makespan < ro.makespan) below++;
                else if (!why[0]) snprintf(why, sizeof why, "F=%g I=%g W=%g K=%d M=%d: zb-h1 %.4f 1f1b %.4f", costs[c][0], costs[c][1], costs[c][2], K, M, rz.bubble_mean, ro.bubble_mean);
                if (c == 0 && M >= K && rz.bubble_mean != schedule_bubble_formula(SCHED_ZBH1, K, M, 1) && !formula_bad++)
                    snprintf(why2, sizeof why2, "K=%d M=%d: simulated %.17g formula %.17g", K, M, rz.bubble_mean, schedule_bubble_formula(SCHED_ZBH1, K, M, 1));
                sim_result_free(&rz); sim_result_free(&ro);
            }
    EXPECT("zb-h1/simulated bubble and makespan below 1f1b's for every K in 2..8, M in 1..32 (6 cost ratios, 1f1b's B = I + W)", below == n,
           "%d of %d: %s", n - below, n, why);
    EXPECT("zb-h1/simulated bubble == (K-1)/(3M+K-1) exactly for F = I = W, M >= K", !formula_bad, "%s", why2);
    // memory: every (K, M), M < K too
    for (int K = 1; K <= 8; K++)
        for (int M = 1; M <= 32; M++) {
            SimSpec z = {.kind = SCHED_ZBH1, .K = K, .M = M, .v = 1, .f = 1, .b = 1, .w = 1}, o = z;
            o.kind = SCHED_1F1B;
            SimResult rz, ro;
            schedule_sim(&z, &rz); schedule_sim(&o, &ro);
            for (int s = 0; s < K; s++) {
                if (rz.peak_inflight[s] != ro.peak_inflight[s] && !peak_bad++)
                    snprintf(why, sizeof why, "K=%d M=%d stage %d: zb-h1 %d 1f1b %d", K, M, s, rz.peak_inflight[s], ro.peak_inflight[s]);
                int most = s + 1 < M ? s + 1 : M;  // reached when M >= K
                if ((rz.peak_deferred[s] > most || (M >= K && rz.peak_deferred[s] != most) || ro.peak_deferred[s] != 0) && !defer_bad++)
                    snprintf(why3, sizeof why3, "K=%d M=%d stage %d: deferred %d, at most %d", K, M, s, rz.peak_deferred[s], most);
            }
            sim_result_free(&rz); sim_result_free(&ro);
        }
    EXPECT("zb-h1/peak in-flight (F..I) == 1f1b's min(K-s, M) on every stage, K<=8, M<=32", !peak_bad, "%s", why);
    EXPECT("zb-h1/stage s defers at most min(s+1, M) weight passes (s+1 when M >= K); 1f1b none", !defer_bad, "%s", why3);
    // the old entry splits a full backward evenly: zb-h1 at F=1, B=2 is F=I=W=1
    SimResult a, b;
    schedule_simulate(SCHED_ZBH1, 4, 8, 1, 2, 0, &a);
    SimSpec z = {.kind = SCHED_ZBH1, .K = 4, .M = 8, .v = 1, .f = 1, .b = 1, .w = 1};
    schedule_sim(&z, &b);
    EXPECT("zb-h1/schedule_simulate(F=1, B=2) == schedule_sim(F=I=W=1): bubble 3/27", a.bubble_mean == b.bubble_mean && a.bubble_mean == 3.0 / 27,
           "%.17g %.17g", a.bubble_mean, b.bubble_mean);
    sim_result_free(&a); sim_result_free(&b);
}

// Megatron's order for K=2, M=4, v=2 on rank 0: 4 warm-up forwards (chunk 0 of mb 0,1, chunk 1 of
// mb 0,1), then F/B pairs, backwards starting from the last chunk.
static void test_interleaved_order(void) {
    const char *want[2] = {
        "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3",
        "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3"};
    for (int s = 0; s < 2; s++) {
        ActionList l = {0};
        schedule_build(SCHED_INTERLEAVED, NULL, 2, 4, 2, s, &l);
        char got[256] = "";
        for (int i = 0; i < l.n; i++)
            if (action_is_compute(l.a[i].kind)) {
                size_t n = strlen(got);
                snprintf(got + n, sizeof got - n, "%s%s%d.%d", n ? " " : "", action_names[l.a[i].kind], l.a[i].chunk, l.a[i].mb);
            }
        char name[80];
        snprintf(name, sizeof name, "interleaved/Megatron order K=2 M=4 v=2 rank %d (F<chunk>.<mb>)", s);
        EXPECT(name, !strcmp(got, want[s]), "got  %s\n     want %s", got, want[s]);
        action_list_free(&l);
    }
    // rank 1 of 2 holds virtual stage 1 (chunk 0) and 3 (chunk 1): the head, which receives no gradient
    ActionList l = {0};
    schedule_build(SCHED_INTERLEAVED, NULL, 2, 4, 2, 1, &l);
    int chunk1_recv_grad = 0, chunk0_send_act = 0;
    for (int i = 0; i < l.n; i++) {
        chunk1_recv_grad += l.a[i].kind == ACT_RECV_GRAD && l.a[i].chunk == 1;
        chunk0_send_act += l.a[i].kind == ACT_SEND_ACT && l.a[i].chunk == 0;
    }
    EXPECT("interleaved/last rank: chunk 0 sends activations on (to rank 0's chunk 1), chunk 1 (the head) receives no gradient",
           chunk0_send_act == 4 && chunk1_recv_grad == 0, "sends %d, grad receives %d", chunk0_send_act, chunk1_recv_grad);
    action_list_free(&l);
    EXPECT("schedules/checks: interleaved needs v>=2 (any M), v only for interleaved, zb-h1 takes any M, zb-v v=2, dualpipev M>=2K",
           !schedule_check(SCHED_INTERLEAVED, 4, 6, 2) && schedule_check(SCHED_INTERLEAVED, 4, 8, 1) && !schedule_check(SCHED_INTERLEAVED, 4, 3, 2) &&
           !schedule_check(SCHED_INTERLEAVED, 4, 8, 2) && schedule_check(SCHED_1F1B, 4, 8, 2) && !schedule_check(SCHED_ZBH1, 4, 3, 1) &&
           !schedule_check(SCHED_ZBV, 4, 1, 2) && schedule_check(SCHED_ZBV, 4, 8, 1) && schedule_check(SCHED_DUALPIPEV, 4, 7, 2) &&
           !schedule_check(SCHED_DUALPIPEV, 4, 8, 2), "wrong verdicts");
    SimSpec sp = {.kind = SCHED_INTERLEAVED, .K = 2, .M = 2, .v = 2, .f = 1, .b = 1, .w = 1, .slices = 1};
    SimResult r;
    schedule_sim(&sp, &r);
    int chunks_seen = 0;
    for (int i = 0; i < r.n_slices[0]; i++) chunks_seen |= 1 << r.slices[0][i].chunk;
    EXPECT("interleaved/simulated slices carry their chunk, at whole-stage time scale (K=2 M=2 v=2: makespan 7.5, busy 6 of F=1, B=2)",
           chunks_seen == 3 && r.makespan == 7.5 && r.busy[0] == 6, "chunks %d makespan %g busy %g", chunks_seen, r.makespan, r.busy[0]);
    sim_result_free(&r);
}

// Interleaved for any M: deadlock-free (the sweep), never worse than 1f1b, and with M % K != 0 the
// last group keeps the remainder: every micro-batch passes every chunk once (list_complete).
static void test_interleaved_any_m(void) {
    int worse = 0, n = 0;
    char why[200] = "";
    for (int K = 2; K <= 8; K++)
        for (int v = 2; v <= 4; v++)
            for (int M = 1; M <= 32; M++) {
                if (M % K == 0) continue;
                SimSpec a = {.kind = SCHED_INTERLEAVED, .K = K, .M = M, .v = v, .f = 1, .b = 1, .w = 1}, o = a;
                o.kind = SCHED_1F1B; o.v = 1;
                SimResult ra, ro;
                schedule_sim(&a, &ra); schedule_sim(&o, &ro);
                n++;
                if ((ra.deadlock || ra.makespan > ro.makespan) && !worse++)
                    snprintf(why, sizeof why, "K=%d M=%d v=%d: makespan %g, 1f1b %g%s", K, M, v, ra.makespan, ro.makespan, ra.deadlock ? " (deadlock)" : "");
                sim_result_free(&ra); sim_result_free(&ro);
            }
    EXPECT("interleaved/M % K != 0: runs, and its makespan is at most 1f1b's (K 2..8, v 2..4, M 1..32)", !worse && n > 500, "%d of %d: %s", worse, n, why);
}

// The idle time of rank s between its first pass and its last (the paper's bubble, where the next
// step's forwards could fill the rest once the optimizer's synchronization is bypassed).
static double span_idle(const SimResult *r, int s) { return r->slices[s][r->n_slices[s] - 1].t1 - r->slices[s][0].t0 - r->busy[s]; }

// ZB-V and DualPipeV: at F = I = W the step's bubble is exactly (K-1)/(6M+K-1) on every rank (rank s
// starts s chunk forwards late and ends K-1-s early) and no rank idles inside its own span; with
// W <= F the span stays within the paper's (K-1)(F+I-2W); peak in-flight is 2K chunk passes (K
// stages' worth, 1f1b's first-stage peak) for zb-v; the head (vs 2K-1) is on rank 0.
static void test_v_schedules(void) {
    double costs[][3] = {{1, 1, 1}, {1, 1, 0.5}, {2, 1, 1}, {1, 2, 1}, {1, 1.5, 0.5}};
    const int kinds[2] = {SCHED_ZBV, SCHED_DUALPIPEV};
    for (int k = 0; k < 2; k++) {
        int kind = kinds[k], bad = 0, span_bad = 0, peak_bad = 0, n = 0;
        char why[300] = "", why2[300] = "", why3[300] = "";
        for (size_t c = 0; c < sizeof costs / sizeof *costs; c++)
            for (int K = 2; K <= 8; K++)
                for (int M = 2 * K; M <= 32; M++) {
                    SimSpec sp = {.kind = kind, .K = K, .M = M, .v = 2, .f = costs[c][0], .b = costs[c][1], .w = costs[c][2], .slices = 1};
                    SimResult r;
                    schedule_sim(&sp, &r);
                    n++;
                    double f = schedule_bubble_formula(kind, K, M, 2), paper = (K - 1) * (sp.f + sp.b - 2 * sp.w);
                    for (int s = 0; s < K; s++) {
                        if (c == 0 && r.bubble[s] != f && !bad++)
                            snprintf(why, sizeof why, "K=%d M=%d rank %d: simulated %.17g formula %.17g", K, M, s, r.bubble[s], f);
                        double idle = span_idle(&r, s);
                        if ((c == 0 ? idle != 0 : idle > (paper > 0 ? paper : 0) + 1e-9) && kind == SCHED_ZBV && !span_bad++)
                            snprintf(why2, sizeof why2, "F=%g I=%g W=%g K=%d M=%d rank %d: idle %g in its span, paper %g", sp.f, sp.b, sp.w, K, M, s, idle, paper);
                        if (c == 0 && kind == SCHED_ZBV && r.peak_inflight[s] != 2 * K && !peak_bad++)
                            snprintf(why3, sizeof why3, "K=%d M=%d rank %d: peak %d", K, M, s, r.peak_inflight[s]);
                    }
                    sim_result_free(&r);
                }
        char name[200];
        snprintf(name, sizeof name, "%s/simulated bubble == (K-1)/(6M+K-1) exactly on every rank, F = I = W, K 2..8, M 2K..32", NAME(kind));
        EXPECT(name, !bad && n > 100, "%s", why);
        if (kind == SCHED_ZBV) {
            EXPECT("zb-v/no idle inside a rank's span at F = I = W; within (K-1)(F+I-2W) for 4 more costs with W <= F", !span_bad, "%s", why2);
            EXPECT("zb-v/peak in-flight 2K chunk passes on every rank (1f1b's first-stage K stages), M >= 2K", !peak_bad, "%s", why3);
        }
    }
    // the V chunk order: rank 0 holds vs 0 and 2K-1, so its chunk 1 computes the loss and receives no gradient
    ActionList l = {0};
    schedule_build(SCHED_ZBV, NULL, 4, 8, 2, 0, &l);
    int head_recv_grad = 0, c0_recv_act = 0, c1_send_act = 0;
    for (int i = 0; i < l.n; i++) {
        head_recv_grad += l.a[i].kind == ACT_RECV_GRAD && l.a[i].chunk == 1;
        c0_recv_act += l.a[i].kind == ACT_RECV_ACT && l.a[i].chunk == 0;
        c1_send_act += l.a[i].kind == ACT_SEND_ACT && l.a[i].chunk == 1;
    }
    EXPECT("zb-v/rank 0 holds the first chunk (no input received) and the last (the head: no gradient received, no activation sent)",
           !head_recv_grad && !c0_recv_act && !c1_send_act && vstage_of(CHUNKS_V, 4, 0, 1) == 7 && stage_of_vstage(CHUNKS_V, 4, 4) == 3,
           "recv grad %d recv act %d send act %d", head_recv_grad, c0_recv_act, c1_send_act);
    action_list_free(&l);
    // the V's turn: rank K-1 hands chunk 0's output to its own chunk 1, at no transfer cost
    SimSpec a = {.kind = SCHED_ZBV, .K = 2, .M = 8, .v = 2, .f = 1, .b = 1, .w = 1, .comm = 0.5};
    SimResult r;
    schedule_sim(&a, &r);
    EXPECT("zb-v/a transfer cost lengthens the step (messages between ranks) but the run stays deadlock-free",
           !r.deadlock && r.makespan > 24.5, "makespan %g", r.makespan);
    sim_result_free(&r);
}

// ZB-H2, the parallelogram: on a grid of K, M >= 2K-1 and 7 cost ratios (exact binary fractions),
// rank s idles (K-1-s) x max(0, F+I-2W) inside its span (none at F+I <= 2W: the paper's zero), the
// makespan is M(F+I+W) + (K-1) max(F, F+I-2W), at F = I = W the bubble is (K-1)/(3M+K-1) exactly on
// average; stage s holds at most 2(K-1-s)+1 micro-batches between F and I and 2K-1 between F and W.
static void test_zbh2(void) {
    double costs[][3] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 2}, {1, 1.5, 0.5}, {1, 1, 0.5}, {3, 2, 1}};
    int span_bad = 0, make_bad = 0, mean_bad = 0, peak_bad = 0, n = 0, below = 0;
    char why[300] = "", why2[300] = "", why3[300] = "", why4[300] = "";
    for (size_t c = 0; c < sizeof costs / sizeof *costs; c++)
        for (int K = 2; K <= 8; K++)
            for (int M = 2 * K - 1; M <= 32; M++) {
                double F = costs[c][0], I = costs[c][1], W = costs[c][2], X = F + I - 2 * W > 0 ? F + I - 2 * W : 0;
                SimSpec sp = {.kind = SCHED_ZBH2, .K = K, .M = M, .v = 1, .f = F, .b = I, .w = W, .slices = 1}, h1 = sp;
                h1.kind = SCHED_ZBH1;
                SimResult r, r1;
                schedule_sim(&sp, &r); schedule_sim(&h1, &r1);
                n++;
                below += r.makespan <= r1.makespan;
                for (int s = 0; s < K; s++) {
                    if (span_idle(&r, s) != (K - 1 - s) * X && !span_bad++)
                        snprintf(why, sizeof why, "F=%g I=%g W=%g K=%d M=%d rank %d: idle %g in its span, want %g", F, I, W, K, M, s, span_idle(&r, s), (K - 1 - s) * X);
                    if ((r.peak_inflight[s] != 2 * (K - 1 - s) + 1 || r.peak_slots[s] != 2 * K - 1) && !peak_bad++)
                        snprintf(why4, sizeof why4, "K=%d M=%d rank %d: peak F..I %d F..W %d", K, M, s, r.peak_inflight[s], r.peak_slots[s]);
                }
                double want = M * (F + I + W) + (K - 1) * (F > X ? F : X);
                if (r.makespan != want && !make_bad++) snprintf(why2, sizeof why2, "F=%g I=%g W=%g K=%d M=%d: makespan %g want %g", F, I, W, K, M, r.makespan, want);
                if (c == 0 && r.bubble_mean != schedule_bubble_formula(SCHED_ZBH2, K, M, 1) && !mean_bad++)
                    snprintf(why3, sizeof why3, "K=%d M=%d: %.17g formula %.17g", K, M, r.bubble_mean, schedule_bubble_formula(SCHED_ZBH2, K, M, 1));
                sim_result_free(&r); sim_result_free(&r1);
            }
    EXPECT("zb-h2/rank s idles (K-1-s) max(0, F+I-2W) inside its span, exactly (K 2..8, M 2K-1..32, 7 cost ratios)", !span_bad && n > 1000, "%s", why);
    EXPECT("zb-h2/makespan == M(F+I+W) + (K-1) max(F, F+I-2W) exactly, never above zb-h1's", !make_bad && below == n, "%s (%d of %d not above zb-h1)", why2, below, n);
    EXPECT("zb-h2/bubble == (K-1)/(3M+K-1) exactly at F = I = W (zb-h1's: the idle moves to the edges)", !mean_bad, "%s", why3);
    EXPECT("zb-h2/peak: 2(K-1-s)+1 micro-batches between F and I on stage s, 2K-1 between F and W on every stage (the paper's 2p-1)", !peak_bad, "%s", why4);
    // the paper's order on K=2, M=4: rank 0 warms up with 2 forwards, rank 1 runs 2 F I pairs first
    const char *want[2] = {"F0 F1 F2 I0 W0 F3 I1 W1 I2 W2 I3 W3", "F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3"};
    for (int s = 0; s < 2; s++) {
        ActionList l = {0};
        schedule_build(SCHED_ZBH2, NULL, 2, 4, 1, s, &l);
        char got[256] = "";
        for (int i = 0; i < l.n; i++)
            if (action_is_compute(l.a[i].kind)) {
                size_t len = strlen(got);
                snprintf(got + len, sizeof got - len, "%s%s%d", len ? " " : "", action_names[l.a[i].kind], l.a[i].mb);
            }
        char name[80];
        snprintf(name, sizeof name, "zb-h2/order K=2 M=4 rank %d", s);
        EXPECT(name, !strcmp(got, want[s]), "got  %s\n     want %s", got, want[s]);
        action_list_free(&l);
    }
}

// The zero-bubble paper's Table 5 (arXiv 2401.10241; its authors' efficiency.py, which prints it
// from Table 9's profiled costs, ms x 1000 here, so the costs are integers and the sums exact):
// 1F1B, ZB-H1 and ZB-H2 to four decimals. The paper divides by the longest rank span
// (bubble_overlap); for 1F1B and ZB-H1 rank 0 starts first and ends last, so both measures agree.
// ZB-H2's span exceeds the work by exactly (p-1)(F+I+2c-2W) (the authors' own assert) and its
// makespan by (p-1)(F+c): the skew at the step's start, which only overlapping steps hides.
static void test_paper_table(void) {
    static const int rows[][10] = {
        {8, 24, 18522, 18086, 9337, 601, 2431, 1585, 1083},   {8, 32, 18513, 18086, 9331, 626, 1985, 1242, 837},
        {8, 64, 18546, 18097, 9321, 762, 1240, 674, 444},     {8, 24, 29718, 29444, 19927, 527, 2347, 1323, 698},
        {8, 32, 29802, 29428, 19530, 577, 1898, 1045, 559},   {8, 64, 29935, 29621, 19388, 535, 1091, 554, 294},
        {16, 48, 11347, 11248, 8132, 377, 2552, 1397, 672},   {16, 64, 11307, 11254, 8101, 379, 2082, 1088, 516},
        {16, 128, 11325, 11308, 8109, 378, 1251, 576, 266},   {32, 96, 10419, 10207, 7715, 408, 2646, 1421, 641},
        {32, 128, 10408, 10204, 7703, 408, 2168, 1106, 490},  {32, 256, 10402, 10248, 7698, 460, 1352, 594, 257}};
    static const int kinds[3] = {SCHED_1F1B, SCHED_ZBH1, SCHED_ZBH2};
    int bad = 0, n = 0;
    char why[300] = "";
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        for (int k = 0; k < 3; k++) {
            const int *r = rows[i];
            SimSpec sp = {.kind = kinds[k], .K = r[0], .M = r[1], .v = 1, .f = r[2], .b = r[3], .w = r[4], .comm = r[5]};
            SimResult res;
            schedule_sim(&sp, &res);
            long got = lround(res.bubble_overlap * 1e4);
            n++;
            if ((got != r[6 + k] || (k < 2 && res.bubble_overlap != res.bubble_mean)) && !bad++)
                snprintf(why, sizeof why, "%s p=%d m=%d: %.6f (synchronous %.6f), paper 0.%04d", NAME(kinds[k]), r[0],
                         r[1], res.bubble_overlap, res.bubble_mean, r[6 + k]);
            sim_result_free(&res);
        }
    EXPECT("zb-h2/paper: all 36 figures of Table 5 (1F1B, ZB-H1, ZB-H2; 12 settings) to 4 decimals, overlapped measure",
           !bad && n == 36, "%s", why);
    SimSpec sp = {.kind = SCHED_ZBH2, .K = 8, .M = 24, .v = 1, .f = 29718, .b = 29444, .w = 19927, .comm = 527};
    SimResult r;
    schedule_sim(&sp, &r);
    double work = 24.0 * (29718 + 29444 + 19927);
    EXPECT("zb-h2/paper: span - work == 7(F+I+2c-2W), makespan - work == 7(F+c), bubble 0.0698 vs 0.1003 exactly",
           r.span - work == 7.0 * (29718 + 29444 + 2 * 527 - 2 * 19927) && r.makespan - work == 7.0 * (29718 + 527) &&
               r.bubble_overlap == 142534.0 / (work + 142534) && r.bubble_mean == 211715.0 / (work + 211715),
           "span %.17g makespan %.17g overlap %.17g mean %.17g", r.span, r.makespan, r.bubble_overlap, r.bubble_mean);
    sim_result_free(&r);
}

static void fill_rand(float *x, size_t n, uint64_t seed) {
    uint64_t k = rng_key(seed, 1, 0);
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(k, i) - 1.0f;
}

// One stage, one micro-batch: full backward vs I then W; gradients and din must agree bit for bit
// (the same operations on the same numbers), and the memory counters follow the formulas.
static void test_split_backward(int ckpt, int head) {
    int L = 4, H = 6, C = 3, rows = 5, lo = 1, hi = 4;
    Stage a, b;
    MemTally ta = {0}, tb = {0};
    stage_init(&a, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = lo, .hi = hi, .head = head, .rows = rows, .slots = 2, .ckpt = ckpt, .seed = 11});
    stage_init(&b, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = lo, .hi = hi, .head = head, .rows = rows, .slots = 2, .ckpt = ckpt, .seed = 11});
    a.mem.tally = &ta;
    b.mem.tally = &tb;
    stage_enable_split(&b);
    float x[30], dout[30], dina[30], dinb[30];
    int32_t y[5] = {0, 2, 1, 1, 0};
    fill_rand(x, 30, 3);
    fill_rand(dout, 30, 4);
    Stage *st[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        stage_zero_grads(st[k]);
        for (int mb = 0; mb < 2; mb++) {  // two micro-batches accumulate
            int slot = stage_slot_acquire(st[k], mb);
            memcpy(stage_slot_input(st[k], slot), x, sizeof x);
            if (head) stage_set_labels(st[k], slot, y);
            stage_forward(st[k], slot);
        }
    }
    size_t rowsH = (size_t)rows * H * 4, lg = head ? (size_t)rows * C * 4 : 0, n = (size_t)(hi - lo);
    size_t stash = rowsH * (1 + (ckpt ? 0 : n)) + lg;
    int ok_stash = b.mem.act_bytes == 2 * stash && tb.bytes == 2 * stash && tb.inflight == 2;
    for (int mb = 0; mb < 2; mb++) stage_backward(&a, stage_slot_of(&a, mb), head ? NULL : dout, dina);
    stage_backward_input(&b, stage_slot_of(&b, 0), head ? NULL : dout, dinb);
    size_t deferred = rowsH * (n + (size_t)head + n) + lg;
    int ok_deferred = b.mem.act_bytes == stash + deferred && tb.deferred == 1 && tb.inflight == 1;  // both slots in use
    size_t peak_want = stash + rowsH * (1 + n) + lg + n * rowsH;  // mb 1 stashed, mb 0 all outputs + every dz
    int ok_peak = b.mem.peak_act_bytes == peak_want && tb.peak_bytes == peak_want;
    stage_backward_input(&b, stage_slot_of(&b, 1), head ? NULL : dout, dinb);
    stage_backward_weight(&b, stage_slot_of(&b, 0));
    stage_backward_weight(&b, stage_slot_of(&b, 1));
    int ok_free =
        b.mem.act_bytes == 0 && tb.bytes == 0 && tb.inflight == 0 && tb.deferred == 0 && tb.peak_deferred == 2;
    char name[120];
    const char *cfg = ckpt ? (head ? "checkpointing, head" : "checkpointing") : (head ? "stash, head" : "stash");
    snprintf(name, sizeof name, "model/split backward I+W == full backward: grads and din bit for bit (%s)", cfg);
    EXPECT(name, !memcmp(a.grads, b.grads, sizeof(float) * a.n_params) && !memcmp(dina, dinb, sizeof dina),
           "grads differ at %ld, din differs at %ld", close_all(b.grads, a.grads, (long)a.n_params, 0, 0), close_all(dinb, dina, 30, 0, 0));
    snprintf(name, sizeof name, "model/split backward memory: stash, I keeps inputs + dz, W frees (%s)", cfg);
    EXPECT(name, ok_stash && ok_deferred && ok_peak && ok_free,
           "stash %d deferred %d (bytes %zu want %zu) peak %d (%zu want %zu) free %d", ok_stash, ok_deferred,
           b.mem.act_bytes, stash + deferred, ok_peak, b.mem.peak_act_bytes, peak_want, ok_free);
    stage_free(&a);
    stage_free(&b);
}

// The stage calls its progress hook after every layer of every pass (forward, recompute, I, W, B).
static int ticks;
static void tick(void) { ticks++; }
static void test_progress_hook(void) {
    Stage s;
    stage_init(&s, be, (StageSpec){.layers = 4, .hidden = 4, .classes = 2, .lo = 0, .hi = 3, .head = 0, .rows = 2, .slots = 1, .ckpt = 1, .seed = 5});
    stage_enable_split(&s);
    s.hooks.progress = tick;
    float dout[8] = {1, 2, 3, 4, 5, 6, 7, 8}, din[8];
    int slot = stage_slot_acquire(&s, 0);
    stage_forward(&s, slot);
    int f = ticks;
    stage_backward_input(&s, slot, dout, din);  // recompute (3) + input pass (3)
    int i = ticks - f;
    stage_backward_weight(&s, slot);
    int w = ticks - f - i;
    slot = stage_slot_acquire(&s, 1);
    stage_forward(&s, slot);
    stage_backward(&s, slot, dout, din);         // forward (3), recompute (3) + full backward (3)
    EXPECT("model/progress hook after every layer: F 3, I 3+3 (recompute), W 3, F+B 9", f == 3 && i == 6 && w == 3 && ticks == 21,
           "F %d I %d W %d total %d", f, i, w, ticks);
    stage_free(&s);
}

// Under mpiexec -n 2 (tests/t_schedules.sh): a 1 MiB message moves while its sender computes, as
// long as the sender calls comm_poll_sends between pieces of work (the executor does it between
// layers). Without it, MPICH moves a message this large only once the sender enters MPI again.
static void test_progress(void) {
    comm_init(NULL, NULL);
    Comm c;
    comm_pipeline(&c, be);
    size_t n = 1 << 18;
    float *buf = calloc(n, sizeof(float));
    double took = 0;
    comm_barrier(MPI_COMM_WORLD);
    if (c.rank == 0) {
        usleep(20000);  // the receiver is waiting
        double t_send = now_sec();
        comm_send(&c, buf, n, 1, 5);
        while (now_sec() - t_send < 0.4) {  // "compute" for 400 ms, polling every millisecond
            double t = now_sec();
            while (now_sec() - t < 1e-3) {}
            comm_poll_sends();
        }
        comm_wait_sends(&c);
    } else {
        double t0 = now_sec();
        comm_recv(&c, buf, n, 0, 5);
        took = now_sec() - t0 - 0.02;
    }
    double v[1] = {took};
    comm_allreduce_max_double(v, 1, MPI_COMM_WORLD);
    if (c.rank == 0)
        EXPECT("comms/a 1 MiB send completes while its sender computes and polls (< 150 ms of a 400 ms compute)", v[0] < 0.15,
               "the receiver waited %.1f ms", v[0] * 1e3);
    free(buf);
    comm_finalize();
}

// Looped BFS (PyTorch's ScheduleLoopedBFS): PyTorch's order on a small case (every micro-batch
// through chunk 0, then chunk 1; the backwards from the last chunk, each chunk's micro-batches in
// reverse), the formula exact for any costs from M = K on and short of it below, and GPipe's memory:
// every micro-batch of every chunk in flight at the peak.
static void test_looped_bfs(void) {
    const char *want = "F0.0 F0.1 F0.2 F1.0 F1.1 F1.2 B1.2 B1.1 B1.0 B0.2 B0.1 B0.0";
    int order_bad = 0;
    char got[256] = "";
    for (int s = 0; s < 2; s++) {
        ActionList l = {0};
        schedule_build(SCHED_LOOPED_BFS, NULL, 2, 3, 2, s, &l);
        got[0] = 0;
        for (int i = 0; i < l.n; i++)
            if (action_is_compute(l.a[i].kind)) {
                size_t n = strlen(got);
                snprintf(got + n, sizeof got - n, "%s%s%d.%d", n ? " " : "", action_names[l.a[i].kind], l.a[i].chunk, l.a[i].mb);
            }
        order_bad += strcmp(got, want) != 0;
        action_list_free(&l);
    }
    EXPECT("looped-bfs/PyTorch's order K=2 M=3 v=2, every rank (F<chunk>.<mb>)", !order_bad, "got  %s\n     want %s", got, want);
    double costs[][3] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 3}};
    int bad = 0, below = 0, peak_bad = 0, n = 0;
    char why[300] = "";
    for (size_t c = 0; c < sizeof costs / sizeof *costs; c++)
        for (int K = 2; K <= 6; K++)
            for (int v = 2; v <= 3; v++)
                for (int M = 1; M <= 16; M++) {
                    SimSpec sp = {.kind = SCHED_LOOPED_BFS, .K = K, .M = M, .v = v, .f = costs[c][0], .b = costs[c][1], .w = costs[c][2]};
                    SimResult r;
                    schedule_sim(&sp, &r);
                    double f = schedule_bubble_formula(SCHED_LOOPED_BFS, K, M, v);
                    n++;
                    if (M >= K && r.bubble_mean != f && !bad++)
                        snprintf(why, sizeof why, "F=%g I=%g W=%g K=%d M=%d v=%d: simulated %.17g formula %.17g", costs[c][0],
                                 costs[c][1], costs[c][2], K, M, v, r.bubble_mean, f);
                    below += M < K && r.bubble_mean > f;
                    for (int s = 0; s < K; s++) peak_bad += r.peak_inflight[s] != v * M;
                    sim_result_free(&r);
                }
    EXPECT("looped-bfs/simulated bubble == (K-1)/(v*M+K-1) exactly for M >= K, any F:B (4 cost ratios), and above it for M < K",
           !bad && below == 4 * 2 * (1 + 2 + 3 + 4 + 5), "%s; %d cases below K above the formula", why, below);
    EXPECT("looped-bfs/peak in-flight v*M chunk passes on every rank (GPipe's memory over the virtual stages)", !peak_bad && n > 0,
           "%d ranks off", peak_bad);
    EXPECT("looped-bfs/checks: v >= 2 (any M), not with 1 chunk",
           !schedule_check(SCHED_LOOPED_BFS, 4, 1, 2) && !schedule_check(SCHED_LOOPED_BFS, 4, 7, 3) &&
               schedule_check(SCHED_LOOPED_BFS, 4, 8, 1) && schedule_splits_backward(SCHED_LOOPED_BFS, NULL) == 0 &&
               schedule_chunk_order(SCHED_LOOPED_BFS, NULL) == CHUNKS_LOOP && schedule_chunks(SCHED_LOOPED_BFS, 3, NULL) == 3,
           "wrong verdicts");
}

// Kinds as a table: the option's choices are the table's names; every formula equals the simulated
// bubble wherever its row says it holds (for F = I = W, and for unequal costs where it claims them);
// a kind out of range stops the run rather than borrowing another kind's facts.
static void test_table(void) {
    char names[256] = "";
    for (int k = 0; k < SCHED_KINDS; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? "|" : "", NAME(k));
    EXPECT("table/SCHED_NAMES (and so SCHED_CHOICES, the --schedule choices) are the rows' names, in SCHED_* order",
           !strcmp(names, SCHED_NAMES) && !strncmp(SCHED_NAMES, SCHED_CHOICES, strlen(SCHED_CHOICES)) &&
               !strcmp(SCHED_NAMES + strlen(SCHED_CHOICES), "|file") && !strcmp(NAME(SCHED_FILE), "file"),
           "rows '%s', SCHED_NAMES '%s'", names, SCHED_NAMES);
    int rows_bad = 0;
    char why[300] = "";
    for (int k = 0; k < SCHED_KINDS; k++) {
        const ScheduleKind *r = schedule_kind(k);
        int one = -1, other = -1;
        for (int j = 0; j < SCHED_KINDS; j++) {
            if (r->one_chunk && !strcmp(r->one_chunk, NAME(j))) one = j;
            if (r->least_m_else && !strcmp(r->least_m_else, NAME(j))) other = j;
        }
        if ((r->chunks == CHUNKS_OPTION && (r->least_chunks < 2 || one < 0 || schedule_chunks(one, 2, NULL) != 1)) ||
            (r->least_m > 1 && (!r->least_m_rule || other < 0 || schedule_check(other, 4, 4 * r->least_m - 1, schedule_chunks(other, 2, NULL)))) ||
            (r->chunks == CHUNKS_OF_LISTS && (r->generate || k != SCHED_FILE)) || (r->searched && !r->generate) ||
            (!r->bubble && (r->holds.uniform || r->holds.m_per_k || r->holds.whole_groups)))
            if (!rows_bad++) snprintf(why, sizeof why, "row %s", r->name);
    }
    EXPECT("table/each row's fixes name kinds that run there (one chunk, too few micro-batches); only a file's facts are its lists'",
           !rows_bad, "%s", why);
    // the formulas, generically: costs F = I = W, then 1, 2, 1 (B = 3, unequal), K 1..8, M 1..24, v 2..3
    int checked = 0, bad = 0, claimed = 0;
    double costs[2][3] = {{1, 1, 1}, {1, 2, 1}};
    for (int k = 0; k < SCHED_KINDS; k++)
        for (int c = 0; c < 2; c++)
            for (int K = 1; K <= 8; K++)
                for (int M = 1; M <= 24; M++)
                    for (int v = 2; v <= 3; v++) {
                        if (!schedule_kind(k)->generate) continue;
                        int vv = schedule_chunks(k, v, NULL);
                        if ((vv != v && v > 2) || schedule_check(k, K, M, vv)) continue;
                        claimed += c == 0 && K > 1 && schedule_kind(k)->bubble && !schedule_bubble_holds(k, K, M, 1);
                        if (!schedule_bubble_holds(k, K, M, c == 0)) continue;
                        SimSpec sp = {.kind = k, .K = K, .M = M, .v = vv, .f = costs[c][0], .b = costs[c][1], .w = costs[c][2]};
                        SimResult r;
                        schedule_sim(&sp, &r);
                        double f = schedule_bubble_formula(k, K, M, vv);
                        checked++;
                        if (r.bubble_mean != f && !bad++)
                            snprintf(why, sizeof why, "%s F=%g I=%g W=%g K=%d M=%d v=%d: simulated %.17g formula %.17g", NAME(k),
                                     costs[c][0], costs[c][1], costs[c][2], K, M, vv, r.bubble_mean, f);
                        sim_result_free(&r);
                    }
    char name[160];
    snprintf(name, sizeof name, "table/every formula equals the simulated bubble exactly where its row says it holds (%d cases)", checked);
    EXPECT(name, !bad && checked > 1000 && claimed > 0, "%s", why);
    EXPECT("table/zb-auto and a file have no formula (NaN), and say so", isnan(schedule_bubble_formula(SCHED_ZBAUTO, 4, 8, 1)) &&
           isnan(schedule_bubble_formula(SCHED_FILE, 4, 8, 1)) && !schedule_bubble_holds(SCHED_ZBAUTO, 4, 8, 1), "a number");
    // a kind out of range: the run stops naming it (a child process, as fatal exits)
    int fd[2];
    char want[64];
    snprintf(want, sizeof want, "unknown schedule kind %d", SCHED_KINDS);
    if (pipe(fd) == 0) {
        char err[300] = "";
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fd[1], 2);
            close(fd[0]);
            printf("%g\n", schedule_bubble_formula(SCHED_KINDS, 4, 8, 1));
            _exit(0);
        }
        close(fd[1]);
        ssize_t got = read(fd[0], err, sizeof err - 1);
        err[got > 0 ? got : 0] = 0;
        close(fd[0]);
        int st = 0;
        waitpid(pid, &st, 0);
        EXPECT("table/an unknown kind is an error (never 1f1b's formula): exit 1 naming it",
               WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(err, want), "status %d: %s", st, err);
    }
}

// V-Half and V-Min against their authors' construction (sail-sg/zero-bubble-pipeline-parallelism's
// zbv_greedy.py, run for these cases): each rank's order for K=2, M=4 (F<chunk>, I<chunk>, W<chunk> .mb);
// for more (K, M) the longest rank span at unit chunk costs (their max_time, in chunk passes) and the
// most chunk activations a rank holds from F to W (their memory); both any M and deadlock-free (the sweep).
static void test_v_half_min(void) {
    static const char *order[2][2] = {
        {"F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 I0.0 I1.1 W1.1 F1.2 W0.0 F0.3 I0.1 I1.2 W1.2 F1.3 I1.3 I0.2 W1.3 I0.3 "
         "W0.1 W0.2 W0.3",
         "F0.0 F1.0 F0.1 F1.1 I1.0 W1.0 I0.0 W0.0 F0.2 F1.2 I1.1 I0.1 W1.1 F0.3 W0.1 F1.3 I1.2 I0.2 I1.3 I0.3 "
         "W1.2 W1.3 W0.2 W0.3"},
        {"F0.0 F0.1 F1.0 I1.0 W1.0 I0.0 W0.0 F1.1 I1.1 W1.1 F0.2 I0.1 W0.1 F1.2 I1.2 W1.2 F0.3 I0.2 W0.2 F1.3 "
         "I1.3 W1.3 I0.3 W0.3",
         "F0.0 F1.0 I1.0 I0.0 F0.1 F1.1 W1.0 W0.0 I1.1 I0.1 F0.2 F1.2 W1.1 W0.1 I1.2 I0.2 F0.3 F1.3 W1.2 W0.2 "
         "I1.3 I0.3 W1.3 W0.3"}};
    static const int paper[][5] = {  // v-min (0) or v-half (1), K, M, their max_time, their memory
        {1, 2, 8, 49, 4}, {1, 3, 9, 59, 4}, {1, 4, 8, 53, 6}, {1, 4, 16, 101, 6}, {1, 6, 12, 83, 8}, {1, 8, 24, 161, 10},
        {0, 2, 8, 51, 4}, {0, 3, 9, 59, 4}, {0, 4, 8, 59, 4}, {0, 4, 16, 107, 4}, {0, 6, 12, 89, 6}, {0, 8, 24, 171, 8}};
    int bad = 0;
    char got[512], why[700] = "";
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 2; s++) {
            ActionList l = {0};
            schedule_build(h ? SCHED_VMIN : SCHED_VHALF, NULL, 2, 4, 2, s, &l);
            size_t k = 0;
            got[0] = 0;
            for (int i = 0; i < l.n; i++) {
                const Action *a = &l.a[i];
                if (!action_is_compute(a->kind)) continue;
                k += (size_t)snprintf(got + k, sizeof got - k, "%s%s%d.%d", k ? " " : "", action_names[a->kind], a->chunk,
                                      a->mb);
            }
            if (strcmp(got, order[h][s]) && !bad++)
                snprintf(why, sizeof why, "%s rank %d:\n got  %s\n want %s", h ? "v-min" : "v-half", s, got, order[h][s]);
            action_list_free(&l);
        }
    EXPECT("v-half, v-min/each rank's order at K=2 M=4 is their authors' (zbv_greedy.py)", !bad, "%s", why);
    bad = 0;
    for (size_t c = 0; c < sizeof paper / sizeof *paper; c++) {
        int kind = paper[c][0] ? SCHED_VHALF : SCHED_VMIN, K = paper[c][1], M = paper[c][2], most = 0;
        SimSpec sp = {.kind = kind, .K = K, .M = M, .v = 2, .f = 1, .b = 1, .w = 1, .slices = 1};
        SimResult r;
        schedule_sim(&sp, &r);
        for (int s = 0; s < K; s++)
            for (int i = 0, now = 0; i < r.n_slices[s]; i++) {
                now += r.slices[s][i].kind == ACT_FORWARD ? 1 : r.slices[s][i].kind == ACT_BACKWARD_WEIGHT ? -1 : 0;
                most = now > most ? now : most;
            }
        if ((2 * r.span != paper[c][3] || most != paper[c][4] || r.deadlock) && !bad++)
            snprintf(why, sizeof why, "%s K=%d M=%d: span %g chunk passes, memory %d; theirs %d, %d", NAME(kind), K, M,
                     2 * r.span, most, paper[c][3], paper[c][4]);
        sim_result_free(&r);
    }
    EXPECT("v-half, v-min/their authors' span and memory (chunk passes) for 12 (K, M) up to K=8 M=24", !bad, "%s", why);
    bad = 0;  // the published memory (their README's table, in micro-batches of a stage): 1F1B p, V-Half
    // (p+2)//2, V-Min (p+4)//3, from M = 2p on (below, no schedule holds more than M)
    for (int K = 2; K <= 32; K++)
        for (int M = 2 * K; M <= 4 * K; M += K)
            for (int c = 0; c < 3; c++) {
                int kind = c == 0 ? SCHED_1F1B : c == 1 ? SCHED_VHALF : SCHED_VMIN, v = c ? 2 : 1, most = 0;
                int want = c == 0 ? K : c == 1 ? (K + 2) / 2 : (K + 4) / 3;
                SimSpec sp = {.kind = kind, .K = K, .M = M, .v = v, .f = 1, .b = 1, .w = 1};
                SimResult r;
                schedule_sim(&sp, &r);
                for (int s = 0; s < K; s++) most = r.peak_held[s] > most ? r.peak_held[s] : most;
                if (most != want * v && !bad++)
                    snprintf(why, sizeof why, "%s K=%d M=%d: %d chunk passes held, published %d micro-batches",
                             NAME(kind), K, M, most, want);
                sim_result_free(&r);
            }
    EXPECT("v-half, v-min/their peak memory is the published (p+2)//2 and (p+4)//3 against 1F1B's p, p = 2..32",
           !bad, "%s", why);
    EXPECT("v-half, v-min/two chunks in a V, split backwards, any M",
           schedule_chunks(SCHED_VHALF, 3, NULL) == 2 && schedule_chunk_order(SCHED_VMIN, NULL) == CHUNKS_V &&
               schedule_splits_backward(SCHED_VHALF, NULL) && !schedule_check(SCHED_VMIN, 4, 1, 2) &&
               schedule_check(SCHED_VHALF, 4, 8, 1),
           "wrong facts");
}

// schedule_parse_list: the one parser of bubble's and plan's --schedule lists.
static void test_parse_list(void) {
    int k[16], n;
    char why[256] = "";
    n = schedule_parse_list("all", k, 16, why, sizeof why);
    EXPECT("schedules/list: all is every built-in kind, in order, without zb-auto (a search: asked by name)",
           n == SCHED_ZBAUTO && k[0] == SCHED_NAIVE && k[n - 1] == SCHED_VMIN, "n %d", n);
    n = schedule_parse_list("zb-auto", k, 16, why, sizeof why);
    EXPECT("schedules/list: zb-auto by name", n == 1 && k[0] == SCHED_ZBAUTO, "n %d", n);
    n = schedule_parse_list("zb-h1,gpipe", k, 16, why, sizeof why);
    EXPECT("schedules/list: names in the order given", n == 2 && k[0] == SCHED_ZBH1 && k[1] == SCHED_GPIPE, "n %d", n);
    const char *bad[][2] = {{"", "--schedule is empty: use all or one of naive|"},
                            {"gpipe,nope", "--schedule 'gpipe,nope' is not 'all' or a list of naive|"},
                            {"1f1b,1f1b", "--schedule '1f1b,1f1b' names a schedule twice: list each once"},
                            {"1f1b,", "--schedule '1f1b,' ends with a comma: drop it"},
                            {"file", "--schedule 'file' is not 'all' or a list of"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = 0;
        n = schedule_parse_list(bad[i][0], k, 16, why, sizeof why);
        char name[96];
        snprintf(name, sizeof name, "schedules/list: '%s' is refused in one line", bad[i][0]);
        EXPECT(name, n == -1 && strstr(why, bad[i][1]) == why, "n %d, why '%s'", n, why);
    }
    n = schedule_parse_list("gpipe,1f1b", k, 1, why, sizeof why);
    EXPECT("schedules/list: more names than room is refused", n == -1, "n %d", n);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--mpi-progress")) { test_progress(); return unit_failures ? 1 : 0; }
    test_sweep();
    test_interleaved_formula();
    test_zbh1();
    test_interleaved_order();
    test_interleaved_any_m();
    test_v_schedules();
    test_zbh2();
    test_paper_table();
    test_looped_bfs();
    test_v_half_min();
    test_table();
    test_parse_list();
    for (int ckpt = 0; ckpt < 2; ckpt++)
        for (int head = 0; head < 2; head++) test_split_backward(ckpt, head);
    test_progress_hook();
    return unit_failures ? 1 : 0;
}
