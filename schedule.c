// schedule.c: the schedule kinds: one const row per kind (schedule_kinds, the table schedule.h
// describes) and its generator (naive stop-and-wait, GPipe fill-drain, 1F1B, Megatron's interleaved
// 1F1B for any M, zero-bubble ZB-H1, ZB-H2 and ZB-V, DeepSeek's DualPipeV, PyTorch's looped BFS) as
// per-rank action lists over a chunk order (which rank holds each chunk; V-Half and V-Min are
// schedule_v.c's), and the discrete-event simulator that runs those very lists against each other.
#include <math.h>
#include <string.h>
#include <strings.h>
#include "base/config.h"  // choice_name
#include "base/suggest.h"
#include "schedule.h"
#include "schedule_v.h"
#include "base/util.h"

const char *const action_names[ACT_KINDS] = {"F", "B", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD", "I", "W"};

int action_is_compute(int kind) {
    return kind == ACT_FORWARD || kind == ACT_BACKWARD || kind == ACT_BACKWARD_INPUT || kind == ACT_BACKWARD_WEIGHT;
}

// A kind whose facts are its lists' (a file) needs them: asking without is a bug.
static const SchedFile *the_file(const ScheduleKind *k, const SchedFile *file) {
    CHECK(k->chunks != CHUNKS_OF_LISTS || file, "schedule kind '%s' without its lists", k->name);
    return k->chunks == CHUNKS_OF_LISTS ? file : NULL;
}
int schedule_splits_backward(int kind, const SchedFile *file) {
    const ScheduleKind *k = schedule_kind(kind);
    return the_file(k, file) ? file->split : k->split;
}
int schedule_chunk_order(int kind, const SchedFile *file) {
    const ScheduleKind *k = schedule_kind(kind);
    return the_file(k, file) ? file->chunk_order : k->chunk_order;
}
int schedule_chunks(int kind, int v_option, const SchedFile *file) {
    const ScheduleKind *k = schedule_kind(kind);
    return the_file(k, file) ? file->v : k->chunks == CHUNKS_OPTION ? v_option : k->chunks;
}

static void push(ActionList *l, int kind, int mb, int chunk) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->a = realloc(l->a, sizeof(Action) * (size_t)l->cap);
        CHECK(l->a, "out of memory building a schedule");
    }
    l->a[l->n++] = (Action){kind, mb, chunk};
}

// Where an action runs: rank s of K, chunk c of v, virtual stage vs of V = K*v by the chunk order.
typedef struct SchedAt { ActionList *l; int s, K, V, chunk_order; } At;
static int vstage(const At *at, int c) { return vstage_of(at->chunk_order, at->K, at->s, c); }

// One forward of mb on chunk c, with its hand-offs: receive input, compute, send output.
static void forward(const At *at, int c, int mb) {
    int vs = vstage(at, c);
    if (vs > 0) push(at->l, ACT_RECV_ACT, mb, c);
    push(at->l, ACT_FORWARD, mb, c);
    if (vs < at->V - 1) push(at->l, ACT_SEND_ACT, mb, c);
}
// One backward of mb on chunk c: receive the output's gradient, compute (the full backward, or
// only its input part I when split), send the input's gradient.
static void backward(const At *at, int c, int mb, int kind) {
    int vs = vstage(at, c);
    if (vs < at->V - 1) push(at->l, ACT_RECV_GRAD, mb, c);
    push(at->l, kind, mb, c);
    if (vs > 0) push(at->l, ACT_SEND_GRAD, mb, c);
}

void schedule_push_pass(ActionList *l, int chunk_order, int K, int v, int s, int kind, int chunk, int mb) {
    At at = {l, s, K, K * v, chunk_order};
    if (kind == ACT_FORWARD) forward(&at, chunk, mb);
    else if (kind == ACT_BACKWARD_WEIGHT) push(l, kind, mb, chunk);
    else backward(&at, chunk, mb, kind);
}

int schedule_parse_list(const char *text, int *out, int max, char *why, size_t n) {
    int total = 1, count = 0;
    char name[32];
    for (const char *q = SCHED_CHOICES; *q; q++) total += *q == '|';
    if (!strcasecmp(text, "all")) {
        for (int i = 0; i < SCHED_KINDS && count < max; i++)  // the kinds with a generator, in order
            if (schedule_kind(i)->generate) out[count++] = i;
        return count;
    }
    if (!*text) { snprintf(why, n, "--schedule is empty: use all or one of %s", SCHED_CHOICES); return -1; }
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < total; i++)
            if (strlen(choice_name(SCHED_CHOICES, i, name, sizeof name)) == len && !strncasecmp(name, p, len))
                found = i;
        if (found < 0 || count == max) {  // the nearest name to the item that is none
            char item[32], names[SCHED_KINDS][32];
            const char *list[SCHED_KINDS];
            snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
            for (int i = 0; i < total && i < SCHED_KINDS; i++) list[i] = choice_name(SCHED_CHOICES, i, names[i], 32);
            const char *best = found < 0 ? nearest_name(item, list, total < SCHED_KINDS ? total : SCHED_KINDS) : NULL;
            snprintf(why, n, "--schedule '%s' is not 'all' or a list of %s%s%s%s", text, SCHED_CHOICES,
                     best ? ": did you mean " : "", best ? best : "", best ? "?" : "");
            return -1;
        }
        for (int i = 0; i < count; i++)
            if (out[i] == found) {
                snprintf(why, n, "--schedule '%s' names a schedule twice: list each once", text);
                return -1;
            }
        out[count++] = found;
        p += len;
        if (*p == ',' && !*++p) { snprintf(why, n, "--schedule '%s' ends with a comma: drop it", text); return -1; }
    }
    return count;
}

