// train/postval.c: --post-validate, the zero-bubble paper's optimizer post-validation: each rank updates as
// soon as its gradients are complete, its check (a non-finite gradient) rides on the loss's nonblocking
// all-reduce, and a step some rank failed is undone from a copy (a step skipped, bit for bit).
#include <math.h>
#include <string.h>
#include "train/postval.h"
#include "base/util.h"

// Whether this rank's gradients hold a NaN or an Inf (their sum of squares does then, and only then).
static int grads_nonfinite(const Model *model) {
    for (int k = 0; k < model->n_local; k++) {
        const Stage *s = &model->local[k];
        if (!isfinite(s->be->sumsq(s->grads, s->n_params))) return 1;
    }
    return 0;
}

// The copy: each local stage's parameters and (Adam) both moments, allocated once, where they live.
static void keep_state(Run *r) {
    PostVal *pv = &r->pv;
    const TrainConfig *c = r->c;
    int adam = c->optimizer != OPTIM_SGD;
    if (!pv->keep) pv->keep = xcalloc((size_t)r->model.n_local, sizeof(float *));
    for (int k = 0; k < r->model.n_local; k++) {
        Stage *s = &r->model.local[k];
        size_t bytes = s->n_params * sizeof(float);
        if (adam && !s->adam_m) {  // (allocated zero, as stage_optimizer_step's first call would)
            s->adam_m = s->be->alloc(bytes);
            s->adam_v = s->be->alloc(bytes);
        }
        if (!pv->keep[k]) pv->keep[k] = s->be->alloc(bytes * (adam ? 3 : 1));
        s->be->copy(pv->keep[k], s->params, bytes);
        if (adam) {
            s->be->copy(pv->keep[k] + s->n_params, s->adam_m, bytes);
            s->be->copy(pv->keep[k] + 2 * s->n_params, s->adam_v, bytes);
        }
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
    double t = now_sec();
    MPI_CHECK(MPI_Wait(&pv->req, MPI_STATUS_IGNORE));
    pv->wait_s += now_sec() - t;
    pv->step = -1;
    return pv->v;
}

void postval_restore(Run *r) {
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
    }
    r->wire.be->sync();
    pv->rolled_back++;
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
