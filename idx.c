// idx.c: the IDX reader and writer (see idx.h). zlib's gzread reads a gzip stream and a plain file
// alike; every way a file can be bad (magic, type, sizes, truncation, a corrupt stream) is a
// one-line reason for the caller to show.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "idx.h"

#define IDX_UBYTE 0x08
#define IDX_MAX_BYTES ((size_t)1 << 34)  // 16 GiB: more is a corrupt header, not a data set

// Reads exactly n bytes; on a short read says why (the stream's error, or where it ended).
static int read_exact(gzFile f, void *buf, size_t n, const char *what, char *err, size_t errlen) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
        int k = gzread(f, (char *)buf + got, chunk);
        if (k < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            snprintf(err, errlen, "corrupt gzip stream while reading the %s: %s (download or reinstall the file)", what, msg);
            return -1;
        }
        if (k == 0) {
            int code;
            const char *msg = gzerror(f, &code);
            if (code != Z_OK && code != Z_BUF_ERROR)
                snprintf(err, errlen, "corrupt gzip stream while reading the %s: %s (download or reinstall the file)", what, msg);
            else
                snprintf(err, errlen, "truncated: the %s needs %zu bytes but the file ends after %zu (download or reinstall the file)", what, n, got);
            return -1;
        }
        got += (size_t)k;
    }
    return 0;
}

int idx_read(const char *path, Idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) { snprintf(err, errlen, "cannot open: %s (check the path)", errno ? strerror(errno) : "out of memory"); return -1; }
    gzbuffer(f, 1 << 17);
    unsigned char m[4];
    if (read_exact(f, m, 4, "magic number", err, errlen)) { gzclose(f); return -1; }
    if (m[0] || m[1] || m[3] < 1 || m[3] > IDX_MAX_DIMS) {
        snprintf(err, errlen, "wrong magic 0x%02x%02x%02x%02x: not an IDX file (expected 0x00000801 labels or 0x00000803 images)", m[0], m[1], m[2], m[3]);
        gzclose(f);
        return -1;
    }
    if (m[2] != IDX_UBYTE) {
        snprintf(err, errlen, "IDX element type 0x%02x is not supported: only unsigned bytes (0x08), as MNIST-style data sets use", m[2]);
        gzclose(f);
        return -1;
    }
    out->ndim = m[3];
    unsigned char d[4 * IDX_MAX_DIMS];
    if (read_exact(f, d, 4 * (size_t)out->ndim, "dimensions", err, errlen)) { gzclose(f); return -1; }
    size_t count = 1;
    for (int i = 0; i < out->ndim; i++) {
        uint32_t v = (uint32_t)d[4 * i] << 24 | (uint32_t)d[4 * i + 1] << 16 | (uint32_t)d[4 * i + 2] << 8 | d[4 * i + 3];
        out->dims[i] = v;
        if (v && count > IDX_MAX_BYTES / v) {
            snprintf(err, errlen, "dimensions promise more than %zu bytes: a corrupt header", IDX_MAX_BYTES);
            gzclose(f);
            return -1;
        }
        count *= v;
    }
    out->count = count;
    // Grown as the data arrives, so a header that lies about the size costs no more than the file.
    size_t cap = count < ((size_t)1 << 24) ? count : (size_t)1 << 24, got = 0;
    out->data = malloc(cap + 1);  // (+1: an empty file's data is still a pointer)
    while (out->data && got < count) {
        if (got == cap) {
            cap = count - cap < cap ? count : 2 * cap;
            uint8_t *grown = realloc(out->data, cap);
            if (!grown) { free(out->data); out->data = NULL; break; }
            out->data = grown;
        }
        char what[64];
        snprintf(what, sizeof what, "data (%zu bytes)", count);
        size_t want = cap - got;
        if (read_exact(f, out->data + got, want, what, err, errlen)) {
            if (!strncmp(err, "truncated", 9))  // say how much of the whole, not of this chunk
                snprintf(err, errlen, "truncated: the header promises %zu bytes of data but the file holds fewer (download or reinstall the file)", count);
            free(out->data);
            out->data = NULL;
            gzclose(f);
            return -1;
        }
        got += want;
    }
    if (!out->data) { snprintf(err, errlen, "out of memory for %zu bytes", count); gzclose(f); return -1; }
    // The end of the stream must be intact too: zlib checks the gzip trailer's CRC only when it is read.
    char extra;
    int k = gzread(f, &extra, 1), code;
    const char *msg = gzerror(f, &code);
    if (k < 0 || (code != Z_OK && code != Z_BUF_ERROR)) {
        snprintf(err, errlen, "corrupt gzip stream at its end: %s (download or reinstall the file)", msg);
        free(out->data); out->data = NULL; gzclose(f);
        return -1;
    }
    gzclose(f);
    return 0;
}

int idx_write(const char *path, int ndim, const int64_t *dims, const uint8_t *data, int gz) {
    gzFile f = gzopen(path, gz ? "wb6" : "wbT");  // T: plain, no gzip framing
    if (!f) return -1;
    unsigned char h[4 + 4 * IDX_MAX_DIMS] = {0, 0, IDX_UBYTE, (unsigned char)ndim};
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        uint32_t v = (uint32_t)dims[i];
        h[4 + 4 * i] = (unsigned char)(v >> 24); h[5 + 4 * i] = (unsigned char)(v >> 16);
        h[6 + 4 * i] = (unsigned char)(v >> 8);  h[7 + 4 * i] = (unsigned char)v;
        count *= v;
    }
    int ok = gzwrite(f, h, 4 + 4 * (unsigned)ndim) == (int)(4 + 4 * ndim) && (count == 0 || gzwrite(f, data, (unsigned)count) == (int)count);
    return gzclose(f) == Z_OK && ok ? 0 : -1;
}
