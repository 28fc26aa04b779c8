// train/report.c: the header a run prints before its first step, and the Summary after its last: filled
// once from what the steps measured (medians, reductions across ranks, the pipeline's bubble and its
// simulation, the trace and timeline files), then rendered as text or as one JSON object.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <cjson/cJSON.h>
#include "train/executor.h"
#include "train/report.h"
#include "train/report_json.h"
#include "comms/slurm.h"
#include "axes/zero.h"
#include "axes/compress.h"
#include "base/util.h"

// The choices' names (the sync's and the all-reduce's too: report_dp_header prints them)...
static void choice_names(const TrainConfig *c, const Plan *p, Summary *s) {
    choice_name(MODE_CHOICES, p->mode, s->mode, sizeof s->mode);
    choice_name(SCHED_NAMES, p->schedule, s->schedule, sizeof s->schedule);
    choice_name(OPTIM_CHOICES, c->optimizer, s->optimizer, sizeof s->optimizer);
    choice_name(TRANSPORT_CHOICES, p->transport, s->transport, sizeof s->transport);
    choice_name(PRECISION_CHOICES, c->precision, s->precision, sizeof s->precision);
}

// --experts: what the MoE layers add to the dense model's parameters: all of them (every expert), or
// those one row goes through (the router and k experts: the FLOPs of a step).
static double moe_params(const TrainConfig *c, const Plan *p, int active) {
    MoeSpec m = plan_moe(c, p);
    double H = (double)c->hidden, E = m.experts, dense = H * H + H, sum = 0;
    for (int l = 1; l < c->layers; l++)
        if (moe_layer(&m, l)) sum += E * H + E + (active ? m.top_k : E) * dense - dense;
    return sum;
}

