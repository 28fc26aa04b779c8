// train/plan.c: every rule of a `micropp train` run, checked once, as pure functions of the options and
// the world size (see plan.h): which flags apply to the mode, the grid of stages x replicas, the
// schedule's chunks, the batch cut into micro-batches, the partition of layers. tests/unit_plan.c
// checks each rule and its message without MPI.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "train/ddp.h"  // SYNC_* only: no MPI call is made here
#include "model.h"  // model_param_count
#include "train/plan.h"
#include "schedule.h"
#include "tags.h"

// Each rule returns 0, or -1 after writing its one-line message into the plan's error buffer.
typedef struct { char *buf; size_t n; } Err;

__attribute__((format(printf, 2, 3))) static int refuse(Err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf, e->n, fmt, ap);
    va_end(ap);
    return -1;
}

static int is_pipelined(int mode) { return mode == MODE_PP || mode == MODE_HYBRID; }
static int is_data_parallel(int mode) { return mode == MODE_DDP || mode == MODE_HYBRID; }

// The first of the flags typed on the command line, or NULL.
static const char *typed(const char *const *flags, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (option_on_command_line(flags[i])) return flags[i];
    return NULL;
}
#define TYPED(list) typed(list, sizeof list / sizeof *list)

// A one-process mode under mpiexec.
static int rule_world(const TrainConfig *c, int world, const Plan *p, Err *e) {
    if (!p->distributed && world != 1) {
        char name[32];
        return refuse(e, "train: --mode %s runs in one process but %d were started: drop 'mpiexec -n %d' or use --mode pp, ddp or hybrid",
                      choice_name(MODE_CHOICES, c->mode, name, sizeof name), world, world);
    }
    return 0;
}

// A flag typed for a mode that does not use it is an error (a config file's key is left unused).
static int rule_flags_apply(const TrainConfig *c, Err *e) {
    char name[32];
    const char *mode = choice_name(MODE_CHOICES, c->mode, name, sizeof name), *f;
    static const char *const observe_only[] = {"trace", "timeline", "timeline-step", "gantt"};
    static const char *const pp_only[] = {"schedule", "schedule-file", "micro-batches", "partition", "checkpoint-activations", "virtual-stages", "transport"};
    static const char *const dp_only[] = {"ddp-sync", "allreduce", "bucket-mb", "zero"};
    if (c->mode != MODE_PP && (f = TYPED(observe_only)))  // the observers of one pipeline
        return refuse(e, "train: --%s applies to --mode pp, not --mode %s: drop it or use --mode pp", f, mode);
    if (!is_pipelined(c->mode) && (f = TYPED(pp_only)))
        return refuse(e, "train: --%s applies to --mode pp or hybrid, not --mode %s: drop it or add --mode pp", f, mode);
    if (strcmp(c->data, "synthetic") && option_on_command_line("samples"))
        return refuse(e, "train: --samples sizes the synthetic data set, and --data '%s' is a file whose rows are the training set: drop --samples", c->data);
    if (c->mode != MODE_MANUAL && option_on_command_line("parts"))
        return refuse(e, "train: --parts applies to --mode manual, not --mode %s: drop it or add --mode manual", mode);
    if (!is_data_parallel(c->mode) && (f = TYPED(dp_only)))
        return refuse(e, "train: --%s applies to --mode ddp or hybrid, not --mode %s: drop it or add --mode ddp", f, mode);
    if (c->mode != MODE_HYBRID && option_on_command_line("pp"))
        return refuse(e, "train: --pp applies to --mode hybrid, not --mode %s: drop it (--mode pp makes one stage per rank) or add --mode hybrid", mode);
    if (c->mode != MODE_HYBRID && option_on_command_line("placement"))
        return refuse(e, "train: --placement lays out the stages x replicas of --mode hybrid, not --mode %s: drop it or add --mode hybrid", mode);
    if (!is_data_parallel(c->mode) && option_on_command_line("dp"))
        return refuse(e, "train: --dp applies to --mode hybrid or ddp, not --mode %s: drop it or add --mode hybrid", mode);
    if (option_on_command_line("grad-accum") && c->mode != MODE_MONOLITH && c->mode != MODE_DDP)
        return refuse(e, "train: --grad-accum applies to --mode monolith or ddp, not --mode %s: a pipeline already accumulates over --micro-batches", mode);
    return 0;
}

