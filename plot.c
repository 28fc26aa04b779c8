// plot.c: `micropp plot RUN.jsonl [RUN2.jsonl ...] --svg OUT.svg`: the curves of train's --metrics logs
// (train/metrics.c) as one SVG picture: loss (train and test), test accuracy, learning rate and step
// time against steps or epochs, several runs overlaid with a legend; drawn with base/svg.c. No MPI.
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/config.h"
#include "base/outfile.h"
#include "base/safetensors.h"
#include "base/svg.h"
#include "base/util.h"
#include "commands.h"

#define PLOT_MAX_RUNS 10      // the palette's colours
#define PLOT_MAX_BYTES (1LL << 30)

typedef struct {
    char svg[PATH_LEN];
    int x;                   // X_STEPS, X_EPOCHS or X_TIME
    char title[PATH_LEN];
    int64_t smooth;          // the training loss also as the mean of its last N points (0, 1: raw only)
} PlotConfig;
enum { X_STEPS, X_EPOCHS, X_TIME };

#define O(field) offsetof(PlotConfig, field)
static const Option plot_options[] = {
    {"svg", 0, OPT_STR, O(svg), 0, 0, 0, "OUT.svg", "the picture to write ('-': standard output)", 0},
    {"x", 0, OPT_CHOICE, O(x), "steps|epochs|time", 0, 0, "AXIS",
     "the horizontal axis: optimizer steps, epochs (the runs need epoch lines: train --epochs), or the seconds "
     "the steps took (the sum of their step_ms: evaluations left out; a line per step, --metrics-every 1)",
     0},
    {"title", 0, OPT_STR, O(title), 0, 0, 0, "TEXT", "the picture's title (default: the files' names)", 0},
    {"smooth", 0, OPT_INT, O(smooth), 0, 0, 1 << 20, "N",
     "draw the training loss also as the mean of its last N points, over the raw curve drawn faint (0: raw only)",
     0},
    {0},
};

typedef struct {
    double *x, *y;
    int n, cap;
} Series;

// One run's curves, read off its metrics lines. Steps are 1-based; epochs place a step at
// step / (steps per epoch), read off the first epoch line.
enum { S_LOSS, S_TEST_LOSS, S_ACCURACY, S_LR, S_STEP_MS, S_EPOCH_LOSS, N_SERIES };
typedef struct {
    char name[PATH_LEN];     // the legend: the file's name without its folder and .jsonl
    Series s[N_SERIES];
    double steps_per_epoch;  // 0: no epoch line
} Curves;

