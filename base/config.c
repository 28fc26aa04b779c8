// base/config.c: the option-table machinery (flags, JSON config files, --help) every subcommand uses.
// Every user mistake here ends in user_error: one line naming the value and the fix, exit 2.
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "base/config.h"
#include "base/suggest.h"
#include "base/util.h"

const char *choice_name(const char *choices, int index, char *buf, size_t n) {
    const char *p = choices;
    for (int i = 0; i < index && p; i++) { p = strchr(p, '|'); if (p) p++; }
    if (!p) { snprintf(buf, n, "?"); return buf; }
    size_t len = strcspn(p, "|");
    if (len >= n) len = n - 1;
    memcpy(buf, p, len);
    buf[len] = 0;
    return buf;
}

static int choice_index(const char *choices, const char *value) {
    const char *p = choices;
    for (int i = 0; p; i++) {
        size_t len = strcspn(p, "|");
        if (strlen(value) == len && strncasecmp(p, value, len) == 0) return i;  // 1F1B is 1f1b
        p = strchr(p, '|');
        if (p) p++;
    }
    return -1;
}

int parse_size(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -1;
    double mult = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
            case 'K': mult = 1024.0; break;
            case 'M': mult = 1024.0 * 1024; break;
            case 'G': mult = 1024.0 * 1024 * 1024; break;
            default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'B' || *end == 'b') end++;
        if (*end == 'B') end++;
        if (*end) return -1;
    }
    v *= mult;
    if (v != floor(v) || v > 9.0e18) return -1;
    *out = (int64_t)v;
    return 0;
}

int parse_int_list(const char *s, int *out, int max) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX || n >= max) return -1;
        out[n++] = (int)v;
        while (*end == ' ') end++;
        if (*end == ',') { end++; if (!*end) return -1; }
        else if (*end) return -1;
        p = end;
    }
    return n;
}

int parse_counts(const char *cmd, const char *flag, const char *text, int lo, int max, int *out, int cap) {
    int n = 0;
    const char *p = text;
    if (!*p) user_error("%s: --%s is empty: give a number like 4 or a range like 2:8", cmd, flag);
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b;
        if (end == p || errno)
            user_error("%s: --%s '%s' is not a number, a range A:B or a list: try 4, 2:8 or 2,4,8", cmd, flag, text);
        b = a;
        if (*end == ':') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || errno) user_error("%s: --%s '%s': a range needs two numbers, like 2:8", cmd, flag, text);
            if (b < a)
                user_error("%s: --%s '%s' is a reversed range (empty): write the smaller number first, like %ld:%ld",
                           cmd, flag, text, b, a);
        }
        if (a < lo) user_error("%s: --%s '%s': %ld is below %d, the least", cmd, flag, text, a, lo);
        if (b > max) user_error("%s: --%s '%s': %ld is above the %d supported", cmd, flag, text, b, max);
        for (long v = a; v <= b; v++) {
            if (n == cap)
                user_error("%s: --%s '%s' has more than %d values: use a smaller range", cmd, flag, text, cap);
            out[n++] = (int)v;
        }
        if (*end == ',') {
            end++;
            if (!*end) user_error("%s: --%s '%s' ends with a comma: drop it", cmd, flag, text);
        } else if (*end) {
            user_error("%s: --%s '%s' is not a number, a range A:B or a list: try 4, 2:8 or 2,4,8", cmd, flag, text);
        }
        p = end;
    }
    return n;
}

// Where an option was set: the parse's record (NULL: none kept), and whether on the command line.
typedef struct { OptionsSeen *seen; int typed; } Marks;
static void mark_set(const Marks *m, const Option *o) {
    if (!m || !m->seen) return;
    size_t row = (size_t)(o - m->seen->opts);
    CHECK(row < OPTIONS_MAX, "option table row %zu beyond OPTIONS_MAX", row);
    if (m->typed) m->seen->typed[row] = 1;
    else m->seen->in_config[row] = 1;
}

static long seen_row(const OptionsSeen *s, const char *name) {
    if (!s->opts) return -1;
    for (long i = 0; s->opts[i].name; i++) if (!strcmp(s->opts[i].name, name)) return i;
    fatal("no option '%s' in the table asked", name);
    return -1;
}
int seen_set(const OptionsSeen *s, const char *name) {
    long i = seen_row(s, name);
    return i >= 0 && (s->in_config[i] || s->typed[i]);
}
int seen_typed(const OptionsSeen *s, const char *name) {
    long i = seen_row(s, name);
    return i >= 0 && s->typed[i];
}

