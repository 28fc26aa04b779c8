// train/live.h: the live line of `micropp train` on a terminal: steps done of the epoch (or of the
// run), samples/s and the time left, rewritten in place as the steps go and cleared before any other
// line. --live auto draws it when rank 0's standard output is a terminal and --json is off.
#pragma once
#include <stdint.h>

// --live: auto (a terminal), on (also when standard output is a pipe: mpiexec hands rank 0 one), off
enum { LIVE_AUTO, LIVE_ON, LIVE_OFF };
#define LIVE_CHOICES "auto|on|off"
#define LIVE_EVERY_S 0.25  // the line is redrawn at most this often (and first after as long)

typedef struct {
    int on;                // rank 0 draws it
    int shown;             // a line is on the screen
    int start;             // the first step this run trains (0-based)
    double t0, t_last;     // when the run's steps began, and when the line was last drawn (or cleared)
} Live;

// on: --live's verdict for this rank (the caller's: rank 0, text output, and a terminal or --live on).
void live_init(Live *l, int on, int start);
// After step `step` (0-based) of `steps`: redraws the line if LIVE_EVERY_S has passed. epochs and
// steps_per_epoch 0 when the run counts steps; rows_per_step: the samples of one step (global batch).
void live_step(Live *l, int step, long long steps, int epochs, long long steps_per_epoch, double rows_per_step);
// Removes the line before another line is printed on standard output (nothing when none is shown).
void live_clear(Live *l);
