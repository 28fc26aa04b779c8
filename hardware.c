// hardware.c: what every rank's hardware allows, gathered alike on every rank before any other
// message: the nodes the ranks sit on, /dev/shm's room on each, and whether every rank has a GPU
// of its own (and NCCL could run). It decides nothing: the plan (train/plan.c's plan_device) does.
#include <string.h>
#include "comms.h"
#include "base/util.h"
#include "watchdog.h"

// The nodes: a node is named by its lowest rank, then numbered in that order; and each rank's
// /dev/shm room (comm_shm_room), all-gathered.
static void gather_nodes(Hardware *p, int rank, int size) {
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &p->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &p->local_size));
    int lowest = rank;
    MPI_Request q[2];
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node, &q[0]));
    wd_wait_all(&q[0], node, "an all-reduce");
    MPI_CHECK(MPI_Comm_free(&node));
    p->node_of = xmalloc(sizeof(int) * (size_t)size);
    p->shm_free = xmalloc(sizeof(double) * (size_t)size);
    double room = comm_shm_room();
    MPI_CHECK(MPI_Iallgather(&lowest, 1, MPI_INT, p->node_of, 1, MPI_INT, MPI_COMM_WORLD, &q[0]));
    wd_wait_all(&q[0], MPI_COMM_WORLD, "placing the ranks");
    MPI_CHECK(MPI_Iallgather(&room, 1, MPI_DOUBLE, p->shm_free, 1, MPI_DOUBLE, MPI_COMM_WORLD, &q[1]));
    wd_wait_all(&q[1], MPI_COMM_WORLD, "placing the ranks");
    for (int r = 0; r < size; r++) p->node_of[r] = p->node_of[r] == r ? p->nodes++ : p->node_of[p->node_of[r]];
}

void comm_choose_hardware(int probe_gpus, Hardware *p) {
    memset(p, 0, sizeof *p);
    p->no_gpu_rank = -1;
    int rank = comm_world_rank(), size = comm_world_size();
    gather_nodes(p, rank, size);
    if (!probe_gpus) return;

    p->gpus_probed = 1;
    char err[sizeof p->no_gpu_why] = "";
    p->cuda = backend_cuda_open(p->local_rank, err, sizeof err);
    int first = p->cuda ? size : rank;  // the lowest rank without a GPU speaks for all
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first < size) {
        MPI_CHECK(MPI_Bcast(err, (int)sizeof err, MPI_CHAR, first, MPI_COMM_WORLD));
        err[sizeof err - 1] = 0;
        p->no_gpu_rank = first;
        snprintf(p->no_gpu_why, sizeof p->no_gpu_why, "%s", err);
        return;
    }
    // NCCL refuses two ranks on one GPU: it needs every node to have a GPU per rank.
    int crowded = p->local_size > p->cuda->device_count;
    int v[3] = {crowded, crowded ? p->local_size : 0, crowded ? -p->cuda->device_count : -(1 << 30)};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    p->crowded = v[0];
    p->crowded_ranks = v[1];
    p->crowded_gpus = -v[2];
}

void comm_hardware_free(Hardware *p) { free(p->node_of); free(p->shm_free); memset(p, 0, sizeof *p); }