// Old spellings kept when one name became a concept's across commands: typed or as a config key,
// each still reaches its option where the table has that option, and --help names it once.
static const struct { const char *alias, *name; } kept_aliases[] = {
    {"stages", "pp"},  // bubble's and plan's --stages: the pipeline degree, --pp as train spells it
    {"parts", "pp"},   // train's --mode manual --parts K: the pipeline's stages, in one process
    {0},
};

static const Option *find_row(const Option *opts, const char *norm) {
    for (const Option *o = opts; o->name; o++) if (strcmp(o->name, norm) == 0) return o;
    return NULL;
}

static const Option *find_option(const Option *opts, const char *name) {
    char norm[128];
    snprintf(norm, sizeof norm, "%s", name);
    for (char *q = norm; *q; q++) if (*q == '_') *q = '-';
    const Option *o = find_row(opts, norm);
    for (int i = 0; !o && kept_aliases[i].alias; i++)
        if (!strcmp(norm, kept_aliases[i].alias)) o = find_row(opts, kept_aliases[i].name);
    return o;
}

// Old short letters kept where the letter reads as something else: -n for train's --steps, right
// after mpiexec -n (the ranks). Typed, each still reaches its option, with a one-line note on stderr
// (rank 0) naming the long one; --help names only the long one. A table whose own row has the letter
// (pingpong's -n, nccl-tests' iterations) keeps it.
static const struct { char letter; const char *name, *why; } kept_shorts[] = {
    {'n', "steps", "after mpiexec -n N (the ranks) it reads as a count of ranks"},
    {0},
};

// The row a short letter names (its own, else a kept short's), or NULL; *kept: the kept short's index, or -1.
static const Option *short_row(const Option *opts, char letter, int *kept) {
    *kept = -1;
    for (const Option *r = opts; r->name; r++) if (r->short_name == letter) return r;
    for (int i = 0; kept_shorts[i].letter; i++)
        if (kept_shorts[i].letter == letter && find_row(opts, kept_shorts[i].name)) {
            *kept = i;
            return find_row(opts, kept_shorts[i].name);
        }
    return NULL;
}

// getopt's letters (shortopts, n bytes) get the kept shorts: -n for --steps, where no row has the letter.
static void add_kept_shorts(const Option *opts, char *shortopts, size_t n) {
    for (int i = 0; kept_shorts[i].letter; i++) {
        int kept;
        const Option *o = short_row(opts, kept_shorts[i].letter, &kept);
        size_t l = strlen(shortopts);
        if (o && kept == i)
            snprintf(shortopts + l, n - l, "%c%s", kept_shorts[i].letter, o->type == OPT_BOOL ? "" : ":");
    }
}

// The k-th kept alias (from 0) of a row of opts, or NULL after the last.
static const char *alias_of(const Option *opts, const Option *o, int k) {
    for (int i = 0; kept_aliases[i].alias; i++)
        if (!strcmp(o->name, kept_aliases[i].name) && !find_row(opts, kept_aliases[i].alias) && k-- == 0)
            return kept_aliases[i].alias;
    return NULL;
}

