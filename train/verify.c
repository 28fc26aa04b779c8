// train/verify.c: --verify. One monolith reference on the CPU for step 1's whole batch, computed twice
// (as given, and with its rows, input features and hidden units all reversed: every sum, forward and
// backward, in another order, which measures how far float rounding alone moves each gradient), the
// bound on what its ReLU ties may move (units within rounding of zero, which another device may
// decide the other way), and the comparison of every local stage against it.
#include <float.h>
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

// Reverses n floats spaced `stride` apart, in place.
static void reverse(float *v, size_t n, size_t stride) {
    for (size_t i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
        float t = v[i * stride];
        v[i * stride] = v[j * stride];
        v[j * stride] = t;
    }
}

// The model with its input features and hidden units in reverse order (an involution, so it maps the
// gradients back too): each layer's weight (out x in, row-major) reversed in both dimensions, its bias
// reversed; the head's weight (classes x H) in its columns only, since the classes keep their order.
// In exact arithmetic the same function; in floats every product's inner sum runs the other way, as
// another BLAS or a GPU would take it, so the forward's rounding moves too. (The rows' features are
// reversed by reverse() on each row of x.)
// An MoE layer (moe.h): the router's weight in its inputs only (the experts keep their order), its
// bias as is, and each expert as a hidden layer.
static size_t reverse_moe(float *v, size_t H, size_t E) {
    for (size_t e = 0; e < E; e++) reverse(v + e * H, H, 1);
    size_t at = E * H + E;
    for (size_t e = 0; e < E; e++, at += H * H + H) {
        for (size_t r = 0; r < H; r++) reverse(v + at + r * H, H, 1);
        for (size_t i = 0; i < H; i++) reverse(v + at + i, H, H);
        reverse(v + at + H * H, H, 1);
    }
    return at;
}

static void reverse_units(float *v, int L, size_t H, size_t D, size_t C, const MoeSpec *moe) {
    size_t at = 0;
    for (int l = 0; l <= L; l++) {
        if (l < L && moe_layer(moe, l)) { at += reverse_moe(v + at, H, (size_t)moe->experts); continue; }
        size_t out = l == L ? C : H, in = l == 0 ? D : H;
        for (size_t r = 0; r < out; r++) reverse(v + at + r * in, in, 1);  // the inputs
        if (l < L) {
            for (size_t i = 0; i < in; i++) reverse(v + at + i, out, in);  // the outputs
            reverse(v + at + out * in, out, 1);                            // their biases
        }
        at += out * in + out;
    }
}

// ReLU ties. A hidden unit whose pre-activation z lies within fp32's worst-case rounding bound of zero,
// |z| <= (K + 2) u sum|terms| (K inputs and the bias, u = 2^-24, any summation order; doubled, since z
// here is itself a float sum), may be on in one order of sums and off in another: another BLAS, a GPU,
// a tensor-parallel split. Whatever it decides moves row r's gradient at that unit, dz[r,j], by all of
// dy[r,j] (the gradient of the unit's output). ties_bound walks the reference's backward a second time
// in absolute values and writes, per parameter, the most the ties can move its gradient together:
//   B_l = |dy_l| at the ties + (on or tie) x A_l,   |d dW_l| <= B_l^T |a_(l-1)|,   |d db_l| <= sum_r B_l,
//   A_(l-1) = B_l |W_l|   (the ties' bound on the gradient reaching the layer below; A_(L-1) = 0).
// The head's gradients do not move (a tie's output is within rounding of zero either way).
typedef struct { float *z, *m, *dy, *dz, *A, *B, *abs_in, *abs_w; } TieScratch;

