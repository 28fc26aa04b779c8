// tests/mpi_alltoall.c: the all-to-all of comms/alltoall.c under mpiexec (any number of ranks): the
// counts' exchange, and the rows by every host algorithm (mpi, pair, shm) with uneven counts, zeros
// among them (a rank sending nothing at all, a rank receiving nothing from one peer), rows of several
// widths, several exchanges in a row through one window, a device-like backend staged through the
// host, a group that is half the world (the expert groups of a hybrid layout), and the exchange in two
// halves (alltoall_rows_start/_wait, --ep-overlap's) leaving a rank's own rows to it, the rows packed straight
// into the exchange's send buffer (alltoall_send_buffer: shm's window, no copy at the start). Rank 0 prints
// PASS/FAIL lines; exit 1 on a failure.
#include <stdlib.h>
#include "unit.h"
#include "comms.h"
#include "comms/alltoall.h"
#include "base/ops.h"
#include "base/util.h"

static int world, me;

static void report(const char *name, int ok, const char *why, int R) {
    int all = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char full[256];
    snprintf(full, sizeof full, "%s (group of %d, world %d)", name, R, world);
    if (me == 0) EXPECT(full, all, "%s", ok ? "another rank failed" : why);
    else if (!all) unit_failures++;
}

// Rows rank s sends to rank d in exchange `round`: uneven, with zeros (rank 1 sends nothing, nobody
// sends to the last rank in odd rounds, and a rank sends to itself too).
static int rows_of(int s, int d, int R, int round) {
    if (R > 1 && s == 1) return 0;
    if (round % 2 && d == R - 1) return 0;
    return (s * 3 + d * 5 + round) % 7;
}
// Element j of row i that rank s sends to rank d: says where it came from.
static float value(int s, int d, int i, int j) { return (float)(s * 1000000 + d * 10000 + i * 100 + j); }

// halves: by alltoall_rows_start (own rows left to the caller) and _wait, recv's own place must stay as it was;
// 2: the rows written into alltoall_send_buffer's buffer where the algorithm has one (host rows), sent from there;
// 3: received in place (recv NULL) where the algorithm offers it (alltoall_in_place), read by alltoall_rows_at.
static void test_algo(MPI_Comm group, int algo, const Backend *be, int w, int rounds, int halves) {
    int R, r;
    MPI_Comm_size(group, &R);
    MPI_Comm_rank(group, &r);
    size_t cap = 7 * (size_t)R * (size_t)w;
    AllToAll *a = alltoall_open(group, algo, be, cap, NULL);
    int *sc = xmalloc(sizeof(int) * (size_t)R), *rc = xmalloc(sizeof(int) * (size_t)R);
    float *send = xmalloc(sizeof(float) * (cap + 1)), *recv = xmalloc(sizeof(float) * (cap + 1));
    float *dsend = be->alloc(sizeof(float) * (cap + 1)), *drecv = be->alloc(sizeof(float) * (cap + 1));
    int ok = 1;
    char why[256] = "";
    double sent = 0;
    for (int round = 0; round < rounds; round++) {  // (every round on every rank, failed or not: no hang)
        size_t k = 0;
        float *placed = halves == 2 ? alltoall_send_buffer(a, cap) : NULL, *to = placed ? placed : send;
        if (halves == 2 && !placed && alltoall_algos[algo].windows) {
            ok = 0;
            snprintf(why, sizeof why, "rank %d: no send buffer from shm's window", r);
        }
        for (int d = 0; d < R; d++) {
            sc[d] = rows_of(r, d, R, round);
            for (int i = 0; i < sc[d]; i++)
                for (int j = 0; j < w; j++) to[k++] = value(r, d, i, j);
            if (d != r) sent += (double)sc[d] * w * sizeof(float);
        }
        alltoall_counts(a, sc, rc, 1);
        for (int s = 0; s < R && ok; s++)
            if (rc[s] != rows_of(s, r, R, round)) {
                ok = 0;
                snprintf(why, sizeof why, "rank %d: count from %d is %d, not %d", r, s, rc[s], rows_of(s, r, R, round));
            }
        if (!placed) be->to_device(dsend, send, k * sizeof(float));
        size_t n = 0;
        for (int s = 0; s < R; s++) n += (size_t)rc[s] * (size_t)w;
        for (size_t i = 0; i < n; i++) recv[i] = -1;
        be->to_device(drecv, recv, n * sizeof(float));
        int in_place = halves == 3 && alltoall_in_place(a);
        if (halves == 3 && alltoall_in_place(a) != alltoall_algos[algo].windows) {
            ok = 0;
            snprintf(why, sizeof why, "rank %d: in place is %d, windows %d", r, in_place, alltoall_algos[algo].windows);
        }
        if (halves) {
            alltoall_rows_start(a, placed ? placed : dsend, sc, in_place ? NULL : drecv, rc, w, 0);
            alltoall_rows_wait(a);
        } else alltoall_rows(a, dsend, sc, drecv, rc, w);
        be->to_host(recv, drecv, n * sizeof(float));
        for (int s = 0, at = 0; in_place && s < R; at += rc[s++] * w)  // each peer's rows where they lie
            if (s != r) memcpy(recv + at, alltoall_rows_at(a, s), sizeof(float) * (size_t)rc[s] * (size_t)w);
        if (in_place) alltoall_rows_release(a);
        k = 0;
        for (int s = 0; s < R && ok; s++)
            for (int i = 0; i < rc[s] && ok; i++)
                for (int j = 0; j < w && ok; j++, k++)
                    if (recv[k] != (halves && s == r ? -1.0f : value(s, r, i, j))) {
                        ok = 0;
                        snprintf(why, sizeof why, "round %d rank %d: row %d from %d element %d is %.0f, not %.0f",
                                 round, r, i, s, j, recv[k], halves && s == r ? -1.0f : value(s, r, i, j));
                    }
    }
    double bytes, secs;
    alltoall_take_stats(a, &bytes, &secs);
    double counts_bytes = (double)rounds * (R - 1) * sizeof(int);
    if (ok && bytes != sent + counts_bytes) {
        ok = 0;
        snprintf(why, sizeof why, "rank %d: stats say %.0f bytes, sent %.0f", r, bytes, sent + counts_bytes);
    }
    char name[160];
    snprintf(name, sizeof name, "alltoall/%s rows of %d, %d exchanges%s%s%s", alltoall_algos[algo].name, w, rounds,
             be->on_host ? "" : ", staged", halves ? ", started and waited for, own rows left to the caller" : "",
             halves == 2 ? ", packed where alltoall_send_buffer says" : halves == 3 ? ", read in place where offered" : "");
    report(name, ok, why, R);
    alltoall_close(a);
    be->free(dsend); be->free(drecv);
    free(sc); free(rc); free(send); free(recv);
}