static void add(Series *s, double x, double y) {
    if (!isfinite(y)) return;  // (null in the file: nothing to draw)
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = realloc(s->x, sizeof(double) * (size_t)s->cap);
        s->y = realloc(s->y, sizeof(double) * (size_t)s->cap);
        CHECK(s->x && s->y, "out of memory reading a metrics file");
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// One metrics line into the run's curves: a step's, an evaluation's (--eval-every, and a run's final one:
// a test loss and accuracy without an epoch) or an epoch's; 0, or -1 when it is no metrics line.
static int read_line(Curves *r, const char *line) {
    cJSON *o = cJSON_Parse(line);
    double step = num(o, "step"), epoch = num(o, "epoch");
    if (!cJSON_IsObject(o) || !(step >= 0)) { cJSON_Delete(o); return -1; }
    if (isfinite(epoch)) {
        if (!r->steps_per_epoch && epoch > 0) r->steps_per_epoch = step / epoch;
        add(&r->s[S_TEST_LOSS], step, num(o, "test_loss"));
        add(&r->s[S_ACCURACY], step, 100 * num(o, "accuracy"));
        add(&r->s[S_EPOCH_LOSS], step, num(o, "train_loss"));
    } else if (!cJSON_GetObjectItemCaseSensitive(o, "loss")) {
        add(&r->s[S_TEST_LOSS], step, num(o, "test_loss"));
        add(&r->s[S_ACCURACY], step, 100 * num(o, "accuracy"));
    } else {
        add(&r->s[S_LOSS], step, num(o, "loss"));
        add(&r->s[S_LR], step, num(o, "lr"));
        add(&r->s[S_STEP_MS], step, num(o, "step_ms"));
    }
    cJSON_Delete(o);
    return 0;
}

// A metrics file: every complete line (a last line without its newline is a run still writing it).
static void read_run(const char *path, Curves *r) {
    uint8_t *buf;
    size_t len;
    char err[PATH_LEN + 128];
    if (read_file(path, (size_t)PLOT_MAX_BYTES, &buf, &len, err, sizeof err)) user_error("plot: %s", err);
    char *text = xmalloc(len + 1);
    memcpy(text, buf, len);
    text[len] = 0;
    free(buf);
    int line_no = 0, lines = 0;
    for (char *line = text, *nl; (nl = memchr(line, '\n', len - (size_t)(line - text))); line = nl + 1, line_no++) {
        *nl = 0;
        if (strlen(line) < (size_t)(nl - line))
            user_error("plot: %s: line %d holds a NUL byte: give the files train --metrics wrote", path, line_no + 1);
        if (!*line) continue;
        if (read_line(r, line))
            user_error("plot: %s: line %d is no metrics line (a JSON object with a \"step\"): give the files "
                       "train --metrics wrote",
                       path, line_no + 1);
        lines++;
    }
    free(text);
    if (!lines) user_error("plot: %s has no metrics lines (yet): give a file train --metrics wrote", path);
    const char *base = strrchr(path, '/');
    snprintf(r->name, sizeof r->name, "%s", base ? base + 1 : path);
    size_t n = strlen(r->name);
    if (n > 6 && !strcmp(r->name + n - 6, ".jsonl")) r->name[n - 6] = 0;
}

// --x time: every point moved from its step to the seconds the run's steps took up to it (the sum of their
// step_ms, from the first step line on); the run needs a line for every step.
static void to_seconds(Curves *r, const char *path) {
    const Series *ms = &r->s[S_STEP_MS];
    if (!ms->n) user_error("plot: --x time: %s has no step lines: train with --metrics-every 1", path);
    double *sum = xmalloc(sizeof(double) * (size_t)(ms->n + 1)), first = ms->x[0];
    sum[0] = 0;
    for (int i = 0; i < ms->n; i++) {
        if (ms->x[i] != first + i)
            user_error("plot: --x time: %s has no line for step %.0f: train with --metrics-every 1", path, first + i);
        sum[i + 1] = sum[i] + ms->y[i] / 1e3;
    }
    for (int k = 0; k < N_SERIES; k++)
        for (int i = 0; i < r->s[k].n; i++) {
            double at = fmin(fmax(r->s[k].x[i] - first + 1, 0), ms->n);  // steps done at the point
            r->s[k].x[i] = sum[(int)at];
        }
    free(sum);
}

// ---- the picture ----

#define PLOT_WIDTH 960
#define PANEL_H 250
#define PANEL_LEFT 64   // the y axis' labels
#define PANEL_BOTTOM 40 // the x axis' labels and name
#define PANEL_GAP 24

typedef struct {
    const char *title;
    int series, dashed;   // the series drawn solid, and the one drawn dashed with dots (-1: none)
    const char *empty;    // what the panel says when no run has its data
} Panel;

typedef struct {
    double x0, y0, w, h;             // the plotting area, px
    double xlo, xhi, ylo, yhi;       // its data range (log: yhi and ylo are powers of ten's exponents)
    int log;                         // the learning rates of runs 20x apart: a log scale shows them all
} Frame;

static double px_x(const Frame *f, double x) { return f->x0 + (x - f->xlo) / (f->xhi - f->xlo) * f->w; }
static double px_y(const Frame *f, double y) {
    if (f->log) y = log10(fmax(y, pow(10, f->ylo)));  // (a rate of 0, at a cosine's end: at the bottom)
    double v = fmin(fmax(y, f->ylo), f->yhi);  // (clipped: the step time's range stops at a few medians)
    return f->y0 + f->h - (v - f->ylo) / (f->yhi - f->ylo) * f->h;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const Series *s) {
    if (!s->n) return NAN;
    double *v = xmalloc(sizeof(double) * (size_t)s->n);
    memcpy(v, s->y, sizeof(double) * (size_t)s->n);
    qsort(v, (size_t)s->n, sizeof(double), cmp_double);  // (a log of a million steps: n log n)
    double m = v[s->n / 2];
    free(v);
    return m;
}

// A panel's solid (k 0) or dashed (k 1) series of one run, or NULL. A run logged without steps
// (--log-every 0) draws its epochs' training loss.
static const Series *series_of(const Curves *r, const Panel *pn, int k) {
    int id = k ? pn->dashed : pn->series;
    if (id == S_LOSS && !r->s[S_LOSS].n) id = S_EPOCH_LOSS;
    return id < 0 ? NULL : &r->s[id];
}

static double x_div(const PlotConfig *c, const Curves *r) { return c->x == X_EPOCHS ? r->steps_per_epoch : 1; }

// The range of a panel's series over every run (x: every panel's, from 0 to the last step or epoch);
// 0 when no run has its data.
static int panel_range(const Curves *runs, int n, const Panel *pn, Frame *fr, int *clipped) {
    fr->ylo = INFINITY;
    fr->yhi = -INFINITY;
    *clipped = 0;
    int any = 0;
    double pos = INFINITY;  // the smallest value above 0
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 2; k++) {
            const Series *s = series_of(&runs[r], pn, k);
            if (!s) continue;
            double cap = s == &runs[r].s[S_STEP_MS] ? 4 * median_of(s) : INFINITY;  // the warm-up steps would
            for (int i = 0; i < s->n; i++) {                                       // flatten the rest
                any = 1;
                fr->ylo = fmin(fr->ylo, s->y[i]);
                if (s->y[i] > 0) pos = fmin(pos, s->y[i]);
                if (s->y[i] > cap) *clipped = 1;
                fr->yhi = fmax(fr->yhi, fmin(s->y[i], cap));
            }
        }
    if (!any) return 0;
    fr->log = pn->series == S_LR && isfinite(pos) && fr->yhi > 20 * pos;
    if (fr->log) {
        fr->yhi = ceil(log10(fr->yhi));
        fr->ylo = fmin(fmax(floor(log10(pos)), fr->yhi - 4), fr->yhi - 1);  // 4 decades at most: a cosine's
                                                                           // tail goes below, at the bottom
        return 1;
    }
    if (pn->series == S_LR || pn->series == S_STEP_MS) fr->ylo = fmin(fr->ylo, 0);  // rates and times from 0
    // values equal, or a few ulps apart (1 and 1.0000000000000002): a range the ticks can step through
    double mag = fmax(fabs(fr->ylo), fabs(fr->yhi));
    if (fr->yhi - fr->ylo <= mag * 1e-9) fr->yhi = fr->ylo + (mag > 1e-300 ? mag * 0.1 : 1);
    double pad = (fr->yhi - fr->ylo) * 0.05;
    fr->yhi += pad;
    if (fr->ylo != 0) fr->ylo -= pad;
    return 1;
}

