// planner/calibrate.c: `micropp plan --calibrate` (whose profile plan --auto and train --auto read):
// measures the cost model's figures on the world it was launched on, every rank busy at once, so the contention of
// a real run (ranks sharing cores and memory bandwidth) is in the numbers: one layer's F, B, I and W
// passes through model.c's own Stage at every power of two of rows up to the batch, per precision;
// the input rows, the optimizer per parameter; messages between rank pairs; the dp collectives of
// every group size and algorithm; how much of a collective hides behind compute; what a collective waits
// for in a step beyond that (calibrate_wait); a step's fixed cost.
#include <math.h>
#include <string.h>
#include "base/data.h"
#include "base/util.h"
#include "comms.h"
#include "comms/watchdog.h"  // wd_waits: whether the ranks share cores
#include "model.h"
#include "planner/calibrate.h"
#include "axes/data.h"
#include "axes/compress.h"

#define BUDGET_S 0.12        // time spent on one measured point, at least 3 repetitions
#define LAYER_BUDGET_S 0.3   // ... on one layer's passes: dozens of scheduler slices on a shared machine

// The mean of n timings: on a machine whose cores are shared (more runnable processes than cores), a
// kernel shorter than the scheduler's slice often runs whole between two preemptions, and a median
// of such timings would miss the preemptions a training step (hundreds of milliseconds) suffers in
// proportion; the mean counts them as the step will.
static double mean_of(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? s / n : 0;
}
// Every rank's figure combined: compute by the mean over the ranks, communication by the slowest.
static double over_ranks(double v, int slowest) {
    double x[1] = {v};
    if (slowest) comm_allreduce_max_double(x, 1, MPI_COMM_WORLD);
    else {
        comm_allreduce_sum_double(x, 1, MPI_COMM_WORLD);
        x[0] /= comm_world_size();
    }
    return x[0];
}
// Repetitions for a point whose first run took `once` seconds (the slowest rank's): the same on every rank.
static int reps_for(double once, double budget, int most) {
    double x = over_ranks(once, 1);
    int n = x > 0 ? (int)(budget / x) : most;
    return n < 3 ? 3 : n > most ? most : n;
}

// ---- one layer of each kind through model.c's Stage ----

typedef struct { Stage s; float *dout, *din; int layers; } Bench;

#define MID_LAYERS 8  // hidden layers timed together: their weights stream through the caches as a stage's do

// kind LAYER_MID: hidden layers 1 .. MID_LAYERS (H -> H, computing their input's gradient), timed
// together and priced per layer, so their weights do not sit in a cache as one layer's would; LAYER_FIRST:
// layer 0 (D -> H, the model's first, whose input needs no gradient); LAYER_HEAD: the head alone (H -> C).
static void bench_open(Bench *b, const TrainConfig *c, const Backend *be, int kind, int rows, int bf16) {
    int L = c->layers > 1 ? (int)c->layers : 2, H = (int)c->hidden, D = (int)(c->inputs ? c->inputs : c->hidden);
    int lo = kind == LAYER_MID ? 1 : kind == LAYER_FIRST ? 0 : L;
    b->layers = kind == LAYER_MID ? (L - 1 < MID_LAYERS ? L - 1 : MID_LAYERS) : 1;
    StageSpec sp = {.layers = L, .hidden = H, .classes = (int)c->classes, .inputs = D, .lo = lo,
                    .hi = kind == LAYER_HEAD ? L : lo + b->layers, .head = kind == LAYER_HEAD, .rows = rows, .slots = 1,
                    .bf16 = bf16, .seed = 1};
    stage_init(&b->s, be, sp);
    stage_enable_split(&b->s);
    b->dout = be->alloc(sizeof(float) * (size_t)rows * H);
    b->din = kind == LAYER_FIRST ? NULL : be->alloc(sizeof(float) * (size_t)rows * H);
    float *x = xmalloc(sizeof(float) * (size_t)rows * b->s.D);
    int32_t *y = xcalloc((size_t)rows, sizeof(int32_t));
    for (size_t i = 0; i < (size_t)rows * b->s.D; i++) x[i] = (float)((i * 7919) % 101) * 0.01f - 0.5f;
    be->fill(b->dout, 1e-3f, (size_t)rows * H);
    int slot = stage_slot_acquire(&b->s, 0);
    stage_load_input(&b->s, slot, x);
    if (kind == LAYER_HEAD) stage_set_labels(&b->s, slot, y);
    free(x);
    free(y);
}
static void bench_close(Bench *b, const Backend *be) {
    stage_free(&b->s);
    be->free(b->dout);
    if (b->din) be->free(b->din);
}

