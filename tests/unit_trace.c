// tests/unit_trace.c: the per-stage simulator against hand-computed timings, slice names, the text
// Gantt chart of a hand-made timeline (character for character), and output files that appear
// whole or not at all.
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "unit.h"
#include "schedule.h"
#include "sim_helpers.h"
#include "train/trace.h"

static void test_simulate_stages(void) {
    // equal per-stage costs give exactly schedule_simulate's result
    int bad = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int K = 1; K <= 6; K++)
            for (int M = 1; M <= 9; M++) {
                double f[6], b[6];
                for (int s = 0; s < K; s++) { f[s] = 1.5; b[s] = 2.25; }
                SimResult x, y;
                schedule_simulate(kind, K, M, 1.5, 2.25, 0.125, &x);
                schedule_simulate_stages(kind, K, M, f, b, 0.125, &y);
                if (x.makespan != y.makespan || x.bubble_mean != y.bubble_mean) bad++;
                for (int s = 0; s < K; s++) if (x.bubble[s] != y.bubble[s] || x.peak_inflight[s] != y.peak_inflight[s]) bad++;
                sim_result_free(&x); sim_result_free(&y);
            }
    EXPECT("simulate_stages/equal costs == schedule_simulate", !bad, "%d differences", bad);
    // K=2, M=2, stage 1 three times slower (f = 1, 3; b = 2, 6), by hand:
    // gpipe: stage 0 F0 0-1 F1 1-2 | stage 1 F0 1-4 F1 4-7 B0 7-13 B1 13-19 | stage 0 B0 13-15 B1 19-21
    // 1f1b:  stage 0 F0 0-1 F1 1-2 | stage 1 F0 1-4 B0 4-10 F1 10-13 B1 13-19 | stage 0 B0 10-12 B1 19-21
    double f[2] = {1, 3}, b[2] = {2, 6};
    for (int kind = SCHED_GPIPE; kind <= SCHED_1F1B; kind++) {
        SimResult r;
        schedule_simulate_stages(kind, 2, 2, f, b, 0, &r);
        double b0_start = kind == SCHED_GPIPE ? 13 : 10;
        int ok = r.makespan == 21 && r.bubble[0] == 15.0 / 21 && r.bubble[1] == 3.0 / 21 && r.bubble_mean == 18.0 / 42
                 && r.n_slices[0] == 4 && r.slices[0][2].kind == ACT_BACKWARD && r.slices[0][2].mb == 0 && r.slices[0][2].t0 == b0_start
                 && r.slices[1][1].t0 == 4 && r.slices[1][1].kind == (kind == SCHED_GPIPE ? ACT_FORWARD : ACT_BACKWARD);
        EXPECT(kind == SCHED_GPIPE ? "simulate_stages/gpipe, slow last stage, by hand" : "simulate_stages/1f1b, slow last stage, by hand",
               ok, "makespan %g bubble %g %g mean %g; stage 0 slice 2 at %g", r.makespan, r.bubble[0], r.bubble[1], r.bubble_mean, r.slices[0][2].t0);
        sim_result_free(&r);
    }
}

static void test_names(void) {
    char a[64], b[64], c[64], d[64], e[64], g[64];
    slice_name(ACT_FORWARD, 3, 0, a, sizeof a);
    slice_name(ACT_BACKWARD, 12, 0, b, sizeof b);
    slice_name(ACT_SEND_ACT, 3, 0, c, sizeof c);
    slice_name(ACT_RECV_GRAD, 0, 0, d, sizeof d);
    slice_name(EV_OPTIMIZER, -1, 0, e, sizeof e);
    slice_label(EV_OPTIMIZER, -1, 0, g, sizeof g);
    EXPECT("trace/slice names", !strcmp(a, "F3") && !strcmp(b, "B12") && !strcmp(c, "SEND_ACT 3") && !strcmp(d, "RECV_GRAD 0 (recv wait)")
           && !strcmp(e, "optimizer step") && !strcmp(g, "O"), "%s|%s|%s|%s|%s|%s", a, b, c, d, e, g);
    // the split backward's kinds have their own letters (and colours); chunks of an interleaved rank a suffix
    slice_name(ACT_BACKWARD_INPUT, 2, 0, a, sizeof a);
    slice_name(ACT_BACKWARD_WEIGHT, 2, 1, b, sizeof b);
    slice_name(ACT_SEND_ACT, 3, 1, c, sizeof c);
    slice_name(ACT_RECV_GRAD, 5, 2, d, sizeof d);
    EXPECT("trace/slice names of I, W and chunks", !strcmp(a, "I2") && !strcmp(b, "W2.1") && !strcmp(c, "SEND_ACT 3 (chunk 1)")
           && !strcmp(d, "RECV_GRAD 5 (chunk 2) (recv wait)") && strcmp(kind_style(ACT_BACKWARD_WEIGHT)->fill, kind_style(ACT_BACKWARD_INPUT)->fill)
           && strcmp(kind_style(ACT_BACKWARD_WEIGHT)->fill, kind_style(ACT_BACKWARD)->fill), "%s|%s|%s|%s", a, b, c, d);
}

// The chart as gantt_text draws it (no colour), in a string the caller frees.
static char *gantt_string(const Gantt *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gantt_text(f, g, 0);
    fclose(f);
    return buf;
}

