// schedule_v.c: the controllable-memory V schedules of Qi, Wan, Huang and Lin ("Pipeline Parallelism
// with Controllable Memory", arXiv:2405.15362; their zbv_greedy.py in sail-sg/zero-bubble-pipeline-
// parallelism): V-Half, about half of 1F1B's activation memory, and V-Min, about a third, on the V
// chunk order of zb-v, built as its authors build them: a repeating pattern, the weight passes put in
// its idle slots, then the warm-up and cool-down squeezed without raising the pattern's memory.
#include <string.h>
#include "schedule_v.h"
#include "base/util.h"

// A rank's passes, in the authors' types (schedule_v.h's VPASS_* in their order). Split, TW1 is chunk
// 1's W and TW0 chunk 0's; unsplit (the first squeeze), TW1 holds both, in order.
enum { TF0 = VPASS_F0, TF1, TI1, TI0, TW1, TW0, TYPES };
static const int memory_of[TYPES] = {1, 1, 0, 0, -1, -1};  // chunk activations a pass adds (F) or frees (W)

// Every rank's passes as slots of time: slot[s][type][i], the i-th pass of that type on rank s.
typedef struct {
    int S, N, types;  // ranks, micro-batches, types in use (4: no W yet, 5: W unsplit, 6: split)
    int *slot, *len;  // [S][TYPES][2N] and [S][TYPES]
} Slots;
static int *at(Slots *v, int s, int type, int i) { return &v->slot[((size_t)s * TYPES + type) * 2 * v->N + i]; }
static int len(const Slots *v, int s, int type) { return type < v->types ? v->len[s * TYPES + type] : 0; }
static int last(Slots *v, int s, int type) { return len(v, s, type) ? *at(v, s, type, len(v, s, type) - 1) : -1; }

// The stable pattern: rank i's F, f, B and b of micro-batch 0 at these slots, micro-batch k 6k later
// (six passes of one micro-batch in six slots: F, f, B, b, W, w). The interval keeps the four apart
// modulo 6 (their stable_pattern_v_min and stable_pattern_v_half).
static void pattern(Slots *v, int half) {
    int p = v->S, interval = half ? (p % 2 == 0 ? 3 : 0) : (p % 3 == 0 ? 2 : 0);
    for (int i = 0; i < p; i++) {
        int first[4] = {i, 2 * p - i - 1, 2 * p + interval + i, 4 * p + interval - i - 1};
        if (half) {
            int h[4] = {2 * i, 3 * p - i - 2, 3 * p + interval + 2 * i - 1, 6 * p + interval - i - 2};
            memcpy(first, h, sizeof first);
        }
        for (int t = 0; t < 4; t++) {
            v->len[i * TYPES + t] = v->N;
            for (int k = 0; k < v->N; k++) *at(v, i, t, k) = first[t] + 6 * k;
        }
    }
    v->types = 4;
}

// The next pass of rank s in slot order from heads p[] (the lowest slot, then the lowest type): its type,
// or -1 when none is left.
static int next_pass(Slots *v, int s, const int *p) {
    int best = -1;
    for (int t = 0; t < v->types; t++)
        if (p[t] < len(v, s, t) && (best < 0 || *at(v, s, t, p[t]) < *at(v, s, best, p[best]))) best = t;
    return best;
}

// The weight passes in the idle slots of rank s, each after its I (put_w): split, chunk 1's first.
static void put_w(Slots *v, int s, int split) {
    int p[TYPES] = {0}, pending[2] = {0, 0}, end = 0, t;
    for (t = 0; t < 4; t++) end = last(v, s, t) > end ? last(v, s, t) : end;
    v->len[s * TYPES + TW1] = v->len[s * TYPES + TW0] = 0;
    int i = 0;
    v->types = 4;  // (the walk reads F, f, B, b only)
    for (; i <= end; i++) {
        t = next_pass(v, s, p);
        if (t >= 0 && *at(v, s, t, p[t]) == i) {
            p[t]++;
            if (t == TI1 || t == TI0) pending[split && t == TI0]++;
            continue;
        }
        for (int w = 0; w < 2; w++)
            if (pending[w]) {
                *at(v, s, TW1 + w, v->len[s * TYPES + TW1 + w]++) = i;
                pending[w]--;
                break;
            }
    }
    i = end;  // the W still owed after the last pass, one a slot
    for (int w = 0; w < 2; w++)
        for (; pending[w] > 0; pending[w]--) *at(v, s, TW1 + w, v->len[s * TYPES + TW1 + w]++) = ++i;
    v->types = split ? 6 : 5;
}

