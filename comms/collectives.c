// collectives.c: the collectives: the small ones of any communicator (barrier, all-reduces of a few
// numbers, one verdict for every rank), and the data-parallel ones over a grid's dp group on float
// buffers: MPI's own, a from-scratch ring, and shared-memory windows; their shards, non-blocking and blocking.
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <sys/statvfs.h>
#include "comms.h"
#include "base/util.h"
#include "comms/watchdog.h"

// The small collectives: non-blocking and waited for under the watchdog.
void comm_barrier(MPI_Comm comm) {
    MPI_Request q;
    MPI_CHECK(MPI_Ibarrier(comm, &q));
    wd_wait_all(&q, comm, "a barrier");
}
static void allreduce_small(void *x, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, t, op, comm, &q));
    wd_wait_all(&q, comm, "an all-reduce");
}
void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm) { allreduce_small(x, n, MPI_DOUBLE, MPI_SUM, comm); }
void comm_allreduce_max_double(double *x, int n, MPI_Comm comm) { allreduce_small(x, n, MPI_DOUBLE, MPI_MAX, comm); }
int comm_same_u64(uint64_t value, MPI_Comm comm) {
    uint64_t lo = value, hi = value;
    allreduce_small(&lo, 1, MPI_UINT64_T, MPI_MIN, comm);
    allreduce_small(&hi, 1, MPI_UINT64_T, MPI_MAX, comm);
    return lo == hi;
}

void comm_agree(MPI_Comm comm, const char *mine) { comm_agree_code(comm, mine, 2); }

void comm_agree_code(MPI_Comm comm, const char *mine, int code) {
    int rank, me, first;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    me = mine[0] ? rank : INT_MAX;
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(&me, &first, 1, MPI_INT, MPI_MIN, comm, &q));
    wd_wait_all(&q, comm, "agreeing on a verdict");
    if (first == INT_MAX) return;
    char msg[2048] = "";
    if (rank == first) snprintf(msg, sizeof msg, "%s", mine);
    MPI_CHECK(MPI_Ibcast(msg, sizeof msg, MPI_CHAR, first, comm, &q));
    wd_wait(&q, NULL, first, "a verdict");
    if (code == 1) run_failed("%s", msg);
    user_error("%s", msg);
}

// ---- data-parallel collectives: MPI's own, or a ring from point-to-point messages ----
//
// The ring (the algorithm of Baidu's allreduce, Horovod and NCCL's ring): D ranks in a circle, the
// buffer cut into D chunks. Reduce-scatter: in D-1 steps each rank sends one chunk to its right
// neighbour and adds the chunk arriving from its left into its own copy; after step s rank r has
// summed s+2 contributions of chunk (r-s-2) mod D, so after D-1 steps it holds the full sum of
// chunk r (its own). All-gather: D-1 more steps pass the finished chunks around the circle. Each
// rank sends and receives 2(D-1)/D of the buffer in all, whatever D: the bandwidth optimum.
//
// Overlap. MPI moves data only inside MPI calls (MPICH has no progress thread unless one is
// enabled, and that one spins on a core). So a collective in flight is a state machine that
// comm_progress() advances without blocking: it tests the current step's two messages and, when
// both are done, adds the received chunk and posts the next step. The trainer calls it after
// every layer of the backward pass (a few ms apart at the sizes that matter), so a bucket's
// messages travel while later layers compute, and neither rank sits waiting for the other until
// the final wait. We chose polling over a helper thread with MPI_THREAD_MULTIPLE because each
// rank here has one core: a helper thread would spin on the core the gemms need, and MPICH's
// global lock would serialise it with the pipeline's own sends and receives anyway.

enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER };

struct CommReq {
    int op, algo;
    MPI_Comm comm;
    int D, me, left, right;   // ranks in comm
    const Backend *be;
    float *dev, *buf;         // the caller's buffer; the host buffer worked on (== dev on the host)
    size_t n;
    float scale;
    float *out;               // reduce-scatter: where this rank's chunk goes (NULL: its chunk of buf) ...
    int out_written;          //   ... written there already (shm sums straight into it)
    int tag, done;
    double t_done;
    MPI_Request req;          // mpi: the non-blocking collective
    int *counts, *displs;     // mpi: chunk sizes and offsets
    float *tmp;               // ring: one received chunk; mpi reduce-scatter: the result
    int step, rs_steps, ag_steps, posted;  // ring: steps done, of D-1 reduce-scatter then D-1 all-gather
    MPI_Request rq[2];        // ring: this step's receive and send
    struct Shm *shm;          // shm: the windows; k: this collective's number among dp's shm ones
    size_t shm_off;           //   the buffer's byte offset in its window (the same on every rank)
    struct ShmWin *win;
    int64_t k;
    CommReq *next;            // the list of collectives in flight
};
static CommReq *in_flight;

