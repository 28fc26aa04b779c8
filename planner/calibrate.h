// planner/calibrate.h: the measured side of the cost model (planner/cost.h): `micropp plan --calibrate`
// and `train --auto` without --profile time the passes, messages and collectives of this world.
#pragma once
#include "planner/cost.h"

// Collective over the world: measures the model's widths (c: hidden, inputs, classes, batch, threads)
// and this world's links into pf, the same on every rank. verbose: progress lines on stderr.
void calibrate_run(const TrainConfig *c, Profile *pf, int verbose);