// The most chunk activations rank s holds at once (mem_of_stage): an F adds one, a W frees one; without
// W passes (4 types), a W runs in each idle slot while one is owed.
static int memory_peak(Slots *v, int s) {
    int p[TYPES] = {0}, owed = 0, now = 0, peak = 0, end = 0;
    for (int t = 0; t < v->types; t++) end = last(v, s, t) > end ? last(v, s, t) : end;
    for (int i = 0; i <= end; i++) {
        int t = next_pass(v, s, p);
        if (t >= 0 && *at(v, s, t, p[t]) == i) {
            p[t]++;
            now += memory_of[t];
            owed += t == TI1 || t == TI0;
        } else if (v->types == 4 && owed) {
            now--;
            owed--;
        }
        if (now > peak) peak = now;
    }
    return peak;
}

// The pass of every rank that comes next in slot order (the lowest slot, then rank, then type), from
// heads p[S][TYPES]: its rank in *s and type in *t; 0 when none is left.
static int next_global(Slots *v, int *p, int *s, int *t) {
    int found = 0, best = 0;
    for (int r = 0; r < v->S; r++) {
        int k = next_pass(v, r, p + r * TYPES);
        if (k < 0) continue;
        int slot = *at(v, r, k, p[r * TYPES + k]);
        if (!found || slot < best) { found = 1; best = slot; *s = r; *t = k; }
    }
    return found;
}

// The slot a pass may start at the earliest after what it waits for (the slot after the latest): the
// same pass of the rank before (F, B of chunk 1: the V runs down, then up) or after (f, b), its own
// earlier pass of the micro-batch (f after F, B after f, b after B), a W after its I, and the pass of
// the type before it (its micro-batch's predecessor in the type).
static int ready_slot(Slots *v, int s, int t, int i) {
    int dep = -1;
    if ((t == TF0 || t == TI1) && s > 0) dep = *at(v, s - 1, t, i);
    if ((t == TF1 || t == TI0) && s + 1 < v->S) dep = *at(v, s + 1, t, i);
    if (t > TF0 && t < TW1 && *at(v, s, t - 1, i) > dep) dep = *at(v, s, t - 1, i);
    if (t == TW1) {  // (unsplit: the i-th W follows the i-th I of either chunk, in slot order)
        int a = 0, b = 0, nth = -1;
        for (int k = 0; k <= i; k++)
            nth = b >= len(v, s, TI0) || (a < len(v, s, TI1) && *at(v, s, TI1, a) < *at(v, s, TI0, b))
                      ? *at(v, s, TI1, a++) : *at(v, s, TI0, b++);
        if (nth > dep) dep = nth;
    }
    if (i > 0 && *at(v, s, t, i - 1) > dep) dep = *at(v, s, t, i - 1);
    return dep + 1;
}

