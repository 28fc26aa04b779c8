// tests/unit_comms.c: the collectives' table of algorithms (comms/algo.h, collectives.c's comm_algos)
// against what names its rows elsewhere: the option's choices (--allreduce, allreduce's --algo) list
// the rows' names in the table's order, auto comes after the last row, every row has the operations
// a request calls, and the planner's profile keys are the rows' names (a profile read back by name);
// and when a waiting rank yields its core (comms/watchdog.c).
#include <stdlib.h>
#include "unit.h"
#include "comms.h"
#include "comms/hier.h"
#include "comms/watchdog.h"
#include "planner/cost.h"

// The i-th '|'-separated field of choices into out ("" past the last).
static void choice(const char *choices, int i, char *out, size_t n) {
    const char *p = choices;
    for (int k = 0; k < i && p; k++) p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
    size_t len = p ? strcspn(p, "|") : 0;
    snprintf(out, n, "%.*s", (int)len, p ? p : "");
}
static int fields(const char *choices) {
    int n = 1;
    for (const char *p = choices; *p; p++) n += *p == '|';
    return n;
}

static void test_choices(void) {
    char got[64] = "", why[160] = "";
    int ok = fields(ALLREDUCE_CHOICES) == ALLREDUCE_ALGOS + 1 && fields(ALLREDUCE_ALGO_NAMES) == ALLREDUCE_ALGOS;
    for (int a = 0; a < ALLREDUCE_ALGOS && ok; a++) {
        choice(ALLREDUCE_CHOICES, a, got, sizeof got);
        ok = strcmp(got, comm_algos[a].name) == 0;
        if (!ok) snprintf(why, sizeof why, "choice %d is \"%s\", row %d is \"%s\"", a, got, a, comm_algos[a].name);
    }
    choice(ALLREDUCE_CHOICES, ALLREDUCE_AUTO, got, sizeof got);
    if (ok && strcmp(got, "auto")) { ok = 0; snprintf(why, sizeof why, "choice %d is \"%s\", not auto", ALLREDUCE_AUTO, got); }
    if (!why[0] && !ok) snprintf(why, sizeof why, "%s: %d choices for %d rows", ALLREDUCE_CHOICES, fields(ALLREDUCE_CHOICES), ALLREDUCE_ALGOS);
    EXPECT("comms/algos: --allreduce's choices are the table's rows in order, then auto", ok, "%s", why);
    EXPECT("comms/algos: auto is no row (ALLREDUCE_AUTO == ALLREDUCE_ALGOS)", ALLREDUCE_AUTO == ALLREDUCE_ALGOS, "%d %d",
           ALLREDUCE_AUTO, ALLREDUCE_ALGOS);
}

static void test_rows(void) {
    int ok = 1, windows = 0;
    char why[160] = "";
    for (int a = 0; a < ALLREDUCE_ALGOS; a++) {
        const CommAlgo *r = &comm_algos[a];
        if (!r->name || !r->name[0] || !r->start || !r->advance) {
            ok = 0;
            snprintf(why, sizeof why, "row %d lacks its name, start or advance", a);
        }
        for (int b = 0; b < a && ok; b++)
            if (!strcmp(r->name, comm_algos[b].name)) { ok = 0; snprintf(why, sizeof why, "rows %d and %d are both %s", b, a, r->name); }
        windows += r->windows;
    }
    EXPECT("comms/algos: every row has a name of its own, a start and an advance", ok, "%s", why);
    EXPECT("comms/algos: MPI's row needs no windows (every fallback runs there)", !comm_algos[ALLREDUCE_MPI].windows &&
           comm_algos[ALLREDUCE_MPI].blocking, "windows %d", comm_algos[ALLREDUCE_MPI].windows);
    EXPECT("comms/algos: shm's row is the one whose buffers are windows", comm_algos[ALLREDUCE_SHM].windows && windows == 1,
           "%d rows need windows", windows);
}

// The planner's cost tables are sized by the table and keyed by its names: a profile written with a
// curve for every row reads back with each row's curve in place.
static void test_profile_keys(void) {
    Profile *pf = calloc(1, sizeof *pf), *back = calloc(1, sizeof *back);
    pf->calibrated = 1; pf->world = 2; pf->threads = 1; pf->hidden = 8; pf->inputs = 8; pf->classes = 2;
    pf->has_precision[PRECISION_FP32] = 1;
    for (int k = 0; k < LAYER_KINDS; k++)
        for (int p = 0; p < PASSES; p++) pf->layer[PRECISION_FP32][k][p] = (Curve){.n = 1, .x = {1}, .s = {1e-6}};
    pf->p2p = (Curve){.n = 1, .x = {8}, .s = {1e-6}};
    for (int a = 0; a < ALLREDUCE_ALGOS; a++) {
        pf->coll[a][COLL_ALLREDUCE][2] = (Curve){.n = 2, .x = {4096, 8192}, .s = {(a + 1) / 1024.0, (a + 1) / 512.0}};
        pf->overlap[a] = 0.25 * a;
    }
    char *text = cost_to_json(pf), err[256] = "";
    int read = cost_parse(text, "unit_comms", back, err, sizeof err);
    int ok = read == 0;
    for (int a = 0; a < ALLREDUCE_ALGOS && ok; a++)
        ok = back->coll[a][COLL_ALLREDUCE][2].n == 2 && back->coll[a][COLL_ALLREDUCE][2].s[1] == (a + 1) / 512.0 &&
             back->overlap[a] == 0.25 * a;
    EXPECT("comms/algos: a profile's collectives are keyed by the rows' names, one table per row", ok, "read %d: %s",
           read, err);
    free(text); free(pf); free(back);
}

