// planner/validate.c: `plan --auto --validate K` (planner/validate.h): the rows chosen from the ranked search,
// each run as a child job of the world's size (mpiexec, this binary's train, a few steps), its measured step
// beside the prediction, the regret, and the refit: per family, the median of measured over predicted.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cjson/cJSON.h>
#include "base/outfile.h"
#include "base/util.h"
#include "comms.h"
#include "planner/validate.h"

extern char **environ;

void validate_child_env(void) {
    static const char *const parent[] = {"PMI_", "HYDI_", "HYDRA_", "MPI_LOCALNRANKS", "MPI_LOCALRANKID",
                                         "MPIR_CVAR_CH3_INTERFACE_HOSTNAME", "OMPI_", "PMIX_"};
    char name[256];
    for (int again = 1; again;) {  // (unsetenv moves environ: look again from the start after each)
        again = 0;
        for (char **e = environ; *e && !again; e++)
            for (size_t i = 0; i < sizeof parent / sizeof *parent && !again; i++)
                if (!strncmp(*e, parent[i], strlen(parent[i]))) {
                    size_t k = strcspn(*e, "=");
                    snprintf(name, sizeof name, "%.*s", (int)(k < sizeof name ? k : sizeof name - 1), *e);
                    again = unsetenv(name) == 0;
                }
    }
}

int validate_one_node(void) {
    MPI_Comm node;
    int here = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &here);
    MPI_Comm_free(&node);
    return here == comm_world_size();
}

int validate_agree(int code) {
    MPI_Request req;
    int done = 0;
    MPI_Ibcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) usleep(20000);
    return code;
}

// The rows run (0-based ranks of the search, ascending): the first K that fit, then the first fitting row of
// each family that none of those is.
static int chosen_rows(const Search *s, int K, int *rows) {
    int n = 0, have[FAMILIES] = {0};
    for (int i = 0; i < s->n_fit && i < K; i++) {
        rows[n++] = i;
        have[layout_family(s->c[i].l.pp, s->c[i].l.dp, s->c[i].l.tp)] = 1;
    }
    for (int i = K; i < s->n_fit; i++) {
        int f = layout_family(s->c[i].l.pp, s->c[i].l.dp, s->c[i].l.tp);
        if (!have[f]) rows[n++] = i, have[f] = 1;
    }
    return n;
}

// A file's text (malloc'd, "" when it cannot be read).
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = xmalloc(1 << 20);
    size_t got = f ? fread(text, 1, (1 << 20) - 1, f) : 0;
    if (f) fclose(f);
    text[got] = 0;
    return text;
}

// The last line of text that is not empty, into out.
static void last_line(const char *text, char *out, size_t n) {
    size_t len = strlen(text);
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
    size_t start = len;
    while (start && text[start - 1] != '\n') start--;
    snprintf(out, n, "%.*s", (int)(len - start), text + start);
}

// One row run: mpiexec -n N <this binary> train <its options> --steps S --log-every 0 --json; its median
// step (the first left out) in *ms: 0, or -1 with why (its exit and the last line it wrote to stderr).
static int run_row(const Candidate *k, const TrainConfig *c, const ValidateAsk *a, double *ms, char *why,
                   size_t n) {
    char self[PATH_LEN] = "", cmd[4 * PATH_LEN + 600], line[3 * PATH_LEN + 400];
    char out_path[] = "/tmp/micropp-validate-XXXXXX", err_path[] = "/tmp/micropp-validate-XXXXXX";
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return snprintf(why, n, "cannot find this binary (/proc/self/exe) to run it with"), -1;
    self[len] = 0;
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    if (fo < 0 || fe < 0) return snprintf(why, n, "cannot make a file in /tmp: %s", strerror(errno)), -1;
    close(fo);
    close(fe);
    layout_command(&k->l, c, a->config, a->model_flags, line, sizeof line);
    const char *args = strstr(line, " train ");
    char timeout[64] = "";
    if (a->timeout > 0) snprintf(timeout, sizeof timeout, " --timeout %g", a->timeout);
    snprintf(cmd, sizeof cmd, "mpiexec -n %d '%s'%s --steps %d --log-every 0 --json%s </dev/null >%s 2>%s", a->world,
             self, args ? args : " train", a->steps, timeout, out_path, err_path);
    fflush(stdout);
    int rc = system(cmd);
    char *text = slurp(out_path), *errs = slurp(err_path);
    cJSON *o = rc == 0 ? cJSON_Parse(text) : NULL, *v = cJSON_GetObjectItem(o, "step_ms_median");
    *ms = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(*ms > 0)) {
        char last[600];
        last_line(errs, last, sizeof last);
        snprintf(why, n, "exit %d%s%s", WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, last[0] ? ": " : "", last);
    }
    cJSON_Delete(o);
    free(text);
    free(errs);
    unlink(out_path);
    unlink(err_path);
    return *ms > 0 ? 0 : -1;
}

