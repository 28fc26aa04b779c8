// tests/unit_core.c: the CPU backend against naive loops, gradients against finite differences,
// Adam/SGD against hand-computed values, init independent of the split, .npy round trip, and
// the schedule simulator (deadlock-freedom sweep, bubble formula, peak in-flight).
#include <stdlib.h>
#include "unit.h"
#include "base/data.h"
#include "model.h"
#include "base/ops.h"
#include "base/util.h"
#include "schedule.h"
#include "sim_helpers.h"
#include "train/executor.h"

static const Backend *be = &backend_cpu;

static void fill_rand(float *x, long n, uint64_t key) {
    for (long i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(key, (uint64_t)i) - 1.0f;
}

static void test_gemm(void) {
    int M = 7, N = 5, K = 9;
    for (int ta = 0; ta < 2; ta++) for (int tb = 0; tb < 2; tb++) {
        float A[63], B[45], C[35], R[35];
        fill_rand(A, M * K, 1); fill_rand(B, K * N, 2); fill_rand(C, M * N, 3);
        memcpy(R, C, sizeof C);
        int lda = ta ? M : K, ldb = tb ? K : N;
        for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            R[i * N + j] = (float)(0.5 * s + 0.25 * R[i * N + j]);
        }
        be->gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, C, N);
        char name[64];
        snprintf(name, sizeof name, "ops/gemm ta=%d tb=%d", ta, tb);
        long bad = close_all(C, R, M * N, 1e-6, 1e-5);
        EXPECT(name, bad < 0, "element %ld: %g vs %g", bad, bad < 0 ? 0 : C[bad], bad < 0 ? 0 : R[bad]);
    }
}

static void test_elementwise(void) {
    int rows = 4, cols = 6, n = rows * cols;
    float y[24], b[6], ref[24], dy[24], dz[24], db[6] = {0}, dbr[6] = {0};
    fill_rand(y, n, 4); fill_rand(b, cols, 5); fill_rand(dy, n, 6);
    for (int i = 0; i < n; i++) { float v = y[i] + b[i % cols]; ref[i] = v > 0 ? v : 0; }
    be->bias_act(y, b, rows, cols, 1);
    EXPECT("ops/bias+relu", close_all(y, ref, n, 0, 0) < 0, "mismatch");
    for (int i = 0; i < n; i++) ref[i] = y[i] > 0 ? dy[i] : 0;
    be->relu_backward(dz, dy, y, (size_t)n);
    EXPECT("ops/relu backward", close_all(dz, ref, n, 0, 0) < 0, "mismatch");
    for (int i = 0; i < n; i++) dbr[i % cols] += dz[i];
    be->bias_grad(db, dz, rows, cols);
    EXPECT("ops/bias grad", close_all(db, dbr, cols, 1e-6, 1e-6) < 0, "mismatch");
    // softmax cross-entropy on a hand example: logits (1,2,3), label 2
    float lg[3] = {1, 2, 3}, dl[3];
    int32_t lab[1] = {2};
    double tally[2] = {0, 0};
    be->softmax_xent_tally(lg, lab, 1, 3, 0.5f, dl, tally);
    double loss = tally[0];
    int correct = (int)tally[1];
    double z = exp(1) + exp(2) + exp(3);
    double want = -log(exp(3) / z);
    float dref[3] = {(float)(0.5 * exp(1) / z), (float)(0.5 * exp(2) / z), (float)(0.5 * (exp(3) / z - 1))};
    EXPECT("ops/softmax-xent loss", fabs(loss - want) < 1e-6 && correct == 1, "loss %g want %g, correct %d", loss, want, correct);
    EXPECT("ops/softmax-xent grad", close_all(dl, dref, 3, 1e-7, 1e-5) < 0, "dlogits mismatch");
}

