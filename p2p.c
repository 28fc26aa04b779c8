// p2p.c: the NCCL transport's posting rule as pure C (see p2p.h): the warm-up neighbours, each
// rank's ordered calls from its action list, the crossing pairs read off both ranks' calls, and the
// check that every call finds its matching half under NCCL's in-order execution per communicator.
// No CUDA here: tests/unit_p2p.c runs it anywhere.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "p2p.h"
#include "comms/devcomm.h"
#include "comms/tags.h"
#include "base/util.h"

int p2p_neighbours(int K, int v, int chunk_order, int s, int *out) {
    int n = 0, S = K * v;
    for (int c = 0; c < v; c++) {
        int vs = vstage_of(chunk_order, K, s, c);
        for (int d = -1; d <= 1; d += 2) {
            if (vs + d < 0 || vs + d >= S) continue;
            int peer = stage_of_vstage(chunk_order, K, vs + d), seen = peer == s;
            for (int i = 0; i < n; i++) seen |= out[i] == peer;
            if (!seen) out[n++] = peer;
        }
    }
    for (int i = 1; i < n; i++)  // ascending
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) { int t = out[j]; out[j] = out[j - 1]; out[j - 1] = t; }
    return n;
}

static void push_call(P2pCalls *o, P2pCall c) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->c = realloc(o->c, sizeof(P2pCall) * (size_t)o->cap);
        CHECK(o->c, "out of memory for %d p2p calls", o->cap);
    }
    o->c[o->n++] = c;
}

void p2p_calls(int K, int chunk_order, int s, const ActionList *l, P2pCalls *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < l->n; i++) {
        Action a = l->a[i];
        int vs = vstage_of(chunk_order, K, s, a.chunk);
        int send = a.kind == ACT_SEND_ACT || a.kind == ACT_SEND_GRAD,
            act = a.kind == ACT_SEND_ACT || a.kind == ACT_RECV_ACT;
        if (!send && a.kind != ACT_RECV_ACT && a.kind != ACT_RECV_GRAD) continue;
        int other = act == send ? vs + 1 : vs - 1;  // send act / receive grad: the next; else the previous
        int peer = stage_of_vstage(chunk_order, K, other);
        if (peer == s) continue;  // the V's turn: a copy on this rank
        push_call(out, (P2pCall){.kind = send ? P2P_SEND : P2P_RECV,
                                 .peer = peer,
                                 .msg = act ? ACT_SEND_ACT : ACT_SEND_GRAD,
                                 .mb = a.mb,
                                 .to_vs = send ? other : vs,
                                 .with = -1});
    }
}

void p2p_calls_free(P2pCalls *c) { free(c->c); memset(c, 0, sizeof *c); }

// The index in rank b's calls of the other half of rank a's call x (the same message, the other way), or -1.
static int other_half(const P2pCalls *b, int a, const P2pCall *x) {
    for (int i = 0; i < b->n; i++) {
        const P2pCall *y = &b->c[i];
        if (y->peer == a && y->kind != x->kind && y->msg == x->msg && y->mb == x->mb && y->to_vs == x->to_vs) return i;
    }
    return -1;
}

// The receive that rank s's send i pairs with by (a) and (b) of p2p.h's rule on s's calls alone, or -1.
static int pair_on_one_side(const P2pCalls *c, int i) {
    if (c->c[i].kind != P2P_SEND) return -1;
    for (int j = i + 1; j < c->n; j++) {
        if (c->c[j].peer == c->c[i].peer) return c->c[j].kind == P2P_RECV ? j : -1;  // (a)
        if (c->c[j].kind == P2P_RECV) return -1;                                        // (b)
    }
    return -1;
}

void p2p_pair(int K, P2pCalls *calls) {
    for (int s = 0; s < K; s++)
        for (int i = 0; i < calls[s].n; i++) {
            int j = pair_on_one_side(&calls[s], i);
            if (j < 0) continue;
            int p = calls[s].c[i].peer;
            int i2 = other_half(&calls[p], s, &calls[s].c[j]), j2 = other_half(&calls[p], s, &calls[s].c[i]);
            if (i2 < 0 || j2 < 0 || pair_on_one_side(&calls[p], i2) != j2) continue;  // (c)
            calls[s].c[i].with = j;
            calls[s].c[j].with = i;
        }
}

