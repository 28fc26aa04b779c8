// planner/table.h: `micropp plan`'s table (planner/table.c): one row per schedule, K stages, D replicas,
// ZeRO level and T, each laid out and reckoned by planner/memory.c as train would, and its searches.
#pragma once
#include "planner/memory.h"

// One row of the table: a schedule (or none, K = 1), K stages, D replicas.
typedef struct {
    int kind, fits, worst;  // worst: the stage with the largest total
    int zero;               // --zero of the row
    MemNeed need;           // the worst stage's rank
    MemLayout l;            // the layout and each stage's bytes (memory.c's reckoning, train's own)
} Row;

typedef struct {
    Row *row;
    int n;
    char (*skipped)[320];  // why each layout that cannot run was left out
    int n_skipped;
    double device;         // bytes of one device
} Table;

// Every (schedule, K, D, ZeRO, T) asked for; K = 1 is no pipeline, one row per D whatever the schedules.
// A layout that cannot run goes to t->skipped with why; t->device must be set (a row fits under it).
void table_fill(const TrainConfig *c, const int *kinds, int n_kind, const int *ks, int n_k, const int *ds, int n_d,
                const int *zs, int n_z, const int *ts, int n_t, Table *t);
void table_free(Table *t);
// The row's schedule name ("-" with no pipeline).
const char *table_row_schedule(const Row *w, char *buf, size_t n);
// The smallest K among the rows that fit (-1: none), and its first row.
int table_smallest_fit(const Table *t, int *at);
// The row that fits on the fewest ranks K x T (x D), -1: none.
int table_smallest_pt(const Table *t);