// How many ticks of `step` fall in [lo, hi] (0 when they cannot be told apart), at most PLOT_MAX_TICKS.
#define PLOT_MAX_TICKS 50
static int ticks(double lo, double hi, double step) {
    double first = ceil(lo / step) * step, n = floor((hi - first) / step + 1e-9) + 1;
    return isfinite(n) && n > 0 && first + step != first ? (int)fmin(n, PLOT_MAX_TICKS) : 0;
}

// Ticks and their labels on both axes, the frame and the grid.
static void draw_axes(FILE *f, const Frame *fr, const char *xname) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", fr->x0,
            fr->y0, fr->w, fr->h);
    double ys = fr->log ? 1 : svg_nice_step((fr->yhi - fr->ylo) / 5), xs = svg_nice_step((fr->xhi - fr->xlo) / 6);
    char lab[64];
    // (counted, not summed: a step too small to move y would never end the loop; PLOT_MAX_TICKS bounds it)
    for (int i = 0, n = ticks(fr->ylo, fr->yhi, ys); i < n; i++) {
        double y = ceil(fr->ylo / ys) * ys + i * ys;
        double py = fr->log ? px_y(fr, pow(10, y)) : px_y(fr, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", fr->x0, py,
                fr->x0 + fr->w, py);
        if (fr->log) snprintf(lab, sizeof lab, "1e%.0f", y);
        else snprintf(lab, sizeof lab, "%.4g", fabs(y) < ys * 1e-9 ? 0.0 : y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", fr->x0 - 4, py + 4, lab);
    }
    for (int i = 0, n = ticks(fr->xlo, fr->xhi, xs); i < n; i++) {
        double x = ceil(fr->xlo / xs) * xs + i * xs;
        double px = px_x(fr, x);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", px, fr->y0 + fr->h,
                px, fr->y0 + fr->h + 4);
        snprintf(lab, sizeof lab, "%.4g", fabs(x) < xs * 1e-9 ? 0.0 : x);
        double w = svg_text_width(lab, SVG_FONT) / 2;  // a label at the edge stays inside the panel
        double cx = fmin(fmax(px, fr->x0 - PANEL_LEFT + 4 + w), fr->x0 + fr->w + PANEL_GAP / 2 - w);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", cx, fr->y0 + fr->h + 16, lab);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n", fr->x0 + fr->w / 2,
            fr->y0 + fr->h + 32, xname);
}

