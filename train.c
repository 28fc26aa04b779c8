// train.c: `micropp train`: parse -> plan -> set up -> step loop -> report. The set-up of a run
// (device, stages, data parallelism, checkpoints) and the step loop live here; the options in
// train/options.c, the rules in train/plan.c, the executor in train/pipeline.c, --verify in train/verify.c, the
// summary in report.c.
#include <math.h>
#include <string.h>
#include "base/fault.h"
#include "train/memory.h"
#include "p2p.h"
#include "train/pipeline.h"
#include "train/report.h"
#include "schedule_file.h"
#include "commands.h"
#include "base/util.h"
#include "train/verify.h"

// ---- parse ----

static void parse_options(int argc, char **argv, TrainConfig *c) {
    train_config_defaults(c);
    options_parse("train", train_options, c, argc, argv, "micropp train [options]",
                  "  micropp train                                  # the monolith, default config\n"
                  "  micropp train --config configs/medium.json --steps 20\n"
                  "  micropp train --mode manual --parts 4 --verify # the manual split, checked\n"
                  "  mpiexec -n 2 micropp train --mode pp --schedule 1f1b --micro-batches 8\n"
                  "  mpiexec -n 4 micropp train --mode pp --schedule gpipe --partition 5,4,4,3 --checkpoint-activations\n"
                  "  mpiexec -n 4 micropp train --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 8 --verify\n"
                  "  mpiexec -n 4 micropp train --mode pp --schedule zb-h1 --micro-batches 8 --checkpoint-activations\n"
                  "  mpiexec -n 2 micropp train --mode ddp --ddp-sync bucketed --allreduce ring --verify\n"
                  "  mpiexec -n 4 micropp train --mode ddp --zero 1 --grad-accum 4\n"
                  "  mpiexec -n 4 micropp train --mode hybrid --pp 2 --dp 2 --schedule 1f1b --micro-batches 4 --verify\n"
                  "  micropp train --config configs/fashion.json     # Fashion-MNIST (apt-get install dataset-fashion-mnist)\n"
                  "  mpiexec -n 2 micropp train --config configs/fashion.json --mode pp --micro-batches 2 --epochs 1\n");
    if (!c->inputs) c->inputs = c->hidden;  // the default: Linear(H, H) first, as before --inputs
    if (c->timeout > 0 && c->timeout < WD_MIN_TIMEOUT)
        user_error("train: --timeout %g is below the %g s minimum: a healthy run waits that long at times (the first step, a checkpoint, "
                   "a loaded machine); use %g or more, or 0 to wait forever", c->timeout, WD_MIN_TIMEOUT, WD_MIN_TIMEOUT);
}

// ---- set up: the same decisions on every rank before any rank waits on another ----

// The trace and timeline files are written by rank 0 at the end; it tries them before the first
// step, and every rank learns the verdict, so a bad path ends every rank at once with exit 2.
static void check_outputs(const Run *r) {
    const char *flag[2] = {"trace", "timeline"}, *path[2] = {r->c->trace, r->c->timeline};
    if (r->c->mode != MODE_PP) return;
    char why[2 * PATH_LEN] = "";  // rank 0 writes the files, so its check is every rank's verdict
    for (int i = 0; i < 2 && !why[0]; i++)  // the same answer on every rank
        if (!strcmp(path[i], "-"))
            snprintf(why, sizeof why, "train: --%s - would mix the file into the summary train prints on standard output: give a file name", flag[i]);
    for (int i = 0; i < 2 && r->rank == 0 && !why[0]; i++) {
        int e = path[i][0] ? out_check(path[i]) : 0;
        if (e) snprintf(why, sizeof why, "train: cannot write --%s '%s': %s (%s)", flag[i], path[i], strerror(e), out_hint(e));
    }
    agree_on_error(why);
}

