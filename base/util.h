// base/util.h: the check macros every file uses, and the two ways a run ends early (util.c).
// user_error(): a mistake in the input -> one line on stderr, exit 2 (the same decision on every rank).
// fatal / CHECK: a bug or a failing system call -> "[rank r] file:line: what: why", then the whole job ends.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef __cplusplus  // kernels.cu and nccl.cu include this header too
#define _Noreturn [[noreturn]]
#endif

extern int g_rank;  // this process's world rank (0 before MPI starts), set by comm_init
extern int g_quiet_errors;  // when set, user_error on rank != 0 prints nothing (rank 0 speaks for all)
// The command line as the user typed it (main's argc, argv): user_error echoes it whole in a hint that
// names a launch ("run 'mpiexec -n 3 ./micropp train --pp 3 --hidden 64'"), every other flag kept.
void util_set_command(int argc, char **argv);

// How an early end reaches the other ranks: installed by comm_init (util.c itself knows no MPI).
typedef struct {
    int (*running)(void);         // 1 while MPI is initialized and not finalized
    int (*world_size)(void);
    void (*abort_job)(void);      // ends every rank (MPI_Abort)
    void (*finalize_quick)(void); // MPI_Finalize alone: user_error's collective end
    void (*finalize)(int code);   // the whole wire's shutdown (finish), bounded: exits with code if stuck
    void (*agree)(const char *err, int code);  // agree_on_error / agree_on_failure over the world
} ExitHooks;
void util_set_exit_hooks(const ExitHooks *h);

// Ends the whole job (all ranks) after printing the message.
_Noreturn void fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define fatal(...) fatal_at(__FILE__, __LINE__, __VA_ARGS__)

// A user mistake: "micropp: <message>" and exit 2. Callers guarantee every rank decides the same way.
_Noreturn void user_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// A run that went wrong, not its input (a diverged loss, non-finite parameters): "micropp: <message>"
// and exit 1. Callers guarantee every rank decides the same way.
_Noreturn void run_failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// agree_on_error's twin for such failures: the lowest failing rank's message, exit 1 on every rank.
void agree_on_failure(const char *err);

// A check whose outcome may differ between ranks (a file one node cannot read): every rank calls
// it at the same point with its error or NULL; if any rank has one, all end with the lowest
// failing rank's message and exit 2. Without MPI it is user_error(err) when err is set.
void agree_on_error(const char *err);
// The same for a file some ranks may not see (--data, --config, --resume, a schedule file): when some
// ranks could read it and others not, the line says which rank and host could not, and how many.
#define AGREE_NAME_WHERE 16  // (or'ed into the hook's code)
void agree_on_read_error(const char *err);

// Ends this rank normally with an exit code (MPI finalized first when it is running); 1 instead
// when standard output could not be written (stdout_closed_ok).
_Noreturn void finish(int code);
// Flushes standard output: 1 when everything written reached it, else 0 after one line on stderr
// (`--json > /dev/full` must not exit 0 with the JSON lost).
int stdout_closed_ok(void);

#define CHECK(cond, ...) do { if (!(cond)) fatal(__VA_ARGS__); } while (0)

// The median of v[0..n) (v unchanged), NAN when n <= 0.
double median(const double *v, int n);
static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fatal("out of memory allocating %zu bytes", n);
    return p;
}
static inline void *xrealloc(void *old, size_t n) {
    void *p = realloc(old, n ? n : 1);
    if (!p) fatal("out of memory allocating %zu bytes", n);
    return p;
}
static inline void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

double now_sec(void);  // monotonic clock, seconds
// A size in bytes in the unit that fits, decimal (kB = 1000 B, MB, GB, TB, PB), 3 significant digits:
// "512 B", "70 kB", "4.72 MB", "2.75 TB" (never "2.75e+03 GB"). Every size micropp prints goes
// through it, except `micropp plan`'s table: its --device-memory is binary (24G = 24 GiB), so it
// prints binary units, KiB .. TiB with 2 decimals ("768.09 MiB", "1.50 GiB"): fmt_bytes_binary.
// Both return buf.
const char *fmt_bytes(double bytes, char *buf, size_t n);
const char *fmt_bytes_binary(double bytes, char *buf, size_t n);
// Rates and other measured figures, three significant digits and never an exponent: fmt_sig3 gives
// "59.2", "3.60", "0.0102", "1250" (every integer digit from 1000 up); fmt_si adds a decimal prefix so
// that three digits carry any size: "640", "15.2k", "1.25M" (the caller writes the unit after it:
// "15.2k samples/s"). Both return buf.
const char *fmt_sig3(double v, char *buf, size_t n);
const char *fmt_si(double v, char *buf, size_t n);
double meminfo_available(void);  // MemAvailable from /proc/meminfo, bytes; -1 when it cannot be read

// ---- files a user names for reading ----
// Opens path read-only without ever blocking (O_NONBLOCK: opening a FIFO nobody writes would wait
// forever) and keeps it only when it is a regular file. Returns the descriptor, blocking again, or -1
// with one reason and its fix in why ("No such file or directory (check the path)", "it is a FIFO
// (named pipe), not a regular file: give a regular file"). Inline, so the fuzz harnesses have it.
static inline int open_input(const char *path, char *why, size_t n) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), e = errno;
    struct stat st;
    memset(&st, 0, sizeof st);
    if (fd < 0 && !(e == ENXIO && stat(path, &st) == 0)) {  // (a socket: ENXIO, named below)
        snprintf(why, n, "%s (check the path)", strerror(e));
        return -1;
    }
    if (fd >= 0 && fstat(fd, &st) != 0) {
        e = errno;
        close(fd);
        snprintf(why, n, "%s (check the path)", strerror(e));
        return -1;
    }
    if (fd < 0 || !S_ISREG(st.st_mode)) {
        const char *kind = S_ISFIFO(st.st_mode)   ? "a FIFO (named pipe)"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISDIR(st.st_mode)  ? "a folder"
                                                  : "not a file";
        if (fd >= 0) close(fd);
        snprintf(why, n, "it is %s, not a regular file: give a regular file", kind);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

// A fast 64-bit hash of n bytes (four xxHash64-style lanes), chained through seed: what ranks compare
// to learn whether they read the same bytes (about 8 GB/s; Fashion-MNIST's 55 MB in a few ms).
uint64_t hash64(uint64_t seed, const void *p, size_t n);

// Ranks that read one file must read the same bytes: two hosts with different files under one path
// would train different data, or wait on each other forever. Every rank that reads path calls this
// at the same point with ok (it could read it), the hash of what it read and a few words on it
// (detail: "IDX 60000x28x28", "1234 bytes"); when every rank could read it and the hashes differ,
// every rank ends with one line naming the ranks, their hosts and details, and the fix (exit 2).
// A no-op without MPI (one process) or before launch.c installs the comparison.
typedef void (*ContentsHook)(const char *what, const char *path, int ok, uint64_t hash, const char *detail);
void util_set_contents_hook(ContentsHook hook);
void agree_on_contents(const char *what, const char *path, int ok, uint64_t hash, const char *detail);
// For commands that use no MPI (bubble, selftest): under `mpiexec -n N` (N > 1) every process would
// do the whole work and print it; refuse, once, on every process alike.
void single_process(const char *cmd);
// "10B", "350M", "1.5T", "7e9": a count with an optional decimal suffix K, M, B (or G), T; -1 when malformed.
double parse_count(const char *s);
// "24G", "24GiB", "512M", "1T", "25769803776": bytes (binary units); -1 when malformed.
double parse_bytes(const char *s);
