// comms/messages.h: point-to-point messages between ranks (messages.c): non-blocking sends from a pool
// of staging buffers, blocking receives, the polling that moves sends in flight, MPI's largest tag.
#pragma once
#include <stddef.h>
#include "comms/comm.h"
#include "comms/devcomm.h"

long long comm_tag_ub(void);  // MPI_TAG_UB: the largest tag this MPI accepts
// Sends n floats of device memory to world rank dst; copies into a staging buffer and returns
// at once (MPI_Isend). comm_wait_sends completes them all.
void comm_send(Comm *c, const float *buf, size_t n, int dst, int tag);
// The same for a buffer the caller leaves alone until dst has answered it (a stashed activation: its
// slot is reused only after its gradient came back from dst): the NCCL transport then sends from buf
// itself, with no device copy into a staging buffer (devcomm.h's kept); MPI copies it to the host anyway.
void comm_send_kept(Comm *c, const float *buf, size_t n, int dst, int tag);
void comm_wait_sends(Comm *c);
// A pipeline step's calls on the NCCL transport (devcomm.h's devcomm_plan: crossing send/receive pairs
// posted as one group), built by axes/pipeline.c: comm_plan_calls hands them over, comm_step_calls
// starts a step under them (until comm_wait_sends). Nothing on MPI, whose sends never wait on the peer.
void comm_plan_calls(Comm *c, const DevCall *calls, int n);
void comm_step_calls(Comm *c);
// Tests the sends in flight without blocking. MPI moves a large message only while its sender is
// inside an MPI call, so the executor calls this between layers of its compute.
void comm_poll_sends(void);
// The send pool's and the receive staging's host buffers freed (comm_finalize, before the backend closes).
void comm_messages_free(void);
// Receives n floats into device memory from world rank src (blocks until they arrive).
void comm_recv(Comm *c, float *buf, size_t n, int src, int tag);
