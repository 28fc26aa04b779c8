// schedule_file.c: a schedule read from a CSV file (one row per rank of PyTorch-notation compute
// actions) and checked before it runs: its tokens, its chunk order (loop or V), each rank's actions
// (every micro-batch through every stage it holds, once, F before B or I before W), and then the
// whole, with sends and receives added, through the simulator (no deadlock). Also the writer that
// dumps a built-in schedule in the same notation.
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include "schedule.h"
#include "schedule_file.h"
#include "base/util.h"

#define MAX_FILE_BYTES (64L << 20)
#define MAX_RANKS 4096
#define MAX_STAGE (1 << 16)
#define MAX_MB (1 << 20)

typedef struct { int vs, kind, mb, col; } Cell;     // one action of a row, at 1-based column col
typedef struct { Cell *c; int n, cap; } Row;
typedef struct { Row *rows; int K, M, V, v, chunk_order; } Parsed;

__attribute__((format(printf, 3, 4))) static int say(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

// A byte a text file of actions cannot hold: a control character other than tab, CR and LF, DEL,
// or a byte that is not part of a UTF-8 character. -1 with the first one named, else 0.
static int not_text(const char *text, size_t n, const char *name, char *err, size_t errlen) {
    const unsigned char *b = (const unsigned char *)text;
    for (size_t i = 0; i < n; i++) {
        size_t bad = n, follow = b[i] >= 0xC2 && b[i] <= 0xDF   ? 1
                                 : b[i] >= 0xE0 && b[i] <= 0xEF ? 2
                                 : b[i] >= 0xF0 && b[i] <= 0xF4 ? 3
                                                                : 0;
        if ((b[i] < 0x20 && b[i] != '\t' && b[i] != '\n' && b[i] != '\r') || b[i] == 0x7F || (b[i] >= 0x80 && !follow))
            bad = i;
        for (size_t k = 1; bad == n && k <= follow; k++)
            if (i + k >= n || b[i + k] < 0x80 || b[i + k] > 0xBF) bad = i + k < n ? i + k : i;
        if (bad < n)
            return say(err, errlen,
                       "%s is not a text schedule file (byte 0x%02X at offset %zu): give a CSV of actions like 0F0,0B0 "
                       "(micropp bubble --schedule 1f1b --dump-csv FILE writes one)",
                       name, b[bad], bad);
        i += follow;
    }
    return 0;
}

static char letter_of(int kind) {
    return kind == ACT_FORWARD ? 'F' : kind == ACT_BACKWARD ? 'B' : kind == ACT_BACKWARD_INPUT ? 'I' : 'W';
}
static const char *token(const Cell *c, char *buf, size_t n) {
    snprintf(buf, n, "%d%c%d", c->vs, letter_of(c->kind), c->mb);
    return buf;
}

static int read_text(const char *path, char **text, size_t *len, char *err, size_t errlen) {
    *text = NULL;
    char why[256];
    int fd = open_input(path, why, sizeof why);
    if (fd < 0) return say(err, errlen, "cannot read --schedule-file '%s': %s", path, why);
    char *buf = xmalloc((size_t)MAX_FILE_BYTES + 1);
    size_t n = 0;
    ssize_t k = 1;
    while (n <= (size_t)MAX_FILE_BYTES && k != 0) {
        k = read(fd, buf + n, (size_t)MAX_FILE_BYTES + 1 - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) break;
        n += (size_t)k;
    }
    int e = errno;
    close(fd);
    if (k < 0 || n > (size_t)MAX_FILE_BYTES) {
        free(buf);
        return say(err, errlen, "cannot read --schedule-file '%s': %s", path,
                   k < 0 ? strerror(e) : "larger than 64 MiB");
    }
    buf[n] = 0;
    if (not_text(buf, n, path, err, errlen)) { free(buf); return -1; }  // a NUL would end the text unseen
    *text = buf;
    *len = n;
    return 0;
}

int schedule_file_read(const char *path, char **text, char *err, size_t errlen) {
    size_t len = 0;
    int rc = read_text(path, text, &len, err, errlen);
    char detail[64];
    snprintf(detail, sizeof detail, "%zu bytes", len);
    // Every rank that reads it, whether it could or not (then agree_on_error, after, says why).
    agree_on_contents("train: --schedule-file", path, rc == 0, rc ? 0 : hash64(0, *text, len), detail);
    return rc;
}

// {stage}{F|I|B|W}{micro-batch}, digits only, surrounding blanks already cut. 0, or -1.
static int parse_token(const char *s, size_t len, Cell *c) {
    size_t i = 0;
    long vs = 0, mb = 0;
    if (!len || len > 24) return -1;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) vs = vs * 10 + (s[i] - '0');
    if (i == 0 || i >= len || vs >= MAX_STAGE) return -1;
    char k = s[i++];
    c->kind = k == 'F'   ? ACT_FORWARD
              : k == 'B' ? ACT_BACKWARD
              : k == 'I' ? ACT_BACKWARD_INPUT
              : k == 'W' ? ACT_BACKWARD_WEIGHT
                         : -1;
    size_t d = i;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) mb = mb * 10 + (s[i] - '0');
    if (c->kind < 0 || i == d || i != len || mb >= MAX_MB) return -1;
    c->vs = (int)vs;
    c->mb = (int)mb;
    return 0;
}

