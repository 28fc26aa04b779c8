// schedule_v.c: the controllable-memory V schedules of Qi, Wan, Huang and Lin ("Pipeline Parallelism
// with Controllable Memory", arXiv:2405.15362; their zbv_greedy.py in sail-sg/zero-bubble-pipeline-
// parallelism): V-Half, about half of 1F1B's activation memory, and V-Min, about a third, on the V
// chunk order of zb-v, built as its authors build them: a repeating pattern, the weight passes put in
// its idle slots, then the warm-up and cool-down squeezed without raising the pattern's memory. And the
// polish of any V's orders (zb-auto-v's last step), whose trial moves re-time only what a move can change.
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
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

// ---- The polish of V orders (schedule_v_polish) ----
// Each rank's passes as an order of types (each type's micro-batches in order: a place's micro-batch is how many
// of its type come before it), timed as the longest path through the orders: a pass starts when its rank's
// previous pass has ended and its input has come (the pass it waits for, plus a message between ranks). A trial
// move of rank s's stretch lo..hi re-times only what it can change: every rank's passes from the first that ends
// no sooner than E, the end of the pass before the stretch (a pass that ends before E waits on nothing the move
// touches). It stops early once every time that leaves the re-timed passes for one not yet re-timed is as
// it was (the rest is then as it was), or once a rank's span must pass the best (its end is at least a pass's end
// and the work after it). The times it overwrites are logged and put back when the move is not kept. The same
// times, bit for bit, as a whole run.

// A trial's state: where each rank is, what it re-timed, which hand-offs changed.
typedef struct {
    int *ptr, *todo;      // [K] the next place to time; the ranks to look at (todo[K]: how many)
    int *logq;            // [K*P] the places a trial re-timed, in order
    double *log_en;       // [K*P] their ends before
    double *begin_old;    // [K] each rank's first start before the trial
    long *out_c, *out_d;  // [K*P] the trial in which a place's end changed for its next place (c) or its dependant (d)
    long trial;
    int nlog, left, pending;  // places re-timed; left to time; changed hand-offs (and stretch places) not yet taken
} VTrial;
typedef struct {
    const VPolish *p;
    int K, M, P;
    int *ty, *mb, *pos;  // [K*P] each place's type and micro-batch; pos [6][K][M]: where (type, rank, mb) runs
    int *dk, *dr;        // [K*P] the place each place's pass waits for (-1: none) and its rank
    int *ha, *hb;        // [K*P] F - I and I - W run up to each place (its end)
    double *en, *rem;    // [K*P] each place's end, and the work after it on its rank
    double *cost;        // [K][6] a pass's
    double *begin;       // [K] each rank's first start
    long runs;
    VTrial t;
} VRun;

// The place (rank *r) whose end the pass of `type` and micro-batch mb on rank s waits for, -1 for none; dir 1:
// instead, the place that waits for this pass's end (its dependant).
static int vrun_link(const VRun *x, int s, int type, int mb, int dir, int *r) {
    int K = x->K, t = -1, from = s;
    if (dir == 0) {  // F0 after F0 of s-1, F1 after F1 of s+1 (the last rank: its F0), I1 after I1 of s-1
        if (type == TF0 && s > 0) t = TF0, from = s - 1;  // (rank 0: its F1), I0 after I0 of s+1 (the last: its I1)
        if (type == TF1) t = s == K - 1 ? TF0 : TF1, from = s == K - 1 ? s : s + 1;
        if (type == TI1) t = s == 0 ? TF1 : TI1, from = s == 0 ? s : s - 1;
        if (type == TI0) t = s == K - 1 ? TI1 : TI0, from = s == K - 1 ? s : s + 1;
    } else {
        if (type == TF0) t = s == K - 1 ? TF1 : TF0, from = s == K - 1 ? s : s + 1;
        if (type == TF1) t = s == 0 ? TI1 : TF1, from = s == 0 ? s : s - 1;
        if (type == TI1) t = s == K - 1 ? TI0 : TI1, from = s == K - 1 ? s : s + 1;
        if (type == TI0 && s > 0) t = TI0, from = s - 1;
    }
    *r = from;
    return t < 0 ? -1 : x->pos[((size_t)t * K + from) * x->M + mb];
}
// Place k of rank s: what it waits for (x->dk, x->dr), and, as the place its dependant waits for, the dependant's.
static void vrun_links(VRun *x, int s, int k) {
    size_t q = (size_t)s * x->P + k;
    int r, y;
    x->dk[q] = vrun_link(x, s, x->ty[q], x->mb[q], 0, &x->dr[q]);
    if ((y = vrun_link(x, s, x->ty[q], x->mb[q], 1, &r)) >= 0)
        x->dk[(size_t)r * x->P + y] = k, x->dr[(size_t)r * x->P + y] = s;
}