// Data-parallel options that contradict each other.
static int rule_data_parallel(const TrainConfig *c, Err *e) {
    if (is_data_parallel(c->mode) && c->bucket_mb <= 0)
        return refuse(e, "train: --bucket-mb %g must be positive: give a bucket capacity in MiB, e.g. 25", c->bucket_mb);
    if (c->zero && (c->save[0] || c->resume[0]))
        return refuse(e, "train: --%s with --zero 1 is not supported (each rank holds only its shard of the Adam moments): drop --zero for runs that save or resume",
                      c->save[0] ? "save" : "resume");
    if (c->ddp_sync == SYNC_NAIVE && option_on_command_line("bucket-mb"))
        return refuse(e, "train: --bucket-mb applies to --ddp-sync bucketed (naive all-reduces one tensor at a time): drop one of them");
    return 0;
}

// Hybrid: P stages x D replicas from --pp and/or --dp and the world.
static int rule_hybrid_grid(const TrainConfig *c, int world, Plan *p, Err *e) {
    int has_p = option_was_set("pp"), has_d = option_was_set("dp");
    long long P = c->pp, D = c->dp;
    if (!has_p && !has_d)
        return refuse(e, "train: --mode hybrid needs --pp P (stages) and --dp D (replicas) with P x D = %d, the number of ranks", world);
    if (has_p && has_d && P * D != world)
        return refuse(e, "train: --pp %lld x --dp %lld = %lld ranks, but %d were started: run 'mpiexec -n %lld' or choose P x D = %d",
                      P, D, P * D, world, P * D, world);
    if (!has_d && world % P) return refuse(e, "train: --pp %lld does not divide the %d ranks: give --pp and --dp with P x D = %d", P, world, world);
    if (!has_p && world % D) return refuse(e, "train: --dp %lld does not divide the %d ranks: give --pp and --dp with P x D = %d", D, world, world);
    p->K = has_p ? (int)P : world / (int)D;
    p->D = has_d ? (int)D : world / (int)P;
    return 0;
}

static int rule_depth(const TrainConfig *c, const Plan *p, Err *e);

// The grid: stages K and replicas D for the mode and the world; micro-batches and micro-steps.
static int rule_grid(const TrainConfig *c, int world, Plan *p, Err *e) {
    p->K = c->mode == MODE_PP ? world : c->mode == MODE_MANUAL ? (int)c->parts : 1;
    p->D = c->mode == MODE_DDP ? world : 1;
    if (c->mode == MODE_DDP && option_on_command_line("dp") && c->dp != world)
        return refuse(e, "train: --dp %lld but %d ranks were started: --mode ddp runs one replica per rank, so run 'mpiexec -n %lld' or drop --dp",
                      (long long)c->dp, world, (long long)c->dp);
    if (c->mode == MODE_HYBRID && rule_hybrid_grid(c, world, p, e)) return -1;
    p->M = p->pipelined ? (int)c->micro_batches : 1;
    p->N = c->mode == MODE_MONOLITH || c->mode == MODE_DDP ? (int)c->grad_accum : 1;  // (a config file's key is left unused)
    if (c->mode == MODE_PP && world < 2)
        return refuse(e, "train: --mode pp needs at least 2 ranks (one per stage), got 1: run it as 'mpiexec -n 2 ./micropp train --mode pp'");
    return rule_depth(c, p, e);
}

// Every stage needs a layer.
static int rule_depth(const TrainConfig *c, const Plan *p, Err *e) {
    if (p->K > MAX_STAGES) return refuse(e, "train: %d stages is more than the %d supported", p->K, MAX_STAGES);
    if (p->K > c->layers) {
        const char *what = c->mode == MODE_PP ? "stages (ranks)" : c->mode == MODE_HYBRID ? "stages (--pp)" : "parts";
        const char *fewer = c->mode == MODE_PP ? "ranks" : c->mode == MODE_HYBRID ? "--pp" : "parts";
        return refuse(e, "train: %d %s but only %lld layers: every stage needs a layer, so use --layers >= %d or fewer %s",
                      p->K, what, (long long)c->layers, p->K, fewer);
    }
    return 0;
}

