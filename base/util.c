// base/util.c: the two ways a run ends early (fatal: a bug or a failing call; user_error: bad input)
// and the clock. It knows nothing of MPI: comms.c installs the hooks that reach the other ranks,
// so ops, data and config, which report errors through here, sit below the wire. Also the parsers of
// counts ("10B") and byte sizes ("24GiB") every command shares.
#include <stdlib.h>
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include "base/util.h"

int g_rank = 0;
int g_quiet_errors = 0;
static ExitHooks hooks;  // all NULL until comm_init: a single process with no MPI

void util_set_exit_hooks(const ExitHooks *h) { hooks = *h; }

static int others_running(void) { return hooks.running && hooks.running(); }

double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *fmt_bytes(double bytes, char *buf, size_t n) {
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double v = bytes;
    int u = 0;
    // 999.5 and above would print as 1e+03 at 3 significant digits: the next unit's "1" instead
    while ((v >= 999.5 || v <= -999.5) && u < 5) { v /= 1000; u++; }
    if (u == 0 || v >= 999.5 || v <= -999.5) snprintf(buf, n, "%.0f %s", v, unit[u]);
    else snprintf(buf, n, "%.3g %s", v, unit[u]);
    return buf;
}
const char *fmt_bytes_binary(double bytes, char *buf, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) { bytes /= 1024; u++; }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