// The later of two times (no NaN here): fmax without libm's call in the inner loop.
static inline double later(double t, double u) { return t > u ? t : u; }

// Times rank r's places from x->t.ptr[r] on while their inputs are timed (the loop's body: vrun). In a trial, logs
// the times each had and counts the hand-offs it takes and makes, and the stretch's places (s, lo..hi). Returns
// 1 when the rank moved, -1 when a span must pass thr.
static int vrun_rank(VRun *x, int r, double thr, int s, int lo, int hi) {
    int P = x->P, *ptr = x->t.ptr, k = ptr[r], k0 = k, trial = x->t.trial > 0;
    size_t base = (size_t)r * P;
    double *en = x->en, e = k ? en[base + k - 1] : 0, comm = x->p->comm;
    for (; k < P; k++) {
        size_t q = base + k;
        int d = x->dk[q], dr = x->dr[q];
        if (d >= 0 && d >= (dr == r ? k : ptr[dr])) break;  // (its input not timed yet)
        double in = d < 0 ? 0 : en[(size_t)dr * P + d] + (dr != r ? comm : 0), old = en[q];
        double start = later(e, in);
        e = start + x->cost[r * 6 + x->ty[q]];
        if (trial) {
            int t = x->ty[q], stretch = r == s && k >= lo && k <= hi;
            x->t.logq[x->t.nlog] = (int)q, x->t.log_en[x->t.nlog++] = old;
            x->t.pending -= (k > 0 && x->t.out_c[q - 1] == x->t.trial) + stretch;
            x->t.pending -= d >= 0 && x->t.out_d[(size_t)dr * P + d] == x->t.trial;
            if (k + 1 < P && e != old) x->t.out_c[q] = x->t.trial, x->t.pending++;
            if ((e != old || stretch) && (t <= TI1 || (t == TI0 && r > 0))) x->t.out_d[q] = x->t.trial, x->t.pending++;
        }
        en[q] = e;
        if (k == 0) x->begin[r] = start;
        double rem = x->rem[q];  // (the rank's end is at least e + rem: 1e-9 of it for the rounding)
        if (e - x->begin[r] + rem - 1e-9 * (rem + e) > thr) { ptr[r] = k + 1; return -1; }
        if (trial && x->t.pending == 0) { k++; break; }
    }
    ptr[r] = k;
    x->t.left -= k - k0;
    return k > k0;
}

// Times every rank's places from x->t.ptr[r] on (the places before keep theirs), a rank looked at again when a
// neighbour (whose passes it waits for) has moved: the longest rank span, INFINITY when a rank waits for ever or
// (a trial) a rank's span must pass thr; *sum the spans' sum. A trial stops early when no changed hand-off is left
// (x->t.pending 0): the places not timed keep their times, which are the run's.
static double vrun(VRun *x, double thr, int s, int lo, int hi, double *sum) {
    int K = x->K, P = x->P, *todo = x->t.todo, *n = &x->t.todo[K];
    x->runs++;
    *n = 0;
    for (int r = K - 1; r >= 0; r--)
        if (x->t.ptr[r] < P) todo[(*n)++] = r;
    while (*n && !(x->t.trial && x->t.pending == 0)) {
        int r = todo[--*n], moved = vrun_rank(x, r, thr, s, lo, hi);
        if (moved < 0) return INFINITY;
        for (int j = r + 1; j >= r - 1 && moved; j -= 2) {  // (its neighbours, if not already to look at)
            int there = j < 0 || j >= K || x->t.ptr[j] == P;
            for (int i = 0; i < *n && !there; i++) there = todo[i] == j;
            if (!there) todo[(*n)++] = j;
        }
    }
    if (x->t.left && !(x->t.trial && x->t.pending == 0)) return INFINITY;
    double most = 0;
    *sum = 0;
    for (int r = 0; r < K; r++) {
        most = later(most, x->en[(size_t)r * P + P - 1] - x->begin[r]);
        *sum += x->en[(size_t)r * P + P - 1] - x->begin[r];
    }
    return most;
}