// The one line for a name that is no row of opts: another tool's flag answered with micropp's,
// else the nearest row's name (an abbreviation names its row), else where to look. typed: the name
// without dashes; where: "" or "f.json:1:2: "; kind: "option" or "key"; shown: typed as echoed.
static _Noreturn void refuse_name(const char *cmd, const Option *opts, const char *typed, const char *where,
                                  const char *kind, const char *shown) {
    const char *dash = strcmp(kind, "key") ? "--" : "";
    const ForeignFlag *f = foreign_flag(typed);
    if (f && (!f->target || find_option(opts, f->target))) {
        if (f->tool) user_error("%s: %s'%s' is %s's name; micropp's is %s", cmd, where, shown, f->tool, f->how);
        user_error("%s: %sunknown %s '%s' (names are not abbreviated): did you mean %s", cmd, where, kind, shown,
                   f->how);
    }
    const char *names[OPTIONS_MAX + 4];
    int n = 0;
    for (const Option *o = opts; o->name && n < OPTIONS_MAX; o++) {
        if (strcmp(o->name, "config")) names[n++] = o->name;
        for (int k = 0; alias_of(opts, o, k) && n < OPTIONS_MAX + 4; k++) names[n++] = alias_of(opts, o, k);
    }
    const char *best = nearest_name(typed, names, n);
    if (best && edit_distance(typed, best) > 3)  // a prefix: getopt_long would have taken it for the row
        user_error("%s: %sunknown %s '%s' (names are not abbreviated): did you mean %s%s?", cmd, where, kind, shown,
                   dash, best);
    if (best) user_error("%s: %sunknown %s '%s': did you mean %s%s? (see '%s --help')", cmd, where, kind, shown, dash,
                         best, cmd);
    user_error("%s: %sunknown %s '%s' (see '%s --help')", cmd, where, kind, shown, cmd);
}

// A user's value as echoed in a message: at most 64 characters ("..." and its length beyond).
#define CLIP_LEN 64
static const char *clip(const char *v, char *buf, size_t n) {
    size_t len = strlen(v);
    if (len <= CLIP_LEN) return v;
    snprintf(buf, n, "%.*s... (%zu characters)", CLIP_LEN, v, len);
    return buf;
}

// ": did you mean X?" when a choice of "a|b|c" is near value, else "".
static const char *nearest_choice(const char *choices, const char *value, char *buf, size_t n) {
    const char *names[64];
    char copy[512];
    snprintf(copy, sizeof copy, "%s", choices);
    int k = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, "|", &save); t && k < 64; t = strtok_r(NULL, "|", &save)) names[k++] = t;
    const char *best = nearest_name(value, names, k);
    if (best) snprintf(buf, n, ": did you mean %s?", best);
    else snprintf(buf, n, "%s", "");
    return buf;
}

// Sets one option from its text form (a flag's argument). where: "--name" or "file: key 'name'".
static void set_from_text(const char *cmd, const Option *o, void *base, const char *text, const char *where,
                          const Marks *m) {
    char *dst = (char *)base + o->offset;
    mark_set(m, o);
    char *end, cb[CLIP_LEN + 40];
    const char *shown = clip(text, cb, sizeof cb);
    switch (o->type) {
    case OPT_INT: case OPT_SIZE: {
        int64_t v;
        if (o->type == OPT_SIZE) {
            if (parse_size(text, &v) != 0)
                user_error("%s: %s expects a size like 4096, 64K, 4M or 1G, got '%s'", cmd, where, shown);
        } else {
            errno = 0;
            long long ll = strtoll(text, &end, 10);
            if (end == text || *end || errno)
                user_error("%s: %s expects an integer, got '%s'", cmd, where, shown);
            v = ll;
        }
        if ((double)v < o->lo || (double)v > o->hi)
            user_error("%s: %s = %s is out of range: use a value in [%.0f, %.0f]", cmd, where, shown, o->lo, o->hi);
        *(int64_t *)dst = v;
        break;
    }
    case OPT_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        // ERANGE: past double's range (1e400: out of range, said so) or below its normal numbers (1e-320:
        // the tiny value strtod gives, checked as any other)
        int past = errno == ERANGE && fabs(v) > 1, tiny = errno == ERANGE && !past;
        if (end == text || *end || (errno && !past && !tiny) || (!isfinite(v) && !past))
            user_error("%s: %s expects a number, got '%s'", cmd, where, shown);
        if (past || v < o->lo || v > o->hi)
            user_error("%s: %s = %s is out of range: use a value in [%g, %g]", cmd, where, shown, o->lo, o->hi);
        // cppcheck-suppress invalidPointerCast ; dst is the option's field, a double (OPT_FLOAT)
        *(double *)dst = v;
        break;
    }
    case OPT_STR:
        if (!*text)  // an unset variable ("--resume $CKPT") must not pass for "not given"
            user_error("%s: %s is empty: give a value, or leave the option out", cmd, where);
        if (strlen(text) >= PATH_LEN)
            user_error("%s: %s is longer than %d characters: use a shorter value", cmd, where, PATH_LEN - 1);
        strcpy(dst, text);
        break;
    case OPT_CHOICE: {
        int i = choice_index(o->choices, text);
        if (i < 0) {
            char near[64];
            user_error("%s: %s = '%s' is not one of %s%s", cmd, where, shown, o->choices,
                       nearest_choice(o->choices, text, near, sizeof near));
        }
        *(int *)dst = i;
        break;
    }
    case OPT_BOOL:
        if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on")) *(int *)dst = 1;
        else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "off"))
            *(int *)dst = 0;
        else user_error("%s: %s expects true or false, got '%s'", cmd, where, shown);
        break;
    }
}

