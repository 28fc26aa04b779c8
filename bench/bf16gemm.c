// bench/bf16gemm.c: the one-core bf16 ceiling that --precision bf16 runs compare against, as
// bench/sgemm.c is for fp32: oneDNN's matmul with bf16 inputs and fp32 output (the path micropp's
// CPU backend takes), for a 256 x 1024 x 1024 layer and the 32-row shape of a pipeline micro-batch.
// Prints one JSON object per shape: {"what","m","n","k","gflops","sgemm_gflops","kernel"}.
#include <stdio.h>
#include <stdlib.h>
#include "base/ops.h"
#include "base/util.h"

// Best of reps, GFLOP/s, of C = A op(B) in the backend's current precision.
static double run(int m, int n, int k, int tb, int reps) {
    float *A = backend_cpu.alloc(sizeof(float) * (size_t)m * k), *B = backend_cpu.alloc(sizeof(float) * (size_t)k * n);
    float *C = backend_cpu.alloc(sizeof(float) * (size_t)m * n);
    for (size_t i = 0; i < (size_t)m * k; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++) B[i] = (float)(i % 5) * 0.1f;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_sec();
        backend_cpu.gemm(0, tb, m, n, k, 1.0f, A, k, B, tb ? k : n, 0.0f, C, n);
        double g = 2.0 * m * n * k / (now_sec() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(A); free(B); free(C);
    return best;
}

int main(int argc, char **argv) {
    blas_pick_kernel(argv);
    blas_set_threads(1);  // one core: OpenBLAS and oneDNN alike
    int hidden = argc > 1 ? atoi(argv[1]) : 1024;
    char err[256];
    if (!onednn_available(err, sizeof err)) { fprintf(stderr, "bf16gemm: %s\n", err); return 1; }
    struct { int m, n, k, tb; const char *what; } shapes[] = {
        {256, hidden, hidden, 1, "forward X W^T, 256 rows"},
        {32, hidden, hidden, 1, "forward X W^T, 32 rows"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int m = shapes[i].m, n = shapes[i].n, k = shapes[i].k, tb = shapes[i].tb;
        backend_cpu.set_precision(PRECISION_FP32, err, sizeof err);
        double fp32 = run(m, n, k, tb, 7);
        backend_cpu.set_precision(PRECISION_BF16, err, sizeof err);
        double bf16 = run(m, n, k, tb, 7);
        char kernel[160];
        onednn_describe(m, n, k, kernel, sizeof kernel);
        printf("{\"what\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %.1f, \"sgemm_gflops\": %.1f, \"kernel\": \"%s\", \"native_bf16\": %s}\n",
               shapes[i].what, m, n, k, bf16, fp32, kernel, onednn_native_bf16() ? "true" : "false");
    }
    return 0;
}