// Device and transport. NCCL matches a pair of ranks' messages in order, without tags; the
// schedules beyond 1F1B (chunks crossing the same pair both ways, deferred weight passes) are run
// and tested over MPI only, so they take the MPI transport (host-staged between GPUs).
// --precision on the backend that trains, and on the CPU too when --verify's reference (always on the
// CPU) must round as the run does. A build without oneDNN refuses bf16 on the CPU, the same on every rank.
static void setup_precision(Run *r, const TrainConfig *c) {
    char why[256] = "";
    int cpu_too = r->be != &backend_cpu && c->verify;
    if (r->be->set_precision(c->precision, why, sizeof why) != 0 ||
        (cpu_too && backend_cpu.set_precision(c->precision, why, sizeof why) != 0))
        user_error("train: --precision bf16 cannot run here: %s (or use --precision fp32)", why);
}

static void setup_device(Run *r, TrainConfig *c) {
    comm_choose_hardware("train", c->device, c->transport, c->tf32, &r->hardware);
    r->be = r->hardware.be;
    if (r->p.data_parallel && c->allreduce == ALLREDUCE_SHM && !r->be->on_host)
        user_error("train: --allreduce shm sums host memory, and the gradients live on the GPU: use --allreduce mpi or ring with --device cuda");
    int tagged = r->p.V > 1 || schedule_splits_backward(c->schedule) || c->schedule == SCHED_FILE;  // a file may send out of order
    if (r->p.pipelined && tagged && r->hardware.transport == TRANSPORT_NCCL) {
        if (c->transport == TRANSPORT_NCCL) {
            char sn[32];
            user_error("train: --schedule %s runs over --transport mpi only (NCCL matches messages in order, without tags): drop --transport nccl",
                       choice_name(SCHED_NAMES, c->schedule, sn, sizeof sn));
        }
        r->hardware.transport = TRANSPORT_MPI;
    }
    if (c->threads > blas_max_threads())  // OpenBLAS would quietly use fewer
        user_error("train: --threads %lld is more than the %d this OpenBLAS was built for: use --threads %d or fewer",
                   (long long)c->threads, blas_max_threads(), blas_max_threads());
    blas_set_threads((int)c->threads);
    cpu_flush_subnormals();  // the host's part of the work (all of it on the cpu backend)
    setup_precision(r, c);
}

static void setup_buffers(Run *r) {
    const TrainConfig *c = r->c;
    size_t steps = (size_t)c->steps, rows = (size_t)r->p.rows, H = (size_t)c->hidden, D = (size_t)c->inputs;
    Measure *m = &r->m;
    r->xh = xmalloc(sizeof(float) * rows * D);
    if (r->p.epochs) m->epoch = xcalloc((size_t)r->p.epochs, sizeof(EpochStat));
    r->yh = xmalloc(sizeof(int32_t) * (size_t)(r->p.rows > c->eval_samples ? r->p.rows : c->eval_samples));
    double **per_step[] = {&m->step_s, &m->busy_s, &m->span_s, &m->step_start, &m->loss, &m->gemm_s, &m->comm_s, &m->exposed_s};
    for (size_t i = 0; i < sizeof per_step / sizeof *per_step; i++) *per_step[i] = xcalloc(steps, sizeof(double));
    r->dout = r->be->alloc(sizeof(float) * rows * H);
    r->din = r->be->alloc(sizeof(float) * rows * H);
    r->wire = r->be->alloc(sizeof(uint16_t) * rows * H + sizeof(float));
}

static StageSpec spec_of(const Run *r, int vs, int has_head, int slots, int ckpt) {
    const TrainConfig *c = r->c;
    return (StageSpec){.layers = (int)c->layers, .hidden = (int)c->hidden, .classes = (int)c->classes, .inputs = (int)c->inputs, .lo = r->p.lo[vs],
                       .hi = r->p.lo[vs + 1], .head = has_head, .rows = r->p.rows, .slots = slots, .ckpt = ckpt,
                       .bf16 = c->precision == PRECISION_BF16, .seed = (uint64_t)c->seed};
}

