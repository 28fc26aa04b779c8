// train.c: `micropp train`: validation of the run (same decision on every rank, before any
// message), the training loops of each mode (monolith, manual split, pipeline executor),
// --verify against a monolith reference, evaluation, and the summary (text or one JSON object).
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "checkpoint.h"
#include "comms.h"
#include "config.h"
#include "data.h"
#include "model.h"
#include "schedule.h"
#include "trace.h"
#include "train.h"
#include "util.h"

#define MAX_STAGES 4096
#define VERIFY_TOL 1e-5

typedef struct {
    TrainConfig *c;
    const Backend *be;
    Data data;
    Comm comm;
    int world, rank;
    int K, M, rows;           // stages, micro-batches, rows per micro-batch
    int lo[MAX_STAGES + 1];   // stage s holds global layers [lo[s], lo[s+1])
    int stage;                // this rank's stage (pp)
    Stage st;                 // this rank's stage (pp, monolith)
    ActionList list;
    float *xh;                // host rows [rows, H]
    int32_t *yh;              // host labels [rows]
    float *dout, *din;        // pp: received output gradient, input gradient to send
    // per-step measurements
    double *step_s, *busy_s, *span_s, *loss;
    double *step_start;       // now_sec() at each step's start (after the step barrier in pp)
    Event *ev;                // every action as it ran (trace.h), times from its step's start
    int n_ev, cap_ev;
    double first_loss;
    int peak_slots;
    // checkpoints: this run trains steps [start, steps); its first step reads sample sample0 on
    int start;
    uint64_t sample0;
    CkptLayout ck;
    size_t peak_bytes;
} Run;

static int is_last(const Run *r) { return r->stage == r->K - 1; }

// ---- validation: pure functions of the config and world size, identical on every rank ----

static void validate(TrainConfig *c, int world, Run *r) {
    char name[32];
    const char *mode = choice_name(MODE_CHOICES, c->mode, name, sizeof name);
    if (c->mode != MODE_PP) {
        if (world != 1)
            user_error("train: --mode %s runs in one process but %d were started: drop 'mpiexec -n %d' or use --mode pp",
                       mode, world, world);
        static const char *pp_only[] = {"schedule", "micro-batches", "partition", "checkpoint-activations",
                                        "trace", "timeline", "timeline-step", "gantt"};
        for (size_t i = 0; i < sizeof pp_only / sizeof *pp_only; i++)
            if (option_on_command_line(pp_only[i]))
                user_error("train: --%s applies to --mode pp, not --mode %s: drop it or add --mode pp", pp_only[i], mode);
    }
    if (c->mode != MODE_MANUAL && option_on_command_line("parts"))
        user_error("train: --parts applies to --mode manual, not --mode %s: drop it or add --mode manual", mode);
    r->K = c->mode == MODE_PP ? world : c->mode == MODE_MANUAL ? (int)c->parts : 1;
    r->M = c->mode == MODE_PP ? (int)c->micro_batches : 1;
    if (c->mode == MODE_PP && world < 2)
        user_error("train: --mode pp needs at least 2 ranks (one per stage), got 1: run it as 'mpiexec -n 2 ./micropp train --mode pp'");
    if (r->K > MAX_STAGES) user_error("train: %d stages is more than the %d supported", r->K, MAX_STAGES);
    if (r->K > c->layers)
        user_error("train: %d %s but only %lld layers: every stage needs a layer, so use --layers >= %d or fewer %s",
                   r->K, c->mode == MODE_PP ? "stages (ranks)" : "parts", (long long)c->layers, r->K,
                   c->mode == MODE_PP ? "ranks" : "parts");
    if (c->batch % r->M) {
        char fits[256] = "";
        for (int m = 1, n = 0; m <= c->batch && n < 8; m++)
            if (c->batch % m == 0) { size_t l = strlen(fits); snprintf(fits + l, sizeof fits - l, "%s%d", n++ ? ", " : "", m); }
        user_error("train: --batch %lld is not divisible by --micro-batches %d: use micro-batches that divide it (%s, ...) or change --batch",
                   (long long)c->batch, r->M, fits);
    }
    r->rows = (int)(c->batch / r->M);
    // partition
    if (c->partition[0]) {
        int parts[MAX_STAGES];
        int n = parse_int_list(c->partition, parts, MAX_STAGES);
        if (n < 0) user_error("train: --partition '%s' is not a comma-separated list of layer counts like 5,4,4,3", c->partition);
        if (n != r->K) user_error("train: --partition '%s' has %d entries but there are %d stages: give one layer count per stage", c->partition, n, r->K);
        int sum = 0;
        for (int i = 0; i < n; i++) {
            if (parts[i] < 1) user_error("train: --partition '%s': stage %d gets %d layers; every stage needs at least 1", c->partition, i, parts[i]);
            sum += parts[i];
        }
        if (sum != c->layers) user_error("train: --partition '%s' sums to %d but --layers is %lld: the counts must add up to the layers", c->partition, sum, (long long)c->layers);
        r->lo[0] = 0;
        for (int i = 0; i < n; i++) r->lo[i + 1] = r->lo[i] + parts[i];
    } else {  // even split, the remainder spread over the first stages
        int L = (int)c->layers, base = L / r->K, extra = L % r->K;
        r->lo[0] = 0;
        for (int i = 0; i < r->K; i++) r->lo[i + 1] = r->lo[i] + base + (i < extra);
    }
    if (c->mode == MODE_PP) {
        if (c->gantt && c->json)
            user_error("train: --gantt prints a chart and --json one JSON object: use one of them (--timeline FILE.svg works with --json)");
        if (c->timeline_step && !c->timeline[0] && !c->gantt)
            user_error("train: --timeline-step picks the step drawn by --timeline or --gantt: add one of them, or drop it");
        if (c->timeline_step > c->steps)
            user_error("train: --timeline-step %lld is past the last step: use 1..%lld, or 0 for the median-time step",
                       (long long)c->timeline_step, (long long)c->steps);
    }
    data_open(&r->data, c->data, c->labels, (int)c->hidden, (int)c->classes, (uint64_t)c->seed);
}

