// tests/mpi_ring.c: the data-parallel collectives of collectives.c under mpiexec (any number of ranks):
// the from-scratch ring, the shared-memory path and the MPI path against MPI_Allreduce and against a
// sum computed here in double, on sizes not divisible by the ranks, 1 element and 0; reduce-scatter
// shards; all-gather; several non-blocking collectives in flight at once; staging through host
// memory as a device backend does; shm on a buffer outside its window (falls back to MPI); and the
// P x D grid's groups. Rank 0 prints PASS/FAIL lines; exit 1 on a failure.
#include <stdlib.h>
#include "unit.h"
#include "comms.h"
#include "base/data.h"
#include "base/ops.h"
#include "base/util.h"
#include "comms/watchdog.h"

static int world, me;
static Comm grid;
// --allreduce shm works on buffers of a shared window: one per grid, cut into 3 test buffers.
#define SHM_SLOT 100008
static float *shm_pool;
static int shm_outside;  // 1: hand shm a private buffer instead (it must fall back to MPI)
static float *coll_buf(int algo, const Backend *be, size_t n, int slot) {
    if (comm_algos[algo].windows && be->on_host && !shm_outside) return shm_pool + (size_t)slot * SHM_SLOT;
    return be->alloc((n + 1) * sizeof(float));
}
static void coll_free(int algo, const Backend *be, float *x) {
    if (!(comm_algos[algo].windows && be->on_host && !shm_outside)) be->free(x);
}

// Rank r's input element i: a pure function of (r, i, salt), so any rank can compute any rank's.
static float input(int r, size_t i, int salt) { return 2.0f * rng_uniform(rng_key(7, (uint64_t)r, (uint64_t)salt), i) - 1.0f; }

// MPI_Allreduce, waited as micropp waits (comms/watchdog.h: sleeping under tests/run.sh) rather than
// spinning in MPICH while a rank of the 4 on 2 cores waits for a core.
static void allreduce(void *x, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
    MPI_Request q;
    MPI_Iallreduce(MPI_IN_PLACE, x, n, t, op, comm, &q);
    wd_wait_all(&q, comm, "the test's all-reduce");
}

