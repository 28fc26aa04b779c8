// tests/mpi_devwait.c: the GPU's host waits under the watchdog, without a GPU. Rank 0 waits through
// comm_device_wait (the wait comm_init hands the CUDA backend) on a queue that never drains; the other
// ranks wait in a barrier. The job must end at rank 0's --timeout (3 s) with the watchdog's line
// naming this rank's GPU and the action, after every rank ran its wd_at_end hook (the NCCL transport
// aborts its communicators there). Run by tests/t_hang.sh and tests/t_gpu.sh under mpiexec -n 2
// (argv[1]: a marker path for their check that no process is left; argv[2]: the mode).
// Modes: "" (the above); "hang-at-end": the hook never returns, as an ncclCommAbort that waits on
// the device for a kernel still spinning: the alarm set before it must still end every rank; "local":
// one process without MPI (selftest's watchdog, wd_init_local), the same wait: its line, exit 1;
// "local-call": one process stuck inside a marked library call (ncclCommInitRank): the backstop's
// line, exit 1.
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "comms.h"
#include "comms/watchdog.h"
#include "base/util.h"

static int never(void *ctx) { (void)ctx; return 0; }
static void at_end(void) { fprintf(stderr, "[rank %d] mpi_devwait: wd_at_end ran\n", g_rank); }
static void at_end_hangs(void) {
    fprintf(stderr, "[rank %d] mpi_devwait: wd_at_end blocks\n", g_rank);
    for (;;) pause();
}

static int local(const char *mode) {
    wd_set_timeout(2.0);
    wd_init_local();
    wd_at_end(at_end);
    wd_phase("the test's device wait", 0);
    if (!strcmp(mode, "local-call")) {
        wd_mark_call("ncclCommInitRank");
        for (;;) pause();
    }
    comm_device_wait(never, NULL, WD_LOCAL, "GPU (its queued work, then the loss)");
    printf("mpi_devwait: the wait returned\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 2 ? argv[2] : "";
    if (!strncmp(mode, "local", 5)) return local(mode);
    comm_init(&argc, &argv);
    wd_set_timeout(g_rank == 0 ? 3.0 : 30.0);  // rank 0's wait runs out first; the others are told
    wd_at_end(strcmp(mode, "hang-at-end") ? at_end : at_end_hangs);
    wd_phase("the test's device wait", 3);
    if (g_rank == 0) comm_device_wait(never, NULL, WD_LOCAL, "GPU (its queued work, then the loss)");
    else comm_barrier(MPI_COMM_WORLD);
    printf("mpi_devwait: the wait returned\n");
    comm_finalize();
    return 0;
}
