// pingpong.c: `micropp pingpong`, the course's first distributed lab and a link benchmark.
// Default: rank 0 sends a small tensor, rank 1 prints it and sends it back. --sweep (or -b/-e/-f):
// an OSU-style table of latency (half round trip) and bandwidth (a window of non-blocking sends).
// --device cuda: the same between GPU buffers, through comm_send/comm_recv (the pipeline's path):
// NCCL device to device, or MPI staged through pinned host memory.
#include <string.h>
#include <cjson/cJSON.h>
#include "comms.h"
#include "base/config.h"
#include "commands.h"
#include "train/plan.h"  // plan_device: the device and transport from what the ranks found
#include "base/util.h"

typedef struct {
    int sweep;
    int64_t min_bytes, max_bytes, factor, iters, warmup, window;
    int json;
    int device, transport;
} PingConfig;

#define P(field) offsetof(PingConfig, field)
static const Option ping_options[] = {
    {"sweep", 0, OPT_BOOL, P(sweep), 0, 0, 0, 0,
     "measure latency and bandwidth over message sizes (implied by -b/-e/-f)", 0},
    {"min-bytes", 'b', OPT_SIZE, P(min_bytes), 0, 1, 1LL << 30, "SIZE", "smallest message, K/M/G suffixes", 0},
    {"max-bytes", 'e', OPT_SIZE, P(max_bytes), 0, 1, 1LL << 30, "SIZE", "largest message", 0},
    {"step-factor", 'f', OPT_INT, P(factor), 0, 2, 1024, "F", "multiply the size by F each row", 0},
    {"iters", 'n', OPT_INT, P(iters), 0, 1, 1e9, "N", "timed iterations per size (a tenth above 64 KiB)", 0},
    {"warmup", 'w', OPT_INT, P(warmup), 0, 0, 1e9, "N", "untimed warm-up iterations per size", 0},
    {"window", 0, OPT_INT, P(window), 0, 1, 1024, "W", "non-blocking sends in flight for the bandwidth test", 0},
    {"json", 0, OPT_BOOL, P(json), 0, 0, 0, 0, "print one JSON object instead of the table", 0},
    {"device", 0, OPT_CHOICE, P(device), DEVICE_CHOICES, 0, 0, "DEV",
     "cpu: host buffers over MPI; cuda: GPU buffers over --transport (sizes in whole floats); auto: cuda when visible",
     0},
    {"transport", 0, OPT_CHOICE, P(transport), TRANSPORT_CHOICES, 0, 0, "T",
     "cuda: nccl (one GPU per rank) or mpi (pinned host staging); auto = nccl when it can", 0},
    {0},
};
#undef P

// The byte pattern of message `it` of `size` bytes: the receiver recomputes it to count wrong bytes.
static unsigned char pattern(int64_t size, int64_t it, int64_t i) {
    return (unsigned char)((i * 131 + it * 7 + size) & 0xff);
}
static void fill(unsigned char *b, int64_t size, int64_t it) {
    for (int64_t i = 0; i < size; i++) b[i] = pattern(size, it, i);
}
static int64_t wrong(const unsigned char *b, int64_t size, int64_t it) {
    int64_t w = 0;
    for (int64_t i = 0; i < size; i++) w += b[i] != pattern(size, it, i);
    return w;
}

