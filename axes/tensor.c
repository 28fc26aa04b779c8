// axes/tensor.c: tensor parallelism, the axis (axes/axis.h's contract): its rules (--hidden split T ways,
// the group's all-reduce from the facts), its sizes (a rank's shards of model.h's column/row pairs), its
// set-up, its part of the report and its price for the planner; and its wire: the all-reduce the Stage's
// hook calls (tensor.h). Every rank of a group runs the same passes of the same stage in the same order,
// so the group's collectives start in the same order on all of them (as p2p.h's rule asks of the
// pipeline's messages): the hook is the only caller, and it blocks until the sum is complete. The whole
// tensors of a stage and a rank's shards (init, --verify, checkpoints) are this axis' layout too.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "axes/tensor.h"
#include "base/util.h"
#include "comms/devcomm.h"
#include "comms/hier.h"  // comm_hier_prepare
#include "comms/tags.h"
#include <cjson/cJSON.h>

// The recorder (testing): with MICROPP_COLLECTIVE_LOG=DIR each rank writes DIR/rank<r>.log, one line
// per collective it issues on its group, in order, before it is dispatched to shm, MPI or NCCL:
// "<op> <floats> group <g>". tests/t_tp_order.sh checks that every rank of a group wrote the same lines:
// the rule NCCL needs (collectives pair by order alone), proven on the CPU.
static FILE *open_log(int rank) {
    const char *dir = getenv("MICROPP_COLLECTIVE_LOG");
    if (!dir || !*dir) return NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/rank%d.log", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f) user_error("MICROPP_COLLECTIVE_LOG '%s': cannot write %s: name a folder that exists", dir, path);
    return f;
}
static void record(TpGroup *g, const char *op, size_t n) {
    if (!g->log) return;
    fprintf(g->log, "%s %zu group %d\n", op, n, g->group);
    fflush(g->log);  // (a rank that ends on an error keeps what it issued)
}

void tp_setup(TpGroup *g, const Comm *grid, const Backend *be, int algo, int nccl, size_t most) {
    memset(g, 0, sizeof *g);
    g->comm.rank = grid->rank;
    g->comm.size = grid->size;
    g->comm.world = grid->world;
    g->comm.dp = grid->tp;
    g->comm.pp = MPI_COMM_NULL;
    g->comm.tp = MPI_COMM_NULL;
    g->comm.be = be;
    g->comm.transport = TRANSPORT_MPI;
    g->algo = algo;
    g->group = comm_rank_group(grid->tp_size, grid->rank);
    g->log = open_log(grid->rank);
    if (nccl) g->dev = comm_nccl_group(grid->tp);  // (comms.c closes it at the end)
    if (!nccl && algo == ALLREDUCE_HIER) comm_hier_prepare(&g->comm);  // its groups now (collective over the group)
    if (nccl || !comm_algo_windows(algo)) return;
    g->window_n = most;
    g->window = comm_shared_alloc(&g->comm, most);  // collective over the group
}

static void keep_span(TpGroup *g, int kind, double t0, size_t n) {
    if (!g->trace) return;
    if (g->n_spans == g->cap_spans) {
        g->cap_spans = g->cap_spans ? 2 * g->cap_spans : 64;
        g->spans = realloc(g->spans, sizeof(Span) * (size_t)g->cap_spans);
        CHECK(g->spans, "out of memory recording the tensor-parallel collectives");
    }
    g->spans[g->n_spans++] = (Span){t0, now_sec(), kind, (double)n * sizeof(float)};
}

void tp_spans_clear(TpGroup *g) { g->n_spans = 0; }

