// comms.h: the wire, the one header the rest of micropp includes for it: comms.c's part (below) and
// the communication layer's headers in comms/, which sit below the core and include nothing of it:
//   comms.c              MPI's lifecycle (init, the exit hooks, the bounded finalize), the world, the
//                        grid of pipeline (pp), data-parallel (dp) and tensor-parallel (tp) groups, the
//                        NCCL transport's opening (comms/devcomm.h, implemented by nccl.cu);
//   comms/comm.h         the Comm every file of the wire works on, the grid's arithmetic;
//   comms/hardware.h     what every rank's GPU, node and /dev/shm allow, gathered alike on every rank
//                        (the plan decides the device and the transport from it);
//   comms/messages.h     point-to-point: non-blocking sends from a pool of staging buffers (a send never
//                        blocks), blocking receives, tags that encode (kind, micro-batch) (comms/tags.h);
//   comms/collectives.h  barrier, verdicts, small all-reduces; the data-parallel collectives on float
//                        buffers (all-reduce, reduce-scatter, all-gather) by an algorithm of a table
//                        (comms/algo.h): MPI's own, the ring (comms/ring.h), shared memory (comms/shm.h).
// Calls go one way: comms.c -> comms/ (collectives.c -> ring.c and shm.c; messages.c -> devcomm.h).
// MPI_CHECK (comms/watchdog.h): every MPI call checked, and marked for the watchdog's backstop.
// Names: every function of the wire starts with comm_ (comm_init, comm_grid, comm_send, comm_allreduce,
// ...), whichever file defines it, and so do tags.h's; the NCCL side keeps devcomm_.
// Constants: COMM_ for the wire's limits, else the option they are values of (DEVICE_, TRANSPORT_, ...).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include "base/ops.h"
#include "comms/comm.h"
#include "comms/hardware.h"
#include "comms/messages.h"
#include "comms/collectives.h"
#include "comms/shm.h"
#include "comms/tags.h"
#include "comms/watchdog.h"

// ---- comms.c: MPI's lifecycle, the world, the grid ----

// MPI_Init_thread + MPI_ERRORS_RETURN, sets g_rank; hands the CUDA backend comm_device_wait
void comm_init(int *argc, char ***argv);
// Every host wait on the GPU (its queue, an NCCL event): polls ready(ctx) under --timeout (wd_poll);
// when it runs out, the watchdog's line names `what` and the peer (WD_LOCAL: this rank's own GPU;
// -1: several ranks) and the action, and the job ends (the NCCL communicators aborted first).
void comm_device_wait(int (*ready)(void *ctx), void *ctx, int peer, const char *what);
void comm_finalize(void);          // comm_finalize_with(0)
// The end of a run, collective over the world: rank 0 (which writes the results) calls it once every
// output is written and flushed, with code 0 or 1; the other ranks wait for it under --timeout alone
// (never a fixed bound: a slow disk is no failure), naming `what` should it run out. Every rank
// returns the highest code of all.
int comm_outputs_written(int code, const char *what);
// MPI_Finalize, bounded: once it has not returned within a few seconds the process exits with code.
// Unless comm_outputs_written came first, it waits for rank 0 that way before the bound starts.
void comm_finalize_with(int code);
int comm_world_rank(void);
int comm_world_size(void);
// The grid of P stages x D replicas on P*D ranks, laid out by placement (comms/comm.h). pp = the P ranks
// of this replica, dp = the D ranks holding this stage. (P = 1: plain data parallelism, dp = world;
// D = 1: a single pipeline.)
void comm_grid(Comm *c, const Backend *be, int P, int D, int placement);
// The 3D grid: P x D groups of T adjacent ranks (tensor parallelism innermost: world rank = group x T
// + tp_rank, the group laid out on P x D by placement as above). pp and dp join the ranks of the same
// tp_rank; tp the T ranks of one group. T = 1 is comm_grid.
void comm_grid_tp(Comm *c, const Backend *be, int P, int D, int T, int placement);
void comm_pipeline(Comm *c, const Backend *be);  // every rank one stage of a single pipeline
// MPI_Comm_split(parent, color[me], key[me]) where every rank knows every rank's color and key ([parent's
// size]): the same communicator (ranks in key order, ties in parent order), made among that color's ranks
// alone (MPI_Comm_create_group, tag: the call's, alike on all). Collective over those ranks.
MPI_Comm comm_split_known(MPI_Comm parent, const int *color, const int *key, int tag);
void comm_free(Comm *c);
// How c moves buffers from now on; TRANSPORT_NCCL opens one NCCL transport (devcomm.h) over
// c->world, warmed up with `peers` (npeers world ranks: the ones this rank will exchange with,
// p2p_neighbours mapped to world ranks).
void comm_use_transport(Comm *c, int transport, const int *peers, int npeers);
// An NCCL transport over any MPI communicator: its rank 0 makes the id (ncclGetUniqueId), MPI_Bcast
// hands it to the others, each calls devcomm_open (peers: ranks of comm). Collective over comm.
struct DevComm *comm_nccl_open(MPI_Comm comm, const int *peers, int npeers);
// A group's NCCL communicator over comm (devcomm_open_group, the id as above): the tensor-parallel
// group's, or an expert group lane's (axes/expert.c; at most 3 groups), closed by comm_finalize after the
// pipeline's in the order opened, and aborted with it by the watchdog. Collective over comm.
struct DevComm *comm_nccl_group(MPI_Comm comm);
