// tests/unit_p2p.c: the NCCL transport's posting rule (p2p.c) proven without a GPU: for every
// schedule and several (K, M), every rank's calls find their matching halves in order, the warm-up
// exchange covers every pair that talks, and NCCL's in-order execution per communicator finishes.
#include <stdlib.h>
#include "unit.h"
#include "p2p.h"
#include "schedule.h"

// Every rank's list of (kind, K, M, v), or of an evaluation (forward only) when kind < 0, checked.
static const char *check_lists(int kind, int K, int M, int v, char *why, size_t wn) {
    int chunk_order = kind < 0 ? CHUNKS_LOOP : schedule_chunk_order(kind, NULL);
    ActionList *l = calloc((size_t)K, sizeof(ActionList));
    for (int s = 0; s < K; s++) {
        if (kind < 0) schedule_build_forward(K, v, chunk_order, s, M, &l[s]);
        else schedule_build(kind, NULL, K, M, v, s, &l[s]);
    }
    const char *bad = p2p_check(K, v, chunk_order, l, why, wn);
    for (int s = 0; s < K; s++) action_list_free(&l[s]);
    free(l);
    return bad;
}

// The schedule takes (K, M, v), and the simulator runs it (it refuses the others before any message).
static int runnable(int kind, int K, int M, int v) {
    if (schedule_check(kind, K, M, v)) return 0;
    SimSpec sp = {.kind = kind, .K = K, .M = M, .v = v, .f = 1, .b = 1, .w = 1};
    SimResult r;
    schedule_sim(&sp, &r);
    int ok = !r.deadlock;
    sim_result_free(&r);
    return ok;
}

// The shapes the walks below cover for a schedule kind: K 2-6 stages, M 1-13 micro-batches, and 2-4 chunks
// where the kind takes --chunks (else its own count), those it can run; their count.
typedef struct { int K, M, v; } Shape;
enum { MAX_SHAPES = 5 * 13 * 3 };
static int kind_shapes(int kind, Shape *out) {
    const ScheduleKind *k = schedule_kind(kind);
    int n = 0, option = k->chunks == CHUNKS_OPTION;
    for (int K = 2; K <= 6; K++)
        for (int M = 1; M <= 13; M++)
            for (int v = 1; v <= (option ? 3 : 1); v++) {
                int vv = option ? v + 1 : schedule_chunks(kind, 1, NULL);
                if (runnable(kind, K, M, vv)) out[n++] = (Shape){K, M, vv};
            }
    return n;
}

static void test_every_schedule(void) {
    for (int kind = 0; kind < SCHED_KINDS; kind++) {  // every kind with a generator (schedule.c's table)
        const ScheduleKind *k = schedule_kind(kind);
        if (!k->generate) continue;
        int bad = 0;
        char why[256] = "", first[320] = "";
        Shape sh[MAX_SHAPES];
        int runs = kind_shapes(kind, sh);
        for (int i = 0; i < runs; i++)
            if (check_lists(kind, sh[i].K, sh[i].M, sh[i].v, why, sizeof why) && !bad++)
                snprintf(first, sizeof first, "K=%d M=%d v=%d: %s", sh[i].K, sh[i].M, sh[i].v, why);
        char name[160];
        snprintf(name, sizeof name, "p2p/%s: every call meets its peer's half, warm-up covers every pair, no deadlock (%d shapes)", k->name, runs);
        EXPECT(name, runs > 0 && !bad, "%d of %d shapes fail; first %s", bad, runs, first);
    }
    int bad = 0;
    char why[256] = "", first[320] = "";
    for (int K = 2; K <= 6; K++)
        for (int v = 1; v <= 3; v++)
            if (check_lists(-1, K, 5, v, why, sizeof why) && !bad++) snprintf(first, sizeof first, "K=%d v=%d: %s", K, v, why);
    EXPECT("p2p/evaluation (forward only, loop chunk order): the rule holds", !bad, "%s", first);
}

