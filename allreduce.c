// allreduce.c: `micropp allreduce` and `micropp alltoall`: time the data-parallel all-reduce over every rank
// by each algorithm of the collectives' table (comm_algos: MPI's own MPI_Allreduce, the from-scratch ring,
// shm), and expert parallelism's all-to-all by each of alltoall_algos' host rows (MPI_Alltoallv, pairwise
// messages, shm) or, --algo nccl, as train runs it under --transport nccl (one GPU per rank), the way
// nccl-tests' all_reduce_perf and alltoall_perf report them (time, algorithm and bus bandwidth, the fastest
// per size), and check the result (#wrong; exit 1 when wrong).
#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "comms.h"
#include "comms/alltoall.h"
#include "comms/hardware.h"  // comm_choose_hardware
#include "comms/hier.h"
#include "base/config.h"
#include "commands.h"
#include "base/util.h"

// This command's --algo choices beyond the table's names: all (every algorithm in turn) and auto
// (train's default: shm where every rank's windows are possible, else mpi).
enum { ALGO_ALL = ALLREDUCE_ALGOS, ALGO_AUTO };

typedef struct {
    int64_t size;                // bytes: one size (= -b SIZE -e SIZE)
    int64_t min_bytes, max_bytes, factor;  // nccl-tests' -b, -e, -f: sizes min, min x f, ... up to max
    int sweep;                   // every power of two from 4 B to --size
    int64_t iters, warmup;
    int algo;                    // a row of comm_algos (ALLREDUCE_*), ALGO_ALL or ALGO_AUTO
    int json;
} AllreduceConfig;

#define A(field) offsetof(AllreduceConfig, field)
#define MAX_SIZE (4.0 * (1LL << 30))
#define SIZE_OPTIONS \
    {"size", 0, OPT_SIZE, A(size), 0, 4, MAX_SIZE, "BYTES", \
     "one buffer size (K/M/G suffixes: 64M = 64 MiB), a multiple of 4", 0}, \
    {"min-bytes", 'b', OPT_SIZE, A(min_bytes), 0, 4, MAX_SIZE, "SIZE", \
     "smallest size, as nccl-tests' -b (alone: the one size)", 0}, \
    {"max-bytes", 'e', OPT_SIZE, A(max_bytes), 0, 4, MAX_SIZE, "SIZE", "largest size, as nccl-tests' -e", 0}, \
    {"step-factor", 'f', OPT_INT, A(factor), 0, 2, 1024, "F", "multiply the size by F each row, as nccl-tests' -f", \
     0}, \
    {"sweep", 0, OPT_BOOL, A(sweep), 0, 0, 0, 0, "every power of two from 4 B up to --size (= -b 4 -e SIZE -f 2)", 0}, \
    {"iters", 'n', OPT_INT, A(iters), 0, 1, 1 << 20, "N", "timed iterations per size", 0}, \
    {"warmup", 'w', OPT_INT, A(warmup), 0, 0, 1 << 20, "N", "untimed iterations first", 0}
#define JSON_OPTION {"json", 0, OPT_BOOL, A(json), 0, 0, 0, 0, "print one JSON object instead of the table", 0}
static const Option allreduce_options[] = {
    SIZE_OPTIONS,
    {"algo", 0, OPT_CHOICE, A(algo), ALLREDUCE_ALGO_NAMES "|all|auto", 0, 0, "ALG",
     "MPI_Allreduce, the ring, the shared-memory path, the rings inside and across nodes (hier), all of them, or "
     "auto as train's --allreduce",
     0},
    JSON_OPTION,
    {0},
};
static const Option alltoall_options[] = {
    SIZE_OPTIONS,
    {"algo", 0, OPT_CHOICE, A(algo), ALLTOALL_ALGO_NAMES "|all", 0, 0, "ALG",
     "MPI_Alltoallv, the pairwise exchange, the shared-memory windows, nccl (train's under --transport nccl: host rows "
     "through GPU buffers, one GPU per rank), or all of them (but nccl)", 0},
    JSON_OPTION,
    {0},
};
#undef A

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median over iterations of the slowest rank's time (t: this rank's, freed).
static double slowest_median(double *t, int iters, MPI_Comm comm) {
    comm_allreduce_max_double(t, iters, comm);
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double m = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    free(t);
    return m;
}

