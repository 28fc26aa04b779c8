// schedule_file.h: schedules as files. A schedule is written as one row per rank of comma-separated
// compute actions in PyTorch's notation ({stage}{F|I|B|W}{micro-batch}: 0F0, 2I3, 2W3; B is a full
// backward, I and W its two halves; stage is the virtual stage), as PyTorch's
// _PipelineScheduleRuntime loads it from CSV. micropp adds the sends and receives, recognises the
// chunk order (loop or V) from the stages each row holds, and proves the schedule with the simulator
// before anything runs; `micropp bubble --dump-csv` writes any built-in schedule this way.
#pragma once
#include <stddef.h>
#include <stdio.h>

// The shape of a file's schedule: K ranks (rows), M micro-batches, v chunks per rank placed by
// `chunk_order` (CHUNKS_LOOP or CHUNKS_V), split = 1 when any action is I or W.
typedef struct { int K, M, v, chunk_order, split; } SchedFileShape;

// Reads FILE whole into *text (malloc'd, NUL-terminated): 0, or -1 with one line in err. A FIFO, a
// device or a folder is refused at once (never waited on). Under MPI, collective: the ranks compare
// the bytes they read (agree_on_contents), and a difference ends every rank with one line.
int schedule_file_read(const char *path, char **text, char *err, size_t errlen);
// Checks the text of a schedule file (`name` names it in messages) and, when it is sound,
// registers it as SCHED_FILE (schedule_set_file) and fills *shape: 0. Otherwise -1 with one line
// in err naming the first error in file order by its line (rank), column (1-based) and action:
// bytes that are not text, a bad token, an empty file, a stage or micro-batch that most of the file
// does not hold (a typo), a chunk order micropp does not run, an action missing, repeated or out of
// dependency order on its rank, or a deadlock between ranks (the simulator's verdict). Lines end
// in LF, CR LF or CR; a UTF-8 byte-order mark at the start is skipped. (schedule_file_read names a
// byte that is not text, a NUL included, which would end the text before the parser sees it.)
int schedule_file_parse(const char *text, const char *name, SchedFileShape *shape, char *err, size_t errlen);
// Writes schedule kind (K ranks, M micro-batches, v chunks) as a file: its compute actions, one row
// per rank. Returns 0, or -1 when the stream reports an error.
int schedule_file_write(FILE *f, int kind, int K, int M, int v);
