// axes/pipeline.c: the pipeline, the axis (axes/axis.h's contract): its rules (the schedule and its chunks,
// the partition of layers, its observers), its sizes (what a stage stashes), its set-up, its part of the
// report and its price for the planner. The executor that runs its action lists is a phase of the run
// (train/executor.c); the schedules themselves are schedule.c's table.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "axes/pipeline.h"
#include "axes/tensor.h"  // a rank's layer widths (tensor_out_widths)
#include "comms/tags.h"   // comm_tag_chunk_max: the largest tag a schedule needs
#include "p2p.h"          // p2p_neighbours, p2p_pair, p2p_plan
#include "comms/messages.h"  // comm_plan_calls
#include "base/util.h"

// ---- rules ----

void pipeline_part(const TrainConfig *c, const Degrees *d, Plan *p) {
    p->M = p->pipelined ? (int)c->pipe.micro_batches : 1;
    p->pipe = (PipelinePlan){.ckpt = p->pipelined && c->pipe.checkpoint_activations,
                             .max_inflight = c->pipe.max_inflight ? (int)c->pipe.max_inflight : 2 * d->pp};
}

// Every stage needs a layer.
static int rule_depth(const TrainConfig *c, const Plan *p, Err *e) {
    if (p->K > MAX_STAGES) return refuse(e, "train: %d stages is more than the %d supported", p->K, MAX_STAGES);
    if (p->K > c->layers) {
        const char *what = p->pipelined ? "stages (--pp)" : "parts",
                   *fewer = p->pipelined ? "a smaller --pp" : "fewer parts (a smaller --pp)";
        return refuse(e, "train: %d %s but only %lld layers: every stage needs a layer, so use --layers >= %d or %s",
                      p->K, what, (long long)c->layers, p->K, fewer);
    }
    return 0;
}

// The schedule: chunks per rank and their chunk order (the schedule's), the (M, K) it can run
// (schedule_check holds the rule), and the largest message tag of the run, which MPI must accept.
// A schedule file (read and proven by train.c before the plan: the plan's input) fixes the ranks of
// the pipeline, the micro-batches and the chunks with their chunk order.
static int rule_schedule_file(const TrainConfig *c, Plan *p, Err *e) {
    int K = p->file->K, M = p->file->M;
    if (seen_typed(e->seen, "schedule"))
        return refuse(e, "train: --schedule and --schedule-file both name the schedule: give one of them");
    if (K != p->K)
        return refuse(e,
                      "train: --schedule-file '%s' has %d rows (one per rank) but the pipeline has %d stages: run it "
                      "on %d ranks or write %d rows",
                      c->pipe.schedule_file, K, p->K, K, p->K);
    if (seen_set(e->seen, "micro-batches") && c->pipe.micro_batches != M)
        return refuse(e,
                      "train: --micro-batches %lld but --schedule-file '%s' runs micro-batches 0..%d: drop "
                      "--micro-batches or give %d",
                      (long long)c->pipe.micro_batches, c->pipe.schedule_file, M - 1, M);
    p->M = M;
    return 0;
}

static int rule_chunks(const TrainConfig *c, long long tag_ub, Plan *p, Err *e);

static int rule_schedule(const TrainConfig *c, long long tag_ub, Plan *p, Err *e) {
    char sched[32];
    choice_name(SCHED_NAMES, p->schedule, sched, sizeof sched);
    if (p->pipelined && p->schedule == SCHED_FILE && rule_schedule_file(c, p, e)) return -1;
    char takers[64];  // the kinds that take --virtual-stages, by the table
    schedule_chunk_option_kinds(takers, sizeof takers);
    if (p->pipelined && schedule_kind(p->schedule)->chunks != CHUNKS_OPTION && seen_typed(e->seen, "virtual-stages"))
        return refuse(e, "train: --virtual-stages applies to --schedule %s, not %s: drop it or add --schedule %.*s",
                      takers, sched, (int)strcspn(takers, " ,"), takers);
    int searched = p->schedule == SCHED_ZBAUTO || p->schedule == SCHED_ZBAUTOV;
    if (p->pipelined && !searched && seen_typed(e->seen, "max-inflight"))
        return refuse(e, "train: --max-inflight is zb-auto's memory limit, not %s's: drop it or add --schedule zb-auto",
                      sched);
    return rule_chunks(c, tag_ub, p, e);
}