void comm_shard(size_t n, int D, int i, size_t *off, size_t *len) {
    size_t a = (size_t)((unsigned __int128)n * (unsigned)i / (unsigned)D);
    size_t b = (size_t)((unsigned __int128)n * (unsigned)(i + 1) / (unsigned)D);
    *off = a;
    *len = b - a;
}

static void scale_host(float *x, size_t n, float a) {
    if (a != 1.0f) for (size_t i = 0; i < n; i++) x[i] *= a;
}

static void req_complete(CommReq *q) {
    size_t off = 0, len = q->n;
    if (q->op == OP_REDUCE_SCATTER) comm_shard(q->n, q->D, q->me, &off, &len);
    // a reduce-scatter's chunk into out (shm wrote it there itself), else a staged result back to the device
    if (q->out && !q->out_written) q->be->to_device(q->out, q->buf + off, len * sizeof(float));
    else if (q->buf != q->dev) q->be->to_device(q->dev + off, q->buf + off, len * sizeof(float));
    q->done = 1;
    q->t_done = now_sec();
    for (CommReq **p = &in_flight; *p; p = &(*p)->next)
        if (*p == q) { *p = q->next; break; }
}

static int mod(int a, int D) { return ((a % D) + D) % D; }

static void ring_post(CommReq *q) {
    int s = q->step, D = q->D, me = q->me, send_chunk, recv_chunk;
    float *recv_to;
    size_t so, sl, ro, rl;
    if (s < q->rs_steps) {  // reduce-scatter: pass chunk (me-s-1) on, take in chunk (me-s-2)
        send_chunk = mod(me - s - 1, D);
        recv_chunk = mod(me - s - 2, D);
    } else {                // all-gather: pass on the finished chunk (me-a), take in (me-a-1)
        int a = s - q->rs_steps;
        send_chunk = mod(me - a, D);
        recv_chunk = mod(me - a - 1, D);
    }
    comm_shard(q->n, D, send_chunk, &so, &sl);
    comm_shard(q->n, D, recv_chunk, &ro, &rl);
    recv_to = s < q->rs_steps ? q->tmp : q->buf + ro;
    MPI_CHECK(MPI_Irecv(recv_to, (int)rl, MPI_FLOAT, q->left, q->tag, q->comm, &q->rq[0]));
    MPI_CHECK(MPI_Isend(q->buf + so, (int)sl, MPI_FLOAT, q->right, q->tag, q->comm, &q->rq[1]));
    q->posted = 1;
}

static void ring_advance(CommReq *q) {
    for (;;) {
        if (q->posted) {
            int flag = 0;
            MPI_Status st[2];  // (MPI_STATUSES_IGNORE trips gcc's access-size warning)
            MPI_CHECK(MPI_Testall(2, q->rq, &flag, st));
            if (!flag) return;
            q->posted = 0;
            if (q->step < q->rs_steps) {  // add the received partial sum into our copy
                size_t off, len;
                comm_shard(q->n, q->D, mod(q->me - q->step - 2, q->D), &off, &len);
                float *restrict dst = q->buf + off;
                const float *restrict src = q->tmp;
                for (size_t i = 0; i < len; i++) dst[i] += src[i];
            }
            q->step++;
            if (q->step == q->rs_steps && q->op != OP_ALLGATHER) {  // own chunk complete: scale it
                size_t off, len;
                comm_shard(q->n, q->D, q->me, &off, &len);
                scale_host(q->buf + off, len, q->scale);
            }
        }
        if (q->step == q->rs_steps + q->ag_steps) { req_complete(q); return; }
        ring_post(q);
    }
}