// z = in W^T + b and m = |in| |W|^T + |b| of layer l, then its ties: tie[] 1 or 0. Returns their count.
static long find_ties(const Stage *ref, int l, const float *in, int rows, TieScratch *t, unsigned char *tie) {
    const Backend *rb = ref->be;
    int H = ref->H, K = stage_fan_in(ref, l);
    for (size_t i = 0; i < (size_t)rows * K; i++) t->abs_in[i] = fabsf(in[i]);
    for (size_t i = 0; i < (size_t)H * K; i++) t->abs_w[i] = fabsf(ref->W[l][i]);
    rb->gemm(0, 1, rows, H, K, 1.0f, in, K, ref->W[l], K, 0.0f, t->z, H);
    rb->gemm(0, 1, rows, H, K, 1.0f, t->abs_in, K, t->abs_w, K, 0.0f, t->m, H);
    double bound = 2.0 * (K + 2) * ldexp(1.0, -24);
    long n = 0;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < H; j++) {
            size_t i = (size_t)r * H + j;
            double z = (double)t->z[i] + ref->b[l][j], m = (double)t->m[i] + fabs(ref->b[l][j]);
            tie[i] = fabs(z) <= bound * m;
            n += tie[i];
        }
    return n;
}

// The bounds into bnd (n_params, the reference's layout), from the forward's stashes and dlogits of
// slot (before any backward). Returns the count of ties. fp32 stashes only.
static long ties_bound(const Stage *ref, int slot, int rows, float *bnd) {
    const Backend *rb = ref->be;
    const Slot *sl = &ref->slots[slot];
    int H = ref->H, L = ref->n_layers, C = ref->C, Kmax = H > ref->D ? H : ref->D;
    size_t rH = (size_t)rows * H;
    TieScratch t = {.z = xcalloc(rH, sizeof(float)), .m = xcalloc(rH, sizeof(float)), .dy = xcalloc(rH, sizeof(float)),
                    .dz = xcalloc(rH, sizeof(float)), .A = xcalloc(rH, sizeof(float)), .B = xcalloc(rH, sizeof(float)),
                    .abs_in = xmalloc(sizeof(float) * (size_t)rows * Kmax),
                    .abs_w = xmalloc(sizeof(float) * (size_t)H * Kmax)};
    unsigned char *tie = xmalloc(rH);
    rb->gemm(0, 0, rows, H, C, 1.0f, (const float *)sl->logits, C, ref->Wh, H, 0.0f, t.dy, H);  // dlogits Wh
    long ties = 0;
    for (int l = L - 1; l >= 0; l--) {
        int K = stage_fan_in(ref, l);
        const float *in = l == 0 ? (const float *)sl->in : (const float *)sl->act[l - 1];
        const float *y = sl->act[l];
        ties += find_ties(ref, l, in, rows, &t, tie);
        for (size_t i = 0; i < rH; i++) {
            t.B[i] = (tie[i] ? fabsf(t.dy[i]) : 0.0f) + (y[i] > 0.0f || tie[i] ? t.A[i] : 0.0f);
            t.dz[i] = y[i] > 0.0f ? t.dy[i] : 0.0f;
        }
        float *bw = bnd + stage_layer_off(ref, l), *bb = bw + stage_weight_len(ref, l);
        for (size_t i = 0; i < (size_t)rows * K; i++) t.abs_in[i] = fabsf(in[i]);
        rb->gemm(1, 0, H, K, rows, 1.0f, t.B, H, t.abs_in, K, 0.0f, bw, K);  // B^T |a_(l-1)|
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < H; j++) bb[j] += t.B[(size_t)r * H + j];
        if (l == 0) break;
        for (size_t i = 0; i < (size_t)H * K; i++) t.abs_w[i] = fabsf(ref->W[l][i]);
        rb->gemm(0, 0, rows, K, H, 1.0f, t.B, H, t.abs_w, K, 0.0f, t.A, K);     // A_(l-1) = B_l |W_l|
        rb->gemm(0, 0, rows, K, H, 1.0f, t.dz, H, ref->W[l], K, 0.0f, t.dy, K);  // dy_(l-1) = dz_l W_l
    }
    free(t.z); free(t.m); free(t.dy); free(t.dz); free(t.A); free(t.B);
    free(t.abs_in); free(t.abs_w); free(tie);
    return ties;
}

