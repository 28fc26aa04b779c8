// axes/tp.h: tensor parallelism's wire: the all-reduce model.h's Stage calls through its hook (after a
// row-parallel layer's product, Megatron's g; after a column-parallel layer's input gradient, f's
// conjugate), run over the group's communicator by collectives.c's paths (shm on one node, else MPI
// or the ring; a GPU's buffers staged through the host as data parallelism's are), and counted.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "comms.h"
#include "model.h"
#include "axes/axis.h"  // Span, EV_*

// A pipeline message between two tensor-parallel groups (every rank of a group holds the whole
// activation, or its gradient): full = each rank sends the whole to its counterpart (T copies cross);
// slice = each sends its 1/T chunk (comm_shard's), and the receiving group all-gathers the chunks;
// auto = both timed at start-up (tp_choose_message), the faster kept.
enum { TP_MESSAGE_FULL, TP_MESSAGE_SLICE, TP_MESSAGE_AUTO };
#define TP_MESSAGE_CHOICES "full|slice|auto"


typedef struct {
    Comm comm;       // the group's collectives: comm.dp is the grid's tp communicator (not owned)
    int algo;        // ALLREDUCE_SHM, _MPI or _RING (the plan's tp_allreduce)
    struct DevComm *dev;  // the plan's tp_nccl: the all-reduce over NCCL on the GPU (else NULL)
    int group;       // this group's number (comm_rank_group), for the recorder
    FILE *log;       // the recorder (MICROPP_COLLECTIVE_LOG, testing), or NULL
    float *window;   // shm: the shared buffer each sum goes through, window_n floats (host)
    size_t window_n;
    long calls;      // this rank's all-reduces so far, the floats they summed and their time
    double floats, seconds;
    int message;     // the pipeline's messages between groups: TP_MESSAGE_FULL or _SLICE (never auto)
    int timed;       // 1: auto chose message from these two times, one message each way (the same on every rank)
    double full_ms, slice_ms;
    int trace;       // 1: keep each collective's span in spans (the observers draw them)
    Span *spans;     // since tp_spans_clear, n_spans of them: EV_TP_ALLREDUCE or EV_GATHER
    int n_spans, cap_spans;
} TpGroup;

// The group of this rank's grid (grid->tp), summing with algo, or over NCCL when nccl (the plan's
// tp_nccl: the all-reduce only; the all-gather stays on algo, staged through the host); most: the
// largest all-reduce in floats (rows x the widest layer input). Collective over the world (every rank
// calls it, T = 1 included).
void tp_setup(TpGroup *g, const Comm *grid, const Backend *be, int algo, int nccl, size_t most);
// Points stage s's hook at the group (a stage split T > 1 ways cannot run without it).
void tp_attach(TpGroup *g, Stage *s);
// All-gather over the group: every rank's chunk (comm_shard(n, T, tp rank)) of x, n floats, into every
// rank's x (the slice message's second half). Counted with the all-reduces' time.
void tp_allgather(TpGroup *g, float *x, size_t n);
// Sets g->message: asked (full or slice) as is; auto times reps round trips of an n-float message
// between stage 0's group and stage 1's each way, on the grid c (every rank of the world calls it: the
// others wait in the agreement), and keeps the faster. The times are the slowest rank's, reduced over
// the world, so every rank keeps the same way. A pipeline of one stage has no messages: full.
void tp_choose_message(TpGroup *g, Comm *c, int asked, size_t n, int reps);
#define TP_MESSAGE_REPS 5
void tp_spans_clear(TpGroup *g);  // (train.c: at each step's start)
void tp_free(TpGroup *g);
