// planner/predict.h: a layout's step predicted without running it: the schedule simulator run with the
// profile's per-rank costs (planner/cost.h), the pipeline's messages, the data-parallel collectives and
// the part of them hidden behind the backward, the optimizer, a step's fixed cost (scaled by the profile's
// refit factor of the layout's family, `plan --validate`'s); and the memory per rank from
// planner/memory.c's one reckoning. `plan --auto` ranks layouts by it (planner/auto.c).
#pragma once
#include "planner/cost.h"
#include "axes/axis.h"
#include "axes/degrees.h"

typedef struct {
    double step_s, samples_s;  // the predicted step and its throughput
    double compute_s;          // the passes of the rank that ends last (its list's busy time)
    double comm_s;             // the step's communication not hidden: pipeline messages on the critical
                               // path, the exposed part of the collectives, the fixed all-reduce
    double msgs_s, coll_s;     // its parts: the pipeline messages on the critical path; the collectives not
                               // hidden (the dp sync's and gathers' exposed part, the tp all-reduces)
    double opt_s, data_s;      // the optimizer; the synthetic rows and labels the rank makes (inside compute)
    double fixed_s;            // a step's fixed cost (the loss all-reduce, the barrier)
    double bubble;             // the schedule's idle share with the profile's costs, messages free
    double memory;             // bytes of the rank that needs most (memory_rank)
    int worst_stage;           // ... its stage
    double mfu;                // model FLOPs utilisation: model_row_flops x the batch's rows (a forward's 2 and a
                               // backward's 4 a parameter, less the first layer's input gradient; recompute not
                               // counted) over step x ranks x predict_peak
    double peak;               // ... that peak, one rank's FLOP/s (0: the profile has none)
} Prediction;

// The layout's degrees (pp, dp, tp, zero), and its options on a copy of c besides them: schedule,
// virtual stages, micro-batches, checkpointing, precision.
Degrees layout_degrees(const Layout *l);
void layout_apply(const Layout *l, TrainConfig *c, Degrees *d);
// The layout's data-parallel method in words, as its option's value: "powersgd:4", "sign", "topk:0.1", "sync-every
// 8" (--sync-every's), or "" for the exact sum.
const char *layout_method(const Layout *l, char *out, size_t n);
// The exact command that runs the layout: mpiexec -n N ./micropp train [--config FILE] <the model's
// options when typed or no config> <the layout's>. model_flags: the model's options written out.
void layout_command(const Layout *l, const TrainConfig *c, const char *config, int model_flags, char *out, size_t n);
// Where a layout's groups sit on a machine file's nodes, as train places them (tp innermost, then the
// stages or the replicas by Plan.placement, --placement auto resolved as train resolves it): how many of
// a data-parallel group share each node, and whether every pipeline boundary stays inside a node. A
// calibration's world is one node: everything local.
typedef struct { int dp_local, pp_intra; } Links;
Links predict_links(const Profile *pf, const Plan *p);
// A layout's family (FAMILY_*): pipeline (stages, one replica), hybrid (both), ddp (replicas), tp (one
// tensor-parallel group alone), monolith.
int layout_family(int pp, int dp, int tp);
// Predicts the step of layout l for the model c (its layers, widths, batch, optimizer) on the profile;
// 0, or -1 with why the layout cannot run (plan_layout's or the schedule's reason) in why.
int predict_step(const Profile *pf, const TrainConfig *c, const Layout *l, Prediction *out, char *why, size_t n);
// The same for a run as its options describe it (`plan --profile/--machine` without --auto, `train --profile`):
// the degrees d and every option of c as given (schedule, virtual stages, micro-batches, checkpointing,
// precision, ZeRO, --partition, --placement, --bucket-mb, --allreduce); as predict_step.
int predict_config(const Profile *pf, const TrainConfig *c, const Degrees *d, Prediction *out, char *why, size_t n);
// A partition of l's layers over its stages balanced by cost: each layer's forward and backward
// at its micro-batch's rows (the first stage's input rows, the head and its labels on the last), cut so
// that the costliest stage costs least, the later stages filled first. 0 with "15,16,16,17" in out, or -1
// when l has no pipeline, holds several chunks a rank, or the balanced cut is the even one.
int predict_balance(const Profile *pf, const TrainConfig *c, const Layout *l, char *out, size_t n);
// One rank's peak FLOP/s at a precision: a machine file's datasheet gemm rate; a profile's fastest gemm (any
// pass it timed of the hidden and first layers, at any rows), this machine's gemm peak with its ranks busy at once.
double predict_peak(const Profile *pf, int precision);

// The crossover: the link bandwidth B (bytes/s a rank sends) below which a method's step beats ddp's. ddp
// sends a bytes a step, its sum (a / B) hidden behind the backward's `window` seconds by `ov` but for the last
// of its `pieces` buckets (axes/data.c's data_price_exposed); the method sends m bytes after the backward,
// unhidden, and adds `host` seconds of work. Both steps are linear in 1/B, ddp's bending where its sum
// outgrows the window: the smallest 1/B where the method is the faster; INFINITY: at every bandwidth, 0: at none.
double crossover_bandwidth(double a, double m, double host, double window, double ov, double pieces);
// That bandwidth for a ddp layout (no pipeline, no ZeRO) of c and d against method (COMPRESS_*, arg its F or R;
// COMPRESS_NONE: local SGD, arg its H) from the profile's backward, overlap and host rates, accuracy not priced.
// 0, or -1 with why.
int predict_crossover(const Profile *pf, const TrainConfig *c, const Degrees *d, int method, double arg, double *bw,
                      char *why, size_t n);
