// train/pipeline.c: the executor. Where a micro-batch moves: the monolith's and the manual split's steps,
// this rank's action list of a pipeline step, and evaluation as a forward-only action list. One
// helper, pipe_neighbour, names every message's peer rank and tag.
#include <math.h>
#include "base/fault.h"
#include "train/pipeline.h"
#include "base/util.h"
#include "watchdog.h"

void run_record(Run *r, int step, int kind, int mb, int chunk, double t0, double t1) {
    Measure *m = &r->m;
    if (m->n_ev == m->cap_ev) {
        m->cap_ev = m->cap_ev ? 2 * m->cap_ev : 1024;
        m->ev = realloc(m->ev, sizeof(Event) * (size_t)m->cap_ev);
        CHECK(m->ev, "out of memory recording events");
    }
    m->ev[m->n_ev++] = (Event){.step = step, .kind = kind, .mb = mb, .t0 = t0, .t1 = t1, .chunk = chunk};
}

// A micro-step takes --batch consecutive rows of the stream; replica d takes rows [d*B/D, (d+1)*B/D)
// of them, cut into micro-batches of p.rows. Synthetic data is a set of --samples rows (default:
// one fixed batch of a step's batch x grad-accum rows, as in the course's monolith) cycled; a data
// set is cycled whole, or with --epochs read in a fresh shuffle each epoch (data.c maps the stream
// to rows). A resumed run continues the stream where the checkpoint left it (sample0 at step start).
uint64_t run_first_sample(const Run *r, int step, int k, int d, int mb) {
    uint64_t B = (uint64_t)r->c->batch;
    uint64_t i = r->sample0 + ((uint64_t)(step - r->start) * (uint64_t)r->p.N + (uint64_t)k) * B +
                 (uint64_t)d * (B / (uint64_t)r->p.D) + (uint64_t)mb * (uint64_t)r->p.rows;
    uint64_t n = r->c->samples ? (uint64_t)r->c->samples : B * (uint64_t)r->p.N;
    return r->data.train.n ? i : i % n;
}

// Loads the rows from sample `first` on: inputs (first stage) and labels (head) into a slot.
static void load_inputs(Run *r, Stage *s, int slot, uint64_t first, int load_x, int load_y) {
    if (load_x) {
        data_features(&r->data, first, s->rows, r->xh);
        stage_load_input(s, slot, r->xh);
    }
    if (load_y) {
        data_labels(&r->data, first, s->rows, r->yh);
        stage_set_labels(s, slot, r->yh);
    }
}

Peer pipe_neighbour(const Run *r, int vs, int dir, int kind, int mb) {
    int other = vs + dir;
    return (Peer){.rank = comm_stage_rank(&r->comm, plan_stage_of(&r->p, other)),
                  .send_tag = comm_tag_chunk(kind, mb, plan_chunk_of(&r->p, other)),
                  .recv_tag = comm_tag_chunk(kind, mb, plan_chunk_of(&r->p, vs))};
}

static int is_last_vs(const Run *r, int vs) { return vs == r->p.S - 1; }

// ---- a pipeline step: this rank's action list ----

// Messages carry what the stashes hold: fp32, or bf16 (stage_wire_floats: n values in (n + 1) / 2
// floats' bytes, pairs packed; both ends agree, their stages share the run's precision). An
// activation goes straight from the sender's stash into the receiver's; a gradient is rounded from
// din into r->wire and widened into dout (free: ops.h, every reader of it rounds to bf16 anyway).
static void pipe_send_grad(Run *r, Peer to, size_t n) {
    const Stage *s = &r->local[0];
    if (s->bf16) r->be->to_bf16(r->wire, r->din, n);
    comm_send(&r->comm, s->bf16 ? r->wire : r->din, stage_wire_floats(s, n), to.rank, to.send_tag);
}
static void pipe_recv_grad(Run *r, Peer from, size_t n) {
    const Stage *s = &r->local[0];
    comm_recv(&r->comm, s->bf16 ? r->wire : r->dout, stage_wire_floats(s, n), from.rank, from.recv_tag);
    if (s->bf16) r->be->from_bf16(r->dout, r->wire, n);
}

// A receive is followed by the compute that consumes it, and a send follows the compute that
// produced it, so one buffer each for the output gradient (dout) and the input gradient (din)
// suffices: Held tracks which micro-batch (and chunk) each holds, and the checks hold the schedule
// to that.
typedef struct {
    int dout_mb, dout_c, din_mb, din_c, fwd_mb, fwd_c;
    int weights[COMM_MAX_CHUNKS];  // per chunk: the passes so far that produced weight gradients (B or W)
} Held;

