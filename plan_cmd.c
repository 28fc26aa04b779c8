// plan_cmd.c: `micropp plan`: the memory wall before any run (no MPI). For each schedule, number of
// stages K and data-parallel degree D, planner/memory.c's memory_layout lays the run out (plan_layout),
// simulates the schedule for the micro-batches each stage stashes and the bubble, and reckons each
// rank's bytes as train checks itself (memory_rank); plan marks what fits a device's memory.
// --auto ranks every layout of a world by its predicted step (planner/auto.c) from a profile that
// --calibrate, plan's one form under mpiexec, measures (planner/calibrate.c), or from a machine file.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "comms.h"
#include "planner/auto.h"
#include "planner/cache.h"
#include "planner/calibrate.h"
#include "planner/validate.h"
#include "planner/memory.h"
#include "planner/price.h"
#include "planner/table.h"
#include "train/plan.h"
#include "schedule.h"
#include "commands.h"
#include "base/outfile.h"
#include "base/util.h"
#include "train/options.h"
#include "axes/expert.h"  // expert_model_params

#define MAX_LIST 64
#define DEPTH 128  // --params without --hidden: a shape about this many layers deep
#define MIN_DEVICE (1024.0 * 1024)  // --device-memory: 1 MiB .. 1 PiB
#define MAX_DEVICE (1024.0 * 1024 * 1024 * 1024 * 1024)

typedef struct {
    TrainConfig t;                 // train's options (a train config file works); plan reads the model's
    char params[PATH_LEN];         // "10B": pick a shape with about this many parameters
    char device_memory[PATH_LEN];  // "24G"; "" = this machine's MemAvailable
    char stages[PATH_LEN];         // "1,2,4,8"; "" = powers of two up to the layers (64 at most)
    char schedule[PATH_LEN];       // "gpipe,1f1b" or "all" (as bubble's); "" = gpipe,1f1b,interleaved,zb-h1
    char dp[PATH_LEN];             // data-parallel degrees "1,2"
    int auto_;                     // --auto: every layout of --world ranks predicted and ranked
    int calibrate;                 // --calibrate: measure this world into a profile (under mpiexec)
    int64_t world, top;            // --auto: the ranks; the rows shown
    char profile[PATH_LEN];        // --auto: a profile --calibrate wrote ...
    char machine[PATH_LEN];        // ... or a machine file (configs/machines/)
    char out[PATH_LEN];            // --calibrate: where the profile goes
    char by[PATH_LEN];             // --auto --by family: the best of each family
    char explain[PATH_LEN];        // --auto --explain A,B: two ranks' parts side by side
    char methods[PATH_LEN];        // --auto --methods LIST: the data-parallel methods the ddp rows may use
    int64_t validate;              // --auto --validate K (under mpiexec): run the top K and each family's best
    char zero[PATH_LEN];           // ZeRO levels "0,1,2,3" (a column when given)
    char tp[PATH_LEN];             // tensor-parallel degrees "1,2,4" or "all" (a column when several)
    int ts[MAX_LIST], n_tp;        // --tp parsed (1 value: train's tp, no column)
    OptionsSeen seen;              // which options the config file set and which were typed
} PlanCmd;

#define P(field) offsetof(PlanCmd, field)
static const Option extra_options[] = {
    {"params", 0, OPT_STR, P(params), 0, 0, 0, "N",
     "model size instead of --layers (and --hidden): 350M, 10B, 1.5T; the shape chosen is printed", 0},
    {"device-memory", 0, OPT_STR, P(device_memory), 0, 0, 0, "BYTES",
     "memory of one device: 24G, 80G, 512M (binary units; default: this machine's MemAvailable)", 0},
    {"pp", 'K', OPT_STR, P(stages), 0, 0, 0, "LIST",
     "pipeline stages, e.g. 4, 1,2,4,8 or 2:8 (default: powers of two up to the layers, 64 at most)", 0},
    {"schedule", 'S', OPT_STR, P(schedule), 0, 0, 0, "LIST",
     "'all', one of " SCHED_CHOICES ", or a comma list (default: gpipe,1f1b,interleaved,zb-h1)", 0},
    {"dp", 0, OPT_STR, P(dp), 0, 0, 0, "LIST", "data-parallel degrees, e.g. 1,2,4 or 1:4 (--zero shards over them)",
     0},
    {"zero", 0, OPT_STR, P(zero), 0, 0, 0, "LIST",
     "ZeRO levels over the --dp replicas, e.g. 0,1,2,3 or 0:3: 1 shards the optimizer state, 2 the gradients too, "
     "3 the weights too",
     0},
    {"tp", 0, OPT_STR, P(tp), 0, 0, 0, "LIST",
     "tensor-parallel degrees, e.g. 2 or 1,2,4,8 ('all': the powers of two up to 8 that divide --hidden); several: "
     "the smallest P x T that fits is named",
     0},
    {"auto", 0, OPT_BOOL, P(auto_), 0, 0, 0, 0,
     "rank every layout of --world ranks by --profile, --machine or (neither) this machine, measured and cached", 0},
    {"world", 0, OPT_INT, P(world), 0, 1, 1 << 20, "N", "--auto, or one layout priced: the ranks (devices)", 0},
    {"profile", 0, OPT_STR, P(profile), 0, 0, 0, "FILE",
     "the costs measured by plan --calibrate; without --auto: the one layout train's options give (--mode, --pp, "
     "--dp, --tp, --zero, --schedule, --partition, --placement, --bucket-mb, ...) priced, with its parts", 0},
    {"machine", 0, OPT_STR, P(machine), 0, 0, 0, "FILE",
     "a machine file's costs instead (configs/machines/h100-node.json), with --auto or for one layout", 0},
    {"top", 0, OPT_INT, P(top), 0, 1, 1 << 20, "N", "--auto: rows of the ranked table shown", 0},
    {"by", 0, OPT_STR, P(by), 0, 0, 0, "family", "--auto: the best pipeline, ddp, hybrid and tp layouts side by side",
     0},
    {"explain", 0, OPT_STR, P(explain), 0, 0, 0, "RANKS",
     "--auto: two ranks of the table, A,B (e.g. 1,3): their steps split into their parts, and each difference", 0},
    {"methods", 0, OPT_STR, P(methods), 0, 0, 0, "LIST",
     "--auto: the data-parallel methods its ddp rows may use, a comma list of " METHOD_NAMES " (default: the exact "
     "sum, and each method where it cuts the step by 10% or more; a method changes the numerics)", 0},
    {"calibrate", 0, OPT_BOOL, P(calibrate), 0, 0, 0, 0,
     "under mpiexec: time this model's layers, messages and collectives on this world; write --out", 0},
    {"out", 'o', OPT_STR, P(out), 0, 0, 0, "FILE",
     "--calibrate: the profile's JSON file; --validate: the refit profile's (default: the profile's name .refit.json)",
     0},
    {"validate", 0, OPT_INT, P(validate), 0, 1, 1 << 20, "K",
     "--auto under mpiexec: run the top K layouts and the best of each family a few steps here (--steps, default 5), "
     "print predicted against measured and the regret, and write the profile refit by family (--out)", 0},
    {0},
};
#undef P
// The train options that change memory or the bubble; any other typed on the command line is refused.
static const char *const model_names[] = {"config", "layers", "hidden", "inputs", "classes", "batch", "micro-batches",
                                          "virtual-stages", "precision", "optimizer", "checkpoint-activations", "zero",
                                          "tp", "threads", "bucket-mb", "json", "experts", "moe-every", "top-k",
                                          "capacity-factor", "ep", "ep-overlap", "post-validate"};
