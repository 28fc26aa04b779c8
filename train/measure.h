// train/measure.h: what a run's steps measured: per step its times and loss, every action it ran as
// an Event, and per epoch its figures. Allocated for the plan's steps; the executor and the step
// loop append to it, report.c summarises it, trace.c draws its events.
#pragma once
#include "train/trace.h"
#include "base/ops.h"

// MFU's denominator (measure_peak): the gemm rate one rank can reach, and all of the run's ranks together.
typedef struct {
    double gflops;        // this rank's peak GFLOP/s (0: unknown, a GPU not in the datasheet table)
    double total_gflops;  // summed over the ranks (0 when any rank's is unknown); set by the caller
    double seconds;       // how long the measurement took (0: the table's or MICROPP_PEAK_GFLOPS' figure) ...
    double cpu_seconds;   // ... and the CPU time it used (every thread's)
    char source[64];      // "measured sgemm", "measured bf16 gemm", "datasheet H100 SXM tf32", ...
} Peak;

// --epochs: what each epoch measured (rank 0's clock; the ranks finish a step together).
typedef struct {
    int epoch;                 // 1-based
    double train_loss;         // the mean of its steps' losses
    double test_loss, test_accuracy;
    double time_s, samples_s;  // the epoch's steps (its evaluation after it not included)
} EpochStat;

// --experts: per step, summed over every MoE layer of every rank (moe.h's MoeStats): the rows each expert
// got (load, [steps x E]), the assignments dropped and made, the auxiliary loss (each group's weighted by
// its share of the step's rows: what the step's loss gained).
typedef struct {
    int E;
    double *load, *dropped, *assigned, *aux;
} MoeSteps;

// Per step (indexed by the 0-based step, [steps] each), and every action as it ran.
typedef struct {
    double *step_s;      // the step's wall time (the slowest rank's, after the summary's reduction)
    double *busy_s;      // compute inside the step's action list: the union of its passes (a pair once)
    double *span_s;      // the forward/backward part of the step (pipeline: its action list)
    double *loss;        // the global batch's mean loss
    double *gemm_s;      // --gemm-timing: seconds inside gemm
    double *comm_s;      // ddp/hybrid: gradient collectives in flight
    double *exposed_s;   // ... and the part of that after compute (the optimizer step waited)
    double *step_start;  // now_sec() at the step's start (after the step barrier in a pipeline)
    double *grad_norm;   // --clip-grad: the global L2 norm of the step's gradients, before clipping ...
    double *clip_scale;  // ... and the factor they were scaled by (1: not clipped)
    double *postval;     // --post-validate: the step's update 0 stood, 1 undone (a rank's non-finite gradient:
                         // the step skipped), 2 redone (--clip-grad: clipped once the norm arrived)
    Event *ev;           // every action (trace.h), times from its step's start
    int n_ev, cap_ev;
    EpochStat *epoch;    // --epochs: [epochs], n_epoch of them run
    int n_epoch;
    double epoch_t0;     // now_sec() when the current epoch's first step began
    double *tp_s;        // --tp: this rank's tensor-parallel all-reduces in the step: seconds
    double tp_floats;    // --tp: this rank's tensor-parallel all-reduces during the steps: floats
    long tp_calls;       //   and how many (evaluation's not counted)
    MoeSteps moe;        // --experts (E 0: none)
    Peak peak;           // the peak the steps' MFU is measured against
    double flops;        // the model FLOPs of one step (report_step_flops), MFU's numerator
} Measure;

void measure_init(Measure *m, long long steps, int epochs);
void measure_moe(Measure *m, long long steps, int E);  // --experts: m->moe's arrays
void measure_moe_keep(Measure *m, const double *v, int step);  // a step's E + 3 values, the order of MoeSteps
// Steps [start, start + n) of m->moe: the mean rows per expert per step into load[E], and returns the mean
// dropped per step, the share of assignments dropped, the mean auxiliary loss and the busiest expert's
// load over an even split's.
typedef struct { double dropped, dropped_share, aux, busiest; } MoeMeans;
MoeMeans measure_moe_means(const Measure *m, int start, int n, double *load);
void measure_free(Measure *m);
// --post-validate: the name of a step's outcome (Measure's postval 0, 1, 2): "stood", "undone", "redone".
const char *measure_postval_name(int postval);
// This rank's peak gemm rate at the run's precision: on the host a short measured gemm (256^3, a warm-up
// and the fastest of 5 to 40 timed, about 30 ms; the BLAS threads and precision as set), on a GPU its
// datasheet's dense figure by the device's name (tf32: fp32 on tensor cores). MICROPP_PEAK_GFLOPS (tests)
// gives the figure instead, and then a profile's (profile_gflops > 0: --profile's fastest gemm).
void measure_peak(Peak *pk, const Backend *be, int precision, int tf32, double profile_gflops);
// The model FLOPs utilisation of a step of `flops` that took step_s: NAN when the peak is unknown.
double measure_mfu(const Peak *pk, double flops, double step_s);
// Appends an action of `step` that ran from t0 to t1 (seconds from the step's start); the caller may
// set the event's bytes.
Event *measure_record(Measure *m, int step, int kind, int mb, int chunk, double t0, double t1);
// --tp and --ep, observed: the step's collectives (sp[0..n)) recorded as events of the rank's collectives
// track, each named after the action of `step` it ran inside (its micro-batch and chunk).
void measure_spans(const Span *sp, int n, Measure *m, int step);