// The trace and timeline files are written by rank 0 at the end; it tries them before the first
// step, and every rank learns the verdict, so a bad path ends every rank at once with exit 2.
static void check_outputs(Run *r) {
    const char *flag[2] = {"trace", "timeline"}, *path[2] = {r->c->trace, r->c->timeline};
    double err[2] = {0, 0};
    if (r->c->mode != MODE_PP) return;
    if (r->rank == 0)
        for (int i = 0; i < 2; i++) if (path[i][0]) err[i] = out_check(path[i]);
    comm_allreduce_max_double(err, 2, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++)
        if (err[i]) user_error("train: cannot write --%s '%s': %s (%s)", flag[i], path[i], strerror((int)err[i]), out_hint((int)err[i]));
}

// ---- per-step bookkeeping ----

static void record(Run *r, int step, int kind, int mb, double t0, double t1) {
    if (r->n_ev == r->cap_ev) {
        r->cap_ev = r->cap_ev ? 2 * r->cap_ev : 1024;
        r->ev = realloc(r->ev, sizeof(Event) * (size_t)r->cap_ev);
        CHECK(r->ev, "out of memory recording events");
    }
    r->ev[r->n_ev++] = (Event){step, kind, mb, t0, t1};
}

// The first training sample of micro-batch mb in this step. Synthetic data is a set of --samples
// rows (default: one fixed batch, as in the course's monolith) cycled; a .npy file is cycled whole.
// A resumed run continues the stream where the checkpoint left it (sample0 at step start).
static uint64_t sample_index(const Run *r, int step, int mb) {
    uint64_t i = r->sample0 + (uint64_t)(step - r->start) * (uint64_t)r->c->batch + (uint64_t)mb * (uint64_t)r->rows;
    uint64_t n = r->c->samples ? (uint64_t)r->c->samples : (uint64_t)r->c->batch;
    return r->data.features ? i : i % n;
}

// Loads micro-batch mb's inputs (first stage) and labels (last stage) into a slot.
static void load_inputs(Run *r, Stage *s, int slot, uint64_t first, int load_x, int load_y) {
    if (load_x) {
        data_features(&r->data, first, s->rows, r->xh);
        r->be->to_device(stage_slot_input(s, slot), r->xh, sizeof(float) * (size_t)s->rows * s->H);
    }
    if (load_y) {
        data_labels(&r->data, first, s->rows, r->yh);
        stage_set_labels(s, slot, r->yh);
    }
}

// ---- the pipeline executor: run this stage's action list for one step ----

static double pipeline_step(Run *r, int step) {
    Stage *s = &r->st;
    Comm *cm = &r->comm;
    size_t n = (size_t)r->rows * s->H;
    int dout_mb = -1, din_mb = -1, fwd_mb = -1;
    double busy = 0, base = r->step_start[step];
    for (int i = 0; i < r->list.n; i++) {
        Action a = r->list.a[i];
        double t0 = now_sec();
        int slot;
        switch (a.kind) {
        case ACT_RECV_ACT:
            slot = stage_slot_acquire(s, a.mb);
            comm_recv(cm, stage_slot_input(s, slot), n, cm->prev, comm_tag(TAG_ACT, a.mb));
            break;
        case ACT_FORWARD:
            slot = stage_slot_acquire(s, a.mb);
            load_inputs(r, s, slot, sample_index(r, step, a.mb), r->stage == 0, is_last(r));
            stage_forward(s, slot);
            fwd_mb = a.mb;
            break;
        case ACT_SEND_ACT:
            // With checkpointing the output lives in the recompute scratch: send it before the next compute.
            CHECK(fwd_mb == a.mb, "schedule sends micro-batch %d but the last forward was %d", a.mb, fwd_mb);
            comm_send(cm, stage_output(s, stage_slot_of(s, a.mb)), n, cm->next, comm_tag(TAG_ACT, a.mb));
            break;
        case ACT_RECV_GRAD:
            comm_recv(cm, r->dout, n, cm->next, comm_tag(TAG_GRAD, a.mb));
            dout_mb = a.mb;
            break;
        case ACT_BACKWARD:
            slot = stage_slot_of(s, a.mb);
            CHECK(slot >= 0, "backward of micro-batch %d, which has no forward in flight", a.mb);
            CHECK(is_last(r) || dout_mb == a.mb, "backward of micro-batch %d without its output gradient", a.mb);
            stage_backward(s, slot, r->dout, r->stage > 0 ? r->din : NULL);
            din_mb = a.mb;
            fwd_mb = -1;
            break;
        case ACT_SEND_GRAD:
            CHECK(din_mb == a.mb, "schedule sends the gradient of micro-batch %d but the last backward was %d", a.mb, din_mb);
            comm_send(cm, r->din, n, cm->prev, comm_tag(TAG_GRAD, a.mb));
            break;
        }
        double t1 = now_sec();
        if (a.kind == ACT_FORWARD || a.kind == ACT_BACKWARD) busy += t1 - t0;
        record(r, step, a.kind, a.mb, t0 - base, t1 - base);
    }
    comm_wait_sends(cm);
    r->busy_s[step] = busy;
    return now_sec() - base;
}