const char *fmt_sig3(double v, char *buf, size_t n) {
    double a = fabs(v);
    int decimals = 0;
    if (a > 0 && a < 999.5) {
        decimals = 2 - (int)floor(log10(a));
        if (a * pow(10, decimals) >= 999.5) decimals--;  // 9.996 rounds to 10.0, not 10.00
        if (decimals < 0) decimals = 0;
    }
    snprintf(buf, n, "%.*f", decimals, v);
    return buf;
}
const char *fmt_si(double v, char *buf, size_t n) {
    static const char *prefix[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    while ((v >= 999.5 || v <= -999.5) && u < 5) { v /= 1000; u++; }
    char num[48];
    snprintf(buf, n, "%s%s", fmt_sig3(v, num, sizeof num), prefix[u]);
    return buf;
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

// ---- fix hints that echo the user's whole command ----
static int cmd_argc;
static char **cmd_argv;
void util_set_command(int argc, char **argv) {
    cmd_argc = argc;
    cmd_argv = argv;
}

// The command as typed, every word (shell-quoted where it needs it): "./micropp train --pp 3 --hidden 64".
static void typed_command(char *out, size_t n) {
    out[0] = 0;
    for (int i = 0; i < cmd_argc; i++) {
        const char *a = cmd_argv[i];
        int plain = a[0] != 0;
        for (const char *q = a; *q; q++) plain &= isalnum((unsigned char)*q) || strchr("-_./=:,+@%", *q) != NULL;
        size_t k = strlen(out);
        snprintf(out + k, n - k, plain ? "%s%s" : "%s\"%s\"", i ? " " : "", a);  // (inside the hint's '...')
    }
}

// A hint that names a launch ("run 'mpiexec -n 3'", "run it as 'mpiexec -n 2 ./micropp pingpong'",
// "drop 'mpiexec -n 4'") becomes the user's whole command with that fix applied, every other flag
// kept: "run 'mpiexec -n 3 ./micropp train --pp 3 --hidden 64'", "run './micropp train --mode manual'".
// Only the first such hint of msg is rewritten; msg is left as it is when the command is not known.
static void hint_whole_command(char *msg, size_t n) {
    const char *at = strstr(msg, "'mpiexec -n ");
    if (!cmd_argc || !at) return;
    char *end;
    long ranks = strtol(at + 12, &end, 10);
    const char *close = strchr(end, '\'');
    if (end == at + 12 || ranks < 1 || !close) return;
    int drop = at - msg >= 5 && !strncmp(at - 5, "drop ", 5);
    char typed[1024], fixed[1200], rest[4096];
    typed_command(typed, sizeof typed);
    snprintf(rest, sizeof rest, "%s", close + 1);
    if (drop) snprintf(fixed, sizeof fixed, "run '%s' (without mpiexec)", typed);
    else snprintf(fixed, sizeof fixed, "'mpiexec -n %ld %s'", ranks, typed);
    size_t head = (size_t)(at - msg) - (drop ? 5 : 0);
    snprintf(msg + head, n - head, "%s%s", fixed, rest);
}

void user_error(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hint_whole_command(msg, sizeof msg);
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
    fprintf(stderr,
            "micropp: writing standard output failed%s%s: the output is incomplete (a full disk, or a closed pipe?)\n",
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

double meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static inline uint64_t rotl64(uint64_t x, int r) { return x << r | x >> (64 - r); }
static inline uint64_t load64(const unsigned char *p) { uint64_t w; memcpy(&w, p, 8); return w; }
#define H1 0x9E3779B185EBCA87ULL
#define H2 0xC2B2AE3D27D4EB4FULL
#define H3 0x165667B19E3779F9ULL

uint64_t hash64(uint64_t seed, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t v[4] = {seed + H1 + H2, seed + H2, seed, seed - H1}, h;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)  // four independent lanes: the multiplies overlap
        for (int k = 0; k < 4; k++) v[k] = rotl64(v[k] + load64(p + i + 8 * k) * H2, 31) * H1;
    h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18) + (uint64_t)n;
    for (; i + 8 <= n; i += 8) h = rotl64(h ^ (rotl64(load64(p + i) * H2, 31) * H1), 27) * H1 + H3;
    for (; i < n; i++) h = rotl64(h ^ (p[i] * H3), 11) * H1;
    h ^= h >> 33; h *= H2; h ^= h >> 29; h *= H3; h ^= h >> 32;  // the final avalanche
    return h;
}

static ContentsHook contents_hook;
void util_set_contents_hook(ContentsHook hook) { contents_hook = hook; }
void agree_on_contents(const char *what, const char *path, int ok, uint64_t hash, const char *detail) {
    if (contents_hook && others_running()) contents_hook(what, path, ok, hash, detail);
}

void agree_on_error(const char *err) {
    if (others_running()) hooks.agree(err ? err : "", 2);
    else if (err && *err) user_error("%s", err);
}

void agree_on_read_error(const char *err) {
    if (others_running()) hooks.agree(err ? err : "", 2 | AGREE_NAME_WHERE);
    else if (err && *err) user_error("%s", err);
}

void agree_on_failure(const char *err) {
    if (others_running()) hooks.agree(err ? err : "", 1);
    else if (err && *err) run_failed("%s", err);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
double median(const double *v, int n) {
    if (n <= 0) return NAN;
    double *t = xmalloc(sizeof(double) * (size_t)n);
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

// "10B", "350M", "1.5T", "7e9": a count with an optional decimal suffix K, M, B (or G), T; -1 when malformed.
double parse_count(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v <= 0 || isspace((unsigned char)*s)) return -1;
    if (*end) {
        const char *suf = "KMBGT";
        const double mult[] = {1e3, 1e6, 1e9, 1e9, 1e12};
        const char *q = strchr(suf, toupper((unsigned char)*end));
        if (!q || end[1]) return -1;
        v *= mult[q - suf];
    }
    return v;
}

// "24G", "24GiB", "512M", "1T", "25769803776": bytes (binary units); -1 when malformed.
double parse_bytes(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v <= 0 || isspace((unsigned char)*s)) return -1;
    if (!*end) return v == floor(v) ? v : -1;
    const char *suf = "KMGT", *q = strchr(suf, toupper((unsigned char)*end));
    if (!q) return -1;
    end++;
    if (!strcmp(end, "i") || !strcmp(end, "iB") || !strcmp(end, "B") || !*end)
        return v * pow(1024, (double)(q - suf + 1));
    return -1;
}
