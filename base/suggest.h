// base/suggest.h: what a mistyped or foreign name was meant to be (suggest.c): the nearest name by
// edit distance, and what other tools' flags (Megatron, DeepSpeed, torchrun) are called here.
#pragma once

// Edit distance (Levenshtein) between two names, letters compared without case, '_' taken for '-'.
int edit_distance(const char *a, const char *b);

// The name of names[0..n) nearest to typed, or NULL when none is near: within a third of typed's
// length (at least 1, at most 3) edits, or typed a prefix of it (an abbreviation).
const char *nearest_name(const char *typed, const char *const *names, int n);

// Another tool's flag (without its dashes, '_' or '-') as micropp spells it: the tool's name, the
// micropp option it maps to (NULL: none, e.g. torchrun's ranks come from mpiexec) and how, in words
// (the arithmetic where there is some). NULL when typed is no known foreign flag.
typedef struct {
    const char *name, *tool, *target, *how;
} ForeignFlag;
const ForeignFlag *foreign_flag(const char *typed);
