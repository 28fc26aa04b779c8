// planner/cost.c: the cost model's figures (planner/cost.h): a Profile read from a calibration's JSON or
// from a machine file, written back as JSON, and the price of each piece of a step: a layer's pass
// at some rows, a message, a collective among D ranks, the optimizer. Calibrated figures are looked
// up in their measured curves; a machine file's are computed from its devices and links (a roofline
// for the passes, rings for the collectives).
#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "base/ops.h"
#include "base/safetensors.h"  // read_file
#include "base/util.h"
#include "comms.h"
#include "model.h"
#include "planner/cost.h"

static const char *const pass_key[PASSES] = {"F", "B", "I", "W"};
static const char *const kind_key[LAYER_KINDS] = {"mid", "first", "head"};
static const char *const prec_key[COST_PRECISIONS] = {"fp32", "bf16"};
const char *const family_names[FAMILIES] = {"pipeline", "hybrid", "ddp", "tp", "monolith"};
static const char *const coll_key[COLLS] = {"allreduce", "reduce_scatter", "allgather"};

double cost_curve_at(const Curve *c, double x) {
    if (c->n <= 0) return 0;
    if (c->n == 1 || x <= c->x[0]) return c->s[0];
    int i = 1;
    while (i < c->n - 1 && x > c->x[i]) i++;
    double a = c->x[i - 1], b = c->x[i], t = c->s[i - 1] + (c->s[i] - c->s[i - 1]) * (x - a) / (b - a);
    return t > 0 ? t : 0;
}

void cost_monotone(Curve *c) {
    for (int i = c->n - 2; i >= 0; i--)
        if (c->s[i] > c->s[i + 1]) c->s[i] = c->s[i + 1];
}

// ---- the prices ----

// A machine file's pass: the larger of the gemm's FLOPs at the device's sustained rate and the bytes
// it moves at the memory's bandwidth (a roofline), plus the element-wise passes and the launches.
static double roofline(const Profile *pf, int precision, double rows, double in, double out, int gemms) {
    double elem = precision == PRECISION_BF16 ? 2 : 4, flops = 2 * rows * in * out,
           bytes = (rows * in + in * out + rows * out) * elem;
    double t = fmax(flops / (pf->flops[precision] * pf->gemm_efficiency), bytes / pf->mem_bw);
    return gemms * t;
}
static double machine_layer(const Profile *pf, int kind, int pass, int prec, double rows, double in, double out) {
    int dx = kind != LAYER_FIRST;  // the model's first layer computes no input gradient
    double act = rows * out * 4 / pf->mem_bw;  // one fp32 pass over the layer's output
    double f = roofline(pf, prec, rows, in, out, 1) + 2 * act + 2 * pf->launch_s;
    double i = (dx ? roofline(pf, prec, rows, in, out, 1) : 0) + 3 * act + 2 * pf->launch_s;
    double w = roofline(pf, prec, rows, in, out, 1) + act + 2 * pf->launch_s;
    return pass == PASS_F ? f : pass == PASS_I ? i : pass == PASS_W ? w : i + w;
}

double cost_layer(const Profile *pf, int kind, int pass, int precision, double rows, double in, double out) {
    if (!pf->calibrated) return machine_layer(pf, kind, pass, precision, rows, in, out);
    return cost_curve_at(&pf->layer[precision][kind][pass], rows);
}

double cost_p2p(const Profile *pf, double bytes, int intra) {
    if (pf->calibrated) return cost_curve_at(&pf->p2p, bytes);
    return intra ? pf->intra_lat + bytes / pf->intra_bw : pf->inter_lat + bytes / pf->inter_bw;
}

double cost_moe(const Profile *pf, int pass, int precision, int rows, int H, const MoeSpec *m, int ep) {
    if (pass == PASS_W) return 0;
    int ps = pass == PASS_I ? PASS_B : pass, N = ep > 1 ? ep : 1, cap = moe_capacity(m, rows);
    double E = m->experts, most = N * (double)(cap < rows ? cap : rows);  // rows one of my experts takes at most
    double router = pf->calibrated ? cost_layer(pf, LAYER_MID, ps, precision, (double)rows * E / H, H, H)
                                   : cost_layer(pf, LAYER_MID, ps, precision, rows, H, E);
    return router + E / N * cost_layer(pf, LAYER_MID, ps, precision, most, H, H);
}

