// train/trace.c: the pictures of a pipeline: per-kind styles, Gantt charts as text and SVG (of simulated
// or measured slices alike), the gather of every rank's events to rank 0, and the Chrome trace
// writer. Each writes to a FILE its caller opened (base/outfile.c makes a file appear whole).
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "comms.h"
#include "train/trace.h"
#include "base/svg.h"
#include "base/util.h"

// Indexed by kind. A kind without a row (a new action added to schedule.h) is drawn as a grey cell
// named after action_names until it gets one.
static const KindStyle kind_styles[EV_KINDS] = {
    [ACT_FORWARD] = {"F", "forward", "#4e79a7", 34, 0},
    [ACT_BACKWARD] = {"B", "backward", "#e15759", 31, 0},
    [ACT_SEND_ACT] = {"s", "send", "#3b3b3b", 0, '^'},
    [ACT_RECV_ACT] = {"r", "recv wait", "#8f8f8f", 0, '-'},
    [ACT_SEND_GRAD] = {"s", "send", "#3b3b3b", 0, '^'},
    [ACT_RECV_GRAD] = {"r", "recv wait", "#8f8f8f", 0, '-'},
    [ACT_BACKWARD_INPUT] = {"I", "backward input", "#f28e2b", 33, 0},
    [ACT_BACKWARD_WEIGHT] = {"W", "backward weight", "#b07aa1", 35, 0},
    [EV_ALLREDUCE] = {"L", "loss wait", "#76b7b2", 36, '_'},  // the step's loss all-reduce: waiting for the last stage
    [EV_OPTIMIZER] = {"O", "optimizer step", "#59a14f", 32, 0},
    [EV_GATHER] = {"G", "all-gather", "#edc948", 33, '~'},
    [EV_REDUCE_SCATTER] = {"R", "reduce-scatter", "#ff9da7", 35, '~'},
    [EV_TP_ALLREDUCE] = {"T", "tp all-reduce", "#9c755f", 36, '#'},
    [EV_GRAD_ALLREDUCE] = {"D", "gradient all-reduce", "#499894", 36, '='},
    [EV_A2A_DISPATCH] = {"A", "all-to-all dispatch", "#17becf", 36, '>'},  // --ep: waits in the exchanges
    [EV_A2A_COMBINE] = {"C", "all-to-all combine", "#bcbd22", 33, '<'},
};

const KindStyle *kind_style(int kind) {
    static KindStyle unknown[EV_KINDS];
    CHECK(kind >= 0 && kind < EV_KINDS, "event kind %d out of range", kind);
    if (kind_styles[kind].letter) return &kind_styles[kind];
    unknown[kind] = (KindStyle){kind < ACT_KINDS ? action_names[kind] : "?",
                                kind < ACT_KINDS ? action_names[kind] : "?", "#bab0ac", 0, 0};
    return &unknown[kind];
}

void slice_label(int kind, int mb, int chunk, char *buf, size_t n) {
    const KindStyle *k = kind_style(kind);
    if (mb < 0) snprintf(buf, n, "%s", k->letter);
    else if (chunk > 0) snprintf(buf, n, "%s%d.%d", k->letter, mb, chunk);
    else snprintf(buf, n, "%s%d", k->letter, mb);
}

void interval_label(const Interval *s, char *buf, size_t n) {
    slice_label(s->kind, s->mb, s->chunk, buf, n);
    size_t len = strlen(buf);
    if (s->pair_mb > 0 && len + 1 < n) {
        buf[len] = '/';
        slice_label(ACT_BACKWARD, s->pair_mb - 1, s->pair_chunk, buf + len + 1, n - len - 1);
    }
}

