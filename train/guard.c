// train/guard.c: the guards of a training step, between the backward and the optimizer: --clip-grad's
// global norm (each rank's share of the squares) and its scaling, the divergence rule, the optimizer step
// with the note of an update that left a parameter non-finite, and the 'nangrad' fault (base/fault.h)
// that tests them.
#include <math.h>
#include <stdio.h>
#include "train/guard.h"
#include "axes/zero.h"
#include "base/fault.h"
#include "base/util.h"

// --clip-grad: the squares of the gradients this rank holds, every parameter counted once over the
// world: each local stage's (data parallelism: replica 0's whole copy, or this rank's ZeRO shards;
// tensor parallelism: the parts its group holds whole counted on the group's rank 0 alone).
double guard_grad_sumsq(const Wire *w, Model *model, DetSum *exact) {
    int replicated_too = w->comm.tp_rank == 0;
    double sum = 0;
    for (int k = 0; k < model->n_local; k++) {
        Stage *s = &model->local[k];
        sum += model->n_sync ? gradsync_grad_sumsq(&model->sync[k], replicated_too, exact)
                             : stage_grad_sumsq(s, s->grads, 0, s->n_params, replicated_too, exact);
    }
    return sum;
}

// --clip-grad NORM: every gradient scaled by NORM / (norm + 1e-6) when that is below 1, as PyTorch's
// clip_grad_norm_ does (a non-finite norm scales nothing: the update then reports the non-finite values).
void guard_clip(Run *r, int step) {
    Model *model = &r->model;
    double coef = r->c->guard.clip_grad / (r->m.grad_norm[step] + 1e-6);
    r->m.clip_scale[step] = 1;
    if (!(coef < 1)) return;
    float a = (float)coef;
    r->m.clip_scale[step] = a;
    for (int k = 0; k < model->n_local; k++) {
        Stage *s = &model->local[k];
        if (model->n_sync) gradsync_grad_scale(&model->sync[k], a);
        else s->be->scale(s->grads, a, s->n_params);
    }
}

// A diverged run ends (exit 1) instead of saving and reporting garbage: the loss has stayed above
// --diverge-factor x the run's first loss for DIVERGE_STEPS steps in a row (0 turns the rule off).
// Every rank knows the global loss, so every rank decides alike.
#define DIVERGE_STEPS 3
void guard_divergence(const TrainConfig *c, Progress *g, const Measure *m, int step, double loss) {
    double f = c->guard.diverge_factor, first = m->loss[g->start];
    if (f <= 0 || !(first > 0)) return;
    g->diverged_steps = loss > f * first ? g->diverged_steps + 1 : 0;
    if (g->diverged_steps >= DIVERGE_STEPS)
        run_failed("train: the loss diverged: %.4g at step %d, above %g x the first step's %.4g for %d steps in a row: "
                   "lower --lr "
                   "(now %g), or change the rule with --diverge-factor (0: off)",
                   loss, step + 1, f, first, DIVERGE_STEPS, c->lr);
}

// MICROPP_FAULT kind 'nangrad' (testing): one gradient of the first local stage becomes NaN, as an
// overflow would leave it; the loss of this step stays finite.
void guard_inject_nan(Model *model) {
    Stage *s = &model->local[0];
    float nan = NAN;
    if (!s->grads) {  // ZeRO-2, 3: this rank's gradient shards
        s->be->to_device(model->sync[0].zs->gshard + model->sync[0].shard_total / 2, &nan, sizeof nan);
        return;
    }
    if (model->n_sync && model->sync[0].zero == 1) {  // ZeRO-1: where this rank updates (its part of bucket 0)
        const Bucket *b = &model->sync[0].b[0];
        s->be->to_device(s->grads + b->off + b->shard_off + b->shard_n / 2, &nan, sizeof nan);
        return;
    }
    s->be->to_device(s->grads + s->n_params / 2, &nan, sizeof nan);
}

// The optimizer's step on every local stage, --clip-grad's scaling first when `clip`; `noted`: an update
// that leaves a parameter non-finite is remembered (guard_note_nonfinite).
void guard_optimizer_step(Run *r, int step, int clip, int noted) {
    const TrainConfig *c = r->c;
    Model *model = &r->model;
    float lr = (float)lr_at(c->optim.lr_schedule, c->lr, c->optim.min_lr, c->optim.warmup_steps, step, r->p.steps);
    OptimStep o = {c->optimizer,      lr, (float)c->weight_decay, c->optim.adam_beta1, c->optim.adam_beta2,
                   c->optim.adam_eps, step + 1};
    if (clip) guard_clip(r, step);
    int skip = fault_due_any(FAULT_SKIP, step + 1);  // testing: the synchronous run that leaves the step out
    for (int k = 0; k < model->n_local && !skip; k++) {  // ddp: the stage's sync steps it (ZeRO-1: its shards)
        long bad =
            model->n_sync ? gradsync_optimizer_step(&model->sync[k], &o) : stage_optimizer_step(&model->local[k], &o);
        if (noted) guard_note_nonfinite(r, step, k, bad);
    }
}

// The updates report the first parameter they left non-finite; remember this rank's first, in words.
// One process ends at once; ranks learn it in the next step's loss all-reduce (step_loss), or at the end.
void guard_note_nonfinite(Run *r, int step, int k, long at) {
    Progress *g = &r->progress;
    if (at < 0 || g->bad_update[0]) return;
    char name[96];
    stage_tensor_name(&r->model.local[k], (size_t)at, name, sizeof name);
    snprintf(g->bad_update, sizeof g->bad_update,
             "train: step %d's update left %s of %s %d not finite (NaN or Inf): the gradients "
             "overflowed or the data holds non-finite values; lower --lr (now %g) or check the data",
             step + 1, name, r->p.pipelined ? "stage" : "part", r->model.vs_of[k], r->c->lr);
    if (!r->p.distributed) run_failed("%s", g->bad_update);
}