// Every rank's verdict -> rank 0's line.
static void report(const char *name, int ok, const char *why) {
    int all = ok;
    allreduce(&all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char full[256];
    snprintf(full, sizeof full, "%s (%d ranks)", name, world);
    if (me == 0) EXPECT(full, all, "%s", ok ? "another rank failed" : why);
    else if (!all) unit_failures++;
}

// Compares got[0..n) with the dp group's sum (times scale) of input(., i, salt): to the sum in
// double within float rounding, and bit for bit to MPI_Allreduce when D <= 2 (a+b == b+a).
static int check_sum(const float *got, size_t lo, size_t hi, float scale, int salt, const float *mpi_ref, char *why, size_t wn) {
    int D = grid.replicas;
    for (size_t i = lo; i < hi; i++) {
        double s = 0, mag = 0;
        for (int d = 0; d < D; d++) {
            double v = input(d * grid.stages + grid.stage, i, salt);
            s += v;
            mag += fabs(v);
        }
        s *= scale;
        if (fabs(got[i] - s) > 1e-6 * (mag * fabs(scale) + 1e-30) + 1e-7) {
            snprintf(why, wn, "rank %d element %zu: %.9g, expected %.9g", me, i, got[i], s);
            return 0;
        }
        if (mpi_ref && D <= 2 && got[i] != mpi_ref[i] * scale) {
            snprintf(why, wn, "rank %d element %zu: %.9g but MPI_Allreduce gives %.9g", me, i, got[i], mpi_ref[i] * scale);
            return 0;
        }
    }
    return 1;
}

static void fill(float *x, size_t n, int salt) { for (size_t i = 0; i < n; i++) x[i] = input(me, i, salt); }

static void test_allreduce(size_t n, int algo, const char *alg, const Backend *be) {
    char name[160], why[256] = "";
    int ok = 1;
    float *x = xmalloc((n + 1) * sizeof(float)), *ref = xmalloc((n + 1) * sizeof(float));
    fill(x, n, 1);
    fill(ref, n, 1);
    if (n) allreduce(ref, (int)n, MPI_FLOAT, MPI_SUM, grid.dp);
    float scale = 1.0f / (float)grid.replicas;
    Comm c = grid;  // the same groups, buffers of backend be
    c.be = be;
    float *dev = coll_buf(algo, be, n, 0);
    be->to_device(dev, x, n * sizeof(float));
    comm_allreduce(&c, dev, n, scale, algo);
    be->to_host(x, dev, n * sizeof(float));
    coll_free(algo, be, dev);
    ok = check_sum(x, 0, n, scale, 1, ref, why, sizeof why);
    // every replica must hold the same bits, or replicas drift apart step by step
    uint64_t h = mix64(n);
    for (size_t i = 0; i < n; i++) { uint32_t b; memcpy(&b, &x[i], 4); h = mix64(h ^ b); }
    if (ok && !comm_same_u64(h, grid.dp)) { ok = 0; snprintf(why, sizeof why, "replicas hold different results"); }
    snprintf(name, sizeof name, "collective/%s all-reduce n=%zu D=%d equals MPI_Allreduce (averaged)%s%s", alg, n, grid.replicas,
             be->on_host ? "" : ", staged through host", shm_outside ? ", buffer outside the window" : "");
    report(name, ok, why);
    free(x); free(ref);
}

static void test_reduce_scatter_allgather(size_t n, int algo, const char *alg) {
    char name[128], why[256] = "";
    float *x = coll_buf(algo, &backend_cpu, n, 0);
    fill(x, n, 2);
    comm_reduce_scatter(&grid, x, n, 1.0f, algo);
    size_t off, len;
    comm_shard(n, grid.replicas, grid.replica, &off, &len);
    int ok = check_sum(x, off, off + len, 1.0f, 2, NULL, why, sizeof why);
    snprintf(name, sizeof name, "collective/%s reduce-scatter n=%zu D=%d: own shard is the sum", alg, n, grid.replicas);
    report(name, ok, why);
    // ... written to a buffer of its own instead (ZeRO's gradient shard): the sum there
    float *out = xmalloc((len + 1) * sizeof(float)), *y = xcalloc(n + 1, sizeof(float));
    fill(x, n, 2);
    comm_wait(comm_reduce_scatter_to(&grid, x, n, 0.5f, algo, out));
    memcpy(y + off, out, len * sizeof(float));
    ok = check_sum(y, off, off + len, 0.5f, 2, NULL, why, sizeof why);
    snprintf(name, sizeof name, "collective/%s reduce-scatter to a shard n=%zu D=%d: the sum there", alg, n, grid.replicas);
    report(name, ok, why);
    free(out); free(y);
    // all-gather: each rank writes only its own shard; afterwards everyone has every shard
    for (size_t i = 0; i < n; i++) x[i] = -1;
    for (size_t i = off; i < off + len; i++) x[i] = (float)(grid.replica * 1000003 + (int)i);
    comm_allgather(&grid, x, n, algo);
    ok = 1;
    for (int d = 0; d < grid.replicas && ok; d++) {
        size_t o, l;
        comm_shard(n, grid.replicas, d, &o, &l);
        for (size_t i = o; i < o + l && ok; i++)
            if (x[i] != (float)(d * 1000003 + (int)i)) { ok = 0; snprintf(why, sizeof why, "rank %d element %zu (shard %d): %g", me, i, d, x[i]); }
    }
    snprintf(name, sizeof name, "collective/%s all-gather n=%zu D=%d", alg, n, grid.replicas);
    report(name, ok, why);
    coll_free(algo, &backend_cpu, x);
}

static void test_shards(void) {
    int ok = 1;
    char why[256] = "";
    size_t ns[] = {0, 1, 2, 3, 5, 7, 1000, 1000003};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int D = 1; D <= 9; D++) {
            size_t next = 0, mn = (size_t)-1, mx = 0;
            for (int i = 0; i < D; i++) {
                size_t o, l;
                comm_shard(ns[k], D, i, &o, &l);
                if (o != next) ok = 0;
                next = o + l;
                if (l < mn) mn = l;
                if (l > mx) mx = l;
            }
            if (next != ns[k] || mx - mn > 1) { ok = 0; snprintf(why, sizeof why, "n=%zu D=%d", ns[k], D); }
        }
    report("collective/shards tile the buffer, sizes within 1", ok, why);
}

