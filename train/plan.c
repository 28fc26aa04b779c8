// train/plan.c: every rule and every choice of a `micropp train` run, made once, as pure functions of
// the options, the degrees, what was typed and the facts of the world (see plan.h). The layout: the
// one rule of the option rows' axes and each axis' rules (axes/: the schedule's chunks and the
// partition, the tensor and data parallelism's options), the grid of stages x replicas x tp, the batch
// cut into micro-batches, the placement of the grid. The run: how long (--steps,
// or --epochs over the data's rows), what it observes and saves, and what the facts bear on: the
// device and transport, the all-reduce (shm where the nodes and /dev/shm allow), BLAS's threads, the
// step a --resume starts from, the rows evaluated. tests/unit_plan.c checks each rule and its
// message without MPI.
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "axes/data.h"
#include "axes/compress.h"
#include "train/live.h"  // LIVE_*
#include "model.h"  // model_param_count
#include "train/plan.h"
#include "axes/degrees.h"
#include "axes/expert.h"
#include "axes/tensor.h"
#include "axes/pipeline.h"
#include "schedule.h"
#include "comms/tags.h"
#include "base/util.h"
#include "comms/watchdog.h"   // WD_MIN_TIMEOUT

// (Each rule returns 0, or -1 after writing its one-line message: axes/axis.h's refuse.)

// --samples sizes synthetic data only. (Which flags apply to the degrees: axes/degrees.c's one rule of
// the option rows' axes, and each axis' rules.)
static int rule_samples(const TrainConfig *c, Err *e) {
    if (strcmp(c->data, "synthetic") && seen_typed(e->seen, "samples"))
        return refuse(e,
                      "train: --samples sizes the synthetic data set, and --data '%s' is a file whose rows are the "
                      "training set: drop --samples",
                      c->data);
    return 0;
}

// Each axis' part of the plan: its options as this run takes them (an inactive axis: its defaults).
static void plan_parts(const TrainConfig *c, const Degrees *d, Plan *p) {
    data_part(c, d, p);
    pipeline_part(c, d, p);
}

// The grid the degrees give (stages K, replicas D, tensor ranks T), micro-batches and micro-steps.
static int rule_grid(const TrainConfig *c, const Degrees *d, long long tag_ub, Plan *p, Err *e) {
    p->K = d->pp;
    p->D = d->dp;
    p->T = d->tp;
    // (a config file's key is left unused)
    p->N = d->pp == 1 && !d->manual ? (int)c->grad_accum : 1;
    plan_parts(c, d, p);
    return pipeline_rules(c, d, tag_ub, p, e);
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
        if (fits[0])
            snprintf(tail, sizeof tail, ", or --micro-batches %s (divisors of %lld rows per replica)", fits, B / p->D);
        return refuse(e, "train: --batch %lld is not divisible by %s: use --batch %lld or %lld (multiples of %lld)%s",
                      B, what, lo ? lo : q, lo ? lo + q : 2 * q, q, tail);
    }
    if (B % p->M) {
        char fits[256];
        divisors(B, fits, sizeof fits);
        return refuse(e,
                      "train: --batch %lld is not divisible by --micro-batches %d: use micro-batches that divide it "
                      "(%s, ...) or change --batch",
                      B, p->M, fits);
    }
    p->rows = (int)(B / p->D / p->M);
    return 0;
}

// A step's traffic that crosses nodes under placement pl, from the node map: each pipeline link (a
// stage and the next, in every replica and tensor-parallel rank) and each ring link (a replica and the
// next, in every stage) that joins two nodes carries its share of pp_bytes or dp_bytes. *apart: the
// traffics that cross (APART_*).
static double crossing(const Plan *p, const int *node_of, int pl, int *apart) {
    int pp = 0, pp_cross = 0, dp = 0, dp_cross = 0;
    for (int r = 0; r < p->world; r++) {
        int g = comm_rank_group(p->T, r), t = comm_rank_tp(p->T, r);
        int k = comm_grid_stage(pl, p->K, p->D, g), d = comm_grid_replica(pl, p->K, p->D, g);
        if (k + 1 < p->K) {
            pp++;
            pp_cross += node_of[r] != node_of[comm_grid_rank(pl, p->K, p->D, k + 1, d) * p->T + t];
        }
        dp++;
        dp_cross += node_of[r] != node_of[comm_grid_rank(pl, p->K, p->D, k, (d + 1) % p->D) * p->T + t];
    }
    *apart = (pp_cross ? APART_PIPELINE : 0) | (dp_cross ? APART_ALLREDUCE : 0);
    return (pp ? p->pp_bytes * pp_cross / pp : 0) + p->dp_bytes * dp_cross / dp;
}

