// alltoall.c: the all-to-all of a group (alltoall.h): the table of algorithms (alltoall_algos), the
// counts' exchange, and the rows' exchange by MPI_Alltoallv, by pairwise messages, through windows
// shared on one node, or by NCCL (the host's rows staged through device buffers); a device buffer staged
// through the host for the ones on the host.
#include <sched.h>
#include <string.h>
#include "comms/alltoall.h"
#include "comms/devcomm.h"
#include "comms/launch.h"  // launch_world_one_node
#include "comms/shm.h"  // shm_segment_open
#include "comms/watchdog.h"
#include "base/util.h"

const AllToAllAlgo alltoall_algos[ALLTOALL_ALGOS] = {
    [ALLTOALL_MPI] = {"mpi", 0, 0},
    [ALLTOALL_PAIR] = {"pair", 0, 0},
    [ALLTOALL_SHM] = {"shm", 1, 0},
    [ALLTOALL_NCCL] = {"nccl", 0, 1},
};

// shm: every rank's window has two halves, exchange k in half k % 2, each the offsets (in floats) of each
// receiver's rows, then its rows; a small control window holds two counters per rank (a cache line each):
// ready = k + 1 once its window holds exchange k, done = k + 1 once it has read its rows of exchange k out of
// every window. A rank writes exchange k + 1 (into the half of k - 1) only once every rank is done with k - 1:
// a rank one exchange behind holds up no one.
enum { A2A_READY, A2A_DONE, A2A_COUNTERS = 8 };

typedef struct {
    int on, self;
    MPI_Request *q;
    int nq;
    int *sc, *sd, *rc, *rd;
    float *recv, *r;  // the caller's buffer; where the rows land (recv, or the host stage)
    size_t rt;
} Pending;

struct AllToAll {
    MPI_Comm comm;            // a duplicate of the group: its messages match nothing else's
    int R, me, algo;
    const Backend *be;
    struct DevComm *nccl;
    size_t cap;               // shm: floats in each rank's window
    ShmSegment win, ctl;      // shm: the rows' window and the counters'
    char **peer;              // shm: every rank's window (win.peer)
    int64_t **counter;        // shm: every rank's counters
    int64_t k;                // shm: exchanges so far
    int placed;               // shm: alltoall_send_buffer gave out my window for exchange k (read by every rank)
    int held;                 // shm: the last exchange's rows are read in place (until alltoall_rows_release)
    float *stage_send, *stage_recv;  // host copies of device buffers (not nccl)
    size_t stage_cap;
    float *dev_send, *dev_recv;  // nccl: the device buffers the host's rows and counts go through (cap floats)
    double bytes, seconds;    // since alltoall_take_stats
    // the rows' exchange in flight (alltoall_rows_start to _wait): its requests (mpi: 1, pair: 2 per peer),
    // counts and offsets in floats (sc, sd, rc, rd: R each), where its rows land, and whether it moves its own
    Pending pending;
};

int alltoall_size(const AllToAll *a) { return a->R; }
int alltoall_rank(const AllToAll *a) { return a->me; }

static void barrier(MPI_Comm comm) {  // (under the watchdog, waiting as the wait policy says)
    MPI_Request q;
    MPI_CHECK(MPI_Ibarrier(comm, &q));
    wd_wait_all(&q, comm, "a barrier");
}

int alltoall_shm_possible(MPI_Comm group) {
    int R;
    MPI_CHECK(MPI_Comm_size(group, &R));
    if (launch_world_one_node()) return 1;  // (the same on every rank)
    int ok = shm_group_on_node(group) == R;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, group));
    return ok;
}

// A rank's part of the rows' window: two halves (exchange k in half k % 2), each its R offsets, then its rows.
static size_t head_bytes(int R) { return ((size_t)R * sizeof(size_t) + 63) / 64 * 64; }
static size_t half_bytes(size_t cap, int R) { return (head_bytes(R) + (cap ? cap : 1) * sizeof(float) + 63) / 64 * 64; }

size_t alltoall_shm_bytes(size_t cap, int R) {
    return shm_segment_stride(2 * half_bytes(cap, R)) + shm_segment_stride(A2A_COUNTERS * sizeof(int64_t));
}

