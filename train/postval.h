// train/postval.h: a step's values agreed over the ranks (train/postval.c): the synchronous loss all-reduce,
// and --post-validate's: the update made at once, the check (a non-finite gradient on any rank) and loss
// all-reduced without waiting, and the copy that undoes the update.
#pragma once
#include "train/run.h"
#include "base/det.h"

// This rank's part of step `step`'s values: the loss's sum, rows and correct rows, the ranks whose last update
// left a parameter non-finite, --clip-grad's sum of squares, --experts' counters; *n of them and one more.
// exact (--deterministic with --clip-grad): the squares' exact sum, carried at the end.
double *step_values(const Model *model, const Progress *g, Measure *m, int step, double sumsq, DetSum *exact,
                    int *n);
// The step's loss (and norm, MoE counters) from the values summed over the ranks.
double step_loss_taken(Measure *m, int step, const double *v, int exact);
// The synchronous step's loss: its values all-reduced at once (a rank's non-finite update ends every rank).
double step_loss(const Plan *p, const Model *model, const Progress *g, Measure *m, int step, double sumsq,
                 DetSum *exact);

// Before step `step`'s update: v[0..n-2] (the loss's values, step_loss's order) and, last, whether this rank
// holds a non-finite gradient, all-reduced without waiting; the parameters and moments copied. Returns
// that flag (1: the step will be undone on every rank).
int postval_begin(Run *r, int step, double *v, int n);
// The values of the check in flight, summed over the ranks (waited for; the flag last).
const double *postval_wait(Run *r);
// Every local stage's parameters and moments back as they were before the checked step's update, and with
// `grads` (--clip-grad: the update is redone, clipped) the step's gradients too.
void postval_restore(Run *r, int grads);
void postval_free(Run *r);
