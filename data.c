// data.c: the synthetic classification task (unit-variance uniform features, label = argmax of a fixed random
// linear teacher), real data sets (Fashion-MNIST, an IDX folder, .npy or IDX files: their checks,
// standardisation and per-epoch shuffle), the .npy reader/writer, and the RNG's Box-Muller normal.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data.h"
#include "idx.h"
#include "util.h"

struct ShuffleCache { int64_t epoch; uint32_t *perm; };
#define PATH_MAX_DIR 600  // a folder: a path (config.h's PATH_LEN, 512) or MICROPP_DATASETS's
#define NAME_LEN 700      // ... and a file name in it

float rng_normal(uint64_t key, uint64_t i) {
    float u1 = rng_uniform(key, 2 * i), u2 = rng_uniform(key, 2 * i + 1);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// ---- opening a data source ----

// One file's table, read as .npy (by its name or magic) or IDX: features (float or pixels, [n, width])
// or labels ([n]). Returns 0, or -1 with the reason in err.
typedef struct { int is_npy; Npy npy; Idx idx; } Table;

static int is_npy_file(const char *path) {
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".npy")) return 1;
    FILE *f = fopen(path, "rb");
    char m[6] = {0};
    int yes = f && fread(m, 1, 6, f) == 6 && !memcmp(m, "\x93NUMPY", 6);
    if (f) fclose(f);
    return yes;
}

static int table_read(const char *path, Table *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->is_npy = is_npy_file(path);
    return t->is_npy ? npy_read(path, &t->npy, err, errlen) : idx_read(path, &t->idx, err, errlen);
}

// Reads a file on every rank; a rank that cannot ends them all with its reason (agree_on_error).
static void table_read_all(const char *flag, const char *path, Table *t) {
    char err[512], why[NAME_LEN + 640] = "";
    if (table_read(path, t, err, sizeof err)) snprintf(why, sizeof why, "train: %s %s: %s", flag, path, err);
    agree_on_error(why);
}

// Features of one split: float32 [n, D] (.npy) or pixels [n, ...] whose other dims make D (IDX).
static void take_features(const char *flag, const char *path, Table *t, int inputs, Split *sp) {
    if (t->is_npy) {
        Npy *x = &t->npy;
        if (strcmp(x->dtype, "<f4") || x->ndim != 2 || x->shape[1] != inputs) {
            if (!strcmp(x->dtype, "<f4") && x->ndim == 2)
                user_error("train: %s %s: its rows have %lld features but --inputs is %d: set --inputs %lld", flag, path,
                           (long long)x->shape[1], inputs, (long long)x->shape[1]);
            user_error("train: %s %s: need float32 [N,%d] (N rows of --inputs %d features), got %s with %d dims",
                       flag, path, inputs, inputs, x->dtype, x->ndim);
        }
        sp->n = x->shape[0];
        sp->features = x->data;
        for (int64_t i = 0; i < sp->n * inputs; i++)  // one NaN would poison a column of layer 0 silently
            if (!isfinite(sp->features[i]))
                user_error("train: %s %s: row %lld, column %lld is %s: features must be finite numbers: clean the file", flag, path,
                           (long long)(i / inputs), (long long)(i % inputs), isnan(sp->features[i]) ? "NaN" : "Inf");
        return;
    }
    Idx *x = &t->idx;
    int64_t width = 1;
    for (int i = 1; i < x->ndim; i++) width *= x->dims[i];
    if (x->ndim < 2)
        user_error("train: %s %s: an IDX file of %d dimension holds labels, not images: give the images file (idx3)", flag, path, x->ndim);
    if (width != inputs)
        user_error("train: %s %s: its rows have %lld values (IDX %lldx%lld) but --inputs is %d: set --inputs %lld",
                   flag, path, (long long)width, (long long)x->dims[1], (long long)(x->ndim > 2 ? x->dims[2] : 1), inputs, (long long)width);
    sp->n = x->dims[0];
    sp->pixels = x->data;
}

