// schedule.h: a pipeline schedule is DATA: for each stage, the ordered list of actions it runs in
// one training step. The executor (train.c) runs a list for real; the simulator below runs all
// stages' lists against each other with costs, which yields the bubble, the peak number of
// micro-batches in flight, a Gantt chart, and a proof that the schedule cannot deadlock.
#pragma once
#include "config.h"

typedef enum {
    ACT_FORWARD,    // forward of micro-batch mb through this stage
    ACT_BACKWARD,   // backward of mb (weight and input gradients)
    ACT_SEND_ACT,   // send mb's output activation to the next stage (non-blocking)
    ACT_RECV_ACT,   // receive mb's input activation from the previous stage (blocking)
    ACT_SEND_GRAD,  // send the gradient of mb's input to the previous stage (non-blocking)
    ACT_RECV_GRAD,  // receive the gradient of mb's output from the next stage (blocking)
    ACT_KINDS
} ActionKind;

extern const char *const action_names[ACT_KINDS];  // "F", "B", "SEND_ACT", ...

typedef struct { int kind, mb; } Action;
typedef struct { Action *a; int n, cap; } ActionList;

// The action list of `stage` (0-based) for schedule kind (SCHED_*), K stages and M micro-batches.
void schedule_build(int kind, int K, int M, int stage, ActionList *out);
void action_list_free(ActionList *l);

typedef struct { int kind, mb; double t0, t1; } Interval;  // a busy slice (F or B) on one stage

typedef struct {
    int K, M;
    double makespan;
    double *busy;         // [K] compute time per stage
    double *bubble;       // [K] 1 - busy / makespan
    double bubble_mean;   // idle time of all stages / (K * makespan)
    int *peak_inflight;   // [K] most micro-batches stashed at once
    Interval **slices;    // [K] busy slices in time order, n_slices[K] each
    int *n_slices;
    int deadlock;         // 1 when some stage could not finish
    char why[256];        // which stage waits for what, when deadlock
} SimResult;

// Runs every stage's action list against the others: compute actions take cost_f / cost_b,
// a message arrives cost_comm after its send, a receive waits for its message, sends never block.
void schedule_simulate(int kind, int K, int M, double cost_f, double cost_b, double cost_comm, SimResult *r);
// The same with a cost per stage (cost_f[K], cost_b[K]): measured durations, uneven partitions.
void schedule_simulate_stages(int kind, int K, int M, const double *cost_f, const double *cost_b, double cost_comm,
                              SimResult *r);
void sim_result_free(SimResult *r);
// The textbook bubble: (K-1)/(M+K-1) for gpipe and 1f1b, (K-1)/K for naive.
double schedule_bubble_formula(int kind, int K, int M);
