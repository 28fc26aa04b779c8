// train/report.h: what a run prints. The header before the first step; after the last, one Summary,
// filled once (every reduction across ranks happens there), rendered as text or as the --json
// object. Pipelines add the measured bubble, its theory and simulation, and the charts.
#pragma once
#include "train/run.h"
#include "train/verify.h"

typedef struct {
    char mode[32], schedule[32], optimizer[16], transport[16];
    char blas[160], device[192];
    char precision[8], onednn[160];  // onednn: version and kernel of the bf16 products on the CPU ("" otherwise)
    size_t params;
    int start, n_run, skip;       // steps run: [start, start + n_run); the first is a warm-up left out
                                  // of medians when n_run > 2
    double accuracy;              // NAN when nothing was evaluated
    long long eval_rows;
    double step_ms, samples_s, gflops;
    double gemm_ms, gemm_share, gemm_gflops;                 // --gemm-timing
    double weight_bytes, grad_bytes, optimizer_state_bytes;  // allocated per rank, the largest over the ranks
    TensorReport tensor;                                     // --tp: the axis' part (axes/tensor.h)
    DataReport data;                                         // data parallelism's part (axes/data.h)
    double max_rss;  // the largest peak resident set of the ranks' processes (getrusage), bytes
    PipelineReport pipe;          // the pipeline's part (axes/pipeline.h)
    Gantt charts[2];              // measured and simulated (rank 0, when drawn)
    const VerifyResult *verify;   // NULL without --verify
    char write_err[2 * PATH_LEN]; // rank 0: the output file that could not be written and the fix ("" when all were)
    double predicted_step_ms;     // --auto: the planner's prediction of this layout's step (0 without --auto)
    char auto_layout[96];         // ... and the layout it picked, in words
} Summary;

// Rank 0, text mode: the run's shape before the first step; how the gradients travel (after
// gradsync_init); an epoch's line.
void report_header(const TrainConfig *c, const Plan *p, const Wire *w, const Data *data);
void report_epoch(const Plan *p, const EpochStat *e);
// Collective over the world: every rank calls it after the last step. It reads every part of the run
// (and reduces the step times across ranks in r->m).
void summary_fill(Run *r, double accuracy, const VerifyResult *v, Summary *s);
// Rank 0: the text, or the --json line. Either ends with the completion marker (the text's last line
// REPORT_COMPLETED, the JSON's last key "completed") once every output of the run is written: scripts
// check it, as an interrupted mpiexec can exit 0 (docs/several-machines.md).
#define REPORT_COMPLETED "micropp: run completed"
void summary_print(const Run *r, const Summary *s);
// Rank 0: the --json object (train/report_json.c), summary_print's JSON half.
void summary_json(const Run *r, const Summary *s);
void summary_free(Summary *s);
