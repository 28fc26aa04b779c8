// nccl.cu: the NCCL transport of comms/devcomm.h between GPU ranks: point-to-point by p2p.h's rule (four
// channels, each a communicator and a stream, warmed up with every neighbour), a group's all-reduce (the
// tensor-parallel group's), and selftest's one-GPU checks of both. It queues after the CUDA backend's
// compute stream and waits through its bounded host wait (kernels.h). No MPI here: comms.c bootstraps
// NCCL and messages.c dispatches to it. Every CUDA and NCCL call is checked.
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <sched.h>
#include <string.h>
#include "kernels.h"
extern "C" {
#include "comms/devcomm.h"
#include "base/util.h"
#include "p2p.h"
}

// "[rank r] nccl.cu:LINE: ncclXxx(...) failed: <the library's message>" (CUDA_CHECK: kernels.h)
static void nccl_check_at(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess)
        fatal_at(file, line, "%s failed: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(NULL));
}
#define NCCL_CHECK(call) nccl_check_at((call), #call, __FILE__, __LINE__)

// ---- point-to-point (devcomm.h), by p2p.h's rule ----

static_assert(sizeof(ncclUniqueId) == DEVCOMM_ID_BYTES, "DEVCOMM_ID_BYTES must match sizeof(ncclUniqueId)");

// A staging buffer: free once `done` (recorded after its ncclSend) has completed; a hand-off to
// this rank itself (the V's turn) holds it until the matching receive copies it out.
// A paired send held back for its receive (devcomm_step) holds its buffer until the group is posted.
typedef struct { float *buf; size_t cap, n; cudaEvent_t done; int busy, self, held; } Staged;

// devcomm_plan's calls and devcomm_step's walk through them (p2p.c's p2p_next): on while a step runs;
// the send held for its receive is buf (len floats), staging buffer st's or the caller's (st -1).
typedef struct {
    DevCall *c;
    int n, on, st;
    P2pCursor at;
    const float *buf;
    size_t len;
} StepPlan;

struct DevComm {
    ncclComm_t world;                   // made by ncclCommInitRank; the channels are split from it
    ncclComm_t comm[DEVCOMM_CHANNELS];  // devcomm_channel: by direction and kind
    cudaStream_t stream[DEVCOMM_CHANNELS];
    cudaEvent_t sent[DEVCOMM_CHANNELS];  // after the channel's last send (its stream runs them in order)
    int pending[DEVCOMM_CHANNELS];       // a send on the channel since the last flush
    cudaEvent_t ready, got;  // ready: the compute queued so far; got: a receive has landed
    int rank;
    Staged *st;
    int n_st;
    int self_q[2][64], self_head[2], self_tail[2];  // per kind: staging buffers sent to this rank, in order
    // A group's collectives (devcomm_open_group): no channels; `world` is the group's communicator,
    // `coll` its stream, `got` recorded after its last all-reduce (coll_pending: one since the last wait).
    int group, coll_pending;
    cudaStream_t coll;
    cudaEvent_t *timed;  // start/stop pairs around each all-reduce since devcomm_allreduce_seconds
    int n_timed, cap_timed;
    StepPlan sp;
};

