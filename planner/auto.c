// planner/auto.c: the planner's search (planner/auto.h): the layouts of a world enumerated axis by axis,
// each priced by predict_step and checked against the device's memory, then ranked. Checkpointing is
// tried only where a layout does not fit without it (it can only cost time); bf16 where the profile
// priced it; --tp widths within a node; ZeRO levels where there are replicas (tp_widths, try_zeros); the
// data-parallel methods on the ddp rows where they pay, or as --methods says (try_methods).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "base/ops.h"
#include "base/util.h"
#include "model.h"
#include "planner/auto.h"
#include "train/plan.h"
#include "axes/data.h"  // COMPRESS_*

#define SHAPE_SLACK 0.05  // --params under --auto: layers moved by at most this share to suit the pipelines
#define MAX_M_STEPS 4  // micro-batches tried per pipeline: K, 2K, 4K, 8K (and the config's)
#define REFINED 16     // the fastest layouts the second pass varies (auto_refine)
// A method changes the numerics: unasked, it joins the table only where it cuts its layout's step by this share,
// beyond the prediction's error (plan --auto --validate's regrets run to a few per cent).
#define METHOD_GAIN 0.10

const char *layout_name(const Layout *l, char *buf, size_t n) {
    const char *mode = l->pp > 1 ? (l->dp > 1 ? "hybrid" : "pp") : (l->dp > 1 ? "ddp" : "monolith");
    int k = snprintf(buf, n, "%s", mode);
    if (l->pp > 1 && k < (int)n) {
        char s[32];
        k += snprintf(buf + k, n - (size_t)k, " %s%s M=%d", choice_name(SCHED_NAMES, l->schedule, s, sizeof s),
                      schedule_kind(l->schedule)->chunks == CHUNKS_OPTION ? (l->v == 2 ? " v=2" : " v>2") : "", l->M);
    }
    if (l->tp > 1 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " tp%d", l->tp);
    if (l->zero && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " zero%d", l->zero);
    if (l->ep > 1 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " ep%d", l->ep);
    if (l->ckpt && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " ckpt");
    if (k < (int)n) k += snprintf(buf + k, n - (size_t)k, " %s", l->precision == PRECISION_BF16 ? "bf16" : "fp32");
    if (l->pp > 1 && l->partition[0] && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " balanced");
    if (l->placement && k < (int)n) {  // (the second pass's choices: auto_refine)
        char p[32];
        k += snprintf(buf + k, n - (size_t)k, " @%s", choice_name(PLACEMENT_CHOICES, l->placement, p, sizeof p));
    }
    if (l->bucket_mb > 0 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " bucket %gM", l->bucket_mb);
    if ((l->compress || l->sync_every) && k < (int)n) {
        char m[48];
        snprintf(buf + k, n - (size_t)k, " %s", layout_method(l, m, sizeof m));
    }
    return buf;
}

static void push(Search *s, int *cap, const Candidate *c) {
    if (s->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        s->c = realloc(s->c, sizeof(Candidate) * (size_t)*cap);
        if (!s->c) fatal("out of memory");
    }
    s->c[s->n++] = *c;
}

// One layout: priced, and tried again with checkpointing when a pipeline's does not fit.
static int listed(const int *v, int n, int x) {
    if (!n) return 1;
    for (int i = 0; i < n; i++) if (v[i] == x) return 1;
    return 0;
}

static const Constraint *want;  // the search's constraint (auto_search_in), NULL: none

static void try_layout(const Profile *pf, const TrainConfig *c, Layout l, Search *s, int *cap) {
    Candidate k = {.l = l};
    char why[PATH_LEN + 200];
    s->n_tried++;
    if (predict_step(pf, c, &l, &k.pr, why, sizeof why)) return;
    k.fits = k.pr.memory <= s->device;
    if (!k.fits && l.pp > 1 && !l.ckpt) {
        l.ckpt = 1;
        try_layout(pf, c, l, s, cap);
        if (s->n && s->c[s->n - 1].fits && s->c[s->n - 1].l.ckpt) return;  // the checkpointed one fits
    }
    push(s, cap, &k);
}

// The methods --auto tries on a ddp row (one replica per rank, no ZeRO, tp or ep): a few of each, priced from the
// profile's links as the crossover line prices them (planner/predict.c rank_tail).
static const struct { int compress; double arg; int H; } methods[] = {
    {COMPRESS_POWERSGD, 1, 0}, {COMPRESS_POWERSGD, 4, 0}, {COMPRESS_POWERSGD, 16, 0}, {COMPRESS_SIGN, 0, 0},
    {COMPRESS_TOPK, 0.01, 0},  {COMPRESS_TOPK, 0.1, 0},   {COMPRESS_NONE, 0, 4},      {COMPRESS_NONE, 0, 16}};