static void pipe_recv_act(Run *r, Action a, int vs, size_t n) {
    Stage *s = &r->local[a.chunk];
    Peer from = pipe_neighbour(r, vs, -1, TAG_ACT, a.mb);
    comm_recv(&r->comm, stage_slot_input(s, stage_slot_acquire(s, a.mb)), stage_wire_floats(s, n), from.rank, from.recv_tag);
}

static void pipe_forward(Run *r, Held *h, Action a, int vs, int step) {
    Stage *s = &r->local[a.chunk];
    int slot = stage_slot_acquire(s, a.mb);
    load_inputs(r, s, slot, run_first_sample(r, step, 0, r->replica, a.mb), vs == 0, is_last_vs(r, vs));
    stage_forward(s, slot);
    h->fwd_mb = a.mb; h->fwd_c = a.chunk;
}

// With checkpointing the output lives in the recompute scratch: it is sent before the next compute.
static void pipe_send_act(Run *r, const Held *h, Action a, int vs, size_t n) {
    Stage *s = &r->local[a.chunk];
    CHECK(h->fwd_mb == a.mb && h->fwd_c == a.chunk, "schedule sends micro-batch %d of chunk %d but the last forward was %d of chunk %d",
          a.mb, a.chunk, h->fwd_mb, h->fwd_c);
    Peer to = pipe_neighbour(r, vs, +1, TAG_ACT, a.mb);
    comm_send(&r->comm, stage_output(s, stage_slot_of(s, a.mb)), stage_wire_floats(s, n), to.rank, to.send_tag);
}

static void pipe_backward(Run *r, Held *h, Action a, int vs) {
    Stage *s = &r->local[a.chunk];
    int slot = stage_slot_of(s, a.mb);
    CHECK(slot >= 0, "backward of micro-batch %d (chunk %d), which has no forward in flight", a.mb, a.chunk);
    CHECK(is_last_vs(r, vs) || (h->dout_mb == a.mb && h->dout_c == a.chunk), "backward of micro-batch %d (chunk %d) without its output gradient",
          a.mb, a.chunk);
    if (a.kind == ACT_BACKWARD) stage_backward(s, slot, r->dout, vs > 0 ? r->din : NULL);
    else stage_backward_input(s, slot, r->dout, vs > 0 ? r->din : NULL);
    h->din_mb = a.mb; h->din_c = a.chunk;
    h->dout_mb = h->fwd_mb = -1;
}

static size_t pipe_message_values(const Run *r) { return (size_t)r->p.rows * r->local[0].H; }
double pipe_message_bytes(const Run *r) { return sizeof(float) * (double)stage_wire_floats(&r->local[0], pipe_message_values(r)); }

static void pipe_action(Run *r, Held *h, Action a, int step) {
    int vs = r->vs_of[a.chunk];
    size_t n = pipe_message_values(r);
    Peer peer;
    switch (a.kind) {
    case ACT_RECV_ACT: pipe_recv_act(r, a, vs, n); break;
    case ACT_FORWARD: pipe_forward(r, h, a, vs, step); break;
    case ACT_SEND_ACT: pipe_send_act(r, h, a, vs, n); break;
    case ACT_RECV_GRAD:
        peer = pipe_neighbour(r, vs, +1, TAG_GRAD, a.mb);
        pipe_recv_grad(r, peer, n);
        h->dout_mb = a.mb; h->dout_c = a.chunk;
        break;
    case ACT_BACKWARD:
    case ACT_BACKWARD_INPUT: pipe_backward(r, h, a, vs); break;
    case ACT_BACKWARD_WEIGHT: {
        Stage *s = &r->local[a.chunk];
        int slot = stage_slot_of(s, a.mb);
        CHECK(slot >= 0, "weight gradient of micro-batch %d (chunk %d), which is not in flight", a.mb, a.chunk);
        stage_backward_weight(s, slot);
        h->fwd_mb = -1;
        break;
    }
    case ACT_SEND_GRAD:
        CHECK(h->din_mb == a.mb && h->din_c == a.chunk, "schedule sends the gradient of micro-batch %d (chunk %d) but the last backward was %d (chunk %d)",
              a.mb, a.chunk, h->din_mb, h->din_c);
        peer = pipe_neighbour(r, vs, -1, TAG_GRAD, a.mb);
        pipe_send_grad(r, peer, n);
        break;
    }
}

