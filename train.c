// train.c: `micropp train`: parse -> the facts of the world -> plan -> set up -> step loop -> report.
// The gathering of the facts (ranks, devices, the schedule file, the data's headers, the resumed
// step), the set-up of a run (device, stages, data parallelism, checkpoints: what the Plan says,
// with the options const) and the step loop live here, over the run's parts (train/run.h: the
// wire, the model, the executor's step state, the progress, the measure); the options in
// train/options.c, every rule and choice in train/plan.c, the executor in train/executor.c,
// --verify in train/verify.c, the summary in train/report.c.
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "base/fault.h"
#include "planner/memory.h"
#include "p2p.h"
#include "train/executor.h"
#include "train/report.h"
#include "schedule_file.h"
#include "commands.h"
#include "base/util.h"
#include "train/verify.h"
#include "planner/auto.h"
#include "planner/price.h"
#include "axes/zero.h"
#include "axes/compress.h"
#include "train/options.h"
#include "train/guard.h"
#include "train/postval.h"

// ---- parse ----

static TrainConfig parse_options(int argc, char **argv, OptionsSeen *seen) {
    TrainConfig cfg, *c = &cfg;
    train_config_defaults(c);
    options_sections(train_options, train_sections);
    options_parse(
        "train", train_options, c, seen, argc, argv, "micropp train [options]",
        "  micropp train                                  # the monolith, default config\n"
        "  micropp train --config configs/medium.json --steps 20\n"
        "  micropp train --mode manual --pp 4 --verify    # the manual split, checked\n"
        "  mpiexec -n 2 micropp train --mode pp --schedule 1f1b --micro-batches 8\n"
        "  mpiexec -n 4 micropp train --mode pp --schedule gpipe --partition 5,4,4,3 --checkpoint-activations\n"
        "  mpiexec -n 4 micropp train --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 8 --verify\n"
        "  mpiexec -n 4 micropp train --mode pp --schedule zb-h1 --micro-batches 8 --checkpoint-activations\n"
        "  mpiexec -n 2 micropp train --mode ddp --ddp-sync bucketed --allreduce ring --verify\n"
        "  mpiexec -n 4 micropp train --mode ddp --zero 1 --grad-accum 4\n"
        "  mpiexec -n 4 micropp train --mode hybrid --pp 2 --dp 2 --schedule 1f1b --micro-batches 4 --verify\n"
        "  micropp train --config configs/fashion.json     # Fashion-MNIST (apt-get install dataset-fashion-mnist)\n"
        "  mpiexec -n 2 micropp train --config configs/fashion.json --mode pp --micro-batches 2 --epochs 1\n");
    return cfg;
}

// --auto: the layout plan --auto ranks first for this world, applied to the options before they are
// const. Every rank searches alike; the memory per rank is the least any rank's node has, shared by
// the ranks (so every rank decides with the same figure).
static TrainConfig with_auto(TrainConfig c, const OptionsSeen *seen, Candidate *pick) {
    char err[PATH_LEN + 600];
    double least[1] = {-memory_available()};
    int world = comm_world_size();
    if (c.auto_layout) comm_allreduce_max_double(least, 1, MPI_COMM_WORLD);
    memset(pick, 0, sizeof *pick);
    int rc = auto_pick(&c, seen, world, -least[0] / world, pick, err, sizeof err);
    agree_on_read_error(rc ? err : NULL);  // (a profile one node cannot read)
    return c;
}

// ---- set up: what the plan decided, the same on every rank before any rank waits on another ----

// No output may be an input or another output of the run, nor a file of a checkpoint folder
// (out_clash, ckpt_owns): why, or "".
static void outputs_clash(const TrainConfig *c, char *why, size_t n) {
    const OutName out[] = {{"--metrics", c->observe.metrics}, {"--trace", c->observe.trace},
                           {"--timeline", c->observe.timeline}};
    const OutName in[] = {{"--config", c->config},           {"--data", c->data},
                          {"--labels", c->labels},           {"--test-data", c->test_data},
                          {"--test-labels", c->test_labels}, {"--schedule-file", c->pipe.schedule_file},
                          {"--profile", c->profile}};
    const OutName ckpt[] = {{"--save", c->ckpt.save}, {"--resume", c->ckpt.resume}};
    if (out_clash("train", out, 3, in, 7, why, n)) return;
    char name[PATH_LEN];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2 && !why[0]; j++)
            if (out[i].path[0] && ckpt[j].path[0] && out_in_folder(out[i].path, ckpt[j].path, name, sizeof name) &&
                ckpt_owns(name))
                snprintf(why, n, "train: %s '%s' is a file of the checkpoint folder %s '%s': give %s a path outside "
                         "it, or another name", out[i].flag, out[i].path, ckpt[j].flag, ckpt[j].path, out[i].flag);
}

// The trace and timeline files are written by rank 0 at the end; it tries them before the first
// step, and every rank learns the verdict, so a bad path ends every rank at once with exit 2. Rank 0
// writes every output, so its verdict on their clashes (outputs_clash) is every rank's too.
static void check_outputs(const TrainConfig *c, int rank) {
    const char *flag[2] = {"trace", "timeline"}, *path[2] = {c->observe.trace, c->observe.timeline};
    char why[3 * PATH_LEN] = "";
    if (rank == 0) outputs_clash(c, why, sizeof why);
    for (int i = 0; i < 2 && rank == 0 && !why[0]; i++) {
        int e = path[i][0] ? out_check(path[i]) : 0;
        if (e)
            snprintf(why, sizeof why, "train: cannot write --%s '%s': %s (%s)", flag[i], path[i], strerror(e),
                     out_hint(e));
    }
    agree_on_error(why);
}

