// slurm.c: micropp under Slurm (slurm.h): read from the environment srun and the job give every task;
// the refusal of a launch whose tasks MPI sees as singletons; the guard process that ends a job step
// whose rank died without a word; the job's line in the header and its JSON object.
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "comms/slurm.h"
#include "base/util.h"

// How long the guard waits, once its rank is gone, before it acts: when Slurm itself tears the step
// down (scancel, a time limit, a requeue, another rank's MPI_Abort) it kills the guard in the same
// sweep, and nothing is said twice.
#define GUARD_GRACE_S 1

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}
static int env_int(const char *name, int dflt) {  // a positive int, else dflt (atoi's overflow was undefined)
    const char *s = env_or(name, "");
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return end != s && !*end && !errno && v > 0 && v <= INT_MAX ? (int)v : dflt;
}

// mpiexec (MPICH's Hydra) started this process: its proxy sets these (inside a job too, where Hydra
// starts its proxies through srun, and the ranks see the proxies' step).
static int started_by_mpiexec(void) { return getenv("HYDI_CONTROL_FD") || getenv("MPI_LOCALNRANKS"); }
// srun started this process as a task of a job step (directly, or through a script srun ran).
static int started_by_srun(void) { return getenv("SLURM_JOB_ID") && getenv("SLURM_STEP_ID") && !started_by_mpiexec(); }
static int step_tasks(void) { return env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1)); }

// ---- the guard ----

static int guard_fd = -1;  // this process's end of the socket pair; the guard reads the other

void slurm_guard_release(void) {
    if (guard_fd < 0) return;
    int fd = guard_fd;
    guard_fd = -1;
    ssize_t k = send(fd, "B", 1, MSG_NOSIGNAL);  // (MSG_NOSIGNAL: a guard already gone is no SIGPIPE)
    (void)k;
    close(fd);
}

void slurm_guard_aborting(void) {
    if (guard_fd < 0) return;
    ssize_t k = send(guard_fd, "A", 1, MSG_NOSIGNAL);  // the socket stays open: its end is still watched
    (void)k;
}

// What the guard says, written before the fork (the child makes only async-signal-safe calls).
typedef struct { char scancel[512], step[64], killed[600], aborted[600], no_scancel[600]; } GuardWords;

// The guard itself (a child forked from a process that may run threads: only async-signal-safe calls
// until exec). Waits for its rank's end: released ('B'), it leaves quietly; otherwise it waits
// GUARD_GRACE_S, says why in one line and becomes scancel of the step. 'A' (MPI_Abort under way,
// having said why) changes only the line, for an abort that did not end the step itself.
static _Noreturn void guard(int fd, const GuardWords *w) {
    // Slurm ends a step (scancel, a time limit, a requeue) by signalling every process of it, SIGTERM or
    // SIGKILL: the guard goes at once, whatever its rank then does, and says nothing.
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    if (fd != 3) { dup2(fd, 3); close(fd); }
    if (close_range(4, ~0u, 0) != 0)
        for (int f = 4; f < 1024; f++) close(f);  // PMI's socket, MPI's, stdout
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) { dup2(null, 0); dup2(null, 1); if (null > 2 && null != 3) close(null); }
    prctl(PR_SET_NAME, "micropp-guard", 0, 0, 0);
    int aborting = 0;
    for (;;) {
        char c = 0;
        ssize_t k = read(3, &c, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k == 1 && c == 'B') _exit(0);  // released: its rank ended on purpose
        if (k == 1) { aborting = 1; continue; }
        break;  // the end of the socket: the rank is gone
    }
    struct timespec grace = {GUARD_GRACE_S, 0};
    while (nanosleep(&grace, &grace) != 0 && errno == EINTR) {}
    const char *line = !w->scancel[0] ? w->no_scancel : aborting ? w->aborted : w->killed;
    ssize_t k = write(2, line, strlen(line));
    (void)k;
    if (w->scancel[0]) execl(w->scancel, "scancel", w->step, (char *)NULL);
    _exit(1);
}

// scancel's path on PATH ("" when there is none), found before the fork.
static void find_scancel(char *b, size_t n) {
    const char *path = env_or("PATH", "/usr/bin:/bin");
    b[0] = 0;
    while (*path) {
        size_t l = strcspn(path, ":");
        snprintf(b, n, "%.*s/scancel", (int)l, path);
        if (l && access(b, X_OK) == 0) return;
        path += l + (path[l] ? 1 : 0);
    }
    b[0] = 0;
}

