// train/report.c: the header a run prints before its first step, and the Summary after its last: filled
// once from what the steps measured (medians, reductions across ranks, the pipeline's bubble and its
// simulation, the trace and timeline files), then rendered as text or as one JSON object.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <cjson/cJSON.h>
#include "train/pipeline.h"
#include "train/report.h"
#include "comms/slurm.h"
#include "axes/zero.h"
#include "base/util.h"

// The choices' names (the sync's and the all-reduce's too: report_dp_header prints them)...
static void choice_names(const TrainConfig *c, const Plan *p, Summary *s) {
    choice_name(MODE_CHOICES, p->mode, s->mode, sizeof s->mode);
    choice_name(SCHED_NAMES, p->schedule, s->schedule, sizeof s->schedule);
    choice_name(OPTIM_CHOICES, c->optimizer, s->optimizer, sizeof s->optimizer);
    choice_name(TRANSPORT_CHOICES, p->transport, s->transport, sizeof s->transport);
    choice_name(SYNC_CHOICES, p->data.sync, s->sync, sizeof s->sync);
    choice_name(ALLREDUCE_CHOICES, p->data.algo, s->allreduce, sizeof s->allreduce);
    choice_name(ALLREDUCE_CHOICES, p->tensor.algo, s->tp_allreduce, sizeof s->tp_allreduce);
    if (p->tensor.nccl) snprintf(s->tp_allreduce, sizeof s->tp_allreduce, "nccl");
    choice_name(PRECISION_CHOICES, c->precision, s->precision, sizeof s->precision);
}

// ... and with the device: what runs the products, and the model's size.
static void names(const TrainConfig *c, const Plan *p, const Backend *be, Summary *s) {
    choice_names(c, p, s);
    blas_describe(s->blas, sizeof s->blas);
    if (c->precision == PRECISION_BF16 && be->on_host)  // the kernel of a hidden layer's forward product
        onednn_describe(p->rows, (int)c->hidden, (int)c->hidden, s->onednn, sizeof s->onednn);
    be->describe(s->device, sizeof s->device);
    s->params = model_param_count((int)c->layers, p->inputs, (int)c->hidden, (int)c->classes);
}

// ---- the header ----

// A pipeline's stages (or the manual split's parts): each one's layers, chunk by chunk.
static void header_stages(const Plan *p) {
    for (int k = 0; k < p->K; k++) {
        printf("  %s %d: layers", p->pipelined ? "stage" : "part", k);
        for (int ch = 0; ch < p->V; ch++) {
            int vs = plan_vstage(p, k, ch);
            printf("%s %d-%d", ch ? " |" : "", p->lo[vs], p->lo[vs + 1] - 1);
        }
        if (p->V > 1) {
            printf(" (virtual stages");
            for (int ch = 0; ch < p->V; ch++) printf("%s %d", ch ? "," : "", plan_vstage(p, k, ch));
            printf(")");
        }
        printf("%s\n", k == plan_stage_of(p, p->S - 1) ? " + head" : "");  // rank 0 under the V chunk order
    }
}

// A data set: its splits, the standardisation, and how epochs cut it.
static void header_data(const TrainConfig *c, const Plan *p, const Data *d) {
    if (!d->train.n) return;
    printf("data %s: %lld training rows", d->name, (long long)d->train.n);
    if (d->test.n) printf(", %lld test rows (kept apart: accuracy is measured on them)", (long long)d->test.n);
    else printf(" (no test split: accuracy is measured on training rows)");
    printf(" | %d features", d->inputs);
    if (d->train.pixels)
        printf(", pixels scaled to [0,1] and standardised with the training set's mean %.4f and std %.4f", d->mean,
               d->std);
    printf("\n");
    if (p->epochs)
        printf("epochs %d x %lld steps of %lld rows, shuffled per epoch from (seed, epoch)%s", p->epochs,
               p->steps_per_epoch, (long long)c->batch * p->N, p->dropped ? "" : "\n");
    if (p->epochs && p->dropped)
        printf(" | the last partial batch (%lld rows of each epoch's shuffle) is dropped\n", p->dropped);
}

// Hybrid: how the grid sits on the ranks and why; several nodes: which stage and replica each rank
// holds on each.
static void header_placement(const Plan *p, const Hardware *hw) {
    if (p->pipelined && p->data_parallel) {
        int st = p->placement == PLACEMENT_STAGES;
        char pp[32], dp[32];
        printf("placement %s: %s on adjacent ranks (rank = %s x %d + %s) | per step: pipeline %s, all-reduce %s%s\n",
               st ? "stages" : "replicas", st ? "each replica's stages" : "each stage's replicas",
               st ? "replica" : "stage", st ? p->K : p->D, st ? "stage" : "replica",
               fmt_bytes(p->pp_bytes, pp, sizeof pp), fmt_bytes(p->dp_bytes, dp, sizeof dp),
               !p->placement_auto ? " (--placement)"
               : st               ? " -> auto keeps the pipeline on a node"
                                  : " -> auto keeps the all-reduce on a node");
    }
    if (hw->nodes < 2) return;
    for (int n = 0; n < hw->nodes; n++) {
        printf("%s node %d:", n ? " |" : "placement:", n);
        for (int k = 0, first = 1; k < p->world; k++) {
            if (hw->node_of[k] != n) continue;
            printf("%s rank %d", first ? "" : ",", k);
            if (p->pipelined) printf(" stage %d", plan_rank_stage(p, k));
            if (p->data_parallel) printf(" replica %d", plan_rank_replica(p, k));
            first = 0;
        }
    }
    printf("\n");
}

