// train/pipeline.h: the executor. One training step of this process's stages (the monolith, the manual
// split, or this rank's action list of a pipeline), and evaluation, which runs a forward-only
// action list through the same neighbour helper.
#pragma once
#include "train/run.h"

// The neighbour of virtual stage vs in direction dir (+1: the next virtual stage, where activations
// go; -1: the previous one, where gradients go): its world rank, and the tags of a message of
// (kind, mb) from vs to it and from it to vs (a tag names the RECEIVING chunk). No other code
// computes peers or tags.
typedef struct { int rank, send_tag, recv_tag; } Peer;
Peer pipe_neighbour(const Run *r, int vs, int dir, int kind, int mb);

// One step's forward and backward. Each fills r->m.busy_s[step]; the pipeline and the monolith also
// record their actions (run_record: the trace, the Gantt, the bubble), the manual split none. The
// pipeline returns the span of its action list (seconds from the step's start).
double pipeline_step(Run *r, int step);
// The bytes of one activation (or gradient) message between stages: rows x hidden values, fp32 or
// bf16 (stage_wire_floats); what every send and receive of a pipeline step moves.
double pipe_message_bytes(const Run *r);
void monolith_step(Run *r, int step);
void manual_step(Run *r, int step);

// Accuracy and mean cross-entropy on the held-out rows (the test split, whole unless --eval-samples
// is given; else --eval-samples rows; NAN when there are none): forward only, through the local
// stages (monolith, manual) or the pipeline; every rank of a pipeline returns them.
EvalResult evaluate(Run *r);
