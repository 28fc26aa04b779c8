// train/summary.h: the Summary of a run, what train/report.c fills once after the last step (every
// reduction across ranks happens there) and renders as text, and train/report_json.c as the --json
// object: the run's figures, and a part per axis, filled and printed by the axis (axes/*.h).
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
    double mfu;                   // model FLOPs over the step's time and the ranks' summed peak (NAN: unknown)
    Peak peak;                    // ... that peak (train/measure.h)
    double gemm_ms, gemm_share, gemm_gflops;                 // --gemm-timing
    double weight_bytes, grad_bytes, optimizer_state_bytes;  // allocated per rank, the largest over the ranks
    TensorReport tensor;                                     // --tp: the axis' part (axes/tensor.h)
    DataReport data;                                         // data parallelism's part (axes/data.h)
    double act_bytes;  // the activations live at each stage's peak, summed over the rank's stages, the largest rank
    ExpertReport expert;                                     // --ep: the axis' part (axes/expert.h)
    double max_rss;  // the largest peak resident set of the ranks' processes (getrusage), bytes
    PipelineReport pipe;          // the pipeline's part (axes/pipeline.h)
    Gantt charts[2];              // measured and simulated (rank 0, when drawn)
    const VerifyResult *verify;   // NULL without --verify
    char write_err[2 * PATH_LEN]; // rank 0: the output file that could not be written and the fix ("" when all were)
    AutoPick predicted;           // --auto: the planner's prediction of this layout's step, and its name
} Summary;