// One repetition: F, B, then F, I, W, each timed; t[PASS_*] their seconds.
static void bench_rep(Bench *b, double *t) {
    Stage *s = &b->s;
    double t0 = now_sec();
    stage_forward(s, stage_slot_acquire(s, 0));
    double t1 = now_sec();
    stage_backward(s, 0, b->dout, b->din);
    double t2 = now_sec();
    stage_forward(s, stage_slot_acquire(s, 0));
    double t3 = now_sec();
    stage_backward_input(s, 0, b->dout, b->din);
    double t4 = now_sec();
    stage_backward_weight(s, 0);
    double t5 = now_sec();
    t[PASS_F] = 0.5 * (t1 - t0 + t3 - t2);
    t[PASS_B] = t2 - t1;
    t[PASS_I] = t4 - t3;
    t[PASS_W] = t5 - t4;
}

static void measure_layer(const TrainConfig *c, const Backend *be, int kind, int rows, int bf16, double *out) {
    Bench b;
    bench_open(&b, c, be, kind, rows, bf16);
    double t[PASSES], once = now_sec();
    bench_rep(&b, t);  // warm-up: the primitives are created, the pages touched
    int n = reps_for(now_sec() - once, LAYER_BUDGET_S, 2000);
    double *v[PASSES];
    for (int q = 0; q < PASSES; q++) v[q] = xmalloc(sizeof(double) * (size_t)n);
    comm_barrier(MPI_COMM_WORLD);
    double t0 = now_sec();
    for (int r = 0; r < n; r++) {
        bench_rep(&b, t);
        for (int q = 0; q < PASSES; q++) v[q][r] = t[q];
    }
    // A rep's wall time, gaps included (the slices this rank waited for a core between two timed
    // passes), shared among the passes in proportion to their own times: what a long step sees.
    double wall = (now_sec() - t0) / n, mean[PASSES];
    for (int q = 0; q < PASSES; q++) mean[q] = mean_of(v[q], n);
    double timed = 2 * mean[PASS_F] + mean[PASS_B] + mean[PASS_I] + mean[PASS_W];
    double share = timed > 0 && wall > timed ? wall / timed : 1;
    for (int q = 0; q < PASSES; q++) {
        out[q] = over_ranks(mean[q] * share / b.layers, 0);
        free(v[q]);
    }
    bench_close(&b, be);
}

