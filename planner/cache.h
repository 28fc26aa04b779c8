// planner/cache.h: `plan --auto` out of the box: given neither --profile nor --machine, this machine is
// measured (`mpiexec -n W micropp plan --calibrate`, run as a child) once and the profile cached, keyed by
// what its figures depend on (host, CPU, BLAS and its threads, the model's widths and batch, the world);
// a cached profile whose key is not this run's is never used: it is measured again, and the line says why.
#pragma once
#include <stddef.h>
#include "base/config.h"

// What the figures of a calibration of world ranks for the model c depend on, in words (the cache's key).
void cache_key(const TrainConfig *c, int world, char *out, size_t n);
// The profile of this machine for c on world ranks: path gets the cached file (measured now when there is
// none, or when the one there was measured for another key); what it did goes to stdout as "# costs:"
// lines. 0, or -1 with one line in err (no mpiexec, a world larger than this machine, the calibration failed).
int cache_profile(const TrainConfig *c, int world, char *path, size_t pn, char *err, size_t n);
// A profile measured with another BLAS, BLAS core or thread count than this machine runs c with (its source,
// e.g. "... openblas 0.3.21 core=SkylakeX threads=1", against blas_describe's here): one warning line in out
// ("# warning: ...", with the command that measures this machine for a world of `world`); "" when they are
// alike or the source names no BLAS (a machine file).
void cache_foreign(const char *source, const TrainConfig *c, int world, char *out, size_t n);
