// schedule_auto.h: zb-auto, the zero-bubble paper's automatic schedule (arXiv 2401.10241, section 3:
// ZB-1p, ZB-2p): each rank's order of F, I and W found by a search over the simulator, from the
// stages' costs and a limit on the micro-batches a stage holds, instead of written by hand.
#pragma once
#include <stddef.h>
#include "schedule.h"

// What the search starts from: K stages, M micro-batches, each stage's forward (f), backward-input
// (b: I) and backward-weight (w: W) times, a message's transfer time, and the memory limit: the
// most micro-batches a stage may hold between a forward and its W (the paper's M_limit / M_B;
// 2K is its ZB-2p, K its ZB-1p; at least 1).
typedef struct {
    int K, M;
    const double *f, *b, *w;  // [K]
    double comm;
    int limit;
} AutoSpec;

// Builds zb-auto's lists into *out (a SchedFile of K rows, M micro-batches, one chunk per rank, split
// backwards; free it with sched_file_free). The search places the passes greedily in simulated time
// (an I when its gradient is there, else an F while the stage has room, else a W into the idle
// time), under several policies, runs each candidate through schedule_sim, and keeps the shortest
// overlapped step (the longest rank span, the paper's measure), then the shortest synchronous one;
// zb-h1 and zb-h2 are candidates too where they fit the limit. Every candidate kept is proven
// deadlock-free by the simulator and holds at most `limit` micro-batches on every stage.
// *tried: how many candidates were simulated (NULL: not wanted).
void schedule_auto(const AutoSpec *a, SchedFile *out, int *tried);

