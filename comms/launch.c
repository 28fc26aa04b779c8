// launch.c: the launch agreement (launch.h): every rank's fingerprint (a hash of what it was started
// to do) gathered by all; on a difference, the first differing rank words it against rank 0's text
// and every rank ends with that one line (exit 2). Also the same for the files the ranks read: each
// rank's hash of a file's bytes, gathered by all, a difference named with the ranks' hosts; and whether
// the launcher put every rank on one node.
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "comms/watchdog.h"
#include "base/config.h"
#include "comms/launch.h"
#include "base/util.h"

// ---- the build id: the linker's hash of the binary (.note.gnu.build-id) ----

static char build_id[80] = "";

static int note_of_program(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size; (void)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(const void *)p;
            const char *name = p + sizeof *nh;
            const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                for (unsigned k = 0; k < nh->n_descsz && 2 * k + 2 < sizeof build_id; k++)
                    snprintf(build_id + 2 * k, 3, "%02x", desc[k]);
                return 1;
            }
            p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1;  // the first object listed is the program itself
}

const char *launch_build_id(void) {
    if (!build_id[0]) {
        dl_iterate_phdr(note_of_program, NULL);
        if (!build_id[0]) snprintf(build_id, sizeof build_id, "unknown");
    }
    return build_id;
}

// ---- comparing texts across ranks ----

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

// "0", "0-1", "0,2-3": the ranks whose hash is h.
static void ranks_with(const uint64_t *hs, int size, uint64_t h, char *b, size_t n) {
    size_t k = 0;
    int count = 0;
    b[0] = 0;
    for (int r = 0; r < size && k + 24 < n; r++) {
        if (hs[r] != h || (r > 0 && hs[r - 1] == h)) continue;
        int e = r;
        while (e + 1 < size && hs[e + 1] == h) e++;
        count += e - r + 1;
        k += (size_t)snprintf(b + k, n - k, "%s%d", k ? "," : "", r);
        if (e > r) k += (size_t)snprintf(b + k, n - k, "-%d", e);
    }
    char tmp[200];
    snprintf(tmp, sizeof tmp, "%s %s", count == 1 ? "rank" : "ranks", b);
    snprintf(b, n, "%s", tmp);
}

// Words the difference between rank 0's text a (on side sa) and another rank's b (side sb).
typedef void (*Explain)(const char *a, size_t na, const char *b, size_t nb, const char *sa, const char *sb, char *out,
                        size_t n);

static void agree_text(const char *mine, size_t len, Explain explain, const char *fix) {
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size == 1) return;
    uint64_t h = fnv1a(mine, len), *hs = xmalloc(sizeof(uint64_t) * (size_t)size);
    MPI_Request q;
    MPI_CHECK(MPI_Iallgather(&h, 1, MPI_UINT64_T, hs, 1, MPI_UINT64_T, MPI_COMM_WORLD, &q));
    wd_wait(&q, NULL, -1, "the launch agreement");
    int d = 0;
    for (int r = 1; r < size && !d; r++) if (hs[r] != hs[0]) d = r;
    if (!d) { free(hs); return; }
    // Rank 0's text goes to rank d, which words the difference for everyone.
    char msg[1024] = "";
    long long n0 = (long long)len;
    if (rank == 0) {
        MPI_CHECK(MPI_Send(&n0, 1, MPI_LONG_LONG, d, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(mine, (int)len, MPI_CHAR, d, 1, MPI_COMM_WORLD));
    } else if (rank == d) {
        MPI_CHECK(MPI_Irecv(&n0, 1, MPI_LONG_LONG, 0, 0, MPI_COMM_WORLD, &q));
        wd_wait(&q, NULL, 0, "the launch agreement");
        char *a = xmalloc((size_t)n0 + 1);
        MPI_CHECK(MPI_Irecv(a, (int)n0, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &q));
        wd_wait(&q, NULL, 0, "the launch agreement");
        char sa[200], sb[200], what[700];
        ranks_with(hs, size, hs[0], sa, sizeof sa);
        ranks_with(hs, size, h, sb, sizeof sb);
        explain(a, (size_t)n0, mine, len, sa, sb, what, sizeof what);
        int others = 0;
        for (int r = 0; r < size; r++) others += hs[r] != hs[0] && hs[r] != h;
        char more[64] = "";
        if (others)
            snprintf(more, sizeof more, " (and %d more rank%s differ otherwise)", others, others == 1 ? "" : "s");
        snprintf(msg, sizeof msg, "%s%s: %s", what, more, fix);
        free(a);
    }
    MPI_CHECK(MPI_Ibcast(msg, sizeof msg, MPI_CHAR, d, MPI_COMM_WORLD, &q));
    wd_wait(&q, NULL, d, "the launch agreement");
    free(hs);
    user_error("%s", msg);
}

