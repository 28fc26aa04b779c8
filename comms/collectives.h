// comms/collectives.h: the collectives (collectives.c): the small ones of any communicator (a barrier,
// all-reduces of a few numbers, one verdict for every rank), and the data-parallel ones over a grid's
// dp group on float buffers, each by an algorithm of the table comm_algos (algo.h: a row of
// operations; MPI's own collectives, the ring of ring.c, the shared-memory windows of shm.c, the rings
// of hier.c inside and across nodes).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "comms/algo.h"

// The small collectives of any communicator, waited for under the watchdog.
void comm_barrier(MPI_Comm comm);
// 1 when value is the same on every rank of comm (e.g. a checksum of the parameters), else 0.
int comm_same_u64(uint64_t value, MPI_Comm comm);
void comm_allreduce_sum_double(double *x, int n, MPI_Comm comm);
void comm_allreduce_max_double(double *x, int n, MPI_Comm comm);
// One verdict for every rank: each rank of comm calls it at the same point with its own error ("" when
// fine); if any has one, the lowest such rank's message ends every rank through user_error.
void comm_agree(MPI_Comm comm, const char *mine);
void comm_agree_code(MPI_Comm comm, const char *mine, int code);  // exit code 1 (run_failed) or 2 (user_error)

// The data-parallel collectives over c->dp (D ranks) on n floats of DEVICE memory.
// Every rank of dp must start the same collectives in the same order. Buffers of a backend that
// is not on the host are staged through host memory, as comm_send does. The buffer belongs to the
// collective until it completes (wait, or test returning 1). Rank i of dp owns chunk i (comm_shard).
// algo: a row of comm_algos, by its index:
//   mpi   MPI's own collectives (MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgatherv; blocking: theirs);
//   ring  the ring of point-to-point messages (ring.c);
//   shm   the ranks of dp read each other's buffers through an MPI-3 shared-memory window, so a
//         buffer must come from comm_shared_alloc (a collective on any other buffer falls back to mpi).
//   hier  a ring inside each node, a ring across nodes on the 1/L shards, a ring inside the node again
//         (hier.c), for groups that span nodes (on any other layout it runs the plain ring).
// auto, a choice and no row: shm where every dp group sits on one node and the buffers are on the
// host, hier where the groups span nodes with 2 or more ranks on each, else mpi (the plan decides).
enum {
    ALLREDUCE_MPI, ALLREDUCE_RING, ALLREDUCE_SHM, ALLREDUCE_HIER,
    ALLREDUCE_ALGOS, ALLREDUCE_AUTO = ALLREDUCE_ALGOS
};
extern const CommAlgo comm_algos[ALLREDUCE_ALGOS];
// The option's choices: the rows' names in the table's order, then auto (tests/unit_comms.c checks
// both against comm_algos; allreduce's --algo takes the names and "all").
#define ALLREDUCE_ALGO_NAMES "mpi|ring|shm|hier"
#define ALLREDUCE_CHOICES ALLREDUCE_ALGO_NAMES "|auto"
// Whether algo's buffers must be windows (comm_shared_alloc): its row's `windows`; 0 for auto.
static inline int comm_algo_windows(int algo) {
    return algo >= 0 && algo < ALLREDUCE_ALGOS && comm_algos[algo].windows;
}
// comm_shm_why (shm.h) as one verdict: a user_error naming `what` on every rank if any rank's windows
// of `bytes` are not possible. Collective over the world.
void comm_shared_require(Comm *c, size_t bytes, const char *what);

// All-reduce: buf = scale * (sum over dp of buf). scale = 1/D averages.
CommReq *comm_allreduce_start(Comm *c, float *buf, size_t n, float scale, int algo);
// Reduce-scatter: this rank's own chunk of buf = scale * (sum over dp of that chunk of buf); the
// rest of buf is left undefined.
CommReq *comm_reduce_scatter_start(Comm *c, float *buf, size_t n, float scale, int algo);
// ... with this rank's chunk written to out (its length, on the buffer's device) instead of into buf.
CommReq *comm_reduce_scatter_to(Comm *c, float *buf, size_t n, float scale, int algo, float *out);
// All-gather: every rank's own chunk of buf is copied into the same place on every other rank.
CommReq *comm_allgather_start(Comm *c, float *buf, size_t n, int algo);
// Advances every collective in flight without blocking (the ring moves to its next step, MPI runs
// its progress engine). MPI moves data only inside MPI calls, so call it often while computing.
void comm_progress(void);
// The host staging buffers of the device's collectives freed (comm_finalize, before the backend closes).
void comm_collectives_free(void);
int comm_test(CommReq *q);      // progresses; 1 when q has completed (q stays valid until waited)
// Blocks until q completes, frees it, and returns the time (now_sec) at which its completion was
// first observed: by an earlier comm_progress/comm_test, or by this wait.
double comm_wait(CommReq *q);
// Blocking forms: MPI's blocking collectives (MPI_Allreduce, MPI_Reduce_scatter, MPI_Allgatherv),
// or the ring started and waited for. Safe while non-blocking ones are in flight on dp.
void comm_allreduce(Comm *c, float *buf, size_t n, float scale, int algo);
void comm_reduce_scatter(Comm *c, float *buf, size_t n, float scale, int algo);
void comm_allgather(Comm *c, float *buf, size_t n, int algo);
