// axes/tp.c: tensor parallelism's all-reduce (see tp.h): the Stage's hook sums a buffer in place over
// the T ranks of its group. Every rank of a group runs the same passes of the same stage in the same
// order, so the group's collectives start in the same order on all of them (as p2p.h's rule asks of
// the pipeline's messages): the hook is the only caller, and it blocks until the sum is complete.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "axes/tp.h"
#include "base/util.h"
#include "comms/devcomm.h"
#include "comms/tags.h"

// The recorder (testing): with MICROPP_COLLECTIVE_LOG=DIR each rank writes DIR/rank<r>.log, one line
// per collective it issues on its group, in order, before it is dispatched to shm, MPI or NCCL:
// "<op> <floats> group <g>". tests/t_tp_order.sh checks that every rank of a group wrote the same lines:
// the rule NCCL needs (collectives pair by order alone), proven on the CPU.
static FILE *open_log(int rank) {
    const char *dir = getenv("MICROPP_COLLECTIVE_LOG");
    if (!dir || !*dir) return NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/rank%d.log", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f) user_error("MICROPP_COLLECTIVE_LOG '%s': cannot write %s: name a folder that exists", dir, path);
    return f;
}
static void record(TpGroup *g, const char *op, size_t n) {
    if (!g->log) return;
    fprintf(g->log, "%s %zu group %d\n", op, n, g->group);
    fflush(g->log);  // (a rank that ends on an error keeps what it issued)
}

void tp_setup(TpGroup *g, const Comm *grid, const Backend *be, int algo, int nccl, size_t most) {
    memset(g, 0, sizeof *g);
    g->comm.rank = grid->rank;
    g->comm.size = grid->size;
    g->comm.world = grid->world;
    g->comm.dp = grid->tp;
    g->comm.pp = MPI_COMM_NULL;
    g->comm.tp = MPI_COMM_NULL;
    g->comm.be = be;
    g->comm.transport = TRANSPORT_MPI;
    g->algo = algo;
    g->group = comm_rank_group(grid->tp_size, grid->rank);
    g->log = open_log(grid->rank);
    if (nccl) g->dev = comm_nccl_group(grid->tp);  // (comms.c closes it at the end)
    if (nccl || !comm_algo_windows(algo)) return;
    g->window_n = most;
    g->window = comm_shared_alloc(&g->comm, most);  // collective over the group
}

static void keep_span(TpGroup *g, int kind, double t0, size_t n) {
    if (!g->trace) return;
    if (g->n_spans == g->cap_spans) {
        g->cap_spans = g->cap_spans ? 2 * g->cap_spans : 64;
        g->spans = realloc(g->spans, sizeof(Span) * (size_t)g->cap_spans);
        CHECK(g->spans, "out of memory recording the tensor-parallel collectives");
    }
    g->spans[g->n_spans++] = (Span){t0, now_sec(), kind, (double)n * sizeof(float)};
}

void tp_spans_clear(TpGroup *g) { g->n_spans = 0; }

static void tp_allreduce(void *ctx, float *x, size_t n) {
    TpGroup *g = ctx;
    double t0 = now_sec();
    record(g, "allreduce", n);
    if (g->dev) devcomm_allreduce_sum(g->dev, x, n);  // queued: the compute after it waits on the device
    else if (comm_algo_windows(g->algo)) {  // through the window: the group's ranks sum it in place
        CHECK(n <= g->window_n, "a tensor-parallel all-reduce of %zu floats, the window holds %zu", n, g->window_n);
        memcpy(g->window, x, n * sizeof(float));
        comm_allreduce(&g->comm, g->window, n, 1.0f, g->algo);
        memcpy(x, g->window, n * sizeof(float));
    } else comm_allreduce(&g->comm, x, n, 1.0f, g->algo);
    g->calls++;
    g->floats += (double)n;
    g->seconds += now_sec() - t0;
    keep_span(g, EV_TP_ALLREDUCE, t0, n);
}