// The neighbours: a chain, interleaved's wrap (rank K-1 feeds rank 0), the V's turn on rank K-1.
static void test_neighbours(void) {
    int nb[8], n = p2p_neighbours(4, 1, CHUNKS_LOOP, 0, nb);
    EXPECT("p2p/neighbours: 1f1b rank 0 of 4 talks to rank 1 only", n == 1 && nb[0] == 1, "n %d", n);
    n = p2p_neighbours(4, 2, CHUNKS_LOOP, 0, nb);
    EXPECT("p2p/neighbours: interleaved rank 0 of 4 talks to ranks 1 and 3 (the wrap)", n == 2 && nb[0] == 1 && nb[1] == 3, "n %d", n);
    n = p2p_neighbours(4, 2, CHUNKS_V, 3, nb);
    EXPECT("p2p/neighbours: zb-v rank 3 of 4 talks to rank 2 only (its turn is a copy)", n == 1 && nb[0] == 2, "n %d", n);
}

// The check catches what the rule forbids: a receive out of order, and a rank that never posts.
static void test_catches(void) {
    ActionList l[2] = {{0}, {0}};
    schedule_build(SCHED_GPIPE, NULL, 2, 2, 1, 0, &l[0]);
    schedule_build(SCHED_GPIPE, NULL, 2, 2, 1, 1, &l[1]);
    char why[256];
    Action t = l[1].a[0]; l[1].a[0] = l[1].a[3]; l[1].a[3] = t;  // RECV_ACT of mb 0 <-> of mb 1
    const char *bad = p2p_check(2, 1, CHUNKS_LOOP, l, why, sizeof why);
    EXPECT("p2p/check: micro-batches received out of order are caught", bad && strstr(bad, "in order"), "%s", bad ? bad : "(passed)");
    l[1].a[3] = l[1].a[0]; l[1].a[0] = t;
    l[1].n = 0;  // rank 1 posts nothing: rank 0 waits for gradients that never come
    bad = p2p_check(2, 1, CHUNKS_LOOP, l, why, sizeof why);
    EXPECT("p2p/check: a rank that never posts its half is caught", bad != NULL, "passed");
    action_list_free(&l[0]);
    action_list_free(&l[1]);
}

// The settings that would merge the four channels are overridden, and the line names them.
static void test_nccl_env(void) {
    char msg[400];
    unsetenv("NCCL_COMM_SPLIT_SHARE_RESOURCES");
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "0", 1);
    int n = p2p_nccl_env(msg, sizeof msg);
    EXPECT("p2p/nccl env: unset or 0 is left as is, silently (both then 0)",
           n == 0 && !msg[0] && !strcmp(getenv("NCCL_COMM_SPLIT_SHARE_RESOURCES"), "0") &&
               !strcmp(getenv("NCCL_LAUNCH_ORDER_IMPLICIT"), "0"),
           "n %d msg '%s'", n, msg);
    setenv("NCCL_COMM_SPLIT_SHARE_RESOURCES", "1", 1);
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 1);
    n = p2p_nccl_env(msg, sizeof msg);
    EXPECT("p2p/nccl env: =1 is overridden to 0, with one line naming both",
           n == 2 && strstr(msg, "NCCL_COMM_SPLIT_SHARE_RESOURCES=1 and NCCL_LAUNCH_ORDER_IMPLICIT=1 set to 0") &&
               strstr(msg, "deadlock") && !strchr(msg, '\n') && !strcmp(getenv("NCCL_COMM_SPLIT_SHARE_RESOURCES"), "0") &&
               !strcmp(getenv("NCCL_LAUNCH_ORDER_IMPLICIT"), "0"),
           "n %d msg '%s'", n, msg);
}