static void test_optimizers(void) {
    // Adam, PyTorch semantics, two steps on one parameter with gradients 0.5 then -1.
    float p = 1.0f, m = 0, v = 0;
    double P = 1.0, Mo = 0, V = 0;
    double g[2] = {0.5, -1.0};
    for (int t = 1; t <= 2; t++) {
        AdamArgs a = {0.1f, 0.9f, 0.999f, 1e-8f, (float)(1 - pow(0.9, t)), (float)sqrt(1 - pow(0.999, t))};
        be->adam(&p, (float[]){(float)g[t - 1]}, &m, &v, 1, a);
        Mo = 0.9 * Mo + 0.1 * g[t - 1];
        V = 0.999 * V + 0.001 * g[t - 1] * g[t - 1];
        P -= 0.1 / (1 - pow(0.9, t)) * Mo / (sqrt(V) / sqrt(1 - pow(0.999, t)) + 1e-8);
    }
    EXPECT("optim/adam two steps", fabs(p - P) < 1e-6, "p=%.9g want %.9g", p, P);
    // Adam's first step moves every parameter by lr * sign(g), whatever the gradient's size.
    float w[3] = {0, 0, 0}, gw[3] = {1e-3f, -5.0f, 200.0f}, mw[3] = {0}, vw[3] = {0};
    AdamArgs a1 = {0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, (float)sqrt(0.001)};
    be->adam(w, gw, mw, vw, 3, a1);
    EXPECT("optim/adam first step = lr*sign(g)", fabs(w[0] + 0.01) < 1e-6 && fabs(w[1] - 0.01) < 1e-6 && fabs(w[2] + 0.01) < 1e-6,
           "%g %g %g", w[0], w[1], w[2]);
    float q[3] = {1, 2, 3}, gq[3] = {0.5f, -1, 2};
    be->sgd(q, gq, 3, 0.1f);
    EXPECT("optim/sgd", fabs(q[0] - 0.95f) < 1e-7 && fabs(q[1] - 2.1f) < 1e-6 && fabs(q[2] - 2.8f) < 1e-6, "%g %g %g", q[0], q[1], q[2]);
}

// Loss of a stage holding the whole model on a fixed batch (forward only).
static double model_loss(Stage *s, const float *x, const int32_t *y) {
    stage_take_loss(s);  // (a forward's loss still in the tally is not this one's)
    s->loss.sum = 0;
    s->loss.rows = 0;
    s->loss.correct = 0;
    int slot = stage_slot_acquire(s, 0);
    memcpy(stage_slot_input(s, slot), x, sizeof(float) * (size_t)s->rows * s->H);
    stage_set_labels(s, slot, y);
    stage_forward(s, slot);
    s->slots[slot].mb = -1;
    s->mem.act_bytes = 0;  // drop without backward
    stage_take_loss(s);
    return s->loss.sum * s->grad_scale;
}

// The head's loss stays in the backend's tally through a step's micro-batches (no host read per
// forward: a GPU would wait for its queue at each) and is read once, by stage_take_loss, adding up
// to the micro-batches' losses taken one by one.
static void test_loss_tally(void) {
    int L = 2, H = 4, C = 3, rows = 2, M = 4;
    Stage s;
    stage_init(&s, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = 0, .hi = L, .head = 1, .rows = rows, .slots = M, .seed = 3});
    float x[4][8];
    int32_t y[4][2] = {{0, 1}, {2, 0}, {1, 1}, {2, 2}};
    double each = 0;
    for (int mb = 0; mb < M; mb++) {
        fill_rand(x[mb], rows * H, 20 + mb);
        each += model_loss(&s, x[mb], y[mb]) / s.grad_scale;  // (one micro-batch, taken at once)
    }
    long reads = s.loss.reads;
    stage_zero_grads(&s);
    for (int mb = 0; mb < M; mb++) {
        int slot = stage_slot_acquire(&s, mb);
        memcpy(stage_slot_input(&s, slot), x[mb], sizeof x[mb]);
        stage_set_labels(&s, slot, y[mb]);
        stage_forward(&s, slot);
        stage_backward(&s, slot, NULL, NULL);
    }
    EXPECT("model/loss tally: no read during the step's micro-batches",
           s.loss.reads == reads && s.loss.sum == 0 && s.loss.pending, "reads %ld (before %ld), loss_sum %g",
           s.loss.reads, reads, s.loss.sum);
    stage_take_loss(&s);
    stage_take_loss(&s);  // (nothing new: no read)
    EXPECT("model/loss tally: one read per step, the sum of the micro-batches' losses",
           s.loss.reads == reads + 1 && fabs(s.loss.sum - each) <= 1e-12 * fabs(each) && s.loss.rows == M * rows,
           "reads %ld (before %ld), loss %.17g vs %.17g, rows %d", s.loss.reads, reads, s.loss.sum, each, s.loss.rows);
    stage_free(&s);
}