static void row_push(Row *r, Cell c) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        Cell *p = realloc(r->c, sizeof(Cell) * (size_t)r->cap);
        CHECK(p, "out of memory reading a schedule file");
        r->c = p;
    }
    r->c[r->n++] = c;
}

// A cell as the message shows it: at most 32 bytes, a byte outside printable ASCII as \xNN (an
// invisible mark, a stray control or UTF-8 character then shows).
static const char *shown(const char *s, size_t len, char *buf, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < len && i < 32 && k + 5 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F) buf[k++] = (char)c;
        else k += (size_t)snprintf(buf + k, n - k, "\\x%02X", c);
    }
    buf[k] = 0;
    return buf;
}

// One line (up to its end, the line break excluded) into a row: cells split at commas, blanks cut;
// an empty cell is skipped (PyTorch writes one for an idle slot) but counts as a column.
static int parse_line(const char *s, size_t len, int rank, const char *name, Row *row, char *err, size_t errlen) {
    int col = 0;
    size_t i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && s[j] != ',') j++;
        col++;
        size_t a = i, b = j;
        while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
        while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
        Cell c = {.col = col};
        if (b > a && parse_token(s + a, b - a, &c)) {
            char t[160];
            return say(err, errlen,
                       "%s: line %d (rank %d), column %d: '%s' is not an action: write {stage}{F|I|B|W}{micro-batch}, "
                       "like 0F0, 2I3 or 2W3 (sends and receives are added)",
                       name, rank + 1, rank, col, shown(s + a, b - a, t, sizeof t));
        }
        if (b > a) row_push(row, c);
        i = j + 1;
    }
    return 0;
}

static int blank(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t') return 0;
    return 1;
}

// A line ends at LF, CR LF or a lone CR: the end of the line starting at s, and *next the start of the one after.
static const char *line_end(const char *s, const char *end, const char **next) {
    const char *e = s;
    while (e < end && *e != '\n' && *e != '\r') e++;
    *next = e + (e < end) + (e + 1 < end && e[0] == '\r' && e[1] == '\n');
    return e;
}

// The rows of the text (a UTF-8 byte-order mark skipped, trailing blank lines dropped), their actions.
static int parse_rows(const char *text, const char *name, Parsed *p, int *maxvs, int *maxmb, char *err, size_t errlen) {
    const char *end = text + strlen(text), *next;
    if (end - text >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) text += 3;  // as Windows' editors write UTF-8
    int lines = 0;
    const char *last = text;  // the end of the last line that is not blank
    for (const char *s = text; s < end; s = next) {
        const char *e = line_end(s, end, &next);
        lines++;
        if (!blank(s, (size_t)(e - s))) last = e;
    }
    if (last == text)
        return say(err, errlen,
                   "%s is empty: write one row per rank of actions like 0F0,0F1,0B0,0B1 (micropp bubble --schedule "
                   "1f1b --dump-csv FILE writes one)",
                   name);
    p->rows = xcalloc((size_t)lines + 1, sizeof(Row));
    *maxvs = *maxmb = -1;
    for (const char *s = text; s < last; p->K++, s = next) {
        const char *e = line_end(s, last, &next);
        if (p->K == MAX_RANKS)
            return say(err, errlen, "%s has more than %d rows: one row per rank, at most %d ranks", name, MAX_RANKS,
                       MAX_RANKS);
        if (parse_line(s, (size_t)(e - s), p->K, name, &p->rows[p->K], err, errlen)) return -1;
        for (int i = 0; i < p->rows[p->K].n; i++) {
            if (p->rows[p->K].c[i].vs > *maxvs) *maxvs = p->rows[p->K].c[i].vs;
            if (p->rows[p->K].c[i].mb > *maxmb) *maxmb = p->rows[p->K].c[i].mb;
        }
    }
    if (*maxvs < 0)
        return say(err, errlen, "%s holds no action: write one row per rank of actions like 0F0,0F1,0B0,0B1", name);
    long long v = *maxvs / p->K + 1, passes = p->K * v * (*maxmb + 1);
    if (passes > SCHEDULE_MAX_SIM)
        return say(err, errlen,
                   "%s: stage %d and micro-batch %d make %d rows x %lld chunks x %d micro-batches = %lld passes, more "
                   "than micropp runs (the simulator takes %d): check the numbers",
                   name, *maxvs, *maxmb, p->K, v, *maxmb + 1, passes, SCHEDULE_MAX_SIM);
    return 0;
}

