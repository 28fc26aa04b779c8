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

// --alltoall: the expert group's algorithm (alltoall_algos' host rows), or auto (nccl with --transport nccl,
// else shm where the group sits on one node, else mpi).
#define ALLTOALL_CHOICES "mpi|pair|shm|auto"
// The value of --alltoall auto: its index in ALLTOALL_CHOICES (mpi, pair and shm are also the algorithms'
// own values; NCCL's is not a choice: auto takes it with --transport nccl, the plan's expert.nccl).
enum { ALLTOALL_AUTO = 3 };
// --ep-overlap: the value is 1 for on; 2 (pair) is on, and a stage's forward of one micro-batch and its
// backward of another that the schedule runs back to back advance in turn, each one's exchanges in flight
// while the other computes (train/executor.c's exec_pair).
#define EP_OVERLAP_CHOICES "off|on|pair"
enum { EP_OVERLAP_PAIR = 2 };

// rules: --ep N with --experts E: E divisible by N, N divides dp, not with --tp (MoE layers are not split
// over a tensor-parallel group), local SGD or --compress (their sums take every range over all replicas);
// sets p->expert (nccl: --transport nccl on GPUs and --alltoall auto). One line and -1 on a mistake, the same
// on every rank.
int expert_rules(const TrainConfig *c, Plan *p, Err *e);

// sizes: a rank holds the router and its E/N experts' weights, gradients and optimizer state (moe.h's
// moe_held; axes/tensor.c's tensor_layer_floats counts them) and runs them on the rows of N replicas (as
// many rows per rank as without --ep, on average). Its own: the buffers moe_new
// and moe.c's expert_room allocate for virtual stage vs's MoE layers with `slots` stashed micro-batches
// (each layer's routing state per slot and one for evaluation, the scratch), the rows an expert side
// receives taken at their most (every kept assignment, capacity-bounded), the scratch twice under
// --ep-overlap pair (each lane's): added to m->buffers.
void expert_sizes(const TrainConfig *c, const Plan *p, int vs, int slots, MemNeed *m);
// The floats of the experts one rank holds on virtual stage vs under --ep (0 without): E/N per MoE layer, the
// part its peers (dp/N replicas) sum and ZeRO-1 shards over them (axes/data.c's data_sizes).
double expert_held_floats(const TrainConfig *c, const Plan *p, int vs);
// The model's parameters (model_param_count with D = inputs) with each MoE layer's router and E experts in
// place of its Linear(H,H).
double expert_model_params(const TrainConfig *c, int inputs);
// set-up: the group (the grid's dp split into blocks of N consecutive replicas), its all-to-all, and the
// hook of every local stage's MoE layers. Collective over the grid's dp.
// A lane: one all-to-all of the group (its own duplicate of the group's communicator, its own shm windows)
// and the hook over it, with the rows' exchange it has in flight. Lane 1 (--ep-overlap pair only) is the
// second pass's of a pair, so that two passes' exchanges, each matched in order, never meet.
struct ExpertGroup;
typedef struct {
    struct ExpertGroup *g;
    AllToAll *a2a;          // NULL: the lane is not open
    MoeExchange ex;         // what the MoE layers call (moe_set_exchange)
    int pending, on;        // on: an exchange is in flight, of kind pending (EV_A2A_*), started at t_start
    double t_start;
} ExpertLane;
typedef struct ExpertGroup {
    int N, rank;            // the group's ranks, and this one's place in it (its experts: [rank E/N, ...))
    int per, algo;          // E/N experts per rank; the all-to-all's row of alltoall_algos
    MPI_Comm comm;          // the group (MPI_COMM_NULL: no expert parallelism)
    ExpertLane lane[2];
    int *scount, *rcount;   // per rank of the group: rows sent, received (scratch)
    double *step_bytes, *step_seconds;  // [cap]: each step's (expert_step_end): seconds waited in the exchanges
    double *step_flight;    // [cap]: each step's seconds from the exchanges' starts to their ends (in flight)
    int steps, cap;
    int overlap;            // the plan's: the rows' exchange started, the layer's own rows computed, then waited
    long paired;            // rows' exchanges started while the other lane had one in flight (all steps)
    double flight;          // this step's so far
    Span *spans;            // this step's waits in the exchanges (the observers draw them), n_spans of them
    int n_spans, cap_spans;
    Comm peers;             // the replicas of this stage holding the same experts (rank r of every group: D/N of
                            // them), which sum their gradients (axes/data.c's expert buckets); dp is their MPI group
} ExpertGroup;
// The Comm the expert buckets are summed over (NULL without --ep).
Comm *expert_peers(ExpertGroup *g);
// The MoE layers exchange host buffers (moe.h): the group's all-to-all runs on them, over NCCL (expert.nccl:
// each lane opens an NCCL communicator of the group, comm_nccl_group) through device buffers of grid->be.
void expert_setup(const Plan *p, ExpertGroup *g, Comm *grid, Stage *local, int n_local);
void expert_free(ExpertGroup *g);
// Around a training step's compute: what the all-to-alls moved in between counts to the step (an
// evaluation's forwards between steps do not).
void expert_step_begin(ExpertGroup *g);
void expert_step_end(ExpertGroup *g);

// report: its part of the Summary: the all-to-all's bytes this rank sent and its time per step, in flight and
// exposed (waited in: the part no compute hid), each the median step's (as step_ms is the median step's; then
// the mean over the ranks), and their shares of the step.
typedef struct {
    int N, overlap;         // overlap: --ep-overlap's value
    double paired;          // the rows' exchanges started while another pass had one in flight, all ranks and steps
    char algo[16];
    double bytes, ms, share;  // ms: in flight (from each exchange's start to its end), share of the step
    double exposed_ms, exposed_share;  // the time the rank waited in the exchanges: the step's share not hidden
} ExpertReport;
// step_s: the run's steps' times (the slowest rank's), from its first; skip: the warm-up steps left out.
// The shares are the median over the steps of each step's (at most 1: the exchanges run inside the step).
void expert_report_fill(ExpertReport *r, const Plan *p, const ExpertGroup *g, const double *step_s, int skip);
void expert_report_text(const ExpertReport *r);
struct cJSON;
void expert_report_json(struct cJSON *o, const ExpertReport *r);

// price: planner/cost.c's cost_moe and cost_alltoall (an MoE layer's passes and its all-to-alls), which
// planner/predict.c adds per MoE layer; plan --auto tries every --ep dividing dp and E (planner/auto.c).
