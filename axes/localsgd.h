// axes/localsgd.h: local SGD / DiLoCo on the data axis (--sync-every H): each replica steps alone, with its
// own optimizer, H steps; then the replicas average how far they moved from the anchor (one all-reduce of
// params - anchor) and an outer optimizer (SGD with Nesterov momentum, --outer-lr, --outer-momentum) moves
// the anchor, which every replica starts the next H steps from. Its state, in checkpoints, per rank.
#pragma once
#include <stddef.h>
#include "comms.h"
#include "model.h"
#include "axes/axis.h"

// The outer loop of one rank: an anchor and a momentum per local stage, on the host.
typedef struct {
    Comm *comm;         // its dp group is the replicas of the rank's stages
    int algo;           // ALLREDUCE_*: the outer all-reduce (shm's windows hold no anchor deltas: mpi instead)
    int every;          // H: the steps between two outer steps (the run's last step is one too)
    float lr, momentum; // the outer optimizer's
    Stage *local;       // the stages this rank holds
    int n;
    float **anchor, **mom, *work;  // [n][n_params] on the host; work: one stage's deltas
    int syncs;          // outer steps taken in this run
    double seconds;     // their time, the all-reduce included
    double floats;      // the floats each all-reduced (a rank's), summed over the syncs
} LocalSgd;

// The anchor is the stages' parameters as they are now (after --resume's loading: a checkpoint of local SGD
// is taken at an outer step, where every replica holds the anchor), the momentum zero.
void localsgd_setup(LocalSgd *l, const Plan *p, Comm *comm, Stage *local, int n_local);
void localsgd_free(LocalSgd *l);
// Is step (0-based) one that ends with an outer step? Every H-th, and the run's last.
int localsgd_due(const LocalSgd *l, int step, long long steps);
// The outer step: the replicas' mean move d = mean(params - anchor), the outer gradient g = -d, the
// momentum m = mu m + g, the anchor -= lr (g + mu m) (Nesterov; mu 0: anchor -= lr g), params = anchor.
// With lr 1 and mu 0 the anchor is the replicas' mean: H = 1 and plain SGD is ddp. Collective over dp.
void localsgd_sync(LocalSgd *l);
// --verify: the stages' gradients averaged over the replicas (ddp's), for the comparison with the
// monolith's; *saved keeps each rank's own, which localsgd_restore_grads puts back before its update.
void localsgd_average_grads(LocalSgd *l, float ***saved);
void localsgd_restore_grads(LocalSgd *l, float **saved);

// Checkpoints: each rank's file DIR/localsgd-rank-R.safetensors (the outer momentum, and Adam's moments,
// which differ between replicas), tagged with the step. Saved before the manifest commits the step.
void localsgd_save(const LocalSgd *l, const char *dir, long long step, int optimizer);
// --resume: every rank reads its file; a checkpoint that holds none for this step and layout ends
// every rank with one line (exit 2). Collective over the world.
void localsgd_resume(LocalSgd *l, const char *dir, long long step, int optimizer);
// Is name one of its files (train/checkpoint.c's ckpt_owns)?
int localsgd_owns(const char *name);
