// base/safetensors.c: reading and writing safetensors files (the format of Hugging Face's safetensors:
// u64 header length, JSON header, raw data), CRC-32 of file bytes, and durable file writes.
// The reader trusts nothing in the file: every length and offset is checked before use.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "base/safetensors.h"
#include "base/util.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this host is not");

// ---- CRC-32 ----

static uint32_t crc_table[256];
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t crc32_update(uint32_t crc, const void *buf, size_t n) {
    if (!crc_table[1]) crc_init();
    const uint8_t *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

// ---- reading ----

size_t st_dtype_size(const char *d) {
    static const struct { const char *name; size_t size; } t[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) if (!strcmp(d, t[i].name)) return t[i].size;
    return 0;
}

// A JSON number that is an exact non-negative integer below 2^53 (what a byte count can be).
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); st_free(f); return -1; } while (0)
// the message may name a string of the JSON tree: format it before the tree goes
#define FAIL_ROOT(...) do { snprintf(err, errlen, __VA_ARGS__); cJSON_Delete(root); st_free(f); return -1; } while (0)

int st_parse(const uint8_t *buf, size_t len, StFile *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    if (len < 8) FAIL("file of %zu bytes is too short for a safetensors header (truncated?)", len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    if (hlen > len - 8)
        FAIL("header length %llu exceeds the %zu bytes of the file (truncated, or not safetensors)",
             (unsigned long long)hlen, len);
    if (hlen > ST_MAX_HEADER) FAIL("header of %llu bytes is over the format's 100 MB limit", (unsigned long long)hlen);
    cJSON *root = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hlen);
    if (!root) FAIL("header is not valid JSON");
    f->meta = NULL;
    if (!cJSON_IsObject(root)) FAIL_ROOT("header is not a JSON object");
    f->data = buf + 8 + hlen;
    f->data_len = len - 8 - hlen;
    int count = cJSON_GetArraySize(root);
    f->t = calloc((size_t)(count ? count : 1), sizeof(StTensor));
    if (!f->t) FAIL_ROOT("out of memory for %d tensors", count);
    for (cJSON *it = root->child; it; it = it->next) {
        const char *name = it->string ? it->string : "";
        if (!strcmp(name, "__metadata__")) {
            if (f->meta) FAIL_ROOT("two __metadata__ entries");
            if (!cJSON_IsObject(it)) FAIL_ROOT("__metadata__ is not an object");
            for (cJSON *m = it->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    FAIL_ROOT("__metadata__ value '%.64s' is not a string", m->string ? m->string : "");
            f->meta = cJSON_Duplicate(it, 1);
            if (!f->meta) FAIL_ROOT("out of memory for the metadata");
            continue;
        }
        if (strlen(name) >= ST_NAME_LEN)
            FAIL_ROOT("tensor name '%.64s...' is longer than %d bytes", name, ST_NAME_LEN - 1);
        StTensor *t = &f->t[f->n];
        snprintf(t->name, sizeof t->name, "%s", name);
        if (!cJSON_IsObject(it)) FAIL_ROOT("tensor '%s' is not a JSON object", name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
            FAIL_ROOT("tensor '%s' lacks dtype, shape or data_offsets", name);
        size_t esize = st_dtype_size(dt->valuestring);
        if (!esize || strlen(dt->valuestring) >= sizeof t->dtype)
            FAIL_ROOT("tensor '%s' has unknown dtype '%.16s'", name, dt->valuestring);
        strcpy(t->dtype, dt->valuestring);
        uint64_t numel = 1;
        int overflow = 0;
        for (const cJSON *d = sh->child; d; d = d->next) {
            uint64_t v;
            if (t->ndim >= ST_MAX_DIMS) FAIL_ROOT("tensor '%s' has more than %d dimensions", name, ST_MAX_DIMS);
            if (json_u64(d, &v)) FAIL_ROOT("tensor '%s' has a shape entry that is not a non-negative integer", name);
            t->shape[t->ndim++] = (int64_t)v;
            if (v && numel > UINT64_MAX / v) overflow = 1;
            numel *= v;
        }
        uint64_t b, e;
        if (cJSON_GetArraySize(off) != 2 || json_u64(off->child, &b) || json_u64(off->child->next, &e) || b > e)
            FAIL_ROOT("tensor '%s' has data_offsets that are not [begin, end] with begin <= end", name);
        if (e > f->data_len)
            FAIL_ROOT("tensor '%s' ends at byte %llu of a %llu-byte data section (truncated?)", name,
                      (unsigned long long)e, (unsigned long long)f->data_len);
        if (overflow || numel > UINT64_MAX / esize || numel * esize != e - b)
            FAIL_ROOT("tensor '%s': its shape needs %s bytes but data_offsets span %llu", name,
                      overflow ? "too many" : "a different number of", (unsigned long long)(e - b));
        t->begin = b;
        t->end = e;
        f->n++;
    }
    cJSON_Delete(root);
    const StTensor **order = malloc(sizeof *order * (size_t)(f->n ? f->n : 1));
    if (!order) FAIL("out of memory");
    for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
    // names are unique
    qsort(order, (size_t)f->n, sizeof *order, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(order[i]->name, order[i - 1]->name)) {
            char name[ST_NAME_LEN];
            snprintf(name, sizeof name, "%s", order[i]->name);
            free(order);
            FAIL("tensor '%s' appears twice", name);
        }
    // the ranges tile [0, data_len): no overlap (two tensors sharing bytes), no hole
    qsort(order, (size_t)f->n, sizeof *order, cmp_range);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (order[i]->begin != at) {
            char name[ST_NAME_LEN];
            unsigned long long begin = order[i]->begin;
            snprintf(name, sizeof name, "%s", order[i]->name);
            free(order);
            FAIL("tensor '%s' starts at byte %llu, expected %llu (data ranges overlap or leave a hole)", name, begin,
                 (unsigned long long)at);
        }
        at = order[i]->end;
    }
    free(order);
    if (at != f->data_len)
        FAIL("the tensors cover %llu bytes but the data section has %llu (trailing bytes)", (unsigned long long)at,
             (unsigned long long)f->data_len);
    return 0;
}
#undef FAIL
#undef FAIL_ROOT

void st_free(StFile *f) {
    free(f->t);
    cJSON_Delete(f->meta);
    memset(f, 0, sizeof *f);
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++) if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// ---- writing ----

char *st_header_f32(const StSpec *specs, int n, const char *meta_json, size_t *len) {
    cJSON *root = cJSON_CreateObject();
    if (meta_json) {
        cJSON *m = cJSON_Parse(meta_json);
        if (m) cJSON_AddItemToObject(root, "__metadata__", m);
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "dtype", "F32");
        double shape[2] = {(double)specs[i].shape[0], (double)specs[i].shape[1]};
        cJSON_AddItemToObject(t, "shape", cJSON_CreateDoubleArray(shape, specs[i].ndim));
        uint64_t bytes = 4;
        for (int d = 0; d < specs[i].ndim; d++) bytes *= (uint64_t)specs[i].shape[d];
        double offs[2] = {(double)at, (double)(at + bytes)};
        cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateDoubleArray(offs, 2));
        cJSON_AddItemToObject(root, specs[i].name, t);
        at += bytes;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return NULL;
    size_t l = strlen(text), padded = (l + 7) / 8 * 8;  // 8 + padded is a multiple of 8
    char *h = realloc(text, padded + 1);
    if (!h) { free(text); return NULL; }
    memset(h + l, ' ', padded - l);
    h[padded] = 0;
    *len = padded;
    return h;
}

