// comms.c: MPI (MPICH) underneath comms.h, and the two ways a run ends early: fatal() aborts every
// rank with "[rank r] file:line: message"; user_error() prints one line and exits 2 on each rank.
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "comms.h"
#include "config.h"
#include "devcomm.h"
#include "util.h"

int g_rank = 0;
int g_quiet_errors = 0;

double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mpi_up(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

void fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] %s:%d: %s\n", g_rank, file, line, msg);
    fflush(stderr);
    if (mpi_up()) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void user_error(const char *fmt, ...) {
    if (!(g_quiet_errors && g_rank != 0)) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "micropp: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        fflush(stderr);
    }
    if (mpi_up()) {
        // Every rank reached this same decision; finalize together. Should a rank not (a bug),
        // the alarm ends this one rather than leave it waiting.
        alarm(10);
        MPI_Finalize();
    }
    exit(2);
}

void finish(int code) {
    fflush(stdout);
    comms_finalize();
    exit(code);
}

void mpi_check_at(int err, const char *what, const char *file, int line) {
    if (err == MPI_SUCCESS) return;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, s, &len);
    fatal_at(file, line, "%s failed: %s", what, s);
}

void comms_init(int *argc, char ***argv) {
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    g_quiet_errors = 1;
}

static DevComm *opened_devcomm;  // closed by comms_finalize

void comms_finalize(void) {
    if (opened_devcomm) { devcomm_close(opened_devcomm); opened_devcomm = NULL; }
    if (mpi_up()) MPI_Finalize();
}
int comms_world_rank(void) { int r = 0; if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int comms_world_size(void) { int n = 1; if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }

void comms_pipeline(Comm *c, const Backend *be) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->world = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->pp));
    MPI_Comm_set_errhandler(c->pp, MPI_ERRORS_RETURN);
    c->stage = c->rank;
    c->stages = c->size;
    c->prev = c->stage > 0 ? c->rank - 1 : MPI_PROC_NULL;
    c->next = c->stage < c->stages - 1 ? c->rank + 1 : MPI_PROC_NULL;
}

// ---- device and transport ----

void comms_place(const char *cmd, int device, int transport, int tf32, Placement *p) {
    memset(p, 0, sizeof *p);
    int rank = comms_world_rank(), size = comms_world_size();
    if (device == DEVICE_CPU && transport == TRANSPORT_NCCL)
        user_error("%s: --transport nccl moves GPU buffers, and --device is cpu: drop --transport nccl or use --device cuda", cmd);
    if (device == DEVICE_CPU && tf32)
        user_error("%s: --tf32 applies to cuBLAS on a GPU, and --device is cpu: drop --tf32 or use --device cuda", cmd);
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &p->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &p->local_size));
    MPI_CHECK(MPI_Comm_free(&node));
    p->be = &backend_cpu;
    p->transport = TRANSPORT_MPI;
    if (device == DEVICE_CPU) return;

    char err[256] = "";
    const Backend *cuda = backend_cuda_open(p->local_rank, err, sizeof err);
    int first = cuda ? size : rank;  // the lowest rank without a GPU speaks for all
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first < size) {
        MPI_CHECK(MPI_Bcast(err, (int)sizeof err, MPI_CHAR, first, MPI_COMM_WORLD));
        err[sizeof err - 1] = 0;
        char where[32] = "";
        if (first > 0) snprintf(where, sizeof where, " (rank %d)", first);
        if (device == DEVICE_CUDA) user_error("no CUDA device%s: %s", where, err);
        if (transport == TRANSPORT_NCCL)
            user_error("%s: --transport nccl needs a GPU on every rank, but there is no CUDA device%s: %s", cmd, where, err);
        if (tf32) user_error("%s: --tf32 needs a GPU, but there is no CUDA device%s: %s", cmd, where, err);
        return;  // auto: the CPU
    }
    // NCCL refuses two ranks on one GPU: it needs every node to have a GPU per rank.
    int crowded = p->local_size > cuda->device_count;
    int v[3] = {crowded, crowded ? p->local_size : 0, crowded ? -cuda->device_count : -(1 << 30)};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (transport == TRANSPORT_NCCL && v[0])
        user_error("%s: --transport nccl needs one GPU per rank, but a node runs %d ranks on %d GPU%s: use --transport mpi "
                   "(stages through pinned host memory, so ranks may share a GPU) or at most %d ranks per node",
                   cmd, v[1], -v[2], -v[2] == 1 ? "" : "s", -v[2]);
    p->be = cuda;
    p->transport = transport == TRANSPORT_AUTO ? (!v[0] && size > 1 ? TRANSPORT_NCCL : TRANSPORT_MPI) : transport;
    cuda->set_tf32(tf32);
}