// ---- the training path's input ring (train/executor.c), on a backend whose copies queue like a GPU's ----
// A queued copy runs only when the host waits: at a fence (the copies queued before it) or for the
// whole queue (sync, to_device, to_host). So a load that refilled a buffer before waiting on its
// fence would send the refilled rows, as a GPU would. The log: per call, an op and the ring buffer.
typedef struct { void *dst; const void *src; size_t bytes; } QueuedCopy;
struct RecFence { int id, seq; };  // seq: the copies queued before it was recorded
static struct {
    QueuedCopy q[64];
    int queued, ran;
    long full_waits;  // waits for the whole queue
    struct RecFence fence[INPUT_RING];
    int n_fence;
    const InputRing *ring;
    char op[64];
    int buf[64], n_log;
} rec;
static void rec_log(char op, int buf) {
    if (rec.n_log < 64) { rec.op[rec.n_log] = op; rec.buf[rec.n_log++] = buf; }
}
static void rec_run(int upto) {
    for (; rec.ran < upto; rec.ran++) memcpy(rec.q[rec.ran].dst, rec.q[rec.ran].src, rec.q[rec.ran].bytes);
}
static void rec_queued(void *dst, const void *src, size_t bytes) {
    CHECK(rec.queued < 64, "the test's queue is full");
    rec.q[rec.queued++] = (QueuedCopy){dst, src, bytes};
    int k = -1;
    for (int i = 0; i < INPUT_RING; i++) if (src == rec.ring->x[i] || src == rec.ring->y[i]) k = i;
    rec_log(src == rec.ring->x[k < 0 ? 0 : k] ? 'x' : 'y', k);
}
static void rec_sync(void) { rec_run(rec.queued); rec.full_waits++; }
static void rec_to_device(void *dst, const void *src, size_t bytes) { rec_sync(); memcpy(dst, src, bytes); }
static void rec_to_host(void *dst, const void *src, size_t bytes) { rec_sync(); memcpy(dst, src, bytes); }
static Fence *rec_fence_new(void) {
    CHECK(rec.n_fence < INPUT_RING, "more fences than the ring's buffers");
    rec.fence[rec.n_fence] = (struct RecFence){rec.n_fence, 0};
    return (Fence *)&rec.fence[rec.n_fence++];
}
static void rec_fence_record(Fence *f) {
    struct RecFence *r = (struct RecFence *)f;
    r->seq = rec.queued;
    rec_log('R', r->id);
}
static void rec_fence_wait(Fence *f, const char *what) {
    (void)what;
    const struct RecFence *r = (const struct RecFence *)f;
    rec_run(r->seq);
    rec_log('W', r->id);
}
static void rec_fence_free(Fence *f) { (void)f; }

