// bubble.c: `micropp bubble`: predicts pipeline schedules without running them (no MPI). For each
// (schedule, stages K, micro-batches M) it runs the schedule's real action lists through the
// simulator (schedule.c) and prints the textbook bubble beside the simulated one, the peak number of
// micro-batches in flight per stage, and the GPipe memory estimate; --gantt / --svg draw the schedule.
// A row takes its kind's chunks per rank (its row of schedule.c's table: --virtual-stages for
// interleaved, 2 in a V for zb-v and dualpipev); the zero-bubble family (zb-h1, zb-h2, zb-v,
// dualpipev) splits each backward into its input part I (--cost-b minus --cost-w) and its weight
// part W (--cost-w). --schedule-file simulates a schedule written as a file, --dump-csv writes one.
// --model FILE (a train config) adds each stage's peak activation bytes for that model, by
// planner/memory.c's memory_layout as `micropp plan` reckons them (equal to what train measures).
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "base/config.h"
#include "schedule.h"
#include "schedule_auto.h"
#include "schedule_file.h"
#include "comms/tags.h"
#include "planner/memory.h"
#include "train/trace.h"
#include "commands.h"
#include "base/util.h"
#include "train/options.h"

#define MAX_K 1024
#define MAX_M COMM_MAX_MB  // train's range; the simulator's own limit (SCHEDULE_MAX_SIM) bounds K x v x M
#define MAX_ROWS 100000
#define MAX_CHARTS 64

typedef struct {
    // cppcheck-suppress unusedStructMember ; read and written through the option table's offsets
    char config[PATH_LEN];
    char schedule[PATH_LEN];       // "all", a name, or a comma list of names
    char stages[PATH_LEN];         // "4", "2:8", "2,4,8"
    char micro_batches[PATH_LEN];  // "8", "1:32"
    double cost_f, cost_b, cost_w, cost_comm;
    int64_t virtual_stages;
    int json, gantt;
    int64_t width;                 // --gantt: the most columns a chart takes (0: a terminal's $COLUMNS, else no limit)
    char svg[PATH_LEN];
    char schedule_file[PATH_LEN];  // a CSV schedule to simulate instead of --schedule
    char dump_csv[PATH_LEN];       // write the one schedule asked for as a CSV schedule
    char model[PATH_LEN];          // a train config: bytes of activations per stage for its model
    int64_t max_inflight;          // zb-auto: the most micro-batches a stage may hold (0: 2 x stages)
    double w_memory;               // zb-auto: the share of a micro-batch's memory its deferred W keeps
    char costs_from[PATH_LEN];     // a `train --json` summary: each stage's measured F, I and W
    double *stage_f, *stage_i, *stage_w;  // [stages] from --costs-from (NULL: --cost-f etc., every stage alike)
    long n_stage_costs;
} BubbleConfig;

#define O(field) offsetof(BubbleConfig, field)
static const Option bubble_options[] = {
    {"config", 'c', OPT_STR, O(config), 0, 0, 0, "FILE", "JSON file of options (keys = flag names)", 0},
    {"schedule", 'S', OPT_STR, O(schedule), 0, 0, 0, "SCHED", "'all', one of " SCHED_CHOICES ", or a comma list", 0},
    {"pp", 'K', OPT_STR, O(stages), 0, 0, 0, "K", "pipeline stages: 4, a range 2:8, or a list 2,4,8", 0},
    {"micro-batches", 'M', OPT_STR, O(micro_batches), 0, 0, 0, "M",
     "micro-batches per step: 8, a range 1:32, or a list", 0},
    {"cost-f", 0, OPT_FLOAT, O(cost_f), 0, -1e300, 1e300, "T", "time of one forward of one micro-batch on one stage",
     0},
    {"cost-b", 0, OPT_FLOAT, O(cost_b), 0, -1e300, 1e300, "T", "time of one backward (2x the forward in the papers)",
     0},
    {"cost-w", 0, OPT_FLOAT, O(cost_w), 0, -1e300, 1e300, "T",
     "of --cost-b, the weight-gradient part W that zb-h1, zb-h2, zb-v, dualpipev, v-half, v-min defer (0: half)", 0},
    {"virtual-stages", 0, OPT_INT, O(virtual_stages), 0, 1, 64, "V", "interleaved, looped-bfs: model chunks per rank",
     0},
    {"cost-comm", 0, OPT_FLOAT, O(cost_comm), 0, -1e300, 1e300, "T",
     "time from a send to its arrival at the next stage", 0},
    {"json", 0, OPT_BOOL, O(json), 0, 0, 0, 0, "print one JSON object instead of the table", 0},
    {"gantt", 'g', OPT_BOOL, O(gantt), 0, 0, 0, 0,
     "draw each schedule in the terminal: a row per stage, a column per time unit", 0},
    {"width", 0, OPT_INT, O(width), 0, 0, 100000, "N",
     "--gantt: each chart at most N columns wide, the time squeezed to fit (0: $COLUMNS on a terminal, else as wide "
     "as its labels need)",
     0},
    {"svg", 0, OPT_STR, O(svg), 0, 0, 0, "FILE",
     "write the same charts as an SVG picture, each on its own time axis (its span the whole width)", 0},
    {"schedule-file", 0, OPT_STR, O(schedule_file), 0, 0, 0, "FILE.csv",
     "simulate the schedule in FILE (a row per rank of actions like 0F0,0I0,0W0; it fixes the stages and "
     "micro-batches)",
     0},
    {"dump-csv", 0, OPT_STR, O(dump_csv), 0, 0, 0, "FILE",
     "write the one schedule asked for as such a file ('-': standard output), for train --schedule-file", 0},
    {"model", 0, OPT_STR, O(model), 0, 0, 0, "FILE.json",
     "a train config: also give each stage's peak activation bytes for its model (what train measures)", 0},
    {"max-inflight", 0, OPT_INT, O(max_inflight), 0, 0, 1 << 20, "N",
     "zb-auto: its memory limit, micro-batches in flight on a stage (from F to I; default: 2 x stages)", 0},
    {"costs-from", 0, OPT_STR, O(costs_from), 0, 0, 0, "FILE.json",
     "each stage's F, I and W: the medians a 'micropp train --json' pipeline run measured (it fixes --pp)", 0},
    {"w-memory", 0, OPT_FLOAT, O(w_memory), 0, 0, 1, "R",
     "zb-auto: how much of a micro-batch's memory counts from its I to its W (micropp's layers: 1)", 0},
    {0},
};
#undef O

