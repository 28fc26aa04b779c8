// planner/price.h: one layout priced, as its options describe it: `plan --profile/--machine` without --auto
// (the table row --auto would give it, its parts and its memory; --json) and `train --profile` without
// --auto (the prediction the summary prints beside the measured step).
#pragma once
#include <stdio.h>
#include "planner/auto.h"
#include "train/run.h"  // AutoPick

// One layout's degrees for `plan --profile/--machine`: plan's lists (lists[0] --dp, [1] --zero, [2]
// --schedule; "" when not given) must give one value each, set into c's options, then the degrees resolved
// and the flags checked as train does. 0, or -1 with one line in err (without train's "train: ").
int price_degrees(TrainConfig *c, const OptionsSeen *seen, int world, const char *const lists[3], Degrees *d,
                  char *err, size_t n);
// The layout the degrees d and the options of c describe (its name and command come from it).
Layout layout_of(const TrainConfig *c, const Degrees *d);
// The profile or machine file at path read and checked against the model (calibrated: a profile only,
// when `measured_only`); the layout c and d describe predicted into k (k->fits: memory <= *device; a 0
// *device takes a machine file's device, and stays 0 for a profile). source (Profile.source's size): the
// costs' origin in words, when not NULL. 0, or -1 with one line in err naming the file or the layout.
int price_layout(const char *path, int measured_only, const TrainConfig *c, const Degrees *d, double *device,
                 Candidate *k, char *source, char *err, size_t n);
// `train`'s prediction of its layout for the summary, into out: --auto's pick (in pick), or --profile's price of
// the layout as given (one it cannot price ends every rank); a profile measured with another BLAS, BLAS core or
// thread count than this machine runs cfg with is named in the one warning line plan prints (cache_foreign).
void price_train_run(const TrainConfig *cfg, const Degrees *deg, Candidate *pick, AutoPick *out);
// `plan --profile/--machine` without --auto: what to price and how to show it.
typedef struct {
    const char *path;  // the profile or machine file
    int measured;      // --profile: a calibration, not a machine file
    int world;         // the ranks
    double device;     // bytes of one device (0: a machine file's, else this machine's MemAvailable / world)
    int model_flags;   // the command writes the model's options (layout_command)
    const char *extra; // options the command carries as typed (" --partition 5,3 --bucket-mb 4")
} PriceAsk;
// The layout of c and d priced and printed (c->json: as JSON): the header, auto_print's row, its parts,
// whether it fits, and the command that runs it. 0, or -1 with one line in err.
int price_plan(const TrainConfig *c, const Degrees *d, const PriceAsk *ask, char *err, size_t n);
// `plan --auto --explain A,B`: ranks A and B of the ranked search (1-based, each a row of it) side by side,
// their steps split into the parts (compute, of it data and optimizer; idle; messages; collectives; fixed)
// and the difference of each.
void price_explain(FILE *f, const Search *s, int a, int b);