// ---- the words of the command line ----
// The text: build id, subcommand, then each argument, every one ending in '\0'.

static int next_word(const char *t, size_t n, size_t *at, const char **w) {
    if (*at >= n) return 0;
    *w = t + *at;
    *at += strlen(*w) + 1;
    return 1;
}

static int is_option(const char *w) { return w[0] == '-' && w[1] && !(w[1] >= '0' && w[1] <= '9') && w[1] != '.'; }

// "--log_every=5" -> "log-every" (the parser accepts underscores for dashes); the '=' or NULL.
static const char *option_name(const char *w, char *name, size_t n) {
    const char *nm = w + (w[1] == '-' ? 2 : 1), *eq = strchr(nm, '=');
    size_t l = eq ? (size_t)(eq - nm) : strlen(nm);
    snprintf(name, n, "%.*s", (int)(l < n - 1 ? l : n - 1), nm);
    for (char *c = name; *c; c++) if (*c == '_') *c = '-';
    return eq;
}

// The value of option `name` in the arguments of text t (after build and subcommand): the last one
// given; NULL when absent; "" for a flag without a value.
static const char *value_of(const char *t, size_t n, const char *name, char *buf, size_t bn) {
    size_t at = 0;
    const char *w, *found = NULL;
    next_word(t, n, &at, &w); next_word(t, n, &at, &w);
    while (next_word(t, n, &at, &w)) {
        if (!is_option(w)) continue;
        char norm[128];
        const char *eq = option_name(w, norm, sizeof norm);
        if (strcmp(norm, name)) continue;
        size_t save = at;
        const char *v;
        if (eq) snprintf(buf, bn, "%s", eq + 1);
        else if (next_word(t, n, &at, &v) && !is_option(v)) snprintf(buf, bn, "%s", v);
        else { buf[0] = 0; at = save; }
        found = buf;
    }
    return found;
}

// The first option (in rank 0's order, then the other's) whose value differs; 0 when none does.
static int first_option_differing(const char *a, size_t na, const char *b, size_t nb, const char *sa, const char *sb,
                                  char *out, size_t n) {
    for (int side = 0; side < 2; side++) {
        const char *t = side ? b : a, *w;
        size_t nt = side ? nb : na, at = 0;
        next_word(t, nt, &at, &w); next_word(t, nt, &at, &w);
        while (next_word(t, nt, &at, &w)) {
            if (!is_option(w)) continue;
            char name[128], va[256], vb[256];
            option_name(w, name, sizeof name);
            const char *x = value_of(a, na, name, va, sizeof va), *y = value_of(b, nb, name, vb, sizeof vb);
            if (x && y && !strcmp(x, y)) continue;
            char ta[300], tb[300];
            if (!x) snprintf(ta, sizeof ta, "--%s is not given on %s", name, sa);
            else if (!*x) snprintf(ta, sizeof ta, "--%s is given on %s", name, sa);
            else snprintf(ta, sizeof ta, "--%s is %s on %s", name, x, sa);
            if (!y) snprintf(tb, sizeof tb, "not given on %s", sb);
            else if (!*y) snprintf(tb, sizeof tb, "given on %s", sb);
            else snprintf(tb, sizeof tb, "%s on %s", y, sb);
            snprintf(out, n, "%.300s and %.250s", ta, tb);
            return 1;
        }
    }
    return 0;
}

