// planner/auto.h: `plan --auto` and `train --auto`: every layout of a world (stages x replicas x tp, schedule,
// micro-batches, checkpointing, precision, ZeRO) that fits a device's memory, each step predicted
// (planner/predict.h) and ranked fastest first; the table, and the exact command of the best.
#pragma once
#include <stdio.h>
#include "planner/predict.h"

typedef struct {
    Layout l;
    Prediction pr;
    int fits;  // memory per rank <= the device's
} Candidate;

typedef struct {
    Candidate *c;    // the layouts that can run, fitting ones first, each group fastest first
    int n, n_fit;
    int n_tried;     // layouts considered (some cannot run: the batch does not divide, a schedule's rule)
    double device;   // bytes one rank may hold
    double seconds;  // the search's own time
} Search;

// Every layout of `world` ranks for the model c on the profile; device: the bytes of one rank.
void auto_search(const Profile *pf, const TrainConfig *c, int world, double device, Search *out);
void auto_free(Search *s);
// One layout in words: "hybrid zb-h1 M=8 tp2 zero1 ckpt bf16".
const char *layout_name(const Layout *l, char *buf, size_t n);
// The ranked table: the first `top` fitting rows (and the best that does not fit, when none does).
void auto_print(FILE *f, const Search *s, int top);
// train --auto: the rules (--profile given, none of the options the search chooses typed), the
// profile read, the search for `world` ranks of `device` bytes each, and the best layout's options applied
// to c (layout_apply; its degrees are layout_degrees(&best->l)). 0 with *best filled, or -1 with one line
// in err ("train: --auto ...").
int auto_pick(TrainConfig *c, const OptionsSeen *seen, int world, double device, Candidate *best, char *err,
              size_t n);
// The search as JSON (`plan --auto --json`): every layout that can run, ranked, with its command.
struct cJSON;
struct cJSON *auto_json(const Search *s, const TrainConfig *c, const char *config, int model_flags);
// One row of it: the layout, its prediction and memory, and the command that runs it.
struct cJSON *auto_row_json(const Candidate *k, const char *command);