static void line_col(const char *text, const char *at, int *line, int *col) {
    *line = 1; *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') { (*line)++; *col = 1; } else (*col)++;
    }
}

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

// Where each key of the top-level object starts, in order: a flat scan of the text that skips
// strings and tracks depth (cJSON keeps no positions). Returns how many keys were found.
static int key_positions(const char *text, const char **at, int cap) {
    int depth = 0, n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') depth--;
        else if (*p == '"') {
            const char *start = p++;
            while (*p && *p != '"') p += *p == '\\' && p[1] ? 2 : 1;
            if (!*p) break;
            const char *q = p + 1;
            while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
            if (depth == 1 && *q == ':' && n < cap) at[n++] = start;
        }
    }
    return n;
}

// The config's keys, checked before any is used: each names an option, and none twice (two
// spellings of one option, log_every and log-every, count as the same key).
static void check_keys(const char *cmd, const Option *opts, const char *path, const char *text, const cJSON *root,
                       const char **at, int n_at) {
    int i = 0;
    char cb[CLIP_LEN + 40];
    for (const cJSON *it = root->child; it; it = it->next, i++) {
        int line = 0, col = 0;
        if (i < n_at) line_col(text, at[i], &line, &col);
        const Option *o = find_option(opts, it->string);
        if (!o || !strcmp(o->name, "config")) {
            char where[PATH_LEN + 40];
            snprintf(where, sizeof where, "%s:%d:%d: ", path, line, col);
            refuse_name(cmd, opts, it->string, where, "key", clip(it->string, cb, sizeof cb));
        }
        int j = 0;
        for (const cJSON *e = root->child; e != it; e = e->next, j++) {
            if (find_option(opts, e->string) != o) continue;
            int l0 = 0, c0 = 0;
            if (j < n_at) line_col(text, at[j], &l0, &c0);
            user_error("%s: %s:%d:%d: key '%s' is given twice (first at line %d, column %d): keep one", cmd, path, line,
                       col, it->string, l0, c0);
        }
    }
}

