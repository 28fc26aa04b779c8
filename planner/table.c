// planner/table.c: `micropp plan`'s table (planner/table.h): its rows laid out by memory_layout, the
// layouts that cannot run kept with why, and which rows fit on the fewest stages or ranks.
#include <string.h>
#include "planner/table.h"
#include "schedule.h"
#include "base/util.h"


// The row's layout, schedule and bytes; 0, or -1 with the reason in why.
static int fill_row(const TrainConfig *c, int kind, int K, int D, Row *w, char *why, size_t n) {
    memset(w, 0, sizeof *w);
    w->kind = kind;
    Degrees d = {.pp = K, .dp = D, .tp = (int)c->grid.tp, .zero = D > 1 ? (int)c->ddp.zero : 0};
    if (memory_layout(c, kind, &d, &w->l, why, n)) return -1;
    for (int s = 0; s < K; s++)
        if (s == 0 || w->l.need[s].total > w->need.total) { w->need = w->l.need[s]; w->worst = s; }
    return 0;
}

static void row_free(Row *w) { memory_layout_free(&w->l); }

const char *table_row_schedule(const Row *w, char *buf, size_t n) {
    if (w->l.K == 1) { snprintf(buf, n, "-"); return buf; }
    return choice_name(SCHED_NAMES, w->kind, buf, n);
}

// Every (schedule, K, D) asked for; K = 1 is no pipeline, one row per D whatever the schedules.
// ts: the tensor-parallel degrees (the innermost loop: a row's T beside its K).
void table_fill(const TrainConfig *c, const int *kinds, int n_kind, const int *ks, int n_k, const int *ds,
                       int n_d, const int *zs, int n_z, const int *ts, int n_t, Table *t) {
    int cap = n_kind * n_k * n_d * n_z * n_t;
    t->row = xcalloc((size_t)cap, sizeof(Row));
    t->skipped = xcalloc((size_t)cap, sizeof *t->skipped);
    for (int a = 0; a < n_kind; a++)
        for (int b = 0; b < n_k; b++)
            for (int e = 0; e < n_d * n_z * n_t; e++) {
                int d = e / n_t;
                if (ks[b] == 1 && a > 0) continue;
                char why[300], name[32];
                TrainConfig cz = *c;
                cz.ddp.zero = zs[d % n_z];
                cz.grid.tp = ts[e % n_t];
                if (fill_row(&cz, kinds[a], ks[b], ds[d / n_z], &t->row[t->n], why, sizeof why) == 0) {
                    t->row[t->n].fits = -1;
                    t->row[t->n].zero = zs[d % n_z];
                    t->n++;
                    continue;
                }
                const char *w = strncmp(why, "train: ", 7) ? why : why + 7;
                char tp[16] = "";
                if (n_t > 1) snprintf(tp, sizeof tp, " tp=%d", ts[e % n_t]);
                snprintf(t->skipped[t->n_skipped++], sizeof *t->skipped, "%s K=%d dp=%d%s: %s",
                         ks[b] == 1 ? "-" : choice_name(SCHED_NAMES, kinds[a], name, sizeof name), ks[b], ds[d / n_z],
                         tp, w);
            }
    for (int i = 0; i < t->n; i++) t->row[i].fits = t->row[i].need.total <= t->device;
}

void table_free(Table *t) {
    for (int i = 0; i < t->n; i++) row_free(&t->row[i]);
    free(t->row); free(t->skipped);
}

// The smallest K among the rows that fit (-1: none), and its first row.
int table_smallest_fit(const Table *t, int *at) {
    int best = -1;
    for (int i = 0; i < t->n; i++)
        if (t->row[i].fits && (best < 0 || t->row[i].l.K < t->row[best].l.K)) best = i;
    *at = best;
    return best < 0 ? -1 : t->row[best].l.K;
}

// The row that fits on the fewest ranks K x T (x D), -1: none. A tie goes to the smaller T: tensor
// parallelism all-reduces inside every pair of layers, a cost plan does not price, so it is taken only
// where it saves ranks; then to the first row (the schedules in the order asked).
int table_smallest_pt(const Table *t) {
    int best = -1;
    for (int i = 0; i < t->n; i++) {
        const MemLayout *l = &t->row[i].l;
        if (!t->row[i].fits) continue;
        if (best < 0) { best = i; continue; }
        const MemLayout *b = &t->row[best].l;
        long r = (long)l->K * l->T * l->D, rb = (long)b->K * b->T * b->D;
        if (r < rb || (r == rb && l->T < b->T)) best = i;
    }
    return best;
}
