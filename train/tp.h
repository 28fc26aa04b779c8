// train/tp.h: tensor parallelism's wire: the all-reduce model.h's Stage calls through its hook (after a
// row-parallel layer's product, Megatron's g; after a column-parallel layer's input gradient, f's
// conjugate), run over the group's communicator by collectives.c's paths (shm on one node, else MPI
// or the ring; a GPU's buffers staged through the host as data parallelism's are), and counted.
#pragma once
#include <stddef.h>
#include "comms.h"
#include "model.h"

// A pipeline message between two tensor-parallel groups (every rank of a group holds the whole
// activation, or its gradient): full = each rank sends the whole to its counterpart (T copies cross);
// slice = each sends its 1/T chunk (comm_shard's), and the receiving group all-gathers the chunks.
enum { TP_MESSAGE_FULL, TP_MESSAGE_SLICE };
#define TP_MESSAGE_CHOICES "full|slice"

typedef struct {
    Comm comm;       // the group's collectives: comm.dp is the grid's tp communicator (not owned)
    int algo;        // ALLREDUCE_SHM, _MPI or _RING (the plan's tp_allreduce)
    float *window;   // shm: the shared buffer each sum goes through, window_n floats (host)
    size_t window_n;
    long calls;      // this rank's all-reduces so far, the floats they summed and their time
    double floats, seconds;
} TpGroup;

// The group of this rank's grid (grid->tp), summing with algo; most: the largest all-reduce in floats
// (rows x the widest layer input). Collective over the world (every rank calls it, T = 1 included).
void tp_setup(TpGroup *g, const Comm *grid, const Backend *be, int algo, size_t most);
// Points stage s's hook at the group (a stage split T > 1 ways cannot run without it).
void tp_attach(TpGroup *g, Stage *s);
// All-gather over the group: every rank's chunk (comm_shard(n, T, tp rank)) of x, n floats, into every
// rank's x (the slice message's second half). Counted with the all-reduces' time.
void tp_allgather(TpGroup *g, float *x, size_t n);
void tp_free(TpGroup *g);