// The file's chunks per rank and micro-batches, from what most of it holds, so that one mistyped
// number is named where it stands instead of as actions missing elsewhere: a chunk (stages cK ..
// cK+K-1, one per rank) counts when more than half its stages have actions, a micro-batch when more
// than half the stages of those chunks run it (chunk 0 and micro-batch 0 always count). The first
// action past them, in file order, is the error.
static int find_shape(Parsed *p, int maxvs, int maxmb, const char *name, char *err, size_t errlen) {
    int K = p->K, stages = maxvs + 1, *held = xcalloc((size_t)(maxvs / K + 1), sizeof(int)),
        *runs = xcalloc((size_t)maxmb + 1, sizeof(int));
    unsigned char *seen = xcalloc((size_t)stages * (size_t)(maxmb + 1), 1);  // (stage, micro-batch) has an action
    for (int s = 0; s < K; s++)
        for (int i = 0; i < p->rows[s].n; i++) seen[(size_t)p->rows[s].c[i].vs * (maxmb + 1) + p->rows[s].c[i].mb] = 1;
    p->v = 1;
    for (int vs = 0; vs < stages; vs++) {
        int any = 0;
        for (int mb = 0; mb <= maxmb && !any; mb++) any = seen[(size_t)vs * (maxmb + 1) + mb];
        if (any && 2 * ++held[vs / K] > K && vs / K + 1 > p->v) p->v = vs / K + 1;
    }
    p->M = 1;
    for (int vs = 0; vs < stages && vs < p->v * K; vs++)
        for (int mb = 0; mb <= maxmb; mb++)
            if (seen[(size_t)vs * (maxmb + 1) + mb] && 2 * ++runs[mb] > p->v * K && mb + 1 > p->M) p->M = mb + 1;
    int rc = 0;
    for (int s = 0; s < K && !rc; s++)
        for (int i = 0; i < p->rows[s].n && !rc; i++) {
            const Cell *c = &p->rows[s].c[i];
            int ch = c->vs / K;
            char t[40];
            if (ch >= p->v)
                rc = say(err, errlen,
                         "%s: line %d (rank %d), column %d: '%s' is on stage %d, but only %d of the stages %d..%d (a "
                         "chunk: one stage per rank) have actions, "
                         "and the file's %d rows hold stages 0..%d: fix the stage number, or give every rank its stage "
                         "of %d..%d",
                         name, s + 1, s, c->col, token(c, t, sizeof t), c->vs, held[ch], ch * K, ch * K + K - 1, K,
                         p->v * K - 1, ch * K, ch * K + K - 1);
            else if (c->mb >= p->M)
                rc = say(err, errlen,
                         "%s: line %d (rank %d), column %d: '%s' names micro-batch %d, which only %d of the %d stages "
                         "run (the others run micro-batches 0..%d): "
                         "fix the number, or run it on every stage",
                         name, s + 1, s, c->col, token(c, t, sizeof t), c->mb, runs[c->mb], p->v * K, p->M - 1);
        }
    free(held); free(runs); free(seen);
    p->V = K * p->v;
    return rc;
}