void slice_name(int kind, int mb, int chunk, char *buf, size_t n) {
    const KindStyle *k = kind_style(kind);
    if (!k->bar) { if (mb < 0) snprintf(buf, n, "%s", k->name); else slice_label(kind, mb, chunk, buf, n); return; }
    const char *base = kind < ACT_KINDS ? action_names[kind] : k->name;
    int wait = kind == ACT_RECV_ACT || kind == ACT_RECV_GRAD;
    char ch[32] = "";
    if (chunk > 0) snprintf(ch, sizeof ch, " (chunk %d)", chunk);
    if (mb < 0) snprintf(buf, n, "%s", base);
    else snprintf(buf, n, "%s %d%s%s", base, mb, ch, wait ? " (recv wait)" : "");
}

// Whether a kind drawn earlier in a legend has the same name (sends and receives of both directions).
static int seen_before(const int *present, int kind) {
    for (int k = 0; k < kind; k++)
        if (present[k] && !strcmp(kind_style(k)->name, kind_style(kind)->name)) return 1;
    return 0;
}

// ---- text ----

static int cell_width(const Gantt *g) {  // the widest cell label, with its brackets
    int w = 3;
    char lab[64];
    for (int r = 0; r < g->rows; r++)
        for (int i = 0; i < g->n[r]; i++) {
            if (kind_style(g->slices[r][i].kind)->bar) continue;
            interval_label(&g->slices[r][i], lab, sizeof lab);
            if ((int)strlen(lab) + 2 > w) w = (int)strlen(lab) + 2;
        }
    return w;
}

// A labelled cell over d characters: "[F3]", "[B3    ]"; one or two short of that, the label alone
// ("F3", "F3 "); shorter still, the kind's letter in every column ("FF"): never a label cut to "F3]".
static void draw_cell(char *line, int d, const char *lab) {
    int L = (int)strlen(lab);
    if (d >= L + 2) {
        memset(line, ' ', (size_t)d);
        line[0] = '[';
        memcpy(line + 1, lab, (size_t)L);
        line[d - 1] = ']';
    } else if (d >= L) {
        memset(line, ' ', (size_t)d);
        memcpy(line, lab, (size_t)L);
    } else {
        memset(line, lab[0], (size_t)d);
    }
}

// The axis tick: 1, 2 or 5 times a power of ten, at least min_gap columns apart.
static double nice_tick(double units_per_col, int min_gap) { return svg_nice_step(units_per_col * min_gap); }

