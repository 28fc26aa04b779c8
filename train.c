// train.c: `micropp train`: validation of the run (same decision on every rank, before any
// message), the training loops of each mode (monolith, manual split, pipeline executor, data
// parallel and the pipeline x data-parallel grid), --verify against a monolith reference,
// evaluation, and the summary (text or one JSON object).
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "checkpoint.h"
#include "comms.h"
#include "config.h"
#include "data.h"
#include "ddp.h"
#include "model.h"
#include "schedule.h"
#include "trace.h"
#include "train.h"
#include "util.h"

#define MAX_STAGES 4096
#define VERIFY_TOL 1e-5        // fp32 against fp32
#define VERIFY_TOL_TF32 1e-2   // TF32 gemms (10-bit mantissa inputs) against the fp32 CPU
#define VERIFY_NOISE_FACTOR 8  // or within 8x the float noise of the reference itself (verify_stage)

typedef struct {
    TrainConfig *c;
    const Backend *be;
    Placement place;          // device and transport, the same decision on every rank
    Data data;
    Comm comm;
    int world, rank;
    int K, M, rows;           // stages, micro-batches, rows per micro-batch (per replica)
    int D, replica;           // data-parallel replicas, this rank's replica
    int N, micro;             // gradient-accumulation micro-steps per step, the one running
    GradSync *sync;           // ddp/hybrid: the gradient all-reduce of each of this rank's n_sync stages (chunks)
    int sync_on, n_sync;
    int V;                    // chunks per rank: --virtual-stages for interleaved, else 1
    int lo[MAX_STAGES + 1];   // virtual stage vs holds global layers [lo[vs], lo[vs+1]) (vs = chunk*K + stage)
    int stage;                // this rank's stage (pp)
    Stage st;                 // ddp: this rank's replica of the whole model
    Stage *chunk;             // pp/hybrid: this rank's V chunks, chunk c = virtual stage c*K + stage
    MemTally tally;           // pp/hybrid: activation memory of this rank's chunks together
    ActionList list;
    float *xh;                // host rows [rows, H]
    int32_t *yh;              // host labels [rows]
    float *dout, *din;        // pp: received output gradient, input gradient to send
    // per-step measurements
    double *step_s, *busy_s, *span_s, *loss, *gemm_s;
    double *comm_s, *exposed_s;  // ddp/hybrid: all-reduce in flight, and its part after compute
    double *step_start;       // now_sec() at each step's start (after the step barrier in pp)
    Event *ev;                // every action as it ran (trace.h), times from its step's start
    int n_ev, cap_ev;
    // checkpoints: this run trains steps [start, steps); its first step reads sample sample0 on
    int start;
    uint64_t sample0;
    CkptLayout ck;
} Run;

// Per-rank median times of one pass of each compute kind ([K] each; i and w: halves of b when the
// backward is not split).
typedef struct { double *f, *b, *i, *w; } Costs;

static int is_last(const Run *r) { return r->stage == r->K - 1; }
static int vstage(const Run *r, int chunk) { return chunk * r->K + r->stage; }
static int is_last_vs(const Run *r, int vs) { return vs == r->K * r->V - 1; }
static int pipelined(int mode) { return mode == MODE_PP || mode == MODE_HYBRID; }
static int data_parallel(int mode) { return mode == MODE_DDP || mode == MODE_HYBRID; }
static int distributed(int mode) { return mode == MODE_PP || data_parallel(mode); }

// ---- validation: pure functions of the config and world size, identical on every rank ----

