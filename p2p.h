// p2p.h: the rule by which the NCCL transport (nccl.cu) posts a pipeline's messages, as pure C
// over the schedule's action lists, so that a CPU-only unit test (tests/unit_p2p.c) proves it for
// every schedule: the neighbours of the warm-up exchange, each rank's ordered calls, and a model of
// NCCL's in-order execution per communicator that must finish without a deadlock.
#pragma once
#include <stddef.h>
#include "schedule.h"
#include "comms/devcomm.h"

// The rule. (1) Right after ncclCommInitRank every rank runs ONE group {ncclSend 1 float to and
// ncclRecv 1 float from each neighbour} (p2p_neighbours): both ranks of every pair then open both
// directions at once, as NCCL needs (NCCL PR #2407, issue #2130). (2) After it, each message outside a
// crossing pair (4) is a call of its own, posted when the executor reaches it (a send at once) on the
// communicator and stream of its direction (devcomm_channel: toward higher ranks or
// toward lower ones), so the calls of one communicator between two ranks all go one way. A hand-off
// between two chunks of one rank (the V's turn) is a device copy, no NCCL call.
enum { P2P_SEND, P2P_RECV };
typedef struct {
    int kind;   // P2P_SEND or P2P_RECV
    int peer;   // the other rank (pipeline stage)
    int msg;    // ACT_SEND_ACT (an activation) or ACT_SEND_GRAD (a gradient), for either side
    int mb;     // micro-batch
    int to_vs;  // the virtual stage that receives it
    int with;   // (4) a crossing pair's other call (p2p_pair), else -1
} P2pCall;
typedef struct { P2pCall *c; int n, cap; } P2pCalls;

// The ranks other than s that rank s of K (v chunks placed by `chunk_order`) exchanges messages with,
// ascending, into out (room for 2v); returns how many.
int p2p_neighbours(int K, int v, int chunk_order, int s, int *out);
// Rank s's calls after the warm-up, in the order the executor issues them for its action list l.
void p2p_calls(int K, int chunk_order, int s, const ActionList *l, P2pCalls *out);
void p2p_calls_free(P2pCalls *c);
// (4) Crossing pairs, posted as one NCCL group (ncclGroupStart, ncclSend, ncclRecv, ncclGroupEnd) on
// one communicator, so that the two halves of a crossing never wait on kernels of two communicators
// progressing at once, which CUDA does not promise (NCCL issues 783, 522; issue 37 item 11). Rank s's
// send i to peer p and its receive j from p pair up when (a) j is s's next call with p after i, (b) no
// receive of s lies between them (holding the send back to j then delays no wait of s's host: it
// reaches j without waiting), and (c) p pairs the same two messages the same way (its send of what s
// receives at j, then its receive of what s sends at i, by (a) and (b) on p's calls). A rule read off
// one rank's list alone can deadlock (docs/gpus.md); (c) needs every rank's calls, which every rank can
// build (the schedules are deterministic). p2p_pair sets `with` on both calls of every pair of every
// rank's calls (calls[K]).
void p2p_pair(int K, P2pCalls *calls);
// The communicator a call is posted on: its own channel (devcomm_channel), or for a pair's two calls
// the channel of the lower rank's send in it (the same on both ranks).
int p2p_channel(int s, const P2pCalls *calls_s, int i);
// (5) What the NCCL transport posts (nccl.cu, devcomm.h's devcomm_plan): rank s's calls as DevCalls
// (peer: a pipeline stage; the caller maps it to a rank of the transport), channel by p2p_channel.
void p2p_plan(int s, const P2pCalls *calls_s, DevCall *out);
// The transport's walk through a plan, one call at a time as the executor makes it: p2p_next
// returns the index of the call to post now, with *held the index of the send held back to go in one
// group with it (-1: alone), or -1 when this call is a paired send to hold; -2 when the call is not the
// plan's next (or a second send would be held), and why in `why`. p2p_done: NULL when every call was
// made and nothing is held, else why.
typedef struct { const DevCall *c; int n, at, held; } P2pCursor;
int p2p_next(P2pCursor *k, int send, int peer, int grad, int *held, char *why, size_t wn);
const char *p2p_done(const P2pCursor *k, char *why, size_t wn);
// Checks the rule on every rank's list (lists[K]), paired by p2p_pair: the warm-up's neighbours are
// symmetric and every call's peer is one of them; on every communicator the k-th message from a to b
// is the k-th that b receives from a there (same kind, micro-batch and virtual stage); every pair is
// the same two messages on both ranks; and the execution model finishes. The model: each rank's host
// posts its calls in order, a send returns at once (a paired one is held back and posted with its
// receive), a receive waits for its data (a pair's, for the whole group); on the GPU the kernels of
// one communicator run one at a time in posting order (NCCL serialises a communicator's kernels), a
// kernel being a lone call or a pair's group, and a send and a receive complete together when both
// their kernels are at the heads of their queues (a group's two calls progress at once). Returns
// NULL, or why in `why` (which rank, which call). p2p_check_calls: the same on calls already made
// (calls[K]), as the test of a rule that breaks it needs.
const char *p2p_check(int K, int v, int chunk_order, const ActionList *lists, char *why, size_t wn);
const char *p2p_check_calls(int K, int v, int chunk_order, const P2pCalls *calls, char *why, size_t wn);

// (3) The four channels must stay four queues. NCCL_COMM_SPLIT_SHARE_RESOURCES=1 (split communicators
// share their parent's resources, so one device stream) and NCCL_LAUNCH_ORDER_IMPLICIT=1 (launches
// ordered across communicators) merge them into one in-order queue per rank, and 1F1B's crossing sends
// then deadlock (NCCL 2.28's init.cc and enqueue.cc). Called before the first NCCL call (so before
// NCCL reads its config files, whose values the environment overrides): sets both to 0, and when the
// environment held another value writes one line saying so into msg (else msg is ""). Returns how
// many it overrode.
int p2p_nccl_env(char *msg, size_t n);