// M micro-batches loaded through the ring into M slots, then the queue run and each forwarded: beside
// a stage loaded the synchronous way on the CPU backend, the same rows, labels and losses, bit for bit.
static void test_input_ring(void) {
    enum { L = 2, H = 6, D = 5, C = 3, ROWS = 4, M = 2 * INPUT_RING + 1 };
    Backend q = backend_cpu;
    q.to_device = rec_to_device; q.to_host = rec_to_host; q.sync = rec_sync; q.to_device_queued = rec_queued;
    q.fence_new = rec_fence_new; q.fence_record = rec_fence_record; q.fence_wait = rec_fence_wait;
    q.fence_free = rec_fence_free;
    q.synthetic = NULL;  // (rows made on the host and copied: the path of real data sets)
    Data d;
    data_open(&d, (DataSource){"synthetic", "", "", ""}, D, 11);
    data_load(&d, C);
    StageSpec spec = {.layers = L, .hidden = H, .classes = C, .inputs = D, .lo = 0, .hi = L, .head = 1, .rows = ROWS,
                      .slots = M, .seed = 5};
    Stage s, ref, made;  // made: the backend makes the rows (Backend.synthetic), no ring
    stage_init(&s, &q, spec);
    stage_init(&ref, be, spec);
    stage_init(&made, be, spec);
    StepState st = {.data = &d}, st_made = {.data = &d};
    exec_ring_alloc(&st_made.ring, be, ROWS, D);
    exec_ring_alloc(&st.ring, &q, ROWS, D);
    rec.ring = &st.ring;
    rec.full_waits = 0; rec.n_log = 0;
    for (int mb = 0; mb < M; mb++)
        exec_load_inputs(&st, &s, stage_slot_acquire(&s, mb), 100 + (uint64_t)mb * ROWS, 1, 1);
    long full = rec.full_waits;
    char want[256] = "", got[256] = "";
    for (int mb = 0; mb < M; mb++) {  // per load: its buffer's wait, its two copies, its fence
        int k = mb % INPUT_RING;
        snprintf(want + strlen(want), sizeof want - strlen(want), "W%dx%dy%dR%d ", k, k, k, k);
    }
    for (int i = 0; i < rec.n_log; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%c%d%s", rec.op[i], rec.buf[i],
                 rec.op[i] == 'R' ? " " : "");
    EXPECT("train/input ring: no wait for the whole queue while loading micro-batches", full == 0,
           "%ld waits for the whole queue in %d loads", full, M);
    EXPECT("train/input ring: buffers rotate, each waited for (its fence alone) before its refill", !strcmp(got, want),
           "log '%s', want '%s'", got, want);
    q.sync();  // the queue runs
    int rows_ok = 1, labels_ok = 1, loss_ok = 1, made_ok = 1;
    float x[ROWS * D];
    int32_t y[ROWS];
    for (int mb = 0; mb < M; mb++) {
        int a = stage_slot_of(&s, mb), b = stage_slot_acquire(&ref, mb);
        data_features(&d, 100 + (uint64_t)mb * ROWS, ROWS, x);
        data_labels(&d, 100 + (uint64_t)mb * ROWS, ROWS, y);
        stage_load_input(&ref, b, x);
        stage_set_labels(&ref, b, y);
        rows_ok &= !memcmp(stage_slot_input(&s, a), stage_slot_input(&ref, b), sizeof x);
        int c = stage_slot_acquire(&made, mb);
        exec_load_inputs(&st_made, &made, c, 100 + (uint64_t)mb * ROWS, 1, 1);
        made_ok &= !memcmp(stage_slot_input(&made, c), x, sizeof x) && !memcmp(made.slots[c].labels, y, sizeof y);
        labels_ok &= !memcmp(s.slots[a].labels, ref.slots[b].labels, sizeof y);
        stage_forward(&s, a);
        stage_forward(&ref, b);
        stage_take_loss(&s);
        stage_take_loss(&ref);
        loss_ok &= s.loss.sum == ref.loss.sum && s.loss.correct == ref.loss.correct;
    }
    EXPECT("train/input ring: every micro-batch's rows and labels arrive intact (copies run late, as queued)",
           rows_ok && labels_ok, "rows %s, labels %s", rows_ok ? "ok" : "differ", labels_ok ? "ok" : "differ");
    EXPECT("train/input ring: losses bit-identical to synchronous loads", loss_ok, "loss %.17g vs %.17g", s.loss.sum,
           ref.loss.sum);
    EXPECT("train/synthetic rows made by the backend: the host's rows and labels, bit for bit", made_ok, "differ");
    exec_ring_free(&st.ring, &q);
    exec_ring_free(&st_made.ring, be);
    stage_free(&s);
    stage_free(&ref);
    stage_free(&made);
    data_close(&d);
}

