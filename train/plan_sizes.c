// train/plan_sizes.c: what one virtual stage of a Plan holds on a rank: its parameters (with --tp,
// this rank's shards of model.h's column/row pairs) and the floats its tensor-parallel all-reduces
// carry per micro-batch. The memory reckoning, the placement rule and the planner read them.
#include "model.h"
#include "train/plan.h"

double plan_vstage_params(const TrainConfig *c, const Plan *p, int vs) {
    double H = (double)c->hidden, C = (double)c->classes, in = p->lo[vs] == 0 ? (double)p->inputs : H;
    int layers = plan_layers(p, vs), head = vs == p->S - 1, T = p->T > 1 ? p->T : 1;
    double n = head ? C * H + C : 0, h = H / T;
    for (int i = 0; i < layers; i++) {  // model.h's pairs: column H/T outputs, row H/T inputs (bias whole), or whole
        int kind = tp_layer_kind(T, layers, i);
        double fan = i == 0 ? in : H;
        n += kind == TP_COL ? h * fan + h : kind == TP_ROW ? H * h + H : H * fan + H;
    }
    return n;
}

double plan_vstage_tp_floats(const TrainConfig *c, const Plan *p, int vs) {
    double H = (double)c->hidden, in = p->lo[vs] == 0 ? (double)p->inputs : H, rows = p->rows, n = 0;
    int layers = plan_layers(p, vs), ckpt = c->checkpoint_activations && p->pipelined;
    for (int i = 0; i < layers && p->T > 1; i++) {
        int kind = tp_layer_kind(p->T, layers, i);
        if (kind == TP_ROW) n += rows * H * (ckpt ? 2 : 1);  // the forward's (and the recompute's) sum
        // the backward's input gradient; the model's first layer computes none
        if (kind == TP_COL && !(i == 0 && p->lo[vs] == 0)) n += rows * (i == 0 ? in : H);
    }
    return n;
}