// The seed cheat sheet's memory law, in units of the standard O(B*L) activations (= 1): GPipe keeps
// O(B*L/K + (B/M)*L), i.e. 1/K + 1/M of it; B and L cancel.
static double gpipe_memory(int K, int M) { return 1.0 / K + 1.0 / M; }

// JSON numbers printed to the last bit (%.17g), so a script can compare simulated and formula exactly.
static cJSON *exact(double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return cJSON_CreateRaw(buf);
}
static cJSON *exact_array(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, exact(v[i]));
    return a;
}

static void format_peaks(const int *p, int K, char *buf, size_t n) {
    size_t l = 0;
    buf[0] = 0;
    for (int s = 0; s < K && l + 16 < n; s++) {
        if (s == 16) { snprintf(buf + l, n - l, ",..."); break; }
        l += (size_t)snprintf(buf + l, n - l, "%s%d", s ? "," : "", p[s]);
    }
}

// The textbook bubble of a row where one holds for these costs (the kind's row says where:
// schedule_bubble_holds), else NaN.
static double row_formula(const BubbleConfig *c, int kind, int K, int M, int v) {
    int uniform = c->cost_f == c->cost_w && c->cost_b - c->cost_w == c->cost_w && !c->stage_f;
    return schedule_bubble_holds(kind, K, M, uniform) ? schedule_bubble_formula(kind, K, M, v) : NAN;
}
static void format_formula(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.4f", v);
}

// The rows to simulate: every (schedule, K, M) given that the schedule can run.
typedef struct {
    long n, skipped;          // rows kept; rows skipped (M below a kind's least, e.g. dualpipev's 2K)
    char left_out[4][256];    // the first skipped rows and why, for the note under the table
    int has_option_chunks, has_v;  // a kind of --virtual-stages chunks (interleaved), of the V (zb-v)
    SimResult *sims;
    int *kind, *k, *m;        // [n]
    double **act;             // [n][K] with --model: peak activation bytes per stage (NULL: that layout cannot run)
    const SchedFile *file;    // --schedule-file: its schedule (kind SCHED_FILE), else NULL
    SchedFile *autos;         // [n] zb-auto rows: the lists its search built for the row's K, M and costs
    double *bound;            // [n] zb-auto rows: the lower bound on their longest rank span (0: another kind)
    int *by_memory;           // [n] 1: that bound is the one that counts the memory limit (higher than the work's)
} Grid;

static int is_auto(int kind) { return kind == SCHED_ZBAUTO || kind == SCHED_ZBAUTOV; }
// Row i's gap to its bound (a zb-auto row): span / bound - 1, 0 within rounding.
static double gap_of(const Grid *g, long i) {
    double gap = g->sims[i].span / g->bound[i] - 1;
    return fabs(gap) < 1e-9 ? 0 : gap;
}

// The lists row i runs: its search's (zb-auto), the file's (--schedule-file), else none (built-in).
static const SchedFile *row_file(const Grid *g, long i) {
    return is_auto(g->kind[i]) ? &g->autos[i] : g->file;
}

// zb-auto (zb-auto-v: kind SCHED_ZBAUTOV, the V's placement) for (K, M): the search over the simulator
// with the costs given, every stage alike, and --max-inflight (else 2K) micro-batches of room; *bound:
// its lower bound on the longest rank span, the higher of the work's and the memory limit's (*by_memory: 1).
static void build_auto(const BubbleConfig *c, int kind, int K, int M, SchedFile *out, double *bound, int *by_memory) {
    double *cost = xmalloc(sizeof(double) * 3 * (size_t)K);
    for (int s = 0; s < K; s++) {
        cost[s] = c->stage_f ? c->stage_f[s] : c->cost_f;
        cost[K + s] = c->stage_i ? c->stage_i[s] : c->cost_b - c->cost_w;
        cost[2 * K + s] = c->stage_w ? c->stage_w[s] : c->cost_w;
    }
    AutoSpec a = {K, M, cost, cost + K, cost + 2 * K, c->cost_comm, c->max_inflight ? (int)c->max_inflight : 2 * K,
                 c->w_memory, kind == SCHED_ZBAUTOV ? 2 : 1};
    schedule_auto(&a, out, NULL);
    double work = schedule_auto_bound(&a), memory = schedule_auto_bound_memory(&a);
    *by_memory = memory > work * (1 + 1e-12);
    *bound = *by_memory ? memory : work;
    free(cost);
}

