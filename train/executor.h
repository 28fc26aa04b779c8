// train/executor.h: the executor. One training step of this process's stages (the monolith, the manual
// split, or this rank's action list of a pipeline), and evaluation, which runs a forward-only
// action list through the same neighbour helper.
#pragma once
#include "train/run.h"

// The neighbour of virtual stage vs in direction dir (+1: the next virtual stage, where activations
// go; -1: the previous one, where gradients go): its world rank, and the tags of a message of
// (kind, mb) from vs to it and from it to vs (a tag names the RECEIVING chunk). No other code
// computes peers or tags.
typedef struct { int rank, send_tag, recv_tag; } Peer;
Peer exec_neighbour(const Plan *p, const Comm *comm, int vs, int dir, int kind, int mb);

// One step's forward and backward: step st->step, reading the training stream from st->step_sample.
// Each fills m->busy_s[step]; the pipeline and the monolith also record their actions
// (measure_record: the trace, the Gantt, the bubble), the manual split none. The pipeline returns
// the span of its action list (seconds from the step's start).
double exec_pipeline_step(const Plan *p, Wire *w, Model *model, StepState *st, Measure *m);
void exec_monolith_step(const Plan *p, Wire *w, Model *model, StepState *st, Measure *m);
void exec_manual_step(const Plan *p, const Wire *w, Model *model, StepState *st, Measure *m);
// The bytes of one activation (or gradient) message between stages: rows x hidden values, fp32 or
// bf16 (stage_wire_floats of a local stage s); what every send and receive of a pipeline step moves.
double pipe_message_bytes(const Plan *p, const Stage *s);

// The training path's input ring (run.h's InputRing) for micro-batches of rows x inputs on backend be;
// exec_ring_free waits for each buffer's last copies before freeing it.
void exec_ring_alloc(InputRing *r, const Backend *be, int rows, int inputs);
void exec_ring_free(InputRing *r, const Backend *be);
// Rows [first, first + rows) of the training stream into stage s's slot: the features when load_x
// (the stage holding layer 0), the labels when load_y (the head), through the ring's next buffer.
void exec_load_inputs(StepState *st, Stage *s, int slot, uint64_t first, int load_x, int load_y);

// An evaluation on the held-out rows.
typedef struct { double accuracy, loss; long long rows; } EvalResult;
// Accuracy and mean cross-entropy on the held-out rows (the test split, whole unless --eval-samples
// is given; else --eval-samples rows; NAN when there are none): forward only, through the local
// stages (monolith, manual) or the pipeline; every rank of a pipeline returns them.
EvalResult evaluate(const TrainConfig *c, const Plan *p, Wire *w, Model *model, StepState *st);
