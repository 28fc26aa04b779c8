// base/data.h: where training rows come from. Counter-based: sample i's features and label are a pure
// function of (seed, i), so any rank makes exactly the rows it needs with no message; or rows of
// a real data set (IDX: Fashion-MNIST, a folder, files; or .npy), shuffled per epoch from (seed,
// epoch) alike on every rank. Also the counter-based RNG the weight init uses.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

// DATA_HD: these inline functions compile for the GPU too (kernels.cu makes synthetic rows there), so
// host and device compute the same bits from the same code.
#ifdef __CUDACC__
#define DATA_HD __host__ __device__
#else
#define DATA_HD
#endif

// splitmix64 finaliser: a strong 64-bit mix, the core of the counter-based generator.
static inline DATA_HD uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
// A stream key from up to three words (seed, purpose, index).
static inline DATA_HD uint64_t rng_key(uint64_t a, uint64_t b, uint64_t c) { return mix64(mix64(mix64(a) ^ b) ^ c); }
// Uniform in [0, 1) for element i of stream key.
static inline DATA_HD float rng_uniform(uint64_t key, uint64_t i) {
    return (float)((mix64(key ^ mix64(i)) >> 40) * (1.0 / 16777216.0));
}
float rng_normal(uint64_t key, uint64_t i);  // standard normal, Box-Muller over two counters

enum { RNG_PARAM = 1, RNG_FEATURES = 2, RNG_TEACHER = 3, RNG_SHUFFLE = 4, RNG_EXPERT = 5 };

// The synthetic task, row by row (base/data.c on the host, kernels.cu on a GPU): feature j of the row
// whose stream key is row_key = rng_key(seed, RNG_FEATURES, i), uniform on [-sqrt(3), sqrt(3)) (zero
// mean, unit variance) ...
static inline DATA_HD float synthetic_feature(uint64_t row_key, int j) {
    return (2.0f * rng_uniform(row_key, (uint64_t)j) - 1.0f) * 1.7320508f;
}
// ... and its label: the argmax over classes of teacher[c, :] . x (the first on a tie). Each dot product
// is summed in SYNTHETIC_LANES strided parts (part k: x[j] t[j] for j = k, k + LANES, ... in order, with
// fused multiply-adds: the same bits whatever a compiler contracts), then the parts added in a fixed
// tree (part k += part k + h, for h = 16, 8, 4, 2, 1): a GPU warp's 32 lanes sum a row that way (kernels.cu), and the
// host in the same order, so both give the same bits.
#define SYNTHETIC_LANES 32
static inline DATA_HD float synthetic_part(const float *x, const float *t, int D, int k) {
    float s = 0.0f;
    for (int j = k; j < D; j += SYNTHETIC_LANES) s = fmaf(t[j], x[j], s);
    return s;
}
static inline int32_t synthetic_argmax(const float *x, const float *teacher, int D, int C) {
    int32_t best = 0;
    float best_v = -INFINITY;
    for (int c = 0; c < C; c++) {
        float part[SYNTHETIC_LANES];
        for (int k = 0; k < SYNTHETIC_LANES; k++) part[k] = synthetic_part(x, teacher + (size_t)c * D, D, k);
        for (int h = SYNTHETIC_LANES / 2; h > 0; h /= 2)
            for (int k = 0; k < h; k++) part[k] += part[k + h];
        if (part[0] > best_v) { best_v = part[0]; best = c; }
    }
    return best;
}
// A batch of synthetic rows for a backend that makes them on its device (base/ops.h's synthetic):
// rows first .. first + rows - 1 of the stream of seed; teacher [classes, inputs] in the device's memory.
typedef struct {
    uint64_t seed, first;
    int rows, inputs, classes;
    const float *teacher;
} SyntheticBatch;

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"  // (MICROPP_DATASETS=DIR: DIR/fashion-mnist)
#define FASHION_MNIST_PACKAGE "dataset-fashion-mnist"

// A table of rows: float features (.npy), or unsigned-byte pixels (IDX) turned into features as
// they are read: x = pixel x scale + shift (scaled to [0,1], then standardised).
typedef struct {
    float *features;   // [n, inputs], or NULL
    uint8_t *pixels;   // [n, inputs], or NULL
    int32_t *labels;   // [n]
    int64_t n;
} Split;

