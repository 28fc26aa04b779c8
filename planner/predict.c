// planner/predict.c: a layout's step predicted from a cost profile (planner/predict.h): each rank's
// passes priced per layer (cost_layer), the schedule simulated with them and the messages between
// ranks, then each rank's tail after its action list (the exposed collectives, the optimizer), and a
// step's fixed cost. The memory per rank is memory_layout's, the one reckoning train checks itself by.
#include <math.h>
#include <string.h>
#include "base/ops.h"
#include "base/util.h"
#include "model.h"
#include "axes/data.h"
#include "axes/pipeline.h"
#include "planner/memory.h"
#include "train/plan.h"
#include "planner/predict.h"
#include "axes/tensor.h"
#include "axes/compress.h"
#include "axes/data.h"
#include "axes/pipeline.h"

Degrees layout_degrees(const Layout *l) {
    return (Degrees){.pp = l->pp > 1 ? l->pp : 1,
                     .dp = l->dp > 1 ? l->dp : 1,
                     .tp = l->tp > 1 ? l->tp : 1,
                     .zero = l->dp > 1 ? l->zero : 0,
                     .ep = l->ep > 1 ? l->ep : 1};
}

void layout_apply(const Layout *l, TrainConfig *c, Degrees *d) {
    *d = layout_degrees(l);
    c->pipe.schedule = l->pp > 1 ? l->schedule : c->pipe.schedule;
    if (l->pp > 1 && schedule_kind(l->schedule)->chunks == CHUNKS_OPTION) c->pipe.virtual_stages = l->v;
    c->pipe.micro_batches = l->pp > 1 ? l->M : 1;
    c->pipe.checkpoint_activations = l->pp > 1 && l->ckpt;
    c->precision = l->precision;
    c->ddp.zero = d->zero;
    c->grid.ep = d->ep;
    c->grad_accum = 1;
    snprintf(c->pipe.partition, sizeof c->pipe.partition, "%s", l->pp > 1 ? l->partition : "");
    c->pipe.schedule_file[0] = 0;
    if (l->placement) c->ddp.placement = l->placement;
    if (l->bucket_mb > 0) c->ddp.bucket_mb = l->bucket_mb;
    if (l->compress) layout_method(l, c->ddp.compress, sizeof c->ddp.compress);
    if (l->sync_every) c->ddp.sync_every = l->sync_every;
}

const char *layout_method(const Layout *l, char *out, size_t n) {
    if (l->sync_every) snprintf(out, n, "sync-every %d", l->sync_every);
    else if (l->compress == COMPRESS_SIGN) snprintf(out, n, "sign");
    else if (l->compress)
        snprintf(out, n, "%s:%g", l->compress == COMPRESS_TOPK ? "topk" : "powersgd", l->compress_arg);
    else out[0] = 0;
    return out;
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
    if (l->pp > 1 && l->partition[0]) snprintf(out + strlen(out), n - strlen(out), " --partition %s", l->partition);
    if (l->placement)
        snprintf(out + strlen(out), n - strlen(out), " --placement %s",
                 choice_name(PLACEMENT_CHOICES, l->placement, name, sizeof name));
    if (l->bucket_mb > 0) snprintf(out + strlen(out), n - strlen(out), " --bucket-mb %g", l->bucket_mb);
    if (c->moe.experts) {  // the MoE layers (moe.h), whether typed or from the config
        add(out, n, " --experts %lld", (long long)c->moe.experts);
        add(out, n, " --moe-every %lld", (long long)c->moe.every);
        add(out, n, " --top-k %lld", (long long)c->moe.top_k);
        snprintf(out + strlen(out), n - strlen(out), " --capacity-factor %g", c->moe.capacity);
    }
    if (l->ep > 1) add(out, n, " --ep %lld", (long long)l->ep);
    if (l->compress)
        snprintf(out + strlen(out), n - strlen(out), " --compress %s", layout_method(l, name, sizeof name));
    if (l->sync_every) add(out, n, " --sync-every %lld", l->sync_every);
}

// One virtual stage's passes at `rows` rows: F (with the first stage's input rows, the head's labels), I, W, and the
// full backward B; what checkpointing recomputes (a forward) goes into I and B. With --tp each pass
// of a split layer is its slice (tp_layer) and the group's all-reduces are in it: after a pair's row
// layer in F (and the recompute), after a column layer's input gradient in I and B (not the model's
// first layer's: it computes none). missing: the profile has no all-reduce of T ranks.
typedef struct { double f, i, w, b, tp_s, a2a_s, data_s; int missing; } Passes;