void gantt_text(FILE *f, const Gantt *g, int colour) {
    int w = cell_width(g);
    double scale = g->cell > 0 ? w / g->cell : 1;
    if (g->width > 0 && g->t_end > 0 && (g->cell <= 0 || g->t_end * scale > g->width)) scale = g->width / g->t_end;
    int cols = (int)ceil(g->t_end * scale - 1e-9);
    if (cols < 1) cols = 1;
    char *line = xmalloc((size_t)cols + 1);
    int *kinds = xmalloc(sizeof(int) * (size_t)cols);
    int present[EV_KINDS] = {0}, chunks = 0, pairs = 0;
    char lab[64];
    snprintf(lab, sizeof lab, "%s %d", g->row_label, g->rows - 1);
    int lw = (int)strlen(lab);
    for (int r = 0; r < g->rows && g->row_name; r++)
        if ((int)strlen(g->row_name[r]) > lw) lw = (int)strlen(g->row_name[r]);
    fprintf(f, "%s\n", g->title);
    for (int r = 0, comm = 0; r < g->rows; r += comm, comm = !comm) {  // a row's line, then its collectives'
        if (comm) {  // (a line only where the row has any)
            int any = 0;
            for (int i = 0; i < g->n[r]; i++) any |= kind_on_comm_track(g->slices[r][i].kind);
            if (!any) continue;
        }
        memset(line, comm ? ' ' : '.', (size_t)cols);
        for (int c = 0; c < cols; c++) kinds[c] = -1;
        for (int pass = 0; pass < 2; pass++)  // bars first, cells on top
            for (int i = 0; i < g->n[r]; i++) {
                const Interval *s = &g->slices[r][i];
                const KindStyle *k = kind_style(s->kind);
                if ((pass == 0) != (k->bar != 0) || kind_on_comm_track(s->kind) != comm) continue;
                int c0 = (int)lround(s->t0 * scale), c1 = (int)lround(s->t1 * scale);
                if (c0 < 0) c0 = 0;
                if (comm && c1 <= c0) c1 = c0 + 1;  // a collective shorter than a column: one column wide
                if (comm && c0 >= cols) c0 = cols - 1;
                if (c1 > cols) c1 = cols;
                if (c1 <= c0) continue;
                present[s->kind] = 1;
                chunks |= s->chunk > 0;
                pairs |= s->pair_mb > 0;
                if (k->bar) memset(line + c0, k->bar, (size_t)(c1 - c0));
                else { interval_label(s, lab, sizeof lab); draw_cell(line + c0, c1 - c0, lab); }
                for (int c = c0; c < c1; c++) kinds[c] = s->kind;
            }
        if (comm) fprintf(f, "%*s ", lw, "");
        else if (g->row_name) fprintf(f, "%-*s ", lw, g->row_name[r]);
        else fprintf(f, "%s %-*d ", g->row_label, lw - (int)strlen(g->row_label) - 1, r);
        int cur = -1;
        for (int c = 0; c < cols; c++) {
            if (colour && kinds[c] != cur) {
                int a = kinds[c] >= 0 ? kind_style(kinds[c])->ansi : 0;
                fprintf(f, a ? "\033[0;%dm" : "\033[0m", a);
                cur = kinds[c];
            }
            fputc(line[c], f);
        }
        if (colour) fprintf(f, "\033[0m");
        fputc('\n', f);
    }
    // time axis
    double units_per_col = g->axis_scale / scale;
    char num[32];
    snprintf(num, sizeof num, "%g", g->t_end * g->axis_scale);
    double tick = nice_tick(units_per_col, (int)strlen(num) + 2 > 4 ? (int)strlen(num) + 2 : 4);
    int rl = cols + 16;
    char *ruler = xmalloc((size_t)rl + 1);
    memset(ruler, ' ', (size_t)rl);
    int next_free = 0;
    for (int i = 0;; i++) {
        double v = i * tick;
        int c = (int)lround(v / units_per_col);
        if (c > cols) break;
        int len = snprintf(num, sizeof num, "%g", v);
        if (c >= next_free && c + len <= rl) { memcpy(ruler + c, num, (size_t)len); next_free = c + len + 1; }
    }
    int end = rl;
    while (end > 0 && ruler[end - 1] == ' ') end--;
    ruler[end] = 0;
    fprintf(f, "%-*s %s %s\n", lw, "time", ruler, g->axis_unit);
    // legend: the kinds drawn
    fprintf(f, "%-*s ", lw, "");
    int first = 1;
    for (int k = 0; k < EV_KINDS; k++) {
        if (!present[k] || seen_before(present, k)) continue;
        const KindStyle *s = kind_style(k);
        if (s->bar) fprintf(f, "%s%c %s", first ? "" : ", ", s->bar, s->name);
        else fprintf(f, "%s%s %s", first ? "" : ", ", s->letter, s->name);
        first = 0;
    }
    if (pairs) fprintf(f, "%sF/B a forward and a backward in turn (--ep-overlap pair)", first ? "" : ", "), first = 0;
    fprintf(f, "%s. idle; a number is the micro-batch%s\n", first ? "" : ", ",
            chunks ? " (.c: on the rank's chunk c)" : "");
    free(line); free(kinds); free(ruler);
}

// ---- SVG ----

// The measures of a stacked Gantt picture (px). Titles wrap to the picture's width; the axis unit
// and the legend are reckoned from their text, so nothing runs past the right edge.
typedef struct {
    double left, plot_w, row_h, cell_h, bar_h, axis_h, pad, width, px;
    int pairs;  // some slice is a --ep-overlap pair (its legend note)
} GanttPage;

