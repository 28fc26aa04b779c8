// data.c: the synthetic classification task (unit-variance uniform features, label = argmax of a fixed random
// linear teacher), the .npy reader/writer, and the Box-Muller normal of the counter-based RNG.
#include <errno.h>
#include <math.h>
#include <string.h>
#include "data.h"
#include "util.h"

float rng_normal(uint64_t key, uint64_t i) {
    float u1 = rng_uniform(key, 2 * i), u2 = rng_uniform(key, 2 * i + 1);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

void data_open(Data *d, const char *src, const char *labels_path, int hidden, int classes, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->hidden = hidden;
    d->classes = classes;
    d->seed = seed;
    if (!strcmp(src, "synthetic")) {
        if (labels_path[0]) user_error("train: --labels is for --data FILE.npy; drop it or give --data");
        d->teacher = xmalloc(sizeof(float) * (size_t)classes * hidden);
        uint64_t key = rng_key(seed, RNG_TEACHER, 0);
        for (size_t i = 0; i < (size_t)classes * hidden; i++) d->teacher[i] = rng_normal(key, i);
        return;
    }
    if (!labels_path[0]) user_error("train: --data %s needs --labels FILE.npy (int32 or int64, shape [N])", src);
    char err[512];
    Npy x, y;
    // Reading can fail on one node only (a path missing there): every rank takes the same verdict.
    char why[1536] = "";
    if (npy_read(src, &x, err, sizeof err)) snprintf(why, sizeof why, "train: --data %s: %s", src, err);
    agree_on_error(why);
    if (strcmp(x.dtype, "<f4") || x.ndim != 2 || x.shape[1] != hidden)
        user_error("train: --data %s: need float32 [N,%d] (N rows of --hidden %d features), got %s with %d dims%s",
                   src, hidden, hidden, x.dtype, x.ndim, x.ndim == 2 ? " of another width" : "");
    if (npy_read(labels_path, &y, err, sizeof err)) snprintf(why, sizeof why, "train: --labels %s: %s", labels_path, err);
    agree_on_error(why);
    if ((strcmp(y.dtype, "<i4") && strcmp(y.dtype, "<i8")) || y.ndim != 1 || y.shape[0] != x.shape[0])
        user_error("train: --labels %s: need int32 or int64 [%lld] (one label per row of --data), got %s with %d dims",
                   labels_path, (long long)x.shape[0], y.dtype, y.ndim);
    if (x.shape[0] < 1) user_error("train: --data %s has no rows", src);
    d->n = x.shape[0];
    d->features = x.data;
    d->labels = xmalloc(sizeof(int32_t) * (size_t)d->n);
    for (int64_t i = 0; i < d->n; i++) {
        int64_t v = !strcmp(y.dtype, "<i4") ? ((int32_t *)y.data)[i] : ((int64_t *)y.data)[i];
        if (v < 0 || v >= classes)
            user_error("train: --labels %s: label %lld at row %lld is outside [0, %d): set --classes to cover it",
                       labels_path, (long long)v, (long long)i, classes);
        d->labels[i] = (int32_t)v;
    }
    free(y.data);
}

void data_close(Data *d) {
    free(d->features);
    free(d->labels);
    free(d->teacher);
    memset(d, 0, sizeof *d);
}

void data_features(const Data *d, uint64_t first, int rows, float *x) {
    int H = d->hidden;
    for (int r = 0; r < rows; r++) {
        uint64_t i = first + (uint64_t)r;
        if (d->features) {
            memcpy(x + (size_t)r * H, d->features + (size_t)(i % (uint64_t)d->n) * H, sizeof(float) * H);
        } else {
            // Uniform on [-sqrt(3), sqrt(3)): zero mean, unit variance, one hash per feature.
            uint64_t key = rng_key(d->seed, RNG_FEATURES, i);
            for (int j = 0; j < H; j++) x[(size_t)r * H + j] = (2.0f * rng_uniform(key, (uint64_t)j) - 1.0f) * 1.7320508f;
        }
    }
}

void data_labels(const Data *d, uint64_t first, int rows, int32_t *y) {
    int H = d->hidden, C = d->classes;
    float *x = d->features ? NULL : xmalloc(sizeof(float) * H);
    for (int r = 0; r < rows; r++) {
        uint64_t i = first + (uint64_t)r;
        if (d->features) { y[r] = d->labels[i % (uint64_t)d->n]; continue; }
        data_features(d, i, 1, x);
        int best = 0;
        float best_v = -INFINITY;
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int j = 0; j < H; j++) s += d->teacher[(size_t)c * H + j] * x[j];
            if (s > best_v) { best_v = s; best = c; }
        }
        y[r] = best;
    }
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
