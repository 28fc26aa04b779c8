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

// What the user gave beside --auto, each narrowing the search to its values (0 of them: any).
#define AUTO_LIST 64
typedef struct {
    int pp[AUTO_LIST], n_pp;  // stages
    int tp[AUTO_LIST], n_tp;  // tensor-parallel widths
    int zero[4], n_zero;      // ZeRO levels
    int M;                    // micro-batches of a pipeline (0: any)
    int precision;            // PRECISION_* + 1 (0: any)
    unsigned schedules;       // bit k: schedule kind k (0: the kinds the table marks searched)
    unsigned methods;         // --methods: bit m, METHOD_* m on the ddp rows (0: not given)
    int try_methods;          // --auto without --methods: each method where it pays (0: the exact sum alone)
} Constraint;
// The data-parallel methods of --methods (plan --auto): the exact sum, then COMPRESS_TOPK, _POWERSGD, _SIGN
// (axes/data.h) at their own numbers, and local SGD.
enum { METHOD_EXACT, METHOD_SYNC_EVERY = 4 };
#define METHOD_NAMES "exact|topk|powersgd|sign|sync-every"
// Every layout of `world` ranks for the model c on the profile; device: the bytes of one rank.
void auto_search(const Profile *pf, const TrainConfig *c, int world, double device, Search *out);
// The same within what k allows (NULL: everything).
void auto_search_in(const Profile *pf, const TrainConfig *c, int world, double device, const Constraint *k,
                    Search *out);
void auto_free(Search *s);
// --params under --auto: `layers` moved (by at most 5% of them) to the nearest multiple of the largest
// pipeline degree of `world` (a divisor of it) that allows it, so that the pipelines divide the shape;
// said: what moved, in words ("" when nothing did).
int auto_layers_divisible(int layers, int world, char *said, size_t n);
// --methods LIST: a bit per METHOD_* it names, or 0 with one line in why.
unsigned auto_parse_methods(const char *list, char *why, size_t n);
// One layout in words: "hybrid zb-h1 M=8 tp2 zero1 ckpt bf16".
const char *layout_name(const Layout *l, char *buf, size_t n);
// The ranked table: the first `top` fitting rows (and the best that does not fit, when none does);
// by_family: only the first of each family (auto_family), with its rank.
void auto_print(FILE *f, const Search *s, int top, int by_family);
// A layout's family: "pipeline" (stages, one replica), "ddp" (replicas), "hybrid" (both), "tp" (one
// tensor-parallel group alone), "monolith".
const char *auto_family(const Layout *l);
// train --auto: the rules (--profile given, none of the options the search chooses typed), the
// profile read, the search for `world` ranks of `device` bytes each, and the best layout's options applied
// to c (layout_apply; its degrees are layout_degrees(&best->l)). 0 with *best filled, or -1 with one line
// in err ("train: --auto ...").
int auto_pick(TrainConfig *c, const OptionsSeen *seen, int world, double device, Candidate *best, char *err,
              size_t n);
// The search as JSON (`plan --auto --json`): every layout that can run, ranked, with its command.
struct cJSON;
struct cJSON *auto_json(const Search *s, const TrainConfig *c, const char *config, int model_flags);
// What the pick changes in the numerics of the model as configured: "" or "  # bf16 changes the numerics
// from the model's fp32: --precision fp32 keeps them" (a shell comment after the best's command).
const char *auto_numerics(const Layout *l, const TrainConfig *c, char *out, size_t n);
// One row of it: the layout, its prediction and memory, and the command that runs it.
struct cJSON *auto_row_json(const Candidate *k, const char *command);