void sched_file_free(SchedFile *f) {
    for (int s = 0; f->lists && s < f->K; s++) action_list_free(&f->lists[s]);
    free(f->lists);
    memset(f, 0, sizeof *f);
}

// The phrase is the kind's own (its name, its limits), kept until the next call.
const char *schedule_check(int kind, int K, int M, int v) {
    static char why[200];
    const ScheduleKind *k = schedule_kind(kind);
    if (k->chunks == CHUNKS_OF_LISTS) return NULL;
    if (k->chunks == CHUNKS_OPTION && v < k->least_chunks) {
        snprintf(why, sizeof why, "--schedule %s needs --virtual-stages >= %d (with 1 it is %s: use --schedule %s)",
                 k->name, k->least_chunks, k->one_chunk, k->one_chunk);
        return why;
    }
    if (k->chunks != CHUNKS_OPTION && v != k->chunks) {
        if (k->chunks > 1) {
            snprintf(why, sizeof why, "--schedule %s holds exactly %d chunks per rank", k->name, k->chunks);
        } else {
            char takers[64];
            snprintf(why, sizeof why, "--virtual-stages applies to --schedule %s only",
                     schedule_chunk_option_kinds(takers, sizeof takers));
        }
        return why;
    }
    if (M < k->least_m * K) {
        snprintf(why, sizeof why, "--schedule %s needs --micro-batches >= %d x ranks (%s)", k->name, k->least_m,
                 k->least_m_rule);
        return why;
    }
    return NULL;
}

const char *schedule_chunk_option_kinds(char *buf, size_t n) {
    int count = 0, seen = 0;
    for (int i = 0; i < SCHED_KINDS; i++) count += schedule_kind(i)->chunks == CHUNKS_OPTION;
    buf[0] = 0;
    for (int i = 0; i < SCHED_KINDS; i++) {
        if (schedule_kind(i)->chunks != CHUNKS_OPTION) continue;
        size_t l = strlen(buf);
        seen++;
        snprintf(buf + l, n - l, "%s%s", seen == 1 ? "" : seen == count ? " or " : ", ", schedule_kind(i)->name);
    }
    return buf;
}

// Stop-and-wait: one micro-batch all the way forward and back before the next.
static void naive(const At *at, int M) {
    for (int mb = 0; mb < M; mb++) { forward(at, 0, mb); backward(at, 0, mb, ACT_BACKWARD); }
}
// GPipe: fill with every forward, then drain with every backward.
static void gpipe(const At *at, int M) {
    for (int mb = 0; mb < M; mb++) forward(at, 0, mb);
    for (int mb = 0; mb < M; mb++) backward(at, 0, mb, ACT_BACKWARD);
}
// 1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards.
static void one_f_one_b(const At *at, int M) {
    int warmup = at->K - at->s - 1 < M ? at->K - at->s - 1 : M;
    for (int mb = 0; mb < warmup; mb++) forward(at, 0, mb);
    for (int i = 0; i < M - warmup; i++) { forward(at, 0, warmup + i); backward(at, 0, i, ACT_BACKWARD); }
    for (int mb = M - warmup; mb < M; mb++) backward(at, 0, mb, ACT_BACKWARD);
}

// Megatron's interleaved 1F1B (arXiv:2104.04473; Megatron-LM's forward_backward_pipelining_with_
// interleaving, PyTorch's ScheduleInterleaved1F1B), for any M. The rank runs chunk-passes in the
// order of a table: micro-batches in groups of K, each group first through chunk 0, then chunk 1,
// ...; backwards walk the same table with the chunks reversed (v-1 first). Warm-up: 2*(K-s-1) +
// (v-1)*K forwards, then one forward one backward, then the remaining backwards. When K does not
// divide M, the order is built for M rounded up to a multiple of K and the passes of the micro-
// batches past M are dropped: the last group keeps its remainder, and a subsequence of whole
// micro-batches of a deadlock-free schedule stays deadlock-free (a smaller last group with Megatron's
// warm-up deadlocks, e.g. K=4, M=5, v=3). schedule_sim proves every (K, M, v) before it runs.
static void interleaved_pass(const At *at, int M, int v, int k, int fwd) {
    int K = at->K, mb = k / (K * v) * K + k % K, c = k % (K * v) / K;
    if (mb >= M) return;
    if (fwd) forward(at, c, mb);
    else backward(at, v - 1 - c, mb, ACT_BACKWARD);
}