double pipeline_step(Run *r, int step) {
    Held h = {.dout_mb = -1, .dout_c = -1, .din_mb = -1, .din_c = -1, .fwd_mb = -1, .fwd_c = -1};
    double busy = 0, base = r->m.step_start[step];
    for (int i = 0; i < r->list.n; i++) {
        Action a = r->list.a[i];
        double t0 = now_sec();
        // hybrid: a chunk's last B (or W) of the step makes its gradients final; its layer hooks
        // start the buckets' all-reduces, which then overlap the rest of the pipeline's work.
        if (r->n_sync && (a.kind == ACT_BACKWARD || a.kind == ACT_BACKWARD_WEIGHT))
            gradsync_set_final(&r->sync[a.chunk], ++h.weights[a.chunk] == r->p.M);
        wd_begin((WdAction){action_names[a.kind], r->stage, r->vs_of[a.chunk], a.mb, a.chunk, step + 1});
        pipe_action(r, &h, a, step);
        // On a GPU the calls above only queue work: wait for it, so events hold device time.
        if (action_is_compute(a.kind) && !r->be->on_host) r->be->sync();
        if (r->n_sync) comm_progress();
        double t1 = now_sec();
        if (action_is_compute(a.kind)) busy += t1 - t0;
        run_record(r, step, a.kind, a.mb, a.chunk, t0 - base, t1 - base);
        if (a.kind >= ACT_SEND_ACT && a.kind <= ACT_RECV_GRAD)  // what crossed the wire: the trace shows it
            r->m.ev[r->m.n_ev - 1].bytes = pipe_message_bytes(r);
        wd_end();
        if (i == r->list.n / 2) fault_stall(step + 1, "halfway through its action list");
    }
    wd_phase("the step's last sends", step + 1);
    comm_wait_sends(&r->comm);
    r->m.busy_s[step] = busy;
    return now_sec() - base;
}

// ---- monolith and manual split: one process ----

// The whole model on this rank: the monolith, or one ddp replica (its shard of the batch). With
// --grad-accum N, N forward/backward micro-steps add into the gradients before the one update;
// only the last one's backward starts the buckets' all-reduces (no communication before it).
void monolith_step(Run *r, int step) {
    Stage *s = &r->local[0];
    double base = r->m.step_start[step], busy = 0;
    for (int k = 0; k < r->p.N; k++) {
        int slot = stage_slot_acquire(s, 0);
        load_inputs(r, s, slot, run_first_sample(r, step, k, r->replica, 0), 1, 1);
        double t0 = now_sec();
        wd_begin((WdAction){"F", 0, 0, k, 0, step + 1});
        stage_forward(s, slot);
        r->be->sync();  // device time, not the time to queue the work (a no-op on the CPU)
        double t1 = now_sec();
        wd_end();
        wd_begin((WdAction){"B", 0, 0, k, 0, step + 1});
        if (r->n_sync) gradsync_set_final(&r->sync[0], k == r->p.N - 1);
        stage_backward(s, slot, NULL, NULL);
        r->be->sync();
        double t2 = now_sec();
        wd_end();
        run_record(r, step, ACT_FORWARD, k, 0, t0 - base, t1 - base);
        run_record(r, step, ACT_BACKWARD, k, 0, t1 - base, t2 - base);
        busy += t2 - t0;
    }
    r->m.busy_s[step] = busy;
}

// The course's "manual split": K parts in one process; the activation is handed from part k to
// part k+1 by an explicit copy, and the gradient handed back the same way.
void manual_step(Run *r, int step) {
    Stage *parts = r->local;
    int K = r->n_local;
    size_t bytes = sizeof(float) * stage_wire_floats(&parts[0], (size_t)r->p.rows * parts[0].H);
    uint64_t first = run_first_sample(r, step, 0, 0, 0);
    double t0 = now_sec();
    for (int k = 0; k < K; k++) {
        int slot = stage_slot_acquire(&parts[k], 0);
        if (k == 0) load_inputs(r, &parts[k], slot, first, 1, 0);
        else r->be->copy(stage_slot_input(&parts[k], slot), stage_output(&parts[k - 1], 0), bytes);  // hand-off
        if (k == K - 1) load_inputs(r, &parts[k], slot, first, 0, 1);
        stage_forward(&parts[k], slot);
    }
    // backward: part k writes the gradient of its input into r->din; part k-1 reads it as r->dout
    for (int k = K - 1; k >= 0; k--) {
        stage_backward(&parts[k], 0, r->dout, k > 0 ? r->din : NULL);
        float *t = r->dout; r->dout = r->din; r->din = t;  // hand the gradient back
    }
    r->m.busy_s[step] = now_sec() - t0;
}

// ---- evaluation: accuracy on held-out rows, a forward-only action list ----