// One row of the table: printed on rank 0 (unless json) and added to rows.
static void table_row(cJSON *rows, int print, double bytes, double count, const char *algo, double t, double busbw,
                      long wrong) {
    double algbw = bytes / t / 1e9;
    if (print)
        printf("  %12.0f %12.0f %6s %12.1f %12.3f %12.3f %7ld\n", bytes, count, algo, t * 1e6, algbw, busbw * algbw,
               wrong);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "bytes", bytes);
    cJSON_AddStringToObject(o, "algo", algo);
    cJSON_AddNumberToObject(o, "time_us", t * 1e6);
    cJSON_AddNumberToObject(o, "algbw_gbs", algbw);
    cJSON_AddNumberToObject(o, "busbw_gbs", busbw * algbw);
    cJSON_AddNumberToObject(o, "wrong", (double)wrong);
    cJSON_AddItemToArray(rows, o);
}

// Median over iterations of the slowest rank's time for one all-reduce of n floats.
static double time_allreduce(Comm *c, float *x, size_t n, int algo, int iters, int warmup) {
    double *t = xmalloc(sizeof(double) * (size_t)iters);
    for (int i = -warmup; i < iters; i++) {
        comm_barrier(c->dp);
        double t0 = now_sec();
        comm_allreduce(c, x, n, 1.0f, algo);  // a plain sum: the time of the collective alone
        if (i >= 0) t[i] = now_sec() - t0;
    }
    return slowest_median(t, iters, c->dp);
}

// Element i on rank r is (r + 1) * (i % 7 + 1): small integers, so the sum is exact in float.
static long count_wrong(Comm *c, float *x, size_t n, int algo) {
    int D = c->replicas;
    for (size_t i = 0; i < n; i++) x[i] = (float)((c->replica + 1) * (int)(i % 7 + 1));
    comm_allreduce(c, x, n, 1.0f, algo);
    long wrong = 0;
    float tri = (float)(D * (D + 1) / 2);
    for (size_t i = 0; i < n; i++) wrong += x[i] != tri * (float)(i % 7 + 1);
    double w[1] = {(double)wrong};
    comm_allreduce_sum_double(w, 1, c->dp);
    return (long)w[0];
}

// The sizes to time, from --size, nccl-tests' -b/-e/-f or --sweep, into c->min_bytes..max_bytes by
// c->factor. Every rank parses the same line: one verdict.
static void resolve_sizes(const char *cmd, AllreduceConfig *c, const OptionsSeen *seen) {
    int b = seen_typed(seen, "min-bytes"), e = seen_typed(seen, "max-bytes"), sz = seen_typed(seen, "size");
    if (c->sweep && (b || e)) user_error("%s: --sweep is -b 4 -e SIZE -f 2: give --sweep or -b/-e, not both", cmd);
    if (sz && (b || e)) user_error("%s: --size is one size and -b/-e a range of them: give one or the other", cmd);
    if (c->sweep) c->min_bytes = 4, c->max_bytes = c->size;
    else if (!b && !e) c->min_bytes = c->max_bytes = c->size;
    else if (!e) c->max_bytes = c->min_bytes;  // -b alone: that one size (as --size was)
    else if (!b) c->min_bytes = c->max_bytes;
    if (c->min_bytes > c->max_bytes)
        user_error("%s: --min-bytes %lld is above --max-bytes %lld: swap them", cmd, (long long)c->min_bytes,
                   (long long)c->max_bytes);
    for (int i = 0; i < 2; i++) {
        long long v = i ? c->max_bytes : c->min_bytes;
        const char *flag = sz || (!b && !e) ? "size" : i ? "max-bytes" : "min-bytes";
        if (v % 4)
            user_error("%s: --%s %lld is not a whole number of floats: use a multiple of 4 bytes", cmd, flag, v);
    }
}

static const char *allreduce_name(int a) { return comm_algos[a].name; }
static const char *alltoall_name(int a) { return alltoall_algos[a].name; }