// Every layer kind at rows 1, 2, 4, ... up to the batch (the batch itself the last point), per precision.
static void calibrate_layers(const TrainConfig *c, const Backend *be, Profile *pf, int verbose) {
    int rows[COST_GRID], n = 0;
    for (long long r = 1; r < c->batch && n < COST_GRID - 1; r *= 2) rows[n++] = (int)r;
    rows[n++] = (int)c->batch;
    for (int prec = 0; prec < COST_PRECISIONS; prec++) {
        char why[256] = "";
        int ok = be->set_precision(prec, why, sizeof why) == 0;
        if (over_ranks(ok ? 0 : 1, 1) > 0) ok = 0;  // every rank alike
        pf->has_precision[prec] = ok;
        if (!ok) continue;
        for (int kind = 0; kind < LAYER_KINDS; kind++)
            for (int i = 0; i < n; i++) {
                double t[PASSES];
                measure_layer(c, be, kind, rows[i], prec == PRECISION_BF16, t);
                for (int q = 0; q < PASSES; q++) {
                    Curve *cv = &pf->layer[prec][kind][q];
                    cv->x[i] = rows[i];
                    cv->s[i] = t[q];
                    cv->n = i + 1;
                }
            }
        for (int kind = 0; kind < LAYER_KINDS; kind++)
            for (int q = 0; q < PASSES; q++) cost_monotone(&pf->layer[prec][kind][q]);
        if (verbose)
            fprintf(stderr, "# calibrate: %s layers at %d row counts (1..%d)\n", prec ? "bf16" : "fp32", n,
                    rows[n - 1]);
    }
    char why[256];
    be->set_precision(PRECISION_FP32, why, sizeof why);
}

// The first stage's input rows and the head's labels (synthetic data); the optimizer per parameter.
static void calibrate_data_and_optimizer(const TrainConfig *c, const Backend *be, Profile *pf) {
    int D = (int)(c->inputs ? c->inputs : c->hidden), rows = c->batch < 4096 ? (int)c->batch : 4096;
    Data d;
    data_open(&d, (DataSource){"synthetic", "", "", ""}, D, 1);
    data_load(&d, (int)c->classes);
    float *x = xmalloc(sizeof(float) * (size_t)rows * D);
    int32_t *y = xmalloc(sizeof(int32_t) * (size_t)rows);
    double v[30] = {0}, u[5] = {0};
    int n = 5;
    for (int r = 0; r < n; r++) {
        double t0 = now_sec();
        data_features(&d, (uint64_t)r * rows, rows, x);
        double t1 = now_sec();
        data_labels(&d, (uint64_t)r * rows, rows, y);
        v[r] = t1 - t0;
        u[r] = now_sec() - t1;
    }
    pf->data_s_per_value = over_ranks(mean_of(v, n), 0) / ((double)rows * D);  // (the first stage's)
    pf->label_s_per_value = over_ranks(mean_of(u, n), 0) / ((double)rows * D);  // (the head's)
    free(x); free(y);
    data_close(&d);
    size_t N = (size_t)1 << 22;  // 4M parameters: 64 MB of state, well past the caches
    float *p = be->alloc(N * 4), *g = be->alloc(N * 4), *m = be->alloc(N * 4), *w = be->alloc(N * 4);
    for (int opt = 0; opt < 2; opt++) {
        OptimStep o = {opt ? OPTIM_SGD : OPTIM_ADAM, 1e-3f, 0, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, 1};
        optimizer_update(be, &o, p, g, m, w, N);  // warm-up
        comm_barrier(MPI_COMM_WORLD);
        for (int r = 0; r < n; r++) {
            double t0 = now_sec();
            o.t = r + 2;
            optimizer_update(be, &o, p, g, m, w, N);
            v[r] = now_sec() - t0;
        }
        double per = over_ranks(mean_of(v, n), 0) / (double)N;
        if (opt) pf->sgd_s = per;
        else pf->adam_s = per;
    }
    be->free(p); be->free(g); be->free(m); be->free(w);
}

// PowerSGD's Gram-Schmidt (lowrank_orthogonalise) on [hidden, R] columns, R = min(64, hidden): its seconds per
// element operation, rows R (2 R + 3) a call (compress_price's ortho), plain loops in double, not BLAS.
static void calibrate_ortho(const TrainConfig *c, Profile *pf) {
    size_t rows = (size_t)c->hidden, R = rows < 64 ? rows : 64;
    float *P = xmalloc(sizeof(float) * rows * R);
    double v[5] = {0};
    int n = 5;
    for (int r = -1; r < n; r++) {
        for (size_t i = 0; i < rows * R; i++) P[i] = (float)((i * 2654435761u) % 1000) / 1000 - 0.5f;
        double t0 = now_sec();
        lowrank_orthogonalise(P, rows, R);
        if (r >= 0) v[r] = now_sec() - t0;
    }
    pf->ortho_s = over_ranks(mean_of(v, n), 0) / ((double)rows * (double)R * (2 * (double)R + 3));
    free(P);
}

