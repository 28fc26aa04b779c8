// train/postval.c: a step's values agreed over the ranks: the loss all-reduce of a synchronous step, and
// --post-validate's, the zero-bubble paper's optimizer post-validation: each rank updates as soon as its
// gradients are complete, its check (a non-finite gradient) rides on the loss's nonblocking all-reduce,
// and a step some rank failed is undone from a copy (a step skipped, bit for bit).
#include <math.h>
#include <string.h>
#include "train/postval.h"
#include "base/det.h"
#include "base/fault.h"
#include "base/util.h"

// The loss lives on the head's stage; every rank learns the global batch's (and so decides alike on NaN).
// The same all-reduce carries how many ranks' last update left a parameter non-finite (guard_note_nonfinite):
// if any, every rank ends with the lowest such rank's message (exit 1); and with --clip-grad each rank's
// sum of the squares of its gradients (guard_grad_sumsq), whose total is the global norm's square.
// --experts: the MoE layers' counters of the step ride on it too (E + 3 more: load, dropped, assigned, aux).
static void moe_step_local(const Model *model, double *v, int E) {
    for (int k = 0; k < model->n_local; k++) {
        Moe *moe = model->local[k].moe;
        if (!moe) continue;
        for (int e = 0; e < E; e++) v[e] += (double)moe->stats.load[e];
        v[E] += (double)moe->stats.dropped;
        v[E + 1] += (double)moe->stats.assigned;
        v[E + 2] += moe->stats.aux_wsum * model->local[k].grad_scale;  // (a group's rows' share of the step)
        moe_stats_reset(moe);
    }
}

// This rank's part of the step's values, n of them and one more (--post-validate's flag, last). --deterministic
// (exact, --clip-grad): the squares' exact sum rides at the end (det_sum_export), and the loss's rows are
// multiples of 2^-32 (det_loss_row): the all-reduce adds them exactly, in no order that matters.
static int exact_at(const Measure *m) { return 5 + (m->moe.E ? m->moe.E + 3 : 0); }

double *step_values(const Model *model, const Progress *g, Measure *m, int step, double sumsq, DetSum *exact,
                    int *n_out) {
    int E = m->moe.E, at = exact_at(m), n = at + (exact ? DET_SUM_LIMBS + 1 : 0);
    double *v = xcalloc((size_t)n + 1, sizeof(double));
    *n_out = n;
    v[3] = g->bad_update[0] ? 1 : 0;
    v[4] = sumsq;
    if (E) moe_step_local(model, v + 5, E);
    if (exact) det_sum_export(exact, v + at);
    if (model->head) {
        v[0] = model->head->loss.sum;
        v[1] = model->head->loss.rows;
        v[2] = model->head->loss.correct;
    }
    if (fault_due(FAULT_NAN, step + 1)) v[0] = NAN;  // testing: this rank's contribution goes bad
    return v;
}

// The step's loss (and norm, MoE counters) from the values summed over the ranks.
double step_loss_taken(Measure *m, int step, const double *v, int exact) {
    m->grad_norm[step] = sqrt(exact ? det_sum_value(v + exact_at(m)) : v[4]);
    if (m->moe.E) measure_moe_keep(m, v + 5, step);
    m->loss[step] = v[0] / v[1];
    return m->loss[step];
}

double step_loss(const Plan *p, const Model *model, const Progress *g, Measure *m, int step, double sumsq,
                 DetSum *exact) {
    int n;
    double *v = step_values(model, g, m, step, sumsq, exact, &n), t0 = m->step_start[step];
    if (p->distributed) {
        wd_phase("the loss all-reduce", step + 1);
        double ta = now_sec();
        comm_allreduce_sum_double(v, n, MPI_COMM_WORLD);
        measure_record(m, step, EV_ALLREDUCE, -1, 0, ta - t0, now_sec() - t0);
        if (v[3] > 0) agree_on_failure(g->bad_update);
    }
    double loss = step_loss_taken(m, step, v, exact != NULL);
    free(v);
    return loss;
}


