// comms.h: the wire, the one header its four files share (they all work on a Comm):
//   comms.c        MPI's lifecycle (init, the exit hooks, the bounded finalize), the world, the grid
//                  of pipeline (pp) and data-parallel (dp) groups, the NCCL transport's opening;
//   hardware.c     what every rank's GPU, node and /dev/shm allow, gathered alike on every rank
//                  (the plan decides the device and the transport from it);
//   messages.c     point-to-point: non-blocking sends from a pool of staging buffers (a send never
//                  blocks), blocking receives, tags that encode (kind, micro-batch) (tags.h);
//   collectives.c  barrier, verdicts, small all-reduces; the data-parallel collectives on float
//                  buffers (all-reduce, reduce-scatter, all-gather) by MPI, a ring or shared memory.
// Calls go one way, collectives.c -> messages.c, comms.c -> collectives.c, hardware.c -> comms.c.
// MPI_CHECK (watchdog.h): every MPI call checked, and marked for the watchdog's backstop.
// Names: every function of the wire starts with comm_ (comm_init, comm_grid, comm_send, comm_allreduce,
// ...), whichever of the four files defines it, and so do tags.h's; the NCCL side keeps devcomm_.
// Constants: COMM_ for the wire's limits, else the option they are values of (DEVICE_, TRANSPORT_, ...).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include "base/ops.h"
#include "comms/tags.h"
#include "comms/watchdog.h"

struct DevComm;

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

// The grid of P stages x D replicas on P*D ranks, laid out by placement (above). pp = the P ranks
// of this replica, dp = the D ranks holding this stage. (P = 1: plain data parallelism, dp = world;
// D = 1: a single pipeline.)
void comm_grid(Comm *c, const Backend *be, int P, int D, int placement);
// The 3D grid: P x D groups of T adjacent ranks (tensor parallelism innermost: world rank = group x T
// + tp_rank, the group laid out on P x D by placement as above). pp and dp join the ranks of the same
// tp_rank; tp the T ranks of one group. T = 1 is comm_grid.
void comm_grid_tp(Comm *c, const Backend *be, int P, int D, int T, int placement);
static inline int comm_rank_tp(int T, int rank) { return rank % T; }   // a world rank's place in its group
static inline int comm_rank_group(int T, int rank) { return rank / T; }  // ... and its group (a P x D grid rank)
void comm_pipeline(Comm *c, const Backend *be);  // every rank one stage of a single pipeline
void comm_free(Comm *c);
// World rank of stage `stage` of this rank's pipeline.
static inline int comm_stage_rank(const Comm *c, int stage) {
    return comm_grid_rank(c->placement, c->stages, c->replicas, stage, c->replica) * c->tp_size + c->tp_rank;
}
// How c moves buffers from now on; TRANSPORT_NCCL opens one NCCL transport (devcomm.h) over
// c->world, warmed up with `peers` (npeers world ranks: the ones this rank will exchange with,
// p2p_neighbours mapped to world ranks).
void comm_use_transport(Comm *c, int transport, const int *peers, int npeers);
// An NCCL transport over any MPI communicator: its rank 0 makes the id (ncclGetUniqueId), MPI_Bcast
// hands it to the others, each calls devcomm_open (peers: ranks of comm). Collective over comm.
struct DevComm *comm_nccl_open(MPI_Comm comm, const int *peers, int npeers);
// The tensor-parallel group's NCCL communicator over comm (devcomm_open_group, the id as above),
// closed by comm_finalize after the pipeline's, and aborted with it by the watchdog. Collective over comm.
struct DevComm *comm_nccl_group(MPI_Comm comm);

// ---- hardware.c: the device and transport ----

enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };
#define DEVICE_CHOICES "auto|cpu|cuda"
enum { TRANSPORT_AUTO, TRANSPORT_MPI, TRANSPORT_NCCL };
#define TRANSPORT_CHOICES "auto|mpi|nccl"

// What the ranks found about their devices and nodes, gathered by all-reduces and all-gathers so
// that every rank holds the same (the plan, train/plan.h's plan_device, decides the device and the
// transport from it). Collective over the world; decides nothing and refuses nothing. A rank looks
// for GPU (local rank % GPUs of its node) only when probe_gpus; NCCL needs one GPU per rank.
typedef struct {
    const Backend *cuda;         // this rank's CUDA backend, opened (NULL: not looked for, or none here)
    int gpus_probed;             // GPUs were looked for
    int no_gpu_rank;             // the lowest rank without a GPU (-1: every rank has one) ...
    char no_gpu_why[256];        // ... and why (its backend_cuda_open's reason)
    int crowded;                 // some GPU serves two ranks or more (every rank has one):
    int crowded_ranks, crowded_gpus;  // the most ranks on a node with such a GPU, the fewest GPUs there
    int gpu_ranks;               // the ranks on this rank's GPU, this one included (1: a GPU of its own)
    int local_rank, local_size;  // among the ranks of this node (MPI_COMM_TYPE_SHARED)
    int nodes;                   // nodes of the world, numbered in the order of their lowest rank
    int *node_of;                // [world size] the node of every rank (the same on every rank)
    double *shm_free;            // [world size] the free bytes of /dev/shm each rank sees (-1: unknown;
                                 // MICROPP_SHM_FREE=BYTES stands in for it, for tests)
} Hardware;
void comm_choose_hardware(int probe_gpus, Hardware *p);
// The GPUs' sharing from every rank's node (node_of) and GPU (key: Backend.device_key, by the hardware's
// UUID, so ranks that each see one GPU through their own CUDA_VISIBLE_DEVICES are told apart): sets
// crowded, crowded_ranks, crowded_gpus and gpu_ranks of p for `rank`. No MPI (unit_plan calls it).
void comm_gpu_sharing(int size, int rank, const int *node_of, const uint64_t *key, Hardware *p);
void comm_hardware_free(Hardware *p);