// --placement: which neighbours of the grid share a node. auto puts the heavier traffic of a step
// inside a node: the pipeline's (rows x H floats forward and back at every boundary between ranks,
// per micro-batch and replica) or the all-reduce's (a ring moves 2 (D-1)/D of a stage's gradients
// per rank, so 2 (D-1) x the model's gradients in all). A tie keeps the pipeline on a node. Once the
// node map is known (hw: several nodes), auto takes the placement whose traffic crosses nodes least
// where the ranks really are (srun -m cyclic deals them out node by node, not in blocks).
static void rule_placement(const TrainConfig *c, const Hardware *hw, Plan *p) {
    int crossings = 0;
    for (int vs = 0; vs + 1 < p->S; vs++) crossings += plan_stage_of(p, vs) != plan_stage_of(p, vs + 1);
    // --ep N: each expert's gradients travel only among its D/N holders (axes/data.c's expert buckets), so
    // the experts' floats move 2 (D/N - 1) times in all, the rest 2 (D - 1) (N: --ep's, checked after this)
    double params = expert_model_params(c, p->inputs), experts = 0, H = (double)c->hidden;
    int N = c->moe.experts && c->grid.ep > 1 && p->D % c->grid.ep == 0 ? (int)c->grid.ep : 1;
    MoeSpec moe = {.experts = (int)c->moe.experts, .every = (int)c->moe.every};
    for (int l = 1; l < c->layers && N > 1; l++) experts += moe_layer(&moe, l) ? moe.experts * (H * H + H) : 0;
    p->pp_bytes = p->pipelined
                      ? 2.0 * crossings * p->M * p->D * p->T * (double)p->rows * (double)c->hidden * sizeof(float)
                      : 0;  // (each rank of a tensor-parallel group sends the whole activation)
    p->dp_bytes = p->data_parallel
                      ? 2.0 * ((p->D - 1) * (params - experts) + (p->D / N - 1) * experts) * sizeof(float)
                      : 0;
    p->placement_auto = c->ddp.placement == PLACEMENT_AUTO;
    p->placement_apart = 0;
    if (!p->pipelined || !p->data_parallel) p->placement = PLACEMENT_STAGES;  // one replica, or one stage
    else if (p->placement_auto) p->placement = p->dp_bytes > p->pp_bytes ? PLACEMENT_REPLICAS : PLACEMENT_STAGES;
    else p->placement = c->ddp.placement;
    if (!hw || hw->nodes < 2 || !p->pipelined || !p->data_parallel) return;
    int apart_st, apart_re;
    double st = crossing(p, hw->node_of, PLACEMENT_STAGES, &apart_st),
           re = crossing(p, hw->node_of, PLACEMENT_REPLICAS, &apart_re);
    if (p->placement_auto && st != re) p->placement = st < re ? PLACEMENT_STAGES : PLACEMENT_REPLICAS;
    p->placement_apart = p->placement == PLACEMENT_STAGES ? apart_st : apart_re;
}

// ---- the run: its length, observers and checkpoints, and what the facts of the world bear on ----

// A warm-up longer than the run never reaches the peak --lr: refused, unless it comes from a config
// file whose run was cut shorter on the command line (a quick run of a long config ends in its warm-up,
// as asked; the command line wins, as for epochs and steps).
static int warmup_too_long(const TrainConfig *c, const OptionsSeen *seen, long long steps) {
    int cut = !seen_typed(seen, "warmup-steps") && (seen_typed(seen, "steps") || seen_typed(seen, "epochs"));
    return c->optim.warmup_steps > steps && !cut;
}

// --min-lr is where cosine ends: without cosine it would change nothing, above --lr the schedule would climb.
static int rule_min_lr(const TrainConfig *c, Err *e) {
    if (c->optim.min_lr > 0 && c->optim.lr_schedule != LR_COSINE)
        return refuse(e, "train: --min-lr %g is where --lr-schedule cosine ends: add --lr-schedule cosine, or drop it",
                      c->optim.min_lr);
    if (c->optim.min_lr > c->lr)
        return refuse(e, "train: --min-lr %g is above --lr %g: the cosine would climb; give a --min-lr below --lr",
                      c->optim.min_lr, c->lr);
    return 0;
}

