// watchdog.c: the bound on every wait (see watchdog.h). A wait that runs out prints one line naming
// the rank, the wait, the action and the peer (for a collective: the ranks that have not arrived),
// tells the other ranks over a control channel (each answers and prints where it stood), and ends
// the job; a thread backs up the MPI calls no poll loop wraps,
// ends the job on SIGINT/SIGTERM sent to one rank, and bounds MPI_Finalize.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "base/util.h"
#include "comms/slurm.h"
#include "comms/watchdog.h"

void mpi_check_at(int err, const char *what, const char *file, int line) {
    if (err == MPI_SUCCESS) return;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, s, &len);
    fatal_at(file, line, "%s failed: %s", what, s);
}

WdAction wd_current, wd_last;
unsigned wd_calls;
const char *wd_call;

static double timeout_s = WD_DEFAULT_TIMEOUT;
static MPI_Comm ctl = MPI_COMM_NULL;   // the control channel: a notice is the firing rank's number
static MPI_Request ctl_req = MPI_REQUEST_NULL;
static int notice = -1;
static volatile sig_atomic_t sig_pending;  // a signal sent to this rank alone: the thread ends the job
#define FINALIZE_GRACE_S 5.0  // how long MPI_Finalize may take once the results are out
static volatile double finalize_deadline;  // 0: not finalizing
static volatile int finalize_code;
static pid_t main_tid;  // the thread that calls MPI (MPI_THREAD_FUNNELED)
static int world_size = 1;
static int with_mpi;  // wd_init ran: a job of MPI ranks (else wd_init_local's one process, or none)

void wd_set_timeout(double seconds) { timeout_s = seconds; }
double wd_timeout(void) { return timeout_s; }

// "RECV_ACT of micro-batch 2 (stage 1, virtual stage 1, chunk 0) in step 3"
static void describe(const WdAction *a, char *b, size_t n, const char *none) {
    int k = 0;
    if (!a->what) k = snprintf(b, n, "%s", none);
    else if (a->stage >= 0)
        k = snprintf(b, n, "%s of micro-batch %d (stage %d, virtual stage %d, chunk %d)", a->what, a->mb, a->stage,
                     a->vstage, a->chunk);
    else k = snprintf(b, n, "%s", a->what);
    if (a->what && a->step > 0 && k > 0 && (size_t)k < n) snprintf(b + k, n - (size_t)k, " in step %d", a->step);
    if (a->what && a->step < 0 && k > 0 && (size_t)k < n) snprintf(b + k, n - (size_t)k, " in evaluation");
}

static void where(char *b, size_t n) {
    char cur[200], last[200];
    describe(&wd_current, cur, sizeof cur, "no action of the step loop (set-up or shutdown)");
    describe(&wd_last, last, sizeof last, "none yet");
    snprintf(b, n, "in %s; last completed: %s", cur, last);
}

static void peer_name(int peer, const char *what, char *b, size_t n) {
    if (peer >= 0) snprintf(b, n, "rank %d (%s)", peer, what);
    else if (peer == WD_LOCAL) snprintf(b, n, "this rank's %s", what);
    else snprintf(b, n, "the other ranks (%s)", what);
}

static void (*at_end)(void);
void wd_at_end(void (*fn)(void)) { at_end = fn; }
// The hook (the NCCL transport's abort) can itself block: ncclCommAbort waits for the device, and a
// kernel of another communicator may spin on a peer that is gone (NCCL issues 829, 549). So the alarm
// is set FIRST: should the hook not return within WD_AT_END_S, SIGALRM ends this rank (its default
// action), and mpiexec or the Slurm guard the rest of the job. The caller re-arms it for what follows.
#define WD_AT_END_S 5
static void run_at_end(void) {
    void (*fn)(void) = at_end;
    at_end = NULL;  // once
    alarm(WD_AT_END_S);
    if (fn) fn();
    alarm(0);
}

