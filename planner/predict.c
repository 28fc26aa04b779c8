// planner/predict.c: a layout's step predicted from a cost profile (planner/predict.h): each rank's
// passes priced per layer (cost_layer), the schedule simulated with them and the messages between
// ranks, then each rank's tail after its action list (the exposed collectives, the optimizer), and a
// step's fixed cost. The memory per rank is memory_layout's, the one reckoning train checks itself by.
#include <math.h>
#include <string.h>
#include "base/ops.h"
#include "base/util.h"
#include "model.h"
#include "axes/ddp.h"
#include "planner/memory.h"
#include "train/plan.h"
#include "planner/predict.h"

Degrees layout_degrees(const Layout *l) {
    return (Degrees){.pp = l->pp > 1 ? l->pp : 1,
                     .dp = l->dp > 1 ? l->dp : 1,
                     .tp = l->tp > 1 ? l->tp : 1,
                     .zero = l->dp > 1 ? l->zero : 0};
}

void layout_apply(const Layout *l, TrainConfig *c, Degrees *d) {
    *d = layout_degrees(l);
    c->schedule = l->pp > 1 ? l->schedule : c->schedule;
    if (l->pp > 1 && schedule_kind(l->schedule)->chunks == CHUNKS_OPTION) c->virtual_stages = l->v;
    c->micro_batches = l->pp > 1 ? l->M : 1;
    c->checkpoint_activations = l->pp > 1 && l->ckpt;
    c->precision = l->precision;
    c->zero = d->zero;
    c->grad_accum = 1;
    c->partition[0] = 0;
    c->schedule_file[0] = 0;
}

static void add(char *out, size_t n, const char *fmt, long long v) {
    size_t k = strlen(out);
    if (k < n) snprintf(out + k, n - k, fmt, v);
}

void layout_command(const Layout *l, const TrainConfig *c, const char *config, int model_flags, char *out, size_t n) {
    char name[32];
    snprintf(out, n, "mpiexec -n %d ./micropp train", l->pp * l->dp * l->tp);
    if (config && config[0]) snprintf(out + strlen(out), n - strlen(out), " --config %s", config);
    if (model_flags) {
        add(out, n, " --layers %lld", (long long)c->layers);
        add(out, n, " --hidden %lld", (long long)c->hidden);
        if (c->inputs && c->inputs != c->hidden) add(out, n, " --inputs %lld", (long long)c->inputs);
        add(out, n, " --classes %lld", (long long)c->classes);
        add(out, n, " --batch %lld", (long long)c->batch);
        snprintf(out + strlen(out), n - strlen(out), " --optimizer %s",
                 choice_name(OPTIM_CHOICES, c->optimizer, name, sizeof name));
    }
    const char *mode = l->pp > 1 ? (l->dp > 1 ? "hybrid" : "pp") : (l->dp > 1 ? "ddp" : "monolith");
    snprintf(out + strlen(out), n - strlen(out), " --mode %s", mode);
    if (l->pp > 1 && l->dp > 1) {
        add(out, n, " --pp %lld", l->pp);
        add(out, n, " --dp %lld", l->dp);
    }
    if (l->pp > 1) {
        snprintf(out + strlen(out), n - strlen(out), " --schedule %s",
                 choice_name(SCHED_NAMES, l->schedule, name, sizeof name));
        if (schedule_kind(l->schedule)->chunks == CHUNKS_OPTION) add(out, n, " --virtual-stages %lld", l->v);
        add(out, n, " --micro-batches %lld", l->M);
        if (l->ckpt) snprintf(out + strlen(out), n - strlen(out), " --checkpoint-activations");
    }
    if (l->tp > 1) add(out, n, " --tp %lld", l->tp);
    if (l->dp > 1 && l->zero) add(out, n, " --zero %lld", l->zero);
    snprintf(out + strlen(out), n - strlen(out), " --precision %s",
             choice_name(PRECISION_CHOICES, l->precision, name, sizeof name));
}

// One virtual stage's passes at `rows` rows: F (with the first stage's input rows), I, W, and the
// full backward B; what checkpointing recomputes (a forward) goes into I and B. With --tp each pass
// of a split layer is its slice (tp_layer) and the group's all-reduces are in it: after a pair's row
// layer in F (and the recompute), after a column layer's input gradient in I and B (not the model's
// first layer's: it computes none). missing: the profile has no all-reduce of T ranks.
typedef struct { double f, i, w, b, tp_s; int missing; } Passes;