// How long the run is (--epochs or --steps), and what goes with epochs: a data set to pass over,
// --save-best (its evaluation per epoch, a folder to keep the best in).
static int rule_length(const TrainConfig *c, Plan *p, Err *e) {
    int ep_cli = seen_typed(e->seen, "epochs"), st_cli = seen_typed(e->seen, "steps");
    int bad_lr = rule_min_lr(c, e);
    if (bad_lr) return bad_lr;
    if (ep_cli && st_cli && c->epochs)
        return refuse(e, "train: --epochs %lld and --steps %lld both set the run's length: give one of them",
                      (long long)c->epochs, (long long)c->steps);
    if (!ep_cli && !st_cli && c->epochs && seen_set(e->seen, "steps"))
        return refuse(e,
                      "train: the config sets both epochs (%lld) and steps (%lld): keep one of them, or override one "
                      "on the command line",
                      (long long)c->epochs, (long long)c->steps);
    p->epochs = c->epochs && !(st_cli && !ep_cli) ? (int)c->epochs : 0;
    p->steps = p->epochs ? 0 : c->steps;  // (epochs: once the data's rows are known)
    if (!p->epochs && warmup_too_long(c, e->seen, c->steps))  // (with epochs: rule_epochs, once the steps are known)
        return refuse(e,
                      "train: --warmup-steps %lld is longer than the run's %lld steps, so the learning rate would "
                      "never reach --lr %g: "
                      "use --warmup-steps %lld or fewer, or more --steps",
                      (long long)c->optim.warmup_steps, (long long)c->steps, c->lr, (long long)c->steps);
    if (p->epochs && !strcmp(c->data, "synthetic"))
        return refuse(e, "train: --epochs passes over a data set, and --data is synthetic: give --data fashion-mnist "
                         "(or DIR, or files), or use --steps");
    if (c->ckpt.save_best && !c->ckpt.save[0])
        return refuse(e, "train: --save-best keeps the best checkpoint in --save DIR: add --save DIR");
    if (c->ckpt.save_best && !p->epochs)
        return refuse(e, "train: --save-best evaluates after every epoch: add --epochs N (or drop --save-best)");
    if (c->ckpt.save_best && c->ckpt.save_every)
        return refuse(e,
                      "train: --save-best keeps only the best epoch's checkpoint, --save-every %lld every N steps: use "
                      "one of them",
                      (long long)c->ckpt.save_every);
    return 0;
}

// --epochs, once the training set's rows are known (the data's headers): the steps of an epoch
// (whole steps; the last partial batch is dropped) and of the run.
static int rule_epochs(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    if (!p->epochs || !f->data_known) return 0;
    long long per_step = c->batch * p->N, train_rows = f->train_rows;
    p->steps_per_epoch = train_rows / per_step;
    if (p->steps_per_epoch < 1)
        return refuse(e,
                      "train: an epoch of %lld training rows holds no whole step of %lld rows (--batch %lld%s): use a "
                      "smaller --batch",
                      train_rows, per_step, (long long)c->batch, p->N > 1 ? " x --grad-accum" : "");
    p->epoch_rows = p->steps_per_epoch * per_step;
    p->dropped = train_rows - p->epoch_rows;
    p->steps = p->steps_per_epoch * p->epochs;
    if (p->steps > (1LL << 30))
        return refuse(e, "train: %d epochs of %lld steps is more than 2^30 steps: use fewer --epochs", p->epochs,
                      p->steps_per_epoch);
    if (c->observe.timeline_step > p->steps)
        return refuse(e,
                      "train: --timeline-step %lld is past the last step: use 1..%lld, or 0 for the median-time step",
                      (long long)c->observe.timeline_step, p->steps);
    if (warmup_too_long(c, e->seen, p->steps))
        return refuse(e,
                      "train: --warmup-steps %lld is longer than the run's %lld steps (%d epoch%s of %lld), so the "
                      "learning rate would never reach --lr %g: "
                      "use --warmup-steps %lld or fewer, or more --epochs",
                      (long long)c->optim.warmup_steps, p->steps, p->epochs, p->epochs == 1 ? "" : "s",
                      p->steps_per_epoch, c->lr, p->steps);
    return 0;
}

