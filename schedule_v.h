// schedule_v.h: the controllable-memory V schedules (schedule_v.c): V-Half and V-Min, two chunks per
// rank in a V, split backwards, as the order of each rank's passes (schedule.c's table rows turn it
// into action lists).
#pragma once

// A rank's passes: the forward of chunk 0 and of chunk 1, the input-gradient pass I of chunk 1 and of
// chunk 0 (the gradient runs back up the V), the weight pass W of chunk 1 and of chunk 0.
enum { VPASS_F0, VPASS_F1, VPASS_I1, VPASS_I0, VPASS_W1, VPASS_W0, VPASSES };

// Rank s's passes of V-Half (half = 1: about half of 1F1B's activation memory) or V-Min (about a
// third) for K ranks and M micro-batches, in the order it runs them: pass[i] and mb[i] for the 6M of
// them (the arrays hold 6M). The construction of every rank is made once per (half, K, M) and kept.
void schedule_v_order(int half, int K, int M, int s, int *pass, int *mb);