static int chunks_of(const BubbleConfig *c, const Grid *g, int kind) {
    return schedule_chunks(kind, (int)c->virtual_stages, g->file);
}

// Costs and the interleaved options, checked before anything is simulated.
static void check_costs(BubbleConfig *c, const OptionsSeen *seen, const int *kinds, int n_kind, Grid *g) {
    if (!(c->cost_f > 0)) user_error("bubble: --cost-f %g: a cost must be > 0 (e.g. --cost-f 1 --cost-b 2)", c->cost_f);
    if (!(c->cost_b > 0)) user_error("bubble: --cost-b %g: a cost must be > 0 (e.g. --cost-f 1 --cost-b 2)", c->cost_b);
    if (!(c->cost_comm >= 0)) user_error("bubble: --cost-comm %g: a transfer time must be >= 0", c->cost_comm);
    if (seen_set(seen, "cost-w") && !(c->cost_w > 0 && c->cost_w < c->cost_b))
        user_error("bubble: --cost-w %g is the weight part of the backward: use a value above 0 and below --cost-b %g",
                   c->cost_w, c->cost_b);
    if (!seen_set(seen, "cost-w")) c->cost_w = c->cost_b / 2;
    int takes = -1;  // the first kind asked for that takes --virtual-stages
    for (int a = n_kind - 1; a >= 0; a--)
        if (schedule_kind(kinds[a])->chunks == CHUNKS_OPTION) takes = kinds[a];
    g->has_option_chunks = takes >= 0;
    for (int a = 0; a < n_kind; a++) g->has_v |= schedule_chunk_order(kinds[a], g->file) == CHUNKS_V;
    if (seen_set(seen, "virtual-stages") && !g->has_option_chunks) {
        char takers[64];
        user_error("bubble: --virtual-stages applies to --schedule %s: add it to --schedule or drop --virtual-stages",
                   schedule_chunk_option_kinds(takers, sizeof takers));
    }
    if (g->has_option_chunks && c->virtual_stages < schedule_kind(takes)->least_chunks)
        user_error("bubble: --schedule %s needs --virtual-stages >= %d (with 1 chunk per rank it is %s)",
                   schedule_kind(takes)->name, schedule_kind(takes)->least_chunks, schedule_kind(takes)->one_chunk);
    int has_auto = 0;
    for (int a = 0; a < n_kind; a++) has_auto |= is_auto(kinds[a]);
    if ((seen_set(seen, "max-inflight") || seen_set(seen, "w-memory")) && !has_auto)
        user_error("bubble: --%s is zb-auto's memory limit: add zb-auto to --schedule or drop it",
                   seen_set(seen, "max-inflight") ? "max-inflight" : "w-memory");
}

// Every row of the grid through the simulator; a row the schedule cannot run (schedule_check: M
// below its kind's least, e.g. dualpipev's 2K, its authors' rule) is skipped, and a grid with none
// left refused.
static void simulate_grid(const BubbleConfig *c, const int *kinds, int n_kind, const int *ks, int n_k, const int *ms,
                          int n_m, Grid *g) {
    long rows = (long)n_kind * n_k * n_m;
    if (rows > MAX_ROWS)
        user_error("bubble: %ld rows (schedules x stages x micro-batches) is more than %d: narrow a range", rows,
                   MAX_ROWS);
    for (int a = 0; a < n_kind; a++)  // every row within the simulator's limit, before any runs
        for (int b = 0; b < n_k; b++)
            for (int d = 0; d < n_m; d++) {
                long long v = chunks_of(c, g, kinds[a]), passes = ks[b] * v * ms[d];
                if (passes > SCHEDULE_MAX_SIM && !schedule_check(kinds[a], ks[b], ms[d], (int)v))
                    user_error("bubble: %d stages x %lld chunk%s x %d micro-batches = %lld passes to simulate, more "
                               "than the %d the simulator takes: "
                               "use --micro-batches %lld or fewer at %d stages",
                               ks[b], v, v == 1 ? "" : "s", ms[d], passes, SCHEDULE_MAX_SIM,
                               SCHEDULE_MAX_SIM / (ks[b] * v), ks[b]);
            }
    g->sims = xcalloc((size_t)rows, sizeof(SimResult));
    g->kind = xmalloc(sizeof(int) * (size_t)rows);
    g->k = xmalloc(sizeof(int) * (size_t)rows);
    g->m = xmalloc(sizeof(int) * (size_t)rows);
    g->autos = xcalloc((size_t)rows, sizeof(SchedFile));
    g->bound = xcalloc((size_t)rows, sizeof(double));
    g->by_memory = xcalloc((size_t)rows, sizeof(int));
    for (int a = 0; a < n_kind; a++)
        for (int b = 0; b < n_k; b++)
            for (int d = 0; d < n_m; d++) {
                int v = chunks_of(c, g, kinds[a]);
                const char *why = schedule_check(kinds[a], ks[b], ms[d], v);
                if (why) {
                    if (g->skipped < 4) {
                        char name[32];
                        snprintf(g->left_out[g->skipped], sizeof g->left_out[0], "%s %d stages x %d micro-batches: %s",
                                 choice_name(SCHED_NAMES, kinds[a], name, sizeof name), ks[b], ms[d], why);
                    }
                    g->skipped++;
                    continue;
                }
                long i = g->n++;
                g->kind[i] = kinds[a]; g->k[i] = ks[b]; g->m[i] = ms[d];
                if (is_auto(kinds[a]))
                    build_auto(c, kinds[a], ks[b], ms[d], &g->autos[i], &g->bound[i], &g->by_memory[i]);
                SimSpec spec = {.kind = kinds[a],
                                .file = row_file(g, i),
                                .K = ks[b],
                                .M = ms[d],
                                .v = v,
                                .f = c->cost_f,
                                .b = c->cost_b - c->cost_w,
                                .w = c->cost_w,
                                .comm = c->cost_comm,
                                .stage_f = c->stage_f,
                                .stage_b = c->stage_i,
                                .stage_w = c->stage_w,
                                .slices = c->gantt || c->svg[0]};
                schedule_sim(&spec, &g->sims[i]);
                if (g->sims[i].deadlock) {
                    char nm[32];
                    fatal("schedule %s deadlocks at K=%d M=%d: %s", choice_name(SCHED_NAMES, kinds[a], nm, sizeof nm),
                          ks[b], ms[d], g->sims[i].why);
                }
            }
}