static void interleaved(const At *at, int M) {
    int K = at->K, s = at->s, v = at->V / K, total = (M + K - 1) / K * K * v;
    int warmup = 2 * (K - s - 1) + (v - 1) * K;
    if (warmup > total) warmup = total;
    for (int k = 0; k < warmup; k++) interleaved_pass(at, M, v, k, 1);
    for (int i = 0; i < total - warmup; i++) {
        interleaved_pass(at, M, v, warmup + i, 1);
        interleaved_pass(at, M, v, i, 0);
    }
    for (int k = total - warmup; k < total; k++) interleaved_pass(at, M, v, k, 0);
}

// ZB-H1 (arXiv:2401.10241, section 3; its authors' ZeroBubbleH1Pipeline): 1F1B's warm-up of K-s-1
// forwards, then on stage s, s rounds of F + I whose W are deferred, then F + I + W rounds, then
// the cool-down I + W, and last the s deferred W. The gradient a stage waits for (I) is sent
// before the weight gradient is computed, and the deferred W fill the cool-down's idle slots.
// Between F and I at most min(K-s, M) micro-batches, as 1F1B; at most s+1 wait for their W.
static void zbh1(const At *at, int M) {
    int s = at->s, f = 0, b = 0, w = 0;
    int warmup = at->K - s - 1 < M ? at->K - s - 1 : M;
    while (f < warmup) forward(at, 0, f++);
    for (int j = 0; j < s && f < M; j++) { forward(at, 0, f++); backward(at, 0, b++, ACT_BACKWARD_INPUT); }
    while (f < M) {
        forward(at, 0, f++);
        backward(at, 0, b++, ACT_BACKWARD_INPUT);
        push(at->l, ACT_BACKWARD_WEIGHT, w++, 0);
    }
    while (b < M) { backward(at, 0, b++, ACT_BACKWARD_INPUT); push(at->l, ACT_BACKWARD_WEIGHT, w++, 0); }
    while (w < M) push(at->l, ACT_BACKWARD_WEIGHT, w++, 0);
}

// ZB-H2 (arXiv:2401.10241, section 3, figure 4): the parallelogram. On stage s the k-th I runs
// 2(K-1-s) forwards after the k-th F (2 passes later than on the next stage: one pass there, one
// to arrive here) and every W 2(K-1) forwards after its F: a warm-up of 2(K-1-s) forwards, then 2s
// pairs F I whose W wait, the steady F I W, the cool-down I W for the last 2(K-1-s), and the 2s
// deferred W last. At F = I = W stage s starts s forwards after stage 0 and runs without a gap to
// its end, s passes after stage 0's; in general its idle inside that span is (K-1-s)(F+I-2W) where
// positive (the paper's (p-1)(T_F+T_B-2T_W) on the first stage). Every stage holds at most 2K-1
// micro-batches between F and W (the paper's 2p-1). Built for N = max(M, 2K-1) micro-batches,
// the passes of micro-batches past M dropped (a subsequence of whole micro-batches stays deadlock-free).
typedef struct { const At *at; int M, f[2], b[2], w[2]; } Zbv;
static void zf(Zbv *z, int c) { if (z->f[c] < z->M) forward(z->at, c, z->f[c]); z->f[c]++; }
static void zi(Zbv *z, int c) { if (z->b[c] < z->M) backward(z->at, c, z->b[c], ACT_BACKWARD_INPUT); z->b[c]++; }
static void zw(Zbv *z, int c) { if (z->w[c] < z->M) push(z->at->l, ACT_BACKWARD_WEIGHT, z->w[c], c); z->w[c]++; }

static void zbh2(const At *at, int M) {
    int K = at->K, s = at->s, N = M > 2 * K - 1 ? M : 2 * K - 1;
    Zbv z = {.at = at, .M = M};
    for (int i = 0; i < 2 * (K - 1 - s); i++) zf(&z, 0);
    for (int i = 0; i < 2 * s; i++) { zf(&z, 0); zi(&z, 0); }
    while (z.f[0] < N) { zf(&z, 0); zi(&z, 0); zw(&z, 0); }
    for (int i = 0; i < 2 * (K - 1 - s); i++) { zi(&z, 0); zw(&z, 0); }
    while (z.w[0] < N) zw(&z, 0);
}

