// axes/degrees.c: the degrees of a run (degrees.h) resolved once from the options and the world: --mode
// as a spelling that sets them, or the degrees alone (the one left out is the ranks left); and the one
// rule that refuses an option typed for axes the degrees leave inactive (the option rows name theirs).
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "axes/degrees.h"

__attribute__((format(printf, 3, 4))) static int refuse(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

unsigned degrees_axes(const Degrees *d) {
    return (d->pp > 1 && !d->manual ? AXIS_PIPELINE : 0u) | (d->dp > 1 ? AXIS_DATA : 0u) |
           (d->tp > 1 ? AXIS_TENSOR : 0u);
}

int degrees_world(const Degrees *d) { return d->manual ? 1 : d->pp * d->dp * d->tp; }

int degrees_mode(const Degrees *d) {
    if (d->manual) return MODE_MANUAL;
    if (d->pp > 1) return d->dp > 1 ? MODE_HYBRID : MODE_PP;
    return d->dp > 1 ? MODE_DDP : MODE_MONOLITH;
}

const char *degrees_text(const Degrees *d, char *buf, size_t n) {
    if (d->manual) snprintf(buf, n, "--mode manual (%d parts in one process)", d->pp);
    else snprintf(buf, n, "pp %d x dp %d x tp %d", d->pp, d->dp, d->tp);
    return buf;
}

// "1, 2, 3 or 6": the divisors of n (the first 8), the degrees that cut n evenly.
static const char *divisors(int n, char *out, size_t len) {
    int v[8], k = 0;
    for (int m = 1; m <= n && k < 8; m++)
        if (n % m == 0) v[k++] = m;
    out[0] = 0;
    for (int i = 0; i < k; i++) {
        size_t l = strlen(out);
        snprintf(out + l, len - l, "%s%d", i == 0 ? "" : i == k - 1 ? " or " : ", ", v[i]);
    }
    return out;
}

// " (--tp 2: 4 groups)" when the groups of tensor-parallel ranks are what a degree divides.
static const char *groups_of(int T, int world, char *out, size_t n) {
    out[0] = 0;
    if (T > 1) snprintf(out, n, " (%d groups of --tp %d)", world / T, T);
    return out;
}

// Without --mode, or --mode hybrid: each of --pp and --dp given is kept (the config file's too), the other
// is the groups of tp ranks left; neither: one stage, a replica per group.
static int from_degrees(const TrainConfig *c, const OptionsSeen *seen, int world, int hybrid, Degrees *d, char *err,
                        size_t n) {
    int has_p = seen_set(seen, "pp"), has_d = seen_set(seen, "dp"), T = d->tp, G = world / T;
    long long P = c->grid.pp, D = c->grid.dp;
    if (hybrid && !has_p && !has_d && T == 1)
        return refuse(err, n,
                      "train: --mode hybrid needs --pp P (stages) and --dp D (replicas) with P x D = %d, the number "
                      "of ranks",
                      world);
    if (hybrid && !has_p && !has_d)  // (P x D is the groups of --tp ranks, not the ranks: issue 37)
        return refuse(err, n,
                      "train: --mode hybrid needs --pp P (stages) and --dp D (replicas) with P x D x --tp %d = %d, "
                      "the number of ranks (P x D = %d)",
                      T, world, G);
    if (has_p && has_d && P * D * T != world) {
        if (T == 1)
            return refuse(err, n,
                          "train: --pp %lld x --dp %lld = %lld ranks, but %d were started: run 'mpiexec -n %lld' or "
                          "choose P x D = %d",
                          P, D, P * D, world, P * D, world);
        return refuse(err, n,
                      "train: --pp %lld x --dp %lld x --tp %d = %lld ranks, but %d were started: run 'mpiexec -n %lld' "
                      "or choose P x D x T = %d",
                      P, D, T, P * D * T, world, P * D * T, world);
    }
    if (has_p && !has_d && world == 1 && P > 1)  // (--parts K without --mode manual is --pp K: the same)
        return refuse(err, n,
                      "train: --pp %lld runs a stage per rank, and 1 rank was started: run 'mpiexec -n %lld', or add "
                      "--mode manual (the %lld stages as parts in one process)",
                      P, P, P);
    const char *flag = has_p ? "pp" : "dp";
    long long x = has_p ? P : D;
    if (has_p != has_d && G % x) {
        char fits[96], grp[48];
        return refuse(err, n, "train: --%s %lld does not divide the %d rank%s%s: use --%s %s, or 'mpiexec -n %lld'",
                      flag, x, world, world == 1 ? "" : "s", groups_of(T, world, grp, sizeof grp), flag,
                      divisors(G, fits, sizeof fits), x * T);
    }
    d->pp = has_p ? (int)P : has_d ? G / (int)D : 1;
    d->dp = has_d ? (int)D : G / d->pp;
    return 0;
}

// --mode pp: one stage per group of tp ranks, one replica.
static int spelled_pp(const TrainConfig *c, const OptionsSeen *seen, int world, Degrees *d, char *err, size_t n) {
    int T = d->tp, G = world / T;
    if (seen_typed(seen, "dp") && c->grid.dp != 1)
        return refuse(err, n,
                      "train: --mode pp is one replica (dp 1), and --dp %lld asks for %lld: drop --mode pp (--pp and "
                      "--dp alone describe the run) or --dp",
                      (long long)c->grid.dp, (long long)c->grid.dp);
    if (G < 2 && T == 1)
        return refuse(err, n,
                      "train: --mode pp needs at least 2 ranks (one per stage), got 1: run it as 'mpiexec -n 2 "
                      "./micropp train --mode pp'");
    if (G < 2)
        return refuse(err, n,
                      "train: --mode pp --tp %d needs at least 2 stages of %d ranks (%d ranks), got %d: run 'mpiexec "
                      "-n %d', or drop --mode pp (pp 1 x tp %d)",
                      T, T, 2 * T, world, 2 * T, T);
    if (seen_typed(seen, "pp") && c->grid.pp != G)
        return refuse(err, n,
                      "train: --mode pp runs a stage per %s, so --pp %lld needs %lld ranks, but %d were started: run "
                      "'mpiexec -n %lld', or drop --pp",
                      T > 1 ? "group of --tp ranks" : "rank", (long long)c->grid.pp, (long long)c->grid.pp * T, world,
                      (long long)c->grid.pp * T);
    d->pp = G;
    return 0;
}

// --mode ddp: one replica per group of tp ranks, one stage.
static int spelled_ddp(const TrainConfig *c, const OptionsSeen *seen, int world, Degrees *d, char *err, size_t n) {
    int T = d->tp;
    long long D = c->grid.dp;
    if (seen_typed(seen, "pp") && c->grid.pp != 1)
        return refuse(err, n,
                      "train: --mode ddp is one stage (pp 1), and --pp %lld asks for %lld: drop --mode ddp (--pp and "
                      "--dp alone describe the run) or --pp",
                      (long long)c->grid.pp, (long long)c->grid.pp);
    if (seen_typed(seen, "dp") && D * T != world && T == 1)
        return refuse(err, n,
                      "train: --dp %lld but %d ranks were started: --mode ddp runs one replica per rank, so run "
                      "'mpiexec -n %lld' or drop --dp",
                      D, world, D);
    if (seen_typed(seen, "dp") && D * T != world)
        return refuse(err, n, "train: --dp %lld x --tp %d = %lld ranks, but %d were started: run 'mpiexec -n %lld'", D,
                      T, D * T, world, D * T);
    d->dp = world / T;
    return 0;
}

// --mode monolith (pp 1 x dp 1) and --mode manual (--pp P stages as parts in one process, 2 when not
// given; --parts is its old spelling).
static int spelled_one(const TrainConfig *c, const OptionsSeen *seen, int world, Degrees *d, char *err, size_t n) {
    int T = d->tp, manual = c->grid.mode == MODE_MANUAL;
    const char *extra = seen_typed(seen, "pp") && c->grid.pp != 1 && !manual ? "pp"
                        : seen_typed(seen, "dp") && c->grid.dp != 1          ? "dp"
                                                                             : 0;
    if (manual) {
        if (T > 1)
            return refuse(err, n,
                          "train: --tp splits layers over ranks, and --mode manual runs in one process: drop "
                          "--tp, or drop --mode manual (--pp runs the stages on ranks)");
        if (extra)
            return refuse(err, n,
                          "train: --%s is a degree over ranks, and --mode manual runs its --pp parts in one process: "
                          "drop it, or drop --mode manual",
                          extra);
        if (world != 1)
            return refuse(err, n,
                          "train: --mode manual runs in one process but %d were started: drop 'mpiexec -n %d', or run "
                          "the parts as stages on ranks: --pp %d without --mode manual",
                          world, world, world);
        *d = (Degrees){.pp = seen_set(seen, "pp") ? (int)c->grid.pp : 2, .dp = 1, .tp = 1, .manual = 1};
        return 0;
    }
    if (extra)
        return refuse(
            err, n,
            "train: --mode monolith is pp 1 x dp 1, and --%s asks for more: drop --mode monolith (the degrees "
            "alone describe the run) or --%s",
            extra, extra);
    if (world != T && T == 1)
        return refuse(err, n,
                      "train: --mode monolith runs in one process but %d were started: drop 'mpiexec -n %d', or drop "
                      "--mode monolith (the ranks then run dp %d)",
                      world, world, world);
    if (world != T)
        return refuse(err, n,
                      "train: --mode monolith --tp %d runs one tensor-parallel group of %d ranks, but %d were started: "
                      "run 'mpiexec -n %d', or drop --mode monolith (the groups left become replicas: dp %d)",
                      T, T, world, T, world / T);
    return 0;
}

int degrees_resolve(const TrainConfig *c, const OptionsSeen *seen, int world, Degrees *d, char *err, size_t n) {
    *d = (Degrees){.pp = 1, .dp = 1, .tp = (int)c->grid.tp};
    int spelled = seen_set(seen, "mode"), T = d->tp;
    err[0] = 0;
    if (spelled && c->grid.mode == MODE_MANUAL) return spelled_one(c, seen, world, d, err, n);
    if (world % T) {
        char fits[96];
        return refuse(err, n,
                      "train: --tp %d makes groups of %d adjacent ranks, and %d ranks were started: use --tp %s (the "
                      "divisors of %d), or run 'mpiexec -n %d' (a multiple of %d)",
                      T, T, world, divisors(world, fits, sizeof fits), world, (world / T + 1) * T, T);
    }
    int rc = !spelled || c->grid.mode == MODE_HYBRID ? from_degrees(c, seen, world, spelled, d, err, n)
             : c->grid.mode == MODE_PP               ? spelled_pp(c, seen, world, d, err, n)
             : c->grid.mode == MODE_DDP              ? spelled_ddp(c, seen, world, d, err, n)
                                                     : spelled_one(c, seen, world, d, err, n);
    d->zero = d->dp > 1 ? (int)c->ddp.zero : 0;
    d->ep = c->grid.ep > 1 ? (int)c->grid.ep : 1;
    return rc;
}

// ---- the one rule of the option rows' axes ----

static const struct {
    unsigned axis;
    const char *what, *flag;
} axis_words[] = {
    {AXIS_PIPELINE, "a pipeline (--pp > 1)", "--pp"},
    {AXIS_DATA, "data parallelism (--dp > 1)", "--dp"},
    {AXIS_TENSOR, "tensor parallelism (--tp > 1)", "--tp"},
};
#define N_AXES (sizeof axis_words / sizeof *axis_words)

// The axes of bits in words: "a pipeline (--pp > 1) or tensor parallelism (--tp > 1)" (what), or the
// flags that set them: "--pp or --tp" (with all: "... with ...", "--pp and --tp").
static void axes_words(unsigned bits, int all, int flags, char *out, size_t n) {
    int total = 0, k = 0;
    for (size_t i = 0; i < N_AXES; i++) total += (bits & axis_words[i].axis) != 0;
    out[0] = 0;
    for (size_t i = 0; i < N_AXES; i++) {
        if (!(bits & axis_words[i].axis)) continue;
        const char *last = all ? (flags ? " and " : " with ") : " or ", *sep = !k ? "" : k == total - 1 ? last : ", ";
        size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", sep, flags ? axis_words[i].flag : axis_words[i].what);
        k++;
    }
}

int degrees_check_flags(const Degrees *d, const OptionsSeen *seen, char *err, size_t n) {
    if (!seen || !seen->opts) return 0;
    unsigned on = degrees_axes(d);
    for (int i = 0; seen->opts[i].name; i++) {
        unsigned want = seen->opts[i].axes & ~(unsigned)AXES_ALL;
        int all = (seen->opts[i].axes & AXES_ALL) != 0;
        if (!want || !seen->typed[i] || (all ? (on & want) == want : (on & want) != 0)) continue;
        char what[160], set[48], run[64];
        axes_words(want, all, 0, what, sizeof what);
        axes_words(want & ~on, all, 1, set, sizeof set);
        return refuse(err, n, "train: --%s applies to %s, and this run is %s: drop it or set %s", seen->opts[i].name,
                      what, degrees_text(d, run, sizeof run), set);
    }
    return 0;
}
