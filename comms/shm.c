// shm.c: collectives through shared memory (shm.h), a row of the collectives' table for the ranks of
// one node: the windows the ranks share (made, found, freed), whether they are possible here (one
// node, /dev/shm's room), and the all-reduce, reduce-scatter and all-gather that sum in place in them.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "comms/shm.h"
#include "comms/launch.h"  // launch_world_one_node
#include "comms/watchdog.h"
#include "base/util.h"

// The ranks of a node map one segment of /dev/shm (shm_segment_open) and read and write each
// other's part of it with plain loads and stores. With the gradients (and for ZeRO-1 the
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
    ShmSegment seg;           // seg.peer[p]: dp rank p's part
    char *base;               // mine (seg.peer[me])
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
    return (int64_t *)m->ctl.seg.peer[rank] + which;
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

// A segment: rank 0 of comm creates a file in /dev/shm, sized for every rank's part, and passes its
// name on; every rank maps it; once all have, rank 0 unlinks it (the mappings keep it until the last
// munmap). MPI_Win_allocate_shared did this too, in about ten blocking collectives that, on a node
// with more ranks than cores, spin through scheduler slices (measured: 35 ms of CPU per rank per
// window, 4 ranks on 2 cores); here two waits under the watchdog, as the wait policy says.
size_t shm_segment_stride(size_t bytes) { return ((bytes ? bytes : 1) + 4095) / 4096 * 4096; }

void shm_segment_open(ShmSegment *s, MPI_Comm comm, size_t bytes) {
    int me, n;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &n));
    size_t stride = shm_segment_stride(bytes);  // each part on pages of its own
    s->bytes = stride * (size_t)n;
    char name[64] = "";
    if (me == 0) {
        static unsigned made;  // this process's segments so far; and the clock, as containers that share
        struct timespec ts;    // /dev/shm may reuse a pid
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(name, sizeof name, "/micropp-%ld-%u-%lx", (long)getpid(), made++, (unsigned long)ts.tv_nsec);
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        CHECK(fd >= 0, "cannot create shared memory %s in /dev/shm: %s", name, strerror(errno));
        int sized = ftruncate(fd, (off_t)s->bytes) == 0;
        int err = errno;
        close(fd);
        if (!sized) shm_unlink(name);
        CHECK(sized, "cannot size shared memory %s to %zu bytes: %s", name, s->bytes, strerror(err));
    }
    MPI_Request q;
    MPI_CHECK(MPI_Ibcast(name, (int)sizeof name, MPI_CHAR, 0, comm, &q));
    wd_wait_all(&q, comm, "sharing memory");
    int fd = shm_open(name, O_RDWR, 0);
    CHECK(fd >= 0, "cannot open shared memory %s (made by rank 0 of the group): %s", name, strerror(errno));
    void *base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    CHECK(base != MAP_FAILED, "cannot map %zu bytes of shared memory %s: %s", s->bytes, name, strerror(err));
    MPI_CHECK(MPI_Ibarrier(comm, &q));  // every rank has it mapped
    wd_wait_all(&q, comm, "sharing memory");
    if (me == 0) shm_unlink(name);
    s->peer = xcalloc((size_t)n, sizeof(char *));
    for (int p = 0; p < n; p++) s->peer[p] = (char *)base + (size_t)p * stride;  // (zeroed: a new file)
}

void shm_segment_close(ShmSegment *s) {
    if (!s->peer) return;
    munmap(s->peer[0], s->bytes);  // (this rank's view: the others' stay until their own munmap)
    free(s->peer);
    s->peer = NULL;
}

static void shm_win_open(ShmWin *w, MPI_Comm comm, size_t bytes) {
    int me;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    shm_segment_open(&w->seg, comm, bytes);
    w->base = w->seg.peer[me];
    w->bytes = bytes;
}

