// axes/expert.h: expert parallelism (--ep N), the fourth axis: its rules, sizes, set-up and report part (of
// axes/axis.h's contract; its price is the planner's, below). The expert group is N replicas of
// one stage (a divisor of dp); each of its ranks runs E/N experts of every MoE layer (moe.h), and rows
// reach their expert's rank and come back by comms/alltoall.c's all-to-all, through the hook the layer
// calls (MoeExchange).
#pragma once
#include <stdio.h>
#include "comms/alltoall.h"
#include "model.h"
#include "axes/axis.h"

// --alltoall: the expert group's algorithm (alltoall_algos' host rows), or auto (shm where the group sits
// on one node, else mpi).
#define ALLTOALL_CHOICES "mpi|pair|shm|auto"
// The value of --alltoall auto: its index in ALLTOALL_CHOICES (mpi, pair and shm are also the algorithms'
// own values; NCCL's is not a choice: the MoE layers exchange host buffers).
enum { ALLTOALL_AUTO = 3 };

// rules: --ep N with --experts E: E divisible by N, N divides dp, not with --tp (MoE layers are not split
// over a tensor-parallel group); sets p->expert. One line and -1 on a mistake, the same on every rank.
int expert_rules(const TrainConfig *c, Plan *p, Err *e);

// sizes: every rank holds all E experts' weights, gradients and optimizer state (moe.h's layout, kept whole
// so that checkpoints and the data-parallel all-reduce see one model; axes/tensor.c's tensor_layer_floats
// counts them): a rank runs E/N experts on the rows of N replicas, as many rows as without --ep (on average), so
// --ep saves neither memory nor FLOPs. Its own: the buffers moe_new
// and moe.c's expert_room allocate for virtual stage vs's MoE layers with `slots` stashed micro-batches
// (each layer's routing state per slot and one for evaluation, the scratch), the rows an expert side
// receives taken at their most (every kept assignment, capacity-bounded): added to m->buffers.
void expert_sizes(const TrainConfig *c, const Plan *p, int vs, int slots, MemNeed *m);
// The model's parameters (model_param_count with D = inputs) with each MoE layer's router and E experts in
// place of its Linear(H,H).
double expert_model_params(const TrainConfig *c, int inputs);
// set-up: the group (the grid's dp split into blocks of N consecutive replicas), its all-to-all, and the
// hook of every local stage's MoE layers. Collective over the grid's dp.
typedef struct {
    int N, rank;            // the group's ranks, and this one's place in it (its experts: [rank E/N, ...))
    int per, algo;          // E/N experts per rank; the all-to-all's row of alltoall_algos
    MPI_Comm comm;          // the group (MPI_COMM_NULL: no expert parallelism)
    AllToAll *a2a;
    MoeExchange ex;         // what the MoE layers call
    int *scount, *rcount;   // per rank of the group: rows sent, received (scratch)
    double *step_bytes, *step_seconds;  // [cap]: each step's (expert_step_end)
    int steps, cap;
} ExpertGroup;
// The MoE layers exchange host buffers (moe.h), so the group's all-to-all runs on the host whatever the device.
void expert_setup(const Plan *p, ExpertGroup *g, Comm *grid, Stage *local, int n_local);
void expert_free(ExpertGroup *g);
// Around a training step's compute: what the all-to-alls moved in between counts to the step (an
// evaluation's forwards between steps do not).
void expert_step_begin(ExpertGroup *g);
void expert_step_end(ExpertGroup *g);

// report: its part of the Summary: the all-to-all's bytes this rank sent and its time per step (the median
// step's, as step_ms is the median step's; then the mean over the ranks), the share of the step.
typedef struct {
    int N;
    char algo[16];
    double bytes, ms, share;
} ExpertReport;
void expert_report_fill(ExpertReport *r, const Plan *p, const ExpertGroup *g, double step_ms);
void expert_report_text(const ExpertReport *r);
struct cJSON;
void expert_report_json(struct cJSON *o, const ExpertReport *r);

// price: planner/cost.c's cost_moe and cost_alltoall (an MoE layer's passes and its all-to-alls), which
// planner/predict.c adds per MoE layer; plan --auto tries every --ep dividing dp and E (planner/auto.c).