// The schedule: chunks per rank and their chunk order (the schedule's), the (M, K) it can run
// (schedule_check holds the rule), and the largest message tag of the run, which MPI must accept.
// A schedule file (read and proven by train.c before the plan, registered as SCHED_FILE) fixes the
// ranks of the pipeline, the micro-batches and the chunks with their chunk order.
static int rule_schedule_file(const TrainConfig *c, Plan *p, Err *e) {
    int K = 0, M = 0;
    schedule_file_shape(&K, &M);
    if (option_on_command_line("schedule"))
        return refuse(e, "train: --schedule and --schedule-file both name the schedule: give one of them");
    if (K != p->K)
        return refuse(e, "train: --schedule-file '%s' has %d rows (one per rank) but the pipeline has %d stages: run it on %d ranks or write %d rows",
                      c->schedule_file, K, p->K, K, p->K);
    if (option_was_set("micro-batches") && c->micro_batches != M)
        return refuse(e, "train: --micro-batches %lld but --schedule-file '%s' runs micro-batches 0..%d: drop --micro-batches or give %d",
                      (long long)c->micro_batches, c->schedule_file, M - 1, M);
    p->M = M;
    return 0;
}

static int rule_chunks(const TrainConfig *c, long long tag_ub, Plan *p, Err *e);

static int rule_schedule(const TrainConfig *c, long long tag_ub, Plan *p, Err *e) {
    char sched[32];
    choice_name(SCHED_NAMES, c->schedule, sched, sizeof sched);
    if (p->pipelined && c->schedule == SCHED_FILE && rule_schedule_file(c, p, e)) return -1;
    int interleaved = p->pipelined && c->schedule == SCHED_INTERLEAVED;
    if (p->pipelined && !interleaved && option_on_command_line("virtual-stages"))
        return refuse(e, "train: --virtual-stages applies to --schedule interleaved, not %s: drop it or add --schedule interleaved", sched);
    return rule_chunks(c, tag_ub, p, e);
}

// The schedule's chunks per rank and their chunk order, and the (M, K) it can run.
static int rule_chunks(const TrainConfig *c, long long tag_ub, Plan *p, Err *e) {
    char sched[32];
    choice_name(SCHED_NAMES, c->schedule, sched, sizeof sched);
    int interleaved = p->pipelined && c->schedule == SCHED_INTERLEAVED;
    p->V = p->pipelined ? schedule_chunks(c->schedule, (int)c->virtual_stages) : 1;
    p->chunk_order = p->pipelined ? schedule_chunk_order(c->schedule) : CHUNKS_LOOP;
    if (interleaved && p->V < 2)
        return refuse(e, "train: --schedule interleaved needs --virtual-stages >= 2 (got %d; with 1 chunk per rank it is 1f1b: use --schedule 1f1b)", p->V);
    if (p->pipelined && c->schedule == SCHED_DUALPIPEV && p->M < 2 * p->K)
        return refuse(e, "train: --schedule dualpipev needs --micro-batches >= 2 x %d ranks = %d (DualPipeV's own limit), got %d: use --micro-batches %d or --schedule zb-v",
                      p->K, 2 * p->K, p->M, 2 * p->K);
    p->S = p->K * p->V;
    if (p->S > c->layers && p->S > MAX_LAYERS)
        return refuse(e, "train: %d ranks x %d chunks = %d chunks, more than the %d layers a model can have (every chunk needs a layer): use fewer %s",
                      p->K, p->V, p->S, MAX_LAYERS, interleaved ? "--virtual-stages or ranks" : "ranks");
    if (p->S > c->layers) {
        if (c->schedule == SCHED_FILE)
            return refuse(e, "train: --schedule-file '%s' holds %d chunks per rank: %d ranks x %d = %d chunks but only %lld layers: use --layers >= %d or a file with fewer stages",
                          c->schedule_file, p->V, p->K, p->V, p->S, (long long)c->layers, p->S);
        if (!interleaved)
            return refuse(e, "train: --schedule %s holds %d chunks per rank: %d ranks x %d = %d chunks but only %lld layers: use --layers >= %d or fewer ranks",
                          sched, p->V, p->K, p->V, p->S, (long long)c->layers, p->S);
        return refuse(e, "train: %d ranks x %d virtual stages = %d chunks but only %lld layers: every chunk needs a layer, so use --layers >= %d or fewer --virtual-stages",
                      p->K, p->V, p->S, (long long)c->layers, p->S);
    }
    long long passes = (long long)p->K * p->V * p->M;
    if (p->pipelined && passes > SCHEDULE_MAX_SIM)
        return refuse(e, "train: %d stages x %d chunk%s x %d micro-batches = %lld passes to simulate, more than the %d the simulator takes "
                      "(it proves the schedule and sizes the stashes before the run): use --micro-batches %lld or fewer",
                      p->K, p->V, p->V == 1 ? "" : "s", p->M, passes, SCHEDULE_MAX_SIM, SCHEDULE_MAX_SIM / ((long long)p->K * p->V));
    long long top = comm_tag_chunk_max(p->M, p->V);
    if (p->pipelined && top > tag_ub)
        return refuse(e, "train: %d micro-batches x %d virtual stages need message tags up to %lld but this MPI allows %lld: use fewer micro-batches",
                      p->M, p->V, top, tag_ub);
    return 0;
}