// Its time: over NCCL the call only queues it (the compute after it waits on the device), so the
// device's own time is added at the step's end (tp_step_end: CUDA events around each); over MPI or
// shm, the host's time once the compute queued before it has run (a GPU's queue drained first, as the
// staging copy would anyway), so the compute is not counted as communication.
// --deterministic on more than 2 ranks: rank t holds the sum of slice t of the inner dimension (model.c's
// det_slices); the sums are all-gathered and added in the slices' pairwise tree, (p0 + p1) + (p2 + p3),
// as one process adds them (2 ranks: one addition, a + b, which every collective computes alike).
static void det_combine(TpGroup *g, float *x, size_t n) {
    int T;
    MPI_Comm_size(g->comm.dp, &T);
    CHECK(T == 4 && n < (1u << 28), "--deterministic: a tensor-parallel sum over %d ranks of %zu floats", T, n);
    float *all = xmalloc(sizeof(float) * n * 4);
    MPI_Request q;
    MPI_CHECK(MPI_Iallgather(x, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, g->comm.dp, &q));
    wd_wait_all(&q, g->comm.dp, "an all-gather");
    for (size_t j = 0; j < n; j++) x[j] = (all[j] + all[n + j]) + (all[2 * n + j] + all[3 * n + j]);
    free(all);
}

static void tp_allreduce(void *ctx, float *x, size_t n) {
    TpGroup *g = ctx;
    if (!g->dev) g->comm.be->sync();
    double t0 = now_sec();
    record(g, "allreduce", n);
    if (g->det) det_combine(g, x, n);
    else if (g->dev) devcomm_allreduce_sum(g->dev, x, n);
    else if (comm_algo_windows(g->algo)) {  // through the window: the group's ranks sum it in place
        CHECK(n <= g->window_n, "a tensor-parallel all-reduce of %zu floats, the window holds %zu", n, g->window_n);
        memcpy(g->window, x, n * sizeof(float));
        comm_allreduce(&g->comm, g->window, n, 1.0f, g->algo);
        memcpy(x, g->window, n * sizeof(float));
    } else comm_allreduce(&g->comm, x, n, 1.0f, g->algo);
    g->calls++;
    g->floats += (double)n;
    if (!g->dev) g->seconds += now_sec() - t0;
    keep_span(g, EV_TP_ALLREDUCE, t0, n);
}

void tp_step_end(TpGroup *g) {
    if (g->dev) g->seconds += devcomm_allreduce_seconds(g->dev);
}

void tp_allgather(TpGroup *g, float *x, size_t n) {
    g->comm.be->sync();  // (as tp_allreduce over MPI)
    double t0 = now_sec();
    record(g, "allgather", n);
    if (comm_algo_windows(g->algo)) {
        CHECK(n <= g->window_n, "a tensor-parallel all-gather of %zu floats, the window holds %zu", n, g->window_n);
        memcpy(g->window, x, n * sizeof(float));
        comm_allgather(&g->comm, g->window, n, g->algo);
        memcpy(x, g->window, n * sizeof(float));
    } else comm_allgather(&g->comm, x, n, g->algo);
    g->seconds += now_sec() - t0;
    keep_span(g, EV_GATHER, t0, n);
}

void tp_attach(TpGroup *g, Stage *s) {
    s->hooks.tp_allreduce = tp_allreduce;
    s->hooks.tp_ctx = g;
}

// One way timed: reps round trips (after one not counted) of stage 0's message to stage 1 and back,
// each rank sending its part (all of it, or its chunk and the receiver all-gathers). Seconds.
static double time_way(TpGroup *g, Comm *c, int way, float *buf, size_t n, int reps) {
    size_t off = 0, len = n;
    if (way == TP_MESSAGE_SLICE) comm_shard(n, c->tp_size, c->tp_rank, &off, &len);
    int peer = comm_stage_rank(c, 1 - c->stage), tag = comm_tag(TAG_CTRL, 0);
    double t0 = 0;
    for (int r = -1; r < reps; r++) {
        if (r == 0) t0 = now_sec();
        if (c->stage == 0) comm_send(c, buf + off, len, peer, tag);
        comm_recv(c, buf + off, len, peer, tag);
        if (way == TP_MESSAGE_SLICE) tp_allgather(g, buf, n);
        if (c->stage == 1) comm_send(c, buf + off, len, peer, tag);
        comm_wait_sends(c);
    }
    return now_sec() - t0;
}

