// train/plan_sizes.c: what one virtual stage of a Plan holds on a rank: its parameters (with --tp,
// this rank's shards of model.h's column/row pairs), its largest bucket, its shm windows, and the
// floats its tensor-parallel all-reduces carry per micro-batch. The memory reckoning, the placement
// and all-reduce rules and the planner read them.
#include "model.h"
#include "train/plan.h"
#include "axes/zero.h"  // ZERO_BUFS

// Floats of local layer i of virtual stage vs on one rank (i == its layers: the head).
static double layer_floats(const TrainConfig *c, const Plan *p, int vs, int i) {
    double H = (double)c->hidden, C = (double)c->classes, fan = i == 0 && p->lo[vs] == 0 ? (double)p->inputs : H;
    int layers = plan_layers(p, vs), T = p->T > 1 ? p->T : 1, kind = i < layers ? tp_layer_kind(T, layers, i) : -1;
    double h = H / T;
    if (i == layers) return C * H + C;
    // model.h's pairs: column H/T outputs, row H/T inputs (bias whole), or whole
    return kind == TP_COL ? h * fan + h : kind == TP_ROW ? H * h + H : H * fan + H;
}

double plan_vstage_params(const TrainConfig *c, const Plan *p, int vs) {
    int layers = plan_layers(p, vs), head = vs == p->S - 1;
    double n = 0;
    for (int i = 0; i < layers + head; i++) n += layer_floats(c, p, vs, i);
    return n;
}

double plan_largest_bucket(const TrainConfig *c, const Plan *p, int vs) {
    double cap = p->data.bucket_mb * 1024 * 1024, most = 0, floats = 0;
    int n = plan_layers(p, vs), head = vs == p->S - 1;
    for (int j = n + head - 1; j >= 0; j--) {
        floats += layer_floats(c, p, vs, j);
        if (floats * sizeof(float) >= cap || j == 0) {
            most = floats > most ? floats : most;
            floats = 0;
        }
    }
    return most;
}

double plan_vstage_shm_floats(const TrainConfig *c, const Plan *p, int vs) {
    int zero = p->data.zero;
    double params = plan_vstage_params(c, p, vs), work = ZERO_BUFS * plan_largest_bucket(c, p, vs);
    return zero >= 3 ? 2 * work : zero == 2 ? params + work : 2 * params;
}

double plan_vstage_tp_floats(const TrainConfig *c, const Plan *p, int vs) {
    double H = (double)c->hidden, in = p->lo[vs] == 0 ? (double)p->inputs : H, rows = p->rows, n = 0;
    int layers = plan_layers(p, vs), ckpt = p->pipe.ckpt;
    for (int i = 0; i < layers && p->T > 1; i++) {
        int kind = tp_layer_kind(p->T, layers, i);
        if (kind == TP_ROW) n += rows * H * (ckpt ? 2 : 1);  // the forward's (and the recompute's) sum
        // the backward's input gradient; the model's first layer computes none
        if (kind == TP_COL && !(i == 0 && p->lo[vs] == 0)) n += rows * (i == 0 ? in : H);
    }
    return n;
}