// pp/hybrid: this rank's chunks. The schedule is proven before it runs (uniform costs F = I = W = 1,
// i.e. F = 1, B = 2), and each chunk's activation stash is sized from that simulation.
static void setup_pipeline(Run *r) {
    const TrainConfig *c = r->c;
    Plan *p = &r->p;
    comm_grid(&r->comm, r->be, p->K, p->D, p->placement);
    int nb[2 * COMM_MAX_CHUNKS], n_nb = p2p_neighbours(p->K, p->V, p->chunk_order, r->comm.stage, nb);
    for (int i = 0; i < n_nb; i++) nb[i] = comm_stage_rank(&r->comm, nb[i]);  // the NCCL warm-up's peers
    comm_use_transport(&r->comm, r->hardware.transport, nb, n_nb);
    r->stage = r->comm.stage;
    r->replica = r->comm.replica;
    SimSpec spec = {.kind = c->schedule, .K = p->K, .M = p->M, .v = p->V, .f = 1, .b = 1, .w = 1};
    schedule_sim(&spec, &r->sim);
    if (r->sim.deadlock) fatal("schedule would deadlock: %s", r->sim.why);
    schedule_build(c->schedule, p->K, p->M, p->V, r->stage, &r->list);
    r->n_local = p->V;
    r->local = xcalloc((size_t)p->V, sizeof(Stage));
    r->vs_of = xcalloc((size_t)p->V, sizeof(int));
    int slots[COMM_MAX_CHUNKS];
    for (int k = 0; k < p->V; k++) { r->vs_of[k] = plan_vstage(p, r->stage, k); slots[k] = r->sim.peak_slots[r->vs_of[k]]; }
    memory_check(r, r->vs_of, slots, p->V);  // before the first large allocation
    for (int k = 0; k < p->V; k++) {
        int vs = plan_vstage(p, r->stage, k), last = vs == p->S - 1;
        Stage *s = &r->local[k];
        r->vs_of[k] = vs;
        stage_init(s, r->be, spec_of(r, vs, last, r->sim.peak_slots[vs], c->checkpoint_activations));
        if (schedule_splits_backward(c->schedule)) stage_enable_split(s);
        s->grad_scale = 1.0f / (float)c->batch;  // the global batch's mean (replicas' gradients are summed)
        s->tally = &r->tally;
        s->progress = comm_poll_sends;
        if (last) r->head = s;
    }
}

// One process's stages: the monolith or a ddp replica (the whole model), or the manual split's parts.
static void setup_local(Run *r) {
    const TrainConfig *c = r->c;
    int K = r->p.K;
    if (c->mode == MODE_DDP) {
        comm_grid(&r->comm, r->be, 1, r->p.D, PLACEMENT_STAGES);
        r->replica = r->comm.replica;
    }
    r->n_local = K;
    r->local = xcalloc((size_t)K, sizeof(Stage));
    r->vs_of = xcalloc((size_t)K, sizeof(int));
    int *ones = xmalloc(sizeof(int) * (size_t)K);
    for (int k = 0; k < K; k++) { r->vs_of[k] = k; ones[k] = 1; }
    memory_check(r, r->vs_of, ones, K);  // before the first large allocation
    free(ones);
    for (int k = 0; k < K; k++) {
        r->vs_of[k] = k;
        stage_init(&r->local[k], r->be, spec_of(r, k, k == K - 1, 1, 0));
    }
    r->head = &r->local[K - 1];
    // the mean over the whole step: ddp's replicas' gradients are summed, so 1/(global batch x N)
    r->head->grad_scale = 1.0f / (float)(c->mode == MODE_DDP ? c->batch * r->p.N : (int64_t)r->p.rows * r->p.N);
}

// Replicas must start from identical parameters: compare checksums within each dp group and let
// every rank of the world learn the verdict, so all decide alike.
static void check_replicas_agree(Run *r) {
    double differ[1] = {0};
    for (int k = 0; k < r->n_local; k++) differ[0] += !comm_same_u64(stage_param_checksum(&r->local[k]), r->comm.dp);
    comm_allreduce_max_double(differ, 1, MPI_COMM_WORLD);
    if (differ[0])
        user_error("train: the replicas start from different parameters (checksums differ across the dp group): give every rank the same --seed and model options");
}

