// p2p.c: the NCCL transport's posting rule as pure C (see p2p.h): the warm-up neighbours, each
// rank's ordered calls from its action list, and the check that every call finds its matching half
// under NCCL's in-order execution per communicator. No CUDA here: tests/unit_p2p.c runs it anywhere.
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
                                 .to_vs = send ? other : vs});
    }
}

void p2p_calls_free(P2pCalls *c) { free(c->c); memset(c, 0, sizeof *c); }

// The warm-up and the pairing of messages: symmetric neighbours, and the k-th activation (or
// gradient) from a to b is the k-th that b receives from a (NCCL matches in posting order per
// communicator, and each kind has its own).
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
        for (int b = 0, msg = ACT_SEND_ACT; b < K; msg = msg == ACT_SEND_ACT ? ACT_SEND_GRAD : (b++, ACT_SEND_ACT)) {
            int i = 0, j = 0;  // a's sends of one kind to b against b's receives of it from a
            for (;;) {
                while (i < calls[a].n &&
                       !(calls[a].c[i].kind == P2P_SEND && calls[a].c[i].peer == b && calls[a].c[i].msg == msg))
                    i++;
                while (j < calls[b].n &&
                       !(calls[b].c[j].kind == P2P_RECV && calls[b].c[j].peer == a && calls[b].c[j].msg == msg))
                    j++;
                if (i == calls[a].n && j == calls[b].n) break;
                const P2pCall *x = i < calls[a].n ? &calls[a].c[i] : NULL, *y = j < calls[b].n ? &calls[b].c[j] : NULL;
                if (!x || !y || x->msg != y->msg || x->mb != y->mb || x->to_vs != y->to_vs) {
                    snprintf(why, wn,
                             "rank %d's send (call %d) to rank %d does not meet rank %d's receive (call %d) from rank "
                             "%d in order",
                             a, i, b, b, j, a);
                    return why;
                }
                i++, j++;
            }
        }
    }
    return NULL;
}

// The execution model of p2p.h on two queues (channels) per rank.
typedef struct {
    const P2pCalls *calls;
    int K, stride;
    int *host, *blocked;
    int *q[DEVCOMM_CHANNELS], *head[DEVCOMM_CHANNELS], *tail[DEVCOMM_CHANNELS];
} Model;

static int channel_of(int s, const P2pCall *c) {
    int grad = c->msg == ACT_SEND_GRAD;
    return c->kind == P2P_SEND ? devcomm_channel(s, c->peer, grad) : devcomm_channel(c->peer, s, grad);
}

// Matches the heads of every channel's queues; 1 when something completed.
static int model_match(Model *m) {
    int moved = 0;
    for (int a = 0; a < m->K; a++)
        for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
            if (m->head[ch][a] == m->tail[ch][a]) continue;
            const P2pCall *x = &m->calls[a].c[m->q[ch][(size_t)a * m->stride + m->head[ch][a]]];
            if (x->kind != P2P_SEND) continue;
            int b = x->peer;
            if (m->head[ch][b] == m->tail[ch][b]) continue;
            int yi = m->q[ch][(size_t)b * m->stride + m->head[ch][b]];
            const P2pCall *y = &m->calls[b].c[yi];
            if (y->kind != P2P_RECV || y->peer != a) continue;
            m->head[ch][a]++, m->head[ch][b]++, moved = 1;
            if (m->blocked[b] == yi) m->blocked[b] = -1;
        }
    return moved;
}

const char *p2p_check(int K, int v, int chunk_order, const ActionList *lists, char *why, size_t wn) {
    P2pCalls *calls = xcalloc((size_t)K, sizeof(P2pCalls));
    int total = 0;
    for (int s = 0; s < K; s++) { p2p_calls(K, chunk_order, s, &lists[s], &calls[s]); total += calls[s].n; }
    const char *bad = check_pairs(K, v, chunk_order, calls, why, wn);
    Model m = {calls, K, total + 1, xcalloc((size_t)K, sizeof(int)), xcalloc((size_t)K, sizeof(int)), {0}, {0}, {0}};
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
        m.q[ch] = xcalloc((size_t)m.stride, sizeof(int) * (size_t)K);
        m.head[ch] = xcalloc((size_t)K, sizeof(int));
        m.tail[ch] = xcalloc((size_t)K, sizeof(int));
    }
    for (int s = 0; s < K; s++) m.blocked[s] = -1;
    for (int moved = 1; !bad && moved;) {
        moved = 0;
        for (int s = 0; s < K; s++)  // each host posts until it waits for a receive
            while (m.blocked[s] < 0 && m.host[s] < calls[s].n) {
                int i = m.host[s]++, ch = channel_of(s, &calls[s].c[i]);
                m.q[ch][(size_t)s * m.stride + m.tail[ch][s]++] = i;
                if (calls[s].c[i].kind == P2P_RECV) m.blocked[s] = i;
                moved = 1;
            }
        moved |= model_match(&m);
    }
    for (int s = 0; s < K && !bad; s++)
        for (int ch = 0; ch < DEVCOMM_CHANNELS && !bad; ch++) {
            if (m.blocked[s] < 0 && m.head[ch][s] == m.tail[ch][s]) continue;
            int i = m.blocked[s] >= 0 ? m.blocked[s] : m.q[ch][(size_t)s * m.stride + m.head[ch][s]];
            snprintf(why, wn, "deadlock: rank %d stays at call %d (%s rank %d, micro-batch %d) of %d", s, i,
                     calls[s].c[i].kind == P2P_SEND ? "a send to" : "a receive from", calls[s].c[i].peer,
                     calls[s].c[i].mb, calls[s].n);
            bad = why;
        }
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) { free(m.q[ch]); free(m.head[ch]); free(m.tail[ch]); }
    free(m.host); free(m.blocked);
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
