// comms/algo.h: what an algorithm of the data-parallel collectives is: a row of operations (CommAlgo:
// its name, what its buffers need, start, advance, release, a blocking form), the request in flight
// that every row shares (CommReq), and the shard rule every row follows (comm_shard). The table
// itself is collectives.c's comm_algos; each algorithm's operations live in a file of their own.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "comms/comm.h"

enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER };  // what a request computes

// Shards: a buffer of n floats is cut into D contiguous chunks, chunk i = [n*i/D, n*(i+1)/D) (floor),
// so sizes differ by at most one and n < D leaves some empty. Rank i of dp owns chunk i. Every
// algorithm cuts by this rule (ZeRO's shards are these chunks).
static inline void comm_shard(size_t n, int D, int i, size_t *off, size_t *len) {
    size_t a = (size_t)((unsigned __int128)n * (unsigned)i / (unsigned)D);
    size_t b = (size_t)((unsigned __int128)n * (unsigned)(i + 1) / (unsigned)D);
    *off = a;
    *len = b - a;
}
static inline void comm_scale_host(float *x, size_t n, float a) {  // x *= a on the host (1: nothing)
    if (a != 1.0f) for (size_t i = 0; i < n; i++) x[i] *= a;
}

typedef struct CommAlgo CommAlgo;
typedef struct CommReq CommReq;  // one collective in flight

// The part of a request every algorithm shares; collectives.c fills it and stages a device buffer
// through the host before the algorithm's start, and puts the result back once it is done.
struct CommReq {
    const CommAlgo *algo;     // its row of comm_algos
    int op;                   // OP_*
    MPI_Comm comm;            // the grid's dp group
    int D, me;                // ranks in comm, and this one
    int tag;                  // the same on every rank (collectives start in the same order on all)
    const Backend *be;
    float *dev, *buf;         // the caller's buffer; the host buffer worked on (== dev on the host)
    size_t n;
    float scale;
    float *out;               // reduce-scatter: where this rank's chunk goes (NULL: its chunk of buf) ...
    int out_written;          //   ... written there already (shm sums straight into it)
    int done;
    double t_done;
    void *state;              // the algorithm's own (its start sets it; freed by comm_wait after release)
    CommReq *next;            // the list of collectives in flight
};

// One algorithm. start and advance never block, and return 1 once the request's result is in q->buf
// (or out); collectives.c then completes it. An algorithm calls nothing of collectives.c.
struct CommAlgo {
    const char *name;   // the option's spelling (--allreduce, allreduce's --algo, a profile's key)
    int windows;        // its buffers must lie in windows shared by the ranks of one node (shm.h's
                        // comm_shared_alloc: every dp group on one node, host memory); a collective
                        // on any other buffer runs by MPI's row instead
    // Posts q's first step: the common part is filled, D > 1 and n > 0.
    int (*start)(CommReq *q, Comm *c);
    int (*advance)(CommReq *q);
    void (*release)(CommReq *q);  // frees what q->state points to (NULL: nothing but the state itself)
    // Its own blocking form, beside the one every row has (start, then wait); NULL: none.
    void (*blocking)(Comm *c, int op, float *buf, size_t n, float scale);
};
