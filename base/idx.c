// base/idx.c: the IDX reader and writer (see idx.h). The file is opened without blocking (open_input: a
// regular file only) and read through zlib's inflate when it starts with gzip's magic, so the
// reader sees every byte: the header alone first, then the data, then the end, where the gzip
// trailer's CRC-32 and length must be present and right and nothing may follow the promised data.
// Every way a file can be bad is a one-line reason for the caller to show.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "base/idx.h"
#include "base/util.h"

#define IDX_UBYTE 0x08
#define IDX_MAX_BYTES ((size_t)1 << 34)  // 16 GiB: more is a corrupt header, not a data set
#define REINSTALL "(download or reinstall the file)"

struct IdxStream {
    int fd, gz, ended;  // ended: the gzip stream's last member and its trailer were read
    z_stream z;         // gzip: inflating from in[]; plain: z.next_in/avail_in are the bytes not yet taken
    uint64_t taken;     // bytes of the file read into in[] so far
    unsigned char in[1 << 17];
};

// At least `least` unread bytes in s->in, unless the file ends first. 0, or -1 on a read error.
static int fill(IdxStream *s, unsigned least, char *err, size_t errlen) {
    if (s->z.avail_in && s->z.next_in != s->in) memmove(s->in, s->z.next_in, s->z.avail_in);
    s->z.next_in = s->in;
    while (s->z.avail_in < least) {
        ssize_t k = read(s->fd, s->in + s->z.avail_in, sizeof s->in - s->z.avail_in);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { snprintf(err, errlen, "read error: %s", strerror(errno)); return -1; }
        if (k == 0) break;
        s->z.avail_in += (unsigned)k;
        s->taken += (uint64_t)k;
    }
    return 0;
}

// After a gzip member's trailer: another member (`cat a.gz b.gz` is one gzip file) or the file's end.
static int member_end(IdxStream *s, uint64_t file_bytes, char *err, size_t errlen) {
    if (fill(s, 2, err, errlen)) return -1;
    if (!s->z.avail_in) { s->ended = 1; return 0; }
    if (s->z.avail_in >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) { inflateReset(&s->z); return 0; }
    uint64_t after = s->z.avail_in + (file_bytes > s->taken ? file_bytes - s->taken : 0);
    snprintf(err, errlen, "%llu %s the end of the gzip stream: a damaged file " REINSTALL, (unsigned long long)after,
             after == 1 ? "byte follows" : "bytes follow");
    return -1;
}

// Up to want bytes of the data (inflated, or plain) into out; *got fewer only at the end of the
// data. 0; -1 with err; -2 when a gzip stream ends before its trailer (the caller words it).
static int pull(IdxStream *s, uint64_t file_bytes, unsigned char *out, size_t want, size_t *got, char *err,
                size_t errlen) {
    *got = 0;
    while (*got < want && !s->ended) {
        if (!s->z.avail_in) {
            if (fill(s, 1, err, errlen)) return -1;
            if (!s->z.avail_in) {
                if (s->gz) return -2;
                s->ended = 1;
                break;
            }
        }
        size_t room = want - *got;
        unsigned chunk = room > (1u << 30) ? 1u << 30 : (unsigned)room;
        if (!s->gz) {
            unsigned k = s->z.avail_in < chunk ? s->z.avail_in : chunk;
            memcpy(out + *got, s->z.next_in, k);
            s->z.next_in += k; s->z.avail_in -= k; *got += k;
            continue;
        }
        s->z.next_out = out + *got;
        s->z.avail_out = chunk;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        *got += chunk - s->z.avail_out;
        if (rc == Z_STREAM_END) { if (member_end(s, file_bytes, err, errlen)) return -1; }
        else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            snprintf(err, errlen, "corrupt gzip stream: %s " REINSTALL, s->z.msg ? s->z.msg : zError(rc));
            return -1;
        }
    }
    return 0;
}

void idx_close(Idx *x) {
    if (!x->s) return;
    if (x->s->gz) inflateEnd(&x->s->z);
    close(x->s->fd);
    free(x->s);
    x->s = NULL;
}

static int fail(Idx *x, char *err, size_t errlen, const char *why) {
    if (why) snprintf(err, errlen, "%s", why);
    idx_close(x);
    free(x->data);
    x->data = NULL;
    return -1;
}

// Reads exactly n header bytes; says which part was cut.
static int header_part(Idx *x, unsigned char *b, size_t n, const char *what, char *err, size_t errlen) {
    size_t got;
    int rc = pull(x->s, x->file_bytes, b, n, &got, err, errlen);
    if (rc == -1) return -1;
    if (got < n) {
        snprintf(err, errlen, "truncated: the %s needs %zu bytes but the file ends after %zu " REINSTALL, what, n, got);
        return -1;
    }
    return 0;
}

// Can the file hold what the header promises? Plain: exactly; gzip: at most IDX_GZIP_RATIO to 1.
static int plausible(const Idx *x, size_t head, char *err, size_t errlen) {
    uint64_t want = head + (uint64_t)x->count;
    if (x->gz && (uint64_t)x->count / IDX_GZIP_RATIO > x->file_bytes)
        snprintf(err, errlen,
                 "the header promises %zu bytes of data, but a gzip file of %llu bytes holds at most %llu (deflate "
                 "compresses at "
                 "most %d to 1): a corrupt header " REINSTALL,
                 x->count, (unsigned long long)x->file_bytes, (unsigned long long)x->file_bytes * IDX_GZIP_RATIO,
                 IDX_GZIP_RATIO);
    else if (!x->gz && x->file_bytes < want)
        snprintf(err, errlen, "truncated: the header promises %zu bytes of data but the file holds %llu " REINSTALL,
                 x->count, (unsigned long long)(x->file_bytes - head));
    else if (!x->gz && x->file_bytes > want)
        snprintf(err, errlen,
                 "the file holds %llu bytes after the %zu bytes of data its header promises: a damaged file or a wrong "
                 "header " REINSTALL,
                 (unsigned long long)(x->file_bytes - want), x->count);
    else return 0;
    return -1;
}

