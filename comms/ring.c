// ring.c: the ring, a row of the collectives' table (ring.h): reduce-scatter, all-gather and their sum,
// the all-reduce, as a state machine of point-to-point steps that comm_progress advances; the same
// machine (RingRun) on any communicator and any cut of the buffer is a phase of hier.c's rings.
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

static int mod(int a, int D) { return ((a % D) + D) % D; }

// Piece p of the ring's chunk j: a chunk of the buffer cut r->cuts ways (comm_shard).
static void piece(const RingRun *r, int j, int p, size_t *off, size_t *len) {
    comm_shard(r->n, r->cuts, r->base + j * r->stride + p * r->part_stride, off, len);
}

static void ring_post(RingRun *r) {
    int s = r->step, R = r->R, me = r->me, send_chunk, recv_chunk;
    if (s < r->rs_steps) {  // reduce-scatter: pass chunk (me-s-1) on, take in chunk (me-s-2)
        send_chunk = mod(me - s - 1, R);
        recv_chunk = mod(me - s - 2, R);
    } else {                // all-gather: pass on the finished chunk (me-a), take in (me-a-1)
        int a = s - r->rs_steps;
        send_chunk = mod(me - a, R);
        recv_chunk = mod(me - a - 1, R);
    }
    float *tmp = r->tmp;
    for (int p = 0; p < r->parts; p++) {  // (messages of one pair and tag match in the order posted)
        size_t so, sl, ro, rl;
        piece(r, send_chunk, p, &so, &sl);
        piece(r, recv_chunk, p, &ro, &rl);
        float *recv_to = s < r->rs_steps ? tmp : r->buf + ro;
        tmp += rl;
        MPI_CHECK(MPI_Irecv(recv_to, (int)rl, MPI_FLOAT, mod(me - 1, R), r->tag, r->comm, &r->rq[2 * p]));
        MPI_CHECK(MPI_Isend(r->buf + so, (int)sl, MPI_FLOAT, mod(me + 1, R), r->tag, r->comm, &r->rq[2 * p + 1]));
    }
    r->posted = 1;
}

static void scale_own(RingRun *r) {  // own chunk complete: scale it
    for (int p = 0; p < r->parts; p++) {
        size_t off, len;
        piece(r, r->me, p, &off, &len);
        comm_scale_host(r->buf + off, len, r->scale);
    }
}

// Adds the received partial sums (tmp, piece after piece) into our copy of chunk (me-step-2).
static void ring_add(RingRun *r) {
    const float *restrict src = r->tmp;
    for (int p = 0; p < r->parts; p++) {
        size_t off, len;
        piece(r, mod(r->me - r->step - 2, r->R), p, &off, &len);
        float *restrict dst = r->buf + off;
        for (size_t i = 0; i < len; i++) dst[i] += src[i];
        src += len;
    }
}

int comm_ring_run_advance(RingRun *r) {
    for (;;) {
        if (r->posted) {
            int flag = 0;
            MPI_Status st[2 * RING_MAX_PARTS];  // (MPI_STATUSES_IGNORE trips gcc's access-size warning)
            MPI_CHECK(MPI_Testall(2 * r->parts, r->rq, &flag, st));
            if (!flag) return 0;
            r->posted = 0;
            if (r->step < r->rs_steps) ring_add(r);
            r->step++;
            if (r->step == r->rs_steps && r->op != OP_ALLGATHER) scale_own(r);
        }
        if (r->step == r->rs_steps + r->ag_steps) return 1;
        ring_post(r);
    }
}

void comm_ring_run_init(RingRun *r, int op, MPI_Comm comm, int tag, float *buf, size_t n, float scale) {
    MPI_CHECK(MPI_Comm_size(comm, &r->R));
    MPI_CHECK(MPI_Comm_rank(comm, &r->me));
    if (!r->parts) r->parts = 1, r->stride = 1, r->cuts = r->R;  // the plain ring: chunk j = shard j of R
    CHECK(r->parts <= RING_MAX_PARTS, "a ring chunk of %d pieces: at most %d", r->parts, RING_MAX_PARTS);
    r->op = op; r->comm = comm; r->tag = tag;
    r->buf = buf; r->n = n; r->scale = scale;
    for (int i = 0; i < 2 * RING_MAX_PARTS; i++) r->rq[i] = MPI_REQUEST_NULL;
    r->rs_steps = op == OP_ALLGATHER ? 0 : r->R - 1;
    r->ag_steps = op == OP_REDUCE_SCATTER ? 0 : r->R - 1;
    size_t most = (n + (size_t)r->cuts - 1) / (size_t)r->cuts + 1;  // a piece's most floats
    if (r->rs_steps) r->tmp = xmalloc(most * (size_t)r->parts * sizeof(float));
    if (!r->rs_steps && op != OP_ALLGATHER) scale_own(r);  // a ring of one: its chunk is the sum
}

void comm_ring_run_free(RingRun *r) {
    free(r->tmp);
    r->tmp = NULL;
}

// ---- the row: one plain ring over dp ----

int comm_ring_start(CommReq *q, Comm *c) {
    (void)c;
    RingRun *r = xcalloc(1, sizeof *r);
    q->state = r;
    comm_ring_run_init(r, q->op, q->comm, q->tag, q->buf, q->n, q->scale);
    return comm_ring_run_advance(r);
}
int comm_ring_advance(CommReq *q) { return comm_ring_run_advance(q->state); }
void comm_ring_release(CommReq *q) { comm_ring_run_free(q->state); }