void options_load_json(const char *cmd, const Option *opts, void *base, OptionsSeen *seen, const char *path) {
    if (seen) seen->opts = opts;
    const Marks marks = {seen, 0}, *m = &marks;
    if (!*path) user_error("%s: --config is empty: give a value, or leave the option out", cmd);
    char why[PATH_LEN + 256] = "", what[200];
    int fd = open_input(path, what, sizeof what);  // a FIFO or a device is refused, never waited on
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) { snprintf(what, sizeof what, "%s", strerror(errno)); close(fd); }
    if (!f) snprintf(why, sizeof why, "%s: cannot read config '%s': %s", cmd, path, what);
    agree_on_read_error(why);  // a node that cannot see the file ends every rank, not just itself
    if (!f) return;       // (not reached: agree_on_error ended every rank)
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 0 || len > (64 << 20)) {
        fclose(f);
        user_error("%s: config '%s' is not a regular file under 64 MiB", cmd, path);
    }
    char *text = xmalloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    text[got] = 0;
    int depth = 0, deepest = 0;  // cJSON refuses deep nesting as if it were a syntax error: say what it is
    for (const char *p = text; *p; p++) {
        if (*p == '"') { for (p++; *p && *p != '"'; p += *p == '\\' && p[1] ? 2 : 1) {} if (!*p) break; }
        else if (*p == '{' || *p == '[') { if (++depth > deepest) deepest = depth; }
        else if (*p == '}' || *p == ']') depth--;
    }
    if (deepest > 64) {
        free(text);
        user_error("%s: %s: nested %d levels deep: a config is one object of options (a list at most inside it)", cmd,
                   path, deepest);
    }
    const char *err_at = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &err_at, 1);
    if (!root) {
        int line, col;
        line_col(text, err_at ? err_at : text + got, &line, &col);
        free(text);
        user_error("%s: %s:%d:%d: JSON syntax error (check commas, quotes and braces near there)", cmd, path, line,
                   col);
    }
    if (!cJSON_IsObject(root)) {
        free(text);
        user_error("%s: %s: the config must be a JSON object { ... }", cmd, path);
    }
    enum { MAX_KEYS = 1024 };
    const char *at[MAX_KEYS];
    int n_at = key_positions(text, at, MAX_KEYS), i = 0;
    check_keys(cmd, opts, path, text, root, at, n_at);
    for (cJSON *it = root->child; it; it = it->next, i++) {
        const Option *o = find_option(opts, it->string);
        char where[PATH_LEN + 160];
        int line = 0, col = 0;
        if (i < n_at) line_col(text, at[i], &line, &col);
        snprintf(where, sizeof where, "%s:%d:%d: key '%s'", path, line, col, it->string);
        char buf[64];
        switch (o->type) {
        case OPT_INT: case OPT_SIZE: case OPT_FLOAT:
            if (cJSON_IsString(it) && o->type == OPT_SIZE) {
                set_from_text(cmd, o, base, it->valuestring, where, m);
                break;
            }
            if (!cJSON_IsNumber(it)) user_error("%s: %s must be a number, not %s", cmd, where, json_type_name(it));
            if (o->type != OPT_FLOAT && it->valuedouble != floor(it->valuedouble))
                user_error("%s: %s must be an integer, got %g", cmd, where, it->valuedouble);
            if (o->type == OPT_FLOAT) snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
            else snprintf(buf, sizeof buf, "%.0f", it->valuedouble);
            set_from_text(cmd, o, base, buf, where, m);
            break;
        case OPT_BOOL:
            if (!cJSON_IsBool(it)) user_error("%s: %s must be true or false, not %s", cmd, where, json_type_name(it));
            *(int *)((char *)base + o->offset) = cJSON_IsTrue(it);
            mark_set(m, o);
            break;
        case OPT_STR: case OPT_CHOICE:
            if (cJSON_IsArray(it) && o->type == OPT_STR) {  // e.g. "partition": [5,4,4,3]
                char list[PATH_LEN] = "";
                for (cJSON *e = it->child; e; e = e->next) {
                    if (!cJSON_IsNumber(e)) user_error("%s: %s must be an array of integers", cmd, where);
                    size_t l = strlen(list);
                    snprintf(list + l, sizeof list - l, "%s%.0f", l ? "," : "", e->valuedouble);
                }
                set_from_text(cmd, o, base, list, where, m);
                break;
            }
            if (cJSON_IsNumber(it) && o->type == OPT_STR && it->valuedouble == floor(it->valuedouble)) {  // "stages": 2
                snprintf(buf, sizeof buf, "%.0f", it->valuedouble);
                set_from_text(cmd, o, base, buf, where, m);
                break;
            }
            if (!cJSON_IsString(it)) user_error("%s: %s must be a string, not %s", cmd, where, json_type_name(it));
            set_from_text(cmd, o, base, it->valuestring, where, m);
            break;
        }
    }
    cJSON_Delete(root);
    free(text);
}

static void (*agree_hook)(const char *cmd, const char *resolved);
void options_set_agree_hook(void (*hook)(const char *cmd, const char *resolved)) { agree_hook = hook; }

// "name=value\n" for every option: what the ranks of one job must agree on.
static void options_agree(const char *cmd, const Option *opts, const void *base) {
    size_t cap = 1024, n = 0;
    char *t = xmalloc(cap);
    for (const Option *o = opts; o->name; o++) {
        const char *v = (const char *)base + o->offset;
        char line[PATH_LEN + 160];
        switch (o->type) {
        case OPT_INT:
        case OPT_SIZE:
            snprintf(line, sizeof line, "%s=%lld\n", o->name, (long long)*(const int64_t *)(const void *)v);
            break;
        case OPT_FLOAT: snprintf(line, sizeof line, "%s=%.17g\n", o->name, *(const double *)(const void *)v); break;
        case OPT_STR: snprintf(line, sizeof line, "%s=%s\n", o->name, v); break;
        default: snprintf(line, sizeof line, "%s=%d\n", o->name, *(const int *)(const void *)v);
        }
        size_t l = strlen(line);
        while (n + l + 1 > cap) { cap *= 2; char *g = realloc(t, cap); CHECK(g, "out of memory"); t = g; }
        memcpy(t + n, line, l + 1);
        n += l;
    }
    agree_hook(cmd, t);
    free(t);
}