// The tensor-parallel group's all-reduce algorithm, as its rules pick it (axes/tensor.c's tensor_price_algo):
// shm where the profile measured it (a calibration: this machine, the group on one node), else MPI's (a
// machine file's links stand for every algorithm).
static int tp_algo(const Profile *pf, int T) {
    return tensor_price_algo(pf->calibrated && T <= COST_MAX_D && pf->coll[ALLREDUCE_SHM][COLL_ALLREDUCE][T].n);
}

// One all-reduce of `floats` over the tensor-parallel group of T ranks (one node: the search keeps T
// within a node); -1 when a calibration did not measure it.
static double tp_allreduce_s(const Profile *pf, int T, double floats) {
    int algo = tp_algo(pf, T);
    if (pf->calibrated && (T > COST_MAX_D || !pf->coll[algo][COLL_ALLREDUCE][T].n)) return -1;
    return cost_collective(pf, COLL_ALLREDUCE, algo, T, floats * 4, T);  // (the group is on one node)
}

// One pass of a layer whose tensor-parallel piece is t (axes/tensor.c's tensor_price) over T ranks: a split
// layer's gemm is rows x in x out / T. A calibration measured whole layers by rows, so it is priced as the
// whole layer at rows / T (the same FLOPs); a machine file's roofline takes the slice's own widths.
static double tp_layer(const Profile *pf, int kind, int pass, int prec, double rows, double in, double out, int T,
                       const TensorPiece *t) {
    if (T == 1 || t->kind == TP_FULL) return cost_layer(pf, kind, pass, prec, rows, in, out);
    if (pf->calibrated) {  // (less the weights' share the slice does not touch: a pass at one row is theirs)
        double whole = cost_layer(pf, kind, pass, prec, rows / T, in, out);
        return fmax(whole - (1 - 1.0 / T) * cost_layer(pf, kind, pass, prec, 1, in, out), whole / T);
    }
    return cost_layer(pf, kind, pass, prec, rows, t->in, t->out);
}

// MoE layer g's passes (cost_moe) into q, with --ep its all-to-alls (four rows exchanges: dispatch and
// combine, forward and backward, of every kept assignment's H floats, at most rows x k; and the forward's
// counts, E ints): the forward's into *a2a_f, the backward's into *a2a_b.
static void moe_passes(const Profile *pf, const TrainConfig *c, const Plan *p, double rows, Passes *q, double *a2a_f,
                       double *a2a_b) {
    MoeSpec m = plan_moe(c, p);
    int N = p->expert.N > 1 ? p->expert.N : 1, prec = c->precision, H = (int)c->hidden, r = (int)rows;
    double cap = moe_capacity(&m, r), kept = fmin(rows * m.top_k, m.experts * fmin(cap, rows));
    int intra = pf->calibrated || predict_links(pf, p).dp_local >= N;  // the group: N consecutive replicas
    double rows_a2a = cost_alltoall(pf, N, kept * H * 4, intra), counts = cost_alltoall(pf, N, m.experts * 4.0, intra);
    q->f += cost_moe(pf, PASS_F, prec, r, H, &m, N) + 2 * rows_a2a + counts;
    q->i += cost_moe(pf, PASS_I, prec, r, H, &m, N) + 2 * rows_a2a;
    q->b += cost_moe(pf, PASS_B, prec, r, H, &m, N) + 2 * rows_a2a;
    *a2a_f += 2 * rows_a2a + counts;
    *a2a_b += 2 * rows_a2a;
}

