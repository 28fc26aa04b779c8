// comms/hardware.h: what every rank's hardware allows (hardware.c): the device and transport choices,
// and the facts the ranks gather alike (GPUs, nodes, /dev/shm room), from which the plan decides.
#pragma once
#include <stdint.h>
#include "base/ops.h"

enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };
#define DEVICE_CHOICES "auto|cpu|cuda"
enum { TRANSPORT_AUTO, TRANSPORT_MPI, TRANSPORT_NCCL };
#define TRANSPORT_CHOICES "auto|mpi|nccl"

// What the ranks found about their devices and nodes, gathered by all-reduces and all-gathers so
// that every rank holds the same (the plan, train/plan.h's plan_device, decides the device and the
// transport from it). Collective over the world; decides nothing and refuses nothing. A rank looks
// for GPU (local rank % GPUs of its node) only when probe_gpus; NCCL needs one GPU per rank.
typedef struct {
    const Backend *cuda;         // this rank's CUDA backend, opened (NULL: not looked for, or none here)
    int gpus_probed;             // GPUs were looked for
    int no_gpu_rank;             // the lowest rank without a GPU (-1: every rank has one) ...
    char no_gpu_why[256];        // ... and why (its backend_cuda_open's reason)
    int crowded;                 // some GPU serves two ranks or more (every rank has one):
    int crowded_ranks, crowded_gpus;  // the most ranks on a node with such a GPU, the fewest GPUs there
    int gpu_ranks;               // the ranks on this rank's GPU, this one included (1: a GPU of its own)
    int local_rank, local_size;  // among the ranks of this node (MPI_COMM_TYPE_SHARED)
    int nodes;                   // nodes of the world, numbered in the order of their lowest rank
    int *node_of;                // [world size] the node of every rank (the same on every rank)
    char (*host)[64];            // [nodes] each node's host name (launch_host_name of its lowest rank)
    double *shm_free;            // [world size] the free bytes of /dev/shm each rank sees (-1: unknown;
                                 // MICROPP_SHM_FREE=BYTES stands in for it, for tests)
} Hardware;
void comm_choose_hardware(int probe_gpus, Hardware *p);
// The GPUs' sharing from every rank's node (node_of) and GPU (key: Backend.device_key, by the hardware's
// UUID, so ranks that each see one GPU through their own CUDA_VISIBLE_DEVICES are told apart): sets
// crowded, crowded_ranks, crowded_gpus and gpu_ranks of p for `rank`. No MPI (unit_plan calls it).
void comm_gpu_sharing(int size, int rank, const int *node_of, const uint64_t *key, Hardware *p);
void comm_hardware_free(Hardware *p);