void tp_allgather(TpGroup *g, float *x, size_t n) {
    double t0 = now_sec();
    record(g, "allgather", n);
    if (comm_algo_windows(g->algo)) {
        CHECK(n <= g->window_n, "a tensor-parallel all-gather of %zu floats, the window holds %zu", n, g->window_n);
        memcpy(g->window, x, n * sizeof(float));
        comm_allgather(&g->comm, g->window, n, g->algo);
        memcpy(x, g->window, n * sizeof(float));
    } else comm_allgather(&g->comm, x, n, g->algo);
    g->seconds += now_sec() - t0;
    keep_span(g, EV_GATHER, t0, n);
}

void tp_attach(TpGroup *g, Stage *s) {
    s->tp_allreduce = tp_allreduce;
    s->tp_ctx = g;
}

// One way timed: reps round trips (after one not counted) of stage 0's message to stage 1 and back,
// each rank sending its part (all of it, or its chunk and the receiver all-gathers). Seconds.
static double time_way(TpGroup *g, Comm *c, int way, float *buf, size_t n, int reps) {
    size_t off = 0, len = n;
    if (way == TP_MESSAGE_SLICE) comm_shard(n, c->tp_size, c->tp_rank, &off, &len);
    int peer = comm_stage_rank(c, 1 - c->stage), tag = comm_tag(TAG_CTRL, 0);
    double t0 = 0;
    for (int r = -1; r < reps; r++) {
        if (r == 0) t0 = now_sec();
        if (c->stage == 0) comm_send(c, buf + off, len, peer, tag);
        comm_recv(c, buf + off, len, peer, tag);
        if (way == TP_MESSAGE_SLICE) tp_allgather(g, buf, n);
        if (c->stage == 1) comm_send(c, buf + off, len, peer, tag);
        comm_wait_sends(c);
    }
    return now_sec() - t0;
}

// Testing: MICROPP_TP_MESSAGE_SKEW=RANK:WAY[,RANK:WAY...] adds a second to WAY's (full or slice) time
// as that world rank measured it, so two ranks of one group lean opposite ways: only the agreement
// over the world keeps them on one. Read alike on every rank; a malformed value is a user error.
static void skew(int rank, double t[2]) {
    const char *v = getenv("MICROPP_TP_MESSAGE_SKEW");
    for (const char *q = v; q && *q;) {
        int r = -1, used = 0;
        char way[8] = "";
        if (sscanf(q, "%d:%7[a-z]%n", &r, way, &used) != 2 || (strcmp(way, "full") && strcmp(way, "slice")))
            user_error("MICROPP_TP_MESSAGE_SKEW '%s': write RANK:full or RANK:slice, comma separated", v);
        if (r == rank) t[strcmp(way, "full") ? TP_MESSAGE_SLICE : TP_MESSAGE_FULL] += 1.0;
        q += used;
        if (*q == ',') q++;
    }
}

void tp_choose_message(TpGroup *g, Comm *c, int asked, size_t n, int reps) {
    g->message = asked == TP_MESSAGE_SLICE ? TP_MESSAGE_SLICE : TP_MESSAGE_FULL;
    if (asked != TP_MESSAGE_AUTO || c->stages < 2) return;
    double t[2] = {0, 0}, spent = g->seconds;  // (the all-gathers here are not the run's)
    if (c->stage <= 1) {
        float *buf = g->comm.be->alloc(n * sizeof(float));
        for (int way = TP_MESSAGE_FULL; way <= TP_MESSAGE_SLICE; way++) t[way] = time_way(g, c, way, buf, n, reps);
        g->comm.be->free(buf);
    }
    g->seconds = spent;
    skew(c->rank, t);
    comm_allreduce_max_double(t, 2, MPI_COMM_WORLD);
    g->full_ms = t[TP_MESSAGE_FULL] * 1e3 / (2.0 * reps);
    g->slice_ms = t[TP_MESSAGE_SLICE] * 1e3 / (2.0 * reps);
    g->message = g->slice_ms < g->full_ms ? TP_MESSAGE_SLICE : TP_MESSAGE_FULL;
    g->timed = 1;
}

void tp_free(TpGroup *g) {
    if (g->log) fclose(g->log);
    comm_shared_free(&g->comm);  // (the communicator itself is the grid's; g->dev is comms.c's)
    free(g->spans);
    memset(g, 0, sizeof *g);
}
