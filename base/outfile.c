// base/outfile.c: writing a file the user named, by its kind (see outfile.h): regular files through a
// temporary, fsync and rename so they appear whole; FIFOs, character devices and "-" in place;
// symlinks followed to their target; folders refused. out_open_now never waits long for a FIFO's reader.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/outfile.h"

// The file a path names once its symlinks are followed (a dangling one: the file it would create).
static int follow_links(const char *path, char *out, size_t n) {
    char cur[PATH_LEN];
    if (strlen(path) >= sizeof cur) return ENAMETOOLONG;
    snprintf(cur, sizeof cur, "%s", path);
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            if (strlen(cur) >= n) return ENAMETOOLONG;
            snprintf(out, n, "%s", cur);
            return 0;
        }
        char link[PATH_LEN], next[PATH_LEN];
        ssize_t len = readlink(cur, link, sizeof link - 1);
        if (len < 0) return errno;
        link[len] = 0;
        const char *slash = strrchr(cur, '/');
        if (link[0] == '/' || !slash) snprintf(next, sizeof next, "%s", link);  // absolute, or beside cur in "."
        else if (snprintf(next, sizeof next, "%.*s/%s", (int)(slash - cur), cur, link) >= (int)sizeof next)
            return ENAMETOOLONG;
        snprintf(cur, sizeof cur, "%s", next);
    }
    return ELOOP;
}

// What kind of file target is: 0 new or regular, 1 written in place, or -errno.
static int kind_of(const char *target) {
    struct stat st;
    if (stat(target, &st) != 0) return errno == ENOENT ? 0 : -errno;
    if (S_ISDIR(st.st_mode)) return -EISDIR;
    if (S_ISREG(st.st_mode)) return 0;
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return 1;
    return -EINVAL;  // a block device or a socket
}

// A FIFO opened for writing without waiting forever: open(2) with O_NONBLOCK fails (ENXIO) while no
// process has it open for reading; a reader that starts within OUT_FIFO_WAIT_MS is waited for.
static FILE *open_fifo_now(const char *path) {
    for (int waited = 0;; waited += 10) {
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            int flags = fcntl(fd, F_GETFL);
            if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);  // a slow reader is waited on as it reads
            FILE *f = fdopen(fd, "w");
            if (!f) close(fd);
            return f;
        }
        if (errno != ENXIO || waited >= OUT_FIFO_WAIT_MS) return NULL;
        usleep(10 * 1000);
    }
}

static int open_as(OutFile *o, const char *path, int now) {
    memset(o, 0, sizeof *o);
    if (!*path) return ENOENT;
    if (!strcmp(path, "-")) {
        o->f = stdout;
        o->direct = 1;
        snprintf(o->path, sizeof o->path, "-");
        return 0;
    }
    int err = follow_links(path, o->path, sizeof o->path);
    if (err) return err;
    int kind = kind_of(o->path);
    if (kind < 0) return -kind;
    if (kind == 1) {
        struct stat st;
        o->direct = 1;
        o->f = now && stat(o->path, &st) == 0 && S_ISFIFO(st.st_mode) ? open_fifo_now(o->path) : fopen(o->path, "w");
        if (!o->f) return errno;
        o->quiet_pipe = 1;
        o->old_pipe = signal(SIGPIPE, SIG_IGN);
        return 0;
    }
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp%d", o->path, (int)getpid());
    o->f = fopen(o->tmp, "w");
    return o->f ? 0 : errno;
}

int out_open(OutFile *o, const char *path) { return open_as(o, path, 0); }
int out_open_now(OutFile *o, const char *path) { return open_as(o, path, 1); }

int out_open_log(OutFile *o, const char *path, const char *keep) {
    int err = open_as(o, path, 1);
    if (err) return err;
    if (o->direct) return fputs(keep, o->f) == EOF ? (errno ? errno : EIO) : 0;
    if (fputs(keep, o->f) == EOF) err = errno ? errno : EIO;
    if (err) out_abandon(o);
    else err = out_commit(o);  // the kept lines, whole, under the log's name
    if (err) return err;
    o->f = fopen(o->path, "a");
    if (!o->f) return errno;
    o->direct = o->log = 1;
    return 0;
}

int out_commit(OutFile *o) {
    int err = fflush(o->f) != 0 || ferror(o->f) ? (errno ? errno : EIO) : 0;
    if (!err && (!o->direct || o->log) && fsync(fileno(o->f)) != 0) err = errno;
    if (o->f != stdout && fclose(o->f) != 0 && !err) err = errno ? errno : EIO;
    o->f = NULL;
    if (o->quiet_pipe) { signal(SIGPIPE, o->old_pipe); o->quiet_pipe = 0; }
    if (o->direct) return err;
    if (!err && rename(o->tmp, o->path) != 0) err = errno;
    if (err) remove(o->tmp);
    return err;
}