#define N_MODEL (sizeof model_names / sizeof *model_names)

static Option *all_options;   // train's (for --config) and the extras, in one table
static Option help_options[N_MODEL + 24];  // the model options and the extras, then {0}

static int is_extra(const char *name) {
    for (int i = 0; extra_options[i].name; i++) if (!strcmp(name, extra_options[i].name)) return 1;
    return 0;
}

static void build_tables(void) {
    int n_train = 0, n_extra = 0, h = 0;
    while (train_options[n_train].name) n_train++;
    while (extra_options[n_extra].name) n_extra++;
    all_options = xcalloc((size_t)(n_train + n_extra + 1), sizeof(Option));
    int k = 0;
    for (int i = 0; i < n_extra; i++) all_options[k++] = extra_options[i];
    for (int i = 0; i < n_train; i++)
        if (!is_extra(train_options[i].name))  // plan's own --dp, --schedule (lists), --auto, --profile
            all_options[k++] = train_options[i];  // (offsets: t is PlanCmd's first member)
    for (size_t j = 0; j < N_MODEL; j++)
        for (int i = 0; i < k; i++)
            if (!strcmp(all_options[i].name, model_names[j]) && !is_extra(model_names[j]))
                help_options[h++] = all_options[i];  // (plan's own --zero and --tp LIST come with the extras)
    for (int i = 0; i < n_extra; i++) help_options[h++] = extra_options[i];
}

// The options of a layout that change its price, not its memory: accepted when plan prices one layout.
static int is_layout_option(const char *name) {
    static const char *const names[] = {"mode",     "pp", "partition", "placement",  "allreduce",
                                        "ddp-sync", "ep", "compress",  "sync-every"};
    for (size_t j = 0; j < sizeof names / sizeof *names; j++) if (!strcmp(name, names[j])) return 1;
    return 0;
}

static int is_model_option(const char *name) {
    for (size_t j = 0; j < N_MODEL; j++) if (!strcmp(name, model_names[j])) return 1;
    for (int i = 0; extra_options[i].name; i++) if (!strcmp(name, extra_options[i].name)) return 1;
    return 0;
}

// A list of counts (4, 1,2,4,8, 2:8: bubble's grammar, parse_counts) into out, each in lo..max and once.
static int parse_list(const char *flag, const char *text, int lo, int max, int *out) {
    int n = parse_counts("plan", flag, text, lo, max, out, MAX_LIST);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (out[j] == out[i]) user_error("plan: --%s '%s' lists %d twice: list each once", flag, text, out[i]);
    return n;
}

// --tp LIST (train's --tp T is one value): each T within train's range, once; "all": the powers of two
// up to 8 that divide --hidden (a T that does not divide it would only be left out). One value is train's.
static void parse_tp(PlanCmd *pc) {
    TrainConfig *c = &pc->t;
    pc->n_tp = 1; pc->ts[0] = (int)c->grid.tp;
    if (!pc->tp[0]) return;
    if (!strcmp(pc->tp, "all")) {
        pc->n_tp = 0;
        for (int T = 1; T <= 8; T *= 2) if (c->hidden % T == 0) pc->ts[pc->n_tp++] = T;
    } else pc->n_tp = parse_list("tp", pc->tp, 1, 4096, pc->ts);
    c->grid.tp = pc->ts[0];
}

// --params: the layers (and, unless --hidden is given, the hidden size) of a model about that big.
// Rule: hidden = the power of two nearest sqrt(N / 128) (a model about 128 layers deep), then
// layers = N / (hidden^2 + hidden), rounded; the input layer is hidden wide.
static void shape_from_params(PlanCmd *pc, char *said, size_t n) {
    TrainConfig *c = &pc->t;
    double N = parse_count(pc->params);
    if (N < 0) user_error("plan: --params '%s' is not a parameter count: write it like 350M, 10B or 1.5T", pc->params);
    if (seen_set(&pc->seen, "layers"))
        user_error("plan: --params picks --layers: give one of them (--hidden may go with --params)");
    if (!seen_set(&pc->seen, "hidden")) {
        double h = pow(2, round(log2(sqrt(N / DEPTH))));
        c->hidden = (int64_t)fmin(fmax(h, 16), 65536);
    }
    int given = seen_set(&pc->seen, "hidden");
    double H = (double)c->hidden, C = (double)c->classes, head = H * C + C, L = round((N - head) / (H * H + H));
    // 1 layer, MAX_LAYERS layers at this hidden
    double least = H * H + H + head, most = MAX_LAYERS * (H * H + H) + head;
    if (L < 1 && given && H > 1)
        user_error("plan: --params %s is less than one layer at --hidden %lld (%.0f parameters): use a smaller "
                   "--hidden, or --params %.0f or more",
                   pc->params, (long long)c->hidden, least, least);
    if (L < 1)
        user_error("plan: --params %s is less than the smallest model plan shapes (1 layer x hidden %lld = %.0f "
                   "parameters): give --params %.0f or more",
                   pc->params, (long long)c->hidden, least, least);
    if (L > MAX_LAYERS && given && H < 65536)
        user_error("plan: --params %s at --hidden %lld makes %.0f layers, more than the %d a model can have: use a "
                   "larger --hidden",
                   pc->params, (long long)c->hidden, L, MAX_LAYERS);
    if (L > MAX_LAYERS)
        user_error("plan: --params %s is more than the largest model plan shapes (%d layers x hidden %lld = %.4g "
                   "parameters): give --params %.4g or less",
                   pc->params, MAX_LAYERS, (long long)c->hidden, most, most);
    char moved[200] = "";  // --auto: a shape its pipelines divide
    c->layers = pc->auto_ && pc->world ? auto_layers_divisible((int)L, (int)pc->world, moved, sizeof moved) : (int)L;
    if (!seen_set(&pc->seen, "inputs")) c->inputs = c->hidden;
    snprintf(said, n, "# --params %s: %lld layers x hidden %lld (%slayers = N / (hidden^2 + hidden)%s)\n", pc->params,
             (long long)c->layers, (long long)c->hidden,
             given ? "--hidden given; " : "hidden = the power of two nearest sqrt(N/128); ", moved);
}