// Testing: MICROPP_TP_MESSAGE_SKEW=RANK:WAY[,RANK:WAY...] adds a second to WAY's (full or slice) time
// as that world rank measured it, so two ranks of one group lean opposite ways: only the agreement
// over the world keeps them on one. Read alike on every rank; a malformed value is a user error.
static void skew(int rank, double t[2]) {
    const char *v = getenv("MICROPP_TP_MESSAGE_SKEW");
    for (const char *q = v; q && *q;) {
        int r = -1, used = 0;
        char way[8] = "";
        if (sscanf(q, "%d:%7[a-z]%n", &r, way, &used) != 2 || (strcmp(way, "full") && strcmp(way, "slice")))
            user_error("MICROPP_TP_MESSAGE_SKEW '%s': write RANK:full or RANK:slice, comma separated", v);
        if (r == rank) t[strcmp(way, "full") ? TP_MESSAGE_SLICE : TP_MESSAGE_FULL] += 1.0;
        q += used;
        if (*q == ',') q++;
    }
}

void tp_choose_message(TpGroup *g, Comm *c, int asked, size_t n, int reps) {
    g->message = asked == TP_MESSAGE_SLICE ? TP_MESSAGE_SLICE : TP_MESSAGE_FULL;
    if (asked != TP_MESSAGE_AUTO || c->stages < 2) return;
    double t[2] = {0, 0}, spent = g->seconds;  // (the all-gathers here are not the run's)
    if (c->stage <= 1) {
        float *buf = g->comm.be->alloc(n * sizeof(float));
        for (int way = TP_MESSAGE_FULL; way <= TP_MESSAGE_SLICE; way++) t[way] = time_way(g, c, way, buf, n, reps);
        g->comm.be->free(buf);
    }
    g->seconds = spent;
    skew(c->rank, t);
    comm_allreduce_max_double(t, 2, MPI_COMM_WORLD);
    g->full_ms = t[TP_MESSAGE_FULL] * 1e3 / (2.0 * reps);
    g->slice_ms = t[TP_MESSAGE_SLICE] * 1e3 / (2.0 * reps);
    g->message = g->slice_ms < g->full_ms ? TP_MESSAGE_SLICE : TP_MESSAGE_FULL;
    g->timed = 1;
}

void tp_free(TpGroup *g) {
    if (g->log) fclose(g->log);
    comm_shared_free(&g->comm);  // (the communicator itself is the grid's; g->dev is comms.c's)
    free(g->spans);
    memset(g, 0, sizeof *g);
}

// ---- the layout of a stage cut T ways: the whole tensors and a rank's shards (model.c cuts one layer) ----

size_t stage_full_len(const Stage *s, int j) {
    if (j < s->n_layers && moe_is(s->moe, j)) return moe_layer_len(s->H, s->moe->spec.experts);  // all E experts
    return j == s->n_layers ? (size_t)s->C * s->H + s->C : (size_t)s->H * stage_fan_in(s, j) + s->H;
}
size_t stage_full_off(const Stage *s, int j) {
    size_t off = 0;
    for (int i = 0; i < j; i++) off += stage_full_len(s, i);
    return off;
}
size_t stage_full_params(const Stage *s) {
    return stage_full_off(s, s->n_layers) + (s->has_head ? stage_full_len(s, s->n_layers) : 0);
}

