// train/executor.c: the executor. Where a micro-batch moves: the monolith's and the manual split's steps,
// this rank's action list of a pipeline step, and evaluation as a forward-only action list. One
// helper, exec_neighbour, names every message's peer rank and tag.
#include <math.h>
#include "base/fault.h"
#include "train/executor.h"
#include "base/util.h"
#include "comms/watchdog.h"
#include "axes/expert.h"  // EP_OVERLAP_PAIR

void exec_ring_alloc(InputRing *r, const Backend *be, int rows, int inputs) {
    for (int k = 0; k < INPUT_RING; k++) {
        r->x[k] = be->alloc_host(sizeof(float) * (size_t)rows * (size_t)inputs);
        r->y[k] = be->alloc_host(sizeof(int32_t) * (size_t)rows);
        r->copied[k] = be->fence_new();
    }
    r->next = 0;
    r->teacher = NULL;
}

void exec_ring_free(InputRing *r, const Backend *be) {
    for (int k = 0; k < INPUT_RING; k++) {
        if (!r->copied[k]) continue;
        be->fence_wait(r->copied[k], "GPU (the copies out of an input buffer, before it is freed)");
        be->fence_free(r->copied[k]);
        be->free_host(r->x[k]); be->free_host(r->y[k]);
        r->copied[k] = NULL;
    }
    if (r->teacher && !be->on_host) be->free(r->teacher);  // (on the host: the data's own)
    r->teacher = NULL;
}

// Synthetic rows are made where they are used, by the backend (on a GPU: no host work, no copy), from the
// teacher copied to the device at the first load.
static void load_synthetic(StepState *st, Stage *s, int slot, uint64_t first, int load_x, int load_y) {
    const Data *d = st->data;
    InputRing *r = &st->ring;
    if (s->be->on_host) r->teacher = d->teacher;
    if (!r->teacher) {
        size_t bytes = sizeof(float) * (size_t)d->classes * (size_t)d->inputs;
        r->teacher = s->be->alloc(bytes);
        s->be->to_device(r->teacher, d->teacher, bytes);
    }
    SyntheticBatch b = data_synthetic_batch(d, first, s->rows, r->teacher);
    stage_make_synthetic(s, slot, load_x, load_y, &b);
}

// Loads the rows from sample `first` on: inputs (first stage) and labels (head) into a slot, through
// the ring's next buffer: its last copies (INPUT_RING loads ago) waited for alone, then refilled, and
// the copies queued behind the work already queued, with no host wait (the next load's wait is on
// another buffer).
void exec_load_inputs(StepState *st, Stage *s, int slot, uint64_t first, int load_x, int load_y) {
    if (!load_x && !load_y) return;  // (a middle stage: its input comes over the wire)
    if (!st->data->train.n && s->be->synthetic) { load_synthetic(st, s, slot, first, load_x, load_y); return; }
    InputRing *r = &st->ring;
    int k = r->next;
    r->next = (k + 1) % INPUT_RING;
    s->be->fence_wait(r->copied[k], "GPU (the copies out of an input buffer, before it is refilled)");
    if (load_x) {
        data_features(st->data, first, s->rows, r->x[k]);
        stage_queue_input(s, slot, r->x[k]);
    }
    if (load_y) {
        data_labels(st->data, first, s->rows, r->y[k]);
        stage_queue_labels(s, slot, r->y[k]);
    }
    s->be->fence_record(r->copied[k]);
}

Peer exec_neighbour(const Plan *p, const Comm *comm, int vs, int dir, int kind, int mb) {
    int other = vs + dir;
    return (Peer){.rank = comm_stage_rank(comm, plan_stage_of(p, other)),
                  .send_tag = comm_tag_chunk(kind, mb, plan_chunk_of(p, other)),
                  .recv_tag = comm_tag_chunk(kind, mb, plan_chunk_of(p, vs))};
}

// ---- a pipeline step: this rank's action list ----