// The legend's items (the kinds drawn, then the idle note, then the pairs') laid out in lines inside the picture:
// with f NULL it only counts the lines; each item's swatch at (x, y + 2).
static int gantt_legend(FILE *f, const GanttPage *g, const int *present, double y) {
    double x = g->left, right = g->width - 8;
    int lines = 1;
    char text[128];
    for (int k = 0; k <= EV_KINDS + 1; k++) {  // (then the idle note, and the pairs' when drawn)
        const KindStyle *s = k < EV_KINDS ? kind_style(k) : NULL;
        if (s && (!present[k] || seen_before(present, k))) continue;
        if (k == EV_KINDS + 1 && !g->pairs) continue;
        if (s) snprintf(text, sizeof text, "%s %s", s->letter, s->name);
        else if (k == EV_KINDS) snprintf(text, sizeof text, "light grey: idle (bubble)");
        else snprintf(text, sizeof text, "F3/B1: a forward and a backward in turn (--ep-overlap pair)");
        double w = (s ? 16 : 0) + svg_text_width(text, SVG_FONT);
        if (x > g->left && x + w > right) { x = g->left; y += 18; lines++; }
        if (f && s)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>", x, y + 2, s->fill);
        if (f) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\"%s>", x + (s ? 16 : 0), y + 12, s ? "" : " fill=\"#777\"");
            svg_escape(f, text);
            fprintf(f, "</text>\n");
        }
        x += w + 12;
    }
    return lines;
}

static void gantt_svg_slices(FILE *f, const GanttPage *pg, const Gantt *g, int r, double ry) {
    char lab[64], name[96];
    for (int i = 0; i < g->n[r]; i++) {
        const Interval *s = &g->slices[r][i];
        const KindStyle *k = kind_style(s->kind);
        double x = pg->left + s->t0 * pg->px, wd = (s->t1 - s->t0) * pg->px;
        double h = k->bar ? pg->bar_h : pg->cell_h, sy = k->bar ? ry + pg->cell_h - pg->bar_h : ry;
        if (kind_on_comm_track(s->kind)) { h = pg->row_h - pg->cell_h - 1; sy = ry + pg->cell_h + 0.5; }  // under it
        slice_name(s->kind, s->mb, s->chunk, name, sizeof name);
        if (s->pair_mb > 0) interval_label(s, name, sizeof name);  // both passes: "F3/B1"
        // later chunks of an interleaved rank: the same colour, lighter
        double opacity = s->chunk > 0 ? fmax(0.25, 1.0 - 0.45 * s->chunk) : 1.0;
        fprintf(f,
                "<rect class=\"slice\" data-kind=\"%s\" data-mb=\"%d\" data-chunk=\"%d\" data-row=\"%d\" "
                "x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"%.2f\" "
                "stroke=\"white\" stroke-width=\"%s\"><title>%s, %s %d: %g to %g %s</title></rect>\n",
                k->letter, s->mb, s->chunk, r, x, sy, wd < 0.3 ? 0.3 : wd, h, k->fill, opacity, k->bar ? "0" : "0.8",
                name, g->row_label, r, s->t0 * g->axis_scale, s->t1 * g->axis_scale, g->axis_unit);
        interval_label(s, lab, sizeof lab);
        if (!k->bar && wd >= svg_text_width(lab, SVG_FONT) + 4)
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"white\">%s</text>\n", x + wd / 2,
                    ry + 13, lab);
    }
}

// One chart from y: its title, a row per stage or rank, the time axis. Returns the y below it.
static double gantt_svg_chart(FILE *f, const GanttPage *pg, const Gantt *g, int c, double y) {
    fprintf(f, "<g class=\"chart\" data-chart=\"%d\">\n", c);
    y += svg_title(f, 4, y, pg->width - 8, SVG_TITLE_FONT, g->title) + 9;
    for (int r = 0; r < g->rows; r++) {
        double ry = y + r * pg->row_h;
        if (g->row_name) fprintf(f, "<text x=\"4\" y=\"%.1f\">%s</text>\n", ry + 13, g->row_name[r]);
        else fprintf(f, "<text x=\"4\" y=\"%.1f\">%s %d</text>\n", ry + 13, g->row_label, r);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#eeeeee\" stroke=\"none\"/>\n",
                pg->left, ry, g->t_end * pg->px, pg->cell_h);
        gantt_svg_slices(f, pg, g, r, ry);
    }
    y += g->rows * pg->row_h;
    // axis: ticks at least 50 px apart
    double units_per_px = g->axis_scale / pg->px, tick = svg_nice_step(units_per_px * 50), end = g->t_end * pg->px;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\"/>\n", pg->left, y + 2,
            pg->left + end, y + 2);
    for (int i = 0;; i++) {
        double v = i * tick, x = pg->left + v / units_per_px;
        if (v / units_per_px > end + 1e-6) break;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                x, y + 2, x, y + 6, x, y + 17, v);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", pg->left + end + 6, y + 17);
    svg_escape(f, g->axis_unit);
    fprintf(f, "</text>\n</g>\n");
    return y + pg->axis_h;
}

