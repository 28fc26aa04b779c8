// alltoall.c: the all-to-all of a group (alltoall.h): the table of algorithms (alltoall_algos), the
// counts' exchange, and the rows' exchange by MPI_Alltoallv, by pairwise messages, through windows
// shared on one node, or by NCCL; a device buffer staged through the host for the ones on the host.
#include <sched.h>
#include <string.h>
#include "comms/alltoall.h"
#include "comms/devcomm.h"
#include "comms/watchdog.h"
#include "base/util.h"

const AllToAllAlgo alltoall_algos[ALLTOALL_ALGOS] = {
    [ALLTOALL_MPI] = {"mpi", 0, 0},
    [ALLTOALL_PAIR] = {"pair", 0, 0},
    [ALLTOALL_SHM] = {"shm", 1, 0},
    [ALLTOALL_NCCL] = {"nccl", 0, 1},
};

// shm: every rank's window holds the offsets (in floats) of each receiver's rows, then its rows; a small
// control window holds two counters per rank (a cache line each): ready = k + 1 once its window holds
// exchange k, done = k + 1 once it has copied its rows of exchange k out of every window. A rank
// writes its window for exchange k + 1 only once every rank is done with k.
enum { A2A_READY, A2A_DONE, A2A_COUNTERS = 8 };

struct AllToAll {
    MPI_Comm comm;            // a duplicate of the group: its messages match nothing else's
    int R, me, algo;
    const Backend *be;
    struct DevComm *nccl;
    size_t cap;               // shm: floats in each rank's window
    MPI_Win win, ctl;         // shm: the rows' window and the counters'
    char **peer;              // shm: every rank's window
    int64_t **counter;        // shm: every rank's counters
    int64_t k;                // shm: exchanges so far
    float *stage_send, *stage_recv;  // host copies of device buffers (not nccl)
    size_t stage_cap;
    double bytes, seconds;    // since alltoall_take_stats
};

int alltoall_size(const AllToAll *a) { return a->R; }
int alltoall_rank(const AllToAll *a) { return a->me; }

int alltoall_shm_possible(MPI_Comm group) {
    MPI_Comm node;
    int local, R, ok;
    MPI_CHECK(MPI_Comm_size(group, &R));
    MPI_CHECK(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &local));
    MPI_CHECK(MPI_Comm_free(&node));
    ok = local == R;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, group));
    return ok;
}

static void shm_open(AllToAll *a) {
    CHECK(alltoall_shm_possible(a->comm), "all-to-all shm over a group of %d ranks on several nodes", a->R);
    size_t head = ((size_t)a->R * sizeof(size_t) + 63) / 64 * 64;
    char *base;
    MPI_CHECK(MPI_Win_allocate_shared((MPI_Aint)(head + (a->cap ? a->cap : 1) * sizeof(float)), 1, MPI_INFO_NULL,
                                      a->comm, &base, &a->win));
    MPI_CHECK(MPI_Win_allocate_shared(A2A_COUNTERS * sizeof(int64_t), 1, MPI_INFO_NULL, a->comm, &base, &a->ctl));
    memset(base, 0, A2A_COUNTERS * sizeof(int64_t));
    a->peer = xcalloc((size_t)a->R, sizeof(char *));
    a->counter = xcalloc((size_t)a->R, sizeof(int64_t *));
    for (int p = 0; p < a->R; p++) {
        MPI_Aint size;
        int unit;
        char *c;
        MPI_CHECK(MPI_Win_shared_query(a->win, p, &size, &unit, &a->peer[p]));
        MPI_CHECK(MPI_Win_shared_query(a->ctl, p, &size, &unit, &c));
        // cppcheck-suppress invalidPointerCast ; the control window's bytes hold int64 counters
        a->counter[p] = (int64_t *)c;
    }
    MPI_CHECK(MPI_Barrier(a->comm));  // every counter is zero before anyone reads one
}

AllToAll *alltoall_open(MPI_Comm group, int algo, const Backend *be, size_t cap, struct DevComm *nccl) {
    CHECK(algo >= 0 && algo < ALLTOALL_ALGOS, "unknown all-to-all algorithm %d", algo);
    CHECK(algo != ALLTOALL_NCCL || (nccl && !be->on_host), "all-to-all nccl without a group's NCCL communicator");
    CHECK(algo != ALLTOALL_SHM || be->on_host, "all-to-all shm on device buffers");
    AllToAll *a = xcalloc(1, sizeof *a);
    MPI_CHECK(MPI_Comm_dup(group, &a->comm));
    MPI_CHECK(MPI_Comm_size(a->comm, &a->R));
    MPI_CHECK(MPI_Comm_rank(a->comm, &a->me));
    a->algo = algo;
    a->be = be;
    a->nccl = nccl;
    a->cap = cap;
    if (algo == ALLTOALL_SHM) shm_open(a);
    return a;
}

void alltoall_close(AllToAll *a) {
    if (!a) return;
    if (a->algo == ALLTOALL_SHM) {
        MPI_CHECK(MPI_Barrier(a->comm));  // nobody still reads a window
        MPI_Win_free(&a->win);
        MPI_Win_free(&a->ctl);
        free(a->peer); free(a->counter);
    }
    if (a->stage_cap) { a->be->free_host(a->stage_send); a->be->free_host(a->stage_recv); }
    MPI_Comm_free(&a->comm);
    free(a);
}

