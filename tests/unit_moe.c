// tests/unit_moe.c: the mixture-of-experts layer (moe.c): its gradients against finite differences
// (drops and pass-through rows included), and its exchange hook's contract: two "ranks" in one process
// (threads, a fake all-to-all), each holding half the experts, give what the all-local layer gives, with
// the rows exchanged whole and in halves (started, the layer's own rows moved by it, then waited for), and in
// halves through the exchange's own buffers (packed into its send buffer, a dispatch read in place).
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include "unit.h"
#include "base/data.h"
#include "base/util.h"
#include "moe.h"

static const Backend *be = &backend_cpu;
enum { H = 6, E = 4, K = 2, ROWS = 10 };

static void fill_rand(float *x, long n, uint64_t key, float lo) {
    for (long i = 0; i < n; i++) x[i] = lo + (1.0f - lo) * rng_uniform(key, (uint64_t)i);
}
static MoeSpec spec(float cf) {
    return (MoeSpec){.experts = E, .every = 1, .top_k = K, .capacity = cf, .aux = 0.05f, .group = 5};
}

// The loss sum(y .* w) + grad_scale x the auxiliary loss (its stats' weighted sum) of one forward.
static double loss_of(Moe *m, const float *P, const float *x, const float *w, float gs) {
    float y[ROWS * H];
    moe_stats_reset(m);
    moe_forward(m, 0, 0, P, x, y, ROWS, 1);
    double l = 0;
    for (int i = 0; i < ROWS * H; i++) l += (double)y[i] * w[i];
    return l + gs * m->stats.aux_wsum;
}

static void test_finite_differences(void) {
    size_t n = moe_layer_len(H, E);
    float *P = xmalloc(n * sizeof(float)), *dP = xcalloc(n, sizeof(float)), x[ROWS * H], dx[ROWS * H], w[ROWS * H];
    moe_init_host(7, 1, H, E, P);
    fill_rand(x, ROWS * H, 11, 0.0f);  // (a ReLU layer's output: non-negative)
    fill_rand(w, ROWS * H, 12, -1.0f);
    float gs = 0.25f;
    Moe *m = moe_new(be, spec(0.75f), H, 1, 1, ROWS, 1);
    loss_of(m, P, x, w, gs);
    EXPECT("moe: capacity 0.75 drops assignments (the test covers drops)", m->stats.dropped > 0, "none dropped");
    moe_backward(m, 0, 0, P, dP, x, w, dx, gs);
    double worst = 0, eps = 1e-2;
    for (size_t i = 0; i < n; i += 3) {  // every third parameter
        float keep = P[i];
        P[i] = keep + (float)eps; double up = loss_of(m, P, x, w, gs);
        P[i] = keep - (float)eps; double dn = loss_of(m, P, x, w, gs);
        P[i] = keep;
        double fd = (up - dn) / (2 * eps), err = fabs(fd - dP[i]) / (fabs(fd) + 1e-2);
        worst = err > worst ? err : worst;
    }
    EXPECT("moe: parameter gradients match finite differences", worst < 2e-2, "worst relative error %g", worst);
    worst = 0;
    for (int i = 0; i < ROWS * H; i++) {
        float keep = x[i];
        x[i] = keep + (float)eps; double up = loss_of(m, P, x, w, gs);
        x[i] = keep - (float)eps; double dn = loss_of(m, P, x, w, gs);
        x[i] = keep;
        double fd = (up - dn) / (2 * eps), err = fabs(fd - dx[i]) / (fabs(fd) + 1e-2);
        worst = err > worst ? err : worst;
    }
    EXPECT("moe: input gradients match finite differences (pass-through rows included)", worst < 2e-2,
           "worst relative error %g", worst);
    moe_free(m); free(P); free(dP);
}

// ---- the fake all-to-all: two threads meet at a barrier and copy from each other's buffers ----

typedef struct {
    pthread_barrier_t bar;
    const float *buf[2];
    const int *cnt[2];
    float win[2][ROWS * K * H * 2];  // each rank's send buffer (send_buffer, the in-place halves)
} Fake;
typedef struct {
    Fake *f;
    int rank;
    const float *send;  // the halves (start_rows, wait_rows): the exchange started, run at the wait
    const int *send_counts, *recv_counts;
    float *recv;
    int w, back;
} FakeCtx;