static const char *fmt_count(double v, char *buf, size_t n) {
    if (v >= 1e12) snprintf(buf, n, "%.2fT", v / 1e12);
    else if (v >= 1e9) snprintf(buf, n, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else snprintf(buf, n, "%.0f", v);
    return buf;
}

// Nothing fits: what would. The model state alone over the device, and what dominates; never a
// value plan or train refuses (at most one stage per layer, MAX_STAGES in all).
static void cheapest_fix(const TrainConfig *c, const Table *t, char *buf, size_t n) {
    const Row *lo = &t->row[0];
    for (int i = 1; i < t->n; i++) if (t->row[i].need.total < lo->need.total) lo = &t->row[i];
    const MemNeed *m = &lo->need;
    double P = expert_model_params(c, (int)c->inputs),
           state = P * sizeof(float);
    // weights, gradients, 2 moments
    double K = ceil(state * (c->optimizer != OPTIM_SGD ? 4 : 2) / t->device), K_sgd = ceil(state * 2 / t->device);
    int most = c->layers < MAX_STAGES ? (int)c->layers : MAX_STAGES;  // stages the model can be cut into
    char why[96];
    snprintf(why, sizeof why, c->layers < MAX_STAGES ? "its %d layers, one a stage" : "the %d stages micropp runs",
             most);
    if (m->activations + m->buffers > m->total / 2)
        snprintf(buf, n, "activations dominate (%.0f%% at best): %smore --micro-batches, or a smaller --batch",
                 100 * (m->activations + m->buffers) / m->total,
                 c->pipe.checkpoint_activations ? "" : "--checkpoint-activations, ");
    else if (lo->l.D > 1 && !c->ddp.zero && m->optimizer > 0)
        snprintf(buf, n, "--zero 1 shards the optimizer state over the %d replicas; or more stages", lo->l.D);
    else if (K <= most)
        snprintf(buf, n,
                 "the model state (weights, gradients, optimizer) alone needs at least %.0f stages of this device: try "
                 "--pp %.0f%s",
                 K, K, c->optimizer != OPTIM_SGD ? ", or --optimizer sgd (no moments)" : "");
    else if (c->optimizer != OPTIM_SGD && K_sgd <= most)
        snprintf(buf, n,
                 "the model state (weights, gradients, optimizer) alone needs at least %.0f stages of this device, "
                 "more than %s: "
                 "try --optimizer sgd (no moments) with --pp %.0f, or a device with more memory",
                 K, why, K_sgd);
    else
        snprintf(
            buf, n,
            "the model state (weights, gradients%s) alone needs at least %.0f stages of this device, more than %s: "
            "it does not fit even so; a device with more memory, or a smaller model",
            c->optimizer != OPTIM_SGD ? ", optimizer" : "", K, why);
}

// ", ZeRO-2" in the header ("" without --zero).
static const char *zero_name(const TrainConfig *c) {
    static char s[16];
    snprintf(s, sizeof s, c->ddp.zero ? ", ZeRO-%lld" : "", (long long)c->ddp.zero);
    return s;
}

static void print_table(const PlanCmd *pc, const Table *t, const char *shape) {
    char name[32], b[6][32];
    const TrainConfig *c = &pc->t;
    printf(
        "# micropp plan | %lld layers, hidden %lld, inputs %lld, classes %lld = %s parameters | batch %lld, %lld "
        "micro-batches | %s%s%s\n",
        (long long)c->layers, (long long)c->hidden, (long long)c->inputs, (long long)c->classes,
        fmt_count(expert_model_params(c, (int)c->inputs), b[0], 32),
        (long long)c->batch, (long long)c->pipe.micro_batches,
        choice_name(OPTIM_CHOICES, c->optimizer, name, sizeof name), zero_name(c),
        c->pipe.checkpoint_activations ? ", checkpointed activations" : "");
    if (shape[0]) fputs(shape, stdout);
    printf("# precision %s: weights, gradients, optimizer state 4 bytes per value; stashed activations %g bytes per "
           "element\n",
           choice_name(PRECISION_CHOICES, c->precision, name, sizeof name), pipeline_activation_elem(c->precision));
    printf("# bytes per rank (its stage that needs most), activations at the schedule's simulated peak; bubble "
           "simulated, F = I = W\n");
    if (pc->n_tp > 1)
        printf("# --tp %s: each stage's layers over the row's tp ranks (column/row pairs; an odd last layer and the "
               "head whole): a rank's shards; P x T = the ranks of one replica\n", pc->tp);
    else if (c->grid.tp > 1)
        printf("# --tp %lld: each stage's layers over %lld ranks (column/row pairs; an odd last layer and the head "
               "whole): a rank's shards of the weights, gradients and optimizer state, the column layers' activation "
               "slices (plan --json: tp_allreduce_bytes_per_stage)\n",
               (long long)c->grid.tp, (long long)c->grid.tp);
    printf("# device memory %s%s\n", fmt_bytes_binary(t->device, b[0], sizeof b[0]),
           seen_set(&pc->seen, "device-memory") ? "" : " (this machine's MemAvailable)");
    printf("# activations: live at the peak of the stage's actions; other: the backward's buffers, the host rows, "
           "stash slots never live at once\n");
    int col = pc->zero[0] != 0;  // --zero given: a column of the row's level
    int tcol = pc->n_tp > 1;     // several --tp: a column of the row's T
    printf("%-11s %6s %3s%s%s %13s %12s %12s %12s %12s %11s %12s %7s  %s\n", "schedule", "stages", "dp",
           col ? " zero" : "", tcol ? "  tp" : "", "micro-batches", "weights", "gradients", "optimizer", "activations",
           "other", "total", "bubble", "fits");
    for (int i = 0; i < t->n; i++) {
        const Row *w = &t->row[i];
        const MemNeed *m = &w->need;
        double act = w->l.act[w->worst], other = m->total - m->weights - m->grads - m->optimizer - act;
        char z[8] = "", tz[8] = "";
        if (col) snprintf(z, sizeof z, " %4d", w->zero);
        if (tcol) snprintf(tz, sizeof tz, " %3d", w->l.T);
        printf("%-11s %6d %3d%s%s %13d %12s %12s %12s %12s %11s %12s %7.4f  %s\n",
               table_row_schedule(w, name, sizeof name), w->l.K, w->l.D, z, tz, w->l.M,
               fmt_bytes_binary(m->weights, b[0], 32),
               fmt_bytes_binary(m->grads, b[1], 32), fmt_bytes_binary(m->optimizer, b[2], 32),
               fmt_bytes_binary(act, b[3], 32), fmt_bytes_binary(other, b[4], 32), fmt_bytes_binary(m->total, b[5], 32),
               w->l.bubble, w->fits ? "yes" : "no");
    }
    for (int i = 0; i < t->n_skipped; i++) printf("# left out: %s\n", t->skipped[i]);
    int at, K = table_smallest_fit(t, &at), pt = table_smallest_pt(t);
    if (tcol && pt >= 0) {
        const Row *w = &t->row[pt];
        printf("smallest P x T that fits: %d x %d = %d rank%s (%s, dp %d: %s of %s per rank)\n", w->l.K, w->l.T,
               w->l.K * w->l.T, w->l.K * w->l.T == 1 ? "" : "s", table_row_schedule(w, name, sizeof name), w->l.D,
               fmt_bytes_binary(w->need.total, b[0], 32), fmt_bytes_binary(t->device, b[1], 32));
    } else if (K > 0) {
        const Row *w = &t->row[at];
        printf("smallest K that fits: %d stage%s (%s, dp %d: %s of %s per rank)\n", K, K == 1 ? "" : "s",
               table_row_schedule(w, name, sizeof name), w->l.D, fmt_bytes_binary(w->need.total, b[0], 32),
               fmt_bytes_binary(t->device, b[1], 32));
    } else if (t->n) {
        char fix[400];
        cheapest_fix(c, t, fix, sizeof fix);
        printf("nothing fits in %s: %s\n", fmt_bytes_binary(t->device, b[0], 32), fix);
    }
}

// One MemNeed field of every stage (at byte offset `field`), as a JSON array.
static cJSON *per_stage(const Row *w, size_t field) {
    double *v = xmalloc(sizeof(double) * (size_t)w->l.K);
    for (int s = 0; s < w->l.K; s++) memcpy(&v[s], (const char *)&w->l.need[s] + field, sizeof(double));
    cJSON *a = cJSON_CreateDoubleArray(v, w->l.K);
    free(v);
    return a;
}

static cJSON *json_row(const Row *w) {
    char name[32];
    const MemLayout *l = &w->l;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "schedule", l->K == 1 ? "none" : choice_name(SCHED_NAMES, w->kind, name, sizeof name));
    cJSON_AddNumberToObject(r, "stages", l->K);
    cJSON_AddNumberToObject(r, "dp", l->D);
    cJSON_AddNumberToObject(r, "zero", w->zero);
    cJSON_AddNumberToObject(r, "virtual_stages", l->V);
    cJSON_AddNumberToObject(r, "micro_batches", l->M);
    cJSON_AddNumberToObject(r, "rows_per_micro_batch", l->rows);
    cJSON_AddNumberToObject(r, "worst_stage", w->worst);
    cJSON_AddNumberToObject(r, "weight_bytes", w->need.weights);
    cJSON_AddNumberToObject(r, "grad_bytes", w->need.grads);
    cJSON_AddNumberToObject(r, "optimizer_bytes", w->need.optimizer);
    cJSON_AddNumberToObject(r, "activation_bytes", l->act[w->worst]);
    cJSON_AddNumberToObject(r, "other_bytes",
                            w->need.total - w->need.weights - w->need.grads - w->need.optimizer - l->act[w->worst]);
    cJSON_AddNumberToObject(r, "total_bytes", w->need.total);
    cJSON_AddItemToObject(r, "activation_bytes_per_stage", cJSON_CreateDoubleArray(l->act, l->K));
    cJSON_AddItemToObject(r, "activation_alloc_bytes_per_stage", per_stage(w, offsetof(MemNeed, activations)));
    cJSON_AddItemToObject(r, "weight_bytes_per_stage", per_stage(w, offsetof(MemNeed, weights)));
    cJSON_AddItemToObject(r, "grad_bytes_per_stage", per_stage(w, offsetof(MemNeed, grads)));
    cJSON_AddItemToObject(r, "optimizer_bytes_per_stage", per_stage(w, offsetof(MemNeed, optimizer)));
    cJSON_AddItemToObject(r, "peak_inflight", cJSON_CreateIntArray(l->inflight, l->K));
    cJSON_AddNumberToObject(r, "tp", l->T);
    cJSON_AddItemToObject(r, "tp_allreduce_bytes_per_stage", cJSON_CreateDoubleArray(l->tp_bytes, l->K));
    cJSON_AddNumberToObject(r, "bubble", l->bubble);
    cJSON_AddBoolToObject(r, "fits", w->fits);
    return r;
}

