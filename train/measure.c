// train/measure.c: the table of what a run's steps measured (measure.h): per-step arrays sized by the
// plan's steps, the events appended as the actions run, the epochs' figures.
#include <stdlib.h>
#include <string.h>
#include "train/measure.h"
#include "base/util.h"

void measure_init(Measure *m, long long steps, int epochs) {
    memset(m, 0, sizeof *m);
    double **per_step[] = {&m->step_s, &m->busy_s, &m->span_s, &m->step_start,
                           &m->loss, &m->gemm_s, &m->comm_s, &m->exposed_s, &m->grad_norm, &m->clip_scale, &m->tp_s};
    for (size_t i = 0; i < sizeof per_step / sizeof *per_step; i++)
        *per_step[i] = xcalloc((size_t)steps, sizeof(double));
    if (epochs) m->epoch = xcalloc((size_t)epochs, sizeof(EpochStat));
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
    free(m->grad_norm); free(m->clip_scale); free(m->tp_s);
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
