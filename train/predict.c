// train/predict.c: a layout's step predicted from a cost profile (train/predict.h): each rank's
// passes priced per layer (cost_layer), the schedule simulated with them and the messages between
// ranks, then each rank's tail after its action list (the exposed collectives, the optimizer), and a
// step's fixed cost. The memory per rank is memory_layout's, the one reckoning train checks itself by.
#include <math.h>
#include <string.h>
#include "base/ops.h"
#include "base/util.h"
#include "model.h"
#include "train/ddp.h"
#include "train/memory.h"
#include "train/plan.h"
#include "train/predict.h"

void layout_apply(const Layout *l, TrainConfig *c) {
    c->mode = l->pp > 1 ? (l->dp > 1 ? MODE_HYBRID : MODE_PP) : (l->dp > 1 ? MODE_DDP : MODE_MONOLITH);
    c->pp = l->pp;
    c->dp = l->dp;
    c->schedule = l->pp > 1 ? l->schedule : c->schedule;
    if (l->pp > 1 && l->schedule == SCHED_INTERLEAVED) c->virtual_stages = l->v;
    c->micro_batches = l->pp > 1 ? l->M : 1;
    c->checkpoint_activations = l->pp > 1 && l->ckpt;
    c->precision = l->precision;
    c->zero = l->dp > 1 ? l->zero : 0;
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
        if (l->schedule == SCHED_INTERLEAVED) add(out, n, " --virtual-stages %lld", l->v);
        add(out, n, " --micro-batches %lld", l->M);
        if (l->ckpt) snprintf(out + strlen(out), n - strlen(out), " --checkpoint-activations");
    }
    if (l->dp > 1 && l->zero) add(out, n, " --zero %lld", l->zero);
    snprintf(out + strlen(out), n - strlen(out), " --precision %s",
             choice_name(PRECISION_CHOICES, l->precision, name, sizeof name));
}

// One virtual stage's passes at `rows` rows: F (with the first stage's input rows), I, W, and the
// full backward B; what checkpointing recomputes (a forward) goes into I and B.
typedef struct { double f, i, w, b; } Passes;

static Passes vstage_passes(const Profile *pf, const TrainConfig *c, const Plan *p, int vs, double rows) {
    Passes q = {0};
    double H = (double)c->hidden, in = (double)p->inputs, C = (double)c->classes;
    int prec = c->precision;
    for (int g = p->lo[vs]; g < p->lo[vs + 1]; g++) {
        int kind = g == 0 ? LAYER_FIRST : LAYER_MID;
        double fan_in = g == 0 ? in : H;
        q.f += cost_layer(pf, kind, PASS_F, prec, rows, fan_in, H);
        q.i += cost_layer(pf, kind, PASS_I, prec, rows, fan_in, H);
        q.w += cost_layer(pf, kind, PASS_W, prec, rows, fan_in, H);
        q.b += cost_layer(pf, kind, PASS_B, prec, rows, fan_in, H);
    }
    if (vs == p->S - 1) {
        q.f += cost_layer(pf, LAYER_HEAD, PASS_F, prec, rows, H, C);
        q.i += cost_layer(pf, LAYER_HEAD, PASS_I, prec, rows, H, C);
        q.w += cost_layer(pf, LAYER_HEAD, PASS_W, prec, rows, H, C);
        q.b += cost_layer(pf, LAYER_HEAD, PASS_B, prec, rows, H, C);
    }
    if (c->checkpoint_activations) { q.i += q.f; q.b += q.f; }
    if (p->lo[vs] == 0) q.f += pf->data_s_per_value * rows * in;
    return q;
}

// The data-parallel algorithm train would run: the one asked for, or auto's (shm on one node where
// the profile measured it, else MPI's).
static int dp_algo(const Profile *pf, const TrainConfig *c, int D) {
    if (c->allreduce != ALLREDUCE_AUTO) return c->allreduce;
    return pf->calibrated && D <= COST_MAX_D && pf->coll[ALLREDUCE_SHM][COLL_ALLREDUCE][D].n ? ALLREDUCE_SHM
                                                                                              : ALLREDUCE_MPI;
}

// A collective op over `bytes` in `pieces` equal collectives; -1 when the profile lacks it.
static double coll(const Profile *pf, int op, int algo, int D, double bytes, double pieces, int intra) {
    if (pf->calibrated && (D > COST_MAX_D || !pf->coll[algo][op][D].n)) return -1;
    return pieces * cost_collective(pf, op, algo, D, bytes / pieces, intra);
}

// What rank `stage` does after its action list: the part of its gradient sync not hidden behind its
// last backward (`window` seconds) and the all-gather of ZeRO-1 (comm), the optimizer over its
// parameters or its shard (opt). -1 when the profile has no collective of D ranks.
typedef struct { double comm, opt; } Tail;

static int rank_tail(const Profile *pf, const TrainConfig *c, const Plan *p, int stage, double window, Tail *t) {
    double params = 0;
    for (int k = 0; k < p->V; k++) params += plan_vstage_params(c, p, plan_vstage(p, stage, k));
    t->comm = 0;
    t->opt = cost_optimizer(pf, c->optimizer, c->zero && p->D > 1 ? params / p->D : params);
    if (p->D == 1) return 0;
    int algo = dp_algo(pf, c, p->D), intra = pf->calibrated || p->D <= pf->devices_per_node;
    double bytes = params * 4, bucket = c->bucket_mb * 1024 * 1024;
    double layers = (double)p->lo[p->S] / p->K + 1;  // a rank's tensors: a weight and a bias per layer
    double pieces = c->ddp_sync == SYNC_NAIVE ? 2 * layers : ceil(bytes / fmax(bucket, 4));
    double sync = coll(pf, c->zero ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE, algo, p->D, bytes, pieces, intra);
    double gather = c->zero ? coll(pf, COLL_ALLGATHER, algo, p->D, bytes, pieces, intra) : 0;
    if (sync < 0 || gather < 0) return -1;
    double ov = c->ddp_sync == SYNC_NAIVE ? 0 : fmin(fmax(cost_overlap(pf, algo), 0), 1);
    t->comm = sync - ov * fmin(sync, window) + gather;
    return 0;
}