// ddp/hybrid: one gradient sync per local stage (a chunk each, interleaved). --allreduce shm: the
// replicas read each other's gradients (and, for ZeRO-1, parameters) in place, so both move into
// windows shared by each stage's dp group.
static void setup_data_parallel(Run *r, TrainConfig *c) {
    check_replicas_agree(r);
    size_t shared_bytes = 0;  // this rank's params and grads
    for (int k = 0; k < r->n_local; k++) shared_bytes += 2 * r->local[k].n_params * sizeof(float);
    if (c->allreduce == ALLREDUCE_AUTO)  // decided alike on every rank
        c->allreduce = r->be->on_host && comm_shared_possible(&r->comm, shared_bytes) ? ALLREDUCE_SHM : ALLREDUCE_MPI;
    else if (c->allreduce == ALLREDUCE_SHM)
        comm_shared_require(&r->comm, shared_bytes, "train");
    for (int k = 0; k < r->n_local && c->allreduce == ALLREDUCE_SHM; k++) {
        float *p = comm_shared_alloc(&r->comm, r->local[k].n_params);
        stage_share(&r->local[k], p, comm_shared_alloc(&r->comm, r->local[k].n_params));
    }
    r->n_sync = r->n_local;
    r->sync = xcalloc((size_t)r->n_local, sizeof(GradSync));
    for (int k = 0; k < r->n_local; k++)
        gradsync_init(&r->sync[k], &r->comm, &r->local[k], c->ddp_sync, c->allreduce, (int)c->zero, c->bucket_mb * 1024 * 1024);
}

// Checkpoints: which stages this process holds and writes (replica 0 writes; every replica reads;
// interleaved: a file per chunk, i.e. per virtual stage); then --resume.
static void setup_checkpoints(Run *r, int verbose) {
    const TrainConfig *c = r->c;
    static char mode_name[32];
    r->ck = (CkptLayout){.c = c, .mode = choice_name(MODE_CHOICES, c->mode, mode_name, sizeof mode_name),
                         .world = r->p.world, .stages = r->p.S, .dp = r->p.D, .lo = r->p.lo, .local = r->local, .n_local = r->n_local,
                         .first_stage = r->p.pipelined ? r->stage : 0, .stage_of = r->p.pipelined ? r->vs_of : NULL,
                         .writer = r->replica == 0, .comm = MPI_COMM_WORLD};
    r->saved_step = -1;
    if (!c->resume[0]) return;
    char desc[160];
    r->start = (int)ckpt_resume(&r->ck, &r->sample0, desc, sizeof desc);
    if (verbose) printf("resumed from %s: %s; training steps %d-%lld\n", c->resume, desc, r->start + 1, (long long)c->steps);
    if (c->timeline_step && c->timeline_step <= r->start)
        user_error("train: --timeline-step %lld was done before the checkpoint (step %d): use %d..%lld, or 0 for the median-time step",
                   (long long)c->timeline_step, r->start, r->start + 1, (long long)c->steps);
}

static void run_free(Run *r) {
    for (int k = 0; k < r->n_sync; k++) gradsync_free(&r->sync[k]);
    free(r->sync);
    for (int k = 0; k < r->n_local; k++) stage_free(&r->local[k]);
    free(r->local); free(r->vs_of);
    sim_result_free(&r->sim);
    action_list_free(&r->list);
    r->be->free(r->dout); r->be->free(r->din); r->be->free(r->wire);
    Measure *m = &r->m;
    free(r->xh); free(r->yh); free(m->step_s); free(m->busy_s); free(m->span_s); free(m->loss); free(m->gemm_s); free(m->ev);
    free(m->step_start); free(m->comm_s); free(m->exposed_s); free(m->epoch);
    data_close(&r->data);
    if (r->p.distributed) comm_free(&r->comm);
    free(r->hardware.node_of);
}

// ---- the step loop ----