static void print_json(const PlanCmd *pc, const Table *t) {
    const TrainConfig *c = &pc->t;
    char name[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layers", (double)c->layers);
    cJSON_AddNumberToObject(o, "hidden", (double)c->hidden);
    cJSON_AddNumberToObject(o, "inputs", (double)c->inputs);
    cJSON_AddNumberToObject(o, "classes", (double)c->classes);
    cJSON_AddNumberToObject(o, "batch", (double)c->batch);
    cJSON_AddNumberToObject(o, "params", expert_model_params(c, (int)c->inputs));
    cJSON_AddStringToObject(o, "precision", choice_name(PRECISION_CHOICES, c->precision, name, sizeof name));
    cJSON_AddNumberToObject(o, "activation_bytes_per_element", pipeline_activation_elem(c->precision));
    cJSON_AddStringToObject(o, "optimizer", choice_name(OPTIM_CHOICES, c->optimizer, name, sizeof name));
    cJSON_AddNumberToObject(o, "zero", (double)c->ddp.zero);
    cJSON_AddBoolToObject(o, "checkpoint_activations", c->pipe.checkpoint_activations);
    cJSON_AddNumberToObject(o, "device_memory_bytes", t->device);
    cJSON *arr = cJSON_AddArrayToObject(o, "rows");
    for (int i = 0; i < t->n; i++) cJSON_AddItemToArray(arr, json_row(&t->row[i]));
    cJSON *sk = cJSON_AddArrayToObject(o, "left_out");
    for (int i = 0; i < t->n_skipped; i++) cJSON_AddItemToArray(sk, cJSON_CreateString(t->skipped[i]));
    int at, K = table_smallest_fit(t, &at);
    if (K > 0) cJSON_AddNumberToObject(o, "smallest_stages_that_fit", K);
    else cJSON_AddNullToObject(o, "smallest_stages_that_fit");
    int pt = table_smallest_pt(t);
    if (pc->n_tp > 1 && pt < 0) cJSON_AddNullToObject(o, "smallest_p_x_t_that_fits");
    else if (pc->n_tp > 1) {
        const MemLayout *l = &t->row[pt].l;
        cJSON *f = cJSON_AddObjectToObject(o, "smallest_p_x_t_that_fits");
        cJSON_AddNumberToObject(f, "stages", l->K);
        cJSON_AddNumberToObject(f, "tp", l->T);
        cJSON_AddNumberToObject(f, "dp", l->D);
        cJSON_AddNumberToObject(f, "ranks", l->K * l->T * l->D);
        cJSON_AddStringToObject(f, "schedule", l->K == 1 ? "none" : choice_name(SCHED_NAMES, t->row[pt].kind, name,
                                                                               sizeof name));
    }
    if (K < 0 && t->n) {
        char fix[400];
        cheapest_fix(c, t, fix, sizeof fix);
        cJSON_AddStringToObject(o, "fix", fix);
    }
    json_print(o);
}

// Options: train's table (so a train config file loads), the train flags that do not change memory
// refused when typed, then --params, the lists and the device.
static void parse_options(int argc, char **argv, PlanCmd *pc, char *shape, size_t n) {
    static const char usage[] = "micropp plan [options]        (no mpiexec needed)";
    static const char examples[] =
        "  micropp plan --params 10B --device-memory 24G         # the memory wall: how many stages a 10B model needs\n"
        "  micropp plan --config configs/pipeline.json --pp 2,4,8 --device-memory 1G\n"
        "  micropp plan --layers 32 --hidden 4096 --dp 1,4 --zero 1 --schedule 1f1b,zb-h1 --json\n"
        "  mpiexec -n 2 micropp plan --calibrate --config configs/pipeline.json --out profile.json\n"
        "  micropp plan --auto --world 2 --profile profile.json --config configs/pipeline.json\n"
        "  micropp plan --auto --world 1024 --machine configs/machines/h100-node.json --params 70B --batch 1048576\n";
    build_tables();
    train_config_defaults(&pc->t);
    pc->top = 10;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            options_help(stdout, "plan", usage, help_options, pc, examples);
            finish(0);
        }
    options_parse("plan", all_options, pc, &pc->seen, argc, argv, usage, examples);
    if (!pc->calibrate && !pc->validate && seen_typed(&pc->seen, "timeout"))
        user_error("plan: --timeout bounds the waits of --calibrate (under mpiexec): add --calibrate, or drop it");
    int pricing = !pc->auto_ && !pc->calibrate && (pc->profile[0] || pc->machine[0]);
    for (int i = 0; all_options[i].name; i++)
        if (!is_model_option(all_options[i].name) && !(pricing && is_layout_option(all_options[i].name)) &&
            seen_typed(&pc->seen, all_options[i].name) &&
            !((pc->calibrate || pc->validate) && !strcmp(all_options[i].name, "timeout")) &&  // (their waits)
            !(pc->validate && !strcmp(all_options[i].name, "steps")))  // (--validate's runs)
            user_error("plan: --%s changes neither memory nor the bubble: drop it (see 'micropp plan --help')",
                       all_options[i].name);
    TrainConfig *c = &pc->t;
    shape[0] = 0;
    if (pc->params[0]) shape_from_params(pc, shape, n);
    if (!c->inputs) c->inputs = c->hidden;
    parse_tp(pc);
    if (pc->auto_ || pc->calibrate) return;
    if (seen_set(&pc->seen, "top") || (!pricing && seen_set(&pc->seen, "world")))
        user_error("plan: --%s goes with --auto%s: add it", seen_set(&pc->seen, "top") ? "top" : "world",
                   seen_set(&pc->seen, "top") ? "" : ", or with --profile or --machine (one layout priced)");
    if (seen_set(&pc->seen, "out")) user_error("plan: --out names --calibrate's profile: add --calibrate, or drop it");
    if (pc->zero[0] && !pc->dp[0] && !pricing)
        user_error("plan: --zero %s shards over data-parallel replicas: add --dp, e.g. --dp 2,4", pc->zero);
}