// --ep: MoE layer i's router and rank t's experts (moe_held) between the whole layer and the shard.
static void moe_copy(const Stage *s, int i, int t, float *full, float *local, int to_shard) {
    MoeSpec m = s->moe->spec;
    int H = s->H, E = m.experts, first, held;
    m.shard = t;
    held = moe_held(&m, &first);
    float *f = full + stage_full_off(s, i), *l = local + stage_layer_off(s, i);
    size_t router = moe_router_len(H, E), experts = moe_expert_len(H) * (size_t)held;
    memcpy(to_shard ? l : f, to_shard ? f : l, sizeof(float) * router);
    f += moe_expert_off(H, E, first), l += router;
    memcpy(to_shard ? l : f, to_shard ? f : l, sizeof(float) * experts);
}

// Every layer of the flat buffers (local: rank t's, as stage_layer_off lays them out; full: the
// whole stage, stage_full_off), and the head, which every rank holds whole. t: the rank in the group
// the stage is cut over (stage_shards: --tp's or --ep's).
static void stage_copy(const Stage *s, int t, float *full, float *local, int to_shard) {
    if (stage_shards(s) <= 1) {  // the whole stage is the shard
        memcpy(to_shard ? local : full, to_shard ? full : local, sizeof(float) * stage_full_params(s));
        return;
    }
    for (int i = 0; i < s->n_layers; i++) {
        if (moe_is(s->moe, i)) {  // (never with --tp: axes/expert.c's rules)
            moe_copy(s, i, t, full, local, to_shard);
            continue;
        }
        float *Wf = full + stage_full_off(s, i), *W = local + stage_layer_off(s, i),
              *bf = Wf + (size_t)s->H * stage_fan_in(s, i);
        if (to_shard) stage_shard_layer(s, i, t, Wf, bf, W, W + stage_weight_len(s, i));
        else stage_unshard_layer(s, i, t, W, W + stage_weight_len(s, i), Wf, bf);
    }
    if (!s->has_head) return;
    size_t n = stage_full_len(s, s->n_layers);
    float *f = full + stage_full_off(s, s->n_layers), *l = local + stage_layer_off(s, s->n_layers);
    memcpy(to_shard ? l : f, to_shard ? f : l, sizeof(float) * n);
}
void stage_shard(const Stage *s, int t, const float *full, float *local) { stage_copy(s, t, (float *)full, local, 1); }
void stage_unshard(const Stage *s, int t, const float *local, float *full) {
    stage_copy(s, t, full, (float *)local, 0);
}

void stage_tensor_name(const Stage *s, size_t index, char *out, size_t n) {
    size_t at = index;
    for (int i = 0; i < s->n_layers; i++) {
        size_t w = stage_weight_len(s, i), size = stage_layer_len(s, i);
        if (at >= size) {
            at -= size;
            continue;
        }
        int h = stage_out_w(s, i), k = stage_in_w(s, i), t = s->tp_rank, H = s->H;
        size_t whole = at < w ? at : at - w;  // the element's index in the whole tensor
        if (s->kind[i] == TP_COL) whole += (size_t)t * (at < w ? (size_t)h * k : (size_t)h);
        if (s->kind[i] == TP_ROW && at < w) whole = at / (size_t)k * (size_t)H + (size_t)t * k + at % (size_t)k;
        snprintf(out, n, "layers.%d.%s[%zu]", s->lo + i, at < w ? "weight" : "bias", whole);
        return;
    }
    size_t CH = (size_t)s->C * s->H;
    if (at < CH) snprintf(out, n, "head.weight[%zu]", at);
    else snprintf(out, n, "head.bias[%zu]", at - CH);
}

// ---- rules ----

