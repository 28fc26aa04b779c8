// comms/hier.h: the hierarchical collectives (hier.c), a row of the collectives' table (collectives.c's
// comm_algos: "hier"): a ring inside each node, a ring across the nodes on the 1/L shards, a ring inside
// the node again; and whether a group's layout lets it run so.
#pragma once
#include <stddef.h>
#include "comms/algo.h"

// Why hier cannot run on c->dp as it is meant to ("" when it can): its D ranks must be N >= 2 nodes
// of L ranks each, node after node in dp's order (dp rank = node * L + place on the node). what: the
// command ("allreduce" names --algo, else --allreduce). Collective over c->dp. (A row started on any
// other group still sums right: it runs the plain ring there.)
void comm_hier_why(Comm *c, const char *what, char *why, size_t n);
// Makes the groups hier runs on over c->dp (collective over dp): a set-up calls it, so that no
// collective's start has to (the first start would, blocking until every rank of dp is there).
void comm_hier_prepare(Comm *c);
// The same rule from the facts: node_of[i], the node of dp rank i, for i < D. Returns the nodes (N),
// and sets *L (ranks per node), or 0 when they are not N runs of L ranks.
int comm_hier_layout(const int *node_of, int D, int *L);

// The row's operations (algo.h).
int comm_hier_start(CommReq *q, Comm *c);
int comm_hier_advance(CommReq *q);
void comm_hier_release(CommReq *q);
