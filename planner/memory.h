// planner/memory.h: what a run will allocate, worked out before it allocates: per rank, the weights,
// gradients, optimizer state, the activations stashed at the schedule's peak and the buffers; and
// the check of that against the memory the node has, so a run that cannot fit is refused at once
// instead of climbing toward the out-of-memory killer. The one reckoning: train checks itself with
// memory_rank, and `micropp plan` and `bubble --model` print memory_layout, which calls it.
#pragma once
#include "train/run.h"

// (MemNeed, what one rank holds in bytes, is the axes': axes/axis.h.)

// The bytes of the virtual stages vs_of[0..n) held by one rank, each with slots[k] stashed
// micro-batches, from the options and the plan alone (no run, no MPI).
void memory_reckon(const TrainConfig *c, const Plan *p, const int *vs_of, const int *slots, int n, MemNeed *m);
// The bytes of the rank holding pipeline stage `stage`: in a pipeline its chunks, each with the
// simulator's peak of stashed micro-batches (sim: the schedule run with uniform costs, as train
// sizes its stashes); otherwise every part of the model (the plan's K), one micro-batch each.
void memory_rank(const TrainConfig *c, const Plan *p, const SimResult *sim, int stage, MemNeed *m);
// The activation bytes live at once on rank `stage` as it runs its action list, counted as model.c's
// tally counts them (train's peak_activation_bytes): at most the stash memory_reckon allocates.
double memory_live_peak(const TrainConfig *c, const Plan *p, const ActionList *list, int stage);

// A layout's bytes per stage without a run (`micropp plan`'s rows, `bubble --model`): schedule
// kind on the degrees d, laid out by plan_layout, simulated as train simulates it.
typedef struct {
    int K, D, V, M, rows;  // the layout: stages, replicas, chunks per rank, micro-batches, rows each
    double bubble;         // the simulated bubble (uniform costs; 0 without a pipeline)
    MemNeed *need;         // [K] the bytes of each stage's rank (memory_rank)
    double *act;           // [K] the activations live at the peak of each stage's actions
                           //     (memory_live_peak; without a pipeline its one micro-batch's stash)
    int *inflight;         // [K] the simulator's peak micro-batches in flight (1 without a pipeline)
    int T;                 // --tp: each stage's ranks (1: none); need and act are one rank's
    double *tp_bytes;      // [K] the bytes a rank of each stage all-reduces in its group per step (0 without --tp)
} MemLayout;
// 0, or -1 with why the layout cannot run (plan_layout's one line) in why.
int memory_layout(const TrainConfig *c, int kind, const Degrees *d, MemLayout *out, char *why, size_t n);
// zb-auto's lists for plan p (train runs them; plan and bubble --model reckon them): the search
// (schedule_auto) with each stage's F, I and W taken alike as its parameters (each of the three
// passes is one matrix product per layer of the stage's size), free transfers, and room for
// --max-inflight micro-batches on every stage (default 2K: the paper's ZB-2p).
void memory_zbauto(const TrainConfig *c, const Plan *p, SchedFile *out);
void memory_layout_free(MemLayout *l);
// MemAvailable from /proc/meminfo, bytes; -1 when it cannot be read.
double memory_available(void);
// What a GPU holds beyond memory_rank's buffers: cuBLAS's workspace, the NCCL transport's staging
// copies (a message per micro-batch in flight) and bf16's packed operands. memory_check adds it on a GPU.
#define MEMORY_CUBLAS_WORKSPACE (32.0 * 1024 * 1024)  // cuBLAS's default workspace on Hopper
double memory_device_extra(const TrainConfig *c, const Plan *p);
// Collective over the world: every rank's need (memory_rank: this rank's stage, with the schedule's
// simulation sim in a pipeline, else NULL) against its node's MemAvailable (/proc/meminfo), or its
// GPU's free memory (times the ranks sharing the node or the GPU); one that does not fit ends every
// rank with one line naming the figures (fmt_bytes: the unit that fits) and the cheapest fix.
void memory_check(const TrainConfig *c, const Plan *p, const Wire *w, const SimResult *sim);
