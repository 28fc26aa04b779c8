// base/data.c: the synthetic classification task (unit-variance uniform features, label = argmax of a fixed random
// linear teacher), real data sets (Fashion-MNIST, an IDX folder, .npy or IDX files: their checks,
// standardisation and per-epoch shuffle), the .npy reader/writer, and the RNG's Box-Muller normal.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/data.h"
#include "base/idx.h"
#include "base/util.h"

struct ShuffleCache { int64_t epoch; uint32_t *perm; };
#define PATH_MAX_DIR 600  // a folder: a path (config.h's PATH_LEN, 512) or MICROPP_DATASETS's
#define NAME_LEN 700      // ... and a file name in it

float rng_normal(uint64_t key, uint64_t i) {
    float u1 = rng_uniform(key, 2 * i), u2 = rng_uniform(key, 2 * i + 1);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// ---- opening a data source ----
// In three passes over its files, so that nothing large is read before it is known to fit: every
// header (compared across ranks, then the shapes and counts checked), the bytes they promise (against
// the node's memory), then the data (compared across ranks, then checked value by value).

// One file's table, read as .npy (by its name or magic) or IDX: features (float or pixels, [n, width])
// or labels ([n]).
typedef struct { const char *flag, *path; int labels, is_npy; Npy npy; Idx idx; } Table;

static int is_npy_file(const char *path) {
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".npy")) return 1;
    char why[256], m[6] = {0};
    int fd = open_input(path, why, sizeof why), yes = fd >= 0 && read(fd, m, 6) == 6 && !memcmp(m, "\x93NUMPY", 6);
    if (fd >= 0) close(fd);
    return yes;
}

// "IDX 60000x28x28" or ".npy <f4 (60000, 784)": what a header says, for messages.
static const char *table_shape(const Table *t, char *b, size_t n) {
    int nd = t->is_npy ? t->npy.ndim : t->idx.ndim;
    size_t k = t->is_npy ? (size_t)snprintf(b, n, ".npy %s (", t->npy.dtype) : (size_t)snprintf(b, n, "IDX ");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(b + k, n - k, "%s%lld", i ? (t->is_npy ? ", " : "x") : "",
                              (long long)(t->is_npy ? t->npy.shape[i] : t->idx.dims[i]));
    if (t->is_npy && k < n) snprintf(b + k, n - k, nd == 1 ? ",)" : ")");
    return b;
}

// Opens a file's header on every rank: a rank that cannot ends them all with its reason
// (agree_on_error); then the ranks compare the headers they read (agree_on_contents).
static void table_open_all(Table *t) {
    char err[512], why[NAME_LEN + 640] = "", shape[96];
    t->is_npy = is_npy_file(t->path);
    int bad = t->is_npy ? npy_open(t->path, &t->npy, err, sizeof err) : idx_open(t->path, &t->idx, err, sizeof err);
    if (bad) snprintf(why, sizeof why, "train: %s %s: %s", t->flag, t->path, err);
    agree_on_read_error(why);  // (a file missing on some nodes: which)
    char what[64];
    snprintf(what, sizeof what, "train: %s", t->flag);
    agree_on_contents(what, t->path, 1, t->is_npy ? t->npy.hash : t->idx.hash, table_shape(t, shape, sizeof shape));
}

// Reads the data on every rank, alike: a rank that cannot ends them all; then the ranks compare it.
static void table_load_all(Table *t) {
    char err[512], why[NAME_LEN + 640] = "", shape[96], what[64];
    int bad = t->is_npy ? npy_load(&t->npy, err, sizeof err) : idx_load(&t->idx, err, sizeof err);
    if (bad) snprintf(why, sizeof why, "train: %s %s: %s", t->flag, t->path, err);
    agree_on_read_error(why);
    snprintf(what, sizeof what, "train: %s", t->flag);
    agree_on_contents(what, t->path, 1, t->is_npy ? t->npy.hash : t->idx.hash, table_shape(t, shape, sizeof shape));
}