typedef struct {
    float *a, *b;        // a chunk's input and output; they trade places between local chunks
    float *logits;       // host [rows, C]
    int n_eval, hits;
    double loss_sum;     // cross-entropy summed over the rows
} Eval;

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

static void eval_forward(Run *r, Eval *e, Action a, int vs, int rows) {
    Stage *s = &r->local[a.chunk];
    uint64_t first = (uint64_t)a.mb * (uint64_t)r->p.rows;
    if (vs == 0) {
        data_eval_features(&r->data, first, rows, r->xh);
        r->be->to_device(e->a, r->xh, sizeof(float) * (size_t)rows * s->D);
    }
    stage_forward_eval(s, e->a, rows, e->b);
    if (!s->has_head) return;
    r->be->to_host(e->logits, e->b, sizeof(float) * (size_t)rows * s->C);
    data_eval_labels(&r->data, first, rows, r->yh);
    e->hits += score(e->logits, r->yh, rows, s->C, &e->loss_sum);
}

// Batch mb's rows through chunk a.chunk. In a pipeline the hand-offs go over the wire (tags repeat
// every M batches, within the range the plan checked; safe because each link carries them in
// order); in one process the output buffer becomes the next chunk's input.
static void eval_action(Run *r, Eval *e, Action a) {
    int vs = r->vs_of[a.chunk], done = a.mb * r->p.rows;
    int rows = e->n_eval - done < r->p.rows ? e->n_eval - done : r->p.rows;
    size_t n = (size_t)rows * r->local[0].H;
    Peer peer;
    switch (a.kind) {
    case ACT_RECV_ACT:
        if (!r->p.pipelined) break;
        peer = pipe_neighbour(r, vs, -1, TAG_DATA, a.mb % r->p.M);
        comm_recv(&r->comm, e->a, n, peer.rank, peer.recv_tag);
        break;
    case ACT_FORWARD: eval_forward(r, e, a, vs, rows); break;
    case ACT_SEND_ACT:
        if (r->p.pipelined) {
            peer = pipe_neighbour(r, vs, +1, TAG_DATA, a.mb % r->p.M);
            comm_send(&r->comm, e->b, n, peer.rank, peer.send_tag);
        } else {
            float *t = e->a; e->a = e->b; e->b = t;
        }
        break;
    default: fatal("evaluation runs forward actions only, got %s", action_names[a.kind]);
    }
}

long long eval_rows(const Run *r) {
    int64_t n = data_eval_rows(&r->data);
    // A test split is evaluated whole unless --eval-samples says otherwise.
    if (!r->data.test.n || option_was_set("eval-samples")) n = n < r->c->eval_samples ? n : r->c->eval_samples;
    return n;
}

EvalResult evaluate(Run *r) {
    const TrainConfig *c = r->c;
    Eval e = {.n_eval = (int)eval_rows(r)};
    if (e.n_eval == 0) return (EvalResult){NAN, NAN, 0};
    int H = (int)c->hidden, C = (int)c->classes, D = (int)c->inputs, rows = r->p.rows, batches = (e.n_eval + rows - 1) / rows;
    size_t width = (size_t)(H > C ? H : C);  // either buffer may receive the logits (or the input rows)
    if ((size_t)D > width) width = (size_t)D;
    e.a = r->be->alloc(sizeof(float) * (size_t)rows * width);
    e.b = r->be->alloc(sizeof(float) * (size_t)rows * width);
    e.logits = xmalloc(sizeof(float) * (size_t)rows * C);
    ActionList list = {0};
    if (r->p.pipelined) schedule_build_forward(r->p.K, r->p.V, r->p.chunk_order, r->stage, batches, &list);
    else schedule_build_forward(1, r->n_local, CHUNKS_LOOP, 0, batches, &list);  // all chunks here (manual: K parts)
    for (int i = 0; i < list.n; i++) {
        Action a = list.a[i];
        wd_begin((WdAction){action_names[a.kind], r->stage, r->vs_of[a.chunk], a.mb, a.chunk, -1});
        eval_action(r, &e, a);
        wd_end();
    }
    wd_phase("evaluation", 0);
    if (r->p.pipelined) comm_wait_sends(&r->comm);
    action_list_free(&list);
    r->be->free(e.a); r->be->free(e.b); free(e.logits);
    double v[2] = {(double)e.hits / e.n_eval, e.loss_sum / e.n_eval};
    if (r->p.pipelined) {  // the head's stage knows them; tell the pipeline's other stages
        if (!r->head) v[0] = v[1] = 0;
        comm_allreduce_sum_double(v, 2, r->comm.pp);
    }
    return (EvalResult){v[0], v[1], e.n_eval};
}