// The line under the table: for each size, the algorithm that took the least time ("mpi at 4 .. 2048 B,
// shm at 4096 .. 67108864 B"), sizes in a row with the same winner as one range.
static void print_winners(const double *bytes, const int *best, int n, const char *(*name)(int)) {
    printf("# fastest:");
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && best[j + 1] == best[i]) j++;
        if (i == j) printf("%s %s at %.0f B", i ? "," : "", name(best[i]), bytes[i]);
        else printf("%s %s at %.0f .. %.0f B", i ? "," : "", name(best[i]), bytes[i], bytes[j]);
        i = j + 1;
    }
    printf("\n");
}

int cmd_allreduce(int argc, char **argv) {
    comm_init(&argc, &argv);
    AllreduceConfig cfg = {.size = 64LL << 20, .factor = 2, .iters = 20, .warmup = 3, .algo = ALGO_ALL};
    OptionsSeen seen;
    options_parse("allreduce", allreduce_options, &cfg, &seen, argc, argv, "mpiexec -n D micropp allreduce [options]",
                  "  mpiexec -n 2 micropp allreduce                      # 64 MiB, MPI vs ring vs shm\n"
                  "  mpiexec -n 4 micropp allreduce --sweep --size 16M   # 4 B .. 16 MiB\n"
                  "  mpiexec -n 4 micropp allreduce -b 8 -e 128M -f 2    # as nccl-tests' all_reduce_perf\n");
    if (comm_world_size() < 2)
        user_error("allreduce: needs 2 ranks or more, got 1 (one rank sums nothing): run it as "
                   "'mpiexec -n 2 ./micropp allreduce'");
    resolve_sizes("allreduce", &cfg, &seen);
    Comm c;
    comm_grid(&c, &backend_cpu, 1, comm_world_size(), PLACEMENT_STAGES);  // dp = every rank
    size_t nmax = (size_t)cfg.max_bytes / 4, nmin = (size_t)cfg.min_bytes / 4;
    int chose = cfg.algo == ALGO_AUTO;
    if (chose)  // train's rule (axes/data.c): shm where every rank's windows fit, else mpi
        cfg.algo = comm_shared_possible(&c, nmax * sizeof(float)) ? ALLREDUCE_SHM : ALLREDUCE_MPI;
    int first = cfg.algo == ALGO_ALL ? 0 : cfg.algo, last = cfg.algo == ALGO_ALL ? ALLREDUCE_ALGOS - 1 : cfg.algo;
    // With shm among the algorithms (a row whose buffers are windows), one buffer for all of them in a
    // window the ranks share (shm reads the others' in place; for mpi and ring it is ordinary memory):
    // one node only.
    // all (the default) leaves shm out where it cannot run (ranks on several nodes, /dev/shm too
    // small), and says so; --algo shm asks for it and is refused with the reason.
    int shm = 0, skip_shm = 0;
    for (int a = first; a <= last; a++) shm |= comm_algos[a].windows;
    if (shm && cfg.algo == ALGO_ALL && !comm_shared_possible(&c, nmax * sizeof(float))) shm = 0, skip_shm = 1;
    if (shm) comm_shared_require(&c, nmax * sizeof(float), "allreduce");
    // hier asked for must run as meant (ranks on 2+ nodes, node after node: else one line); in all, only there.
    char hier_why[300] = "";
    if (first <= ALLREDUCE_HIER && ALLREDUCE_HIER <= last) comm_hier_why(&c, "allreduce", hier_why, sizeof hier_why);
    if (cfg.algo == ALLREDUCE_HIER) comm_agree(c.world, hier_why);
    float *x = shm ? comm_shared_alloc(&c, nmax) : backend_cpu.alloc(nmax * sizeof(float));
    for (size_t i = 0; i < nmax; i++) x[i] = 1e-3f;
    int D = c.replicas;
    cJSON *rows = cJSON_CreateArray();
    long total_wrong = 0;
    enum { MAX_SIZES = 64 };
    double sizes[MAX_SIZES];
    int best[MAX_SIZES], n_sizes = 0;
    if (c.rank == 0 && !cfg.json) {
        printf("# micropp allreduce: %d ranks, float sum in place (mpi = MPI_Allreduce, ring and shm = "
               "collectives.c's); time = median over %lld iterations (after %lld warm-up) of the slowest rank\n",
               D, (long long)cfg.iters, (long long)cfg.warmup);
        if (chose) printf("# --algo auto: %s (train's rule: shm where every rank's windows fit, else mpi)\n",
                          comm_algos[cfg.algo].name);
        printf("# algbw = size / time, busbw = algbw * 2(D-1)/D (what each rank's link carries); GB = 1e9 bytes\n");
        if (skip_shm)
            printf("# shm left out: the ranks are not on one node, or its /dev/shm lacks room "
                   "(--algo shm says which)\n");
        printf("# %12s %12s %6s %12s %12s %12s %7s\n", "size(B)", "count", "algo", "time(us)", "algbw(GB/s)",
               "busbw(GB/s)", "#wrong");
    }
    size_t f = (size_t)cfg.factor;
    for (size_t n = nmin; n <= nmax; n = n * f > nmax && n < nmax ? nmax : n * f) {
        double least = INFINITY;
        for (int a = first; a <= last; a++) {
            if (a == ALLREDUCE_HIER && hier_why[0]) continue;
            if (skip_shm && comm_algos[a].windows) continue;
            double t = time_allreduce(&c, x, n, a, (int)cfg.iters, (int)cfg.warmup);
            long wrong = count_wrong(&c, x, n, a);
            for (size_t i = 0; i < n; i++) x[i] = 1e-3f;
            total_wrong += wrong;
            double bytes = 4.0 * (double)n;
            if (t < least && n_sizes < MAX_SIZES) { least = t; best[n_sizes] = a; sizes[n_sizes] = bytes; }
            table_row(rows, c.rank == 0 && !cfg.json, bytes, (double)n, comm_algos[a].name, t, 2.0 * (D - 1) / D,
                      wrong);
        }
        n_sizes += n_sizes < MAX_SIZES;
        if (n == nmax) break;
    }
    if (c.rank == 0 && !cfg.json && last > first) print_winners(sizes, best, n_sizes, allreduce_name);
    if (c.rank == 0 && cfg.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ranks", D);
        cJSON_AddItemToObject(o, "results", rows);
        json_print(o);
    } else {
        cJSON_Delete(rows);
    }
    if (c.rank == 0 && total_wrong) fprintf(stderr, "micropp: allreduce: %ld wrong elements\n", total_wrong);
    if (!shm) backend_cpu.free(x);
    comm_free(&c);
    fflush(stdout);
    comm_finalize();
    return total_wrong ? 1 : 0;
}