// ... and with the device: what runs the products, and the model's size.
static void names(const TrainConfig *c, const Plan *p, const Backend *be, Summary *s) {
    choice_names(c, p, s);
    blas_describe(s->blas, sizeof s->blas);
    if (c->precision == PRECISION_BF16 && be->on_host)  // the kernel of a hidden layer's forward product
        onednn_describe(p->rows, (int)c->hidden, (int)c->hidden, s->onednn, sizeof s->onednn);
    be->describe(s->device, sizeof s->device);
    s->params = model_param_count((int)c->layers, p->inputs, (int)c->hidden, (int)c->classes);
    s->params += (size_t)moe_params(c, p, 0);
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

// On several nodes, why auto placed as it did where the ranks really are: what crosses nodes.
static const char *placement_why(const Plan *p, const Hardware *hw) {
    int st = p->placement == PLACEMENT_STAGES;
    if (!p->placement_auto) return " (--placement)";
    if (hw->nodes < 2 || !(p->placement_apart & (st ? APART_PIPELINE : APART_ALLREDUCE)))
        return st ? " -> auto keeps the pipeline on a node" : " -> auto keeps the all-reduce on a node";
    if (!(p->placement_apart & (st ? APART_ALLREDUCE : APART_PIPELINE)))
        return st ? " -> auto keeps the all-reduce on a node" : " -> auto keeps the pipeline on a node";
    return " -> auto: both cross nodes, the least traffic this way";
}

// Ranks not in node blocks (a node's ranks not one run of rank numbers, as srun -m cyclic deals them):
// said in one line, since each rank's neighbours are then on other nodes.
static void header_blocks(const Hardware *hw, int world) {
    int blocks = 1;
    for (int r = 1; r < world; r++) blocks &= hw->node_of[r] >= hw->node_of[r - 1];
    if (blocks) return;
    printf("note: the ranks are not in node blocks (");
    for (int r = 0; r < world && r < 4; r++) printf("%srank %d on %s", r ? ", " : "", r, hw->host[hw->node_of[r]]);
    printf("%s, as srun -m cyclic places them): adjacent ranks are on different nodes\n", world > 4 ? ", ..." : "");
}

// Hybrid: how the grid sits on the ranks and why; several nodes: which stage and replica each rank
// holds on each, the nodes named by host.
static void header_placement(const Plan *p, const Hardware *hw) {
    if (p->pipelined && p->data_parallel) {
        int st = p->placement == PLACEMENT_STAGES;
        char pp[32], dp[32];
        printf("placement %s: %s on adjacent ranks (rank = %s x %d + %s) | per step: pipeline %s, all-reduce %s%s\n",
               st ? "stages" : "replicas", st ? "each replica's stages" : "each stage's replicas",
               st ? "replica" : "stage", st ? p->K : p->D, st ? "stage" : "replica",
               fmt_bytes(p->pp_bytes, pp, sizeof pp), fmt_bytes(p->dp_bytes, dp, sizeof dp), placement_why(p, hw));
    }
    if (hw->nodes < 2) return;
    header_blocks(hw, p->world);
    for (int n = 0; n < hw->nodes; n++) {
        printf("%s host %s:", n ? " |" : "placement:", hw->host[n]);
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

// More BLAS threads on rank 0's node than it has cores: the ranks take turns, and every time printed
// measures that more than the run (a machine's fact: tests/doc_examples.py leaves the line out).
static void header_cores(const TrainConfig *c, const Hardware *hw) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN), ranks = hw->local_size > 0 ? hw->local_size : 1;
    if (cores > 0 && ranks * c->threads > cores)
        printf("note: %ld rank%s x %lld thread%s on this node share %ld core%s: the ranks take turns, so the times "
               "below measure that more than the run\n",
               ranks, ranks == 1 ? "" : "s", (long long)c->threads, c->threads == 1 ? "" : "s", cores,
               cores == 1 ? "" : "s");
}

// How waiting ranks spend their core, when --wait-policy or its config key chose it (comms/watchdog.h;
// --json says it always: the environment's MICROPP_WAIT_POLICY, as the tests set it, changes no line).
static void header_waits(const Plan *p) {
    WdWaits w;
    if (p->world < 2 || !wd_waits(&w) || w.from != WAITS_FROM_OPTION) return;
    const char *policy[] = {"active", "passive", "auto"};
    const char *mode[] = {"spin", "yield their core every turn", "sleep after a short spin"};
    char over[64] = "";
    if (w.override) snprintf(over, sizeof over, " (MICROPP_WAIT=%.20s over the policy)", w.override);
    printf("waits: --wait-policy %s: waiting ranks %s%s (%ld rank%s on this node, %ld core%s%s)\n", policy[w.policy],
           mode[w.mode], over, w.ranks, w.ranks == 1 ? "" : "s", w.cores, w.cores == 1 ? "" : "s",
           w.crowded ? ": a node has more ranks than cores" : "");
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
               (long long)c->classes, s.params, fmt_bytes_binary(s.params * 4.0, size, sizeof size));
    else
        printf("\nmodel Linear(%lld,%lld)+ReLU -> %lld x Linear(%lld,%lld)+ReLU -> Linear(%lld,%lld) | %zu parameters "
               "(%s fp32)\n",
               (long long)p->inputs, (long long)c->hidden, (long long)c->layers - 1, (long long)c->hidden,
               (long long)c->hidden, (long long)c->hidden, (long long)c->classes, s.params,
               fmt_bytes_binary(s.params * 4.0, size, sizeof size));
    if (c->moe.experts)
        printf("moe: every hidden layer l >= 1 with l %% %lld == 0 is a router Linear(%lld,%lld) and %lld experts "
               "Linear(%lld,%lld)+ReLU, top-%lld, capacity factor %g, aux loss %g\n",
               (long long)c->moe.every, (long long)c->hidden, (long long)c->moe.experts, (long long)c->moe.experts,
               (long long)c->hidden, (long long)c->hidden, (long long)c->moe.top_k, c->moe.capacity, c->moe.aux);
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
    if (be->on_host) header_cores(c, &w->hardware);
    header_waits(p);
    tensor_report_header(p);
    fflush(stdout);
}

void report_epoch(const Plan *p, const EpochStat *e) {
    char rate[32];
    printf("epoch %d/%d | train loss %.4f | test loss %.4f | test accuracy %.2f%% | %.2f s | %s samples/s\n",
           e->epoch, p->epochs, e->train_loss, e->test_loss, 100 * e->test_accuracy, e->time_s,
           fmt_si(e->samples_s, rate, sizeof rate));
    fflush(stdout);
}

