// cuda_stub.c: the CUDA entry points of a CPU-only build (make CUDA=0, or no nvcc/cuBLAS/NCCL found).
// backend_cuda_open says why there is no GPU; the NCCL transport is refused by the plan
// (plan_device) before it could be reached, so reaching it here is a bug.
#include <stdio.h>
#include "comms/devcomm.h"
#include "base/ops.h"
#include "base/util.h"

const Backend *backend_cuda_open(int local_rank, char *err, size_t errlen) {
    (void)local_rank;
    snprintf(err, errlen,
             "this micropp was built without CUDA (rebuild with nvcc, cuBLAS and NCCL installed: make CUDA=1)");
    return NULL;
}

void devcomm_unique_id(void *id) { (void)id; fatal("NCCL transport in a build without CUDA"); }
DevComm *devcomm_open(const void *id, int nranks, int rank, const int *peers, int npeers) {
    (void)id; (void)nranks; (void)rank; (void)peers; (void)npeers;
    fatal("NCCL transport in a build without CUDA");
}
void backend_cuda_set_wait(DeviceWait wait, DeviceCall call) { (void)wait; (void)call; }  // no device: no wait
void backend_cuda_close(void) {}

void devcomm_close(DevComm *d) { (void)d; }
void devcomm_abort_all(DevComm *const *d, int n) { (void)d; (void)n; }
void devcomm_send(DevComm *d, const float *buf, size_t n, int peer, int grad, int kept) {
    (void)d; (void)buf; (void)n; (void)peer; (void)grad; (void)kept;
    fatal("NCCL transport in a build without CUDA");
}
void devcomm_recv(DevComm *d, float *buf, size_t n, int peer, int grad) {
    (void)d; (void)buf; (void)n; (void)peer; (void)grad;
    fatal("NCCL transport in a build without CUDA");
}
void devcomm_flush(DevComm *d) { (void)d; }
double devcomm_smoke(size_t n) { (void)n; fatal("NCCL transport in a build without CUDA"); }
DevComm *devcomm_open_group(const void *id, int nranks, int rank) {
    (void)id; (void)nranks; (void)rank;
    fatal("NCCL transport in a build without CUDA");
}
void devcomm_allreduce_sum(DevComm *d, float *buf, size_t n) {
    (void)d; (void)buf; (void)n;
    fatal("NCCL transport in a build without CUDA");
}
double devcomm_abort_smoke(void) { fatal("NCCL transport in a build without CUDA"); }
double devcomm_allreduce_seconds(DevComm *d) { (void)d; fatal("NCCL transport in a build without CUDA"); }
double devcomm_allreduce_smoke(size_t n) { (void)n; fatal("NCCL transport in a build without CUDA"); }
void devcomm_alltoallv(DevComm *d, const void *send, const int *sc, const int *sd, void *recv, const int *rc,
                       const int *rd, int ints) {
    (void)d; (void)send; (void)sc; (void)sd; (void)recv; (void)rc; (void)rd; (void)ints;
    fatal("NCCL transport in a build without CUDA");
}
void devcomm_alltoall_wait(DevComm *d, const char *what) {
    (void)d; (void)what;
    fatal("NCCL transport in a build without CUDA");
}
double devcomm_alltoall_smoke(size_t n) { (void)n; fatal("NCCL transport in a build without CUDA"); }
void devcomm_plan(DevComm *d, const DevCall *calls, int n) {
    (void)d; (void)calls; (void)n;
    fatal("NCCL transport in a build without CUDA");
}
void devcomm_step(DevComm *d) { (void)d; fatal("NCCL transport in a build without CUDA"); }