// Labels of one split: int32/int64 [n] (.npy) or unsigned bytes [n] (IDX), each in [0, classes),
// as many as the features' rows.
static void take_labels(const char *flag, const char *path, Table *t, int classes, const char *xflag, const char *xpath, Split *sp) {
    int64_t n;
    if (t->is_npy) {
        Npy *y = &t->npy;
        if ((strcmp(y->dtype, "<i4") && strcmp(y->dtype, "<i8")) || y->ndim != 1)
            user_error("train: %s %s: need int32 or int64 [N] (one label per row), got %s with %d dims", flag, path, y->dtype, y->ndim);
        n = y->shape[0];
    } else {
        if (t->idx.ndim != 1)
            user_error("train: %s %s: an IDX labels file has 1 dimension, this one %d: give the labels file (idx1)", flag, path, t->idx.ndim);
        n = t->idx.dims[0];
    }
    if (n != sp->n)
        user_error("train: %s %s has %lld labels but %s %s has %lld rows: give the labels that belong to those rows",
                   flag, path, (long long)n, xflag, xpath, (long long)sp->n);
    sp->labels = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        int64_t v = !t->is_npy ? t->idx.data[i] : !strcmp(t->npy.dtype, "<i4") ? ((int32_t *)t->npy.data)[i] : ((int64_t *)t->npy.data)[i];
        if (v < 0 || v >= classes)
            user_error("train: %s %s: label %lld at row %lld is outside [0, %d): set --classes to cover it",
                       flag, path, (long long)v, (long long)i, classes);
        sp->labels[i] = (int32_t)v;
    }
    free(t->is_npy ? t->npy.data : (void *)t->idx.data);
}

// The four files of a folder in the MNIST layout (Debian's dataset-fashion-mnist), gzip or plain.
static void folder_files(const char *dir, const char *flag, char files[4][NAME_LEN]) {  // dir: < PATH_MAX_DIR
    static const char *const base[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    int fm = !strcmp(flag, "fashion-mnist");
    char why[2 * NAME_LEN + 256] = "";
    for (int i = 0; i < 4 && !why[0]; i++) {
        snprintf(files[i], NAME_LEN, "%.599s/%s.gz", dir, base[i]);
        if (access(files[i], R_OK) == 0) continue;
        snprintf(files[i], NAME_LEN, "%.599s/%s", dir, base[i]);
        if (access(files[i], R_OK) == 0) continue;
        if (fm) snprintf(why, sizeof why, "train: --data fashion-mnist: the data set is not installed (no %s/%s.gz): install the package " FASHION_MNIST_PACKAGE " (apt-get install " FASHION_MNIST_PACKAGE ", or run make)", dir, base[i]);
        else snprintf(why, sizeof why, "train: --data %s: no %s[.gz] there: a data folder holds the MNIST-layout files train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (.gz or plain)", dir, base[i]);
    }
    agree_on_error(why);  // once on every rank: a node without the files ends them all
}

// Scale to [0,1] and standardise with the training pixels' mean and standard deviation (one pair for
// all pixels, as torchvision's Normalize((0.2860,), (0.3530,)) for Fashion-MNIST).
static void standardise(Data *d) {
    const uint8_t *p = d->train.pixels;
    size_t n = (size_t)d->train.n * (size_t)d->inputs;
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) { double v = p[i] / 255.0; sum += v; sq += v * v; }
    d->mean = n ? sum / (double)n : 0;
    double var = n ? sq / (double)n - d->mean * d->mean : 0;
    d->std = var > 1e-12 ? sqrt(var) : 1.0;
    d->scale = (float)(1.0 / (255.0 * d->std));
    d->shift = (float)(-d->mean / d->std);
}

static void open_split(Split *sp, const char *xflag, const char *x, const char *yflag, const char *y, int inputs, int classes, int *pixels) {
    Table tx, ty;
    table_read_all(xflag, x, &tx);
    take_features(xflag, x, &tx, inputs, sp);
    if (*pixels >= 0 && *pixels != (sp->pixels != NULL))
        user_error("train: %s %s is %s but the training data is %s: give the training and test data in one format", xflag, x,
                   sp->pixels ? "IDX" : ".npy", sp->pixels ? ".npy" : "IDX");
    *pixels = sp->pixels != NULL;
    table_read_all(yflag, y, &ty);
    take_labels(yflag, y, &ty, classes, xflag, x, sp);
}

