// comms/ring.h: the ring (ring.c), a row of the collectives' table (collectives.c's comm_algos):
// D ranks in a circle pass chunks to their right neighbour, from point-to-point messages of dp.
#pragma once
#include "comms/algo.h"

int comm_ring_start(CommReq *q, Comm *c);
int comm_ring_advance(CommReq *q);
void comm_ring_release(CommReq *q);