static void explain_argv(const char *a, size_t na, const char *b, size_t nb, const char *sa, const char *sb, char *out,
                         size_t n) {
    char what[600];
    size_t ia = 0, ib = 0;
    const char *ba = "", *bb = "", *ca = "", *cb = "";
    next_word(a, na, &ia, &ba); next_word(b, nb, &ib, &bb);
    next_word(a, na, &ia, &ca); next_word(b, nb, &ib, &cb);
    if (strcmp(ba, bb))
        snprintf(what, sizeof what, "the binary differs: micropp build %.12s on %s and %.12s on %s", ba, sa, bb, sb);
    else if (strcmp(ca, cb))
        snprintf(what, sizeof what, "the command is '%s' on %s and '%s' on %s", ca, sa, cb, sb);
    else if (!first_option_differing(a, na, b, nb, sa, sb, what, sizeof what))
        snprintf(what, sizeof what,
                 "the arguments differ in order or in a value that is not an option's, between %s and %s", sa, sb);
    snprintf(out, n, "launch: the ranks were started differently: %.600s", what);
}

// ---- the contents of the files the ranks read (agree_on_contents, util.h) ----

typedef struct { uint64_t ok, hash; char detail[64], host[64]; } Seen;

void launch_host_name(char *b, size_t n) {
    const char *h = getenv("MPIR_CVAR_CH3_INTERFACE_HOSTNAME"), *slurm = getenv("SLURMD_NODENAME");
    if (h && *h) snprintf(b, n, "%s", h);
    else if (slurm && *slurm) snprintf(b, n, "%s", slurm);  // (srun: Slurm's name for the node)
    else if (gethostname(b, n) != 0) snprintf(b, n, "?");
    b[n - 1] = 0;
}

// "rank 0 (host nodeA)", "ranks 0-1,3 (hosts nodeA, nodeB)": the ranks that read hash h, and their hosts.
static void group_words(const Seen *s, int size, uint64_t h, char *b, size_t n) {
    uint64_t *hs = xcalloc((size_t)size, sizeof(uint64_t));
    for (int r = 0; r < size; r++) hs[r] = s[r].hash;
    char ranks[200], hosts[200] = "";
    ranks_with(hs, size, h, ranks, sizeof ranks);
    free(hs);
    int nh = 0, more = 0;
    for (int r = 0; r < size; r++) {
        if (s[r].hash != h) continue;
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = s[q].hash == h && !strcmp(s[q].host, s[r].host);
        if (seen) continue;
        if (nh < 3) {
            size_t k = strlen(hosts);
            snprintf(hosts + k, sizeof hosts - k, "%s%.60s", nh ? ", " : "", s[r].host);
        } else more++;
        nh++;
    }
    snprintf(b, n, "%s (host%s %s%s)", ranks, nh > 1 ? "s" : "", hosts, more ? ", ..." : "");
}