// The tensor-parallel group's all-reduce algorithm, as plan.c's rule_tp_allreduce picks it: shm where
// the group shares a node and the buffers are on the host (a calibration: this machine, where the
// profile measured shm), else MPI's (a machine file's links stand for every algorithm).
static int tp_algo(const Profile *pf, int T) {
    return pf->calibrated && T <= COST_MAX_D && pf->coll[ALLREDUCE_SHM][COLL_ALLREDUCE][T].n ? ALLREDUCE_SHM
                                                                                              : ALLREDUCE_MPI;
}

// One all-reduce of `floats` over the tensor-parallel group of T ranks (one node: the search keeps T
// within a node); -1 when a calibration did not measure it.
static double tp_allreduce_s(const Profile *pf, int T, double floats) {
    int algo = tp_algo(pf, T);
    if (pf->calibrated && (T > COST_MAX_D || !pf->coll[algo][COLL_ALLREDUCE][T].n)) return -1;
    return cost_collective(pf, COLL_ALLREDUCE, algo, T, floats * 4, 1);
}

// One pass of a layer of kind tp_kind (TP_FULL, TP_COL, TP_ROW) over T ranks: a split layer's gemm
// is rows x in x out / T. A calibration measured whole layers by rows, so it is priced as the whole
// layer at rows / T (the same FLOPs); a machine file's roofline takes the slice's own widths.
static double tp_layer(const Profile *pf, int kind, int pass, int prec, double rows, double in, double out, int T,
                       int tp_kind) {
    if (T == 1 || tp_kind == TP_FULL) return cost_layer(pf, kind, pass, prec, rows, in, out);
    if (pf->calibrated) return cost_layer(pf, kind, pass, prec, rows / T, in, out);
    return tp_kind == TP_COL ? cost_layer(pf, kind, pass, prec, rows, in, out / T)
                             : cost_layer(pf, kind, pass, prec, rows, in / T, out);
}

static Passes vstage_passes(const Profile *pf, const TrainConfig *c, const Plan *p, int vs, double rows) {
    Passes q = {0};
    double H = (double)c->hidden, in = (double)p->inputs, C = (double)c->classes, ar_f = 0, ar_b = 0;
    int prec = c->precision, T = p->T, n = plan_layers(p, vs), ckpt = p->pipe.ckpt;
    for (int g = p->lo[vs]; g < p->lo[vs + 1]; g++) {
        int kind = g == 0 ? LAYER_FIRST : LAYER_MID, tk = T > 1 ? tp_layer_kind(T, n, g - p->lo[vs]) : TP_FULL;
        double fan_in = g == 0 ? in : H;
        q.f += tp_layer(pf, kind, PASS_F, prec, rows, fan_in, H, T, tk);
        q.i += tp_layer(pf, kind, PASS_I, prec, rows, fan_in, H, T, tk);
        q.w += tp_layer(pf, kind, PASS_W, prec, rows, fan_in, H, T, tk);
        q.b += tp_layer(pf, kind, PASS_B, prec, rows, fan_in, H, T, tk);
        double af = tk == TP_ROW ? tp_allreduce_s(pf, T, rows * H) : 0;
        double ab = tk == TP_COL && g > 0 ? tp_allreduce_s(pf, T, rows * fan_in) : 0;
        q.missing |= af < 0 || ab < 0;
        ar_f += af;
        ar_b += ab;
    }
    if (vs == p->S - 1) {
        q.f += cost_layer(pf, LAYER_HEAD, PASS_F, prec, rows, H, C);
        q.i += cost_layer(pf, LAYER_HEAD, PASS_I, prec, rows, H, C);
        q.w += cost_layer(pf, LAYER_HEAD, PASS_W, prec, rows, H, C);
        q.b += cost_layer(pf, LAYER_HEAD, PASS_B, prec, rows, H, C);
    }
    q.f += ar_f;
    q.i += ar_b;
    q.b += ar_b;
    if (ckpt) { q.i += q.f; q.b += q.f; }  // (the recompute repeats the forward's all-reduces)
    q.tp_s = ar_f * (ckpt ? 2 : 1) + ar_b;
    if (p->lo[vs] == 0) q.f += pf->data_s_per_value * rows * in;
    return q;
}

