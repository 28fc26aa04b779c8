// tests/unit_tp.c: tensor parallelism's layer math on the CPU, in one process: T threads, each
// holding one rank's shard of a stage (Megatron pairs, an odd layer, an input layer of another
// width, the head), joined by an all-reduce over shared memory, compute the same loss, input
// gradient and (unsharded) weight gradients as the whole stage; the shard layout round-trips.
#include <pthread.h>
#include <stdlib.h>
#include "unit.h"
#include "base/data.h"
#include "model.h"
#include "axes/tensor.h"  // the whole tensors and the shards
#include "base/ops.h"

static const Backend *be = &backend_cpu;
#define MAXT 4

// The all-reduce of T threads: each posts its buffer, then (after a barrier) sums every buffer in
// rank order into its own scratch, and after another barrier copies it back: every rank ends with
// the same bits, as comms.c's collectives give.
typedef struct {
    int T;
    pthread_barrier_t bar;
    float *buf[MAXT];
    long calls[MAXT];
} Group;
typedef struct { Group *g; int t; } Member;

static void group_allreduce(void *ctx, float *x, size_t n) {
    Member *m = ctx;
    Group *g = m->g;
    g->buf[m->t] = x;
    g->calls[m->t]++;
    pthread_barrier_wait(&g->bar);
    float *sum = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        float a = 0;
        for (int r = 0; r < g->T; r++) a += g->buf[r][i];
        sum[i] = a;
    }
    pthread_barrier_wait(&g->bar);
    memcpy(x, sum, sizeof(float) * n);
    free(sum);
    pthread_barrier_wait(&g->bar);
}

typedef struct {
    StageSpec spec;
    Member m;
    int split;          // run the backward as I then W
    const float *x, *dout;
    const int32_t *y;
    float *din;          // [rows, D] the input gradient
    double loss;
    Stage s;
} Job;

static void *run_rank(void *arg) {
    Job *j = arg;
    Stage *s = &j->s;
    stage_init(s, be, j->spec);
    s->hooks.tp_allreduce = group_allreduce;
    s->hooks.tp_ctx = &j->m;
    if (j->split) stage_enable_split(s);
    stage_zero_grads(s);
    for (int mb = 0; mb < 2; mb++) {  // two micro-batches: the gradients add up
        int slot = stage_slot_acquire(s, mb);
        stage_load_input(s, slot, j->x + (size_t)mb * s->rows * s->D);
        if (s->has_head) stage_set_labels(s, slot, j->y + mb * s->rows);
        stage_forward(s, slot);
        const float *dout = s->has_head ? NULL : j->dout + (size_t)mb * s->rows * s->H;
        float *din = j->din + (size_t)mb * s->rows * s->D;
        if (j->split) { stage_backward_input(s, slot, dout, din); stage_backward_weight(s, slot); }
        else stage_backward(s, slot, dout, din);
    }
    j->loss = s->loss.sum;
    return NULL;
}