// Messages carry what the stashes hold: fp32, or bf16 (stage_wire_floats: n values in (n + 1) / 2
// floats' bytes, pairs packed; both ends agree, their stages share the run's precision). An
// activation goes straight from the sender's stash into the receiver's; a gradient is rounded from
// din into grad_bf16 and widened into dout (free: ops.h, every reader of it rounds to bf16 anyway).
// With --tp every rank of a group holds the whole message: --tp-message full (or auto's choice, in
// w->tp.message, the same on every rank) sends it whole to the
// counterpart (the same tp rank of the neighbouring group); slice sends this rank's chunk of it
// (comm_shard's) and the receiving group all-gathers the chunks (axes/tensor.c), in the same order on
// every rank of the group, as each runs the same actions.
static void wire_part(const Plan *p, const Wire *w, size_t n, size_t *off, size_t *len) {
    *off = 0, *len = n;
    if (w->tp.message == TP_MESSAGE_SLICE) comm_shard(n, p->T, w->comm.tp_rank, off, len);
}
static void pipe_send(const Plan *p, Wire *w, const void *buf, size_t n, Peer to) {
    size_t off, len;
    wire_part(p, w, n, &off, &len);
    comm_send(&w->comm, (const float *)buf + off, len, to.rank, to.send_tag);
}
// A forward's output that stays in its slot until its backward: NCCL sends it from the tensor itself.
static void pipe_send_output(const Plan *p, Wire *w, const void *buf, size_t n, Peer to, int kept) {
    size_t off, len;
    wire_part(p, w, n, &off, &len);
    (kept ? comm_send_kept : comm_send)(&w->comm, (const float *)buf + off, len, to.rank, to.send_tag);
}
static void pipe_recv(const Plan *p, Wire *w, void *buf, size_t n, Peer from) {
    size_t off, len;
    wire_part(p, w, n, &off, &len);
    comm_recv(&w->comm, (float *)buf + off, len, from.rank, from.recv_tag);
    if (w->tp.message == TP_MESSAGE_SLICE) tp_allgather(&w->tp, buf, n);
}

static void pipe_send_grad(const Plan *p, Wire *w, const StepState *st, const Stage *s, Peer to, size_t n) {
    if (s->bf16) w->be->to_bf16(st->grad_bf16, st->din, n);
    pipe_send(p, w, s->bf16 ? st->grad_bf16 : st->din, stage_wire_floats(s, n), to);
}
static void pipe_recv_grad(const Plan *p, Wire *w, const StepState *st, const Stage *s, Peer from, size_t n) {
    pipe_recv(p, w, s->bf16 ? st->grad_bf16 : st->dout, stage_wire_floats(s, n), from);
    if (s->bf16) w->be->from_bf16(st->dout, st->grad_bf16, n);
}

// A receive is followed by the compute that consumes it, and a send follows the compute that
// produced it, so one buffer each for the output gradient (dout) and the input gradient (din)
// suffices: Held tracks which micro-batch (and chunk) each holds, and the checks hold the schedule
// to that.
typedef struct {
    int dout_mb, dout_c, din_mb, din_c, fwd_mb, fwd_c;
    int weights[COMM_MAX_CHUNKS];  // per chunk: the passes so far that produced weight gradients (B or W)
} Held;

static void pipe_forward(const Plan *p, const Wire *w, StepState *st, Stage *s, Action a, int vs) {
    int slot = stage_slot_acquire(s, a.mb);
    exec_load_inputs(st, s, slot, plan_sample(p, st->step_sample, 0, w->replica, a.mb), vs == 0, vs == p->S - 1);
    stage_forward(s, slot);
}

static void pipe_backward(const Plan *p, const StepState *st, const Held *h, Stage *s, Action a, int vs) {
    int slot = stage_slot_of(s, a.mb);
    CHECK(slot >= 0, "backward of micro-batch %d (chunk %d), which has no forward in flight", a.mb, a.chunk);
    CHECK(vs == p->S - 1 || (h->dout_mb == a.mb && h->dout_c == a.chunk),
          "backward of micro-batch %d (chunk %d) without its output gradient", a.mb, a.chunk);
    if (a.kind == ACT_BACKWARD) stage_backward(s, slot, st->dout, vs > 0 ? st->din : NULL);
    else stage_backward_input(s, slot, st->dout, vs > 0 ? st->din : NULL);
}

static void pipe_backward_weight(Stage *s, Action a) {
    int slot = stage_slot_of(s, a.mb);
    CHECK(slot >= 0, "weight gradient of micro-batch %d (chunk %d), which is not in flight", a.mb, a.chunk);
    stage_backward_weight(s, slot);
}

static size_t pipe_message_values(const Plan *p, const Stage *s) { return (size_t)p->rows * s->H; }
double pipe_message_bytes(const Plan *p, const Stage *s) {
    return sizeof(float) * (double)stage_wire_floats(s, pipe_message_values(p, s));
}