// The data-parallel algorithm train would run: the one asked for, or auto's (shm on one node where
// the profile measured the collectives the ZeRO level runs there, as plan.c's rule_allreduce, else MPI's).
static int dp_algo(const Profile *pf, const Plan *p) {
    int D = p->D;
    if (p->data.algo != ALLREDUCE_AUTO) return p->data.algo;
    if (!pf->calibrated || D > COST_MAX_D) return ALLREDUCE_MPI;
    int measured =
        p->data.zero ? pf->coll[ALLREDUCE_SHM][COLL_REDUCE_SCATTER][D].n && pf->coll[ALLREDUCE_SHM][COLL_ALLGATHER][D].n
                     : pf->coll[ALLREDUCE_SHM][COLL_ALLREDUCE][D].n;
    return measured ? ALLREDUCE_SHM : ALLREDUCE_MPI;
}

// A collective op over `bytes` in `pieces` equal collectives; -1 when the profile lacks it.
static double coll(const Profile *pf, int op, int algo, int D, double bytes, double pieces, int intra) {
    if (pf->calibrated && (D > COST_MAX_D || !pf->coll[algo][op][D].n)) return -1;
    return pieces * cost_collective(pf, op, algo, D, bytes / pieces, intra);
}

// A rank's data-parallel traffic: its parameters' bytes, the algorithm, whether its dp group shares a
// node (tp innermost: a group of D replicas spans D x T adjacent ranks), and its buckets: ddp's and
// ZeRO-1's by --bucket-mb; ZeRO-2's and 3's whole layers up to --bucket-mb (a larger layer alone).
typedef struct { double params, bytes, pieces, zpieces; int algo, intra; } DpSync;

static DpSync dp_sync(const Profile *pf, const TrainConfig *c, const Plan *p, int stage) {
    DpSync d = {0};
    for (int k = 0; k < p->V; k++) d.params += plan_vstage_params(c, p, plan_vstage(p, stage, k));
    d.algo = dp_algo(pf, p);
    d.intra = pf->calibrated || p->D * p->T <= pf->devices_per_node;
    d.bytes = d.params * 4;
    double bucket = p->data.bucket_mb * 1024 * 1024, layers = (double)p->lo[p->S] / p->K + 1;  // (+1: the head's)
    d.pieces = p->data.sync == SYNC_NAIVE ? 2 * layers : ceil(d.bytes / fmax(bucket, 4));
    d.zpieces = ceil(d.bytes / fmax(bucket, d.bytes / layers));
    return d;
}

// ZeRO-3's all-gathers around one pass of `compute` seconds over a rank's weights: the first bucket
// waited for, the rest prefetched one ahead behind the pass's compute (the overlap share hidden).
// The exposed seconds, or -1 when the profile lacks the all-gather.
static double zero3_gather(const Profile *pf, const Plan *p, const DpSync *d, double compute) {
    double all = coll(pf, COLL_ALLGATHER, d->algo, p->D, d->bytes, d->zpieces, d->intra);
    if (all < 0) return -1;
    double first = all / d->zpieces, rest = all - first, ov = fmin(fmax(cost_overlap(pf, d->algo), 0), 1);
    return first + rest - ov * fmin(rest, compute);
}

// What rank `stage` does after its action list (comm, opt): the part of its gradient sync not hidden
// behind the backward and the all-gather after the update (ZeRO-1 and 2), the optimizer over its
// parameters or its shard. ddp and ZeRO-1 sync once, behind the last backward (`last` seconds);
// ZeRO-2 and 3 reduce-scatter after each of the step's `backwards` backward passes, behind the
// backward compute that follows (`all` seconds: the step's). -1 when the profile has no collective of D ranks.
typedef struct { double comm, opt; } Tail;

static int rank_tail(const Profile *pf, const TrainConfig *c, const Plan *p, int stage, double last, double all,
                     int backwards, Tail *t) {
    DpSync d = dp_sync(pf, c, p, stage);
    t->comm = 0;
    int zero = p->data.zero;
    t->opt = cost_optimizer(pf, c->optimizer, zero && p->D > 1 ? d.params / p->D : d.params);
    if (p->D == 1) return 0;
    int z2 = zero >= 2;
    double pieces = z2 ? d.zpieces : d.pieces, window = z2 ? all : last;
    double sync = coll(pf, zero ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE, d.algo, p->D, d.bytes, pieces, d.intra);
    double gather = zero == 1 || zero == 2 ? coll(pf, COLL_ALLGATHER, d.algo, p->D, d.bytes, pieces, d.intra) : 0;
    if (sync < 0 || gather < 0) return -1;
    if (z2) sync *= backwards;
    double ov = p->data.sync == SYNC_NAIVE ? 0 : fmin(fmax(cost_overlap(pf, d.algo), 0), 1);
    t->comm = sync - ov * fmin(sync, window) + gather;
    return 0;
}