// --tp: the 3D grid and the group's all-reduce.
static void header_tp(const Plan *p, const Summary *s) {
    if (p->T == 1) return;
    printf("tensor parallel: grid %d stage%s x %d replica%s x %d tp = %d ranks (rank = group x %d + tp rank) | "
           "layers in column/row pairs, an odd last layer and the head whole on every rank | all-reduce %s\n",
           p->K, p->K == 1 ? "" : "s", p->D, p->D == 1 ? "" : "s", p->T, p->world, p->T, s->tp_allreduce);
}

void report_header(const TrainConfig *c, const Plan *p, const Wire *w, const Data *data) {
    const Backend *be = w->be;
    Summary s = {0};
    char size[32];
    names(c, p, be, &s);
    Degrees d = plan_degrees(p);
    char run[64];
    printf("micropp train | %s", degrees_text(&d, run, sizeof run));
    if (p->world > 1) printf(" = %d ranks", p->world);
    if (d.zero) printf(" | ZeRO-%d", d.zero);
    if (p->data_parallel && !p->pipelined) printf(" | %d rows per replica", p->rows);
    if (p->pipelined)
        printf(" | schedule %s | micro-batches %d (%d rows each)%s", s.schedule, p->M, p->rows,
               p->pipe.ckpt ? " | checkpointing" : "");
    if (p->V > 1) printf(" | %d virtual stages per rank", p->V);
    if (p->N > 1) printf(" | grad-accum %d", p->N);
    if (p->inputs == c->hidden)
        printf("\nmodel %lld x Linear(%lld,%lld)+ReLU -> Linear(%lld,%lld) | %zu parameters (%s fp32)\n",
               (long long)c->layers, (long long)c->hidden, (long long)c->hidden, (long long)c->hidden,
               (long long)c->classes, s.params, fmt_bytes(s.params * 4.0, size, sizeof size));
    else
        printf("\nmodel Linear(%lld,%lld)+ReLU -> %lld x Linear(%lld,%lld)+ReLU -> Linear(%lld,%lld) | %zu parameters "
               "(%s fp32)\n",
               (long long)p->inputs, (long long)c->hidden, (long long)c->layers - 1, (long long)c->hidden,
               (long long)c->hidden, (long long)c->hidden, (long long)c->classes, s.params,
               fmt_bytes(s.params * 4.0, size, sizeof size));
    printf("batch %lld | steps %lld | %s lr %g | seed %lld | data %s | ", (long long)c->batch,
           p->steps, s.optimizer, c->lr, (long long)c->seed, c->data);
    if (be->on_host) printf("%s | device %s", s.blas, s.device);
    else printf("device %s", s.device);
    if (p->pipelined) printf(" | transport %s", s.transport);
    printf("\n");
    char job[600];
    if (slurm_describe(job, sizeof job)) printf("%s\n", job);  // under Slurm: the job, its step and nodes
    if (p->pipelined && p->transport_why[0]) printf("%s\n", p->transport_why);  // why not nccl, in one line
    if (c->precision == PRECISION_BF16)
        printf("precision bf16: products on bf16 inputs, fp32 accumulation%s%s | weights, gradients, optimizer and "
               "loss fp32\n",
               s.onednn[0] ? " | " : "", s.onednn);
    if (c->precision == PRECISION_BF16 && be->on_host && !onednn_native_bf16())
        printf("note: this CPU has no native bf16 (AVX512_BF16): oneDNN emulates it, which can be slower than fp32\n");
    header_data(c, p, data);
    if (p->K > 1) header_stages(p);
    header_placement(p, &w->hardware);
    header_tp(p, &s);
    fflush(stdout);
}

void report_epoch(const Plan *p, const EpochStat *e) {
    printf("epoch %d/%d | train loss %.4f | test loss %.4f | test accuracy %.2f%% | %.2f s | %.0f samples/s\n",
           e->epoch, p->epochs, e->train_loss, e->test_loss, 100 * e->test_accuracy, e->time_s, e->samples_s);
    fflush(stdout);
}

void report_tp_header(const Plan *p, const TpGroup *g) {
    if (p->T == 1 || !p->pipelined) return;
    const char *way = g->message == TP_MESSAGE_SLICE ? "slice" : "full";
    if (g->timed)
        printf("tensor parallel: pipeline messages %s, kept by --tp-message auto (one message timed each way at "
               "start-up: full %.3f ms, slice %.3f ms)\n", way, g->full_ms, g->slice_ms);
    else if (p->tensor.message == TP_MESSAGE_AUTO)  // one stage: nothing to time
        printf("tensor parallel: pipeline messages %s (--tp-message auto: one stage, no message to time)\n", way);
    else printf("tensor parallel: pipeline messages %s (--tp-message %s)\n", way, way);
}