// One action of chunk a.chunk (virtual stage vs); Held follows what the buffers hold.
static void pipe_action(const Plan *p, Wire *w, Model *model, StepState *st, Held *h, Action a) {
    Stage *s = &model->local[a.chunk];
    int vs = model->vs_of[a.chunk];
    size_t n = pipe_message_values(p, s);
    Peer peer;
    switch (a.kind) {
    case ACT_RECV_ACT:
        peer = exec_neighbour(p, &w->comm, vs, -1, TAG_ACT, a.mb);
        pipe_recv(p, w, stage_slot_input(s, stage_slot_acquire(s, a.mb)), stage_wire_floats(s, n), peer);
        break;
    case ACT_FORWARD:
        pipe_forward(p, w, st, s, a, vs);
        h->fwd_mb = a.mb; h->fwd_c = a.chunk;
        break;
    case ACT_SEND_ACT:  // with checkpointing the output lives in the recompute scratch: sent before the next compute
        CHECK(h->fwd_mb == a.mb && h->fwd_c == a.chunk,
              "schedule sends micro-batch %d of chunk %d but the last forward was %d of chunk %d", a.mb, a.chunk,
              h->fwd_mb, h->fwd_c);
        peer = exec_neighbour(p, &w->comm, vs, +1, TAG_ACT, a.mb);
        // else it stays in its slot until the backward that its returning gradient allows: sent as it lies
        pipe_send_output(p, w, stage_output(s, stage_slot_of(s, a.mb)), stage_wire_floats(s, n), peer, !s->ckpt);
        break;
    case ACT_RECV_GRAD:
        pipe_recv_grad(p, w, st, s, exec_neighbour(p, &w->comm, vs, +1, TAG_GRAD, a.mb), n);
        h->dout_mb = a.mb; h->dout_c = a.chunk;
        break;
    case ACT_BACKWARD:
    case ACT_BACKWARD_INPUT:
        pipe_backward(p, st, h, s, a, vs);
        h->din_mb = a.mb; h->din_c = a.chunk;
        h->dout_mb = h->fwd_mb = -1;
        break;
    case ACT_BACKWARD_WEIGHT:
        pipe_backward_weight(s, a);
        h->fwd_mb = -1;
        break;
    case ACT_SEND_GRAD:
        CHECK(h->din_mb == a.mb && h->din_c == a.chunk,
              "schedule sends the gradient of micro-batch %d (chunk %d) but the last backward was %d (chunk %d)", a.mb,
              a.chunk, h->din_mb, h->din_c);
        pipe_send_grad(p, w, st, s, exec_neighbour(p, &w->comm, vs, -1, TAG_GRAD, a.mb), n);
        break;
    }
}

// The compute actions' times, from the marks on the device's queue around each (a[i]: the event of
// action i, -1 for a message; marks from 1, two per compute action), placed on the host's clock by
// mark 0 at anchor. Returns the step's compute time: how long some pass ran (the union of their intervals).
static double place_marks(const Wire *w, Measure *m, const int *at, int n, int marks, double anchor) {
    double *t = xmalloc(sizeof(double) * (size_t)marks), busy = 0, end = -INFINITY;
    w->be->stamps(marks, t);  // the one wait for the GPU's queue in the step
    for (int i = 0, k = 1; i < n; i++) {
        if (at[i] < 0) continue;
        Event *e = &m->ev[at[i]];
        e->t0 = anchor + t[k];
        e->t1 = anchor + t[k + 1];
        // the union of the passes (their starts come in time order): a pair's two (exec_pair) overlap and
        // count once; passes one after another add t1 - t0 each, as a plain sum would
        busy += e->t0 >= end ? e->t1 - e->t0 : fmax(0, e->t1 - end);
        end = fmax(end, e->t1);
        k += 2;
    }
    free(t);
    return busy;
}

// One step's run of the action list: what each action needs besides itself.
typedef struct {
    const Plan *p;
    Wire *w;
    Model *model;
    StepState *st;
    Measure *m;
    Held h;
    int *at, marks;
    double base;
} StepRun;

