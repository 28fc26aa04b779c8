// train/report.h: what a run prints. The header before the first step; after the last, one Summary,
// filled once (every reduction across ranks happens there), rendered as text or as the --json
// object. Pipelines add the measured bubble, its theory and simulation, and the charts.
#pragma once
#include "train/summary.h"


// Rank 0, text mode: the run's shape before the first step; how the gradients travel (after
// gradsync_init); an epoch's line.
void report_header(const TrainConfig *c, const Plan *p, const Wire *w, const Data *data);
void report_epoch(const Plan *p, const EpochStat *e);
// The model FLOPs of one step: model_row_flops (6 x parameters less the first layer's input gradient, never
// computed; MoE: the parameters a row goes through) x rows; a checkpointed forward's recompute not counted (MFU's
// numerator, as the planner's).
double report_step_flops(const TrainConfig *c, const Plan *p);
// Collective over the world: every rank calls it after the last step. It reads every part of the run
// (and reduces the step times across ranks in r->m).
void summary_fill(Run *r, double accuracy, const VerifyResult *v, Summary *s);
// Rank 0: the text, or the --json line. Either ends with the completion marker (the text's last line
// REPORT_COMPLETED, the JSON's last key "completed") once every output of the run is written: scripts
// check it, as an interrupted mpiexec can exit 0 (docs/several-machines.md).
#define REPORT_COMPLETED "micropp: run completed"
void summary_print(const Run *r, const Summary *s);
void summary_free(Summary *s);