// --validate's rules (every rank alike): --auto's rows, run on the one-node world mpiexec started (--world, when
// given, is its size), with a profile (given, or this machine's cached), not a machine file; --out only with it.
static void check_validate(PlanCmd *pc) {
    int ranks = comm_world_size();
    if (!pc->validate) {
        if (pc->auto_ && seen_set(&pc->seen, "out"))
            user_error("plan: --out names --calibrate's profile or --validate's refit: add one, or drop --out");
        return;
    }
    if (!pc->auto_) user_error("plan: --validate %lld runs --auto's top layouts: add --auto", (long long)pc->validate);
    if (pc->machine[0])
        user_error("plan: --validate measures this machine: give --profile FILE (or neither), not --machine");
    if (pc->t.json) user_error("plan: --validate prints its table, not JSON: drop --json");
    if (pc->world && pc->world != ranks)
        user_error("plan: --validate runs the layouts on the world mpiexec started (%d rank%s), and --world is %lld: "
                   "start it with mpiexec -n %lld, or drop --world", ranks, ranks == 1 ? "" : "s",
                   (long long)pc->world, (long long)pc->world);
    pc->world = ranks;
    if (!validate_one_node())
        user_error("plan: --validate starts its runs on one node, and this world spans several: run it on one node");
}

// --auto's and --calibrate's rules: what each needs, and the options they replace.
static void check_auto(const PlanCmd *pc) {
    static const char *const searched[] = {"dp", "virtual-stages", "checkpoint-activations", "pp", "schedule", "tp",
                                           "micro-batches", "zero", "precision"};  // (from "pp": --auto's constraints)
    const char *mode = pc->auto_ ? "--auto" : "--calibrate";
    if (pc->auto_ && pc->calibrate)
        user_error("plan: --calibrate measures a profile and --auto reads one: run them one after the other");
    for (size_t i = 0; pc->auto_ && i < 3; i++)
        if (seen_typed(&pc->seen, searched[i]))
            user_error("plan: --auto searches --%s itself: drop it (or drop --auto to plan that layout)", searched[i]);
    if (pc->methods[0] && !pc->auto_)
        user_error("plan: --methods '%s' narrows --auto's search: add --auto (one layout takes --compress or "
                   "--sync-every)", pc->methods);
    if (pc->by[0] && (!pc->auto_ || strcmp(pc->by, "family")))
        user_error("plan: --by '%s': --auto --by family shows the best of each family: give it so", pc->by);
    int ab[3], n_ab = pc->explain[0] ? parse_int_list(pc->explain, ab, 3) : 0;
    if (pc->explain[0] && (!pc->auto_ || pc->t.json || n_ab != 2 || ab[0] < 1 || ab[1] < 1))
        user_error("plan: --explain '%s': --auto --explain A,B (two ranks of its table, e.g. 1,2; no --json) splits "
                   "their steps", pc->explain);
    for (size_t i = 0; pc->calibrate && i < sizeof searched / sizeof *searched; i++)  // (measured for every one)
        if (seen_typed(&pc->seen, searched[i]))
            user_error("plan: --calibrate measures the costs of every layout, and --auto searches --%s: drop it here",
                       searched[i]);
    if (pc->calibrate && seen_typed(&pc->seen, "json"))
        user_error("plan: --calibrate writes its profile as JSON to --out, and prints no table: drop --json");
    for (size_t i = 0; pc->calibrate && i < 4; i++)
        if (seen_set(&pc->seen, (const char *[]){"world", "profile", "machine", "top"}[i]))
            user_error("plan: --%s goes with --auto, and %s measures the world mpiexec started: drop it",
                       (const char *[]){"world", "profile", "machine", "top"}[i], mode);
    if (pc->calibrate && pc->t.timeout > 0 && pc->t.timeout < WD_MIN_TIMEOUT)
        user_error("plan: --timeout %g is below the %g s minimum: use %g or more, or 0 to wait forever", pc->t.timeout,
                   WD_MIN_TIMEOUT, WD_MIN_TIMEOUT);
    if (pc->calibrate && !pc->out[0])
        user_error("plan: --calibrate writes a profile: name it with --out FILE (e.g. --out profile.json)");
    if (pc->auto_ && !pc->world)
        user_error("plan: --auto lays a run out on --world N ranks: give it, e.g. --world 4");
    if (pc->auto_ && pc->profile[0] && pc->machine[0])
        user_error("plan: --auto takes the costs from one of --profile FILE or --machine FILE, not both (neither: "
                   "this machine is measured once and cached)");
}