// Action i of the list, timed and recorded.
static void run_action(StepRun *r, int i) {
    Action a = r->st->list.a[i];
    double t0 = now_sec();
    // hybrid: a chunk's last B (or W) of the step makes its gradients final; its layer hooks
    // start the buckets' all-reduces, which then overlap the rest of the pipeline's work.
    if (r->model->n_sync && (a.kind == ACT_BACKWARD || a.kind == ACT_BACKWARD_WEIGHT))
        gradsync_set_final(&r->model->sync[a.chunk], ++r->h.weights[a.chunk] == r->p->M);
    wd_begin((WdAction){action_names[a.kind], r->w->stage, r->model->vs_of[a.chunk], a.mb, a.chunk, r->st->step + 1});
    int compute = action_is_compute(a.kind);
    if (compute) r->w->be->stamp(r->marks++);
    pipe_action(r->p, r->w, r->model, r->st, &r->h, a);
    if (compute) r->w->be->stamp(r->marks++);
    if (r->model->n_sync) comm_progress();
    double t1 = now_sec();
    Event *e = measure_record(r->m, r->st->step, a.kind, a.mb, a.chunk, t0 - r->base, t1 - r->base);
    r->at[i] = compute ? r->m->n_ev - 1 : -1;  // its times come from the marks
    if (a.kind >= ACT_SEND_ACT && a.kind <= ACT_RECV_GRAD)  // what crossed the wire: the trace shows it
        e->bytes = pipe_message_bytes(r->p, &r->model->local[0]);
    wd_end();
}

// --ep-overlap pair: the index of the full backward that runs in turn with forward i (exec_pair), or -1. It
// is the next compute action, of another micro-batch or chunk, both stages able to interleave
// (stage_can_pair), with between the two only the forward's own send and at most one receive, of that
// backward's output gradient. Only 1F1B and DualPipeV: receiving that gradient before sending the forward's
// output cannot deadlock there (the gradient's sender never waits for that output: in 1F1B it comes from
// the next stage's backward of an earlier micro-batch; in DualPipeV's pairs the two go to different
// neighbours, or to this rank itself); other schedules run every pass whole, as `on`.
static int pair_of(const Plan *p, const Model *model, const ActionList *l, int i) {
    Action f = l->a[i];
    if (p->expert.overlap != EP_OVERLAP_PAIR || p->expert.N <= 1 || f.kind != ACT_FORWARD) return -1;
    if (p->schedule != SCHED_1F1B && p->schedule != SCHED_DUALPIPEV) return -1;
    int recv = -1;
    for (int j = i + 1; j < l->n; j++) {
        Action b = l->a[j];
        if (b.kind == ACT_SEND_ACT && b.mb == f.mb && b.chunk == f.chunk) continue;
        if (b.kind == ACT_RECV_GRAD && recv < 0) { recv = j; continue; }
        if (b.kind != ACT_BACKWARD || (b.mb == f.mb && b.chunk == f.chunk)) return -1;
        if (recv >= 0 && (l->a[recv].mb != b.mb || l->a[recv].chunk != b.chunk)) return -1;
        return stage_can_pair(&model->local[f.chunk]) && stage_can_pair(&model->local[b.chunk]) ? j : -1;
    }
    return -1;
}

