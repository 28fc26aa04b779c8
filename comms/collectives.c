// collectives.c: the collectives (collectives.h): the small ones of any communicator (barrier, all-reduces
// of a few numbers, one verdict for every rank), and the data-parallel ones over a grid's dp group on
// float buffers: the table of algorithms (comm_algos), MPI's own row, the requests every row shares
// (staged through the host for a device buffer, advanced, waited for), and the blocking forms.
#include <limits.h>
#include <sched.h>
#include <string.h>
#include "comms/collectives.h"
#include "comms/launch.h"  // launch_host_name
#include "comms/messages.h"
#include "comms/hier.h"
#include "comms/ring.h"
#include "comms/shm.h"
#include "comms/watchdog.h"
#include "base/util.h"

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
    int rank, size, me[2], first[2], where = code & AGREE_NAME_WHERE;
    code &= ~AGREE_NAME_WHERE;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    me[0] = mine[0] ? rank : INT_MAX;
    me[1] = mine[0] ? 1 : 0;  // (summed: how many ranks failed)
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(&me[0], &first[0], 1, MPI_INT, MPI_MIN, comm, &q));
    wd_wait_all(&q, comm, "agreeing on a verdict");
    if (first[0] == INT_MAX) return;
    MPI_CHECK(MPI_Iallreduce(&me[1], &first[1], 1, MPI_INT, MPI_SUM, comm, &q));
    wd_wait_all(&q, comm, "agreeing on a verdict");
    char msg[2048] = "";
    if (rank == first[0]) snprintf(msg, sizeof msg, "%s", mine);
    if (rank == first[0] && where && first[1] < size) {  // some ranks could: a file missing on some nodes
        char host[64];
        launch_host_name(host, sizeof host);
        size_t k = strlen(msg);
        snprintf(msg + k, sizeof msg - k, " [on rank %d (host %s)%s, while %d rank%s could: is it on every host?]",
                 rank, host, first[1] > 1 ? " and others" : "", size - first[1], size - first[1] > 1 ? "s" : "");
    }
    MPI_CHECK(MPI_Ibcast(msg, sizeof msg, MPI_CHAR, first[0], comm, &q));
    wd_wait(&q, NULL, first[0], "a verdict");
    if (code == 1) run_failed("%s", msg);
    user_error("%s", msg);
}

void comm_shared_require(Comm *c, size_t bytes, const char *what) {
    char why[300];
    comm_shm_why(c, bytes, what, why, sizeof why);
    comm_agree(c->world, why);
}

// ---- MPI's own collectives: a row of the table ----

typedef struct {
    MPI_Request req;          // the non-blocking collective
    int *counts, *displs;     // chunk sizes and offsets
    float *tmp;               // reduce-scatter: the result
} MpiReq;

static int mpi_advance(CommReq *q) {
    MpiReq *r = q->state;
    int flag = 0;
    MPI_CHECK(MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE));
    if (!flag) return 0;
    if (q->op == OP_ALLREDUCE) comm_scale_host(q->buf, q->n, q->scale);
    if (q->op == OP_REDUCE_SCATTER) {
        size_t off, len;
        comm_shard(q->n, q->D, q->me, &off, &len);
        for (size_t i = 0; i < len; i++) q->buf[off + i] = r->tmp[i] * q->scale;
    }
    return 1;
}

static int mpi_start(CommReq *q, Comm *c) {
    (void)c;
    MpiReq *r = xcalloc(1, sizeof *r);
    q->state = r;
    r->req = MPI_REQUEST_NULL;
    r->counts = xmalloc(sizeof(int) * (size_t)q->D);
    r->displs = xmalloc(sizeof(int) * (size_t)q->D);
    for (int i = 0; i < q->D; i++) {
        size_t o, l;
        comm_shard(q->n, q->D, i, &o, &l);
        r->counts[i] = (int)l;
        r->displs[i] = (int)o;
    }
    size_t off, len;
    comm_shard(q->n, q->D, q->me, &off, &len);
    switch (q->op) {
    case OP_ALLREDUCE:
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, q->buf, (int)q->n, MPI_FLOAT, MPI_SUM, q->comm, &r->req));
        break;
    case OP_REDUCE_SCATTER:
        r->tmp = xmalloc((len ? len : 1) * sizeof(float));
        MPI_CHECK(MPI_Ireduce_scatter(q->buf, r->tmp, r->counts, MPI_FLOAT, MPI_SUM, q->comm, &r->req));
        break;
    default:
        MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, q->buf, r->counts, r->displs, MPI_FLOAT,
                                  q->comm, &r->req));
    }
    return 0;
}

static void mpi_release(CommReq *q) {
    MpiReq *r = q->state;
    free(r->tmp); free(r->counts); free(r->displs);
}

static void mpi_blocking(Comm *c, int op, float *buf, size_t n, float scale);