// Moves the pass at place `from` of rank s to place `to` (the passes between shift by one), names the stretch's
// micro-batches again (each type's first in the stretch keeps its number), and its links and work after.
static void vrun_move(VRun *x, int s, int from, int to) {
    size_t q = (size_t)s * x->P;
    int lo = from < to ? from : to, hi = from < to ? to : from, next[TYPES], *o = &x->ty[(size_t)s * x->P];
    int *mb = &x->mb[(size_t)s * x->P];
    double *rem = &x->rem[(size_t)s * x->P];
    for (int t = 0; t < TYPES; t++) next[t] = -1;
    for (int k = hi; k >= lo; k--) next[o[k]] = mb[k];
    int ty = o[from];
    for (; from < to; from++) o[from] = o[from + 1];
    for (; from > to; from--) o[from] = o[from - 1];
    o[to] = ty;
    for (int k = lo; k <= hi; k++) {
        mb[k] = next[o[k]]++;
        x->pos[((size_t)o[k] * x->K + s) * x->M + mb[k]] = k;
    }
    for (int k = lo; k <= hi; k++) {
        vrun_links(x, s, k);
        x->ha[q + k] = (k ? x->ha[q + k - 1] : 0) + (o[k] <= TF1) - (o[k] == TI1 || o[k] == TI0);
        x->hb[q + k] = (k ? x->hb[q + k - 1] : 0) + (o[k] == TI1 || o[k] == TI0) - (o[k] >= TW1);
    }
    for (int k = hi - 1; k >= lo - 1 && k >= 0; k--) rem[k] = rem[k + 1] + x->cost[s * 6 + o[k + 1]];
}

// Rank s's places lo..hi within the limit (a chunk pass's stash: 1 from F to I, w_share from I to W, held as
// a + w_share b with a = F - I and b = I - W run so far: x->ha, x->hb), every W after its I: 1, else 0.
static int vrun_fits(const VRun *x, int s, int lo, int hi) {
    size_t q = (size_t)s * x->P;
    for (int k = lo; k <= hi; k++) {
        int t = x->ty[q + k], m = x->mb[q + k];
        int partner = t >= TW1 ? t - 2 : t + 2;  // (an I's W, a W's I)
        if (t >= TI1 && (x->pos[((size_t)partner * x->K + s) * x->M + m] < k) == (t < TW1)) return 0;
        if ((x->ha[q + k] + x->p->w_share * x->hb[q + k]) / 2 > x->p->limit + 1e-9) return 0;
    }
    return 1;
}

// A trial of the order as it stands after a move of rank s's stretch lo..hi (all of it re-timed with p->full): the
// longest span (INFINITY once above thr) and *sum; the times stay as they came out (vrun_undo puts them back).
static double vrun_trial(VRun *x, double thr, int s, int lo, int hi, double *sum) {
    int K = x->K, P = x->P;
    double E = lo > 0 ? x->en[(size_t)s * P + lo - 1] : 0;
    x->t.trial++, x->t.nlog = 0, x->t.left = 0, x->t.pending = hi - lo + 1;
    memcpy(x->t.begin_old, x->begin, sizeof(double) * (size_t)K);
    for (int r = 0; r < K; r++) {  // the first place that ends no sooner than E (ends grow along a rank)
        int a = 0, b = r == s ? lo : P;
        while (a < b && !x->p->full) {
            int c = (a + b) / 2;
            if (x->en[(size_t)r * P + c] >= E) b = c;
            else a = c + 1;
        }
        x->t.ptr[r] = x->p->full ? 0 : a;
        x->t.left += P - x->t.ptr[r];
    }
    if (x->p->full) x->t.pending = K * P + 1, thr = INFINITY;  // (never 0 and no early end: the whole run)
    return vrun(x, thr, s, lo, hi, sum);
}
static void vrun_undo(VRun *x) {
    for (int i = x->t.nlog - 1; i >= 0; i--) x->en[x->t.logq[i]] = x->t.log_en[i];
    memcpy(x->begin, x->t.begin_old, sizeof(double) * (size_t)x->K);
}