// The pair: forward i and backward j (pair_of) advance in turn, the backward's MoE layers in lane 1: one
// runs until it starts an exchange of rows, then the other until it starts one, then the first waits for
// its rows and goes on: each one's all-to-all in flight during the other's compute. The gradient the
// backward needs is received first, the forward's output sent after. Every rank of an expert group runs
// the same list, so each lane's exchanges are matched in the same order on every rank (none can deadlock:
// each lane has at most one in flight, waited for before its next starts).
static void exec_pair(StepRun *r, int i, int j) {
    const ActionList *l = &r->st->list;
    Action f = l->a[i], b = l->a[j];
    for (int k = i + 1; k < j; k++)
        if (l->a[k].kind == ACT_RECV_GRAD) run_action(r, k);
    if (r->model->n_sync) gradsync_set_final(&r->model->sync[b.chunk], ++r->h.weights[b.chunk] == r->p->M);
    Stage *sf = &r->model->local[f.chunk], *sb = &r->model->local[b.chunk];
    int vf = r->model->vs_of[f.chunk], vb = r->model->vs_of[b.chunk], mf = r->marks, mb = r->marks + 2;
    wd_begin((WdAction){action_names[ACT_FORWARD], r->w->stage, vf, f.mb, f.chunk, r->st->step + 1});
    double t0 = now_sec();
    int slot = stage_slot_acquire(sf, f.mb), back = stage_slot_of(sb, b.mb);
    CHECK(back >= 0 && (vb == r->p->S - 1 || (r->h.dout_mb == b.mb && r->h.dout_c == b.chunk)),
          "backward of micro-batch %d (chunk %d) paired without its forward or output gradient", b.mb, b.chunk);
    exec_load_inputs(r->st, sf, slot, plan_sample(r->p, r->st->step_sample, 0, r->w->replica, f.mb), vf == 0,
                     vf == r->p->S - 1);
    StagePass F, B;
    stage_pass_forward(&F, sf, slot);
    r->w->be->stamp(mf);
    int fon = stage_pass_step(&F), bon;
    if (!fon) r->w->be->stamp(mf + 1);
    r->w->be->stamp(mb);
    stage_pass_backward(&B, sb, back, r->st->dout, vb > 0 ? r->st->din : NULL);
    B.lane = 1;
    if (!(bon = stage_pass_step(&B))) r->w->be->stamp(mb + 1);
    while (fon || bon) {
        if (fon && !(fon = stage_pass_step(&F))) r->w->be->stamp(mf + 1);
        if (bon && !(bon = stage_pass_step(&B))) r->w->be->stamp(mb + 1);
        if (r->model->n_sync) comm_progress();
    }
    r->marks += 4;
    double t1 = now_sec();
    measure_record(r->m, r->st->step, ACT_FORWARD, f.mb, f.chunk, t0 - r->base, t1 - r->base);
    r->at[i] = r->m->n_ev - 1;
    measure_record(r->m, r->st->step, ACT_BACKWARD, b.mb, b.chunk, t0 - r->base, t1 - r->base);
    r->at[j] = r->m->n_ev - 1;
    wd_end();
    r->h.din_mb = b.mb, r->h.din_c = b.chunk, r->h.dout_mb = -1;
    r->h.fwd_mb = f.mb, r->h.fwd_c = f.chunk;  // (its send comes next)
    for (int k = i + 1; k < j; k++)
        if (l->a[k].kind == ACT_SEND_ACT) run_action(r, k);
}

double exec_pipeline_step(const Plan *p, Wire *w, Model *model, StepState *st, Measure *m) {
    StepRun r = {.p = p, .w = w, .model = model, .st = st, .m = m, .base = m->step_start[st->step],
                 .h = {.dout_mb = -1, .dout_c = -1, .din_mb = -1, .din_c = -1, .fwd_mb = -1, .fwd_c = -1},
                 .at = xmalloc(sizeof(int) * (size_t)(st->list.n ? st->list.n : 1))};
    // The host queues the step's work without waiting after each action (on a GPU the calls only queue
    // it): marks on the device's queue around each compute action time it (events on a GPU, the clock on
    // the CPU), read once at the step's end. Mark 0 anchors them: taken with the queue empty.
    w->be->sync();
    double anchor = w->be->stamp(r.marks++) - r.base;
    comm_step_calls(&w->comm);  // NCCL: the step's crossing pairs go as groups (until comm_wait_sends)
    for (int i = 0; i < st->list.n; i++) {
        int j = pair_of(p, model, &st->list, i), last = j >= 0 ? j : i;
        if (j >= 0) exec_pair(&r, i, j);
        else run_action(&r, i);
        if (i <= st->list.n / 2 && st->list.n / 2 <= last) fault_stall(st->step + 1, "halfway through its action list");
        i = last;
    }
    wd_phase("the step's last sends", st->step + 1);
    comm_wait_sends(&w->comm);
    m->busy_s[st->step] = place_marks(w, m, r.at, st->list.n, r.marks, anchor);
    free(r.at);
    return now_sec() - r.base;
}

// ---- monolith and manual split: one process ----