static void validate(TrainConfig *c, int world, Run *r) {
    char name[32];
    const char *mode = choice_name(MODE_CHOICES, c->mode, name, sizeof name);
    if (!distributed(c->mode) && world != 1)
        user_error("train: --mode %s runs in one process but %d were started: drop 'mpiexec -n %d' or use --mode pp, ddp or hybrid",
                   mode, world, world);
    if (c->mode != MODE_PP) {  // the observers of one pipeline
        static const char *observe_only[] = {"trace", "timeline", "timeline-step", "gantt"};
        for (size_t i = 0; i < sizeof observe_only / sizeof *observe_only; i++)
            if (option_on_command_line(observe_only[i]))
                user_error("train: --%s applies to --mode pp, not --mode %s: drop it or use --mode pp", observe_only[i], mode);
    }
    if (!pipelined(c->mode)) {
        static const char *pp_only[] = {"schedule", "micro-batches", "partition", "checkpoint-activations", "virtual-stages", "transport"};
        for (size_t i = 0; i < sizeof pp_only / sizeof *pp_only; i++)
            if (option_on_command_line(pp_only[i]))
                user_error("train: --%s applies to --mode pp or hybrid, not --mode %s: drop it or add --mode pp", pp_only[i], mode);
    }
    if (c->mode != MODE_MANUAL && option_on_command_line("parts"))
        user_error("train: --parts applies to --mode manual, not --mode %s: drop it or add --mode manual", mode);
    // data parallelism
    if (!data_parallel(c->mode)) {
        static const char *dp_only[] = {"ddp-sync", "allreduce", "bucket-mb", "zero"};
        for (size_t i = 0; i < sizeof dp_only / sizeof *dp_only; i++)
            if (option_on_command_line(dp_only[i]))
                user_error("train: --%s applies to --mode ddp or hybrid, not --mode %s: drop it or add --mode ddp", dp_only[i], mode);
    }
    if (c->mode != MODE_HYBRID && option_on_command_line("pp"))
        user_error("train: --pp applies to --mode hybrid, not --mode %s: drop it (--mode pp makes one stage per rank) or add --mode hybrid", mode);
    if (!data_parallel(c->mode) && option_on_command_line("dp"))
        user_error("train: --dp applies to --mode hybrid or ddp, not --mode %s: drop it or add --mode hybrid", mode);
    if (option_on_command_line("grad-accum") && c->mode != MODE_MONOLITH && c->mode != MODE_DDP)
        user_error("train: --grad-accum applies to --mode monolith or ddp, not --mode %s: a pipeline already accumulates over --micro-batches", mode);
    if (data_parallel(c->mode) && c->bucket_mb <= 0)
        user_error("train: --bucket-mb %g must be positive: give a bucket capacity in MiB, e.g. 25", c->bucket_mb);
    if (c->zero && (c->save[0] || c->resume[0]))
        user_error("train: --%s with --zero 1 is not supported (each rank holds only its shard of the Adam moments): drop --zero for runs that save or resume",
                   c->save[0] ? "save" : "resume");
    if (c->ddp_sync == SYNC_NAIVE && option_on_command_line("bucket-mb"))
        user_error("train: --bucket-mb applies to --ddp-sync bucketed (naive all-reduces one tensor at a time): drop one of them");
    int P = 1, D = 1;
    if (c->mode == MODE_PP) P = world;
    if (c->mode == MODE_MANUAL) P = (int)c->parts;
    if (c->mode == MODE_DDP) {
        D = world;
        if (option_on_command_line("dp") && c->dp != world)
            user_error("train: --dp %lld but %d ranks were started: --mode ddp runs one replica per rank, so run 'mpiexec -n %lld' or drop --dp",
                       (long long)c->dp, world, (long long)c->dp);
    }
    if (c->mode == MODE_HYBRID) {
        int has_p = option_was_set("pp"), has_d = option_was_set("dp");
        if (!has_p && !has_d)
            user_error("train: --mode hybrid needs --pp P (stages) and --dp D (replicas) with P x D = %d, the number of ranks", world);
        if (has_p && has_d && c->pp * c->dp != world)
            user_error("train: --pp %lld x --dp %lld = %lld ranks, but %d were started: run 'mpiexec -n %lld' or choose P x D = %d",
                       (long long)c->pp, (long long)c->dp, (long long)(c->pp * c->dp), world, (long long)(c->pp * c->dp), world);
        if (!has_d && world % c->pp)
            user_error("train: --pp %lld does not divide the %d ranks: give --pp and --dp with P x D = %d", (long long)c->pp, world, world);
        if (!has_p && world % c->dp)
            user_error("train: --dp %lld does not divide the %d ranks: give --pp and --dp with P x D = %d", (long long)c->dp, world, world);
        P = has_p ? (int)c->pp : world / (int)c->dp;
        D = has_d ? (int)c->dp : world / (int)c->pp;
    }
    r->K = P;
    r->D = D;
    r->M = pipelined(c->mode) ? (int)c->micro_batches : 1;
    r->N = c->mode == MODE_MONOLITH || c->mode == MODE_DDP ? (int)c->grad_accum : 1;  // (a config file's key is left unused)
    if (c->mode == MODE_PP && world < 2)
        user_error("train: --mode pp needs at least 2 ranks (one per stage), got 1: run it as 'mpiexec -n 2 ./micropp train --mode pp'");
    if (r->K > MAX_STAGES) user_error("train: %d stages is more than the %d supported", r->K, MAX_STAGES);
    if (r->K > c->layers)
        user_error("train: %d %s but only %lld layers: every stage needs a layer, so use --layers >= %d or fewer %s",
                   r->K, c->mode == MODE_PP ? "stages (ranks)" : c->mode == MODE_HYBRID ? "stages (--pp)" : "parts", (long long)c->layers, r->K,
                   c->mode == MODE_PP ? "ranks" : c->mode == MODE_HYBRID ? "--pp" : "parts");
    // the schedule: chunks per rank, and the (M, K) it can run
    char sched[32];
    choice_name(SCHED_CHOICES, c->schedule, sched, sizeof sched);
    int interleaved = pipelined(c->mode) && c->schedule == SCHED_INTERLEAVED;
    if (pipelined(c->mode) && !interleaved && option_on_command_line("virtual-stages"))
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
    if (pipelined(c->mode)) {  // the largest message tag of the run must be one MPI accepts
        long long top = comm_tag_chunk_max(r->M, r->V), ub = comm_tag_ub();
        if (top > ub)
            user_error("train: %d micro-batches x %d virtual stages need message tags up to %lld but this MPI allows %lld: use fewer micro-batches",
                       r->M, r->V, top, ub);
    }
    if (r->D > 1 && c->batch % ((int64_t)r->D * r->M)) {  // every replica takes B/D rows in M micro-batches
        int64_t q = (int64_t)r->D * r->M, lo = c->batch / q * q;
        char fits[256] = "";
        if (c->batch % r->D == 0 && r->M > 1)  // the micro-batch counts that would work with this batch
            for (int m = 1, n = 0; m <= c->batch / r->D && n < 8; m++)
                if ((c->batch / r->D) % m == 0) { size_t l = strlen(fits); snprintf(fits + l, sizeof fits - l, "%s%d", n++ ? ", " : "", m); }
        char what[96], tail[320] = "";
        if (r->M > 1) snprintf(what, sizeof what, "%d replicas x %d micro-batches = %lld", r->D, r->M, (long long)q);
        else snprintf(what, sizeof what, "the %d replicas", r->D);
        if (fits[0]) snprintf(tail, sizeof tail, ", or --micro-batches %s (divisors of %lld rows per replica)", fits, (long long)(c->batch / r->D));
        user_error("train: --batch %lld is not divisible by %s: use --batch %lld or %lld (multiples of %lld)%s",
                   (long long)c->batch, what, (long long)(lo ? lo : q), (long long)(lo ? lo + q : 2 * q), (long long)q, tail);
    }
    if (c->batch % r->M) {
        char fits[256] = "";
        for (int m = 1, n = 0; m <= c->batch && n < 8; m++)
            if (c->batch % m == 0) { size_t l = strlen(fits); snprintf(fits + l, sizeof fits - l, "%s%d", n++ ? ", " : "", m); }
        user_error("train: --batch %lld is not divisible by --micro-batches %d: use micro-batches that divide it (%s, ...) or change --batch",
                   (long long)c->batch, r->M, fits);
    }
    r->rows = (int)(c->batch / r->D / r->M);
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
    if (r->c->mode != MODE_PP) return;
    char why[2 * PATH_LEN] = "";  // rank 0 writes the files, so its check is every rank's verdict
    for (int i = 0; i < 2 && r->rank == 0 && !why[0]; i++) {
        int e = path[i][0] ? out_check(path[i]) : 0;
        if (e) snprintf(why, sizeof why, "train: cannot write --%s '%s': %s (%s)", flag[i], path[i], strerror(e), out_hint(e));
    }
    agree_on_error(why);
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

// The first training sample of micro-batch mb of replica d in accumulation micro-step k of a step.
// A micro-step takes --batch consecutive rows of the stream; replica d takes rows [d*B/D, (d+1)*B/D)
// of them, cut into micro-batches of r->rows. Synthetic data is a set of --samples rows (default:
// one fixed batch of a step's batch x grad-accum rows, as in the course's monolith) cycled; a .npy
// file is cycled whole. A resumed run continues the stream where the checkpoint left it (sample0
// at step start).
static uint64_t first_sample(const Run *r, int step, int k, int d, int mb) {
    uint64_t B = (uint64_t)r->c->batch;
    uint64_t i = r->sample0 + ((uint64_t)(step - r->start) * (uint64_t)r->N + (uint64_t)k) * B +
                 (uint64_t)d * (B / (uint64_t)r->D) + (uint64_t)mb * (uint64_t)r->rows;
    uint64_t n = r->c->samples ? (uint64_t)r->c->samples : B * (uint64_t)r->N;
    return r->data.features ? i : i % n;
}
static uint64_t sample_index(const Run *r, int step, int mb) { return first_sample(r, step, r->micro, r->replica, mb); }

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
    int weights[COMM_MAX_CHUNKS] = {0};  // per chunk: the passes so far that produced weight gradients (B or W)
    double busy = 0, base = r->step_start[step];
    for (int i = 0; i < r->list.n; i++) {
        Action a = r->list.a[i];
        Stage *s = &r->chunk[a.chunk];
        int vs = vstage(r, a.chunk);
        double t0 = now_sec();
        int slot;
        // hybrid: a chunk's last B (or W) of the step makes its gradients final; its layer hooks
        // start the buckets' all-reduces, which then overlap the rest of the pipeline's work.
        if (r->sync_on && (a.kind == ACT_BACKWARD || a.kind == ACT_BACKWARD_WEIGHT))
            gradsync_set_final(&r->sync[a.chunk], ++weights[a.chunk] == r->M);
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
        // On a GPU the calls above only queue work: wait for it, so events hold device time.
        if (action_is_compute(a.kind) && !r->be->on_host) r->be->sync();
        if (r->sync_on) comm_progress();
        double t1 = now_sec();
        if (action_is_compute(a.kind)) busy += t1 - t0;
        record(r, step, a.kind, a.mb, a.chunk, t0 - base, t1 - base);
    }
    comm_wait_sends(cm);
    r->busy_s[step] = busy;
    return now_sec() - base;
}