// The rows of a features file, from its header: float32 [n, D] (.npy) or pixels [n, ...] whose other
// dims make D (IDX); a file with no rows or no values in a row is refused as empty, whatever --inputs.
static int64_t features_rows(const Table *t, int inputs) {
    char shape[96];
    table_shape(t, shape, sizeof shape);
    if (t->is_npy) {
        const Npy *x = &t->npy;
        if (strcmp(x->dtype, "<f4") || x->ndim != 2)
            user_error("train: %s %s: need float32 [N,%d] (N rows of --inputs %d features), got %s with %d dims",
                       t->flag, t->path, inputs, inputs, x->dtype, x->ndim);
        if (!x->shape[0] || !x->shape[1])
            user_error(
                "train: %s %s: %s holds no %s: the file is empty or damaged: give rows of --inputs %d float32 features",
                t->flag, t->path, shape, x->shape[0] ? "features in a row" : "rows", inputs);
        if (x->shape[1] != inputs)
            user_error("train: %s %s: its rows have %lld features but --inputs is %d: set --inputs %lld", t->flag,
                       t->path, (long long)x->shape[1], inputs, (long long)x->shape[1]);
        return x->shape[0];
    }
    const Idx *x = &t->idx;
    int64_t width = 1;
    for (int i = 1; i < x->ndim; i++) width *= x->dims[i];
    if (x->ndim < 2)
        user_error("train: %s %s: an IDX file of %d dimension holds labels, not images: give the images file (idx3)",
                   t->flag, t->path, x->ndim);
    if (!x->count)
        user_error("train: %s %s: %s has a zero dimension, so it holds no images: the file is empty or damaged "
                   "(download or reinstall it)",
                   t->flag, t->path, shape);
    if (width != inputs)
        user_error("train: %s %s: its rows have %lld values (IDX %lldx%lld) but --inputs is %d: set --inputs %lld",
                   t->flag, t->path, (long long)width, (long long)x->dims[1], (long long)(x->ndim > 2 ? x->dims[2] : 1),
                   inputs, (long long)width);
    return x->dims[0];
}

// A labels file's header: int32/int64 [n] (.npy) or unsigned bytes [n] (IDX), as many as x's rows.
static void labels_match(const Table *y, const Table *x, int64_t rows) {
    int64_t n;
    if (y->is_npy) {
        const Npy *l = &y->npy;
        if ((strcmp(l->dtype, "<i4") && strcmp(l->dtype, "<i8")) || l->ndim != 1)
            user_error("train: %s %s: need int32 or int64 [N] (one label per row), got %s with %d dims", y->flag,
                       y->path, l->dtype, l->ndim);
        n = l->shape[0];
    } else {
        if (y->idx.ndim != 1)
            user_error("train: %s %s: an IDX labels file has 1 dimension, this one %d: give the labels file (idx1)",
                       y->flag, y->path, y->idx.ndim);
        n = y->idx.dims[0];
    }
    if (n != rows)
        user_error("train: %s %s has %lld labels but %s %s has %lld rows: give the labels that belong to those rows",
                   y->flag, y->path, (long long)n, x->flag, x->path, (long long)rows);
}

static uint64_t table_bytes(const Table *t) { return t->is_npy ? t->npy.count * t->npy.esize : t->idx.count; }

// The bytes the data will hold, before any is read: every rank keeps the whole data set (each
// file's data, and an int32 copy of the labels), and the ranks of a node (mpiexec's MPI_LOCALNRANKS)
// share its memory. One line naming the largest file, the bytes and the fix; decided per node.
static void check_data_memory(const Table *t, int n) {
    double need = 0, most = 0, have = meminfo_available();
    int big = 0;
    for (int i = 0; i < n; i++) {
        double b = (double)table_bytes(&t[i]) +
                   (t[i].labels ? 4.0 * (double)(t[i].is_npy ? t[i].npy.shape[0] : t[i].idx.dims[0]) : 0);
        need += b;
        if (b > most) { most = b; big = i; }
    }
    const char *env = getenv("MPI_LOCALNRANKS");
    int ranks = env && atoi(env) > 0 ? atoi(env) : 1;
    char why[NAME_LEN + 640] = "";
    if (have > 0 && need * ranks > have)
        snprintf(
            why, sizeof why,
            "train: %s %s: the data needs %.3g GB in memory on each rank (this file %.3g GB), %d rank%s on this node "
            "%.3g GB, and the node has %.3g GB available: use a smaller data set, or fewer ranks per node",
            t[big].flag, t[big].path, need / 1e9, most / 1e9, ranks, ranks == 1 ? "" : "s", need * ranks / 1e9,
            have / 1e9);
    agree_on_error(why);
}