int st_writer_open(StWriter *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->fail_after = UINT64_MAX;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    // O_NONBLOCK: a FIFO left under the temporary name would otherwise wait for a reader forever
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
    if (w->fd < 0) {
        snprintf(w->err, sizeof w->err, "cannot create %s: %s", w->tmp,
                 errno == ENXIO ? "a FIFO has that name: remove it" : strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(w->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(w->fd);
        w->fd = -1;
        snprintf(w->err, sizeof w->err,
                 "cannot create %s: something other than a regular file has that name: remove it", w->tmp);
        return -1;
    }
    fcntl(w->fd, F_SETFL, O_WRONLY);  // blocking writes again (O_NONBLOCK off)
    return 0;
}

int st_writer_write(StWriter *w, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t k;
        if (w->bytes + chunk > w->fail_after) { k = -1; errno = EIO; }
        else k = write(w->fd, p, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            snprintf(w->err, sizeof w->err, "writing %s: %s%s", w->tmp,
                     k < 0 ? strerror(errno) : "no progress (disk full?)",
                     w->bytes + chunk > w->fail_after ? " (injected by MICROPP_FAULT)" : "");
            return -1;
        }
        w->crc = crc32_update(w->crc, p, (size_t)k);
        w->bytes += (uint64_t)k;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int st_writer_header(StWriter *w, const char *header, size_t hlen) {
    uint8_t len8[8];  // the file's first 8 bytes: the header's length, little-endian
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    return st_writer_write(w, len8, 8) || st_writer_write(w, header, hlen);
}

int st_writer_commit(StWriter *w) {
    if (fsync(w->fd) != 0) { snprintf(w->err, sizeof w->err, "fsync %s: %s", w->tmp, strerror(errno)); return -1; }
    if (close(w->fd) != 0) {
        w->fd = -1;
        snprintf(w->err, sizeof w->err, "closing %s: %s", w->tmp, strerror(errno));
        return -1;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) != 0) {
        snprintf(w->err, sizeof w->err, "renaming %s.tmp into place: %s", w->path, strerror(errno));
        return -1;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", w->path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else strcpy(dir, ".");
    if (fsync_dir(dir[0] ? dir : "/") != 0) {
        snprintf(w->err, sizeof w->err, "fsync of folder %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

void st_writer_abort(StWriter *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    unlink(w->tmp);
}

int read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    *buf = NULL;
    *len = 0;
    char why[256];
    int fd = open_input(path, why, sizeof why);  // (a FIFO is refused, not waited on)
    if (fd < 0) { snprintf(err, errlen, "cannot open %s: %s", path, why); return -1; }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        snprintf(err, errlen, "%s has %lld bytes, more than the %zu allowed", path, (long long)st.st_size, max);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) { close(fd); snprintf(err, errlen, "out of memory reading %s (%zu bytes)", path, n); return -1; }
    while (got < n) {
        ssize_t k = read(fd, b + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(b);
            close(fd);
            snprintf(err, errlen, "reading %s: %s", path, k < 0 ? strerror(errno) : "file shrank while reading");
            return -1;
        }
        got += (size_t)k;
    }
    close(fd);
    *buf = b;
    *len = n;
    return 0;
}