// --precision on the backend that trains, and on the CPU too when --verify's reference (always on the
// CPU) must round as the run does. A build without oneDNN refuses bf16 on the CPU, the same on every rank.
static void setup_precision(const Backend *be, const TrainConfig *c) {
    char why[256] = "";
    int cpu_too = be != &backend_cpu && c->verify;
    if (be->set_precision(c->precision, why, sizeof why) != 0 ||
        (cpu_too && backend_cpu.set_precision(c->precision, why, sizeof why) != 0))
        user_error("train: --precision bf16 cannot run here: %s (or use --precision fp32)", why);
}

// The device the plan chose (the CUDA backend comm_choose_hardware opened on this rank, or the CPU).
static void setup_device(const TrainConfig *c, const Plan *p, Wire *w) {
    w->be = p->device == DEVICE_CUDA ? w->hardware.cuda : &backend_cpu;
    if (p->device == DEVICE_CUDA) w->be->set_tf32(c->gemm.tf32);
    blas_set_threads((int)c->threads);
    cpu_flush_subnormals();  // the host's part of the work (all of it on the cpu backend)
    setup_precision(w->be, c);
}

// MFU's peak, measured on every rank at once (the ranks' gemms share the machine as the steps' do), summed
// over the ranks (unknown on any: unknown), and the FLOPs of a step.
static void setup_peak(const TrainConfig *c, const Plan *p, Run *r) {
    Peak *pk = &r->m.peak;
    measure_peak(pk, r->wire.be, c->precision, c->gemm.tf32, r->predicted.peak_flops / 1e9);
    double v[2] = {pk->gflops, pk->gflops > 0 ? 0 : 1};  // the peak, ranks without one
    if (p->distributed) comm_allreduce_sum_double(v, 2, MPI_COMM_WORLD);
    pk->total_gflops = v[1] > 0 ? 0 : v[0];
    r->m.flops = report_step_flops(c, p);
}

// The executor's buffers: host rows and labels (pinned on a GPU, so each micro-batch's copy to it is
// a DMA from page-locked memory): the training rows' ring, whose copies nothing waits for but the
// buffer's refill (exec_load_inputs), and the held-out rows' one buffer; and the gradients a backward
// hands on.
static void setup_buffers(const TrainConfig *c, const Plan *p, const Backend *be, StepState *st) {
    size_t rows = (size_t)p->rows, H = (size_t)c->hidden, D = (size_t)p->inputs;
    exec_ring_alloc(&st->ring, be, p->rows, p->inputs);
    st->xh = be->alloc_host(sizeof(float) * rows * D);
    st->yh = be->alloc_host(sizeof(int32_t) * (size_t)(p->rows > c->eval_samples ? p->rows : c->eval_samples));
    st->dout = be->alloc(sizeof(float) * rows * H);
    st->din = be->alloc(sizeof(float) * rows * H);
    st->grad_bf16 = be->alloc(sizeof(uint16_t) * rows * H + sizeof(float));
}

static StageSpec spec_of(const TrainConfig *c, const Plan *p, const Wire *w, int vs, int has_head, int slots,
                         int ckpt) {
    StageSpec s = {.layers = (int)c->layers,
                   .hidden = (int)c->hidden,
                   .classes = (int)c->classes,
                   .inputs = p->inputs,
                   .lo = p->lo[vs],
                   .hi = p->lo[vs + 1],
                   .head = has_head,
                   .rows = p->rows,
                   .slots = slots,
                   .ckpt = ckpt,
                   .bf16 = c->precision == PRECISION_BF16,
                   .seed = (uint64_t)c->seed,
                   .tp = p->T,
                   .tp_rank = w->comm.tp_rank,
                   .grads_elsewhere = p->data.zero >= 2,
                   .params_elsewhere = p->data.zero >= 3,
                   .moe = plan_moe(c, p)};
    s.moe.shards = p->expert.N;  // --ep: replica d is rank d % N of its expert group (axes/expert.c)
    s.moe.shard = p->expert.N > 1 ? w->comm.replica % p->expert.N : 0;
    return s;
}

// pp/hybrid: this rank's chunks. The schedule is proven before it runs (uniform costs F = I = W = 1,
// i.e. F = 1, B = 2), and each chunk's activation stash is sized from that simulation.
static void setup_pipeline(const TrainConfig *c, const Plan *p, Wire *w, Model *model, StepState *st) {
    pipeline_setup(p, &w->comm, w->be, &st->sim, &st->list);
    w->stage = w->comm.stage;
    w->replica = w->comm.replica;
    model->n_local = p->V;
    model->local = xcalloc((size_t)p->V, sizeof(Stage));
    model->vs_of = xcalloc((size_t)p->V, sizeof(int));
    memory_check(c, p, w, &st->sim);  // before the first large allocation
    for (int k = 0; k < p->V; k++) {
        int vs = plan_vstage(p, w->stage, k), last = vs == p->S - 1;
        Stage *s = &model->local[k];
        model->vs_of[k] = vs;
        stage_init(s, w->be, spec_of(c, p, w, vs, last, st->sim.peak_slots[vs], p->pipe.ckpt));
        if (p->split) stage_enable_split(s);
        // the global batch's mean (replicas' gradients are summed); local SGD: the replica's own batch's
        s->grad_scale = 1.0f / (float)(p->data.sync_every ? (int64_t)p->rows * p->M : c->batch);
        s->mem.tally = &model->tally;
        s->hooks.progress = comm_poll_sends;
        if (last) model->head = s;
    }
}