// The schedule's chunks per rank and their chunk order, and the (M, K) it can run.
static int rule_chunks(const TrainConfig *c, long long tag_ub, Plan *p, Err *e) {
    char sched[32];
    choice_name(SCHED_NAMES, p->schedule, sched, sizeof sched);
    const ScheduleKind *k = schedule_kind(p->schedule);
    int option_chunks = p->pipelined && k->chunks == CHUNKS_OPTION;  // --virtual-stages chunks
    p->V = p->pipelined ? schedule_chunks(p->schedule, (int)c->pipe.virtual_stages, p->file) : 1;
    p->chunk_order = p->pipelined ? schedule_chunk_order(p->schedule, p->file) : CHUNKS_LOOP;
    p->split = p->pipelined && schedule_splits_backward(p->schedule, p->file);
    if (option_chunks && p->V < k->least_chunks)
        return refuse(e,
                      "train: --schedule %s needs --virtual-stages >= %d (got %d; with 1 chunk per rank it is %s: use "
                      "--schedule %s)",
                      sched, k->least_chunks, p->V, k->one_chunk, k->one_chunk);
    if (p->pipelined && p->M < k->least_m * p->K)
        return refuse(e,
                      "train: --schedule %s needs --micro-batches >= %d x %d ranks = %d (%s), got %d: use "
                      "--micro-batches %d or --schedule %s",
                      sched, k->least_m, p->K, k->least_m * p->K, k->least_m_rule, p->M, k->least_m * p->K,
                      k->least_m_else);
    p->S = p->K * p->V;
    if (p->S > c->layers && p->S > MAX_LAYERS)
        return refuse(e,
                      "train: %d ranks x %d chunks = %d chunks, more than the %d layers a model can have (every chunk "
                      "needs a layer): use fewer %s",
                      p->K, p->V, p->S, MAX_LAYERS, option_chunks ? "--virtual-stages or ranks" : "ranks");
    if (p->S > c->layers) {
        if (k->chunks == CHUNKS_OF_LISTS)
            return refuse(e,
                          "train: --schedule-file '%s' holds %d chunks per rank: %d ranks x %d = %d chunks but only "
                          "%lld layers: use --layers >= %d or a file with fewer stages",
                          c->pipe.schedule_file, p->V, p->K, p->V, p->S, (long long)c->layers, p->S);
        if (!option_chunks)
            return refuse(e,
                          "train: --schedule %s holds %d chunks per rank: %d ranks x %d = %d chunks but only %lld "
                          "layers: use --layers >= %d or fewer ranks",
                          sched, p->V, p->K, p->V, p->S, (long long)c->layers, p->S);
        return refuse(e,
                      "train: %d ranks x %d virtual stages = %d chunks but only %lld layers: every chunk needs a "
                      "layer, so use --layers >= %d or fewer --virtual-stages",
                      p->K, p->V, p->S, (long long)c->layers, p->S);
    }
    long long passes = (long long)p->K * p->V * p->M;
    if (p->pipelined && passes > SCHEDULE_MAX_SIM)
        return refuse(
            e,
            "train: %d stages x %d chunk%s x %d micro-batches = %lld passes to simulate, more than the %d the "
            "simulator takes "
            "(it proves the schedule and sizes the stashes before the run): use --micro-batches %lld or fewer",
            p->K, p->V, p->V == 1 ? "" : "s", p->M, passes, SCHEDULE_MAX_SIM,
            SCHEDULE_MAX_SIM / ((long long)p->K * p->V));
    long long top = comm_tag_chunk_max(p->M, p->V);
    if (p->pipelined && top > tag_ub)
        return refuse(e,
                      "train: %d micro-batches x %d virtual stages need message tags up to %lld but this MPI allows "
                      "%lld: use fewer micro-batches",
                      p->M, p->V, top, tag_ub);
    return 0;
}