static int method_row(const Layout *l) { return l->pp == 1 && l->tp == 1 && l->zero == 0 && l->dp > 1 && l->ep <= 1; }

// Layout l (a ddp row) with each method: those --methods lists, else (--auto's default) each whose step is at
// least METHOD_GAIN below exact_s, the same layout's with the exact sum (0: none priced).
static void try_methods(const Profile *pf, const TrainConfig *c, Layout l, double exact_s, Search *s, int *cap) {
    if (!want || !(want->methods || want->try_methods) || !method_row(&l)) return;
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        int kind = methods[i].H ? METHOD_SYNC_EVERY : methods[i].compress;
        if (want->methods && !(want->methods >> kind & 1)) continue;
        l.compress = methods[i].compress, l.compress_arg = methods[i].arg, l.sync_every = methods[i].H;
        Candidate k = {.l = l};
        char why[PATH_LEN + 200];
        s->n_tried++;
        if (predict_step(pf, c, &l, &k.pr, why, sizeof why)) continue;  // (R above the width, --sync-every's rules)
        k.fits = k.pr.memory <= s->device;
        if (!want->methods && !(exact_s > 0 && k.pr.step_s <= (1 - METHOD_GAIN) * exact_s)) continue;
        push(s, cap, &k);
    }
}

unsigned auto_parse_methods(const char *list, char *why, size_t n) {
    char copy[PATH_LEN], name[32], *save = NULL;
    unsigned bits = 0;
    snprintf(copy, sizeof copy, "%s", list);
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        int m = 0;
        while (m <= METHOD_SYNC_EVERY && strcmp(w, choice_name(METHOD_NAMES, m, name, sizeof name))) m++;
        if (m > METHOD_SYNC_EVERY) {
            snprintf(why, n, "--methods '%s': '%s' is no method: give a comma list of " METHOD_NAMES, list, w);
            return 0;
        }
        bits |= 1u << m;
    }
    if (!bits) snprintf(why, n, "--methods '%s' names none: give a comma list of " METHOD_NAMES, list);
    return bits;
}

// The expert degrees tried (MoE models): none, and every N >= 2 dividing both dp and the experts; on a ddp row
// the exact sum (unless --methods leaves it out), then the methods.
static void try_experts(const Profile *pf, const TrainConfig *c, Layout l, Search *s, int *cap) {
    for (int N = 1; N <= l.dp; N++) {
        if (N > 1 && (l.dp % N || !c->moe.experts || c->moe.experts % N)) continue;
        l.ep = N;
        int before = s->n;
        if (!(want && want->methods && !(want->methods & 1 << METHOD_EXACT) && method_row(&l)))
            try_layout(pf, c, l, s, cap);
        try_methods(pf, c, l, s->n > before ? s->c[s->n - 1].pr.step_s : 0, s, cap);
    }
}

// The ZeRO levels tried with dp replicas of width T: none without replicas; 1 where there are
// optimizer moments to shard; 2 and 3 wherever there are replicas (with --tp too). One after another:
// the levels' pipelines simulate alike (predict.c keeps the last simulations).
static void try_zeros(const Profile *pf, const TrainConfig *c, Layout l, Search *s, int *cap) {
    for (int z = 0; z <= 3; z++) {
        if (z && (l.dp == 1 || (z == 1 && c->optimizer == OPTIM_SGD))) continue;
        if (want && !listed(want->zero, want->n_zero, z)) continue;
        l.zero = z;
        try_experts(pf, c, l, s, cap);
    }
}

static void try_pipeline(const Profile *pf, const TrainConfig *c, Layout l, Search *s, int *cap) {
    long long per_replica = c->batch / l.dp;
    int ms[MAX_M_STEPS + 1], n_m = 0;
    for (int i = 0; i < MAX_M_STEPS && !(want && want->M); i++) ms[n_m++] = l.pp << i;
    if (want && want->M) ms[n_m++] = want->M;
    else if (c->pipe.micro_batches >= 1) ms[n_m++] = (int)c->pipe.micro_batches;
    for (int a = 0; a < n_m; a++) {
        int M = ms[a], dup = 0;
        for (int b = 0; b < a; b++) dup |= ms[b] == M;
        if (dup || M < 1 || per_replica % M) continue;
        for (int k = 0; k < SCHED_KINDS; k++) {  // the kinds the table marks searched (and their chunks)
            if (want && want->schedules ? !(want->schedules >> k & 1) : !schedule_kind(k)->searched) continue;
            l.schedule = k;
            l.M = M;
            l.v = schedule_chunks(k, 2, NULL);
            if (schedule_check(l.schedule, l.pp, M, l.v) || (double)l.pp * l.v * M > SCHEDULE_MAX_SIM) continue;
            if ((long long)l.pp * l.v > c->layers) continue;
            try_zeros(pf, c, l, s, cap);
        }
    }
}

