// train/plan.h: what `micropp train` will do, decided before anything runs: a pure function of the
// resolved options and the world size to a Plan (stages, replicas, micro-batches, chunks, rows,
// partition). Every rule a run must satisfy is checked here, once; no MPI, no model memory.
#pragma once
#include <stddef.h>
#include "base/config.h"
#include "comms.h"     // PLACEMENT_* and the comm_grid_* helpers
#include "schedule.h"  // the chunk order's helpers

enum { MODE_MONOLITH, MODE_MANUAL, MODE_PP, MODE_DDP, MODE_HYBRID };
#define MODE_CHOICES "monolith|manual|pp|ddp|hybrid"
#define MAX_STAGES 4096
#define MAX_LAYERS 4096  // --layers' range (train/options.c)

typedef struct {
    int mode;          // MODE_*
    int world;         // ranks started
    int K;             // stages: ranks of one pipeline (pp, hybrid), parts (manual), else 1
    int D;             // data-parallel replicas
    int M;             // micro-batches per step (per replica); 1 without a pipeline
    int N;             // gradient-accumulation micro-steps per step (monolith, ddp)
    int V;             // chunks per rank: --virtual-stages for interleaved, else 1
    int S;             // virtual stages K*V, placed on ranks by `chunk_order`
    int chunk_order;   // CHUNKS_LOOP (chunk c of stage s is vs = c*K + s) or CHUNKS_V (zb-v, dualpipev)
    int rows;          // rows per micro-batch (per replica)
    int placement;     // PLACEMENT_STAGES or PLACEMENT_REPLICAS (comms.h; --placement auto resolved)
    int placement_auto;  // 1 when --placement auto chose it from the two traffics below
    double pp_bytes;   // a step's pipeline traffic, all replicas: activations and their gradients
                       // at each boundary between ranks, x M micro-batches x D replicas
    double dp_bytes;   // a step's all-reduce traffic, all stages: 2 (D-1)/D x gradient bytes per rank
    int lo[MAX_STAGES + 1];  // virtual stage vs holds global layers [lo[vs], lo[vs+1])
    int pipelined;     // pp or hybrid: a pipeline executor with action lists
    int data_parallel; // ddp or hybrid: gradients all-reduced over D replicas
    int distributed;   // more than one process takes part (pp, ddp, hybrid)
    // --epochs (0: --steps counts): set by plan_epochs once the training set's size is known
    int epochs;
    long long steps_per_epoch, epoch_rows, dropped, steps;  // epoch_rows = steps_per_epoch x batch x grad-accum
} Plan;

// Fills p from the options c (as options_parse left them: the plan also asks which flags were
// typed, option_on_command_line) and the world: ranks started and MPI's largest tag. Returns 0, or
// -1 with one line in err that names the value and the fix ("train: --batch 30 is not ...").
int plan_make(const TrainConfig *c, int world, long long tag_ub, Plan *p, char *err, size_t errlen);

// The layout of K stages x D replicas for `micropp plan` (no run, no MPI): the grid, the schedule's
// chunks, the batch cut into micro-batches and an even partition, by the same rules as plan_make
// but blind to which flags were typed. Returns 0, or -1 with one line in err.
int plan_layout(const TrainConfig *c, int K, int D, Plan *p, char *err, size_t errlen);

// --epochs: with the training set's rows known (after the data is open), the steps of an epoch
// (whole steps; the last partial batch is dropped) and of the run. Returns 0 (nothing to do without
// --epochs), or -1 with one line in err.
int plan_epochs(const TrainConfig *c, long long train_rows, Plan *p, char *err, size_t errlen);

// The chunk order (which rank holds which virtual stage) is the schedule's (p->chunk_order, schedule.h). The
// executor, checkpoints, verify, the report and the trace all ask these, never vs % K.
static inline int plan_vstage(const Plan *p, int stage, int chunk) { return vstage_of(p->chunk_order, p->K, stage, chunk); }
static inline int plan_stage_of(const Plan *p, int vs) { return stage_of_vstage(p->chunk_order, p->K, vs); }
static inline int plan_chunk_of(const Plan *p, int vs) { return chunk_of_vstage(p->K, vs); }
static inline int plan_layers(const Plan *p, int vs) { return p->lo[vs + 1] - p->lo[vs]; }
// The hybrid grid on world ranks (--placement): the stage and replica of a rank.
static inline int plan_rank_stage(const Plan *p, int rank) { return comm_grid_stage(p->placement, p->K, p->D, rank); }
static inline int plan_rank_replica(const Plan *p, int rank) { return comm_grid_replica(p->placement, p->K, p->D, rank); }
