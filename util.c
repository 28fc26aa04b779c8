// util.c: the two ways a run ends early (fatal: a bug or a failing call; user_error: bad input)
// and the clock. It knows nothing of MPI: comms.c installs the hooks that reach the other ranks,
// so ops, data and config, which report errors through here, sit below the wire.
#include <errno.h>
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

// One line (rank 0 speaks for all when g_quiet_errors), then every rank, having reached this same
// decision, finalizes with the others and exits with code.
static _Noreturn void end_together(int code, const char *msg) {
    if (!(g_quiet_errors && g_rank != 0)) {
        fprintf(stderr, "micropp: %s\n", msg);
        fflush(stderr);
    }
    if (others_running()) {
        // Should a rank not have reached it (a bug), the alarm ends this one rather than leave it waiting.
        alarm(10);
        hooks.finalize_quick();
    }
    exit(code);
}

void user_error(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    end_together(2, msg);
}

void run_failed(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    end_together(1, msg);
}

int stdout_closed_ok(void) {
    errno = 0;
    int failed_now = fflush(stdout) != 0, e = errno;
    if (!failed_now && !ferror(stdout)) return 1;
    fprintf(stderr, "micropp: writing standard output failed%s%s: the output is incomplete (a full disk, or a closed pipe?)\n",
            failed_now && e ? ": " : "", failed_now && e ? strerror(e) : "");
    return 0;
}

void finish(int code) {
    int ok = stdout_closed_ok();
    if (hooks.finalize) hooks.finalize(ok ? code : 1);
    exit(ok ? code : 1);
}

void single_process(const char *cmd) {
    const char *size = getenv("PMI_SIZE"), *rank = getenv("PMI_RANK");  // set by mpiexec (Hydra, PMI)
    if (!size || atoi(size) <= 1) return;
    g_rank = rank ? atoi(rank) : 0;
    g_quiet_errors = 1;  // rank 0 speaks for all
    user_error("%s runs in one process, and mpiexec started %d: run it without mpiexec", cmd, atoi(size));
}

void agree_on_error(const char *err) {
    if (others_running()) hooks.agree(err ? err : "", 2);
    else if (err && *err) user_error("%s", err);
}

void agree_on_failure(const char *err) {
    if (others_running()) hooks.agree(err ? err : "", 1);
    else if (err && *err) run_failed("%s", err);
}
