// train/plan.h: what `micropp train` will do, decided before anything runs: a pure function from the
// parsed options, what was typed, and the facts of the world (ranks, devices, nodes, the schedule
// file, the data's rows, the resumed step) to a Plan. Every rule a run must satisfy is checked
// here, once, and every choice is made here; setup, the executor and the report read the Plan.
// No MPI, no model memory.
#pragma once
#include <stddef.h>
#include "base/config.h"
#include "moe.h"        // MoeSpec
#include "axes/axis.h"  // the Plan's type, the Facts, Degrees (the plan's input) and MODE_*

// Fills p from the options c, the degrees d (degrees_resolve: once, from the options and the world),
// what options_parse saw of the options (which the config file set, which were typed) and the facts f.
// Returns 0, or -1 with one line in err that names the value and the fix ("train: --batch 30 is not ...").
int plan_make(const TrainConfig *c, const Degrees *d, const OptionsSeen *seen, const Facts *f, Plan *p, char *err,
              size_t errlen);

// The MoE layers' options (moe.h) of a run: its micro-batch is the routing group.
MoeSpec plan_moe(const TrainConfig *c, const Plan *p);

// The rules that hold before any rank waits on another (--timeout bounds those waits): 0, or -1
// with one line in err. plan_make checks them too.
int plan_early(const TrainConfig *c, char *err, size_t errlen);

// The layout of the degrees d for `micropp plan` and the planner (no run, no MPI): the grid, the
// schedule's chunks, the batch cut into micro-batches, the partition (--partition's, else even) and the
// placement, by the same rules as plan_make but blind to which flags were typed. 0, or -1 with one line in err.
int plan_layout(const TrainConfig *c, const Degrees *d, Plan *p, char *err, size_t errlen);

// The device and transport from what was asked (--device, --transport, --tf32) and what the ranks
// found (comm_choose_hardware), for train's plan and for pingpong: *device DEVICE_CPU or DEVICE_CUDA,
// *transport TRANSPORT_MPI or TRANSPORT_NCCL. f NULL (not yet known): only the rules of the options
// alone. Returns 0, or -1 with one line in err ("cmd: ...").
// --transport auto takes mpi even where nccl could run (every rank a GPU of its own, 2+ ranks): the NCCL
// transport has never run on a multi-GPU machine (issue 26). *why is then PLAN_NCCL_UNPROVEN, the line
// that says so, else "".
int plan_device(const char *cmd, int device, int transport, int tf32, int world, const Hardware *f, int *dev_out,
                int *transport_out, const char **why, char *err, size_t errlen);
extern const char *const PLAN_NCCL_UNPROVEN;