// The whole model on the CPU (so on a GPU it checks the device too): its gradients (host) and mean
// loss. reversed: rows, features and units in reverse order (the gradients mapped back). bnd not NULL:
// the ReLU ties' bound on each gradient (ties_bound) into a new *bnd, their count in *ties.
static float *reference_grads(const TrainConfig *c, const Plan *p, const StepState *st, int reversed, double *loss,
                              float **bnd, long *ties) {

    const Backend *rb = &backend_cpu;
    int rows = (int)c->batch * p->N, H = (int)c->hidden, L = (int)c->layers, D = p->inputs;
    MoeSpec moe = plan_moe(c, p);  // routed in groups of a micro-batch's rows, as the run routes them
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
                           .seed = (uint64_t)c->seed,
                           .moe = moe});
    if (c->gemm.deterministic) stage_enable_det(&ref, c->gemm.det_rows);  // the canonical order (rows from 0)
    int slot = stage_slot_acquire(&ref, 0);
    float *x = xmalloc(sizeof(float) * (size_t)rows * D);
    int32_t *y = xmalloc(sizeof(int32_t) * (size_t)rows);
    reference_rows(p, st, reversed && !moe.experts, x, y);  // (MoE: capacity fills in row order)
    if (reversed) {
        for (int r = 0; r < rows; r++) reverse(x + (size_t)r * D, (size_t)D, 1);
        reverse_units(ref.params, L, (size_t)H, (size_t)D, (size_t)c->classes, &moe);  // the cpu backend: host memory
    }
    stage_load_input(&ref, slot, x);
    stage_set_labels(&ref, slot, y);
    stage_forward(&ref, slot);
    if (bnd) {  // from the forward's stashes and dlogits, before the backward reuses anything
        *bnd = xcalloc(ref.n_params, sizeof(float));
        *ties = ref.bf16 || ref.moe ? 0 : ties_bound(&ref, slot, rows, *bnd);  // (dense layers only)
    }
    stage_backward(&ref, slot, NULL, NULL);
    if (ref.det) stage_det_finish(&ref);
    stage_take_loss(&ref);
    float *g = xmalloc(sizeof(float) * ref.n_params);
    rb->to_host(g, ref.grads, sizeof(float) * ref.n_params);
    if (reversed) reverse_units(g, L, (size_t)H, (size_t)D, (size_t)c->classes, &moe);
    *loss = ref.loss.sum / (double)rows;
    free(x); free(y);
    stage_free(&ref);
    return g;
}

// The reference in both row orders (computed once, compared with every local stage), and the shape
// of the model it holds: layers of width H, the first reading D inputs, the head's C classes.
typedef struct {
    float *ga, *gb, *bnd;  // as given, reversed; the ReLU ties' bound on each gradient of ga
    double loss_a, loss_b;
    long ties;             // ReLU ties behind bnd
    size_t H, D, C;
    int layers;
    MoeSpec moe;
} Reference;

// A stage's worst errors, and the tensor furthest past what it is allowed (its code: 2g for global
// layer g's weight, 2g + 1 its bias; the head is layer `layers`; 2 * layers + 2 the loss). tied: an
// error past its allowance that the ReLU ties explain was let pass.
typedef struct { double err, noise, excess; int worst, tied; double worst_err, worst_noise; } Verdict;

// The part of mine's difference from a that the ReLU ties' bound does not explain, element by
// element, relative to a's largest value.
static double unexplained(const float *mine, const float *a, const float *bnd, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)mine[i] - a[i]) - bnd[i]);
        den = fmax(den, fabs((double)a[i]));
    }
    return den > 0 ? num / den : num;
}