// Up to 8 divisors of n, "1, 2, 4, 8" (the micro-batch counts that would cut n rows evenly).
static void divisors(long long n, char *out, size_t len) {
    out[0] = 0;
    for (long long m = 1, k = 0; m <= n && k < 8; m++)
        if (n % m == 0) { size_t l = strlen(out); snprintf(out + l, len - l, "%s%lld", k++ ? ", " : "", m); }
}

// The global batch: every replica takes B/D rows in M micro-batches of `rows`.
static int rule_batch(const TrainConfig *c, Plan *p, Err *e) {
    long long B = c->batch, q = (long long)p->D * p->M;
    if (p->D > 1 && B % q) {
        long long lo = B / q * q;
        char fits[256] = "", what[96], tail[320] = "";
        if (B % p->D == 0 && p->M > 1) divisors(B / p->D, fits, sizeof fits);
        if (p->M > 1) snprintf(what, sizeof what, "%d replicas x %d micro-batches = %lld", p->D, p->M, q);
        else snprintf(what, sizeof what, "the %d replicas", p->D);
        if (fits[0]) snprintf(tail, sizeof tail, ", or --micro-batches %s (divisors of %lld rows per replica)", fits, B / p->D);
        return refuse(e, "train: --batch %lld is not divisible by %s: use --batch %lld or %lld (multiples of %lld)%s",
                      B, what, lo ? lo : q, lo ? lo + q : 2 * q, q, tail);
    }
    if (B % p->M) {
        char fits[256];
        divisors(B, fits, sizeof fits);
        return refuse(e, "train: --batch %lld is not divisible by --micro-batches %d: use micro-batches that divide it (%s, ...) or change --batch",
                      B, p->M, fits);
    }
    p->rows = (int)(B / p->D / p->M);
    return 0;
}

// Layers per virtual stage (per stage, or per chunk in pipeline order when interleaved): the user's
// --partition, or an even split with the remainder spread over the first (virtual) stages.
static int rule_partition(const TrainConfig *c, Plan *p, Err *e) {
    int S = p->S, L = (int)c->layers;
    const char *what = p->V > 1 ? "chunk" : "stage", *list = c->partition;
    p->lo[0] = 0;
    if (!list[0]) {
        for (int i = 0; i < S; i++) p->lo[i + 1] = p->lo[i] + L / S + (i < L % S);
        return 0;
    }
    int parts[MAX_STAGES];
    int n = parse_int_list(list, parts, MAX_STAGES);
    if (n < 0) return refuse(e, "train: --partition '%s' is not a comma-separated list of layer counts like 5,4,4,3", list);
    if (n != S && p->V > 1 && p->chunk_order == CHUNKS_V)
        return refuse(e, "train: --partition '%s' has %d entries but %d ranks x 2 chunks make %d: give one layer count per chunk, in pipeline order (rank r holds chunks r and %d-r, a V)",
                      list, n, p->K, S, S - 1);
    if (n != S && p->V > 1)
        return refuse(e, "train: --partition '%s' has %d entries but %d ranks x %d virtual stages make %d chunks: give one layer count per chunk, in pipeline order (rank r holds chunks r, r+%d, ...)",
                      list, n, p->K, p->V, S, p->K);
    if (n != S) return refuse(e, "train: --partition '%s' has %d entries but there are %d stages: give one layer count per stage", list, n, p->K);
    for (int i = 0; i < n; i++) {
        if (parts[i] < 1) return refuse(e, "train: --partition '%s': %s %d gets %d layers; every %s needs at least 1", list, what, i, parts[i], what);
        p->lo[i + 1] = p->lo[i] + parts[i];
    }
    if (p->lo[n] != L) return refuse(e, "train: --partition '%s' sums to %d but --layers is %d: the counts must add up to the layers", list, p->lo[n], L);
    return 0;
}

