// base/safetensors.h: the safetensors file format (8-byte little-endian header length, a JSON header that
// gives each tensor's dtype, shape and byte range, then raw little-endian data), the CRC-32 that
// checkpoints record per file, and durable writes (temporary name, fsync, rename, fsync of the folder).
#pragma once
#include <stddef.h>
#include <stdint.h>

#define ST_NAME_LEN 128
#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20)  // the format's own limit on the JSON header

typedef struct {
    char name[ST_NAME_LEN];
    char dtype[8];                // "F32", "F16", "I64", ...
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;          // byte range within the data section
} StTensor;

typedef struct {
    const uint8_t *data;          // the data section (inside the buffer given to st_parse)
    uint64_t data_len;
    int n;                        // tensors, in header order
    StTensor *t;
    void *meta;                   // cJSON object of "__metadata__" (string values), or NULL
} StFile;

// Parses a whole file held in buf[len]. Checks everything a reader relies on: the header length
// against the file, the JSON, each dtype/shape/range, and that the ranges tile the data section
// exactly (no holes, no overlaps). Returns 0, or -1 with the reason in err. Never reads outside buf.
int st_parse(const uint8_t *buf, size_t len, StFile *f, char *err, size_t errlen);
void st_free(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);  // a "__metadata__" value, or NULL
size_t st_dtype_size(const char *dtype);                // 0 when unknown

// CRC-32 (IEEE 802.3, as zlib.crc32 and `crc32` compute it): crc = crc32_update(crc, buf, n), from 0.
uint32_t crc32_update(uint32_t crc, const void *buf, size_t n);

// The header of a file of F32 tensors: names, shapes, laid out back to back in the given order,
// padded with spaces so the data section starts 8-byte aligned. meta_json: "{...}" of strings or NULL.
// Returns the header text (malloc'd; *len its length, a multiple of 8 minus nothing: 8 + len is aligned).
typedef struct { const char *name; int ndim; int64_t shape[2]; } StSpec;
char *st_header_f32(const StSpec *specs, int n, const char *meta_json, size_t *len);

// Durable write of one file: bytes go to "<path>.tmp"; commit fsyncs it, renames it to path and
// fsyncs the folder, so a reader sees the old file or the whole new one, never a part.
typedef struct {
    int fd;
    char path[1024], tmp[1040];
    uint32_t crc;
    uint64_t bytes;
    uint64_t fail_after;  // testing: fail with EIO once this many bytes are written (UINT64_MAX: never)
    char err[1200];       // why the last call failed
} StWriter;
int st_writer_open(StWriter *w, const char *path);
int st_writer_write(StWriter *w, const void *buf, size_t n);
// The file's start: the header's length (8 bytes, little-endian), then the header (st_header_f32's).
int st_writer_header(StWriter *w, const char *header, size_t hlen);
int st_writer_commit(StWriter *w);
void st_writer_abort(StWriter *w);  // closes and removes the temporary file
int fsync_dir(const char *dir);

// Reads a whole file into memory (malloc'd), at most max bytes. Returns 0, or -1 with err.
int read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err, size_t errlen);