static int by_step(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    return (x->pr.step_s > y->pr.step_s) - (x->pr.step_s < y->pr.step_s);
}

// The tensor-parallel widths a world may use: T divides the world and the hidden width, and a group
// stays on one node (a machine file's devices_per_node; a calibration's world, which it measured on one).
static int tp_widths(const Profile *pf, const TrainConfig *c, int world, int *ts) {
    int node = pf->calibrated ? pf->world : pf->devices_per_node, n = 0;
    for (int T = 1; T <= world && T <= node && n < 16; T++)
        if (world % T == 0 && c->hidden % T == 0 && (!want || listed(want->tp, want->n_tp, T))) ts[n++] = T;
    return n;
}

// Layout v priced into k when it fits and is faster than k (the refinement kept): 1, else 0.
static int better(const Profile *pf, const TrainConfig *c, const Layout *v, Search *s, Candidate *k) {
    Candidate t = {.l = *v};
    char why[PATH_LEN + 200];
    s->n_tried++;
    if (predict_step(pf, c, v, &t.pr, why, sizeof why) || t.pr.memory > s->device || t.pr.step_s >= k->pr.step_s)
        return 0;
    t.fits = 1;
    *k = t;
    return 1;
}

// The second pass: what the first leaves at train's defaults, varied on each of the REFINED fastest
// layouts that fit, one choice after another, each kept where it is faster: the partition balanced by
// cost (predict_balance), the placement of a hybrid's groups on a machine file's nodes, the bucket size
// of a data-parallel sync. A refined layout joins the ranking beside the one it came from.
static void auto_refine(const Profile *pf, const TrainConfig *c, Search *s, int *cap) {
    static const double bucket_mb[] = {4, 25, 100, 400, 1600};
    int n = s->n;
    for (int i = 0, done = 0; i < n && done < REFINED; i++) {
        if (!s->c[i].fits) continue;
        done++;
        Candidate k = s->c[i];
        Layout v = k.l;
        int kept = 0;
        if (v.pp > 1 && !predict_balance(pf, c, &v, v.partition, sizeof v.partition)) kept |= better(pf, c, &v, s, &k);
        for (int pl = PLACEMENT_STAGES; !pf->calibrated && k.l.pp > 1 && k.l.dp > 1 && pl <= PLACEMENT_REPLICAS; pl++) {
            v = k.l;
            v.placement = pl;
            kept |= better(pf, c, &v, s, &k);
        }
        for (size_t b = 0; k.l.dp > 1 && b < sizeof bucket_mb / sizeof *bucket_mb; b++) {
            v = k.l;
            v.bucket_mb = bucket_mb[b];
            kept |= better(pf, c, &v, s, &k);
        }
        if (kept) push(s, cap, &k);
    }
}

void auto_search(const Profile *pf, const TrainConfig *c, int world, double device, Search *s) {
    auto_search_in(pf, c, world, device, NULL, s);
}

void auto_search_in(const Profile *pf, const TrainConfig *c, int world, double device, const Constraint *k,
                    Search *s) {
    double t0 = now_sec();
    want = k;
    int cap = 0, ts[16], n_t = tp_widths(pf, c, world, ts);
    memset(s, 0, sizeof *s);
    s->device = device;
    for (int it = 0; it < n_t; it++) {
        int T = ts[it], groups = world / T;
        for (int pp = 1; pp <= groups && pp <= MAX_STAGES && pp <= c->layers; pp++) {
            if (groups % pp || (want && !listed(want->pp, want->n_pp, pp))) continue;
            int dp = groups / pp;
            if (c->batch % dp) continue;
            for (int prec = 0; prec < COST_PRECISIONS; prec++) {
                if (!pf->has_precision[prec] || (want && want->precision && want->precision != prec + 1)) continue;
                Layout l = {.pp = pp, .dp = dp, .tp = T, .v = 1, .M = 1, .precision = prec, .schedule = SCHED_1F1B};
                if (pp == 1) try_zeros(pf, c, l, s, &cap);
                else try_pipeline(pf, c, l, s, &cap);
            }
        }
    }
    qsort(s->c, (size_t)s->n, sizeof(Candidate), by_step);
    auto_refine(pf, c, s, &cap);
    qsort(s->c, (size_t)s->n, sizeof(Candidate), by_step);
    for (int i = 0; i < s->n; i++) s->n_fit += s->c[i].fits;
    s->seconds = now_sec() - t0;
    want = NULL;
}