// Which chunk order the rows follow: the loop (rank s holds s, s+K, ...) or, with 2 chunks, the V
// (s and 2K-1-s). When neither fits, the first action (in file order) off the one that fits more
// of the file names the problem.
static int find_chunk_order(Parsed *p, const char *name, char *err, size_t errlen) {
    int fits[2] = {1, p->v <= 2}, off[2] = {0, 0};
    const Cell *first[2] = {NULL, NULL};
    int first_rank[2] = {0, 0};
    for (int order = 0; order < 2; order++)
        for (int s = 0; s < p->K; s++)
            for (int i = 0; i < p->rows[s].n; i++)
                if (stage_of_vstage(order, p->K, p->rows[s].c[i].vs) != s) {
                    if (!off[order]++) { first[order] = &p->rows[s].c[i]; first_rank[order] = s; }
                    fits[order] = 0;
                }
    if (fits[CHUNKS_LOOP] || fits[CHUNKS_V]) { p->chunk_order = fits[CHUNKS_LOOP] ? CHUNKS_LOOP : CHUNKS_V; return 0; }
    int order = p->v <= 2 && off[CHUNKS_V] < off[CHUNKS_LOOP] ? CHUNKS_V : CHUNKS_LOOP;
    const Cell *c = first[order];
    int s = first_rank[order], K = p->K;
    char t[40];
    if (p->v > 2)
        return say(err, errlen,
                   "%s: line %d (rank %d), column %d: '%s' puts stage %d on rank %d, but with %d chunks per rank "
                   "micropp runs only the loop (rank %d holds stages %d, %d, ...): fix the stage numbers",
                   name, s + 1, s, c->col, token(c, t, sizeof t), c->vs, s, p->v, s, s, s + K);
    return say(err, errlen,
               "%s: line %d (rank %d), column %d: '%s' puts stage %d on rank %d, which is neither the loop (rank %d "
               "holds %d, %d) nor the V (%d, %d) that micropp runs: fix the stage numbers",
               name, s + 1, s, c->col, token(c, t, sizeof t), c->vs, s, s, s, s + K, s, 2 * K - 1 - s);
}

// One rank's actions: each (stage, micro-batch) of its chunks once forward, then once backward (B,
// or I and later W). at[(chunk * M + mb) * 4 + kind slot]: the column where that action was seen.
static int check_rank(const Parsed *p, int s, const char *name, int *at, char *err, size_t errlen) {
    const Row *r = &p->rows[s];
    int M = p->M;
    char t[40], t2[40];
    memset(at, 0, sizeof(int) * (size_t)p->v * M * 4);
    for (int i = 0; i < r->n; i++) {
        const Cell *c = &r->c[i];
        int *a = &at[((size_t)chunk_of_vstage(p->K, c->vs) * M + c->mb) * 4];  // F, B, I, W
        int slot = c->kind == ACT_FORWARD ? 0 : c->kind == ACT_BACKWARD ? 1 : c->kind == ACT_BACKWARD_INPUT ? 2 : 3;
        int again = a[slot] ? a[slot] : slot == 1 || slot == 2 ? (a[1] ? a[1] : a[2]) : slot == 3 && a[1] ? a[1] : 0;
        if (again)
            return say(err, errlen,
                       "%s: line %d (rank %d), column %d: '%s' is repeated (stage %d's %s of micro-batch %d is already "
                       "at column %d): each runs once",
                       name, s + 1, s, c->col, token(c, t, sizeof t), c->vs,
                       slot == 0   ? "forward"
                       : slot == 3 ? "weight gradient"
                                   : "backward",
                       c->mb, again);
        Cell need = {c->vs, slot == 3 ? ACT_BACKWARD_INPUT : ACT_FORWARD, c->mb, 0};
        if (slot && !a[slot == 3 ? 2 : 0])
            return say(
                err, errlen,
                "%s: line %d (rank %d), column %d: '%s' comes before '%s' (out of dependency order): move it after",
                name, s + 1, s, c->col, token(c, t, sizeof t), token(&need, t2, sizeof t2));
        a[slot] = c->col;
    }
    for (int ch = 0; ch < p->v; ch++)
        for (int mb = 0; mb < M; mb++) {
            const int *a = &at[((size_t)ch * M + mb) * 4];
            Cell miss = {vstage_of(p->chunk_order, p->K, s, ch),
                         !a[0]            ? ACT_FORWARD
                         : !a[1] && !a[2] ? ACT_BACKWARD
                                          : ACT_BACKWARD_WEIGHT,
                         mb, 0};
            if (a[0] && (a[1] || (a[2] && a[3]))) continue;
            int cols = r->n ? r->c[r->n - 1].col : 0;
            return say(err, errlen,
                       "%s: line %d (rank %d), column %d (the end of its row): '%s'%s is missing: every micro-batch "
                       "0..%d passes every stage of the rank forward and backward",
                       name, s + 1, s, cols + 1, token(&miss, t, sizeof t),
                       miss.kind == ACT_BACKWARD ? " (or its I and W)" : "", M - 1);
        }
    return 0;
}

