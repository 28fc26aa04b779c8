// train/measure.c: the table of what a run's steps measured (measure.h): per-step arrays sized by the
// plan's steps, the events appended as the actions run, the epochs' figures; and the peak gemm rate MFU is
// measured against (a short gemm on the host, a datasheet table for GPUs).
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "train/measure.h"
#include "base/util.h"

void measure_init(Measure *m, long long steps, int epochs) {
    memset(m, 0, sizeof *m);
    double **per_step[] = {&m->step_s, &m->busy_s, &m->span_s, &m->step_start,
                           &m->loss, &m->gemm_s, &m->comm_s, &m->exposed_s, &m->grad_norm, &m->clip_scale, &m->tp_s,
                           &m->postval};
    for (size_t i = 0; i < sizeof per_step / sizeof *per_step; i++)
        *per_step[i] = xcalloc((size_t)steps, sizeof(double));
    if (epochs) m->epoch = xcalloc((size_t)epochs, sizeof(EpochStat));
}

const char *measure_postval_name(int postval) {
    static const char *names[3] = {"stood", "undone", "redone"};
    return postval >= 1 && postval <= 2 ? names[postval] : names[0];
}

void measure_moe(Measure *m, long long steps, int E) {
    m->moe.E = E;
    m->moe.load = xcalloc((size_t)steps * (size_t)E, sizeof(double));
    double **per_step[] = {&m->moe.dropped, &m->moe.assigned, &m->moe.aux};
    for (size_t i = 0; i < 3; i++) *per_step[i] = xcalloc((size_t)steps, sizeof(double));
}

void measure_moe_keep(Measure *m, const double *v, int step) {
    MoeSteps *ms = &m->moe;
    memcpy(ms->load + (size_t)step * ms->E, v, sizeof(double) * (size_t)ms->E);
    ms->dropped[step] = v[ms->E];
    ms->assigned[step] = v[ms->E + 1];
    ms->aux[step] = v[ms->E + 2];
}

MoeMeans measure_moe_means(const Measure *m, int start, int n, double *load) {
    const MoeSteps *ms = &m->moe;
    MoeMeans r = {0, 0, 0, 0};
    double assigned = 0, total = 0, most = 0;
    memset(load, 0, sizeof(double) * (size_t)ms->E);
    for (int i = start; i < start + n; i++) {
        for (int e = 0; e < ms->E; e++) load[e] += ms->load[(size_t)i * ms->E + e] / n;
        r.dropped += ms->dropped[i] / n;
        r.aux += ms->aux[i] / n;
        assigned += ms->assigned[i];
    }
    for (int e = 0; e < ms->E; e++) { total += load[e]; most = load[e] > most ? load[e] : most; }
    r.dropped_share = assigned > 0 ? r.dropped * n / assigned : 0;
    r.busiest = total > 0 ? most / (total / ms->E) : 0;
    return r;
}

void measure_free(Measure *m) {
    free(m->moe.load); free(m->moe.dropped); free(m->moe.assigned); free(m->moe.aux);
    free(m->step_s); free(m->busy_s); free(m->span_s); free(m->loss); free(m->gemm_s); free(m->ev);
    free(m->step_start); free(m->comm_s); free(m->exposed_s); free(m->epoch);
    free(m->grad_norm); free(m->clip_scale); free(m->tp_s); free(m->postval);
    memset(m, 0, sizeof *m);
}

Event *measure_record(Measure *m, int step, int kind, int mb, int chunk, double t0, double t1) {
    if (m->n_ev == m->cap_ev) {
        m->cap_ev = m->cap_ev ? 2 * m->cap_ev : 1024;
        m->ev = realloc(m->ev, sizeof(Event) * (size_t)m->cap_ev);
        CHECK(m->ev, "out of memory recording events");
    }
    m->ev[m->n_ev] = (Event){.step = step, .kind = kind, .mb = mb, .t0 = t0, .t1 = t1, .chunk = chunk};
    return &m->ev[m->n_ev++];
}

// CPU seconds of the process, every thread's.
static double cpu_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Dense (no sparsity) peaks from NVIDIA's datasheets, GFLOP/s, the first whose names the device's contains.
static const struct {
    const char *gpu, *variant, *name;
    double fp32, tf32, bf16;
} datasheet[] = {
    {"H200", "", "H200", 67e3, 494.7e3, 989.5e3},
    {"H100", "PCIe", "H100 PCIe", 51.2e3, 378e3, 756e3},
    {"H100", "NVL", "H100 NVL", 60e3, 417.5e3, 835.5e3},
    {"H100", "", "H100 SXM", 67e3, 494.7e3, 989.5e3},
    {"A100", "", "A100", 19.5e3, 156e3, 312e3},
};