// --placement: which neighbours of the grid share a node. auto puts the heavier traffic of a step
// inside a node: the pipeline's (rows x H floats forward and back at every boundary between ranks,
// per micro-batch and replica) or the all-reduce's (a ring moves 2 (D-1)/D of a stage's gradients
// per rank, so 2 (D-1) x the model's gradients in all). A tie keeps the pipeline on a node.
static void rule_placement(const TrainConfig *c, Plan *p) {
    int crossings = 0;
    for (int vs = 0; vs + 1 < p->S; vs++) crossings += plan_stage_of(p, vs) != plan_stage_of(p, vs + 1);
    int inputs = (int)(c->inputs ? c->inputs : c->hidden);
    double params = (double)model_param_count((int)c->layers, inputs, (int)c->hidden, (int)c->classes);
    p->pp_bytes = p->pipelined ? 2.0 * crossings * p->M * p->D * (double)p->rows * (double)c->hidden * sizeof(float) : 0;
    p->dp_bytes = p->data_parallel ? 2.0 * (p->D - 1) * params * sizeof(float) : 0;
    p->placement_auto = c->placement == PLACEMENT_AUTO;
    if (c->mode != MODE_HYBRID) p->placement = PLACEMENT_STAGES;  // pp: one replica; ddp: one stage
    else if (p->placement_auto) p->placement = p->dp_bytes > p->pp_bytes ? PLACEMENT_REPLICAS : PLACEMENT_STAGES;
    else p->placement = c->placement;
}

// A warm-up longer than the run never reaches the peak --lr: refused, unless it comes from a config
// file whose run was cut shorter on the command line (a quick run of a long config ends in its warm-up,
// as asked; the command line wins, as for epochs and steps).
static int warmup_too_long(const TrainConfig *c, long long steps) {
    int cut = !option_on_command_line("warmup-steps") && (option_on_command_line("steps") || option_on_command_line("epochs"));
    return c->warmup_steps > steps && !cut;
}

// How long the run is (--epochs or --steps), and what goes with epochs: a data set to pass over,
// --save-best (its evaluation per epoch, a folder to keep the best in).
static int rule_length(const TrainConfig *c, Plan *p, Err *e) {
    int ep_cli = option_on_command_line("epochs"), st_cli = option_on_command_line("steps");
    if (ep_cli && st_cli && c->epochs)
        return refuse(e, "train: --epochs %lld and --steps %lld both set the run's length: give one of them", (long long)c->epochs, (long long)c->steps);
    if (!ep_cli && !st_cli && c->epochs && option_was_set("steps"))
        return refuse(e, "train: the config sets both epochs (%lld) and steps (%lld): keep one of them, or override one on the command line",
                      (long long)c->epochs, (long long)c->steps);
    p->epochs = c->epochs && !(st_cli && !ep_cli) ? (int)c->epochs : 0;
    if (!p->epochs && warmup_too_long(c, c->steps))  // (with epochs: plan_epochs checks it, once the steps are known)
        return refuse(e, "train: --warmup-steps %lld is longer than the run's %lld steps, so the learning rate would never reach --lr %g: "
                      "use --warmup-steps %lld or fewer, or more --steps", (long long)c->warmup_steps, (long long)c->steps, c->lr, (long long)c->steps);
    if (p->epochs && !strcmp(c->data, "synthetic"))
        return refuse(e, "train: --epochs passes over a data set, and --data is synthetic: give --data fashion-mnist (or DIR, or files), or use --steps");
    if (c->save_best && !c->save[0])
        return refuse(e, "train: --save-best keeps the best checkpoint in --save DIR: add --save DIR");
    if (c->save_best && !p->epochs)
        return refuse(e, "train: --save-best evaluates after every epoch: add --epochs N (or drop --save-best)");
    if (c->save_best && c->save_every)
        return refuse(e, "train: --save-best keeps only the best epoch's checkpoint, --save-every %lld every N steps: use one of them", (long long)c->save_every);
    return 0;
}