static void mpi_advance(CommReq *q) {
    int flag = 0;
    MPI_CHECK(MPI_Test(&q->req, &flag, MPI_STATUS_IGNORE));
    if (!flag) return;
    if (q->op == OP_ALLREDUCE) scale_host(q->buf, q->n, q->scale);
    if (q->op == OP_REDUCE_SCATTER) {
        size_t off, len;
        comm_shard(q->n, q->D, q->me, &off, &len);
        for (size_t i = 0; i < len; i++) q->buf[off + i] = q->tmp[i] * q->scale;
    }
    req_complete(q);
}

// ---- shm: collectives through shared memory, for the ranks of one node ----
// MPI-3 lets the ranks of a node allocate one window (MPI_Win_allocate_shared) and read and write
// each other's part of it with plain loads and stores. With the gradients (and for ZeRO-1 the
// parameters) in such a window, a collective sends no message at all: each rank sums its own
// chunk straight out of every rank's buffer, in rank order (so every chunk is summed alike and all
// ranks end bit-equal), and writes each finished block of it back into every rank's buffer while
// it is still in L1 (all-reduce), or only into its own (reduce-scatter); an all-gather pushes the
// own chunk into every other buffer. Only rank r ever reads or writes chunk r of any buffer, so
// the ranks need just two counters each, in a small control window (release stores, acquire
// loads), counting the shm collectives of dp, which every rank starts in the same order:
// ready = k + 1 once my buffer holds my part of collective k; done = k + 1 once I have written my
// chunk of k everywhere. Collective k is complete on a rank when every rank is done. A rank moves
// along only inside comm_progress, like the ring. 64 MiB over 2 ranks takes 6-8 ms here, where
// MPI_Allreduce, copying through bounce buffers, takes 40-50 ms (micropp allreduce).
enum { SHM_READY, SHM_DONE, SHM_COUNTERS = 8 };  // 8 int64: a cache line per rank

typedef struct ShmWin {
    MPI_Win win;
    char *base;               // mine
    char **peer;              // every dp rank's part (peer[me] == base)
    size_t bytes;
    struct ShmWin *next;
} ShmWin;

struct Shm {
    int D, me;
    ShmWin ctl;               // the counters: SHM_COUNTERS int64 per rank
    ShmWin *wins;             // the buffers handed out by comm_shared_alloc
    int64_t started;          // shm collectives started on dp
};

static int64_t *shm_counter(struct Shm *m, int rank, int which) {
    return (int64_t *)m->ctl.peer[rank] + which;
}
static int64_t shm_get(struct Shm *m, int rank, int which) {
    return __atomic_load_n(shm_counter(m, rank, which), __ATOMIC_ACQUIRE);
}
static void shm_set(struct Shm *m, int which, int64_t v) {
    __atomic_store_n(shm_counter(m, m->me, which), v, __ATOMIC_RELEASE);
}
static int shm_all_reached(struct Shm *m, int which, int64_t v) {
    for (int p = 0; p < m->D; p++)
        if (shm_get(m, p, which) < v) return 0;
    return 1;
}

static void shm_win_open(ShmWin *w, MPI_Comm comm, size_t bytes, int D) {
    MPI_CHECK(MPI_Win_allocate_shared((MPI_Aint)bytes, 1, MPI_INFO_NULL, comm, &w->base, &w->win));
    w->bytes = bytes;
    w->peer = xcalloc((size_t)D, sizeof(char *));
    for (int p = 0; p < D; p++) {
        MPI_Aint size;
        int unit;
        MPI_CHECK(MPI_Win_shared_query(w->win, p, &size, &unit, &w->peer[p]));
    }
}

// How many ranks of this rank's dp group share its node.
static int dp_on_node(Comm *c) {
    MPI_Comm node;
    int local;
    MPI_CHECK(MPI_Comm_split_type(c->dp, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &local));
    MPI_CHECK(MPI_Comm_free(&node));
    return local;
}

// Why this rank cannot take part in shm windows of `bytes` each on every rank ("" when it can): its
// dp group must sit on one node, and that node's /dev/shm (where MPICH puts the window: a too-small
// tmpfs, as Docker's 64 MB default, would end the job with SIGBUS on first touch) must have room
// for every rank of the node. MICROPP_SHM_FREE=BYTES stands in for /dev/shm's free space (tests).
double comm_shm_room(void) {
    struct statvfs st;
    const char *fake = getenv("MICROPP_SHM_FREE");
    if (fake) return atof(fake);
    return statvfs("/dev/shm", &st) == 0 ? (double)st.f_bavail * (double)st.f_frsize : -1;
}