// Every pass started as early as it can, in slot order, each taking one slot (their eager_execution_time
// at unit costs): the slots become those start times. A rank runs its passes in the order of their slots.
static void eager(Slots *v) {
    size_t n = (size_t)v->S * TYPES * 2 * v->N;
    int *end = xmalloc(sizeof(int) * n), *p = xcalloc((size_t)v->S * TYPES, sizeof(int)), s = 0, t = 0;
    int *prev = xcalloc((size_t)v->S, sizeof(int));  // the end of each rank's pass before
    Slots e = *v;
    e.slot = end;
    while (next_global(v, p, &s, &t)) {
        int i = p[s * TYPES + t]++, dep = prev[s];
        if ((t == TF0 || t == TI1) && s > 0 && *at(&e, s - 1, t, i) > dep) dep = *at(&e, s - 1, t, i);
        if ((t == TF1 || t == TI0) && s + 1 < v->S && *at(&e, s + 1, t, i) > dep) dep = *at(&e, s + 1, t, i);
        if (t > TF0 && t < TW1 && *at(&e, s, t - 1, i) > dep) dep = *at(&e, s, t - 1, i);
        if (i > 0 && *at(&e, s, t, i - 1) > dep) dep = *at(&e, s, t, i - 1);
        *at(&e, s, t, i) = prev[s] = dep + 1;
    }
    for (size_t k = 0; k < n; k++) v->slot[k] = end[k] - 1;
    free(end); free(p); free(prev);
}

// Their reorder, the squeeze: every pass in slot order; before rank 0's first b (when the W count,
// consider_w) and from the last micro-batch's first forward on, a pass moves to the earliest free slot
// after what it waits for where its rank's memory stays within the pattern's peak; the steady state
// between is kept. Then (W not counted) the W put in the idle slots, and every pass started as early
// as it can.
static void squeeze(Slots *v, int consider_w) {
    int S = v->S, limit = 0, s = 0, t = 0, phase = 0, size = 0;
    for (s = 0; s < S && consider_w; s++) put_w(v, s, 0);
    for (s = 0; s < S; s++) {
        int m = memory_peak(v, s);
        limit = m > limit ? m : limit;
        for (t = 0; t < v->types; t++) size = last(v, s, t) + 1 > size ? last(v, s, t) + 1 : size;
    }
    char *taken = xcalloc((size_t)S * size, 1);
    int *p = xcalloc((size_t)S * TYPES, sizeof(int));
    while (next_global(v, p, &s, &t)) {
        int i = p[s * TYPES + t]++, *x = at(v, s, t, i), slot = *x, ok = 0;
        if (t == TI0 && s == 0 && phase == 0) phase = 1;
        if (phase == 1 || (phase == 0 && !consider_w)) {  // kept where it is
            if (phase == 1 && t == TF0 && i == v->N - 1) phase = 2;
            taken[(size_t)s * size + slot] = 1;
            continue;
        }
        for (*x = ready_slot(v, s, t, i); *x < slot && !ok; ++*x)
            ok = !taken[(size_t)s * size + *x] && memory_peak(v, s) <= limit;
        *x = ok ? *x - 1 : slot;
        taken[(size_t)s * size + *x] = 1;
    }
    free(taken); free(p);
    if (!consider_w) {  // (with them, the W keep the slots they were squeezed into)
        v->types = 4;
        for (s = 0; s < S; s++) put_w(v, s, 0);
    }
    eager(v);
}

// Built for (half, K, M) once and kept: every rank's list comes from the one construction of all ranks.
static Slots built;
static int built_half = -1;

static Slots *construct(int half, int K, int M) {
    if (built_half == half && built.S == K && built.N == M) return &built;
    free(built.slot); free(built.len);
    built = (Slots){.S = K, .N = M, .slot = xcalloc((size_t)K * TYPES * 2 * M, sizeof(int)),
                    .len = xcalloc((size_t)K * TYPES, sizeof(int))};
    built_half = half;
    pattern(&built, half);
    squeeze(&built, 1);
    built.types = 4;  // the W dropped and the forwards and I squeezed again
    squeeze(&built, 0);
    built.types = 4;  // the W dropped, and put back per chunk
    for (int s = 0; s < K; s++) put_w(&built, s, 1);
    return &built;
}

void schedule_v_order(int half, int K, int M, int s, int *pass, int *mb) {
    Slots *v = construct(half, K, M);
    int p[TYPES] = {0}, t, n = 0;
    while ((t = next_pass(v, s, p)) >= 0) {
        pass[n] = t;
        mb[n++] = p[t]++;
    }
}