// Layers per virtual stage (per stage, or per chunk in pipeline order when interleaved): the user's
// --partition, or an even split with the remainder spread over the first (virtual) stages.
static int rule_partition(const TrainConfig *c, Plan *p, Err *e) {
    int S = p->S, L = (int)c->layers;
    const char *what = p->V > 1 ? "chunk" : "stage", *list = c->pipe.partition;
    p->lo[0] = 0;
    if (!list[0]) {
        for (int i = 0; i < S; i++) p->lo[i + 1] = p->lo[i] + L / S + (i < L % S);
        return 0;
    }
    int parts[MAX_STAGES];
    int n = parse_int_list(list, parts, MAX_STAGES);
    if (n < 0)
        return refuse(e, "train: --partition '%s' is not a comma-separated list of layer counts like 5,4,4,3", list);
    if (n != S && p->V > 1 && p->chunk_order == CHUNKS_V)
        return refuse(e,
                      "train: --partition '%s' has %d entries but %d ranks x 2 chunks make %d: give one layer count "
                      "per chunk, in pipeline order (rank r holds chunks r and %d-r, a V)",
                      list, n, p->K, S, S - 1);
    if (n != S && p->V > 1)
        return refuse(e,
                      "train: --partition '%s' has %d entries but %d ranks x %d virtual stages make %d chunks: give "
                      "one layer count per chunk, in pipeline order (rank r holds chunks r, r+%d, ...)",
                      list, n, p->K, p->V, S, p->K);
    if (n != S)
        return refuse(e,
                      "train: --partition '%s' has %d entries but there are %d stages: give one layer count per stage",
                      list, n, p->K);
    for (int i = 0; i < n; i++) {
        if (parts[i] < 1)
            return refuse(e, "train: --partition '%s': %s %d gets %d layers; every %s needs at least 1", list, what, i,
                          parts[i], what);
        p->lo[i + 1] = p->lo[i] + parts[i];
    }
    if (p->lo[n] != L)
        return refuse(e, "train: --partition '%s' sums to %d but --layers is %d: the counts must add up to the layers",
                      list, p->lo[n], L);
    return 0;
}

int pipeline_rules(const TrainConfig *c, const Degrees *d, long long tag_ub, Plan *p, Err *e) {
    if (seen_typed(e->seen, "grad-accum") && (d->pp > 1 || d->manual)) {
        char run[64];
        return refuse(e,
                      "train: --grad-accum applies to a run without a pipeline (--pp 1), and this run is %s: a "
                      "pipeline already accumulates over --micro-batches",
                      degrees_text(d, run, sizeof run));
    }
    return rule_depth(c, p, e) || rule_schedule(c, tag_ub, p, e) || rule_partition(c, p, e) ? -1 : 0;
}

// The pipeline's observers: --gantt, --timeline-step.
int pipeline_rules_run(const TrainConfig *c, const Plan *p, Err *e) {
    if (!p->pipelined) return 0;
    if (c->observe.gantt && c->json)
        return refuse(e, "train: --gantt prints a chart and --json one JSON object: use one of them (--timeline "
                         "FILE.svg works with --json)");
    if (c->observe.timeline_step && !c->observe.timeline[0] && !c->observe.gantt)
        return refuse(
            e, "train: --timeline-step picks the step drawn by --timeline or --gantt: add one of them, or drop it");
    if (c->observe.timeline_step > c->steps && !p->epochs)  // (with epochs: rule_epochs checks it)
        return refuse(e,
                      "train: --timeline-step %lld is past the last step: use 1..%lld, or 0 for the median-time step",
                      (long long)c->observe.timeline_step, (long long)c->steps);
    return 0;
}