// ---- monolith and manual split: one process ----

static void monolith_step(Run *r, Stage *s, int step) {
    int slot = stage_slot_acquire(s, 0);
    load_inputs(r, s, slot, sample_index(r, step, 0), 1, 1);
    double t0 = now_sec();
    stage_forward(s, slot);
    double t1 = now_sec();
    stage_backward(s, slot, NULL, NULL);
    double t2 = now_sec();
    record(r, step, ACT_FORWARD, 0, 0, t1 - t0);
    record(r, step, ACT_BACKWARD, 0, t1 - t0, t2 - t0);
    r->busy_s[step] = t2 - t0;
}

// The course's "manual split": K parts in one process; the activation is handed from part k to
// part k+1 by an explicit copy, and the gradient handed back the same way.
static void manual_step(Run *r, Stage *parts, int K, int step) {
    const Backend *be = r->be;
    size_t bytes = sizeof(float) * (size_t)r->rows * parts[0].H;
    double t0 = now_sec();
    for (int k = 0; k < K; k++) {
        int slot = stage_slot_acquire(&parts[k], 0);
        if (k == 0) load_inputs(r, &parts[k], slot, sample_index(r, step, 0), 1, 0);
        else be->copy(stage_slot_input(&parts[k], slot), stage_output(&parts[k - 1], 0), bytes);  // hand-off
        if (k == K - 1) load_inputs(r, &parts[k], slot, sample_index(r, step, 0), 0, 1);
        stage_forward(&parts[k], slot);
    }
    // backward: part k writes the gradient of its input into r->din; part k-1 reads it as r->dout
    for (int k = K - 1; k >= 0; k--) {
        stage_backward(&parts[k], 0, r->dout, k > 0 ? r->din : NULL);
        float *t = r->dout; r->dout = r->din; r->din = t;  // hand the gradient back
    }
    r->busy_s[step] = now_sec() - t0;
}

// ---- --verify: the monolith reference for this rank's layers, from the same weights and batch ----

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

// Compares stage s's gradients (already computed for step 0) with a monolith reference; returns
// the worst relative error over its tensors and the loss.
static double verify_stage(Run *r, const Stage *s, double loss) {
    TrainConfig *c = r->c;
    Stage ref;
    stage_init(&ref, r->be, (int)c->layers, (int)c->hidden, (int)c->classes, 0, (int)c->layers, 1,
               (int)c->batch, 1, 0, (uint64_t)c->seed);
    int slot = stage_slot_acquire(&ref, 0);
    float *x = xmalloc(sizeof(float) * (size_t)c->batch * c->hidden);
    int32_t *y = xmalloc(sizeof(int32_t) * (size_t)c->batch);
    data_features(&r->data, 0, (int)c->batch, x);
    data_labels(&r->data, 0, (int)c->batch, y);
    r->be->to_device(stage_slot_input(&ref, slot), x, sizeof(float) * (size_t)c->batch * c->hidden);
    stage_set_labels(&ref, slot, y);
    stage_forward(&ref, slot);
    stage_backward(&ref, slot, NULL, NULL);
    size_t layer = (size_t)c->hidden * c->hidden + c->hidden;
    float *mine = xmalloc(sizeof(float) * s->n_params), *theirs = xmalloc(sizeof(float) * ref.n_params);
    r->be->to_host(mine, s->grads, sizeof(float) * s->n_params);
    r->be->to_host(theirs, ref.grads, sizeof(float) * ref.n_params);
    double worst = 0;
    for (int i = 0; i < s->n_layers; i++) {
        const float *a = mine + (size_t)i * layer, *b = theirs + (size_t)(s->lo + i) * layer;
        double e = fmax(rel_err(a, b, (size_t)c->hidden * c->hidden), rel_err(a + (size_t)c->hidden * c->hidden, b + (size_t)c->hidden * c->hidden, (size_t)c->hidden));
        if (e > worst) worst = e;
    }
    if (s->has_head) {
        const float *a = mine + (size_t)s->n_layers * layer, *b = theirs + (size_t)c->layers * layer;
        double e = rel_err(a, b, (size_t)c->classes * c->hidden + c->classes);
        if (e > worst) worst = e;
        double ref_loss = ref.loss_sum / (double)c->batch;
        double le = fabs(loss - ref_loss) / fmax(fabs(ref_loss), 1e-30);
        if (le > worst) worst = le;
    }
    free(mine); free(theirs); free(x); free(y);
    stage_free(&ref);
    return worst;
}

// ---- evaluation: accuracy on held-out rows, forward only ----

static int argmax_hits(const float *logits, const int32_t *y, int rows, int C) {
    int hits = 0;
    for (int i = 0; i < rows; i++) {
        int best = 0;
        for (int j = 1; j < C; j++) if (logits[(size_t)i * C + j] > logits[(size_t)i * C + best]) best = j;
        hits += best == y[i];
    }
    return hits;
}