// (4) crossing pairs: 1F1B's steady state pairs each send of an activation with the receive of a
// gradient after it, the same two messages on both ranks (M - 1 pairs between 2 ranks: every forward
// after the first is sent just before the next gradient comes back); a pair read off one rank's list
// alone is caught; and so is a send held back across a receive from a third rank, which deadlocks.
static int pairs_of(const P2pCalls *c) {
    int n = 0;
    for (int i = 0; i < c->n; i++) n += c->c[i].kind == P2P_SEND && c->c[i].with >= 0;
    return n;
}
static void test_pairs(void) {
    ActionList l[2] = {{0}, {0}};
    P2pCalls c[2];
    for (int s = 0; s < 2; s++) {
        schedule_build(SCHED_1F1B, NULL, 2, 4, 1, s, &l[s]);
        p2p_calls(2, CHUNKS_LOOP, s, &l[s], &c[s]);
    }
    p2p_pair(2, c);
    int ok = pairs_of(&c[0]) == 3 && pairs_of(&c[1]) == 3, same_channel = 1;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < c[s].n; i++)
            if (c[s].c[i].with >= 0) same_channel &= p2p_channel(s, &c[s], i) == p2p_channel(s, &c[s], c[s].c[i].with);
    char why[256];
    const char *bad = p2p_check_calls(2, 1, CHUNKS_LOOP, c, why, sizeof why);
    EXPECT("p2p/pairs: 1f1b K=2 M=4 pairs 3 crossings on each rank, both halves on one channel, and passes the check",
           ok && same_channel && !bad, "pairs %d %d, same channel %d: %s", pairs_of(&c[0]), pairs_of(&c[1]), same_channel,
           bad ? bad : "");
    for (int i = 0; i < c[1].n; i++) c[1].c[i].with = -1;  // rank 0 pairs, rank 1 does not
    bad = p2p_check_calls(2, 1, CHUNKS_LOOP, c, why, sizeof why);
    EXPECT("p2p/pairs: a pair read off one rank's list alone is caught (its halves on two channels)", bad != NULL, "%s",
           "(passed)");
    for (int s = 0; s < 2; s++) { p2p_calls_free(&c[s]); action_list_free(&l[s]); }
    char counts[400] = "";  // every schedule's pairs at K=4, M=8 (rank 1: a middle stage)
    int n1f1b = 0;
    for (int kind = 0; kind < SCHED_KINDS; kind++) {
        const ScheduleKind *k = schedule_kind(kind);
        if (!k->generate) continue;
        int v = k->chunks == CHUNKS_OPTION ? 2 : schedule_chunks(kind, 1, NULL);
        if (!runnable(kind, 4, 8, v)) continue;
        ActionList l4[4] = {{0}};
        P2pCalls c4[4];
        for (int s = 0; s < 4; s++) {
            schedule_build(kind, NULL, 4, 8, v, s, &l4[s]);
            p2p_calls(4, schedule_chunk_order(kind, NULL), s, &l4[s], &c4[s]);
        }
        p2p_pair(4, c4);
        if (kind == SCHED_1F1B) n1f1b = pairs_of(&c4[1]);
        snprintf(counts + strlen(counts), sizeof counts - strlen(counts), "%s%s %d", counts[0] ? ", " : "", k->name,
                 pairs_of(&c4[1]));
        for (int s = 0; s < 4; s++) { p2p_calls_free(&c4[s]); action_list_free(&l4[s]); }
    }
    char name[480];
    snprintf(name, sizeof name, "p2p/pairs at K=4 M=8, rank 1's: %s", counts);
    EXPECT(name, n1f1b > 0, "1f1b has none");

    // 3 ranks (interleaved's neighbours, v = 2): rank 0 holds its send X to rank 1 back across a receive
    // Z from rank 2, which first waits for W, which rank 1 sends only after its pair {Y, X}
    P2pCall r0[] = {{P2P_SEND, 1, ACT_SEND_ACT, 0, 1, 2}, {P2P_RECV, 2, ACT_SEND_ACT, 1, 3, -1},
                    {P2P_RECV, 1, ACT_SEND_GRAD, 0, 0, 0}};
    P2pCall r1[] = {{P2P_SEND, 0, ACT_SEND_GRAD, 0, 0, 1}, {P2P_RECV, 0, ACT_SEND_ACT, 0, 1, 0},
                    {P2P_SEND, 2, ACT_SEND_ACT, 1, 2, -1}};
    P2pCall r2[] = {{P2P_RECV, 1, ACT_SEND_ACT, 1, 2, -1}, {P2P_SEND, 0, ACT_SEND_ACT, 1, 3, -1}};
    P2pCalls held[3] = {{r0, 3, 3}, {r1, 3, 3}, {r2, 2, 2}};
    bad = p2p_check_calls(3, 2, CHUNKS_LOOP, held, why, sizeof why);
    EXPECT("p2p/pairs: a send held back across a receive from a third rank deadlocks, and is caught",
           bad && strstr(bad, "deadlock"), "%s", bad ? bad : "(passed)");
    held[0].c[0].with = held[0].c[2].with = held[1].c[0].with = held[1].c[1].with = -1;
    bad = p2p_check_calls(3, 2, CHUNKS_LOOP, held, why, sizeof why);
    EXPECT("p2p/pairs: the same calls unpaired (the send posted at once) finish", !bad, "%s", bad ? bad : "");
}