// One configuration: the whole stage (T = 1) against T threads of shards.
static void check(const char *what, int T, StageSpec spec, int split) {
    int rows = spec.rows, D = spec.lo == 0 && spec.inputs ? spec.inputs : spec.hidden, H = spec.hidden;
    float *x = malloc(sizeof(float) * 2 * rows * D), *dout = malloc(sizeof(float) * 2 * rows * H);
    int32_t *y = malloc(sizeof(int32_t) * 2 * rows);
    for (int i = 0; i < 2 * rows * D; i++) x[i] = 2.0f * rng_uniform(11, (uint64_t)i) - 1.0f;
    for (int i = 0; i < 2 * rows * H; i++) dout[i] = 0.01f * (2.0f * rng_uniform(12, (uint64_t)i) - 1.0f);
    for (int i = 0; i < 2 * rows; i++) y[i] = (int32_t)(rng_uniform(13, (uint64_t)i) * spec.classes);
    Group one = {.T = 1}, g = {.T = T};
    pthread_barrier_init(&one.bar, NULL, 1);
    pthread_barrier_init(&g.bar, NULL, (unsigned)T);
    Job ref = {.spec = spec, .m = {&one, 0}, .split = split, .x = x, .dout = dout, .y = y};
    ref.din = calloc((size_t)2 * rows * D, sizeof(float));
    run_rank(&ref);
    Job jobs[MAXT];
    pthread_t th[MAXT];
    for (int t = 0; t < T; t++) {
        jobs[t] = ref;
        jobs[t].spec.tp = T;
        jobs[t].spec.tp_rank = t;
        jobs[t].m = (Member){&g, t};
        jobs[t].din = calloc((size_t)2 * rows * D, sizeof(float));
        pthread_create(&th[t], NULL, run_rank, &jobs[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    size_t nf = stage_full_params(&jobs[0].s);
    float *full = calloc(nf, sizeof(float));
    for (int t = 0; t < T; t++) stage_unshard(&jobs[t].s, t, jobs[t].s.grads, full);
    double worst = 0;
    for (size_t i = 0; i < nf; i++) {
        double d = fabs((double)full[i] - ref.s.grads[i]) / (1e-6 + fabs((double)ref.s.grads[i]));
        if (d > worst && fabs((double)full[i] - ref.s.grads[i]) > 1e-7) worst = d;
    }
    int same_din = 1;
    long miss = close_all(jobs[0].din, ref.din, 2L * rows * D, 1e-6, 1e-4);
    int din_ok = miss < 0;
    for (int t = 1; t < T; t++) same_din &= !memcmp(jobs[t].din, jobs[0].din, sizeof(float) * 2 * rows * D);
    char name[200];
    snprintf(name, sizeof name, "tp/%s: T=%d shards = the whole stage (loss, unsharded gradients, input gradient)", what,
             T);
    EXPECT(name, nf == ref.s.n_params && worst < 1e-4 && din_ok && same_din &&
                     fabs(jobs[0].loss - ref.loss) <= 1e-5 * fabs(ref.loss) + 1e-9,
           "gradients worst %.3g, input gradient %s at %ld, ranks' input gradients %s, loss %.9g vs %.9g", worst,
           din_ok ? "ok" : "differs", miss, same_din ? "equal" : "differ", jobs[0].loss, ref.loss);
    // The all-reduces of a micro-batch: one per row-parallel layer per forward (and its recompute),
    // one per column-parallel layer per backward (din is asked for here, so layer 0's too).
    long want = 0;
    Stage *s0 = &jobs[0].s;
    for (int i = 0; i < s0->n_layers; i++)
        want += s0->kind[i] == TP_ROW ? (spec.ckpt ? 2 : 1) : s0->kind[i] == TP_COL ? 1 : 0;
    snprintf(name, sizeof name, "tp/%s: T=%d one all-reduce per row-parallel forward and column-parallel backward", what,
             T);
    EXPECT(name, g.calls[0] == 2 * want && g.calls[T - 1] == g.calls[0], "%ld calls on rank 0, %ld expected", g.calls[0],
           2 * want);
    for (int t = 0; t < T; t++) { stage_free(&jobs[t].s); free(jobs[t].din); }
    stage_free(&ref.s);
    free(ref.din); free(full); free(x); free(dout); free(y);
    pthread_barrier_destroy(&one.bar);
    pthread_barrier_destroy(&g.bar);
}

// The layout: init's shards unsharded are the whole stage's weights (every rank's part exactly once),
// and shard(unshard(x)) is x; the kinds of a stage's layers.
static void test_layout(void) {
    StageSpec spec = {.layers = 5, .hidden = 8, .classes = 3, .inputs = 6, .lo = 0, .hi = 5, .head = 1, .rows = 2,
                      .slots = 1, .seed = 5};
    Stage whole, part[4];
    stage_init(&whole, be, spec);
    size_t nf = stage_full_params(&whole);
    float *full = calloc(nf, sizeof(float));
    for (int t = 0; t < 4; t++) {
        StageSpec ps = spec;
        ps.tp = 4; ps.tp_rank = t;
        stage_init(&part[t], be, ps);
        stage_unshard(&part[t], t, part[t].params, full);
    }
    EXPECT("tp/init: the 4 ranks' shards unsharded are the monolith's weights", nf == whole.n_params &&
           !memcmp(full, whole.params, sizeof(float) * nf), "differ");
    float *back = calloc(part[2].n_params, sizeof(float));
    stage_shard(&part[2], 2, full, back);
    EXPECT("tp/layout: shard(unshard) is the identity", !memcmp(back, part[2].params, sizeof(float) * part[2].n_params),
           "differs");
    int kinds[5];
    for (int i = 0; i < 5; i++) kinds[i] = part[0].kind[i];
    EXPECT("tp/layout: 5 layers -> column, row, column, row, whole", kinds[0] == TP_COL && kinds[1] == TP_ROW &&
           kinds[2] == TP_COL && kinds[3] == TP_ROW && kinds[4] == TP_FULL, "%d %d %d %d %d", kinds[0], kinds[1],
           kinds[2], kinds[3], kinds[4]);
    // 5 x (8 x 6 ...) : column layer 0 holds 2 x 6 + 2, row layer 1 8 x 2 + 8, full layer 4 8 x 8 + 8, head 3 x 8 + 3
    size_t want = (2 * 6 + 2) + (8 * 2 + 8) + (2 * 8 + 2) + (8 * 2 + 8) + (8 * 8 + 8) + (3 * 8 + 3);
    EXPECT("tp/layout: a rank's parameters", part[1].n_params == want, "%zu, want %zu", part[1].n_params, want);
    char name[64];
    stage_tensor_name(&part[1], 2 * 6 + 2 + 2 * 1 + 1, name, sizeof name);  // layer 1 weight row 1, column 1 of rank 1
    EXPECT("tp/layout: a row-parallel element's name is its index in the whole tensor",
           !strcmp(name, "layers.1.weight[11]"), "%s", name);
    stage_tensor_name(&part[3], 3, name, sizeof name);  // layer 0 weight row 0 of rank 3's rows 6..7, column 3
    EXPECT("tp/layout: a column-parallel element's name", !strcmp(name, "layers.0.weight[39]"), "%s", name);
    for (int t = 0; t < 4; t++) stage_free(&part[t]);
    stage_free(&whole);
    free(full); free(back);
}

int main(void) {
    blas_set_threads(1);
    test_layout();
    StageSpec base = {.layers = 8, .hidden = 16, .classes = 3, .rows = 4, .slots = 2, .seed = 3};
    StageSpec s = base;
    s.lo = 0; s.hi = 4; s.head = 1; s.inputs = 10;
    check("a whole model of 4 layers, inputs 10", 2, s, 0);
    check("a whole model of 4 layers, inputs 10", 4, s, 0);
    s.hi = 3;
    check("3 layers (the odd one whole), inputs 10, head", 2, s, 0);
    s = base; s.lo = 3; s.hi = 8; s.head = 0;
    check("a middle stage of 5 layers", 4, s, 0);
    s.ckpt = 1;
    check("a middle stage of 5 layers, checkpointing", 2, s, 0);
    s = base; s.lo = 2; s.hi = 8; s.head = 1;
    check("a last stage of 6 layers, split backward (I then W)", 2, s, 1);
    s.ckpt = 1;
    check("a last stage of 6 layers, split backward, checkpointing", 4, s, 1);
    s = base; s.lo = 0; s.hi = 1; s.head = 0; s.inputs = 5;
    check("one layer (whole on every rank)", 2, s, 0);
    return unit_failures ? 1 : 0;
}