void gantt_svg(FILE *f, const Gantt *charts, int n, int own_spans) {
    GanttPage pg = {.left = 78, .plot_w = 960, .row_h = 24, .cell_h = 18, .bar_h = 6, .axis_h = 34, .pad = 14};
    double t_max = 0, unit_w = 0;
    int present[EV_KINDS] = {0};
    for (int c = 0; c < n; c++) {
        t_max = fmax(t_max, charts[c].t_end);
        unit_w = fmax(unit_w, svg_text_width(charts[c].axis_unit, SVG_FONT));
        for (int r = 0; r < charts[c].rows && charts[c].row_name; r++)  // the row names left of the plot
            pg.left = fmax(pg.left, 4 + svg_text_width(charts[c].row_name[r], SVG_FONT) + 8);
        for (int r = 0; r < charts[c].rows; r++)
            for (int i = 0; i < charts[c].n[r]; i++) {
                present[charts[c].slices[r][i].kind] = 1;
                pg.pairs |= charts[c].slices[r][i].pair_mb > 0;
            }
    }
    if (t_max <= 0) t_max = 1;
    pg.px = pg.plot_w / t_max;
    pg.width = pg.left + pg.plot_w + fmax(30, 6 + unit_w + 8);  // the axis unit after the longest axis
    double height = pg.pad;
    for (int c = 0; c < n; c++)
        height += svg_title_height(charts[c].title, pg.width - 8, SVG_TITLE_FONT) + 9 + charts[c].rows * pg.row_h +
                  pg.axis_h;
    double y_legend = height;
    height += 18 * gantt_legend(NULL, &pg, present, y_legend) + 12;
    svg_begin(f, pg.width, height);
    double y = pg.pad;
    for (int c = 0; c < n; c++) {
        GanttPage one = pg;  // own_spans: the chart's span across the whole plot width
        if (own_spans && charts[c].t_end > 0) one.px = pg.plot_w / charts[c].t_end;
        y = gantt_svg_chart(f, &one, &charts[c], c, y);
    }
    gantt_legend(f, &pg, present, y);
    svg_end(f);
}

void gantt_free_slices(Gantt *g) {
    for (int r = 0; r < g->rows; r++) free(g->slices[r]);
    for (int r = 0; r < g->rows && g->row_name; r++) free(g->row_name[r]);
    free(g->slices); free(g->n); free(g->row_name);
    g->slices = NULL; g->n = NULL; g->row_name = NULL;
}

// ---- the timeline: gather and Chrome trace ----

