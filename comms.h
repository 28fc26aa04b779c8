// comms.h: the wire. MPI world and the pipeline/data-parallel groups, prev/next stage,
// non-blocking sends from a pool of staging buffers (a send never blocks), blocking receives,
// tags that encode (kind, micro-batch) so no message can be taken for another, all-reduce, barrier;
// the choice of device and transport (MPI, or NCCL between GPUs) made alike on every rank.
#pragma once
#include <stddef.h>
#include <mpi.h>
#include "ops.h"

enum { TAG_ACT = 0, TAG_GRAD = 1, TAG_DATA = 2, TAG_CTRL = 3 };
static inline int comm_tag(int kind, int mb) { return mb * 4 + kind; }

struct DevComm;

typedef struct {
    int rank, size;        // world
    int stage, stages;     // position in this rank's pipeline (0..stages-1)
    int prev, next;        // world ranks of the neighbouring stages, MPI_PROC_NULL at the ends
    MPI_Comm world, pp;    // pp: the ranks of one pipeline
    const Backend *be;     // device of the buffers handed to send/recv
    int transport;         // TRANSPORT_MPI (host buffers, or device ones staged through pinned
                           // host memory) or TRANSPORT_NCCL (device to device; config.h)
    struct DevComm *dev;   // NCCL communicator over world, when transport is NCCL
} Comm;

// The device and transport of a run, decided identically on every rank (all-reduces of what each
// rank found) before any other message; a request that cannot be met ends the run with a
// user_error. A rank takes GPU (local rank % GPUs of its node); NCCL needs one GPU per rank.
typedef struct {
    const Backend *be;
    int transport;               // TRANSPORT_MPI or TRANSPORT_NCCL
    int local_rank, local_size;  // among the ranks of this node (MPI_COMM_TYPE_SHARED)
} Placement;
void comms_place(const char *cmd, int device, int transport, int tf32, Placement *p);
// How c moves buffers from now on; TRANSPORT_NCCL opens one NCCL communicator over c->world.
void comms_use_transport(Comm *c, int transport);
// An NCCL communicator over any MPI communicator: its rank 0 makes the id (ncclGetUniqueId),
// MPI_Bcast hands it to the others, each calls ncclCommInitRank. Collective over comm.
struct DevComm *comm_nccl_open(MPI_Comm comm);

void comms_init(int *argc, char ***argv);  // MPI_Init_thread + MPI_ERRORS_RETURN, sets g_rank
void comms_finalize(void);
int comms_world_rank(void);
int comms_world_size(void);
void comms_pipeline(Comm *c, const Backend *be);  // every rank one stage of a single pipeline

// Sends n floats of device memory to world rank dst; copies into a staging buffer and returns
// at once (MPI_Isend). comm_wait_sends completes them all.
void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag);
void comm_wait_sends(Comm *c);
// Receives n floats into device memory from world rank src (blocks until they arrive).
void comm_recv(Comm *c, float *buf, size_t n, int src, int tag);
void comm_barrier(MPI_Comm comm);
void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm);
void comm_allreduce_max_double(double *x, int n, MPI_Comm comm);
// MPI call check: on error, "[rank r] file:line: MPI_Xxx failed: <MPI's message>" and abort the job.
void mpi_check_at(int err, const char *what, const char *file, int line);
#define MPI_CHECK(call) mpi_check_at((call), #call, __FILE__, __LINE__)