// Each stage's peak activation bytes for `model` run under schedule kind on K stages with M
// micro-batches (V chunks per rank for interleaved): planner/memory.c's reckoning, as `micropp plan`
// prints it and train measures it (peak_activation_bytes). NULL when the layout cannot run.
static double *stage_activations(const TrainConfig *model, int kind, int K, int M, int V) {
    TrainConfig c = *model;
    c.pipe.micro_batches = M;
    c.pipe.virtual_stages = V;
    MemLayout l;
    char why[320];
    Degrees d = {.pp = K, .dp = 1, .tp = c.grid.tp > 1 ? (int)c.grid.tp : 1};
    if (memory_layout(&c, kind, &d, &l, why, sizeof why)) return NULL;
    double *act = l.act;
    l.act = NULL;
    memory_layout_free(&l);
    return act;
}

// --model: each row's peak activation bytes per stage for the train config's model (NULL where the
// model cannot be laid out so, e.g. more stages than layers).
static void model_activations(const BubbleConfig *c, Grid *g) {
    if (!c->model[0]) return;
    if (c->schedule_file[0])
        user_error("bubble: --model reckons the built-in schedules' bytes, not --schedule-file's: drop one of them");
    TrainConfig t;
    train_config_defaults(&t);
    options_load_json("bubble", train_options, &t, NULL, c->model);
    g->act = xcalloc((size_t)g->n, sizeof(double *));
    for (long i = 0; i < g->n; i++)
        g->act[i] = stage_activations(&t, g->kind[i], g->k[i], g->m[i], chunks_of(c, g, g->kind[i]));
}

static void grid_free(Grid *g) {
    for (long i = 0; i < g->n; i++) {
        sim_result_free(&g->sims[i]);
        sched_file_free(&g->autos[i]);
        if (g->act) free(g->act[i]);
    }
    free(g->autos);
    free(g->bound);
    free(g->by_memory);
    free(g->sims); free(g->kind); free(g->k); free(g->m); free(g->act);
}

// "18.0,9.0" (MiB per stage), or "-" when the model cannot be laid out so.
static void format_mib(const double *a, int K, char *buf, size_t n) {
    if (!a) { snprintf(buf, n, "-"); return; }
    size_t at = 0;
    buf[0] = 0;
    for (int s = 0; s < K && at + 16 < n; s++)
        at += (size_t)snprintf(buf + at, n - at, "%s%.1f", s ? "," : "", a[s] / (1024.0 * 1024.0));
}

static const char *mem_units =
    "activation memory per device, standard O(B*L) = 1; GPipe O(B*L/K + (B/M)*L) = 1/K + 1/M";