// ---- the control channel: a rank whose wait ran out sends its number (TAG_NOTICE) to every other
// rank; each, at its next poll, answers with where it waits (TAG_ANSWER), prints where it stood and
// waits for the end. The firing rank reads the answers to name the ranks a collective lacks.
enum { TAG_NOTICE = 0, TAG_ANSWER = 1 };
typedef struct { int peer; char what[96]; char cur[200]; } Answer;  // peer -1: in a collective
static Answer answer;
static int answer_ready;

// A notice, if one came: answer it and listen for the next. Returns the notifying rank, or -1.
// (Only the paths that end this rank call it, so the answer is written once and stays as it is.)
static int take_notice(const WdSpin *s) {
    int got = 0;
    if (ctl_req == MPI_REQUEST_NULL || MPI_Test(&ctl_req, &got, MPI_STATUS_IGNORE) != MPI_SUCCESS || !got) return -1;
    int from = notice;
    if (!answer_ready) {
        answer.peer = s->peer;
        snprintf(answer.what, sizeof answer.what, "%s", s->what);
        describe(&wd_current, answer.cur, sizeof answer.cur, "no action of the step loop (set-up or shutdown)");
        answer_ready = 1;
    }
    MPI_Request q;
    if (MPI_Isend(&answer, (int)sizeof answer, MPI_BYTE, from, TAG_ANSWER, ctl, &q) == MPI_SUCCESS)
        MPI_Request_free(&q);
    MPI_Irecv(&notice, 1, MPI_INT, MPI_ANY_SOURCE, TAG_NOTICE, ctl, &ctl_req);
    return from;
}

// Another rank's wait ran out: say where this one stood, then wait for that rank's MPI_Abort (still
// answering any other rank that fires meanwhile).
static void on_notice(int from, double waited, const WdSpin *s) {
    char w[480], p[1200];
    where(w, sizeof w);
    peer_name(s->peer, s->what, p, sizeof p);
    fprintf(stderr, "[rank %d] ended by rank %d's watchdog: waiting %.1f s for %s %s\n", g_rank, from, waited, p, w);
    fflush(stderr);
    run_at_end();
    for (double t0 = now_sec(); now_sec() - t0 < 5.0;) {  // the firing rank aborts the job within about 1 s
        take_notice(s);
        usleep(10 * 1000);
    }
    slurm_guard_release();
    _exit(1);
}

// "rank 3" or "ranks 1-3,5" (r ascending).
static void rank_list(const int *r, int n, char *b, size_t bn) {
    size_t k = (size_t)snprintf(b, bn, "%s ", n == 1 ? "rank" : "ranks");
    for (int i = 0; i < n && k < bn; i++) {
        int e = i;
        while (e + 1 < n && r[e + 1] == r[e] + 1) e++;
        k += (size_t)snprintf(b + k, bn - k, "%s%d", i ? "," : "", r[i]);
        if (e > i && k < bn) k += (size_t)snprintf(b + k, bn - k, "-%d", r[e]);
        i = e;
    }
}

// The world ranks of the collective's communicator (all of them when it is not known).
static int members(const WdSpin *s, int size, int *out) {
    int n = size;
    MPI_Group g, w;
    if (!s->comm || MPI_Comm_group(*s->comm, &g) != MPI_SUCCESS) {
        for (int r = 0; r < size; r++) out[r] = r;
        return size;
    }
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    MPI_Group_size(g, &n);
    int *in = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; in && i < n; i++) in[i] = i;
    if (in) MPI_Group_translate_ranks(g, n, in, w, out);
    free(in);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    return in ? n : 0;
}

