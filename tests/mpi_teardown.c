// tests/mpi_teardown.c: the wire frees the host staging it keeps for a device (the send pool, the
// receive staging, the collectives' buffers: pinned memory on a GPU) when the run ends, before the CUDA
// backend closes (comm_finalize). Without a GPU: a backend like the CPU's but not on the host, as the
// CUDA one, whose alloc_host and free_host count the buffers alive. One process (a world of one rank):
// a message to itself and an all-reduce, then comm_finalize; prints the count before and after.
// Run by tests/t_gpu.sh.
#include <stdio.h>
#include "comms.h"
#include "base/util.h"

static int alive;
static void *counted_alloc_host(size_t bytes) { alive++; return backend_cpu.alloc_host(bytes); }
static void counted_free_host(void *p) { alive--; backend_cpu.free_host(p); }

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    Backend be = backend_cpu;
    be.on_host = 0;  // the wire stages every buffer through alloc_host, as for a GPU
    be.alloc_host = counted_alloc_host;
    be.free_host = counted_free_host;
    Comm c;
    comm_pipeline(&c, &be);
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i;
    comm_send(&c, x, 64, 0, comm_tag(TAG_ACT, 0));
    comm_recv(&c, y, 64, 0, comm_tag(TAG_ACT, 0));
    comm_wait_sends(&c);
    comm_allreduce(&c, x, 64, 1.0f, ALLREDUCE_MPI);
    int before = alive;
    comm_free(&c);
    comm_finalize();
    printf("mpi_teardown: host buffers alive before the end %d, after %d; message %s\n", before, alive,
           y[63] == 63.0f ? "ok" : "wrong");
    return 0;
}
