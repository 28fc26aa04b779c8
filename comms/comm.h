// comms/comm.h: the Comm every file of the wire works on (this rank's world, its place in the grid of
// pipeline, data-parallel and tensor-parallel groups, the device of its buffers, the transport), and
// the grid's arithmetic. comms.c (the root's comms.h) makes and frees a Comm; comms/ only reads it.
#pragma once
#include <mpi.h>
#include "base/ops.h"

struct DevComm;
struct Shm;

typedef struct {
    int rank, size;        // world
    int stage, stages;     // position in this rank's pipeline (0..stages-1)
    int replica, replicas; // position in this stage's data-parallel group (0..replicas-1)
    int placement;         // PLACEMENT_STAGES or PLACEMENT_REPLICAS: how the grid sits on world ranks
    int tp_rank, tp_size;  // position in this rank's tensor-parallel group (adjacent world ranks; 1: none)
    int prev, next;        // world ranks of the neighbouring stages, MPI_PROC_NULL at the ends
    MPI_Comm world, pp, dp;  // pp: the ranks of one pipeline; dp: the same stage in every replica
    MPI_Comm tp;           // the tensor-parallel group: the T adjacent ranks sharing one stage's layers
    const Backend *be;     // device of the buffers handed to send/recv and the collectives
    unsigned seq;          // collectives started on dp so far (gives each ring its own tag)
    int transport;         // TRANSPORT_MPI (host buffers, or device ones staged through pinned
                           // host memory) or TRANSPORT_NCCL (device to device)
    struct DevComm *dev;   // NCCL communicator over world, when transport is NCCL
    struct Shm *shm;       // the shared-memory windows of --allreduce shm (comm_shared_alloc)
} Comm;

// Which neighbours of the grid sit on adjacent world ranks (so on one node, as far as the hostfile
// fills nodes in rank order): PLACEMENT_STAGES, a replica's pipeline (rank = replica * P + stage),
// or PLACEMENT_REPLICAS, a stage's data-parallel group (rank = stage * D + replica). plan.c turns
// --placement auto into one of them from the traffic of a step.
enum { PLACEMENT_AUTO, PLACEMENT_STAGES, PLACEMENT_REPLICAS };
#define PLACEMENT_CHOICES "auto|stages|replicas"
static inline int comm_grid_rank(int placement, int P, int D, int stage, int replica) {
    return placement == PLACEMENT_REPLICAS ? stage * D + replica : replica * P + stage;
}
static inline int comm_grid_stage(int placement, int P, int D, int rank) {
    return placement == PLACEMENT_REPLICAS ? rank / D : rank % P;
}
static inline int comm_grid_replica(int placement, int P, int D, int rank) {
    return placement == PLACEMENT_REPLICAS ? rank % D : rank / P;
}
static inline int comm_rank_tp(int T, int rank) { return rank % T; }   // a world rank's place in its group
static inline int comm_rank_group(int T, int rank) { return rank / T; }  // ... and its group (a P x D grid rank)
// World rank of stage `stage` of this rank's pipeline.
static inline int comm_stage_rank(const Comm *c, int stage) {
    return comm_grid_rank(c->placement, c->stages, c->replicas, stage, c->replica) * c->tp_size + c->tp_rank;
}