double cost_alltoall(const Profile *pf, int N, double bytes, int intra) {
    return N > 1 ? (N - 1) * cost_p2p(pf, bytes / N, intra) : 0;
}

// A machine file's collectives are rings over the slowest link: an all-reduce moves 2(D-1)/D of the
// buffer through every rank's link in 2(D-1) steps, a reduce-scatter or all-gather half of that. Across
// nodes the ring's slowest link is a node's way out: `local` rings side by side, each leaving by its own
// device's NIC (a group with one member per node has one), at most NVLink's rate inside.
double cost_collective(const Profile *pf, int op, int algo, int D, double bytes, int local) {
    if (D <= 1) return 0;
    if (pf->calibrated) return D <= COST_MAX_D ? cost_curve_at(&pf->coll[algo][op][D], bytes) : -1;
    int intra = local >= D, nics = local < 1 ? 1 : local;
    double steps = (op == COLL_ALLREDUCE ? 2.0 : 1.0) * (D - 1),
           bw = intra ? pf->intra_bw : fmin(pf->intra_bw, nics * pf->inter_bw),
           lat = intra ? pf->intra_lat : pf->inter_lat;
    return steps * (lat + bytes / D / bw);
}

double cost_coll_wait(const Profile *pf, double n, double compute) {
    return n > 0 ? n * pf->wait.entry_s + pf->wait.drift * compute : 0;
}

double cost_overlap(const Profile *pf, int algo) { return pf->calibrated ? pf->overlap[algo] : pf->machine_overlap; }

// Adam reads a parameter, its gradient and two moments and writes three of them (28 bytes); SGD 12.
double cost_optimizer(const Profile *pf, int optimizer, double params) {
    if (pf->calibrated) return params * (optimizer == OPTIM_SGD ? pf->sgd_s : pf->adam_s);
    return params * (optimizer == OPTIM_SGD ? 12 : 28) / pf->mem_bw + pf->launch_s;
}

const char *cost_fits_model(const Profile *pf, const TrainConfig *c, char *why, size_t n) {
    int inputs = (int)(c->inputs ? c->inputs : c->hidden);
    if (!pf->calibrated) return NULL;
    if (pf->hidden == c->hidden && pf->inputs == inputs && pf->classes == c->classes) return why[0] = 0, NULL;
    snprintf(why, n,
             "the profile '%s' measured layers of hidden %d, inputs %d, classes %d, and this model has %lld, %d, "
             "%lld: calibrate with this model's options (micropp plan --calibrate --config ...)",
             pf->file, pf->hidden, pf->inputs, pf->classes, (long long)c->hidden, inputs, (long long)c->classes);
    return why;
}

// ---- JSON ----

static cJSON *curve_json(const Curve *c, const char *xkey) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, xkey, cJSON_CreateDoubleArray(c->x, c->n));
    cJSON_AddItemToObject(o, "s", cJSON_CreateDoubleArray(c->s, c->n));
    return o;
}

static void layers_json(cJSON *o, const Profile *pf) {
    cJSON *layers = cJSON_AddObjectToObject(o, "layers");
    for (int p = 0; p < COST_PRECISIONS; p++) {
        if (!pf->has_precision[p]) continue;
        cJSON *pp = cJSON_AddObjectToObject(layers, prec_key[p]);
        for (int k = 0; k < LAYER_KINDS; k++) {
            const Curve *c0 = &pf->layer[p][k][0];
            cJSON *kk = cJSON_AddObjectToObject(pp, kind_key[k]);
            cJSON_AddItemToObject(kk, "rows", cJSON_CreateDoubleArray(c0->x, c0->n));
            for (int q = 0; q < PASSES; q++)
                cJSON_AddItemToObject(kk, pass_key[q], cJSON_CreateDoubleArray(pf->layer[p][k][q].s, c0->n));
        }
    }
}