// The whole model on this rank: the monolith, or one ddp replica (its shard of the batch). With
// --grad-accum N, N forward/backward micro-steps add into the gradients before the one update;
// only the last one's backward starts the buckets' all-reduces (no communication before it).
void exec_monolith_step(const Plan *p, Wire *w, Model *model, StepState *st, Measure *m) {
    Stage *s = &model->local[0];
    int step = st->step, marks = 0, *at = xmalloc(sizeof(int) * 2 * (size_t)p->N);
    double base = m->step_start[step];
    w->be->sync();  // timed as the pipeline's actions are: marks on the device's queue (exec_pipeline_step)
    double anchor = w->be->stamp(marks++) - base;
    for (int k = 0; k < p->N; k++) {
        int slot = stage_slot_acquire(s, 0);
        exec_load_inputs(st, s, slot, plan_sample(p, st->step_sample, k, w->replica, 0), 1, 1);
        if (s->det) s->det->row0 = plan_row(p, k, w->replica, 0);
        wd_begin((WdAction){"F", 0, 0, k, 0, step + 1});
        w->be->stamp(marks++);
        stage_forward(s, slot);
        w->be->stamp(marks++);
        wd_end();
        wd_begin((WdAction){"B", 0, 0, k, 0, step + 1});
        if (model->n_sync) gradsync_set_final(&model->sync[0], k == p->N - 1);
        w->be->stamp(marks++);
        stage_backward(s, slot, NULL, NULL);
        w->be->stamp(marks++);
        wd_end();
        measure_record(m, step, ACT_FORWARD, k, 0, 0, 0);
        at[2 * k] = m->n_ev - 1;
        measure_record(m, step, ACT_BACKWARD, k, 0, 0, 0);
        at[2 * k + 1] = m->n_ev - 1;
    }
    m->busy_s[step] = place_marks(w, m, at, 2 * p->N, marks, anchor);
    free(at);
}

// The course's "manual split": K parts in one process; the activation is handed from part k to
// part k+1 by an explicit copy, and the gradient handed back the same way.
void exec_manual_step(const Plan *p, const Wire *w, Model *model, StepState *st, Measure *m) {
    Stage *parts = model->local;
    int K = model->n_local;
    size_t bytes = sizeof(float) * stage_wire_floats(&parts[0], (size_t)p->rows * parts[0].H);
    uint64_t first = plan_sample(p, st->step_sample, 0, 0, 0);
    double t0 = now_sec();
    for (int k = 0; k < K; k++) {
        int slot = stage_slot_acquire(&parts[k], 0);
        if (k == 0) exec_load_inputs(st, &parts[k], slot, first, 1, 0);
        else w->be->copy(stage_slot_input(&parts[k], slot), stage_output(&parts[k - 1], 0), bytes);  // hand-off
        if (k == K - 1) exec_load_inputs(st, &parts[k], slot, first, 0, 1);
        stage_forward(&parts[k], slot);
    }
    // backward: the gradient of part k's input is the gradient of part k-1's output, handed back in
    // grad[k % 2]: part k reads its output's gradient from grad[(k + 1) % 2] (the head reads none)
    float *grad[2] = {st->din, st->dout};
    for (int k = K - 1; k >= 0; k--) stage_backward(&parts[k], 0, grad[(k + 1) % 2], k > 0 ? grad[k % 2] : NULL);
    m->busy_s[st->step] = now_sec() - t0;
}

// ---- evaluation: accuracy on held-out rows, a forward-only action list ----

// Chunk c reads its input from buf[c % 2] and writes its output into buf[(c + 1) % 2], so in one
// process a chunk's output is the next chunk's input where it lies; in a pipeline each chunk's
// receive, forward and send come in that order, one chunk after the other.
typedef struct {
    const Backend *be;
    float *buf[2];       // [rows, max(inputs, H, C)] each, on the device
    float *logits;       // host [rows, C]
    int n_eval, hits;
    double loss_sum;     // cross-entropy summed over the rows
} Eval;
static float *eval_input(Eval *e, int chunk) { return e->buf[chunk % 2]; }
static float *eval_output(Eval *e, int chunk) { return e->buf[(chunk + 1) % 2]; }
// The rows of batch mb: p->rows, or what is left of the held-out rows in the last batch.
static int eval_rows(const Plan *p, const Eval *e, int mb) {
    int left = e->n_eval - mb * p->rows;
    return left < p->rows ? left : p->rows;
}

// Argmax hits and the summed cross-entropy of rows of logits against labels y.
static int score(const float *logits, const int32_t *y, int rows, int C, double *loss_sum) {
    int hits = 0;
    for (int i = 0; i < rows; i++) {
        const float *l = logits + (size_t)i * C;
        int best = 0;
        for (int j = 1; j < C; j++) if (l[j] > l[best]) best = j;
        hits += best == y[i];
        double z = 1;  // log-sum-exp around the largest logit: exp(0) for it, the rest below 1
        for (int j = 0; j < C; j++) if (j != best) z += exp((double)l[j] - l[best]);
        *loss_sum += log(z) + l[best] - l[y[i]];
    }
    return hits;
}