// Every long option typed names a row exactly (or in its underscore spelling): getopt_long takes a
// unique prefix for its option, and --micro-batch 8 (a size to a Megatron user) became
// --micro-batches 8 (a count). Refused before any is read, with the row meant or the tool's name.
static void refuse_unknown_names(const char *cmd, const Option *opts, int argc, char **argv) {
    char cb[CLIP_LEN + 40];
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) continue;  // a value, an argument, or "-"
        if (a[1] != '-') {  // short options, bundled or not: skip the value of the one that takes it
            for (const char *q = a + 1; *q; q++) {
                int kept;
                const Option *o = short_row(opts, *q, &kept);
                if (!o) break;  // getopt_long names it
                if (o->type != OPT_BOOL) { i += !q[1]; break; }
            }
            continue;
        }
        size_t len = strcspn(a + 2, "=");
        char *name = xmalloc(len + 3);
        snprintf(name, len + 3, "%.*s", (int)len + 2, a);  // "--name"
        const Option *o = find_option(opts, name + 2);
        if (o) { free(name); i += o->type != OPT_BOOL && !a[2 + len]; continue; }
        refuse_name(cmd, opts, name + 2, "", "option", clip(name, cb, sizeof cb));
    }
}

// A flag given twice on the command line (--steps 2 --steps 3, or -n 2 --steps 3) is a mistake: which
// was meant? Refused before anything is read, as a key given twice in a config is. (An option in the
// --config file and again on the command line is the documented override, not a repeat.)
static void refuse_repeats(const char *cmd, const Option *opts, int n, const struct option *lo, const char *shortopts,
                           int argc, char **argv) {
    const char **first = xcalloc((size_t)n, sizeof *first);  // each option's first value ("" for a switch)
    char ca[CLIP_LEN + 40], cb[CLIP_LEN + 40];
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, shortopts, lo, NULL)) != -1) {
        int i = c >= 1000 ? c - 1000 : -1, kept;
        const Option *r = i < 0 && c != '?' && c != ':' ? short_row(opts, (char)c, &kept) : NULL;
        if (r) i = (int)(r - opts);
        if (i < 0) continue;  // an unknown option, or one missing its value: the parse says so
        const char *v = opts[i].type == OPT_BOOL ? "" : optarg;
        if (first[i] && opts[i].type == OPT_BOOL) user_error("%s: --%s given twice: give it once", cmd, opts[i].name);
        if (first[i])
            user_error("%s: --%s given twice (%s and %s): give it once", cmd, opts[i].name,
                       clip(first[i], ca, sizeof ca), clip(v, cb, sizeof cb));
        first[i] = v;
    }
    free(first);
}

