// tests/sim_helpers.h: the simulator's older entry points, kept for the tests that were written
// against them: v = 1, a full backward's cost b split into I = W = b/2.
#pragma once
#include <stdlib.h>
#include "schedule.h"

static inline void schedule_simulate(int kind, int K, int M, double cost_f, double cost_b, double cost_comm, SimResult *r) {
    SimSpec spec = {.kind = kind, .K = K, .M = M, .v = 1, .f = cost_f, .b = cost_b / 2, .w = cost_b / 2, .comm = cost_comm, .slices = 1};
    schedule_sim(&spec, r);
}

// The same with a cost per stage (cost_f[K], cost_b[K]).
static inline void schedule_simulate_stages(int kind, int K, int M, const double *cost_f, const double *cost_b, double cost_comm,
                                            SimResult *r) {
    double *half = malloc(sizeof(double) * (size_t)K);
    for (int s = 0; s < K; s++) half[s] = cost_b[s] / 2;
    SimSpec spec = {.kind = kind, .K = K, .M = M, .v = 1, .comm = cost_comm, .stage_f = cost_f, .stage_b = half, .stage_w = half, .slices = 1};
    schedule_sim(&spec, r);
    free(half);
}