// ---- sizes ----

double pipeline_activation_elem(int precision) { return precision == PRECISION_BF16 ? 2 : sizeof(float); }

void pipeline_sizes(const TrainConfig *c, const Plan *p, int vs, int slots, MemNeed *m) {
    double H = (double)c->hidden, C = (double)c->classes, rows = p->rows, a = pipeline_activation_elem(c->precision);
    int split = p->split, ckpt = p->pipe.ckpt, layers = plan_layers(p, vs), head = vs == p->S - 1;
    double in = p->lo[vs] == 0 ? (double)p->inputs : H;              // layer 0 reads --inputs features
    double act = rows * a * tensor_out_widths(c, p, vs, 0, layers);  // every layer's output, once
    double per_slot = rows * in * a + (head ? rows * C * a + rows * 4 : 0);
    if (!ckpt || split) per_slot += act;  // the layer outputs (with split + checkpointing: refilled at I)
    if (split) per_slot += act;           // the pre-activation gradients kept from I to W
    m->activations += slots * per_slot + (ckpt ? act : 0);
}

// ---- set-up ----

// On the NCCL transport, this rank's step as posted (p2p.h (5), issue 37 item 11): every stage's
// action list (each rank builds them all: the schedules are deterministic), their crossing pairs, and
// this stage's calls with their peers as ranks of the transport.
static void plan_nccl_calls(const Plan *p, Comm *comm) {
    if (!comm->dev) return;
    ActionList *l = xcalloc((size_t)p->K, sizeof(ActionList));
    P2pCalls *c = xcalloc((size_t)p->K, sizeof(P2pCalls));
    for (int s = 0; s < p->K; s++) {
        schedule_build(p->schedule, p->file, p->K, p->M, p->V, s, &l[s]);
        p2p_calls(p->K, p->chunk_order, s, &l[s], &c[s]);
    }
    p2p_pair(p->K, c);
    const P2pCalls *mine = &c[comm->stage];
    DevCall *plan = xmalloc(sizeof(DevCall) * (size_t)(mine->n ? mine->n : 1));
    p2p_plan(comm->stage, mine, plan);
    for (int i = 0; i < mine->n; i++) plan[i].peer = comm_stage_rank(comm, plan[i].peer);
    comm_plan_calls(comm, plan, mine->n);
    free(plan);
    for (int s = 0; s < p->K; s++) { p2p_calls_free(&c[s]); action_list_free(&l[s]); }
    free(c);
    free(l);
}

void pipeline_setup(const Plan *p, Comm *comm, const Backend *be, SimResult *sim, ActionList *list) {
    comm_grid_tp(comm, be, p->K, p->D, p->T, p->placement);
    int nb[2 * COMM_MAX_CHUNKS], n_nb = p2p_neighbours(p->K, p->V, p->chunk_order, comm->stage, nb);
    for (int i = 0; i < n_nb; i++) nb[i] = comm_stage_rank(comm, nb[i]);  // the NCCL warm-up's peers
    comm_use_transport(comm, p->transport, nb, n_nb);
    plan_nccl_calls(p, comm);
    SimSpec spec = {.kind = p->schedule, .file = p->file, .K = p->K, .M = p->M, .v = p->V, .f = 1, .b = 1, .w = 1};
    schedule_sim(&spec, sim);
    if (sim->deadlock) fatal("schedule would deadlock: %s", sim->why);
    schedule_build(p->schedule, p->file, p->K, p->M, p->V, comm->stage, list);
}

// ---- report ----

// Every stage's value of this rank's x, within its pipeline (hybrid: each replica's own).
static double *per_stage(const Plan *p, const Comm *comm, double x) {
    double *v = xcalloc((size_t)p->K, sizeof(double));
    v[comm->stage] = x;
    comm_allreduce_sum_double(v, p->K, comm->pp);
    return v;
}

