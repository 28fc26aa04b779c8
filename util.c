// util.c: the two ways a run ends early (fatal: a bug or a failing call; user_error: bad input)
// and the clock. It knows nothing of MPI: comms.c installs the hooks that reach the other ranks,
// so ops, data and config, which report errors through here, sit below the wire.
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util.h"

int g_rank = 0;
int g_quiet_errors = 0;
static ExitHooks hooks;  // all NULL until comms_init: a single process with no MPI

void util_set_exit_hooks(const ExitHooks *h) { hooks = *h; }

static int others_running(void) { return hooks.running && hooks.running(); }

double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] %s:%d: %s\n", g_rank, file, line, msg);
    fflush(stderr);
    // mpiexec (Hydra) forwards our stderr through its proxy, which the abort tears down: give it a
    // moment to pass the message on, or the job may die without saying why (seen once in the tests).
    if (others_running() && hooks.world_size() > 1) usleep(200 * 1000);
    if (others_running()) hooks.abort_job();
    exit(1);
}

void user_error(const char *fmt, ...) {
    if (!(g_quiet_errors && g_rank != 0)) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "micropp: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        fflush(stderr);
    }
    if (others_running()) {
        // Every rank reached this same decision; finalize together. Should a rank not (a bug),
        // the alarm ends this one rather than leave it waiting.
        alarm(10);
        hooks.finalize_quick();
    }
    exit(2);
}

void finish(int code) {
    fflush(stdout);
    if (hooks.finalize) hooks.finalize(code);
    exit(code);
}

void agree_on_error(const char *err) {
    if (others_running()) hooks.agree(err ? err : "");
    else if (err && *err) user_error("%s", err);
}