// The step of a run without a pipeline (monolith, ddp): one forward and backward of its rows, ZeRO-3's
// gathers around each; the tensor-parallel all-reduces and the exposed gathers count as communication.
static int predict_flat(const Profile *pf, const TrainConfig *c, const Plan *p, Prediction *out) {
    Passes q = vstage_passes(pf, c, p, 0, p->rows);
    Tail t;
    double gather = 0;
    if (p->data.zero == 3) {
        DpSync d = dp_sync(pf, c, p, 0);
        double f = zero3_gather(pf, p, &d, q.f), b = zero3_gather(pf, p, &d, q.b);
        gather = f < 0 || b < 0 ? -1 : f + b;
    }
    if (q.missing || gather < 0 || rank_tail(pf, c, p, 0, q.b, q.b, 1, &t)) return -1;
    out->compute_s = q.f + q.b + t.opt - q.tp_s;
    out->comm_s = t.comm + q.tp_s + gather + pf->step_fixed_s;
    out->step_s = out->compute_s + out->comm_s;
    return 0;
}

// Rank s's passes per micro-batch over its chunks into f, b, w (the simulator's), and into x the
// communication inside them: the tensor-parallel all-reduces, ZeRO-3's exposed gathers around each
// forward, recompute and backward. -1 when the profile lacks a collective.
static int stage_costs(const Profile *pf, const TrainConfig *c, const Plan *p, int s, double *f, double *b, double *w,
                       double *x) {
    int split = schedule_splits_backward(p->schedule, NULL), z3 = p->data.zero == 3;
    DpSync d = z3 ? dp_sync(pf, c, p, s) : (DpSync){0};
    d.bytes /= p->V;  // (a chunk's share of the rank's weights and buckets)
    d.zpieces = fmax(1, round(d.zpieces / p->V));
    for (int k = 0; k < p->V; k++) {
        Passes q = vstage_passes(pf, c, p, plan_vstage(p, s, k), p->rows);
        double bw = split ? q.i : fmax(q.b - q.w, 0.1 * q.b), gf = 0, gb = 0;
        if (z3) {
            gf = zero3_gather(pf, p, &d, q.f);
            gb = zero3_gather(pf, p, &d, bw) + (p->pipe.ckpt ? zero3_gather(pf, p, &d, q.f) : 0);
        }
        if (q.missing || gf < 0 || gb < 0) return -1;
        *f += q.f + gf;  // (a rank's whole: the simulator gives each chunk's action 1/v of it)
        *w += q.w;
        *b += bw + gb;
        *x += q.tp_s + gf + gb;
    }
    return 0;
}

// The two simulations a pipeline's prediction needs, kept for the next layouts: the search prices
// layouts whose passes are alike (ZeRO 0 to 2, which differ only after the list) one after another,
// and a simulation is most of a layout's price. Keyed by everything the simulator reads.
typedef struct {
    int kind, K, M, v;
    double comm, *fbw;          // [3K] the stages' F, B, W
    int deadlock;
    double makespan, free_makespan, bubble, *end, *busy;  // end, busy: [K]
} SimMemo;
#define SIM_MEMOS 8
static SimMemo memos[SIM_MEMOS];
static int memo_next;

static const SimMemo *simulate(SimSpec *spec) {
    size_t K = (size_t)spec->K;
    for (int i = 0; i < SIM_MEMOS; i++) {
        const SimMemo *m = &memos[i];
        if (m->fbw && m->kind == spec->kind && m->K == spec->K && m->M == spec->M && m->v == spec->v &&
            m->comm == spec->comm && !memcmp(m->fbw, spec->stage_f, 3 * K * sizeof(double)))
            return m;
    }
    SimMemo *m = &memos[memo_next];
    memo_next = (memo_next + 1) % SIM_MEMOS;
    free(m->fbw);
    *m = (SimMemo){.kind = spec->kind, .K = spec->K, .M = spec->M, .v = spec->v, .comm = spec->comm,
                   .fbw = xmalloc(5 * K * sizeof(double))};
    memcpy(m->fbw, spec->stage_f, 3 * K * sizeof(double));  // (stage_f, _b, _w: one array, predict_pipeline's)
    m->end = m->fbw + 3 * K;
    m->busy = m->fbw + 4 * K;
    SimResult r = {0}, free_msgs = {0};
    schedule_sim(spec, &r);
    spec->comm = 0;
    spec->slices = 0;
    schedule_sim(spec, &free_msgs);
    spec->comm = m->comm;
    m->deadlock = r.deadlock || free_msgs.deadlock;
    m->makespan = r.makespan;
    m->free_makespan = free_msgs.makespan;
    m->bubble = free_msgs.bubble_mean;
    for (size_t s = 0; s < K && !m->deadlock; s++) {
        m->end[s] = r.n_slices[s] ? r.slices[s][r.n_slices[s] - 1].t1 : 0;
        m->busy[s] = r.busy[s];
    }
    sim_result_free(&r);
    sim_result_free(&free_msgs);
    return m;
}

