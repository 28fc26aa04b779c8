// axes/pipeline.h: the pipeline, the axis (axes/axis.h's contract): stages on ranks running a schedule's
// action lists, micro-batches in flight between them. Its rules (the schedule, its chunks, the partition of
// layers, its observers), its sizes (the activations a stage stashes), its set-up (the grid, the transport,
// the schedule proven by the simulator and this rank's action list), its part of the report (the bubble
// per stage, measured, in theory and simulated, the pass times, the activation peaks) and its price for the
// planner (the schedule simulated with priced passes and messages). The executor, a phase of the run, runs
// the action lists (train/executor.c).
#pragma once
#include "comms.h"
#include "model.h"
#include "schedule.h"
#include "axes/axis.h"

// ---- rules ----

// Its part of the Plan (p->pipe: checkpointing, zb-auto's limit) and the micro-batches (M: a pipeline's
// --micro-batches, else 1).
void pipeline_part(const TrainConfig *c, const Degrees *d, Plan *p);
// Every stage needs a layer; --grad-accum is no pipeline's (it accumulates over its micro-batches); the
// schedule: a schedule file's ranks and micro-batches, --virtual-stages and --max-inflight for the kinds
// that take them, the chunks per rank and their order, the (M, K) the kind can run, the simulator's limit,
// the largest message tag (tag_ub: MPI's); the partition of layers per virtual stage (--partition, or
// even). 0, or -1 with one line (refuse).
int pipeline_rules(const TrainConfig *c, const Degrees *d, long long tag_ub, Plan *p, Err *e);
// Once the run's length is known: its observers (--gantt beside --json, --timeline-step alone or past the
// last step).
int pipeline_rules_run(const TrainConfig *c, const Plan *p, Err *e);

// ---- sizes ----

// Bytes of one stashed activation element at --precision (PRECISION_*): model.c's bf16 stashes hold half.
double pipeline_activation_elem(int precision);
// The activations virtual stage vs stashes on a rank with `slots` micro-batches in flight, added to m:
// each slot its input (and the head's logits and labels), its layers' outputs unless checkpointing (a
// split backward keeps them, refilled at I, and its pre-activation gradients from I to W), and with
// checkpointing one recompute set.
void pipeline_sizes(const TrainConfig *c, const Plan *p, int vs, int slots, MemNeed *m);

// ---- set-up ----

// The grid of stages x replicas (x tp) on comm, the pipeline's transport to this rank's neighbours, the
// schedule proven deadlock-free by the simulator with uniform costs (F = I = W = 1: *sim sizes each chunk's
// stash) and this rank's action list (*list). Collective over the world.
void pipeline_setup(const Plan *p, Comm *comm, const Backend *be, SimResult *sim, ActionList *list);

// ---- report ----

// Per-stage median times of one pass of each compute kind ([K] each, seconds; i and w: halves of b when
// the backward is not split).
typedef struct {
    double *f, *b, *i, *w;
} Costs;

typedef struct {
    char schedule[32], transport[16];                             // the names
    double *bubble, *peak_bytes, *peak_inflight, *peak_deferred;  // per stage [K]
    double bubble_theory;  // the simulated bubble with uniform costs (the set-up's simulation)
    double message_bytes;  // one activation (or gradient) message between stages
    int split;             // the backward is split into I and W
    Costs med;             // median seconds per pass
    SimResult msim;        // the schedule simulated with the measured costs
    int shown;             // the step drawn by --timeline / --gantt (0-based), -1 when none
} PipelineReport;

// This rank's measures: the steps' spans (reduced in place: the slowest rank's of each pipeline) and busy
// seconds [start, start + n) (the first skip a warm-up), its median pass times f, b, i, w (NAN: none ran),
// its chunks' activation tally, the set-up's simulation, one message's bytes; slices: the simulated chart
// is drawn. Collective over the pipeline's ranks (comm->pp).
typedef struct {
    double *span_s;
    const double *busy_s;
    int start, n, skip;
    double f, b, i, w;
    const MemTally *tally;
    const SimResult *sim;
    double message_bytes;
    int slices;
} PipelineMeasures;
void pipeline_report_fill(PipelineReport *r, const Plan *p, const Comm *comm, const PipelineMeasures *x);
void pipeline_report_text(const Plan *p, const PipelineReport *r);
struct cJSON;
void pipeline_report_json(struct cJSON *o, const Plan *p, const PipelineReport *r);
void pipeline_report_free(PipelineReport *r);

// ---- price ----

// The schedule simulated with each stage's priced passes (spec's stage_f, stage_b, stage_w) and a message's
// price (spec->comm), and again with free messages (the bubble, and the messages' share by difference):
// each stage's end and busy seconds. Kept for the next layouts (the search prices layouts whose passes
// are alike one after another, and a simulation is most of a layout's price): keyed by all it reads.
typedef struct {
    int kind, K, M, v;
    double comm, *fbw;  // [3K] the stages' F, B, W
    int deadlock;
    double makespan, free_makespan, bubble, *end, *busy;  // end, busy: [K]
} PipelinePrice;
const PipelinePrice *pipeline_price(SimSpec *spec);
// The bytes of one message priced for a step: rows x H values, 2 bytes each at bf16 (the activation and its
// gradient both cross the wire as bf16: model.c's stage_wire_floats), else 4.
double pipeline_price_message_bytes(const Plan *p, double hidden, int precision);