static Passes vstage_passes(const Profile *pf, const TrainConfig *c, const Plan *p, int vs, double rows) {
    Passes q = {0};
    double H = (double)c->hidden, in = (double)p->inputs, C = (double)c->classes, ar_f = 0, ar_b = 0, a2a_f = 0,
           a2a_b = 0;
    int prec = c->precision, T = p->T, ckpt = p->pipe.ckpt, n_f = 0, n_b = 0;
    for (int g = p->lo[vs]; g < p->lo[vs + 1]; g++) {
        int kind = g == 0 ? LAYER_FIRST : LAYER_MID;
        double fan_in = g == 0 ? in : H;
        MoeSpec m = plan_moe(c, p);
        if (moe_layer(&m, g)) { moe_passes(pf, c, p, rows, &q, &a2a_f, &a2a_b); continue; }
        TensorPiece t = tensor_price(p, vs, g - p->lo[vs], rows, fan_in, H);
        q.f += tp_layer(pf, kind, PASS_F, prec, rows, fan_in, H, T, &t);
        q.i += tp_layer(pf, kind, PASS_I, prec, rows, fan_in, H, T, &t);
        q.w += tp_layer(pf, kind, PASS_W, prec, rows, fan_in, H, T, &t);
        q.b += tp_layer(pf, kind, PASS_B, prec, rows, fan_in, H, T, &t);
        double af = t.fwd_floats ? tp_allreduce_s(pf, T, t.fwd_floats) : 0;
        double ab = t.bwd_floats ? tp_allreduce_s(pf, T, t.bwd_floats) : 0;
        q.missing |= af < 0 || ab < 0;
        n_f += t.fwd_floats > 0, n_b += t.bwd_floats > 0;
        ar_f += af;
        ar_b += ab;
    }
    if (vs == p->S - 1) {
        q.f += cost_layer(pf, LAYER_HEAD, PASS_F, prec, rows, H, C);
        q.i += cost_layer(pf, LAYER_HEAD, PASS_I, prec, rows, H, C);
        q.w += cost_layer(pf, LAYER_HEAD, PASS_W, prec, rows, H, C);
        q.b += cost_layer(pf, LAYER_HEAD, PASS_B, prec, rows, H, C);
    }
    // each all-reduce waits for the group's last rank: the ranks drift apart over the pass's compute (cost_coll_wait)
    ar_f += cost_coll_wait(pf, n_f, q.f);
    ar_b += cost_coll_wait(pf, n_b, q.b);
    q.f += ar_f;
    q.i += ar_b;
    q.b += ar_b;
    if (ckpt) { q.i += q.f; q.b += q.f; }  // (the recompute repeats the forward's all-reduces and all-to-alls)
    q.tp_s = ar_f * (ckpt ? 2 : 1) + ar_b;
    q.a2a_s = a2a_f * (ckpt ? 2 : 1) + a2a_b;
    // the first stage makes the input rows, the head their labels (exec_load_inputs); a stage doing both makes
    // the labels from the rows it made (data_synthetic_rows): the labels' time, which holds the rows'
    int first = p->lo[vs] == 0, head = vs == p->S - 1;
    if (first || head) q.data_s += (head ? pf->label_s_per_value : pf->data_s_per_value) * rows * in;
    q.f += q.data_s;
    return q;
}

Links predict_links(const Profile *pf, const Plan *p) {
    if (pf->calibrated) return (Links){.dp_local = p->D, .pp_intra = 1};
    int node = pf->devices_per_node, replicas = p->pipelined && p->placement == PLACEMENT_REPLICAS;
    int dp_stride = replicas || !p->pipelined ? p->T : p->K * p->T, pp_stride = replicas ? p->D * p->T : p->T;
    int local = node / dp_stride;
    return (Links){.dp_local = local < 1 ? 1 : local > p->D ? p->D : local,
                   .pp_intra = !p->pipelined || (double)p->K * pp_stride <= node};
}

// A collective op over `bytes` in `pieces` equal collectives; -1 when the profile lacks it.
static double coll(const Profile *pf, int op, int algo, int D, double bytes, double pieces, int local) {
    if (pf->calibrated && (D > COST_MAX_D || !pf->coll[algo][op][D].n)) return -1;
    return pieces * cost_collective(pf, op, algo, D, bytes / pieces, local);
}

// A rank's data-parallel traffic (axes/data.c's data_price: its bytes, pieces and collectives), the
// algorithm train would run (the one asked for, or auto's: shm where the profile measured the collectives
// the sync runs there, else MPI's) and how many of its dp group share a node (predict_links).
typedef struct {
    DataTraffic t;
    int algo, local;
} DpSync;

static DpSync dp_sync(const Profile *pf, const TrainConfig *c, const Plan *p, int stage) {
    DpSync d = {.t = data_price(c, p, stage)};
    int D = p->D, shm = pf->calibrated && D <= COST_MAX_D;
    if (shm && d.t.scatter)
        shm = pf->coll[ALLREDUCE_SHM][COLL_REDUCE_SCATTER][D].n && pf->coll[ALLREDUCE_SHM][COLL_ALLGATHER][D].n;
    else if (shm) shm = pf->coll[ALLREDUCE_SHM][COLL_ALLREDUCE][D].n != 0;
    d.algo = data_price_algo(p, shm);
    d.local = predict_links(pf, p).dp_local;
    return d;
}