static void shm_unfit(Comm *c, size_t bytes, const char *what, char *why, size_t wn) {
    int D, local, node_ranks;
    MPI_CHECK(MPI_Comm_size(c->dp, &D));
    local = dp_on_node(c);
    MPI_Comm node;
    double need = (double)bytes;  // summed over the ranks of this node
    MPI_CHECK(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &node_ranks));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &need, 1, MPI_DOUBLE, MPI_SUM, node));
    MPI_CHECK(MPI_Comm_free(&node));
    comm_shm_unfit(what, D, local, need, node_ranks, comm_shm_room(), why, wn);
}

void comm_shm_unfit(const char *what, int D, int local, double need, int node_ranks, double room, char *why,
                    size_t wn) {
    why[0] = 0;
    char nb[32], rb[32];
    const char *flag = strcmp(what, "allreduce") ? "--allreduce" : "--algo";  // (micropp allreduce's)
    if (D > COMM_MAX_SHM)
        snprintf(why, wn, "%s: %s shm takes at most %d replicas per stage, not %d: use %s mpi or ring", what, flag,
                 COMM_MAX_SHM, D, flag);
    else if (local != D)
        snprintf(why, wn,
                 "%s: %s shm needs the %d replicas of each stage on one node, and only %d share this rank's: use %s "
                 "mpi or ring",
                 what, flag, D, local, flag);
    else if (room >= 0 && room < need)
        snprintf(why, wn,
                 "%s: %s shm needs %s of /dev/shm for the %d ranks of this node, and %s are free: enlarge it "
                 "(docker run --shm-size) or use %s mpi",
                 what, flag, fmt_bytes(need, nb, sizeof nb), node_ranks, fmt_bytes(room, rb, sizeof rb), flag);
}

int comm_shared_possible(Comm *c, size_t bytes) {
    char why[300];
    shm_unfit(c, bytes, "", why, sizeof why);
    int ok = why[0] == 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c->world));
    return ok;
}

void comm_shared_require(Comm *c, size_t bytes, const char *what) {
    char why[300];
    shm_unfit(c, bytes, what, why, sizeof why);
    comm_agree(c->world, why);
}

float *comm_shared_alloc(Comm *c, size_t n) {
    int D;
    MPI_CHECK(MPI_Comm_size(c->dp, &D));
    if (!c->shm) {
        struct Shm *m = xcalloc(1, sizeof *m);
        m->D = D;
        MPI_CHECK(MPI_Comm_rank(c->dp, &m->me));
        shm_win_open(&m->ctl, c->dp, SHM_COUNTERS * sizeof(int64_t), D);
        memset(m->ctl.base, 0, SHM_COUNTERS * sizeof(int64_t));
        MPI_CHECK(MPI_Barrier(c->dp));  // every rank's counters are zero before anyone reads them
        c->shm = m;
    }
    ShmWin *w = xcalloc(1, sizeof *w);
    shm_win_open(w, c->dp, (n ? n : 1) * sizeof(float), D);
    w->next = c->shm->wins;
    c->shm->wins = w;
    // cppcheck-suppress invalidPointerCast ; the window's bytes are allocated to hold floats
    return (float *)w->base;
}

double comm_shared_count(const Comm *c) { return c->shm ? (double)c->shm->started : 0; }

void comm_shared_free(Comm *c) {
    struct Shm *m = c->shm;
    if (!m) return;
    for (ShmWin *w = m->wins, *next; w; w = next) {
        next = w->next;
        MPI_Win_free(&w->win);
        free(w->peer); free(w);
    }
    MPI_Win_free(&m->ctl.win);
    free(m->ctl.peer); free(m);
    c->shm = NULL;
}

// The window holding [buf, buf + n), or NULL.
static ShmWin *shm_find(struct Shm *m, const float *buf, size_t n) {
    for (ShmWin *w = m ? m->wins : NULL; w; w = w->next)
        if ((const char *)buf >= w->base && (const char *)(buf + n) <= w->base + w->bytes) return w;
    return NULL;
}

