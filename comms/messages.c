// messages.c: point-to-point messages between ranks: non-blocking sends from a pool of staging
// buffers (a send never blocks), blocking receives, the polling that lets MPI move sends in flight,
// and MPI's largest tag. With NCCL as the transport, sends and receives go to devcomm.h instead.
#include "comms/messages.h"
#include "comms/devcomm.h"
#include "comms/tags.h"
#include "comms/watchdog.h"
#include "base/util.h"

// ---- the send pool: host staging buffers, each with its pending request ----
// (pinned host memory from the backend, so device-to-host copies run at full speed; one backend
// per process). With NCCL, sends and receives go to devcomm.h instead: matched in order between
// two ranks, so the tags are not sent.
typedef struct { float *buf; size_t cap; MPI_Request req; int dst; } PoolBuf;
static PoolBuf *pool;
static int pool_n;
static const Backend *pool_be;  // the backend the pool's and the receive staging's buffers came from

void comm_send_kept(Comm *c, const float *buf, size_t n, int dst, int tag) {
    if (c->dev) { devcomm_send(c->dev, buf, n, dst, comm_tag_kind(tag) == TAG_GRAD, 1); return; }
    comm_send(c, buf, n, dst, tag);  // MPI: through a host buffer anyway
}

void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag) {
    if (c->dev) { devcomm_send(c->dev, buf, n, dst, comm_tag_kind(tag) == TAG_GRAD, 0); return; }
    CHECK(n <= (size_t)INT32_MAX, "a message of %zu floats to rank %d: more than MPI's int count allows", n, dst);
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
        pool_be = c->be;
        small->cap = n;
        p = small;
    }
    if (!p) {  // none free: grow, never wait (the schedule simulator assumes sends do not block)
        PoolBuf *grown = realloc(pool, sizeof(PoolBuf) * (size_t)(pool_n + 1));
        CHECK(grown, "out of memory growing the send pool");
        pool = grown;
        p = &pool[pool_n++];
        p->cap = n;
        p->buf = c->be->alloc_host(n * sizeof(float));
        pool_be = c->be;
        p->req = MPI_REQUEST_NULL;
    }
    c->be->to_host(p->buf, buf, n * sizeof(float));
    p->dst = dst;
    MPI_CHECK(MPI_Isend(p->buf, (int)n, MPI_FLOAT, dst, tag, c->world, &p->req));
}

void comm_plan_calls(Comm *c, const DevCall *calls, int n) {
    if (c->dev) devcomm_plan(c->dev, calls, n);
}
void comm_step_calls(Comm *c) {
    if (c->dev) devcomm_step(c->dev);
}

void comm_wait_sends(Comm *c) {
    if (c->dev) { devcomm_flush(c->dev); return; }
    for (int i = 0; i < pool_n; i++)
        if (pool[i].req != MPI_REQUEST_NULL) wd_wait(&pool[i].req, NULL, pool[i].dst, "a send");
}

void comm_poll_sends(void) {
    for (int i = 0; i < pool_n; i++)
        if (pool[i].req != MPI_REQUEST_NULL) {
            int done = 0;
            MPI_CHECK(MPI_Test(&pool[i].req, &done, MPI_STATUS_IGNORE));
        }
}

static float *recv_stage;
static size_t recv_cap;

void comm_recv(Comm *c, float *buf, size_t n, int src, int tag) {
    if (c->dev) { devcomm_recv(c->dev, buf, n, src, comm_tag_kind(tag) == TAG_GRAD); return; }
    CHECK(n <= (size_t)INT32_MAX, "a message of %zu floats from rank %d: more than MPI's int count allows", n, src);
    MPI_Status st;
    float *dst = buf;
    if (!c->be->on_host) {
        if (recv_cap < n) {
            if (recv_stage) c->be->free_host(recv_stage);
            recv_stage = c->be->alloc_host(n * sizeof(float));
            pool_be = c->be;
            recv_cap = n;
        }
        dst = recv_stage;
    }
    MPI_Request q;
    MPI_CHECK(MPI_Irecv(dst, (int)n, MPI_FLOAT, src, tag, c->world, &q));
    wd_wait(&q, &st, src, "a receive");
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    CHECK((size_t)got == n, "received %d floats from rank %d (tag %d), expected %zu", got, src, tag, n);
    if (dst != buf) c->be->to_device(buf, dst, n * sizeof(float));
}

long long comm_tag_ub(void) {
    int *ub = NULL, flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    return flag && ub ? *ub : 32767;  // 32767: the least the MPI standard guarantees
}

void comm_messages_free(void) {
    for (int i = 0; i < pool_n; i++)
        if (pool[i].req == MPI_REQUEST_NULL) pool_be->free_host(pool[i].buf);  // (one in flight stays MPI's)
    free(pool);
    pool = NULL;
    pool_n = 0;
    if (recv_stage) pool_be->free_host(recv_stage);
    recv_stage = NULL;
    recv_cap = 0;
}