// The sweeps over every rank's passes, each tried up to p->reach places either way, until none helps or the
// budget of runs is spent.
static void vrun_sweeps(VRun *x, double best, double best_sum) {
    int K = x->K, P = x->P, reach = x->p->reach;
    for (int gained = 1; gained && x->runs < x->p->budget;) {
        gained = 0;
        for (int s = 0; s < K; s++)
            for (int i = 0; i < P && x->runs < x->p->budget; i++)
                for (int d = -reach; d <= reach; d++) {
                    int *o = &x->ty[(size_t)s * P], j = i + d;
                    if (!d || j < 0 || j >= P || o[i] == o[j]) continue;
                    int lo = i < j ? i : j, hi = i < j ? j : i;
                    vrun_move(x, s, i, j);
                    if (vrun_fits(x, s, lo, hi)) {
                        double sum, span = vrun_trial(x, best * (1 + 1e-12), s, lo, hi, &sum);
                        if (span < best * (1 - 1e-12) || (span <= best * (1 + 1e-12) && sum < best_sum * (1 - 1e-12))) {
                            best = span, best_sum = sum, gained = 1;
                            continue;
                        }
                        vrun_undo(x);
                    }
                    vrun_move(x, s, j, i);
                }
    }
}

long schedule_v_polish(const VPolish *p, int *order) {
    int K = p->K, M = p->M, P = 6 * M, rc = 0;
    size_t N = (size_t)K * P;
    VRun x = {p, K, M, P, order, xcalloc(N, sizeof(int)), xcalloc(N, sizeof(int)), xcalloc(N, sizeof(int)),
              xcalloc(N, sizeof(int)), xcalloc(N, sizeof(int)), xcalloc(N, sizeof(int)), xcalloc(N, sizeof(double)),
              xcalloc(N, sizeof(double)), xcalloc((size_t)K * 6, sizeof(double)), xcalloc((size_t)K, sizeof(double)),
              0,
              {xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K + 1, sizeof(int)), xcalloc(N, sizeof(int)),
               xcalloc(N, sizeof(double)), xcalloc((size_t)K, sizeof(double)), xcalloc(N, sizeof(long)),
               xcalloc(N, sizeof(long)), 0, 0, 0, 0}};
    for (int s = 0; s < K && !rc; s++) {  // each pass's cost (a chunk pass: half a stage's), each place's micro-batch
        const double c[3] = {p->f[s] / 2, p->b[s] / 2, p->w[s] / 2};
        for (int t = 0; t < TYPES; t++) x.cost[s * 6 + t] = c[t <= TF1 ? 0 : t <= TI0 ? 1 : 2];
        int n[TYPES] = {0};
        for (int k = 0; k < P && !rc; k++) {
            int t = order[(size_t)s * P + k];
            rc = t < 0 || t >= TYPES || n[t] >= M ? -1 : 0;
            if (!rc) x.mb[(size_t)s * P + k] = n[t], x.pos[((size_t)t * K + s) * M + n[t]++] = k;
        }
    }
    for (int s = 0; s < K && !rc; s++) {  // (a move of nothing: the links and counts of every place)
        vrun_move(&x, s, 0, P - 1);
        vrun_move(&x, s, P - 1, 0);
        if (!vrun_fits(&x, s, 0, P - 1)) rc = -1;
    }
    double sum = 0, span = INFINITY;
    x.t.left = (int)N;
    if (!rc) span = vrun(&x, INFINITY, 0, 0, -1, &sum);
    if (!rc && !isinf(span)) vrun_sweeps(&x, span, sum);
    long runs = rc || isinf(span) ? -1 : x.runs;
    free(x.mb); free(x.pos); free(x.dk); free(x.dr); free(x.ha); free(x.hb); free(x.en); free(x.rem);
    free(x.cost); free(x.begin);
    free(x.t.begin_old); free(x.t.ptr); free(x.t.todo); free(x.t.logq); free(x.t.log_en); free(x.t.out_c);
    free(x.t.out_d);
    return runs;
}