static void peak_of_datasheet(Peak *pk, const Backend *be, int precision, int tf32) {
    char dev[256];
    be->describe(dev, sizeof dev);
    snprintf(pk->source, sizeof pk->source, "no datasheet peak for this device");
    for (size_t i = 0; i < sizeof datasheet / sizeof *datasheet; i++) {
        if (!strstr(dev, datasheet[i].gpu) || !strstr(dev, datasheet[i].variant)) continue;
        const char *kind = precision == PRECISION_BF16 ? "bf16" : tf32 ? "tf32" : "fp32";
        pk->gflops = precision == PRECISION_BF16 ? datasheet[i].bf16 : tf32 ? datasheet[i].tf32 : datasheet[i].fp32;
        snprintf(pk->source, sizeof pk->source, "datasheet %s %s", datasheet[i].name, kind);
        return;
    }
}

// The host's gemm at 256^3: a warm-up (threads, pages), then the fastest of up to 40 timed, stopping after
// 5 once 30 ms have gone. The fastest: on a shared machine the one no other process interrupted (a short
// gemm fits between them), the planner's choice too.
static void peak_of_gemm(Peak *pk, const Backend *be, int precision) {
    enum { N = 256, REPS = 40, MIN_REPS = 5 };
    size_t n = (size_t)N * N;
    float *a = xmalloc(3 * n * sizeof(float)), *b = a + n, *c = b + n;
    for (size_t i = 0; i < 2 * n; i++) a[i] = 0.25f + (float)(i % 7) * 0.125f;
    double t_all = now_sec(), cpu0 = cpu_sec(), best = 0;
    be->gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
    for (int r = 0; r < REPS && (r < MIN_REPS || now_sec() - t_all < 0.03); r++) {
        double t0 = now_sec();
        be->gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        double rate = 2.0 * N * N * N / (now_sec() - t0) / 1e9;
        best = rate > best ? rate : best;
    }
    pk->cpu_seconds = cpu_sec() - cpu0;
    pk->seconds = now_sec() - t_all;
    pk->gflops = best;
    snprintf(pk->source, sizeof pk->source, precision == PRECISION_BF16 ? "measured bf16 gemm" : "measured sgemm");
    free(a);
}

void measure_peak(Peak *pk, const Backend *be, int precision, int tf32, double profile_gflops) {
    memset(pk, 0, sizeof *pk);
    const char *env = getenv("MICROPP_PEAK_GFLOPS");  // tests: a known peak, so the ratio is known
    double fake = env ? strtod(env, NULL) : 0;
    if (fake > 0) {
        pk->gflops = fake;
        snprintf(pk->source, sizeof pk->source, "MICROPP_PEAK_GFLOPS");
    } else if (profile_gflops > 0) {
        pk->gflops = profile_gflops;
        snprintf(pk->source, sizeof pk->source, "--profile's fastest gemm");
    } else if (be->on_host) peak_of_gemm(pk, be, precision);
    else peak_of_datasheet(pk, be, precision, tf32);
}

double measure_mfu(const Peak *pk, double flops, double step_s) {
    return pk->total_gflops > 0 && step_s > 0 ? flops / step_s / 1e9 / pk->total_gflops : NAN;
}

// --tp and --ep, observed: the step's collectives inside its actions (--tp's all-reduces and --tp-message
// slice's all-gathers, --ep's waits in the all-to-alls) as events of the rank's collectives track, each named
// after the action it ran inside (its micro-batch and chunk).
void measure_spans(const Span *sp, int n, Measure *m, int step) {
    double t0 = m->step_start[step];
    int first = m->n_ev;  // this step's actions
    while (first > 0 && m->ev[first - 1].step == step) first--;
    int last = m->n_ev;
    for (int i = 0; i < n; i++) {
        double a = sp[i].t0 - t0, b = sp[i].t1 - t0;
        int mb = -1, chunk = 0;
        for (int k = first; k < last && mb < 0; k++)
            if (m->ev[k].mb >= 0 && m->ev[k].t0 <= a + 1e-6 && b <= m->ev[k].t1 + 1e-6) {
                mb = m->ev[k].mb;
                chunk = m->ev[k].chunk;
            }
        measure_record(m, step, sp[i].kind, mb, chunk, a, b)->bytes = sp[i].bytes;
    }
}