static double overlap(const Profile *pf, int algo) { return fmin(fmax(cost_overlap(pf, algo), 0), 1); }

// ZeRO-3's all-gathers around one pass of `compute` seconds over a rank's weights (data_price_gathers):
// the exposed seconds, or -1 when the profile lacks the all-gather.
static double zero3_gather(const Profile *pf, const Plan *p, const DpSync *d, double compute) {
    double all = coll(pf, COLL_ALLGATHER, d->algo, p->D, d->t.bytes, d->t.zpieces, d->local);
    return all < 0 ? -1 : data_price_gathers(&d->t, all, overlap(pf, d->algo), compute);
}

// --compress's number (topk's F, powersgd's R; sign: 0).
static double compress_arg(const Plan *p) {
    return p->data.compress == COMPRESS_TOPK ? p->data.topk : p->data.psgd_rank;
}

// The compressor's host work (compress_price): its element-wise passes at the SGD step's rate per parameter
// (one such pass), PowerSGD's products at a hidden layer's forward of R rows per multiply-add (the profile's
// BLAS, which axes/lowrank.c's products run on) and its Gram-Schmidt at the calibration's rate per element
// operation (a profile without one, or a machine file: an SGD step's per parameter, which is faster).
static double compress_host_s(const Profile *pf, const TrainConfig *c, const CompressTraffic *x, double arg) {
    double H = (double)c->hidden, R = fmax(1, fmin(arg, H));
    double mult = x->mults > 0 ? cost_layer(pf, LAYER_MID, PASS_F, PRECISION_FP32, R, H, H) / (R * H * H) : 0;
    double ortho = pf->calibrated && pf->ortho_s > 0 ? x->ortho * pf->ortho_s : cost_optimizer(pf, OPTIM_SGD, x->ortho);
    return COMPRESS_PASSES * cost_optimizer(pf, OPTIM_SGD, x->params) + x->mults * mult + (x->ortho > 0 ? ortho : 0);
}

// What rank `stage` does after its action list (comm, opt): the part of its gradient sync not hidden
// behind the backward and the all-gather after the update (ZeRO-1 and 2), the optimizer over its
// parameters or its shard. ddp and ZeRO-1 sync once, behind the last backward (`last` seconds);
// ZeRO-2 and 3 reduce-scatter after each of the step's `backwards` backward passes, behind the
// backward compute that follows (`all` seconds: the step's). -1 when the profile has no collective of D ranks.
typedef struct { double comm, opt; } Tail;

static int rank_tail(const Profile *pf, const TrainConfig *c, const Plan *p, int stage, double last, double all,
                     int backwards, double compute, Tail *t) {
    DpSync d = dp_sync(pf, c, p, stage);
    t->comm = 0;
    t->opt = cost_optimizer(pf, c->optimizer, data_price_optimizer_params(p, &d.t));
    if (p->D == 1) return 0;
    if (p->data.compress) {  // after the backward, not overlapped: its all-gathers (2 a bucket, sign's 1) and host work
        CompressTraffic x = compress_price(c, p, stage, p->data.compress, compress_arg(p));
        double pieces = d.t.pieces * (p->data.compress == COMPRESS_SIGN ? 1 : 2);
        double gather = coll(pf, COLL_ALLGATHER, ALLREDUCE_MPI, p->D, x.bytes * p->D / (p->D - 1), pieces, d.local);
        t->comm = gather + compress_host_s(pf, c, &x, compress_arg(p));
        return gather < 0 ? -1 : 0;
    }
    if (p->data.sync_every) {  // local SGD: the whole model's moves all-reduced once every H steps, after the update
        double once = coll(pf, COLL_ALLREDUCE, d.algo == ALLREDUCE_SHM ? ALLREDUCE_MPI : d.algo, p->D, d.t.bytes, 1,
                           d.local);
        t->comm = once / p->data.sync_every;
        return once < 0 ? -1 : 0;
    }
    double pieces = d.t.per_backward ? d.t.zpieces : d.t.pieces, window = d.t.per_backward ? all : last;
    int op = d.t.scatter ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE;
    double rest = d.t.bytes - d.t.expert_bytes, sync = coll(pf, op, d.algo, p->D, rest, pieces, d.local);
    double gather = d.t.gather_after ? coll(pf, COLL_ALLGATHER, d.algo, p->D, rest, pieces, d.local) : 0;
    if (sync < 0 || gather < 0) return -1;
    if (d.t.expert_bytes > 0 && d.t.peers > 1) {  // --ep: the experts' buckets over their holders (MPI's row or ring)
        int ea = d.algo == ALLREDUCE_RING ? ALLREDUCE_RING : ALLREDUCE_MPI, P = d.t.peers;
        double es = coll(pf, op, ea, P, d.t.expert_bytes, d.t.epieces, d.local),
               eg = d.t.gather_after ? coll(pf, COLL_ALLGATHER, ea, P, d.t.expert_bytes, d.t.epieces, d.local) : 0;
        if (es < 0 || eg < 0) return -1;
        sync += es, gather += eg;
    }
    double ov = d.t.overlapped ? overlap(pf, d.algo) : 0;
    t->comm = data_price_exposed(&d.t, sync, gather, ov, window, backwards);
    // the meetings a rank waits at (each sync's last bucket; the all-gathers after the update, in flight together:
    // one) and the replicas' drift over the rank's compute of the step (cost_coll_wait)
    double waited = (d.t.per_backward ? backwards : 1) + (d.t.gather_after ? 1 : 0);
    t->comm += cost_coll_wait(pf, waited, compute);
    return 0;
}

