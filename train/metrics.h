// train/metrics.h: --metrics FILE, the run as a JSON line per step, evaluation and epoch, written by
// rank 0 as it goes (each line flushed, so `tail -f` follows it); `micropp plot` draws the file.
// A resumed run keeps the lines up to the step it resumes from and appends after them.
#pragma once
#include "base/outfile.h"
#include "train/measure.h"

typedef struct {
    OutFile out;
    int on;                       // rank 0 with --metrics: the file is open
    int kept;                     // lines kept from the run that was resumed
    char path[PATH_LEN];
    char err[2 * PATH_LEN];       // the first write that failed, and the fix ("" while none has)
} Metrics;

// Every rank calls it at the same point (with --metrics): rank 0 opens the file, keeping, when the run
// resumes at step `start` (> 0), the earlier run's lines up to that step; a file it cannot write, or
// one that holds other lines than metrics (a NUL byte, a file with no newline: fresh run or resumed),
// ends every rank with exit 2 and is left as it was.
void metrics_open(Metrics *mx, const char *path, int rank, int start);
// A step (1-based `step`; every --metrics-every): its loss, learning rate, wall time, samples/s, MFU (a fraction
// of the ranks' summed peak; null when the peak is unknown), the bubble of a pipeline (NAN: none, the key is
// left out), and with
// --clip-grad the gradients' global norm and whether they were clipped (grad_norm NAN: no clipping, both keys
// left out); with --post-validate (postval >= 0, Measure's postval) what became of the step's update
// (post_validation: "stood", "undone" or "redone"; postval -1: the key left out); with --experts (moe->E) the
// step's rows per expert, dropped assignments and auxiliary loss (moe_load, moe_dropped, moe_aux).
void metrics_step(Metrics *mx, int step, double loss, double lr, double step_s, double samples_s, double bubble,
                  double mfu, double grad_norm, int clipped, int postval, const MoeSteps *moe);
// An evaluation on the held-out rows after `step` (1-based) of a run that counts steps (--eval-every, and
// its final one): a test point of micropp plot's loss and accuracy curves.
void metrics_eval(Metrics *mx, int step, double test_loss, double accuracy);
// An epoch's figures, after `step` (1-based, the epoch's last step).
void metrics_epoch(Metrics *mx, const EpochStat *e, int step);
// Closes the file: 0, or 1 when a write failed; then why, unless it already holds another output's
// failure, gets the line that names the file and the fix.
int metrics_close(Metrics *mx, char *why, size_t n);
