// idx.h: the IDX format of MNIST and Fashion-MNIST (big-endian magic 0x0000TTNN: type TT, NN
// dimensions; NN big-endian uint32 sizes; the data), read plain or gzip-compressed through zlib.
// Unsigned bytes only, the type those data sets use. No MPI, no exits: errors come back as text.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 4

typedef struct {
    int ndim;
    int64_t dims[IDX_MAX_DIMS];
    size_t count;   // product of the dimensions
    uint8_t *data;  // count bytes (free with free())
} Idx;

// Reads path (gzip or plain, told apart by zlib). Returns 0, or -1 with one reason in err
// ("wrong magic 0x...: not an IDX file", "truncated: ...", "corrupt gzip stream: ...").
int idx_read(const char *path, Idx *out, char *err, size_t errlen);
// Writes an unsigned-byte IDX file (gzip-compressed when gz); returns 0 or -1. For tests and tools.
int idx_write(const char *path, int ndim, const int64_t *dims, const uint8_t *data, int gz);
