// tests/fuzz/fuzz_stubs.h: what a fuzz harness links instead of comms.c. user_error (bad input, the
// expected outcome for most inputs) jumps back into the harness instead of exiting; fatal (a bug or
// a failed allocation) aborts, which the fuzzer reports as a crash.
#pragma once
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include "base/util.h"

int g_rank = 0;
int g_quiet_errors = 1;  // silent: the fuzzer runs millions of inputs
static jmp_buf user_error_jump;
static int user_error_armed;

void user_error(const char *fmt, ...) {
    (void)fmt;
    if (!user_error_armed) abort();
    longjmp(user_error_jump, 1);
}
void fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fatal at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}
void finish(int code) { (void)code; abort(); }
void agree_on_error(const char *err) { if (err && *err) user_error("%s", err); }
void agree_on_read_error(const char *err) { agree_on_error(err); }
double now_sec(void) { return 0; }
// One process: nothing to compare the bytes with, and no memory budget (the readers' own checks run).
uint64_t hash64(uint64_t seed, const void *p, size_t n) { (void)p; return seed ^ n; }
void agree_on_contents(const char *what, const char *path, int ok, uint64_t hash, const char *detail) {
    (void)what; (void)path; (void)ok; (void)hash; (void)detail;
}
double meminfo_available(void) { return -1; }

// The readers under test take a path: hand them the input through an in-memory file.
__attribute__((unused)) static const char *input_path(const unsigned char *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-input", 0);
        if (fd < 0) { perror("memfd_create"); abort(); }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) { perror("writing the fuzz input"); abort(); }
    return path;
}