// --calibrate (every rank): the model's layers and this world's links measured, rank 0 writes --out.
static int plan_calibrate(PlanCmd *pc) {
    OutFile o;
    int err = g_rank == 0 ? out_check(pc->out) : 0;
    char why[PATH_LEN + 200] = "";
    if (err) snprintf(why, sizeof why, "plan: --out '%s': %s: %s", pc->out, strerror(err), out_hint(err));
    agree_on_error(why[0] ? why : NULL);
    wd_set_timeout(pc->t.timeout);  // (every wait of the measurements: a rank stopped ends the job, not a hang)
    Profile pf;
    calibrate_run(&pc->t, &pf, g_rank == 0);
    if (g_rank == 0) {
        char *text = cost_to_json(&pf);
        if ((err = out_open_now(&o, pc->out)) == 0) {
            fputs(text, o.f);
            fputc('\n', o.f);
            err = out_commit(&o);
        }
        free(text);
        if (err)
            snprintf(why, sizeof why, "plan: cannot write --out '%s': %s: %s", pc->out, strerror(err),
                     out_write_hint(err));
        else printf("# micropp plan --calibrate: %s\nwrote %s\n", pf.source, pc->out);
    }
    agree_on_error(why[0] ? why : NULL);
    finish(0);
}

// --auto's table: the model, the costs' source, the search's figures, the ranked rows, the best's command.
static void print_auto(const PlanCmd *pc, const Profile *pf, const Search *s0, const char *shape, int model_flags) {
    const TrainConfig *c = &pc->t;
    const Search *sp = s0;  // (ranked by auto_search)
    int world = (int)pc->world;
    double device = sp->device;
    char why[64], b[32];
    int ab[2] = {0};  // (--explain's ranks: rows that fit)
    if (pc->explain[0] && parse_int_list(pc->explain, ab, 2) == 2 && (ab[0] > sp->n_fit || ab[1] > sp->n_fit))
        user_error("plan: --explain %s: the table has %d layouts that fit: give two ranks of 1..%d", pc->explain,
                   sp->n_fit, sp->n_fit);
    printf("# micropp plan --auto | %lld layers, hidden %lld, inputs %lld, classes %lld = %s parameters | batch %lld "
           "| %d ranks\n",
           (long long)c->layers, (long long)c->hidden, (long long)c->inputs, (long long)c->classes,
           fmt_count(expert_model_params(c, (int)c->inputs), b, 32),
           (long long)c->batch, world);
    if (shape[0]) fputs(shape, stdout);
    char foreign[PATH_LEN + 600];
    printf("# costs: %s\n", pf->source);
    cache_foreign(pf->source, c, world, foreign, sizeof foreign);
    fputs(foreign, stdout);
    if (pf->calibrated && pf->world != world)
        printf("# note: the profile was measured with %d rank%s running at once, this world has %d: its compute "
               "figures carry that contention\n", pf->world, pf->world == 1 ? "" : "s", world);
    printf("# %d layouts tried, %d can run, %d fit %s per rank; searched in %.2f s\n", sp->n_tried, sp->n, sp->n_fit,
           fmt_bytes_binary(device, b, sizeof b), sp->seconds);
    printf("# step: predicted (simulated pipeline + messages + exposed collectives + optimizer); comm: its share "
           "not hidden\n");
    auto_print(stdout, sp, (int)pc->top, pc->by[0] != 0);
    if (sp->n_fit) {
        char cmd[2 * PATH_LEN + 400], note[200];
        layout_command(&sp->c[0].l, c, c->config, model_flags, cmd, sizeof cmd);
        printf("best: %s%s\n", cmd, auto_numerics(&sp->c[0].l, c, note, sizeof note));
        if (pc->explain[0]) price_explain(stdout, sp, ab[0], ab[1]);
    } else if (sp->n) {
        printf("nothing fits in %s per rank: the smallest needs %s\n", fmt_bytes_binary(device, b, sizeof b),
               fmt_bytes_binary(sp->c[0].pr.memory, why, 32));
    }
}