// One process's stages: the monolith or a ddp replica (the whole model), or the manual split's parts.
static void setup_local(const TrainConfig *c, const Plan *p, Wire *w, Model *model) {
    int K = p->K;
    if (p->data_parallel || p->T > 1) {
        comm_grid_tp(&w->comm, w->be, 1, p->D, p->T, PLACEMENT_STAGES);
        w->replica = w->comm.replica;
    }
    model->n_local = K;
    model->local = xcalloc((size_t)K, sizeof(Stage));
    model->vs_of = xcalloc((size_t)K, sizeof(int));
    memory_check(c, p, w, NULL);  // before the first large allocation
    for (int k = 0; k < K; k++) {
        model->vs_of[k] = k;
        stage_init(&model->local[k], w->be, spec_of(c, p, w, k, k == K - 1, 1, 0));
    }
    model->head = &model->local[K - 1];
    // the mean over the whole step: ddp's replicas' gradients are summed, so 1/(global batch x N); local SGD's not
    // (every local stage: an MoE layer's auxiliary loss weighs its rows alike)
    for (int k = 0; k < K; k++)
        model->local[k].grad_scale =
            1.0f / (float)(p->data_parallel && !p->data.sync_every ? c->batch * p->N : (int64_t)p->rows * p->N);
}

// Checkpoints: which stages this process holds and writes (replica 0 writes; every replica reads;
// interleaved: a file per chunk, i.e. per virtual stage); then --resume, which sets where the run starts.
static void setup_checkpoints(Run *r, int verbose) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    static char mode_name[32];
    r->ck = (CkptLayout){.c = c,
                         .inputs = p->inputs,
                         .steps = p->steps,
                         .mode = choice_name(MODE_CHOICES, p->mode, mode_name, sizeof mode_name),
                         .world = p->world,
                         .stages = p->S,
                         .dp = p->D,
                         .lo = p->lo,
                         .local = r->model.local,
                         .n_local = r->model.n_local,
                         .first_stage = p->pipelined ? r->wire.stage : 0,
                         .stage_of = p->pipelined ? r->model.vs_of : NULL,
                         .writer = r->wire.replica < p->expert.N,  // (--ep: the first group gathers, its rank 0 writes)
                         .tp = p->T,
                         .tp_rank = r->wire.comm.tp_rank,
                         .tp_comm = r->wire.comm.tp,
                         .ep = p->expert.N,
                         .ep_rank = r->wire.ep.rank,
                         .ep_comm = r->wire.ep.comm,
                         .comm = MPI_COMM_WORLD};
    r->progress.saved_step = -1;
    if (!c->ckpt.resume[0]) return;
    char desc[160];
    for (int k = 0; k < r->model.n_sync; k++) gradsync_unshard(&r->model.sync[k]);  // sharded: loaded whole, cut
    r->progress.start = (int)ckpt_resume(&r->ck, &r->progress.sample0, desc, sizeof desc);
    for (int k = 0; k < r->model.n_sync; k++) gradsync_reshard(&r->model.sync[k]);
    if (verbose)
        printf("resumed from %s: %s; training steps %d-%lld\n", c->ckpt.resume, desc, r->progress.start + 1, p->steps);
}

// --sync-every: local SGD's outer loop, its anchor the parameters as set up or resumed (with its state, unless
// --fresh-state).
static void setup_localsgd(Run *r) {
    LocalSgd *l = r->model.outer = xcalloc(1, sizeof *l);
    localsgd_setup(l, &r->p, &r->wire.comm, r->model.local, r->model.n_local);
    if (r->c->ckpt.resume[0] && !r->c->ckpt.fresh_state)
        localsgd_resume(l, r->c->ckpt.resume, r->progress.start, r->c->optimizer);
}

// --compress: each stage's compressor, its error buffers zero (no --resume, or --fresh-state) or resumed (--verify:
// step 1's exact sum kept).
static void setup_compress(Run *r) {
    Model *m = &r->model;
    compress_setup(&r->p, m->sync, m->n_sync, r->c->verify);
    if (r->c->ckpt.resume[0] && !r->c->ckpt.fresh_state)
        compress_resume(m->sync, m->n_sync, r->c->ckpt.resume, r->progress.start);
}

static void run_free(Run *r) {
    Model *model = &r->model;
    postval_free(r);
    if (model->outer) localsgd_free(model->outer);
    free(model->outer);
    StepState *st = &r->exec;
    const Backend *be = r->wire.be;
    compress_free(model->sync, model->n_sync);
    for (int k = 0; k < model->n_sync; k++) gradsync_free(&model->sync[k]);
    free(model->sync);
    for (int k = 0; k < model->n_local; k++) stage_free(&model->local[k]);
    free(model->local); free(model->vs_of);
    sim_result_free(&st->sim);
    action_list_free(&st->list);
    be->free(st->dout); be->free(st->din); be->free(st->grad_bf16);
    exec_ring_free(&st->ring, be);
    be->free_host(st->xh); be->free_host(st->yh);
    measure_free(&r->m);
    data_close(&r->data);
    if (r->p.T > 1) tp_free(&r->wire.tp);
    expert_free(&r->wire.ep);
    if (r->p.distributed) comm_free(&r->wire.comm);
    comm_hardware_free(&r->wire.hardware);
}

// --deterministic: the backend's products on fixed chunks of --det-rows rows, each stage's gradients in
// the rows' tree over those chunks (base/det.h). (The plan allowed it on the CPU only.)
static void setup_deterministic(Run *r) {
    char err[256] = "this backend has no canonical products";
    const Backend *be = r->wire.be;
    int chunk = r->c->gemm.det_rows;
    if (!be->set_deterministic || be->set_deterministic(chunk, err, sizeof err))
        fatal("train: --deterministic: %s", err);
    for (int k = 0; k < r->model.n_local; k++) stage_enable_det(&r->model.local[k], chunk);
}

// ---- the step loop ----

