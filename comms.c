// comms.c: MPI (MPICH) underneath comms.h, and the two ways a run ends early: fatal() aborts every
// rank with "[rank r] file:line: message"; user_error() prints one line and exits 2 on each rank.
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "comms.h"
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
    // mpiexec (Hydra) forwards our stderr through its proxy, which MPI_Abort tears down: give it a
    // moment to pass the message on, or the job may die without saying why (seen once in the tests).
    if (mpi_up() && comms_world_size() > 1) usleep(200 * 1000);
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
    if (mpi_up()) MPI_Finalize();
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

void comms_finalize(void) { if (mpi_up()) MPI_Finalize(); }
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

// ---- the send pool: host staging buffers, each with its pending request ----
typedef struct { float *buf; size_t cap; MPI_Request req; } PoolBuf;
static PoolBuf *pool;
static int pool_n;

void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag) {
    PoolBuf *p = NULL;
    for (int i = 0; i < pool_n && !p; i++) {  // a buffer whose send has completed
        int done = 1;
        if (pool[i].req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Test(&pool[i].req, &done, MPI_STATUS_IGNORE));
        if (done && pool[i].cap >= n) p = &pool[i];
    }
    if (!p) {  // none free: grow, never wait (the schedule simulator assumes sends do not block)
        pool = realloc(pool, sizeof(PoolBuf) * (size_t)(pool_n + 1));
        CHECK(pool, "out of memory growing the send pool");
        p = &pool[pool_n++];
        p->cap = n;
        p->buf = xmalloc(n * sizeof(float));
        p->req = MPI_REQUEST_NULL;
    }
    c->be->to_host(p->buf, buf, n * sizeof(float));
    MPI_CHECK(MPI_Isend(p->buf, (int)n, MPI_FLOAT, dst, tag, c->world, &p->req));
}

void comm_wait_sends(Comm *c) {
    (void)c;
    for (int i = 0; i < pool_n; i++)
        if (pool[i].req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&pool[i].req, MPI_STATUS_IGNORE));
}

static float *recv_stage;
static size_t recv_cap;

void comm_recv(Comm *c, float *buf, size_t n, int src, int tag) {
    MPI_Status st;
    float *dst = buf;
    if (!c->be->on_host) {
        if (recv_cap < n) { free(recv_stage); recv_stage = xmalloc(n * sizeof(float)); recv_cap = n; }
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