// What was typed beside --auto, as the search's constraints: --pp, --tp and --zero lists, --schedule's
// kinds, --micro-batches, --precision, --methods (without it, each method where it pays).
static void auto_constraint(const PlanCmd *pc, Constraint *k) {
    char why[PATH_LEN + 160];
    int kinds[MAX_LIST], n;
    memset(k, 0, sizeof *k);
    const OptionsSeen *t = &pc->seen;  // (typed: a config file's values are the model's, not constraints)
    if (seen_typed(t, "pp")) k->n_pp = parse_list("pp", pc->stages, 1, MAX_STAGES, k->pp);
    if (seen_typed(t, "tp")) memcpy(k->tp, pc->ts, sizeof(int) * (size_t)(k->n_tp = pc->n_tp));
    if (seen_typed(t, "zero")) k->n_zero = parse_list("zero", pc->zero, 0, 3, k->zero);
    int sched = seen_typed(t, "schedule");
    if (sched && (n = schedule_parse_list(pc->schedule, kinds, MAX_LIST, why, sizeof why)) < 0)
        user_error("plan: %s", why);
    for (int i = 0; sched && i < n; i++) k->schedules |= 1u << kinds[i];
    if (seen_typed(&pc->seen, "micro-batches")) k->M = (int)pc->t.pipe.micro_batches;
    if (seen_typed(&pc->seen, "precision")) k->precision = pc->t.precision + 1;
    if (seen_typed(&pc->seen, "methods") && !(k->methods = auto_parse_methods(pc->methods, why, sizeof why)))
        user_error("plan: %s", why);
    k->try_methods = !k->methods;
}

// --auto: the costs, the device's bytes, the search, the table and the best layout's command.
// --device-memory as given (0: not given), in the range every form of plan takes (plan --auto and a
// priced layout took 1 byte or 1e30, which the table refuses; issue 37).
static double given_device(const PlanCmd *pc) {
    if (!pc->device_memory[0]) return 0;
    double device = parse_bytes(pc->device_memory);
    if (device < 0)
        user_error("plan: --device-memory '%s' is not a size: write it like 24G, 80GiB or 512M", pc->device_memory);
    if (device < MIN_DEVICE)
        user_error("plan: --device-memory '%s' is %.0f byte%s, and a device holds at least 1 MiB: give the unit, like "
                   "24G or 512M",
                   pc->device_memory, device, device == 1 ? "" : "s");
    if (device > MAX_DEVICE)
        user_error("plan: --device-memory '%s' is more than 1 PiB: give the memory of one device, like 24G or 80G",
                   pc->device_memory);
    return device;
}

// No --profile: this machine's, cached (measured once). Under --validate rank 0 measures it (a child job of
// its own) while the others wait, then each reads the cached file.
static void cached_costs(PlanCmd *pc, char *why, size_t n) {
    int rc = 0;
    if (pc->validate && g_rank == 0) validate_child_env();
    if (!pc->validate || g_rank == 0) rc = cache_profile(&pc->t, (int)pc->world, pc->profile, PATH_LEN, why, n);
    if (pc->validate) {
        agree_on_error(rc ? why : NULL);
        if (g_rank != 0) rc = cache_profile(&pc->t, (int)pc->world, pc->profile, PATH_LEN, why, n);
    }
    if (rc) user_error("plan: --auto: %s", why);
}

// --validate K: rank 0 runs the rows (planner/validate.c) while the others sleep; every rank ends with its code.
static void plan_validate(const PlanCmd *pc, const Profile *pf, const Search *s, int model_flags) {
    char out[PATH_LEN + 16], err[PATH_LEN + 200] = "";
    if (pc->validate > s->n_fit)
        user_error("plan: --validate %lld: the table has %d layout%s that fit: give 1..%d", (long long)pc->validate,
                   s->n_fit, s->n_fit == 1 ? "" : "s", s->n_fit);
    size_t stem = strlen(pc->profile);
    if (stem > 5 && !strcmp(pc->profile + stem - 5, ".json")) stem -= 5;
    if (pc->out[0]) snprintf(out, sizeof out, "%s", pc->out);
    else snprintf(out, sizeof out, "%.*s.refit.json", (int)stem, pc->profile);
    int bad = g_rank == 0 ? out_check(out) : 0;
    if (bad) snprintf(err, sizeof err, "plan: --validate's refit '%s': %s: %s", out, strerror(bad), out_hint(bad));
    agree_on_error(err[0] ? err : NULL);
    ValidateAsk ask = {.K = (int)pc->validate, .steps = seen_typed(&pc->seen, "steps") ? (int)pc->t.steps : 5,
                       .world = (int)pc->world, .config = pc->t.config, .model_flags = model_flags, .out = out,
                       .timeout = seen_typed(&pc->seen, "timeout") ? pc->t.timeout : 0};
    int code = g_rank == 0 && validate_run(pf, s, &pc->t, &ask, err, sizeof err) ? 1 : 0;
    if (code) fprintf(stderr, "micropp: %s\n", err);
    finish(validate_agree(code));
}

static int plan_auto(PlanCmd *pc, const char *shape) {
    TrainConfig *c = &pc->t;
    Profile *pf = xmalloc(sizeof *pf);
    char why[PATH_LEN + 800];  // (neither --profile nor --machine: this machine's profile, measured once and cached)
    if (!pc->profile[0] && !pc->machine[0]) cached_costs(pc, why, sizeof why);
    if (cost_load(pc->profile[0] ? pc->profile : pc->machine, pf, why, sizeof why))
        user_error("plan: --%s %s", pc->profile[0] ? "profile" : "machine", why);
    if (pc->profile[0] && !pf->calibrated)
        user_error("plan: --profile '%s' is a machine file: give it as --machine", pc->profile);
    if (pc->machine[0] && pf->calibrated)
        user_error("plan: --machine '%s' is a measured profile: give it as --profile", pc->machine);
    if (cost_fits_model(pf, c, why, sizeof why)) user_error("plan: %s", why);
    int world = (int)pc->world;
    double device = pc->device_memory[0] ? given_device(pc)
                    : pf->device_memory > 0 ? pf->device_memory : memory_available() / world;
    if (device <= 0) user_error("plan: cannot read MemAvailable from /proc/meminfo: give --device-memory, e.g. 24G");
    Search s;
    Constraint k;
    auto_constraint(pc, &k);
    auto_search_in(pf, c, world, device, &k, &s);
    if (!s.n)
        user_error("plan: no layout of %d ranks can run this model (%d tried)%s", world, s.n_tried,
                   memcmp(&k, &(Constraint){.try_methods = k.try_methods}, sizeof k)
                       ? " within the --pp, --tp, --zero, --schedule, --micro-batches, --precision or --methods given: "
                         "widen them"
                   : ": give a --batch the replicas divide, or a --world with fewer ranks");
    int model_flags = !c->config[0] || pc->params[0];
    for (size_t i = 1; i < 6; i++) model_flags |= seen_typed(&pc->seen, model_names[i]);  // layers .. batch
    model_flags |= seen_typed(&pc->seen, "optimizer");
    if (c->json) {
        cJSON *o = auto_json(&s, c, c->config, model_flags);
        cJSON_AddNumberToObject(o, "world", world);
        cJSON_AddStringToObject(o, "costs", pf->source);
        json_print(o);
    } else print_auto(pc, pf, &s, shape, model_flags);
    if (pc->validate) plan_validate(pc, pf, &s, model_flags);
    auto_free(&s);
    free(pf);
    return 0;
}