// ---- monolith and manual split: one process ----

// The whole model on this rank: the monolith, or one ddp replica (its shard of the batch). With
// --grad-accum N, N forward/backward micro-steps add into the gradients before the one update;
// only the last one's backward starts the buckets' all-reduces (no communication before it).
static void monolith_step(Run *r, Stage *s, int step) {
    double base = r->step_start[step], busy = 0;
    for (int k = 0; k < r->N; k++) {
        r->micro = k;
        int slot = stage_slot_acquire(s, 0);
        load_inputs(r, s, slot, sample_index(r, step, 0), 1, 1);
        double t0 = now_sec();
        stage_forward(s, slot);
        r->be->sync();  // device time, not the time to queue the work (a no-op on the CPU)
        double t1 = now_sec();
        if (r->sync_on) gradsync_set_final(&r->sync[0], k == r->N - 1);
        stage_backward(s, slot, NULL, NULL);
        r->be->sync();
        double t2 = now_sec();
        record(r, step, ACT_FORWARD, k, 0, t0 - base, t1 - base);
        record(r, step, ACT_BACKWARD, k, 0, t1 - base, t2 - base);
        busy += t2 - t0;
    }
    r->micro = 0;
    r->busy_s[step] = busy;
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

// One monolith reference on the CPU (so on a GPU it checks the device too) for step 0's whole batch
// (all replicas' rows, all accumulation micro-steps): its gradients (host) and mean loss. With
// reversed, the same rows go in reverse order: the same sums taken in another order, which measures
// how far float rounding alone moves each gradient.
static float *reference_grads(Run *r, int reversed, double *loss) {
    TrainConfig *c = r->c;
    const Backend *rb = &backend_cpu;
    int rows = (int)c->batch * r->N, H = (int)c->hidden;
    Stage ref;
    stage_init(&ref, rb, (int)c->layers, H, (int)c->classes, 0, (int)c->layers, 1, rows, 1, 0, (uint64_t)c->seed);
    int slot = stage_slot_acquire(&ref, 0);
    float *x = xmalloc(sizeof(float) * (size_t)rows * H);
    int32_t *y = xmalloc(sizeof(int32_t) * (size_t)rows);
    for (int k = 0, at = 0; k < r->N; k++)  // step 0's rows, as the micro-batches of every replica saw them
        for (int d = 0; d < r->D; d++)
            for (int mb = 0; mb < r->M; mb++, at += r->rows) {
                uint64_t first = first_sample(r, 0, k, d, mb);
                data_features(&r->data, first, r->rows, x + (size_t)at * H);
                data_labels(&r->data, first, r->rows, y + at);
            }
    for (int i = 0; reversed && i < rows / 2; i++) {
        int j = rows - 1 - i;
        int32_t t = y[i]; y[i] = y[j]; y[j] = t;
        for (int h = 0; h < H; h++) { float v = x[(size_t)i * H + h]; x[(size_t)i * H + h] = x[(size_t)j * H + h]; x[(size_t)j * H + h] = v; }
    }
    rb->to_device(stage_slot_input(&ref, slot), x, sizeof(float) * (size_t)rows * H);
    stage_set_labels(&ref, slot, y);
    stage_forward(&ref, slot);
    stage_backward(&ref, slot, NULL, NULL);
    float *g = xmalloc(sizeof(float) * ref.n_params);
    rb->to_host(g, ref.grads, sizeof(float) * ref.n_params);
    *loss = ref.loss_sum / (double)rows;
    free(x); free(y);
    stage_free(&ref);
    return g;
}

typedef struct {
    double err;     // worst relative error of a gradient tensor (or the loss) against the reference
    double noise;   // worst relative difference between the two references (float rounding alone)
    double excess;  // worst err / allowed; the stage passes when <= 1
} Verdict;

// The reference in both row orders (computed once, compared with every local stage).
typedef struct { float *ga, *gb; double loss_a, loss_b; } Reference;
static Reference reference(Run *r) {
    Reference f;
    f.ga = reference_grads(r, 0, &f.loss_a);
    f.gb = reference_grads(r, 1, &f.loss_b);
    return f;
}
static void reference_free(Reference *f) { free(f->ga); free(f->gb); }

// Compares stage s's gradients (computed for step 0, and averaged over the replicas in ddp/hybrid)
// and loss with the monolith. A tensor passes when its error is within tol, or within a few times
// what reordering the reference's own sums moves it: a gradient that is a near-cancelling sum
// over many rows (the head's at initialisation) is only as exact as float rounding lets it be.
static Verdict verify_stage(Run *r, const Stage *s, double loss, double tol, const Reference *ref) {
    TrainConfig *c = r->c;
    double loss_a = ref->loss_a, loss_b = ref->loss_b;
    const float *ga = ref->ga, *gb = ref->gb;
    float *mine = xmalloc(sizeof(float) * s->n_params);
    r->be->to_host(mine, s->grads, sizeof(float) * s->n_params);
    size_t HH = (size_t)c->hidden * c->hidden, layer = HH + (size_t)c->hidden;
    Verdict v = {0, 0, 0};
    // one tensor: offset in this stage's buffer, offset in the reference, length
    #define CMP(mo, ro, n) do { \
        double e_ = rel_err(mine + (mo), ga + (ro), (n)), n_ = rel_err(gb + (ro), ga + (ro), (n)); \
        v.err = fmax(v.err, e_); v.noise = fmax(v.noise, n_); \
        v.excess = fmax(v.excess, e_ / fmax(tol, VERIFY_NOISE_FACTOR * n_)); \
    } while (0)
    for (int i = 0; i < s->n_layers; i++) {
        size_t mo = (size_t)i * layer, ro = (size_t)(s->lo + i) * layer;
        CMP(mo, ro, HH);
        CMP(mo + HH, ro + HH, (size_t)c->hidden);
    }
    if (s->has_head) {
        size_t mo = (size_t)s->n_layers * layer, ro = (size_t)c->layers * layer, CH = (size_t)c->classes * c->hidden;
        CMP(mo, ro, CH);
        CMP(mo + CH, ro + CH, (size_t)c->classes);
        double e = fabs(loss - loss_a) / fmax(fabs(loss_a), 1e-30), n = fabs(loss_b - loss_a) / fmax(fabs(loss_a), 1e-30);
        v.err = fmax(v.err, e); v.noise = fmax(v.noise, n);
        v.excess = fmax(v.excess, e / fmax(tol, VERIFY_NOISE_FACTOR * n));
    }
    #undef CMP
    free(mine);
    return v;
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
    // a and b trade places after every stage without the head, so either may receive the logits
    size_t width = (size_t)(H > C ? H : C);
    float *a = be->alloc(sizeof(float) * (size_t)chunk * width), *b = be->alloc(sizeof(float) * (size_t)chunk * width);
    float *logits = xmalloc(sizeof(float) * (size_t)chunk * C);
    int hits = 0;
    int pp = pipelined(c->mode);  // hybrid: each replica's pipeline evaluates the same rows
    // pp: batch k goes through the virtual stages in order; on this rank, through its chunks in
    // turn (tags repeat every M batches, within the range validate() checked against MPI_TAG_UB;
    // safe because each link carries them in order)
    int last_here = pp ? is_last(r) : 1;
    for (int done = 0, k = 0; done < n_eval; done += chunk, k++) {
        int rows = n_eval - done < chunk ? n_eval - done : chunk, tk = k % r->M;
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
    if (pp) {  // the last stage knows it; tell the pipeline's other stages
        double v[1] = {last_here ? acc : 0};
        comm_allreduce_sum_double(v, 1, r->comm.pp);
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
    char mode[32], sched[32], opt[16], blas[160], dev[192], tr[16];
    choice_name(MODE_CHOICES, c->mode, mode, sizeof mode);
    choice_name(SCHED_CHOICES, c->schedule, sched, sizeof sched);
    choice_name("adam|sgd", c->optimizer, opt, sizeof opt);
    blas_describe(blas, sizeof blas);
    r->be->describe(dev, sizeof dev);
    choice_name(TRANSPORT_CHOICES, r->place.transport, tr, sizeof tr);
    size_t P = model_param_count((int)c->layers, (int)c->hidden, (int)c->classes);
    printf("micropp train | mode %s", mode);
    if (c->mode == MODE_HYBRID) printf(" | %d stages x %d replicas (--pp %d --dp %d)", r->K, r->D, r->K, r->D);
    if (c->mode == MODE_DDP) printf(" | %d replicas x %d rows", r->D, r->rows);
    if (pipelined(c->mode)) printf(" | schedule %s | stages %d | micro-batches %d (%d rows each)%s", sched, r->K, r->M, r->rows,
                                   c->checkpoint_activations ? " | checkpointing" : "");
    if (r->V > 1) printf(" | %d virtual stages per rank", r->V);
    if (r->N > 1) printf(" | grad-accum %d", r->N);
    if (c->mode == MODE_MANUAL) printf(" | parts %d", r->K);
    printf("\nmodel %lld x Linear(%lld,%lld)+ReLU -> Linear(%lld,%lld) | %zu parameters (%.1f MB fp32)\n",
           (long long)c->layers, (long long)c->hidden, (long long)c->hidden, (long long)c->hidden,
           (long long)c->classes, P, P * 4.0 / 1e6);
    printf("batch %lld | steps %lld | %s lr %g | seed %lld | data %s | ", (long long)c->batch,
           (long long)c->steps, opt, c->lr, (long long)c->seed, c->data);
    if (r->be->on_host) printf("%s | device %s", blas, dev);
    else printf("device %s", dev);
    if (pipelined(c->mode)) printf(" | transport %s", tr);
    printf("\n");
    if (c->mode != MODE_MONOLITH && c->mode != MODE_DDP)
        for (int k = 0; k < r->K; k++) {
            printf("  %s %d: layers", pipelined(c->mode) ? "stage" : "part", k);
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

// The data-parallel line: how the gradients travel (after gradsync_init: it knows the buckets).
static void print_dp_header(Run *r) {
    TrainConfig *c = r->c;
    char sync[32], alg[32];
    choice_name(SYNC_CHOICES, c->ddp_sync, sync, sizeof sync);
    choice_name(ALLREDUCE_CHOICES, c->allreduce, alg, sizeof alg);
    int nb = 0;
    size_t shards = 0, params = 0;
    for (int k = 0; k < r->n_sync; k++) { nb += r->sync[k].nb; shards += r->sync[k].shard_total; params += r->sync[k].s->n_params; }
    printf("data parallel: %d replicas | %s sync, %d %s%s", r->D, sync, nb, c->ddp_sync == SYNC_BUCKETED ? "bucket" : "tensor", nb == 1 ? "" : "s");
    if (c->ddp_sync == SYNC_BUCKETED) printf(" (cap %g MiB)%s", c->bucket_mb, c->mode == MODE_HYBRID ? r->V > 1 ? " on stage 0's chunks" : " on stage 0" : "");
    printf(" | %s %s", c->zero ? "reduce-scatter + all-gather" : "all-reduce", alg);
    if (c->zero) printf(" | ZeRO-1: this rank updates %zu of %zu parameters", shards, params);
    printf("\n");
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
                  "  mpiexec -n 4 micropp train --mode pp --schedule gpipe --partition 5,4,4,3 --checkpoint-activations\n"
                  "  mpiexec -n 4 micropp train --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 8 --verify\n"
                  "  mpiexec -n 4 micropp train --mode pp --schedule zb-h1 --micro-batches 8 --checkpoint-activations\n"
                  "  mpiexec -n 2 micropp train --mode ddp --ddp-sync bucketed --allreduce ring --verify\n"
                  "  mpiexec -n 4 micropp train --mode ddp --zero 1 --grad-accum 4\n"
                  "  mpiexec -n 4 micropp train --mode hybrid --pp 2 --dp 2 --schedule 1f1b --micro-batches 4 --verify\n");
    Run run = {0}, *r = &run;
    r->c = &cfg;
    r->world = comms_world_size();
    r->rank = comms_world_rank();
    validate(&cfg, r->world, r);
    check_outputs(r);
    ckpt_setup(&cfg, MPI_COMM_WORLD);
    comms_place("train", cfg.device, cfg.transport, cfg.tf32, &r->place);
    r->be = r->place.be;
    if (data_parallel(cfg.mode) && cfg.allreduce == ALLREDUCE_SHM && !r->be->on_host)
        user_error("train: --allreduce shm sums host memory, and the gradients live on the GPU: use --allreduce mpi or ring with --device cuda");
    // NCCL matches a pair of ranks' messages in order, without tags; the schedules beyond 1F1B
    // (chunks crossing the same pair both ways, deferred weight passes) are run and tested over MPI
    // only, so they take the MPI transport (host-staged between GPUs).
    if (pipelined(cfg.mode) && (cfg.schedule == SCHED_INTERLEAVED || cfg.schedule == SCHED_ZBH1) && r->place.transport == TRANSPORT_NCCL) {
        if (cfg.transport == TRANSPORT_NCCL) {
            char sn[32];
            user_error("train: --schedule %s runs over --transport mpi only (NCCL matches messages in order, without tags): drop --transport nccl",
                       choice_name(SCHED_CHOICES, cfg.schedule, sn, sizeof sn));
        }
        r->place.transport = TRANSPORT_MPI;
    }
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
    r->gemm_s = xcalloc((size_t)steps, sizeof(double));
    r->comm_s = xcalloc((size_t)steps, sizeof(double));
    r->exposed_s = xcalloc((size_t)steps, sizeof(double));
    r->dout = r->be->alloc(sizeof(float) * (size_t)r->rows * H);
    r->din = r->be->alloc(sizeof(float) * (size_t)r->rows * H);

    Stage *parts = NULL;
    int n_local = 1;
    SimResult sim = {0};
    if (pipelined(c->mode)) {
        comms_grid(&r->comm, r->be, r->K, r->D);
        comms_use_transport(&r->comm, r->place.transport);
        r->stage = r->comm.stage;
        r->replica = r->comm.replica;
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
            s->grad_scale = 1.0f / (float)c->batch;  // the global batch's mean (replicas' gradients are summed)
            s->tally = &r->tally;
            s->progress = comm_poll_sends;
        }
        parts = r->chunk;
        n_local = r->V;
    } else if (c->mode == MODE_DDP) {
        comms_grid(&r->comm, r->be, 1, r->D);
        r->replica = r->comm.replica;
        stage_init(&r->st, r->be, L, H, C, 0, L, 1, r->rows, 1, 0, (uint64_t)c->seed);
        r->st.grad_scale = 1.0f / (float)(c->batch * r->N);  // the whole step's mean: replicas' gradients are summed
        parts = &r->st;
    } else {
        n_local = r->K;
        parts = xcalloc((size_t)r->K, sizeof(Stage));
        for (int k = 0; k < r->K; k++)
            stage_init(&parts[k], r->be, L, H, C, r->lo[k], r->lo[k + 1], k == r->K - 1, r->rows, 1, 0, (uint64_t)c->seed);
        parts[r->K - 1].grad_scale = 1.0f / (float)((int64_t)r->rows * r->N);
        r->stage = r->K - 1;
    }
    Stage *head = &parts[n_local - 1];
    if (data_parallel(c->mode)) {
        // Replicas must start from identical parameters; compare checksums within each dp group and
        // let every rank of the world learn the verdict, so all decide alike. One gradient sync per
        // stage this rank holds (a chunk each, interleaved).
        double differ[1] = {0};
        for (int k = 0; k < n_local; k++) differ[0] += !comm_same_u64(stage_param_checksum(&parts[k]), r->comm.dp);
        comm_allreduce_max_double(differ, 1, MPI_COMM_WORLD);
        if (differ[0])
            user_error("train: the replicas start from different parameters (checksums differ across the dp group): give every rank the same --seed and model options");
        size_t shared_bytes = 0;  // this rank's params and grads
        for (int k = 0; k < n_local; k++) shared_bytes += 2 * parts[k].n_params * sizeof(float);
        if (c->allreduce == ALLREDUCE_AUTO)  // decided alike on every rank
            c->allreduce = r->be->on_host && comm_shared_possible(&r->comm, shared_bytes) ? ALLREDUCE_SHM : ALLREDUCE_MPI;
        else if (c->allreduce == ALLREDUCE_SHM)
            comm_shared_require(&r->comm, shared_bytes, "train");
        // --allreduce shm: the replicas read each other's gradients (and, for ZeRO-1, parameters)
        // in place, so both move into windows shared by each stage's dp group.
        for (int k = 0; k < n_local && c->allreduce == ALLREDUCE_SHM; k++) {
            float *p = comm_shared_alloc(&r->comm, parts[k].n_params);
            stage_share(&parts[k], p, comm_shared_alloc(&r->comm, parts[k].n_params));
        }
        r->n_sync = n_local;
        r->sync = xcalloc((size_t)n_local, sizeof(GradSync));
        for (int k = 0; k < n_local; k++)
            gradsync_init(&r->sync[k], &r->comm, &parts[k], c->ddp_sync, c->allreduce, (int)c->zero, c->bucket_mb * 1024 * 1024);
        r->sync_on = 1;
        if (verbose) print_dp_header(r);
    }

    // Checkpoints: which stages this process holds and writes (replica 0 writes; every replica reads).
    char mode_name[32];
    // (interleaved: a file per chunk, i.e. per virtual stage)
    int stage_of[COMM_MAX_CHUNKS];
    for (int k = 0; k < n_local && pipelined(c->mode); k++) stage_of[k] = vstage(r, k);
    r->ck = (CkptLayout){.c = c, .mode = choice_name(MODE_CHOICES, c->mode, mode_name, sizeof mode_name),
                         .world = r->world, .stages = r->K * r->V, .dp = r->D, .lo = r->lo, .local = parts, .n_local = n_local,
                         .first_stage = pipelined(c->mode) ? r->stage : 0, .stage_of = pipelined(c->mode) ? stage_of : NULL,
                         .writer = r->replica == 0, .comm = MPI_COMM_WORLD};
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

    double verify_err = NAN, verify_excess = NAN;
    double *stage_err = NULL;
    if (c->gemm_timing) r->be->gemm_timing(1);
    for (int step = start; step < steps; step++) {
        fault_step(step + 1);
        for (int k = 0; k < n_local; k++) stage_zero_grads(&parts[k]);
        for (int k = 0; k < r->n_sync; k++) gradsync_begin_step(&r->sync[k]);
        if (pipelined(c->mode)) comm_barrier(MPI_COMM_WORLD);
        double t0 = now_sec();
        r->step_start[step] = t0;
        if (pipelined(c->mode)) r->span_s[step] = pipeline_step(r, step);
        else if (c->mode == MODE_MANUAL) manual_step(r, parts, r->K, step);
        else monolith_step(r, parts, step);
        if (!pipelined(c->mode)) r->span_s[step] = now_sec() - t0;
        for (int k = 0; k < r->n_sync; k++) gradsync_finish(&r->sync[k]);  // gradients averaged over the replicas
        // the loss lives on the last stage(s); every rank learns the global batch's (and so decides alike on NaN)
        double v[3] = {0, 0, 0};
        if (is_last(r)) { v[0] = head->loss_sum; v[1] = head->loss_rows; v[2] = head->correct; }
        if (fault_due(FAULT_NAN, step + 1)) v[0] = NAN;  // testing: this rank's contribution goes bad
        if (distributed(c->mode)) {
            double ta = now_sec();
            comm_allreduce_sum_double(v, 3, MPI_COMM_WORLD);
            record(r, step, EV_ALLREDUCE, -1, 0, ta - t0, now_sec() - t0);
        }
        double loss = v[0] / v[1];
        r->loss[step] = loss;
        if (step == 0 && c->verify) {
            // per (virtual) stage: error, noise of the reference, excess (error / what is allowed), as [3][S]:
            // every chunk of every rank against one monolith reference (and its reordered twin)
            int S = r->K * r->V;
            stage_err = xcalloc(3 * (size_t)S, sizeof(double));
            double *noise = stage_err + S, *excess = stage_err + 2 * S;
            for (int k = 0; k < r->n_sync; k++) gradsync_gather_grads(&r->sync[k]);  // ZeRO-1 holds only its shards
            if (fault_due(FAULT_GRAD, step + 1)) {  // testing: the largest gradient off by 0.1%, as a bug would leave it
                size_t n = parts[0].n_params, at = 0;
                float *g = xmalloc(sizeof(float) * n);
                r->be->to_host(g, parts[0].grads, sizeof(float) * n);
                for (size_t i = 1; i < n; i++) if (fabsf(g[i]) > fabsf(g[at])) at = i;
                g[at] *= 1.001f;
                r->be->to_device(parts[0].grads, g, sizeof(float) * n);
                free(g);
            }
            Reference ref = reference(r);
            for (int k = 0; k < n_local; k++) {
                int at = pipelined(c->mode) ? vstage(r, k) : distributed(c->mode) ? r->stage : k;
                Verdict v = verify_stage(r, &parts[k], loss, c->tf32 ? VERIFY_TOL_TF32 : VERIFY_TOL, &ref);
                stage_err[at] = v.err; noise[at] = v.noise; excess[at] = v.excess;
            }
            reference_free(&ref);
            if (distributed(c->mode)) comm_allreduce_max_double(stage_err, 3 * S, MPI_COMM_WORLD);
            verify_err = verify_excess = 0;
            for (int k = 0; k < S; k++) { verify_err = fmax(verify_err, stage_err[k]); verify_excess = fmax(verify_excess, excess[k]); }
        }
        if (!isfinite(loss))
            user_error("train: the loss became %s at step %d: lower --lr (now %g) and check the data", isnan(loss) ? "NaN" : "Inf", step + 1, c->lr);
        double to = now_sec();
        if (r->sync_on) for (int k = 0; k < r->n_sync; k++) gradsync_optimizer_step(&r->sync[k], c->optimizer, (float)c->lr, step + 1);
        else for (int k = 0; k < n_local; k++) stage_optimizer_step(&parts[k], c->optimizer, (float)c->lr, step + 1);
        r->be->sync();
        record(r, step, EV_OPTIMIZER, -1, 0, to - t0, now_sec() - t0);
        r->step_s[step] = now_sec() - t0;
        if (r->sync_on) {
            // In a pipeline the other stages still compute (the cool-down) after this one is done:
            // the replica's compute ends when its last stage does. Every rank left the step's barrier
            // together, so times since t0 compare across the pipeline's ranks.
            double end = 0;
            for (int k = 0; k < r->n_sync; k++) end = fmax(end, r->sync[k].t_compute_end);
            if (pipelined(c->mode)) {
                double rel[1] = {end - t0};
                comm_allreduce_max_double(rel, 1, r->comm.pp);
                end = t0 + rel[0];
            }
            // a rank's chunks: their collectives' in-flight and exposed times add up
            r->comm_s[step] = r->exposed_s[step] = 0;
            for (int k = 0; k < r->n_sync; k++) {
                double cs, es;
                gradsync_end_step(&r->sync[k], end, &cs, &es);
                r->comm_s[step] += cs;
                r->exposed_s[step] += es;
            }
        }
        if (c->gemm_timing) r->gemm_s[step] = r->be->gemm_seconds();
        if (verbose && c->log_every && ((step + 1) % c->log_every == 0 || step == start || step == steps - 1))
            printf("step %d/%d | loss %.4f | %.2f ms | %.0fk samples/s\n", step + 1, steps, loss,
                   r->step_s[step] * 1e3, (double)c->batch * r->N / r->step_s[step] / 1e3);
        if (c->save[0] && ((c->save_every && (step + 1) % c->save_every == 0) || step + 1 == steps)) {
            double t_save = now_sec();
            double bytes = ckpt_save(&r->ck, step + 1, r->sample0 + (uint64_t)(step + 1 - start) * (uint64_t)c->batch * (uint64_t)r->N);
            saved_step = step + 1;
            if (verbose) printf("saved step %d to %s (%.2f MB, %.0f ms)\n", step + 1, c->save, bytes / 1e6, (now_sec() - t_save) * 1e3);
        }
    }
    for (int k = 0; k < r->n_sync; k++)
        if (!comm_same_u64(stage_param_checksum(&parts[k]), r->comm.dp))
            fatal("the replicas of stage %d (chunk %d) ended with different parameters: the gradient all-reduce is broken", r->stage, k);

    if (c->gemm_timing) r->be->gemm_timing(0);
    double acc = evaluate(r, parts, n_local);

    // Summary figures. Step time: the median over steps (the first is a warm-up when there are more).
    int skip = n_run > 2 ? 1 : 0;
    if (distributed(c->mode)) comm_allreduce_max_double(r->step_s + start, n_run, MPI_COMM_WORLD);
    double step_med = median(r->step_s + start + skip, n_run - skip);
    // A resumed run has no steps before start: the timeline counts time from its first step.
    for (int t = 0; t < start; t++) r->step_start[t] = r->step_start[start];
    size_t P = model_param_count(L, H, C);
    double rows_per_step = (double)c->batch * r->N;
    double flops = 6.0 * (double)P * rows_per_step;
    if (c->checkpoint_activations) flops += 2.0 * (double)(P - ((size_t)C * H + C)) * rows_per_step;
    double samples_s = rows_per_step / step_med, gflops = flops / step_med / 1e9;

    // Data parallelism. comm_ms: the time per step during which at least one of this rank's
    // gradient collectives was in flight (from its start to the moment its completion was seen;
    // completion is noticed at the next layer boundary while the backward runs), averaged over
    // the ranks, median over the steps. comm_hidden_fraction: the share of that in-flight time
    // that passed while the step's forward/backward work was still running (ddp: this rank's;
    // hybrid: any stage of this rank's pipeline, i.e. the cool-down counts), summed over ranks and
    // steps; the rest is exposed (the optimizer step waited for it). Naive sync starts after the
    // backward, so in ddp it is 0 by construction; ZeRO-1's parameter all-gather is always exposed.
    double comm_ms = NAN, hidden = NAN, opt_bytes = 0, calls = 0, buckets = 0;
    if (r->sync_on) {
        comm_allreduce_sum_double(r->comm_s + start, n_run, MPI_COMM_WORLD);
        comm_allreduce_sum_double(r->exposed_s + start, n_run, MPI_COMM_WORLD);
        double tot = 0, exp = 0;
        for (int t = start; t < steps; t++) {
            r->comm_s[t] /= r->world;
            r->exposed_s[t] /= r->world;
            if (t >= start + skip) { tot += r->comm_s[t]; exp += r->exposed_s[t]; }
        }
        comm_ms = median(r->comm_s + start + skip, n_run - skip) * 1e3;
        hidden = tot > 0 ? 1.0 - exp / tot : 0;
        // optimizer state per rank (Adam's two moments), the largest over the ranks
        size_t held = 0;
        double nb[2] = {0, 0};  // buckets and collectives of a replica: the sum over its stages (and their chunks)
        for (int k = 0; k < r->n_sync; k++) {
            held += c->zero ? r->sync[k].shard_total : r->sync[k].s->n_params;
            nb[0] += r->sync[k].nb;
            nb[1] += r->sync[k].calls;
        }
        double v[1] = {c->optimizer == OPTIM_ADAM ? 2.0 * sizeof(float) * (double)held : 0};
        comm_allreduce_max_double(v, 1, MPI_COMM_WORLD);
        opt_bytes = v[0];
        comm_allreduce_sum_double(nb, 2, r->comm.pp);
        buckets = nb[0];
        calls = nb[1];
    }

    // --gemm-timing: this rank's share of step time inside gemm (averaged over ranks), and the
    // GFLOP/s of the model's gemms while they run: forward 2BHH per layer, backward 4BHH (the
    // first layer computes no input gradient), the head likewise, recompute 2BHH per layer.
    double gemm_ms = NAN, gemm_share = NAN, gemm_gflops = NAN;
    if (c->gemm_timing) {
        double g = 0, t = 0;
        for (int k = start + skip; k < steps; k++) { g += r->gemm_s[k]; t += r->step_s[k]; }
        double v[2] = {g / (n_run - skip), g / t};
        if (distributed(c->mode)) comm_allreduce_sum_double(v, 2, MPI_COMM_WORLD);
        double B = (double)c->batch * r->N, HH = (double)H * H, HC = (double)H * C;
        double gemm_flops = 2 * B * (L * HH + HC) + 2 * B * (L * HH + HC) + 2 * B * ((L - 1) * HH + HC);
        if (c->checkpoint_activations) gemm_flops += 2 * B * L * HH;
        int ranks = distributed(c->mode) ? r->world : 1;
        gemm_ms = v[0] / ranks * 1e3;
        gemm_share = v[1] / ranks;
        gemm_gflops = gemm_flops / v[0] / 1e9;  // v[0]: gemm seconds per step summed over ranks
    }

    // Pipeline: measured bubble per rank = 1 - busy / span, span the slowest rank's pipeline time.
    // The theory: the simulated bubble with uniform costs, which is the textbook formula where one
    // exists (schedule_bubble_formula).
    double *bubble = NULL, *peak_bytes = NULL, *peak_slots = NULL, *peak_deferred = NULL;
    double theory = pipelined(c->mode) ? sim.bubble_mean : NAN;
    if (pipelined(c->mode)) {  // within each pipeline (hybrid: rank 0 reports replica 0's)
        comm_allreduce_max_double(r->span_s + start, n_run, r->comm.pp);
        double *b = xmalloc(sizeof(double) * (size_t)n_run);
        for (int t = 0; t < n_run; t++) b[t] = 1.0 - r->busy_s[start + t] / r->span_s[start + t];
        bubble = xcalloc((size_t)r->K, sizeof(double));
        peak_bytes = xcalloc((size_t)r->K, sizeof(double));
        peak_slots = xcalloc((size_t)r->K, sizeof(double));
        peak_deferred = xcalloc((size_t)r->K, sizeof(double));
        bubble[r->stage] = median(b + skip, n_run - skip);
        peak_bytes[r->stage] = (double)r->tally.peak_bytes;
        peak_slots[r->stage] = r->tally.peak_stashed;
        peak_deferred[r->stage] = r->tally.peak_deferred;
        comm_allreduce_sum_double(bubble, r->K, r->comm.pp);
        comm_allreduce_sum_double(peak_bytes, r->K, r->comm.pp);
        comm_allreduce_sum_double(peak_slots, r->K, r->comm.pp);
        comm_allreduce_sum_double(peak_deferred, r->K, r->comm.pp);
        free(b);
    }
    // ... and what the simulator predicts for this schedule with each rank's median action times:
    // F, and B (or I and W where the backward is split), each the time of one pass of one chunk.
    // The simulator takes whole-stage costs (a chunk pass is 1/v of them), so they are scaled by v.
    // (hybrid: each replica's own, as the bubble above)
    int split = schedule_splits_backward(c->schedule);
    Costs med = {0};
    SimResult msim = {0};
    Gantt charts[2];
    memset(charts, 0, sizeof charts);
    int shown = -1;
    if (pipelined(c->mode)) {
        double *m[4];
        for (int k = 0; k < 4; k++) m[k] = xcalloc((size_t)r->K, sizeof(double));
        m[0][r->stage] = kind_median(r, ACT_FORWARD, start + skip);
        if (split) {
            m[2][r->stage] = kind_median(r, ACT_BACKWARD_INPUT, start + skip);
            m[3][r->stage] = kind_median(r, ACT_BACKWARD_WEIGHT, start + skip);
            m[1][r->stage] = m[2][r->stage] + m[3][r->stage];
        } else {
            m[1][r->stage] = kind_median(r, ACT_BACKWARD, start + skip);
            m[2][r->stage] = m[3][r->stage] = m[1][r->stage] / 2;  // only their sum matters for a full backward
        }
        for (int k = 0; k < 4; k++) comm_allreduce_sum_double(m[k], r->K, r->comm.pp);
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
            shown = shown_step(r, start + skip, step_med);
            timeline_gather(&tl, r->ev, r->n_ev, r->step_start, steps, MPI_COMM_WORLD);
            if (r->rank == 0) observe(r, &tl, shown, &msim, &med, theory, charts);
            timeline_free(&tl);
        }
    }

    double verify_tol = c->tf32 ? VERIFY_TOL_TF32 : VERIFY_TOL;
    int verify_failed = c->verify && !(verify_excess <= 1.0);
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
        char dev[192];
        r->be->describe(dev, sizeof dev);
        cJSON_AddStringToObject(o, "device", r->be->name);
        cJSON_AddStringToObject(o, "device_info", dev);
        cJSON_AddBoolToObject(o, "tf32", c->tf32);
        if (c->gemm_timing) {
            cJSON_AddNumberToObject(o, "gemm_ms_per_step", gemm_ms);
            cJSON_AddNumberToObject(o, "gemm_share", gemm_share);
            cJSON_AddNumberToObject(o, "gemm_gflops", gemm_gflops);
        }
        cJSON_AddItemToObject(o, "losses", cJSON_CreateDoubleArray(r->loss + start, n_run));  // steps start+1..steps
        if (c->resume[0]) cJSON_AddStringToObject(o, "resumed_from", c->resume);
        if (saved_step >= 0) { cJSON_AddStringToObject(o, "saved_to", c->save); cJSON_AddNumberToObject(o, "saved_step", (double)saved_step); }
        if (c->mode == MODE_MANUAL) cJSON_AddNumberToObject(o, "parts", r->K);
        if (r->N > 1 || option_was_set("grad-accum")) cJSON_AddNumberToObject(o, "grad_accum", r->N);
        if (data_parallel(c->mode)) {
            if (c->mode == MODE_HYBRID) cJSON_AddNumberToObject(o, "pp", r->K);
            cJSON_AddNumberToObject(o, "dp", r->D);
            cJSON_AddStringToObject(o, "ddp_sync", choice_name(SYNC_CHOICES, c->ddp_sync, s, sizeof s));
            cJSON_AddStringToObject(o, "allreduce", choice_name(ALLREDUCE_CHOICES, c->allreduce, s, sizeof s));
            cJSON_AddNumberToObject(o, "zero", (double)c->zero);
            if (c->ddp_sync == SYNC_BUCKETED) cJSON_AddNumberToObject(o, "bucket_mb", c->bucket_mb);
            cJSON_AddNumberToObject(o, "bucket_count", buckets);
            cJSON_AddNumberToObject(o, "collectives_per_step", calls);
            cJSON_AddNumberToObject(o, "comm_ms", comm_ms);
            cJSON_AddNumberToObject(o, "comm_hidden_fraction", hidden);
            cJSON_AddNumberToObject(o, "optimizer_bytes_per_rank", opt_bytes);
        }
        if (pipelined(c->mode)) {
            cJSON_AddStringToObject(o, "schedule", choice_name(SCHED_CHOICES, c->schedule, s, sizeof s));
            cJSON_AddNumberToObject(o, "stages", r->K);
            cJSON_AddNumberToObject(o, "micro_batches", r->M);
            cJSON_AddNumberToObject(o, "virtual_stages", r->V);
            cJSON_AddStringToObject(o, "transport", choice_name(TRANSPORT_CHOICES, r->place.transport, s, sizeof s));
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
            cJSON_AddItemToObject(o, "verify_stage_noise", cJSON_CreateDoubleArray(stage_err + r->K * r->V, r->K * r->V));
            cJSON_AddNumberToObject(o, "verify_tolerance", verify_tol);
            cJSON_AddBoolToObject(o, "verify_ok", !verify_failed);
        }
        json_print(o);
    } else if (verbose) {
        printf("\nfinal loss %.4f (first %.4f) | accuracy %.1f%% on %lld %s rows\n", r->loss[steps - 1], r->loss[start],
               100 * acc, (long long)(r->data.features && c->eval_samples > r->data.n ? r->data.n : c->eval_samples),
               r->data.features ? "training" : "held-out");
        printf("step %.3f ms (median) | %.0f samples/s | %.1f GFLOP/s\n", step_med * 1e3, samples_s, gflops);
        if (c->gemm_timing)
            printf("gemm %.3f ms per step%s = %.1f%% of the step | %.1f GFLOP/s inside gemm\n", gemm_ms,
                   distributed(c->mode) ? " per rank" : "", 100 * gemm_share, gemm_gflops);
        if (data_parallel(c->mode))
            printf("gradient sync: %.0f collectives/step | in flight %.2f ms/step | %.0f%% hidden behind compute | optimizer state %.2f MB per rank\n",
                   calls, comm_ms, 100 * hidden, opt_bytes / 1e6);
        if (pipelined(c->mode)) {
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
            int S = r->K * r->V;
            const char *per = !distributed(c->mode) ? "part" : r->V > 1 ? "chunk (pipeline order)" : "stage";
            printf("\nverify (step 1 vs monolith reference on the cpu): worst relative error per %s:", per);
            for (int k = 0; k < S; k++) printf(" %.2e", stage_err[k]);
            printf(" -> %s\n  (tolerance %.0e, or %dx the float noise of the reference itself, the same batch summed in\n"
                   "  another order, per %s:", verify_failed ? "FAILED" : "ok", verify_tol, VERIFY_NOISE_FACTOR, per);
            for (int k = 0; k < S; k++) printf(" %.2e", stage_err[S + k]);
            printf(")\n");
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
    for (int k = 0; k < r->n_sync; k++) gradsync_free(&r->sync[k]);
    free(r->sync);
    if (charts[0].slices) gantt_free_slices(&charts[0]);
    sim_result_free(&msim);
    free(med.f); free(med.b); free(med.i); free(med.w);
    for (int k = 0; k < n_local; k++) stage_free(&parts[k]);
    if (parts != &r->st) free(parts);
    sim_result_free(&sim);
    action_list_free(&r->list);
    r->be->free(r->dout); r->be->free(r->din);
    free(r->xh); free(r->yh); free(r->step_s); free(r->busy_s); free(r->span_s); free(r->loss); free(r->gemm_s); free(r->ev); free(r->step_start);
    free(r->comm_s); free(r->exposed_s);
    free(bubble); free(peak_bytes); free(peak_slots); free(peak_deferred); free(stage_err);
    data_close(&r->data);
    if (distributed(c->mode)) comms_free(&r->comm);
    comms_finalize();
    if (verify_failed && r->rank == 0) fprintf(stderr, "micropp: --verify failed: worst relative error %.3g exceeds %.0e and %dx the reference's own float noise\n", verify_err, verify_tol, VERIFY_NOISE_FACTOR);
    return verify_failed ? 1 : 0;
}