// The step of a run without a pipeline (monolith, ddp): one forward and backward of its rows, ZeRO-3's
// gathers around each; the tensor-parallel all-reduces and the exposed gathers count as communication.
static int predict_flat(const Profile *pf, const TrainConfig *c, const Plan *p, Prediction *out) {
    Passes q = vstage_passes(pf, c, p, 0, p->rows);
    Tail t;
    double gather = 0;
    DpSync d = dp_sync(pf, c, p, 0);
    if (d.t.gathers_around) {
        double f = zero3_gather(pf, p, &d, q.f), b = zero3_gather(pf, p, &d, q.b);
        gather = f < 0 || b < 0 ? -1 : f + b;
    }
    if (q.missing || gather < 0 || rank_tail(pf, c, p, 0, q.b, q.b, 1, q.f + q.b - q.tp_s - q.a2a_s, &t)) return -1;
    out->compute_s = q.f + q.b + t.opt - q.tp_s - q.a2a_s;
    out->comm_s = t.comm + q.tp_s + q.a2a_s + gather + pf->step_fixed_s;
    out->step_s = out->compute_s + out->comm_s;
    out->coll_s = t.comm + q.tp_s + q.a2a_s + gather;
    out->opt_s = t.opt;
    out->data_s = q.data_s;
    out->fixed_s = pf->step_fixed_s;
    return 0;
}

// Rank s's passes per micro-batch over its chunks into f, b, w (the simulator's), into x the
// communication inside them (the tensor-parallel all-reduces, ZeRO-3's exposed gathers around each
// forward, recompute and backward) and into dt the data it makes. -1 when the profile lacks a collective.
static int stage_costs(const Profile *pf, const TrainConfig *c, const Plan *p, int s, double *f, double *b, double *w,
                       double *x, double *dt) {
    DpSync d = dp_sync(pf, c, p, s);
    int split = schedule_splits_backward(p->schedule, NULL), z3 = d.t.gathers_around;
    d.t.bytes /= p->V;  // (a chunk's share of the rank's weights and buckets)
    d.t.zpieces = fmax(1, round(d.t.zpieces / p->V));
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
        *x += q.tp_s + q.a2a_s + gf + gb;
        *dt += q.data_s;
    }
    return 0;
}