static void print_json(const BubbleConfig *c, const Grid *g) {
    char name[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "cost_f", c->cost_f);
    cJSON_AddNumberToObject(o, "cost_b", c->cost_b);
    cJSON_AddNumberToObject(o, "cost_w", c->cost_w);
    if (c->stage_f) {
        cJSON_AddStringToObject(o, "costs_from", c->costs_from);
        cJSON_AddItemToObject(o, "stage_f", exact_array(c->stage_f, (int)c->n_stage_costs));
        cJSON_AddItemToObject(o, "stage_i", exact_array(c->stage_i, (int)c->n_stage_costs));
        cJSON_AddItemToObject(o, "stage_w", exact_array(c->stage_w, (int)c->n_stage_costs));
    }
    if (g->has_option_chunks) cJSON_AddNumberToObject(o, "virtual_stages", (double)c->virtual_stages);
    cJSON_AddNumberToObject(o, "skipped_rows", (double)g->skipped);
    cJSON_AddNumberToObject(o, "cost_comm", c->cost_comm);
    cJSON_AddStringToObject(o, "memory_units", mem_units);
    cJSON *arr = cJSON_AddArrayToObject(o, "rows");
    for (long i = 0; i < g->n; i++) {
        const SimResult *s = &g->sims[i];
        int K = g->k[i], M = g->m[i];
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "schedule", choice_name(SCHED_NAMES, g->kind[i], name, sizeof name));
        cJSON_AddNumberToObject(r, "stages", K);
        cJSON_AddNumberToObject(r, "micro_batches", M);
        cJSON_AddNumberToObject(r, "virtual_stages", s->v);
        double fm = row_formula(c, g->kind[i], K, M, s->v);
        if (isnan(fm)) cJSON_AddNullToObject(r, "bubble_formula");
        else cJSON_AddItemToObject(r, "bubble_formula", exact(fm));
        cJSON_AddItemToObject(r, "bubble_simulated", exact(s->bubble_mean));
        cJSON_AddItemToObject(r, "bubble_overlapped_steps", exact(s->bubble_overlap));
        cJSON_AddItemToObject(r, "longest_rank_span", exact(s->span));
        cJSON_AddItemToObject(r, "bubble_simulated_per_stage", exact_array(s->bubble, s->K));
        cJSON_AddItemToObject(r, "makespan", exact(s->makespan));
        cJSON_AddItemToObject(r, "peak_inflight", cJSON_CreateIntArray(s->peak_inflight, s->K));
        if (schedule_splits_backward(g->kind[i], g->file))
            cJSON_AddItemToObject(r, "peak_deferred_w", cJSON_CreateIntArray(s->peak_deferred, s->K));
        cJSON_AddItemToObject(r, "peak_held_chunk_passes", cJSON_CreateIntArray(s->peak_held, s->K));
        cJSON_AddNumberToObject(r, "memory_standard", 1);
        cJSON_AddItemToObject(r, "memory_gpipe", exact(gpipe_memory(K, M)));
        cJSON_AddItemToObject(r, "memory_reduction", exact(1 / gpipe_memory(K, M)));
        if (g->bound[i] > 0) {  // zb-auto: its lower bound on the longest rank span, and the gap to it
            cJSON_AddItemToObject(r, "span_lower_bound", exact(g->bound[i]));
            cJSON_AddItemToObject(r, "gap", exact(gap_of(g, i)));
        }
        if (g->act && g->act[i]) cJSON_AddItemToObject(r, "peak_activation_bytes", exact_array(g->act[i], K));
        else if (g->act) cJSON_AddNullToObject(r, "peak_activation_bytes");
        cJSON_AddItemToArray(arr, r);
    }
    json_print(o);
}

// --costs-from: the costs line of the table, each stage's.
static void print_stage_costs(const BubbleConfig *c) {
    const double *v[3] = {c->stage_f, c->stage_i, c->stage_w};
    printf("# micropp bubble | costs: each stage's median in the run of %s (ms), transfer %g:", c->costs_from,
           c->cost_comm);
    for (int k = 0; k < 3; k++) {
        printf(" %s", k == 0 ? "F" : k == 1 ? "I" : "W");
        for (long s = 0; s < c->n_stage_costs; s++) printf("%s%.4g", s ? "," : " ", v[k][s]);
        printf(k < 2 ? ";" : "\n");
    }
}

// The names of the kinds of --virtual-stages chunks among the grid's rows, or (g NULL) of every kind
// in the V, joined by ", ".
static const char *kinds_named(const Grid *g, char *buf, size_t n) {
    buf[0] = 0;
    for (int k = 0; k < SCHED_KINDS; k++) {
        int in = 0;
        for (long i = 0; g && i < g->n; i++) in |= g->kind[i] == k;
        if (g ? !in || schedule_kind(k)->chunks != CHUNKS_OPTION : schedule_kind(k)->chunk_order != CHUNKS_V) continue;
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", l ? ", " : "", schedule_kind(k)->name);
    }
    return buf;
}