void report_dp_header(const TrainConfig *c, const Plan *p, const Model *model) {
    Summary s = {0};
    choice_names(c, p, &s);
    int nb = 0;
    size_t shards = 0, params = 0;
    for (int k = 0; k < model->n_sync; k++) {
        nb += model->sync[k].nb;
        shards += model->sync[k].shard_total;
        params += model->sync[k].s->n_params;
    }
    printf("data parallel: %d replicas | %s sync, %d %s%s", p->D, s.sync, nb,
           p->data.sync == SYNC_BUCKETED ? "bucket" : "tensor", nb == 1 ? "" : "s");
    if (p->data.sync == SYNC_BUCKETED)
        printf(" (cap %g MiB)%s", p->data.bucket_mb,
               p->pipelined ? p->V > 1 ? " on stage 0's chunks" : " on stage 0" : "");
    printf(" | %s %s", p->data.zero ? "reduce-scatter + all-gather" : "all-reduce", s.allreduce);
    if (p->data.zero) printf(" | ZeRO-%d: this rank updates %zu of %zu parameters", p->data.zero, shards, params);
    printf("\n");
    fflush(stdout);
}

// ---- summary figures ----

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(const double *v, int n) {
    if (n <= 0) return NAN;
    double *t = xmalloc(sizeof(double) * (size_t)n);
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

// Step time: the slowest rank's, median over the steps (the first is a warm-up when there are
// more); throughput from it. FLOPs per step = 6 x parameters x rows, plus a forward with recompute.
static void fill_time(const TrainConfig *c, const Plan *p, Measure *m, Summary *s) {
    int start = s->start;
    s->n_run = (int)p->steps - start;
    s->skip = s->n_run > 2 ? 1 : 0;
    if (p->distributed) comm_allreduce_max_double(m->step_s + start, s->n_run, MPI_COMM_WORLD);
    double step_med = median(m->step_s + start + s->skip, s->n_run - s->skip);
    // A resumed run has no steps before start: the timeline counts time from its first step.
    for (int t = 0; t < start; t++) m->step_start[t] = m->step_start[start];
    double rows_per_step = (double)c->batch * p->N, P = (double)s->params;
    double flops = 6.0 * P * rows_per_step;
    if (p->pipe.ckpt) flops += 2.0 * (P - ((double)c->classes * c->hidden + c->classes)) * rows_per_step;
    s->step_ms = step_med * 1e3;
    s->samples_s = rows_per_step / step_med;
    s->gflops = flops / step_med / 1e9;
}

// Data parallelism. comm_ms: the time per step during which at least one of this rank's
// gradient collectives was in flight (from its start to the moment its completion was seen;
// completion is noticed at the next layer boundary while the backward runs), averaged over
// the ranks, median over the steps. comm_hidden: the share of that in-flight time that passed
// while the step's forward/backward work was still running (ddp: this rank's; hybrid: any stage
// of this rank's pipeline, i.e. the cool-down counts), summed over ranks and steps; the rest is
// exposed (the optimizer step waited for it). Naive sync starts after the backward, so in ddp it
// is 0 by construction; ZeRO-1's parameter all-gather is always exposed.
static void fill_comm_time(const Plan *p, Measure *m, Summary *s) {
    int start = s->start, n = s->n_run, world = p->world;
    comm_allreduce_sum_double(m->comm_s + start, n, MPI_COMM_WORLD);
    comm_allreduce_sum_double(m->exposed_s + start, n, MPI_COMM_WORLD);
    double tot = 0, exp = 0;
    for (int t = start; t < start + n; t++) {
        m->comm_s[t] /= world;
        m->exposed_s[t] /= world;
        if (t >= start + s->skip) { tot += m->comm_s[t]; exp += m->exposed_s[t]; }
    }
    s->comm_ms = median(m->comm_s + start + s->skip, n - s->skip) * 1e3;
    s->comm_hidden = tot > 0 ? 1.0 - exp / tot : 0;
}

// The optimizer state per rank (Adam's two moments), the largest over the ranks; a replica's buckets
// and collectives per step (the sum over its stages and their chunks).
static void fill_sync_state(const TrainConfig *c, const Plan *p, const Comm *comm, const Model *model, Summary *s) {
    size_t held = 0;
    double nb[2] = {0, 0};
    for (int k = 0; k < model->n_sync; k++) {
        held += p->data.zero ? model->sync[k].shard_total : model->sync[k].s->n_params;
        nb[0] += model->sync[k].nb;
        nb[1] += model->sync[k].step_calls;
    }
    double v[1] = {c->optimizer == OPTIM_ADAM ? 2.0 * sizeof(float) * (double)held : 0};
    comm_allreduce_max_double(v, 1, MPI_COMM_WORLD);
    s->optimizer_bytes = v[0];
    comm_allreduce_sum_double(nb, 2, comm->pp);
    s->buckets = nb[0];
    s->collectives = nb[1];
    s->shm_collectives = comm_shared_count(comm);
}

// The model state each rank allocated (weights, gradients, the optimizer's moments, as they are
// after the steps: the moments are allocated at the first update), the largest of each over the ranks:
// what `micropp plan` reckons beforehand.
static void fill_model_state(const Plan *p, const Model *model, Summary *s) {
    // weights, grads, optimizer, working, gathered peak, all-gathered, reduce-scattered, prefetches, max RSS
    double v[9] = {0};
    struct rusage ru;
    if (!getrusage(RUSAGE_SELF, &ru)) v[8] = (double)ru.ru_maxrss * 1024;  // (Linux: KiB)
    for (int k = 0; k < model->n_local; k++) {
        const Stage *st = &model->local[k];
        const GradSync *g = k < model->n_sync ? &model->sync[k] : NULL;
        double whole = (double)st->n_params * sizeof(float), shard = g ? (double)g->shard_total * sizeof(float) : 0;
        const Zero *z = g ? g->zs : NULL;  // ZeRO-2 and 3: shards of the gradients (and weights)
        v[0] += (st->params ? whole : 0) + (z && z->pshard ? shard : 0);  // what is allocated now
        v[1] += (st->grads ? whole : 0) + (z ? shard : 0);
        if (st->adam_m) v[2] += 2.0 * whole;
        if (g && g->m) v[2] += 2.0 * shard;
        if (z) { v[3] += zero_working_bytes(g); v[4] += z->peak_gathered; v[7] += (double)z->step_prefetches; }
        if (g) { v[5] += g->step_ag; v[6] += g->step_rs; }
    }
    if (p->distributed) comm_allreduce_max_double(v, 9, MPI_COMM_WORLD);
    s->weight_bytes = v[0];
    s->grad_bytes = v[1];
    s->optimizer_state_bytes = v[2];
    s->working_bytes = v[3];
    s->gathered_peak_bytes = v[4];
    s->allgather_bytes = v[5];
    s->reduce_scatter_bytes = v[6];
    s->prefetches = v[7];
    s->max_rss = v[8];
}

// --gemm-timing: this rank's share of step time inside gemm (averaged over ranks), and the
// GFLOP/s of the model's gemms while they run: forward 2BHH per layer, backward 4BHH (the
// first layer computes no input gradient), the head likewise, recompute 2BHH per layer.
static void fill_gemm(const TrainConfig *c, const Plan *p, const Measure *m, Summary *s) {
    double g = 0, t = 0;
    for (int k = s->start + s->skip; k < (int)p->steps; k++) { g += m->gemm_s[k]; t += m->step_s[k]; }
    double v[2] = {g / (s->n_run - s->skip), g / t};
    if (p->distributed) comm_allreduce_sum_double(v, 2, MPI_COMM_WORLD);
    double B = (double)c->batch * p->N, L = (double)c->layers, HH = (double)c->hidden * c->hidden,
           HC = (double)c->hidden * c->classes;
    double HxD = (double)c->hidden * p->inputs;  // layer 0: Linear(D, H)
    double gemm_flops =
        2 * B * (HxD + (L - 1) * HH + HC) + 2 * B * (HxD + (L - 1) * HH + HC) + 2 * B * ((L - 1) * HH + HC);
    if (p->pipe.ckpt) gemm_flops += 2 * B * (HxD + (L - 1) * HH);
    int ranks = p->distributed ? p->world : 1;
    s->gemm_ms = v[0] / ranks * 1e3;
    s->gemm_share = v[1] / ranks;
    s->gemm_gflops = gemm_flops / v[0] / 1e9;  // v[0]: gemm seconds per step summed over ranks
}

// --tp: the tensor-parallel all-reduces of the steps, per step and rank (the mean over the ranks).
static void fill_tp(const Plan *p, const Measure *m, Summary *s) {
    double n = (double)s->n_run, v[3] = {(double)m->tp_calls / n, m->tp_floats * sizeof(float) / n, m->tp_s / n};
    comm_allreduce_sum_double(v, 3, MPI_COMM_WORLD);
    s->tp_calls = v[0] / p->world;
    s->tp_bytes = v[1] / p->world;
    s->tp_ms = v[2] / p->world * 1e3;
    s->tp_share = s->tp_ms / s->step_ms;
}

// Median duration of this rank's actions of one kind over the measured steps.
static double kind_median(const Measure *m, int kind, int from_step) {
    double *d = xmalloc(sizeof(double) * (size_t)(m->n_ev + 1));
    int n = 0;
    for (int i = 0; i < m->n_ev; i++)
        if (m->ev[i].kind == kind && m->ev[i].step >= from_step) d[n++] = m->ev[i].t1 - m->ev[i].t0;
    double med = median(d, n);
    free(d);
    return med;
}

// Every stage's value of this rank's x, within its pipeline (hybrid: each replica's own).
static double *per_stage(const Plan *p, const Wire *w, double x) {
    double *v = xcalloc((size_t)p->K, sizeof(double));
    v[w->stage] = x;
    comm_allreduce_sum_double(v, p->K, w->comm.pp);
    return v;
}

// Measured bubble per rank = 1 - busy / span, span the slowest rank's pipeline time; the median
// pass times.
static void fill_pipeline_measured(const Plan *p, const Wire *w, Measure *m, Summary *s) {
    int start = s->start, n = s->n_run, from = start + s->skip;
    comm_allreduce_max_double(m->span_s + start, n, w->comm.pp);
    double *b = xmalloc(sizeof(double) * (size_t)n);
    for (int t = 0; t < n; t++) b[t] = 1.0 - m->busy_s[start + t] / m->span_s[start + t];
    s->bubble = per_stage(p, w, median(b + s->skip, n - s->skip));
    free(b);
    s->split = p->split;
    double f = kind_median(m, ACT_FORWARD, from), bk, i, wt;
    if (s->split) {  // NAN where the rank ran none: a file's rank may run full backwards only, or some of each
        i = kind_median(m, ACT_BACKWARD_INPUT, from);
        wt = kind_median(m, ACT_BACKWARD_WEIGHT, from);
        bk = kind_median(m, ACT_BACKWARD, from);
        if (!isfinite(bk)) bk = i + wt;
    } else {
        bk = kind_median(m, ACT_BACKWARD, from);
        i = wt = bk / 2;  // only their sum matters for a full backward
    }
    s->med = (Costs){per_stage(p, w, f), per_stage(p, w, bk), per_stage(p, w, i), per_stage(p, w, wt)};
}

// The peaks of activation memory per stage (the tally of each rank's chunks), and the theory: the
// simulated bubble with uniform costs (sim, as set-up simulated it).
static void fill_pipeline_memory(const Plan *p, const Wire *w, const Model *model, const SimResult *sim, Summary *s) {
    s->peak_bytes = per_stage(p, w, (double)model->tally.peak_bytes);
    s->peak_inflight = per_stage(p, w, model->tally.peak_inflight);
    s->peak_deferred = per_stage(p, w, model->tally.peak_deferred);
    s->bubble_theory = sim->bubble_mean;
}

// What the simulator predicts for this schedule with each rank's median times: F, and B (or I and
// W where the backward is split; a full backward costs I + W there, and a rank that ran no I or W,
// only full backwards, half its B each), each the time of one pass of one chunk. The simulator takes
// whole-stage costs (a chunk pass is 1/v of them), so they are scaled by v.
static void fill_pipeline_simulated(const TrainConfig *c, const Plan *p, Summary *s) {
    int K = p->K, V = p->V;
    double *st[3];
    for (int k = 0; k < 3; k++) {
        st[k] = xmalloc(sizeof(double) * (size_t)K);
        for (int q = 0; q < K; q++) {
            double x = (k == 0 ? s->med.f : k == 1 ? s->med.i : s->med.w)[q];
            st[k][q] = (k && !isfinite(x) ? s->med.b[q] / 2 : x) * V;
        }
    }
    SimSpec ms = {.kind = p->schedule,
                  .file = p->file,
                  .K = K,
                  .M = p->M,
                  .v = V,
                  .stage_f = st[0],
                  .stage_b = st[1],
                  .stage_w = st[2],
                  .slices = c->trace[0] || c->timeline[0] || c->gantt};  // the simulated chart's (observe)
    schedule_sim(&ms, &s->msim);
    for (int k = 0; k < 3; k++) free(st[k]);
}

// The step drawn by --timeline / --gantt (0-based): the user's, else the one nearest the median time.
static int shown_step(const TrainConfig *c, const Plan *p, const Measure *m, const Summary *s) {
    if (c->timeline_step) return (int)c->timeline_step - 1;
    int best = s->start + s->skip;  // the first step measured
    for (int t = best; t < (int)p->steps; t++)
        if (fabs(m->step_s[t] * 1e3 - s->step_ms) < fabs(m->step_s[best] * 1e3 - s->step_ms)) best = t;
    return best;
}

// A file rank 0 could not write at the end: one line's worth, naming the file and the fix. The run
// goes on to its summary, and every rank then exits 1 (train.c).
static void write_failed(Summary *s, const char *flag, const char *path, int err) {
    const char *fix = out_write_hint(err);
    if (!s->write_err[0])
        snprintf(s->write_err, sizeof s->write_err,
                 "train: writing --%s '%s' failed: %s: %s; the training itself completed", flag, path, strerror(err),
                 fix);
}

// Rank 0: --trace, the Chrome trace of every step.
static void write_trace(const TrainConfig *c, const Plan *p, Summary *s, const Timeline *tl) {
    OutFile o;
    int err = out_open(&o, c->trace);
    if (!err) {
        char meta[512];
        snprintf(meta, sizeof meta,
                 "{\"micropp\":\"train\",\"schedule\":\"%s\",\"stages\":%d,\"micro_batches\":%d,"
                 "\"replicas\":%d,\"tp\":%d,\"layers\":%lld,\"hidden\":%lld,\"batch\":%lld,\"steps\":%lld,"
                 "\"checkpoint_activations\":%s}",
                 s->schedule, p->K, p->M, p->D, p->T, (long long)c->layers, (long long)c->hidden, (long long)c->batch,
                 p->steps, p->pipe.ckpt ? "true" : "false");
        timeline_write_chrome(o.f, tl, meta);
        err = out_commit(&o);
    }
    if (err) write_failed(s, "trace", c->trace, err);
}

// The measured chart of the shown step: the bubble of this step per rank = 1 - (compute of the
// action list) / its pipeline's span (fill_pipeline_measured's max over the pipeline: with --tp or
// replicas, each tp rank and replica has its own), averaged over the ranks.
static void measured_chart(const Plan *p, const Measure *m, const Summary *s, const Timeline *tl, Gantt *g) {
    timeline_step_gantt(tl, s->shown, g);
    double bub = 0;
    for (int k = 0; k < g->rows; k++) {
        double busy = 0;
        for (int i = 0; i < g->n[k]; i++) {
            const Interval *v = &g->slices[k][i];
            if (v->kind < ACT_KINDS && !kind_style(v->kind)->bar) busy += v->t1 - v->t0;
        }
        bub += (1 - busy / tl->span[k][s->shown]) / g->rows;
    }
    char vpart[48] = "", grid[96];
    if (p->V > 1) snprintf(vpart, sizeof vpart, " x %d virtual stages", p->V);
    int grid_named = p->D > 1 || p->T > 1;  // a rank per stage; else the grid that makes the ranks
    size_t len = (size_t)snprintf(grid, sizeof grid, "%d %s%s", p->K, grid_named ? "stages" : "ranks", vpart);
    if (p->D > 1) len += (size_t)snprintf(grid + len, sizeof grid - len, " x %d replicas", p->D);
    if (p->T > 1) len += (size_t)snprintf(grid + len, sizeof grid - len, " x tp %d", p->T);
    if (grid_named) snprintf(grid + len, sizeof grid - len, " = %d ranks", g->rows);
    snprintf(g->title, sizeof g->title,
             "measured: step %d of %lld | %s | %s | %d micro-batches | %.3f ms | bubble %.3f (mean over ranks), "
             "theory %.3f",
             s->shown + 1, p->steps, s->schedule, grid, p->M, m->step_s[s->shown] * 1e3, bub, s->bubble_theory);
}

// The simulated chart: the schedule run with the measured per-stage costs.
static void simulated_chart(const Plan *p, const Summary *s, Gantt *g) {
    int K = p->K;
    double f = 0, b = 0, i = 0, w = 0;
    int n_iw = 0;  // the ranks that ran I and W
    for (int k = 0; k < K; k++) { f += s->med.f[k] / K; b += s->med.b[k] / K; }
    for (int k = 0; k < K; k++)
        if (isfinite(s->med.i[k]) && isfinite(s->med.w[k])) {
            i += s->med.i[k];
            w += s->med.w[k];
            n_iw++;
        }
    if (n_iw) { i /= n_iw; w /= n_iw; }
    char costs[96];
    if (s->split) snprintf(costs, sizeof costs, "mean F %.3f ms, I %.3f ms, W %.3f ms", f * 1e3, i * 1e3, w * 1e3);
    else snprintf(costs, sizeof costs, "mean F %.3f ms, B %.3f ms", f * 1e3, b * 1e3);
    snprintf(g->title, sizeof g->title, "simulated: %s with each %s's median costs (%s; transfers free) | bubble %.3f",
             s->schedule, p->V > 1 ? "chunk pass" : "stage", costs, s->msim.bubble_mean);
    g->row_label = "stage";
    g->rows = s->msim.K;
    g->slices = s->msim.slices;
    g->n = s->msim.n_slices;
    g->t_end = s->msim.makespan;
}

// Rank 0: writes --trace, and builds the two charts of the shown step (measured, and simulated with
// the measured per-stage costs) that --timeline writes as SVG and --gantt prints.
static void observe(const TrainConfig *c, const Plan *p, const Measure *m, Summary *s, const Timeline *tl) {
    Gantt *g = s->charts;
    if (c->trace[0]) write_trace(c, p, s, tl);
    measured_chart(p, m, s, tl, &g[0]);
    simulated_chart(p, s, &g[1]);
    // text: the shortest forward or backward one label wide, the chart at most 160 characters
    double shortest = INFINITY;
    for (int k = 0; k < p->K; k++)
        shortest = fmin(shortest, fmin(s->med.f[k], s->split ? fmin(s->med.i[k], s->med.w[k]) : s->med.b[k]));
    for (int i = 0; i < 2; i++) {
        g[i].cell = shortest;
        g[i].width = 160;
        g[i].axis_scale = 1e3;
        g[i].axis_unit = "ms";
    }
    if (c->timeline[0]) {
        OutFile o;
        int err = out_open(&o, c->timeline);
        if (!err) { gantt_svg(o.f, g, 2); err = out_commit(&o); }
        if (err) write_failed(s, "timeline", c->timeline, err);
    }
}

// This rank's place for its track's name: the axes the run has beyond one rank per stage.
static TrackPos track_pos(const Plan *p, const Wire *w) {
    if (p->T == 1 && !(p->pipelined && p->D > 1)) return (TrackPos){0, 0, 0, 1, 1, 1};
    return (TrackPos){w->stage, w->replica, w->comm.tp_rank, p->pipelined ? p->K : 1, p->D, p->T};
}

void summary_fill(Run *r, double accuracy, const VerifyResult *v, Summary *s) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    Measure *m = &r->m;
    memset(s, 0, sizeof *s);
    names(c, p, r->wire.be, s);
    s->accuracy = accuracy;
    s->eval_rows = p->eval_rows;
    s->verify = c->verify ? v : NULL;
    s->start = r->progress.start;
    s->shown = -1;
    s->gemm_ms = s->gemm_share = s->gemm_gflops = s->comm_ms = s->comm_hidden = NAN;
    s->bubble_theory = NAN;
    fill_time(c, p, m, s);
    fill_model_state(p, &r->model, s);
    if (r->model.n_sync) {
        fill_comm_time(p, m, s);
        fill_sync_state(c, p, &r->wire.comm, &r->model, s);
    }
    if (c->gemm_timing) fill_gemm(c, p, m, s);
    if (p->T > 1) fill_tp(p, m, s);
    s->tp = &r->wire.tp;
    if (!p->pipelined && c->trace[0]) {  // ddp with ZeRO: every rank's forward, backward and collectives
        Timeline tl;
        timeline_gather(&tl, m->ev, m->n_ev, m->step_start, NULL, (int)p->steps, track_pos(p, &r->wire),
                        MPI_COMM_WORLD);
        if (r->wire.rank == 0) write_trace(c, p, s, &tl);
        timeline_free(&tl);
    }
    if (!p->pipelined) return;
    fill_pipeline_measured(p, &r->wire, m, s);
    fill_pipeline_memory(p, &r->wire, &r->model, &r->exec.sim, s);
    fill_pipeline_simulated(c, p, s);
    s->message_bytes = pipe_message_bytes(p, &r->model.local[0]);
    if (c->trace[0] || c->timeline[0] || c->gantt) {
        Timeline tl;
        s->shown = shown_step(c, p, m, s);
        timeline_gather(&tl, m->ev, m->n_ev, m->step_start, m->span_s, (int)p->steps, track_pos(p, &r->wire),
                        MPI_COMM_WORLD);
        if (r->wire.rank == 0) observe(c, p, m, s, &tl);
        timeline_free(&tl);
    }
}