// Batch a.mb's rows through local stage s: the input rows read on the stage holding layer 0, the
// logits scored on the head's.
static void eval_forward(const Plan *p, StepState *st, Eval *e, Stage *s, Action a) {
    uint64_t first = (uint64_t)a.mb * (uint64_t)p->rows;
    int rows = eval_rows(p, e, a.mb);
    float *in = eval_input(e, a.chunk), *out = eval_output(e, a.chunk);
    if (s->lo == 0) {
        data_eval_features(st->data, first, rows, st->xh);
        e->be->to_device(in, st->xh, sizeof(float) * (size_t)rows * s->D);
    }
    stage_forward_eval(s, in, rows, out);
    if (!s->has_head) return;
    e->be->to_host(e->logits, out, sizeof(float) * (size_t)rows * s->C);
    data_eval_labels(st->data, first, rows, st->yh);
    e->hits += score(e->logits, st->yh, rows, s->C, &e->loss_sum);
}

// Batch mb's rows through chunk a.chunk. In a pipeline the hand-offs go over the wire (tags repeat
// every M batches, within the range the plan checked; safe because each link carries them in
// order); in one process the output buffer is the next chunk's input already.
static void eval_action(const Plan *p, Wire *w, Model *model, StepState *st, Eval *e, Action a) {
    int vs = model->vs_of[a.chunk];
    size_t n = (size_t)eval_rows(p, e, a.mb) * model->local[0].H;
    Peer peer;
    switch (a.kind) {
    case ACT_RECV_ACT:
        if (!p->pipelined) break;
        peer = exec_neighbour(p, &w->comm, vs, -1, TAG_DATA, a.mb % p->M);
        pipe_recv(p, w, eval_input(e, a.chunk), n, peer);
        break;
    case ACT_FORWARD: eval_forward(p, st, e, &model->local[a.chunk], a); break;
    case ACT_SEND_ACT:
        if (!p->pipelined) break;
        peer = exec_neighbour(p, &w->comm, vs, +1, TAG_DATA, a.mb % p->M);
        pipe_send(p, w, eval_output(e, a.chunk), n, peer);
        break;
    default: fatal("evaluation runs forward actions only, got %s", action_names[a.kind]);
    }
}

EvalResult evaluate(const TrainConfig *c, const Plan *p, Wire *w, Model *model, StepState *st) {
    Eval e = {.be = w->be, .n_eval = (int)p->eval_rows};
    if (e.n_eval == 0) return (EvalResult){NAN, NAN, 0};
    int H = (int)c->hidden, C = (int)c->classes, D = p->inputs, rows = p->rows, batches = (e.n_eval + rows - 1) / rows;
    size_t width = (size_t)(H > C ? H : C);  // either buffer may receive the logits (or the input rows)
    if ((size_t)D > width) width = (size_t)D;
    for (int i = 0; i < 2; i++) e.buf[i] = w->be->alloc(sizeof(float) * (size_t)rows * width);
    e.logits = xmalloc(sizeof(float) * (size_t)rows * C);
    ActionList list = {0};
    if (p->pipelined) schedule_build_forward(p->K, p->V, p->chunk_order, w->stage, batches, &list);
    // all chunks here (manual: K parts)
    else schedule_build_forward(1, model->n_local, CHUNKS_LOOP, 0, batches, &list);
    for (int i = 0; i < list.n; i++) {
        Action a = list.a[i];
        wd_begin((WdAction){action_names[a.kind], w->stage, model->vs_of[a.chunk], a.mb, a.chunk, -1});
        eval_action(p, w, model, st, &e, a);
        wd_end();
    }
    wd_phase("evaluation", 0);
    if (p->pipelined) comm_wait_sends(&w->comm);
    action_list_free(&list);
    w->be->free(e.buf[0]); w->be->free(e.buf[1]); free(e.logits);
    double v[2] = {(double)e.hits / e.n_eval, e.loss_sum / e.n_eval};
    if (p->pipelined) {  // the head's stage knows them; tell the pipeline's other stages
        if (!model->head) v[0] = v[1] = 0;
        comm_allreduce_sum_double(v, 2, w->comm.pp);
    }
    return (EvalResult){v[0], v[1], e.n_eval};
}