int alltoall_shm_short(MPI_Comm world, double bytes, double *need, double *room, int *here) {
    *here = shm_group_on_node(world);
    *need = bytes * *here;
    *room = comm_shm_room();
    return *room >= 0 && *room < *need;
}

static void shm_windows_open(AllToAll *a) {
    CHECK(alltoall_shm_possible(a->comm), "all-to-all shm over a group of %d ranks on several nodes", a->R);
    shm_segment_open(&a->win, a->comm, 2 * half_bytes(a->cap, a->R));
    shm_segment_open(&a->ctl, a->comm, A2A_COUNTERS * sizeof(int64_t));  // every counter zero (a new segment)
    a->peer = a->win.peer;
    a->counter = xcalloc((size_t)a->R, sizeof(int64_t *));
    // cppcheck-suppress invalidPointerCast ; the control window's bytes hold int64 counters
    for (int p = 0; p < a->R; p++) a->counter[p] = (int64_t *)(void *)a->ctl.peer[p];
}

AllToAll *alltoall_open(MPI_Comm group, int algo, const Backend *be, size_t cap, struct DevComm *nccl) {
    CHECK(algo >= 0 && algo < ALLTOALL_ALGOS, "unknown all-to-all algorithm %d", algo);
    CHECK(algo != ALLTOALL_NCCL || (nccl && !be->on_host), "all-to-all nccl without a GPU and the group's NCCL");
    CHECK(algo != ALLTOALL_SHM || be->on_host, "all-to-all shm on device buffers");
    AllToAll *a = xcalloc(1, sizeof *a);
    MPI_CHECK(MPI_Comm_dup(group, &a->comm));
    MPI_CHECK(MPI_Comm_size(a->comm, &a->R));
    MPI_CHECK(MPI_Comm_rank(a->comm, &a->me));
    a->algo = algo;
    a->be = be;
    a->nccl = nccl;
    a->cap = cap;
    if (algo == ALLTOALL_SHM) shm_windows_open(a);
    if (algo == ALLTOALL_NCCL) {  // (made before the first step: no allocation while NCCL kernels are in flight)
        a->dev_send = be->alloc((cap ? cap : 1) * sizeof(float));
        a->dev_recv = be->alloc((cap ? cap : 1) * sizeof(float));
    }
    return a;
}

void alltoall_close(AllToAll *a) {
    if (!a) return;
    if (a->algo == ALLTOALL_SHM) {
        barrier(a->comm);  // nobody still reads a window
        shm_segment_close(&a->win);
        shm_segment_close(&a->ctl);
        free(a->counter);
    }
    if (a->stage_cap) { a->be->free_host(a->stage_send); a->be->free_host(a->stage_recv); }
    if (a->dev_send) { a->be->free(a->dev_send); a->be->free(a->dev_recv); }
    free(a->pending.sc); free(a->pending.q);
    MPI_Comm_free(&a->comm);
    free(a);
}

void alltoall_take_stats(AllToAll *a, double *bytes, double *seconds) {
    *bytes = a->bytes;
    *seconds = a->seconds;
    a->bytes = a->seconds = 0;
}

// nccl's counts: per ints to and from every rank through the device buffers, in one group, waited for.
static void nccl_counts(AllToAll *a, const int *send, int *recv, int per) {
    size_t n = (size_t)a->R * (size_t)per;
    CHECK(n <= (a->cap ? a->cap : 1), "all-to-all of %zu counts through device buffers of %zu", n, a->cap);
    CHECK(!a->pending.on, "an NCCL all-to-all of counts while its rows' exchange is in flight (one per communicator)");
    int *c = xmalloc(sizeof(int) * 2 * (size_t)a->R);
    for (int p = 0; p < a->R; p++) c[p] = per, c[a->R + p] = p * per;
    a->be->to_device(a->dev_send, send, n * sizeof(int));
    devcomm_alltoallv(a->nccl, a->dev_send, c, c + a->R, a->dev_recv, c, c + a->R, 1);
    devcomm_alltoall_wait(a->nccl, "the NCCL all-to-all of the experts' counts");
    a->be->to_host(recv, a->dev_recv, n * sizeof(int));
    free(c);
}