// The outputs on standard output: the file a summary goes to cannot take a pipeline's trace too;
// --metrics' lines go before --json's summary object (JSON lines), never into the text report.
static int rule_outputs(const TrainConfig *c, Err *e) {
    const char *flag[2] = {"trace", "timeline"}, *path[2] = {c->observe.trace, c->observe.timeline};
    if (!strcmp(c->observe.metrics, "-") && !c->json)
        return refuse(e, "train: --metrics - would mix its JSON lines into the text train prints on standard output: "
                         "add --json (the lines, then the summary object), or give a file name");
    if (c->observe.live == LIVE_ON && c->json)
        return refuse(e, "train: --live on rewrites a line of text and --json prints one JSON object: drop one");
    if (seen_set(e->seen, "metrics-every") && !c->observe.metrics[0])
        return refuse(e, "train: --metrics-every %lld thins the lines of --metrics: add --metrics FILE.jsonl, or drop "
                         "it",
                      (long long)c->observe.metrics_every);
    for (int i = 0; i < 2; i++)
        if (!strcmp(path[i], "-"))
            return refuse(
                e,
                "train: --%s - would mix the file into the summary train prints on standard output: give a file name",
                flag[i]);
    return 0;
}

// --save-every, --resume with --verify.
static int rule_checkpoints(const TrainConfig *c, Err *e) {
    if (c->ckpt.save_every && !c->ckpt.save[0])
        return refuse(e, "train: --save-every %lld needs --save DIR (where to write the checkpoints)",
                      (long long)c->ckpt.save_every);
    if (c->ckpt.resume[0] && c->verify)
        return refuse(e, "train: --verify compares step 1 from the initial weights, so it cannot be combined with "
                         "--resume: drop one");
    if (c->ckpt.fresh_state && (!c->ckpt.resume[0] || (!c->ddp.compress[0] && !c->ddp.sync_every)))
        return refuse(e, "train: --fresh-state starts the state of --compress or --sync-every afresh on --resume: "
                         "add --resume DIR and one of them, or drop --fresh-state");
    return 0;
}

// --post-validate (train/postval.c): the runs whose update a copy of the parameters and Adam's moments undoes.
static int rule_post_validate(const TrainConfig *c, const Plan *p, Err *e) {
    if (!c->guard.post_validate) return 0;
    if (p->data.zero)
        return refuse(e, "train: --post-validate with --zero %d: ZeRO keeps the optimizer's state (ZeRO-2, 3: the "
                         "gradients and parameters too) in shards the rollback does not copy: use --zero 0, or drop "
                         "--post-validate", p->data.zero);
    if (p->data.topk > 0)
        return refuse(e, "train: --post-validate with --compress: a step's error-feedback buffers change before its "
                         "update and are not copied, so a failed step cannot be undone: drop one of them");
    if (p->data.sync_every)
        return refuse(e, "train: --post-validate with --sync-every %lld: local SGD's outer step changes the anchor "
                         "and its momentum, which the rollback does not copy: drop one of them",
                      (long long)p->data.sync_every);
    if (c->verify)
        return refuse(e, "train: --post-validate with --verify: --verify compares step 1's loss before its update, "
                         "which --post-validate learns a step later: verify the layout without --post-validate (its "
                         "steps compute the same)");
    return 0;
}

// --timeline-step of a resumed run: a step it trains. (A checkpoint at or past the run's last step
// is ckpt_resume's to refuse, with its own words.)
static int rule_resumed(const TrainConfig *c, const Facts *f, const Plan *p, Err *e) {
    long long at = f->resume_step;
    if (c->observe.timeline_step && at > 0 && at < p->steps && c->observe.timeline_step <= at)
        return refuse(e,
                      "train: --timeline-step %lld was done before the checkpoint (step %lld): use %lld..%lld, or 0 "
                      "for the median-time step",
                      (long long)c->observe.timeline_step, at, at + 1, p->steps);
    return 0;
}

int plan_early(const TrainConfig *c, char *err, size_t errlen) {
    Err e = {err, errlen, NULL};
    if (c->timeout > 0 && c->timeout < WD_MIN_TIMEOUT)
        return refuse(&e,
                      "train: --timeout %g is below the %g s minimum: a healthy run waits that long at times (the "
                      "first step, a checkpoint, "
                      "a loaded machine); use %g or more, or 0 to wait forever",
                      c->timeout, WD_MIN_TIMEOUT, WD_MIN_TIMEOUT);
    return 0;
}