// Whether this rank's gradients hold a NaN or an Inf (their sum of squares does then, and only then).
static int grads_nonfinite(const Model *model) {
    for (int k = 0; k < model->n_local; k++) {
        const Stage *s = &model->local[k];
        if (!isfinite(s->be->sumsq(s->grads, s->n_params))) return 1;
    }
    return 0;
}

// The copy: each local stage's parameters, (Adam) both moments and (--clip-grad) the step's gradients,
// allocated once, where they live.
static void keep_state(Run *r) {
    PostVal *pv = &r->pv;
    const TrainConfig *c = r->c;
    int adam = c->optimizer != OPTIM_SGD, grads = c->guard.clip_grad > 0;
    pv->copies = 1 + 2 * adam + grads;
    if (!pv->keep) pv->keep = xcalloc((size_t)r->model.n_local, sizeof(float *));
    for (int k = 0; k < r->model.n_local; k++) {
        Stage *s = &r->model.local[k];
        size_t bytes = s->n_params * sizeof(float);
        if (adam && !s->adam_m) {  // (allocated zero, as stage_optimizer_step's first call would)
            s->adam_m = s->be->alloc(bytes);
            s->adam_v = s->be->alloc(bytes);
        }
        if (!pv->keep[k]) pv->keep[k] = s->be->alloc(bytes * (size_t)pv->copies);
        s->be->copy(pv->keep[k], s->params, bytes);
        if (adam) {
            s->be->copy(pv->keep[k] + s->n_params, s->adam_m, bytes);
            s->be->copy(pv->keep[k] + 2 * s->n_params, s->adam_v, bytes);
        }
        if (grads) s->be->copy(pv->keep[k] + (size_t)(pv->copies - 1) * s->n_params, s->grads, bytes);
    }
}

int postval_begin(Run *r, int step, double *v, int n) {
    PostVal *pv = &r->pv;
    CHECK(pv->step < 0, "post-validation: step %d's check is still in flight at step %d", pv->step + 1, step + 1);
    int bad = grads_nonfinite(&r->model);
    v[n - 1] = bad;
    free(pv->v);
    pv->v = v;
    pv->n = n;
    pv->step = step;
    pv->req = MPI_REQUEST_NULL;
    if (r->p.distributed) MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &pv->req));
    keep_state(r);
    return bad;
}

const double *postval_wait(Run *r) {
    PostVal *pv = &r->pv;
    CHECK(pv->step >= 0, "post-validation: no check in flight");
    wd_wait_all(&pv->req, MPI_COMM_WORLD, "the post-validation all-reduce");
    pv->step = -1;
    return pv->v;
}

void postval_restore(Run *r, int grads) {
    PostVal *pv = &r->pv;
    int adam = r->c->optimizer != OPTIM_SGD;
    for (int k = 0; k < r->model.n_local; k++) {
        Stage *s = &r->model.local[k];
        size_t bytes = s->n_params * sizeof(float);
        s->be->copy(s->params, pv->keep[k], bytes);
        if (adam) {
            s->be->copy(s->adam_m, pv->keep[k] + s->n_params, bytes);
            s->be->copy(s->adam_v, pv->keep[k] + 2 * s->n_params, bytes);
        }
        if (grads) s->be->copy(s->grads, pv->keep[k] + (size_t)(pv->copies - 1) * s->n_params, bytes);
    }
    r->wire.be->sync();
}

void postval_free(Run *r) {
    PostVal *pv = &r->pv;
    for (int k = 0; pv->keep && k < r->model.n_local; k++)
        if (pv->keep[k]) r->model.local[k].be->free(pv->keep[k]);
    free(pv->keep);
    free(pv->v);
    memset(pv, 0, sizeof *pv);
    pv->step = -1;
}