static void shm_advance(CommReq *q) {
    struct Shm *m = q->shm;
    int64_t k = q->k;
    if (shm_get(m, q->me, SHM_DONE) == k) {  // (k - 1 is done: one collective at a time, in order)
        // Every rank has its part in place (and will not touch the others' chunks of it).
        if (!shm_all_reached(m, SHM_READY, k + 1)) return;
        size_t off, len;
        comm_shard(q->n, q->D, q->me, &off, &len);
        float *at[COMM_MAX_SHM];  // my chunk in every rank's buffer
        // cppcheck-suppress invalidPointerCast ; the window's bytes hold floats (comm_shared_alloc)
        for (int p = 0; p < q->D; p++) at[p] = (float *)(q->win->peer[p] + q->shm_off) + off;
        if (q->op == OP_ALLGATHER) {  // push my chunk to the others
            for (int p = 0; p < q->D; p++)
                if (p != q->me) memcpy(at[p], at[q->me], len * sizeof(float));
        } else {
            // Sum my chunk over every rank's buffer, in rank order, a block at a time (it stays in
            // L1), and write each finished block to every rank (all-reduce) or to me (reduce-scatter).
            enum { BLOCK = 2048 };
            float acc[BLOCK];
            for (size_t b0 = 0; b0 < len; b0 += BLOCK) {
                size_t nb = len - b0 < BLOCK ? len - b0 : BLOCK;
                // cppcheck-suppress knownConditionTrueFalse ; wrong: nb >= 1 inside the loop
                for (size_t i = 0; i < nb; i++) acc[i] = at[0][b0 + i];
                for (int p = 1; p < q->D; p++) {
                    const float *restrict src = at[p] + b0;
                    // cppcheck-suppress knownConditionTrueFalse ; wrong: nb >= 1 inside the loop
                    for (size_t i = 0; i < nb; i++) acc[i] += src[i];
                }
                scale_host(acc, nb, q->scale);
                for (int p = 0; p < q->D; p++)
                    if (p == q->me || q->op == OP_ALLREDUCE)
                        memcpy((p == q->me && q->out ? q->out : at[p]) + b0, acc, nb * sizeof(float));
            }
            q->out_written = q->out != NULL;
        }
        shm_set(m, SHM_DONE, k + 1);
    }
    if (shm_get(m, q->me, SHM_DONE) <= k) return;
    if (shm_all_reached(m, SHM_DONE, k + 1)) req_complete(q);  // every chunk is in every buffer
}

// Host staging of a device buffer's collective (the GPU's gradients go through the host): pinned memory
// (alloc_host: cudaMallocHost on cuda, so the copies run at full speed) kept for reuse, since every
// step runs the same collectives; never freed (cudaFreeHost may wait for the whole device). A buffer
// serves one collective at a time; a larger need takes a new one, the smaller stays for smaller ones.
typedef struct { float *p; size_t cap; int busy; } HostBuf;
static HostBuf *host_bufs;
static int n_host_bufs;
static float *host_take(const Backend *be, size_t n) {
    HostBuf *fit = NULL;
    for (int i = 0; i < n_host_bufs; i++)  // the smallest free one that holds n
        if (!host_bufs[i].busy && host_bufs[i].cap >= n && (!fit || host_bufs[i].cap < fit->cap)) fit = &host_bufs[i];
    if (!fit) {
        HostBuf *grown = realloc(host_bufs, sizeof(HostBuf) * (size_t)(n_host_bufs + 1));
        CHECK(grown, "out of memory growing the host staging buffers");
        host_bufs = grown;
        fit = &host_bufs[n_host_bufs++];
        fit->cap = n ? n : 1;
        fit->p = be->alloc_host(fit->cap * sizeof(float));
    }
    fit->busy = 1;
    return fit->p;
}
static void host_give(const float *p) {
    for (int i = 0; i < n_host_bufs; i++)
        if (host_bufs[i].p == p) host_bufs[i].busy = 0;
}

static void req_advance(CommReq *q) {
    if (q->done) return;
    if (q->algo == ALLREDUCE_RING) ring_advance(q);
    else if (q->algo == ALLREDUCE_SHM) shm_advance(q);
    else mpi_advance(q);
}