void timeline_gather(Timeline *t, const Event *ev, int n, const double *step_start, const double *span, int steps,
                     TrackPos pos, MPI_Comm comm) {
    memset(t, 0, sizeof *t);
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    CHECK((double)n * sizeof(Event) < 2e9, "%d events are too many to gather in one message", n);
    double *mine = xmalloc(sizeof(double) * 2 * (size_t)steps);  // the starts, then the spans
    for (int s = 0; s < steps; s++) {
        mine[s] = step_start[s] - step_start[0];
        mine[steps + s] = span ? span[s] : 0;
    }
    int *counts = NULL, *displs = NULL;
    double *starts = NULL;
    Event *all = NULL;
    if (rank == 0) {
        t->pos = xcalloc((size_t)size, sizeof(TrackPos));
        counts = xcalloc((size_t)size, sizeof(int));
        displs = xcalloc((size_t)size, sizeof(int));
        starts = xmalloc(sizeof(double) * (size_t)size * 2 * (size_t)steps);
    }
    int bytes = n * (int)sizeof(Event);
    MPI_CHECK(MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, 0, comm));
    MPI_CHECK(MPI_Gather(mine, 2 * steps, MPI_DOUBLE, starts, 2 * steps, MPI_DOUBLE, 0, comm));
    MPI_CHECK(MPI_Gather(&pos, (int)sizeof pos, MPI_BYTE, t->pos, (int)sizeof pos, MPI_BYTE, 0, comm));
    if (rank == 0) {
        double total = 0;
        for (int i = 0; i < size; i++) { displs[i] = (int)total; total += counts[i]; }
        CHECK(total < 2e9, "the gathered trace (%.0f bytes) is too large for one message: trace fewer steps", total);
        all = xmalloc((size_t)total);
    }
    MPI_CHECK(MPI_Gatherv(ev, bytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, comm));
    free(mine);
    if (rank != 0) return;
    t->ranks = size;
    t->steps = steps;
    t->ev = xcalloc((size_t)size, sizeof(Event *));
    t->n = xcalloc((size_t)size, sizeof(int));
    t->start = xcalloc((size_t)size, sizeof(double *));
    t->span = xcalloc((size_t)size, sizeof(double *));
    for (int i = 0; i < size; i++) {
        t->n[i] = counts[i] / (int)sizeof(Event);
        t->ev[i] = xmalloc(sizeof(Event) * (size_t)t->n[i]);
        memcpy(t->ev[i], (char *)all + displs[i], (size_t)counts[i]);
        t->start[i] = xmalloc(sizeof(double) * (size_t)steps);
        memcpy(t->start[i], starts + (size_t)i * 2 * steps, sizeof(double) * (size_t)steps);
        t->span[i] = xmalloc(sizeof(double) * (size_t)steps);
        memcpy(t->span[i], starts + ((size_t)i * 2 + 1) * steps, sizeof(double) * (size_t)steps);
    }
    free(all); free(counts); free(displs); free(starts);
}

void timeline_free(Timeline *t) {
    for (int i = 0; i < t->ranks; i++) { free(t->ev[i]); free(t->start[i]); free(t->span[i]); }
    free(t->ev); free(t->n); free(t->start); free(t->span); free(t->pos);
    memset(t, 0, sizeof *t);
}

void track_name(const Timeline *t, int rank, int short_form, char *buf, size_t n) {
    const TrackPos *q = t->pos ? &t->pos[rank] : NULL;
    int len = snprintf(buf, n, "rank %d", rank), first = 1;
    const int has[3] = {q && q->stages > 1, q && q->replicas > 1, q && q->tps > 1};
    int at[3] = {0, 0, 0};
    if (q) { at[0] = q->stage; at[1] = q->replica; at[2] = q->tp; }
    static const char *const axis[3][2] = {{"stage ", "s"}, {"replica ", "r"}, {"tp ", "t"}};
    if (!has[1] && !has[2]) return;  // a pipeline's rank is its stage; ZeRO's its replica
    for (int a = 0; a < 3; a++) {
        if (!has[a] || len >= (int)n) continue;
        len += snprintf(buf + len, n - (size_t)len, "%s%s%d", first ? " (" : short_form ? " " : ", ",
                        axis[a][short_form != 0], at[a]);
        first = 0;
    }
    if (!first && len < (int)n) snprintf(buf + len, n - (size_t)len, ")");
}

// Whether event e is a backward run in turn with the forward before it (kind, ending at end) on its rank:
// --ep-overlap pair's two passes (exec_pair), whose times overlap; passes one after another never do.
static int paired_with(int kind, double end, const Event *e) {
    return kind == ACT_FORWARD && e->kind == ACT_BACKWARD && e->t0 < end;
}

