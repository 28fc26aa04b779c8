// train/verify.c: --verify. One monolith reference on the CPU for step 1's whole batch, computed twice
// (rows in order and reversed: the same sums taken in another order, which measures how far float
// rounding alone moves each gradient), and the comparison of every local stage against it.
#include <math.h>
#include <string.h>
#include "base/fault.h"
#include "train/verify.h"
#include "base/util.h"

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

// Step 0's rows (all replicas', all accumulation micro-steps'), as the micro-batches saw them;
// reversed: the same rows in reverse order.
static void reference_rows(const Plan *p, const StepState *st, int reversed, float *x, int32_t *y) {
    int H = p->inputs, rows = p->rows * p->M * p->D * p->N;  // (H: the width of an input row)
    for (int k = 0, at = 0; k < p->N; k++)
        for (int d = 0; d < p->D; d++)
            for (int mb = 0; mb < p->M; mb++, at += p->rows) {
                uint64_t first = plan_sample(p, st->step_sample, k, d, mb);
                data_features(st->data, first, p->rows, x + (size_t)at * H);
                data_labels(st->data, first, p->rows, y + at);
            }
    for (int i = 0; reversed && i < rows / 2; i++) {
        int j = rows - 1 - i;
        int32_t t = y[i]; y[i] = y[j]; y[j] = t;
        for (int h = 0; h < H; h++) {
            float v = x[(size_t)i * H + h];
            x[(size_t)i * H + h] = x[(size_t)j * H + h];
            x[(size_t)j * H + h] = v;
        }
    }
}

// The whole model on the CPU (so on a GPU it checks the device too): its gradients (host) and mean loss.
static float *reference_grads(const TrainConfig *c, const Plan *p, const StepState *st, int reversed, double *loss) {
    const Backend *rb = &backend_cpu;
    int rows = (int)c->batch * p->N, H = (int)c->hidden, L = (int)c->layers, D = p->inputs;
    Stage ref;
    stage_init(&ref, rb,
               (StageSpec){.layers = L,
                           .hidden = H,
                           .classes = (int)c->classes,
                           .inputs = D,
                           .lo = 0,
                           .hi = L,
                           .head = 1,
                           .rows = rows,
                           .slots = 1,
                           .bf16 = c->precision == PRECISION_BF16,
                           .seed = (uint64_t)c->seed});
    int slot = stage_slot_acquire(&ref, 0);
    float *x = xmalloc(sizeof(float) * (size_t)rows * D);
    int32_t *y = xmalloc(sizeof(int32_t) * (size_t)rows);
    reference_rows(p, st, reversed, x, y);
    stage_load_input(&ref, slot, x);
    stage_set_labels(&ref, slot, y);
    stage_forward(&ref, slot);
    stage_backward(&ref, slot, NULL, NULL);
    stage_take_loss(&ref);
    float *g = xmalloc(sizeof(float) * ref.n_params);
    rb->to_host(g, ref.grads, sizeof(float) * ref.n_params);
    *loss = ref.loss_sum / (double)rows;
    free(x); free(y);
    stage_free(&ref);
    return g;
}

// The reference in both row orders (computed once, compared with every local stage), and the shape
// of the model it holds: layers of width H, the first reading D inputs, the head's C classes.
typedef struct {
    float *ga, *gb;
    double loss_a, loss_b;
    size_t H, D, C;
    int layers;
} Reference;

typedef struct { double err, noise, excess; } Verdict;

// One tensor: n values at offset mo of this stage's gradients against offset ro of the reference's.
static void compare(Verdict *v, const float *mine, const Reference *ref, size_t mo, size_t ro, size_t n, double tol) {
    double e = rel_err(mine + mo, ref->ga + ro, n), noise = rel_err(ref->gb + ro, ref->ga + ro, n);
    v->err = fmax(v->err, e);
    v->noise = fmax(v->noise, noise);
    v->excess = fmax(v->excess, e / fmax(tol, VERIFY_NOISE_FACTOR * noise));
}

// Where the reference (the whole model) keeps global layer l (l == layers: the head): after layer
// 0's H x D + H and l - 1 layers of H x H + H.
static size_t ref_off(const Reference *ref, int l) {
    size_t H = ref->H, D = ref->D;
    return l == 0 ? 0 : H * D + H + (size_t)(l - 1) * (H * H + H);
}

// The reference's gradients g of stage s's tensors, in s's own layout: the whole stage's part of the
// monolith's buffer, cut to this rank's shard with --tp (shard.c; T = 1: a copy).
static float *reference_shard(const Stage *s, const Reference *ref, const float *g) {
    size_t layers = stage_full_off(s, s->n_layers);
    float *full = xmalloc(sizeof(float) * stage_full_params(s)), *local = xmalloc(sizeof(float) * s->n_params);
    memcpy(full, g + ref_off(ref, s->lo), sizeof(float) * layers);
    if (s->has_head)
        memcpy(full + layers, g + ref_off(ref, ref->layers), sizeof(float) * stage_full_len(s, s->n_layers));
    stage_shard(s, s->tp_rank, full, local);
    free(full);
    return local;
}