// Runs eval rows through stages [first, last] held locally (monolith/manual) or through the
// pipeline (pp: this rank's stage only, activations over the wire). Returns accuracy on the last stage.
static double evaluate(Run *r, Stage *stages, int n_local) {
    TrainConfig *c = r->c;
    int n_eval = (int)c->eval_samples;
    if (r->data.features && n_eval > r->data.n) n_eval = (int)r->data.n;
    if (n_eval == 0) return NAN;
    uint64_t base = r->data.features ? 0 : EVAL_BASE;
    const Backend *be = r->be;
    int H = (int)c->hidden, C = (int)c->classes, chunk = r->rows;
    float *a = be->alloc(sizeof(float) * (size_t)chunk * H), *b = be->alloc(sizeof(float) * (size_t)chunk * (H > C ? H : C));
    float *logits = xmalloc(sizeof(float) * (size_t)chunk * C);
    int hits = 0;
    int pp = c->mode == MODE_PP;
    int first_here = pp ? r->stage == 0 : 1, last_here = pp ? is_last(r) : 1;
    for (int done = 0, k = 0; done < n_eval; done += chunk, k++) {
        int rows = n_eval - done < chunk ? n_eval - done : chunk;
        if (first_here) {
            data_features(&r->data, base + (uint64_t)done, rows, r->xh);
            be->to_device(a, r->xh, sizeof(float) * (size_t)rows * H);
        } else {
            comm_recv(&r->comm, a, (size_t)rows * H, r->comm.prev, comm_tag(TAG_DATA, k));
        }
        for (int i = 0; i < n_local; i++) {
            stage_forward_eval(&stages[i], a, rows, b);
            if (!stages[i].has_head) { float *t = a; a = b; b = t; }
        }
        if (last_here) {
            be->to_host(logits, b, sizeof(float) * (size_t)rows * C);
            data_labels(&r->data, base + (uint64_t)done, rows, r->yh);
            hits += argmax_hits(logits, r->yh, rows, C);
        } else {
            comm_send(&r->comm, a, (size_t)rows * H, r->comm.next, comm_tag(TAG_DATA, k));
        }
    }
    if (pp) comm_wait_sends(&r->comm);
    be->free(a); be->free(b); free(logits);
    double acc = (double)hits / n_eval;
    if (pp) {  // the last stage knows it; tell everyone
        double v[1] = {last_here ? acc : 0};
        comm_allreduce_sum_double(v, 1, MPI_COMM_WORLD);
        acc = v[0];
    }
    return acc;
}

// ---- summary ----

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

static void print_header(Run *r) {
    TrainConfig *c = r->c;
    char mode[32], sched[32], opt[16], blas[160];
    choice_name(MODE_CHOICES, c->mode, mode, sizeof mode);
    choice_name(SCHED_CHOICES, c->schedule, sched, sizeof sched);
    choice_name("adam|sgd", c->optimizer, opt, sizeof opt);
    blas_describe(blas, sizeof blas);
    size_t P = model_param_count((int)c->layers, (int)c->hidden, (int)c->classes);
    printf("micropp train | mode %s", mode);
    if (c->mode == MODE_PP) printf(" | schedule %s | stages %d | micro-batches %d (%d rows each)%s", sched, r->K, r->M, r->rows,
                                   c->checkpoint_activations ? " | checkpointing" : "");
    if (c->mode == MODE_MANUAL) printf(" | parts %d", r->K);
    printf("\nmodel %lld x Linear(%lld,%lld)+ReLU -> Linear(%lld,%lld) | %zu parameters (%.1f MB fp32)\n",
           (long long)c->layers, (long long)c->hidden, (long long)c->hidden, (long long)c->hidden,
           (long long)c->classes, P, P * 4.0 / 1e6);
    printf("batch %lld | steps %lld | %s lr %g | seed %lld | data %s | %s | device %s\n", (long long)c->batch,
           (long long)c->steps, opt, c->lr, (long long)c->seed, c->data, blas, r->be->name);
    if (c->mode != MODE_MONOLITH)
        for (int k = 0; k < r->K; k++)
            printf("  %s %d%s: layers %d-%d%s\n", c->mode == MODE_PP ? "stage" : "part", k,
                   "", r->lo[k], r->lo[k + 1] - 1, k == r->K - 1 ? " + head" : "");
    fflush(stdout);
}

// ---- what the pipeline did: per-stage costs, the bubble they imply, the trace and the timeline ----

// Median duration of this rank's actions of one kind over the measured steps.
static double kind_median(const Run *r, int kind, int skip) {
    double *d = xmalloc(sizeof(double) * (size_t)(r->n_ev + 1));
    int n = 0;
    for (int i = 0; i < r->n_ev; i++)
        if (r->ev[i].kind == kind && r->ev[i].step >= skip) d[n++] = r->ev[i].t1 - r->ev[i].t0;
    double m = median(d, n);
    free(d);
    return m;
}

// The step drawn by --timeline / --gantt (0-based): the user's, else the one nearest the median time.
static int shown_step(const Run *r, int skip, double step_med) {
    if (r->c->timeline_step) return (int)r->c->timeline_step - 1;
    int best = skip;  // the first step measured (skip counts the steps a resumed run did not run)
    for (int t = skip; t < (int)r->c->steps; t++)
        if (fabs(r->step_s[t] - step_med) < fabs(r->step_s[best] - step_med)) best = t;
    return best;
}