// The forward and backward of every micro-batch (and its communication), then the gradients
// averaged over the replicas. st->step and st->step_sample name the step. A pipeline's ranks start it
// together (the barrier), but for --post-validate's steps after the first, which follow at once.
static void step_compute(const Plan *p, Wire *w, Model *model, StepState *st, Measure *m, int barrier) {
    int step = st->step;
    for (int k = 0; k < model->n_local; k++) stage_zero_grads(&model->local[k]);
    for (int k = 0; k < model->n_sync; k++) gradsync_begin_step(&model->sync[k]);
    wd_phase("the step's barrier", step + 1);
    if (p->pipelined && barrier) comm_barrier(MPI_COMM_WORLD);
    for (int k = 0; k < model->n_local; k++)
        if (model->local[k].det) model->local[k].det->row0 = plan_row(p, 0, w->replica, 0);
    double t0 = now_sec();
    m->step_start[step] = t0;
    expert_step_begin(&w->ep);
    if (p->pipelined) m->span_s[step] = exec_pipeline_step(p, w, model, st, m);
    else if (p->mode == MODE_MANUAL) exec_manual_step(p, w, model, st, m);
    else exec_monolith_step(p, w, model, st, m);
    if (!p->pipelined) m->span_s[step] = now_sec() - t0;
    expert_step_end(&w->ep);
    wd_phase("the gradient all-reduce", step + 1);
    for (int k = 0; k < model->n_local && !model->n_sync; k++)  // (with replicas, gradsync_finish sums them)
        if (model->local[k].det) stage_det_finish(&model->local[k]);  // --deterministic: the rows' tree summed
    for (int k = 0; k < model->n_sync; k++) gradsync_finish(&model->sync[k]);
    if (model->head) stage_take_loss(model->head);  // the step's one read of the loss
}

static void step_update(Run *r, int step) {
    const TrainConfig *c = r->c;
    Model *model = &r->model;
    double t0 = r->m.step_start[step], to = now_sec();
    int pv = c->guard.post_validate, clip = c->guard.clip_grad > 0;
    wd_phase("the optimizer step", step + 1);
    if (fault_due(FAULT_NANGRAD, step + 1)) guard_inject_nan(model);
    int undone = 0;  // --post-validate: the check, the loss and the norm set off, the copy taken; 1: this rank's
    if (pv) {        // gradients are not finite, so every rank will undo the step (no note of its update)
        int n;
        DetSum exact = {0}, *det = c->gemm.deterministic && clip ? &exact : NULL;
        double sumsq = clip ? guard_grad_sumsq(&r->wire, model, det) : 0;
        double *v = step_values(model, &r->progress, &r->m, step, sumsq, det, &n);
        undone = postval_begin(r, step, v, n + 1);
    }
    guard_optimizer_step(r, step, clip && !pv, !undone);  // (--post-validate clips once the norm has arrived)
    if (model->outer && localsgd_due(model->outer, step, r->p.steps)) localsgd_sync(model->outer);
    r->wire.be->sync();
    measure_record(&r->m, step, EV_OPTIMIZER, -1, 0, to - t0, now_sec() - t0);
    r->m.step_s[step] = now_sec() - t0;
}

// ddp/hybrid: the step's collectives, in flight and exposed. In a pipeline the other stages still
// compute (the cool-down) after this one is done: the replica's compute ends when its last stage
// does. Every rank left the step's barrier together, so times since t0 compare across the pipeline.
static void step_comm_times(const Plan *p, const Comm *comm, Model *model, Measure *m, int step, int trace) {
    double t0 = m->step_start[step], end = 0;
    for (int k = 0; k < model->n_sync; k++) end = fmax(end, model->sync[k].t_compute_end);
    if (p->pipelined) {
        double rel[1] = {end - t0};
        comm_allreduce_max_double(rel, 1, comm->pp);
        end = t0 + rel[0];
    }
    m->comm_s[step] = m->exposed_s[step] = 0;  // a rank's chunks: their times add up
    for (int k = 0; k < model->n_sync; k++) {
        double cs, es;
        const GradSync *g = &model->sync[k];
        for (int i = 0; i < g->n_spans && trace; i++)  // the buckets' collectives, for the observers
            if (g->spans[i].kind)
                measure_record(m, step, g->spans[i].kind, -1, k, g->spans[i].t0 - t0, g->spans[i].t1 - t0)->bytes =
                    g->spans[i].bytes;
        gradsync_end_step(&model->sync[k], end, &cs, &es);
        m->comm_s[step] += cs;
        m->exposed_s[step] += es;
    }
}

// Saves the state after step `step` (0-based) completed, with the training stream's position after it.
static double save_checkpoint(Run *r, int step) {
    const Progress *g = &r->progress;
    // ZeRO: the files are unsharded; every rank makes its stages whole for the writer, then cuts them again
    for (int k = 0; k < r->model.n_sync; k++) gradsync_unshard(&r->model.sync[k]);
    if (r->model.outer) localsgd_save(r->model.outer, r->c->ckpt.save, step + 1, r->c->optimizer);
    if (r->p.data.compress) compress_save(r->model.sync, r->model.n_sync, r->c->ckpt.save, step + 1);
    double bytes = ckpt_save(&r->ck, step + 1, plan_step_sample(&r->p, g->sample0, g->start, step + 1));
    for (int k = 0; k < r->model.n_sync; k++) gradsync_reshard(&r->model.sync[k]);
    r->progress.saved_step = step + 1;
    return bytes;
}

// A pipeline's bubble in one step, over every rank: 1 - their compute / (ranks x the slowest one's
// span), the summary's measured bubble averaged over the ranks. Collective: every rank calls it alike.
static double step_bubble(const Plan *p, const Measure *m, int step) {
    double span[1] = {m->span_s[step]}, busy[1] = {m->busy_s[step]};
    wd_phase("the metrics' bubble", step + 1);
    comm_allreduce_max_double(span, 1, MPI_COMM_WORLD);
    comm_allreduce_sum_double(busy, 1, MPI_COMM_WORLD);
    return 1.0 - busy[0] / ((double)p->world * span[0]);
}