int p2p_channel(int s, const P2pCalls *calls_s, int i) {
    const P2pCall *c = &calls_s->c[i];
    if (c->with >= 0) {  // the pair's: the channel of the lower rank's send (this rank's, or the one it receives)
        const P2pCall *other = &calls_s->c[c->with];
        const P2pCall *send = c->kind == P2P_SEND ? c : other, *recv = c->kind == P2P_SEND ? other : c;
        const P2pCall *low = s < c->peer ? send : recv;
        return devcomm_channel(s < c->peer ? s : c->peer, s < c->peer ? c->peer : s, low->msg == ACT_SEND_GRAD);
    }
    int grad = c->msg == ACT_SEND_GRAD;
    return c->kind == P2P_SEND ? devcomm_channel(s, c->peer, grad) : devcomm_channel(c->peer, s, grad);
}

void p2p_plan(int s, const P2pCalls *calls_s, DevCall *out) {
    for (int i = 0; i < calls_s->n; i++) {
        const P2pCall *c = &calls_s->c[i];
        out[i] = (DevCall){.send = c->kind == P2P_SEND,
                           .peer = c->peer,
                           .grad = c->msg == ACT_SEND_GRAD,
                           .with = c->with,
                           .channel = p2p_channel(s, calls_s, i)};
    }
}

int p2p_next(P2pCursor *k, int send, int peer, int grad, int *held, char *why, size_t wn) {
    *held = -1;
    const DevCall *c = k->at < k->n ? &k->c[k->at] : NULL;
    if (!c || c->send != send || c->peer != peer || c->grad != grad) {
        snprintf(why, wn, "call %d of the step, a %s of %s with rank %d, is not the plan's (%s)", k->at,
                 send ? "send" : "receive", grad ? "a gradient" : "an activation", peer,
                 c ? "another call" : "no more");
        return -2;
    }
    int i = k->at++;
    if (c->with < 0) return i;
    if (send) {
        if (k->held >= 0) {
            snprintf(why, wn, "call %d of the step, a paired send, while call %d is still held", i, k->held);
            return -2;
        }
        k->held = i;
        return -1;
    }
    if (k->held != c->with) {
        snprintf(why, wn, "call %d of the step, a paired receive, finds call %d held, not its send %d", i, k->held,
                 c->with);
        return -2;
    }
    *held = k->held;
    k->held = -1;
    return i;
}

const char *p2p_done(const P2pCursor *k, char *why, size_t wn) {
    if (k->at == k->n && k->held < 0) return NULL;
    snprintf(why, wn, "the step ended after %d of the plan's %d calls%s", k->at, k->n,
             k->held >= 0 ? ", a send held" : "");
    return why;
}

// Pairs (4) the same on both ranks: a call's other half on the peer is paired with the other half
// of its own partner.
static const char *check_same_pairs(int K, const P2pCalls *calls, char *why, size_t wn) {
    for (int a = 0; a < K; a++)
        for (int i = 0; i < calls[a].n; i++) {
            const P2pCall *x = &calls[a].c[i];
            if (x->with < 0) continue;
            int b = x->peer, y = other_half(&calls[b], a, x), z = other_half(&calls[b], a, &calls[a].c[x->with]);
            if (y < 0 || z < 0 || calls[b].c[y].with != z) {
                snprintf(why, wn, "rank %d pairs its calls %d and %d with rank %d, which does not pair them", a, i,
                         x->with, b);
                return why;
            }
        }
    return NULL;
}

