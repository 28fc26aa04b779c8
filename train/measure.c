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

void measure_free(Measure *m) {
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