// hier's layout rule (comm_hier_layout): N nodes of L ranks each, node after node, or 0.
static void test_hier_layout(void) {
    static const struct { int D, node_of[8], N, L; } cases[] = {
        {4, {0, 0, 1, 1}, 2, 2},          {6, {5, 5, 5, 2, 2, 2}, 2, 3}, {3, {0, 1, 2}, 3, 1},
        {4, {0, 0, 0, 0}, 1, 4},          {4, {0, 0, 0, 1}, 0, -1},      {4, {0, 1, 0, 1}, 0, -1},
        {6, {0, 0, 1, 1, 0, 0}, 0, -1},   {1, {7}, 1, 1},
    };
    int ok = 1;
    char why[160] = "";
    for (size_t i = 0; i < sizeof cases / sizeof *cases && ok; i++) {
        int L, N = comm_hier_layout(cases[i].node_of, cases[i].D, &L);
        ok = N == cases[i].N && (!N || L == cases[i].L);
        if (!ok) snprintf(why, sizeof why, "case %zu: %d nodes of %d, expected %d of %d", i, N, L, cases[i].N, cases[i].L);
    }
    EXPECT("comms/hier: the layout rule finds N nodes of L ranks, node after node, and refuses uneven or interleaved ones",
           ok, "%s", why);
}

// How a waiting rank waits (comms/watchdog.c's wd_wait_mode): active spins, yielding only where a node has
// more ranks than cores (crowded); passive sleeps; auto sleeps where a node is crowded, else spins;
// MICROPP_WAIT says spin, yield or sleep over any policy; anything else is refused (-1).
static void test_waits(void) {
    EXPECT("watchdog/active waits spin with a core per rank",
           wd_wait_mode(NULL, WAIT_ACTIVE, 0) == WAIT_SPIN && wd_wait_mode("", WAIT_ACTIVE, 0) == WAIT_SPIN,
           "not spin with a core per rank");
    EXPECT("watchdog/active waits yield with more ranks than cores", wd_wait_mode(NULL, WAIT_ACTIVE, 1) == WAIT_YIELD,
           "does not yield on a crowded node");
    EXPECT("watchdog/passive waits sleep whatever the count",
           wd_wait_mode(NULL, WAIT_PASSIVE, 0) == WAIT_SLEEP && wd_wait_mode(NULL, WAIT_PASSIVE, 1) == WAIT_SLEEP,
           "%d, %d", wd_wait_mode(NULL, WAIT_PASSIVE, 0), wd_wait_mode(NULL, WAIT_PASSIVE, 1));
    EXPECT("watchdog/auto sleeps on a crowded node, else spins",
           wd_wait_mode(NULL, WAIT_AUTO, 1) == WAIT_SLEEP && wd_wait_mode(NULL, WAIT_AUTO, 0) == WAIT_SPIN, "%d, %d",
           wd_wait_mode(NULL, WAIT_AUTO, 1), wd_wait_mode(NULL, WAIT_AUTO, 0));
    int y = wd_wait_mode("yield", WAIT_PASSIVE, 0), s = wd_wait_mode("spin", WAIT_AUTO, 1);
    EXPECT("watchdog/MICROPP_WAIT overrides the policy", y == WAIT_YIELD && s == WAIT_SPIN && wd_wait_mode("sleep", WAIT_ACTIVE, 0) == WAIT_SLEEP,
           "yield under passive: %d, spin under auto on a crowded node: %d", y, s);
    EXPECT("watchdog/MICROPP_WAIT refuses other words",
           wd_wait_mode("nap", WAIT_ACTIVE, 1) == -1 && wd_wait_mode("Yield", WAIT_ACTIVE, 1) == -1, "nap or Yield accepted");
    EXPECT("watchdog/the policy's words", wd_wait_policy_parse("active") == WAIT_ACTIVE &&
           wd_wait_policy_parse("passive") == WAIT_PASSIVE && wd_wait_policy_parse("auto") == WAIT_AUTO &&
           wd_wait_policy_parse("Passive") == -1 && wd_wait_policy_parse("") == -1 && wd_wait_policy_parse(NULL) == -1,
           "a word misread");
}

int main(void) {
    test_waits();
    test_choices();
    test_hier_layout();
    test_rows();
    test_profile_keys();
    return unit_failures ? 1 : 0;
}