extern "C" void devcomm_unique_id(void *id) {
    ncclUniqueId u;
    NCCL_CHECK(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
}

// One poll of an NCCL wait: the event, and every communicator's asynchronous error state (a failed
// peer ends the run instead of hanging); the core is yielded between polls (NCCL's proxy threads
// need one).
typedef struct { DevComm *d; cudaEvent_t ev; } NcclWait;
static int nccl_ready(void *ctx) {
    NcclWait *w = (NcclWait *)ctx;
    cudaError_t e = cudaEventQuery(w->ev);
    if (e == cudaSuccess) return 1;
    if (e != cudaErrorNotReady) CUDA_CHECK(e);
    for (int ch = 0; ch <= DEVCOMM_CHANNELS; ch++) {
        ncclComm_t c = ch < DEVCOMM_CHANNELS ? w->d->comm[ch] : w->d->world;
        if (!c) continue;  // (a group's DevComm has no channels)
        ncclResult_t async_err;
        NCCL_CHECK(ncclCommGetAsyncError(c, &async_err));
        NCCL_CHECK(async_err);
    }
    sched_yield();
    return 0;
}
// Waits for `ev` on the host under the wire's bound (--timeout names `what` and `peer`).
static void wait_event(DevComm *d, cudaEvent_t ev, int peer, const char *what) {
    NcclWait w = {d, ev};
    host_wait(nccl_ready, &w, peer, what);
}

// p2p.h's warm-up: on each channel in turn, one group of a 1-float send to and receive from every
// neighbour, waited for, so both ranks of every pair open both directions of every channel at once.
static void warm_up(DevComm *d, const int *peers, int npeers) {
    float *w = NULL;
    CUDA_CHECK(cudaMallocAsync((void **)&w, sizeof(float) * (size_t)(1 + npeers), g_stream));
    CUDA_CHECK(cudaMemsetAsync(w, 0, sizeof(float) * (size_t)(1 + npeers), g_stream));
    CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
        CUDA_CHECK(cudaStreamWaitEvent(d->stream[ch], d->ready, 0));  // (the memset first)
        NCCL_CHECK(ncclGroupStart());
        for (int i = 0; i < npeers; i++) {
            NCCL_CHECK(ncclSend(w, 1, ncclFloat, peers[i], d->comm[ch], d->stream[ch]));
            NCCL_CHECK(ncclRecv(w + 1 + i, 1, ncclFloat, peers[i], d->comm[ch], d->stream[ch]));
        }
        NCCL_CHECK(ncclGroupEnd());
        CUDA_CHECK(cudaEventRecord(d->got, d->stream[ch]));
        wait_event(d, d->got, -1, "the NCCL warm-up with the pipeline neighbours");
    }
    CUDA_CHECK(cudaFreeAsync(w, g_stream));  // after every channel's exchange, which the host saw end
}

extern "C" DevComm *devcomm_open(const void *id, int nranks, int rank, const int *peers, int npeers) {
    CHECK(cuda_opened(), "NCCL asked for before the CUDA backend was opened");
    DevComm *d = (DevComm *)xcalloc(1, sizeof(DevComm));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    d->rank = rank;
    host_call("ncclCommInitRank");  // (collective and blocking: the backstop bounds it)
    NCCL_CHECK(ncclCommInitRank(&d->world, nranks, u, rank));
    host_call(NULL);
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {  // collective: every rank splits in the same order
        host_call("ncclCommSplit");
        NCCL_CHECK(ncclCommSplit(d->world, 0, rank, &d->comm[ch], NULL));
        host_call(NULL);
        CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream[ch], cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&d->sent[ch], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&d->got, cudaEventDisableTiming));
    for (int i = 0; i < npeers; i++)
        CHECK(peers[i] >= 0 && peers[i] < nranks && peers[i] != rank, "NCCL neighbour %d of rank %d", peers[i], rank);
    warm_up(d, peers, npeers);
    return d;
}

// What a DevComm holds beside its communicators (once they are destroyed or aborted): the streams and
// events, and the staging buffers, which are the stream-ordered allocator's (take_staging): freed on
// the compute stream, whose drain the host then waits for under the watchdog (no cudaFree to wait on
// the device).
static void free_own(DevComm *d) {
    if (d->coll) CUDA_CHECK(cudaStreamDestroy(d->coll));
    for (int i = 0; i < d->cap_timed; i++) CUDA_CHECK(cudaEventDestroy(d->timed[i]));
    free(d->timed);
    for (int ch = 0; ch < DEVCOMM_CHANNELS && !d->group; ch++) {
        CUDA_CHECK(cudaStreamDestroy(d->stream[ch]));
        CUDA_CHECK(cudaEventDestroy(d->sent[ch]));
    }
    for (int i = 0; i < d->n_st; i++) {
        CUDA_CHECK(cudaFreeAsync(d->st[i].buf, g_stream));
        CUDA_CHECK(cudaEventDestroy(d->st[i].done));
    }
    stream_wait("GPU (its queued work, then the NCCL staging buffers freed)");
    free(d->st);
    free(d->sp.c);
    CUDA_CHECK(cudaEventDestroy(d->ready));
    CUDA_CHECK(cudaEventDestroy(d->got));
    free(d);
}