// Collectives that overlap the rank's compute (ZeRO's) or run inside it (--tp's): a second track; a pair's
// backward (--ep-overlap pair: in its forward's time) a third, so the viewer shows both passes.
#define TRACE_COMM_TID 1000000
#define TRACE_PAIR_TID 2000000

void timeline_write_chrome(FILE *f, const Timeline *t, const char *meta) {
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":%s,\"traceEvents\":[\n", meta ? meta : "{}");
    char name[96], track[96];
    int first = 1;
    for (int r = 0; r < t->ranks; r++) {
        track_name(t, r, 0, track, sizeof track);
        fprintf(f,
                "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n"
                "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}},\n"
                "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                first ? "" : ",\n", r, r, track, r, r, r, r, r, track);
        int comm = 0;  // ZeRO's and --tp's collectives: a track of their own
        for (int i = 0; i < t->n[r]; i++) comm |= kind_on_comm_track(t->ev[r][i].kind);
        if (comm)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s "
                    "collectives\"}}", r, TRACE_COMM_TID + r, track);
        first = 0;
        for (int i = 0, pairs = 0; i < t->n[r]; i++) {
            const Event *e = &t->ev[r][i], *prev = i ? &t->ev[r][i - 1] : NULL;
            CHECK(e->step >= 0 && e->step < t->steps, "event of step %d outside 0..%d", e->step, t->steps - 1);
            int pair = prev && prev->step == e->step && paired_with(prev->kind, prev->t1, e);
            if (pair && !pairs++)
                fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s "
                        "backwards in pairs\"}}", r, TRACE_PAIR_TID + r, track);
            slice_name(e->kind, e->mb, e->chunk, name, sizeof name);
            double ts = (t->start[r][e->step] + e->t0) * 1e6, dur = (e->t1 - e->t0) * 1e6;
            fprintf(f,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
                    "\"args\":{",
                    name, kind_style(e->kind)->name, ts, dur, r,
                    kind_on_comm_track(e->kind) ? TRACE_COMM_TID + r : pair ? TRACE_PAIR_TID + r : r);
            if (e->mb >= 0) fprintf(f, "\"micro_batch\":%d,", e->mb);
            if (e->chunk > 0) fprintf(f, "\"chunk\":%d,", e->chunk);
            if (e->bytes > 0) fprintf(f, "\"bytes\":%.0f,", e->bytes);
            fprintf(f, "\"step\":%d}}", e->step + 1);
        }
    }
    fprintf(f, "\n]}\n");
}

void timeline_step_gantt(const Timeline *t, int step, Gantt *g) {
    g->rows = t->ranks;
    g->row_label = "rank";
    g->slices = xcalloc((size_t)t->ranks, sizeof(Interval *));
    g->n = xcalloc((size_t)t->ranks, sizeof(int));
    g->t_end = 0;
    g->row_name = xcalloc((size_t)t->ranks, sizeof(char *));
    for (int r = 0; r < t->ranks; r++) {
        char name[96];
        track_name(t, r, 1, name, sizeof name);
        g->row_name[r] = xmalloc(strlen(name) + 1);
        memcpy(g->row_name[r], name, strlen(name) + 1);
        g->slices[r] = xmalloc(sizeof(Interval) * (size_t)(t->n[r] + 1));
        for (int i = 0; i < t->n[r]; i++) {
            const Event *e = &t->ev[r][i];
            if (e->step != step) continue;
            if (e->t1 > g->t_end) g->t_end = e->t1;
            Interval *prev = g->n[r] ? &g->slices[r][g->n[r] - 1] : NULL;
            if (prev && !prev->pair_mb && paired_with(prev->kind, prev->t1, e)) {  // a pair: one block of both
                prev->t1 = fmax(prev->t1, e->t1);
                prev->pair_mb = e->mb + 1;
                prev->pair_chunk = e->chunk;
                continue;
            }
            g->slices[r][g->n[r]++] = (Interval){e->kind, e->mb, e->t0, e->t1, e->chunk, 0, 0};
        }
    }
}
