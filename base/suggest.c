// base/suggest.c: what a mistyped or foreign name was meant to be: the nearest name by edit distance
// (config.c's "did you mean" for flags, choices and config keys) and a table of the flags other
// tools give the same concepts (Megatron-LM, DeepSpeed, torchrun), each answered with micropp's.
#include <ctype.h>
#include <string.h>
#include "base/suggest.h"

static int same_letter(char a, char b) {
    if (a == '_') a = '-';
    if (b == '_') b = '-';
    return tolower((unsigned char)a) == tolower((unsigned char)b);
}

int edit_distance(const char *a, const char *b) {  // optimal string alignment: a swap of two letters is 1
    enum { MAXN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXN || lb >= MAXN) return la > lb ? (int)la : (int)lb;  // a long value is near nothing
    int d[MAXN + 1][MAXN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + !same_letter(a[i - 1], b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && same_letter(a[i - 1], b[j - 2]) && same_letter(a[i - 2], b[j - 1]) &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

static int is_prefix(const char *typed, const char *name) {
    size_t n = strlen(typed);
    if (n < 2 || n >= strlen(name)) return 0;
    for (size_t i = 0; i < n; i++) if (!same_letter(typed[i], name[i])) return 0;
    return 1;
}

const char *nearest_name(const char *typed, const char *const *names, int n) {
    int limit = (int)strlen(typed) / 3;
    if (limit < 1) limit = 1;
    if (limit > 3) limit = 3;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(typed, names[i]);
        if (d < best_d) { best = names[i]; best_d = d; }
    }
    for (int i = 0; i < n && !best; i++) if (is_prefix(typed, names[i])) best = names[i];
    return best;
}

#define MB_COUNT \
    "--micro-batches M, a count, not a size: M = --batch / micro-batch size (--batch 32 --micro-batches 4: 8 rows each)"
static const ForeignFlag foreign[] = {
    {"micro-batch-size", "Megatron-LM", "micro-batches", MB_COUNT},
    {"micro-batch", NULL, "micro-batches", MB_COUNT},
    {"microbatch-size", NULL, "micro-batches", MB_COUNT},
    {"train-micro-batch-size-per-gpu", "DeepSpeed", "micro-batches", MB_COUNT},
#define GLOBAL "--batch B, the global batch: rows per optimizer step over all replicas"
    {"global-batch-size", "Megatron-LM", "batch", GLOBAL},
    {"train-batch-size", "DeepSpeed", "batch", GLOBAL},
    {"gradient-accumulation-steps", "DeepSpeed", "grad-accum",
     "--grad-accum N (monolith/ddp); a pipeline accumulates its --micro-batches instead"},
#define TP "--tp T: T ranks share each stage's layers (ranks = P x D x T)"
    {"tensor-model-parallel-size", "Megatron-LM", "tp", TP},
    {"tensor-parallel-size", NULL, "tp", TP},
    {"pipeline-model-parallel-size", "Megatron-LM", "pp", "--pp P: pipeline stages, a rank each (ranks = P x D x T)"},
    {"pipeline-parallel-size", NULL, "pp", "--pp P: pipeline stages, a rank each (ranks = P x D x T)"},
    {"data-parallel-size", NULL, "dp", "--dp D: data-parallel replicas (ranks = P x D x T; left out: ranks / (P x T))"},
    {"virtual-pipeline-model-parallel-size", "Megatron-LM", "virtual-stages",
     "--virtual-stages V with --schedule interleaved: model chunks per rank"},
    {"num-layers-per-virtual-pipeline-stage", "Megatron-LM", "virtual-stages",
     "--virtual-stages V with --schedule interleaved: V = layers per stage / this"},
    {"zero-stage", "DeepSpeed", "zero", "--zero Z (1: optimizer state, 2: + gradients, 3: + parameters)"},
    {"zero-optimization", "DeepSpeed", "zero", "--zero Z (1: optimizer state, 2: + gradients, 3: + parameters)"},
    {"num-layers", "Megatron-LM", "layers", "--layers L: hidden layers, each Linear(H,H)+ReLU"},
    {"hidden-size", "Megatron-LM", "hidden", "--hidden H"},
    {"train-iters", "Megatron-LM", "steps", "--steps N: optimizer steps in total"},
    {"max-steps", NULL, "steps", "--steps N: optimizer steps in total"},
    {"lr-warmup-iters", "Megatron-LM", "warmup-steps", "--warmup-steps N"},
    {"lr-decay-style", "Megatron-LM", "lr-schedule", "--lr-schedule constant|cosine"},
    {"log-interval", "Megatron-LM", "log-every", "--log-every N"},
    {"save-interval", "Megatron-LM", "save-every", "--save-every N (with --save DIR)"},
    {"load", "Megatron-LM", "resume", "--resume DIR"},
    {"recompute-activations", "Megatron-LM", "checkpoint-activations", "--checkpoint-activations"},
    {"bf16", NULL, "precision", "--precision bf16"},
    {"fp16", NULL, "precision", "--precision bf16 (there is no fp16)"},
    {"nproc-per-node", "torchrun", NULL, "mpiexec -n N micropp ... (the launcher gives the ranks)"},
    {"nnodes", "torchrun", NULL, "mpiexec -n N micropp ... with a host file (the launcher gives the ranks)"},
    {"world-size", NULL, NULL, "mpiexec -n N micropp ... (the launcher gives the ranks)"},
    {0},
};

const ForeignFlag *foreign_flag(const char *typed) {
    for (const ForeignFlag *f = foreign; f->name; f++) if (edit_distance(typed, f->name) == 0) return f;
    return NULL;
}
