// planner/validate.h: `plan --auto --validate K` under mpiexec -n N: the search's top K layouts and the best
// of each family run for a few steps on this machine, each a child job of N ranks; predicted against
// measured, the regret, and the profile refit (a scale factor per family) written beside it.
#pragma once
#include "planner/auto.h"

typedef struct {
    int K, steps;        // the top K rows; train's --steps of each run (the first left out of the median)
    int world;           // the ranks of each run: the world mpiexec started
    const char *config;  // --config as typed ("" none), and whether the model's options are written out
    int model_flags;
    const char *out;      // the refit profile's file (--out, else the profile's name with .refit.json)
    double timeout;       // train's --timeout of each run (0: train's default)
} ValidateAsk;

// The environment of a child job: the parent job's launcher variables (Hydra's PMI_*, HYDI_*,
// MPI_LOCAL*; Open MPI's OMPI_*, PMIX_*) removed, so that `mpiexec` starts a job of its own.
void validate_child_env(void);
// Every rank: 1 when the world sits on one node (the child jobs start there), else 0.
int validate_one_node(void);
// Every rank: rank 0's code, waited for without spinning (the other ranks sleep while rank 0's children run).
int validate_agree(int code);
// Rank 0: the rows run, the table printed (predicted, measured, error; the regret; the median error), the
// refit profile written to ask->out. 0 when some row was measured and the profile written, else 1 with
// why in err.
int validate_run(const Profile *pf, const Search *s, const TrainConfig *c, const ValidateAsk *ask, char *err,
                 size_t n);