// ---- messages.c: point-to-point ----

long long comm_tag_ub(void);  // MPI_TAG_UB: the largest tag this MPI accepts
// Sends n floats of device memory to world rank dst; copies into a staging buffer and returns
// at once (MPI_Isend). comm_wait_sends completes them all.
void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag);
// The same for a buffer the caller leaves alone until dst has answered it (a stashed activation: its
// slot is reused only after its gradient came back from dst): the NCCL transport then sends from buf
// itself, with no device copy into a staging buffer (devcomm.h's kept); MPI copies it to the host anyway.
void comm_send_kept(Comm *c, const float *buf, size_t n, int dst, int tag);
void comm_wait_sends(Comm *c);
// Tests the sends in flight without blocking. MPI moves a large message only while its sender is
// inside an MPI call, so the executor calls this between layers of its compute.
void comm_poll_sends(void);
// Receives n floats into device memory from world rank src (blocks until they arrive).
void comm_recv(Comm *c, float *buf, size_t n, int src, int tag);

// ---- collectives.c ----

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
// collective until it completes (wait, or test returning 1).
// Shards: the buffer is cut into D contiguous chunks, chunk i = [n*i/D, n*(i+1)/D) (floor), so
// sizes differ by at most one and n < D leaves some empty. Rank i of dp owns chunk i.
// shm: the ranks of dp read each other's buffers through an MPI-3 shared-memory window, so a
// buffer must come from comm_shared_alloc (a collective on any other buffer falls back to mpi).
// auto: shm where every dp group sits on one node and the buffers are on the host, else mpi.
enum { ALLREDUCE_MPI, ALLREDUCE_RING, ALLREDUCE_SHM, ALLREDUCE_AUTO };
#define ALLREDUCE_CHOICES "mpi|ring|shm|auto"
#define COMM_MAX_SHM 256  // the most ranks in one shm group (a node's cores)
void comm_shard(size_t n, int D, int i, size_t *off, size_t *len);
// Whether shm windows of `bytes` in all per rank are possible: every dp group on one node, /dev/shm
// room for them. possible: 1 or 0, the same on every rank; require: a user_error naming `what` on
// every rank if not. Both collective over the world; one of them (or the same rule from gathered
// facts, comm_shm_unfit: train's plan) comes before comm_shared_alloc.
int comm_shared_possible(Comm *c, size_t bytes);
void comm_shared_require(Comm *c, size_t bytes, const char *what);
// The rule itself, from one rank's facts: D replicas per stage, `local` of them on its node, `need`
// bytes of windows for the node's node_ranks ranks, `room` bytes free in /dev/shm (-1: unknown).
// why: "" when it fits, else one line ("train: --allreduce shm needs ..."; what: the command).
// /dev/shm's free bytes as this rank sees them (-1: unknown); MICROPP_SHM_FREE=BYTES stands in.
double comm_shm_room(void);
void comm_shm_unfit(const char *what, int D, int local, double need, int node_ranks, double room, char *why, size_t n);
// n floats of host memory in a window shared by the ranks of c->dp (MPI_Win_allocate_shared), at
// the same offset on every rank. Collective over the world (every rank calls it, in the same
// order). Freed by comm_free.
float *comm_shared_alloc(Comm *c, size_t n);
void comm_shared_free(Comm *c);
// How many collectives of c->dp have run in its windows so far (the others fell back to mpi).
double comm_shared_count(const Comm *c);  // every window comm_shared_alloc made (comm_free calls it)

typedef struct CommReq CommReq;  // one collective in flight
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
int comm_test(CommReq *q);      // progresses; 1 when q has completed (q stays valid until waited)
// Blocks until q completes, frees it, and returns the time (now_sec) at which its completion was
// first observed: by an earlier comm_progress/comm_test, or by this wait.
double comm_wait(CommReq *q);
// Blocking forms: MPI's blocking collectives (MPI_Allreduce, MPI_Reduce_scatter, MPI_Allgatherv),
// or the ring started and waited for. Safe while non-blocking ones are in flight on dp.
void comm_allreduce(Comm *c, float *buf, size_t n, float scale, int algo);
void comm_reduce_scatter(Comm *c, float *buf, size_t n, float scale, int algo);
void comm_allgather(Comm *c, float *buf, size_t n, int algo);
