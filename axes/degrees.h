// axes/degrees.h: a run described by its degrees, as the field writes it (Megatron's, DeepSpeed's and
// torchrun's pp x dp x tp, and the ZeRO level): resolved ONCE from the options and the world size, and
// the plan's input. --mode is a user's spelling that sets them; the degrees alone describe a run.
// Each option row names the axes it applies to (base/config.h's AXIS_*), and one rule checks them all.
#pragma once
#include <stddef.h>
#include "base/config.h"

// The spellings of --mode, each a way to set the degrees: monolith = pp 1 x dp 1, manual = --parts
// parts in one process, pp = one stage per group of tp ranks, ddp = one replica per group, hybrid = --pp x
// --dp. A run's mode is also what its degrees are called (--json's "mode", a checkpoint's manifest).
enum { MODE_MONOLITH, MODE_MANUAL, MODE_PP, MODE_DDP, MODE_HYBRID };
#define MODE_CHOICES "monolith|manual|pp|ddp|hybrid"

typedef struct {
    int pp;    // pipeline stages (manual: the parts one process holds)
    int dp;    // data-parallel replicas
    int tp;    // tensor-parallel ranks per group (adjacent world ranks)
    int zero;  // ZeRO stage over the replicas: 0 (none), 1, 2 or 3 (0 whenever dp is 1)
    int ep;    // expert parallelism: replicas sharing each MoE layer's experts, a divisor of dp (1: none); it
               // takes no ranks of its own (the world stays pp x dp x tp), as Megatron's expert groups inside dp
    int manual;  // --mode manual: the pp parts run in one process, not on ranks
} Degrees;

// The axes the degrees make active (AXIS_* bits): a pipeline over ranks (pp > 1, not manual), data
// parallelism (dp > 1), tensor parallelism (tp > 1).
unsigned degrees_axes(const Degrees *d);
// The ranks the degrees take: pp x dp x tp (manual: 1).
int degrees_world(const Degrees *d);
// The --mode that spells them (MODE_*): what --json's "mode" and a checkpoint's manifest call them.
int degrees_mode(const Degrees *d);
// In words, for messages and the header: "pp 2 x dp 2 x tp 1", or "--mode manual (4 parts in one process)".
const char *degrees_text(const Degrees *d, char *buf, size_t n);

// The degrees from the options (--mode as spelled, --parts, --pp, --dp, --tp, --zero: what the config
// file set or the command line typed, seen) and the world: each degree given is kept, the one left out
// is the ranks left (dp by default: `mpiexec -n 8 micropp train --pp 2 --tp 2` is dp 2). Returns 0,
// or -1 with one line in err naming the value and the numbers that work.
int degrees_resolve(const TrainConfig *c, const OptionsSeen *seen, int world, Degrees *d, char *err, size_t n);
// The one rule for every option row that names its axes (Option.axes): typed on the command line for a
// run whose degrees make none of them active (AXES_ALL: not all of them) is refused, naming the flag
// and the degree to set. (A config file's key is left unused: a job description shared by runs.)
int degrees_check_flags(const Degrees *d, const OptionsSeen *seen, char *err, size_t n);