// (5) What the transport posts: each rank's cursor (p2p_next) walked through its calls in the order the
// executor makes them. A post is one NCCL call, or one group of a held send and its receive, on one
// channel; a message is named by its sender, kind, micro-batch and receiving virtual stage.
typedef struct { int ch, peer, n, m[2][4]; } Post;
static void message_of(int s, const P2pCall *c, int *m) {
    m[0] = c->kind == P2P_SEND ? s : c->peer, m[1] = c->msg, m[2] = c->mb, m[3] = c->to_vs;
}
// Rank s's posts into out (room for calls->n); returns how many, or -1 with why.
static int posts_of(int s, const P2pCalls *calls, Post *out, char *why, size_t wn) {
    DevCall *plan = malloc(sizeof(DevCall) * (size_t)(calls->n ? calls->n : 1));
    p2p_plan(s, calls, plan);
    P2pCursor k = {plan, calls->n, 0, -1};
    int n = 0, held;
    for (int i = 0; i < calls->n && n >= 0; i++) {
        const P2pCall *c = &calls->c[i];
        int at = p2p_next(&k, c->kind == P2P_SEND, c->peer, c->msg == ACT_SEND_GRAD, &held, why, wn);
        if (at == -2) n = -1;
        if (at < 0) continue;
        Post *p = &out[n++];
        *p = (Post){.ch = plan[at].channel, .peer = c->peer, .n = held >= 0 ? 2 : 1};
        message_of(s, &calls->c[at], p->m[0]);
        if (held >= 0) {
            message_of(s, &calls->c[held], p->m[1]);
            if (plan[held].channel != p->ch) { snprintf(why, wn, "rank %d's group %d spans two channels", s, at); n = -1; }
        }
    }
    if (n >= 0 && p2p_done(&k, why, wn)) n = -1;
    free(plan);
    return n;
}
// The same messages in a post on both sides (a group's two in either order).
static int same_post(const Post *a, const Post *b) {
    if (a->n != b->n || a->ch != b->ch) return 0;
    int direct = !memcmp(a->m[0], b->m[0], sizeof a->m[0]) && (a->n == 1 || !memcmp(a->m[1], b->m[1], sizeof a->m[1]));
    int swapped = a->n == 2 && !memcmp(a->m[0], b->m[1], sizeof a->m[0]) && !memcmp(a->m[1], b->m[0], sizeof a->m[1]);
    return direct || swapped;
}
// Every rank's posts; between every two ranks, on every channel, both post the same groups and lone
// calls in the same order. Returns the groups rank 1 posts, or -1 with why.
static int check_posts(int kind, int K, int M, int v, char *why, size_t wn) {
    ActionList *l = calloc((size_t)K, sizeof(ActionList));
    P2pCalls *c = calloc((size_t)K, sizeof(P2pCalls));
    Post **post = calloc((size_t)K, sizeof(Post *));
    int *np = calloc((size_t)K, sizeof(int)), groups = 0, bad = 0;
    for (int s = 0; s < K; s++) {
        schedule_build(kind, NULL, K, M, v, s, &l[s]);
        p2p_calls(K, schedule_chunk_order(kind, NULL), s, &l[s], &c[s]);
    }
    p2p_pair(K, c);
    for (int s = 0; s < K && !bad; s++) {
        post[s] = malloc(sizeof(Post) * (size_t)(c[s].n ? c[s].n : 1));
        np[s] = posts_of(s, &c[s], post[s], why, wn);
        bad = np[s] < 0;
    }
    for (int a = 0; a < K && !bad; a++)
        for (int b = a + 1; b < K && !bad; b++)
            for (int ch = 0; ch < DEVCOMM_CHANNELS && !bad; ch++) {
                int i = 0, j = 0;
                for (;; i++, j++) {
                    while (i < np[a] && (post[a][i].peer != b || post[a][i].ch != ch)) i++;
                    while (j < np[b] && (post[b][j].peer != a || post[b][j].ch != ch)) j++;
                    if (i == np[a] || j == np[b]) break;
                    if (!same_post(&post[a][i], &post[b][j])) break;
                }
                if (i < np[a] || j < np[b]) {
                    snprintf(why, wn, "ranks %d and %d post different calls on channel %d (rank %d's post %d)", a, b, ch, a, i);
                    bad = 1;
                }
            }
    for (int i = 0; !bad && K > 1 && i < np[1]; i++) groups += post[1][i].n == 2;
    for (int s = 0; s < K; s++) { free(post[s]); p2p_calls_free(&c[s]); action_list_free(&l[s]); }
    free(post); free(np); free(c); free(l);
    return bad ? -1 : groups;
}