// The pipeline's step: every rank's passes simulated against the others with the messages' cost,
// then each rank's tail after its last action; the step ends with the slowest. The bubble comes from
// the same simulation with free messages, the messages' share from the difference.
static int predict_pipeline(const Profile *pf, const TrainConfig *c, const Plan *p, Prediction *out) {
    int K = p->K, rc = 0;
    double *f = xcalloc((size_t)K * 5, sizeof(double)), *b = f + K, *w = f + 2 * K, *x = f + 3 * K, *dt = f + 4 * K;
    for (int s = 0; s < K && !rc; s++) rc = stage_costs(pf, c, p, s, &f[s], &b[s], &w[s], &x[s], &dt[s]);
    double bytes = pipeline_price_message_bytes(p, (double)c->hidden, c->precision);
    int intra = predict_links(pf, p).pp_intra;
    SimSpec spec = {.kind = p->schedule, .K = K, .M = p->M, .v = p->V, .f = f[0], .b = b[0], .w = w[0],
                    .comm = cost_p2p(pf, bytes, intra), .stage_f = f, .stage_b = b, .stage_w = w, .slices = 1};
    const PipelinePrice *r = rc ? NULL : pipeline_price(&spec);
    rc = rc || r->deadlock ? -1 : 0;
    double step = 0, msgs = rc ? 0 : r->makespan - r->free_makespan;
    for (int s = 0; s < K && !rc; s++) {
        double last_bw = b[s] + w[s];  // the rank's last micro-batch's backward, all chunks (b, w: one micro-batch's)
        Tail t;
        if (rank_tail(pf, c, p, s, last_bw, p->M * (b[s] + w[s]), p->M, r->busy[s] - p->M * x[s], &t)) rc = -1;
        else if (r->end[s] + t.comm + t.opt >= step) {
            step = r->end[s] + t.comm + t.opt;
            out->compute_s = r->busy[s] + t.opt - p->M * x[s];
            out->comm_s = msgs + t.comm + p->M * x[s] + pf->step_fixed_s;
            out->msgs_s = msgs;
            out->coll_s = t.comm + p->M * x[s];
            out->opt_s = t.opt;
            out->data_s = p->M * dt[s];
        }
    }
    out->bubble = rc ? 0 : r->bubble;
    out->step_s = step + pf->step_fixed_s;
    out->fixed_s = pf->step_fixed_s;
    free(f);
    return rc;
}

// One layer's forward and backward at the plan's rows (its tensor-parallel slice, the recompute with
// checkpointing, the input rows the first layer's stage makes): what predict_balance weighs layers by.
static double layer_weight(const Profile *pf, const TrainConfig *c, const Plan *p, int g) {
    double H = (double)c->hidden, in = g == 0 ? (double)p->inputs : H, rows = p->rows, T = p->T;
    int kind = g == 0 ? LAYER_FIRST : LAYER_MID, prec = c->precision;
    double r = pf->calibrated ? rows / T : rows, out = pf->calibrated ? H : H / T;
    double f = cost_layer(pf, kind, PASS_F, prec, r, in, out), b = cost_layer(pf, kind, PASS_B, prec, r, in, out);
    MoeSpec m = plan_moe(c, p);
    if (moe_layer(&m, g)) {  // (its all-to-alls are not weighed: they cost the same on every stage)
        f = cost_moe(pf, PASS_F, prec, p->rows, (int)H, &m, p->expert.N);
        b = cost_moe(pf, PASS_B, prec, p->rows, (int)H, &m, p->expert.N);
    }
    return f * (p->pipe.ckpt ? 2 : 1) + b + (g == 0 ? pf->data_s_per_value * rows * in : 0);
}

// Layers cut greedily into S contiguous parts of at most `most` seconds each, from the last stage back
// (a pipeline's later stages stash fewer micro-batches: they take the extra layers), every part one layer
// or more, the last carrying `head` too; 0 with the counts in part, or -1 when they do not fit.
static int pack(const double *w, int L, int S, double head, double most, int *part) {
    int g = L - 1;
    for (int s = S - 1; s >= 0; s--) {
        double acc = w[g--] + (s == S - 1 ? head : 0);
        part[s] = 1;
        while (g >= 0 && (s == 0 || (g + 1 > s && acc + w[g] <= most))) acc += w[g--], part[s]++;
        if (acc > most * (1 + 1e-12)) return -1;
    }
    return 0;
}

// The least bottleneck a contiguous cut reaches (bisected), the last stage given the most layers that
// keep it; then the same for the stages before it over the layers left, so the others share them evenly.
static int balance(const double *w, int L, int S, double head, int *part) {
    for (; S > 0; S--, head = 0) {
        double lo = 0, hi = head;
        for (int g = 0; g < L; g++) hi += w[g], lo = fmax(lo, w[g]);
        for (int it = 0; it < 60; it++) {
            double mid = 0.5 * (lo + hi);
            if (pack(w, L, S, head, mid, part)) lo = mid; else hi = mid;
        }
        if (pack(w, L, S, head, hi, part)) return -1;
        L -= part[S - 1];
    }
    return 0;
}

