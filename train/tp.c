// train/tp.c: tensor parallelism's all-reduce (see tp.h): the Stage's hook sums a buffer in place over
// the T ranks of its group. Every rank of a group runs the same passes of the same stage in the same
// order, so the group's collectives start in the same order on all of them (as p2p.h's rule asks of
// the pipeline's messages): the hook is the only caller, and it blocks until the sum is complete.
#include <string.h>
#include "train/tp.h"
#include "base/util.h"

void tp_setup(TpGroup *g, const Comm *grid, const Backend *be, int algo, size_t most) {
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
    if (algo != ALLREDUCE_SHM) return;
    g->window_n = most;
    g->window = comm_shared_alloc(&g->comm, most);  // collective over the group
}

static void tp_allreduce(void *ctx, float *x, size_t n) {
    TpGroup *g = ctx;
    double t0 = now_sec();
    if (g->algo == ALLREDUCE_SHM) {  // through the window: the group's ranks sum it in place
        CHECK(n <= g->window_n, "a tensor-parallel all-reduce of %zu floats, the window holds %zu", n, g->window_n);
        memcpy(g->window, x, n * sizeof(float));
        comm_allreduce(&g->comm, g->window, n, 1.0f, ALLREDUCE_SHM);
        memcpy(x, g->window, n * sizeof(float));
    } else comm_allreduce(&g->comm, x, n, 1.0f, g->algo);
    g->calls++;
    g->floats += (double)n;
    g->seconds += now_sec() - t0;
}

void tp_allgather(TpGroup *g, float *x, size_t n) {
    double t0 = now_sec();
    if (g->algo == ALLREDUCE_SHM) {
        CHECK(n <= g->window_n, "a tensor-parallel all-gather of %zu floats, the window holds %zu", n, g->window_n);
        memcpy(g->window, x, n * sizeof(float));
        comm_allgather(&g->comm, g->window, n, ALLREDUCE_SHM);
        memcpy(x, g->window, n * sizeof(float));
    } else comm_allgather(&g->comm, x, n, g->algo);
    g->seconds += now_sec() - t0;
}

void tp_attach(TpGroup *g, Stage *s) {
    s->tp_allreduce = tp_allreduce;
    s->tp_ctx = g;
}

void tp_free(TpGroup *g) {
    comm_shared_free(&g->comm);  // (the communicator itself is the grid's)
    memset(g, 0, sizeof *g);
}