DevComm *comm_nccl_open(MPI_Comm comm) {
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    char id[DEVCOMM_ID_BYTES];
    if (rank == 0) devcomm_unique_id(id);
    MPI_CHECK(MPI_Bcast(id, DEVCOMM_ID_BYTES, MPI_BYTE, 0, comm));
    return devcomm_open(id, size, rank);
}

void comms_use_transport(Comm *c, int transport) {
    c->transport = transport;
    if (transport == TRANSPORT_NCCL && c->size > 1 && !c->dev) {
        CHECK(!c->be->on_host, "the NCCL transport with the %s backend", c->be->name);
        c->dev = comm_nccl_open(c->world);  // peers are then world ranks, as for MPI
        CHECK(!opened_devcomm, "a second NCCL communicator for the pipeline");
        opened_devcomm = c->dev;
    }
}

// ---- the send pool: host staging buffers, each with its pending request ----
// (pinned host memory from the backend, so device-to-host copies run at full speed; one backend
// per process). With NCCL, sends and receives go to devcomm.h instead: matched in order between
// two ranks, so the tags are not sent.
typedef struct { float *buf; size_t cap; MPI_Request req; } PoolBuf;
static PoolBuf *pool;
static int pool_n;

void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag) {
    if (c->dev) { devcomm_send(c->dev, buf, n, dst); return; }
    PoolBuf *p = NULL, *small = NULL;
    for (int i = 0; i < pool_n && !p; i++) {  // a buffer whose send has completed
        int done = 1;
        if (pool[i].req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Test(&pool[i].req, &done, MPI_STATUS_IGNORE));
        if (done && pool[i].cap >= n) p = &pool[i];
        else if (done && !small) small = &pool[i];
    }
    if (!p && small) {  // a free one too small: regrow it, so the pool stays as long as the most in flight
        c->be->free_host(small->buf);
        small->buf = c->be->alloc_host(n * sizeof(float));
        small->cap = n;
        p = small;
    }
    if (!p) {  // none free: grow, never wait (the schedule simulator assumes sends do not block)
        pool = realloc(pool, sizeof(PoolBuf) * (size_t)(pool_n + 1));
        CHECK(pool, "out of memory growing the send pool");
        p = &pool[pool_n++];
        p->cap = n;
        p->buf = c->be->alloc_host(n * sizeof(float));
        p->req = MPI_REQUEST_NULL;
    }
    c->be->to_host(p->buf, buf, n * sizeof(float));
    MPI_CHECK(MPI_Isend(p->buf, (int)n, MPI_FLOAT, dst, tag, c->world, &p->req));
}

void comm_wait_sends(Comm *c) {
    if (c->dev) { devcomm_flush(c->dev); return; }
    for (int i = 0; i < pool_n; i++)
        if (pool[i].req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&pool[i].req, MPI_STATUS_IGNORE));
}

static float *recv_stage;
static size_t recv_cap;

void comm_recv(Comm *c, float *buf, size_t n, int src, int tag) {
    if (c->dev) { devcomm_recv(c->dev, buf, n, src); return; }
    MPI_Status st;
    float *dst = buf;
    if (!c->be->on_host) {
        if (recv_cap < n) {
            if (recv_stage) c->be->free_host(recv_stage);
            recv_stage = c->be->alloc_host(n * sizeof(float));
            recv_cap = n;
        }
        dst = recv_stage;
    }
    MPI_CHECK(MPI_Recv(dst, (int)n, MPI_FLOAT, src, tag, c->world, &st));
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    CHECK((size_t)got == n, "received %d floats from rank %d (tag %d), expected %zu", got, src, tag, n);
    if (dst != buf) c->be->to_device(buf, dst, n * sizeof(float));
}

void comm_barrier(MPI_Comm comm) { MPI_CHECK(MPI_Barrier(comm)); }
void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, comm));
}
void comm_allreduce_max_double(double *x, int n, MPI_Comm comm) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_MAX, comm));
}
