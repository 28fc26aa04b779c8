// train/checkpoint.h: --save / --save-every / --resume. A checkpoint is a folder: one safetensors file per
// pipeline stage with GLOBAL, PyTorch-like tensor names (layers.{i}.weight [out,in], head.bias,
// optim.exp_avg.layers.{i}.weight, ...) and a manifest.json (config, step, data position, layout,
// per-file CRC-32) written last. Any layout resumes any checkpoint: each stage reads the layers it
// now holds from whichever files have them. The tensors are whole whatever --tp or --ep wrote them: a
// tensor-parallel rank (or an expert-parallel one) reads them whole and keeps its shard (axes/tensor.c).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include "base/config.h"
#include "model.h"

// Who holds what in this run. Data parallelism plugs in by giving each replica its stage(s) and
// setting writer only on dp rank 0 of each stage: every replica reads, one writes.
typedef struct {
    const TrainConfig *c;
    int64_t inputs, steps;  // the plan's: the input layer's width, the run's total steps
    const char *mode;   // recorded in the manifest: "monolith", "manual", "pp" (later "ddp", "hybrid")
    int world;          // ranks in the job
    int stages;         // K: pipeline stages (manual: parts) of this run's layout
    int dp;             // replicas of each stage (1 without data parallelism)
    const int *lo;      // [stages+1]: stage k holds global layers [lo[k], lo[k+1]); the last one the head
    Stage *local;       // the stages this process holds (monolith/pp: one; manual: all K)
    int n_local;
    int first_stage;    // global stage index of local[0]
    const int *stage_of;  // optional [n_local]: global stage index of local[k] (interleaved: the rank's
                          // chunks are virtual stages stage, stage+K, ...); NULL: first_stage + k
    int writer;         // 1: this process writes the files of its stages (with --tp or --ep: its group does,
                        // through its rank 0, which gathers the shards into the whole tensors)
    int tp, tp_rank;    // --tp: the ranks sharing each local stage, and this one's place among them (1, 0: none)
    MPI_Comm tp_comm;   // their communicator (tp > 1)
    int ep, ep_rank;    // --ep: the expert group each MoE layer's experts are spread over, this one's place
    MPI_Comm ep_comm;   // (1, 0: none), and its communicator (ep > 1); checkpoints hold every expert whole
    MPI_Comm comm;      // every rank of the job; a save gathers the file list at its rank 0
} CkptLayout;

// Checks that --save's folder can be made and written and that --resume's holds a manifest, before
// training: bad input ends every rank with one line and exit 2 (the flags' own rules are the
// plan's). Creates the --save folder. Collective over comm.
void ckpt_setup(const TrainConfig *c, MPI_Comm comm);
// Is `name` one a checkpoint folder's writer makes there (the manifest, a stage file, their temporaries)?
// An output of the run under that name inside --save or --resume would be lost or destroy the checkpoint.
int ckpt_owns(const char *name);

// The step of the checkpoint in dir (its manifest's), for the plan, before anything is set up; 0
// when rank 0 cannot read or parse it (ckpt_setup and ckpt_resume then say why). Collective over comm.
int64_t ckpt_resume_step(const char *dir, MPI_Comm comm);

// --resume: verifies the manifest (against this run's config) and every file this process reads
// (size, CRC-32, names, dtypes, shapes), then loads parameters and Adam moments into the local
// stages. Any problem: one line and exit 2 on every rank. Returns the checkpoint's step (steps
// completed); *next_sample is the data position; desc gets "step 20 (pp, 4 stages)" for the log.
// Collective over l->comm.
int64_t ckpt_resume(const CkptLayout *l, uint64_t *next_sample, char *desc, size_t desc_len);

// Saves the state after `step` completed steps (next_sample: the data position). Writers write
// their stages' files (temporary name, fsync, rename); rank 0 of comm then writes the manifest
// (the commit point) and removes the files of older checkpoints. A failing write ends the job
// (fatal). Returns the checkpoint's total bytes on rank 0 (0 elsewhere, and when this step was
// already saved). Collective over l->comm.
double ckpt_save(const CkptLayout *l, int64_t step, uint64_t next_sample);