int plan_epochs(const TrainConfig *c, long long train_rows, Plan *p, char *err, size_t errlen) {
    Err e = {err, errlen};
    if (!p->epochs) return 0;
    long long per_step = c->batch * p->N;
    p->steps_per_epoch = train_rows / per_step;
    if (p->steps_per_epoch < 1)
        return refuse(&e, "train: an epoch of %lld training rows holds no whole step of %lld rows (--batch %lld%s): use a smaller --batch",
                      train_rows, per_step, (long long)c->batch, p->N > 1 ? " x --grad-accum" : "");
    p->epoch_rows = p->steps_per_epoch * per_step;
    p->dropped = train_rows - p->epoch_rows;
    p->steps = p->steps_per_epoch * p->epochs;
    if (p->steps > (1LL << 30))
        return refuse(&e, "train: %d epochs of %lld steps is more than 2^30 steps: use fewer --epochs", p->epochs, p->steps_per_epoch);
    if (c->timeline_step > p->steps)
        return refuse(&e, "train: --timeline-step %lld is past the last step: use 1..%lld, or 0 for the median-time step",
                      (long long)c->timeline_step, p->steps);
    if (warmup_too_long(c, p->steps))
        return refuse(&e, "train: --warmup-steps %lld is longer than the run's %lld steps (%d epoch%s of %lld), so the learning rate would never reach --lr %g: "
                      "use --warmup-steps %lld or fewer, or more --epochs", (long long)c->warmup_steps, p->steps, p->epochs, p->epochs == 1 ? "" : "s", p->steps_per_epoch, c->lr, p->steps);
    return 0;
}

// The pipeline's observers: --gantt, --timeline-step.
static int rule_observers(const TrainConfig *c, const Plan *p, Err *e) {
    if (c->mode != MODE_PP) return 0;
    if (c->gantt && c->json)
        return refuse(e, "train: --gantt prints a chart and --json one JSON object: use one of them (--timeline FILE.svg works with --json)");
    if (c->timeline_step && !c->timeline[0] && !c->gantt)
        return refuse(e, "train: --timeline-step picks the step drawn by --timeline or --gantt: add one of them, or drop it");
    if (c->timeline_step > c->steps && !p->epochs)  // (with epochs: plan_epochs checks it)
        return refuse(e, "train: --timeline-step %lld is past the last step: use 1..%lld, or 0 for the median-time step",
                      (long long)c->timeline_step, (long long)c->steps);
    return 0;
}

int plan_make(const TrainConfig *c, int world, long long tag_ub, Plan *p, char *err, size_t errlen) {
    Err e = {err, errlen};
    memset(p, 0, sizeof *p);
    err[0] = 0;
    p->mode = c->mode;
    p->world = world;
    p->pipelined = is_pipelined(c->mode);
    p->data_parallel = is_data_parallel(c->mode);
    p->distributed = c->mode == MODE_PP || p->data_parallel;
    if (rule_world(c, world, p, &e) || rule_flags_apply(c, &e) || rule_data_parallel(c, &e) || rule_grid(c, world, p, &e) || rule_schedule(c, tag_ub, p, &e) ||
        rule_batch(c, p, &e) || rule_partition(c, p, &e) || rule_length(c, p, &e) || rule_observers(c, p, &e))
        return -1;
    rule_placement(c, p);
    return 0;
}

int plan_layout(const TrainConfig *c, int K, int D, Plan *p, char *err, size_t errlen) {
    Err e = {err, errlen};
    memset(p, 0, sizeof *p);
    err[0] = 0;
    p->mode = K > 1 ? (D > 1 ? MODE_HYBRID : MODE_PP) : (D > 1 ? MODE_DDP : MODE_MONOLITH);
    p->world = K * D;
    p->K = K;
    p->D = D;
    p->pipelined = is_pipelined(p->mode);
    p->data_parallel = is_data_parallel(p->mode);
    p->distributed = p->world > 1;
    p->M = p->pipelined ? (int)c->micro_batches : 1;
    p->N = 1;
    TrainConfig even = *c;
    even.partition[0] = 0;
    if (rule_depth(c, p, &e) || rule_chunks(c, 2147483647LL, p, &e) || rule_batch(c, p, &e) || rule_partition(&even, p, &e)) return -1;
    return 0;
}