// The log line and --metrics' line of a logged step, and --save at --save-every and at the end.
static void step_log_and_save(Run *r, int step, double loss, int verbose) {
    const TrainConfig *c = r->c;
    int steps = (int)r->p.steps;
    double samples_s = (double)c->batch * r->p.N / r->m.step_s[step];
    int logged = c->log_every && ((step + 1) % c->log_every == 0 || step == r->progress.start || step == steps - 1);
    int saving = c->ckpt.save[0] && !c->ckpt.save_best &&
                 ((c->ckpt.save_every && (step + 1) % c->ckpt.save_every == 0) || step + 1 == steps);
    if (logged || saving) live_clear(&r->live);  // (before any line of this step)
    if (verbose && logged) {
        char rate[32];
        printf("step %d/%d | loss %.4f | %.2f ms | %s samples/s", step + 1, steps, loss, r->m.step_s[step] * 1e3,
               fmt_si(samples_s, rate, sizeof rate));
        if (c->guard.clip_grad > 0)
            printf(" | grad norm %.4g%s", r->m.grad_norm[step], r->m.clip_scale[step] < 1 ? " (clipped)" : "");
        printf("\n");
    }
    int every = (int)c->observe.metrics_every;  // --metrics: every step unless thinned, whatever the console shows
    int metered = every && ((step + 1) % every == 0 || step == r->progress.start || step == steps - 1);
    if (metered && c->observe.metrics[0]) {  // (the same decision on every rank: step_bubble is collective)
        double lr = lr_at(c->optim.lr_schedule, c->lr, c->optim.min_lr, c->optim.warmup_steps, step, r->p.steps);
        double bubble = r->p.pipelined ? step_bubble(&r->p, &r->m, step) : NAN;
        double norm = c->guard.clip_grad > 0 ? r->m.grad_norm[step] : NAN;
        double mfu = measure_mfu(&r->m.peak, r->m.flops, r->m.step_s[step]);
        int pv = c->guard.post_validate ? (int)r->m.postval[step] : -1;
        metrics_step(&r->metrics, step + 1, loss, lr, r->m.step_s[step], samples_s, bubble, mfu, norm,
                     r->m.clip_scale[step] < 1, pv, &r->m.moe);
    }
    if (!saving) return;
    if (r->p.distributed) agree_on_failure(r->progress.bad_update);  // never save a state that went non-finite
    double t_save = now_sec();
    wd_phase("saving the checkpoint", step + 1);
    double bytes = save_checkpoint(r, step);
    if (verbose) {
        char b[32];
        printf("saved step %d to %s (%s, %.0f ms)\n", step + 1, c->ckpt.save, fmt_bytes(bytes, b, sizeof b),
               (now_sec() - t_save) * 1e3);
    }
}

// --save-best: the epoch's test accuracy against the best so far. Every rank takes the same
// decision (the largest value any rank saw; the replicas' and stages' values agree anyway).
static void save_if_best(Run *r, int step, double accuracy, int epoch, int verbose) {
    Progress *g = &r->progress;
    double v[1] = {isfinite(accuracy) ? accuracy : -1};
    if (r->p.distributed) comm_allreduce_max_double(v, 1, MPI_COMM_WORLD);
    if (g->best_epoch && v[0] <= g->best_accuracy) return;
    g->best_accuracy = v[0];
    g->best_epoch = epoch;
    double t0 = now_sec();
    double bytes = save_checkpoint(r, step);
    if (verbose) {
        char b[32];
        printf("saved epoch %d (best test accuracy so far, %.2f%%) to %s (%s, %.0f ms)\n", epoch, 100 * v[0],
               r->c->ckpt.save, fmt_bytes(bytes, b, sizeof b), (now_sec() - t0) * 1e3);
    }
}

// --epochs: after an epoch's last step, the evaluation on the held-out rows, the epoch's line, and
// --save-best. The epoch's time is that of its steps, from its first step's start to its last's end.
static void end_epoch(Run *r, int step, int verbose) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    Measure *m = &r->m;
    double t_end = now_sec();
    int epoch = (int)((step + 1) / p->steps_per_epoch), start = r->progress.start;  // epoch: 1-based
    long long first = (long long)(epoch - 1) * p->steps_per_epoch, from = first > start ? first : start,
              n = step + 1 - from;
    double loss = 0;
    for (long long t = from; t <= step; t++) loss += m->loss[t];
    EvalResult ev = evaluate(c, p, &r->wire, &r->model, &r->exec);
    live_clear(&r->live);
    EpochStat *st = &m->epoch[m->n_epoch++];
    *st = (EpochStat){.epoch = epoch,
                      .train_loss = loss / (double)n,
                      .test_loss = ev.loss,
                      .test_accuracy = ev.accuracy,
                      .time_s = t_end - m->epoch_t0,
                      .samples_s = (double)n * (double)c->batch * p->N / (t_end - m->epoch_t0)};
    if (verbose) report_epoch(p, st);
    metrics_epoch(&r->metrics, st, step + 1);
    if (c->ckpt.save_best) save_if_best(r, step, ev.accuracy, epoch, verbose);
    m->epoch_t0 = now_sec();
}

// --eval-every N: the held-out rows' loss and accuracy after every N steps (the last step's is the final
// evaluation's, and an epoch's end has its own), as a line and a --metrics test point. Every rank evaluates.
static void eval_step(Run *r, int step, int verbose) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    int every = (int)c->observe.eval_every, epoch_end = p->epochs && (step + 1) % p->steps_per_epoch == 0;
    if (!every || (step + 1) % every || step + 1 == p->steps || epoch_end) return;
    EvalResult ev = evaluate(c, p, &r->wire, &r->model, &r->exec);
    live_clear(&r->live);
    if (verbose)
        printf("eval at step %d/%lld | test loss %.4f | accuracy %.1f%% on %lld held-out rows\n", step + 1, p->steps,
               ev.loss, 100 * ev.accuracy, p->eval_rows);
    metrics_eval(&r->metrics, step + 1, ev.loss, ev.accuracy);
}