void alltoall_take_stats(AllToAll *a, double *bytes, double *seconds) {
    *bytes = a->bytes;
    *seconds = a->seconds;
    a->bytes = a->seconds = 0;
}

void alltoall_counts(AllToAll *a, const int *send, int *recv, int per) {
    double t0 = now_sec();
    MPI_Request q;
    MPI_CHECK(MPI_Ialltoall(send, per, MPI_INT, recv, per, MPI_INT, a->comm, &q));
    wd_wait_all(&q, a->comm, "the all-to-all of the experts' counts");
    a->seconds += now_sec() - t0;
    a->bytes += (double)(a->R - 1) * per * sizeof(int);
}

// ---- the rows, on host buffers; counts and offsets in floats ----

static void by_mpi(AllToAll *a, const float *send, const int *sc, const int *sd, float *recv, const int *rc,
                   const int *rd) {
    MPI_Request q;
    MPI_CHECK(MPI_Ialltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, a->comm, &q));
    wd_wait_all(&q, a->comm, "an all-to-all of the experts' rows");
}

static void by_pairs(AllToAll *a, const float *send, const int *sc, const int *sd, float *recv, const int *rc,
                     const int *rd) {
    memcpy(recv + rd[a->me], send + sd[a->me], sizeof(float) * (size_t)sc[a->me]);
    for (int s = 1; s < a->R; s++) {
        int to = (a->me + s) % a->R, from = (a->me - s + a->R) % a->R;
        MPI_Request q[2];
        MPI_CHECK(MPI_Irecv(recv + rd[from], rc[from], MPI_FLOAT, from, 0, a->comm, &q[0]));
        MPI_CHECK(MPI_Isend(send + sd[to], sc[to], MPI_FLOAT, to, 0, a->comm, &q[1]));
        wd_wait(&q[0], MPI_STATUS_IGNORE, from, "the rows of an all-to-all");
        wd_wait(&q[1], MPI_STATUS_IGNORE, to, "the rows of an all-to-all");
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

static void by_shm(AllToAll *a, const float *send, const int *sc, const int *sd, float *recv, const int *rc,
                   const int *rd) {
    size_t total = (size_t)sd[a->R - 1] + (size_t)sc[a->R - 1];
    CHECK(total <= a->cap, "all-to-all of %zu floats into a window of %zu", total, a->cap);
    size_t head = ((size_t)a->R * sizeof(size_t) + 63) / 64 * 64;
    int64_t k = a->k++;
    shm_wait(a, A2A_DONE, k);  // every rank has copied its rows of exchange k - 1 out of my window
    size_t *offs = (size_t *)(void *)a->peer[a->me];
    for (int p = 0; p < a->R; p++) offs[p] = (size_t)sd[p];
    memcpy(a->peer[a->me] + head, send, total * sizeof(float));
    __atomic_store_n(&a->counter[a->me][A2A_READY], k + 1, __ATOMIC_RELEASE);
    shm_wait(a, A2A_READY, k + 1);
    for (int p = 0; p < a->R; p++) {
        const size_t *theirs = (const size_t *)(const void *)a->peer[p];
        const float *rows = (const float *)(const void *)(a->peer[p] + head);
        memcpy(recv + rd[p], rows + theirs[a->me], sizeof(float) * (size_t)rc[p]);
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

void alltoall_rows(AllToAll *a, const float *send, const int *scount, float *recv, const int *rcount, int w) {
    double t0 = now_sec();
    int R = a->R;
    int *sc = xmalloc(sizeof(int) * 4 * (size_t)R), *sd = sc + R, *rc = sc + 2 * R, *rd = sc + 3 * R;
    size_t st = 0, rt = 0;
    for (int p = 0; p < R; p++) {
        CHECK(scount[p] >= 0 && rcount[p] >= 0, "all-to-all with a negative count");
        sc[p] = scount[p] * w, sd[p] = (int)st, rc[p] = rcount[p] * w, rd[p] = (int)rt;
        st += (size_t)sc[p];
        rt += (size_t)rc[p];
        CHECK(st <= INT32_MAX && rt <= INT32_MAX, "all-to-all of more floats than MPI's int count allows");
        if (p != a->me) a->bytes += (double)sc[p] * sizeof(float);
    }
    if (a->algo == ALLTOALL_NCCL) {
        devcomm_alltoallv(a->nccl, send, sc, sd, recv, rc, rd);
    } else {
        const float *s = send;
        float *r = recv;
        if (!a->be->on_host) {
            stage_grow(a, st > rt ? st : rt);
            a->be->to_host(a->stage_send, send, st * sizeof(float));
            s = a->stage_send, r = a->stage_recv;
        }
        if (a->algo == ALLTOALL_MPI) by_mpi(a, s, sc, sd, r, rc, rd);
        else if (a->algo == ALLTOALL_PAIR) by_pairs(a, s, sc, sd, r, rc, rd);
        else by_shm(a, s, sc, sd, r, rc, rd);
        if (r != recv) a->be->to_device(recv, r, rt * sizeof(float));
    }
    free(sc);
    a->seconds += now_sec() - t0;
}
