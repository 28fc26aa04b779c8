// planner/price.c: one layout priced as its options describe it (planner/price.h): the degrees and every
// option train takes (schedule, micro-batches, checkpointing, precision, ZeRO, --partition, --placement,
// --bucket-mb) through predict_config, the same prediction --auto gives the layout when it searches it; the
// row, its parts and memory for `plan --profile/--machine` without --auto, and for `train --profile`.
#include <string.h>
#include <cjson/cJSON.h>
#include "base/ops.h"
#include "base/util.h"
#include "comms.h"
#include "planner/cache.h"
#include "planner/memory.h"
#include "planner/price.h"
#include "axes/data.h"  // COMPRESS_*

Layout layout_of(const TrainConfig *c, const Degrees *d) {
    int pipe = d->pp > 1;
    return (Layout){.pp = d->pp,
                    .dp = d->dp,
                    .tp = d->tp,
                    .zero = d->dp > 1 ? d->zero : 0,
                    .ep = d->ep,
                    .schedule = pipe ? c->pipe.schedule : SCHED_1F1B,
                    .v = pipe ? schedule_chunks(c->pipe.schedule, (int)c->pipe.virtual_stages, NULL) : 1,
                    .M = pipe ? (int)c->pipe.micro_batches : 1,
                    .ckpt = pipe && c->pipe.checkpoint_activations,
                    .precision = c->precision};
}

int price_degrees(TrainConfig *c, const OptionsSeen *seen, int world, const char *const lists[3], Degrees *d,
                  char *err, size_t n) {
    static const char *const flag[3] = {"dp", "zero", "schedule"},
                             *what[3] = {"number of replicas", "ZeRO level, 0 to 3", "schedule of " SCHED_CHOICES};
    for (int i = 0; i < 3; i++) {
        int v[2], k = !lists[i][0] ? 0 : i == 2 ? schedule_parse_list(lists[i], v, 2, err, n)
                                                : parse_int_list(lists[i], v, 2);
        if (lists[i][0] && (k != 1 || v[0] < (i == 0) || (i == 1 && v[0] > 3)))
            return snprintf(err, n, "--%s '%s': one layout takes one %s", flag[i], lists[i], what[i]), -1;
        if (k == 1 && i == 0) c->grid.dp = v[0];
        if (k == 1 && i == 1) c->ddp.zero = v[0];
        if (k == 1 && i == 2) c->pipe.schedule = v[0];
    }
    if (degrees_resolve(c, seen, world, d, err, n) || degrees_check_flags(d, seen, err, n)) {
        if (!strncmp(err, "train: ", 7)) memmove(err, err + 7, strlen(err + 7) + 1);
        return -1;
    }
    return 0;
}

int price_layout(const char *path, int measured_only, const TrainConfig *c, const Degrees *d, double *device,
                 Candidate *k, char *source, char *err, size_t n) {
    Profile *pf = xmalloc(sizeof *pf);
    char why[PATH_LEN + 400];
    int rc = cost_load(path, pf, why, sizeof why);
    if (rc) snprintf(err, n, "%s", why);
    else if (measured_only && !pf->calibrated)
        rc = -1, snprintf(err, n, "'%s' is a machine file: a run on this machine is priced by the profile plan "
                          "--calibrate measured here", path);
    else if (cost_fits_model(pf, c, why, sizeof why)) rc = -1, snprintf(err, n, "%s", why);
    else if (d->manual || c->grad_accum > 1 || c->pipe.schedule_file[0])  // (what predict_config does not model)
        rc = -1, snprintf(err, n, "prices layouts over ranks, one micro-step a step, from a schedule kind: drop %s, or "
                          "drop --profile", d->manual ? "--mode manual" : c->grad_accum > 1 ? "--grad-accum" :
                          "--schedule-file");
    if (source) snprintf(source, sizeof pf->source, "%s", rc ? "" : pf->source);
    memset(k, 0, sizeof *k);
    k->l = layout_of(c, d);
    if (!rc && predict_config(pf, c, d, &k->pr, why, sizeof why)) {
        char name[96];
        rc = -1, snprintf(err, n, "%s cannot be priced: %s", layout_name(&k->l, name, sizeof name), why);
    }
    if (!*device) *device = pf->device_memory;  // (a machine file's device; 0 for a profile)
    k->fits = !*device || k->pr.memory <= *device;
    free(pf);
    return rc;
}