// ZB-V (arXiv:2401.10241, section 6; PyTorch's ScheduleZBVZeroBubble): two chunks per rank in a V,
// rank s holding chunk 0 = vs s and chunk 1 = vs 2K-1-s. The order is built for N = max(M, 2K-1)
// micro-batches and the passes of micro-batches >= M are dropped (a subsequence of whole
// micro-batches stays deadlock-free). Warm-up: 2(K-s)-1 forwards of chunk 0, then s pairs (chunk 1,
// chunk 0), then K-s rounds of F I W on chunk 1; steady: F I W on chunk 0 then on chunk 1; the
// cool-down runs the gradients' critical path (I) first and fills the idle slots with the deferred W.
// (Zbv, zf, zi and zw count each chunk's passes as ZB-H2's do.)
static void zbv(const At *at, int M) {
    int K = at->K, s = at->s, N = M > 2 * K - 1 ? M : 2 * K - 1;
    Zbv z = {.at = at, .M = M};
    for (int i = 0; i < 2 * (K - s) - 1; i++) zf(&z, 0);
    for (int i = 0; i < s; i++) { zf(&z, 1); zf(&z, 0); }
    for (int i = 0; i < K - s; i++) { zf(&z, 1); zi(&z, 1); zw(&z, 1); }
    while (z.f[1] < z.f[0] || z.f[0] < N) {
        if (z.f[0] < N) zf(&z, 0);
        zi(&z, 0); zw(&z, 0);
        zf(&z, 1); zi(&z, 1); zw(&z, 1);
    }
    for (int i = 0; i < s; i++) { zi(&z, 0); zi(&z, 1); }
    for (int i = 0; i < K - s; i++) { zi(&z, 0); zw(&z, 0); }
    while (z.w[1] < z.b[1]) zw(&z, 1);
    while (z.w[0] < z.b[0]) zw(&z, 0);
}

// DualPipeV (deepseek-ai/DualPipe's DualPipeV, PyTorch's ScheduleDualPipeV): DualPipe cut in half,
// on the V chunk order. Each rank pairs a forward of one chunk with a full backward of the other (run
// one after the other here: on one CPU core there is no overlap to gain), and splits the last
// backwards into I and W to fill the cool-down. Its authors' limit: M >= 2 x ranks.
typedef struct { const At *at; int f[2], b[2], *queue, head, tail, zb; } Dpv;  // queue: (chunk, mb) of each I
static void df(Dpv *d, int c) { forward(d->at, c, d->f[c]++); }
static void db(Dpv *d, int c) {  // a full backward, or (once zero-bubble mode is on) I with W queued
    int mb = d->b[c]++;
    backward(d->at, c, mb, d->zb ? ACT_BACKWARD_INPUT : ACT_BACKWARD);
    if (d->zb) { d->queue[2 * d->tail] = c; d->queue[2 * d->tail + 1] = mb; d->tail++; }
}
static void dw(Dpv *d) {  // the oldest pending W, if any
    if (d->head == d->tail) return;
    push(d->at->l, ACT_BACKWARD_WEIGHT, d->queue[2 * d->head + 1], d->queue[2 * d->head]);
    d->head++;
}

static void dualpipev(const At *at, int M) {
    int K = at->K, s = at->s;
    Dpv dv = {.at = at, .queue = xcalloc((size_t)4 * M, sizeof(int))}, *d = &dv;
    for (int i = 0; i < 2 * (K - s - 1); i++) df(d, 0);
    for (int i = 0; i < s + 1; i++) { df(d, 0); df(d, 1); }
    d->zb = 1;
    for (int i = 0; i < K - s - 1; i++) { db(d, 1); dw(d); df(d, 1); }
    d->zb = 0;
    for (int i = 0; i < M - 2 * K + s + 1; i++) { df(d, 0); db(d, 1); df(d, 1); db(d, 0); }
    for (int i = 0; i < K - s - 1; i++) { db(d, 1); df(d, 1); db(d, 0); }
    for (int i = 0; i < s + 1; i++) {
        if (i == (s + 1) / 2 && s % 2 == 1) d->zb = 1;
        db(d, 1);
        if (i == (s + 1) / 2 && s % 2 == 0) d->zb = 1;
        db(d, 0);
    }
    for (int i = 0; i < K - s - 1; i++) { dw(d); db(d, 0); }
    for (int i = 0; i < s + 1; i++) dw(d);
    while (d->head < d->tail) dw(d);
    free(d->queue);
}

// Looped BFS (Lamy-Poirier, Breadth-First Pipeline Parallelism, arXiv:2211.05953; PyTorch's
// ScheduleLoopedBFS): interleaved's loop of chunks, run breadth first: every micro-batch forward
// through chunk 0, then through chunk 1, ...; then the full backwards chunk by chunk from the last,
// each chunk's micro-batches in reverse order (the last forward's first), as PyTorch orders them.
// GPipe over K x v virtual stages: at its peak a rank holds every micro-batch of every chunk.
static void looped_bfs(const At *at, int M) {
    int v = at->V / at->K;
    for (int c = 0; c < v; c++)
        for (int mb = 0; mb < M; mb++) forward(at, c, mb);
    for (int c = v - 1; c >= 0; c--)
        for (int mb = M - 1; mb >= 0; mb--) backward(at, c, mb, ACT_BACKWARD);
}