// The replicas of every stage must end with the same parameters (ZeRO-3: each holds other shards; --ep: the
// experts alike among the replicas holding them, the rest among all).
static void check_replicas_end_alike(Wire *w, const Model *model) {
    const Comm *peers = expert_peers(&w->ep);
    for (int k = 0; k < (model->n_sync || model->outer ? model->n_local : 0); k++) {
        if (!model->local[k].params) continue;
        int same = comm_same_u64(stage_param_checksum(&model->local[k], 1), w->comm.dp);
        if (peers) same &= comm_same_u64(stage_param_checksum(&model->local[k], 0), peers->dp);
        if (!same)
            fatal("the replicas of stage %d (chunk %d) ended with different parameters: the ranks were started with "
                  "different "
                  "options (--lr, --optimizer, ...), or the gradient all-reduce is broken",
                  w->stage, k);
    }
}

// One step's forward and backward, and the tensor-parallel group's tallies of it.
static void step_run(Run *r, int step) {
    const Plan *p = &r->p;
    int observed = r->c->observe.trace[0] || r->c->observe.timeline[0] || r->c->observe.gantt;
    int barrier = !r->c->guard.post_validate || step == r->progress.start;  // (--post-validate: the first alone)
    r->exec.step = step;
    r->exec.step_sample = plan_step_sample(p, r->progress.sample0, r->progress.start, step);
    tp_spans_clear(&r->wire.tp);
    TpGroup before = r->wire.tp;
    step_compute(p, &r->wire, &r->model, &r->exec, &r->m, barrier);
    tp_step_end(&r->wire.tp);
    if (r->wire.tp.trace) measure_spans(r->wire.tp.spans, r->wire.tp.n_spans, &r->m, step);
    if (observed) measure_spans(r->wire.ep.spans, r->wire.ep.n_spans, &r->m, step);
    r->m.tp_s[step] = r->wire.tp.seconds - before.seconds;  // (--verify's reference makes no all-reduce)
    r->m.tp_floats += r->wire.tp.floats - before.floats;
    r->m.tp_calls += r->wire.tp.calls - before.calls;
}

// The step's loss checked: a non-finite one ends the run, and so does a diverged one.
static void step_checks(const TrainConfig *c, Progress *g, const Measure *m, int step, double loss) {
    if (!isfinite(loss))
        run_failed("train: the loss became %s at step %d: lower --lr (now %g) and check the data",
                   isnan(loss) ? "NaN" : "Inf", step + 1, c->lr);
    guard_divergence(c, g, m, step, loss);
}

// After the update: the step's line and checkpoint, the epoch's end, the evaluation.
static void step_after(Run *r, int step, double loss, int verbose) {
    const Plan *p = &r->p;
    step_log_and_save(r, step, loss, verbose);
    if (p->epochs && (step + 1) % p->steps_per_epoch == 0) end_epoch(r, step, verbose);
    eval_step(r, step, verbose);
    live_step(&r->live, step, p->steps, p->epochs, p->steps_per_epoch, (double)r->c->batch * p->N);
}

// --post-validate: step `step`'s check and loss, waited for after the next step's forward and backward
// (`redo`: a next step ran). When a rank held a non-finite gradient, every rank undoes the step's update
// (the step is skipped); when --clip-grad's global norm says the step clips, every rank redoes the update
// from the step's gradients, clipped (the paper's redo). Either way it runs the next step again from the
// parameters now in place (its first run's events and MoE counters dropped). Then the step's
// checks, line and checkpoint, as the synchronous steps have them before and after their update.
static void step_settle(Run *r, int step, int redo, int verbose) {
    Measure *m = &r->m;
    int at = redo ? step + 1 : step;  // the step the wait falls in
    wd_phase("the post-validation", step + 1);
    double ta = now_sec();
    const double *v = postval_wait(r);
    double tb = now_sec(), bad = v[r->pv.n - 1];
    if (v[3] > 0) agree_on_failure(r->progress.bad_update);
    double clip = r->c->guard.clip_grad, loss = step_loss_taken(m, step, v, r->c->gemm.deterministic && clip > 0);
    step_checks(r->c, &r->progress, m, step, loss);
    m->clip_scale[step] = 1;
    if (bad > 0 || (clip > 0 && clip / (m->grad_norm[step] + 1e-6) < 1)) {
        postval_restore(r, bad == 0);  // (clipped: the step's gradients back too, and the update redone)
        m->postval[step] = bad > 0 ? 1 : 2;
        if (bad == 0) guard_optimizer_step(r, step, 1, 1);
        else if (verbose)
            printf("step %d: %.0f rank%s held a non-finite gradient: its update is undone on every rank and the step "
                   "skipped (--post-validate)%s\n",
                   step + 1, bad, bad > 1 ? "s" : "", redo ? "; the next step runs again" : "");
        while (redo && m->n_ev > 0 && m->ev[m->n_ev - 1].step == step + 1) m->n_ev--;
        for (int k = 0; redo && k < r->model.n_local; k++)
            if (r->model.local[k].moe) moe_stats_reset(r->model.local[k].moe);
        if (redo) step_run(r, step + 1);
    } else if (r->p.distributed)
        measure_record(m, at, EV_ALLREDUCE, -1, 0, ta - m->step_start[at], tb - m->step_start[at]);
    step_after(r, step, loss, verbose);
}