// ---- summary figures ----

// Step time: the slowest rank's, median over the steps (the first is a warm-up when there are
// more); throughput and MFU from it (the FLOPs: report_step_flops; GFLOP/s adds checkpointing's recompute,
// MFU does not).
static void fill_time(const TrainConfig *c, const Plan *p, Measure *m, Summary *s) {
    int start = s->start;
    s->n_run = (int)p->steps - start;
    s->skip = s->n_run > 2 ? 1 : 0;
    if (p->distributed) comm_allreduce_max_double(m->step_s + start, s->n_run, MPI_COMM_WORLD);
    double step_med = median(m->step_s + start + s->skip, s->n_run - s->skip);
    // A resumed run has no steps before start: the timeline counts time from its first step.
    for (int t = 0; t < start; t++) m->step_start[t] = m->step_start[start];
    double rows_per_step = (double)c->batch * p->N;
    s->step_ms = step_med * 1e3;
    s->samples_s = rows_per_step / step_med;
    double P = (m->flops / rows_per_step + 2.0 * p->inputs * c->hidden) / 6, recompute = 0;  // (model_row_flops')
    if (p->pipe.ckpt) recompute = 2.0 * (P - ((double)c->classes * c->hidden + c->classes)) * rows_per_step;
    s->gflops = (m->flops + recompute) / step_med / 1e9;
    s->mfu = measure_mfu(&m->peak, m->flops, step_med);  // model FLOPs: recompute not counted
}

double report_step_flops(const TrainConfig *c, const Plan *p) {
    double P = (double)model_param_count((int)c->layers, p->inputs, (int)c->hidden, (int)c->classes) +
               moe_params(c, p, 1);  // MoE: what a row goes through (router and its top-k experts)
    return model_row_flops(P, p->inputs, (int)c->hidden) * (double)c->batch * p->N;
}