static void test_posts(void) {
    int shapes = 0, fails = 0, groups_1f1b = -1;
    char why[256] = "", first[320] = "";
    for (int kind = 0; kind < SCHED_KINDS; kind++) {
        const ScheduleKind *k = schedule_kind(kind);
        if (!k->generate) continue;
        Shape sh[MAX_SHAPES];
        int n = kind_shapes(kind, sh);
        for (int i = 0; i < n; i++, shapes++) {
            int K = sh[i].K, M = sh[i].M, v = sh[i].v, g = check_posts(kind, K, M, v, why, sizeof why);
            if (g < 0 && !fails++) snprintf(first, sizeof first, "%s K=%d M=%d v=%d: %s", k->name, K, M, v, why);
            if (kind == SCHED_1F1B && K == 4 && M == 8) groups_1f1b = g;
        }
    }
    char name[200];
    snprintf(name, sizeof name, "p2p/posts: every schedule (%d shapes), both ranks post the same groups in the same order "
             "on every channel; 1f1b K=4 M=8 rank 1 posts %d groups", shapes, groups_1f1b);
    EXPECT(name, shapes > 0 && !fails && groups_1f1b == 11, "%d fail; first %s", fails, first);
    // the walk refuses a call the plan does not expect, and a step that ends early
    DevCall plan[2] = {{1, 1, 0, 1, 0}, {0, 1, 1, 0, 0}};
    P2pCursor k = {plan, 2, 0, -1};
    int held, at = p2p_next(&k, 1, 1, 0, &held, why, sizeof why);
    const char *early = p2p_done(&k, why, sizeof why);
    EXPECT("p2p/posts: a paired send is held, and a step ending while it is held is refused",
           at == -1 && early && strstr(early, "held"), "at %d: %s", at, early ? early : "(done)");
    at = p2p_next(&k, 0, 1, 0, &held, why, sizeof why);
    EXPECT("p2p/posts: a receive the plan does not expect (an activation for a gradient) is refused by name",
           at == -2 && strstr(why, "not the plan's"), "at %d: %s", at, why);
    at = p2p_next(&k, 0, 1, 1, &held, why, sizeof why);
    EXPECT("p2p/posts: the paired receive posts with its held send, and the walk is done",
           at == 1 && held == 0 && !p2p_done(&k, why, sizeof why), "at %d held %d", at, held);
}

int main(void) {
    test_nccl_env();
    test_neighbours();
    test_every_schedule();
    test_catches();
    test_pairs();
    test_posts();
    return unit_failures != 0;
}