void data_open(Data *d, DataSource src, int inputs, int classes, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->inputs = inputs;
    d->classes = classes;
    d->seed = seed;
    d->cache = xcalloc(1, sizeof(ShuffleCache));
    d->cache->epoch = -1;
    snprintf(d->name, sizeof d->name, "%.63s", src.data);
    int explicit_test = src.test_data[0] || src.test_labels[0];
    if (!strcmp(src.data, "synthetic")) {
        if (src.labels[0] || explicit_test) user_error("train: --%s is for a data set; drop it or give --data", src.labels[0] ? "labels" : "test-data");
        d->teacher = xmalloc(sizeof(float) * (size_t)classes * inputs);
        uint64_t key = rng_key(seed, RNG_TEACHER, 0);
        for (size_t i = 0; i < (size_t)classes * inputs; i++) d->teacher[i] = rng_normal(key, i);
        return;
    }
    struct stat st;
    int fm = !strcmp(src.data, "fashion-mnist"), folder = fm || (stat(src.data, &st) == 0 && S_ISDIR(st.st_mode));
    if (folder && (src.labels[0] || explicit_test))
        user_error("train: --data %s names a whole data set: drop --%s (or give files: --data, --labels, --test-data, --test-labels)",
                   src.data, src.labels[0] ? "labels" : explicit_test && src.test_data[0] ? "test-data" : "test-labels");
    if (!folder && !src.labels[0]) user_error("train: --data %s needs --labels FILE (.npy int32/int64 [N], or IDX labels)", src.data);
    if (!folder && (!src.test_data[0]) != (!src.test_labels[0]))
        user_error("train: --%s needs --%s too (the test split's features and labels)", src.test_data[0] ? "test-data" : "test-labels",
                   src.test_data[0] ? "test-labels" : "test-data");
    int pixels = -1;
    if (folder) {
        char f[4][NAME_LEN];
        // MICROPP_DATASETS=DIR looks for DIR/fashion-mnist instead of Debian's folder (tests, other installs)
        const char *root = getenv("MICROPP_DATASETS");
        char fm_dir[PATH_MAX_DIR];
        snprintf(fm_dir, sizeof fm_dir, "%s", FASHION_MNIST_DIR);
        if (root && *root) snprintf(fm_dir, sizeof fm_dir, "%.500s/fashion-mnist", root);
        folder_files(fm ? fm_dir : src.data, fm ? "fashion-mnist" : src.data, f);
        open_split(&d->train, "--data", f[0], "--data", f[1], inputs, classes, &pixels);
        open_split(&d->test, "--data", f[2], "--data", f[3], inputs, classes, &pixels);
    } else {
        open_split(&d->train, "--data", src.data, "--labels", src.labels, inputs, classes, &pixels);
        if (src.test_data[0]) open_split(&d->test, "--test-data", src.test_data, "--test-labels", src.test_labels, inputs, classes, &pixels);
    }
    if (d->train.n < 1) user_error("train: --data %s has no rows", src.data);
    d->scale = 1.0f;
    if (pixels) standardise(d);
}

void data_close(Data *d) {
    free(d->train.features); free(d->train.pixels); free(d->train.labels);
    free(d->test.features); free(d->test.pixels); free(d->test.labels);
    free(d->teacher);
    if (d->cache) free(d->cache->perm);
    free(d->cache);
    memset(d, 0, sizeof *d);
}

// ---- the training stream and the held-out rows ----

void data_set_epochs(Data *d, uint64_t epoch_rows) { d->epoch_rows = epoch_rows; }