void alltoall_counts(AllToAll *a, const int *send, int *recv, int per) {
    double t0 = now_sec();
    if (a->algo == ALLTOALL_NCCL) {
        nccl_counts(a, send, recv, per);
    } else {
        MPI_Request q;
        MPI_CHECK(MPI_Ialltoall(send, per, MPI_INT, recv, per, MPI_INT, a->comm, &q));
        wd_wait_all(&q, a->comm, "the all-to-all of the experts' counts");
    }
    a->seconds += now_sec() - t0;
    a->bytes += (double)(a->R - 1) * per * sizeof(int);
}

// ---- the rows, on host buffers; counts and offsets in floats (a->pending's); each algorithm in two halves,
// start (the rows leave, or are offered) and wait (they have all arrived) ----

static void mpi_start(AllToAll *a, const float *send, float *recv) {
    Pending *q = &a->pending;
    MPI_CHECK(MPI_Ialltoallv(send, q->sc, q->sd, MPI_FLOAT, recv, q->rc, q->rd, MPI_FLOAT, a->comm, &q->q[0]));
    q->nq = 1;
}

// Every peer's receive and send posted at once, in the rounds' order: in round s, to r+s and from r-s.
static void pairs_start(AllToAll *a, const float *send, float *recv) {
    Pending *q = &a->pending;
    if (q->self) memcpy(recv + q->rd[a->me], send + q->sd[a->me], sizeof(float) * (size_t)q->sc[a->me]);
    q->nq = 0;
    for (int s = 1; s < a->R; s++) {
        int to = (a->me + s) % a->R, from = (a->me - s + a->R) % a->R;
        MPI_CHECK(MPI_Irecv(recv + q->rd[from], q->rc[from], MPI_FLOAT, from, 0, a->comm, &q->q[q->nq++]));
        MPI_CHECK(MPI_Isend(send + q->sd[to], q->sc[to], MPI_FLOAT, to, 0, a->comm, &q->q[q->nq++]));
    }
}

static void pairs_wait(AllToAll *a) {
    Pending *q = &a->pending;
    for (int i = 0; i < q->nq; i++) {
        int s = i / 2 + 1, peer = i % 2 ? (a->me + s) % a->R : (a->me - s + a->R) % a->R;
        wd_wait(&q->q[i], MPI_STATUS_IGNORE, peer, "the rows of an all-to-all");
    }
}

typedef struct { AllToAll *a; int which; int64_t v; } ShmWait;
static int shm_reached(void *ctx) {
    ShmWait *w = ctx;
    for (int p = 0; p < w->a->R; p++)
        if (__atomic_load_n(&w->a->counter[p][w->which], __ATOMIC_ACQUIRE) < w->v) {
            sched_yield();  // (the rank waited for may need this very core)
            return 0;
        }
    return 1;
}
static void shm_wait(AllToAll *a, int which, int64_t v) {
    ShmWait w = {a, which, v};
    wd_poll(shm_reached, &w, (WdSpin){.peer = -1, .what = "an all-to-all through shared memory", .comm = &a->comm});
}

// Rank p's half for exchange k: its offsets, then (head_bytes in) its rows.
static char *shm_half(const AllToAll *a, int p, int64_t k) {
    return a->peer[p] + (size_t)(k & 1) * half_bytes(a->cap, a->R);
}
static float *shm_rows(const AllToAll *a) { return (float *)(void *)(shm_half(a, a->me, a->k) + head_bytes(a->R)); }

float *alltoall_send_buffer(AllToAll *a, size_t floats) {
    if (a->algo != ALLTOALL_SHM) return NULL;
    double t0 = now_sec();
    CHECK(!a->pending.on, "an all-to-all's send buffer asked for while its last exchange is in flight");
    CHECK(!a->held, "an all-to-all's send buffer asked for while the last exchange's rows are read in place");
    CHECK(floats <= a->cap, "all-to-all of %zu floats into a window of %zu", floats, a->cap);
    if (!a->placed) shm_wait(a, A2A_DONE, a->k - 1);  // every rank has read its rows of the one before the last
    a->placed = 1;
    a->seconds += now_sec() - t0;
    return shm_rows(a);
}

