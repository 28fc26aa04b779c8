// train/trace.h: what ran when, and pictures of it. An Event is one action a rank ran (or its step's loss
// all-reduce and optimizer step); rank 0 gathers every rank's events into a Timeline, writes a Chrome
// trace (Perfetto), and draws any step as a Gantt chart in the terminal or as SVG. The simulator's
// slices (micropp bubble) are drawn by the very same Gantt code, so planned and measured look alike.
#pragma once
#include <stdio.h>
#include <mpi.h>
#include "base/config.h"
#include "base/outfile.h"
#include "schedule.h"
#include "axes/axis.h"  // EV_*: the event kinds

// (The event kinds, EV_*, are the axes': axes/axis.h.)
// The kinds drawn on a rank's second track (the trace's "collectives", a chart's line under the rank's).
static inline int kind_on_comm_track(int kind) { return kind >= EV_GATHER; }

typedef struct {
    int step, kind, mb;
    double t0, t1;  // seconds from the step start
    int chunk;      // of the rank (interleaved, the V); mb -1: none
    double bytes;   // a send's or receive's payload on the wire (bf16 halves it); 0 for the rest
} Event;

// How a kind is drawn. Drawing is generic over kinds: a new action kind (say a weight-only backward)
// needs one row in kind_styles (trace.c) and nothing else here.
typedef struct {
    const char *letter;  // cell label prefix: F -> [F3]
    const char *name;    // legend and trace category
    const char *fill;    // SVG colour
    int ansi;            // terminal colour (SGR foreground code)
    char bar;            // 0: a labelled full-height cell; else a thin bar (text: this character)
} KindStyle;
const KindStyle *kind_style(int kind);
// Labels: "F3" (the letter alone when mb < 0); on chunk c > 0 of an interleaved rank "F3.c".
void slice_label(int kind, int mb, int chunk, char *buf, size_t n);
// "F3", "SEND_ACT 3", "RECV_ACT 3 (recv wait)", "optimizer step"
void slice_name(int kind, int mb, int chunk, char *buf, size_t n);
// A slice's cell label: slice_label's, a pair's both passes' "F3/B1" (--ep-overlap pair).
void interval_label(const Interval *s, char *buf, size_t n);

// A Gantt chart: a row per stage (simulated) or per rank (measured), slices of any kinds. Slices of
// kind_on_comm_track are drawn under their row's (text: a line of their own), the rest on it.
typedef struct {
    char title[512];
    const char *row_label;  // "stage" or "rank"
    char **row_name;        // [rows] or NULL: "rank 3 (s1 t1)" instead of "<row_label> r"
    int rows;
    Interval **slices;      // [rows], each in time order
    int *n;                 // [rows]
    double t_end;           // the right edge
    double cell;            // text: the time drawn as one label-wide cell (0: none) ...
    int width;              // ... the chart at most this many characters wide (0: no limit)
    double axis_scale;      // axis value = t * axis_scale (1: time units, 1e3: ms)
    const char *axis_unit;  // "time units", "ms"
} Gantt;
// Text: "stage 0 [F0][F1]....[B0    ]", '.' = idle; ANSI colours when colour is set.
void gantt_text(FILE *f, const Gantt *g, int colour);
// SVG of n charts stacked on one time scale (own_spans: each chart's span fills the plot's width, on
// an axis of its own); every slice is a <rect class="slice" data-kind data-mb>.
void gantt_svg(FILE *f, const Gantt *charts, int n, int own_spans);
void gantt_free_slices(Gantt *g);  // for charts whose slices were allocated (timeline_step_gantt)

// Where a rank sits in the grid, for its track's name: its stage, replica and tp rank, and which of
// them the run has (a pipeline of one replica without --tp names none: "rank 3").
typedef struct {
    int stage, replica, tp;
    int stages, replicas, tps;  // 1: not named
} TrackPos;

// Every rank's events, on rank 0.
typedef struct {
    int ranks, steps;
    Event **ev;
    int *n;
    double **start;  // [ranks][steps]: step start, seconds after that rank's first step start
    double **span;   // [ranks][steps]: the rank's pipeline's span of the step (0 where none was given)
    TrackPos *pos;   // [ranks]
} Timeline;
// Collective over comm. step_start[steps]: now_sec() at each step's start (after the step barrier,
// which lines the ranks' clocks up); span[steps]: its pipeline's span of each step (or NULL); pos: this
// rank's place. Rank 0 gets every rank's events; the others an empty timeline.
void timeline_gather(Timeline *t, const Event *ev, int n, const double *step_start, const double *span, int steps,
                     TrackPos pos, MPI_Comm comm);
// A track's name: "rank 3" or, where the grid has them, "rank 3 (stage 1, replica 0, tp 1)"; short
// (a chart's row): "rank 3 (s1 r0 t1)".
void track_name(const Timeline *t, int rank, int short_form, char *buf, size_t n);
void timeline_free(Timeline *t);
// Chrome trace event format: an "X" event per slice, pid = tid = rank, ts/dur in microseconds.
// meta: a JSON object text put under "otherData" (the run's settings), or NULL.
void timeline_write_chrome(FILE *f, const Timeline *t, const char *meta);
// The measured chart of one step (0-based): a row per rank, every event of the step.
void timeline_step_gantt(const Timeline *t, int step, Gantt *g);

