// bench/gpu_sgemm.c: the cuBLAS sgemm ceiling for the model's layer shapes, fp32 and TF32, timed by
// the backend's own gemm timing (cudaEvents around each call), so `train --gemm-timing` figures
// compare with it directly. Prints one JSON object per shape and math mode; exit 2 without a GPU.
#include <stdio.h>
#include <stdlib.h>
#include "base/data.h"
#include "base/ops.h"
#include "base/util.h"

int main(int argc, char **argv) {
    int hidden = argc > 1 ? atoi(argv[1]) : 1024, rows = argc > 2 ? atoi(argv[2]) : 256, reps = 50;
    if (hidden < 1 || rows < 1) { fprintf(stderr, "usage: bench/gpu_sgemm [HIDDEN [ROWS]]\n"); return 2; }
    char err[256], dev[192];
    const Backend *be = backend_cuda_open(0, err, sizeof err);
    if (!be) { fprintf(stderr, "gpu_sgemm: no CUDA device: %s\n", err); return 2; }
    struct { int m, n, k, ta, tb; const char *what; } shapes[] = {
        {4096, 4096, 4096, 0, 0, "square 4096"},
        {rows, hidden, hidden, 0, 1, "forward X W^T"},
        {hidden, hidden, rows, 1, 0, "weight grad dZ^T X"},
        {rows, hidden, hidden, 0, 0, "input grad dZ W"},
    };
    for (int tf32 = 0; tf32 < 2; tf32++) {
        be->set_tf32(tf32);
        be->describe(dev, sizeof dev);
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            int m = shapes[i].m, n = shapes[i].n, k = shapes[i].k, ta = shapes[i].ta, tb = shapes[i].tb;
            size_t na = (size_t)m * k, nb = (size_t)k * n;
            float *h = xmalloc(sizeof(float) * (na > nb ? na : nb));
            for (size_t j = 0; j < (na > nb ? na : nb); j++) h[j] = 2.0f * rng_uniform(7, j) - 1.0f;
            float *A = be->alloc(sizeof(float) * na), *B = be->alloc(sizeof(float) * nb), *C = be->alloc(sizeof(float) * (size_t)m * n);
            be->to_device(A, h, sizeof(float) * na);
            be->to_device(B, h, sizeof(float) * nb);
            for (int r = 0; r < 5; r++) be->gemm(ta, tb, m, n, k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);  // warm-up
            be->gemm_timing(1);
            for (int r = 0; r < reps; r++) be->gemm(ta, tb, m, n, k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);
            double s = be->gemm_seconds();
            be->gemm_timing(0);
            printf("{\"what\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"tf32\": %s, \"gflops\": %.1f, \"us_per_gemm\": %.2f, \"device\": \"%s\"}\n",
                   shapes[i].what, m, n, k, tf32 ? "true" : "false", 2.0 * m * n * k * reps / s / 1e9, s / reps * 1e6, dev);
            fflush(stdout);
            be->free(A); be->free(B); be->free(C);
            free(h);
        }
    }
    backend_cuda_close();
    return 0;
}