// The rows, with sends and receives, through the simulator: a deadlock names the first rank that
// cannot go on, the column of the action it waits at, and the message it waits for.
static int check_deadlock(const Parsed *p, const char *name, const SchedFile *file, char *err, size_t errlen) {
    const ActionList *lists = file->lists;
    SimSpec spec = {.kind = SCHED_FILE, .file = file, .K = p->K, .M = p->M, .v = p->v, .f = 1, .b = 1, .w = 1};
    SimResult r;
    schedule_sim(&spec, &r);
    int dead = r.deadlock, s = r.stuck_rank, at = r.stuck_at;
    sim_result_free(&r);
    if (!dead) return 0;
    int k = 0;  // the compute action the stuck receive feeds: the k-th cell of the row
    for (int i = 0; i < at; i++) k += action_is_compute(lists[s].a[i].kind);
    const Cell *c = &p->rows[s].c[k];
    Action a = lists[s].a[at];
    int from = a.kind == ACT_RECV_ACT ? c->vs - 1 : c->vs + 1;
    char t[40];
    return say(err, errlen,
               "%s: line %d (rank %d), column %d: '%s' waits for stage %d's %s of micro-batch %d (rank %d), which "
               "never comes: the schedule deadlocks; reorder the rows so every action's input is produced first",
               name, s + 1, s, c->col, token(c, t, sizeof t), from, a.kind == ACT_RECV_ACT ? "output" : "gradient",
               c->mb, stage_of_vstage(p->chunk_order, p->K, from));
}

int schedule_file_parse(const char *text, const char *name, SchedFile *file, char *err, size_t errlen) {
    Parsed p = {0};
    int maxvs = -1, maxmb = -1,
        rc = not_text(text, strlen(text), name, err, errlen) ||
                     parse_rows(text, name, &p, &maxvs, &maxmb, err, errlen) ||
                     find_shape(&p, maxvs, maxmb, name, err, errlen) || find_chunk_order(&p, name, err, errlen)
                 ? -1
                 : 0;
    int *at = rc ? NULL : xcalloc((size_t)p.v * p.M * 4, sizeof(int));
    for (int s = 0; s < p.K && !rc; s++) rc = check_rank(&p, s, name, at, err, errlen);
    free(at);
    ActionList *lists = xcalloc((size_t)p.K + 1, sizeof(ActionList));
    int split = 0;
    for (int s = 0; s < p.K && !rc; s++)
        for (int i = 0; i < p.rows[s].n; i++) {
            const Cell *c = &p.rows[s].c[i];
            split |= c->kind == ACT_BACKWARD_INPUT;
            schedule_push_pass(&lists[s], p.chunk_order, p.K, p.v, s, c->kind, chunk_of_vstage(p.K, c->vs), c->mb);
        }
    SchedFile f = {lists, p.K, p.M, p.v, p.chunk_order, split};  // (lists[K], one spare, stays empty)
    if (!rc) rc = check_deadlock(&p, name, &f, err, errlen);
    if (rc) sched_file_free(&f);
    else *file = f;
    for (int s = 0; s <= p.K; s++) if (p.rows) free(p.rows[s].c);
    free(p.rows);
    return rc;
}

int schedule_file_write(FILE *f, int kind, const SchedFile *file, int K, int M, int v) {
    int chunk_order = schedule_chunk_order(kind, file);
    for (int s = 0; s < K; s++) {
        ActionList l = {0};
        schedule_build(kind, file, K, M, v, s, &l);
        int first = 1;
        for (int i = 0; i < l.n; i++) {
            if (!action_is_compute(l.a[i].kind)) continue;
            Cell c = {vstage_of(chunk_order, K, s, l.a[i].chunk), l.a[i].kind, l.a[i].mb, 0};
            char t[40];
            fprintf(f, "%s%s", first ? "" : ",", token(&c, t, sizeof t));
            first = 0;
        }
        fputc('\n', f);
        action_list_free(&l);
    }
    return ferror(f) ? -1 : 0;
}