// V-Half and V-Min: the order of rank s's passes, from their authors' construction (schedule_v.c).
static void v_passes(const At *at, int M, int half) {
    static const int kind[VPASSES] = {ACT_FORWARD,        ACT_FORWARD,         ACT_BACKWARD_INPUT,
                                      ACT_BACKWARD_INPUT, ACT_BACKWARD_WEIGHT, ACT_BACKWARD_WEIGHT};
    static const int chunk[VPASSES] = {0, 1, 1, 0, 1, 0};
    int *pass = xmalloc(sizeof(int) * 6 * (size_t)M), *mb = xmalloc(sizeof(int) * 6 * (size_t)M);
    schedule_v_order(half, at->K, M, at->s, pass, mb);
    for (int i = 0; i < 6 * M; i++)
        schedule_push_pass(at->l, CHUNKS_V, at->K, 2, at->s, kind[pass[i]], chunk[pass[i]], mb[i]);
    free(pass);
    free(mb);
}
static void v_half(const At *at, int M) { v_passes(at, M, 1); }
static void v_min(const At *at, int M) { v_passes(at, M, 0); }

// The textbook bubbles, idle / makespan (each row below says where its formula holds).
static double bubble_naive(int K, int M, int v) { (void)M, (void)v; return (double)(K - 1) / K; }
static double bubble_fill(int K, int M, int v) { (void)v; return (double)(K - 1) / (M + K - 1); }
static double bubble_loop(int K, int M, int v) { return (double)(K - 1) / ((double)v * M + K - 1); }
static double bubble_split(int K, int M, int v) { (void)v; return (double)(K - 1) / (3.0 * M + K - 1); }
static double bubble_v(int K, int M, int v) { (void)v; return (double)(K - 1) / (6.0 * M + K - 1); }

// THE TABLE: one row per kind, in SCHED_* order. A field left out is 0: CHUNKS_LOOP, full backwards,
// any M, no formula (or, with one, a formula for any costs and any M), not in plan --auto's search.
static const ScheduleKind schedule_kinds[SCHED_KINDS] = {
    // naive (K-1)/K: one micro-batch in the pipeline at a time, any F and B.
    [SCHED_NAIVE] = {.name = "naive", .chunks = 1, .generate = naive, .bubble = bubble_naive},
    // gpipe and 1f1b (K-1)/(M+K-1), any F and B: K-1 passes of fill and as many of drain.
    [SCHED_GPIPE] = {.name = "gpipe", .chunks = 1, .generate = gpipe, .bubble = bubble_fill, .searched = 1},
    [SCHED_1F1B] = {.name = "1f1b", .chunks = 1, .generate = one_f_one_b, .bubble = bubble_fill, .searched = 1},
    // interleaved (K-1)/(v*M+K-1), any F and B, for M % K == 0 (with a remainder group the simulator's
    // figure counts) -- Megatron's (K-1)/(v*M) of the ideal time, i.e. bubble time / busy time, is the
    // same quantity normalised by busy instead of makespan. With one chunk it is 1f1b.
    [SCHED_INTERLEAVED] = {.name = "interleaved", .chunks = CHUNKS_OPTION, .least_chunks = 2, .one_chunk = "1f1b",
                           .generate = interleaved, .bubble = bubble_loop, .holds.whole_groups = 1, .searched = 1},
    // zb-h1 (K-1)/(3M+K-1) for F = I = W and M >= K: the bubble of 1F1B made of F+I-W instead of F+B.
    [SCHED_ZBH1] = {.name = "zb-h1", .chunks = 1, .split = 1, .generate = zbh1, .bubble = bubble_split,
                    .holds = {.uniform = 1, .m_per_k = 1}, .searched = 1},
    // zb-v (K-1)/(6M+K-1) for F = I = W and M >= 2K-1: each rank is busy without a gap from its first
    // pass to its last (the paper's zero bubble); what is left is the start of rank s one chunk
    // forward (F/2) after rank s-1's, and its end (K-1-s) halves before the last.
    [SCHED_ZBV] = {.name = "zb-v", .chunks = 2, .chunk_order = CHUNKS_V, .split = 1, .generate = zbv,
                   .bubble = bubble_v, .holds = {.uniform = 1, .m_per_k = 2, .m_less = 1}, .searched = 1},
    // dualpipev (K-1)/(6M+K-1) for F = I = W, as zb-v's; it runs from M = 2K only (its authors' limit).
    [SCHED_DUALPIPEV] = {.name = "dualpipev", .chunks = 2, .chunk_order = CHUNKS_V, .split = 1, .least_m = 2,
                         .least_m_rule = "DualPipeV's own limit", .least_m_else = "zb-v", .generate = dualpipev,
                         .bubble = bubble_v, .holds = {.uniform = 1, .m_per_k = 2, .m_less = 1}, .searched = 1},
    // zb-h2 (K-1)/(3M+K-1) for F = I = W and M >= 2K-1: zb-h1's makespan, but as a parallelogram: each
    // rank busy without a gap from its first pass to its last, its idle all at the edges of the step
    // (rank s starts s forwards late and ends K-1-s passes early); in general rank s is idle inside
    // its span (K-1-s) x max(0, F+I-2W) and the makespan is M(F+I+W) + (K-1) max(F, F+I-2W).
    [SCHED_ZBH2] = {.name = "zb-h2", .chunks = 1, .split = 1, .generate = zbh2, .bubble = bubble_split,
                    .holds = {.uniform = 1, .m_per_k = 2, .m_less = 1}, .searched = 1},
    // looped-bfs (K-1)/(v*M+K-1), any F and B, for M >= K: interleaved's bubble. Each rank runs its v*M
    // forwards without a gap (chunk c+1's first input is back from the last rank by then), the last
    // rank turns at once to the backwards, and they too run without a gap: each rank idles K-1 chunk
    // passes forward and K-1 backward, (K-1)(F+B)/v beside its busy M(F+B). Below M = K a rank waits
    // at each turn of the loop. With one chunk it is gpipe (its backwards reversed).
    [SCHED_LOOPED_BFS] = {.name = "looped-bfs", .chunks = CHUNKS_OPTION, .least_chunks = 2, .one_chunk = "gpipe",
                          .generate = looped_bfs, .bubble = bubble_loop, .holds.m_per_k = 1},
    // v-half and v-min (Qi et al., arXiv:2405.15362; schedule_v.c): zb-v's V at about 1/2 and 1/3 of 1F1B's
    // activation memory, a repeating pattern whose warm-up and cool-down are squeezed within its memory; no
    // closed form (the simulator's figure). Any M: the pattern is built for M micro-batches.
    [SCHED_VHALF] = {.name = "v-half", .chunks = 2, .chunk_order = CHUNKS_V, .split = 1, .generate = v_half},
    [SCHED_VMIN] = {.name = "v-min", .chunks = 2, .chunk_order = CHUNKS_V, .split = 1, .generate = v_min},
    // zb-auto: the lists of its search (schedule_auto.c), one chunk, split backwards; no formula.
    [SCHED_ZBAUTO] = {.name = "zb-auto", .chunks = 1, .split = 1},
    // zb-auto-v: the lists of its search over the V's placement (schedule_auto.c), two chunks; no formula.
    [SCHED_ZBAUTOV] = {.name = "zb-auto-v", .chunks = 2, .chunk_order = CHUNKS_V, .split = 1},
    // a schedule file: its chunks, chunk order and split are the file's; no formula.
    [SCHED_FILE] = {.name = "file", .chunks = CHUNKS_OF_LISTS},
};

