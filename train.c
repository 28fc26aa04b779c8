// train.c: `micropp train`: validation of the run (same decision on every rank, before any
// message), the training loops of each mode (monolith, manual split, pipeline executor),
// --verify against a monolith reference, evaluation, and the summary (text or one JSON object).
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
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
    int V;                    // chunks per rank: --virtual-stages for interleaved, else 1
    int lo[MAX_STAGES + 1];   // virtual stage vs holds global layers [lo[vs], lo[vs+1]) (vs = chunk*K + stage)
    int stage;                // this rank's stage (pp)
    Stage *chunk;             // pp: this rank's V chunks, chunk c = virtual stage c*K + stage
    MemTally tally;           // pp: activation memory of this rank's chunks together
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
    size_t peak_bytes;
} Run;

// Per-rank median times of one pass of each compute kind ([K] each; i and w: halves of b when the
// backward is not split).
typedef struct { double *f, *b, *i, *w; } Costs;

static int is_last(const Run *r) { return r->stage == r->K - 1; }
static int vstage(const Run *r, int chunk) { return chunk * r->K + r->stage; }
static int is_last_vs(const Run *r, int vs) { return vs == r->K * r->V - 1; }

// ---- validation: pure functions of the config and world size, identical on every rank ----

static void validate(TrainConfig *c, int world, Run *r) {
    char name[32];
    const char *mode = choice_name(MODE_CHOICES, c->mode, name, sizeof name);
    if (c->mode != MODE_PP) {
        if (world != 1)
            user_error("train: --mode %s runs in one process but %d were started: drop 'mpiexec -n %d' or use --mode pp",
                       mode, world, world);
        static const char *pp_only[] = {"schedule", "micro-batches", "partition", "checkpoint-activations", "virtual-stages",
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
    // the schedule: chunks per rank, and the (M, K) it can run
    char sched[32];
    choice_name(SCHED_CHOICES, c->schedule, sched, sizeof sched);
    int interleaved = c->mode == MODE_PP && c->schedule == SCHED_INTERLEAVED;
    if (c->mode == MODE_PP && !interleaved && option_on_command_line("virtual-stages"))
        user_error("train: --virtual-stages applies to --schedule interleaved, not %s: drop it or add --schedule interleaved", sched);
    r->V = interleaved ? (int)c->virtual_stages : 1;
    if (interleaved && r->V < 2)
        user_error("train: --schedule interleaved needs --virtual-stages >= 2 (got %d; with 1 chunk per rank it is 1f1b: use --schedule 1f1b)", r->V);
    if (interleaved && r->M % r->K) {
        int lo = r->M / r->K * r->K, hi = lo + r->K;
        char fits[64];
        if (lo) snprintf(fits, sizeof fits, "%d or %d", lo, hi); else snprintf(fits, sizeof fits, "%d", hi);
        user_error("train: --schedule interleaved needs --micro-batches to be a multiple of the %d stages (Megatron's rule), got %d: use %s",
                   r->K, r->M, fits);
    }
    if ((int64_t)r->K * r->V > c->layers)
        user_error("train: %d ranks x %d virtual stages = %d chunks but only %lld layers: every chunk needs a layer, so use --layers >= %d or fewer --virtual-stages",
                   r->K, r->V, r->K * r->V, (long long)c->layers, r->K * r->V);
    if (c->mode == MODE_PP) {  // the largest message tag of the run must be one MPI accepts
        long long top = comm_tag_chunk_max(r->M, r->V), ub = comm_tag_ub();
        if (top > ub)
            user_error("train: %d micro-batches x %d virtual stages need message tags up to %lld but this MPI allows %lld: use fewer micro-batches",
                       r->M, r->V, top, ub);
    }
    if (c->batch % r->M) {
        char fits[256] = "";
        for (int m = 1, n = 0; m <= c->batch && n < 8; m++)
            if (c->batch % m == 0) { size_t l = strlen(fits); snprintf(fits + l, sizeof fits - l, "%s%d", n++ ? ", " : "", m); }
        user_error("train: --batch %lld is not divisible by --micro-batches %d: use micro-batches that divide it (%s, ...) or change --batch",
                   (long long)c->batch, r->M, fits);
    }
    r->rows = (int)(c->batch / r->M);
    // partition: layers per virtual stage (per stage, or per chunk in pipeline order when interleaved)
    int S = r->K * r->V;
    const char *what = r->V > 1 ? "chunk" : "stage";
    if (c->partition[0]) {
        int parts[MAX_STAGES];
        int n = parse_int_list(c->partition, parts, MAX_STAGES);
        if (n < 0) user_error("train: --partition '%s' is not a comma-separated list of layer counts like 5,4,4,3", c->partition);
        if (n != S && r->V > 1)
            user_error("train: --partition '%s' has %d entries but %d ranks x %d virtual stages make %d chunks: give one layer count per chunk, in pipeline order (rank r holds chunks r, r+%d, ...)",
                       c->partition, n, r->K, r->V, S, r->K);
        if (n != S) user_error("train: --partition '%s' has %d entries but there are %d stages: give one layer count per stage", c->partition, n, r->K);
        int sum = 0;
        for (int i = 0; i < n; i++) {
            if (parts[i] < 1) user_error("train: --partition '%s': %s %d gets %d layers; every %s needs at least 1", c->partition, what, i, parts[i], what);
            sum += parts[i];
        }
        if (sum != c->layers) user_error("train: --partition '%s' sums to %d but --layers is %lld: the counts must add up to the layers", c->partition, sum, (long long)c->layers);
        r->lo[0] = 0;
        for (int i = 0; i < n; i++) r->lo[i + 1] = r->lo[i] + parts[i];
    } else {  // even split, the remainder spread over the first (virtual) stages
        int L = (int)c->layers, base = L / S, extra = L % S;
        r->lo[0] = 0;
        for (int i = 0; i < S; i++) r->lo[i + 1] = r->lo[i] + base + (i < extra);
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

static void record(Run *r, int step, int kind, int mb, int chunk, double t0, double t1) {
    if (r->n_ev == r->cap_ev) {
        r->cap_ev = r->cap_ev ? 2 * r->cap_ev : 1024;
        r->ev = realloc(r->ev, sizeof(Event) * (size_t)r->cap_ev);
        CHECK(r->ev, "out of memory recording events");
    }
    r->ev[r->n_ev++] = (Event){step, kind, mb, t0, t1, chunk};
}

// The first training sample of micro-batch mb in this step. Synthetic data is a set of --samples
// rows (default: one fixed batch, as in the course's monolith) cycled; a .npy file is cycled whole.
static uint64_t sample_index(const Run *r, int step, int mb) {
    uint64_t i = (uint64_t)step * (uint64_t)r->c->batch + (uint64_t)mb * (uint64_t)r->rows;
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

// ---- the pipeline executor: run this rank's action list for one step ----

// The executor dispatches each action by (kind, micro-batch, chunk): chunk c is virtual stage
// vs = c*K + stage; its activations come from vs-1 and go to vs+1 (rank (vs+-1) mod K: from the last
// rank back to rank 0 between chunks), tagged with the receiving chunk. A receive is followed by the
// compute that consumes it, and a send follows the compute that produced it, so one buffer each
// for the output gradient (dout) and the input gradient (din) suffices; the checks below hold
// the schedule to that.
static double pipeline_step(Run *r, int step) {
    Comm *cm = &r->comm;
    size_t n = (size_t)r->rows * r->chunk[0].H;
    int K = r->K;
    int dout_mb = -1, dout_c = -1, din_mb = -1, din_c = -1, fwd_mb = -1, fwd_c = -1;
    double busy = 0, base = r->step_start[step];
    for (int i = 0; i < r->list.n; i++) {
        Action a = r->list.a[i];
        Stage *s = &r->chunk[a.chunk];
        int vs = vstage(r, a.chunk);
        double t0 = now_sec();
        int slot;
        switch (a.kind) {
        case ACT_RECV_ACT:
            slot = stage_slot_acquire(s, a.mb);
            comm_recv(cm, stage_slot_input(s, slot), n, comm_stage_rank(cm, (vs - 1) % K), comm_tag_chunk(TAG_ACT, a.mb, a.chunk));
            break;
        case ACT_FORWARD:
            slot = stage_slot_acquire(s, a.mb);
            load_inputs(r, s, slot, sample_index(r, step, a.mb), vs == 0, is_last_vs(r, vs));
            stage_forward(s, slot);
            fwd_mb = a.mb; fwd_c = a.chunk;
            break;
        case ACT_SEND_ACT:
            // With checkpointing the output lives in the recompute scratch: send it before the next compute.
            CHECK(fwd_mb == a.mb && fwd_c == a.chunk, "schedule sends micro-batch %d of chunk %d but the last forward was %d of chunk %d",
                  a.mb, a.chunk, fwd_mb, fwd_c);
            comm_send(cm, stage_output(s, stage_slot_of(s, a.mb)), n, comm_stage_rank(cm, (vs + 1) % K),
                      comm_tag_chunk(TAG_ACT, a.mb, (vs + 1) / K));
            break;
        case ACT_RECV_GRAD:
            comm_recv(cm, r->dout, n, comm_stage_rank(cm, (vs + 1) % K), comm_tag_chunk(TAG_GRAD, a.mb, a.chunk));
            dout_mb = a.mb; dout_c = a.chunk;
            break;
        case ACT_BACKWARD:
        case ACT_BACKWARD_INPUT:
            slot = stage_slot_of(s, a.mb);
            CHECK(slot >= 0, "backward of micro-batch %d (chunk %d), which has no forward in flight", a.mb, a.chunk);
            CHECK(is_last_vs(r, vs) || (dout_mb == a.mb && dout_c == a.chunk), "backward of micro-batch %d (chunk %d) without its output gradient", a.mb, a.chunk);
            if (a.kind == ACT_BACKWARD) stage_backward(s, slot, r->dout, vs > 0 ? r->din : NULL);
            else stage_backward_input(s, slot, r->dout, vs > 0 ? r->din : NULL);
            din_mb = a.mb; din_c = a.chunk;
            dout_mb = fwd_mb = -1;
            break;
        case ACT_BACKWARD_WEIGHT:
            slot = stage_slot_of(s, a.mb);
            CHECK(slot >= 0, "weight gradient of micro-batch %d (chunk %d), which is not in flight", a.mb, a.chunk);
            stage_backward_weight(s, slot);
            fwd_mb = -1;
            break;
        case ACT_SEND_GRAD:
            CHECK(din_mb == a.mb && din_c == a.chunk, "schedule sends the gradient of micro-batch %d (chunk %d) but the last backward was %d (chunk %d)",
                  a.mb, a.chunk, din_mb, din_c);
            comm_send(cm, r->din, n, comm_stage_rank(cm, (vs - 1) % K), comm_tag_chunk(TAG_GRAD, a.mb, (vs - 1) / K));
            break;
        }
        double t1 = now_sec();
        if (action_is_compute(a.kind)) busy += t1 - t0;
        record(r, step, a.kind, a.mb, a.chunk, t0 - base, t1 - base);
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
    record(r, step, ACT_FORWARD, 0, 0, 0, t1 - t0);
    record(r, step, ACT_BACKWARD, 0, 0, t1 - t0, t2 - t0);
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

// Compares the gradients of n stages (already computed for step 0) with one monolith reference;
// err[i] = the worst relative error over stage i's tensors (and the loss, on the head's stage).
static void verify_stages(Run *r, const Stage *st, int n, double loss, double *err) {
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
    float *theirs = xmalloc(sizeof(float) * ref.n_params);
    r->be->to_host(theirs, ref.grads, sizeof(float) * ref.n_params);
    for (int k = 0; k < n; k++) {
        const Stage *s = &st[k];
        float *mine = xmalloc(sizeof(float) * s->n_params);
        r->be->to_host(mine, s->grads, sizeof(float) * s->n_params);
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
        err[k] = worst;
        free(mine);
    }
    free(theirs); free(x); free(y);
    stage_free(&ref);
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
    // pp: batch k goes through the virtual stages in order; on this rank, through its chunks in
    // turn (tags repeat every COMM_MAX_MB batches, which is safe: each link carries them in order)
    int last_here = pp ? is_last(r) : 1;
    for (int done = 0, k = 0; done < n_eval; done += chunk, k++) {
        int rows = n_eval - done < chunk ? n_eval - done : chunk, tk = k % COMM_MAX_MB;
        for (int i = 0; i < n_local; i++) {
            int vs = pp ? vstage(r, i) : i;
            if (vs == 0) {
                data_features(&r->data, base + (uint64_t)done, rows, r->xh);
                be->to_device(a, r->xh, sizeof(float) * (size_t)rows * H);
            } else if (pp) {
                comm_recv(&r->comm, a, (size_t)rows * H, comm_stage_rank(&r->comm, (vs - 1) % r->K), comm_tag_chunk(TAG_DATA, tk, i));
            }
            stage_forward_eval(&stages[i], a, rows, b);
            if (stages[i].has_head) {
                be->to_host(logits, b, sizeof(float) * (size_t)rows * C);
                data_labels(&r->data, base + (uint64_t)done, rows, r->yh);
                hits += argmax_hits(logits, r->yh, rows, C);
            } else if (pp) {
                comm_send(&r->comm, b, (size_t)rows * H, comm_stage_rank(&r->comm, (vs + 1) % r->K), comm_tag_chunk(TAG_DATA, tk, (vs + 1) / r->K));
            } else {
                float *t = a; a = b; b = t;
            }
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
    if (r->V > 1) printf(" | %d virtual stages per rank", r->V);
    if (c->mode == MODE_MANUAL) printf(" | parts %d", r->K);
    printf("\nmodel %lld x Linear(%lld,%lld)+ReLU -> Linear(%lld,%lld) | %zu parameters (%.1f MB fp32)\n",
           (long long)c->layers, (long long)c->hidden, (long long)c->hidden, (long long)c->hidden,
           (long long)c->classes, P, P * 4.0 / 1e6);
    printf("batch %lld | steps %lld | %s lr %g | seed %lld | data %s | %s | device %s\n", (long long)c->batch,
           (long long)c->steps, opt, c->lr, (long long)c->seed, c->data, blas, r->be->name);
    if (c->mode != MODE_MONOLITH)
        for (int k = 0; k < r->K; k++) {
            printf("  %s %d: layers", c->mode == MODE_PP ? "stage" : "part", k);
            for (int ch = 0; ch < r->V; ch++)
                printf("%s %d-%d", ch ? " |" : "", r->lo[ch * r->K + k], r->lo[ch * r->K + k + 1] - 1);
            if (r->V > 1) {
                printf(" (virtual stages");
                for (int ch = 0; ch < r->V; ch++) printf("%s %d", ch ? "," : "", ch * r->K + k);
                printf(")");
            }
            printf("%s\n", k == r->K - 1 ? " + head" : "");
        }
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
    int best = skip;
    for (int t = skip; t < (int)r->c->steps; t++)
        if (fabs(r->step_s[t] - step_med) < fabs(r->step_s[best] - step_med)) best = t;
    return best;
}

// Rank 0: writes --trace, and builds the two charts of step `shown` (measured, and simulated with the
// measured per-stage costs) that --timeline writes as SVG and --gantt prints.
static void observe(Run *r, const Timeline *tl, int shown, const SimResult *msim, const Costs *med, double theory, Gantt g[2]) {
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
    double bub = 0, f_mean = 0, b_mean = 0, i_mean = 0, w_mean = 0;
    int split = schedule_splits_backward(c->schedule);
    for (int k = 0; k < g[0].rows; k++) {
        double busy = 0;
        for (int i = 0; i < g[0].n[k]; i++) {
            const Interval *v = &g[0].slices[k][i];
            if (v->kind < ACT_KINDS && !kind_style(v->kind)->bar) busy += v->t1 - v->t0;
        }
        bub += (1 - busy / r->span_s[shown]) / g[0].rows;
    }
    for (int k = 0; k < r->K; k++) {
        f_mean += med->f[k] / r->K; b_mean += med->b[k] / r->K; i_mean += med->i[k] / r->K; w_mean += med->w[k] / r->K;
    }
    char vpart[48] = "", costs[96];
    if (r->V > 1) snprintf(vpart, sizeof vpart, " x %d virtual stages", r->V);
    if (split) snprintf(costs, sizeof costs, "mean F %.3f ms, I %.3f ms, W %.3f ms", f_mean * 1e3, i_mean * 1e3, w_mean * 1e3);
    else snprintf(costs, sizeof costs, "mean F %.3f ms, B %.3f ms", f_mean * 1e3, b_mean * 1e3);
    snprintf(g[0].title, sizeof g[0].title, "measured: step %d of %lld | %s | %d ranks%s | %d micro-batches | %.3f ms | bubble %.3f (mean over ranks), theory %.3f",
             shown + 1, (long long)c->steps, sched, r->K, vpart, r->M, r->step_s[shown] * 1e3, bub, theory);
    snprintf(g[1].title, sizeof g[1].title, "simulated: %s with each %s's median costs (%s%s; transfers free) | bubble %.3f",
             sched, r->V > 1 ? "chunk pass" : "stage", costs, "", msim->bubble_mean);
    g[1].row_label = "stage";
    g[1].rows = msim->K;
    g[1].slices = msim->slices;
    g[1].n = msim->n_slices;
    g[1].t_end = msim->makespan;
    // text: the shortest forward or backward one label wide, the chart at most 160 characters
    double shortest = INFINITY;
    for (int k = 0; k < r->K; k++) shortest = fmin(shortest, fmin(med->f[k], split ? fmin(med->i[k], med->w[k]) : med->b[k]));
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
        // Prove the schedule before running it (uniform costs F = I = W = 1, i.e. F = 1, B = 2), and
        // size each chunk's activation stash from it.
        SimSpec spec = {.kind = c->schedule, .K = r->K, .M = r->M, .v = r->V, .f = 1, .b = 1, .w = 1};
        schedule_sim(&spec, &sim);
        if (sim.deadlock) fatal("schedule would deadlock: %s", sim.why);
        schedule_build(c->schedule, r->K, r->M, r->V, r->stage, &r->list);
        r->chunk = xcalloc((size_t)r->V, sizeof(Stage));
        for (int k = 0; k < r->V; k++) {
            int vs = vstage(r, k);
            Stage *s = &r->chunk[k];
            stage_init(s, r->be, L, H, C, r->lo[vs], r->lo[vs + 1], is_last_vs(r, vs), r->rows,
                       sim.peak_slots[vs], c->checkpoint_activations, (uint64_t)c->seed);
            if (schedule_splits_backward(c->schedule)) stage_enable_split(s);
            s->grad_scale = 1.0f / (float)c->batch;
            s->tally = &r->tally;
            s->progress = comm_poll_sends;
        }
        parts = r->chunk;
        n_local = r->V;
    } else {
        n_local = r->K;
        parts = xcalloc((size_t)r->K, sizeof(Stage));
        for (int k = 0; k < r->K; k++)
            stage_init(&parts[k], r->be, L, H, C, r->lo[k], r->lo[k + 1], k == r->K - 1, r->rows, 1, 0, (uint64_t)c->seed);
        r->stage = r->K - 1;
    }
    Stage *head = &parts[n_local - 1];

    double verify_err = NAN;
    double *stage_err = NULL;
    for (int step = 0; step < steps; step++) {
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
        if (c->mode == MODE_PP) {
            double ta = now_sec();
            comm_allreduce_sum_double(v, 3, MPI_COMM_WORLD);
            record(r, step, EV_ALLREDUCE, -1, 0, ta - t0, now_sec() - t0);
        }
        double loss = v[0] / v[1];
        r->loss[step] = loss;
        if (step == 0 && c->verify) {
            // one entry per (virtual) stage: every chunk of every rank against the monolith
            stage_err = xcalloc((size_t)r->K * r->V, sizeof(double));
            double *mine = xcalloc((size_t)n_local, sizeof(double));
            verify_stages(r, parts, n_local, loss, mine);
            if (c->mode == MODE_PP) {
                for (int k = 0; k < n_local; k++) stage_err[vstage(r, k)] = mine[k];
                comm_allreduce_max_double(stage_err, r->K * r->V, MPI_COMM_WORLD);
            } else {
                for (int k = 0; k < n_local; k++) stage_err[k] = mine[k];
            }
            free(mine);
            verify_err = 0;
            for (int k = 0; k < r->K * r->V; k++) verify_err = fmax(verify_err, stage_err[k]);
        }
        if (!isfinite(loss))
            user_error("train: the loss became %s at step %d: lower --lr (now %g) and check the data", isnan(loss) ? "NaN" : "Inf", step + 1, c->lr);
        double to = now_sec();
        for (int k = 0; k < n_local; k++) stage_optimizer_step(&parts[k], c->optimizer, (float)c->lr, step + 1);
        r->be->sync();
        record(r, step, EV_OPTIMIZER, -1, 0, to - t0, now_sec() - t0);
        r->step_s[step] = now_sec() - t0;
        if (verbose && c->log_every && ((step + 1) % c->log_every == 0 || step == 0 || step == steps - 1))
            printf("step %d/%d | loss %.4f | %.2f ms | %.0fk samples/s\n", step + 1, steps, loss,
                   r->step_s[step] * 1e3, c->batch / r->step_s[step] / 1e3);
    }

    double acc = evaluate(r, parts, n_local);

    // Summary figures. Step time: the median over steps (the first is a warm-up when there are more).
    int skip = steps > 2 ? 1 : 0;
    if (c->mode == MODE_PP) comm_allreduce_max_double(r->step_s, steps, MPI_COMM_WORLD);
    double step_med = median(r->step_s + skip, steps - skip);
    size_t P = model_param_count(L, H, C);
    double flops = 6.0 * (double)P * (double)c->batch;
    if (c->checkpoint_activations) flops += 2.0 * (double)(P - ((size_t)C * H + C)) * (double)c->batch;
    double samples_s = c->batch / step_med, gflops = flops / step_med / 1e9;

    // Pipeline: measured bubble per rank = 1 - busy / span, span the slowest rank's pipeline time.
    // The theory: the simulated bubble with uniform costs, which is the textbook formula where one
    // exists (schedule_bubble_formula).
    double *bubble = NULL, *peak_bytes = NULL, *peak_slots = NULL, *peak_deferred = NULL;
    double theory = c->mode == MODE_PP ? sim.bubble_mean : NAN;
    if (c->mode == MODE_PP) {
        comm_allreduce_max_double(r->span_s, steps, MPI_COMM_WORLD);
        double *b = xmalloc(sizeof(double) * (size_t)steps);
        for (int t = 0; t < steps; t++) b[t] = 1.0 - r->busy_s[t] / r->span_s[t];
        bubble = xcalloc((size_t)r->K, sizeof(double));
        peak_bytes = xcalloc((size_t)r->K, sizeof(double));
        peak_slots = xcalloc((size_t)r->K, sizeof(double));
        peak_deferred = xcalloc((size_t)r->K, sizeof(double));
        bubble[r->stage] = median(b + skip, steps - skip);
        peak_bytes[r->stage] = (double)r->tally.peak_bytes;
        peak_slots[r->stage] = r->tally.peak_stashed;
        peak_deferred[r->stage] = r->tally.peak_deferred;
        comm_allreduce_sum_double(bubble, r->K, MPI_COMM_WORLD);
        comm_allreduce_sum_double(peak_bytes, r->K, MPI_COMM_WORLD);
        comm_allreduce_sum_double(peak_slots, r->K, MPI_COMM_WORLD);
        comm_allreduce_sum_double(peak_deferred, r->K, MPI_COMM_WORLD);
        free(b);
    }
    // ... and what the simulator predicts for this schedule with each rank's median action times:
    // F, and B (or I and W where the backward is split), each the time of one pass of one chunk.
    // The simulator takes whole-stage costs (a chunk pass is 1/v of them), so they are scaled by v.
    int split = schedule_splits_backward(c->schedule);
    Costs med = {0};
    SimResult msim = {0};
    Gantt charts[2];
    memset(charts, 0, sizeof charts);
    int shown = -1;
    if (c->mode == MODE_PP) {
        double *m[4];
        for (int k = 0; k < 4; k++) m[k] = xcalloc((size_t)r->K, sizeof(double));
        m[0][r->stage] = kind_median(r, ACT_FORWARD, skip);
        if (split) {
            m[2][r->stage] = kind_median(r, ACT_BACKWARD_INPUT, skip);
            m[3][r->stage] = kind_median(r, ACT_BACKWARD_WEIGHT, skip);
            m[1][r->stage] = m[2][r->stage] + m[3][r->stage];
        } else {
            m[1][r->stage] = kind_median(r, ACT_BACKWARD, skip);
            m[2][r->stage] = m[3][r->stage] = m[1][r->stage] / 2;  // only their sum matters for a full backward
        }
        for (int k = 0; k < 4; k++) comm_allreduce_sum_double(m[k], r->K, MPI_COMM_WORLD);
        med = (Costs){m[0], m[1], m[2], m[3]};
        double *st[3];
        for (int k = 0; k < 3; k++) {
            st[k] = xmalloc(sizeof(double) * (size_t)r->K);
            for (int q = 0; q < r->K; q++) st[k][q] = (k == 0 ? med.f : k == 1 ? med.i : med.w)[q] * r->V;
        }
        SimSpec ms = {.kind = c->schedule, .K = r->K, .M = r->M, .v = r->V, .stage_f = st[0], .stage_b = st[1], .stage_w = st[2]};
        schedule_sim(&ms, &msim);
        for (int k = 0; k < 3; k++) free(st[k]);
        if (c->trace[0] || c->timeline[0] || c->gantt) {
            Timeline tl;
            shown = shown_step(r, skip, step_med);
            timeline_gather(&tl, r->ev, r->n_ev, r->step_start, steps, MPI_COMM_WORLD);
            if (r->rank == 0) observe(r, &tl, shown, &msim, &med, theory, charts);
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
        cJSON_AddNumberToObject(o, "first_loss", r->loss[0]);
        cJSON_AddNumberToObject(o, "final_loss", r->loss[steps - 1]);
        if (isfinite(acc)) cJSON_AddNumberToObject(o, "accuracy", acc); else cJSON_AddNullToObject(o, "accuracy");
        cJSON_AddNumberToObject(o, "step_ms_median", step_med * 1e3);
        cJSON_AddNumberToObject(o, "samples_per_s", samples_s);
        cJSON_AddNumberToObject(o, "gflops", gflops);
        char blas[160];
        blas_describe(blas, sizeof blas);
        cJSON_AddStringToObject(o, "blas", blas);
        cJSON_AddItemToObject(o, "losses", cJSON_CreateDoubleArray(r->loss, steps));
        if (c->mode == MODE_MANUAL) cJSON_AddNumberToObject(o, "parts", r->K);
        if (c->mode == MODE_PP) {
            cJSON_AddStringToObject(o, "schedule", choice_name(SCHED_CHOICES, c->schedule, s, sizeof s));
            cJSON_AddNumberToObject(o, "stages", r->K);
            cJSON_AddNumberToObject(o, "micro_batches", r->M);
            cJSON_AddNumberToObject(o, "virtual_stages", r->V);
            cJSON_AddBoolToObject(o, "checkpoint_activations", c->checkpoint_activations);
            int part[MAX_STAGES];
            for (int k = 0; k < r->K * r->V; k++) part[k] = r->lo[k + 1] - r->lo[k];
            cJSON_AddItemToObject(o, "partition", cJSON_CreateIntArray(part, r->K * r->V));
            cJSON_AddItemToObject(o, "bubble_measured", cJSON_CreateDoubleArray(bubble, r->K));
            cJSON_AddNumberToObject(o, "bubble_theory", theory);
            cJSON_AddItemToObject(o, "bubble_simulated", cJSON_CreateDoubleArray(msim.bubble, r->K));
            const char *key[4] = {"forward_ms_median", "backward_ms_median", "backward_input_ms_median", "backward_weight_ms_median"};
            const double *val[4] = {med.f, med.b, med.i, med.w};
            for (int q = 0; q < (split ? 4 : 2); q++) {
                double ms[MAX_STAGES];
                for (int k = 0; k < r->K; k++) ms[k] = val[q][k] * 1e3;
                cJSON_AddItemToObject(o, key[q], cJSON_CreateDoubleArray(ms, r->K));
            }
            if (shown >= 0) cJSON_AddNumberToObject(o, "timeline_step", shown + 1);
            cJSON_AddItemToObject(o, "peak_activation_bytes", cJSON_CreateDoubleArray(peak_bytes, r->K));
            cJSON_AddItemToObject(o, "peak_inflight", cJSON_CreateDoubleArray(peak_slots, r->K));
            cJSON_AddItemToObject(o, "peak_deferred_w", cJSON_CreateDoubleArray(peak_deferred, r->K));
        }
        if (c->verify) {
            cJSON_AddNumberToObject(o, "verify_max_rel_err", verify_err);
            cJSON_AddItemToObject(o, "verify_stage_rel_err", cJSON_CreateDoubleArray(stage_err, r->K * r->V));
            cJSON_AddBoolToObject(o, "verify_ok", !verify_failed);
        }
        char *text = cJSON_PrintUnformatted(o);
        printf("%s\n", text);
        free(text);
        cJSON_Delete(o);
    } else if (verbose) {
        printf("\nfinal loss %.4f (first %.4f) | accuracy %.1f%% on %lld %s rows\n", r->loss[steps - 1], r->loss[0],
               100 * acc, (long long)(r->data.features && c->eval_samples > r->data.n ? r->data.n : c->eval_samples),
               r->data.features ? "training" : "held-out");
        printf("step %.3f ms (median) | %.0f samples/s | %.1f GFLOP/s\n", step_med * 1e3, samples_s, gflops);
        if (c->mode == MODE_PP) {
            // per rank; with chunks, its layer ranges in chunk order, the medians per chunk pass, and
            // in-flight counting chunk passes; a split backward shows I and W (and the deferred W's)
            printf("\n%-6s %-10s %-29s   %9s %9s%s %14s  %s\n", "", "", "----------- bubble ----------", "median", "median",
                   split ? "    median" : "", "", "");
            printf("%-6s %-10s %9s %9s %9s   %9s %9s%s %14s  %s%s\n", "stage", "layers", "measured", "theory", "simulated", "F ms",
                   split ? "I ms" : "B ms", split ? "      W ms" : "", "peak in-flight", split ? "peak deferred W  " : "", "peak activations");
            for (int k = 0; k < r->K; k++) {
                char lay[128] = "", wcol[16] = "", def[32] = "";
                for (int ch = 0; ch < r->V; ch++) {
                    size_t l = strlen(lay);
                    snprintf(lay + l, sizeof lay - l, "%s%d-%d", ch ? "," : "", r->lo[ch * r->K + k], r->lo[ch * r->K + k + 1] - 1);
                }
                if (split) {
                    snprintf(wcol, sizeof wcol, " %9.3f", med.w[k] * 1e3);
                    snprintf(def, sizeof def, "%-17.0f", peak_deferred[k]);
                }
                printf("%-6d %-10s %9.3f %9.3f %9.3f   %9.3f %9.3f%s %14.0f  %s%.2f MB\n", k, lay, bubble[k], theory, msim.bubble[k],
                       med.f[k] * 1e3, (split ? med.i : med.b)[k] * 1e3, wcol, peak_slots[k], def, peak_bytes[k] / 1e6);
            }
            char sn[32];
            printf("(simulated: the %s schedule run by the simulator with these %s times%s, transfers free)\n",
                   choice_name(SCHED_CHOICES, c->schedule, sn, sizeof sn), split ? "F, I and W" : "F and B",
                   r->V > 1 ? " of one chunk pass each" : "");
        }
        if (c->verify) {
            printf("\nverify (step 1 vs monolith reference): worst relative error per %s:", c->mode != MODE_PP ? "part" : r->V > 1 ? "chunk (pipeline order)" : "stage");
            for (int k = 0; k < r->K * r->V; k++) printf(" %.2e", stage_err[k]);
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
    free(med.f); free(med.b); free(med.i); free(med.w);
    for (int k = 0; k < n_local; k++) stage_free(&parts[k]);
    if (c->mode != MODE_PP) free(parts);
    sim_result_free(&sim);
    action_list_free(&r->list);
    r->be->free(r->dout); r->be->free(r->din);
    free(r->xh); free(r->yh); free(r->step_s); free(r->busy_s); free(r->span_s); free(r->loss); free(r->ev); free(r->step_start);
    free(bubble); free(peak_bytes); free(peak_slots); free(peak_deferred); free(stage_err);
    data_close(&r->data);
    comms_finalize();
    if (verify_failed && r->rank == 0) fprintf(stderr, "micropp: --verify failed: worst relative error %.3g exceeds %.0e\n", verify_err, VERIFY_TOL);
    return verify_failed ? 1 : 0;
}