// The refit: each family's factor times the median of its rows' measured over predicted steps (the
// predictions already carry the factor the profile had); a family not run keeps its factor.
static void refit_families(const Profile *pf, const Search *s, const int *rows, const double *ms, int n_rows,
                           Profile *out, int *counts) {
    double *ratio = xmalloc(sizeof(double) * (size_t)(n_rows + 1));
    for (int f = 0; f < FAMILIES; f++) {
        int m = 0;
        for (int j = 0; j < n_rows; j++) {
            const Candidate *k = &s->c[rows[j]];
            if (ms[j] > 0 && layout_family(k->l.pp, k->l.dp, k->l.tp) == f) ratio[m++] = ms[j] * 1e-3 / k->pr.step_s;
        }
        double had = pf->refit[f] > 0 ? pf->refit[f] : 1;
        out->refit[f] = m ? had * median(ratio, m) : pf->refit[f];
        counts[f] = m;
    }
    free(ratio);
}

// The refit profile written: 0, or -1 with why.
static int write_refit(const Profile *q, const char *path, char *why, size_t n) {
    OutFile o;
    char *text = cost_to_json(q);
    int err = out_open_now(&o, path);
    if (!err) {
        fputs(text, o.f);
        fputc('\n', o.f);
        err = out_commit(&o);
    }
    free(text);
    if (err) return snprintf(why, n, "cannot write the refit profile '%s': %s: %s", path, strerror(err),
                             out_write_hint(err)), -1;
    return 0;
}

// The regret and the median error of the rows measured; the number of them.
static int print_summary(const Search *s, const int *rows, const double *ms, int n_rows) {
    double *err = xmalloc(sizeof(double) * (size_t)(n_rows + 1));
    int m = 0, best = -1;
    for (int j = 0; j < n_rows; j++) {
        if (!(ms[j] > 0)) continue;
        err[m++] = fabs(s->c[rows[j]].pr.step_s * 1e3 / ms[j] - 1);
        if (best < 0 || ms[j] < ms[best]) best = j;
    }
    if (m && rows[0] == 0 && ms[0] > 0) {
        char a[96], b[96];
        printf("regret: the pick (%s) measured %.2f ms, the best measured (%s) %.2f ms: %.2fx\n",
               layout_name(&s->c[0].l, a, sizeof a), ms[0], layout_name(&s->c[rows[best]].l, b, sizeof b), ms[best],
               ms[0] / ms[best]);
    } else if (m) printf("regret: unknown: the pick did not run\n");
    if (m) printf("median |error| %.1f%% over %d layout%s\n", 100 * median(err, m), m, m == 1 ? "" : "s");
    free(err);
    return m;
}

int validate_run(const Profile *pf, const Search *s, const TrainConfig *c, const ValidateAsk *a, char *err,
                 size_t n) {
    int *rows = xmalloc(sizeof(int) * (size_t)(s->n_fit + FAMILIES)), counts[FAMILIES];
    int n_rows = chosen_rows(s, a->K, rows);
    double *ms = xmalloc(sizeof(double) * (size_t)n_rows);
    char name[96], why[800];
    validate_child_env();
    printf("# validate: the top %d and the best of each family, %d layout%s, each run as 'mpiexec -n %d micropp "
           "train ... --steps %d' (the first step left out)\n",
           a->K, n_rows, n_rows == 1 ? "" : "s", a->world, a->steps);
    printf("%4s  %-36s %14s %13s %7s\n", "rank", "layout", "predicted(ms)", "measured(ms)", "error");
    for (int j = 0; j < n_rows; j++) {
        const Candidate *k = &s->c[rows[j]];
        layout_name(&k->l, name, sizeof name);
        if (run_row(k, c, a, &ms[j], why, sizeof why))
            printf("%4d  %-36s %14.2f %13s  failed: %s\n", rows[j] + 1, name, k->pr.step_s * 1e3, "-", why);
        else
            printf("%4d  %-36s %14.2f %13.2f %+6.0f%%\n", rows[j] + 1, name, k->pr.step_s * 1e3, ms[j],
                   100 * (k->pr.step_s * 1e3 / ms[j] - 1));
        fflush(stdout);
    }
    int measured = print_summary(s, rows, ms, n_rows), rc = measured ? 0 : -1;
    if (!measured) snprintf(err, n, "plan: --validate: none of the %d layouts ran: see each row's reason", n_rows);
    Profile *q = xmalloc(sizeof *q);
    *q = *pf;
    refit_families(pf, s, rows, ms, n_rows, q, counts);
    if (measured && write_refit(q, a->out, err, n) == 0) {
        printf("refit:");
        for (int f = 0, first = 1; f < FAMILIES; f++)
            if (counts[f]) printf("%s %s x%.3f (%d)", first ? "" : ",", family_names[f], q->refit[f], counts[f]),
                           first = 0;
        printf(" (measured / predicted, by family); wrote %s: give it as --profile\n", a->out);
    } else rc = -1;
    free(q);
    free(ms);
    free(rows);
    return rc;
}