// The step of a run without a pipeline (monolith, ddp): one forward and backward of its rows.
static int predict_flat(const Profile *pf, const TrainConfig *c, const Plan *p, Prediction *out) {
    Passes q = vstage_passes(pf, c, p, 0, p->rows);
    Tail t;
    if (rank_tail(pf, c, p, 0, q.b, &t)) return -1;
    out->compute_s = q.f + q.b + t.opt;
    out->comm_s = t.comm + pf->step_fixed_s;
    out->step_s = out->compute_s + out->comm_s;
    return 0;
}

// The pipeline's step: every rank's passes simulated against the others with the messages' cost,
// then each rank's tail after its last action; the step ends with the slowest. The bubble comes from
// the same simulation with free messages, the messages' share from the difference.
static int predict_pipeline(const Profile *pf, const TrainConfig *c, const Plan *p, Prediction *out) {
    int K = p->K;
    double *f = xcalloc((size_t)K * 3, sizeof(double)), *b = f + K, *w = f + 2 * K;
    for (int s = 0; s < K; s++)
        for (int k = 0; k < p->V; k++) {
            Passes q = vstage_passes(pf, c, p, plan_vstage(p, s, k), p->rows);
            int split = schedule_splits_backward(p->schedule, NULL);
            f[s] += q.f;  // (a rank's whole: the simulator gives each chunk's action 1/v of it)
            w[s] += q.w;
            b[s] += split ? q.i : fmax(q.b - q.w, 0.1 * q.b);
        }
    double H = (double)c->hidden, bytes = p->rows * H * (c->precision == PRECISION_BF16 ? 3 : 4);  // act 4, grad 2
    int intra = pf->calibrated || K * p->D <= pf->devices_per_node;
    SimSpec spec = {.kind = p->schedule, .K = K, .M = p->M, .v = p->V, .f = f[0], .b = b[0], .w = w[0],
                    .comm = cost_p2p(pf, bytes, intra), .stage_f = f, .stage_b = b, .stage_w = w, .slices = 1};
    SimResult r = {0}, free_msgs = {0};
    schedule_sim(&spec, &r);
    spec.comm = 0;
    spec.slices = 0;
    schedule_sim(&spec, &free_msgs);
    int rc = r.deadlock || free_msgs.deadlock ? -1 : 0;
    double step = 0, msgs = r.makespan - free_msgs.makespan;
    for (int s = 0; s < K && !rc; s++) {
        double end = r.n_slices[s] ? r.slices[s][r.n_slices[s] - 1].t1 : 0;
        double last_bw = (b[s] + w[s]) / p->M;  // the rank's last micro-batch's backward, all chunks
        Tail t;
        if (rank_tail(pf, c, p, s, last_bw, &t)) rc = -1;
        else if (end + t.comm + t.opt >= step) {
            step = end + t.comm + t.opt;
            out->compute_s = r.busy[s] + t.opt;
            out->comm_s = msgs + t.comm + pf->step_fixed_s;
        }
    }
    out->bubble = free_msgs.bubble_mean;
    out->step_s = step + pf->step_fixed_s;
    sim_result_free(&r);
    sim_result_free(&free_msgs);
    free(f);
    return rc;
}

int predict_step(const Profile *pf, const TrainConfig *c0, const Layout *l, Prediction *out, char *why, size_t n) {
    TrainConfig c = *c0;
    layout_apply(l, &c);
    memset(out, 0, sizeof *out);
    why[0] = 0;
    if (!pf->has_precision[c.precision]) {
        snprintf(why, n, "the profile has no %s figures", c.precision == PRECISION_BF16 ? "bf16" : "fp32");
        return -1;
    }
    Plan *p = xmalloc(sizeof *p);
    MemLayout ml;
    int rc = memory_layout(&c, c.schedule, l->pp, l->dp, &ml, why, n);
    if (rc == 0) {
        for (int s = 0; s < l->pp; s++)
            if (ml.need[s].total > out->memory) { out->memory = ml.need[s].total; out->worst_stage = s; }
        memory_layout_free(&ml);
        rc = plan_layout(&c, l->pp, l->dp, p, why, n);
    }
    if (rc == 0) rc = p->pipelined ? predict_pipeline(pf, &c, p, out) : predict_flat(pf, &c, p, out);
    if (rc == 0 && !(out->step_s > 0))
        rc = -1, snprintf(why, n, "the profile prices this layout at %g s", out->step_s);
    else if (rc && !why[0])
        snprintf(why, n, "the profile '%s' has no collectives of %d ranks: calibrate on a world of %d or more "
                 "(mpiexec -n %d micropp plan --calibrate)", pf->file, l->dp, l->dp, l->pp * l->dp);
    else if (rc == 0)
        out->samples_s = (double)c.batch / out->step_s;
    free(p);
    return rc;
}