int tensor_rules(const TrainConfig *c, Plan *p, Err *e) {
    long long T = p->T, H = c->hidden;
    p->tensor.algo =
        c->ddp.allreduce == ALLREDUCE_AUTO ? ALLREDUCE_MPI : c->ddp.allreduce;  // (the facts may change it)
    if (T == 1) return 0;
    if (H % T && H < T)  // (no multiple of T below H: one to offer, not "4 or 4")
        return refuse(e,
                      "train: --hidden %lld is not divisible by --tp %lld (each rank holds H/T features of every "
                      "split layer): use --hidden %lld, or a --tp that divides %lld",
                      H, T, T, H);
    if (H % T)
        return refuse(e,
                      "train: --hidden %lld is not divisible by --tp %lld (each rank holds H/T features of every "
                      "split layer): use --hidden %lld or %lld, or a --tp that divides %lld",
                      H, T, H / T * T, H / T * T + T, H);
    p->tensor.message = p->pipelined ? c->tensor.tp_message : 0;  // (0: TP_MESSAGE_FULL, no messages)
    return 0;
}

double tensor_shm_bytes(const TrainConfig *c, const Plan *p) {
    if (p->T == 1 || p->tensor.algo != ALLREDUCE_SHM || p->tensor.nccl) return 0;
    return (double)p->rows * (double)(c->hidden > p->inputs ? c->hidden : p->inputs) * sizeof(float);
}

// Why the nodes' /dev/shm cannot hold the groups' windows ("" when they can): every rank's (a tmpfs too
// small, as Docker's 64 MB default, ends the job with SIGBUS on first touch), summed over each node's
// ranks, against that node's free bytes. what: "train", or "" (auto asks only whether).
static void shm_room(const TrainConfig *c, const Facts *f, const Plan *p, const char *what, char *why, size_t n) {
    const Hardware *d = f->devices;
    why[0] = 0;
    for (int r = 0; r < p->world && !why[0]; r++) {
        int node_ranks = 0;
        for (int q = 0; q < p->world; q++) node_ranks += d->node_of[q] == d->node_of[r];
        // (every group is on one node: only the room can be short)
        comm_shm_unfit(what, p->T, p->T, node_ranks * tensor_shm_bytes(c, p), node_ranks, d->shm_free[r], why, n);
    }
}

int tensor_rules_facts(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    p->tensor.algo = c->ddp.allreduce == ALLREDUCE_AUTO ? ALLREDUCE_MPI : c->ddp.allreduce;
    if (p->T == 1 || !f->devices) return 0;
    // over NCCL (devcomm_allreduce_sum) with --transport nccl: every rank has a GPU of its own
    p->tensor.nccl = p->transport == TRANSPORT_NCCL;
    if (p->tensor.nccl && !p->data_parallel && seen_typed(e->seen, "allreduce"))
        return refuse(e, "train: --transport nccl sums the tensor-parallel group over NCCL, and --allreduce asks "
                         "for another way: drop one of them");
    if (p->tensor.nccl) return 0;
    int apart = -1;  // a rank not on the node of its group's first rank
    for (int r = 0; r < p->world && apart < 0; r++)
        if (f->devices->node_of[r] != f->devices->node_of[r - r % p->T]) apart = r;
    if (c->ddp.allreduce == ALLREDUCE_AUTO)
        p->tensor.algo = p->device == DEVICE_CPU && apart < 0 ? ALLREDUCE_SHM : ALLREDUCE_MPI;
    if (c->ddp.allreduce == ALLREDUCE_SHM && apart >= 0)
        return refuse(e,
                      "train: --allreduce shm needs each tensor-parallel group of %d ranks on one node, and rank %d is "
                      "not on rank %d's: use --allreduce mpi or ring",
                      p->T, apart, apart - apart % p->T);
    if (p->tensor.algo != ALLREDUCE_SHM) return 0;
    char why[300];
    shm_room(c, f, p, c->ddp.allreduce == ALLREDUCE_AUTO ? "" : "train", why, sizeof why);
    if (why[0] && c->ddp.allreduce == ALLREDUCE_AUTO) p->tensor.algo = ALLREDUCE_MPI;
    return why[0] && c->ddp.allreduce == ALLREDUCE_SHM ? refuse(e, "%s", why) : 0;
}

// ---- sizes ----