char *cost_to_json(const Profile *pf) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "micropp_profile", 1);
    cJSON_AddStringToObject(o, "source", pf->source);
    cJSON_AddNumberToObject(o, "world", pf->world);
    cJSON_AddNumberToObject(o, "threads", pf->threads);
    cJSON_AddNumberToObject(o, "hidden", pf->hidden);
    cJSON_AddNumberToObject(o, "inputs", pf->inputs);
    cJSON_AddNumberToObject(o, "classes", pf->classes);
    layers_json(o, pf);
    cJSON_AddNumberToObject(o, "data_s_per_value", pf->data_s_per_value);
    cJSON_AddNumberToObject(o, "label_s_per_value", pf->label_s_per_value);
    cJSON_AddNumberToObject(o, "adam_s_per_param", pf->adam_s);
    cJSON_AddNumberToObject(o, "sgd_s_per_param", pf->sgd_s);
    if (pf->ortho_s > 0) cJSON_AddNumberToObject(o, "ortho_s_per_op", pf->ortho_s);
    cJSON_AddNumberToObject(o, "step_fixed_s", pf->step_fixed_s);
    if (pf->wait.entry_s > 0 || pf->wait.drift > 0) {
        cJSON *w = cJSON_AddObjectToObject(o, "collective_wait");
        cJSON_AddNumberToObject(w, "entry_s", pf->wait.entry_s);
        cJSON_AddNumberToObject(w, "drift", pf->wait.drift);
    }
    cJSON *refit = NULL;
    for (int f = 0; f < FAMILIES; f++) {
        if (!(pf->refit[f] > 0)) continue;
        if (!refit) refit = cJSON_AddObjectToObject(o, "refit");
        cJSON_AddNumberToObject(refit, family_names[f], pf->refit[f]);
    }
    if (pf->p2p.n) cJSON_AddItemToObject(o, "p2p", curve_json(&pf->p2p, "bytes"));
    cJSON *colls = cJSON_AddObjectToObject(o, "collectives"), *ov = cJSON_AddObjectToObject(o, "overlap");
    for (int a = 0; a < ALLREDUCE_ALGOS; a++) {
        cJSON *aa = NULL;
        for (int op = 0; op < COLLS; op++)
            for (int D = 2; D <= COST_MAX_D; D++) {
                if (!pf->coll[a][op][D].n) continue;
                if (!aa) aa = cJSON_AddObjectToObject(colls, comm_algos[a].name);
                cJSON *oo = cJSON_GetObjectItem(aa, coll_key[op]);
                if (!oo) oo = cJSON_AddObjectToObject(aa, coll_key[op]);
                char d[16];
                snprintf(d, sizeof d, "%d", D);
                cJSON_AddItemToObject(oo, d, curve_json(&pf->coll[a][op][D], "bytes"));
            }
        if (aa) cJSON_AddNumberToObject(ov, comm_algos[a].name, pf->overlap[a]);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

// Reading: each helper writes its one line into why and returns -1 on the first thing amiss.
typedef struct { const char *file; char *why; size_t n; } Rd;

static int bad(Rd *r, const char *what) {
    snprintf(r->why, r->n, "'%s': %s", r->file, what);
    return -1;
}
// A number >= lo (and finite) under key.
static int num(Rd *r, const cJSON *o, const char *key, double lo, double *out) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    char what[160];
    snprintf(what, sizeof what, "\"%s\" must be a number >= %g", key, lo);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo) return bad(r, what);
    *out = v->valuedouble;
    return 0;
}
// A time in seconds: a number in [0, 1e6] (a figure past 11 days a step is a damaged file: it priced
// layouts at inf and still named a best one).
#define MAX_SECONDS 1e6
static int secs(Rd *r, const cJSON *o, const char *key, double *out) {
    char what[160];
    snprintf(what, sizeof what, "\"%s\" must be a time in seconds, in [0, %g]", key, MAX_SECONDS);
    if (num(r, o, key, 0, out)) return -1;
    return *out > MAX_SECONDS ? bad(r, what) : 0;
}
// A whole number in [lo, hi] under key (the casts to int took 1e30 for 0 and 1e12 for -2147483648).
static int whole(Rd *r, const cJSON *o, const char *key, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    char what[160];
    snprintf(what, sizeof what, "\"%s\" must be a whole number in [%d, %d]", key, lo, hi);
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= lo && x <= hi) || x != floor(x)) return bad(r, what);
    *out = (int)v->valuedouble;
    return 0;
}
// The format's version: this micropp reads 1.
static int version(Rd *r, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    char what[200];
    snprintf(what, sizeof what, "\"%s\" is %g, and this micropp reads format 1: write it again with this micropp", key,
             cJSON_IsNumber(v) ? v->valuedouble : NAN);
    return cJSON_IsNumber(v) && v->valuedouble == 1 ? 0 : bad(r, what);
}
// n numbers of an array into out (n <= COST_GRID), increasing when `rising`; -1 when malformed.
static int arr(Rd *r, const cJSON *a, const char *key, double *out, int rising) {
    char what[160];
    snprintf(what, sizeof what, "\"%s\" must be an array of 1 to %d numbers >= 0%s", key, COST_GRID,
             rising ? ", increasing" : "");
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n < 1 || n > COST_GRID) return bad(r, what);
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0) return bad(r, what);
        out[i] = v->valuedouble;
        if (rising && i && out[i] <= out[i - 1]) return bad(r, what);
    }
    return n;
}
static int curve(Rd *r, const cJSON *o, const char *xkey, const char *skey, Curve *c) {
    int n = arr(r, cJSON_GetObjectItem(o, xkey), xkey, c->x, 1), m;
    if (n < 0 || (m = arr(r, cJSON_GetObjectItem(o, skey), skey, c->s, 0)) < 0) return -1;
    if (n != m) return bad(r, "a curve's x and s arrays differ in length");
    c->n = n;
    return 0;
}

