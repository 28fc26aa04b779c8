// comms/devcomm.h: the NCCL transport between GPU ranks, for the wire only (comms.c bootstraps it over
// MPI, messages.c hands comm_send/comm_recv to it when --transport is nccl). An interface of comms/
// implemented by the CUDA build, as base/ops.h's backend is: nccl.cu, or in a CPU-only build
// cuda_stub.c, which ends the run if it is ever reached. Buffers are device pointers.
#pragma once
#include <stddef.h>

#define DEVCOMM_ID_BYTES 128  // sizeof(ncclUniqueId); nccl.cu checks it at compile time

typedef struct DevComm DevComm;

// Rank 0 of a group makes the id (ncclGetUniqueId), the caller broadcasts it over MPI, then every
// rank of the group opens its communicator with it (ncclCommInitRank: collective, all ranks at once).
// devcomm_open then splits four communicators from it (one per devcomm_channel, each with a stream
// of its own) and runs p2p.h's warm-up with `peers` (npeers ranks: p2p_neighbours, as ranks of the group).
// Every host wait of the transport (a receive, the step's last sends, the warm-up) polls through
// the wait the wire handed the backend (backend_cuda_set_wait: the watchdog's, under --timeout).
void devcomm_unique_id(void *id);
DevComm *devcomm_open(const void *id, int nranks, int rank, const int *peers, int npeers);
void devcomm_close(DevComm *d);
// When the job ends on a timeout (the watchdog's wd_at_end): ncclCommAbort of every communicator of
// the n transports (NULL ones skipped) inside ONE group, so every abort flag is up before NCCL reclaims
// any (one at a time, the first would wait on the device for a kernel of another that still spins).
void devcomm_abort_all(DevComm *const *d, int n);

// Point-to-point with the semantics of comm_send / comm_recv, by p2p.h's rule. grad: 1 for a
// gradient, 0 for an activation (or any other message); with the direction (peer above or below
// this rank) it picks the channel. A send is posted at once, alone, on its channel, after the
// compute queued so far; it is waited for only by devcomm_flush. kept (comm_send_kept): the caller
// writes buf again only after this rank has received a message that the peer sent after receiving
// this one (an activation whose gradient must come back first), so NCCL sends from buf itself.
// Otherwise buf is copied into a device staging buffer first, so the caller may overwrite it at once
// (a staging buffer is reused only once its send has completed, else a new one is made).
// devcomm_recv returns when buf holds the data. A message to this rank itself (the V's turn) is a
// device copy: the matching devcomm_recv from this rank takes the oldest of its kind.
void devcomm_send(DevComm *d, const float *buf, size_t n, int peer, int grad, int kept);
void devcomm_recv(DevComm *d, float *buf, size_t n, int peer, int grad);
void devcomm_flush(DevComm *d);  // waits until every send has completed (the step's end)
// A pipeline step's calls as posted (issue 37 item 11): each crossing send/receive pair that p2p.c's
// p2p_pair finds on both ranks' action lists goes out as ONE ncclGroupStart/End on one communicator.
// One DevCall per call of this rank's step, in the order the executor makes them (p2p.c's p2p_plan
// fills them; peer is a rank of this transport): a send, its peer, its kind, `with` the index of its
// pair's other call (-1: none) and the channel it is posted on. devcomm_plan copies them (n = 0
// removes the plan); devcomm_step makes the calls until the next devcomm_flush follow the plan: a
// paired send is held (staged first unless kept) and posted in one group with its receive, every
// call on the plan's channel, and a call the plan does not expect ends the run naming it (never a
// hang). Without devcomm_step (evaluation, pingpong) each call is posted alone, as above.
typedef struct { int send, peer, grad, with, channel; } DevCall;
void devcomm_plan(DevComm *d, const DevCall *calls, int n);
void devcomm_step(DevComm *d);
// selftest's check of the NCCL calls on one GPU (NCCL refuses two ranks on one GPU, so no pairing):
// devcomm_open on a world of one rank (init, the four splits), a grouped ncclSend and ncclRecv of n
// floats to itself on every channel, devcomm_close. Returns the largest difference received.
double devcomm_smoke(size_t n);