// The split's features (checked finite) and labels (each in [0, classes), copied to int32) once read.
static void take_split(Table *tx, Table *ty, int classes, Split *sp) {
    int64_t n = tx->is_npy ? tx->npy.shape[0] : tx->idx.dims[0];
    sp->n = n;
    if (tx->is_npy) {
        sp->features = tx->npy.data;
        int64_t D = tx->npy.shape[1];
        for (int64_t i = 0; i < n * D; i++)  // one NaN would poison a column of layer 0 silently
            if (!isfinite(sp->features[i]))
                user_error("train: %s %s: row %lld, column %lld is %s: features must be finite numbers: clean the file",
                           tx->flag, tx->path, (long long)(i / D), (long long)(i % D),
                           isnan(sp->features[i]) ? "NaN" : "Inf");
    } else sp->pixels = tx->idx.data;
    sp->labels = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    const Npy *y = &ty->npy;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = !ty->is_npy                ? ty->idx.data[i]
                    : !strcmp(y->dtype, "<i4") ? ((int32_t *)y->data)[i]
                                               : ((int64_t *)y->data)[i];
        if (v < 0 || v >= classes)
            user_error("train: %s %s: label %lld at row %lld is outside [0, %d): set --classes to cover it",
                       ty->flag, ty->path, (long long)v, (long long)i, classes);
        sp->labels[i] = (int32_t)v;
    }
    free(ty->is_npy ? y->data : (void *)ty->idx.data);
}