static void test_gradcheck(int ckpt) {
    int L = 3, H = 5, C = 3, rows = 4;
    Stage s;
    stage_init(&s, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = 0, .hi = L, .head = 1, .rows = rows, .slots = 1, .ckpt = ckpt, .seed = 7});
    float x[20]; int32_t y[4] = {0, 2, 1, 2};
    fill_rand(x, rows * H, 9);
    // make the pre-activations well away from the ReLU kink: shift biases up
    for (int i = 0; i < L; i++) for (int j = 0; j < H; j++) s.b[i][j] += 0.3f;
    stage_zero_grads(&s);
    int slot = stage_slot_acquire(&s, 0);
    memcpy(stage_slot_input(&s, slot), x, sizeof x);
    stage_set_labels(&s, slot, y);
    stage_forward(&s, slot);
    stage_backward(&s, slot, NULL, NULL);
    float *g = malloc(sizeof(float) * s.n_params);
    memcpy(g, s.grads, sizeof(float) * s.n_params);
    double worst = 0;
    long worst_i = -1;
    for (size_t i = 0; i < s.n_params; i++) {
        float keep = s.params[i];
        double h = 1e-2;
        s.params[i] = keep + (float)h; double lp = model_loss(&s, x, y);
        s.params[i] = keep - (float)h; double lm = model_loss(&s, x, y);
        s.params[i] = keep;
        double fd = (lp - lm) / (2 * h);
        double err = fabs(fd - g[i]) / (1e-3 + fabs(fd));
        if (err > worst) { worst = err; worst_i = (long)i; }
    }
    char name[64];
    snprintf(name, sizeof name, "model/gradient check (%s)", ckpt ? "checkpointing" : "stash");
    printf("# worst %g\n", worst);
    EXPECT(name, worst < 5e-3, "worst relative error %.3g at parameter %ld of %zu", worst, worst_i, s.n_params);
    free(g);
    stage_free(&s);
}

static void test_init_split(void) {
    int L = 6, H = 8, C = 2;
    Stage mono, a, b;
    stage_init(&mono, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = 0, .hi = L, .head = 1, .rows = 2, .slots = 1, .ckpt = 0, .seed = 42});
    stage_init(&a, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = 0, .hi = 4, .head = 0, .rows = 2, .slots = 1, .ckpt = 0, .seed = 42});
    stage_init(&b, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = 4, .hi = 6, .head = 1, .rows = 2, .slots = 1, .ckpt = 0, .seed = 42});
    size_t layer = (size_t)H * H + H;
    int same = memcmp(a.params, mono.params, 4 * layer * sizeof(float)) == 0 &&
               memcmp(b.params, mono.params + 4 * layer, b.n_params * sizeof(float)) == 0;
    EXPECT("model/init independent of the split", same, "weights differ between a 1-stage and a 2-stage split");
    Stage other;
    stage_init(&other, be, (StageSpec){.layers = L, .hidden = H, .classes = C, .lo = 0, .hi = L, .head = 1, .rows = 2, .slots = 1, .ckpt = 0, .seed = 43});
    EXPECT("model/init depends on the seed", memcmp(other.params, mono.params, layer * sizeof(float)) != 0, "seed ignored");
    float bound = 1.0f / sqrtf((float)H), mx = 0;
    for (size_t i = 0; i < mono.n_params; i++) mx = fmaxf(mx, fabsf(mono.params[i]));
    EXPECT("model/init within nn.Linear bound", mx <= bound && mx > 0.8f * bound, "max |w| %g, bound %g", mx, bound);
    stage_free(&mono); stage_free(&a); stage_free(&b); stage_free(&other);
}