const ScheduleKind *schedule_kind(int kind) {
    CHECK(kind >= 0 && kind < SCHED_KINDS, "unknown schedule kind %d", kind);
    return &schedule_kinds[kind];
}

void schedule_build(int kind, const SchedFile *file, int K, int M, int v, int s, ActionList *l) {
    const ScheduleKind *k = schedule_kind(kind);
    const char *why = schedule_check(kind, K, M, v);
    if (why) fatal("schedule_build(kind %d, K %d, M %d, v %d): %s", kind, K, M, v, why);
    CHECK(k->generate || (file && K == file->K && M == file->M && v == file->v), "schedule_build: %s",
          file ? "the schedule's lists have another shape" : "a kind of given lists without them");
    l->n = 0;
    At at = {l, s, K, K * v, schedule_chunk_order(kind, file)};
    if (k->generate) k->generate(&at, M);
    else
        for (int i = 0; i < file->lists[s].n; i++)
            push(l, file->lists[s].a[i].kind, file->lists[s].a[i].mb, file->lists[s].a[i].chunk);
}

void schedule_build_forward(int K, int v, int chunk_order, int s, int batches, ActionList *l) {
    l->n = 0;
    At at = {l, s, K, K * v, chunk_order};
    for (int mb = 0; mb < batches; mb++)
        for (int c = 0; c < v; c++) forward(&at, c, mb);
}

void action_list_free(ActionList *l) { free(l->a); memset(l, 0, sizeof *l); }

double schedule_bubble_formula(int kind, int K, int M, int v) {
    const ScheduleKind *k = schedule_kind(kind);
    return k->bubble ? k->bubble(K, M, v) : NAN;
}

int schedule_bubble_holds(int kind, int K, int M, int uniform) {
    const ScheduleKind *k = schedule_kind(kind);
    return k->bubble && (uniform || !k->holds.uniform) && M >= k->holds.m_per_k * K - k->holds.m_less &&
           (!k->holds.whole_groups || M % K == 0);
}

// The simulator keeps each rank's list as passes: a compute action with a flag for the receive
// before it and the send after it (every generator and a file's rows add hand-offs so, see
// schedule_push_pass), 8 bytes a pass instead of 12 an action and up to 3 actions a pass: 64
// stages x 262144 micro-batches of zb-h1 then hold 400 MB instead of 1.6 GB.
typedef struct { int mb; unsigned short chunk; unsigned char kind, hand; } Pass;  // hand: 1 receive first, 2 send after

static int is_recv_for(int recv, int kind) {
    return recv == (kind == ACT_FORWARD ? ACT_RECV_ACT : ACT_RECV_GRAD) && kind != ACT_BACKWARD_WEIGHT;
}
static int is_send_for(int send, int kind) {
    return send == (kind == ACT_FORWARD ? ACT_SEND_ACT : ACT_SEND_GRAD) && kind != ACT_BACKWARD_WEIGHT;
}