// Row of the training set at stream position i: epoch i / epoch_rows, a Fisher-Yates permutation of
// the whole set drawn from (seed, epoch) (kept for the epoch asked last), its first epoch_rows rows.
static int64_t train_row(const Data *d, uint64_t i) {
    uint64_t n = (uint64_t)d->train.n;
    if (!d->epoch_rows) return (int64_t)(i % n);
    int64_t epoch = (int64_t)(i / d->epoch_rows);
    ShuffleCache *c = d->cache;
    if (c->epoch != epoch) {
        if (!c->perm) c->perm = xmalloc(sizeof(uint32_t) * n);
        for (uint64_t k = 0; k < n; k++) c->perm[k] = (uint32_t)k;
        uint64_t key = rng_key(d->seed, RNG_SHUFFLE, (uint64_t)epoch);
        for (uint64_t k = n - 1; k > 0; k--) {
            uint64_t j = mix64(key ^ mix64(k)) % (k + 1);
            uint32_t t = c->perm[k]; c->perm[k] = c->perm[j]; c->perm[j] = t;
        }
        c->epoch = epoch;
    }
    return c->perm[i % d->epoch_rows];
}

static void split_row(const Data *d, const Split *sp, int64_t row, float *x) {
    size_t D = (size_t)d->inputs;
    if (sp->features) { memcpy(x, sp->features + (size_t)row * D, sizeof(float) * D); return; }
    const uint8_t *p = sp->pixels + (size_t)row * D;
    for (size_t j = 0; j < D; j++) x[j] = (float)p[j] * d->scale + d->shift;
}

// Synthetic sample i: uniform on [-sqrt(3), sqrt(3)): zero mean, unit variance, one hash per feature.
static void synthetic_row(const Data *d, uint64_t i, float *x) {
    uint64_t key = rng_key(d->seed, RNG_FEATURES, i);
    for (int j = 0; j < d->inputs; j++) x[j] = (2.0f * rng_uniform(key, (uint64_t)j) - 1.0f) * 1.7320508f;
}

static int32_t synthetic_label(const Data *d, uint64_t i, float *x) {
    int D = d->inputs, best = 0;
    float best_v = -INFINITY;
    synthetic_row(d, i, x);
    for (int c = 0; c < d->classes; c++) {
        float s = 0;
        for (int j = 0; j < D; j++) s += d->teacher[(size_t)c * D + j] * x[j];
        if (s > best_v) { best_v = s; best = c; }
    }
    return best;
}

void data_features(const Data *d, uint64_t first, int rows, float *x) {
    for (int r = 0; r < rows; r++) {
        float *row = x + (size_t)r * d->inputs;
        if (d->train.n) split_row(d, &d->train, train_row(d, first + (uint64_t)r), row);
        else synthetic_row(d, first + (uint64_t)r, row);
    }
}

void data_labels(const Data *d, uint64_t first, int rows, int32_t *y) {
    float *x = d->train.n ? NULL : xmalloc(sizeof(float) * (size_t)d->inputs);
    for (int r = 0; r < rows; r++) {
        uint64_t i = first + (uint64_t)r;
        y[r] = d->train.n ? d->train.labels[train_row(d, i)] : synthetic_label(d, i, x);
    }
    free(x);
}

int64_t data_eval_rows(const Data *d) { return d->test.n ? d->test.n : d->train.n ? d->train.n : INT64_MAX; }

void data_eval_features(const Data *d, uint64_t first, int rows, float *x) {
    const Split *sp = d->test.n ? &d->test : &d->train;
    for (int r = 0; r < rows; r++) {
        float *row = x + (size_t)r * d->inputs;
        if (sp->n) split_row(d, sp, (int64_t)(first + (uint64_t)r), row);
        else synthetic_row(d, EVAL_BASE + first + (uint64_t)r, row);
    }
}

void data_eval_labels(const Data *d, uint64_t first, int rows, int32_t *y) {
    const Split *sp = d->test.n ? &d->test : &d->train;
    float *x = sp->n ? NULL : xmalloc(sizeof(float) * (size_t)d->inputs);
    for (int r = 0; r < rows; r++) y[r] = sp->n ? sp->labels[first + (uint64_t)r] : synthetic_label(d, EVAL_BASE + first + (uint64_t)r, x);
    free(x);
}