int predict_balance(const Profile *pf, const TrainConfig *c0, const Layout *l, char *out, size_t n) {
    TrainConfig c = *c0;
    Degrees d;
    Layout even = *l;
    even.partition[0] = 0;
    layout_apply(&even, &c, &d);
    Plan *p = xmalloc(sizeof *p);
    char why[PATH_LEN + 200];
    int rc = d.pp > 1 ? plan_layout(&c, &d, p, why, sizeof why) : -1, L = (int)c.layers, changed = 0;
    if (!rc && p->V > 1) rc = -1;  // (a rank's chunks sit apart in the pipeline: balanced per stage only)
    int S = rc ? 0 : p->S;
    double *w = rc ? NULL : xcalloc((size_t)L, sizeof(double));
    int *part = rc ? NULL : xcalloc((size_t)S, sizeof(int));
    if (!rc) {
        double H = (double)c.hidden, C = (double)c.classes;
        double head = cost_layer(pf, LAYER_HEAD, PASS_F, c.precision, p->rows, H, C) +
                      cost_layer(pf, LAYER_HEAD, PASS_B, c.precision, p->rows, H, C) +
                      pf->label_s_per_value * p->rows * p->inputs;  // (the head makes the labels)
        for (int g = 0; g < L; g++) w[g] = layer_weight(pf, &c, p, g);
        rc = balance(w, L, S, head, part);
    }
    size_t k = 0;
    out[0] = 0;
    for (int s = 0; !rc && s < S && k < n; s++) {
        changed |= part[s] != p->lo[s + 1] - p->lo[s];
        k += (size_t)snprintf(out + k, n - k, "%s%d", s ? "," : "", part[s]);
    }
    if (rc || !changed || k >= n) out[0] = 0, rc = -1;
    free(w);
    free(part);
    free(p);
    return rc;
}

// A calibration's fastest gemm: every pass it timed of the hidden and first layers, at each row count, by its
// FLOPs a row (2 a weight for a forward, an input or a weight gradient; 4 for the hidden layer's whole backward,
// which the first's lacks the input gradient of): a backward runs its gemms faster than the forward does on
// some machines, and the prices a layout sums are interpolated between these points, so no row outruns it.
double predict_peak(const Profile *pf, int precision) {
    if (!pf->calibrated) return pf->flops[precision];
    double best = 0;
    for (int kind = LAYER_MID; kind <= LAYER_FIRST; kind++)
        for (int q = 0; q < PASSES; q++) {
            const Curve *f = &pf->layer[precision][kind][q];
            double in = kind == LAYER_FIRST ? pf->inputs : pf->hidden, per_row = 2 * in * pf->hidden;
            if (kind == LAYER_FIRST && q == PASS_I) continue;  // (the first layer computes no input gradient)
            if (kind == LAYER_MID && q == PASS_B) per_row *= 2;
            for (int i = 0; i < f->n; i++) if (f->s[i] > 0) best = fmax(best, per_row * f->x[i] / f->s[i]);
        }
    return best;
}

// The group size a calibration lacks a collective of: the tensor-parallel group's, else the replicas'.
static int missing_group(const Profile *pf, const Degrees *d) {
    int T = d->tp;
    if (T > 1 && (T > COST_MAX_D || !pf->coll[tp_algo(pf, T)][COLL_ALLREDUCE][T].n)) return T;
    return d->dp;
}

int layout_family(int pp, int dp, int tp) {
    if (pp > 1) return dp > 1 ? FAMILY_HYBRID : FAMILY_PIPELINE;
    return dp > 1 ? FAMILY_DDP : tp > 1 ? FAMILY_TP : FAMILY_MONOLITH;
}

// `plan --validate`'s factor for the layout's family scales the step and each of its parts alike.
static void refit(const Profile *pf, const Degrees *d, Prediction *out) {
    double k = pf->refit[layout_family(d->pp, d->dp, d->tp)];
    if (!(k > 0) || k == 1) return;
    double *part[] = {&out->step_s, &out->compute_s, &out->comm_s, &out->msgs_s, &out->coll_s, &out->opt_s,
                      &out->data_s, &out->fixed_s};
    for (size_t i = 0; i < sizeof part / sizeof *part; i++) *part[i] *= k;
}