// Rank s's list as passes (*n of them); a hand-off that is not next to its own compute action is a bug.
static Pass *list_passes(const ActionList *l, int s, int *n) {
    int count = 0;
    for (int i = 0; i < l->n; i++) count += action_is_compute(l->a[i].kind);
    Pass *p = xmalloc(sizeof(Pass) * (size_t)(count + 1));
    *n = 0;
    for (int i = 0; i < l->n; i++) {
        int hand = 0;
        const Action *a = &l->a[i], *x = a;
        if (!action_is_compute(a->kind)) {
            a = i + 1 < l->n ? &l->a[++i] : x;
            CHECK(a != x && is_recv_for(x->kind, a->kind) && a->mb == x->mb && a->chunk == x->chunk,
                  "schedule_sim: rank %d's action %d (%s) is not the receive of the pass after it", s, i - 1,
                  action_names[x->kind]);
            hand = 1;
        }
        if (i + 1 < l->n && !action_is_compute(l->a[i + 1].kind) && is_send_for(l->a[i + 1].kind, a->kind) &&
            l->a[i + 1].mb == a->mb && l->a[i + 1].chunk == a->chunk) {
            hand |= 2;
            i++;
        }
        CHECK(a->chunk >= 0 && a->chunk < 65536, "schedule_sim: chunk %d out of range", a->chunk);
        p[(*n)++] = (Pass){a->mb, (unsigned short)a->chunk, (unsigned char)a->kind, (unsigned char)hand};
    }
    return p;
}

// One rank's passes until it blocks on a message not yet sent; returns the passes it ran.
typedef struct {
    const SimSpec *sp;
    SimResult *r;
    int K, M, v, V, chunk_order;
    double *arrival;
    int *inflight, *deferred, *slots, *held;
    double *first;  // [K] when each rank's first pass started (< 0: none yet)
} Sim;
static int run_rank(Sim *m, int s, const Pass *p, int n, int *pc, int *at, double *t) {
    const SimSpec *sp = m->sp;
    SimResult *r = m->r;
    int ran = 0, M = m->M;
    double f = sp->stage_f ? sp->stage_f[s] : sp->f, b = sp->stage_b ? sp->stage_b[s] : sp->b,
           w = sp->stage_w ? sp->stage_w[s] : sp->w;
    for (; *pc < n; (*pc)++, ran++) {
        Pass a = p[*pc];
        int vs = vstage_of(m->chunk_order, m->K, s, a.chunk), fwd = a.kind == ACT_FORWARD;
        if (a.hand & 1) {  // its input (F) or its output's gradient (B, I): blocked until sent
            double got = m->arrival[((size_t)vs * 2 + !fwd) * M + a.mb];
            if (got < 0) break;
            if (got > *t) *t = got;
        }
        double c = fwd ? f : a.kind == ACT_BACKWARD ? b + w : a.kind == ACT_BACKWARD_INPUT ? b : w;
        if (m->first[s] < 0) m->first[s] = *t;
        if (r->slices) r->slices[s][r->n_slices[s]] = (Interval){a.kind, a.mb, *t, *t + c, a.chunk, 0, 0};
        r->n_slices[s]++;
        *t += c;
        r->busy[s] += c;
        if (fwd) { m->inflight[s]++; m->slots[vs]++; m->held[s]++; }
        if (a.kind == ACT_BACKWARD) { m->inflight[s]--; m->slots[vs]--; m->held[s]--; }
        if (a.kind == ACT_BACKWARD_INPUT) { m->inflight[s]--; m->deferred[s]++; }
        if (a.kind == ACT_BACKWARD_WEIGHT) { m->deferred[s]--; m->slots[vs]--; m->held[s]--; }
        if (m->held[s] > r->peak_held[s]) r->peak_held[s] = m->held[s];
        if (m->inflight[s] > r->peak_inflight[s]) r->peak_inflight[s] = m->inflight[s];
        if (m->deferred[s] > r->peak_deferred[s]) r->peak_deferred[s] = m->deferred[s];
        if (m->slots[vs] > r->peak_slots[vs]) r->peak_slots[vs] = m->slots[vs];
        // the output forward, or the input's gradient back; a hand-off between two chunks of one rank arrives at once
        if (a.hand & 2) {
            int to = fwd ? vs + 1 : vs - 1;
            CHECK(to >= 0 && to < m->V, "rank %d chunk %d sends %s", s, a.chunk,
                  fwd ? "an activation past the last stage" : "a gradient before the first stage");
            m->arrival[((size_t)to * 2 + !fwd) * M + a.mb] =
                *t + (stage_of_vstage(m->chunk_order, m->K, to) == s ? 0 : sp->comm * m->v);
        }
        *at += 1 + (a.hand & 1) + (a.hand >> 1);
    }
    return ran;
}