const char *const PLAN_NCCL_UNPROVEN =
    "--transport auto takes mpi: the NCCL transport has not yet run on a machine with two GPUs or more (docs/gpus.md); "
    "--transport nccl asks for it";

int plan_device(const char *cmd, int device, int transport, int tf32, int world, const Hardware *f, int *dev_out,
                int *transport_out, const char **why, char *err, size_t errlen) {
    Err e = {err, errlen, NULL};
    *dev_out = DEVICE_CPU;
    *transport_out = TRANSPORT_MPI;
    *why = "";
    if (device == DEVICE_CPU && transport == TRANSPORT_NCCL)
        return refuse(
            &e,
            "%s: --transport nccl moves GPU buffers, and --device is cpu: drop --transport nccl or use --device cuda",
            cmd);
    if (device == DEVICE_CPU && tf32)
        return refuse(
            &e, "%s: --tf32 applies to cuBLAS on a GPU, and --device is cpu: drop --tf32 or use --device cuda", cmd);
    if (device == DEVICE_CPU || !f || !f->gpus_probed) return 0;
    if (f->no_gpu_rank >= 0) {
        char where[32] = "";
        if (f->no_gpu_rank > 0) snprintf(where, sizeof where, " (rank %d)", f->no_gpu_rank);
        if (device == DEVICE_CUDA) return refuse(&e, "no CUDA device%s: %s", where, f->no_gpu_why);
        if (transport == TRANSPORT_NCCL)
            return refuse(&e, "%s: --transport nccl needs a GPU on every rank, but there is no CUDA device%s: %s", cmd,
                          where, f->no_gpu_why);
        if (tf32)
            return refuse(&e, "%s: --tf32 needs a GPU, but there is no CUDA device%s: %s", cmd, where, f->no_gpu_why);
        return 0;  // auto: the CPU
    }
    if (transport == TRANSPORT_NCCL && f->crowded)
        return refuse(
            &e,
            "%s: --transport nccl needs one GPU per rank, but a node runs %d ranks on %d GPU%s: use --transport mpi "
            "(stages through pinned host memory, so ranks may share a GPU) or at most %d ranks per node",
            cmd, f->crowded_ranks, f->crowded_gpus, f->crowded_gpus == 1 ? "" : "s", f->crowded_gpus);
    *dev_out = DEVICE_CUDA;
    // NCCL would run here (a GPU per rank), but until it has run on a multi-GPU machine auto does not pick it
    *transport_out = transport == TRANSPORT_AUTO ? TRANSPORT_MPI : transport;
    if (transport == TRANSPORT_AUTO && !f->crowded && world > 1) *why = PLAN_NCCL_UNPROVEN;
    return 0;
}

// Device and transport. NCCL matches a pair of ranks' messages in order, without tags; the
// schedules beyond 1F1B (chunks crossing the same pair both ways, deferred weight passes, a file's
// order) are run and tested over MPI only, so they take the MPI transport (host-staged between GPUs).
static int rule_devices(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    if (plan_device("train", c->device, c->transport, c->gemm.tf32, p->world, f->devices, &p->device, &p->transport,
                    &p->transport_why, e->buf, e->n))
        return -1;
    if ((p->data_parallel || p->T > 1) && c->ddp.allreduce == ALLREDUCE_SHM && p->device == DEVICE_CUDA)
        return refuse(e, "train: --allreduce shm sums host memory, and the gradients live on the GPU: use --allreduce "
                         "mpi or ring with --device cuda");
    int tagged = p->V > 1 || p->split || p->schedule == SCHED_FILE;  // a file may send out of order
    if (p->pipelined && tagged && p->transport == TRANSPORT_NCCL) {
        char sn[32];
        return refuse(e,
                      "train: --schedule %s runs over --transport mpi only (NCCL matches messages in order, without "
                      "tags): drop --transport nccl",
                      choice_name(SCHED_NAMES, p->schedule, sn, sizeof sn));
    }
    if (p->pipelined && tagged && p->transport_why[0])  // the lasting reason, whatever NCCL's record
        p->transport_why = "--transport auto takes mpi: the schedule's messages need tags (chunks both ways, deferred "
                           "weight passes, or a file's order), which NCCL lacks";
    if (f->blas_max_threads && c->threads > f->blas_max_threads)  // OpenBLAS would quietly use fewer
        return refuse(
            e, "train: --threads %lld is more than the %d this OpenBLAS was built for: use --threads %d or fewer",
            (long long)c->threads, f->blas_max_threads, f->blas_max_threads);
    return 0;
}

