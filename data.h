// data.h: where training rows come from. Counter-based: sample i's features and label are a pure
// function of (seed, i), so any rank makes exactly the rows it needs with no message; or rows
// of a user's .npy files. Also the counter-based RNG the weight init uses.
#pragma once
#include <stdint.h>
#include <stddef.h>

// splitmix64 finaliser: a strong 64-bit mix, the core of the counter-based generator.
static inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
// A stream key from up to three words (seed, purpose, index).
static inline uint64_t rng_key(uint64_t a, uint64_t b, uint64_t c) { return mix64(mix64(mix64(a) ^ b) ^ c); }
// Uniform in [0, 1) for element i of stream key.
static inline float rng_uniform(uint64_t key, uint64_t i) { return (float)((mix64(key ^ mix64(i)) >> 40) * (1.0 / 16777216.0)); }
float rng_normal(uint64_t key, uint64_t i);  // standard normal, Box-Muller over two counters

enum { RNG_PARAM = 1, RNG_FEATURES = 2, RNG_TEACHER = 3 };

typedef struct {
    int hidden, classes;
    uint64_t seed;
    // .npy source (NULL features = synthetic)
    float *features;   // [n, hidden]
    int32_t *labels;   // [n]
    int64_t n;
    float *teacher;    // synthetic: [classes, hidden]
} Data;

#define EVAL_BASE (1ULL << 40)  // synthetic held-out samples start at this index

// Opens the data source; bad files end the run through user_error (exit 2).
void data_open(Data *d, const char *src, const char *labels_path, int hidden, int classes, uint64_t seed);
void data_close(Data *d);
// Rows [first, first + rows) of the stream: features x[rows, hidden] and labels y[rows] (host memory).
void data_features(const Data *d, uint64_t first, int rows, float *x);
void data_labels(const Data *d, uint64_t first, int rows, int32_t *y);

// .npy (numpy's format): returns NULL and an error reason in err on failure.
// dtype: "<f4", "<i4" or "<i8" as found; shape up to 2 dims.
typedef struct { char dtype[8]; int ndim; int64_t shape[2]; void *data; } Npy;
int npy_read(const char *path, Npy *out, char *err, size_t errlen);
int npy_write(const char *path, const char *dtype, int ndim, const int64_t *shape, const void *data);
