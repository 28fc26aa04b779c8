// train/manifest.h: a checkpoint's manifest.json (train/manifest.c): the record of each stage file and
// what the manifest says of the run, parsed and checked from its text; train/checkpoint.c reads and writes it.
#pragma once
#include <stdint.h>
#include "base/safetensors.h"
#include "base/config.h"

#define MANIFEST "manifest.json"

typedef struct {
    char file[ST_NAME_LEN];
    int stage, lo, hi, head;
    uint64_t bytes;
    uint32_t crc;
} FileRec;  // one stage file; also the record a writer sends to rank 0 (plain bytes)

typedef struct {
    int64_t step;
    uint64_t next_sample;
    int layers, hidden, classes, optimizer, inputs, experts;  // (experts: absent, 0: a dense model)
    int moe_every;  // --moe-every of an MoE model (absent: 1, the default before it was recorded)
    double lr, batch, seed, samples;  // how it was trained (-1 when absent): notes, not refusals
    char data[PATH_LEN];
    char mode[32];
    int world, stages, dp;
    int n_files;
    FileRec *files;
} Manifest;

// Parses and checks a manifest's text: fields, plain file names, and that the files cover every
// layer and the head exactly once. Returns 0, or -1 with the reason in err (m->files malloc'd).
int manifest_parse(const char *text, Manifest *m, char *err, size_t errlen);