void options_parse(const char *cmd, const Option *opts, void *base, OptionsSeen *seen, int argc, char **argv,
                   const char *usage, const char *examples) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (strcmp(argv[i], "--help") && strcmp(argv[i], "-h")) continue;
        if (g_rank == 0) options_help(stdout, cmd, usage, opts, base, examples);
        finish(0);
    }
    int n = 0;
    while (opts[n].name) n++;
    int n_alias = 0;
    while (kept_aliases[n_alias].alias) n_alias++;
    struct option *lo = xcalloc((size_t)(n * 2 + n_alias + 1), sizeof *lo);
    char shortopts[256] = ":";
    int k = 0;
    for (int i = 0; i < n; i++) {
        int has_arg = opts[i].type == OPT_BOOL ? no_argument : required_argument;
        lo[k++] = (struct option){opts[i].name, has_arg, NULL, 1000 + i};
        if (strchr(opts[i].name, '-')) {  // also accept --log_every for --log-every
            char *alias = xmalloc(strlen(opts[i].name) + 1);
            strcpy(alias, opts[i].name);
            for (char *q = alias; *q; q++) if (*q == '-') *q = '_';
            lo[k++] = (struct option){alias, has_arg, NULL, 1000 + i};
        }
        for (int a = 0; alias_of(opts, &opts[i], a); a++)  // --stages and --parts for --pp
            lo[k++] = (struct option){alias_of(opts, &opts[i], a), has_arg, NULL, 1000 + i};
        if (opts[i].short_name) {
            size_t l = strlen(shortopts);
            shortopts[l] = opts[i].short_name;
            shortopts[l + 1] = 0;
            if (has_arg == required_argument) strcat(shortopts, ":");
        }
    }
    add_kept_shorts(opts, shortopts, sizeof shortopts);
    refuse_unknown_names(cmd, opts, argc, argv);
    refuse_repeats(cmd, opts, n, lo, shortopts, argc, argv);
    CHECK(n <= OPTIONS_MAX, "%s: %d options, more than OPTIONS_MAX", cmd, n);
    if (seen) *seen = (OptionsSeen){.opts = opts};
    // Pass 1: only --config, so that flags given on the command line win over the file.
    const Option *cfg = find_option(opts, "config");
    if (cfg) {
        opterr = 0;
        optind = 1;
        int c;
        while ((c = getopt_long(argc, argv, shortopts, lo, NULL)) != -1) {
            if ((c >= 1000 && &opts[c - 1000] == cfg) || c == cfg->short_name) {
                options_load_json(cmd, opts, base, seen, optarg);
                snprintf((char *)base + cfg->offset, PATH_LEN, "%s", optarg);  // (which file it was: an input)
            }
        }
    }
    opterr = 0;
    optind = 1;
    const Marks typed = {seen, 1};
    int c;
    char cb[CLIP_LEN + 40];
    while ((c = getopt_long(argc, argv, shortopts, lo, NULL)) != -1) {
        const Option *o = NULL;
        if (c >= 1000) o = &opts[c - 1000];
        else if (c == '?') {
            if (optopt) user_error("%s: unknown option '-%c' (see '%s --help')", cmd, optopt, cmd);
            user_error("%s: unknown option '%s' (see '%s --help')", cmd, clip(argv[optind - 1], cb, sizeof cb), cmd);
        } else if (c == ':') {
            user_error("%s: option '%s' needs a value (see '%s --help')", cmd, clip(argv[optind - 1], cb, sizeof cb),
                       cmd);
        } else {
            int kept;
            o = short_row(opts, (char)c, &kept);
            if (o && kept >= 0 && g_rank == 0)
                fprintf(stderr, "%s: note: -%c is --%s, and %s: spell it --%s (-%c still works)\n", cmd,
                        kept_shorts[kept].letter, o->name, kept_shorts[kept].why, o->name, kept_shorts[kept].letter);
        }
        if (!o) user_error("%s: unknown option '%s'", cmd, clip(argv[optind - 1], cb, sizeof cb));
        if (!strcmp(o->name, "config")) continue;
        char where[160];
        snprintf(where, sizeof where, "--%s", o->name);
        if (o->type == OPT_BOOL) { *(int *)((char *)base + o->offset) = 1; mark_set(&typed, o); }
        else set_from_text(cmd, o, base, optarg, where, &typed);
    }
    if (optind < argc)
        user_error("%s: unexpected argument '%s' (options start with --; see '%s --help')", cmd,
                   clip(argv[optind], cb, sizeof cb), cmd);
    for (int i = 0; i < k; i++) if (strchr(lo[i].name, '_')) free((char *)lo[i].name);  // the underscore spellings
    free(lo);
    if (agree_hook) options_agree(cmd, opts, base);
}

// The sections of a table's --help (options_sections): a title before each named row.
enum { MAX_SECTIONED = 8 };
static struct { const Option *opts; const OptionSection *sections; } sectioned[MAX_SECTIONED];
void options_sections(const Option *opts, const OptionSection *sections) {
    for (int i = 0; i < MAX_SECTIONED; i++)
        if (!sectioned[i].opts || sectioned[i].opts == opts) {
            sectioned[i].opts = opts;
            sectioned[i].sections = sections;
            return;
        }
}
static const char *section_at(const Option *opts, const Option *o) {
    for (int i = 0; i < MAX_SECTIONED && sectioned[i].opts; i++)
        for (const OptionSection *s = sectioned[i].opts == opts ? sectioned[i].sections : NULL; s && s->first; s++)
            if (!strcmp(s->first, o->name)) return s->title;
    return NULL;
}