static void agree_contents(const char *what, const char *path, int ok, uint64_t hash, const char *detail) {
    int size;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size == 1) return;
    Seen me = {(uint64_t)(ok != 0), hash, "", ""}, *all = xmalloc(sizeof(Seen) * (size_t)size);
    snprintf(me.detail, sizeof me.detail, "%s", detail ? detail : "");
    launch_host_name(me.host, sizeof me.host);
    MPI_Request q;
    MPI_CHECK(MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD, &q));
    wd_wait(&q, NULL, -1, "comparing the files the ranks read");
    int d = 0, failed = 0, others = 0;
    for (int r = 0; r < size; r++) failed |= !all[r].ok;
    for (int r = 1; r < size && !d; r++) if (all[r].hash != all[0].hash) d = r;
    if (failed || !d) { free(all); return; }  // (a rank that could not read it: the caller's agree_on_error says so)
    for (int r = 0; r < size; r++) others += all[r].hash != all[0].hash && all[r].hash != all[d].hash;
    char a[300], b[300], msg[1400], more[64] = "";
    group_words(all, size, all[0].hash, a, sizeof a);
    group_words(all, size, all[d].hash, b, sizeof b);
    if (others) snprintf(more, sizeof more, " (and %d more rank%s read other bytes)", others, others == 1 ? "" : "s");
    if (strcmp(all[0].detail, all[d].detail))
        snprintf(msg, sizeof msg, "%s %s differs between the ranks: on %s it is %s, on %s %s%s", what, path, a,
                 all[0].detail, b, all[d].detail, more);
    else
        snprintf(msg, sizeof msg,
                 "%s %s differs between the ranks: on %s and on %s it holds different bytes (%s on both)%s", what, path,
                 a, b, all[0].detail, more);
    free(all);
    user_error(
        "%s: copy the same file to every host (the command lines agree, so the path names a different file there)",
        msg);
}

void launch_agree_argv(int argc, char **argv) {
    size_t n = 0, cap = 256;
    char *t = xmalloc(cap);
    const char *head[2] = {launch_build_id(), argc > 0 ? argv[0] : ""};
    for (int i = 0; i < argc + 1; i++) {
        const char *w = i < 2 ? head[i] : argv[i - 1];
        size_t l = strlen(w) + 1;
        if (n + l > cap) { cap = 2 * (n + l); char *g = realloc(t, cap); CHECK(g, "out of memory"); t = g; }
        memcpy(t + n, w, l);
        n += l;
    }
    agree_text(t, n, explain_argv, "start every rank with the same micropp and the same command line");
    free(t);
    options_set_agree_hook(launch_agree_options);
    util_set_contents_hook(agree_contents);
}

// ---- resolved options: "name=value" lines (a config file read differently on another host) ----

static void explain_options(const char *a, size_t na, const char *b, size_t nb, const char *sa, const char *sb,
                            char *out, size_t n) {
    (void)na; (void)nb;
    const char *p = a, *q = b;
    while (*p && *q) {
        size_t lp = strcspn(p, "\n"), lq = strcspn(q, "\n");
        if (lp != lq || memcmp(p, q, lp)) {
            const char *ep = memchr(p, '=', lp), *eq = memchr(q, '=', lq);
            if (ep && eq) {
                snprintf(out, n,
                         "launch: the ranks resolved different options: --%.*s is '%.*s' on %s and '%.*s' on %s",
                         (int)(ep - p), p, (int)(lp - (size_t)(ep - p) - 1), ep + 1, sa,
                         (int)(lq - (size_t)(eq - q) - 1), eq + 1, sb);
                return;
            }
            break;
        }
        p += lp + (p[lp] ? 1 : 0);
        q += lq + (q[lq] ? 1 : 0);
    }
    snprintf(out, n, "launch: the ranks resolved different options (%s and %s)", sa, sb);
}

void launch_agree_options(const char *cmd, const char *resolved) {
    (void)cmd;
    agree_text(resolved, strlen(resolved), explain_options,
               "give every host the same config file (the command lines agree, so --config reads differently there)");
}

// Whether every rank is on one node as the launcher says (Hydra's MPI_LOCALNRANKS, this node's ranks, is
// the world's size), agreed by all: then the node is the world without MPI_Comm_split_type, a split over the
// world whose collectives spin (measured: 0.04 s of CPU per rank, 4 ranks on 2 cores). Else MPI's own map.
static int world_one_node;  // launch_one_node's answer
int launch_world_one_node(void) { return world_one_node; }
int launch_one_node(int size) {
    const char *here = getenv("MPI_LOCALNRANKS");
    int said = here && atol(here) == size;
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &said, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &q));
    wd_wait_all(&q, MPI_COMM_WORLD, "an all-reduce");
    world_one_node = said;
    return said;
}