// Measured bubble per rank = 1 - busy / span, span the slowest rank's pipeline time; the median pass times.
static void fill_measured(PipelineReport *r, const Plan *p, const Comm *comm, const PipelineMeasures *x) {
    int start = x->start, n = x->n;
    comm_allreduce_max_double(x->span_s + start, n, comm->pp);
    double *b = xmalloc(sizeof(double) * (size_t)n);
    for (int t = 0; t < n; t++) b[t] = 1.0 - x->busy_s[start + t] / x->span_s[start + t];
    r->bubble = per_stage(p, comm, median(b + x->skip, n - x->skip));
    free(b);
    r->split = p->split;
    r->med =
        (Costs){per_stage(p, comm, x->f), per_stage(p, comm, x->b), per_stage(p, comm, x->i), per_stage(p, comm, x->w)};
}

// What the simulator predicts for this schedule with each rank's median times: F, and B (or I and
// W where the backward is split; a full backward costs I + W there, and a rank that ran no I or W,
// only full backwards, half its B each), each the time of one pass of one chunk. The simulator takes
// whole-stage costs (a chunk pass is 1/v of them), so they are scaled by v.
static void fill_simulated(PipelineReport *r, const Plan *p, int slices) {
    int K = p->K, V = p->V;
    double *st[3];
    for (int k = 0; k < 3; k++) {
        st[k] = xmalloc(sizeof(double) * (size_t)K);
        for (int q = 0; q < K; q++) {
            double x = (k == 0 ? r->med.f : k == 1 ? r->med.i : r->med.w)[q];
            st[k][q] = (k && !isfinite(x) ? r->med.b[q] / 2 : x) * V;
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
                  .slices = slices};  // the simulated chart's
    schedule_sim(&ms, &r->msim);
    for (int k = 0; k < 3; k++) free(st[k]);
}

void pipeline_report_fill(PipelineReport *r, const Plan *p, const Comm *comm, const PipelineMeasures *x) {
    memset(r, 0, sizeof *r);
    r->shown = -1;
    choice_name(SCHED_NAMES, p->schedule, r->schedule, sizeof r->schedule);
    choice_name(TRANSPORT_CHOICES, p->transport, r->transport, sizeof r->transport);
    fill_measured(r, p, comm, x);
    // the peaks of activation memory per stage (the tally of each rank's chunks), and the theory: the
    // simulated bubble with uniform costs (as the set-up simulated it)
    r->peak_bytes = per_stage(p, comm, (double)x->tally->peak_bytes);
    r->peak_inflight = per_stage(p, comm, x->tally->peak_inflight);
    r->peak_deferred = per_stage(p, comm, x->tally->peak_deferred);
    r->bubble_theory = x->sim->bubble_mean;
    fill_simulated(r, p, x->slices);
    r->message_bytes = x->message_bytes;
}

void pipeline_report_free(PipelineReport *r) {
    sim_result_free(&r->msim);
    free(r->med.f);
    free(r->med.b);
    free(r->med.i);
    free(r->med.w);
    free(r->bubble);
    free(r->peak_bytes);
    free(r->peak_inflight);
    free(r->peak_deferred);
    memset(r, 0, sizeof *r);
}

// Per rank; with chunks, its layer ranges in chunk order, the medians per chunk pass, and in-flight
// counting chunk passes; a split backward shows I and W (and the deferred W's).
static void ms_or_dash(double sec, char *buf, size_t n) {
    if (isfinite(sec)) snprintf(buf, n, "%9.3f", sec * 1e3);
    else snprintf(buf, n, "%9s", "-");
}

void pipeline_report_text(const Plan *p, const PipelineReport *s) {
    if (!p->pipelined) return;
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
               fmt_bytes_binary(s->peak_bytes[k], peak, sizeof peak));
    }
    printf("(simulated: the %s schedule run by the simulator with these %s times%s, transfers free)\n", s->schedule,
           split ? "F, I and W" : "F and B", p->V > 1 ? " of one chunk pass each" : "");
    if (whole[0])
        printf("(stage %s ran full backwards only, no I or W: simulated with half its median B as each)\n", whole);
}