// ---- micropp alltoall ----

// Median over iterations of the slowest rank's time for one all-to-all of `per` floats to every rank.
static double time_alltoall(AllToAll *a, const float *send, float *recv, const int *ones, int per, int iters,
                            int warmup, MPI_Comm comm) {
    double *t = xmalloc(sizeof(double) * (size_t)iters);
    for (int i = -warmup; i < iters; i++) {
        comm_barrier(comm);
        double t0 = now_sec();
        alltoall_rows(a, send, ones, recv, ones, per);
        if (i >= 0) t[i] = now_sec() - t0;
    }
    return slowest_median(t, iters, comm);
}

// Element i that rank s sends to rank d: small integers that say where they came from.
static float a2a_value(int s, int d, int i) { return (float)(((s * 31 + d * 7) % 1000) * 8 + i % 8); }

static long alltoall_wrong(AllToAll *a, float *send, float *recv, const int *ones, int per, MPI_Comm comm) {
    int R = alltoall_size(a), me = alltoall_rank(a);
    for (int d = 0; d < R; d++)
        for (int i = 0; i < per; i++) send[(size_t)d * per + i] = a2a_value(me, d, i);
    alltoall_rows(a, send, ones, recv, ones, per);
    long wrong = 0;
    for (int s = 0; s < R; s++)
        for (int i = 0; i < per; i++) wrong += recv[(size_t)s * per + i] != a2a_value(s, me, i);
    double w[1] = {(double)wrong};
    comm_allreduce_sum_double(w, 1, comm);
    return (long)w[0];
}