// ---- communication ----

// Half the round trip of a message between rank pairs (0,1), (2,3), ... all at once, through the
// pipeline's own send and receive; an odd last rank runs gemms meanwhile (as a busy neighbour would).
static void calibrate_p2p(Comm *cm, const Backend *be, Profile *pf) {
    int rank = cm->rank, world = cm->size, peer = rank ^ 1;
    size_t most = (size_t)16 << 20;
    float *buf = be->alloc(most);
    int k = 0;
    for (size_t bytes = 8; bytes <= most; bytes *= 4, k++) {
        size_t n = bytes / 4 ? bytes / 4 : 1;
        double v[64] = {0};
        int reps = bytes >= ((size_t)1 << 20) ? 8 : 40;
        comm_barrier(MPI_COMM_WORLD);
        for (int r = -2; r < reps; r++) {
            double t0 = now_sec();
            if (peer < world) {
                if (rank & 1) { comm_recv(cm, buf, n, peer, 7); comm_send(cm, buf, n, peer, 7); }
                else { comm_send(cm, buf, n, peer, 7); comm_recv(cm, buf, n, peer, 7); }
                comm_wait_sends(cm);
            }
            if (r >= 0) v[r] = 0.5 * (now_sec() - t0);
        }
        pf->p2p.x[k] = (double)n * 4;
        pf->p2p.s[k] = over_ranks(peer < world ? mean_of(v, reps) : 0, 1);
        pf->p2p.n = k + 1;
    }
    cost_monotone(&pf->p2p);
    be->free(buf);
}

static void run_coll(Comm *cm, int op, float *x, size_t n, int algo) {
    if (op == COLL_ALLREDUCE) comm_allreduce(cm, x, n, 1.0f, algo);
    else if (op == COLL_REDUCE_SCATTER) comm_reduce_scatter(cm, x, n, 1.0f, algo);
    else comm_allgather(cm, x, n, algo);
}

// One collective of n floats, the slowest rank's mean time.
static double time_coll(Comm *cm, int op, float *x, size_t n, int algo) {
    double v[32] = {0}, once = now_sec();
    run_coll(cm, op, x, n, algo);
    int reps = reps_for(now_sec() - once, BUDGET_S, 30);
    for (int r = 0; r < reps; r++) {
        comm_barrier(MPI_COMM_WORLD);
        double t0 = now_sec();
        run_coll(cm, op, x, n, algo);
        v[r] = now_sec() - t0;
    }
    return over_ranks(mean_of(v, reps), 1);
}