extern "C" void devcomm_close(DevComm *d) {
    if (!d) return;
    d->sp.on = 0;  // (a run ending mid-step: its plan's walk is moot)
    devcomm_flush(d);
    if (d->coll_pending) wait_event(d, d->got, -1, "the last NCCL all-reduce of the group");
    host_call("ncclCommDestroy");  // (children before their parent; the backstop bounds them)
    for (int ch = 0; ch < DEVCOMM_CHANNELS && !d->group; ch++) NCCL_CHECK(ncclCommDestroy(d->comm[ch]));
    NCCL_CHECK(ncclCommDestroy(d->world));
    host_call(NULL);
    free_own(d);
}

// The watchdog fired (or another rank's did): no kernel of ours may keep spinning on a peer that is
// gone. Every communicator's abort inside one group: ncclCommAbort raises its flags at once and, in a
// group, leaves the reclaim (which synchronises the communicator's streams) to ncclGroupEnd, so every
// kernel sees its flag before any reclaim waits (NCCL 2.28's init.cc, ncclCommAbort). The watchdog's
// alarm, set before, bounds it should a reclaim still block (NCCL issues 829, 1777); errors are moot.
extern "C" void devcomm_abort_all(DevComm *const *d, int n) {
    ncclGroupStart();
    for (int i = 0; i < n; i++) {
        if (!d[i]) continue;
        for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++)
            if (d[i]->comm[ch]) ncclCommAbort(d[i]->comm[ch]);
        if (d[i]->world) ncclCommAbort(d[i]->world);
    }
    ncclGroupEnd();
}

// ---- a group's all-reduce (devcomm.h: the tensor-parallel group's) ----

extern "C" DevComm *devcomm_open_group(const void *id, int nranks, int rank) {
    CHECK(cuda_opened(), "NCCL asked for before the CUDA backend was opened");
    DevComm *d = (DevComm *)xcalloc(1, sizeof(DevComm));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    d->rank = rank;
    d->group = 1;
    host_call("ncclCommInitRank");
    NCCL_CHECK(ncclCommInitRank(&d->world, nranks, u, rank));
    host_call(NULL);
    CUDA_CHECK(cudaStreamCreateWithFlags(&d->coll, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&d->got, cudaEventDisableTiming));
    // A 1-float all-reduce, waited for: NCCL connects the group's ranks at its first collective (inside
    // the call, marked for the backstop), so the first step's does not, and a peer that never arrives
    // ends the run here at --timeout.
    float *w = NULL;
    CUDA_CHECK(cudaMallocAsync((void **)&w, sizeof(float), g_stream));
    CUDA_CHECK(cudaMemsetAsync(w, 0, sizeof(float), g_stream));
    CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
    CUDA_CHECK(cudaStreamWaitEvent(d->coll, d->ready, 0));
    host_call("ncclAllReduce (the group's first: its connections)");
    NCCL_CHECK(ncclAllReduce(w, w, 1, ncclFloat, ncclSum, d->world, d->coll));
    host_call(NULL);
    CUDA_CHECK(cudaEventRecord(d->got, d->coll));
    wait_event(d, d->got, -1, "the NCCL warm-up of the tensor-parallel group");
    CUDA_CHECK(cudaFreeAsync(w, g_stream));
    return d;
}

// In place, on the group's stream, after the compute queued so far; the compute queued after this
// call waits for it on the device (an event): the host never waits here. Every rank of the group
// calls it in the same order (axes/tensor.c's recorder, tested on the CPU by t_tp_order).
extern "C" void devcomm_allreduce_sum(DevComm *d, float *buf, size_t n) {
    CHECK(d->group, "an all-reduce on the pipeline's NCCL transport (its channels are point-to-point)");
    if (!n) return;
    CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
    CUDA_CHECK(cudaStreamWaitEvent(d->coll, d->ready, 0));
    if (d->n_timed + 2 > d->cap_timed) {  // (grown once: a step makes the same all-reduces every time)
        int cap = d->cap_timed ? 2 * d->cap_timed : 64;
        d->timed = (cudaEvent_t *)realloc(d->timed, sizeof(cudaEvent_t) * (size_t)cap);
        CHECK(d->timed, "out of memory for the all-reduces' timing events");
        for (int i = d->cap_timed; i < cap; i++) CUDA_CHECK(cudaEventCreate(&d->timed[i]));
        d->cap_timed = cap;
    }
    CUDA_CHECK(cudaEventRecord(d->timed[d->n_timed++], d->coll));
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, d->world, d->coll));
    CUDA_CHECK(cudaEventRecord(d->timed[d->n_timed++], d->coll));
    CUDA_CHECK(cudaEventRecord(d->got, d->coll));
    CUDA_CHECK(cudaStreamWaitEvent(g_stream, d->got, 0));
    d->coll_pending = 1;
}

