// train/metrics.c: --metrics FILE (metrics.h): rank 0 writes a JSON line per step (--metrics-every), per
// evaluation and per epoch, flushed as it goes; a resumed run keeps the lines up to its step (read back with cJSON)
// and appends after them, so resuming never duplicates a step; a file that is no metrics log is never
// replaced. Write failures are kept for the end (exit 1).
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/safetensors.h"
#include "base/util.h"
#include "train/metrics.h"

#define METRICS_MAX_BYTES (1LL << 30)  // a resumed run's log read back: 10 million lines and more

// The step of one line: 0, or -1 when it is no metrics line (a JSON object with an integer "step" >= 0).
static int line_step(const char *line, long long *step) {
    cJSON *o = cJSON_Parse(line);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    int ok = cJSON_IsObject(o) && cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble == floor(s->valuedouble);
    if (ok) *step = (long long)s->valuedouble;
    cJSON_Delete(o);
    return ok ? 0 : -1;
}

// Why line line_no (len bytes, not ended by a newline when `cut`) stops the run ("" when it is a metrics
// line): a NUL byte, or no JSON object with a "step" (a file of the user's is never overwritten). A last
// line cut short by the earlier run's end (`cut`, after a whole metrics line, opening as one does) is no
// reason: it is dropped.
static void bad_line(const char *path, char *line, size_t len, int line_no, int cut, char *why, size_t n) {
    if (memchr(line, 0, len))
        snprintf(why, n,
                 "train: --metrics '%s': line %d holds a NUL byte, so it is no metrics log: give another file to "
                 "--metrics, or move that one away",
                 path, line_no);
    else if (cut ? line_no == 1 || line[0] != '{' : line_step(line, &(long long){0}) != 0)
        snprintf(why, n,
                 "train: --metrics '%s': line %d is no metrics line (a JSON object with a \"step\"): give "
                 "another file to --metrics, or move that one away",
                 path, line_no);
}

// The lines of the earlier log up to step `start` (malloc'd; none when start is 0, a fresh run; "" when
// the file is new or no regular file), or NULL with why filled: a file that is not a metrics log (every
// line one, but a last one cut short; empty is one) is never replaced, fresh run or resumed.
static char *kept_lines(const char *path, int start, int *kept, char *why, size_t n) {
    struct stat st;
    *kept = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return calloc(1, 1);
    uint8_t *buf;
    size_t len;
    char err[PATH_LEN + 128];
    if (read_file(path, (size_t)METRICS_MAX_BYTES, &buf, &len, err, sizeof err)) {
        snprintf(why, n, "train: --metrics: %s (give another file)", err);
        return NULL;
    }
    char *text = xmalloc(len + 1), *out = xmalloc(len + 1), *o = out, *end = text + len;
    memcpy(text, buf, len);
    text[len] = 0;
    free(buf);
    int line_no = 0;
    for (char *line = text, *nl; line < end && !why[0]; line = nl + 1) {
        nl = memchr(line, '\n', (size_t)(end - line));
        int cut = nl == NULL;
        if (cut) nl = end;
        *nl = 0;
        bad_line(path, line, (size_t)(nl - line), ++line_no, cut, why, n);
        long long step;
        if (why[0] || cut || start <= 0 || line_step(line, &step) || step > start) continue;
        o += sprintf(o, "%s\n", line);
        (*kept)++;
    }
    *o = 0;
    free(text);
    if (!why[0]) return out;
    free(out);
    return NULL;
}

void metrics_open(Metrics *mx, const char *path, int rank, int start) {
    memset(mx, 0, sizeof *mx);
    if (!path[0]) return;
    snprintf(mx->path, sizeof mx->path, "%s", path);
    char why[3 * PATH_LEN] = "";
    if (rank == 0) {  // rank 0 writes the file, so its verdict is every rank's
        char *keep = kept_lines(path, start, &mx->kept, why, sizeof why);
        int err = keep ? out_open_log(&mx->out, path, keep) : 0;
        if (err)
            snprintf(why, sizeof why, "train: cannot write --metrics '%s': %s (%s)", path, strerror(err),
                     out_hint(err));
        mx->on = keep && !err;
        free(keep);
    }
    agree_on_error(why[0] ? why : NULL);
}

// Writes the line, flushed at once; the first failure is kept and ends the writing (the run goes on).
static void put_line(Metrics *mx, const char *line) {
    if (!mx->on || mx->err[0]) return;
    errno = 0;
    if (fputs(line, mx->out.f) == EOF || fflush(mx->out.f) != 0) {
        int err = errno ? errno : EIO;
        snprintf(mx->err, sizeof mx->err, "train: writing --metrics '%s' failed: %s: %s; the training itself completed",
                 mx->path, strerror(err), out_write_hint(err));
    }
}