// The algorithms, in the order of ALLREDUCE_* and of the option's choices (ALLREDUCE_ALGO_NAMES).
const CommAlgo comm_algos[ALLREDUCE_ALGOS] = {
    [ALLREDUCE_MPI] = {"mpi", 0, mpi_start, mpi_advance, mpi_release, mpi_blocking},
    [ALLREDUCE_RING] = {"ring", 0, comm_ring_start, comm_ring_advance, comm_ring_release, NULL},
    [ALLREDUCE_SHM] = {"shm", 1, comm_shm_start, comm_shm_advance, NULL, NULL},
    [ALLREDUCE_HIER] = {"hier", 0, comm_hier_start, comm_hier_advance, comm_hier_release, NULL},
};

static const CommAlgo *algo_row(int algo) {
    CHECK(algo >= 0 && algo < ALLREDUCE_ALGOS, "unknown all-reduce algorithm %d", algo);
    return &comm_algos[algo];
}

// ---- the requests every row shares ----

static CommReq *in_flight;

// Host staging of a device buffer's collective (the GPU's gradients go through the host): pinned memory
// (alloc_host: cudaMallocHost on cuda, so the copies run at full speed) kept for reuse, since every
// step runs the same collectives; freed at the end (comm_collectives_free). A buffer serves one
// collective at a time; a larger need takes a new one, the smaller stays for smaller ones.
typedef struct { float *p; size_t cap; int busy; } HostBuf;
static HostBuf *host_bufs;
static int n_host_bufs;
static const Backend *host_be;  // the backend they came from
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
        host_be = be;
    }
    fit->busy = 1;
    return fit->p;
}
static void host_give(const float *p) {
    for (int i = 0; i < n_host_bufs; i++)
        if (host_bufs[i].p == p) host_bufs[i].busy = 0;
}
void comm_collectives_free(void) {
    for (int i = 0; i < n_host_bufs; i++)
        if (!host_bufs[i].busy) host_be->free_host(host_bufs[i].p);  // (one in flight stays MPI's)
    free(host_bufs);
    host_bufs = NULL;
    n_host_bufs = 0;
}

// The result in place (a reduce-scatter's chunk into out, unless the algorithm wrote it there, else a
// staged result back to the device), and q off the list in flight.
static void req_complete(CommReq *q) {
    size_t off = 0, len = q->n;
    if (q->op == OP_REDUCE_SCATTER) comm_shard(q->n, q->D, q->me, &off, &len);
    if (q->out && !q->out_written) q->be->to_device(q->out, q->buf + off, len * sizeof(float));
    else if (q->buf != q->dev) q->be->to_device(q->dev + off, q->buf + off, len * sizeof(float));
    q->done = 1;
    q->t_done = now_sec();
    for (CommReq **p = &in_flight; *p; p = &(*p)->next)
        if (*p == q) { *p = q->next; break; }
}

static void req_advance(CommReq *q) {
    if (!q->done && q->algo->advance(q)) req_complete(q);
}

static CommReq *req_start(Comm *c, int op, float *buf, size_t n, float scale, int algo, float *out) {
    CHECK(n <= (size_t)INT32_MAX, "collective of %zu floats: more than MPI's int count allows", n);
    const CommAlgo *a = algo_row(algo);
    if (a->windows && !(c->be->on_host && comm_shared_holds(c, buf, n)))
        a = &comm_algos[ALLREDUCE_MPI];  // a buffer outside the windows
    CommReq *q = xcalloc(1, sizeof *q);
    q->op = op; q->algo = a; q->comm = c->dp; q->be = c->be;
    q->dev = buf; q->n = n; q->scale = scale; q->out = out;
    MPI_CHECK(MPI_Comm_size(c->dp, &q->D));
    MPI_CHECK(MPI_Comm_rank(c->dp, &q->me));
    q->tag = 1000 + (int)(c->seq++ % 20000u);  // the same on every rank: collectives start in the same order
    q->buf = buf;
    if (!c->be->on_host) {
        q->buf = host_take(c->be, n);
        c->be->to_host(q->buf, buf, n * sizeof(float));
    }
    q->next = in_flight;
    in_flight = q;
    if (q->D == 1 || n == 0) {  // nothing to exchange
        if (op != OP_ALLGATHER) comm_scale_host(q->buf, n, scale);
        req_complete(q);
        return q;
    }
    if (a->start(q, c)) req_complete(q);
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
    if (q->state && q->algo->release) q->algo->release(q);
    free(q->state);
    free(q);
    return t;
}

// ---- the blocking forms: a row's own (MPI's are its blocking collectives, MPI_Allreduce, ...,
// which MPI implementations tune hardest), else its non-blocking form, waited for ----
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
        comm_scale_host(h, n, scale);
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

static void blocking(Comm *c, int op, float *buf, size_t n, float scale, int algo) {
    const CommAlgo *a = algo_row(algo);
    if (a->blocking) a->blocking(c, op, buf, n, scale);
    else comm_wait(req_start(c, op, buf, n, scale, algo, NULL));
}
void comm_allreduce(Comm *c, float *buf, size_t n, float scale, int algo) {
    blocking(c, OP_ALLREDUCE, buf, n, scale, algo);
}
void comm_reduce_scatter(Comm *c, float *buf, size_t n, float scale, int algo) {
    blocking(c, OP_REDUCE_SCATTER, buf, n, scale, algo);
}
void comm_allgather(Comm *c, float *buf, size_t n, int algo) { blocking(c, OP_ALLGATHER, buf, n, 1.0f, algo); }