int auto_layers_divisible(int layers, int world, char *said, size_t n) {
    int best = 1, most = layers < MAX_STAGES ? layers : MAX_STAGES;
    said[0] = 0;
    for (int d = 2; d <= world && d <= most; d++) {  // (the pipeline degrees of this world: its divisors)
        if (world % d) continue;
        int L = (int)lround((double)layers / d) * d;
        if (L >= d && abs(L - layers) <= SHAPE_SLACK * layers) best = d;
    }
    int L = (int)lround((double)layers / best) * best;
    if (L != layers)
        snprintf(said, n, "; rounded from %d to %d layers, a multiple of %d that the pipelines of this world divide: "
                 "%.1f%% %s parameters", layers, L, best, 100.0 * abs(L - layers) / layers,
                 L < layers ? "fewer" : "more");
    return L;
}

void auto_free(Search *s) { free(s->c); memset(s, 0, sizeof *s); }

static const char *gib(double b, char *buf, size_t n) {
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    return buf;
}

const char *auto_family(const Layout *l) { return family_names[layout_family(l->pp, l->dp, l->tp)]; }

void auto_print(FILE *f, const Search *s, int top, int by_family) {
    char name[96], mem[32];
    const char *seen[8];
    int n_seen = 0;
    fprintf(f, "%4s  %-36s %5s %5s %3s %10s %10s %12s %7s %6s %6s\n", "rank", "layout", "pp", "dp", "tp", "step(ms)",
            "samples/s", "mem/rank", "bubble", "comm", "MFU");
    int shown = 0;
    for (int i = 0; i < s->n && shown < top; i++) {
        const Candidate *k = &s->c[i];
        if (!k->fits && s->n_fit) break;
        int dup = 0;  // (--by family: the first of each)
        for (int j = 0; by_family && j < n_seen; j++) dup |= !strcmp(seen[j], auto_family(&k->l));
        if (dup) continue;
        if (by_family && n_seen < 8) seen[n_seen++] = auto_family(&k->l);
        fprintf(f, "%4d  %-36s %5d %5d %3d %10.2f %10.1f %12s %7.3f %5.0f%% %5.1f%%%s\n", i + 1,
                layout_name(&k->l, name, sizeof name), k->l.pp, k->l.dp, k->l.tp, k->pr.step_s * 1e3, k->pr.samples_s,
                gib(k->pr.memory, mem, sizeof mem), k->pr.bubble, 100 * k->pr.comm_s / k->pr.step_s, 100 * k->pr.mfu,
                k->fits ? "" : "  (does not fit)");
        shown++;
    }
}

// The options the search chooses: typed beside --auto they would be overruled.
static const char *const searched[] = {"mode", "pp", "dp", "tp", "schedule", "schedule-file", "micro-batches",
                                       "virtual-stages", "checkpoint-activations", "precision", "zero", "partition",
                                       "grad-accum"};

int auto_pick(TrainConfig *c, const OptionsSeen *seen, int world, double device, Candidate *best, char *err,
              size_t n) {
    err[0] = 0;
    if (!c->auto_layout) return 0;  // (a --profile alone prices the layout as given: price_layout)
    for (size_t i = 0; i < sizeof searched / sizeof *searched; i++)
        if (seen_typed(seen, searched[i])) {
            snprintf(err, n, "train: --auto chooses --%s itself: drop it, or drop --auto to run your layout",
                     searched[i]);
            return -1;
        }
    if (!c->profile[0]) {
        snprintf(err, n, "train: --auto needs the costs of this machine: --profile FILE, written by mpiexec -n %d "
                 "micropp plan --calibrate --config ... --out FILE", world);
        return -1;
    }
    Profile *pf = malloc(sizeof *pf);
    char why[PATH_LEN + 400];
    int rc = pf ? cost_load(c->profile, pf, why, sizeof why) : -1;
    if (rc) snprintf(err, n, "train: --profile %s", pf ? why : "out of memory");
    else if (!pf->calibrated)
        rc = -1, snprintf(err, n, "train: --profile '%s' is a machine file: --auto runs on this machine, give it the "
                          "profile plan --calibrate measured here", c->profile);
    else if (cost_fits_model(pf, c, why, sizeof why)) rc = -1, snprintf(err, n, "train: %s", why);
    if (rc) {
        free(pf);
        return -1;
    }
    Search s;  // (the methods as plan --auto tries them, unless the user chose one: the same pick as its best)
    Constraint k = {.try_methods = !c->ddp.compress[0] && !c->ddp.sync_every};
    auto_search_in(pf, c, world, device, &k, &s);
    if (!s.n_fit) {
        snprintf(err, n, "train: --auto found no layout of %d ranks that %s: %s", world,
                 s.n ? "fits this machine's memory" : "this model's --batch divides",
                 s.n ? "try more ranks or a smaller --batch" : "give a --batch the ranks divide");
        rc = -1;
    } else {
        *best = s.c[0];
        Degrees d;  // (train takes them from best: layout_degrees)
        layout_apply(&best->l, c, &d);
    }
    auto_free(&s);
    free(pf);
    return rc;
}

