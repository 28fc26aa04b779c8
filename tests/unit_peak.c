// tests/unit_peak.c: MFU's peak (train/measure.c's measure_peak): the GPU datasheet table by device name
// and precision (a backend that only names its device), the host's measured gemm (a rate, and under
// 0.2 s of CPU), MICROPP_PEAK_GFLOPS, and measure_mfu's ratio.
#include <stdlib.h>
#include "unit.h"
#include "train/measure.h"

static const char *gpu_name;
static void describe_gpu(char *out, size_t n) { snprintf(out, n, "%s", gpu_name); }

static void test_datasheet(void) {
    static const struct {
        const char *name;
        int precision, tf32;
        double want;
        const char *source;
    } cases[] = {
        {"cuda:0 NVIDIA H100 80GB HBM3 (1 of 1 visible)", PRECISION_FP32, 0, 67e3, "datasheet H100 SXM fp32"},
        {"cuda:0 NVIDIA H100 80GB HBM3 (1 of 1 visible)", PRECISION_FP32, 1, 494.7e3, "datasheet H100 SXM tf32"},
        {"cuda:0 NVIDIA H100 80GB HBM3 (1 of 1 visible)", PRECISION_BF16, 1, 989.5e3, "datasheet H100 SXM bf16"},
        {"cuda:0 NVIDIA H100 PCIe (1 of 1 visible)", PRECISION_BF16, 0, 756e3, "datasheet H100 PCIe bf16"},
        {"cuda:0 NVIDIA H100 NVL (1 of 2 visible)", PRECISION_FP32, 0, 60e3, "datasheet H100 NVL fp32"},
        {"cuda:0 NVIDIA H200 (1 of 1 visible)", PRECISION_FP32, 1, 494.7e3, "datasheet H200 tf32"},
        {"cuda:3 NVIDIA A100-SXM4-80GB (4 of 8 visible)", PRECISION_BF16, 0, 312e3, "datasheet A100 bf16"},
        {"cuda:0 Tesla V100-SXM2-16GB (1 of 1 visible)", PRECISION_FP32, 0, 0, "no datasheet peak for this device"},
    };
    Backend gpu = {.name = "cuda", .on_host = 0, .describe = describe_gpu};
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Peak pk;
        gpu_name = cases[i].name;
        measure_peak(&pk, &gpu, cases[i].precision, cases[i].tf32, 0);
        if (pk.gflops != cases[i].want || strcmp(pk.source, cases[i].source) || pk.seconds != 0) {
            printf("  %s: %g GFLOP/s '%s'\n", cases[i].name, pk.gflops, pk.source);
            bad++;
        }
    }
    EXPECT("peak/the datasheet by device name and precision (H100 SXM, PCIe, NVL, H200, A100; V100 unknown)", !bad,
           "%d wrong", bad);
}

static void test_measured(void) {
    Peak pk;
    measure_peak(&pk, &backend_cpu, PRECISION_FP32, 0, 0);
    EXPECT("peak/the host's gemm: a rate, 'measured sgemm', under 0.2 s of CPU",
           pk.gflops > 0.1 && !strcmp(pk.source, "measured sgemm") && pk.cpu_seconds > 0 && pk.cpu_seconds < 0.2 &&
               pk.seconds > 0,
           "%g GFLOP/s '%s' in %g s (CPU %g s)", pk.gflops, pk.source, pk.seconds, pk.cpu_seconds);
    setenv("MICROPP_PEAK_GFLOPS", "250", 1);
    measure_peak(&pk, &backend_cpu, PRECISION_FP32, 0, 0);
    unsetenv("MICROPP_PEAK_GFLOPS");
    Peak pf;
    measure_peak(&pf, &backend_cpu, PRECISION_FP32, 0, 42);
    EXPECT("peak/a profile's peak is taken, not measured", pf.gflops == 42 && pf.seconds == 0 &&
           !strcmp(pf.source, "--profile's fastest gemm"), "%g '%s'", pf.gflops, pf.source);
    EXPECT("peak/MICROPP_PEAK_GFLOPS gives the figure", pk.gflops == 250 && !strcmp(pk.source, "MICROPP_PEAK_GFLOPS"),
           "%g '%s'", pk.gflops, pk.source);
    pk.total_gflops = 500;
    double mfu = measure_mfu(&pk, 2.5e9, 0.01);  // 250 GFLOP/s of 500
    pk.total_gflops = 0;
    EXPECT("peak/measure_mfu: FLOPs / step / the summed peak; NAN when unknown",
           fabs(mfu - 0.5) < 1e-12 && isnan(measure_mfu(&pk, 2.5e9, 0.01)), "%g", mfu);
}

int main(void) {
    test_datasheet();
    test_measured();
    return unit_failures ? 1 : 0;
}