// The warm-up and the pairing of messages: symmetric neighbours, and on every communicator the k-th
// message from a to b is the k-th that b receives from a there (NCCL matches in posting order per
// communicator).
static const char *check_pairs(int K, int v, int chunk_order, const P2pCalls *calls, char *why, size_t wn) {
    int nb[2 * COMM_MAX_CHUNKS], nb2[2 * COMM_MAX_CHUNKS];
    for (int a = 0; a < K; a++) {
        int n = p2p_neighbours(K, v, chunk_order, a, nb);
        for (int i = 0; i < n; i++) {
            int m = p2p_neighbours(K, v, chunk_order, nb[i], nb2), back = 0;
            for (int j = 0; j < m; j++) back |= nb2[j] == a;
            if (!back) {
                snprintf(why, wn, "rank %d warms up with rank %d, which does not warm up with it", a, nb[i]);
                return why;
            }
        }
        for (int i = 0; i < calls[a].n; i++) {
            int known = 0;
            for (int j = 0; j < n; j++) known |= nb[j] == calls[a].c[i].peer;
            if (!known) {
                snprintf(why, wn, "rank %d call %d goes to rank %d, not warmed up", a, i, calls[a].c[i].peer);
                return why;
            }
        }
        for (int b = 0; b < K; b++)
            for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
                int i = 0, j = 0;  // a's sends to b on ch against b's receives from a on ch
                for (;;) {
                    while (i < calls[a].n && !(calls[a].c[i].kind == P2P_SEND && calls[a].c[i].peer == b &&
                                               p2p_channel(a, &calls[a], i) == ch))
                        i++;
                    while (j < calls[b].n && !(calls[b].c[j].kind == P2P_RECV && calls[b].c[j].peer == a &&
                                               p2p_channel(b, &calls[b], j) == ch))
                        j++;
                    if (i == calls[a].n && j == calls[b].n) break;
                    const P2pCall *x = i < calls[a].n ? &calls[a].c[i] : NULL;
                    const P2pCall *y = j < calls[b].n ? &calls[b].c[j] : NULL;
                    if (!x || !y || x->msg != y->msg || x->mb != y->mb || x->to_vs != y->to_vs) {
                        snprintf(why, wn,
                                 "rank %d's send (call %d) to rank %d does not meet rank %d's receive (call %d) from "
                                 "rank %d in order",
                                 a, i, b, b, j, a);
                        return why;
                    }
                    i++, j++;
                }
            }
    }
    return check_same_pairs(K, calls, why, wn);
}

// The execution model of p2p.h: per rank and channel a queue of kernels, each named by its lead call
// (a lone call, or a pair's receive, whose `with` is its send).
typedef struct {
    const P2pCalls *calls;
    int K, stride;
    int *host, *blocked;
    char **done;  // per rank and call: completed
    int *q[DEVCOMM_CHANNELS], *head[DEVCOMM_CHANNELS], *tail[DEVCOMM_CHANNELS];
} Model;

// The call of a's kernel at the head of channel ch that is `kind` with `peer`, not yet done, or -1.
static int head_call(const Model *m, int a, int ch, int kind, int peer) {
    if (m->head[ch][a] == m->tail[ch][a]) return -1;
    const int lead = m->q[ch][(size_t)a * m->stride + m->head[ch][a]], part[2] = {lead, m->calls[a].c[lead].with};
    for (int k = 0; k < 2; k++) {
        int i = part[k];
        if (i >= 0 && !m->done[a][i] && m->calls[a].c[i].kind == kind && m->calls[a].c[i].peer == peer) return i;
    }
    return -1;
}

// Matches the sends and receives of every channel's head kernels, pops the kernels done; 1 when
// something moved.
static int model_match(Model *m) {
    int moved = 0;
    for (int a = 0; a < m->K; a++)
        for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++)
            for (int b = 0; b < m->K; b++) {
                int x = head_call(m, a, ch, P2P_SEND, b), y = x < 0 ? -1 : head_call(m, b, ch, P2P_RECV, a);
                if (y < 0) continue;
                m->done[a][x] = m->done[b][y] = 1, moved = 1;
            }
    for (int a = 0; a < m->K; a++)
        for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
            if (m->head[ch][a] == m->tail[ch][a]) continue;
            int lead = m->q[ch][(size_t)a * m->stride + m->head[ch][a]], with = m->calls[a].c[lead].with;
            if (!m->done[a][lead] || (with >= 0 && !m->done[a][with])) continue;
            m->head[ch][a]++, moved = 1;
            if (m->blocked[a] == lead) m->blocked[a] = -1;  // (a receive's wait ends with its kernel)
        }
    return moved;
}