// The forward and backward of every micro-batch (and its communication), then the gradients
// averaged over the replicas.
static void step_compute(Run *r, int step) {
    for (int k = 0; k < r->n_local; k++) stage_zero_grads(&r->local[k]);
    for (int k = 0; k < r->n_sync; k++) gradsync_begin_step(&r->sync[k]);
    wd_phase("the step's barrier", step + 1);
    if (r->p.pipelined) comm_barrier(MPI_COMM_WORLD);
    double t0 = now_sec();
    r->m.step_start[step] = t0;
    if (r->p.pipelined) r->m.span_s[step] = pipeline_step(r, step);
    else if (r->c->mode == MODE_MANUAL) manual_step(r, step);
    else monolith_step(r, step);
    if (!r->p.pipelined) r->m.span_s[step] = now_sec() - t0;
    wd_phase("the gradient all-reduce", step + 1);
    for (int k = 0; k < r->n_sync; k++) gradsync_finish(&r->sync[k]);
}

// The loss lives on the head's stage; every rank learns the global batch's (and so decides alike on NaN).
// The same all-reduce carries how many ranks' last update left a parameter non-finite (note_nonfinite):
// if any, every rank ends with the lowest such rank's message (exit 1).
static double step_loss(Run *r, int step) {
    double v[4] = {0, 0, 0, r->bad_update[0] ? 1 : 0}, t0 = r->m.step_start[step];
    if (r->head) { v[0] = r->head->loss_sum; v[1] = r->head->loss_rows; v[2] = r->head->correct; }
    if (fault_due(FAULT_NAN, step + 1)) v[0] = NAN;  // testing: this rank's contribution goes bad
    if (r->p.distributed) {
        wd_phase("the loss all-reduce", step + 1);
        double ta = now_sec();
        comm_allreduce_sum_double(v, 4, MPI_COMM_WORLD);
        run_record(r, step, EV_ALLREDUCE, -1, 0, ta - t0, now_sec() - t0);
        if (v[3] > 0) agree_on_failure(r->bad_update);
    }
    return r->m.loss[step] = v[0] / v[1];
}

// A diverged run ends (exit 1) instead of saving and reporting garbage: the loss has stayed above
// --diverge-factor x the run's first loss for DIVERGE_STEPS steps in a row (0 turns the rule off).
// Every rank knows the global loss, so every rank decides alike.
#define DIVERGE_STEPS 3
static void check_divergence(Run *r, int step, double loss) {
    double f = r->c->diverge_factor, first = r->m.loss[r->start];
    if (f <= 0 || !(first > 0)) return;
    r->diverged_steps = loss > f * first ? r->diverged_steps + 1 : 0;
    if (r->diverged_steps >= DIVERGE_STEPS)
        run_failed("train: the loss diverged: %.4g at step %d, above %g x the first step's %.4g for %d steps in a row: lower --lr "
                   "(now %g), or change the rule with --diverge-factor (0: off)", loss, step + 1, f, first, DIVERGE_STEPS, r->c->lr);
}

// MICROPP_FAULT kind 'nangrad' (testing): one gradient of the first local stage becomes NaN, as an
// overflow would leave it; the loss of this step stays finite.
static void inject_nan_gradient(Run *r) {
    Stage *s = &r->local[0];
    float nan = NAN;
    r->be->to_device(s->grads + s->n_params / 2, &nan, sizeof nan);
}

// The updates report the first parameter they left non-finite; remember this rank's first, in words.
// One process ends at once; ranks learn it in the next step's loss all-reduce (step_loss), or at the end.
static void note_nonfinite(Run *r, int step, int k, long at) {
    if (at < 0 || r->bad_update[0]) return;
    char name[96];
    stage_tensor_name(&r->local[k], (size_t)at, name, sizeof name);
    snprintf(r->bad_update, sizeof r->bad_update, "train: step %d's update left %s of %s %d not finite (NaN or Inf): the gradients "
             "overflowed or the data holds non-finite values; lower --lr (now %g) or check the data",
             step + 1, name, r->p.pipelined ? "stage" : "part", r->vs_of[k], r->c->lr);
    if (!r->p.distributed) run_failed("%s", r->bad_update);
}