// --profile or --machine without --auto: the layout the options describe on --world ranks, priced; its
// command carries the options layout_command does not write, as they were typed.
static int plan_price(PlanCmd *pc, int argc, char **argv) {
    static const char *const typed[] = {"--partition", "--placement", "--allreduce", "--ddp-sync", "--bucket-mb"};
    TrainConfig *c = &pc->t;
    Degrees d;
    char extra[2 * PATH_LEN] = "", err[PATH_LEN + 600];
    if (!pc->world) user_error("plan: one layout priced needs its ranks: give --world N, e.g. --world 2");
    if (pc->profile[0] && pc->machine[0]) user_error("plan: --profile and --machine are two costs: give one");
    if (pc->stages[0]) {  // plan's --pp is the table's list: one layout takes one value
        int ks[MAX_LIST], n = parse_list("pp", pc->stages, 1, MAX_STAGES, ks);
        if (n != 1) user_error("plan: --pp %s lists several stage counts: one layout priced takes one", pc->stages);
        c->grid.pp = ks[0];
    }
    if (pc->n_tp > 1) user_error("plan: --tp %s lists several degrees: one layout takes one", pc->tp);
    const char *lists[3] = {pc->dp, pc->zero, pc->schedule};  // (one value each)
    if (price_degrees(c, &pc->seen, (int)pc->world, lists, &d, err, sizeof err)) user_error("plan: %s", err);
    double device = given_device(pc);
    for (int i = 1; i + 1 < argc && strcmp(argv[i], "--"); i++)
        for (size_t j = 0; j < sizeof typed / sizeof *typed; j++)
            if (!strcmp(argv[i], typed[j]))
                snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " %s %s", argv[i], argv[i + 1]);
    int model_flags = !c->config[0] || pc->params[0] || seen_typed(&pc->seen, "optimizer");
    for (size_t i = 1; i < 6; i++) model_flags |= seen_typed(&pc->seen, model_names[i]);  // layers .. batch
    PriceAsk ask = {.path = pc->profile[0] ? pc->profile : pc->machine, .measured = pc->profile[0] != 0,
                    .world = (int)pc->world, .device = device, .model_flags = model_flags, .extra = extra};
    if (price_plan(c, &d, &ask, err, sizeof err))
        user_error("plan: --%s %s", ask.measured ? "profile" : "machine", err);
    return 0;
}

// The --config FILE typed (-c FILE, --config=FILE), for the command --auto prints; "" when none.
static void config_path(int argc, char **argv, char *out, size_t n) {
    out[0] = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if ((!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) && i + 1 < argc) snprintf(out, n, "%s", argv[++i]);
        else if (!strncmp(argv[i], "--config=", 9)) snprintf(out, n, "%s", argv[i] + 9);
    }
}

static int has_flag(int argc, char **argv, const char *flag) {
    size_t n = strlen(flag);
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strncmp(argv[i], flag, n) && (!argv[i][n] || argv[i][n] == '=')) return 1;
    return 0;
}

int cmd_plan(int argc, char **argv) {
    static PlanCmd cmd;
    PlanCmd *pc = &cmd;
    int calibrate = has_flag(argc, argv, "--calibrate"), validate = has_flag(argc, argv, "--validate");
    if (calibrate || validate) comm_init(&argc, &argv);
    else single_process("plan");
    FILE *quiet = validate && g_rank != 0 ? freopen("/dev/null", "w", stdout) : NULL;  // (rank 0 prints)
    (void)quiet;
    char shape[PATH_LEN + 400];
    parse_options(argc, argv, pc, shape, sizeof shape);
    check_validate(pc);
    check_auto(pc);
    config_path(argc, argv, pc->t.config, sizeof pc->t.config);
    if (pc->calibrate) return plan_calibrate(pc);
    if (pc->auto_) return plan_auto(pc, shape);
    if (pc->profile[0] || pc->machine[0]) return plan_price(pc, argc, argv);
    TrainConfig *c = &pc->t;
    int kinds[MAX_LIST], ks[MAX_LIST], ds[MAX_LIST], zs[MAX_LIST] = {0}, n_kind, n_k = 0, n_d = 1, n_z = 1;
    char why[PATH_LEN + 160];
    n_kind = schedule_parse_list(pc->schedule[0] ? pc->schedule : "gpipe,1f1b,interleaved,zb-h1", kinds, MAX_LIST, why,
                                 sizeof why);
    if (n_kind < 0) user_error("plan: %s", why);
    if (pc->stages[0]) n_k = parse_list("pp", pc->stages, 1, MAX_STAGES, ks);
    else for (int k = 1; k <= c->layers && k <= 64; k *= 2) ks[n_k++] = k;
    if (pc->dp[0]) n_d = parse_list("dp", pc->dp, 1, 1 << 20, ds);
    else ds[0] = 1;
    if (pc->zero[0]) n_z = parse_list("zero", pc->zero, 0, 3, zs);
    c->ddp.zero = n_z == 1 ? zs[0] : 0;  // one level: the header names it; several: the column does
    c->pipe.partition[0] = 0;  // (the table's rows are even partitions of every K)
    Table t = {0};
    t.device = pc->device_memory[0] ? given_device(pc) : memory_available();
    if (t.device < 0) user_error("plan: cannot read MemAvailable from /proc/meminfo: give --device-memory, e.g. 24G");
    table_fill(c, kinds, n_kind, ks, n_k, ds, n_d, zs, n_z, pc->ts, pc->n_tp, &t);
    if (!t.n)
        user_error("plan: no layout given can run (first: %s)", t.skipped[0]);  // (the reason names its own fix)
    if (c->json) print_json(pc, &t); else print_table(pc, &t, shape);
    table_free(&t);
    return 0;
}