// ---- .npy: magic "\x93NUMPY", version, header length, a Python-dict header, raw data ----

int npy_read(const char *path, Npy *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "cannot open: %s (check the path)", strerror(errno)); return -1; }
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
        fclose(f); snprintf(err, errlen, "not a .npy file (no \\x93NUMPY magic): save it with numpy.save"); return -1;
    }
    size_t hlen;
    if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
    else {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2) { fclose(f); snprintf(err, errlen, "truncated header"); return -1; }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)more[0] << 16 | (size_t)more[1] << 24;
    }
    if (hlen > 1 << 20) { fclose(f); snprintf(err, errlen, "header of %zu bytes is implausible", hlen); return -1; }
    char *h = xmalloc(hlen + 1);
    if (fread(h, 1, hlen, f) != hlen) { free(h); fclose(f); snprintf(err, errlen, "truncated header"); return -1; }
    h[hlen] = 0;
    const char *descr = strstr(h, "'descr'"), *fo = strstr(h, "'fortran_order'"), *sh = strstr(h, "'shape'");
    if (!descr || !fo || !sh) { free(h); fclose(f); snprintf(err, errlen, "header lacks descr/fortran_order/shape"); return -1; }
    const char *q = strchr(descr + 7, '\'');
    if (!q || sscanf(q + 1, "%7[^']", out->dtype) != 1) { free(h); fclose(f); snprintf(err, errlen, "unreadable dtype"); return -1; }
    if (strstr(fo, "True")) { free(h); fclose(f); snprintf(err, errlen, "Fortran-order array: save it with numpy.ascontiguousarray first"); return -1; }
    const char *p = strchr(sh, '(');
    if (!p) { free(h); fclose(f); snprintf(err, errlen, "unreadable shape"); return -1; }
    p++;
    int64_t count = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || out->ndim >= 2) {
            free(h); fclose(f);
            snprintf(err, errlen, out->ndim >= 2 ? "more than 2 dimensions" : "unreadable shape");
            return -1;
        }
        out->shape[out->ndim++] = v;
        if (v > 0 && count > INT64_MAX / v) { free(h); fclose(f); snprintf(err, errlen, "shape too large"); return -1; }
        count *= v;
        p = end;
    }
    free(h);
    size_t esize = !strcmp(out->dtype, "<f4") || !strcmp(out->dtype, "<i4") ? 4 : !strcmp(out->dtype, "<i8") ? 8 : 0;
    if (!esize) { fclose(f); snprintf(err, errlen, "dtype %s is not supported: use float32 features and int32/int64 labels (little-endian)", out->dtype); return -1; }
    long here = ftell(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (here < 0 || size < here || (uint64_t)count > (uint64_t)(size - here) / esize) {  // no count*esize: it may overflow
        fclose(f);
        snprintf(err, errlen, "truncated: header promises %lld elements of %zu bytes but the file holds %ld bytes of data",
                 (long long)count, esize, size - here);
        return -1;
    }
    fseek(f, here, SEEK_SET);
    out->data = xmalloc((size_t)count * esize);
    if (fread(out->data, esize, (size_t)count, f) != (size_t)count) {
        free(out->data); out->data = NULL; fclose(f); snprintf(err, errlen, "read error"); return -1;
    }
    fclose(f);
    return 0;
}

int npy_write(const char *path, const char *dtype, int ndim, const int64_t *shape, const void *data) {
    char shape_s[96];
    int64_t count = 1;
    if (ndim == 1) snprintf(shape_s, sizeof shape_s, "(%lld,)", (long long)shape[0]);
    else snprintf(shape_s, sizeof shape_s, "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
    for (int i = 0; i < ndim; i++) count *= shape[i];
    char h[256];
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", dtype, shape_s);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((n + pad + 1) & 0xff), (unsigned char)((n + pad + 1) >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(h, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    size_t esize = strcmp(dtype, "<i8") ? 4 : 8;
    size_t w = fwrite(data, esize, (size_t)count, f);
    return (fclose(f) == 0 && w == (size_t)count) ? 0 : -1;
}
