// train/guard.h: the guards of a training step (train/guard.c): --clip-grad's norm and scaling, the
// divergence rule, the note of a non-finite update, and the 'nangrad' fault that tests them.
#pragma once
#include "train/run.h"

// --clip-grad: the squares of the gradients this rank holds, every parameter counted once over the world
// (--deterministic: added into exact instead, and 0 returned).
double guard_grad_sumsq(const Wire *w, Model *model, DetSum *exact);
// --clip-grad NORM: every gradient scaled by NORM / (norm + 1e-6) when that is below 1 (r->m.grad_norm[step]).
void guard_clip(Run *r, int step);
// The loss above --diverge-factor x the first step's for DIVERGE_STEPS steps in a row ends the run (exit 1).
void guard_divergence(const TrainConfig *c, Progress *g, const Measure *m, int step, double loss);
// MICROPP_FAULT kind 'nangrad' (testing): one gradient of the first local stage becomes NaN.
void guard_inject_nan(Model *model);
// The optimizer's step on every local stage (--clip-grad's scaling first when `clip`); `noted`: an update that
// leaves a parameter non-finite is remembered (guard_note_nonfinite). MICROPP_FAULT skip leaves it out.
void guard_optimizer_step(Run *r, int step, int clip, int noted);
// Local stage k's update left its parameter `at` non-finite (at < 0: none): remembered in words.
void guard_note_nonfinite(Run *r, int step, int k, long at);