// --algo nccl: this rank's GPU (the CUDA backend) and an NCCL communicator over every rank (comms.c's
// comm_nccl_group, closed at the end), or one line and exit 2, the same on every rank (the hardware agreed).
static const Backend *nccl_open(struct DevComm **dev) {
    Hardware hw;
    comm_choose_hardware(1, &hw);
    if (hw.no_gpu_rank >= 0)
        user_error("alltoall: --algo nccl runs train's all-to-all over NCCL between GPUs, and rank %d has no CUDA "
                   "device (%s): use --algo mpi, pair, shm or all", hw.no_gpu_rank, hw.no_gpu_why);
    if (hw.crowded)
        user_error("alltoall: --algo nccl needs one GPU per rank, but a node runs %d ranks on %d GPU%s: use --algo "
                   "mpi, pair, shm or all, or at most %d ranks per node", hw.crowded_ranks, hw.crowded_gpus,
                   hw.crowded_gpus == 1 ? "" : "s", hw.crowded_gpus);
    *dev = comm_nccl_group(MPI_COMM_WORLD);
    return hw.cuda;
}

// 1 when some node's /dev/shm cannot hold the shm windows of cap floats a rank, agreed by every rank; --algo shm
// asked for where it cannot is refused in one line (a small tmpfs, as Docker's 64 MB default, would end the job
// with SIGBUS on first touch).
static int shm_short(const AllreduceConfig *cfg, size_t cap, int R) {
    int here;
    double need, room, v[1];
    v[0] = alltoall_shm_short(MPI_COMM_WORLD, (double)alltoall_shm_bytes(cap, R), &need, &room, &here);
    char why[300] = "";
    if (v[0] && cfg->algo == ALLTOALL_SHM) {
        char nb[32], sb[32], rb[32];
        snprintf(why, sizeof why, "alltoall: --algo shm needs %s of /dev/shm for the windows of the %d ranks of this "
                 "node at --size %s, and %s are free: a smaller --size (or -e), a larger /dev/shm, or --algo mpi",
                 fmt_bytes(need, nb, sizeof nb), here, fmt_bytes_binary((double)cfg->max_bytes, sb, sizeof sb),
                 fmt_bytes(room, rb, sizeof rb));
    }
    comm_agree(MPI_COMM_WORLD, why);
    comm_allreduce_sum_double(v, 1, MPI_COMM_WORLD);
    return v[0] > 0;
}