// A series as a line (dashed: the test loss; attrs: more of the polyline's attributes, "" for none), with a
// dot on each point of an epoch's or evaluation's series.
static void draw_series(FILE *f, const Frame *fr, const Series *s, double xdiv, const char *colour, int dashed,
                        int dots, const char *attrs) {
    if (!s || !s->n) return;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s%s points=\"", colour,
            dashed ? " stroke-dasharray=\"6,3\"" : "", attrs);
    for (int i = 0; i < s->n; i++) fprintf(f, "%s%.1f,%.1f", i ? " " : "", px_x(fr, s->x[i] / xdiv), px_y(fr, s->y[i]));
    fprintf(f, "\"/>\n");
    for (int i = 0; (dots || s->n == 1) && s->n <= 200 && i < s->n; i++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", px_x(fr, s->x[i] / xdiv),
                px_y(fr, s->y[i]), colour);
}

// --smooth N: each point the mean of the series' last N points (fewer at its start).
static Series smoothed(const Series *s, int n) {
    Series m = {xmalloc(sizeof(double) * (size_t)(s->n + 1)), xmalloc(sizeof(double) * (size_t)(s->n + 1)), s->n, s->n};
    double sum = 0;
    for (int i = 0; i < s->n; i++) {
        sum += s->y[i] - (i >= n ? s->y[i - n] : 0);
        m.x[i] = s->x[i];
        m.y[i] = sum / (i + 1 < n ? i + 1 : n);
    }
    return m;
}

// A run's series of a panel: with --smooth, the training loss faint and its running mean over it.
static void draw_run(FILE *f, const PlotConfig *c, const Frame *fr, const Curves *run, int r, const Panel *pn) {
    for (int k = 0; k < 2; k++) {
        const Series *s = series_of(run, pn, k);
        int evals = s == &run->s[S_TEST_LOSS] || s == &run->s[S_ACCURACY] || s == &run->s[S_EPOCH_LOSS];
        int smooth = s == &run->s[S_LOSS] && c->smooth > 1 && s->n > 1;
        draw_series(f, fr, s, x_div(c, run), svg_colour(r), k, evals, smooth ? " stroke-opacity=\"0.3\"" : "");
        if (!smooth) continue;
        Series m = smoothed(s, (int)c->smooth);
        draw_series(f, fr, &m, x_div(c, run), svg_colour(r), 0, 0, " class=\"smoothed\"");
        free(m.x);
        free(m.y);
    }
}

