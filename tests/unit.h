// tests/unit.h: the tiny harness of the C unit tests: each case prints PASS/FAIL/SKIP lines that
// tests/run.sh counts; main returns nonzero when any case failed.
#pragma once
#include <math.h>
#include <stdio.h>
#include <string.h>

static int unit_failures;
#define EXPECT(name, cond, ...) do { \
    if (cond) printf("PASS %s\n", name); \
    else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); unit_failures++; } \
} while (0)

// |a-b| <= atol + rtol*|ref| over n elements; returns the index of the first miss, or -1.
static inline long close_all(const float *a, const float *ref, long n, double atol, double rtol) {
    for (long i = 0; i < n; i++)
        if (!(fabs((double)a[i] - ref[i]) <= atol + rtol * fabs((double)ref[i]))) return i;
    return -1;
}