static void print_table(const BubbleConfig *c, const Grid *g) {
    char name[32], peaks[160], formula[32], mib[256], names[128];
    if (c->stage_f) print_stage_costs(c);
    else
        printf(
            "# micropp bubble | costs: forward %g, backward %g (zb-h1, zb-h2, zb-v, dualpipev, v-half, v-min: I %g + "
            "W %g), transfer %g (time units)\n",
            c->cost_f, c->cost_b, c->cost_b - c->cost_w, c->cost_w, c->cost_comm);
    printf("# memory: %s\n", mem_units);
    printf("# bubble formula: the schedule's closed form where one holds ('-': none); bubble simulated: idle time / "
           "(stages x makespan) of one step, the bubble train's table calls simulated\n");
    printf("# overlapped: the bubble if steps ran back to back without a barrier (idle / the longest rank span; the "
           "zero-bubble paper's measure)\n");
    if (g->has_option_chunks)
        printf("# %s: %lld chunks per rank; peak in-flight counts chunk passes (1/%lld of a stage each)\n",
               kinds_named(g, names, sizeof names), (long long)c->virtual_stages,
               (long long)c->virtual_stages);
    if (g->has_v)
        printf("# %s: 2 chunks per rank in a V (rank 0 holds the first and the last); peak in-flight counts chunk "
               "passes (1/2 of a stage each)\n",
               kinds_named(NULL, names, sizeof names));
    if (g->act)
        printf("# activations: MiB live at the peak of each stage's actions for the model of %s (train's "
               "peak_activation_bytes)\n",
               c->model);
    printf("%-11s %6s %13s %14s %16s %10s %9s  %-26s %12s %9s%s\n", "schedule", "stages", "micro-batches",
           "bubble formula", "bubble simulated", "overlapped", "makespan", "peak in-flight per stage", "gpipe memory",
           "reduction", g->act ? "  activations MiB per stage" : "");
    for (long i = 0; i < g->n; i++) {
        const SimResult *s = &g->sims[i];
        format_peaks(s->peak_inflight, s->K, peaks, sizeof peaks);
        format_formula(row_formula(c, g->kind[i], g->k[i], g->m[i], s->v), formula, sizeof formula);
        mib[0] = 0;
        if (g->act) { mib[0] = mib[1] = ' '; format_mib(g->act[i], s->K, mib + 2, sizeof mib - 2); }
        printf("%-11s %6d %13d %14s %16.4f %10.4f %9g  %-26s %12.3f %8.2fx%s\n",
               choice_name(SCHED_NAMES, g->kind[i], name, sizeof name), g->k[i], g->m[i], formula, s->bubble_mean,
               s->bubble_overlap, s->makespan, peaks, gpipe_memory(g->k[i], g->m[i]),
               1 / gpipe_memory(g->k[i], g->m[i]), mib);
    }
    for (long i = 0; i < g->n; i++)
        if (g->bound[i] > 0)
            printf("# %s K=%d M=%d: longest rank span %g, lower bound %g (%s), gap %.2f%%\n",
                   choice_name(SCHED_NAMES, g->kind[i], name, sizeof name), g->k[i], g->m[i], g->sims[i].span,
                   g->bound[i], g->by_memory[i] ? "its placement's within its memory limit" : "its placement's",
                   100 * gap_of(g, i));
    for (long i = 0; i < g->skipped && i < 4; i++)  // a row asked for and not shown says why
        printf("# left out: %s\n", g->left_out[i]);
    if (g->skipped > 4) printf("# left out: %ld more rows of the same kinds (--json's skipped_rows)\n", g->skipped - 4);
}

// Row i drawn as a Gantt chart: its title, its slices, one label as wide as the shortest action
// (a chunk pass costs 1/v of the stage's).
static void chart_of(const BubbleConfig *c, const Grid *g, long i, Gantt *out) {
    const SimResult *s = &g->sims[i];
    char name[32], peaks[160], formula[32], costs[96], extra[48] = "";
    format_peaks(s->peak_inflight, s->K, peaks, sizeof peaks);
    format_formula(row_formula(c, g->kind[i], g->k[i], g->m[i], s->v), formula, sizeof formula);
    int split = schedule_splits_backward(g->kind[i], g->file);
    if (c->stage_f) snprintf(costs, sizeof costs, "each stage's measured F, I, W");
    else if (split) snprintf(costs, sizeof costs, "F=%g I=%g W=%g", c->cost_f, c->cost_b - c->cost_w, c->cost_w);
    else snprintf(costs, sizeof costs, "F=%g B=%g", c->cost_f, c->cost_b);
    if (s->v > 1) snprintf(extra, sizeof extra, " x %d virtual stages", s->v);
    snprintf(out->title, sizeof out->title,
             "%s | %d stages%s | %d micro-batches | %s comm=%g | bubble %.4f simulated, %s formula | peak in-flight %s",
             choice_name(SCHED_NAMES, g->kind[i], name, sizeof name), g->k[i], extra, g->m[i], costs,
             c->cost_comm, s->bubble_mean, formula, peaks);
    out->row_label = "stage";
    out->rows = s->K;
    out->slices = s->slices;
    out->n = s->n_slices;
    out->t_end = s->makespan;
    out->cell = fmin(c->cost_f, split ? fmin(c->cost_b - c->cost_w, c->cost_w) : c->cost_b) / s->v;
    for (long k = 0; c->stage_f && k < c->n_stage_costs; k++)  // the shortest pass of any stage
        out->cell = fmin(k ? out->cell : INFINITY, fmin(c->stage_f[k], fmin(c->stage_i[k], c->stage_w[k])) / s->v);
    out->axis_scale = 1;
    out->axis_unit = "time units";
    const char *cols = isatty(STDOUT_FILENO) ? getenv("COLUMNS") : NULL;  // a terminal's width; a pipe keeps all
    long width = c->width ? (long)c->width : cols && *cols ? atol(cols) : 0;
    char lab[32];
    // the row's label before the chart, the axis's unit and its last number's overhang after it
    int lw = snprintf(lab, sizeof lab, "stage %d ", s->K - 1) + (int)strlen(out->axis_unit) + 6;
    if (width > 0) out->width = width - lw > 10 ? (int)(width - lw) : 10;
}

// --gantt in the terminal, --svg into the file opened (and so checked) before simulating.
static void draw_charts(const BubbleConfig *c, const Grid *g, OutFile *svg) {
    Gantt *charts = xcalloc((size_t)g->n, sizeof(Gantt));
    for (long i = 0; i < g->n; i++) chart_of(c, g, i, &charts[i]);
    if (c->gantt) {
        const char *nc = getenv("NO_COLOR");
        int colour = isatty(STDOUT_FILENO) && !(nc && *nc);
        for (long i = 0; i < g->n; i++) { if (i) printf("\n"); gantt_text(stdout, &charts[i], colour); }
    }
    if (c->svg[0]) {
        gantt_svg(svg->f, charts, (int)g->n, 1);  // naive's long span squeezes no other
        int err = out_commit(svg);
        if (err) fatal("writing --svg '%s': %s", c->svg, strerror(err));
    }
    free(charts);
}

