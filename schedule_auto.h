// schedule_auto.h: zb-auto, the zero-bubble paper's automatic schedule (arXiv 2401.10241, section 3:
// ZB-1p, ZB-2p): each rank's order of F, I and W found by a search over the simulator, from the
// stages' costs and a limit on the micro-batches a stage holds, instead of written by hand.
#pragma once
#include <stddef.h>
#include "schedule.h"

// What the search starts from: K stages, M micro-batches, each stage's forward (f), backward-input
// (b: I) and backward-weight (w: W) times, a message's transfer time, and the memory limit in
// micro-batches in flight (the paper's M_limit / M_B; 2K is its ZB-2p, K its ZB-1p; at least 1): a
// micro-batch counts 1 from its F to its I, and w_share from its I to its W (the share of its stash
// that a deferred W keeps: 1 in micropp, whose W keeps each layer's input and output gradient;
// 32h / (34h + 5as) in the paper's transformer layers, about 0.43 for its 6.2B model).
typedef struct {
    int K, M;
    const double *f, *b, *w;  // [K]
    double comm;
    int limit;
    double w_share;  // 0..1
    int v;           // 2: the V's placement (two chunks per rank, zb-auto-v); 0 or 1: one chunk (zb-auto)
} AutoSpec;

// The most memory a stage's list holds at once, in micro-batches in flight counted as above (it
// depends on the rank's own order only).
double schedule_auto_peak(const ActionList *l, double w_share);

// Builds zb-auto's lists into *out (a SchedFile of K rows, M micro-batches, one chunk per rank, split
// backwards; free it with sched_file_free). The candidates: the authors' heuristic (auto_schedule.py's
// manual_order: micro-batch by micro-batch, the forwards a stage can afford, then the I, with W
// passes in the waits; 8 variants), a greedy list scheduler in simulated time (an I when its
// gradient is there, else an F while the stage has room, else a W into the idle time; 4 policies x
// up to 8 caps), zb-h1 and zb-h2. Each runs through schedule_sim; the search keeps the shortest
// overlapped step (the longest rank span, the paper's measure), then the shortest synchronous one,
// of those within the limit. Every candidate kept is proven
// deadlock-free by the simulator and holds at most `limit` on every stage (schedule_auto_peak).
// *tried: how many candidates were simulated (NULL: not wanted).
// With v = 2 (zb-auto-v) the candidates are the V's: zb-v, v-half and v-min, each with the stages' costs,
// copies of each with its W passes placed late (its F and I order kept; at each cap the greedy takes, since
// a smaller cap can end shorter), and a greedy in the V (8 policies:
// the 4 above, each also holding a chunk-0 forward back for a chunk-1 forward on its way), a chunk pass
// counting half a micro-batch against the limit; the best of those within it is kept (v-min
// fits any limit of at least (K+4)/3 micro-batches; below, the one that holds least is kept), then
// polished (passes moved a few places on their rank while the longest span gets shorter, within the limit).
void schedule_auto(const AutoSpec *a, SchedFile *out, int *tried);
// schedule_auto with zb-auto-v's second polish given: its reach (places a pass moves either way) and budget (runs:
// an order timed, whole or in part; 0: none). Both polish the best candidate, the first with a reach of 12 and 2 x
// 10^7 passes' worth of runs (K x 6M passes a whole run), the second only with room for 2K or more where the first
// ends above schedule_auto_bound, and the better is kept; schedule_auto's second: 20 and 2.2 x 10^8 passes' worth.
void schedule_auto_polish(const AutoSpec *a, int reach, long budget, SchedFile *out, int *tried);

// A lower bound on the longest rank span (the overlapped step) of any schedule of the spec's placement
// (one chunk, or the V), memory aside: each rank's wait for its first gradient, then all its I and W.
// The gap of a schedule: its span / this - 1.
double schedule_auto_bound(const AutoSpec *a);

// A lower bound on the longest rank span of any schedule of the placement that holds at most a->limit (as
// schedule_auto_peak counts it, a chunk pass 1/2): each rank's forwards past the limit wait for a freeing
// pass (W with w_share 1, else I), which waits for its own forward's chain through the other ranks and back.
double schedule_auto_bound_memory(const AutoSpec *a);

