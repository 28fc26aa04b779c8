// cuda_stub.c: the CUDA backend entry point of a CPU-only build (make CUDA=0, or no nvcc found).
#include <stdio.h>
#include "ops.h"

const Backend *backend_cuda_open(int local_rank, char *err, size_t errlen) {
    (void)local_rank;
    snprintf(err, errlen, "this micropp was built without CUDA (rebuild with nvcc on PATH, or make CUDA=1)");
    return NULL;
}