// The four files of a folder in the MNIST layout (Debian's dataset-fashion-mnist), gzip or plain.
static void folder_files(const char *dir, const char *flag, char files[4][NAME_LEN]) {  // dir: < PATH_MAX_DIR
    static const char *const base[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                        "t10k-labels-idx1-ubyte"};
    int fm = !strcmp(flag, "fashion-mnist");
    char why[2 * NAME_LEN + 256] = "";
    for (int i = 0; i < 4 && !why[0]; i++) {
        snprintf(files[i], NAME_LEN, "%.599s/%s.gz", dir, base[i]);
        if (access(files[i], R_OK) == 0) continue;
        snprintf(files[i], NAME_LEN, "%.599s/%s", dir, base[i]);
        if (access(files[i], R_OK) == 0) continue;
        if (fm)
            snprintf(why, sizeof why,
                     "train: --data fashion-mnist: the data set is not installed (no %s/%s.gz): install the "
                     "package " FASHION_MNIST_PACKAGE " (apt-get install " FASHION_MNIST_PACKAGE ", or run make)",
                     dir, base[i]);
        else
            snprintf(why, sizeof why,
                     "train: --data %s: no %s[.gz] there: a data folder holds the MNIST-layout files "
                     "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte "
                     "(.gz or plain)",
                     dir, base[i]);
    }
    agree_on_read_error(why);  // once on every rank: a node without the files ends them all
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

struct DataTables { Table t[4]; int n; char path[4][NAME_LEN]; };  // (a folder's files: their paths)

void data_open(Data *d, DataSource src, int inputs, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->inputs = inputs;
    d->seed = seed;
    d->cache = xcalloc(1, sizeof(ShuffleCache));
    d->cache->epoch = -1;
    snprintf(d->name, sizeof d->name, "%.63s", src.data);
    int explicit_test = src.test_data[0] || src.test_labels[0];
    if (!strcmp(src.data, "synthetic")) {
        if (src.labels[0] || explicit_test)
            user_error("train: --%s is for a data set; drop it or give --data", src.labels[0] ? "labels" : "test-data");
        return;
    }
    struct stat st;
    int fm = !strcmp(src.data, "fashion-mnist"), folder = fm || (stat(src.data, &st) == 0 && S_ISDIR(st.st_mode));
    // alike everywhere
    if (!fm) agree_on_contents("train: --data", src.data, 1, (uint64_t)folder, folder ? "a folder" : "a file");
    if (folder && (src.labels[0] || explicit_test))
        user_error("train: --data %s names a whole data set: drop --%s (or give files: --data, --labels, --test-data, "
                   "--test-labels)",
                   src.data,
                   src.labels[0]                       ? "labels"
                   : explicit_test && src.test_data[0] ? "test-data"
                                                       : "test-labels");
    if (!folder && !src.labels[0])
        user_error("train: --data %s needs --labels FILE (.npy int32/int64 [N], or IDX labels)", src.data);
    if (!folder && (!src.test_data[0]) != (!src.test_labels[0]))
        user_error("train: --%s needs --%s too (the test split's features and labels)",
                   src.test_data[0] ? "test-data" : "test-labels", src.test_data[0] ? "test-labels" : "test-data");
    DataTables *dt = d->pending = xcalloc(1, sizeof *dt);
    Table *t = dt->t;
    t[0] = (Table){.flag = "--data"}; t[1] = (Table){.flag = "--labels", .labels = 1};
    t[2] = (Table){.flag = "--test-data"}; t[3] = (Table){.flag = "--test-labels", .labels = 1};
    dt->n = 4;
    if (folder) {
        // MICROPP_DATASETS=DIR looks for DIR/fashion-mnist instead of Debian's folder (tests, other installs)
        const char *root = getenv("MICROPP_DATASETS");
        char fm_dir[PATH_MAX_DIR];
        snprintf(fm_dir, sizeof fm_dir, "%s", FASHION_MNIST_DIR);
        if (root && *root) snprintf(fm_dir, sizeof fm_dir, "%.500s/fashion-mnist", root);
        folder_files(fm ? fm_dir : src.data, fm ? "fashion-mnist" : src.data, dt->path);
        for (int i = 0; i < 4; i++) { t[i].flag = "--data"; t[i].path = dt->path[i]; }
    } else {
        t[0].path = src.data; t[1].path = src.labels; t[2].path = src.test_data; t[3].path = src.test_labels;
        dt->n = src.test_data[0] ? 4 : 2;
    }
    int n = dt->n;
    for (int i = 0; i < n; i++) table_open_all(&t[i]);  // headers first: nothing large is read before they agree
    for (int i = 0; i < n; i += 2) labels_match(&t[i + 1], &t[i], features_rows(&t[i], inputs));
    if (n == 4 && t[0].is_npy != t[2].is_npy)
        user_error("train: %s %s is %s but the training data is %s: give the training and test data in one format",
                   t[2].flag, t[2].path, t[2].is_npy ? ".npy" : "IDX", t[0].is_npy ? ".npy" : "IDX");
    d->train.n = t[0].is_npy ? t[0].npy.shape[0] : t[0].idx.dims[0];
    if (n == 4) d->test.n = t[2].is_npy ? t[2].npy.shape[0] : t[2].idx.dims[0];
}

void data_load(Data *d, int classes) {
    d->classes = classes;
    DataTables *dt = d->pending;
    if (!dt) {  // synthetic: the teacher
        d->teacher = xmalloc(sizeof(float) * (size_t)classes * (size_t)d->inputs);
        uint64_t key = rng_key(d->seed, RNG_TEACHER, 0);
        for (size_t i = 0; i < (size_t)classes * (size_t)d->inputs; i++) d->teacher[i] = rng_normal(key, i);
        return;
    }
    Table *t = dt->t;
    int n = dt->n;
    check_data_memory(t, n);
    for (int i = 0; i < n; i++) table_load_all(&t[i]);
    take_split(&t[0], &t[1], classes, &d->train);
    if (n == 4) take_split(&t[2], &t[3], classes, &d->test);
    d->scale = 1.0f;
    if (!t[0].is_npy) standardise(d);
    free(dt);
    d->pending = NULL;
}

void data_close(Data *d) {
    free(d->pending);  // (a run that ended between the two steps: its files close with the process)
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

// Synthetic samples (base/data.h's synthetic_feature and synthetic_argmax), the host's maker.
void data_synthetic_rows(float *x, int32_t *y, const SyntheticBatch *b) {
    float *row = x ? NULL : xmalloc(sizeof(float) * (size_t)b->inputs);
    for (int r = 0; r < b->rows; r++) {
        uint64_t key = rng_key(b->seed, RNG_FEATURES, b->first + (uint64_t)r);
        float *xr = x ? x + (size_t)r * b->inputs : row;
        for (int j = 0; j < b->inputs; j++) xr[j] = synthetic_feature(key, j);
        if (y) y[r] = synthetic_argmax(xr, b->teacher, b->inputs, b->classes);
    }
    free(row);
}

SyntheticBatch data_synthetic_batch(const Data *d, uint64_t first, int rows, const float *teacher) {
    return (SyntheticBatch){.seed = d->seed, .first = first, .rows = rows, .inputs = d->inputs,
                            .classes = d->classes, .teacher = teacher};
}

void data_features(const Data *d, uint64_t first, int rows, float *x) {
    SyntheticBatch b = data_synthetic_batch(d, first, rows, d->teacher);
    if (!d->train.n) { data_synthetic_rows(x, NULL, &b); return; }
    for (int r = 0; r < rows; r++)
        split_row(d, &d->train, train_row(d, first + (uint64_t)r), x + (size_t)r * d->inputs);
}

void data_labels(const Data *d, uint64_t first, int rows, int32_t *y) {
    SyntheticBatch b = data_synthetic_batch(d, first, rows, d->teacher);
    if (!d->train.n) { data_synthetic_rows(NULL, y, &b); return; }
    for (int r = 0; r < rows; r++) y[r] = d->train.labels[train_row(d, first + (uint64_t)r)];
}

void data_eval_features(const Data *d, uint64_t first, int rows, float *x) {
    const Split *sp = d->test.n ? &d->test : &d->train;
    SyntheticBatch b = data_synthetic_batch(d, EVAL_BASE + first, rows, d->teacher);
    if (!sp->n) { data_synthetic_rows(x, NULL, &b); return; }
    for (int r = 0; r < rows; r++) split_row(d, sp, (int64_t)(first + (uint64_t)r), x + (size_t)r * d->inputs);
}

void data_eval_labels(const Data *d, uint64_t first, int rows, int32_t *y) {
    const Split *sp = d->test.n ? &d->test : &d->train;
    SyntheticBatch b = data_synthetic_batch(d, EVAL_BASE + first, rows, d->teacher);
    if (!sp->n) { data_synthetic_rows(NULL, y, &b); return; }
    for (int r = 0; r < rows; r++) y[r] = sp->labels[first + (uint64_t)r];
}

// ---- .npy: magic "\x93NUMPY", version, header length, a Python-dict header, raw data ----

static int npy_fail(Npy *x, char *err, size_t errlen, const char *why) {
    snprintf(err, errlen, "%s", why);
    if (x->f) fclose(x->f);
    x->f = NULL;
    return -1;
}

// The dict's dtype, fortran_order and shape into out. 0, or -1 with the reason.
static int npy_dict(const char *h, Npy *out, const char **why) {
    const char *descr = strstr(h, "'descr'"), *fo = strstr(h, "'fortran_order'"), *sh = strstr(h, "'shape'");
    if (!descr || !fo || !sh) { *why = "header lacks descr/fortran_order/shape"; return -1; }
    const char *q = strchr(descr + 7, '\'');
    if (!q || sscanf(q + 1, "%7[^']", out->dtype) != 1) { *why = "unreadable dtype"; return -1; }
    if (strstr(fo, "True")) { *why = "Fortran-order array: save it with numpy.ascontiguousarray first"; return -1; }
    const char *p = strchr(sh, '(');
    if (!p) { *why = "unreadable shape"; return -1; }
    p++;
    uint64_t count = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || out->ndim >= 2) {
            *why = out->ndim >= 2 ? "more than 2 dimensions" : "unreadable shape";
            return -1;
        }
        out->shape[out->ndim++] = v;
        if (v > 0 && count > INT64_MAX / (uint64_t)v) { *why = "shape too large"; return -1; }
        count *= (uint64_t)v;
        p = end;
    }
    out->count = count;
    return 0;
}