// Rank 0: writes --trace, and builds the two charts of step `shown` (measured, and simulated with the
// measured per-stage costs) that --timeline writes as SVG and --gantt prints.
static void observe(Run *r, const Timeline *tl, int shown, const SimResult *msim, const double *fwd, const double *bwd,
                    Gantt g[2]) {
    TrainConfig *c = r->c;
    char sched[32];
    choice_name(SCHED_CHOICES, c->schedule, sched, sizeof sched);
    if (c->trace[0]) {
        OutFile o;
        int err = out_open(&o, c->trace);
        if (!err) {
            char meta[512];
            snprintf(meta, sizeof meta, "{\"micropp\":\"train\",\"schedule\":\"%s\",\"stages\":%d,\"micro_batches\":%d,"
                     "\"layers\":%lld,\"hidden\":%lld,\"batch\":%lld,\"steps\":%lld,\"checkpoint_activations\":%s}",
                     sched, r->K, r->M, (long long)c->layers, (long long)c->hidden, (long long)c->batch, (long long)c->steps,
                     c->checkpoint_activations ? "true" : "false");
            timeline_write_chrome(o.f, tl, meta);
            err = out_commit(&o);
        }
        if (err) fatal("writing --trace '%s': %s", c->trace, strerror(err));
    }
    // measured: the bubble of this step per rank = 1 - (compute of the action list) / pipeline span
    timeline_step_gantt(tl, shown, &g[0]);
    double bub = 0, f_mean = 0, b_mean = 0;
    for (int k = 0; k < g[0].rows; k++) {
        double busy = 0;
        for (int i = 0; i < g[0].n[k]; i++) {
            const Interval *v = &g[0].slices[k][i];
            if (v->kind < ACT_KINDS && !kind_style(v->kind)->bar) busy += v->t1 - v->t0;
        }
        bub += (1 - busy / r->span_s[shown]) / g[0].rows;
    }
    for (int k = 0; k < r->K; k++) { f_mean += fwd[k] / r->K; b_mean += bwd[k] / r->K; }
    snprintf(g[0].title, sizeof g[0].title, "measured: step %d of %lld | %s | %d ranks | %d micro-batches | %.3f ms | bubble %.3f (mean over ranks), theory %.3f",
             shown + 1, (long long)c->steps, sched, r->K, r->M, r->step_s[shown] * 1e3, bub, schedule_bubble_formula(c->schedule, r->K, r->M));
    snprintf(g[1].title, sizeof g[1].title, "simulated: %s with each stage's median costs (mean F %.3f ms, B %.3f ms; transfers free) | bubble %.3f",
             sched, f_mean * 1e3, b_mean * 1e3, msim->bubble_mean);
    g[1].row_label = "stage";
    g[1].rows = msim->K;
    g[1].slices = msim->slices;
    g[1].n = msim->n_slices;
    g[1].t_end = msim->makespan;
    // text: the shortest forward or backward one label wide, the chart at most 160 characters
    double shortest = INFINITY;
    for (int k = 0; k < r->K; k++) shortest = fmin(shortest, fmin(fwd[k], bwd[k]));
    for (int i = 0; i < 2; i++) { g[i].cell = shortest; g[i].width = 160; g[i].axis_scale = 1e3; g[i].axis_unit = "ms"; }
    if (c->timeline[0]) {
        OutFile o;
        int err = out_open(&o, c->timeline);
        if (!err) { gantt_svg(o.f, g, 2); err = out_commit(&o); }
        if (err) fatal("writing --timeline '%s': %s", c->timeline, strerror(err));
    }
}

// ---- the command ----