static void step_update(Run *r, int step) {
    const TrainConfig *c = r->c;
    double t0 = r->m.step_start[step], to = now_sec();
    wd_phase("the optimizer step", step + 1);
    float lr = (float)lr_at(c->lr_schedule, c->lr, c->warmup_steps, step, c->steps), wd = (float)c->weight_decay;
    if (fault_due(FAULT_NANGRAD, step + 1)) inject_nan_gradient(r);
    if (r->n_sync) for (int k = 0; k < r->n_sync; k++) note_nonfinite(r, step, k, gradsync_optimizer_step(&r->sync[k], c->optimizer, lr, wd, step + 1));
    else for (int k = 0; k < r->n_local; k++) note_nonfinite(r, step, k, stage_optimizer_step(&r->local[k], c->optimizer, lr, wd, step + 1));
    r->be->sync();
    run_record(r, step, EV_OPTIMIZER, -1, 0, to - t0, now_sec() - t0);
    r->m.step_s[step] = now_sec() - t0;
}

// ddp/hybrid: the step's collectives, in flight and exposed. In a pipeline the other stages still
// compute (the cool-down) after this one is done: the replica's compute ends when its last stage
// does. Every rank left the step's barrier together, so times since t0 compare across the pipeline.
static void step_comm_times(Run *r, int step) {
    double t0 = r->m.step_start[step], end = 0;
    for (int k = 0; k < r->n_sync; k++) end = fmax(end, r->sync[k].t_compute_end);
    if (r->p.pipelined) {
        double rel[1] = {end - t0};
        comm_allreduce_max_double(rel, 1, r->comm.pp);
        end = t0 + rel[0];
    }
    r->m.comm_s[step] = r->m.exposed_s[step] = 0;  // a rank's chunks: their times add up
    for (int k = 0; k < r->n_sync; k++) {
        double cs, es;
        gradsync_end_step(&r->sync[k], end, &cs, &es);
        r->m.comm_s[step] += cs;
        r->m.exposed_s[step] += es;
    }
}

// The log line, and --save at --save-every and at the end.
static void step_log_and_save(Run *r, int step, double loss, int verbose) {
    const TrainConfig *c = r->c;
    int steps = (int)c->steps, start = r->start;
    if (verbose && c->log_every && ((step + 1) % c->log_every == 0 || step == start || step == steps - 1))
        printf("step %d/%d | loss %.4f | %.2f ms | %.0fk samples/s\n", step + 1, steps, loss,
               r->m.step_s[step] * 1e3, (double)c->batch * r->p.N / r->m.step_s[step] / 1e3);
    if (!c->save[0] || c->save_best || !((c->save_every && (step + 1) % c->save_every == 0) || step + 1 == steps)) return;
    if (r->p.distributed) agree_on_failure(r->bad_update);  // never save a state that went non-finite
    double t_save = now_sec();
    wd_phase("saving the checkpoint", step + 1);
    double bytes = ckpt_save(&r->ck, step + 1, r->sample0 + (uint64_t)(step + 1 - start) * (uint64_t)c->batch * (uint64_t)r->p.N);
    r->saved_step = step + 1;
    if (verbose) printf("saved step %d to %s (%.2f MB, %.0f ms)\n", step + 1, c->save, bytes / 1e6, (now_sec() - t_save) * 1e3);
}

// --save-best: the epoch's test accuracy against the best so far. Every rank takes the same
// decision (the largest value any rank saw; the replicas' and stages' values agree anyway).
static void save_if_best(Run *r, int step, double accuracy, int epoch, int verbose) {
    const TrainConfig *c = r->c;
    double v[1] = {isfinite(accuracy) ? accuracy : -1};
    if (r->p.distributed) comm_allreduce_max_double(v, 1, MPI_COMM_WORLD);
    if (r->best_epoch && v[0] <= r->best_accuracy) return;
    r->best_accuracy = v[0];
    r->best_epoch = epoch;
    double t0 = now_sec();
    double bytes = ckpt_save(&r->ck, step + 1, r->sample0 + (uint64_t)(step + 1 - r->start) * (uint64_t)c->batch * (uint64_t)r->p.N);
    r->saved_step = step + 1;
    if (verbose) printf("saved epoch %d (best test accuracy so far, %.2f%%) to %s (%.2f MB, %.0f ms)\n", epoch, 100 * v[0], c->save, bytes / 1e6, (now_sec() - t0) * 1e3);
}