// Three collectives of different sizes in flight together (as buckets are), advanced by
// comm_test between bits of unrelated work, then waited in order.
static void test_in_flight(int algo, const char *alg, const Backend *be) {
    char name[160], why[256] = "";
    Comm grid_be = grid;  // the same groups, buffers of backend be (staged when not on the host)
    grid_be.be = be;
    size_t n[3] = {100003, 1, 4097};
    float *x[3], *dev[3];
    CommReq *q[3];
    for (int k = 0; k < 3; k++) {
        x[k] = xmalloc(n[k] * sizeof(float));
        fill(x[k], n[k], 10 + k);
        dev[k] = coll_buf(algo, be, n[k], k);
        be->to_device(dev[k], x[k], n[k] * sizeof(float));
    }
    q[0] = comm_allreduce_start(&grid_be, dev[0], n[0], 1.0f, algo);
    q[1] = comm_reduce_scatter_start(&grid_be, dev[1], n[1], 0.5f, algo);
    q[2] = comm_allreduce_start(&grid_be, dev[2], n[2], 0.25f, algo);
    volatile double work = 0;
    int polls = 0;
    WdSpin turn = {0};
    while (!(comm_test(q[0]) && comm_test(q[1]) && comm_test(q[2])) && polls < 100000000) {
        for (int i = 0; i < 1000; i++) work += i;  // "a layer of the backward"
        polls++;
        wd_spin(&turn);  // (then the core goes to the rank waited for, as wd_share_cores says)
    }
    double t[3];
    for (int k = 0; k < 3; k++) t[k] = comm_wait(q[k]);
    int ok = 1;
    for (int k = 0; k < 3; k++) be->to_host(x[k], dev[k], n[k] * sizeof(float));
    ok = check_sum(x[0], 0, n[0], 1.0f, 10, NULL, why, sizeof why);
    size_t off, len;
    comm_shard(n[1], grid.replicas, grid.replica, &off, &len);
    if (ok) ok = check_sum(x[1], off, off + len, 0.5f, 11, NULL, why, sizeof why);
    if (ok) ok = check_sum(x[2], 0, n[2], 0.25f, 12, NULL, why, sizeof why);
    if (ok && !(t[0] > 0 && t[1] > 0 && t[2] > 0)) { ok = 0; snprintf(why, sizeof why, "completion times not recorded"); }
    snprintf(name, sizeof name, "collective/%s 3 non-blocking in flight, polled%s, D=%d", alg, be->on_host ? "" : ", staged through host", grid.replicas);
    report(name, ok, why);
    for (int k = 0; k < 3; k++) { free(x[k]); coll_free(algo, be, dev[k]); }
}

// --placement replicas: a stage's replicas on adjacent ranks, pipeline neighbours D ranks apart.
static void test_grid_replicas(int P) {
    Comm g;
    int D = world / P, np, nd;
    comm_grid(&g, &backend_cpu, P, D, PLACEMENT_REPLICAS);
    MPI_Comm_size(g.pp, &np);
    MPI_Comm_size(g.dp, &nd);
    int ok = g.stage == me / D && g.replica == me % D && np == P && nd == D && g.prev == (g.stage ? me - D : MPI_PROC_NULL) &&
             g.next == (g.stage < P - 1 ? me + D : MPI_PROC_NULL) && comm_stage_rank(&g, 0) == me % D;
    char why[128], name[96];
    snprintf(why, sizeof why, "rank %d: stage %d replica %d pp %d dp %d prev %d next %d", me, g.stage, g.replica, np, nd, g.prev, g.next);
    snprintf(name, sizeof name, "collective/grid %d stages x %d replicas, placement replicas", P, D);
    report(name, ok, why);
    comm_free(&g);
}

// comm_split_known against MPI_Comm_split: the same ranks in the same order (MPI_Group_compare says
// MPI_IDENT) for colors interleaved with keys reversed, colors in blocks with every key tied, and one color
// with keys shuffled.
static void test_split_known(void) {
    int *color = xmalloc(sizeof(int) * 2 * (size_t)world), *key = color + world, ok = 1;
    char why[128] = "";
    for (int pattern = 0; pattern < 3; pattern++) {
        for (int r = 0; r < world; r++) {
            color[r] = pattern == 0 ? r % 2 : pattern == 1 ? r / 2 : 7;
            key[r] = pattern == 0 ? world - r : pattern == 1 ? 0 : (r * 5 + 3) % (world + 1);
        }
        MPI_Comm known = comm_split_known(MPI_COMM_WORLD, color, key, 10 + pattern), split;
        MPI_Comm_split(MPI_COMM_WORLD, color[me], key[me], &split);
        MPI_Group a, b;
        int same;
        MPI_Comm_group(known, &a);
        MPI_Comm_group(split, &b);
        MPI_Group_compare(a, b, &same);
        if (same != MPI_IDENT && ok) {
            ok = 0;
            snprintf(why, sizeof why, "pattern %d: rank %d's group is not MPI_Comm_split's (compare %d)", pattern, me, same);
        }
        MPI_Group_free(&a);
        MPI_Group_free(&b);
        MPI_Comm_free(&known);
        MPI_Comm_free(&split);
    }
    report("collective/comm_split_known = MPI_Comm_split (interleaved and reversed, tied, shuffled)", ok, why);
    free(color);
}

