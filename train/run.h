// train/run.h: one `micropp train` run as its phases share it: what was planned (Plan), what lives while
// it trains (the wire, the stages this process holds, the data), and what each step measured.
// train.c sets it up; pipeline.c steps it; verify.c checks it; report.c summarises it.
#pragma once
#include <stdint.h>
#include "train/checkpoint.h"
#include "comms.h"
#include "base/data.h"
#include "train/ddp.h"
#include "model.h"
#include "train/plan.h"
#include "schedule.h"
#include "train/trace.h"

// An evaluation on the held-out rows (pipeline.c's evaluate).
typedef struct { double accuracy, loss; long long rows; } EvalResult;

// --epochs: what each epoch measured (rank 0's clock; the ranks finish a step together).
typedef struct {
    int epoch;                 // 1-based
    double train_loss;         // the mean of its steps' losses
    double test_loss, test_accuracy;
    double time_s, samples_s;  // the epoch's steps (its evaluation after it not included)
} EpochStat;

// Per step (indexed by the 0-based step, [steps] each), and every action as it ran.
typedef struct {
    double *step_s;      // the step's wall time (the slowest rank's, after the summary's reduction)
    double *busy_s;      // compute inside the step's action list
    double *span_s;      // the forward/backward part of the step (pipeline: its action list)
    double *loss;        // the global batch's mean loss
    double *gemm_s;      // --gemm-timing: seconds inside gemm
    double *comm_s;      // ddp/hybrid: gradient collectives in flight
    double *exposed_s;   // ... and the part of that after compute (the optimizer step waited)
    double *step_start;  // now_sec() at the step's start (after the step barrier in a pipeline)
    Event *ev;           // every action (trace.h), times from its step's start
    int n_ev, cap_ev;
    EpochStat *epoch;    // --epochs: [epochs], n_epoch of them run
    int n_epoch;
    double epoch_t0;     // now_sec() when the current epoch's first step began
} Measure;

typedef struct {
    const TrainConfig *c;
    Plan p;
    const Backend *be;
    Hardware hardware;        // device and transport, the same decision on every rank
    Data data;
    Comm comm;
    int rank;                 // world rank
    int stage, replica;       // this rank's pipeline stage (pp/hybrid) and data-parallel replica
    Stage *local;             // the stages this process holds: its V chunks (pp/hybrid; chunk c is
    int n_local;              // virtual stage c*K + stage), the K parts (manual), or the whole model
    Stage *head;              // the local stage holding the head (and the loss), or NULL
    int *vs_of;               // [n_local]: the virtual stage of local[k] (manual: part k)
    MemTally tally;           // pp/hybrid: activation memory of this rank's chunks together
    ActionList list;          // pp/hybrid: this rank's actions of one step
    SimResult sim;            // pp/hybrid: the schedule simulated with uniform costs (the theory)
    GradSync *sync;           // ddp/hybrid: the gradient sync of each local stage
    int n_sync;               // 0 without data parallelism
    float *xh;                // host rows [rows, H]
    int32_t *yh;              // host labels
    float *dout, *din;        // received output gradient, input gradient to send
    void *wire;               // bf16: a gradient message, din rounded to bf16 pairs (half its bytes)
    int start;                // this run trains steps [start, steps) (start > 0 when resumed) ...
    uint64_t sample0;         // ... and its first step reads from sample sample0 on
    int64_t saved_step;       // the last step saved (--save), -1 when none
    char bad_update[512];     // this rank's first non-finite parameter after an update ("" when none)
    int diverged_steps;       // steps in a row whose loss exceeded --diverge-factor x the first
    double best_accuracy;     // --save-best: the best test accuracy so far, and its epoch (0: none)
    int best_epoch;
    CkptLayout ck;
    Measure m;
} Run;

// The first training sample of micro-batch mb of replica d in accumulation micro-step k of a step.
uint64_t run_first_sample(const Run *r, int step, int k, int d, int mb);
// Appends an event to r->m (times relative to the step's start).
void run_record(Run *r, int step, int kind, int mb, int chunk, double t0, double t1);