// The width help wraps to: $COLUMNS (a terminal's, when the shell exports it), else 80; 60 .. 100.
static int help_width(void) {
    const char *e = getenv("COLUMNS");
    int w = e && *e ? atoi(e) : 80;
    return w < 60 ? 60 : w > 100 ? 100 : w;
}

// text from column `indent` on, wrapped to `width` columns at spaces and after the '|' of a list of
// choices; the first line continues whatever is already printed at column `at`.
static void print_wrapped(FILE *f, const char *text, int at, int indent, int width) {
    const char *p = text;
    int col = at, glued = 0;  // glued: the piece before ended in '|' (no space between)
    while (*p) {
        size_t word = strcspn(p, " |");
        if (p[word] == '|') word++;
        int gap = col > indent && !glued;
        if (col > indent && col + gap + (int)word > width) { fprintf(f, "\n%*s", indent, ""); col = indent; gap = 0; }
        else if (col < indent) { fprintf(f, "%*s", indent - col, ""); col = indent; gap = 0; }
        if (gap) { fputc(' ', f); col++; }
        fprintf(f, "%.*s", (int)word, p);
        col += (int)word;
        glued = p[word - 1] == '|';
        p += word;
        while (*p == ' ') { p++; glued = 0; }
    }
    fputc('\n', f);
}

// One row's text: its help, its kept alias, its choices and its default.
static void row_text(const Option *opts, const Option *o, const void *defaults, char *out, size_t n) {
    const char *v = (const char *)defaults + o->offset;
    char kept[64] = "";
    for (int k = 0; alias_of(opts, o, k); k++)
        snprintf(kept + strlen(kept), sizeof kept - strlen(kept), "%s--%s", k ? ", " : " (also ", alias_of(opts, o, k));
    if (kept[0]) snprintf(kept + strlen(kept), sizeof kept - strlen(kept), ")");
    char def[PATH_LEN + 32] = "", buf[64];
    switch (o->type) {
    case OPT_INT: case OPT_SIZE: snprintf(def, sizeof def, " (%lld)", (long long)*(const int64_t *)v); break;
    // cppcheck-suppress invalidPointerCast ; v is the option's field, a double (OPT_FLOAT)
    case OPT_FLOAT: snprintf(def, sizeof def, " (%g)", *(const double *)v); break;
    case OPT_STR: if (*v) snprintf(def, sizeof def, " (%s)", v); break;
    case OPT_CHOICE:
        snprintf(def, sizeof def, " [%s] (%s)", o->choices, choice_name(o->choices, *(const int *)v, buf, sizeof buf));
        break;
    case OPT_BOOL: break;
    }
    snprintf(out, n, "%s%s", o->help, kept);
    size_t l = strlen(out);
    snprintf(out + l, n - l, "%s", def);
}

void options_help(FILE *f, const char *cmd, const char *usage, const Option *opts,
                  const void *defaults, const char *examples) {
    enum { COL = 30 };  // the help text's column; a longer flag puts it on the next line
    int width = help_width();
    fprintf(f, "Usage: %s\n\n", usage);
    const char *head = "Options (each is also a JSON config key; underscores work for dashes):";
    print_wrapped(f, find_option(opts, "config") ? head : "Options:", 0, 0, width);
    for (const Option *o = opts; o->name; o++) {
        const char *title = section_at(opts, o);
        if (title) fprintf(f, "\n%s:\n", title);
        char left[96], text[2 * PATH_LEN + 1024];
        if (o->short_name)
            snprintf(left, sizeof left, "  -%c, --%s%s%s", o->short_name, o->name, o->metavar ? " " : "",
                     o->metavar ? o->metavar : "");
        else
            snprintf(left, sizeof left, "      --%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        row_text(opts, o, defaults, text, sizeof text);
        fputs(left, f);
        int at = (int)strlen(left);
        if (at >= COL - 1) { fputc('\n', f); at = 0; }
        print_wrapped(f, text, at, COL, width);
    }
    fprintf(f, "%-*s%s\n", COL, "  -h, --help", "print this help and exit");
    if (examples) fprintf(f, "\nExamples:\n%s", examples);
    (void)cmd;
}

void json_print(cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
}
