// train/report.h: what a run prints. The header before the first step; after the last, one Summary,
// filled once (every reduction across ranks happens there), rendered as text or as the --json
// object. Pipelines add the measured bubble, its theory and simulation, and the charts.
#pragma once
#include "train/run.h"
#include "train/verify.h"

// Per-rank median times of one pass of each compute kind ([K] each, ms; i and w: halves of b when
// the backward is not split).
typedef struct { double *f, *b, *i, *w; } Costs;

typedef struct {
    char mode[32], schedule[32], optimizer[16], transport[16], sync[32], allreduce[32];
    char blas[160], device[192];
    char precision[8], onednn[160];  // onednn: version and kernel of the bf16 products on the CPU ("" otherwise)
    size_t params;
    int n_run, skip;              // steps run; the first is a warm-up left out of medians when n_run > 2
    double accuracy;              // NAN when nothing was evaluated
    long long eval_rows;
    double step_ms, samples_s, gflops;
    double gemm_ms, gemm_share, gemm_gflops;              // --gemm-timing
    double comm_ms, comm_hidden, optimizer_bytes, collectives, buckets;  // ddp/hybrid
    double weight_bytes, grad_bytes, optimizer_state_bytes;  // allocated per rank, the largest over the ranks
    // pipelines: per stage [K]
    double *bubble, *peak_bytes, *peak_inflight, *peak_deferred;
    double bubble_theory;
    int split;                    // the backward is split into I and W
    Costs med;                    // median seconds per pass
    SimResult msim;               // the schedule simulated with the measured costs
    int shown;                    // the step drawn by --timeline / --gantt (0-based), -1 when none
    Gantt charts[2];              // measured and simulated (rank 0, when drawn)
    const VerifyResult *verify;   // NULL without --verify
    char write_err[2 * PATH_LEN]; // rank 0: the output file that could not be written and the fix ("" when all were)
} Summary;

void report_header(const Run *r);     // rank 0, text mode: the run's shape before the first step
void report_dp_header(const Run *r);  // ... and how the gradients travel (after gradsync_init)
void report_epoch(const Run *r, const EpochStat *e);  // rank 0, text mode: one epoch's line
// Collective over the world: every rank calls it after the last step.
void summary_fill(Run *r, double accuracy, const VerifyResult *v, Summary *s);
// Rank 0: the text, or the --json line. Either ends with the completion marker (the text's last line
// REPORT_COMPLETED, the JSON's last key "completed") once every output of the run is written: scripts
// check it, as an interrupted mpiexec can exit 0 (docs/several-machines.md).
#define REPORT_COMPLETED "micropp: run completed"
void summary_print(const Run *r, const Summary *s);
void summary_free(Summary *s);