// Compares stage s's gradients (and, on the head's stage, the loss) with the monolith's. A tensor
// passes when its error is within tol, or within a few times what reordering the reference's own
// sums moves it: a gradient that is a near-cancelling sum over many rows (the head's at
// initialisation) is only as exact as float rounding lets it be. With --tp each rank checks its shard.
static Verdict verify_stage(const Stage *s, double loss, double tol, const Reference *whole) {
    float *mine = xmalloc(sizeof(float) * s->n_params);
    s->be->to_host(mine, s->grads, sizeof(float) * s->n_params);
    Reference shard = *whole, *ref = &shard;  // the reference in this stage's layout: offsets as mine
    shard.ga = reference_shard(s, whole, whole->ga);
    shard.gb = reference_shard(s, whole, whole->gb);
    Verdict v = {0, 0, 0};
    for (int i = 0; i < s->n_layers; i++) {
        size_t mo = stage_layer_off(s, i), w = stage_weight_len(s, i);
        compare(&v, mine, ref, mo, mo, w, tol);
        compare(&v, mine, ref, mo + w, mo + w, (size_t)stage_out_w(s, i), tol);
    }
    if (s->has_head) {
        size_t mo = stage_layer_off(s, s->n_layers), CH = ref->C * ref->H;
        compare(&v, mine, ref, mo, mo, CH, tol);
        compare(&v, mine, ref, mo + CH, mo + CH, ref->C, tol);
        double e = fabs(loss - ref->loss_a) / fmax(fabs(ref->loss_a), 1e-30),
               n = fabs(ref->loss_b - ref->loss_a) / fmax(fabs(ref->loss_a), 1e-30);
        v.err = fmax(v.err, e); v.noise = fmax(v.noise, n);
        v.excess = fmax(v.excess, e / fmax(tol, VERIFY_NOISE_FACTOR * n));
    }
    free(mine); free(shard.ga); free(shard.gb);
    return v;
}

// MICROPP_FAULT kind 'grad' (testing): the largest gradient of the first local stage off by 0.1%,
// as a bug would leave it.
static void inject_wrong_gradient(Stage *s) {
    size_t n = s->n_params, at = 0;
    float *g = xmalloc(sizeof(float) * n);
    s->be->to_host(g, s->grads, sizeof(float) * n);
    for (size_t i = 1; i < n; i++) if (fabsf(g[i]) > fabsf(g[at])) at = i;
    g[at] *= 1.001f;
    s->be->to_device(s->grads, g, sizeof(float) * n);
    free(g);
}

VerifyResult verify_step(const TrainConfig *c, const Plan *p, Model *model, const StepState *st, double loss) {
    int S = p->S;
    VerifyResult v = {.S = S};
    // bf16: the reference runs on the CPU backend, whose products train.c set to bf16 as well
    v.tol = c->precision == PRECISION_BF16 ? VERIFY_TOL_BF16 : c->tf32 ? VERIFY_TOL_TF32 : VERIFY_TOL;
    v.err = xcalloc(3 * (size_t)S, sizeof(double));  // err, noise, excess as [3][S]: one reduction
    v.noise = v.err + S;
    v.excess = v.err + 2 * S;
    for (int k = 0; k < model->n_sync; k++) gradsync_gather_grads(&model->sync[k]);  // ZeRO-1 holds only its shards
    if (fault_due(FAULT_GRAD, 1)) inject_wrong_gradient(&model->local[0]);
    Reference ref = {.H = (size_t)c->hidden, .D = (size_t)p->inputs, .C = (size_t)c->classes, .layers = (int)c->layers};
    ref.ga = reference_grads(c, p, st, 0, &ref.loss_a);
    ref.gb = reference_grads(c, p, st, 1, &ref.loss_b);
    for (int k = 0; k < model->n_local; k++) {  // every chunk of every rank against the one reference
        int at = model->vs_of[k];
        Verdict one = verify_stage(&model->local[k], loss, v.tol, &ref);
        v.err[at] = one.err; v.noise[at] = one.noise; v.excess[at] = one.excess;
    }
    free(ref.ga); free(ref.gb);
    if (p->distributed) comm_allreduce_max_double(v.err, 3 * S, MPI_COMM_WORLD);
    for (int k = 0; k < S; k++) {
        v.worst_err = fmax(v.worst_err, v.err[k]);
        v.worst_excess = fmax(v.worst_excess, v.excess[k]);
    }
    v.failed = !(v.worst_excess <= 1.0);
    return v;
}

void verify_free(VerifyResult *v) { free(v->err); memset(v, 0, sizeof *v); }