// The counts of several experts per rank (per > 1): block p of send goes to rank p.
static void test_counts(MPI_Comm group, int per) {
    int R, r;
    MPI_Comm_size(group, &R);
    MPI_Comm_rank(group, &r);
    AllToAll *a = alltoall_open(group, ALLTOALL_MPI, &backend_cpu, 0, NULL);
    int *s = xmalloc(sizeof(int) * (size_t)(R * per)), *g = xmalloc(sizeof(int) * (size_t)(R * per));
    for (int i = 0; i < R * per; i++) s[i] = r * 100 + i;
    alltoall_counts(a, s, g, per);
    int ok = 1;
    char why[128] = "";
    for (int p = 0; p < R && ok; p++)
        for (int e = 0; e < per && ok; e++)
            if (g[p * per + e] != p * 100 + r * per + e) {
                ok = 0;
                snprintf(why, sizeof why, "rank %d: from %d expert %d: %d", r, p, e, g[p * per + e]);
            }
    char name[96];
    snprintf(name, sizeof name, "alltoall/counts, %d per rank", per);
    report(name, ok, why, R);
    alltoall_close(a);
    free(s); free(g);
}

// The option's choices (ALLTOALL_ALGO_NAMES) are the table's names, in its order.
static void test_names(void) {
    char names[128] = "";
    for (int a = 0; a < ALLTOALL_ALGOS; a++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", a ? "|" : "", alltoall_algos[a].name);
    report("alltoall/the choices are the table's names in order", !strcmp(names, ALLTOALL_ALGO_NAMES), names, world);
}

static void test_group(MPI_Comm group, const Backend *staged) {
    test_counts(group, 1);
    test_counts(group, 3);
    int shm = alltoall_shm_possible(group);
    for (int algo = 0; algo < ALLTOALL_ALGOS; algo++) {
        if (alltoall_algos[algo].device) continue;  // nccl: GPUs only
        if (alltoall_algos[algo].windows && !shm) continue;
        test_algo(group, algo, &backend_cpu, 1, 1, 0);
        test_algo(group, algo, &backend_cpu, 5, 4, 0);
        test_algo(group, algo, &backend_cpu, 3, 4, 1);
        test_algo(group, algo, &backend_cpu, 3, 4, 2);
        test_algo(group, algo, &backend_cpu, 3, 4, 3);
        if (alltoall_algos[algo].windows) continue;  // (a window holds host rows only)
        test_algo(group, algo, staged, 3, 2, 0);
        test_algo(group, algo, staged, 3, 2, 1);
    }
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    Backend staged = backend_cpu;  // buffers "not on the host": the rows are staged
    staged.on_host = 0;
    test_names();
    test_group(MPI_COMM_WORLD, &staged);
    if (world % 2 == 0 && world >= 4) {  // two groups of world/2 (as --ep world/2 with two replicas each)
        MPI_Comm half;
        MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
        test_group(half, &staged);
        MPI_Comm_free(&half);
    }
    int failures = unit_failures;
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    comm_finalize();
    return failures ? 1 : 0;
}
