// hardware.c: the hardware of a run, decided alike on every rank before any other message: the nodes
// the ranks sit on, the device (CPU, or the GPU of a rank's local rank) and the transport (MPI, or
// NCCL between GPUs); a request the machines cannot meet ends every rank with one user_error.
#include <string.h>
#include "comms.h"
#include "base/util.h"
#include "watchdog.h"

void comm_choose_hardware(const char *cmd, int device, int transport, int tf32, Hardware *p) {
    memset(p, 0, sizeof *p);
    int rank = comm_world_rank(), size = comm_world_size();
    if (device == DEVICE_CPU && transport == TRANSPORT_NCCL)
        user_error("%s: --transport nccl moves GPU buffers, and --device is cpu: drop --transport nccl or use --device cuda", cmd);
    if (device == DEVICE_CPU && tf32)
        user_error("%s: --tf32 applies to cuBLAS on a GPU, and --device is cpu: drop --tf32 or use --device cuda", cmd);
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &p->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &p->local_size));
    int lowest = rank;  // a node is named by its lowest rank, then numbered
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node, &q));
    wd_wait_all(&q, node, "an all-reduce");
    MPI_CHECK(MPI_Comm_free(&node));
    p->node_of = xmalloc(sizeof(int) * (size_t)size);
    MPI_CHECK(MPI_Iallgather(&lowest, 1, MPI_INT, p->node_of, 1, MPI_INT, MPI_COMM_WORLD, &q));
    wd_wait_all(&q, MPI_COMM_WORLD, "placing the ranks");
    for (int r = 0; r < size; r++) p->node_of[r] = p->node_of[r] == r ? p->nodes++ : p->node_of[p->node_of[r]];
    p->be = &backend_cpu;
    p->transport = TRANSPORT_MPI;
    if (device == DEVICE_CPU) return;

    char err[256] = "";
    const Backend *cuda = backend_cuda_open(p->local_rank, err, sizeof err);
    int first = cuda ? size : rank;  // the lowest rank without a GPU speaks for all
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first < size) {
        MPI_CHECK(MPI_Bcast(err, (int)sizeof err, MPI_CHAR, first, MPI_COMM_WORLD));
        err[sizeof err - 1] = 0;
        char where[32] = "";
        if (first > 0) snprintf(where, sizeof where, " (rank %d)", first);
        if (device == DEVICE_CUDA) user_error("no CUDA device%s: %s", where, err);
        if (transport == TRANSPORT_NCCL)
            user_error("%s: --transport nccl needs a GPU on every rank, but there is no CUDA device%s: %s", cmd, where, err);
        if (tf32) user_error("%s: --tf32 needs a GPU, but there is no CUDA device%s: %s", cmd, where, err);
        return;  // auto: the CPU
    }
    // NCCL refuses two ranks on one GPU: it needs every node to have a GPU per rank.
    int crowded = p->local_size > cuda->device_count;
    int v[3] = {crowded, crowded ? p->local_size : 0, crowded ? -cuda->device_count : -(1 << 30)};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (transport == TRANSPORT_NCCL && v[0])
        user_error("%s: --transport nccl needs one GPU per rank, but a node runs %d ranks on %d GPU%s: use --transport mpi "
                   "(stages through pinned host memory, so ranks may share a GPU) or at most %d ranks per node",
                   cmd, v[1], -v[2], -v[2] == 1 ? "" : "s", -v[2]);
    p->be = cuda;
    p->transport = transport == TRANSPORT_AUTO ? (!v[0] && size > 1 ? TRANSPORT_NCCL : TRANSPORT_MPI) : transport;
    cuda->set_tf32(tf32);
}