// How much of a collective in flight hides behind compute, as data parallelism runs it: a bucket's
// collective started, then gemms with the progress call between them (as the backward's layer hook
// makes it), then the wait. (work + collective - together) / the shorter of the two, from -1 to 1.
static double measure_overlap(Comm *cm, const Backend *be, float *x, size_t n, int algo, double t_coll) {
    int m = 256, k = 512;
    float *a = be->alloc(sizeof(float) * (size_t)m * k), *w = be->alloc(sizeof(float) * (size_t)k * k),
          *o = be->alloc(sizeof(float) * (size_t)m * k);
    double t0 = now_sec();
    int gemms = 0;
    while (now_sec() - t0 < t_coll || gemms < 4) {
        be->gemm(0, 1, m, k, k, 1.0f, a, k, w, k, 0.0f, o, k);
        gemms++;
    }
    gemms = (int)over_ranks(gemms, 1);
    double v[3][5] = {{0}};
    for (int r = 0; r < 5; r++) {
        comm_barrier(MPI_COMM_WORLD);
        double s = now_sec();
        for (int i = 0; i < gemms; i++) be->gemm(0, 1, m, k, k, 1.0f, a, k, w, k, 0.0f, o, k);
        v[0][r] = now_sec() - s;
        comm_barrier(MPI_COMM_WORLD);
        s = now_sec();
        comm_wait(comm_allreduce_start(cm, x, n, 1.0f, algo));
        v[1][r] = now_sec() - s;
        comm_barrier(MPI_COMM_WORLD);
        s = now_sec();
        CommReq *q = comm_allreduce_start(cm, x, n, 1.0f, algo);
        for (int i = 0; i < gemms; i++) {
            be->gemm(0, 1, m, k, k, 1.0f, a, k, w, k, 0.0f, o, k);
            comm_progress();
        }
        comm_wait(q);
        v[2][r] = now_sec() - s;
    }
    double work = over_ranks(mean_of(v[0], 5), 1), coll = over_ranks(mean_of(v[1], 5), 1),
           both = over_ranks(mean_of(v[2], 5), 1), shorter = work < coll ? work : coll;
    be->free(a); be->free(w); be->free(o);
    double f = shorter > 0 ? (work + coll - both) / shorter : 0;
    return f < -1 ? -1 : f > 1 ? 1 : f;
}

// Every collective, algorithm and group size D (D divides the world; all groups at once), 4 KiB to 64 MiB.
static void calibrate_collectives(const Backend *be, Profile *pf, size_t most_bytes, int verbose) {
    int world = comm_world_size();
    for (int D = 2; D <= world && D <= COST_MAX_D; D++) {
        if (world % D) continue;
        Comm cm;
        comm_grid(&cm, be, world / D, D, PLACEMENT_REPLICAS);  // dp groups of adjacent ranks
        size_t nmax = most_bytes / 4;
        int shm = comm_shared_possible(&cm, nmax * sizeof(float));
        float *sx = shm ? comm_shared_alloc(&cm, nmax) : NULL, *px = be->alloc(nmax * sizeof(float));
        for (int algo = 0; algo < ALLREDUCE_ALGOS; algo++) {
            if (comm_algos[algo].windows && !shm) continue;
            float *x = comm_algos[algo].windows ? sx : px;
            for (int op = 0; op < COLLS; op++) {
                Curve *cv = &pf->coll[algo][op][D];
                cv->n = 0;
                for (size_t bytes = 4096; bytes <= most_bytes; bytes *= 4) {
                    cv->x[cv->n] = (double)bytes;
                    cv->s[cv->n++] = time_coll(&cm, op, x, bytes / 4, algo);
                }
                cost_monotone(cv);
            }
            if (D == world || D == 2) {  // hiding measured where a run's groups are: all ranks, or pairs
                size_t n = nmax < ((size_t)4 << 20) ? nmax : (size_t)4 << 20;
                double t = cost_curve_at(&pf->coll[algo][COLL_ALLREDUCE][D], (double)n * 4);
                pf->overlap[algo] = measure_overlap(&cm, be, x, n, algo, t);
            }
        }
        be->free(px);
        comm_free(&cm);
        if (verbose) fprintf(stderr, "# calibrate: collectives of %d ranks%s\n", D, shm ? " (mpi, ring, shm)" : "");
    }
}

// A least-squares line e = a + b x through n points, b clamped to [0, 1] and a to >= 0 (noise, not a gain).
static void fit_line(const double *x, const double *e, int n, double *a, double *b) {
    double mx = mean_of(x, n), me = mean_of(e, n), sxy = 0, sxx = 0;
    for (int i = 0; i < n; i++) sxy += (x[i] - mx) * (e[i] - me), sxx += (x[i] - mx) * (x[i] - mx);
    *b = sxx > 0 ? fmin(fmax(sxy / sxx, 0), 1) : 0;
    *a = fmax(me - *b * mx, 0);
}

