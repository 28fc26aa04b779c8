// tags.h: how a message is named on the wire. A tag encodes (receiving chunk, micro-batch, kind), so
// no message can be taken for another; the plan checks the largest one against MPI's limit.
#pragma once

enum { TAG_ACT = 0, TAG_GRAD = 1, TAG_DATA = 2, TAG_CTRL = 3 };
// chunk is the RECEIVING chunk on its rank (interleaved pipelines send several chunks' messages
// between the same two ranks). chunk 0 gives comm_tag.
#define COMM_MAX_MB (1 << 20)   // the most micro-batches (the --micro-batches range)
#define COMM_MAX_CHUNKS 64      // the most chunks per rank (the --virtual-stages range)
static inline int comm_tag_chunk(int kind, int mb, int chunk) { return (chunk * COMM_MAX_MB + mb) * 4 + kind; }
static inline int comm_tag_kind(int tag) { return tag & 3; }  // TAG_ACT, TAG_GRAD, TAG_DATA or TAG_CTRL
static inline int comm_tag(int kind, int mb) { return comm_tag_chunk(kind, mb, 0); }
static inline long long comm_tag_chunk_max(int M, int chunks) {
    return ((long long)(chunks - 1) * COMM_MAX_MB + M - 1) * 4 + 3;
}
