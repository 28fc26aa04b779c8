// base/idx.h: the IDX format of MNIST and Fashion-MNIST (big-endian magic 0x0000TTNN: type TT, NN
// dimensions; NN big-endian uint32 sizes; the data), read plain or gzip-compressed through zlib.
// Unsigned bytes only, the type those data sets use. No MPI, no exits: errors come back as text.
// Read in two steps, so a caller can compare headers (and budget memory) before inflating anything.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 4
#define IDX_GZIP_RATIO 1032  // deflate's best: 258 bytes from 2 bits; a header promising more is a lie

typedef struct IdxStream IdxStream;

typedef struct {
    int ndim;
    int64_t dims[IDX_MAX_DIMS];
    size_t count;         // product of the dimensions: the data's bytes
    uint8_t *data;        // count bytes (free with free()), once idx_load has read them
    int gz;               // gzip-compressed on disk
    uint64_t file_bytes;  // the file's size on disk
    uint64_t hash;        // hash64 of the header; after idx_load, of the header and the data
    IdxStream *s;         // the open file between idx_open and idx_load (or idx_close)
} Idx;

// Opens path (a regular file, gzip or plain: its first bytes tell) and reads the header alone.
// Returns 0, or -1 with one reason in err ("cannot open: ...", "wrong magic 0x...: not an IDX
// file", "truncated: ..."). A header that promises more bytes than the file can hold (plain: other
// than its size; gzip: over IDX_GZIP_RATIO times it) is refused here, before any data is read.
int idx_open(const char *path, Idx *out, char *err, size_t errlen);
// Reads the data of an opened file, then checks its end: the gzip trailer (CRC-32 and length)
// present and right, and not one byte after the data the header promises, inside the stream or
// after it. Closes the file. Returns 0, or -1 with one reason in err (data NULL).
int idx_load(Idx *x, char *err, size_t errlen);
void idx_close(Idx *x);  // closes an opened file that will not be loaded
// idx_open and idx_load in one.
int idx_read(const char *path, Idx *out, char *err, size_t errlen);
// Writes an unsigned-byte IDX file (gzip-compressed when gz); returns 0 or -1. For tests and tools.
int idx_write(const char *path, int ndim, const int64_t *dims, const uint8_t *data, int gz);