void schedule_sim(const SimSpec *sp, SimResult *r) {
    int K = sp->K, M = sp->M, v = sp->v, V = K * v, chunk_order = schedule_chunk_order(sp->kind, sp->file);
    memset(r, 0, sizeof *r);
    r->K = K; r->M = M; r->v = v;
    r->busy = xcalloc((size_t)K, sizeof(double));
    r->bubble = xcalloc((size_t)K, sizeof(double));
    r->peak_inflight = xcalloc((size_t)K, sizeof(int));
    r->peak_deferred = xcalloc((size_t)K, sizeof(int));
    r->peak_slots = xcalloc((size_t)V, sizeof(int));
    r->peak_held = xcalloc((size_t)K, sizeof(int));
    r->slices = sp->slices ? xcalloc((size_t)K, sizeof(Interval *)) : NULL;
    r->n_slices = xcalloc((size_t)K, sizeof(int));
    Pass **passes = xcalloc((size_t)K, sizeof(Pass *));
    int *n = xcalloc((size_t)K, sizeof(int)), *pc = xcalloc((size_t)K, sizeof(int)),
        *at = xcalloc((size_t)K, sizeof(int));
    double *clock = xcalloc((size_t)K, sizeof(double));
    // Time runs v times faster inside: a chunk action then costs the stage's f, b or w exactly
    // (integer costs stay integers, so the bubble comes out exact); reported times are divided by v.
    // arrival[(vs * 2 + dir) * M + mb]: when the message for virtual stage vs arrives; < 0 = not yet
    // sent. dir 0: activation from vs-1, dir 1: gradient from vs+1.
    Sim m = {sp, r, K, M, v, V, chunk_order, xmalloc(sizeof(double) * (size_t)V * 2 * (size_t)M),
             xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)V, sizeof(int)),
             xcalloc((size_t)K, sizeof(int)), xmalloc(sizeof(double) * (size_t)K)};
    for (size_t i = 0; i < (size_t)V * 2 * M; i++) m.arrival[i] = -1;
    for (int s = 0; s < K; s++) m.first[s] = -1;
    ActionList l = {0};  // one rank's list at a time, kept as passes
    for (int s = 0; s < K; s++) {
        schedule_build(sp->kind, sp->file, K, M, v, s, &l);
        passes[s] = list_passes(&l, s, &n[s]);
        if (r->slices) r->slices[s] = xcalloc((size_t)n[s] + 1, sizeof(Interval));
    }
    action_list_free(&l);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < K; s++) progress |= run_rank(&m, s, passes[s], n[s], &pc[s], &at[s], &clock[s]) > 0;
    }
    for (int s = 0; s < K; s++) {
        if (pc[s] < n[s] && !r->deadlock) {  // blocked at the receive of its next pass
            Pass a = passes[s][pc[s]];
            r->deadlock = 1;
            r->stuck_rank = s;
            r->stuck_at = at[s];
            snprintf(r->why, sizeof r->why, "rank %d waits forever at action %d (%s of micro-batch %d, chunk %d)",
                     s, at[s], action_names[a.kind == ACT_FORWARD ? ACT_RECV_ACT : ACT_RECV_GRAD], a.mb, a.chunk);
        }
        if (clock[s] > r->makespan) r->makespan = clock[s];
    }
    // idle / makespan rather than 1 - busy / makespan: with integer costs both terms are exact, so
    // the simulated bubble equals the textbook fraction to the last bit.
    double busy_all = 0;
    for (int s = 0; s < K; s++) {
        r->bubble[s] = r->makespan > 0 ? (r->makespan - r->busy[s]) / r->makespan : 0;
        busy_all += r->busy[s];
        if (m.first[s] >= 0 && clock[s] - m.first[s] > r->span) r->span = clock[s] - m.first[s];
        free(passes[s]);
    }
    r->bubble_mean = r->makespan > 0 ? (K * r->makespan - busy_all) / (K * r->makespan) : 0;
    // Steps back to back without a barrier: rank s starts its next step's list as soon as its own
    // ends, so a step's period is the longest rank span (the authors' efficiency.py and
    // auto_schedule.py, "Longest stage time"), and the skew at the step's edges is no bubble.
    r->bubble_overlap = r->span > 0 ? (K * r->span - busy_all) / (K * r->span) : 0;
    if (v > 1) {  // back to the time of whole-stage costs
        r->makespan /= v;
        r->span /= v;
        for (int s = 0; s < K; s++) {
            r->busy[s] /= v;
            for (int i = 0; r->slices && i < r->n_slices[s]; i++) { r->slices[s][i].t0 /= v; r->slices[s][i].t1 /= v; }
        }
    }
    free(passes);
    free(n);
    free(pc);
    free(at);
    free(clock);
    free(m.arrival);
    free(m.inflight);
    free(m.deferred);
    free(m.slots);
    free(m.held);
    free(m.first);
}

void sim_result_free(SimResult *r) {
    for (int s = 0; r->slices && s < r->K; s++) free(r->slices[s]);
    free(r->slices); free(r->n_slices); free(r->busy); free(r->bubble); free(r->peak_inflight);
    free(r->peak_deferred); free(r->peak_slots); free(r->peak_held);
    memset(r, 0, sizeof *r);
}