// --schedule-file: the file's schedule is the one row (it fixes the stages and micro-batches).
static void load_file(const BubbleConfig *c, const OptionsSeen *seen, SchedFile *file, int *kinds, int *ks, int *ms) {
    static const char *const fixed[] = {"schedule", "pp", "micro-batches", "virtual-stages", "costs-from"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (seen_set(seen, fixed[i]))
            user_error("bubble: --schedule-file fixes the schedule, its stages and micro-batches: drop --%s", fixed[i]);
    char err[900], *text;
    if (schedule_file_read(c->schedule_file, &text, err, sizeof err) ||
        schedule_file_parse(text, c->schedule_file, file, err, sizeof err))
        user_error("bubble: %s", err);
    free(text);
    kinds[0] = SCHED_FILE; ks[0] = file->K; ms[0] = file->M;
}

// One array of --costs-from's summary: K positive numbers (null entries, where allowed: half of
// `half`'s, as a rank that ran only full backwards; train's simulated column takes them so). Where
// allowed the array may be missing: a run whose schedule does not split the backward (1f1b, gpipe,
// interleaved, --tp) has no I and W, so each is half its B, as for a null entry.
static double *stage_array(const cJSON *root, const char *key, int K, const double *half, const char *path) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    double *v = xmalloc(sizeof(double) * (size_t)K);
    int ok = (cJSON_IsArray(a) && cJSON_GetArraySize(a) == K) || (!a && half);
    for (int s = 0; ok && s < K; s++) {
        const cJSON *x = a ? cJSON_GetArrayItem(a, s) : NULL;
        if (!a) { v[s] = half[s] / 2; continue; }
        v[s] = cJSON_IsNumber(x) ? x->valuedouble : half && cJSON_IsNull(x) ? half[s] / 2 : NAN;
        ok = v[s] > 0 && isfinite(v[s]);
    }
    if (!ok)
        user_error("bubble: --costs-from '%s' has no %s of %d positive numbers: give it the --json summary of a "
                   "micropp train pipeline run",
                   path, key, K);
    return v;
}

// --costs-from: each stage's median F, I and W of a `micropp train --json` pipeline run (ms). It
// fixes the stages, and its micro-batches are the default.
static void load_costs(BubbleConfig *c, const OptionsSeen *seen, int *ks, int *n_k, int *ms, int *n_m) {
    static const char *const given[] = {"cost-f", "cost-b", "cost-w", "pp", "schedule-file"};
    for (size_t i = 0; i < sizeof given / sizeof *given; i++)
        if (seen_set(seen, given[i]))
            user_error("bubble: --costs-from gives each stage's costs and the stages: drop --%s", given[i]);
    const char *path = c->costs_from;
    struct stat st;
    errno = 0;
    FILE *f = stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (16 << 20) ? fopen(path, "rb") : NULL;
    if (!f)
        user_error("bubble: cannot read --costs-from '%s': %s", path,
                   errno ? strerror(errno) : "not a regular file under 16 MiB");
    char *text = xmalloc((size_t)st.st_size + 1);
    text[fread(text, 1, (size_t)st.st_size, f)] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "stages"),
                *m = cJSON_GetObjectItemCaseSensitive(root, "micro_batches");
    if (!cJSON_IsNumber(k) || k->valuedouble < 1 || k->valuedouble > MAX_K || k->valuedouble != (int)k->valuedouble)
        user_error("bubble: --costs-from '%s' is not the --json summary of a micropp train pipeline run (no "
                   "\"stages\"): run train with --json and give its output",
                   path);
    int K = (int)k->valuedouble;
    double *b = stage_array(root, "backward_ms_median", K, NULL, path);
    c->stage_f = stage_array(root, "forward_ms_median", K, NULL, path);
    c->stage_i = stage_array(root, "backward_input_ms_median", K, b, path);
    c->stage_w = stage_array(root, "backward_weight_ms_median", K, b, path);
    c->n_stage_costs = K;
    ks[0] = K;
    *n_k = 1;
    if (!seen_set(seen, "micro-batches") && cJSON_IsNumber(m) && m->valuedouble >= 1 && m->valuedouble <= MAX_M) {
        ms[0] = (int)m->valuedouble;
        *n_m = 1;
    }
    free(b);
    cJSON_Delete(root);
}

// --dump-csv: the grid's one row written in the file notation, whole or not at all.
static void dump_csv(const BubbleConfig *c, const Grid *g) {
    OutFile o = {0};
    int err = out_open_now(&o, c->dump_csv);
    if (err) user_error("bubble: cannot write --dump-csv '%s': %s (%s)", c->dump_csv, strerror(err), out_hint(err));
    if (schedule_file_write(o.f, g->kind[0], row_file(g, 0), g->k[0], g->m[0], g->sims[0].v)) {
        out_abandon(&o);
        fatal("writing --dump-csv '%s' failed", c->dump_csv);
    }
    err = out_commit(&o);
    if (err) fatal("writing --dump-csv '%s': %s", c->dump_csv, strerror(err));
}