void summary_free(Summary *s) {
    if (s->charts[0].slices) gantt_free_slices(&s->charts[0]);
    sim_result_free(&s->msim);
    free(s->med.f); free(s->med.b); free(s->med.i); free(s->med.w);
    free(s->bubble); free(s->peak_bytes); free(s->peak_inflight); free(s->peak_deferred);
    memset(s, 0, sizeof *s);
}

// ---- the text summary ----

// Per rank; with chunks, its layer ranges in chunk order, the medians per chunk pass, and in-flight
// counting chunk passes; a split backward shows I and W (and the deferred W's).
static void ms_or_dash(double sec, char *buf, size_t n) {
    if (isfinite(sec)) snprintf(buf, n, "%9.3f", sec * 1e3);
    else snprintf(buf, n, "%9s", "-");
}

static void text_pipeline(const Plan *p, const Summary *s) {
    int split = s->split;
    char whole[256] = "";  // the stages of a split schedule that ran full backwards only
    printf("\n%-6s %-10s %-29s   %9s %9s%s %14s  %s\n", "", "", "----------- bubble ----------", "median", "median",
           split ? "    median" : "", "", "");
    printf("%-6s %-10s %9s %9s %9s   %9s %9s%s %14s  %s%s\n", "stage", "layers", "measured", "theory", "simulated",
           "F ms", split ? "I ms" : "B ms", split ? "      W ms" : "", "peak in-flight",
           split ? "peak deferred W  " : "", "peak activations");
    for (int k = 0; k < p->K; k++) {
        char lay[128] = "", wcol[16] = "", def[32] = "";
        for (int ch = 0; ch < p->V; ch++) {
            size_t l = strlen(lay);
            int vs = plan_vstage(p, k, ch);
            snprintf(lay + l, sizeof lay - l, "%s%d-%d", ch ? "," : "", p->lo[vs], p->lo[vs + 1] - 1);
        }
        char bcol[16];
        ms_or_dash((split ? s->med.i : s->med.b)[k], bcol, sizeof bcol);
        if (split) {
            wcol[0] = ' ';
            ms_or_dash(s->med.w[k], wcol + 1, sizeof wcol - 1);
            snprintf(def, sizeof def, "%-17.0f", s->peak_deferred[k]);
            if (!isfinite(s->med.i[k])) {
                size_t l = strlen(whole);
                snprintf(whole + l, sizeof whole - l, "%s%d", l ? ", " : "", k);
            }
        }
        char peak[32];
        printf("%-6d %-10s %9.3f %9.3f %9.3f   %9.3f %9s%s %14.0f  %s%s\n", k, lay, s->bubble[k], s->bubble_theory,
               s->msim.bubble[k], s->med.f[k] * 1e3, bcol, wcol, s->peak_inflight[k], def,
               fmt_bytes(s->peak_bytes[k], peak, sizeof peak));
    }
    printf("(simulated: the %s schedule run by the simulator with these %s times%s, transfers free)\n",
           s->schedule, split ? "F, I and W" : "F and B", p->V > 1 ? " of one chunk pass each" : "");
    if (whole[0])
        printf("(stage %s ran full backwards only, no I or W: simulated with half its median B as each)\n", whole);
}