// A group's all-reduce: the tensor-parallel group's (axes/tensor.c, when the plan's tp_nccl is set:
// --transport nccl with --tp). devcomm_open_group: a communicator over the group alone (rank 0 of
// the group makes the id, comms.c's comm_nccl_group broadcasts it over the group's MPI communicator),
// with a stream of its own and no channels. devcomm_allreduce_sum: ncclAllReduce(buf, buf, n,
// ncclFloat, ncclSum) in place on that stream, after the compute queued so far (an event recorded on
// the compute stream, waited for by the group's stream); the compute queued after it waits for an
// event recorded after it. The host never waits in it: a later host wait on the compute stream (a
// copy to the host, the step's end) waits for it, under the watchdog as every such wait; a
// communicator that failed shows there as a timeout, and devcomm_close waits for the last all-reduce
// polling NCCL's error state. NCCL pairs collectives by order alone, so every rank of the group must
// call it in the same order with the same n: axes/tensor.c's recorder (MICROPP_COLLECTIVE_LOG) proves that on
// the CPU (tests/t_tp_order.sh). devcomm_allreduce_smoke: selftest --nccl's row on one GPU (a group
// of one rank: the sum is the input); returns the largest difference. Never run on a GPU yet.
// Data parallelism's collectives (collectives.c) still stage a GPU buffer through the host over MPI.
// devcomm_abort_smoke: selftest --nccl's row of devcomm_abort_all on one GPU (a transport and a group
// of one rank each, aborted together); returns the seconds it took.
double devcomm_abort_smoke(void);
DevComm *devcomm_open_group(const void *id, int nranks, int rank);
void devcomm_allreduce_sum(DevComm *d, float *buf, size_t n);
// The device time of the all-reduces since the last call, in seconds (CUDA events recorded on the
// group's stream around each ncclAllReduce, from when its inputs were ready: a slower peer's wait
// counts, as in an MPI collective); waits for the last under the wire's bound.
double devcomm_allreduce_seconds(DevComm *d);
double devcomm_allreduce_smoke(size_t n);
// A group's all-to-all (comms/alltoall.c's nccl row: expert parallelism's counts, then rows, under
// --transport nccl): to every rank p of the group sc[p] elements from send + sd[p], from every rank rc[p]
// elements into recv + rd[p] (device buffers; 4-byte elements, floats or, ints = 1, ints; the offsets
// count elements), as ncclSend and ncclRecv inside ONE ncclGroupStart/End on the group's stream, after
// the compute queued so far. devcomm_alltoall_wait: the host waits for it as for every NCCL wait
// (nccl_ready's poll of the event and the communicator's error state, under the wire's bound:
// --timeout names `what`), and the compute queued after it waits too. One in flight per DevComm: every
// rank of the group posts them in the same order (NCCL pairs by order). devcomm_alltoall_smoke:
// selftest --nccl's row on one GPU (a group of one rank, floats then ints to itself); returns the
// largest difference. Compiled, never run on a GPU yet (selftest --nccl's row on one, t_gpu.sh's --ep 2 on two).
void devcomm_alltoallv(DevComm *d, const void *send, const int *sc, const int *sd, void *recv, const int *rc,
                       const int *rd, int ints);
void devcomm_alltoall_wait(DevComm *d, const char *what);
double devcomm_alltoall_smoke(size_t n);

// The communicator (and stream) a message from rank `from` to rank `to` travels on under p2p.h's
// rule: one per direction (toward a higher rank or a lower one) and kind (activation or gradient).
// Every call on one communicator between two ranks then goes one way, so NCCL's in-order execution
// cannot pair two sends against each other; and NCCL matches a pair's messages in posting order, so
// activations and gradients that cross between the same two ranks in different orders (the V of
// zb-v and dualpipev: chunk 0's activations and chunk 1's gradients both go from rank 0 to rank 1)
// must not share one.
#define DEVCOMM_CHANNELS 4
static inline int devcomm_channel(int from, int to, int grad) { return (to > from ? 0 : 1) + 2 * (grad != 0); }