int predict_step(const Profile *pf, const TrainConfig *c0, const Layout *l, Prediction *out, char *why, size_t n) {
    TrainConfig c = *c0;
    Degrees d;
    layout_apply(l, &c, &d);
    return predict_config(pf, &c, &d, out, why, n);
}

int predict_config(const Profile *pf, const TrainConfig *c0, const Degrees *d0, Prediction *out, char *why, size_t n) {
    TrainConfig c = *c0;
    Degrees d = *d0;
    memset(out, 0, sizeof *out);
    why[0] = 0;
    if (!pf->has_precision[c.precision]) {
        snprintf(why, n, "the profile has no %s figures", c.precision == PRECISION_BF16 ? "bf16" : "fp32");
        return -1;
    }
    Plan *p = xmalloc(sizeof *p);
    MemLayout ml;
    int rc = memory_layout(&c, c.pipe.schedule, &d, &ml, why, n);
    if (rc == 0) {
        for (int s = 0; s < d.pp; s++)
            if (ml.need[s].total > out->memory) { out->memory = ml.need[s].total; out->worst_stage = s; }
        memory_layout_free(&ml);
        rc = plan_layout(&c, &d, p, why, n);
    }
    if (rc == 0) rc = p->pipelined ? predict_pipeline(pf, &c, p, out) : predict_flat(pf, &c, p, out);
    if (rc == 0 && !(out->step_s > 0))
        rc = -1, snprintf(why, n, "the profile prices this layout at %g s", out->step_s);
    else if (rc && !why[0])
        snprintf(why, n, "the profile '%s' has no collectives of %d ranks: calibrate on a world of %d or more "
                 "(mpiexec -n %d micropp plan --calibrate)", pf->file, missing_group(pf, &d), degrees_world(&d),
                 degrees_world(&d));
    else if (rc == 0) {
        double P = (double)model_param_count((int)c.layers, p->inputs, (int)c.hidden, (int)c.classes),
               peak = predict_peak(pf, c.precision);
        refit(pf, &d, out);
        out->samples_s = (double)c.batch / out->step_s;
        out->peak = peak;
        double flops = model_row_flops(P, p->inputs, (int)c.hidden) * (double)c.batch;
        out->mfu = peak > 0 ? flops / (out->step_s * degrees_world(&d) * peak) : 0;
    }
    free(p);
    return rc;
}

// ---- crossover ----

double crossover_bandwidth(double a, double m, double host, double window, double ov, double pieces) {
    if (!(a > m)) return 0;
    double fast = a * (1 - ov * (1 - 1 / pieces)) - m;  // E - M's slope in 1/B while ddp hides all it can
    double bend = window / (a * (1 - 1 / pieces));      // 1/B where ddp's sync outgrows the backward window
    double u = fast > 0 && (pieces <= 1 || host / fast <= bend) ? host / fast : (ov * window + host) / (a - m);
    return u > 0 ? 1 / u : INFINITY;
}

int predict_crossover(const Profile *pf, const TrainConfig *c0, const Degrees *d, int method, double arg,
                      double *bw, char *why, size_t n) {
    TrainConfig c = *c0;
    c.ddp.compress[0] = 0, c.ddp.sync_every = 0;  // (ddp's plan: the buckets, their overlap)
    Plan *p = xmalloc(sizeof *p);
    int rc = plan_layout(&c, d, p, why, n);
    if (rc == 0 && (p->pipelined || p->D < 2 || p->data.zero))
        rc = -1, snprintf(why, n, "a crossover is priced for ddp without a pipeline or ZeRO");
    if (rc == 0) {
        DpSync s = dp_sync(pf, &c, p, 0);
        Passes q = vstage_passes(pf, &c, p, 0, p->rows);
        double a = s.t.bytes * 2 * (p->D - 1) / p->D, ov = s.t.overlapped ? overlap(pf, s.algo) : 0, m = a / arg,
               host = 0;
        if (method != COMPRESS_NONE) {  // (COMPRESS_NONE: local SGD, --sync-every arg)
            CompressTraffic x = compress_price(&c, p, 0, method, arg);
            m = x.bytes, host = compress_host_s(pf, &c, &x, arg);
        }
        *bw = crossover_bandwidth(a, m, host, q.b, ov, s.t.pieces);
    }
    free(p);
    return rc;
}