// One panel at (x, y), w wide: its title, axes and every run's series.
static void draw_panel(FILE *f, const PlotConfig *c, const Curves *runs, int n, const Panel *pn, double x, double y,
                       double w, double xhi) {
    fprintf(f, "<g class=\"panel\" data-panel=\"%s\">\n", pn->title);
    Frame fr = {x + PANEL_LEFT, y + 22, w - PANEL_LEFT - PANEL_GAP / 2, PANEL_H - 22 - PANEL_BOTTOM, 0, xhi, 0, 1, 0};
    int clipped, any = panel_range(runs, n, pn, &fr, &clipped);
    char title[200], smooth[80] = "";
    if (pn->series == S_LOSS && c->smooth > 1)
        snprintf(smooth, sizeof smooth, " (train: mean of %lld, raw faint)", (long long)c->smooth);
    snprintf(title, sizeof title, "%s%s%s%s", pn->title, smooth, clipped ? " (slower steps drawn at the top)" : "",
             fr.log ? " (log scale)" : "");
    svg_title(f, x + 4, y, w - 8, SVG_TITLE_FONT, title);
    if (!any) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#ccc\"/>\n",
                fr.x0, fr.y0, fr.w, fr.h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#777\">", fr.x0 + fr.w / 2,
                fr.y0 + fr.h / 2);
        svg_escape(f, pn->empty);
        fprintf(f, "</text>\n</g>\n");
        return;
    }
    draw_axes(f, &fr, c->x == X_EPOCHS ? "epoch" : c->x == X_TIME ? "seconds of steps" : "step");
    for (int r = 0; r < n; r++) draw_run(f, c, &fr, &runs[r], r, pn);
    fprintf(f, "</g>\n");
}

static const Panel panels[4] = {
    {"loss: train (solid), test (dashed)", S_LOSS, S_TEST_LOSS, ""},
    {"test accuracy (%)", S_ACCURACY, -1, "no evaluations: train with --eval-every N or --epochs"},
    {"learning rate", S_LR, -1, "no steps' lines (--metrics-every 0)"},
    {"step time (ms)", S_STEP_MS, -1, "no steps' lines (--metrics-every 0)"},
};

// The legend: a swatch and the name of each run, wrapped within the width; its height. Drawn when f.
#define LEGEND_ROW 18
static double legend(FILE *f, const Curves *runs, int n, double top, double width) {
    double x = 4, y = top;
    for (int r = 0; r < n; r++) {
        char name[64];  // a longer name is cut, with "..." (at a character's start)
        snprintf(name, sizeof name, "%s", runs[r].name);
        if (strlen(runs[r].name) >= sizeof name) {
            size_t cut = sizeof name - 4;
            while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80) cut--;
            memcpy(name + cut, "...", 4);
        }
        double w = 22 + svg_text_width(name, SVG_FONT) + 16;
        if (x > 4 && x + w > width - 4) { x = 4; y += LEGEND_ROW; }
        if (f) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>", x,
                    y + 8, x + 16, y + 8, svg_colour(r));
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 22, y + 12);
            svg_escape(f, name);
            fprintf(f, "</text>\n");
        }
        x += w;
    }
    return y - top + LEGEND_ROW;
}

static void draw(FILE *f, const PlotConfig *c, const Curves *runs, int n) {
    char title[PATH_LEN + 64];
    if (c->title[0]) snprintf(title, sizeof title, "%s", c->title);
    else {
        int k = snprintf(title, sizeof title, "micropp plot:");
        for (int r = 0; r < n && k < (int)sizeof title; r++)
            k += snprintf(title + k, sizeof title - (size_t)k, "%s %s", r ? "," : "", runs[r].name);
    }
    double W = PLOT_WIDTH, th = svg_title_height(title, W - 8, SVG_TITLE_FONT) + 8;
    double lh = legend(NULL, runs, n, 0, W), top = 6 + th + lh + 8;
    svg_begin(f, W, top + 2 * PANEL_H + PANEL_GAP);
    svg_title(f, 4, 6, W - 8, SVG_TITLE_FONT, title);
    legend(f, runs, n, 6 + th, W);
    double xhi = 1;  // every panel's x axis: from 0 to the last step (epoch) of any run
    for (int r = 0; r < n; r++)
        for (int k = 0; k < N_SERIES; k++)
            for (int i = 0; i < runs[r].s[k].n; i++) xhi = fmax(xhi, runs[r].s[k].x[i] / x_div(c, &runs[r]));
    for (int i = 0; i < 4; i++)
        draw_panel(f, c, runs, n, &panels[i], (i % 2) * W / 2, top + (i / 2) * (PANEL_H + PANEL_GAP), W / 2, xhi);
    svg_end(f);
}