int npy_open(const char *path, Npy *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char why[256];
    int fd = open_input(path, why, sizeof why);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !(out->f = fdopen(fd, "rb"))) {
        if (fd >= 0) { snprintf(why, sizeof why, "%s", strerror(errno)); close(fd); }
        snprintf(err, errlen, "cannot open: %s", why);
        return -1;
    }
    unsigned char pre[12];
    if (fread(pre, 1, 10, out->f) != 10 || memcmp(pre, "\x93NUMPY", 6))
        return npy_fail(out, err, errlen, "not a .npy file (no \\x93NUMPY magic): save it with numpy.save");
    size_t hlen, at = 10;
    if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
    else {
        if (fread(pre + 10, 1, 2, out->f) != 2) return npy_fail(out, err, errlen, "truncated header");
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        at = 12;
    }
    if (hlen > 1 << 20) {
        snprintf(why, sizeof why, "header of %zu bytes is implausible", hlen);
        return npy_fail(out, err, errlen, why);
    }
    char *h = xmalloc(hlen + 1);
    if (fread(h, 1, hlen, out->f) != hlen) { free(h); return npy_fail(out, err, errlen, "truncated header"); }
    h[hlen] = 0;
    const char *bad = NULL;
    int rc = npy_dict(h, out, &bad);
    out->hash = hash64(hash64(0, pre, at), h, hlen);
    free(h);
    if (rc) return npy_fail(out, err, errlen, bad);
    out->esize = !strcmp(out->dtype, "<f4") || !strcmp(out->dtype, "<i4") ? 4 : !strcmp(out->dtype, "<i8") ? 8 : 0;
    if (!out->esize) {
        snprintf(why, sizeof why,
                 "dtype %s is not supported: use float32 features and int32/int64 labels (little-endian)", out->dtype);
        return npy_fail(out, err, errlen, why);
    }
    uint64_t here = at + hlen, size = (uint64_t)st.st_size, have = size > here ? size - here : 0;
    if (out->count > have / out->esize) {  // no count*esize: it may overflow
        snprintf(why, sizeof why,
                 "truncated: header promises %llu elements of %zu bytes but the file holds %llu bytes of data",
                 (unsigned long long)out->count, out->esize, (unsigned long long)have);
        return npy_fail(out, err, errlen, why);
    }
    if (have > out->count * out->esize) {
        snprintf(why, sizeof why,
                 "the file holds %llu bytes after the %llu bytes of data its header promises: a damaged file or a "
                 "wrong header",
                 (unsigned long long)(have - out->count * out->esize), (unsigned long long)(out->count * out->esize));
        return npy_fail(out, err, errlen, why);
    }
    return 0;
}

int npy_load(Npy *x, char *err, size_t errlen) {
    size_t n = (size_t)x->count;
    x->data = xmalloc(n * x->esize);
    if (fread(x->data, x->esize, n, x->f) != n) {
        free(x->data);
        x->data = NULL;
        return npy_fail(x, err, errlen, "read error (the file shrank while it was read?)");
    }
    x->hash = hash64(x->hash, x->data, n * x->esize);
    fclose(x->f);
    x->f = NULL;
    return 0;
}

int npy_read(const char *path, Npy *out, char *err, size_t errlen) {
    if (npy_open(path, out, err, errlen)) return -1;
    return npy_load(out, err, errlen);
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
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)((n + pad + 1) & 0xff),
                             (unsigned char)((n + pad + 1) >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(h, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    size_t esize = strcmp(dtype, "<i8") ? 4 : 8;
    size_t w = fwrite(data, esize, (size_t)count, f);
    return (fclose(f) == 0 && w == (size_t)count) ? 0 : -1;
}