// The held-out rows the accuracy is measured on: the test split whole unless --eval-samples says
// otherwise, else --eval-samples of the training rows (a data set) or of synthetic samples.
static void rule_eval(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    if (!f->data_known) return;
    long long n = f->test_rows ? f->test_rows : f->train_rows ? f->train_rows : LLONG_MAX;
    if (!f->test_rows || seen_set(e->seen, "eval-samples")) n = n < c->eval_samples ? n : c->eval_samples;
    p->eval_rows = n;
}

// --deterministic (base/det.h): the CPU's products and the rows' tree, on the layouts whose every sum
// it puts in the canonical order so far.
static int rule_deterministic(const TrainConfig *c, const Plan *p, Err *e) {
    if (!c->gemm.deterministic) return 0;
    if (p->device == DEVICE_CUDA)
        return refuse(e, "train: --deterministic runs on the CPU (cuBLAS chooses its kernels, and so its order of "
                         "sums, by shape): add --device cpu, or drop --deterministic");
    if (p->T > 1 && DET_SLICES % p->T)
        return refuse(e, "train: --deterministic with --tp %d: the canonical order splits a product's inner "
                         "dimension in %d slices, which --tp %d cannot hold whole: use --tp 2 or 4, or drop "
                         "--deterministic", p->T, DET_SLICES, p->T);
    int n = c->gemm.det_rows, below = 1;
    while (below * 2 <= n) below *= 2;
    if (n != below)
        return refuse(e, "train: --det-rows %d: the canonical chunk is a power of two (the rows' tree pairs "
                         "chunks): use --det-rows %d", n, below);
    if (p->rows % n)
        return refuse(e, "train: --deterministic: a micro-batch of %d rows is finer than the canonical chunk of "
                         "%d rows: use --det-rows %d (on every layout you compare), or fewer micro-batches or "
                         "replicas", p->rows, n, p->rows & -p->rows);
    return 0;
}

// --experts (moe.h): the layer's own values, then the layouts its layer does not run on yet.
static int rule_moe(const TrainConfig *c, const Plan *p, Err *e) {
    long long E = c->moe.experts, k = c->moe.top_k, every = c->moe.every;
    // the options of MoE layers typed for a model without any (--ep N > 1: expert_rules'). As a config key each
    // is a shared base's, as any option that does not apply (degrees_check_flags): configs/fashion.json's
    // capacity factor serves its dense and its MoE runs.
    static const char *const moe_only[] = {"moe-every", "top-k", "capacity-factor", "aux-loss", "alltoall",
                                           "ep-overlap", "ep"};
    for (size_t i = 0; i < sizeof moe_only / sizeof *moe_only && !E; i++)
        if (seen_typed(e->seen, moe_only[i]) && !(!strcmp(moe_only[i], "ep") && c->grid.ep > 1))
            return refuse(e, "train: --%s without --experts: it is an option of MoE layers, and this model has none: "
                             "add --experts E (2 or more) or drop --%s", moe_only[i], moe_only[i]);
    if (!E) return 0;
    if (E < 2)
        return refuse(e, "train: --experts 1: top-k routing over one expert is a dense layer with a router: use "
                         "--experts 0 (dense) or 2 or more");
    if (k > E)
        return refuse(e, "train: --top-k %lld with --experts %lld: a row picks at most E experts: use --top-k %lld or "
                         "fewer", k, E, E);
    if (c->moe.capacity > (double)E)
        return refuse(e, "train: --capacity-factor %g with --experts %lld: at E every expert has room for every row, "
                         "more is absurd: use a value in (0, %lld] (1.25 is Switch's)", c->moe.capacity, E, E);
    if (every >= c->layers)
        return refuse(e, "train: --moe-every %lld with --layers %lld: no hidden layer l >= 1 with l %% %lld == 0 is an "
                         "MoE layer: use --moe-every %lld or less, or more --layers", every, (long long)c->layers,
                      every, c->layers > 1 ? (long long)c->layers - 1 : 1LL);
    if (p->T > 1)
        return refuse(e, "train: --experts with --tp %d: MoE layers are not split over a tensor-parallel group: drop "
                         "--tp", p->T);
    if (p->data.zero >= 2 && p->split && c->grid.ep < 2) {  // (--ep: the layer's own buckets, sent at its I)
        char sched[32];
        return refuse(e, "train: --experts with --zero %d under --schedule %s without --ep: an MoE layer's weight "
                         "gradients are made at I (the input's backward), and ZeRO-%d's working bucket holding it "
                         "holds dense layers whose gradients are made at W: add --ep N (its own buckets), use --zero "
                         "1, or a schedule without split backwards (1f1b, gpipe, interleaved)", p->data.zero,
                      choice_name(SCHED_NAMES, p->schedule, sched, sizeof sched), p->data.zero);
    }
    if (c->gemm.deterministic)
        return refuse(e, "train: --experts with --deterministic: the MoE layers' gradients are not summed in the "
                         "canonical order yet: drop --deterministic");
    return 0;
}

