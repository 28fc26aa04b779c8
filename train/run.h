// train/run.h: one `micropp train` run, by concern: what was decided (the options and the Plan), the
// wire (this rank's device, place and communicators), the model this process holds, the executor's
// step state, the run's progress, what the steps measured (measure.h) and the checkpoint layout.
// train.c sets them up and keeps them in a Run; every phase takes only the parts it touches.
#pragma once
#include <stdint.h>
#include "train/checkpoint.h"
#include "comms.h"
#include "base/data.h"
#include "axes/data.h"
#include "axes/localsgd.h"
#include "train/measure.h"
#include "train/live.h"
#include "train/metrics.h"
#include "model.h"
#include "train/plan.h"
#include "schedule.h"
#include "axes/tensor.h"
#include "axes/expert.h"
#include "axes/pipeline.h"

// The wire: this rank's device, its place in the job and how it reaches the other ranks.
typedef struct {
    int rank;                 // world rank
    int stage, replica;       // this rank's pipeline stage (pp/hybrid) and data-parallel replica (else 0)
    const Backend *be;        // the device the plan chose: the CUDA backend Hardware opened, or the CPU
    Hardware hardware;        // every rank's GPU, node and /dev/shm, gathered alike on every rank
    Comm comm;                // the grid's communicators and the pipeline's transport (pp, ddp, hybrid, --tp)
    TpGroup tp;               // --tp: the tensor-parallel group's all-reduce, which the local stages call
    ExpertGroup ep;           // --ep: the expert group's all-to-all, which the local stages' MoE layers call
} Wire;

// The model this process holds, and the gradient syncs of data parallelism over it.
typedef struct {
    Stage *local;             // the stages this process holds: its V chunks (pp/hybrid; chunk c is
    int n_local;              // virtual stage plan_vstage(p, stage, c)), the K parts (manual), or the whole model
    int *vs_of;               // [n_local]: the virtual stage of local[k] (manual: part k)
    Stage *head;              // the local stage holding the head (and the loss), or NULL
    MemTally tally;           // pp/hybrid: activation memory of this rank's chunks together
    GradSync *sync;           // ddp/hybrid: the gradient sync of each local stage
    int n_sync;               // 0 without data parallelism, and with --sync-every
    LocalSgd *outer;          // --sync-every: local SGD's outer loop over the local stages (else NULL)
} Model;

// The training path's input rows and labels on their way to the device (train/executor.c's
// exec_load_inputs): INPUT_RING host buffers (pinned on a GPU), each with a fence recorded after the
// copies out of it were queued. A load takes the next buffer and waits for its fence alone, queued
// INPUT_RING loads before: no wait for the whole queue per micro-batch.
#define INPUT_RING 3
typedef struct {
    float *x[INPUT_RING];     // host rows [rows, inputs]
    int32_t *y[INPUT_RING];   // host labels [rows]
    Fence *copied[INPUT_RING];
    int next;                 // the buffer the next load fills
    float *teacher;           // synthetic data on a device: the teacher there (made at the first load)
} InputRing;

// What the executor works with besides the model: the step it runs, this rank's action list, the
// rows it reads, and the buffers a step hands its data and gradients through.
typedef struct {
    int step;                 // the step being run (0-based) ...
    uint64_t step_sample;     // ... and the training stream's sample it starts at (plan_sample)
    ActionList list;          // pp/hybrid: this rank's actions of one step
    SimResult sim;            // pp/hybrid: the schedule simulated with uniform costs (stashes, the theory)
    const Data *data;         // the training stream and the held-out rows
    InputRing ring;           // the training rows and labels, on their way to the device
    float *xh;                // evaluation's host rows [rows, inputs], read from data
    int32_t *yh;              // evaluation's host labels
    float *dout, *din;        // a backward's output gradient (received from the next stage) and the input
                              // gradient it writes (sent to the previous one); [rows, H] each
    void *grad_bf16;          // bf16: a gradient message, din rounded to bf16 pairs (half its bytes)
} StepState;

// How far the run has come: where it started, what it saved, how its loss and updates went.
typedef struct {
    int start;                // this run trains steps [start, steps) (start > 0 when resumed) ...
    uint64_t sample0;         // ... and its first step reads from sample sample0 on
    int64_t saved_step;       // the last step saved (--save), -1 when none
    char bad_update[512];     // this rank's first non-finite parameter after an update ("" when none)
    int diverged_steps;       // steps in a row whose loss exceeded --diverge-factor x the first
    double best_accuracy;     // --save-best: the best test accuracy so far, and its epoch (0: none)
    int best_epoch;
} Progress;

// The planner's prediction of the layout, in ms a step (0: none), and the layout in words: --auto's pick
// (picked), or the layout as given, priced by --profile.
typedef struct {
    double step_ms;
    char layout[96];
    int picked;
    double peak_flops;  // --profile: one rank's peak FLOP/s by it (predict_peak), MFU's denominator (0: none)
} AutoPick;

// --post-validate (train/postval.c): the step whose global check is in flight, and the copy that undoes
// (or, clipped, redoes) its update. The check and --clip-grad's norm ride on the step's loss all-reduce,
// started at the update and waited for after the next step's forward and backward.
typedef struct {
    int step;                 // the step whose check is in flight (-1: none)
    MPI_Request req;          // its all-reduce (MPI_REQUEST_NULL on one process)
    double *v;                // the values all-reduced: step_loss's, then the ranks holding a non-finite gradient
    int n;                    // values in v (the flag last)
    float **keep;             // [n_local]: each local stage's parameters, Adam's moments (--clip-grad: and the
    int copies;               // step's gradients) before the update: `copies` x its parameters
} PostVal;

// The run as cmd_train keeps it.
typedef struct {
    const TrainConfig *c;     // the options (const once parsed)
    Plan p;                   // what the plan decided
    Data data;                // the rows the run reads
    Wire wire;
    Model model;
    StepState exec;
    Progress progress;
    Measure m;
    CkptLayout ck;
    Metrics metrics;          // --metrics: rank 0's JSON lines
    Live live;                // rank 0's live line on a terminal
    AutoPick predicted;       // --auto: what the planner predicted (the summary reports it)
    PostVal pv;               // --post-validate: the check in flight and its undo copy
} Run;