double tensor_layer_floats(const TrainConfig *c, const Plan *p, int vs, int i) {
    double H = (double)c->hidden, C = (double)c->classes, fan = i == 0 && p->lo[vs] == 0 ? (double)p->inputs : H;
    int layers = plan_layers(p, vs), T = p->T > 1 ? p->T : 1, kind = i < layers ? tp_layer_kind(T, layers, i) : -1;
    double h = H / T;
    if (i == layers) return C * H + C;
    MoeSpec moe = {.experts = (int)c->moe.experts, .every = (int)c->moe.every};
    moe.shards = p->expert.N;  // --ep: the router and E/N experts (moe_held)
    if (moe_layer(&moe, p->lo[vs] + i)) return (double)moe_held_len(&moe, (int)H);
    // model.h's pairs: column H/T outputs, row H/T inputs (bias whole), or whole
    return kind == TP_COL ? h * fan + h : kind == TP_ROW ? H * h + H : H * fan + H;
}

double tensor_params(const TrainConfig *c, const Plan *p, int vs) {
    int layers = plan_layers(p, vs), head = vs == p->S - 1;
    double n = 0;
    for (int i = 0; i < layers + head; i++) n += tensor_layer_floats(c, p, vs, i);
    return n;
}

double tensor_out_widths(const TrainConfig *c, const Plan *p, int vs, int from, int to) {
    int n = plan_layers(p, vs), T = p->T > 1 ? p->T : 1;
    double w = 0;
    for (int i = from; i < to; i++) w += tp_layer_kind(T, n, i) == TP_COL ? (double)(c->hidden / T) : (double)c->hidden;
    return w;
}

double tensor_allreduce_floats(const TrainConfig *c, const Plan *p, int vs) {
    double H = (double)c->hidden, in = p->lo[vs] == 0 ? (double)p->inputs : H, rows = p->rows, n = 0;
    int layers = plan_layers(p, vs), ckpt = p->pipe.ckpt;
    for (int i = 0; i < layers && p->T > 1; i++) {
        int kind = tp_layer_kind(p->T, layers, i);
        if (kind == TP_ROW) n += rows * H * (ckpt ? 2 : 1);  // the forward's (and the recompute's) sum
        // the backward's input gradient; the model's first layer computes none
        if (kind == TP_COL && !(i == 0 && p->lo[vs] == 0)) n += rows * (i == 0 ? in : H);
    }
    return n;
}

// ---- set-up ----

void tensor_setup(const Plan *p, TpGroup *g, Comm *grid, const Backend *be, Stage *local, int n_local) {
    size_t most = (size_t)p->rows * (size_t)(local[0].H > p->inputs ? local[0].H : p->inputs);
    tp_setup(g, grid, be, p->tensor.algo, p->tensor.nccl, most);
    for (int k = 0; k < n_local; k++) tp_attach(g, &local[k]);
    // a pipeline message: a micro-batch's rows x H (bf16: packed in pairs), TP_MESSAGE_REPS round trips each way
    size_t n = stage_wire_floats(&local[0], (size_t)p->rows * (size_t)local[0].H);
    tp_choose_message(g, grid, p->tensor.message, n, TP_MESSAGE_REPS);
}

// ---- report ----

static const char *algo_name(const Plan *p, char *buf, size_t n) {
    if (p->tensor.nccl) snprintf(buf, n, "nccl");
    else choice_name(ALLREDUCE_CHOICES, p->tensor.algo, buf, n);
    return buf;
}

void tensor_report_header(const Plan *p) {
    char algo[32];
    if (p->T == 1) return;
    printf("tensor parallel: grid %d stage%s x %d replica%s x %d tp = %d ranks (rank = group x %d + tp rank) | "
           "layers in column/row pairs, an odd last layer and the head whole on every rank | all-reduce %s\n",
           p->K, p->K == 1 ? "" : "s", p->D, p->D == 1 ? "" : "s", p->T, p->world, p->T,
           algo_name(p, algo, sizeof algo));
}

