// base/outfile.h: how micropp writes a file the user named (--trace, --timeline, --svg, ...): a regular
// file (or a new one) appears whole or not at all (temporary name, fsync, rename); a symlink is
// followed and its target written; a FIFO, a character device or "-" (standard output) is written
// directly; a folder is refused.
#pragma once
#include <stdio.h>
#include "base/config.h"

typedef struct {
    FILE *f;
    int direct;              // written in place (FIFO, character device, stdout): no temporary
    int quiet_pipe;          // a FIFO or device: SIGPIPE is ignored until commit, so a reader that leaves
                             // makes the write fail with EPIPE (one line) instead of killing the process
    void (*old_pipe)(int);
    char path[PATH_LEN];     // what is written: the symlink's target, or the path itself
    char tmp[PATH_LEN + 32]; // the temporary beside it (regular files)
    int log;                 // out_open_log's regular file: written in place, fsynced at commit
} OutFile;
int out_open(OutFile *o, const char *path);  // 0, or errno (missing folder, read-only, a folder...)
// The same, but a FIFO that no process opens for reading within OUT_FIFO_WAIT_MS is refused (ENXIO)
// instead of waited on forever: for commands that write at once (bubble, plot, plan's --out); a
// reader that is there is waited on as it reads. out_open (train's --trace, --timeline) waits for the
// reader, under the watchdog's --timeout.
#define OUT_FIFO_WAIT_MS 2000
int out_open_now(OutFile *o, const char *path);
// A log the user follows as it grows (--metrics, `tail -f`): written in place, never through a
// temporary. `keep` (may be "") is its first lines: on a regular file they replace the old content
// whole (temporary, fsync, rename) before the appending starts, so a crash never loses them; "-",
// a FIFO (waited for as out_open_now does) and a character device are written directly.
int out_open_log(OutFile *o, const char *path, const char *keep);
int out_commit(OutFile *o);                  // flush, fsync, close, rename: 0, or errno (the temporary removed)
void out_abandon(OutFile *o);
// Can path be written? 0 or errno; leaves nothing behind and opens no FIFO (which would block).
int out_check(const char *path);
// Do paths a and b name the same file (their symlinks followed; two that are not there yet: by folder
// and name)? "-" is only "-". An output that is an input or another output would destroy one of them.
int out_same(const char *a, const char *b);
// Is path's file directly inside folder dir (its symlinks followed)? 1 with its name there, else 0.
int out_in_folder(const char *path, const char *dir, char *name, size_t n);
// A command's outputs and inputs by flag: why (one line, "cmd: ...") when an output is another output or
// an input that exists (a file: folders are the caller's to check), then 1; else 0. Empty paths are none.
typedef struct {
    const char *flag, *path;  // "--metrics", what it names
} OutName;
int out_clash(const char *cmd, const OutName *out, int n_out, const OutName *in, int n_in, char *why, size_t n);
const char *out_hint(int err);               // the fix to suggest for out_open's error
const char *out_write_hint(int err);         // ... and for a write or out_commit that failed (EPIPE, a full disk)