static int count_sum(const int *c, int from, int to) {
    int s = 0;
    for (int i = from; i < to; i++) s += c[i];
    return s;
}
static void fake_counts(void *ctx, const int *send, int *recv) {
    FakeCtx *c = ctx;
    int El = E / 2;
    c->f->cnt[c->rank] = send;
    pthread_barrier_wait(&c->f->bar);
    for (int s = 0; s < 2; s++)
        for (int e = 0; e < El; e++) recv[s * El + e] = c->f->cnt[s][c->rank * El + e];
    pthread_barrier_wait(&c->f->bar);
}
// own = 0: the rows a rank sends itself are not copied (the halves leave them to the layer).
static void fake_copy(FakeCtx *c, const float *send, const int *send_counts, float *recv, const int *recv_counts,
                      int w, int back, int own) {
    Fake *f = c->f;
    int El = E / 2, me = c->rank;
    f->buf[me] = send;
    f->cnt[me] = back ? recv_counts : send_counts;
    pthread_barrier_wait(&f->bar);
    for (int r = 0, at = 0; r < 2; r++) {
        if (!back) {  // source r's rows for my experts, from its send order
            int off = count_sum(f->cnt[r], 0, me * El), n = count_sum(f->cnt[r], me * El, (me + 1) * El);
            if (own || r != me)
                memcpy(recv + (size_t)at * w, f->buf[r] + (size_t)off * w, sizeof(float) * (size_t)n * w);
            at += n;
        } else {  // owner r's rows of mine (its recv layout: source-major) back to my send order
            int off = count_sum(f->cnt[r], 0, me * El), n = count_sum(f->cnt[r], me * El, (me + 1) * El);
            int to = count_sum(send_counts, 0, r * El);
            if (own || r != me)
                memcpy(recv + (size_t)to * w, f->buf[r] + (size_t)off * w, sizeof(float) * (size_t)n * w);
        }
    }
    pthread_barrier_wait(&f->bar);
}
static void fake_rows(void *ctx, const float *send, const int *send_counts, float *recv, const int *recv_counts, int w,
                      int back) {
    fake_copy(ctx, send, send_counts, recv, recv_counts, w, back, 1);
}
// The halves, adversarial: the start fills recv with NaN (the layer must move its own rows after it, and read
// no other rank's before the wait), and the rows arrive only at the wait.
static void fake_start(void *ctx, const float *send, const int *send_counts, float *recv, const int *recv_counts,
                       int w, int back) {
    FakeCtx *c = ctx;
    int n = count_sum(back ? send_counts : recv_counts, 0, E);  // (rows for 2 ranks x E/2 experts, or of E)
    for (long i = 0; recv && i < (long)n * w; i++) recv[i] = NAN;
    *c = (FakeCtx){c->f, c->rank, send, send_counts, recv_counts, recv, w, back};
}
static void fake_wait(void *ctx) {
    FakeCtx *c = ctx;
    if (!c->recv) {  // in place: the senders' buffers are read where they are (fake_rows_at) until the release
        c->f->buf[c->rank] = c->send, c->f->cnt[c->rank] = c->send_counts;
        pthread_barrier_wait(&c->f->bar);
        return;
    }
    fake_copy(c, c->send, c->send_counts, c->recv, c->recv_counts, c->w, c->back, 0);
}
// The exchange's own buffers, adversarial: the send buffer starts as NaN (the layer writes every row it sends),
// and once both ranks have let a dispatch read in place go, each fills its buffer with NaN (a row read after
// the release, or read from a stale buffer, spoils the outputs).
static float *fake_send_buffer(void *ctx, size_t floats, int back) {
    FakeCtx *c = ctx;
    (void)back;
    CHECK(floats <= sizeof c->f->win[0] / sizeof(float), "fake send buffer of %zu floats", floats);
    for (size_t i = 0; i < floats; i++) c->f->win[c->rank][i] = NAN;
    return c->f->win[c->rank];
}
static const float *fake_rows_at(void *ctx, int r) {
    FakeCtx *c = ctx;
    return c->f->buf[r] + (size_t)count_sum(c->f->cnt[r], 0, c->rank * (E / 2)) * (size_t)c->w;
}
static void fake_release(void *ctx) {
    FakeCtx *c = ctx;
    pthread_barrier_wait(&c->f->bar);
    for (size_t i = 0; i < sizeof c->f->win[0] / sizeof(float); i++) c->f->win[c->rank][i] = NAN;
}