static void parse_options(int argc, char **argv, BubbleConfig *c, OptionsSeen *seen) {
    strcpy(c->schedule, "all");
    strcpy(c->stages, "4");
    strcpy(c->micro_batches, "1,2,4,8,16,32");
    c->cost_f = 1;
    c->cost_b = 2;
    c->virtual_stages = 2;
    c->w_memory = 1;
    options_parse(
        "bubble", bubble_options, c, seen, argc, argv, "micropp bubble [options]        (no mpiexec needed)",
        "  micropp bubble                                         # every schedule, K=4, M=1..32\n"
        "  micropp bubble --schedule gpipe --pp 4 --micro-batches 4 --gantt\n"
        "  micropp bubble --schedule all --pp 2:8 --micro-batches 1:32 --json > grid.json\n"
        "  micropp bubble --pp 4 --micro-batches 8 --cost-b 3 --cost-comm 0.2 --svg cmp.svg\n"
        "  micropp bubble --schedule 1f1b,interleaved,zb-h1 --pp 4 --micro-batches 8 --virtual-stages 2 --gantt\n"
        "  micropp bubble --schedule zb-h2 --pp 4 --micro-batches 8 --dump-csv zbh2.csv   # then train "
        "--schedule-file zbh2.csv\n"
        "  micropp bubble --pp 2 --micro-batches 8 --model configs/pipeline.json   # and each stage's activation "
        "bytes\n");
}

// Every row skipped: each kind asked for runs from more micro-batches than any given (its row's least_m).
static void no_rows(const int *kinds, int n_kind) {
    const ScheduleKind *k = schedule_kind(kinds[0]);
    for (int a = n_kind - 1; a >= 0; a--)
        if (schedule_kind(kinds[a])->least_m > 1) k = schedule_kind(kinds[a]);
    user_error("bubble: --schedule %s needs --micro-batches >= %d x --pp (%s): no (K, M) given qualifies", k->name,
               k->least_m, k->least_m_rule);
}

int cmd_bubble(int argc, char **argv) {
    BubbleConfig cfg = {0}, *c = &cfg;
    single_process("bubble");
    OptionsSeen seen;
    parse_options(argc, argv, c, &seen);
    static int ks[MAX_ROWS], ms[MAX_ROWS];
    int kinds[64], n_kind = 1, n_k = 1, n_m = 1;
    SchedFile file = {0};
    Grid g = {0};
    if (c->schedule_file[0]) {
        load_file(c, &seen, &file, kinds, ks, ms);
        g.file = &file;
    } else {
        char why[PATH_LEN + 160];
        n_kind = schedule_parse_list(c->schedule, kinds, 64, why, sizeof why);
        if (n_kind < 0) user_error("bubble: %s", why);
        n_k = parse_counts("bubble", "pp", c->stages, 1, MAX_K, ks, MAX_ROWS);
        n_m = parse_counts("bubble", "micro-batches", c->micro_batches, 1, MAX_M, ms, MAX_ROWS);
        if (c->costs_from[0]) load_costs(c, &seen, ks, &n_k, ms, &n_m);
    }
    check_costs(c, &seen, kinds, n_kind, &g);
    simulate_grid(c, kinds, n_kind, ks, n_k, ms, n_m, &g);
    model_activations(c, &g);
    if (g.n == 0) no_rows(kinds, n_kind);
    int charts = c->gantt || c->svg[0];
    if (charts && g.n > MAX_CHARTS)
        user_error("bubble: --%s would draw %ld charts, more than %d: give fewer stages / micro-batches",
                   c->gantt ? "gantt" : "svg", g.n, MAX_CHARTS);
    if (c->gantt && c->json)
        user_error("bubble: --gantt draws text, --json prints JSON: use one (--svg works with --json)");
    if (!strcmp(c->svg, "-") && (c->gantt || c->json))
        user_error(
            "bubble: --svg - writes the picture on standard output, and --%s prints there too: give --svg a file name",
            c->gantt ? "gantt" : "json");
    if (c->dump_csv[0] && g.n != 1)
        user_error("bubble: --dump-csv writes one schedule, and this asks for %ld rows: give one --schedule, one "
                   "--pp and one --micro-batches",
                   g.n);
    if (!strcmp(c->dump_csv, "-") && (c->gantt || c->json || !strcmp(c->svg, "-")))
        user_error("bubble: --dump-csv - writes the schedule on standard output, and --%s prints there too: give "
                   "--dump-csv a file name",
                   c->gantt  ? "gantt"
                   : c->json ? "json"
                             : "svg -");
    OutFile svg = {0};
    if (c->svg[0]) {
        int err = out_open_now(&svg, c->svg);
        if (err) user_error("bubble: cannot write --svg '%s': %s (%s)", c->svg, strerror(err), out_hint(err));
    }
    if (c->json) print_json(c, &g);
    // --svg -, --dump-csv -: that alone
    else if (!c->gantt && strcmp(c->svg, "-") && strcmp(c->dump_csv, "-")) print_table(c, &g);
    if (charts) draw_charts(c, &g, &svg);
    if (c->dump_csv[0]) dump_csv(c, &g);
    fflush(stdout);
    grid_free(&g);
    sched_file_free(&file);
    free(c->stage_f); free(c->stage_i); free(c->stage_w);
    return 0;
}