const char *auto_numerics(const Layout *l, const TrainConfig *c, char *out, size_t n) {
    out[0] = 0;
    char a[48];
    if (l->precision != c->precision) {
        char b[16];
        snprintf(out, n, "  # %s changes the numerics from the model's %s: --precision %s keeps them",
                 choice_name(PRECISION_CHOICES, l->precision, a, sizeof a),
                 choice_name(PRECISION_CHOICES, c->precision, b, sizeof b), b);
    }
    size_t k = strlen(out);
    if ((l->compress || l->sync_every) && k < n)
        snprintf(out + k, n - k, "%s --%s%s changes the numerics from ddp's exact sum: --methods exact keeps it out",
                 k ? ";" : "  #", l->compress ? "compress " : "", layout_method(l, a, sizeof a));
    return out;
}

struct cJSON *auto_row_json(const Candidate *k, const char *command) {
    cJSON *r = cJSON_CreateObject();
    char name[96], sched[32];
    cJSON_AddStringToObject(r, "layout", layout_name(&k->l, name, sizeof name));
    cJSON_AddNumberToObject(r, "pp", k->l.pp);
    cJSON_AddNumberToObject(r, "dp", k->l.dp);
    cJSON_AddNumberToObject(r, "tp", k->l.tp);
    cJSON_AddStringToObject(r, "schedule", k->l.pp > 1 ? choice_name(SCHED_NAMES, k->l.schedule, sched, 32) : "none");
    cJSON_AddNumberToObject(r, "micro_batches", k->l.M);
    cJSON_AddNumberToObject(r, "virtual_stages", k->l.v);
    cJSON_AddNumberToObject(r, "zero", k->l.zero);
    if (k->l.ep > 1) cJSON_AddNumberToObject(r, "ep", k->l.ep);
    cJSON_AddBoolToObject(r, "checkpoint_activations", k->l.ckpt);
    cJSON_AddStringToObject(r, "precision", k->l.precision == PRECISION_BF16 ? "bf16" : "fp32");
    if (k->l.compress) {  // (the ddp rows' method)
        char m[48];
        cJSON_AddStringToObject(r, "compress", layout_method(&k->l, m, sizeof m));
    }
    if (k->l.sync_every) cJSON_AddNumberToObject(r, "sync_every", k->l.sync_every);
    cJSON_AddNumberToObject(r, "step_s", k->pr.step_s);
    cJSON_AddNumberToObject(r, "samples_s", k->pr.samples_s);
    cJSON_AddNumberToObject(r, "memory_bytes", k->pr.memory);
    cJSON_AddNumberToObject(r, "bubble", k->pr.bubble);
    cJSON_AddNumberToObject(r, "comm_share", k->pr.comm_s / k->pr.step_s);
    cJSON_AddNumberToObject(r, "mfu", k->pr.mfu);
    cJSON_AddStringToObject(r, "family", auto_family(&k->l));
    cJSON_AddBoolToObject(r, "fits", k->fits);
    cJSON_AddStringToObject(r, "command", command);
    return r;
}

struct cJSON *auto_json(const Search *s, const TrainConfig *c, const char *config, int model_flags) {
    cJSON *o = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    char cmd[2 * PATH_LEN + 400];
    cJSON_AddNumberToObject(o, "device_bytes", s->device);
    cJSON_AddNumberToObject(o, "tried", s->n_tried);
    cJSON_AddNumberToObject(o, "fit", s->n_fit);
    cJSON_AddNumberToObject(o, "search_s", s->seconds);
    for (int i = 0; i < s->n; i++) {
        layout_command(&s->c[i].l, c, config, model_flags, cmd, sizeof cmd);
        cJSON_AddItemToArray(rows, auto_row_json(&s->c[i], cmd));
    }
    cJSON_AddItemToObject(o, "layouts", rows);
    return o;
}