static void note(Verdict *v, int code, double e, double resid, double noise, double tol) {
    double allowed = fmax(tol, VERIFY_NOISE_FACTOR * noise), x = e / allowed;
    if (x > 1.0 && resid / allowed <= 1.0) { v->tied = 1; x = resid / allowed; }
    v->err = fmax(v->err, e);
    v->noise = fmax(v->noise, noise);
    if (x <= v->excess && v->worst >= 0) return;
    v->excess = x;
    v->worst = code;
    v->worst_err = e;
    v->worst_noise = noise;
}

// One tensor: n values at offset mo of this stage's gradients against offset ro of the reference's.
static void compare(Verdict *v, int code, const float *mine, const Reference *ref, size_t mo, size_t ro, size_t n,
                    double tol) {
    note(v, code, rel_err(mine + mo, ref->ga + ro, n), unexplained(mine + mo, ref->ga + ro, ref->bnd + ro, n),
         rel_err(ref->gb + ro, ref->ga + ro, n), tol);
}

// Where the reference (the whole model) keeps global layer l (l == layers: the head): after layer
// 0's H x D + H and the layers between, each H x H + H or an MoE layer's moe_layer_len.
static size_t ref_off(const Reference *ref, int l) {
    size_t H = ref->H, D = ref->D, off = 0;
    for (int j = 0; j < l; j++)
        off += j == 0 ? H * D + H : moe_layer(&ref->moe, j) ? moe_layer_len((int)H, ref->moe.experts) : H * H + H;
    return off;
}

// The reference's gradients g of stage s's tensors, in s's own layout: the whole stage's part of the
// monolith's buffer, cut to this rank's shard with --tp or --ep (axes/tensor.c; none: a copy).
static float *reference_shard(const Stage *s, const Reference *ref, const float *g) {
    size_t layers = stage_full_off(s, s->n_layers);
    float *full = xmalloc(sizeof(float) * stage_full_params(s)), *local = xmalloc(sizeof(float) * s->n_params);
    memcpy(full, g + ref_off(ref, s->lo), sizeof(float) * layers);
    if (s->has_head)
        memcpy(full + layers, g + ref_off(ref, ref->layers), sizeof(float) * stage_full_len(s, s->n_layers));
    stage_shard(s, stage_shard_rank(s), full, local);
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
    shard.bnd = reference_shard(s, whole, whole->bnd);
    Verdict v = {0, 0, 0, -1, 0, 0, 0};
    for (int i = 0; i < s->n_layers; i++) {
        size_t mo = stage_layer_off(s, i), w = stage_weight_len(s, i);
        compare(&v, 2 * (s->lo + i), mine, ref, mo, mo, w, tol);
        compare(&v, 2 * (s->lo + i) + 1, mine, ref, mo + w, mo + w, (size_t)stage_out_w(s, i), tol);
    }
    if (s->has_head) {
        size_t mo = stage_layer_off(s, s->n_layers), CH = ref->C * ref->H;
        compare(&v, 2 * ref->layers, mine, ref, mo, mo, CH, tol);
        compare(&v, 2 * ref->layers + 1, mine, ref, mo + CH, mo + CH, ref->C, tol);
        double a = fmax(fabs(ref->loss_a), 1e-30), e = fabs(loss - ref->loss_a) / a;
        note(&v, 2 * ref->layers + 2, e, e, fabs(ref->loss_b - ref->loss_a) / a, tol);
    }
    free(mine); free(shard.ga); free(shard.gb); free(shard.bnd);
    return v;
}