// The staged backend's host buffers: the collectives stage through alloc_host (pinned on a GPU) and
// keep them, so a step's collectives, run again, allocate none.
static int host_allocs;
static void *counting_alloc_host(size_t bytes) { host_allocs++; return backend_cpu.alloc_host(bytes); }

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    // A backend whose buffers are "not on the host": the collectives must stage them.
    Backend staged = backend_cpu;
    staged.on_host = 0;
    staged.alloc_host = counting_alloc_host;
    test_shards();
    test_split_known();
    for (int P = 1; P <= 2; P++) {
        if (world % P) continue;
        comm_grid(&grid, &backend_cpu, P, world / P, PLACEMENT_STAGES);
        if (P > 1) {
            test_grid_replicas(P);  // the grid: pipeline neighbours adjacent, dp = the same stage in every replica
            int ok = grid.stage == me % P && grid.replica == me / P && grid.replicas == world / P;
            int np, nd;
            MPI_Comm_size(grid.pp, &np);
            MPI_Comm_size(grid.dp, &nd);
            ok = ok && np == P && nd == world / P;
            ok = ok && grid.prev == (grid.stage ? me - 1 : MPI_PROC_NULL) && grid.next == (grid.stage < P - 1 ? me + 1 : MPI_PROC_NULL);
            char why[128];
            snprintf(why, sizeof why, "rank %d: stage %d replica %d pp %d dp %d prev %d next %d", me, grid.stage, grid.replica, np, nd, grid.prev, grid.next);
            char name[96];
            snprintf(name, sizeof name, "collective/grid %d stages x %d replicas", P, world / P);
            report(name, ok, why);
        }
        size_t sizes[] = {0, 1, 2, 3, (size_t)world + 1, 7, 1000, 100003};  // (the largest: far above MPI's eager size)
        // shm's windows where the dp groups sit on one node (under -launcher fork -hosts a:2,b:2 they do not)
        int shm = comm_shared_possible(&grid, 3 * (size_t)SHM_SLOT * sizeof(float));
        if (shm) shm_pool = comm_shared_alloc(&grid, 3 * (size_t)SHM_SLOT);
        for (int algo = 0; algo < ALLREDUCE_ALGOS; algo++) {  // every row of the table
            const char *alg = comm_algos[algo].name;
            if (comm_algos[algo].windows && !shm) {
                if (me == 0) printf("SKIP collective/%s (%d ranks): the dp groups span nodes\n", alg, world);
                continue;
            }
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                test_allreduce(sizes[k], algo, alg, &backend_cpu);
                if (sizes[k] == 7 || sizes[k] == 100003) test_allreduce(sizes[k], algo, alg, &staged);
                test_reduce_scatter_allgather(sizes[k], algo, alg);
            }
            test_in_flight(algo, alg, &backend_cpu);
            test_in_flight(algo, alg, &staged);
            int first = host_allocs;
            test_in_flight(algo, alg, &staged);
            char name[120], why[120];
            snprintf(name, sizeof name, "collective/%s staging: pinned host buffers (alloc_host), kept for the next step", alg);
            snprintf(why, sizeof why, "%d alloc_host calls, then %d more for the same collectives", first, host_allocs - first);
            report(name, comm_algos[algo].windows || (first > 0 && host_allocs == first), why);
        }
        shm_outside = 1;
        if (shm) test_allreduce(1000, ALLREDUCE_SHM, "shm", &backend_cpu);
        shm_outside = 0;
        comm_free(&grid);
    }
    comm_finalize();
    return unit_failures ? 1 : 0;
}