static CommReq *req_start(Comm *c, int op, float *buf, size_t n, float scale, int algo, float *out) {
    CHECK(n <= (size_t)INT32_MAX, "collective of %zu floats: more than MPI's int count allows", n);
    CHECK(algo == ALLREDUCE_MPI || algo == ALLREDUCE_RING || algo == ALLREDUCE_SHM, "unknown all-reduce algorithm %d",
          algo);
    ShmWin *win = algo == ALLREDUCE_SHM && c->be->on_host ? shm_find(c->shm, buf, n) : NULL;
    if (algo == ALLREDUCE_SHM && !win) algo = ALLREDUCE_MPI;  // a buffer outside the windows
    CommReq *q = xcalloc(1, sizeof *q);
    q->op = op; q->algo = algo; q->comm = c->dp; q->be = c->be;
    q->dev = buf; q->n = n; q->scale = scale; q->out = out;
    MPI_CHECK(MPI_Comm_size(c->dp, &q->D));
    MPI_CHECK(MPI_Comm_rank(c->dp, &q->me));
    q->left = mod(q->me - 1, q->D);
    q->right = mod(q->me + 1, q->D);
    q->tag = 1000 + (int)(c->seq++ % 20000u);  // the same on every rank: collectives start in the same order
    q->req = q->rq[0] = q->rq[1] = MPI_REQUEST_NULL;
    q->buf = buf;
    if (!c->be->on_host) {
        q->buf = host_take(c->be, n);
        c->be->to_host(q->buf, buf, n * sizeof(float));
    }
    q->next = in_flight;
    in_flight = q;
    size_t off, len;
    comm_shard(n, q->D, q->me, &off, &len);
    if (q->D == 1 || n == 0) {  // nothing to exchange
        if (op != OP_ALLGATHER) scale_host(q->buf, n, scale);
        req_complete(q);
        return q;
    }
    if (algo == ALLREDUCE_SHM) {
        q->shm = c->shm; q->win = win;
        q->shm_off = (size_t)((char *)buf - win->base);
        q->k = c->shm->started++;
        shm_set(c->shm, SHM_READY, q->k + 1);  // (collectives start in order: ready was k)
        shm_advance(q);
        return q;
    }
    if (algo == ALLREDUCE_RING) {
        size_t most = (n + (size_t)q->D - 1) / (size_t)q->D;
        q->rs_steps = op == OP_ALLGATHER ? 0 : q->D - 1;
        q->ag_steps = op == OP_REDUCE_SCATTER ? 0 : q->D - 1;
        if (q->rs_steps) q->tmp = xmalloc(most * sizeof(float));
        ring_advance(q);
        return q;
    }
    q->counts = xmalloc(sizeof(int) * (size_t)q->D);
    q->displs = xmalloc(sizeof(int) * (size_t)q->D);
    for (int i = 0; i < q->D; i++) {
        size_t o, l;
        comm_shard(n, q->D, i, &o, &l);
        q->counts[i] = (int)l;
        q->displs[i] = (int)o;
    }
    switch (op) {
    case OP_ALLREDUCE:
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, q->buf, (int)n, MPI_FLOAT, MPI_SUM, q->comm, &q->req));
        break;
    case OP_REDUCE_SCATTER:
        q->tmp = xmalloc((len ? len : 1) * sizeof(float));
        MPI_CHECK(MPI_Ireduce_scatter(q->buf, q->tmp, q->counts, MPI_FLOAT, MPI_SUM, q->comm, &q->req));
        break;
    default:
        MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, q->buf, q->counts, q->displs,
                                  MPI_FLOAT, q->comm, &q->req));
    }
    return q;
}

CommReq *comm_allreduce_start(Comm *c, float *buf, size_t n, float scale, int algo) {
    return req_start(c, OP_ALLREDUCE, buf, n, scale, algo, NULL);
}
CommReq *comm_reduce_scatter_start(Comm *c, float *buf, size_t n, float scale, int algo) {
    return req_start(c, OP_REDUCE_SCATTER, buf, n, scale, algo, NULL);
}
CommReq *comm_reduce_scatter_to(Comm *c, float *buf, size_t n, float scale, int algo, float *out) {
    return req_start(c, OP_REDUCE_SCATTER, buf, n, scale, algo, out);
}
CommReq *comm_allgather_start(Comm *c, float *buf, size_t n, int algo) {
    return req_start(c, OP_ALLGATHER, buf, n, 1.0f, algo, NULL);
}

void comm_progress(void) {
    // shm collectives make no MPI call, and a rank spinning on one must still let MPI move its own
    // sends in flight (a pipeline neighbour may be waiting on them).
    comm_poll_sends();
    CommReq *q = in_flight;
    while (q) {
        CommReq *next = q->next;  // q may leave the list as it completes
        req_advance(q);
        q = next;
    }
}