int cmd_train(int argc, char **argv) {
    comms_init(&argc, &argv);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    options_parse("train", train_options, &cfg, argc, argv, "micropp train [options]",
                  "  micropp train                                  # the monolith, default config\n"
                  "  micropp train --config configs/medium.json --steps 20\n"
                  "  micropp train --mode manual --parts 4 --verify # the manual split, checked\n"
                  "  mpiexec -n 2 micropp train --mode pp --schedule 1f1b --micro-batches 8\n"
                  "  mpiexec -n 4 micropp train --mode pp --schedule gpipe --partition 5,4,4,3 --checkpoint-activations\n");
    Run run = {0}, *r = &run;
    r->c = &cfg;
    r->world = comms_world_size();
    r->rank = comms_world_rank();
    validate(&cfg, r->world, r);
    check_outputs(r);
    ckpt_setup(&cfg, MPI_COMM_WORLD);
    r->be = &backend_cpu;
    blas_set_threads((int)cfg.threads);
    TrainConfig *c = &cfg;
    int H = (int)c->hidden, C = (int)c->classes, L = (int)c->layers, steps = (int)c->steps;
    int verbose = !c->json && r->rank == 0;
    if (verbose) print_header(r);

    r->xh = xmalloc(sizeof(float) * (size_t)r->rows * H);
    r->yh = xmalloc(sizeof(int32_t) * (size_t)(r->rows > c->eval_samples ? r->rows : c->eval_samples));
    r->step_s = xcalloc((size_t)steps, sizeof(double));
    r->busy_s = xcalloc((size_t)steps, sizeof(double));
    r->span_s = xcalloc((size_t)steps, sizeof(double));
    r->step_start = xcalloc((size_t)steps, sizeof(double));
    r->loss = xcalloc((size_t)steps, sizeof(double));
    r->dout = r->be->alloc(sizeof(float) * (size_t)r->rows * H);
    r->din = r->be->alloc(sizeof(float) * (size_t)r->rows * H);

    Stage *parts = NULL;
    int n_local = 1;
    SimResult sim = {0};
    if (c->mode == MODE_PP) {
        comms_pipeline(&r->comm, r->be);
        r->stage = r->comm.stage;
        // Prove the schedule before running it, and size the activation stash from it.
        schedule_simulate(c->schedule, r->K, r->M, 1, 2, 0, &sim);
        if (sim.deadlock) fatal("schedule would deadlock: %s", sim.why);
        schedule_build(c->schedule, r->K, r->M, r->stage, &r->list);
        stage_init(&r->st, r->be, L, H, C, r->lo[r->stage], r->lo[r->stage + 1], is_last(r), r->rows,
                   sim.peak_inflight[r->stage], c->checkpoint_activations, (uint64_t)c->seed);
        r->st.grad_scale = 1.0f / (float)c->batch;
        parts = &r->st;
    } else {
        n_local = r->K;
        parts = xcalloc((size_t)r->K, sizeof(Stage));
        for (int k = 0; k < r->K; k++)
            stage_init(&parts[k], r->be, L, H, C, r->lo[k], r->lo[k + 1], k == r->K - 1, r->rows, 1, 0, (uint64_t)c->seed);
        r->stage = r->K - 1;
    }
    Stage *head = &parts[n_local - 1];

    // Checkpoints: which stages this process holds and writes (every process writes its own).
    char mode_name[32];
    r->ck = (CkptLayout){.c = c, .mode = choice_name(MODE_CHOICES, c->mode, mode_name, sizeof mode_name),
                         .world = r->world, .stages = r->K, .dp = 1, .lo = r->lo, .local = parts, .n_local = n_local,
                         .first_stage = c->mode == MODE_PP ? r->stage : 0, .writer = 1, .comm = MPI_COMM_WORLD};
    if (c->resume[0]) {
        char desc[160];
        r->start = (int)ckpt_resume(&r->ck, &r->sample0, desc, sizeof desc);
        if (verbose) printf("resumed from %s: %s; training steps %d-%d\n", c->resume, desc, r->start + 1, steps);
        if (c->timeline_step && c->timeline_step <= r->start)
            user_error("train: --timeline-step %lld was done before the checkpoint (step %d): use %d..%d, or 0 for the median-time step",
                       (long long)c->timeline_step, r->start, r->start + 1, steps);
    }
    int start = r->start, n_run = steps - start;
    int64_t saved_step = -1;

    double verify_err = NAN;
    double *stage_err = NULL;
    for (int step = start; step < steps; step++) {
        fault_step(step + 1);
        for (int k = 0; k < n_local; k++) stage_zero_grads(&parts[k]);
        if (c->mode == MODE_PP) comm_barrier(MPI_COMM_WORLD);
        double t0 = now_sec();
        r->step_start[step] = t0;
        if (c->mode == MODE_PP) r->span_s[step] = pipeline_step(r, step);
        else if (c->mode == MODE_MANUAL) manual_step(r, parts, r->K, step);
        else monolith_step(r, parts, step);
        if (c->mode != MODE_PP) r->span_s[step] = now_sec() - t0;
        // the loss lives on the last stage; every rank learns it (and so decides alike on NaN)
        double v[3] = {0, 0, 0};
        if (c->mode != MODE_PP || is_last(r)) { v[0] = head->loss_sum; v[1] = head->loss_rows; v[2] = head->correct; }
        if (fault_due(FAULT_NAN, step + 1)) v[0] = NAN;  // testing: this rank's contribution goes bad
        if (c->mode == MODE_PP) {
            double ta = now_sec();
            comm_allreduce_sum_double(v, 3, MPI_COMM_WORLD);
            record(r, step, EV_ALLREDUCE, -1, ta - t0, now_sec() - t0);
        }
        double loss = v[0] / v[1];
        r->loss[step] = loss;
        if (step == 0 && c->verify) {
            stage_err = xcalloc((size_t)r->K, sizeof(double));
            if (c->mode == MODE_PP) {
                stage_err[r->stage] = verify_stage(r, &r->st, loss);
                comm_allreduce_max_double(stage_err, r->K, MPI_COMM_WORLD);
            } else {
                for (int k = 0; k < n_local; k++) stage_err[k] = verify_stage(r, &parts[k], loss);
            }
            verify_err = 0;
            for (int k = 0; k < r->K; k++) verify_err = fmax(verify_err, stage_err[k]);
        }
        if (!isfinite(loss))
            user_error("train: the loss became %s at step %d: lower --lr (now %g) and check the data", isnan(loss) ? "NaN" : "Inf", step + 1, c->lr);
        double to = now_sec();
        for (int k = 0; k < n_local; k++) stage_optimizer_step(&parts[k], c->optimizer, (float)c->lr, step + 1);
        r->be->sync();
        record(r, step, EV_OPTIMIZER, -1, to - t0, now_sec() - t0);
        r->step_s[step] = now_sec() - t0;

        if (verbose && c->log_every && ((step + 1) % c->log_every == 0 || step == start || step == steps - 1))
            printf("step %d/%d | loss %.4f | %.2f ms | %.0fk samples/s\n", step + 1, steps, loss,
                   r->step_s[step] * 1e3, c->batch / r->step_s[step] / 1e3);
        if (c->save[0] && ((c->save_every && (step + 1) % c->save_every == 0) || step + 1 == steps)) {
            double t_save = now_sec();
            double bytes = ckpt_save(&r->ck, step + 1, r->sample0 + (uint64_t)(step + 1 - start) * (uint64_t)c->batch);
            saved_step = step + 1;
            if (verbose) printf("saved step %d to %s (%.2f MB, %.0f ms)\n", step + 1, c->save, bytes / 1e6, (now_sec() - t_save) * 1e3);
        }
    }

    double acc = evaluate(r, parts, n_local);

    // Summary figures. Step time: the median over steps (the first is a warm-up when there are more).
    int skip = n_run > 2 ? 1 : 0;
    if (c->mode == MODE_PP) comm_allreduce_max_double(r->step_s + start, n_run, MPI_COMM_WORLD);
    double step_med = median(r->step_s + start + skip, n_run - skip);
    // A resumed run has no steps before start: the timeline counts time from its first step.
    for (int t = 0; t < start; t++) r->step_start[t] = r->step_start[start];
    size_t P = model_param_count(L, H, C);
    double flops = 6.0 * (double)P * (double)c->batch;
    if (c->checkpoint_activations) flops += 2.0 * (double)(P - ((size_t)C * H + C)) * (double)c->batch;
    double samples_s = c->batch / step_med, gflops = flops / step_med / 1e9;

    // Pipeline: measured bubble per rank = 1 - busy / span, span the slowest rank's pipeline time.
    double *bubble = NULL, *peak_bytes = NULL, *peak_slots = NULL;
    double theory = schedule_bubble_formula(c->schedule, r->K, r->M);
    if (c->mode == MODE_PP) {
        comm_allreduce_max_double(r->span_s + start, n_run, MPI_COMM_WORLD);
        double *b = xmalloc(sizeof(double) * (size_t)n_run);
        for (int t = 0; t < n_run; t++) b[t] = 1.0 - r->busy_s[start + t] / r->span_s[start + t];
        bubble = xcalloc((size_t)r->K, sizeof(double));
        peak_bytes = xcalloc((size_t)r->K, sizeof(double));
        peak_slots = xcalloc((size_t)r->K, sizeof(double));
        bubble[r->stage] = median(b + skip, n_run - skip);
        peak_bytes[r->stage] = (double)r->st.peak_act_bytes;
        peak_slots[r->stage] = r->st.peak_slots;
        comm_allreduce_sum_double(bubble, r->K, MPI_COMM_WORLD);
        comm_allreduce_sum_double(peak_bytes, r->K, MPI_COMM_WORLD);
        comm_allreduce_sum_double(peak_slots, r->K, MPI_COMM_WORLD);
        free(b);
    }
    // ... and what the simulator predicts for this schedule with each stage's median F and B times
    double *fwd = NULL, *bwd = NULL;
    SimResult msim = {0};
    Gantt charts[2];
    memset(charts, 0, sizeof charts);
    int shown = -1;
    if (c->mode == MODE_PP) {
        fwd = xcalloc((size_t)r->K, sizeof(double));
        bwd = xcalloc((size_t)r->K, sizeof(double));
        fwd[r->stage] = kind_median(r, ACT_FORWARD, start + skip);
        bwd[r->stage] = kind_median(r, ACT_BACKWARD, start + skip);
        comm_allreduce_sum_double(fwd, r->K, MPI_COMM_WORLD);
        comm_allreduce_sum_double(bwd, r->K, MPI_COMM_WORLD);
        schedule_simulate_stages(c->schedule, r->K, r->M, fwd, bwd, 0, &msim);
        if (c->trace[0] || c->timeline[0] || c->gantt) {
            Timeline tl;
            shown = shown_step(r, start + skip, step_med);
            timeline_gather(&tl, r->ev, r->n_ev, r->step_start, steps, MPI_COMM_WORLD);
            if (r->rank == 0) observe(r, &tl, shown, &msim, fwd, bwd, charts);
            timeline_free(&tl);
        }
    }

    int verify_failed = c->verify && !(verify_err <= VERIFY_TOL);
    if (r->rank == 0 && c->json) {
        char s[32];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", choice_name(MODE_CHOICES, c->mode, s, sizeof s));
        cJSON_AddNumberToObject(o, "layers", L);
        cJSON_AddNumberToObject(o, "hidden", H);
        cJSON_AddNumberToObject(o, "classes", C);
        cJSON_AddNumberToObject(o, "batch", (double)c->batch);
        cJSON_AddNumberToObject(o, "steps", steps);
        cJSON_AddStringToObject(o, "optimizer", choice_name("adam|sgd", c->optimizer, s, sizeof s));
        cJSON_AddNumberToObject(o, "lr", c->lr);
        cJSON_AddNumberToObject(o, "params", (double)P);
        cJSON_AddNumberToObject(o, "start_step", start);
        cJSON_AddNumberToObject(o, "first_loss", r->loss[start]);
        cJSON_AddNumberToObject(o, "final_loss", r->loss[steps - 1]);
        if (isfinite(acc)) cJSON_AddNumberToObject(o, "accuracy", acc); else cJSON_AddNullToObject(o, "accuracy");
        cJSON_AddNumberToObject(o, "step_ms_median", step_med * 1e3);
        cJSON_AddNumberToObject(o, "samples_per_s", samples_s);
        cJSON_AddNumberToObject(o, "gflops", gflops);
        char blas[160];
        blas_describe(blas, sizeof blas);
        cJSON_AddStringToObject(o, "blas", blas);
        cJSON_AddItemToObject(o, "losses", cJSON_CreateDoubleArray(r->loss + start, n_run));  // steps start+1..steps
        if (c->resume[0]) cJSON_AddStringToObject(o, "resumed_from", c->resume);
        if (saved_step >= 0) { cJSON_AddStringToObject(o, "saved_to", c->save); cJSON_AddNumberToObject(o, "saved_step", (double)saved_step); }
        if (c->mode == MODE_MANUAL) cJSON_AddNumberToObject(o, "parts", r->K);
        if (c->mode == MODE_PP) {
            cJSON_AddStringToObject(o, "schedule", choice_name(SCHED_CHOICES, c->schedule, s, sizeof s));
            cJSON_AddNumberToObject(o, "stages", r->K);
            cJSON_AddNumberToObject(o, "micro_batches", r->M);
            cJSON_AddBoolToObject(o, "checkpoint_activations", c->checkpoint_activations);
            int part[MAX_STAGES];
            for (int k = 0; k < r->K; k++) part[k] = r->lo[k + 1] - r->lo[k];
            cJSON_AddItemToObject(o, "partition", cJSON_CreateIntArray(part, r->K));
            cJSON_AddItemToObject(o, "bubble_measured", cJSON_CreateDoubleArray(bubble, r->K));
            cJSON_AddNumberToObject(o, "bubble_theory", theory);
            cJSON_AddItemToObject(o, "bubble_simulated", cJSON_CreateDoubleArray(msim.bubble, r->K));
            double fms[MAX_STAGES], bms[MAX_STAGES];
            for (int k = 0; k < r->K; k++) { fms[k] = fwd[k] * 1e3; bms[k] = bwd[k] * 1e3; }
            cJSON_AddItemToObject(o, "forward_ms_median", cJSON_CreateDoubleArray(fms, r->K));
            cJSON_AddItemToObject(o, "backward_ms_median", cJSON_CreateDoubleArray(bms, r->K));
            if (shown >= 0) cJSON_AddNumberToObject(o, "timeline_step", shown + 1);
            cJSON_AddItemToObject(o, "peak_activation_bytes", cJSON_CreateDoubleArray(peak_bytes, r->K));
            cJSON_AddItemToObject(o, "peak_inflight", cJSON_CreateDoubleArray(peak_slots, r->K));
        }
        if (c->verify) {
            cJSON_AddNumberToObject(o, "verify_max_rel_err", verify_err);
            cJSON_AddItemToObject(o, "verify_stage_rel_err", cJSON_CreateDoubleArray(stage_err, r->K));
            cJSON_AddBoolToObject(o, "verify_ok", !verify_failed);
        }
        char *text = cJSON_PrintUnformatted(o);
        printf("%s\n", text);
        free(text);
        cJSON_Delete(o);
    } else if (verbose) {
        printf("\nfinal loss %.4f (first %.4f) | accuracy %.1f%% on %lld %s rows\n", r->loss[steps - 1], r->loss[start],
               100 * acc, (long long)(r->data.features && c->eval_samples > r->data.n ? r->data.n : c->eval_samples),
               r->data.features ? "training" : "held-out");
        printf("step %.3f ms (median) | %.0f samples/s | %.1f GFLOP/s\n", step_med * 1e3, samples_s, gflops);
        if (c->mode == MODE_PP) {
            printf("\n%-6s %-10s %-29s   %9s %9s %14s  %s\n", "", "", "----------- bubble ----------", "median", "median", "", "");
            printf("%-6s %-10s %9s %9s %9s   %9s %9s %14s  %s\n", "stage", "layers", "measured", "theory", "simulated", "F ms", "B ms",
                   "peak in-flight", "peak activations");
            for (int k = 0; k < r->K; k++) {
                char lay[32];
                snprintf(lay, sizeof lay, "%d-%d", r->lo[k], r->lo[k + 1] - 1);
                printf("%-6d %-10s %9.3f %9.3f %9.3f   %9.3f %9.3f %14.0f  %.2f MB\n", k, lay, bubble[k], theory, msim.bubble[k],
                       fwd[k] * 1e3, bwd[k] * 1e3, peak_slots[k], peak_bytes[k] / 1e6);
            }
            char sn[32];
            printf("(simulated: the %s schedule run by the simulator with these F and B times, transfers free)\n",
                   choice_name(SCHED_CHOICES, c->schedule, sn, sizeof sn));
        }
        if (c->verify) {
            printf("\nverify (step 1 vs monolith reference): worst relative error per %s:", c->mode == MODE_PP ? "stage" : "part");
            for (int k = 0; k < r->K; k++) printf(" %.2e", stage_err[k]);
            printf(" -> %s (tolerance %.0e)\n", verify_failed ? "FAILED" : "ok", VERIFY_TOL);
        }
        if (c->gantt) {
            const char *nc = getenv("NO_COLOR");
            int colour = isatty(STDOUT_FILENO) && !(nc && *nc);
            printf("\n");
            gantt_text(stdout, &charts[0], colour);
            printf("\n");
            gantt_text(stdout, &charts[1], colour);
        }
    }
    fflush(stdout);
    if (charts[0].slices) gantt_free_slices(&charts[0]);
    sim_result_free(&msim);
    free(fwd); free(bwd);
    for (int k = 0; k < n_local; k++) stage_free(&parts[k]);
    if (c->mode != MODE_PP) free(parts);
    sim_result_free(&sim);
    action_list_free(&r->list);
    r->be->free(r->dout); r->be->free(r->din);
    free(r->xh); free(r->yh); free(r->step_s); free(r->busy_s); free(r->span_s); free(r->loss); free(r->ev); free(r->step_start);
    free(bubble); free(peak_bytes); free(peak_slots); free(stage_err);
    data_close(&r->data);
    comms_finalize();
    if (verify_failed && r->rank == 0) fprintf(stderr, "micropp: --verify failed: worst relative error %.3g exceeds %.0e\n", verify_err, VERIFY_TOL);
    return verify_failed ? 1 : 0;
}