// --epochs: after an epoch's last step, the evaluation on the held-out rows, the epoch's line, and
// --save-best. The epoch's time is that of its steps, from its first step's start to its last's end.
static void end_epoch(Run *r, int step, int verbose) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    double t_end = now_sec();
    int epoch = (int)((step + 1) / p->steps_per_epoch);  // 1-based
    long long first = (long long)(epoch - 1) * p->steps_per_epoch, from = first > r->start ? first : r->start, n = step + 1 - from;
    double loss = 0;
    for (long long t = from; t <= step; t++) loss += r->m.loss[t];
    EvalResult ev = evaluate(r);
    EpochStat *st = &r->m.epoch[r->m.n_epoch++];
    *st = (EpochStat){.epoch = epoch, .train_loss = loss / (double)n, .test_loss = ev.loss, .test_accuracy = ev.accuracy,
                      .time_s = t_end - r->m.epoch_t0, .samples_s = (double)n * (double)c->batch * p->N / (t_end - r->m.epoch_t0)};
    if (verbose) report_epoch(r, st);
    if (c->save_best) save_if_best(r, step, ev.accuracy, epoch, verbose);
    r->m.epoch_t0 = now_sec();
}

static void train_steps(Run *r, VerifyResult *v, int verbose) {
    const TrainConfig *c = r->c;
    if (c->gemm_timing) r->be->gemm_timing(1);
    r->m.epoch_t0 = now_sec();
    for (int step = r->start; step < (int)c->steps; step++) {
        fault_step(step + 1);
        if (!r->p.pipelined) fault_stall(step + 1, "at its start");
        step_compute(r, step);
        double loss = step_loss(r, step);
        if (step == 0 && c->verify) verify_step(r, loss, v);
        if (!isfinite(loss))
            run_failed("train: the loss became %s at step %d: lower --lr (now %g) and check the data", isnan(loss) ? "NaN" : "Inf", step + 1, c->lr);
        check_divergence(r, step, loss);
        step_update(r, step);
        if (r->n_sync) step_comm_times(r, step);
        if (c->gemm_timing) r->m.gemm_s[step] = r->be->gemm_seconds();
        step_log_and_save(r, step, loss, verbose);
        if (r->p.epochs && (step + 1) % r->p.steps_per_epoch == 0) end_epoch(r, step, verbose);
    }
    if (r->p.distributed) agree_on_failure(r->bad_update);  // the last update has no next step to report it
    for (int k = 0; k < r->n_sync; k++)
        if (!comm_same_u64(stage_param_checksum(&r->local[k]), r->comm.dp))
            fatal("the replicas of stage %d (chunk %d) ended with different parameters: the ranks were started with different "
                  "options (--lr, --optimizer, ...), or the gradient all-reduce is broken", r->stage, k);
    if (c->gemm_timing) r->be->gemm_timing(0);
}

// ---- the command ----

// --schedule-file: every rank reads the file and proves it (schedule_file.c) before the plan, which
// takes its ranks, micro-batches and chunk order; a file some rank cannot read, or reads otherwise,
// ends every rank alike. Outside a pipeline the plan refuses the flag.
static void load_schedule_file(TrainConfig *c) {
    if (!c->schedule_file[0] || (c->mode != MODE_PP && c->mode != MODE_HYBRID)) return;
    char why[900] = "", err[1024] = "", *text = NULL;
    SchedFileShape shape;
    if (!schedule_file_read(c->schedule_file, &text, why, sizeof why)) schedule_file_parse(text, c->schedule_file, &shape, why, sizeof why);
    free(text);
    if (why[0]) snprintf(err, sizeof err, "train: %s", why);
    agree_on_error(err[0] ? err : NULL);
    c->schedule = SCHED_FILE;
}

