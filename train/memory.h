// train/memory.h: what a run will allocate, worked out before it allocates: per rank, the weights,
// gradients, optimizer state, the activations stashed at the schedule's peak and the buffers; and
// the check of that against the memory the node has, so a run that cannot fit is refused at once
// instead of climbing toward the out-of-memory killer.
#pragma once
#include "train/run.h"

typedef struct { double weights, grads, optimizer, activations, buffers, total; } MemNeed;  // bytes

// The same from the options and a plan alone (no run, no MPI): what `micropp plan` prints.
void memory_reckon(const TrainConfig *c, const Plan *p, const int *vs_of, const int *slots, int n, MemNeed *m);
// The activation bytes live at once on rank `stage` as it runs its action list, counted as model.c's
// tally counts them (train's peak_activation_bytes): at most the stash memory_reckon allocates.
double memory_live_peak(const TrainConfig *c, const Plan *p, const ActionList *list, int stage);
// Bytes of one stashed activation element at --precision (PRECISION_*).
double memory_activation_elem(int precision);
// MemAvailable from /proc/meminfo, bytes; -1 when it cannot be read.
double memory_available(void);
// This rank's needs: the virtual stages vs_of[0..n) it will hold, each with slots[k] stashed
// micro-batches (the simulator's peak for pipelines, 1 otherwise).
void memory_need(const Run *r, const int *vs_of, const int *slots, int n, MemNeed *m);
// Collective over the world: every rank's need against its node's MemAvailable (/proc/meminfo);
// one that does not fit ends every rank with one line naming the figures and the cheapest fix.
void memory_check(const Run *r, const int *vs_of, const int *slots, int n);