// `"key":value` (and a comma before it unless first), null when not finite (JSON has no NaN).
static int put_num(char *s, size_t n, const char *key, const char *fmt, double v) {
    int k = snprintf(s, n, ",\"%s\":", key);
    if (!isfinite(v)) return k + snprintf(s + k, n - (size_t)k, "null");
    return k + snprintf(s + k, n - (size_t)k, fmt, v);
}

void metrics_step(Metrics *mx, int step, double loss, double lr, double step_s, double samples_s, double bubble,
                  double mfu, double grad_norm, int clipped, int postval, const MoeSteps *moe) {
    if (!mx->on) return;
    char s[512 + 24 * 4096];  // (a load per expert)
    int k = snprintf(s, sizeof s, "{\"step\":%d", step);
    k += put_num(s + k, sizeof s - (size_t)k, "loss", "%.7g", loss);
    k += put_num(s + k, sizeof s - (size_t)k, "lr", "%.7g", lr);
    k += put_num(s + k, sizeof s - (size_t)k, "step_ms", "%.4f", step_s * 1e3);
    k += put_num(s + k, sizeof s - (size_t)k, "samples_s", "%.1f", samples_s);
    k += put_num(s + k, sizeof s - (size_t)k, "mfu", "%.6g", mfu);
    if (!isnan(bubble)) k += put_num(s + k, sizeof s - (size_t)k, "bubble", "%.4f", bubble);
    if (!isnan(grad_norm)) {
        k += put_num(s + k, sizeof s - (size_t)k, "grad_norm", "%.7g", grad_norm);
        k += snprintf(s + k, sizeof s - (size_t)k, ",\"clipped\":%s", clipped ? "true" : "false");
    }
    if (postval >= 0)
        k += snprintf(s + k, sizeof s - (size_t)k, ",\"post_validation\":\"%s\"", measure_postval_name(postval));
    for (int e = 0; moe && e < moe->E; e++)
        k += snprintf(s + k, sizeof s - (size_t)k, "%s%.0f", e ? "," : ",\"moe_load\":[",
                      moe->load[(size_t)(step - 1) * moe->E + e]);
    if (moe && moe->E) {
        k += snprintf(s + k, sizeof s - (size_t)k, "]");
        k += put_num(s + k, sizeof s - (size_t)k, "moe_dropped", "%.0f", moe->dropped[step - 1]);
        k += put_num(s + k, sizeof s - (size_t)k, "moe_aux", "%.7g", moe->aux[step - 1]);
    }
    snprintf(s + k, sizeof s - (size_t)k, "}\n");
    put_line(mx, s);
}

void metrics_eval(Metrics *mx, int step, double test_loss, double accuracy) {
    if (!mx->on) return;
    char s[256];
    int k = snprintf(s, sizeof s, "{\"step\":%d", step);
    k += put_num(s + k, sizeof s - (size_t)k, "test_loss", "%.7g", test_loss);
    k += put_num(s + k, sizeof s - (size_t)k, "accuracy", "%.5f", accuracy);
    snprintf(s + k, sizeof s - (size_t)k, "}\n");
    put_line(mx, s);
}

void metrics_epoch(Metrics *mx, const EpochStat *e, int step) {
    if (!mx->on) return;
    char s[512];
    int k = snprintf(s, sizeof s, "{\"epoch\":%d,\"step\":%d", e->epoch, step);
    k += put_num(s + k, sizeof s - (size_t)k, "train_loss", "%.7g", e->train_loss);
    k += put_num(s + k, sizeof s - (size_t)k, "test_loss", "%.7g", e->test_loss);
    k += put_num(s + k, sizeof s - (size_t)k, "accuracy", "%.5f", e->test_accuracy);
    k += put_num(s + k, sizeof s - (size_t)k, "time_s", "%.6g", e->time_s);
    snprintf(s + k, sizeof s - (size_t)k, "}\n");
    put_line(mx, s);
}

int metrics_close(Metrics *mx, char *why, size_t n) {
    if (!mx->on) return 0;
    int err = out_commit(&mx->out);
    mx->on = 0;
    if (err && !mx->err[0])
        snprintf(mx->err, sizeof mx->err, "train: writing --metrics '%s' failed: %s: %s; the training itself completed",
                 mx->path, strerror(err), out_write_hint(err));
    if (!mx->err[0]) return 0;
    if (!why[0]) snprintf(why, n, "%s", mx->err);
    return 1;
}