// Start: my rows into my window once every rank has read the last exchange's out of it (unless the caller
// packed them there: alltoall_send_buffer), then "ready". Rows I send myself and move myself (self 0) stay out.
static void shm_start(AllToAll *a, const float *send) {
    const Pending *q = &a->pending;
    size_t total = (size_t)q->sd[a->R - 1] + (size_t)q->sc[a->R - 1];
    CHECK(total <= a->cap, "all-to-all of %zu floats into a window of %zu", total, a->cap);
    float *rows = shm_rows(a);
    CHECK(send != rows || a->placed, "all-to-all rows in the window without alltoall_send_buffer");
    int64_t k = a->k++;
    if (!a->placed) shm_wait(a, A2A_DONE, k - 1);  // every rank has read its rows of exchange k - 2 (this half)
    size_t *offs = (size_t *)(void *)shm_half(a, a->me, k);
    for (int p = 0; p < a->R; p++) offs[p] = (size_t)q->sd[p];
    if (send != rows)
        for (int p = 0; p < a->R; p++)
            if (p != a->me || q->self) memcpy(rows + q->sd[p], send + q->sd[p], sizeof(float) * (size_t)q->sc[p]);
    a->placed = 0;
    __atomic_store_n(&a->counter[a->me][A2A_READY], k + 1, __ATOMIC_RELEASE);
}

// Wait: every window holds this exchange; my part out of each (mine too, unless the caller moves its own), or,
// in place (recv NULL), nothing copied: the windows are read until alltoall_rows_release says done.
static void shm_finish(AllToAll *a, float *recv) {
    const Pending *q = &a->pending;
    int64_t k = a->k - 1;
    shm_wait(a, A2A_READY, k + 1);
    if (!recv) { a->held = 1; return; }
    for (int p = 0; p < a->R; p++) {
        if (p == a->me && !q->self) continue;
        const size_t *theirs = (const size_t *)(const void *)shm_half(a, p, k);
        const float *rows = (const float *)(const void *)(shm_half(a, p, k) + head_bytes(a->R));
        memcpy(recv + q->rd[p], rows + theirs[a->me], sizeof(float) * (size_t)q->rc[p]);
    }
    __atomic_store_n(&a->counter[a->me][A2A_DONE], k + 1, __ATOMIC_RELEASE);
}

static void stage_grow(AllToAll *a, size_t n) {
    if (n <= a->stage_cap) return;
    if (a->stage_cap) { a->be->free_host(a->stage_send); a->be->free_host(a->stage_recv); }
    a->stage_cap = n;
    a->stage_send = a->be->alloc_host(n * sizeof(float));
    a->stage_recv = a->be->alloc_host(n * sizeof(float));
}

// nccl's wait: the group's exchange seen done by the host, then each peer's rows out of the device buffer
// (not mine unless the exchange moves them: the caller moves its own).
static void nccl_finish(AllToAll *a) {
    const Pending *q = &a->pending;
    devcomm_alltoall_wait(a->nccl, "the NCCL all-to-all of the experts' rows");
    for (int p = 0; p < a->R; p++)
        if (q->rc[p]) a->be->to_host(q->recv + q->rd[p], a->dev_recv + q->rd[p], (size_t)q->rc[p] * sizeof(float));
}