int idx_open(const char *path, Idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char why[256];
    int fd = open_input(path, why, sizeof why);
    if (fd < 0) { snprintf(err, errlen, "cannot open: %s", why); return -1; }
    struct stat st;
    IdxStream *s = calloc(1, sizeof *s);
    if (!s || fstat(fd, &st) != 0) {
        free(s);
        close(fd);
        snprintf(err, errlen, "cannot open: %s", s ? strerror(errno) : "out of memory");
        return -1;
    }
    s->fd = fd;
    out->s = s;
    out->file_bytes = (uint64_t)st.st_size;
    if (fill(s, 2, err, errlen)) return fail(out, err, errlen, NULL);
    out->gz = s->gz = s->z.avail_in >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b;
    if (s->gz && inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
        s->gz = 0;
        return fail(out, err, errlen, "out of memory for zlib");
    }
    unsigned char h[4 + 4 * IDX_MAX_DIMS];
    if (header_part(out, h, 4, "magic number", err, errlen)) return fail(out, err, errlen, NULL);
    if (h[0] || h[1] || h[3] < 1 || h[3] > IDX_MAX_DIMS) {
        snprintf(err, errlen,
                 "wrong magic 0x%02x%02x%02x%02x: not an IDX file (expected 0x00000801 labels or 0x00000803 images)",
                 h[0], h[1], h[2], h[3]);
        return fail(out, err, errlen, NULL);
    }
    if (h[2] != IDX_UBYTE) {
        snprintf(err, errlen,
                 "IDX element type 0x%02x is not supported: only unsigned bytes (0x08), as MNIST-style data sets use",
                 h[2]);
        return fail(out, err, errlen, NULL);
    }
    out->ndim = h[3];
    if (header_part(out, h + 4, 4 * (size_t)out->ndim, "dimensions", err, errlen)) return fail(out, err, errlen, NULL);
    size_t count = 1;
    for (int i = 0; i < out->ndim; i++) {
        const unsigned char *d = h + 4 + 4 * i;
        uint32_t v = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
        out->dims[i] = v;
        if (v && count > IDX_MAX_BYTES / v) {
            snprintf(err, errlen, "dimensions promise more than %zu bytes: a corrupt header", IDX_MAX_BYTES);
            return fail(out, err, errlen, NULL);
        }
        count *= v;
    }
    out->count = count;
    if (plausible(out, 4 + 4 * (size_t)out->ndim, err, errlen)) return fail(out, err, errlen, NULL);
    out->hash = hash64(0, h, 4 + 4 * (size_t)out->ndim);
    return 0;
}

int idx_load(Idx *x, char *err, size_t errlen) {
    IdxStream *s = x->s;
    size_t count = x->count, got = 0, n;
    // Grown as the data arrives, so a header that lies about the size costs no more than the file.
    size_t cap = count < ((size_t)1 << 24) ? count : (size_t)1 << 24;
    x->data = malloc(cap + 1);  // (+1: an empty file's data is still a pointer)
    while (x->data && got < count) {
        if (got == cap) {
            cap = count - cap < cap ? count : 2 * cap;
            uint8_t *grown = realloc(x->data, cap);
            if (!grown) { free(x->data); x->data = NULL; break; }
            x->data = grown;
        }
        size_t want = cap - got;
        int rc = pull(s, x->file_bytes, x->data + got, want, &n, err, errlen);
        got += n;
        if (rc == -1) return fail(x, err, errlen, NULL);
        if (rc == -2 || n < want) {
            snprintf(err, errlen,
                     "truncated: the header promises %zu bytes of data but the file holds fewer " REINSTALL, count);
            return fail(x, err, errlen, NULL);
        }
    }
    if (!x->data) { snprintf(err, errlen, "out of memory for %zu bytes", count); return fail(x, err, errlen, NULL); }
    // The end: the rest of the stream (its trailer checked by inflate), which must hold no byte more.
    unsigned char rest[4096];
    uint64_t extra = 0;
    int rc;
    while ((rc = pull(s, x->file_bytes, rest, sizeof rest, &n, err, errlen)) == 0 && n) extra += n;
    if (rc == -1) return fail(x, err, errlen, NULL);
    if (rc == -2) {
        snprintf(err, errlen,
                 "truncated: the gzip stream ends before its trailer (CRC-32 and length), so the data cannot be "
                 "checked " REINSTALL);
        return fail(x, err, errlen, NULL);
    }
    if (extra) {
        snprintf(err, errlen,
                 "the file holds %llu bytes after the %zu bytes of data its header promises: a damaged file or a wrong "
                 "header " REINSTALL,
                 (unsigned long long)extra, count);
        return fail(x, err, errlen, NULL);
    }
    x->hash = hash64(x->hash, x->data, count);
    idx_close(x);
    return 0;
}

int idx_read(const char *path, Idx *out, char *err, size_t errlen) {
    if (idx_open(path, out, err, errlen)) return -1;
    return idx_load(out, err, errlen);
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
    int ok = gzwrite(f, h, 4 + 4 * (unsigned)ndim) == (int)(4 + 4 * ndim) &&
             (count == 0 || gzwrite(f, data, (unsigned)count) == (int)count);
    return gzclose(f) == Z_OK && ok ? 0 : -1;
}