int comm_test(CommReq *q) {
    comm_progress();
    return q->done;
}

// One poll of a collective waited for: every collective in flight moves; then the core is yielded
// (free when nothing else wants it) unless it is done: with more ranks than cores, the rank being
// waited for may need this very core, and shm moves only when that rank runs.
static int req_ready(void *ctx) {
    CommReq *q = ctx;
    comm_progress();
    if (!q->done) sched_yield();
    return q->done;
}

double comm_wait(CommReq *q) {
    // Spins, as MPI_Wait does, under the watchdog (the same poll the GPU's waits use)
    wd_poll(req_ready, q, (WdSpin){.peer = -1, .what = "an all-reduce of the data-parallel group", .comm = &q->comm});
    double t = q->t_done;
    if (q->buf != q->dev) host_give(q->buf);
    free(q->tmp); free(q->counts); free(q->displs);
    free(q);
    return t;
}

// The blocking forms. MPI's own are its blocking collectives (MPI_Allreduce, ...), which MPI
// implementations tune hardest; the ring is its non-blocking form, waited for.
static void mpi_blocking(Comm *c, int op, float *buf, size_t n, float scale) {
    CHECK(n <= (size_t)INT32_MAX, "collective of %zu floats: more than MPI's int count allows", n);
    int D, me;
    MPI_CHECK(MPI_Comm_size(c->dp, &D));
    MPI_CHECK(MPI_Comm_rank(c->dp, &me));
    c->seq++;  // as the non-blocking forms do: the ring's tags stay in step on every rank
    float *h = buf;
    if (!c->be->on_host) {
        h = host_take(c->be, n);
        c->be->to_host(h, buf, n * sizeof(float));
    }
    size_t off, len;
    comm_shard(n, D, me, &off, &len);
    if (op == OP_ALLREDUCE) {
        if (D > 1 && n) allreduce_small(h, (int)n, MPI_FLOAT, MPI_SUM, c->dp);
        scale_host(h, n, scale);
        off = 0, len = n;
    } else {
        int *counts = xmalloc(sizeof(int) * (size_t)D), *displs = xmalloc(sizeof(int) * (size_t)D);
        MPI_Request q;
        for (int i = 0; i < D; i++) {
            size_t o, l;
            comm_shard(n, D, i, &o, &l);
            counts[i] = (int)l;
            displs[i] = (int)o;
        }
        if (op == OP_REDUCE_SCATTER) {
            float *t = xmalloc((len ? len : 1) * sizeof(float));
            if (D > 1 && n) {
                MPI_CHECK(MPI_Ireduce_scatter(h, t, counts, MPI_FLOAT, MPI_SUM, c->dp, &q));
                wd_wait_all(&q, c->dp, "a reduce-scatter");
            }
            else memcpy(t, h, len * sizeof(float));
            for (size_t i = 0; i < len; i++) h[off + i] = t[i] * scale;
            free(t);
        } else {
            if (D > 1 && n) {
                MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, counts, displs, MPI_FLOAT, c->dp, &q));
                wd_wait_all(&q, c->dp, "an all-gather");
            }
            off = 0, len = n;
        }
        free(counts); free(displs);
    }
    if (h != buf) {
        c->be->to_device(buf + off, h + off, len * sizeof(float));
        host_give(h);
    }
}

void comm_allreduce(Comm *c, float *buf, size_t n, float scale, int algo) {
    if (algo == ALLREDUCE_MPI) mpi_blocking(c, OP_ALLREDUCE, buf, n, scale);
    else comm_wait(comm_allreduce_start(c, buf, n, scale, algo));
}
void comm_reduce_scatter(Comm *c, float *buf, size_t n, float scale, int algo) {
    if (algo == ALLREDUCE_MPI) mpi_blocking(c, OP_REDUCE_SCATTER, buf, n, scale);
    else comm_wait(comm_reduce_scatter_start(c, buf, n, scale, algo));
}
void comm_allgather(Comm *c, float *buf, size_t n, int algo) {
    if (algo == ALLREDUCE_MPI) mpi_blocking(c, OP_ALLGATHER, buf, n, 1.0f);
    else comm_wait(comm_allgather_start(c, buf, n, algo));
}