void alltoall_rows_start(AllToAll *a, const float *send, const int *scount, float *recv, const int *rcount, int w,
                         int self) {
    double t0 = now_sec();
    int R = a->R;
    Pending *q = &a->pending;
    CHECK(!q->on, "an all-to-all started while another is in flight");
    CHECK(!a->held, "an all-to-all started while the last one's rows are read in place: alltoall_rows_release");
    CHECK(recv || (a->algo == ALLTOALL_SHM && !self), "an all-to-all in place by %s (shm only, own rows left out)",
          alltoall_algos[a->algo].name);
    if (!q->sc) {
        q->sc = xmalloc(sizeof(int) * 4 * (size_t)R), q->sd = q->sc + R, q->rc = q->sc + 2 * R, q->rd = q->sc + 3 * R;
        q->q = xmalloc(sizeof(MPI_Request) * 2 * (size_t)R);
    }
    size_t st = 0, rt = 0;
    for (int p = 0; p < R; p++) {
        CHECK(scount[p] >= 0 && rcount[p] >= 0, "all-to-all with a negative count");
        q->sc[p] = scount[p] * w, q->sd[p] = (int)st, q->rc[p] = rcount[p] * w, q->rd[p] = (int)rt;
        st += (size_t)q->sc[p];
        rt += (size_t)q->rc[p];
        CHECK(st <= INT32_MAX && rt <= INT32_MAX, "all-to-all of more floats than MPI's int count allows");
        if (p != a->me) a->bytes += (double)q->sc[p] * sizeof(float);
    }
    if (!self) q->sc[a->me] = q->rc[a->me] = 0;  // (shm still offers them: its window is laid out whole)
    if (!self && a->algo == ALLTOALL_SHM) q->sc[a->me] = scount[a->me] * w;
    *q = (Pending){1, self, q->q, 0, q->sc, q->sd, q->rc, q->rd, recv, recv, rt};
    if (a->algo == ALLTOALL_NCCL) {  // the rows onto the device, the group's sends and receives queued
        CHECK(st <= a->cap && rt <= a->cap, "all-to-all of %zu and %zu floats through device buffers of %zu", st, rt,
              a->cap);
        a->be->to_device(a->dev_send, send, st * sizeof(float));
        devcomm_alltoallv(a->nccl, a->dev_send, q->sc, q->sd, a->dev_recv, q->rc, q->rd, 0);
    } else {
        const float *s = send;
        if (!a->be->on_host) {
            stage_grow(a, st > rt ? st : rt);
            a->be->to_host(a->stage_send, send, st * sizeof(float));
            s = a->stage_send, q->r = a->stage_recv;
        }
        if (a->algo == ALLTOALL_MPI) mpi_start(a, s, q->r);
        else if (a->algo == ALLTOALL_PAIR) pairs_start(a, s, q->r);
        else shm_start(a, s);
    }
    a->seconds += now_sec() - t0;
}

void alltoall_rows_wait(AllToAll *a) {
    double t0 = now_sec();
    Pending *q = &a->pending;
    CHECK(q->on, "an all-to-all waited for without one in flight");
    if (a->algo == ALLTOALL_MPI) wd_wait_all(&q->q[0], a->comm, "an all-to-all of the experts' rows");
    else if (a->algo == ALLTOALL_PAIR) pairs_wait(a);
    else if (a->algo == ALLTOALL_SHM) shm_finish(a, q->r);
    else nccl_finish(a);
    if (q->r != q->recv)  // staged: each peer's rows to the device (not mine, which the caller moves itself)
        for (int p = 0; p < a->R; p++)
            if (q->rc[p]) a->be->to_device(q->recv + q->rd[p], q->r + q->rd[p], (size_t)q->rc[p] * sizeof(float));
    q->on = 0;
    a->seconds += now_sec() - t0;
}

int alltoall_in_place(const AllToAll *a) { return a->algo == ALLTOALL_SHM; }

const float *alltoall_rows_at(const AllToAll *a, int p) {
    CHECK(a->held && p >= 0 && p < a->R, "all-to-all rows read in place without an exchange in place waited for");
    const size_t *theirs = (const size_t *)(const void *)shm_half(a, p, a->k - 1);
    return (const float *)(const void *)(shm_half(a, p, a->k - 1) + head_bytes(a->R)) + theirs[a->me];
}

void alltoall_rows_release(AllToAll *a) {
    if (!a->held) return;
    a->held = 0;
    __atomic_store_n(&a->counter[a->me][A2A_DONE], a->k, __ATOMIC_RELEASE);  // (done with exchange k - 1)
}

void alltoall_rows(AllToAll *a, const float *send, const int *scount, float *recv, const int *rcount, int w) {
    alltoall_rows_start(a, send, scount, recv, rcount, w, 1);
    alltoall_rows_wait(a);
}