// The end of the run. Rank 0 wrote the outputs (--trace, --timeline, the summary; the checkpoints
// were committed in the step loop); every other rank waits for its word, bounded by --timeout alone
// (a slow disk is no failure, and MPI_Finalize's short backstop must not turn "rank 0 is still
// writing" into exit 0), and every rank returns the same code: 0 only when all is written.
static int outputs_written(const Run *r, const Summary *s, const VerifyResult *v) {
    const TrainConfig *c = r->c;
    int code = v->failed ? 1 : 0;
    if (r->rank == 0) {
        if (v->failed)
            fprintf(stderr, "micropp: --verify failed: worst relative error %.3g exceeds %.0e and %dx the reference's own float noise\n",
                    v->worst_err, v->tol, VERIFY_NOISE_FACTOR);
        if (s->write_err[0]) fprintf(stderr, "micropp: %s\n", s->write_err);
        if (s->write_err[0] || fflush(stdout) != 0 || ferror(stdout)) code = 1;  // (main prints standard output's line)
    }
    char what[3 * PATH_LEN], files[2 * PATH_LEN + 40] = "";
    if (c->trace[0] && r->p.pipelined) snprintf(files, sizeof files, "--trace '%s', ", c->trace);
    if (c->timeline[0] && r->p.pipelined) snprintf(files + strlen(files), sizeof files - strlen(files), "--timeline '%s', ", c->timeline);
    snprintf(what, sizeof what, "writing its outputs (%sthe summary): a slow disk, or a FIFO nobody reads? raise --timeout, or write them elsewhere", files);
    wd_phase("the end of the run", 0);
    return comm_outputs_written(code, what);
}

int cmd_train(int argc, char **argv) {
    comm_init(&argc, &argv);
    TrainConfig cfg;
    parse_options(argc, argv, &cfg);
    wd_set_timeout(cfg.timeout);
    Run run = {.c = &cfg, .rank = comm_world_rank()}, *r = &run;
    char err[1024];
    load_schedule_file(&cfg);
    if (plan_make(&cfg, comm_world_size(), comm_tag_ub(), &r->p, err, sizeof err)) user_error("%s", err);
    DataSource src = {cfg.data, cfg.labels, cfg.test_data, cfg.test_labels};
    data_open(&r->data, src, (int)cfg.inputs, (int)cfg.classes, (uint64_t)cfg.seed);
    if (plan_epochs(&cfg, r->data.train.n, &r->p, err, sizeof err)) user_error("%s", err);
    if (r->p.epochs) {
        cfg.steps = r->p.steps;
        data_set_epochs(&r->data, (uint64_t)r->p.epoch_rows);
    }
    wd_phase("the set-up", 0);
    fault_init();  // (ckpt_setup reads it too) testing: a rank that stalls before the first agreement
    fault_stall(0, "in the set-up");
    check_outputs(r);
    ckpt_setup(&cfg, MPI_COMM_WORLD);
    setup_device(r, &cfg);
    int verbose = !cfg.json && r->rank == 0;
    if (verbose) report_header(r);
    if (r->p.pipelined) setup_pipeline(r);  // (each checks the run's memory before allocating)
    else setup_local(r);
    setup_buffers(r);
    if (r->p.data_parallel) {
        setup_data_parallel(r, &cfg);
        if (verbose) report_dp_header(r);
    }
    setup_checkpoints(r, verbose);

    VerifyResult verify = {0};
    train_steps(r, &verify, verbose);
    // the last epoch's evaluation is the final one
    EvalResult final = r->m.n_epoch ? (EvalResult){r->m.epoch[r->m.n_epoch - 1].test_accuracy, r->m.epoch[r->m.n_epoch - 1].test_loss, 0} : evaluate(r);
    wd_phase("the summary", 0);

    Summary summary;
    summary_fill(r, final.accuracy, &verify, &summary);  // rank 0 writes --trace and --timeline
    summary_print(r, &summary);
    int code = outputs_written(r, &summary, &verify);
    summary_free(&summary);
    run_free(r);
    comm_finalize_with(code);
    verify_free(&verify);
    return code;
}