int shm_group_on_node(MPI_Comm group) {
    MPI_Comm node;
    int local;
    if (launch_world_one_node()) {  // every rank on this node, by the launcher's word (comms/hardware.c)
        MPI_CHECK(MPI_Comm_size(group, &local));
        return local;
    }
    MPI_CHECK(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
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

void comm_shm_why(Comm *c, size_t bytes, const char *what, char *why, size_t wn) {
    int D, local, node_ranks;
    MPI_CHECK(MPI_Comm_size(c->dp, &D));
    local = shm_group_on_node(c->dp);
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
    comm_shm_why(c, bytes, "", why, sizeof why);
    int ok = why[0] == 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c->world));
    return ok;
}

float *comm_shared_alloc(Comm *c, size_t n) {
    int D;
    MPI_CHECK(MPI_Comm_size(c->dp, &D));
    if (!c->shm) {
        struct Shm *m = xcalloc(1, sizeof *m);
        m->D = D;
        MPI_CHECK(MPI_Comm_rank(c->dp, &m->me));
        shm_win_open(&m->ctl, c->dp, SHM_COUNTERS * sizeof(int64_t));  // every counter zero (a new segment)
        c->shm = m;
    }
    ShmWin *w = xcalloc(1, sizeof *w);
    shm_win_open(w, c->dp, (n ? n : 1) * sizeof(float));
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
        shm_segment_close(&w->seg);
        free(w);
    }
    shm_segment_close(&m->ctl.seg);
    free(m);
    c->shm = NULL;
}

// The window holding [buf, buf + n), or NULL.
static ShmWin *shm_find(struct Shm *m, const float *buf, size_t n) {
    for (ShmWin *w = m ? m->wins : NULL; w; w = w->next)
        if ((const char *)buf >= w->base && (const char *)(buf + n) <= w->base + w->bytes) return w;
    return NULL;
}

int comm_shared_holds(const Comm *c, const float *buf, size_t n) { return shm_find(c->shm, buf, n) != NULL; }

// A collective in flight in the windows.
typedef struct {
    struct Shm *shm;
    ShmWin *win;              // the window holding the buffer ...
    size_t off;               //   ... at this byte offset (the same on every rank)
    int64_t k;                // this collective's number among dp's shm ones
} ShmReq;

int comm_shm_advance(CommReq *q) {
    ShmReq *r = q->state;
    struct Shm *m = r->shm;
    int64_t k = r->k;
    if (shm_get(m, q->me, SHM_DONE) == k) {  // (k - 1 is done: one collective at a time, in order)
        // Every rank has its part in place (and will not touch the others' chunks of it).
        if (!shm_all_reached(m, SHM_READY, k + 1)) return 0;
        size_t off, len;
        comm_shard(q->n, q->D, q->me, &off, &len);
        float *at[COMM_MAX_SHM];  // my chunk in every rank's buffer
        // cppcheck-suppress invalidPointerCast ; the window's bytes hold floats (comm_shared_alloc)
        for (int p = 0; p < q->D; p++) at[p] = (float *)(r->win->seg.peer[p] + r->off) + off;
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
                comm_scale_host(acc, nb, q->scale);
                for (int p = 0; p < q->D; p++)
                    if (p == q->me || q->op == OP_ALLREDUCE)
                        memcpy((p == q->me && q->out ? q->out : at[p]) + b0, acc, nb * sizeof(float));
            }
            q->out_written = q->out != NULL;
        }
        shm_set(m, SHM_DONE, k + 1);
    }
    if (shm_get(m, q->me, SHM_DONE) <= k) return 0;
    return shm_all_reached(m, SHM_DONE, k + 1);  // every chunk is in every buffer
}

int comm_shm_start(CommReq *q, Comm *c) {
    ShmReq *r = xcalloc(1, sizeof *r);
    q->state = r;
    r->shm = c->shm;
    r->win = shm_find(c->shm, q->dev, q->n);
    r->off = (size_t)((char *)q->dev - r->win->base);
    r->k = c->shm->started++;
    shm_set(c->shm, SHM_READY, r->k + 1);  // (collectives start in order: ready was k)
    return comm_shm_advance(q);
}