// The model state each rank allocated (weights, gradients, the optimizer's moments and --post-validate's
// copy, as they are after the steps: the moments are allocated at the first update), the largest of each
// over the ranks: what `micropp plan` reckons beforehand.
static void fill_model_state(const Plan *p, const Model *model, const PostVal *pv, Summary *s) {
    double v[5] = {0};  // weights, grads, optimizer, max RSS, activations at their peaks
    struct rusage ru;
    if (!getrusage(RUSAGE_SELF, &ru)) v[3] = (double)ru.ru_maxrss * 1024;  // (Linux: KiB)
    for (int k = 0; k < model->n_local; k++) {
        const Stage *st = &model->local[k];
        v[4] += (double)st->mem.peak_act_bytes;  // the manual split's parts stash all at once: their sum
        const GradSync *g = k < model->n_sync ? &model->sync[k] : NULL;
        double whole = (double)st->n_params * sizeof(float), shard = g ? (double)g->shard_total * sizeof(float) : 0;
        const Zero *z = g ? g->zs : NULL;  // ZeRO-2 and 3: shards of the gradients (and weights)
        v[0] += (st->params ? whole : 0) + (z && z->pshard ? shard : 0);  // what is allocated now
        v[1] += (st->grads ? whole : 0) + (z && z->gshard ? shard : 0);
        if (st->adam_m) v[2] += 2.0 * whole;
        if (g && g->m) v[2] += 2.0 * shard;
        if (pv->keep && pv->keep[k]) v[2] += pv->copies * whole;  // --post-validate's undo copy
    }
    const MemTally *t = model->n_local ? model->local[0].mem.tally : NULL;
    if (t) v[4] = (double)t->peak_bytes;  // a pipeline rank's chunks: the peak of their sum, as the rank held it
    if (p->distributed) comm_allreduce_max_double(v, 5, MPI_COMM_WORLD);
    s->weight_bytes = v[0];
    s->act_bytes = v[4];
    s->grad_bytes = v[1];
    s->optimizer_state_bytes = v[2];
    s->max_rss = v[3];
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

// The step drawn by --timeline / --gantt (0-based): the user's, else the one nearest the median time.
static int shown_step(const TrainConfig *c, const Plan *p, const Measure *m, const Summary *s) {
    if (c->observe.timeline_step) return (int)c->observe.timeline_step - 1;
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
    int err = out_open(&o, c->observe.trace);
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
    if (err) write_failed(s, "trace", c->observe.trace, err);
}

// The measured chart of the shown step: the bubble of this step per rank = 1 - (compute of the
// action list) / its pipeline's span (fill_pipeline_measured's max over the pipeline: with --tp or
// replicas, each tp rank and replica has its own), averaged over the ranks.
static void measured_chart(const Plan *p, const Measure *m, const Summary *s, const Timeline *tl, Gantt *g) {
    timeline_step_gantt(tl, s->pipe.shown, g);
    double bub = 0;
    for (int k = 0; k < g->rows; k++) {
        double busy = 0;
        for (int i = 0; i < g->n[k]; i++) {
            const Interval *v = &g->slices[k][i];
            if (v->kind < ACT_KINDS && !kind_style(v->kind)->bar) busy += v->t1 - v->t0;
        }
        bub += (1 - busy / tl->span[k][s->pipe.shown]) / g->rows;
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
             s->pipe.shown + 1, p->steps, s->schedule, grid, p->M, m->step_s[s->pipe.shown] * 1e3, bub,
             s->pipe.bubble_theory);
}

// The simulated chart: the schedule run with the measured per-stage costs.
static void simulated_chart(const Plan *p, const Summary *s, Gantt *g) {
    int K = p->K;
    double f = 0, b = 0, i = 0, w = 0;
    int n_iw = 0;  // the ranks that ran I and W
    for (int k = 0; k < K; k++) {
        f += s->pipe.med.f[k] / K;
        b += s->pipe.med.b[k] / K;
    }
    for (int k = 0; k < K; k++)
        if (isfinite(s->pipe.med.i[k]) && isfinite(s->pipe.med.w[k])) {
            i += s->pipe.med.i[k];
            w += s->pipe.med.w[k];
            n_iw++;
        }
    if (n_iw) { i /= n_iw; w /= n_iw; }
    char costs[96];
    if (s->pipe.split) snprintf(costs, sizeof costs, "mean F %.3f ms, I %.3f ms, W %.3f ms", f * 1e3, i * 1e3, w * 1e3);
    else snprintf(costs, sizeof costs, "mean F %.3f ms, B %.3f ms", f * 1e3, b * 1e3);
    snprintf(g->title, sizeof g->title, "simulated: %s with each %s's median costs (%s; transfers free) | bubble %.3f",
             s->schedule, p->V > 1 ? "chunk pass" : "stage", costs, s->pipe.msim.bubble_mean);
    g->row_label = "stage";
    g->rows = s->pipe.msim.K;
    g->slices = s->pipe.msim.slices;
    g->n = s->pipe.msim.n_slices;
    g->t_end = s->pipe.msim.makespan;
}

// Rank 0: writes --trace, and builds the two charts of the shown step (measured, and simulated with
// the measured per-stage costs) that --timeline writes as SVG and --gantt prints.
static void observe(const TrainConfig *c, const Plan *p, const Measure *m, Summary *s, const Timeline *tl) {
    Gantt *g = s->charts;
    if (c->observe.trace[0]) write_trace(c, p, s, tl);
    measured_chart(p, m, s, tl, &g[0]);
    simulated_chart(p, s, &g[1]);
    // text: the shortest forward or backward one label wide, the chart at most --width (or the terminal's
    // $COLUMNS, else 160) characters with its row labels ("rank 3 (s1 t1) ") and the axis' "ms" after it
    const char *cols = isatty(STDOUT_FILENO) ? getenv("COLUMNS") : NULL;
    long width = c->observe.gantt_width ? (long)c->observe.gantt_width : cols && *cols ? atol(cols) : 0;
    int label = 0;
    for (int r = 0; r < g[0].rows && g[0].row_name; r++)
        if ((int)strlen(g[0].row_name[r]) > label) label = (int)strlen(g[0].row_name[r]);
    int room = width > 0 ? (int)width - (label + 1) - 6 : 160;
    double shortest = INFINITY;
    for (int k = 0; k < p->K; k++)
        shortest = fmin(shortest, fmin(s->pipe.med.f[k],
                                       s->pipe.split ? fmin(s->pipe.med.i[k], s->pipe.med.w[k]) : s->pipe.med.b[k]));
    for (int i = 0; i < 2; i++) {
        g[i].cell = shortest;
        g[i].width = room > 10 ? room : 10;
        g[i].axis_scale = 1e3;
        g[i].axis_unit = "ms";
    }
    if (c->observe.timeline[0]) {
        OutFile o;
        int err = out_open(&o, c->observe.timeline);
        if (!err) { gantt_svg(o.f, g, 2, 0); err = out_commit(&o); }
        if (err) write_failed(s, "timeline", c->observe.timeline, err);
    }
}

// Rank 0, ddp's --timeline: the shown step's forward and backward on each rank's row, its buckets' all-reduces
// on the line under it (comm_hidden: the share of their time that passed while the backward still ran).
static void write_replicas_timeline(const TrainConfig *c, const Plan *p, const Measure *m, Summary *s,
                                    const Timeline *tl) {
    Gantt g = {0};
    int shown = shown_step(c, p, m, s);
    timeline_step_gantt(tl, shown, &g);
    snprintf(g.title, sizeof g.title,
             "measured: step %d of %lld | %d replicas | %.3f ms | %d bucket%s of %.3g MiB | gradient sync %.0f%% "
             "hidden behind compute (the run's)",
             shown + 1, p->steps, p->D, m->step_s[shown] * 1e3, (int)s->data.buckets, s->data.buckets == 1 ? "" : "s",
             p->data.bucket_mb, 100 * s->data.comm_hidden);
    g.axis_scale = 1e3;
    g.axis_unit = "ms";
    OutFile o;
    int err = out_open(&o, c->observe.timeline);
    if (!err) { gantt_svg(o.f, &g, 1, 0); err = out_commit(&o); }
    if (err) write_failed(s, "timeline", c->observe.timeline, err);
    gantt_free_slices(&g);
}

// This rank's place for its track's name: the axes the run has beyond one rank per stage.
static TrackPos track_pos(const Plan *p, const Wire *w) {
    if (p->T == 1 && !(p->pipelined && p->D > 1)) return (TrackPos){0, 0, 0, 1, 1, 1};
    return (TrackPos){w->stage, w->replica, w->comm.tp_rank, p->pipelined ? p->K : 1, p->D, p->T};
}

// The pipeline's part: this rank's median pass times (F, and B or I and W where the backward is split;
// NAN where the rank ran none: a file's rank may run full backwards only, or some of each) and its
// measures, reduced over each pipeline by the axis.
static void pipeline_fill(Run *r, Summary *s) {
    const Plan *p = &r->p;
    const TrainConfig *c = r->c;
    Measure *m = &r->m;
    int from = s->start + s->skip;
    double f = kind_median(m, ACT_FORWARD, from), bk, i, wt;
    if (p->split) {
        i = kind_median(m, ACT_BACKWARD_INPUT, from);
        wt = kind_median(m, ACT_BACKWARD_WEIGHT, from);
        bk = kind_median(m, ACT_BACKWARD, from);
        if (!isfinite(bk)) bk = i + wt;
    } else {
        bk = kind_median(m, ACT_BACKWARD, from);
        i = wt = bk / 2;  // only their sum matters for a full backward
    }
    PipelineMeasures x = {.span_s = m->span_s,
                          .busy_s = m->busy_s,
                          .start = s->start,
                          .n = s->n_run,
                          .skip = s->skip,
                          .f = f,
                          .b = bk,
                          .i = i,
                          .w = wt,
                          .tally = &r->model.tally,
                          .sim = &r->exec.sim,
                          .message_bytes = pipe_message_bytes(p, &r->model.local[0]),
                          .slices = c->observe.trace[0] || c->observe.timeline[0] || c->observe.gantt};
    pipeline_report_fill(&s->pipe, p, &r->wire.comm, &x);
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
    s->predicted = r->predicted;
    s->pipe.shown = -1;
    s->gemm_ms = s->gemm_share = s->gemm_gflops = NAN;
    s->peak = m->peak;
    fill_time(c, p, m, s);
    fill_model_state(p, &r->model, &r->pv, s);
    if (r->model.n_sync) {
        data_report_fill(&s->data, p, &r->wire.comm, r->model.sync, r->model.n_sync, c->optimizer, m->comm_s,
                         m->exposed_s, s->start, s->n_run, s->skip);
        if (p->data.zero) zero_report_fill(&s->data, p, r->model.sync, r->model.n_sync);
        if (p->data.compress) compress_report_fill(&s->data, r->model.sync, r->model.n_sync);
    }
    const LocalSgd *outer = r->model.outer;
    if (outer) {
        double held = 0;  // Adam's moments: every parameter of the rank's stages
        for (int k = 0; k < outer->n; k++) held += (double)outer->local[k].n_params;
        data_report_fill_outer(&s->data, p, c->optimizer, held, outer->syncs, outer->seconds, outer->floats);
    }
    if (c->gemm.timing) fill_gemm(c, p, m, s);
    double tp_med = s->n_run > s->skip ? median(m->tp_s + s->start + s->skip, s->n_run - s->skip) : 0;
    tensor_report_fill(&s->tensor, p, &r->wire.tp, (double)m->tp_calls, m->tp_floats, tp_med, s->n_run, s->step_ms);
    expert_report_fill(&s->expert, p, &r->wire.ep, m->step_s + s->start, s->skip);
    if (!p->pipelined && (c->observe.trace[0] || c->observe.timeline[0])) {  // ddp, --tp: every rank's forward,
        Timeline tl;                                                           // backward and collectives
        timeline_gather(&tl, m->ev, m->n_ev, m->step_start, NULL, (int)p->steps, track_pos(p, &r->wire),
                        MPI_COMM_WORLD);
        if (r->wire.rank == 0 && c->observe.trace[0]) write_trace(c, p, s, &tl);
        if (r->wire.rank == 0 && c->observe.timeline[0]) write_replicas_timeline(c, p, m, s, &tl);
        timeline_free(&tl);
    }
    if (!p->pipelined) return;
    pipeline_fill(r, s);
    if (c->observe.trace[0] || c->observe.timeline[0] || c->observe.gantt) {
        Timeline tl;
        s->pipe.shown = shown_step(c, p, m, s);
        timeline_gather(&tl, m->ev, m->n_ev, m->step_start, m->span_s, (int)p->steps, track_pos(p, &r->wire),
                        MPI_COMM_WORLD);
        if (r->wire.rank == 0) observe(c, p, m, s, &tl);
        timeline_free(&tl);
    }
}

void summary_free(Summary *s) {
    if (s->charts[0].slices) gantt_free_slices(&s->charts[0]);
    pipeline_report_free(&s->pipe);
    memset(s, 0, sizeof *s);
}

// ---- the text summary ----

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
    if (v->det && v->det_ulps == 0)
        printf("  --deterministic: exact, every gradient the reference's bit for bit (0 ulp)\n");
    else if (v->det)
        printf("  --deterministic: a gradient lies %.0f ulp from the reference's: not the canonical order (a bug)\n",
               v->det_ulps);
    const char *method = p->data.compress == COMPRESS_TOPK   ? "top-k"
                         : p->data.compress == COMPRESS_SIGN ? "sign"
                                                             : "PowerSGD";
    if (p->data.compress)
        printf("  --compress: it checks step 1's exact sum of the replicas' gradients; the compressed sum the run\n"
               "  stepped with (%s), and the error buffers, it does not check\n", method);
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

// Memory per rank, the columns of `micropp plan` (binary units, as plan prints them): what the rank
// that holds most allocated for each part, and the activations live at its stages' peaks.
static void memory_text(const Plan *p, const Summary *s) {
    char b[4][32];
    printf("memory per %s: weights %s | gradients %s | optimizer %s | activations %s (peak)\n",
           p->distributed ? "rank" : "process", fmt_bytes_binary(s->weight_bytes, b[0], 32),
           fmt_bytes_binary(s->grad_bytes, b[1], 32), fmt_bytes_binary(s->optimizer_state_bytes, b[2], 32),
           fmt_bytes_binary(s->act_bytes, b[3], 32));
}

// The step line's end: MFU against the ranks' summed peak, and where the peak came from.
static void mfu_text(const Plan *p, const Summary *s) {
    int ranks = p->distributed ? p->world : 1;
    if (!isfinite(s->mfu)) {
        printf("MFU unknown (%s)\n", s->peak.source);
        return;
    }
    char peak[32];
    printf("MFU %.1f%% (of %s GFLOP/s peak%s, %s)\n", 100 * s->mfu, fmt_sig3(s->peak.total_gflops, peak, sizeof peak),
           ranks > 1 ? " of the ranks together" : "", s->peak.source);
}

static void summary_text(const Run *r, const Summary *s) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    const Progress *g = &r->progress;
    int steps = (int)p->steps;
    printf("\nfinal loss %.4f (first %.4f) | ", r->m.loss[steps - 1], r->m.loss[s->start]);
    if (c->guard.clip_grad > 0) {
        int clipped = 0;
        for (int i = s->start; i < steps; i++) clipped += r->m.clip_scale[i] < 1;
        printf("clipped %d of %d steps (--clip-grad %g) | ", clipped, steps - s->start, c->guard.clip_grad);
    }
    if (isfinite(s->accuracy))
        printf("accuracy %.*f%% on %lld %s rows\n", r->data.test.n ? 2 : 1, 100 * s->accuracy, s->eval_rows,
               r->data.test.n ? "test" : r->data.train.n ? "training" : "held-out");
    else printf("accuracy not measured (--eval-samples 0)\n");
    if (g->best_epoch)
        printf("best test accuracy %.2f%% after epoch %d (kept in %s)\n", 100 * g->best_accuracy, g->best_epoch,
               c->ckpt.save);
    if (r->m.moe.E) {  // --experts: one line
        double *load = xcalloc((size_t)r->m.moe.E, sizeof(double));
        MoeMeans mm = measure_moe_means(&r->m, s->start, s->n_run, load);
        printf("moe: %d experts, top-%lld | rows per expert per step (all MoE layers)", r->m.moe.E,
               (long long)c->moe.top_k);
        for (int e = 0; e < r->m.moe.E; e++) printf(" %.1f", load[e]);
        printf(" (busiest %.2fx even) | dropped %.2f%% | aux loss %.4g (mean per step)\n", mm.busiest,
               100 * mm.dropped_share, mm.aux);
        free(load);
    }
    char rate[32], flops[32];
    printf("step %.3f ms (median) | %s samples/s | %s GFLOP/s | ", s->step_ms, fmt_si(s->samples_s, rate, sizeof rate),
           fmt_sig3(s->gflops, flops, sizeof flops));
    mfu_text(p, s);
    memory_text(p, s);
    if (s->predicted.step_ms > 0)
        printf("%s %s: predicted %.3f ms a step, measured %.3f ms (%+.0f%%)\n",
               s->predicted.picked ? "--auto picked" : "--profile priced", s->predicted.layout,
               s->predicted.step_ms, s->step_ms, 100 * (s->predicted.step_ms - s->step_ms) / s->step_ms);
    if (c->gemm.timing)
        printf("gemm %.3f ms per step%s = %.1f%% of the step | %s GFLOP/s inside gemm\n", s->gemm_ms,
               p->distributed ? " per rank" : "", 100 * s->gemm_share, fmt_sig3(s->gemm_gflops, flops, sizeof flops));
    data_report_text(p, &s->data, s->weight_bytes, s->grad_bytes, s->optimizer_state_bytes);
    tensor_report_text(p, &s->tensor);
    expert_report_text(&s->expert);
    pipeline_report_text(p, &s->pipe);
    if (s->verify) text_verify(c, p, s->verify);
    if (c->observe.gantt) text_gantt(s);
    if (!s->write_err[0]) printf(REPORT_COMPLETED "\n");  // last: every output written
}

void summary_print(const Run *r, const Summary *s) {
    if (r->wire.rank != 0) return;
    if (r->c->json) summary_json(r, s);
    else summary_text(r, s);
    fflush(stdout);
}
