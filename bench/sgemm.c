// bench/sgemm.c: the one-core sgemm ceiling the training benchmarks compare against: C = A*B for
// square n x n and for the model's layer shapes, on the same OpenBLAS kernel micropp picks.
// Prints one JSON object per shape: {"m","n","k","gflops","core"}.
#include <stdio.h>
#include <stdlib.h>
#include <cblas.h>
#include "base/ops.h"
#include "base/util.h"

static double run(int m, int n, int k, int ta, int tb, int reps) {
    float *A = backend_cpu.alloc(sizeof(float) * (size_t)m * k), *B = backend_cpu.alloc(sizeof(float) * (size_t)k * n);
    float *C = backend_cpu.alloc(sizeof(float) * (size_t)m * n);
    for (size_t i = 0; i < (size_t)m * k; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++) B[i] = (float)(i % 5) * 0.1f;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_sec();
        backend_cpu.gemm(ta, tb, m, n, k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);
        double g = 2.0 * m * n * k / (now_sec() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(A); free(B); free(C);
    return best;
}

int main(int argc, char **argv) {
    blas_pick_kernel(argv);
    blas_set_threads(1);
    int hidden = argc > 1 ? atoi(argv[1]) : 1024, rows = argc > 2 ? atoi(argv[2]) : 256;
    char blas[160];
    blas_describe(blas, sizeof blas);
    struct { int m, n, k, ta, tb; const char *what; } shapes[] = {
        {1024, 1024, 1024, 0, 0, "square 1024"},
        {rows, hidden, hidden, 0, 1, "forward X W^T"},
        {hidden, hidden, rows, 1, 0, "weight grad dZ^T X"},
        {rows, hidden, hidden, 0, 0, "input grad dZ W"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        printf("{\"what\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %.1f, \"blas\": \"%s\"}\n", shapes[i].what,
               shapes[i].m, shapes[i].n, shapes[i].k, run(shapes[i].m, shapes[i].n, shapes[i].k, shapes[i].ta, shapes[i].tb, 7), blas);
    return 0;
}
