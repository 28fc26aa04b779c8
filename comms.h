// comms.h: the wire. MPI world and the pipeline/data-parallel groups, prev/next stage,
// non-blocking sends from a pool of staging buffers (a send never blocks), blocking receives,
// tags that encode (kind, micro-batch) so no message can be taken for another, all-reduce, barrier.
#pragma once
#include <stddef.h>
#include <mpi.h>
#include "ops.h"

enum { TAG_ACT = 0, TAG_GRAD = 1, TAG_DATA = 2, TAG_CTRL = 3 };
// Tags encode (chunk, micro-batch, kind); chunk is the RECEIVING chunk on its rank (interleaved
// pipelines send several chunks' messages between the same two ranks). chunk 0 gives comm_tag.
#define COMM_MAX_MB (1 << 20)   // the most micro-batches (the --micro-batches range)
#define COMM_MAX_CHUNKS 64      // the most chunks per rank (the --virtual-stages range)
static inline int comm_tag_chunk(int kind, int mb, int chunk) { return (chunk * COMM_MAX_MB + mb) * 4 + kind; }
static inline int comm_tag(int kind, int mb) { return comm_tag_chunk(kind, mb, 0); }
static inline long long comm_tag_chunk_max(int M, int chunks) { return ((long long)(chunks - 1) * COMM_MAX_MB + M - 1) * 4 + 3; }
long long comm_tag_ub(void);  // MPI_TAG_UB: the largest tag this MPI accepts

typedef struct {
    int rank, size;        // world
    int stage, stages;     // position in this rank's pipeline (0..stages-1)
    int prev, next;        // world ranks of the neighbouring stages, MPI_PROC_NULL at the ends
    MPI_Comm world, pp;    // pp: the ranks of one pipeline
    const Backend *be;     // device of the buffers handed to send/recv
} Comm;

void comms_init(int *argc, char ***argv);  // MPI_Init_thread + MPI_ERRORS_RETURN, sets g_rank
void comms_finalize(void);
int comms_world_rank(void);
int comms_world_size(void);
void comms_pipeline(Comm *c, const Backend *be);  // every rank one stage of a single pipeline
// World rank of stage `stage` of this rank's pipeline (its stages sit on adjacent world ranks).
static inline int comm_stage_rank(const Comm *c, int stage) { return c->rank - c->stage + stage; }

// Sends n floats of device memory to world rank dst; copies into a staging buffer and returns
// at once (MPI_Isend). comm_wait_sends completes them all.
void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag);
void comm_wait_sends(Comm *c);
// Tests the sends in flight without blocking. MPI moves a large message only while its sender is
// inside an MPI call, so the executor calls this between layers of its compute.
void comm_poll_sends(void);
// Receives n floats into device memory from world rank src (blocks until they arrive).
void comm_recv(Comm *c, float *buf, size_t n, int src, int tag);
void comm_barrier(MPI_Comm comm);
void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm);
void comm_allreduce_max_double(double *x, int n, MPI_Comm comm);
// MPI call check: on error, "[rank r] file:line: MPI_Xxx failed: <MPI's message>" and abort the job.
void mpi_check_at(int err, const char *what, const char *file, int line);
#define MPI_CHECK(call) mpi_check_at((call), #call, __FILE__, __LINE__)