static int read_layers(Rd *r, const cJSON *o, Profile *pf) {
    const cJSON *layers = cJSON_GetObjectItem(o, "layers");
    if (!cJSON_IsObject(layers)) return bad(r, "no \"layers\" object");
    for (int p = 0; p < COST_PRECISIONS; p++) {
        const cJSON *pp = cJSON_GetObjectItem(layers, prec_key[p]);
        if (!pp) continue;
        pf->has_precision[p] = 1;
        for (int k = 0; k < LAYER_KINDS; k++) {
            const cJSON *kk = cJSON_GetObjectItem(pp, kind_key[k]);
            if (!cJSON_IsObject(kk)) return bad(r, "a precision of \"layers\" lacks mid, first or head");
            for (int q = 0; q < PASSES; q++)
                if (curve(r, kk, "rows", pass_key[q], &pf->layer[p][k][q])) return -1;
        }
    }
    if (!pf->has_precision[PRECISION_FP32]) return bad(r, "\"layers\" has no fp32 figures");
    return 0;
}

static int read_comm(Rd *r, const cJSON *o, Profile *pf) {
    const cJSON *p2p = cJSON_GetObjectItem(o, "p2p"), *colls = cJSON_GetObjectItem(o, "collectives"),
                *ov = cJSON_GetObjectItem(o, "overlap");
    if (p2p && curve(r, p2p, "bytes", "s", &pf->p2p)) return -1;
    for (int a = 0; a < ALLREDUCE_ALGOS && colls; a++) {
        const cJSON *aa = cJSON_GetObjectItem(colls, comm_algos[a].name);
        for (int op = 0; op < COLLS && aa; op++) {
            const cJSON *oo = cJSON_GetObjectItem(aa, coll_key[op]), *d;
            cJSON_ArrayForEach(d, oo) {
                int D = atoi(d->string);
                if (D < 2 || D > COST_MAX_D) return bad(r, "a collective's group size must be 2 to 16");
                if (curve(r, d, "bytes", "s", &pf->coll[a][op][D])) return -1;
            }
        }
        if (aa && num(r, ov, comm_algos[a].name, -1, &pf->overlap[a])) return -1;
    }
    return 0;
}