// Each host posts until it waits for a receive; a paired send waits for its receive. 1 when something moved.
static int model_post(Model *m) {
    int moved = 0;
    for (int s = 0; s < m->K; s++)
        while (m->blocked[s] < 0 && m->host[s] < m->calls[s].n) {
            int i = m->host[s]++;
            const P2pCall *c = &m->calls[s].c[i];
            moved = 1;
            if (c->kind == P2P_SEND && c->with >= 0) continue;  // held back: posted with its receive
            int ch = p2p_channel(s, &m->calls[s], i);
            m->q[ch][(size_t)s * m->stride + m->tail[ch][s]++] = i;
            if (c->kind == P2P_RECV) m->blocked[s] = i;
        }
    return moved;
}

const char *p2p_check_calls(int K, int v, int chunk_order, const P2pCalls *calls, char *why, size_t wn) {
    int total = 0;
    for (int s = 0; s < K; s++) total += calls[s].n;
    const char *bad = check_pairs(K, v, chunk_order, calls, why, wn);
    Model m = {calls, K, total + 1, xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K, sizeof(int)),
               xcalloc((size_t)K, sizeof(char *)), {0}, {0}, {0}};
    for (int s = 0; s < K; s++) m.done[s] = xcalloc((size_t)calls[s].n + 1, 1);
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
        m.q[ch] = xcalloc((size_t)m.stride, sizeof(int) * (size_t)K);
        m.head[ch] = xcalloc((size_t)K, sizeof(int));
        m.tail[ch] = xcalloc((size_t)K, sizeof(int));
    }
    for (int s = 0; s < K; s++) m.blocked[s] = -1;
    for (int moved = 1; !bad && moved;) {
        moved = model_post(&m);
        moved |= model_match(&m);
    }
    for (int s = 0; s < K && !bad; s++)
        for (int ch = 0; ch < DEVCOMM_CHANNELS && !bad; ch++) {
            if (m.blocked[s] < 0 && m.head[ch][s] == m.tail[ch][s]) continue;
            int i = m.blocked[s] >= 0 ? m.blocked[s] : m.q[ch][(size_t)s * m.stride + m.head[ch][s]];
            snprintf(why, wn, "deadlock: rank %d stays at call %d (%s rank %d, micro-batch %d%s) of %d", s, i,
                     calls[s].c[i].kind == P2P_SEND ? "a send to" : "a receive from", calls[s].c[i].peer,
                     calls[s].c[i].mb, calls[s].c[i].with >= 0 ? ", paired" : "", calls[s].n);
            bad = why;
        }
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) { free(m.q[ch]); free(m.head[ch]); free(m.tail[ch]); }
    for (int s = 0; s < K; s++) free(m.done[s]);
    free(m.host); free(m.blocked); free(m.done);
    return bad;
}

const char *p2p_check(int K, int v, int chunk_order, const ActionList *lists, char *why, size_t wn) {
    P2pCalls *calls = xcalloc((size_t)K, sizeof(P2pCalls));
    for (int s = 0; s < K; s++) p2p_calls(K, chunk_order, s, &lists[s], &calls[s]);
    p2p_pair(K, calls);
    const char *bad = p2p_check_calls(K, v, chunk_order, calls, why, wn);
    for (int s = 0; s < K; s++) p2p_calls_free(&calls[s]);
    free(calls);
    return bad;
}

int p2p_nccl_env(char *msg, size_t n) {
    static const char *const merge[] = {"NCCL_COMM_SPLIT_SHARE_RESOURCES", "NCCL_LAUNCH_ORDER_IMPLICIT"};
    int overrode = 0;
    size_t k = 0;
    msg[0] = 0;
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(merge[i]);
        if (v && strcmp(v, "0")) {
            k += (size_t)snprintf(msg + k, k < n ? n - k : 0, "%s%s=%s", overrode++ ? " and " : "", merge[i], v);
            if (k >= n) k = n - 1;
        }
        setenv(merge[i], "0", 1);
    }
    if (overrode)
        snprintf(msg + k, n - k,
                 " set to 0 for this run: %s merge%s the NCCL transport's four channels into one queue, and the "
                 "pipeline's crossing sends would deadlock",
                 overrode > 1 ? "they" : "it", overrode > 1 ? "" : "s");
    return overrode;
}