MoeSpec plan_moe(const TrainConfig *c, const Plan *p) {
    return (MoeSpec){.experts = (int)c->moe.experts, .every = (int)c->moe.every, .top_k = (int)c->moe.top_k,
                     .capacity = (float)c->moe.capacity, .aux = (float)c->moe.aux, .group = p->rows};
}

static int rules_run(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    if (rule_length(c, p, e) || pipeline_rules_run(c, p, e) || rule_epochs(c, f, p, e) || rule_outputs(c, e) ||
        rule_checkpoints(c, e) || rule_devices(c, f, p, e) || tensor_rules_facts(c, f, p, e) ||
        data_rules_facts(c, f, p, e) || rule_resumed(c, f, p, e) || rule_moe(c, p, e) ||
        rule_deterministic(c, p, e) || expert_rules(c, p, e) || rule_post_validate(c, p, e))
        return -1;
    rule_eval(c, f, p, e);
    p->synthetic_samples = f->train_rows ? 0 : c->samples ? c->samples : c->batch * p->N;
    p->grad_accum_given = seen_set(e->seen, "grad-accum");
    return 0;
}

// ---- the plan ----

// The layout's rules, then the run's; a fact not known yet holds back only the rules that read it.
int plan_make(const TrainConfig *c, const Degrees *d, const OptionsSeen *seen, const Facts *f, Plan *p, char *err,
              size_t errlen) {
    Err e = {err, errlen, seen};
    memset(p, 0, sizeof *p);
    err[0] = 0;
    p->mode = degrees_mode(d);
    p->world = f->world;
    p->pipelined = (degrees_axes(d) & AXIS_PIPELINE) != 0;
    p->data_parallel = d->dp > 1;
    p->distributed = degrees_world(d) > 1;
    p->T = d->tp;
    p->file = p->pipelined ? f->schedule_file : NULL;
    p->schedule = p->file ? SCHED_FILE : c->pipe.schedule;
    p->inputs = (int)(c->inputs ? c->inputs : c->hidden);  // the default: Linear(H, H) first, as before --inputs
    p->transport_why = "";
    if (plan_early(c, err, errlen) || degrees_check_flags(d, seen, err, errlen) || rule_samples(c, &e) ||
        tensor_rules(c, p, &e) || data_rules(c, d, p, &e) || compress_rules(c, p, &e) ||
        rule_grid(c, d, f->tag_ub, p, &e) || rule_batch(c, p, &e))
        return -1;
    rule_placement(c, f->devices, p);
    return rules_run(c, f, p, &e);
}

int plan_layout(const TrainConfig *c, const Degrees *d, Plan *p, char *err, size_t errlen) {
    static const OptionsSeen none;
    Err e = {err, errlen, &none};
    memset(p, 0, sizeof *p);
    err[0] = 0;
    p->mode = degrees_mode(d);
    p->K = d->pp;
    p->D = d->dp;
    p->T = d->tp;
    p->world = degrees_world(d);
    p->pipelined = (degrees_axes(d) & AXIS_PIPELINE) != 0;
    p->data_parallel = d->dp > 1;
    p->distributed = p->world > 1;
    p->N = 1;
    plan_parts(c, d, p);
    p->schedule = c->pipe.schedule;
    p->inputs = (int)(c->inputs ? c->inputs : c->hidden);
    p->transport_why = "";
    if (tensor_rules(c, p, &e) || pipeline_rules(c, d, 2147483647LL, p, &e) || rule_batch(c, p, &e) ||
        rule_moe(c, p, &e) || expert_rules(c, p, &e) ||  // (the MoE layers' layouts, as train refuses them)
        compress_rules(c, p, &e))
        return -1;
    rule_placement(c, NULL, p);  // (the planner prices the links of the placement train will choose)
    return 0;
}