extern "C" void devcomm_alltoallv(DevComm *d, const void *send, const int *sc, const int *sd, void *recv,
                                  const int *rc, const int *rd, int ints) {
    CHECK(d->group, "an all-to-all on the pipeline's NCCL transport (its channels are point-to-point)");
    int R;
    NCCL_CHECK(ncclCommCount(d->world, &R));
    ncclDataType_t type = ints ? ncclInt32 : ncclFloat;  // (4 bytes either way: the offsets count elements)
    const char *s = (const char *)send;
    char *r = (char *)recv;
    CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
    CUDA_CHECK(cudaStreamWaitEvent(d->coll, d->ready, 0));
    NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < R; p++) {
        if (sc[p]) NCCL_CHECK(ncclSend(s + 4 * (size_t)sd[p], (size_t)sc[p], type, p, d->world, d->coll));
        if (rc[p]) NCCL_CHECK(ncclRecv(r + 4 * (size_t)rd[p], (size_t)rc[p], type, p, d->world, d->coll));
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(d->got, d->coll));
    d->coll_pending = 1;
}

extern "C" void devcomm_alltoall_wait(DevComm *d, const char *what) {
    CHECK(d->coll_pending, "an NCCL all-to-all waited for without one in flight");
    wait_event(d, d->got, -1, what);
    CUDA_CHECK(cudaStreamWaitEvent(g_stream, d->got, 0));
    d->coll_pending = 0;
}

extern "C" double devcomm_allreduce_seconds(DevComm *d) {
    if (!d->n_timed) return 0;
    wait_event(d, d->timed[d->n_timed - 1], -1, "the group's NCCL all-reduces (their times)");
    double s = 0;
    for (int i = 0; i + 1 < d->n_timed; i += 2) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, d->timed[i], d->timed[i + 1]));
        s += 1e-3 * ms;
    }
    d->n_timed = 0;
    return s;
}

// A staging buffer of n floats whose send has completed (its event), else a new one: never a wait.
static Staged *take_staging(DevComm *d, size_t n) {
    Staged *fit = NULL, *small = NULL;
    for (int i = 0; i < d->n_st && !fit; i++) {
        Staged *s = &d->st[i];
        if (s->self || s->held) continue;
        if (s->busy) {
            cudaError_t e = cudaEventQuery(s->done);
            if (e == cudaErrorNotReady) continue;
            CUDA_CHECK(e);
            s->busy = 0;
        }
        if (s->cap >= n) fit = s;
        else if (!small) small = s;
    }
    if (fit) return fit;
    if (!small) {
        d->st = (Staged *)realloc(d->st, sizeof(Staged) * (size_t)(d->n_st + 1));
        CHECK(d->st, "out of memory growing the NCCL staging list");
        Staged empty = {};
        small = &d->st[d->n_st++];
        *small = empty;
        CUDA_CHECK(cudaEventCreateWithFlags(&small->done, cudaEventDisableTiming));
    }
    // A free one too small: regrow it. Stream-ordered (on the compute stream, where its copies run),
    // because cudaFree/cudaMalloc may wait for the whole device, the sends in flight included, and a
    // send completes only once its peer posts the receive, which may wait on this rank: a deadlock.
    if (small->buf) CUDA_CHECK(cudaFreeAsync(small->buf, g_stream));
    CUDA_CHECK(cudaMallocAsync((void **)&small->buf, n ? n * sizeof(float) : 1, g_stream));
    small->cap = n;
    return small;
}

// Posts a send of buf on its channel's stream after the compute queued so far.
static void post_send(DevComm *d, const float *buf, size_t n, int peer, int ch) {
    CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
    CUDA_CHECK(cudaStreamWaitEvent(d->stream[ch], d->ready, 0));
    NCCL_CHECK(ncclSend(buf, n, ncclFloat, peer, d->comm[ch], d->stream[ch]));
    CUDA_CHECK(cudaEventRecord(d->sent[ch], d->stream[ch]));
    d->pending[ch] = 1;
}

