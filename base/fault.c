// base/fault.c: MICROPP_FAULT=rank:step:kind, the test-only switch that makes one rank fail on purpose
// (abort, NaN loss, a broken write, SIGKILL, a failed allocation, a wrong gradient, a stall), so the tests can
// show that every failure ends every rank with a clear message.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "base/fault.h"
#include "base/util.h"

static int fault_rank = -1, fault_kind = FAULT_NONE;
static int64_t fault_at = -1;
static const char *const fault_names[] = {"none", "abort", "nan", "io", "kill", "alloc", "grad", "nangrad", "stall",
                                          "late", "skip"};

void fault_init(void) {
    const char *v = getenv("MICROPP_FAULT");
    if (!v || !*v) return;
    int rank, n = -1;
    long long step;
    char kind[16];
    if (sscanf(v, "%d:%lld:%15[a-z]%n", &rank, &step, kind, &n) != 3 || n != (int)strlen(v) || rank < 0 || step < 0)
        user_error("MICROPP_FAULT='%s' is not RANK:STEP:KIND (e.g. 1:3:abort; kinds abort, nan, io, kill, alloc, grad, "
                   "nangrad, stall)",
                   v);
    for (int k = FAULT_ABORT; k <= FAULT_SKIP; k++)
        if (!strcmp(kind, fault_names[k])) fault_kind = k;
    if (fault_kind == FAULT_NONE)
        user_error("MICROPP_FAULT='%s': unknown kind '%s' (use abort, nan, io, kill, alloc, grad, nangrad, stall, "
                   "late or skip)",
                   v, kind);
    if (step == 0 && fault_kind != FAULT_STALL)
        user_error("MICROPP_FAULT='%s': step 0 (the set-up) takes only the kind stall: use a step from 1", v);
    fault_rank = rank;
    fault_at = step;
}

int fault_due(int kind, int64_t step) { return fault_kind == kind && fault_rank == g_rank && fault_at == step; }
int fault_due_any(int kind, int64_t step) { return fault_kind == kind && fault_at == step; }

void fault_stall(int64_t step, const char *where) {
    if (!fault_due(FAULT_STALL, step)) return;
    // a stuck disk, a swapped-out node: alive, silent, forever
    if (step)
        fprintf(stderr, "[rank %d] injected fault (MICROPP_FAULT): stalling in step %lld %s\n", g_rank, (long long)step,
                where);
    else fprintf(stderr, "[rank %d] injected fault (MICROPP_FAULT): stalling %s\n", g_rank, where);
    fflush(stderr);
    for (;;) pause();
}

void fault_step(int64_t step) {
    if (fault_due(FAULT_LATE, step)) sleep(2);
    if (fault_due(FAULT_ABORT, step)) fatal("injected fault (MICROPP_FAULT): abort at step %lld", (long long)step);
    if (fault_due(FAULT_KILL, step)) {
        fprintf(stderr, "[rank %d] injected fault (MICROPP_FAULT): SIGKILL at step %lld\n", g_rank, (long long)step);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (fault_due(FAULT_ALLOC, step)) {
        // A real allocation that cannot succeed, through the same check every allocation uses.
        void *p = xmalloc((size_t)1 << 62);
        free(p);
    }
}