// The lab: a small tensor there and back.
static void lab(int rank) {
    float t[8];
    if (rank == 0) {
        for (int i = 0; i < 8; i++) t[i] = (float)(i + 1) * 0.5f;
        printf("rank 0: sending tensor [%g, %g, %g, %g, %g, %g, %g, %g] to rank 1\n", t[0], t[1], t[2], t[3], t[4],
               t[5], t[6], t[7]);
        fflush(stdout);
        double t0 = now_sec();
        MPI_CHECK(MPI_Send(t, 8, MPI_FLOAT, 1, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(t, 8, MPI_FLOAT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        double us = (now_sec() - t0) * 1e6;
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));  // rank 1 has printed
        printf("rank 0: got it back doubled [%g, %g, %g, %g, %g, %g, %g, %g] after %.1f us round trip\n",
               t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], us);
        for (int i = 0; i < 8; i++)
            CHECK(t[i] == (float)(i + 1), "pingpong: element %d came back as %g, expected %d", i, t[i], i + 1);
    } else {
        MPI_CHECK(MPI_Recv(t, 8, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        printf("rank 1: received tensor [%g, %g, %g, %g, %g, %g, %g, %g] from rank 0, sending it back doubled\n",
               t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
        fflush(stdout);
        for (int i = 0; i < 8; i++) t[i] *= 2;
        MPI_CHECK(MPI_Send(t, 8, MPI_FLOAT, 0, 1, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }
}

// MPI_Waitall with MPI_STATUSES_IGNORE trips a gcc 12 false positive (-Wstringop-overflow).
static void wait_all(MPI_Request *reqs, int64_t n) {
    for (int64_t i = 0; i < n; i++) MPI_CHECK(MPI_Wait(&reqs[i], MPI_STATUS_IGNORE));
}

typedef struct { int64_t size, iters; double lat_us, bw_gbs; int64_t wrong; } Row;

static Row measure(int rank, int64_t size, PingConfig *c, unsigned char *buf, MPI_Request *reqs) {
    Row row = {.size = size};
    int64_t iters = size > 65536 ? (c->iters + 9) / 10 : c->iters;
    int64_t warm = size > 65536 ? (c->warmup + 9) / 10 : c->warmup;
    row.iters = iters;
    int peer = 1 - rank;
    // latency: blocking ping-pong; the last timed message is validated on both sides
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = 0;
    for (int64_t it = 0; it < warm + iters; it++) {
        if (it == warm) t0 = now_sec();
        if (rank == 0) {
            if (it == warm + iters - 1) fill(buf, size, it);
            MPI_CHECK(MPI_Send(buf, (int)size, MPI_BYTE, peer, 10, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(buf, (int)size, MPI_BYTE, peer, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            MPI_CHECK(MPI_Recv(buf, (int)size, MPI_BYTE, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Send(buf, (int)size, MPI_BYTE, peer, 11, MPI_COMM_WORLD));
        }
        if (it == warm + iters - 1) row.wrong += wrong(buf, size, it);
    }
    row.lat_us = (now_sec() - t0) / (double)iters / 2 * 1e6;
    // bandwidth: rank 0 posts a window of non-blocking sends, rank 1 acknowledges each window
    int64_t window = c->window;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int64_t it = 0; it < warm + iters; it++) {
        if (it == warm) t0 = now_sec();
        int last = it == warm + iters - 1;
        if (rank == 0) {
            if (last) fill(buf, size, it + 1);
            for (int64_t w = 0; w < window; w++)
                MPI_CHECK(MPI_Isend(buf, (int)size, MPI_BYTE, peer, 20, MPI_COMM_WORLD, &reqs[w]));
            wait_all(reqs, window);
            MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, peer, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            // As OSU does, the window lands in one buffer; on the last round the final message
            // gets a buffer of its own so its bytes can be checked.
            for (int64_t w = 0; w < window; w++)
                MPI_CHECK(MPI_Irecv(last && w == window - 1 ? buf + size : buf, (int)size, MPI_BYTE, peer, 20,
                                    MPI_COMM_WORLD, &reqs[w]));
            wait_all(reqs, window);
            MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, peer, 21, MPI_COMM_WORLD));
            if (last) row.wrong += wrong(buf + size, size, it + 1);
        }
    }
    double secs = now_sec() - t0;
    row.bw_gbs = (double)size * (double)window * (double)iters / secs / 1e9;
    // both ranks' counts of wrong bytes; the bandwidth printed is rank 0's (the sender's) view
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &row.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    return row;
}

// --device cuda: the same two measurements between device buffers, through comm_send/comm_recv,
// so they time exactly what a pipeline stage's activations go through (the staging copies or the
// NCCL kernels included). Acknowledgements are one float.
static Row measure_device(Comm *cm, int64_t size, PingConfig *c, float *dbuf, float *dlast, float *dack,
                          unsigned char *hbuf) {
    const Backend *be = cm->be;
    Row row = {.size = size};
    int64_t iters = size > 65536 ? (c->iters + 9) / 10 : c->iters;
    int64_t warm = size > 65536 ? (c->warmup + 9) / 10 : c->warmup;
    row.iters = iters;
    int rank = cm->rank, peer = 1 - rank;
    size_t n = (size_t)size / sizeof(float);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = 0;
    for (int64_t it = 0; it < warm + iters; it++) {
        if (it == warm) t0 = now_sec();
        int last = it == warm + iters - 1;
        if (rank == 0) {
            if (last) { fill(hbuf, size, it); be->to_device(dbuf, hbuf, (size_t)size); }
            comm_send(cm, dbuf, n, peer, comm_tag(TAG_DATA, 0));
            comm_wait_sends(cm);
            comm_recv(cm, dbuf, n, peer, comm_tag(TAG_DATA, 1));
        } else {
            comm_recv(cm, dbuf, n, peer, comm_tag(TAG_DATA, 0));
            comm_send(cm, dbuf, n, peer, comm_tag(TAG_DATA, 1));
            comm_wait_sends(cm);
        }
        if (last) { be->to_host(hbuf, dbuf, (size_t)size); row.wrong += wrong(hbuf, size, it); }
    }
    row.lat_us = (now_sec() - t0) / (double)iters / 2 * 1e6;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int64_t it = 0; it < warm + iters; it++) {
        if (it == warm) t0 = now_sec();
        int last = it == warm + iters - 1;
        if (rank == 0) {
            if (last) { fill(hbuf, size, it + 1); be->to_device(dbuf, hbuf, (size_t)size); }
            for (int64_t w = 0; w < c->window; w++) comm_send(cm, dbuf, n, peer, comm_tag(TAG_DATA, 2));
            comm_wait_sends(cm);
            comm_recv(cm, dack, 1, peer, comm_tag(TAG_CTRL, 0));
        } else {
            for (int64_t w = 0; w < c->window; w++)
                comm_recv(cm, last && w == c->window - 1 ? dlast : dbuf, n, peer, comm_tag(TAG_DATA, 2));
            comm_send(cm, dack, 1, peer, comm_tag(TAG_CTRL, 0));
            comm_wait_sends(cm);
            if (last) { be->to_host(hbuf, dlast, (size_t)size); row.wrong += wrong(hbuf, size, it + 1); }
        }
    }
    double secs = now_sec() - t0;
    row.bw_gbs = (double)size * (double)c->window * (double)iters / secs / 1e9;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &row.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    return row;
}

int cmd_pingpong(int argc, char **argv) {
    comm_init(&argc, &argv);
    PingConfig c = {.min_bytes = 1, .max_bytes = 4 << 20, .factor = 2, .iters = 1000, .warmup = 100, .window = 64,
                    .device = DEVICE_CPU};
    OptionsSeen seen;
    options_parse("pingpong", ping_options, &c, &seen, argc, argv, "mpiexec -n 2 micropp pingpong [options]",
                  "  mpiexec -n 2 micropp pingpong                  # the lab: one small tensor there and back\n"
                  "  mpiexec -n 2 micropp pingpong --sweep          # 1 B .. 4 MiB latency and bandwidth\n"
                  "  mpiexec -n 2 micropp pingpong -b 1K -e 64M -f 4 -n 200 --json\n"
                  "  mpiexec -n 2 micropp pingpong --sweep --device cuda --transport nccl   # GPU to GPU\n");
    int world = comm_world_size(), rank = comm_world_rank();
    if (world != 2)
        user_error("pingpong: needs exactly 2 ranks, got %d: run it as 'mpiexec -n 2 ./micropp pingpong'", world);
    if (seen_set(&seen, "min-bytes") || seen_set(&seen, "max-bytes") || seen_set(&seen, "step-factor")) c.sweep = 1;
    if (c.min_bytes > c.max_bytes)
        user_error("pingpong: --min-bytes %lld is above --max-bytes %lld: swap them", (long long)c.min_bytes,
                   (long long)c.max_bytes);
    if (!c.sweep) {
        if (seen_set(&seen, "json") || seen_set(&seen, "iters") || seen_set(&seen, "warmup") ||
            seen_set(&seen, "window") || seen_set(&seen, "device") || seen_set(&seen, "transport"))
            user_error("pingpong: --json/--iters/--warmup/--window/--device/--transport apply to the measurement: add "
                       "--sweep");
        lab(rank);
        finish(0);
    }
    Hardware hw;
    comm_choose_hardware(c.device != DEVICE_CPU, &hw);
    int device, transport;
    const char *why;
    char err[512];
    if (plan_device("pingpong", (int)c.device, (int)c.transport, 0, world, &hw, &device, &transport, &why, err,
                    sizeof err))
        user_error("%s", err);
    const Backend *be = device == DEVICE_CUDA ? hw.cuda : &backend_cpu;
    if (device == DEVICE_CUDA) be->set_tf32(0);
    if (!be->on_host) {  // comm_send moves whole floats (every rank has the same device now)
        if (!seen_set(&seen, "min-bytes")) c.min_bytes = 4;
        for (int64_t size = c.min_bytes; size <= c.max_bytes; size *= c.factor) {
            if (size % 4)
                user_error("pingpong: on the GPU messages are whole floats, but %lld bytes is not a multiple of 4: use "
                           "--min-bytes 4 (or another multiple of 4)",
                           (long long)size);
            if (size > c.max_bytes / c.factor) break;
        }
    }
    Comm cm;
    comm_pipeline(&cm, be);
    int other = 1 - rank;  // the only rank it exchanges with
    comm_use_transport(&cm, transport, &other, 1);
    int on_device = !be->on_host;
    float *dbuf = NULL, *dlast = NULL, *dack = NULL;
    if (on_device) {
        dbuf = be->alloc((size_t)c.max_bytes);
        dlast = be->alloc((size_t)c.max_bytes);
        dack = be->alloc(sizeof(float));
    }
    char dev[192], tr[16];
    be->describe(dev, sizeof dev);
    choice_name(TRANSPORT_CHOICES, transport, tr, sizeof tr);
    unsigned char *buf = xmalloc(2 * (size_t)c.max_bytes);
    MPI_Request *reqs = xmalloc(sizeof(MPI_Request) * (size_t)c.window);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    for (char *q = lib; *q; q++) if (*q == '\t') *q = ' ';
    if (rank == 0 && !c.json) {
        printf("# micropp pingpong: 2 ranks, %s\n", lib);
        if (on_device)
            printf("# device buffers on %s, transport %s (through comm_send/comm_recv, as the pipeline)%s%s\n", dev, tr,
                   why[0] ? "\n# " : "", why);
        printf(
            "# latency = half the round trip of a blocking ping-pong; bandwidth = windows of %lld non-blocking sends\n",
            (long long)c.window);
        printf("# then an acknowledgement; GB = 1e9 bytes; #wrong = received bytes that differ from what was sent\n");
        printf("# %10s %8s %13s %16s %7s\n", "size(B)", "iters", "latency(us)", "bandwidth(GB/s)", "#wrong");
        fflush(stdout);
    }
    cJSON *rows = cJSON_CreateArray();
    int64_t total_wrong = 0;
    for (int64_t size = c.min_bytes; size <= c.max_bytes; size *= c.factor) {
        Row r = on_device ? measure_device(&cm, size, &c, dbuf, dlast, dack, buf) : measure(rank, size, &c, buf, reqs);
        total_wrong += r.wrong;
        if (rank == 0 && !c.json) {
            printf("  %10lld %8lld %13.2f %16.3f %7lld\n", (long long)r.size, (long long)r.iters, r.lat_us, r.bw_gbs,
                   (long long)r.wrong);
            fflush(stdout);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "size_bytes", (double)r.size);
        cJSON_AddNumberToObject(o, "iters", (double)r.iters);
        cJSON_AddNumberToObject(o, "latency_us", r.lat_us);
        cJSON_AddNumberToObject(o, "bandwidth_gbs", r.bw_gbs);
        cJSON_AddNumberToObject(o, "wrong", (double)r.wrong);
        cJSON_AddItemToArray(rows, o);
        if (size > c.max_bytes / c.factor) break;
    }
    if (rank == 0 && c.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "library", lib);
        cJSON_AddNumberToObject(o, "window", (double)c.window);
        cJSON_AddStringToObject(o, "device", be->name);
        cJSON_AddStringToObject(o, "device_info", dev);
        cJSON_AddStringToObject(o, "transport", on_device ? tr : "mpi");
        cJSON_AddItemToObject(o, "rows", rows);
        json_print(o);
    } else {
        cJSON_Delete(rows);
    }
    free(buf);
    free(reqs);
    if (on_device) { be->free(dbuf); be->free(dlast); be->free(dack); }
    comm_hardware_free(&hw);
    if (total_wrong && rank == 0)
        fprintf(stderr, "micropp: pingpong: %lld bytes arrived wrong\n", (long long)total_wrong);
    finish(total_wrong ? 1 : 0);
}
