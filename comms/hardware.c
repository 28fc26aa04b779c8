// hardware.c: what every rank's hardware allows, gathered alike on every rank before any other
// message: the nodes the ranks sit on (and their host names), /dev/shm's room on each, and whether
// every rank has a GPU of its own (by the GPUs' UUIDs; NCCL needs it). It decides nothing: the plan
// (train/plan.c's plan_device) does.
#include <string.h>
#include "comms/hardware.h"
#include "comms/launch.h"
#include "comms/shm.h"
#include "comms/watchdog.h"
#include "base/util.h"

// The nodes: a node is named by its lowest rank, then numbered in that order; and each rank's
// /dev/shm room (comm_shm_room), all-gathered.
static void gather_nodes(Hardware *p, int rank, int size) {
    MPI_Comm node = MPI_COMM_NULL;
    int one = launch_one_node(size);
    p->local_rank = rank, p->local_size = size;
    if (!one) {
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
        MPI_CHECK(MPI_Comm_rank(node, &p->local_rank));
        MPI_CHECK(MPI_Comm_size(node, &p->local_size));
    }
    int lowest = one ? 0 : rank, crowded = wd_crowded(p->local_size);
    MPI_Request q[2];
    // how waiting ranks spend their core: decided alike on every rank (some node has more ranks than cores)
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &crowded, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q[0]));
    wd_wait_all(&q[0], MPI_COMM_WORLD, "an all-reduce");
    wd_share_cores(crowded);
    if (!one) {
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node, &q[0]));
        wd_wait_all(&q[0], node, "an all-reduce");
        MPI_CHECK(MPI_Comm_free(&node));
    }
    p->node_of = xmalloc(sizeof(int) * (size_t)size);
    p->shm_free = xmalloc(sizeof(double) * (size_t)size);
    double room = comm_shm_room();
    MPI_CHECK(MPI_Iallgather(&lowest, 1, MPI_INT, p->node_of, 1, MPI_INT, MPI_COMM_WORLD, &q[0]));
    wd_wait_all(&q[0], MPI_COMM_WORLD, "placing the ranks");
    MPI_CHECK(MPI_Iallgather(&room, 1, MPI_DOUBLE, p->shm_free, 1, MPI_DOUBLE, MPI_COMM_WORLD, &q[1]));
    wd_wait_all(&q[1], MPI_COMM_WORLD, "placing the ranks");
    for (int r = 0; r < size; r++) p->node_of[r] = p->node_of[r] == r ? p->nodes++ : p->node_of[p->node_of[r]];
    // each node's host name, as its ranks' messages name it (Hydra's -hosts name, else gethostname)
    char (*hosts)[64] = xcalloc((size_t)size, sizeof *hosts), mine[64];
    launch_host_name(mine, sizeof mine);
    int len = (int)sizeof mine;
    MPI_CHECK(MPI_Iallgather(mine, len, MPI_CHAR, hosts, len, MPI_CHAR, MPI_COMM_WORLD, &q[0]));
    wd_wait_all(&q[0], MPI_COMM_WORLD, "placing the ranks");
    p->host = xcalloc((size_t)p->nodes, sizeof *p->host);
    for (int r = size - 1; r >= 0; r--) memcpy(p->host[p->node_of[r]], hosts[r], sizeof *hosts);
    for (int n = 0; n < p->nodes; n++) p->host[n][sizeof *hosts - 1] = 0;
    free(hosts);
}

void comm_choose_hardware(int probe_gpus, Hardware *p) {
    memset(p, 0, sizeof *p);
    p->no_gpu_rank = -1;
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    gather_nodes(p, rank, size);
    if (!probe_gpus) return;

    p->gpus_probed = 1;
    char err[sizeof p->no_gpu_why] = "";
    p->cuda = backend_cuda_open(p->local_rank, err, sizeof err);
    int first = p->cuda ? size : rank;  // the lowest rank without a GPU speaks for all
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &q));
    wd_wait_all(&q, MPI_COMM_WORLD, "an all-reduce");
    if (first < size) {
        MPI_CHECK(MPI_Ibcast(err, (int)sizeof err, MPI_CHAR, first, MPI_COMM_WORLD, &q));
        wd_wait_all(&q, MPI_COMM_WORLD, "placing the ranks");
        err[sizeof err - 1] = 0;
        p->no_gpu_rank = first;
        snprintf(p->no_gpu_why, sizeof p->no_gpu_why, "%s", err);
        return;
    }
    // NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): which ranks share one, by the
    // hardware's own name for it (device counts mislead: under a per-rank CUDA_VISIBLE_DEVICES each
    // rank sees one GPU, its own).
    uint64_t key = p->cuda->device_key ? p->cuda->device_key() : (uint64_t)(p->local_rank % p->cuda->device_count),
             *keys = xmalloc(sizeof(uint64_t) * (size_t)size);
    MPI_CHECK(MPI_Iallgather(&key, 1, MPI_UINT64_T, keys, 1, MPI_UINT64_T, MPI_COMM_WORLD, &q));
    wd_wait_all(&q, MPI_COMM_WORLD, "placing the ranks");
    comm_gpu_sharing(size, rank, p->node_of, keys, p);
    free(keys);
}

void comm_gpu_sharing(int size, int rank, const int *node_of, const uint64_t *key, Hardware *p) {
    p->crowded = p->crowded_ranks = p->crowded_gpus = 0;
    p->gpu_ranks = 0;
    int *ranks = xcalloc((size_t)size, sizeof(int)), *gpus = xcalloc((size_t)size, sizeof(int));  // per node
    for (int q = 0; q < size; q++) {
        int seen = 0;  // q's GPU already met on its node
        for (int o = 0; o < q && !seen; o++) seen = node_of[o] == node_of[q] && key[o] == key[q];
        ranks[node_of[q]]++;
        gpus[node_of[q]] += !seen;
        p->gpu_ranks += node_of[q] == node_of[rank] && key[q] == key[rank];
    }
    for (int n = 0; n < size; n++) {
        if (gpus[n] >= ranks[n]) continue;
        p->crowded = 1;
        if (ranks[n] > p->crowded_ranks) p->crowded_ranks = ranks[n];
        if (!p->crowded_gpus || gpus[n] < p->crowded_gpus) p->crowded_gpus = gpus[n];
    }
    free(ranks);
    free(gpus);
}

void comm_hardware_free(Hardware *p) {
    free(p->node_of);
    free(p->shm_free);
    free(p->host);
    memset(p, 0, sizeof *p);
}