static void train_steps(Run *r, VerifyResult *v, int verbose) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    const Backend *be = r->wire.be;
    Progress *g = &r->progress;
    int pv = c->guard.post_validate;
    if (c->gemm.timing) be->gemm_timing(1);
    int observed = c->observe.trace[0] || c->observe.timeline[0] || c->observe.gantt;  // (they draw the collectives)
    r->m.epoch_t0 = now_sec();
    for (int step = g->start; step < (int)p->steps; step++) {
        fault_step(step + 1);
        if (!p->pipelined) fault_stall(step + 1, "at its start");
        step_run(r, step);
        if (pv && step > g->start) step_settle(r, step - 1, 1, verbose);  // the last step's check, arrived
        double loss = NAN;
        if (!pv) {
            DetSum exact = {0}, *det = c->gemm.deterministic && c->guard.clip_grad > 0 ? &exact : NULL;
            double sumsq = c->guard.clip_grad > 0 ? guard_grad_sumsq(&r->wire, &r->model, det) : 0;
            loss = step_loss(p, &r->model, g, &r->m, step, sumsq, det);
        }
        if (step == 0 && c->verify) {  // (local SGD: ddp's averaged gradients are the monolith's; its own kept)
            float **own = NULL;
            if (r->model.outer) localsgd_average_grads(r->model.outer, &own);
            compress_swap_plain(r->model.sync, r->model.n_sync);  // (--compress: the exact sum, then back)
            *v = verify_step(c, p, &r->model, &r->exec, loss);
            compress_swap_plain(r->model.sync, r->model.n_sync);
            if (own) localsgd_restore_grads(r->model.outer, own);
        }
        if (!pv) step_checks(c, g, &r->m, step, loss);
        step_update(r, step);
        if (r->model.n_sync) step_comm_times(p, &r->wire.comm, &r->model, &r->m, step, observed);
        if (c->gemm.timing) r->m.gemm_s[step] = be->gemm_seconds();
        if (!pv) step_after(r, step, loss, verbose);
    }
    if (pv && g->start < (int)p->steps) step_settle(r, (int)p->steps - 1, 0, verbose);
    live_clear(&r->live);
    if (p->distributed) agree_on_failure(g->bad_update);  // the last update has no next step to report it
    check_replicas_end_alike(&r->wire, &r->model);
    if (c->gemm.timing) be->gemm_timing(0);
}

// ---- the command ----

// --schedule-file: every rank reads the file and proves it (schedule_file.c) before the plan, which
// takes its ranks, micro-batches and chunk order; a file some rank cannot read, or reads otherwise,
// ends every rank alike. Outside a pipeline the plan refuses the flag.
static const SchedFile *load_schedule_file(const TrainConfig *c, const Degrees *d, SchedFile *file) {
    if (!c->pipe.schedule_file[0] || !(degrees_axes(d) & AXIS_PIPELINE)) return NULL;
    char why[900] = "", err[1024] = "", *text = NULL;
    if (!schedule_file_read(c->pipe.schedule_file, &text, why, sizeof why))
        schedule_file_parse(text, c->pipe.schedule_file, file, why, sizeof why);
    free(text);
    if (why[0]) snprintf(err, sizeof err, "train: %s", why);
    agree_on_read_error(err[0] ? err : NULL);
    return file;
}

// The end of the run. Rank 0 wrote the outputs (--trace, --timeline, the summary; the checkpoints
// were committed in the step loop); every other rank waits for its word, bounded by --timeout alone
// (a slow disk is no failure, and MPI_Finalize's short backstop must not turn "rank 0 is still
// writing" into exit 0), and every rank returns the same code: 0 only when all is written.
static int outputs_written(const TrainConfig *c, int rank, const Summary *s, const VerifyResult *v) {
    int code = v->failed ? 1 : 0;
    if (rank == 0) {
        if (v->failed && v->det_ulps > 0)
            fprintf(stderr, "micropp: --verify failed: --deterministic's gradients lie up to %.0f ulp from the "
                            "monolith reference's, which they must equal bit for bit\n", v->det_ulps);
        else if (v->failed)
            fprintf(stderr,
                    "micropp: --verify failed: worst relative error %.3g exceeds %.0e and %dx the reference's own "
                    "float noise\n",
                    v->worst_err, v->tol, VERIFY_NOISE_FACTOR);
        if (s->write_err[0]) fprintf(stderr, "micropp: %s\n", s->write_err);
        if (s->write_err[0] || fflush(stdout) != 0 || ferror(stdout)) code = 1;  // (main prints standard output's line)
    }
    char what[3 * PATH_LEN], files[2 * PATH_LEN + 40] = "";
    if (c->observe.trace[0]) snprintf(files, sizeof files, "--trace '%s', ", c->observe.trace);
    if (c->observe.timeline[0])
        snprintf(files + strlen(files), sizeof files - strlen(files), "--timeline '%s', ", c->observe.timeline);
    snprintf(what, sizeof what,
             "writing its outputs (%sthe summary): a slow disk, or a FIFO nobody reads? raise --timeout, or write them "
             "elsewhere",
             files);
    wd_phase("the end of the run", 0);
    return comm_outputs_written(code, what);
}

// The facts the plan needs beyond the options and the launch, gathered alike on every rank: what
// every rank's GPU, node and /dev/shm allow (comm_choose_hardware, collective), the data's headers (its rows;
// the data itself is read once the plan is made), BLAS's threads, the step --resume starts from.
static void gather_facts(const TrainConfig *c, const Plan *p, Data *data, Hardware *hardware, Facts *f) {
    DataSource src = {c->data, c->labels, c->test_data, c->test_labels};
    data_open(data, src, p->inputs, (uint64_t)c->seed);
    f->data_known = 1;
    f->train_rows = data->train.n;
    f->test_rows = data->test.n;
    comm_choose_hardware(c->device != DEVICE_CPU, hardware);
    f->devices = hardware;
    f->blas_max_threads = blas_max_threads();
    f->resume_step = c->ckpt.resume[0] ? ckpt_resume_step(c->ckpt.resume, MPI_COMM_WORLD) : 0;
}

