// comms/shm.h: shared memory (shm.c): the windows that the ranks of a dp group on one node share,
// whether they are possible, and the collectives that sum in place in them, a row of the
// collectives' table (collectives.c's comm_algos: "shm", the row whose buffers must be windows).
#pragma once
#include <stddef.h>
#include "comms/algo.h"

#define COMM_MAX_SHM 256  // the most ranks in one shm group (a node's cores)
// Whether shm windows of `bytes` in all per rank are possible: every dp group on one node, /dev/shm
// room for them. possible: 1 or 0, the same on every rank (collectives.h's comm_shared_require: a
// user_error naming `what` on every rank if not). Collective over the world; it, comm_shared_require
// (or the same rule from gathered facts, comm_shm_unfit: train's plan) comes before comm_shared_alloc.
int comm_shared_possible(Comm *c, size_t bytes);
// This rank's reason ("" when none; `what`: the command, as in comm_shm_unfit). Collective over the world.
void comm_shm_why(Comm *c, size_t bytes, const char *what, char *why, size_t wn);
// The rule itself, from one rank's facts: D replicas per stage, `local` of them on its node, `need`
// bytes of windows for the node's node_ranks ranks, `room` bytes free in /dev/shm (-1: unknown).
// why: "" when it fits, else one line ("train: --allreduce shm needs ..."; what: the command).
void comm_shm_unfit(const char *what, int D, int local, double need, int node_ranks, double room, char *why, size_t n);
// How many ranks of group share this rank's node (the launcher's word when every rank is on one node, else
// MPI_Comm_split_type: collective over group).
int shm_group_on_node(MPI_Comm group);
// /dev/shm's free bytes as this rank sees them (-1: unknown); MICROPP_SHM_FREE=BYTES stands in.
double comm_shm_room(void);
// A segment of /dev/shm that the ranks of comm (all on one node) map: `bytes` per rank, rank p's part at
// peer[p] (page-aligned, zeroed). Collective over comm, its waits under the watchdog; close is this rank's
// alone (the others' mappings stay).
typedef struct ShmSegment {
    char **peer;
    size_t bytes;             // mapped, all parts
} ShmSegment;
void shm_segment_open(ShmSegment *s, MPI_Comm comm, size_t bytes);
size_t shm_segment_stride(size_t bytes);  // the /dev/shm bytes a rank's part of `bytes` takes: whole pages
void shm_segment_close(ShmSegment *s);
// n floats of host memory in a segment shared by the ranks of c->dp (shm_segment_open), at
// the same offset on every rank. Collective over the world (every rank calls it, in the same
// order). Freed by comm_free.
float *comm_shared_alloc(Comm *c, size_t n);
void comm_shared_free(Comm *c);  // every window comm_shared_alloc made (comm_free calls it)
// Whether [buf, buf + n) lies in one of c's windows.
int comm_shared_holds(const Comm *c, const float *buf, size_t n);
// How many collectives of c->dp have run in its windows so far (the others fell back to mpi).
double comm_shared_count(const Comm *c);

// The row's operations (algo.h).
int comm_shm_start(CommReq *q, Comm *c);
int comm_shm_advance(CommReq *q);