typedef struct {
    Moe *m;
    const float *P, *x, *dy;
    float *y, *dx, *dP;
} Job;
static void *run_rank(void *arg) {
    Job *j = arg;
    moe_forward(j->m, 0, 0, j->P, j->x, j->y, ROWS, 1);
    moe_backward(j->m, 0, 0, j->P, j->dP, j->x, j->dy, j->dx, 0.1f);
    return NULL;
}

// halves: the exchange by start_rows and wait_rows (--ep-overlap's), else exchange_rows; 2: through the exchange's
// own buffers too (send_buffer, rows_at and release_rows: shm's).
static const char *hook_name(char *buf, int halves, const char *what) {
    snprintf(buf, 320, "moe exchange%s%s: %s", halves ? " in halves (started, then waited for)" : "",
             halves == 2 ? ", packed into its send buffer, a dispatch read in place" : "", what);
    return buf;
}

static void test_exchange_hook(int halves) {
    size_t n = moe_layer_len(H, E);
    char nm[320];
    float *P = xmalloc(n * sizeof(float)), x[2][ROWS * H], dy[2][ROWS * H];
    float y[2][ROWS * H] = {{0}}, dx[2][ROWS * H] = {{0}};
    float yl[2][ROWS * H], dxl[2][ROWS * H], *dPl = xcalloc(n, sizeof(float)), *dP[2];
    moe_init_host(3, 2, H, E, P);
    for (int r = 0; r < 2; r++) {
        fill_rand(x[r], ROWS * H, 20 + r, 0.0f);
        fill_rand(dy[r], ROWS * H, 30 + r, -1.0f);
        dP[r] = xcalloc(n, sizeof(float));
    }
    Moe *local = moe_new(be, spec(1.0f), H, 1, 1, ROWS, 1);  // each rank's rows through the all-local layer
    for (int r = 0; r < 2; r++) {
        moe_forward(local, 0, 0, P, x[r], yl[r], ROWS, 1);
        moe_backward(local, 0, 0, P, dPl, x[r], dy[r], dxl[r], 0.1f);
    }
    Fake f;
    pthread_barrier_init(&f.bar, NULL, 2);
    FakeCtx ctx[2] = {{.f = &f, .rank = 0}, {.f = &f, .rank = 1}};
    MoeExchange ex[2];
    Moe *m[2];
    pthread_t t[2];
    Job job[2];
    size_t router = moe_router_len(H, E), half = moe_expert_len(H) * (E / 2), mine = router + half;
    float *Pr[2];  // rank r's own range (moe_held): the router, then its E/2 experts
    for (int r = 0; r < 2; r++) {
        ex[r] = (MoeExchange){.size = 2, .rank = r, .exchange_counts = fake_counts, .exchange_rows = fake_rows,
                              .ctx = &ctx[r]};
        if (halves) ex[r].start_rows = fake_start, ex[r].wait_rows = fake_wait;
        if (halves == 2)
            ex[r].send_buffer = fake_send_buffer, ex[r].rows_at = fake_rows_at, ex[r].release_rows = fake_release;
        MoeSpec sr = spec(1.0f);
        sr.shards = 2, sr.shard = r;
        m[r] = moe_new(be, sr, H, 1, 1, ROWS, 1);
        moe_set_exchange(m[r], 0, &ex[r]);
        int first, held = moe_held(&sr, &first);
        EXPECT("moe_held: rank r of 2 holds E/2 experts from r E/2", held == E / 2 && first == r * E / 2,
               "rank %d: %d from %d", r, held, first);
        EXPECT("moe_held_len: the router and E/2 experts", moe_held_len(&sr, H) == mine, "%zu", moe_held_len(&sr, H));
        Pr[r] = xmalloc(mine * sizeof(float));
        memcpy(Pr[r], P, router * sizeof(float));
        memcpy(Pr[r] + router, P + moe_expert_off(H, E, first), half * sizeof(float));
        job[r] = (Job){m[r], Pr[r], x[r], dy[r], y[r], dx[r], dP[r]};
        pthread_create(&t[r], NULL, run_rank, &job[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    long miss = -1;
    for (int r = 0; r < 2 && miss < 0; r++) miss = close_all(y[r], yl[r], ROWS * H, 1e-6, 1e-5);
    EXPECT(hook_name(nm, halves, "outputs equal the all-local layer's"), miss < 0, "first miss at %ld", miss);
    miss = -1;
    for (int r = 0; r < 2 && miss < 0; r++) miss = close_all(dx[r], dxl[r], ROWS * H, 1e-6, 1e-5);
    EXPECT(hook_name(nm, halves, "input gradients equal the all-local layer's"), miss < 0, "first miss at %ld", miss);
    float *both = xmalloc(n * sizeof(float));  // rank r: its rows' router part, its experts' whole gradient
    for (size_t i = 0; i < router; i++) both[i] = dP[0][i] + dP[1][i];
    for (int r = 0; r < 2; r++) memcpy(both + router + r * half, dP[r] + router, half * sizeof(float));
    miss = close_all(both, dPl, (long)n, 1e-6, 1e-5);
    EXPECT(hook_name(nm, halves, "parameter gradients (router summed over ranks, experts on their owner) equal "
                                     "the all-local layer's"), miss < 0, "first miss at %ld", miss);
    int zero = 1;  // (dP is the whole layer's length: past a rank's own range nothing is written)
    for (size_t i = mine; i < n; i++) zero &= dP[0][i] == 0.0f && dP[1][i] == 0.0f;
    EXPECT(hook_name(nm, halves, "a rank writes no gradient past its own experts"), zero, "it did");
    long load = 0;
    for (int e = 0; e < E; e++) load += m[0]->stats.load[e] + m[1]->stats.load[e] - local->stats.load[e];
    EXPECT(hook_name(nm, halves, "the rows each expert got are counted alike"), load == 0, "differ by %ld", load);
    for (int r = 0; r < 2; r++) { moe_free(m[r]); free(dP[r]); free(Pr[r]); }
    moe_free(local); free(P); free(dPl); free(both);
    pthread_barrier_destroy(&f.bar);
}

static void test_capacity(void) {
    MoeSpec s = spec(1.25f);
    EXPECT("moe: capacity ceil(1.25 x 10 x 2 / 4) = 7", moe_capacity(&s, 10) == 7, "got %d", moe_capacity(&s, 10));
    EXPECT("moe: layer 0 is never an MoE layer, every layer after it with --moe-every 1",
           !moe_layer(&s, 0) && moe_layer(&s, 1) && moe_layer(&s, 5), "wrong");
    s.every = 2;
    EXPECT("moe: --moe-every 2 makes layers 2, 4, ...", !moe_layer(&s, 1) && moe_layer(&s, 2) && !moe_layer(&s, 3),
           "wrong");
}

// Evaluation (slot -1) routes without a capacity: with capacity 0.75 it gives what a training forward
// gives with room for every assignment (capacity E), and a training forward at 0.75 differs (it drops).
static void test_eval_drops_nothing(void) {
    size_t n = moe_layer_len(H, E);
    float *P = xmalloc(n * sizeof(float)), x[ROWS * H], ye[ROWS * H], yall[ROWS * H], ytrain[ROWS * H];
    moe_init_host(7, 1, H, E, P);
    fill_rand(x, ROWS * H, 11, 0.0f);
    Moe *tight = moe_new(be, spec(0.75f), H, 1, 1, ROWS, 1), *room = moe_new(be, spec((float)E), H, 1, 1, ROWS, 1);
    moe_forward(tight, 0, -1, P, x, ye, ROWS, 0);
    moe_forward(room, 0, 0, P, x, yall, ROWS, 1);
    moe_forward(tight, 0, 0, P, x, ytrain, ROWS, 1);
    int same = 1, differs = 0;
    for (int i = 0; i < ROWS * H; i++) { same &= ye[i] == yall[i]; differs |= ytrain[i] != yall[i]; }
    EXPECT("moe: evaluation drops nothing (capacity 0.75: the outputs of a capacity with room for every row)",
           same && room->stats.dropped == 0, "outputs differ or capacity E dropped %ld", room->stats.dropped);
    EXPECT("moe: ... while a training forward at capacity 0.75 drops and differs", differs && tight->stats.dropped > 0,
           "dropped %ld", tight->stats.dropped);
    moe_free(tight); moe_free(room); free(P);
}

int main(void) {
    test_capacity();
    test_eval_drops_nothing();
    test_finite_differences();
    test_exchange_hook(0);
    test_exchange_hook(1);
    test_exchange_hook(2);
    return unit_failures != 0;
}