#define WAIT_POINTS 4  // gemms between two all-reduces: 1, 2, 3, 4 times a unit (in a step, compute precedes each)
#define WAIT_SPAN_S 0.02   // ... the unit the fewest gemms whose 4 times take this long (at most 16): the drift is
                           // fitted over the compute between a step's meetings, not a few scheduler slices'
#define WAIT_BUDGET_S 3.0  // the rounds of all the points together: the ranks' drift is noise to average

// One round of each point: g gemms, then the all-reduce; x[i] += the gemms' seconds, e[i] += the all-reduce's
// (on this rank: from the end of its own gemms, so the wait for the group's last rank is in it).
static void wait_round(Comm *cm, const Backend *be, int algo, float *a, float *w, float *o, int rows, int H,
                       int unit, double *x, double *e) {
    for (int i = 0; i < WAIT_POINTS; i++) {
        double t0 = now_sec();
        for (int k = 0; k < unit * (i + 1); k++) be->gemm(0, 1, rows, H, H, 1.0f, a, H, w, H, 0.0f, o, H);
        double t1 = now_sec();
        comm_allreduce(cm, o, (size_t)rows * H, 1.0f, algo);
        x[i] += t1 - t0;
        e[i] += now_sec() - t1;
    }
}

// The all-reduce as a step meets it (issue 32): each rank runs 1 to 4 units of gemms of a hidden layer's
// shape (the rows the all-reduce then sums: --tp's pattern) and the all-reduce over the world, round after round
// with no barrier (the points interleaved, so a change of the machine's load hits them alike), on buffers the
// gemms have moved through the caches. A round's step is the last rank's compute and the all-reduce; the mean
// over the ranks of what each waited in the all-reduce less the calibrated all-reduce is that round's excess
// over the mean compute. The excess against the compute, a line: entry_s a collective, the drift a share of the
// compute. Needs the world's all-reduce curve (calibrate_collectives).
// Not where a node has more ranks than cores (agreed by every rank: comm_choose_hardware): there a rank's wait
// in a collective is another rank's compute on its core, which the layers' curves already hold, not a cost on
// top (measured quiet, 4 ranks on 2 cores: the term took the median |error| from 5.4% to 10.1%; 2 ranks: from
// 6.9% to 3.8%).
static void calibrate_wait(const TrainConfig *c, const Backend *be, Profile *pf, int verbose) {
    int world = comm_world_size(), H = (int)c->hidden, rows = c->batch < 256 ? (int)c->batch : 256;
    if (world > COST_MAX_D) return;
    WdWaits waits;
    wd_waits(&waits);
    if (waits.crowded) {
        pf->wait.entry_s = pf->wait.drift = 0;
        if (verbose)
            fprintf(stderr, "# calibrate: collectives as a step meets them: not priced (a node has more ranks than "
                    "cores: a rank's wait is another's compute)\n");
        return;
    }
    Comm cm;
    comm_grid(&cm, be, 1, world, PLACEMENT_REPLICAS);
    size_t n = (size_t)rows * H;
    int shm = comm_shared_possible(&cm, n * sizeof(float)), algo = shm ? ALLREDUCE_SHM : ALLREDUCE_MPI;
    float *o = shm ? comm_shared_alloc(&cm, n) : be->alloc(n * sizeof(float));
    float *a = be->alloc(n * sizeof(float)), *w = be->alloc(sizeof(float) * (size_t)H * H);
    be->fill(a, 1e-3f, n);
    be->fill(w, 1e-3f, (size_t)H * H);
    double x[WAIT_POINTS] = {0}, e[WAIT_POINTS] = {0}, once = now_sec();
    be->gemm(0, 1, rows, H, H, 1.0f, a, H, w, H, 0.0f, o, H);  // (warm-up, and the gemm's time: one unit everywhere)
    double gemm_s = over_ranks(now_sec() - once, 1);
    int unit = gemm_s > 0 ? (int)ceil(WAIT_SPAN_S / 4 / gemm_s) : 1;
    unit = unit < 1 ? 1 : unit > 16 ? 16 : unit;
    once = now_sec();
    wait_round(&cm, be, algo, a, w, o, rows, H, unit, x, e);  // (warm-up: its figures dropped below)
    int reps = reps_for(now_sec() - once, WAIT_BUDGET_S, 100);
    memset(x, 0, sizeof x), memset(e, 0, sizeof e);
    comm_barrier(MPI_COMM_WORLD);
    for (int r = 0; r < reps; r++) wait_round(&cm, be, algo, a, w, o, rows, H, unit, x, e);
    double curve = cost_curve_at(&pf->coll[algo][COLL_ALLREDUCE][world], (double)n * 4);
    for (int i = 0; i < WAIT_POINTS; i++) {
        x[i] = over_ranks(x[i] / reps, 0);
        e[i] = over_ranks(e[i] / reps, 0) - curve;
    }
    fit_line(x, e, WAIT_POINTS, &pf->wait.entry_s, &pf->wait.drift);
    be->free(a); be->free(w);
    if (!shm) be->free(o);
    comm_free(&cm);
    if (verbose)
        fprintf(stderr, "# calibrate: collectives as a step meets them: %.3f ms more each, drift %.1f%% of the "
                "compute\n", pf->wait.entry_s * 1e3, 100 * pf->wait.drift);
}