static void guard_words(GuardWords *w) {
    snprintf(w->step, sizeof w->step, "%s.%s", env_or("SLURM_JOB_ID", "?"), env_or("SLURM_STEP_ID", "?"));
    char who[200];
    snprintf(who, sizeof who, "micropp: rank %s (task %s of job step %s on node %s, pid %d)",
             env_or("SLURM_PROCID", "?"), env_or("SLURM_PROCID", "?"), w->step, env_or("SLURMD_NODENAME", "?"),
             (int)getpid());
    snprintf(w->killed, sizeof w->killed,
             "%s ended without a word (killed by a signal, or crashed): its guard ends the job step with "
             "'scancel %s' so that no other rank waits for it (as srun --kill-on-bad-exit=1 would)\n",
             who, w->step);
    snprintf(w->aborted, sizeof w->aborted,
             "%s called MPI_Abort, which had not ended the job step %d s later: its guard ends it with 'scancel %s'\n",
             who, GUARD_GRACE_S, w->step);
    snprintf(w->no_scancel, sizeof w->no_scancel,
             "%s ended, and there is no scancel on PATH to end the job step: end it with 'scancel %s', "
             "or start it with srun --kill-on-bad-exit=1\n",
             who, w->step);
    find_scancel(w->scancel, sizeof w->scancel);
}

void slurm_guard_start(void) {
    if (!started_by_srun() || step_tasks() < 2) return;
    static GuardWords w;  // (static: the child reads its copy after the fork)
    guard_words(&w);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;  // no guard: the watchdog remains
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) { close(sv[0]); guard(sv[1], &w); }
    close(sv[1]);
    if (pid < 0) { close(sv[0]); return; }
    guard_fd = sv[0];
    atexit(slurm_guard_release);
}

// ---- the launch ----

void slurm_check_launch(const char *cmd, int world_size) {
    int tasks = step_tasks();
    if (world_size != 1 || tasks < 2 || !started_by_srun()) return;
    g_rank = env_int("SLURM_PROCID", 0) > 0 ? 1 : 0;  // task 0 speaks for every task
    g_quiet_errors = 1;
    user_error("%s: srun started %d tasks, but MPI sees each as a world of 1 rank (Slurm's --mpi=none, its "
               "default unless slurm.conf sets MpiDefault): start it with 'srun --mpi=pmi2 ...' (or export "
               "SLURM_MPI_TYPE=pmi2)",
               cmd && *cmd ? cmd : "micropp", tasks);
}

// ---- the job, for the header ----

typedef struct { const char *job, *name, *step, *launcher, *nodes; int tasks, num_nodes, restarts; } Job;

static int job_of_env(Job *j) {
    j->job = getenv("SLURM_JOB_ID");
    if (!j->job) return 0;
    int srun = started_by_srun(), mpiexec = started_by_mpiexec();
    j->name = env_or("SLURM_JOB_NAME", "?");
    j->step = srun ? env_or("SLURM_STEP_ID", "?") : NULL;
    j->launcher = srun ? "srun" : mpiexec ? "mpiexec" : "none";
    // srun: the step's nodes; mpiexec: those of its proxies' step (the nodes holding ranks); else the job's
    int step_nodes = (srun || mpiexec) && getenv("SLURM_STEP_NODELIST");
    j->nodes = env_or(step_nodes ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST", "?");
    j->num_nodes = env_int(step_nodes ? "SLURM_STEP_NUM_NODES" : "SLURM_JOB_NUM_NODES", 1);
    j->tasks = srun ? step_tasks() : 0;
    j->restarts = env_int("SLURM_RESTART_COUNT", 0);
    return 1;
}

int slurm_describe(char *b, size_t n) {
    Job j;
    b[0] = 0;
    if (!job_of_env(&j)) return 0;
    const char *nodes = j.num_nodes == 1 ? "node" : "nodes";
    char launch[128], restart[64] = "";
    if (j.step) snprintf(launch, sizeof launch, " step %s by srun | %d tasks on", j.step, j.tasks);
    else if (!strcmp(j.launcher, "mpiexec")) snprintf(launch, sizeof launch, " | ranks started by mpiexec on");
    else snprintf(launch, sizeof launch, " | on");
    if (j.restarts) snprintf(restart, sizeof restart, " | restart %d (requeued)", j.restarts);
    // (a node list too long for b is cut short: snprintf never writes past n)
    snprintf(b, n, "slurm job %s (%s)%s %d %s %s%s", j.job, j.name, launch, j.num_nodes, nodes, j.nodes, restart);
    return 1;
}

cJSON *slurm_json(void) {
    Job j;
    if (!job_of_env(&j)) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "job_id", j.job);
    cJSON_AddStringToObject(o, "job_name", j.name);
    if (j.step) cJSON_AddStringToObject(o, "step_id", j.step); else cJSON_AddNullToObject(o, "step_id");
    cJSON_AddStringToObject(o, "launcher", j.launcher);
    if (j.tasks) cJSON_AddNumberToObject(o, "tasks", j.tasks);
    cJSON_AddStringToObject(o, "nodes", j.nodes);
    cJSON_AddNumberToObject(o, "num_nodes", j.num_nodes);
    cJSON_AddNumberToObject(o, "restart_count", j.restarts);
    return o;
}