static void text_verify(const TrainConfig *c, const Plan *p, const VerifyResult *v) {
    const char *per = !p->distributed ? "part" : p->V > 1 ? "chunk (pipeline order)" : "stage";
    int bf16 = c->precision == PRECISION_BF16;
    printf("\nverify (step 1 vs %smonolith reference on the cpu): worst relative error per %s:", bf16 ? "bf16 " : "",
           per);
    for (int k = 0; k < v->S; k++) printf(" %.2e", v->err[k]);
    printf(" -> %s\n  (tolerance %.0e%s, or %dx the float noise of the reference itself, every sum taken in\n"
           "  another order, per %s:",
           v->failed ? "FAILED" : "ok", v->tol, bf16 ? " (bf16: 2^-8)" : "", VERIFY_NOISE_FACTOR, per);
    for (int k = 0; k < v->S; k++) printf(" %.2e", v->noise[k]);
    printf(")\n");
    int tied = 0;
    for (int k = 0; k < v->S; k++) tied |= v->tied[k] > 0;
    if (tied)
        printf("  (%ld ReLU input%s within fp32's rounding bound of zero, which another summation order may decide\n"
               "  the other way: the gradient they carry is allowed, and was needed here)\n", v->relu_ties,
               v->relu_ties == 1 ? " lies" : "s lie");
    for (int k = 0; k < v->S && v->failed; k++) {  // where each failing stage is furthest off
        int code = (int)v->where[k], L = (int)c->layers, g = code / 2;
        if (v->excess[k] <= 1.0 || code < 0) continue;
        char what[64];
        if (code == 2 * L + 2) snprintf(what, sizeof what, "the loss");
        else if (g == L) snprintf(what, sizeof what, "the head's %s gradient", code % 2 ? "bias" : "weight");
        else snprintf(what, sizeof what, "layer %d's %s gradient", g, code % 2 ? "bias" : "weight");
        printf("  %s %d: worst is %s, error %.2e where the reference's own noise is %.2e\n", per, k, what,
               v->where_err[k], v->where_noise[k]);
    }
}

