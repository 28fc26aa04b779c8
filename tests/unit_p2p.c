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

static void test_every_schedule(void) {
    for (int kind = 0; kind < SCHED_KINDS; kind++) {  // every kind with a generator (schedule.c's table)
        const ScheduleKind *k = schedule_kind(kind);
        if (!k->generate) continue;
        int runs = 0, bad = 0;
        char why[256] = "", first[320] = "";
        for (int K = 2; K <= 6; K++)
            for (int M = 1; M <= 13; M++)
                for (int v = 1; v <= (k->chunks == CHUNKS_OPTION ? 3 : 1); v++) {
                    int vv = k->chunks == CHUNKS_OPTION ? v + 1 : schedule_chunks(kind, 1, NULL);
                    if (schedule_check(kind, K, M, vv)) continue;
                    SimSpec sp = {.kind = kind, .K = K, .M = M, .v = vv, .f = 1, .b = 1, .w = 1};
                    SimResult r;
                    schedule_sim(&sp, &r);
                    int runnable = !r.deadlock;
                    sim_result_free(&r);
                    if (!runnable) continue;  // the simulator refuses it before any message
                    runs++;
                    if (check_lists(kind, K, M, vv, why, sizeof why) && !bad++)
                        snprintf(first, sizeof first, "K=%d M=%d v=%d: %s", K, M, vv, why);
                }
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

int main(void) {
    test_nccl_env();
    test_neighbours();
    test_every_schedule();
    test_catches();
    return unit_failures != 0;
}
