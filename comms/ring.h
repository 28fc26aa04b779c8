// comms/ring.h: the ring (ring.c), a row of the collectives' table (collectives.c's comm_algos):
// D ranks in a circle pass chunks to their right neighbour, from point-to-point messages of dp; and the
// ring as a machine of its own (RingRun) on any communicator, which hier.c runs as its phases.
#pragma once
#include "comms/algo.h"

#define RING_MAX_PARTS 64  // the most pieces of one chunk (hier.c: the nodes)

// One ring in flight over the R ranks of comm. Chunk j of the buffer is `parts` pieces: piece p is
// shard (base + j * stride + p * part_stride) of the n floats cut `cuts` ways (comm_shard); parts = 0
// before comm_ring_run_init means the plain ring (chunk j = shard j of R). The result of a
// reduce-scatter is chunk me (scaled); an all-gather passes every rank's chunk me to all.
typedef struct {
    int parts, base, stride, part_stride, cuts;  // the cut (set before init)
    int op, R, me, tag;
    MPI_Comm comm;
    float *buf, scale;
    size_t n;
    float *tmp;               // one received chunk
    int step, rs_steps, ag_steps, posted;  // steps done, of R-1 reduce-scatter then R-1 all-gather
    MPI_Request rq[2 * RING_MAX_PARTS];    // this step's receive and send of each piece
} RingRun;
void comm_ring_run_init(RingRun *r, int op, MPI_Comm comm, int tag, float *buf, size_t n, float scale);
int comm_ring_run_advance(RingRun *r);  // never blocks; 1 once done
void comm_ring_run_free(RingRun *r);

int comm_ring_start(CommReq *q, Comm *c);
int comm_ring_advance(CommReq *q);
void comm_ring_release(CommReq *q);
