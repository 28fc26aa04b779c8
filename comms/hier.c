// comms/hier.c: the hierarchical collectives (hier.h), a row of the collectives' table for data-parallel
// groups that span nodes: the two-level rings of Horovod's and NCCL's hierarchical all-reduce, each level
// a ring of ring.c (RingRun) on a communicator of its own, cached on the dp group.
//
// dp's D ranks are N nodes of L ranks each, node-major (dp rank d = k * L + l: node k, place l), and the
// buffer is cut into D shards (comm_shard), shard d owned by dp rank d. Inside a node the ring's chunk
// l is the N shards {k * L + l : k} (one per node); across nodes, among the N ranks of place l, chunk k
// is shard k * L + l. All-reduce: a reduce-scatter inside the node (each rank sends (L-1)/L of the
// buffer over the node's own memory), an all-reduce across nodes on the 1/L left (2(N-1)/(NL) over the
// slow link, where the flat ring sends 2(D-1)/D of it through the node's one link from every rank of
// it), and an all-gather inside the node. Reduce-scatter (ZeRO's): the first two halves, which leave
// shard d on dp rank d as every row does; all-gather: the mirror. A group that is not so laid out runs
// the plain ring over dp.
#include <stdlib.h>
#include <string.h>
#include "comms/hier.h"
#include "comms/ring.h"
#include "comms/watchdog.h"
#include "base/util.h"

typedef struct {
    MPI_Comm local, cross;    // dp's ranks on this node; the ranks of the same place on every node
    int L, N, l, k;           // their sizes, and this rank's place in each
    int fits;                 // dp is N nodes of L, node-major (the same on every rank)
} HierGroups;

// The groups, made once per dp communicator and kept on it as an MPI attribute (freed with it).
static int groups_key = MPI_KEYVAL_INVALID;
static int groups_delete(MPI_Comm comm, int key, void *attr, void *extra) {
    (void)comm; (void)key; (void)extra;
    HierGroups *g = attr;
    MPI_Comm_free(&g->local);
    MPI_Comm_free(&g->cross);
    free(g);
    return MPI_SUCCESS;
}

// Collective over dp the first time (every rank of dp calls it at the same point: a collective's start).
static HierGroups *groups_of(MPI_Comm dp) {
    if (groups_key == MPI_KEYVAL_INVALID)
        MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, groups_delete, &groups_key, NULL));
    HierGroups *g;
    int found, me, D;
    MPI_CHECK(MPI_Comm_get_attr(dp, groups_key, &g, &found));
    if (found) return g;
    g = xcalloc(1, sizeof *g);
    MPI_CHECK(MPI_Comm_size(dp, &D));
    MPI_CHECK(MPI_Comm_rank(dp, &me));
    MPI_CHECK(MPI_Comm_split_type(dp, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &g->local));
    MPI_CHECK(MPI_Comm_size(g->local, &g->L));
    MPI_CHECK(MPI_Comm_rank(g->local, &g->l));
    MPI_CHECK(MPI_Comm_split(dp, g->l, me, &g->cross));
    MPI_CHECK(MPI_Comm_size(g->cross, &g->N));
    MPI_CHECK(MPI_Comm_rank(g->cross, &g->k));
    g->fits = me == g->k * g->L + g->l && g->L * g->N == D && g->N <= RING_MAX_PARTS;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &g->fits, 1, MPI_INT, MPI_MIN, dp));
    MPI_CHECK(MPI_Comm_set_attr(dp, groups_key, g));
    return g;
}

void comm_hier_prepare(Comm *c) { groups_of(c->dp); }

int comm_hier_layout(const int *node_of, int D, int *L) {
    int N = 0;
    *L = 0;
    for (int i = 0, j; i < D; i = j) {  // the run of node_of[i]: [i, j)
        for (j = i; j < D && node_of[j] == node_of[i]; j++) {}
        if (*L && j - i != *L) return 0;
        *L = j - i;
        for (int m = 0; m < i; m++)
            if (node_of[m] == node_of[i]) return 0;  // a node seen before: not node after node
        N++;
    }
    return N;
}

void comm_hier_why(Comm *c, const char *what, char *why, size_t n) {
    const char *flag = strcmp(what, "allreduce") ? "--allreduce" : "--algo";
    HierGroups *g = groups_of(c->dp);
    int D;
    MPI_CHECK(MPI_Comm_size(c->dp, &D));
    why[0] = 0;
    if (!g->fits)
        snprintf(why, n, "%s: %s hier needs the %d ranks of each data-parallel group in equal runs, node after node, "
                 "and they are not: use %s ring or mpi", what, flag, D, flag);
    else if (g->N < 2)
        snprintf(why, n, "%s: %s hier needs the replicas on 2 or more nodes, and all %d share one: use %s shm or ring",
                 what, flag, D, flag);
}

// ---- the row ----

enum { PHASE_LOCAL, PHASE_CROSS, PHASE_FLAT };
typedef struct {
    HierGroups *g;
    RingRun run;              // the phase in flight
    int phase, phases;
    int where[3], op[3];      // each phase's ring (PHASE_*) and what it computes (OP_*)
} HierReq;

static void phase_start(CommReq *q, HierReq *h) {
    HierGroups *g = h->g;
    RingRun *r = &h->run;
    int where = h->where[h->phase], op = h->op[h->phase];
    memset(r, 0, sizeof *r);
    if (where == PHASE_FLAT) {
        comm_ring_run_init(r, op, q->comm, q->tag, q->buf, q->n, q->scale);
        return;
    }
    r->cuts = q->D;
    if (where == PHASE_LOCAL) r->parts = g->N, r->stride = 1, r->part_stride = g->L;  // chunk l: {k L + l}
    else r->parts = 1, r->base = g->l, r->stride = g->L;                              // chunk k: k L + l
    comm_ring_run_init(r, op, where == PHASE_LOCAL ? g->local : g->cross, q->tag, q->buf, q->n,
                       where == PHASE_CROSS ? q->scale : 1.0f);
}

int comm_hier_advance(CommReq *q) {
    HierReq *h = q->state;
    while (comm_ring_run_advance(&h->run)) {
        comm_ring_run_free(&h->run);
        if (++h->phase == h->phases) return 1;
        phase_start(q, h);
    }
    return 0;
}

int comm_hier_start(CommReq *q, Comm *c) {
    (void)c;
    HierReq *h = xcalloc(1, sizeof *h);
    q->state = h;
    h->g = groups_of(q->comm);
    static const int local_cross_local[3] = {PHASE_LOCAL, PHASE_CROSS, PHASE_LOCAL};
    if (!h->g->fits) {
        h->phases = 1, h->where[0] = PHASE_FLAT, h->op[0] = q->op;
    } else if (q->op == OP_ALLREDUCE) {
        h->phases = 3;
        memcpy(h->where, local_cross_local, sizeof h->where);
        h->op[0] = OP_REDUCE_SCATTER, h->op[1] = OP_ALLREDUCE, h->op[2] = OP_ALLGATHER;
    } else if (q->op == OP_REDUCE_SCATTER) {
        h->phases = 2, h->where[0] = PHASE_LOCAL, h->where[1] = PHASE_CROSS;
        h->op[0] = h->op[1] = OP_REDUCE_SCATTER;
    } else {
        h->phases = 2, h->where[0] = PHASE_CROSS, h->where[1] = PHASE_LOCAL;
        h->op[0] = h->op[1] = OP_ALLGATHER;
    }
    phase_start(q, h);
    return comm_hier_advance(q);
}

void comm_hier_release(CommReq *q) {
    HierReq *h = q->state;
    comm_ring_run_free(&h->run);
}
