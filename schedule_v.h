// schedule_v.h: the controllable-memory V schedules (schedule_v.c): V-Half and V-Min, two chunks per
// rank in a V, split backwards, as the order of each rank's passes (schedule.c's table rows turn it
// into action lists); and the polish of any V's orders (zb-auto-v's last step).
#pragma once

// A rank's passes: the forward of chunk 0 and of chunk 1, the input-gradient pass I of chunk 1 and of
// chunk 0 (the gradient runs back up the V), the weight pass W of chunk 1 and of chunk 0.
enum { VPASS_F0, VPASS_F1, VPASS_I1, VPASS_I0, VPASS_W1, VPASS_W0, VPASSES };

// Rank s's passes of V-Half (half = 1: about half of 1F1B's activation memory) or V-Min (about a
// third) for K ranks and M micro-batches, in the order it runs them: pass[i] and mb[i] for the 6M of
// them (the arrays hold 6M). The construction of every rank is made once per (half, K, M) and kept.
void schedule_v_order(int half, int K, int M, int s, int *pass, int *mb);

// What the polish of V orders takes: K ranks, M micro-batches, each stage's forward, I and W times (a chunk pass
// costs half), a message's transfer time, the memory limit in micro-batches in flight (a chunk pass counts 1/2:
// 1 from its F to its I, w_share from its I to its W), how many places a pass moves either way (reach) and the
// budget of runs (a run: one order timed, whole or, in a trial move, the part the move can change). full: every
// trial runs the orders whole (the reference the unit test compares with; the same result, slower).
typedef struct {
    int K, M;
    const double *f, *b, *w;  // [K]
    double comm, limit, w_share;
    int reach;
    long budget;
    int full;
} VPolish;

// Polishes order ([K][6M] pass types VPASS_*, each rank's in the order it runs them, each type's micro-batches in
// order) in place: one pass at a time moved up to reach places on its rank, kept when the longest rank span, or
// at equal span the sum of the ranks' spans, gets shorter with every W after its I and every rank within the
// limit; sweeps over every rank's passes until none helps or the budget is spent. Returns the runs made, or -1
// when order is not a complete V within the limit, or waits for ever.
long schedule_v_polish(const VPolish *p, int *order);