static void alltoall_header(const AllreduceConfig *cfg, int R, int skip_shm, int room_short) {
    printf("# micropp alltoall: %d ranks, each sends size/%d to every rank (mpi = MPI_Alltoallv, pair and shm = "
           "comms/alltoall.c's); time = median over %lld iterations (after %lld warm-up) of the slowest rank\n",
           R, R, (long long)cfg->iters, (long long)cfg->warmup);
    printf("# algbw = size / time, busbw = algbw * (R-1)/R (what leaves each rank); GB = 1e9 bytes\n");
    if (skip_shm && room_short)
        printf("# shm left out: a node's /dev/shm is too small for its windows at this --size\n");
    else if (skip_shm) printf("# shm left out: the ranks are not on one node (--algo shm says so)\n");
    if (cfg->algo == ALLTOALL_NCCL)
        printf("# nccl = train's under --transport nccl: the host's rows onto the GPU, ncclSend/ncclRecv to every rank "
               "in one group, back to the host (the time includes both copies)\n");
    printf("# %12s %12s %6s %12s %12s %12s %7s\n", "size(B)", "count", "algo", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong");
}

int cmd_alltoall(int argc, char **argv) {
    comm_init(&argc, &argv);
    AllreduceConfig cfg = {.size = 64LL << 20, .factor = 2, .iters = 20, .warmup = 3, .algo = ALLTOALL_ALGOS};
    OptionsSeen seen;
    options_parse("alltoall", alltoall_options, &cfg, &seen, argc, argv, "mpiexec -n R micropp alltoall [options]",
                  "  mpiexec -n 2 micropp alltoall                      # 64 MiB per rank, mpi vs pair vs shm\n"
                  "  mpiexec -n 4 micropp alltoall --sweep --size 16M   # 4 B .. 16 MiB\n"
                  "  mpiexec -n 4 micropp alltoall -b 8 -e 128M -f 2    # as nccl-tests' alltoall_perf\n");
    int R = comm_world_size();
    if (R < 2)
        user_error("alltoall: needs 2 ranks or more, got 1 (one rank exchanges nothing): run it as "
                   "'mpiexec -n 2 ./micropp alltoall'");
    resolve_sizes("alltoall", &cfg, &seen);
    struct DevComm *nccl = NULL;
    const Backend *gpu = cfg.algo == ALLTOALL_NCCL ? nccl_open(&nccl) : NULL;
    int all = cfg.algo == ALLTOALL_ALGOS, shm_ok = alltoall_shm_possible(MPI_COMM_WORLD);
    if (cfg.algo == ALLTOALL_SHM && !shm_ok)
        user_error("alltoall: --algo shm needs every rank on one node, and they are not: use --algo mpi or pair");
    size_t nmax = (size_t)cfg.max_bytes / 4, nmin = (size_t)cfg.min_bytes / 4;
    int pmax = (int)(nmax / (size_t)R > 0 ? nmax / (size_t)R : 1);
    int room_short = shm_ok && (all || cfg.algo == ALLTOALL_SHM) && shm_short(&cfg, (size_t)pmax * R, R);
    if (room_short) shm_ok = 0;  // (all: shm left out, and the header says why)
    float *send = xmalloc(sizeof(float) * (size_t)pmax * R), *recv = xmalloc(sizeof(float) * (size_t)pmax * R);
    for (size_t i = 0; i < (size_t)pmax * R; i++) send[i] = 1e-3f;
    int *ones = xmalloc(sizeof(int) * (size_t)R);
    for (int p = 0; p < R; p++) ones[p] = 1;  // one row of `per` floats to every rank
    AllToAll *algos[ALLTOALL_ALGOS] = {0};
    for (int a = 0; a < ALLTOALL_ALGOS; a++)  // (all: the host's algorithms; nccl only when asked for)
        if ((all ? !alltoall_algos[a].device : a == cfg.algo) && (shm_ok || !alltoall_algos[a].windows))
            algos[a] = alltoall_open(MPI_COMM_WORLD, a, alltoall_algos[a].device ? gpu : &backend_cpu, (size_t)pmax * R,
                                     alltoall_algos[a].device ? nccl : NULL);
    int rank = comm_world_rank();
    if (rank == 0 && !cfg.json) alltoall_header(&cfg, R, all && !shm_ok, room_short);
    cJSON *rows = cJSON_CreateArray();
    long total_wrong = 0;
    enum { MAX_SIZES = 64 };
    double sizes[MAX_SIZES];
    int best[MAX_SIZES], n_sizes = 0, last_per = -1;
    size_t f = (size_t)cfg.factor;
    for (size_t n = nmin; n <= nmax; n = n * f > nmax && n < nmax ? nmax : n * f) {
        int per = (int)(n / (size_t)R > 0 ? n / (size_t)R : 1);
        if (per == last_per) { if (n == nmax) break; continue; }  // (sizes under R floats: one float each)
        last_per = per;
        double least = INFINITY, bytes = 4.0 * per * R;
        for (int a = 0; a < ALLTOALL_ALGOS; a++) {
            if (!algos[a]) continue;
            double t = time_alltoall(algos[a], send, recv, ones, per, (int)cfg.iters, (int)cfg.warmup, MPI_COMM_WORLD);
            long wrong = alltoall_wrong(algos[a], send, recv, ones, per, MPI_COMM_WORLD);
            total_wrong += wrong;
            if (t < least && n_sizes < MAX_SIZES) { least = t; best[n_sizes] = a; sizes[n_sizes] = bytes; }
            table_row(rows, rank == 0 && !cfg.json, bytes, (double)per * R, alltoall_algos[a].name, t,
                      (double)(R - 1) / R, wrong);
        }
        n_sizes += n_sizes < MAX_SIZES;
        if (n == nmax) break;
    }
    if (rank == 0 && !cfg.json && all) print_winners(sizes, best, n_sizes, alltoall_name);
    if (rank == 0 && cfg.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ranks", R);
        cJSON_AddItemToObject(o, "results", rows);
        json_print(o);
    } else {
        cJSON_Delete(rows);
    }
    if (rank == 0 && total_wrong) fprintf(stderr, "micropp: alltoall: %ld wrong elements\n", total_wrong);
    for (int a = 0; a < ALLTOALL_ALGOS; a++) alltoall_close(algos[a]);
    free(send); free(recv); free(ones);
    fflush(stdout);
    comm_finalize();
    return total_wrong ? 1 : 0;
}