// ---- the command ----

// The files to plot are the arguments that are neither an option nor an option's value; the options
// go on to options_parse. Returns how many files (into files), the options left in argv[0..*argc).
static int take_files(int *argc, char **argv, char **files, int max) {
    int n = 0, k = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {  // (a lone "-" is no option, and standard input no metrics file)
            if (n == max) user_error("plot: more than %d runs: the palette has %d colours; plot fewer", max, max);
            files[n++] = argv[i];
            continue;
        }
        argv[k++] = argv[i];
        const Option *o = NULL;
        for (const Option *q = plot_options; q->name; q++)
            if (a[1] == '-' && !strcmp(a + 2, q->name)) o = q;
        if (o && o->type != OPT_BOOL && i + 1 < *argc) argv[k++] = argv[++i];  // its value
    }
    *argc = k;
    return n;
}

int cmd_plot(int argc, char **argv) {
    single_process("plot");
    PlotConfig cfg = {0}, *c = &cfg;
    char *files[PLOT_MAX_RUNS];
    int n = take_files(&argc, argv, files, PLOT_MAX_RUNS);
    options_parse("plot", plot_options, c, NULL, argc, argv, "micropp plot RUN.jsonl [RUN2.jsonl ...] --svg OUT.svg",
                  "  micropp train --steps 200 --metrics run.jsonl && micropp plot run.jsonl --svg run.svg\n"
                  "  micropp plot adam.jsonl sgd.jsonl --svg compare.svg --title 'adam vs sgd'\n"
                  "  micropp plot fashion.jsonl --x epochs --svg fashion.svg\n"
                  "  micropp plot run.jsonl --smooth 20 --svg run.svg\n");
    if (!n) user_error("plot: no metrics file given: micropp plot RUN.jsonl [RUN2.jsonl ...] --svg OUT.svg");
    if (!c->svg[0]) user_error("plot: --svg OUT.svg is missing: name the picture to write");
    OutName in[PLOT_MAX_RUNS], out = {"--svg", c->svg};
    char why[3 * PATH_LEN];
    for (int r = 0; r < n; r++) in[r] = (OutName){"the metrics log", files[r]};
    if (out_clash("plot", &out, 1, in, n, why, sizeof why)) user_error("%s", why);
    Curves *runs = xcalloc((size_t)n, sizeof(Curves));
    for (int r = 0; r < n; r++) {
        read_run(files[r], &runs[r]);
        if (c->x == X_EPOCHS && !runs[r].steps_per_epoch)
            user_error("plot: --x epochs: %s has no epoch lines (train with --epochs): use --x steps", files[r]);
        if (c->x == X_TIME) to_seconds(&runs[r], files[r]);
    }
    OutFile o;  // opened after reading, so that a bad file leaves no picture behind
    int err = out_open_now(&o, c->svg);
    if (err) user_error("plot: cannot write --svg '%s': %s (%s)", c->svg, strerror(err), out_hint(err));
    draw(o.f, c, runs, n);
    err = out_commit(&o);
    for (int r = 0; r < n; r++)
        for (int k = 0; k < N_SERIES; k++) { free(runs[r].s[k].x); free(runs[r].s[k].y); }
    free(runs);
    if (err) {
        fprintf(stderr, "micropp: plot: writing --svg '%s' failed: %s: %s\n", c->svg, strerror(err),
                out_write_hint(err));
        return 1;
    }
    return 0;
}