// A collective ran out: which of its ranks have not arrived. Every rank was told (fire); the ones
// polling answer with where they wait, and those that do not within a second are silent.
// Appends "; not arrived: ..." to b.
static void arrivals(const WdSpin *s, int size, char *b, size_t n) {
    int *who = calloc((size_t)size, sizeof(int)), *silent = calloc((size_t)size, sizeof(int));
    Answer *ans = calloc((size_t)size, sizeof(Answer));
    MPI_Request *rq = calloc((size_t)size, sizeof(MPI_Request));
    if (!who || !silent || !ans || !rq) { free(who); free(silent); free(ans); free(rq); return; }
    int m = members(s, size, who), pending = 0, n_silent = 0, shown = 0, others = 0;
    for (int i = 0; i < m; i++) {
        rq[i] = MPI_REQUEST_NULL;
        if (who[i] != g_rank &&
            MPI_Irecv(&ans[i], (int)sizeof(Answer), MPI_BYTE, who[i], TAG_ANSWER, ctl, &rq[i]) == MPI_SUCCESS)
            pending++;
    }
    char cur[200];
    describe(&wd_current, cur, sizeof cur, "no action of the step loop (set-up or shutdown)");
    for (double t0 = now_sec(); pending && now_sec() - t0 < 1.0;) {
        for (int i = 0; i < m; i++) {  // (one by one: MPI_Testall trips a gcc 12 false positive)
            int done = 0;
            if (rq[i] != MPI_REQUEST_NULL && MPI_Test(&rq[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                pending--;
        }
        take_notice(s);  // a rank that fired at the same moment asks this one too
        usleep(5 * 1000);
    }
    size_t k = strlen(b);
    for (int i = 0; i < m; i++) {
        if (who[i] == g_rank) continue;
        if (rq[i] != MPI_REQUEST_NULL) { silent[n_silent++] = who[i]; continue; }
        Answer *a = &ans[i];
        a->what[sizeof a->what - 1] = a->cur[sizeof a->cur - 1] = 0;
        // here too
        if (a->peer < 0 && !strncmp(a->what, s->what, sizeof a->what - 1) && !strcmp(a->cur, cur)) continue;
        if (shown == 3) { others++; continue; }
        char p[160];
        peer_name(a->peer, a->what, p, sizeof p);
        k += (size_t)snprintf(b + k, k < n ? n - k : 0, "%s rank %d (waiting for %s in %s)",
                              shown++ ? ";" : "; not arrived:", who[i], p, a->cur);
    }
    if (others && k < n) k += (size_t)snprintf(b + k, n - k, "; and %d more elsewhere", others);
    if (n_silent && k < n) {
        char list[120];
        rank_list(silent, n_silent, list, sizeof list);
        k += (size_t)snprintf(b + k, n - k,
                              "%s %s (silent for 1 s: stopped, busy outside MPI, or gone; look at %s host)",
                              shown ? ";" : "; not arrived:", list, n_silent == 1 ? "its" : "their");
    }
    if (!shown && !n_silent && k < n)
        snprintf(b + k, n - k, "; every rank of it waits in it too (MPI does not complete it)");
    for (int i = 0; i < m; i++) if (rq[i] != MPI_REQUEST_NULL) { MPI_Cancel(&rq[i]); MPI_Request_free(&rq[i]); }
    free(who); free(silent); free(ans); free(rq);
}

static void fire(double waited, const WdSpin *s) {
    char line[3072], w[480], p[1200];
    where(w, sizeof w);
    peer_name(s->peer, s->what, p, sizeof p);
    snprintf(line, sizeof line, "[rank %d] watchdog: waited %.1f s (--timeout %g) for %s %s", g_rank, waited, timeout_s,
             p, w);
    if (!with_mpi) {  // one process (selftest): nobody to tell
        fprintf(stderr, "%s\n", line);
        fflush(stderr);
        run_at_end();
        _exit(1);
    }
    int size = 1, me = g_rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Request *reqs = calloc((size_t)size, sizeof *reqs);
    for (int r = 0; reqs && r < size; r++) {
        reqs[r] = MPI_REQUEST_NULL;
        if (r != me && ctl != MPI_COMM_NULL) MPI_Isend(&me, 1, MPI_INT, r, TAG_NOTICE, ctl, &reqs[r]);
    }
    if (s->peer == -1 && ctl != MPI_COMM_NULL) arrivals(s, size, line, sizeof line);  // (takes up to a second)
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    slurm_guard_aborting();  // (said why: should the hook's alarm end this rank, the guard says so)
    run_at_end();
    // A second for the others to print where they stood (they do as soon as they poll), then the end.
    for (double t0 = now_sec(); now_sec() - t0 < (s->peer == -1 ? 0.3 : 1.0);) {
        for (int r = 0; reqs && r < size; r++) {  // (one by one: MPI_Testall trips a gcc 12 false positive)
            int done;
            if (reqs[r] != MPI_REQUEST_NULL) MPI_Test(&reqs[r], &done, MPI_STATUS_IGNORE);
        }
        take_notice(s);
        usleep(10 * 1000);
    }
    alarm(3);  // MPI_Abort goes through mpiexec, which a dead link may keep from answering
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

// One turn of a wait: a notice from another rank, or our own bound running out.
static void check(const WdSpin *s) {
    double waited = now_sec() - s->t0;
    int from = take_notice(s);
    if (from >= 0) on_notice(from, waited, s);
    if (timeout_s > 0 && waited > timeout_s) fire(waited, s);
}

static int spin_yields;  // wd_share_cores: WAIT_SPIN, WAIT_YIELD or WAIT_SLEEP
static int wait_policy = WAIT_ACTIVE;  // --wait-policy, else MICROPP_WAIT_POLICY, else active
static int wait_policy_set;            // wd_set_wait_policy ran (--wait-policy or its config key)
static int crowded;                    // wd_share_cores: some node has more ranks than cores
static int forced;                     // MICROPP_WAIT is set: its word over any policy
static long ranks_seen, cores_seen;    // this rank's node: its ranks, the cores this process may run on

int wd_wait_mode(const char *setting, int policy, int crowded_node) {
    if (!setting || !*setting) {
        if (policy == WAIT_PASSIVE || (policy == WAIT_AUTO && crowded_node)) return WAIT_SLEEP;
        return crowded_node ? WAIT_YIELD : WAIT_SPIN;  // active: today's choice
    }
    if (strcmp(setting, "yield") == 0) return WAIT_YIELD;
    if (strcmp(setting, "sleep") == 0) return WAIT_SLEEP;
    return strcmp(setting, "spin") == 0 ? WAIT_SPIN : -1;
}

int wd_wait_policy_parse(const char *word) {
    const char *names[] = {"active", "passive", "auto"};
    for (int i = 0; word && i < 3; i++)
        if (strcmp(word, names[i]) == 0) return i;
    return -1;
}

int wd_crowded(long ranks_here) {
    cpu_set_t set;
    long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    ranks_seen = ranks_here, cores_seen = cores;
    return cores > 0 && ranks_here > cores;
}

void wd_set_wait_policy(int policy) {
    wait_policy = policy;
    wait_policy_set = 1;
    wd_share_cores(crowded);
}

void wd_share_cores(int crowded_node) {
    const char *setting = getenv("MICROPP_WAIT"), *given = getenv("MICROPP_WAIT_POLICY");
    crowded = crowded_node;
    forced = setting && *setting;
    if (!wait_policy_set && given && *given) {
        wait_policy = wd_wait_policy_parse(given);
        if (wait_policy < 0)
            user_error("MICROPP_WAIT_POLICY=%s: expected active, passive or auto (or leave it unset: active)", given);
    }
    spin_yields = wd_wait_mode(setting, wait_policy, crowded_node);
    if (spin_yields < 0)
        user_error("MICROPP_WAIT=%s: expected spin, yield or sleep (or leave it unset: yield when a node has more "
                   "ranks than cores)", setting);
}

int wd_waits(WdWaits *w) {
    w->policy = wait_policy;
    w->mode = spin_yields;
    w->crowded = crowded;
    w->ranks = ranks_seen;
    w->cores = cores_seen;
    const char *env = getenv("MICROPP_WAIT"), *env_policy = getenv("MICROPP_WAIT_POLICY");
    w->override = env && *env ? env : NULL;
    w->from = wait_policy_set ? WAITS_FROM_OPTION : env_policy && *env_policy ? WAITS_FROM_ENV : WAITS_DEFAULT;
    return w->from != WAITS_DEFAULT || w->override;
}

void wd_spin(WdSpin *s) {
    // a GPU's wait keeps the active policy's waits (it sleeps only where MICROPP_WAIT says so)
    int mode = s->device && spin_yields == WAIT_SLEEP && !forced ? (crowded ? WAIT_YIELD : WAIT_SPIN) : spin_yields;
    if (mode == WAIT_SLEEP && s->turns >= 16) usleep(50);  // sleep: a wait past its first turns leaves the core
    else if (mode) sched_yield();
    if (s->turns++ == 0) { s->t0 = now_sec(); return; }
    if ((s->turns & 63) == 0) check(s);  // a clock read and a test per 64 turns
}

void wd_poll(int (*ready)(void *ctx), void *ctx, WdSpin s) {
    while (!ready(ctx)) wd_spin(&s);
}

static void wait_for(MPI_Request *req, MPI_Status *st, WdSpin s) {
    const char *what = s.what;
    for (;;) {
        int done = 0;
        wd_call_enter("MPI_Test");
        int err = MPI_Test(req, &done, st ? st : MPI_STATUS_IGNORE);
        wd_call_leave();
        if (err != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(err, msg, &len);
            fatal("waiting for %s: %s", what, msg);
        }
        if (done) return;
        // Spins as MPI_Wait does, yielding only where wd_share_cores says: with a core per rank, a yield
        // on a loaded machine can cost a whole time slice per message (measured: a 0.9 ms pipeline step
        // became 8 ms).
        wd_spin(&s);
    }
}

void wd_wait(MPI_Request *req, MPI_Status *st, int peer, const char *what) {
    wait_for(req, st, (WdSpin){.peer = peer, .what = what});
}

void wd_wait_all(MPI_Request *req, MPI_Comm comm, const char *what) {
    wait_for(req, NULL, (WdSpin){.peer = -1, .what = what, .comm = &comm});
}

// MPICH 4.0.2's MPI_Finalize over TCP can deadlock: a rank spins in UCX's disconnect, waiting for a
// peer that already sleeps in the PMI barrier (finalize.c removes that cause; this is the backstop for
// any other). Should the sleeper leave first, the spinner then enters the barrier and mpiexec fails
// answering the departed one's proxy (exit 255, after the results are out). So past the deadline a
// spinning rank (state R) leaves at once, and a sleeping one 2 s later, each saying so.
static int main_thread_running(void) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)main_tid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');  // "tid (comm) S ..."
    return p && p[1] == ' ' && p[2] == 'R';
}

static void finalize_overdue(double now) {
    if (!main_thread_running() && now <= finalize_deadline + 2.0) return;
    fprintf(stderr,
            "[rank %d] micropp: MPI_Finalize had not returned %.0f s after the results were out; this rank leaves "
            "without it (exit %d)\n",
            g_rank, now - finalize_deadline + FINALIZE_GRACE_S, finalize_code);
    fflush(stderr);
    slurm_guard_release();
    _exit(finalize_code);
}

// ---- the backstop thread: single MPI calls that block, signals to one rank, MPI_Finalize ----

// A signal's ending, should MPI_Abort not return within its 3 s (a requeue's SIGTERM reaches every task
// of a Slurm step, which is torn down meanwhile): the rank leaves with the signal's own status, where
// SIGALRM's default left "task 0: Alarm clock" in the job's log for an ending that was asked for.
static void exit_as_pending(int sig) {
    (void)sig;
    slurm_guard_release();
    _exit(128 + sig_pending);
}

static void *watch(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);  // signals are the main thread's
    unsigned seen = 0;
    double since = now_sec();
    for (;;) {
        usleep(100 * 1000);
        double now = now_sec();
        if (sig_pending) {
            slurm_guard_aborting();
            signal(SIGALRM, exit_as_pending);
            alarm(3);
            MPI_Abort(MPI_COMM_WORLD, 128 + sig_pending);
        }
        if (finalize_deadline > 0 && now > finalize_deadline) finalize_overdue(now);
        unsigned calls = __atomic_load_n(&wd_calls, __ATOMIC_RELAXED);
        const char *call = __atomic_load_n(&wd_call, __ATOMIC_RELAXED);
        if (!call || calls != seen) { seen = calls; since = now; continue; }
        // The poll loops fire at --timeout themselves; this is for a call that blocks inside MPI.
        if (timeout_s > 0 && finalize_deadline == 0 && now - since > timeout_s + 2) {
            char w[480];
            where(w, sizeof w);
            fprintf(stderr, "[rank %d] watchdog: waited %.1f s (--timeout %g) inside %s %s\n", g_rank, now - since,
                    timeout_s, call, w);
            fflush(stderr);
            usleep(200 * 1000);
            slurm_guard_aborting();
            alarm(3);
            if (with_mpi) MPI_Abort(MPI_COMM_WORLD, 1);
            _exit(1);
        }
    }
    return NULL;
}

// SIGINT/SIGTERM. Sent by mpiexec (our parent, the Hydra proxy, forwards it to every rank) or by the
// terminal (the kernel, si_pid 0): every rank has it, rank 0 speaks, and its thread ends the job
// through MPI_Abort(128+N); the others wait for that. Sent to this rank alone: it speaks, and does
// the same. (Ranks that left at once with 128+N lost rank 0's line on a loaded machine: the first to
// exit makes Hydra's proxy SIGKILL the rest, rank 0 too when it had not yet run this handler, and a
// killed rank's status could leak into mpiexec's exit code as 9.)
static void put(char **p, const char *s) { while (*s) *(*p)++ = *s++; }
static void put_int(char **p, int v) {
    char d[12];
    int n = 0;
    do d[n++] = (char)('0' + v % 10); while ((v /= 10) > 0);
    while (n) *(*p)++ = d[--n];
}
static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    int everyone = si->si_pid == 0 || si->si_pid == getppid();
    if (!everyone || g_rank == 0) {
        char line[128], *p = line;
        put(&p, "micropp: interrupted by signal "); put_int(&p, sig);
        put(&p, " on rank "); put_int(&p, g_rank);
        put(&p, everyone ? " (sent to every rank)\n" : "\n");
        ssize_t w = write(2, line, (size_t)(p - line));
        (void)w;
    }
    // One process: no job to end (MPI_Abort from the thread crashed the computing main thread: exit 139).
    if (finalize_deadline > 0 || world_size == 1) { slurm_guard_release(); _exit(128 + sig); }
    if (!everyone || g_rank == 0) sig_pending = sig;
}

static void start_backstop(void) {
    main_tid = (pid_t)syscall(SYS_gettid);
    pthread_t t;
    if (pthread_create(&t, NULL, watch, NULL) == 0) pthread_detach(t);
}

void wd_init_local(void) { start_backstop(); }

void wd_mark_call(const char *call) {
    if (call) wd_call_enter(call);
    else wd_call_leave();
}

void wd_init(void) {
    with_mpi = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_dup(MPI_COMM_WORLD, &ctl);
    MPI_Irecv(&notice, 1, MPI_INT, MPI_ANY_SOURCE, TAG_NOTICE, ctl, &ctl_req);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    start_backstop();
    const char *here = getenv("MPI_LOCALNRANKS");  // Hydra's count of this node's ranks, until comm_choose_hardware's
    wd_share_cores(wd_crowded(here ? atol(here) : 1));
}

void wd_finalize_bound(int code) {
    fflush(stdout);
    fflush(stderr);
    finalize_code = code;
    finalize_deadline = now_sec() + FINALIZE_GRACE_S;
}

void wd_close(void) {
    if (ctl_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&ctl_req);
        MPI_Request_free(&ctl_req);
    }
    if (ctl != MPI_COMM_NULL) MPI_Comm_free(&ctl);
}