// `plan --validate`'s scale factors, when there: {"ddp": 1.08, ...}, each a family's, in (0, 100].
static int read_refit(Rd *r, const cJSON *o, Profile *pf) {
    const cJSON *refit = cJSON_GetObjectItem(o, "refit"), *v;
    if (!refit) return 0;
    if (!cJSON_IsObject(refit)) return bad(r, "\"refit\" must be an object of a scale factor per family");
    cJSON_ArrayForEach(v, refit) {
        int f = 0;
        while (f < FAMILIES && strcmp(v->string, family_names[f])) f++;
        if (f == FAMILIES || !cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 100))
            return bad(r, "\"refit\" holds pipeline, hybrid, ddp, tp or monolith, each a factor in (0, 100]");
        pf->refit[f] = v->valuedouble;
    }
    return 0;
}

// The collectives' wait beyond their curves, when there (older profiles: none, both 0).
static int read_wait(Rd *r, const cJSON *o, Profile *pf) {
    const cJSON *w = cJSON_GetObjectItem(o, "collective_wait");
    if (!w) return 0;
    if (!cJSON_IsObject(w)) return bad(r, "\"collective_wait\" must be an object (entry_s, drift)");
    if (secs(r, w, "entry_s", &pf->wait.entry_s) || num(r, w, "drift", 0, &pf->wait.drift)) return -1;
    return pf->wait.drift > 1 ? bad(r, "\"drift\" is a share of the compute: at most 1") : 0;
}

static int read_profile(Rd *r, const cJSON *o, Profile *pf) {
    pf->calibrated = 1;
    const cJSON *src = cJSON_GetObjectItem(o, "source");
    if (cJSON_IsString(src)) snprintf(pf->source, sizeof pf->source, "%s", src->valuestring);
    // (the ranges are train's: --hidden, --inputs, --classes, --threads; a world of up to 2^20 ranks)
    if (version(r, o, "micropp_profile") || whole(r, o, "world", 1, 1 << 20, &pf->world) ||
        whole(r, o, "threads", 1, 1024, &pf->threads) || whole(r, o, "hidden", 1, 65536, &pf->hidden) ||
        whole(r, o, "inputs", 1, 1 << 24, &pf->inputs) || whole(r, o, "classes", 2, 65536, &pf->classes) ||
        read_layers(r, o, pf) || secs(r, o, "data_s_per_value", &pf->data_s_per_value) ||
        secs(r, o, "adam_s_per_param", &pf->adam_s) || secs(r, o, "sgd_s_per_param", &pf->sgd_s) ||
        secs(r, o, "step_fixed_s", &pf->step_fixed_s) || read_comm(r, o, pf))
        return -1;
    if (!cJSON_GetObjectItem(o, "label_s_per_value"))  // (older profiles timed the rows and labels together)
        pf->label_s_per_value = pf->data_s_per_value /= 2;
    else if (secs(r, o, "label_s_per_value", &pf->label_s_per_value)) return -1;
    if (cJSON_GetObjectItem(o, "ortho_s_per_op") && secs(r, o, "ortho_s_per_op", &pf->ortho_s))  // (older: none)
        return -1;
    if (pf->world > 1 && !pf->p2p.n) return bad(r, "a profile of several ranks needs \"p2p\"");
    return read_wait(r, o, pf) || read_refit(r, o, pf) ? -1 : 0;
}

static int read_link(Rd *r, const cJSON *o, const char *key, double *bw, double *lat) {
    const cJSON *l = cJSON_GetObjectItem(o, key);
    char what[96];
    snprintf(what, sizeof what, "no \"%s\" object (bandwidth_bytes_per_s, latency_s)", key);
    if (!cJSON_IsObject(l)) return bad(r, what);
    return num(r, l, "bandwidth_bytes_per_s", 1, bw) || secs(r, l, "latency_s", lat) ? -1 : 0;
}