typedef struct ShuffleCache ShuffleCache;
typedef struct DataTables DataTables;  // (data.c) the files opened by data_open, read by data_load

typedef struct {
    int inputs, classes;
    uint64_t seed;
    // real data (train.n == 0: synthetic)
    Split train, test;  // test.n == 0: no test split (accuracy is then measured on training rows)
    float scale, shift;            // IDX pixels: x = pixel * scale + shift
    double mean, std;              // ... from the training set's pixels scaled to [0,1]
    char name[64];                 // "fashion-mnist", the folder, or the features file (for the header)
    // epochs: the stream of training samples is epoch after epoch of epoch_rows rows, each a
    // permutation of the training set drawn from (seed, epoch); 0: the set cycled in order.
    uint64_t epoch_rows;
    ShuffleCache *cache;           // the permutation of the last epoch asked for
    float *teacher;    // synthetic: [classes, inputs]
    DataTables *pending;           // between data_open and data_load: the files whose headers were read
} Data;

#define EVAL_BASE (1ULL << 40)  // synthetic held-out samples start at this index

// Where the data comes from, as the options give it.
typedef struct {
    const char *data, *labels, *test_data, *test_labels;
} DataSource;

// The data in two steps, so that the plan can take the data's shape before anything large is read.
// Bad files end the run through user_error (exit 2), decided alike on every rank (agree_on_error: a
// file only some ranks can read ends them all; agree_on_contents: ranks that read different bytes
// under one path end too).
// data_open: every header, compared across ranks and checked (shapes against --inputs, counts of
// labels against rows, one format): after it d->train.n and d->test.n hold the splits' rows (0 for
// synthetic data, which reads nothing).
void data_open(Data *d, DataSource src, int inputs, uint64_t seed);
// data_load: the bytes the headers promise against the node's memory (refused before anything is
// inflated), then the data, checked value by value (finite features, labels in [0, classes));
// synthetic: its teacher. After data_open, once the plan is made.
void data_load(Data *d, int classes);
void data_close(Data *d);
// Turns on epochs: every epoch is a fresh permutation of the training rows, of which the first
// epoch_rows (whole steps) are used.
void data_set_epochs(Data *d, uint64_t epoch_rows);
// Rows [first, first + rows) of the training stream: features x[rows, inputs] and labels y[rows].
void data_features(const Data *d, uint64_t first, int rows, float *x);
void data_labels(const Data *d, uint64_t first, int rows, int32_t *y);
// Synthetic data (d->train.n == 0): rows b->first .. + b->rows of the training stream made on the host, x
// and y as a backend's synthetic writes them (either NULL to skip; the labels from the features made for
// x when both are asked for); data_synthetic_batch describes them, teacher wherever the maker reads it.
void data_synthetic_rows(float *x, int32_t *y, const SyntheticBatch *b);
SyntheticBatch data_synthetic_batch(const Data *d, uint64_t first, int rows, const float *teacher);
// Held-out rows [first, first + rows): the test split, or synthetic samples from EVAL_BASE on, or
// (a .npy file without a test split) the training rows in order (how many: the plan's eval_rows).
void data_eval_features(const Data *d, uint64_t first, int rows, float *x);
void data_eval_labels(const Data *d, uint64_t first, int rows, int32_t *y);

// .npy (numpy's format): returns NULL and an error reason in err on failure.
// dtype: "<f4", "<i4" or "<i8" as found; shape up to 2 dims. Read in two steps like IDX (idx.h):
// npy_open reads the header (and refuses a file whose size is not what it promises), npy_load the data.
typedef struct {
    char dtype[8];
    int ndim;
    int64_t shape[2];
    void *data;         // count * esize bytes, once npy_load has read them
    uint64_t count;     // elements
    size_t esize;       // bytes per element
    uint64_t hash;      // hash64 of the header; after npy_load, of the header and the data
    FILE *f;            // open between npy_open and npy_load
} Npy;
int npy_open(const char *path, Npy *out, char *err, size_t errlen);
int npy_load(Npy *x, char *err, size_t errlen);
int npy_read(const char *path, Npy *out, char *err, size_t errlen);  // both
int npy_write(const char *path, const char *dtype, int ndim, const int64_t *shape, const void *data);