static void price_foreign(FILE *f, const char *path, const TrainConfig *c, int world) {
    Profile *pf = xmalloc(sizeof *pf);
    char why[PATH_LEN + 400], out[PATH_LEN + 600] = "";
    if (!cost_load(path, pf, why, sizeof why)) cache_foreign(pf->source, c, world, out, sizeof out);
    fputs(out, f);
    free(pf);
}

static void print_parts(const Candidate *k, double device) {
    const Prediction *p = &k->pr;
    char b[32], m[32];
    double idle = p->step_s - p->compute_s - p->msgs_s - p->coll_s - p->fixed_s;
    printf("parts (ms): compute %.2f (of it data %.2f, optimizer %.2f), idle %.2f, messages %.2f, collectives %.2f, "
           "fixed %.2f\n", p->compute_s * 1e3, p->data_s * 1e3, p->opt_s * 1e3, (idle > 0 ? idle : 0) * 1e3,
           p->msgs_s * 1e3, p->coll_s * 1e3, p->fixed_s * 1e3);
    printf("memory: %s on the rank that needs most (stage %d): %s %s per rank\n",
           fmt_bytes_binary(p->memory, m, sizeof m), p->worst_stage, k->fits ? "fits" : "does not fit",
           fmt_bytes_binary(device, b, sizeof b));
}

// The parts of a predicted step, in ms: compute (of it data, optimizer), idle, messages, collectives, fixed.
#define PARTS 7
static void parts_ms(const Prediction *p, double *v) {
    double idle = p->step_s - p->compute_s - p->msgs_s - p->coll_s - p->fixed_s;
    const double s[PARTS] = {p->compute_s, p->data_s, p->opt_s, idle > 0 ? idle : 0, p->msgs_s, p->coll_s, p->fixed_s};
    for (int i = 0; i < PARTS; i++) v[i] = s[i] * 1e3;
}

void price_explain(FILE *f, const Search *s, int a, int b) {
    static const char *const name[PARTS] = {"compute", "  of it data", "  of it optimizer", "idle (bubble, waits)",
                                             "messages", "collectives", "fixed"};
    const Candidate *x = &s->c[a - 1], *y = &s->c[b - 1];
    double u[PARTS], v[PARTS];
    char n1[96], n2[96];
    parts_ms(&x->pr, u);
    parts_ms(&y->pr, v);
    fprintf(f, "explain: rank %d (%s) against rank %d (%s), ms a step:\n", a, layout_name(&x->l, n1, sizeof n1), b,
            layout_name(&y->l, n2, sizeof n2));
    fprintf(f, "%-22s %10s %10s %10s\n", "part", "rank A", "rank B", "B - A");
    for (int i = 0; i < PARTS; i++) fprintf(f, "%-22s %10.2f %10.2f %+10.2f\n", name[i], u[i], v[i], v[i] - u[i]);
    fprintf(f, "%-22s %10.2f %10.2f %+10.2f\n", "step", x->pr.step_s * 1e3, y->pr.step_s * 1e3,
            (y->pr.step_s - x->pr.step_s) * 1e3);
}

static cJSON *parts_json(const Candidate *k, double device, const char *command) {
    cJSON *o = auto_row_json(k, command), *parts = cJSON_AddObjectToObject(o, "parts_ms");
    const Prediction *p = &k->pr;
    double idle = p->step_s - p->compute_s - p->msgs_s - p->coll_s - p->fixed_s;
    cJSON_AddNumberToObject(parts, "compute", p->compute_s * 1e3);
    cJSON_AddNumberToObject(parts, "data", p->data_s * 1e3);
    cJSON_AddNumberToObject(parts, "optimizer", p->opt_s * 1e3);
    cJSON_AddNumberToObject(parts, "idle", (idle > 0 ? idle : 0) * 1e3);
    cJSON_AddNumberToObject(parts, "messages", p->msgs_s * 1e3);
    cJSON_AddNumberToObject(parts, "collectives", p->coll_s * 1e3);
    cJSON_AddNumberToObject(parts, "fixed", p->fixed_s * 1e3);
    cJSON_AddNumberToObject(o, "device_bytes", device);
    cJSON_AddNumberToObject(o, "worst_stage", p->worst_stage);
    return o;
}