static void text_gantt(const Summary *s) {
    const char *nc = getenv("NO_COLOR");
    int colour = isatty(STDOUT_FILENO) && !(nc && *nc);
    printf("\n");
    gantt_text(stdout, &s->charts[0], colour);
    printf("\n");
    gantt_text(stdout, &s->charts[1], colour);
}

static void summary_text(const Run *r, const Summary *s) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    const Progress *g = &r->progress;
    int steps = (int)p->steps;
    printf("\nfinal loss %.4f (first %.4f) | ", r->m.loss[steps - 1], r->m.loss[s->start]);
    if (isfinite(s->accuracy))
        printf("accuracy %.*f%% on %lld %s rows\n", r->data.test.n ? 2 : 1, 100 * s->accuracy, s->eval_rows,
               r->data.test.n ? "test" : r->data.train.n ? "training" : "held-out");
    else printf("accuracy not measured (--eval-samples 0)\n");
    if (g->best_epoch)
        printf("best test accuracy %.2f%% after epoch %d (kept in %s)\n", 100 * g->best_accuracy, g->best_epoch,
               c->save);
    printf("step %.3f ms (median) | %.0f samples/s | %.1f GFLOP/s\n", s->step_ms, s->samples_s, s->gflops);
    if (s->predicted_step_ms > 0)
        printf("--auto picked %s: predicted %.3f ms a step, measured %.3f ms (%+.0f%%)\n", s->auto_layout,
               s->predicted_step_ms, s->step_ms, 100 * (s->predicted_step_ms - s->step_ms) / s->step_ms);
    if (c->gemm_timing)
        printf("gemm %.3f ms per step%s = %.1f%% of the step | %.1f GFLOP/s inside gemm\n", s->gemm_ms,
               p->distributed ? " per rank" : "", 100 * s->gemm_share, s->gemm_gflops);
    if (p->data_parallel)
        printf("gradient sync: %.0f collectives/step | in flight %.2f ms/step | %.0f%% hidden behind compute | "
               "optimizer state %.2f MB per rank\n",
               s->collectives, s->comm_ms, 100 * s->comm_hidden, s->optimizer_bytes / 1e6);
    if (p->T > 1)
        printf("tensor parallel: %.0f all-reduces/step per rank | %.3g MB | %.2f ms/step = %.0f%% of the step (%s)\n",
               s->tp_calls, s->tp_bytes / 1e6, s->tp_ms, 100 * s->tp_share, s->tp_allreduce);
    if (p->data.zero)
        printf("ZeRO-%d per rank: all-gather %.3f MB + reduce-scatter %.3f MB per step | weights %.2f MB, gradients "
               "%.2f MB, optimizer %.2f MB (+ %.2f MB working buckets)\n",
               p->data.zero, s->allgather_bytes / 1e6, s->reduce_scatter_bytes / 1e6, s->weight_bytes / 1e6,
               s->grad_bytes / 1e6, s->optimizer_state_bytes / 1e6, s->working_bytes / 1e6);
    if (p->pipelined) text_pipeline(p, s);
    if (s->verify) text_verify(c, p, s->verify);
    if (c->gantt) text_gantt(s);
    if (!s->write_err[0]) printf(REPORT_COMPLETED "\n");  // last: every output written
}

void summary_print(const Run *r, const Summary *s) {
    if (r->wire.rank != 0) return;
    if (r->c->json) summary_json(r, s);
    else summary_text(r, s);
    fflush(stdout);
}