// A step's fixed cost: the barrier and the loss's all-reduce over the world.
static void calibrate_fixed(Profile *pf) {
    double v[41] = {0}, x[4] = {0};
    for (int r = -1; r < 41; r++) {
        double t0 = now_sec();
        comm_barrier(MPI_COMM_WORLD);
        comm_allreduce_sum_double(x, 4, MPI_COMM_WORLD);
        if (r >= 0) v[r] = now_sec() - t0;
    }
    pf->step_fixed_s = over_ranks(mean_of(v, 41), 1);
}

void calibrate_run(const TrainConfig *c, Profile *pf, int verbose) {
    const Backend *be = &backend_cpu;
    int world = comm_world_size();
    memset(pf, 0, sizeof *pf);
    pf->calibrated = 1;
    pf->world = world;
    pf->threads = (int)c->threads;
    pf->hidden = (int)c->hidden;
    pf->inputs = (int)(c->inputs ? c->inputs : c->hidden);
    pf->classes = (int)c->classes;
    blas_set_threads((int)c->threads);
    cpu_flush_subnormals();
    char blas[160];
    blas_describe(blas, sizeof blas);
    snprintf(pf->source, sizeof pf->source, "measured by `micropp plan --calibrate` on %d rank%s at once, %s", world,
             world == 1 ? "" : "s", blas);
    wd_phase("plan --calibrate's layer timings", 0);  // (what the watchdog's line names: --timeout bounds each wait)
    calibrate_layers(c, be, pf, verbose);
    calibrate_data_and_optimizer(c, be, pf);
    calibrate_ortho(c, pf);
    if (world > 1) {
        wd_phase("plan --calibrate's link and collective timings", 0);
        Comm cm;
        comm_grid(&cm, be, world, 1, PLACEMENT_STAGES);
        calibrate_p2p(&cm, be, pf);
        comm_free(&cm);
        double params = (double)model_param_count((int)c->layers, pf->inputs, pf->hidden, pf->classes) * 4;
        size_t most = 4096;
        while ((double)most < params && most < ((size_t)64 << 20)) most *= 4;
        calibrate_collectives(be, pf, most, verbose);
        calibrate_wait(c, be, pf, verbose);
    }
    calibrate_fixed(pf);
    if (verbose) fprintf(stderr, "# calibrate: done\n");
    wd_phase(NULL, 0);
}