extern "C" void devcomm_plan(DevComm *d, const DevCall *calls, int n) {
    free(d->sp.c);
    d->sp.c = n ? (DevCall *)xmalloc(sizeof(DevCall) * (size_t)n) : NULL;
    if (n) memcpy(d->sp.c, calls, sizeof(DevCall) * (size_t)n);
    d->sp.n = n;
    d->sp.on = 0;
}

extern "C" void devcomm_step(DevComm *d) {
    if (!d->sp.n) return;
    d->sp.at = P2pCursor{d->sp.c, d->sp.n, 0, -1};
    d->sp.on = 1;
    d->sp.st = -1;
}

// The channel of this step's next call by the plan (-1: a paired send, to hold back), and in *held the
// plan's index of the send to post in one group with it (-1: none). A call the plan does not expect
// ends the run, naming it, rather than pairing differently from the peer (a hang).
static int plan_channel(DevComm *d, int send, int peer, int grad, int *held) {
    char why[240];
    int i = p2p_next(&d->sp.at, send, peer, grad, held, why, sizeof why);
    CHECK(i != -2, "the NCCL transport's plan of crossing send/receive pairs: %s", why);
    return i < 0 ? -1 : d->sp.c[i].channel;
}

// A send is posted at once, alone, on its channel's stream after the compute queued so far: from buf
// itself when the caller keeps it (devcomm.h), else from a staging copy whose event says when it
// may be reused. Under devcomm_step the plan gives the channel, and a paired send is held: its copy
// is queued now, its ncclSend goes in one group with its receive (devcomm_recv).
extern "C" void devcomm_send(DevComm *d, const float *buf, size_t n, int peer, int grad, int kept) {
    int ch = devcomm_channel(d->rank, peer, grad), unused;
    if (d->sp.on && peer != d->rank) ch = plan_channel(d, 1, peer, grad, &unused);
    if (kept && peer != d->rank) {
        if (ch >= 0) post_send(d, buf, n, peer, ch);
        else d->sp.buf = buf, d->sp.len = n, d->sp.st = -1;
        return;
    }
    Staged *s = take_staging(d, n);
    s->n = n;
    if (n) CUDA_CHECK(cudaMemcpyAsync(s->buf, buf, n * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
    if (peer == d->rank) {  // the V's turn: the matching receive on this rank copies it out
        int k = grad != 0;
        CHECK(d->self_tail[k] - d->self_head[k] < 64, "more than 64 hand-offs to this rank itself in flight");
        s->self = 1;
        d->self_q[k][d->self_tail[k]++ % 64] = (int)(s - d->st);
        return;
    }
    if (ch < 0) {
        s->held = 1;
        d->sp.buf = s->buf, d->sp.len = n, d->sp.st = (int)(s - d->st);
        return;
    }
    post_send(d, s->buf, n, peer, ch);
    CUDA_CHECK(cudaEventRecord(s->done, d->stream[ch]));
    s->busy = 1;
}

// After the group of a crossing pair (devcomm_recv) on channel ch: the held send is the channel's last,
// and its staging buffer (if any) is free once the group has completed.
static void end_held(DevComm *d, int ch) {
    CUDA_CHECK(cudaEventRecord(d->sent[ch], d->stream[ch]));
    d->pending[ch] = 1;
    if (d->sp.st < 0) return;
    Staged *s = &d->st[d->sp.st];
    CUDA_CHECK(cudaEventRecord(s->done, d->stream[ch]));
    s->held = 0;
    s->busy = 1;
    d->sp.st = -1;
}

// A receive is posted on its channel's stream after the compute queued so far (earlier readers of
// buf) and waited for: buf holds the data when it returns. Under devcomm_step the plan gives the
// channel, and a receive paired with a held send posts both as one ncclGroupStart/End.
extern "C" void devcomm_recv(DevComm *d, float *buf, size_t n, int peer, int grad) {
    if (peer == d->rank) {
        int k = grad != 0;
        CHECK(d->self_head[k] < d->self_tail[k], "a receive from this rank itself with nothing sent to it");
        Staged *s = &d->st[d->self_q[k][d->self_head[k]++ % 64]];
        CHECK(s->n == n, "a hand-off to this rank itself of %zu floats, received as %zu", s->n, n);
        if (n) CUDA_CHECK(cudaMemcpyAsync(buf, s->buf, n * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
        s->self = 0;  // later copies into it queue on g_stream, after this one
        return;
    }
    int ch = devcomm_channel(peer, d->rank, grad), held = -1;
    if (d->sp.on) ch = plan_channel(d, 0, peer, grad, &held);
    CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
    CUDA_CHECK(cudaStreamWaitEvent(d->stream[ch], d->ready, 0));
    if (held >= 0) {  // one group: the held send and this receive, on one communicator
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(d->sp.buf, d->sp.len, ncclFloat, peer, d->comm[ch], d->stream[ch]));
    }
    NCCL_CHECK(ncclRecv(buf, n, ncclFloat, peer, d->comm[ch], d->stream[ch]));
    if (held >= 0) {
        NCCL_CHECK(ncclGroupEnd());
        end_held(d, ch);
    }
    CUDA_CHECK(cudaEventRecord(d->got, d->stream[ch]));
    wait_event(d, d->got, peer, grad ? "an NCCL receive of a gradient" : "an NCCL receive of an activation");
}

// The step's end: waits for every send in flight (each channel's last: its stream runs them in
// order); every hand-off to this rank has been received.
extern "C" void devcomm_flush(DevComm *d) {
    for (int k = 0; k < 2; k++)
        CHECK(d->self_head[k] == d->self_tail[k], "a hand-off to this rank itself never received");
    if (d->sp.on) {  // the step's plan was walked to its end, nothing held
        char why[240];
        const char *bad = p2p_done(&d->sp.at, why, sizeof why);
        CHECK(!bad, "the NCCL transport's plan of crossing send/receive pairs: %s", bad);
        d->sp.on = 0;
    }
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++)
        if (d->pending[ch]) {
            wait_event(d, d->sent[ch], -1, "the step's last NCCL sends");
            d->pending[ch] = 0;
        }
    for (int i = 0; i < d->n_st; i++) d->st[i].busy = 0;  // every send has completed
}

// bench/gpu.sh's one-GPU check of the NCCL calls (selftest): devcomm_open on a world of one rank (the
// init, the four splits, the warm-up with no neighbour), then on every channel a grouped ncclSend and
// ncclRecv of n floats to this rank itself, then devcomm_close. Returns the largest |received - sent|.
extern "C" double devcomm_smoke(size_t n) {
    char id[DEVCOMM_ID_BYTES];
    devcomm_unique_id(id);
    DevComm *d = devcomm_open(id, 1, 0, NULL, 0);
    float *h = (float *)xmalloc(sizeof(float) * n), *back = (float *)xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = (float)((i * 2654435761u) % 1000003u) * 1e-3f - 500.0f;
    float *a = (float *)cu_alloc(sizeof(float) * n), *b = (float *)cu_alloc(sizeof(float) * n);
    cu_to_device(a, h, sizeof(float) * n);
    double worst = 0;
    for (int ch = 0; ch < DEVCOMM_CHANNELS; ch++) {
        cu_fill(b, -1.0f, n);
        CUDA_CHECK(cudaEventRecord(d->ready, g_stream));
        CUDA_CHECK(cudaStreamWaitEvent(d->stream[ch], d->ready, 0));
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(a, n, ncclFloat, 0, d->comm[ch], d->stream[ch]));
        NCCL_CHECK(ncclRecv(b, n, ncclFloat, 0, d->comm[ch], d->stream[ch]));
        NCCL_CHECK(ncclGroupEnd());
        CUDA_CHECK(cudaEventRecord(d->got, d->stream[ch]));
        wait_event(d, d->got, -2, "GPU (NCCL's send to itself)");
        cu_to_host(back, b, sizeof(float) * n);
        for (size_t i = 0; i < n; i++) {
            double diff = fabs((double)back[i] - h[i]);
            if (!(diff <= worst)) worst = diff;  // a NaN sticks
        }
    }
    devcomm_close(d);
    cu_free(a); cu_free(b);
    free(h); free(back);
    return worst;
}

// selftest --nccl's all-reduce row: a group of one rank (devcomm_open_group), n floats summed in
// place twice (a sum over one rank is the input itself), read back after the compute stream, which
// waits on the all-reduce's event; their device time is read (devcomm_allreduce_seconds: 0 or more;
// NCCL may queue nothing for an in-place sum over one rank). Returns the largest |result - input| (a
// NaN counts as the worst, and so does a time that is not a number of seconds).
extern "C" double devcomm_allreduce_smoke(size_t n) {
    char id[DEVCOMM_ID_BYTES];
    devcomm_unique_id(id);
    DevComm *d = devcomm_open_group(id, 1, 0);
    float *h = (float *)xmalloc(sizeof(float) * n), *back = (float *)xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = (float)((i * 2654435761u) % 1000003u) * 1e-3f - 500.0f;
    float *a = (float *)cu_alloc(sizeof(float) * n);
    cu_to_device(a, h, sizeof(float) * n);
    devcomm_allreduce_sum(d, a, n);
    devcomm_allreduce_sum(d, a, n);
    cu_to_host(back, a, sizeof(float) * n);  // (g_stream waits on the all-reduce: this reads its result)
    double worst = 0;
    for (size_t i = 0; i < n && worst == worst; i++) {
        double diff = fabs((double)back[i] - h[i]);
        if (!(diff <= worst)) worst = diff;  // a NaN ends the loop: it stays the answer
    }
    if (!(devcomm_allreduce_seconds(d) >= 0)) worst = NAN;
    devcomm_close(d);
    cu_free(a);
    free(h); free(back);
    return worst;
}

// selftest --nccl's all-to-all row: devcomm_alltoallv on a group of one rank, n floats then n ints to
// itself, each waited for by devcomm_alltoall_wait (the host under the wire's bound). Returns the largest
// difference received (floats and ints: exact, else it fails).
extern "C" double devcomm_alltoall_smoke(size_t n) {
    char id[DEVCOMM_ID_BYTES];
    devcomm_unique_id(id);
    DevComm *d = devcomm_open_group(id, 1, 0);
    float *h = (float *)xmalloc(sizeof(float) * n), *back = (float *)xmalloc(sizeof(float) * n);
    int *hi = (int *)xmalloc(sizeof(int) * n), *backi = (int *)xmalloc(sizeof(int) * n);
    for (size_t i = 0; i < n; i++) h[i] = (float)((i * 2654435761u) % 1000003u) * 1e-3f - 500.0f, hi[i] = (int)(i * 7);
    float *a = (float *)cu_alloc(sizeof(float) * n), *b = (float *)cu_alloc(sizeof(float) * n);
    int count = (int)n, zero = 0;
    double worst = 0;
    for (int ints = 0; ints < 2; ints++) {
        cu_to_device(a, ints ? (const void *)hi : (const void *)h, sizeof(float) * n);
        devcomm_alltoallv(d, a, &count, &zero, b, &count, &zero, ints);
        devcomm_alltoall_wait(d, "selftest's NCCL all-to-all");
        cu_to_host(ints ? (void *)backi : (void *)back, b, sizeof(float) * n);
    }
    for (size_t i = 0; i < n && worst == worst; i++) {
        double diff = fabs((double)back[i] - h[i]) + fabs((double)backi[i] - hi[i]);
        if (!(diff <= worst)) worst = diff;  // a NaN ends the loop: it stays the answer
    }
    devcomm_close(d);
    cu_free(a); cu_free(b);
    free(h); free(back); free(hi); free(backi);
    return worst;
}

// selftest --nccl's abort row: a pipeline transport on a world of one rank and a group of one rank,
// both aborted by devcomm_abort_all (the watchdog's hook: every communicator in one group), then what
// they hold beside NCCL freed. Returns the seconds the abort took (it must return: nothing is in flight).
extern "C" double devcomm_abort_smoke(void) {
    char id[DEVCOMM_ID_BYTES];
    DevComm *d[2];
    devcomm_unique_id(id);
    d[0] = devcomm_open(id, 1, 0, NULL, 0);
    devcomm_unique_id(id);
    d[1] = devcomm_open_group(id, 1, 0);
    double t0 = now_sec();
    devcomm_abort_all(d, 2);
    double took = now_sec() - t0;
    for (int i = 0; i < 2; i++) free_own(d[i]);
    return took;
}