static void test_npy(void) {
    const char *path = "/tmp/micropp-unit.npy";
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    Npy r;
    char err[256];
    int ok = npy_write(path, "<f4", 2, shape, x) == 0 && npy_read(path, &r, err, sizeof err) == 0;
    EXPECT("npy/round trip float32 [2,3]", ok && r.ndim == 2 && r.shape[0] == 2 && r.shape[1] == 3 && !strcmp(r.dtype, "<f4") &&
           !memcmp(r.data, x, sizeof x), "read back differs (%s)", ok ? "data" : err);
    if (ok) free(r.data);
    int64_t lab[3] = {0, 1, 1}, n3 = 3;
    ok = npy_write(path, "<i8", 1, &n3, lab) == 0 && npy_read(path, &r, err, sizeof err) == 0;
    EXPECT("npy/round trip int64 [3]", ok && r.ndim == 1 && r.shape[0] == 3 && !memcmp(r.data, lab, sizeof lab), "read back differs");
    if (ok) free(r.data);
    remove(path);
}

static void test_schedules(void) {
    const char *names[3] = {"naive", "gpipe", "1f1b"};
    int bad = 0, formula_bad = 0, peak_bad = 0;
    char why[300] = "";
    for (int kind = 0; kind < 3; kind++)
        for (int K = 1; K <= 16; K++)
            for (int M = 1; M <= 32; M++) {
                SimResult r;
                schedule_simulate(kind, K, M, 1, 2, 0, &r);
                if (r.deadlock && !bad++) snprintf(why, sizeof why, "%s K=%d M=%d: %s", names[kind], K, M, r.why);
                double f = schedule_bubble_formula(kind, K, M, 1);
                for (int s = 0; s < K; s++) {
                    if (fabs(r.bubble[s] - f) > 1e-12 && !formula_bad++)
                        snprintf(why, sizeof why, "%s K=%d M=%d stage %d: simulated %.15f formula %.15f", names[kind], K, M, s, r.bubble[s], f);
                    int want = kind == 0 ? 1 : kind == 1 ? M : (K - s < M ? K - s : M);
                    if (r.peak_inflight[s] != want && !peak_bad++)
                        snprintf(why, sizeof why, "%s K=%d M=%d stage %d: peak %d want %d", names[kind], K, M, s, r.peak_inflight[s], want);
                }
                sim_result_free(&r);
            }
    EXPECT("schedule/no deadlock for K<=16, M<=32", !bad, "%s", why);
    EXPECT("schedule/simulated bubble == formula (F=1, B=2)", !formula_bad, "%s", why);
    EXPECT("schedule/peak in-flight: naive 1, gpipe M, 1f1b min(K-s,M)", !peak_bad, "%s", why);
    // Every stage runs each micro-batch's forward once and backward once, forward first.
    int order_bad = 0;
    for (int kind = 0; kind < 3; kind++) for (int K = 1; K <= 8; K++) for (int M = 1; M <= 12; M++) for (int s = 0; s < K; s++) {
        ActionList l = {0};
        schedule_build(kind, NULL, K, M, 1, s, &l);
        int f[12] = {0}, b[12] = {0};
        for (int i = 0; i < l.n; i++) {
            if (l.a[i].kind == ACT_FORWARD) f[l.a[i].mb]++;
            if (l.a[i].kind == ACT_BACKWARD) { if (!f[l.a[i].mb]) order_bad++; b[l.a[i].mb]++; }
        }
        for (int m = 0; m < M; m++) if (f[m] != 1 || b[m] != 1) order_bad++;
        action_list_free(&l);
    }
    EXPECT("schedule/each micro-batch one F then one B per stage", !order_bad, "%d violations", order_bad);
}