// --deterministic: the most ulps (units in the last place, counted along the floats' order) between a
// gradient of stage s and the reference's.
static double stage_ulps(const Stage *s, const Reference *whole) {
    float *mine = xmalloc(sizeof(float) * s->n_params), *ref = reference_shard(s, whole, whole->ga);
    s->be->to_host(mine, s->grads, sizeof(float) * s->n_params);
    double most = 0;
    for (size_t i = 0; i < s->n_params; i++) {
        int32_t a, b;
        memcpy(&a, &mine[i], sizeof a);
        memcpy(&b, &ref[i], sizeof b);
        int64_t x = a < 0 ? (int64_t)INT32_MIN - a : a, y = b < 0 ? (int64_t)INT32_MIN - b : b;  // ordered as floats
        most = fmax(most, (double)llabs(x - y));
    }
    free(mine); free(ref);
    return most;
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
    v.tol = c->precision == PRECISION_BF16 ? VERIFY_TOL_BF16 : c->gemm.tf32 ? VERIFY_TOL_TF32 : VERIFY_TOL;
    v.err = xcalloc(8 * (size_t)S, sizeof(double));  // err, noise, excess, tied as [4][S]: one reduction
    v.noise = v.err + S;
    v.excess = v.err + 2 * S;
    v.tied = v.err + 3 * S;   // [S] 1: an error the ReLU ties explain was let pass
    v.where = v.err + 4 * S;  // worst tensor's code, error, noise as [3][S]: from the rank of the stage's worst excess
    v.where_err = v.err + 5 * S;
    v.where_noise = v.err + 6 * S;
    for (int k = 0; k < S; k++) v.where[k] = -1;
    for (int k = 0; k < model->n_sync; k++) gradsync_gather_grads(&model->sync[k]);  // ZeRO-1 holds only its shards
    if (fault_due(FAULT_GRAD, 1)) inject_wrong_gradient(&model->local[0]);
    Reference ref = {.H = (size_t)c->hidden, .D = (size_t)p->inputs, .C = (size_t)c->classes, .layers = (int)c->layers,
                     .moe = plan_moe(c, p)};
    ref.ga = reference_grads(c, p, st, 0, &ref.loss_a, &ref.bnd, &ref.ties);
    ref.gb = reference_grads(c, p, st, 1, &ref.loss_b, NULL, NULL);
    v.relu_ties = ref.ties;  // the same on every rank: each computes the whole reference
    for (int k = 0; k < model->n_local; k++) {  // every chunk of every rank against the one reference
        int at = model->vs_of[k];
        Verdict one = verify_stage(&model->local[k], loss, v.tol, &ref);
        v.err[at] = one.err; v.noise[at] = one.noise; v.excess[at] = one.excess; v.tied[at] = one.tied;
        v.where[at] = one.worst; v.where_err[at] = one.worst_err; v.where_noise[at] = one.worst_noise;
        if (c->gemm.deterministic) v.det_ulps = fmax(v.det_ulps, stage_ulps(&model->local[k], &ref));
    }
    v.det = c->gemm.deterministic;
    free(ref.ga); free(ref.gb); free(ref.bnd);
    if (p->distributed) {
        double *mine = xmalloc(sizeof(double) * S);
        memcpy(mine, v.excess, sizeof(double) * S);
        comm_allreduce_max_double(v.err, 4 * S, MPI_COMM_WORLD);
        for (int k = 0; k < S; k++)  // only a rank that holds the stage's worst excess speaks for it
            if (mine[k] < v.excess[k] || v.where[k] < 0) v.where[k] = v.where_err[k] = v.where_noise[k] = -1;
        comm_allreduce_max_double(v.where, 3 * S, MPI_COMM_WORLD);
        comm_allreduce_max_double(&v.det_ulps, 1, MPI_COMM_WORLD);
        free(mine);
    }
    for (int k = 0; k < S; k++) {
        v.worst_err = fmax(v.worst_err, v.err[k]);
        v.worst_excess = fmax(v.worst_excess, v.excess[k]);
    }
    v.failed = !(v.worst_excess <= 1.0) || v.det_ulps > 0;  // --deterministic: any bit off is a bug
    return v;
}

void verify_free(VerifyResult *v) { free(v->err); memset(v, 0, sizeof *v); }