void pipeline_report_json(cJSON *o, const Plan *p, const PipelineReport *s) {
    if (!p->pipelined) return;
    int K = p->K;
    cJSON_AddStringToObject(o, "schedule", s->schedule);
    cJSON_AddNumberToObject(o, "stages", K);
    cJSON_AddNumberToObject(o, "micro_batches", p->M);
    cJSON_AddNumberToObject(o, "virtual_stages", p->V);
    cJSON_AddStringToObject(o, "transport", s->transport);
    cJSON_AddBoolToObject(o, "checkpoint_activations", p->pipe.ckpt);
    int part[MAX_STAGES];
    for (int k = 0; k < p->S; k++) part[k] = plan_layers(p, k);
    cJSON_AddItemToObject(o, "partition", cJSON_CreateIntArray(part, p->S));
    cJSON_AddItemToObject(o, "bubble_measured", cJSON_CreateDoubleArray(s->bubble, K));
    cJSON_AddNumberToObject(o, "bubble_theory", s->bubble_theory);
    cJSON_AddItemToObject(o, "bubble_simulated", cJSON_CreateDoubleArray(s->msim.bubble, K));
    const char *key[4] = {"forward_ms_median", "backward_ms_median", "backward_input_ms_median",
                          "backward_weight_ms_median"};
    const double *val[4] = {s->med.f, s->med.b, s->med.i, s->med.w};
    for (int q = 0; q < (s->split ? 4 : 2); q++) {
        double ms[MAX_STAGES];
        for (int k = 0; k < K; k++) ms[k] = val[q][k] * 1e3;
        cJSON_AddItemToObject(o, key[q], cJSON_CreateDoubleArray(ms, K));
    }
    if (s->shown >= 0) cJSON_AddNumberToObject(o, "timeline_step", s->shown + 1);
    cJSON_AddItemToObject(o, "peak_activation_bytes", cJSON_CreateDoubleArray(s->peak_bytes, K));
    cJSON_AddItemToObject(o, "peak_inflight", cJSON_CreateDoubleArray(s->peak_inflight, K));
    cJSON_AddItemToObject(o, "peak_deferred_w", cJSON_CreateDoubleArray(s->peak_deferred, K));
    cJSON_AddNumberToObject(o, "p2p_message_bytes", s->message_bytes);
}

// ---- price ----

#define SIM_MEMOS 8
static PipelinePrice memos[SIM_MEMOS];
static int memo_next;

const PipelinePrice *pipeline_price(SimSpec *spec) {
    size_t K = (size_t)spec->K;
    for (int i = 0; i < SIM_MEMOS; i++) {
        const PipelinePrice *m = &memos[i];
        if (m->fbw && m->kind == spec->kind && m->K == spec->K && m->M == spec->M && m->v == spec->v &&
            m->comm == spec->comm && !memcmp(m->fbw, spec->stage_f, 3 * K * sizeof(double)))
            return m;
    }
    PipelinePrice *m = &memos[memo_next];
    memo_next = (memo_next + 1) % SIM_MEMOS;
    free(m->fbw);
    *m = (PipelinePrice){.kind = spec->kind,
                         .K = spec->K,
                         .M = spec->M,
                         .v = spec->v,
                         .comm = spec->comm,
                         .fbw = xmalloc(5 * K * sizeof(double))};
    memcpy(m->fbw, spec->stage_f, 3 * K * sizeof(double));  // (stage_f, _b, _w: one array, the planner's)
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


double pipeline_price_message_bytes(const Plan *p, double hidden, int precision) {
    return p->rows * hidden * (precision == PRECISION_BF16 ? 2 : 4);  // both ways bf16 (stage_wire_floats)
}