int cmd_train(int argc, char **argv) {
    comm_init(&argc, &argv);
    OptionsSeen seen;
    Candidate pick;
    const TrainConfig cfg = with_auto(parse_options(argc, argv, &seen), &seen, &pick);  // const from here on
    char err[1024];
    if (plan_early(&cfg, err, sizeof err)) user_error("%s", err);  // before any rank waits on another
    // The degrees, once: --auto's pick, or the options' (--mode as spelled, or the degrees alone) on this world
    Degrees deg = layout_degrees(&pick.l);
    if (!cfg.auto_layout && degrees_resolve(&cfg, &seen, comm_world_size(), &deg, err, sizeof err))
        user_error("%s", err);
    wd_set_timeout(cfg.timeout);
    if (seen_set(&seen, "wait-policy")) wd_set_wait_policy(cfg.wait_policy);  // (else MICROPP_WAIT_POLICY's)
    Run run = {.c = &cfg, .wire.rank = comm_world_rank()}, *r = &run;
    price_train_run(&cfg, &deg, &pick, &r->predicted);
    const Plan *p = &r->p;
    SchedFile sched_file = {0};
    Facts facts = {.world = comm_world_size(),
                   .tag_ub = comm_tag_ub(),
                   .schedule_file = load_schedule_file(&cfg, &deg, &sched_file)};
    // The plan from the options and the launch first, so that a mistaken option is named before any
    // file is read; then again with every fact: the plan the run follows.
    if (plan_make(&cfg, &deg, &seen, &facts, &r->p, err, sizeof err)) user_error("%s", err);
    gather_facts(&cfg, p, &r->data, &r->wire.hardware, &facts);
    if (plan_make(&cfg, &deg, &seen, &facts, &r->p, err, sizeof err)) user_error("%s", err);
    // zb-auto: its search builds the lists from the plan, alike on every rank (no message needed)
    SchedFile auto_lists = {0};
    if (p->pipelined && (p->schedule == SCHED_ZBAUTO || p->schedule == SCHED_ZBAUTOV)) {
        memory_zbauto(&cfg, p, &auto_lists);
        r->p.file = &auto_lists;
    }
    data_load(&r->data, (int)cfg.classes);
    if (p->epochs) data_set_epochs(&r->data, (uint64_t)p->epoch_rows);
    wd_phase("the set-up", 0);
    fault_init();  // testing: MICROPP_FAULT, e.g. a rank that stalls before the first agreement
    fault_stall(0, "in the set-up");
    check_outputs(&cfg, r->wire.rank);
    ckpt_setup(&cfg, MPI_COMM_WORLD);
    setup_device(&cfg, p, &r->wire);
    int verbose = !cfg.json && r->wire.rank == 0;
    if (verbose) report_header(&cfg, p, &r->wire, &r->data);
    if (p->pipelined) setup_pipeline(&cfg, p, &r->wire, &r->model, &r->exec);  // (each checks the memory first)
    else setup_local(&cfg, p, &r->wire, &r->model);
    if (cfg.gemm.deterministic) setup_deterministic(r);
    expert_setup(p, &r->wire.ep, &r->wire.comm, r->model.local, r->model.n_local);  // (--ep 1: nothing)
    if (p->T > 1) tensor_setup(p, &r->wire.tp, &r->wire.comm, r->wire.be, r->model.local, r->model.n_local);
    r->wire.tp.det = cfg.gemm.deterministic && p->T > 2;  // (2 ranks: their all-reduce is a + b, the slices' tree)
    r->wire.tp.trace =
        cfg.observe.trace[0] || cfg.observe.timeline[0] || cfg.observe.gantt;  // (the observers draw the collectives)
    if (verbose) tensor_report_messages(p, &r->wire.tp);
    setup_buffers(&cfg, p, r->wire.be, &r->exec);
    r->exec.data = &r->data;
    measure_init(&r->m, p->steps, p->epochs);
    if (cfg.moe.experts) measure_moe(&r->m, p->steps, (int)cfg.moe.experts);
    setup_peak(&cfg, p, r);
    if (p->data_parallel && !p->data.sync_every) {
        data_setup(p, &r->wire.comm, expert_peers(&r->wire.ep), r->model.local, r->model.n_local, &r->model.sync);
        r->model.n_sync = r->model.n_local;
        zero_setup(p, r->model.sync, r->model.n_sync, (uint64_t)cfg.seed, (int)cfg.layers);
        if (verbose) data_report_header(p, r->model.sync, r->model.n_sync);
    }
    if (p->data.sync_every && verbose) data_report_header(p, NULL, 0);
    setup_checkpoints(r, verbose);
    if (p->data.compress) setup_compress(r);
    if (p->data.sync_every) setup_localsgd(r);
    metrics_open(&r->metrics, cfg.observe.metrics, r->wire.rank, r->progress.start);  // (after --resume: its step)
    live_init(&r->live,
              verbose && (cfg.observe.live == LIVE_ON || (cfg.observe.live == LIVE_AUTO && isatty(STDOUT_FILENO))),
              r->progress.start);

    VerifyResult verify = {0};
    r->pv.step = -1;  // (--post-validate: no check in flight yet)
    train_steps(r, &verify, verbose);
    // the last epoch's evaluation is the final one
    const Measure *m = &r->m;
    EvalResult final = m->n_epoch
                           ? (EvalResult){m->epoch[m->n_epoch - 1].test_accuracy, m->epoch[m->n_epoch - 1].test_loss, 0}
                           : evaluate(&cfg, p, &r->wire, &r->model, &r->exec);
    if (!m->n_epoch) metrics_eval(&r->metrics, (int)p->steps, final.loss, final.accuracy);  // the test curve's end
    wd_phase("the summary", 0);

    Summary summary;
    summary_fill(r, final.accuracy, &verify, &summary);  // rank 0 writes --trace and --timeline
    metrics_close(&r->metrics, summary.write_err, sizeof summary.write_err);  // a failure: exit 1, as the others
    summary_print(r, &summary);
    int code = outputs_written(&cfg, r->wire.rank, &summary, &verify);
    summary_free(&summary);
    run_free(r);
    comm_finalize_with(code);
    verify_free(&verify);
    sched_file_free(&sched_file);
    sched_file_free(&auto_lists);
    return code;
}