void out_abandon(OutFile *o) {
    if (o->f && o->f != stdout) fclose(o->f);
    o->f = NULL;
    if (o->quiet_pipe) { signal(SIGPIPE, o->old_pipe); o->quiet_pipe = 0; }
    if (!o->direct) remove(o->tmp);
}

const char *out_hint(int err) {
    return err == EISDIR   ? "it is a folder: give a file name inside it"
           : err == EINVAL ? "it is neither a regular file, a FIFO nor a character device: give a file name"
           : err == ELOOP  ? "it is a loop of symbolic links: give a file name"
           : err == ENXIO  ? "it is a FIFO that no process opened for reading within 2 s: start its reader first, or "
                             "give a file name"
                           : "check that the folder exists and is writable";
}

const char *out_write_hint(int err) {
    return err == EPIPE ? "its reader closed it before the end: keep the reader open until micropp exits"
           : err == ENOSPC || err == EDQUOT ? "the disk is full: free space there, or give a path on another disk"
                                            : out_hint(err);
}

int out_check(const char *path) {
    if (!*path) return ENOENT;
    if (!strcmp(path, "-")) return 0;
    char target[PATH_LEN];
    int err = follow_links(path, target, sizeof target);
    if (err) return err;
    int kind = kind_of(target);
    if (kind < 0) return -kind;
    if (kind == 1) return access(target, W_OK) == 0 ? 0 : errno;
    OutFile o;
    err = out_open(&o, path);
    if (!err) out_abandon(&o);
    return err;
}

// Where path's file is, by name: its symlinks followed, its folder's real path and its base name
// ("a/b/../c" -> "/abs/a/c"); "" when it cannot be told.
static void where(const char *path, char *out, size_t n) {
    char target[PATH_LEN], dir[PATH_LEN], real[PATH_MAX];
    out[0] = 0;
    if (follow_links(path, target, sizeof target)) return;
    const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - target) + (slash == target) : 1, slash ? target : ".");
    if (realpath(dir, real)) snprintf(out, n, "%s/%s", real, base);
}

int out_same(const char *a, const char *b) {
    if (!strcmp(a, "-") || !strcmp(b, "-")) return !strcmp(a, b);
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb) return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char wa[PATH_MAX + PATH_LEN], wb[PATH_MAX + PATH_LEN];  // neither is there yet: the same name?
    where(a, wa, sizeof wa);
    where(b, wb, sizeof wb);
    return wa[0] && !strcmp(wa, wb);
}

int out_in_folder(const char *path, const char *dir, char *name, size_t n) {
    char w[PATH_MAX + PATH_LEN], real[PATH_MAX];
    if (!strcmp(path, "-")) return 0;
    if (!realpath(dir, real)) {  // a folder not made yet: by name ("d/" and "d" alike)
        const char *slash = strrchr(path, '/');
        size_t k = strlen(dir);
        while (k > 1 && dir[k - 1] == '/') k--;
        if (!slash || (size_t)(slash - path) != k || strncmp(path, dir, k)) return 0;
        snprintf(name, n, "%s", slash + 1);
        return 1;
    }
    where(path, w, sizeof w);
    const char *slash = strrchr(w, '/');
    if (!slash || (size_t)(slash - w) != strlen(real) || strncmp(w, real, strlen(real))) return 0;
    snprintf(name, n, "%s", slash + 1);
    return 1;
}

int out_clash(const char *cmd, const OutName *out, int n_out, const OutName *in, int n_in, char *why, size_t n) {
    struct stat st;
    why[0] = 0;
    for (int i = 0; i < n_out && !why[0]; i++) {
        if (!out[i].path[0]) continue;
        for (int j = i + 1; j < n_out && !why[0]; j++)
            if (out[j].path[0] && out_same(out[i].path, out[j].path))
                snprintf(why, n, "%s: %s '%s' and %s '%s' name the same file, and each would replace the other: give "
                         "them different names", cmd, out[i].flag, out[i].path, out[j].flag, out[j].path);
        for (int j = 0; j < n_in && !why[0]; j++) {  // (an input that is not there, or a folder, cannot be lost)
            int there = in[j].path[0] && stat(in[j].path, &st) == 0 && !S_ISDIR(st.st_mode);
            if (there && out_same(out[i].path, in[j].path))
                snprintf(why, n, "%s: %s '%s' is also %s '%s', which %s reads, and writing it would destroy it: "
                         "give %s another file", cmd, out[i].flag, out[i].path, in[j].flag, in[j].path, cmd,
                         out[i].flag);
        }
    }
    return why[0] != 0;
}

