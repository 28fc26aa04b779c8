// comms/alltoall.h: the all-to-all of a group (alltoall.c), expert parallelism's exchange: counts first
// (a few ints to every rank), then rows of w floats, a different number to every rank (all-to-all-v),
// by one of the algorithms of the table alltoall_algos: MPI's MPI_Alltoallv, a pairwise exchange of
// point-to-point messages, shared-memory windows on one node, NCCL's grouped send and receive on GPUs
// (the host's rows staged through device buffers).
#pragma once
#include <stddef.h>
#include <mpi.h>
#include "base/ops.h"

struct DevComm;

// The algorithms, in the order of the option's choices (ALLTOALL_ALGO_NAMES; tests/mpi_alltoall.c
// checks both against alltoall_algos:
//   mpi   MPI_Alltoallv, waited for under the watchdog;
//   pair  R-1 rounds of point-to-point messages: in round s rank r sends to r+s and receives from r-s
//         (each pair of ranks exchanges once, no rank waits on two at a time);
//   shm   the ranks of the group on one node: each copies its rows into a window of its own (none where the
//         caller packed them there: alltoall_send_buffer) and every rank copies its part out of the others'
//         windows (none where it reads them in place: alltoall_rows_at), at most one copy each way, no message;
//         two halves per window (exchange k in half k % 2), so a rank one exchange behind holds up no one;
//   nccl  ncclSend and ncclRecv to every rank in one ncclGroupStart/End (devcomm_alltoallv), the counts and
//         the rows alike, through device buffers of cap floats each way (--transport nccl).
enum { ALLTOALL_MPI, ALLTOALL_PAIR, ALLTOALL_SHM, ALLTOALL_NCCL, ALLTOALL_ALGOS };
#define ALLTOALL_ALGO_NAMES "mpi|pair|shm|nccl"
typedef struct { const char *name; int windows, device; } AllToAllAlgo;  // needs windows / a GPU
extern const AllToAllAlgo alltoall_algos[ALLTOALL_ALGOS];

typedef struct AllToAll AllToAll;
// The all-to-all of the ranks of group (collective over group: every rank calls it at once, with the
// same algo and cap). be: mpi, pair and shm: the device of the row buffers (a buffer not on the host is
// staged through the host); nccl: the GPU's backend, whose buffers (cap floats each way, made here) the
// caller's host rows and counts go through. cap: the most floats one rank sends or receives in one
// exchange (shm's window, nccl's device buffers; the others ignore it). nccl: the group's communicator
// (comms.c's comm_nccl_group; NULL for the others).
AllToAll *alltoall_open(MPI_Comm group, int algo, const Backend *be, size_t cap, struct DevComm *nccl);
void alltoall_close(AllToAll *a);  // collective over the group (shm frees its windows)
// 1 when every rank of group shares one node (shm is possible), the same on every rank. Collective.
int alltoall_shm_possible(MPI_Comm group);
// The bytes of /dev/shm one rank's shm windows take in a group of R ranks with this cap (the rows' window in
// two halves and the counters, each on pages of its own): what the node's room must hold for each rank.
size_t alltoall_shm_bytes(size_t cap, int R);
// 1 when this rank's node lacks the /dev/shm room for shm windows of `bytes` on each of its ranks (a tmpfs too
// small, as Docker's 64 MB default, ends a job with SIGBUS on first touch); *need, *room: the node's bytes, *here:
// its ranks. Not agreed: the caller says it and agrees. Collective over world: every rank calls it.
int alltoall_shm_short(MPI_Comm world, double bytes, double *need, double *room, int *here);
int alltoall_size(const AllToAll *a);
int alltoall_rank(const AllToAll *a);

// Counts: send[p * per .. (p + 1) * per) go to rank p, recv[p * per ..] come from rank p. Host ints,
// over MPI (a few bytes), or for nccl over NCCL through the device buffers, waited for.
void alltoall_counts(AllToAll *a, const int *send, int *recv, int per);
// Rows: scount[p] rows of w floats to rank p, packed in rank order in send; rcount[p] rows from rank p
// into recv, packed in rank order. Every rank's scount[q] must equal rank q's rcount[me] (the counts'
// exchange gives them). Blocks until recv holds every row.
void alltoall_rows(AllToAll *a, const float *send, const int *scount, float *recv, const int *rcount, int w);
// The same in two halves, so that the caller computes while the rows travel: start sends (or offers) them
// and returns; wait returns once recv holds every row. Between the two, send and recv belong to the
// exchange (neither read nor written), and no other exchange of a may start. self = 0: the rows this
// rank sends itself are left to the caller (their place in recv is kept, and not written).
void alltoall_rows_start(AllToAll *a, const float *send, const int *scount, float *recv, const int *rcount, int w,
                         int self);
void alltoall_rows_wait(AllToAll *a);
// Where the caller may write the rows of its next exchange, packed as alltoall_rows_start takes them (at most
// floats, at most the cap): shm's window, once every rank has read the last exchange out of it, so that the
// start copies nothing (the rows are packed straight into place); NULL for the others (the caller packs into
// its own buffer). The buffer holds the rows until the next start (pass it as send); the time waited for
// the window counts as the exchange's (alltoall_take_stats).
float *alltoall_send_buffer(AllToAll *a, size_t floats);
// In place: where the algorithm has windows (alltoall_in_place: shm), alltoall_rows_start with recv NULL (and self
// 0) copies no rows in at the wait: once waited for, alltoall_rows_at(a, p) is where rank p's rows for me lie
// (in p's window, read-only), until alltoall_rows_release, which the caller must call before a's next exchange.
int alltoall_in_place(const AllToAll *a);
const float *alltoall_rows_at(const AllToAll *a, int p);
void alltoall_rows_release(AllToAll *a);

// What the exchanges since the last call moved and took: bytes this rank sent to other ranks (rows
// to itself are a copy and do not count), and seconds in alltoall_counts, alltoall_rows and the halves
// (the time the caller waited in them, not the time the rows were in flight).
void alltoall_take_stats(AllToAll *a, double *bytes, double *seconds);
