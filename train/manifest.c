// train/manifest.c: a checkpoint's manifest.json parsed and checked (train/manifest.h): its fields in
// range, plain file names, and files that cover every layer and the head exactly once. No MPI, no I/O.
#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "train/manifest.h"
#include "model.h"  // the optimizers
#include "base/util.h"


static int get_int(const cJSON *o, const char *key, double lo, double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = v->valuedouble;
    return 0;
}

// Parses and checks a manifest's text: fields, plain file names, and that the files cover every
// layer and the head exactly once. Returns 0, or -1 with the reason.
int manifest_parse(const char *text, Manifest *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    cJSON *root = cJSON_Parse(text);
    const cJSON *cfg, *lay, *files, *fmt;
    double v;
#define BAD(...)                                                                                                       \
    do {                                                                                                               \
        snprintf(err, errlen, __VA_ARGS__);                                                                            \
        cJSON_Delete(root);                                                                                            \
        free(m->files);                                                                                                \
        m->files = NULL;                                                                                               \
        return -1;                                                                                                     \
    } while (0)
    if (!root || !cJSON_IsObject(root)) BAD("%s is not valid JSON", MANIFEST);
    fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "micropp-checkpoint"))
        BAD("%s is not a micropp checkpoint manifest (format)", MANIFEST);
    if (get_int(root, "version", 1, 1, &v)) BAD("%s: unsupported version (this micropp reads version 1)", MANIFEST);
    if (get_int(root, "step", 0, 9e15, &v)) BAD("%s: 'step' is missing or not a non-negative integer", MANIFEST);
    m->step = (int64_t)v;
    if (get_int(root, "next_sample", 0, 9e15, &v))
        BAD("%s: 'next_sample' is missing or not a non-negative integer", MANIFEST);
    m->next_sample = (uint64_t)v;
    cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    lay = cJSON_GetObjectItemCaseSensitive(root, "layout");
    files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsObject(cfg) || !cJSON_IsObject(lay) || !cJSON_IsArray(files))
        BAD("%s lacks config, layout or files", MANIFEST);
    if (get_int(cfg, "layers", 1, 4096, &v)) BAD("%s: config.layers is missing or out of range", MANIFEST);
    m->layers = (int)v;
    if (get_int(cfg, "hidden", 1, 65536, &v)) BAD("%s: config.hidden is missing or out of range", MANIFEST);
    m->hidden = (int)v;
    m->inputs = get_int(cfg, "inputs", 1, 1 << 24, &v) ? m->hidden : (int)v;  // absent before --inputs: = hidden
    if (get_int(cfg, "classes", 2, 65536, &v)) BAD("%s: config.classes is missing or out of range", MANIFEST);
    m->classes = (int)v;
    m->experts = get_int(cfg, "experts", 0, 4096, &v) ? 0 : (int)v;
    m->moe_every = get_int(cfg, "moe_every", 1, 4096, &v) ? 1 : (int)v;
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(cfg, "optimizer");
    if (!cJSON_IsString(opt) || (strcmp(opt->valuestring, "adam") && strcmp(opt->valuestring, "sgd")))
        BAD("%s: config.optimizer is not adam or sgd", MANIFEST);
    m->optimizer = strcmp(opt->valuestring, "sgd") ? OPTIM_ADAM : OPTIM_SGD;
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(cfg, "lr"),
                *data = cJSON_GetObjectItemCaseSensitive(cfg, "data");
    m->lr = cJSON_IsNumber(lr) ? lr->valuedouble : -1;
    m->batch = get_int(cfg, "batch", 1, 9e15, &v) ? -1 : v;
    m->seed = get_int(cfg, "seed", 0, 9e15, &v) ? -1 : v;
    m->samples = get_int(cfg, "samples", 0, 9e15, &v) ? -1 : v;
    snprintf(m->data, sizeof m->data, "%s", cJSON_IsString(data) ? data->valuestring : "");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(lay, "mode");
    snprintf(m->mode, sizeof m->mode, "%s", cJSON_IsString(mode) ? mode->valuestring : "?");
    m->world = get_int(lay, "world", 1, 1 << 30, &v) ? 0 : (int)v;
    m->stages = get_int(lay, "stages", 1, 1 << 30, &v) ? 0 : (int)v;
    m->dp = get_int(lay, "dp", 1, 1 << 30, &v) ? 1 : (int)v;
    int n = cJSON_GetArraySize(files);
    if (n < 1 || n > 1 << 20) BAD("%s: 'files' is empty", MANIFEST);
    m->files = xcalloc((size_t)n, sizeof(FileRec));
    int *seen = xcalloc((size_t)m->layers + 1, sizeof(int));  // per layer, then the head
    for (const cJSON *f = files->child; f; f = f->next) {
        FileRec *r = &m->files[m->n_files];
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "file");
        const cJSON *range = cJSON_GetObjectItemCaseSensitive(f, "layers");
        const cJSON *head = cJSON_GetObjectItemCaseSensitive(f, "head");
        double lo, hi, bytes, crc, stage;
        if (!cJSON_IsObject(f) || !cJSON_IsString(name) || !cJSON_IsArray(range) || cJSON_GetArraySize(range) != 2 ||
            !cJSON_IsBool(head) || get_int(f, "bytes", 8, 9e15, &bytes) || get_int(f, "crc32", 0, 4294967295.0, &crc) ||
            get_int(f, "stage", 0, 1 << 30, &stage)) {
            free(seen);
            BAD("%s: files[%d] lacks file, stage, layers, head, bytes or crc32", MANIFEST, m->n_files);
        }
        const char *fn = name->valuestring;
        if (!fn[0] || strlen(fn) >= sizeof r->file || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
            free(seen);
            BAD("%s: files[%d] names '%.64s', which is not a plain file name in the checkpoint folder", MANIFEST,
                m->n_files, fn);
        }
        lo = cJSON_IsNumber(range->child) ? range->child->valuedouble : -1;
        hi = cJSON_IsNumber(range->child->next) ? range->child->next->valuedouble : -1;
        if (lo != floor(lo) || hi != floor(hi) || lo < 0 || hi < lo || hi > m->layers) {
            free(seen);
            BAD("%s: files[%d] has layers [%g, %g) outside [0, %d)", MANIFEST, m->n_files, lo, hi, m->layers);
        }
        snprintf(r->file, sizeof r->file, "%s", fn);
        r->stage = (int)stage; r->lo = (int)lo; r->hi = (int)hi; r->head = cJSON_IsTrue(head);
        r->bytes = (uint64_t)bytes; r->crc = (uint32_t)crc;
        for (int l = r->lo; l < r->hi; l++) seen[l]++;
        if (r->head) seen[m->layers]++;
        m->n_files++;
    }
    for (int l = 0; l <= m->layers; l++)
        if (seen[l] != 1) {
            int k = seen[l];
            free(seen);
            if (l == m->layers) BAD("%s: the head is in %d files, expected exactly 1", MANIFEST, k);
            BAD("%s: layer %d is in %d files, expected exactly 1", MANIFEST, l, k);
        }
    free(seen);
    cJSON_Delete(root);
    return 0;
#undef BAD
}