void tensor_report_messages(const Plan *p, const TpGroup *g) {
    if (p->T == 1 || !p->pipelined) return;
    const char *way = g->message == TP_MESSAGE_SLICE ? "slice" : "full";
    if (g->timed)
        printf("tensor parallel: pipeline messages %s, kept by --tp-message auto (one message timed each way at "
               "start-up: full %.3f ms, slice %.3f ms)\n",
               way, g->full_ms, g->slice_ms);
    else if (p->tensor.message == TP_MESSAGE_AUTO)  // one stage: nothing to time
        printf("tensor parallel: pipeline messages %s (--tp-message auto: one stage, no message to time)\n", way);
    else printf("tensor parallel: pipeline messages %s (--tp-message %s)\n", way, way);
}

void tensor_report_fill(TensorReport *r, const Plan *p, const TpGroup *g, double calls, double floats, double seconds,
                        int n_run, double step_ms) {
    memset(r, 0, sizeof *r);
    algo_name(p, r->algo, sizeof r->algo);
    r->message = g->message;
    r->timed = g->timed;
    r->full_ms = g->full_ms;
    r->slice_ms = g->slice_ms;
    if (p->T == 1) return;
    double n = (double)n_run, v[3] = {calls / n, floats * sizeof(float) / n, seconds};
    comm_allreduce_sum_double(v, 3, MPI_COMM_WORLD);
    r->calls = v[0] / p->world;
    r->bytes = v[1] / p->world;
    r->ms = v[2] / p->world * 1e3;
    r->share = r->ms / step_ms;
}

void tensor_report_text(const Plan *p, const TensorReport *r) {
    if (p->T == 1) return;
    char b[32];  // traffic, in decimal units
    printf("tensor parallel: %.0f all-reduces/step per rank | %s | %.2f ms/step = %.0f%% of the step (%s)\n",
           r->calls, fmt_bytes(r->bytes, b, sizeof b), r->ms, 100 * r->share, r->algo);
}

void tensor_report_json(cJSON *o, const Plan *p, const TensorReport *r) {
    if (p->T == 1) return;
    cJSON_AddNumberToObject(o, "tp", p->T);
    cJSON_AddStringToObject(o, "tp_allreduce", r->algo);
    cJSON_AddNumberToObject(o, "tp_allreduces_per_step", r->calls);
    cJSON_AddNumberToObject(o, "tp_allreduce_bytes_per_step", r->bytes);
    cJSON_AddNumberToObject(o, "tp_allreduce_ms_per_step", r->ms);
    cJSON_AddNumberToObject(o, "tp_allreduce_share", r->share);
    if (!p->pipelined) return;
    cJSON_AddStringToObject(o, "tp_message", r->message == TP_MESSAGE_SLICE ? "slice" : "full");
    cJSON_AddBoolToObject(o, "tp_message_timed", r->timed);
    if (!r->timed) return;
    cJSON_AddNumberToObject(o, "tp_message_full_ms", r->full_ms);
    cJSON_AddNumberToObject(o, "tp_message_slice_ms", r->slice_ms);
}

// ---- price ----

TensorPiece tensor_price(const Plan *p, int vs, int i, double rows, double fan_in, double H) {
    int T = p->T, kind = T > 1 ? tp_layer_kind(T, plan_layers(p, vs), i) : TP_FULL;
    TensorPiece t = {.kind = kind, .in = fan_in, .out = H};
    if (kind == TP_COL) t.out = H / T;
    if (kind == TP_ROW) {
        t.in = fan_in / T;
        t.fwd_floats = rows * H;
    }
    if (kind == TP_COL && p->lo[vs] + i > 0) t.bwd_floats = rows * fan_in;
    return t;
}

int tensor_price_algo(int shm_measured) { return shm_measured ? ALLREDUCE_SHM : ALLREDUCE_MPI; }