static void test_gantt_text(void) {
    // two rows; row 1 waits (a bar), then a backward too short for its brackets (its label alone), then an optimizer step
    Interval r0[] = {{ACT_FORWARD, 0, 0, 1, 0, 0, 0}, {ACT_FORWARD, 1, 1, 2, 0, 0, 0}, {ACT_BACKWARD, 0, 4, 6, 0, 0, 0}};
    Interval r1[] = {{ACT_RECV_ACT, 0, 0, 1, 0, 0, 0}, {ACT_FORWARD, 0, 1, 2, 0, 0, 0}, {ACT_BACKWARD, 0, 2, 2.75, 0, 0, 0},
                     {EV_OPTIMIZER, -1, 5, 6, 0, 0, 0}};
    Interval *rows[2] = {r0, r1};
    int n[2] = {3, 4};
    Gantt g = {.row_label = "stage", .rows = 2, .slices = rows, .n = n, .t_end = 6, .cell = 1, .axis_scale = 1, .axis_unit = "time units"};
    snprintf(g.title, sizeof g.title, "hand-made");
    char *buf = gantt_string(&g);
    const char *want =
        "hand-made\n"
        "stage 0 [F0][F1]........[B0    ]\n"
        "stage 1 ----[F0]B0 .........[O ]\n"
        "time    0   1   2   3   4   5   6 time units\n"
        "        F forward, B backward, - recv wait, O optimizer step, . idle; a number is the micro-batch\n";
    EXPECT("gantt/text of a hand-made chart", !strcmp(buf, want), "got:\n%s", buf);
    free(buf);
}

// --ep-overlap pair: a forward and a backward whose times overlap on a rank (exec_pair) are one block naming
// both, "[F3/B1]" (timeline_step_gantt), with the legend's note; passes one after another stay two blocks
static void test_gantt_pair(void) {
    Event ev[] = {{0, ACT_FORWARD, 2, 0, 1, 0, 0}, {0, ACT_FORWARD, 3, 1, 4, 0, 0}, {0, ACT_BACKWARD, 1, 2, 5, 0, 0},
                  {0, ACT_BACKWARD, 2, 5, 6, 0, 0}};
    Event *evs[1] = {ev};
    int n_ev[1] = {4};
    double start[1] = {0}, span[1] = {6}, *starts[1] = {start}, *spans[1] = {span};
    Timeline t = {.ranks = 1, .steps = 1, .ev = evs, .n = n_ev, .start = starts, .span = spans};
    Gantt g = {.axis_scale = 1, .axis_unit = "time units", .cell = 1};
    timeline_step_gantt(&t, 0, &g);
    snprintf(g.title, sizeof g.title, "pair");
    char *buf = gantt_string(&g);
    const Interval *s = &g.slices[0][1];
    EXPECT("gantt/a pair: one slice of both passes", g.n[0] == 3 && s->mb == 3 && s->pair_mb == 2 && s->t0 == 1 && s->t1 == 5,
           "%d slices, [1]: mb %d pair_mb %d %g..%g", g.n[0], s->mb, s->pair_mb, s->t0, s->t1);
    EXPECT("gantt/a pair drawn as one block naming both, in the legend",
           strstr(buf, "rank 0 [F2   ][F3/B1                     ][B2   ]\n") && strstr(buf, "F/B a forward and a backward in turn"),
           "got:\n%s", buf);
    free(buf);
    gantt_free_slices(&g);
}

static void test_out_files(void) {
    char dir[] = "/tmp/micropp-unit-XXXXXX", path[256], tmpname[PATH_LEN + 32];
    if (!mkdtemp(dir)) { printf("FAIL out/mkdtemp: %s\n", strerror(errno)); unit_failures++; return; }
    snprintf(path, sizeof path, "%s/a.svg", dir);
    OutFile o;
    int err = out_open(&o, path);
    snprintf(tmpname, sizeof tmpname, "%s", o.tmp);
    fprintf(o.f, "half");
    fflush(o.f);
    int absent_while_writing = access(path, F_OK) != 0;
    int commit = out_commit(&o);
    FILE *r = fopen(path, "r");
    char got[16] = "";
    if (r) { if (!fgets(got, sizeof got, r)) got[0] = 0; fclose(r); }
    EXPECT("out/appears only when committed, temp renamed", !err && absent_while_writing && !commit && !strcmp(got, "half") && access(tmpname, F_OK) != 0,
           "err %d absent %d commit %d content '%s'", err, absent_while_writing, commit, got);
    snprintf(path, sizeof path, "%s/b.svg", dir);
    err = out_open(&o, path);
    fprintf(o.f, "never");
    out_abandon(&o);
    EXPECT("out/abandoned: neither file nor temp", !err && access(path, F_OK) != 0 && access(o.tmp, F_OK) != 0, "err %d", err);
    snprintf(path, sizeof path, "%s/missing/c.svg", dir);
    EXPECT("out/missing folder: ENOENT", out_check(path) == ENOENT, "got %d", out_check(path));
    EXPECT("out/a folder: EISDIR", out_check(dir) == EISDIR, "got %d", out_check(dir));
    snprintf(path, sizeof path, "%s/a.svg", dir);
    remove(path);
    EXPECT("out/check leaves nothing", out_check(path) == 0 && rmdir(dir) == 0, "folder not empty: %s", strerror(errno));
}

int main(void) {
    test_simulate_stages();
    test_names();
    test_gantt_text();
    test_gantt_pair();
    test_out_files();
    return unit_failures ? 1 : 0;
}
