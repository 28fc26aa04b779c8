// ring.c: the ring, a row of the collectives' table (ring.h): reduce-scatter, all-gather and their sum,
// the all-reduce, as a state machine of point-to-point steps that comm_progress advances.
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
#include <stdlib.h>
#include "comms/ring.h"
#include "comms/watchdog.h"
#include "base/util.h"

typedef struct {
    int left, right;          // ranks in comm
    float *tmp;               // one received chunk
    int step, rs_steps, ag_steps, posted;  // steps done, of D-1 reduce-scatter then D-1 all-gather
    MPI_Request rq[2];        // this step's receive and send
} Ring;

static int mod(int a, int D) { return ((a % D) + D) % D; }

static void ring_post(CommReq *q, Ring *r) {
    int s = r->step, D = q->D, me = q->me, send_chunk, recv_chunk;
    float *recv_to;
    size_t so, sl, ro, rl;
    if (s < r->rs_steps) {  // reduce-scatter: pass chunk (me-s-1) on, take in chunk (me-s-2)
        send_chunk = mod(me - s - 1, D);
        recv_chunk = mod(me - s - 2, D);
    } else {                // all-gather: pass on the finished chunk (me-a), take in (me-a-1)
        int a = s - r->rs_steps;
        send_chunk = mod(me - a, D);
        recv_chunk = mod(me - a - 1, D);
    }
    comm_shard(q->n, D, send_chunk, &so, &sl);
    comm_shard(q->n, D, recv_chunk, &ro, &rl);
    recv_to = s < r->rs_steps ? r->tmp : q->buf + ro;
    MPI_CHECK(MPI_Irecv(recv_to, (int)rl, MPI_FLOAT, r->left, q->tag, q->comm, &r->rq[0]));
    MPI_CHECK(MPI_Isend(q->buf + so, (int)sl, MPI_FLOAT, r->right, q->tag, q->comm, &r->rq[1]));
    r->posted = 1;
}

int comm_ring_advance(CommReq *q) {
    Ring *r = q->state;
    for (;;) {
        if (r->posted) {
            int flag = 0;
            MPI_Status st[2];  // (MPI_STATUSES_IGNORE trips gcc's access-size warning)
            MPI_CHECK(MPI_Testall(2, r->rq, &flag, st));
            if (!flag) return 0;
            r->posted = 0;
            if (r->step < r->rs_steps) {  // add the received partial sum into our copy
                size_t off, len;
                comm_shard(q->n, q->D, mod(q->me - r->step - 2, q->D), &off, &len);
                float *restrict dst = q->buf + off;
                const float *restrict src = r->tmp;
                for (size_t i = 0; i < len; i++) dst[i] += src[i];
            }
            r->step++;
            if (r->step == r->rs_steps && q->op != OP_ALLGATHER) {  // own chunk complete: scale it
                size_t off, len;
                comm_shard(q->n, q->D, q->me, &off, &len);
                comm_scale_host(q->buf + off, len, q->scale);
            }
        }
        if (r->step == r->rs_steps + r->ag_steps) return 1;
        ring_post(q, r);
    }
}

int comm_ring_start(CommReq *q, Comm *c) {
    (void)c;
    Ring *r = xcalloc(1, sizeof *r);
    q->state = r;
    r->left = mod(q->me - 1, q->D);
    r->right = mod(q->me + 1, q->D);
    r->rq[0] = r->rq[1] = MPI_REQUEST_NULL;
    size_t most = (q->n + (size_t)q->D - 1) / (size_t)q->D;
    r->rs_steps = q->op == OP_ALLGATHER ? 0 : q->D - 1;
    r->ag_steps = q->op == OP_REDUCE_SCATTER ? 0 : q->D - 1;
    if (r->rs_steps) r->tmp = xmalloc(most * sizeof(float));
    return comm_ring_advance(q);
}

void comm_ring_release(CommReq *q) {
    Ring *r = q->state;
    free(r->tmp);
}