static int read_machine(Rd *r, const cJSON *o, Profile *pf) {
    const cJSON *name = cJSON_GetObjectItem(o, "name"), *fl = cJSON_GetObjectItem(o, "gemm_flops"),
                *src = cJSON_GetObjectItem(o, "sources");
    if (version(r, o, "micropp_machine")) return -1;
    if (!cJSON_IsString(name)) return bad(r, "no \"name\" string");
    if (!cJSON_IsArray(src) || cJSON_GetArraySize(src) < 1)
        return bad(r, "no \"sources\": every figure of a machine file names where it comes from");
    snprintf(pf->source, sizeof pf->source, "%s (machine file)", name->valuestring);
    if (!cJSON_IsObject(fl)) return bad(r, "no \"gemm_flops\" object (fp32, bf16: FLOP/s per device)");
    for (int p = 0; p < COST_PRECISIONS; p++)
        if (cJSON_GetObjectItem(fl, prec_key[p])) {
            if (num(r, fl, prec_key[p], 1, &pf->flops[p])) return -1;
            pf->has_precision[p] = 1;
        }
    if (!pf->has_precision[PRECISION_FP32]) return bad(r, "\"gemm_flops\" has no fp32 figure");
    if (whole(r, o, "devices_per_node", 1, 1 << 16, &pf->devices_per_node) ||
        num(r, o, "device_memory_bytes", 1, &pf->device_memory) ||
        num(r, o, "gemm_efficiency", 0.01, &pf->gemm_efficiency) ||
        num(r, o, "memory_bandwidth_bytes_per_s", 1, &pf->mem_bw) || secs(r, o, "kernel_launch_s", &pf->launch_s) ||
        num(r, o, "collective_overlap", -1, &pf->machine_overlap) || secs(r, o, "step_fixed_s", &pf->step_fixed_s) ||
        read_link(r, o, "intra_node", &pf->intra_bw, &pf->intra_lat) ||
        read_link(r, o, "inter_node", &pf->inter_bw, &pf->inter_lat))
        return -1;
    // the host's synthetic rows and labels (optional: 0 when a file leaves them out)
    if ((cJSON_GetObjectItem(o, "data_s_per_value") && secs(r, o, "data_s_per_value", &pf->data_s_per_value)) ||
        (cJSON_GetObjectItem(o, "label_s_per_value") && secs(r, o, "label_s_per_value", &pf->label_s_per_value)))
        return -1;
    if (pf->gemm_efficiency > 1 || pf->machine_overlap > 1)
        return bad(r, "\"gemm_efficiency\" and \"collective_overlap\" are shares: at most 1");
    return 0;
}

int cost_parse(const char *text, const char *file, Profile *pf, char *why, size_t n) {
    Rd r = {file, why, n};
    memset(pf, 0, sizeof *pf);
    snprintf(pf->file, sizeof pf->file, "%s", file);
    cJSON *o = cJSON_Parse(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return bad(&r, "not a JSON object");
    }
    int rc = cJSON_GetObjectItem(o, "micropp_profile")   ? read_profile(&r, o, pf)
             : cJSON_GetObjectItem(o, "micropp_machine") ? read_machine(&r, o, pf)
                                                         : bad(&r, "neither a profile (\"micropp_profile\", written "
                                                                   "by plan --calibrate) nor a machine file "
                                                                   "(\"micropp_machine\")");
    cJSON_Delete(o);
    return rc;
}

int cost_load(const char *path, Profile *pf, char *why, size_t n) {
    uint8_t *buf;
    size_t len;
    char err[PATH_LEN + 256];  // (a FIFO or a folder refused at once, not waited on or measured as LONG_MAX bytes)
    if (read_file(path, (size_t)64 << 20, &buf, &len, err, sizeof err)) {
        snprintf(why, n, "%s", err);
        return -1;
    }
    char *text = xmalloc(len + 1);
    memcpy(text, buf, len);
    text[len] = 0;
    free(buf);
    int rc = cost_parse(text, path, pf, why, n);
    free(text);
    return rc;
}