// cpu_flush_subnormals: subnormals read and written as zero, so Adam's decaying first moment of a
// unit without gradient leaves the slow subnormal range at once instead of lingering in it.
static void test_subnormals(void) {
    volatile float tiny = 1e-39f, one = 1.0f;  // 1e-39 is subnormal (below FLT_MIN 1.18e-38)
    EXPECT("ops/subnormals kept before the flush is asked for", tiny * one != 0.0f, "%g", (double)(tiny * one));
    cpu_flush_subnormals();
    EXPECT("ops/a subnormal input reads as zero after cpu_flush_subnormals (DAZ)", tiny * one == 0.0f, "%g", (double)(tiny * one));
    volatile float small = 1e-30f;
    EXPECT("ops/a subnormal result is written as zero (FTZ)", small * 1e-9f == 0.0f, "%g", (double)(small * 1e-9f));
    float p = 1, g = 0, m = 1.2e-38f, v = 0;  // m * 0.9 is subnormal
    AdamArgs a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .bias_correction1 = 1, .bias_correction2_sqrt = 1};
    backend_cpu.adam(&p, &g, &m, &v, 1, a);
    EXPECT("ops/adam's first moment decays to zero, not into the subnormals", m == 0.0f, "m %g", (double)m);
}

// fmt_bytes: the unit that fits, 3 significant digits, never an exponent (2.75e+03 GB was printed
// once); fmt_bytes_binary: plan's KiB .. TiB.
static void test_fmt_bytes(void) {
    static const struct { double b; const char *want; } cases[] = {
        {0, "0 B"}, {512, "512 B"}, {999, "999 B"}, {999.5, "1 kB"}, {65536, "65.5 kB"}, {4.72e6, "4.72 MB"},
        {999.4e6, "999 MB"}, {999.6e6, "1 GB"}, {79.1e9, "79.1 GB"}, {2.75e12, "2.75 TB"}, {1.37e12, "1.37 TB"},
        {3.2e15, "3.2 PB"}, {2.5e18, "2500 PB"}};
    char b[32], bad[400] = "";
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (strcmp(fmt_bytes(cases[i].b, b, sizeof b), cases[i].want))
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%g -> '%s' (want '%s') ", cases[i].b, b, cases[i].want);
    EXPECT("util/fmt_bytes: the unit that fits, 3 significant digits, no exponent", !bad[0], "%s", bad);
    char g[32], k[32];
    fmt_bytes_binary(1.5 * 1024 * 1024 * 1024, g, sizeof g);
    fmt_bytes_binary(1000, k, sizeof k);
    EXPECT("util/fmt_bytes_binary: plan's binary units", !strcmp(g, "1.50 GiB") && !strcmp(k, "1000 B"), "'%s' '%s'", g, k);
}

// fmt_sig3 / fmt_si: rates with three significant digits, never "0k samples/s" or "0.0 GFLOP/s"
// (what the step lines and the summary once printed for small runs), never an exponent.
static void test_fmt_rates(void) {
    static const struct { double v; const char *sig3, *si; } cases[] = {
        {0, "0", "0"}, {0.0102, "0.0102", "0.0102"}, {0.949, "0.949", "0.949"}, {3.6, "3.60", "3.60"},
        {9.996, "10.0", "10.0"}, {59.24, "59.2", "59.2"}, {640, "640", "640"}, {999.4, "999", "999"},
        {1250, "1250", "1.25k"}, {37117, "37117", "37.1k"}, {999600, "999600", "1.00M"}, {2.5e9, "2500000000", "2.50G"}};
    char a[48], b[48], bad[600] = "";
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fmt_sig3(cases[i].v, a, sizeof a);
        fmt_si(cases[i].v, b, sizeof b);
        if (strcmp(a, cases[i].sig3) || strcmp(b, cases[i].si))
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%g -> '%s' '%s' (want '%s' '%s') ", cases[i].v, a, b,
                     cases[i].sig3, cases[i].si);
    }
    EXPECT("util/fmt_sig3 and fmt_si: three significant digits, a decimal prefix, no exponent", !bad[0], "%s", bad);
}

int main(void) {
    test_fmt_bytes();
    test_fmt_rates();
    test_gemm();
    test_elementwise();
    test_optimizers();
    test_gradcheck(0);
    test_loss_tally();
    test_input_ring();
    test_gradcheck(1);
    test_init_split();
    test_npy();
    test_schedules();
    test_subnormals();  // last: it changes this thread's floating-point mode
    return unit_failures ? 1 : 0;
}
