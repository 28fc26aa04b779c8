// train/postval.h: --post-validate (train/postval.c): a step's update made at once, its global check (a
// non-finite gradient on any rank) and loss all-reduced without waiting, and the copy that undoes it.
#pragma once
#include "train/run.h"

// Before step `step`'s update: v[0..n-2] (the loss's values, step_loss's order) and, last, whether this rank
// holds a non-finite gradient, all-reduced without waiting; the parameters and moments copied. Returns
// that flag (1: the step will be undone on every rank).
int postval_begin(Run *r, int step, double *v, int n);
// The values of the check in flight, summed over the ranks (waited for; the flag last).
const double *postval_wait(Run *r);
// Every local stage's parameters and moments back as they were before the checked step's update.
void postval_restore(Run *r);
void postval_free(Run *r);