// A ddp layout's crossover (predict_crossover) for the method it runs (--compress, --sync-every): the link below
// which the method's step beats the same layout's ddp step. Nothing for other layouts.
static void print_crossover(const char *path, const TrainConfig *c, const Degrees *d) {
    if (d->pp > 1 || d->dp < 2 || d->zero || (!c->ddp.compress[0] && !c->ddp.sync_every)) return;
    double arg = (double)c->ddp.sync_every, bw;
    int method = c->ddp.sync_every ? COMPRESS_NONE : data_compress_parse(c->ddp.compress, &arg);
    char why[PATH_LEN + 400];
    Profile *pf = xmalloc(sizeof *pf);
    int rc = cost_load(path, pf, why, sizeof why) || predict_crossover(pf, c, d, method, arg, &bw, why, sizeof why);
    free(pf);
    if (c->ddp.sync_every) printf("crossover: --sync-every %lld beats ddp ", (long long)c->ddp.sync_every);
    else printf("crossover: --compress %s beats ddp ", c->ddp.compress);
    if (rc) printf("nowhere priced (%s)\n", why);
    else if (isinf(bw)) printf("at every link bandwidth (its accuracy not priced)\n");
    else if (bw <= 0) printf("at no link bandwidth\n");
    else printf("on links below %.3g Gb/s a rank (its host work priced, its accuracy not)\n", bw * 8 / 1e9);
}

int price_plan(const TrainConfig *c, const Degrees *d, const PriceAsk *ask, char *err, size_t n) {
    Candidate k;
    char source[sizeof ((Profile *)0)->source], cmd[3 * PATH_LEN + 400];
    double device = ask->device;
    if (price_layout(ask->path, ask->measured, c, d, &device, &k, source, err, n)) return -1;
    if (!device) device = memory_available() / (double)ask->world;
    k.fits = k.pr.memory <= device;
    layout_command(&k.l, c, c->config, ask->model_flags, cmd, sizeof cmd);
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), "%s", ask->extra);
    if (c->ddp.compress[0])
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " --compress %.*s", 64, c->ddp.compress);
    if (c->ddp.sync_every)
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " --sync-every %lld", (long long)c->ddp.sync_every);
    if (c->json) {
        cJSON *o = parts_json(&k, device, cmd);
        cJSON_AddNumberToObject(o, "world", ask->world);
        cJSON_AddStringToObject(o, "costs", source);
        json_print(o);
        return 0;
    }
    Search s = {.c = &k, .n = 1, .n_fit = k.fits};
    printf("# micropp plan | %lld layers, hidden %lld, inputs %lld, classes %lld | batch %lld | %d ranks\n",
           (long long)c->layers, (long long)c->hidden, (long long)(c->inputs ? c->inputs : c->hidden),
           (long long)c->classes, (long long)c->batch, ask->world);
    printf("# costs: %s\n", source);
    char foreign[PATH_LEN + 600];
    cache_foreign(source, c, ask->world, foreign, sizeof foreign);
    fputs(foreign, stdout);
    auto_print(stdout, &s, 1, 0);
    print_parts(&k, device);
    print_crossover(ask->path, c, d);
    printf("run: %s\n", cmd);
    return 0;
}

// The prediction of the run's layout for the summary: --auto's pick, or --profile's price of the layout as given
// (one it cannot price ends every rank); a profile of another machine named in plan's warning line.
void price_train_run(const TrainConfig *cfg, const Degrees *deg, Candidate *pick, AutoPick *out) {
    if (!cfg->auto_layout && cfg->profile[0]) {  // the layout as given, priced by the profile
        double device = 0;
        char why[PATH_LEN + 600], msg[PATH_LEN + 640];
        int rc = price_layout(cfg->profile, 1, cfg, deg, &device, pick, NULL, why, sizeof why);
        snprintf(msg, sizeof msg, "train: --profile %s", why);
        agree_on_error(rc ? msg : NULL);
    }
    if (cfg->auto_layout || cfg->profile[0]) {  // (the summary reports the prediction beside the measured step)
        out->step_ms = pick->pr.step_s * 1e3;
        out->picked = cfg->auto_layout;
        out->peak_flops = cfg->profile[0] ? pick->pr.peak : 0;
        layout_name(&pick->l, out->layout, sizeof out->layout);
    }
    if (cfg->profile[0] && !cfg->json && comm_world_rank() == 0)
        price_foreign(stdout, cfg->profile, cfg, comm_world_size());
}