// The pipeline's step: every rank's passes simulated against the others with the messages' cost,
// then each rank's tail after its last action; the step ends with the slowest. The bubble comes from
// the same simulation with free messages, the messages' share from the difference.
static int predict_pipeline(const Profile *pf, const TrainConfig *c, const Plan *p, Prediction *out) {
    int K = p->K, rc = 0;
    double *f = xcalloc((size_t)K * 4, sizeof(double)), *b = f + K, *w = f + 2 * K, *x = f + 3 * K;
    for (int s = 0; s < K && !rc; s++) rc = stage_costs(pf, c, p, s, &f[s], &b[s], &w[s], &x[s]);
    double H = (double)c->hidden, bytes = p->rows * H * (c->precision == PRECISION_BF16 ? 3 : 4);  // act 4, grad 2
    int intra = pf->calibrated || K * p->D * p->T <= pf->devices_per_node;
    SimSpec spec = {.kind = p->schedule, .K = K, .M = p->M, .v = p->V, .f = f[0], .b = b[0], .w = w[0],
                    .comm = cost_p2p(pf, bytes, intra), .stage_f = f, .stage_b = b, .stage_w = w, .slices = 1};
    const SimMemo *r = rc ? NULL : simulate(&spec);
    rc = rc || r->deadlock ? -1 : 0;
    double step = 0, msgs = rc ? 0 : r->makespan - r->free_makespan;
    for (int s = 0; s < K && !rc; s++) {
        double last_bw = (b[s] + w[s]) / p->M;  // the rank's last micro-batch's backward, all chunks
        Tail t;
        if (rank_tail(pf, c, p, s, last_bw, p->M * (b[s] + w[s]), p->M, &t)) rc = -1;
        else if (r->end[s] + t.comm + t.opt >= step) {
            step = r->end[s] + t.comm + t.opt;
            out->compute_s = r->busy[s] + t.opt - p->M * x[s];
            out->comm_s = msgs + t.comm + p->M * x[s] + pf->step_fixed_s;
        }
    }
    out->bubble = rc ? 0 : r->bubble;
    out->step_s = step + pf->step_fixed_s;
    free(f);
    return rc;
}

// The group size a calibration lacks a collective of: the tensor-parallel group's, else the replicas'.
static int missing_group(const Profile *pf, const Layout *l) {
    int T = l->tp;
    if (T > 1 && (T > COST_MAX_D || !pf->coll[tp_algo(pf, T)][COLL_ALLREDUCE][T].n)) return T;
    return l->dp;
}

int predict_step(const Profile *pf, const TrainConfig *c0, const Layout *l, Prediction *out, char *why, size_t n) {
    TrainConfig c = *c0;
    Degrees d;
    layout_apply(l, &c, &d);
    memset(out, 0, sizeof *out);
    why[0] = 0;
    if (!pf->has_precision[c.precision]) {
        snprintf(why, n, "the profile has no %s figures", c.precision == PRECISION_BF16 ? "bf16" : "fp32");
        return -1;
    }
    Plan *p = xmalloc(sizeof *p);
    MemLayout ml;
    int rc = memory_layout(&c, c.schedule, &d, &ml, why, n);
    if (rc == 0) {
        for (int s = 0; s < l->pp; s++)
            if (ml.need[s].total > out->memory) { out->memory = ml.need[s].total; out->worst_stage = s; }
        memory_layout_free(&ml);
        rc = plan_layout(&c, &d, p, why, n);
    }
    if (rc == 0) rc = p->pipelined ? predict_pipeline(pf, &c, p, out) : predict_flat(pf, &c, p, out);
    if (rc == 0 && !(out->step_s > 0))
        rc = -1, snprintf(why, n, "the profile prices this layout at %g s", out->step_s);
    else if (rc && !why[0])
        snprintf(why, n, "the profile '%s' has no collectives of %d ranks: calibrate on a world of %d or more "
                 "(mpiexec -n %d micropp plan --calibrate)", pf->file, missing_group(pf, l), l->pp * l->dp * l->tp,
                 l->pp * l->dp * l->tp);
    else if (rc == 0)
        out->samples_s = (double)c.batch / out->step_s;
    free(p);
    return rc;
}
