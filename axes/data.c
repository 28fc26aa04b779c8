// axes/data.c: data parallelism, the axis (axes/axis.h's contract): its rules, sizes, set-up, report part
// and price; and its runtime, the lesson of PyTorch DDP: buckets over the flat gradient buffer, the
// gradient hook that starts a bucket's all-reduce the moment its last layer's gradient is final, and the
// measured overlap of that communication with the backward pass. ZeRO 1 to 3 (axes/zero.c) shard what
// the buckets sum and take the step over through ShardOps; this file knows the levels only as numbers.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "base/data.h"
#include "axes/data.h"
#include "axes/tensor.h"  // a rank's shards of each layer (tensor_layer_floats)
#include "axes/expert.h"  // the experts a rank holds (expert_held_floats)
#include "comms/hier.h"   // comm_hier_layout: whether the replicas lie node after node
#include "base/util.h"

static size_t layer_off(const Stage *s, int j) { return stage_layer_off(s, j); }
static size_t layer_len(const Stage *s, int j) { return stage_layer_len(s, j); }

static Bucket *add_bucket(GradSync *g, size_t off, size_t n, int lo, int hi) {
    g->b = realloc(g->b, sizeof(Bucket) * (size_t)(g->nb + 1));
    CHECK(g->b, "out of memory building buckets");
    Bucket *b = &g->b[g->nb++];
    memset(b, 0, sizeof *b);
    b->off = off;
    b->n = n;
    b->lo = lo;
    b->hi = hi;
    b->comm = g->comm;
    b->algo = g->algo;
    return b;
}

// --ep: MoE layer j's experts (moe.h: after its router) in a bucket summed over the replicas holding the
// same experts; by MPI's row where the sync's own needs the dp group's windows or node layout (shm, hier).
static void add_expert_bucket(GradSync *g, int j) {
    const Stage *s = g->s;
    size_t router = moe_router_len(s->H, s->moe->spec.experts);
    Bucket *b = add_bucket(g, layer_off(s, j) + router, layer_len(s, j) - router, j, j + 1);
    b->comm = g->peers;
    b->algo = g->algo == ALLREDUCE_RING ? ALLREDUCE_RING : ALLREDUCE_MPI;
}
static int expert_layer(const GradSync *g, int j) { return g->peers && j < g->s->n_layers && moe_is(g->s->moe, j); }

// How --trace and --timeline draw a bucket's collective: an all-reduce, or ZeRO-1's reduce-scatter.
static int span_kind(const GradSync *g) { return g->scatter ? EV_REDUCE_SCATTER : EV_GRAD_ALLREDUCE; }

// Naive sync: one bucket (one tensor) reduced to completion before the next starts.
static void run_blocking(GradSync *g, Bucket *b) {
    double t0 = now_sec();
    float *x = g->s->grads + b->off;
    if (g->scatter) g->rs_bytes += (double)b->n * sizeof(float);
    if (g->scatter) comm_reduce_scatter(b->comm, x, b->n, 1.0f, b->algo);
    else comm_allreduce(b->comm, x, b->n, 1.0f, b->algo);
    g->spans[g->n_spans++] = (Span){t0, now_sec(), span_kind(g), (double)b->n * sizeof(float)};
    g->calls++;
}

static void start(GradSync *g, Bucket *b) {
    Comm *c = b->comm;
    float *x = g->s->grads + b->off;
    if (g->scatter) g->rs_bytes += (double)b->n * sizeof(float);
    // A plain sum: each replica's loss gradient is already scaled by 1 / (rows of the whole step
    // over all replicas) (Stage.grad_scale), so the sum IS the average gradient, and the collective
    // saves a pass over the buffer (PyTorch's gradient pre-division does the same).
    b->req = g->scatter ? comm_reduce_scatter_start(c, x, b->n, 1.0f, b->algo)
                        : comm_allreduce_start(c, x, b->n, 1.0f, b->algo);
    g->spans[g->n_spans++] = (Span){now_sec(), 0, span_kind(g), (double)b->n * sizeof(float)};
    g->calls++;
}

// The gradient hook: called by stage_backward after each layer's dW/db (head first, then down).
static void on_layer_grad(void *ctx, int layer) {
    GradSync *g = ctx;
    if (g->compressed) return;               // --compress: every bucket after the backward (compress_finish)
    if (g->s->det && !g->det_pair) return;  // --deterministic: no gradient is whole before the step's end (det_sum)
    if (g->s->det && g->final) stage_det_finish_layer(g->s, layer);  // this replica's rows: its half of the tree
    // (--ep: an MoE layer's router and experts are two buckets of the same layer)
    while (g->final && g->next < g->nb && layer == g->b[g->next].lo) start(g, &g->b[g->next++]);
    comm_progress();  // move every bucket in flight along before the next layer's gemms
}

// This stage's subtrees of every layer, as (layer, level, start) triples and their floats one after
// the other, for det_sum's all-gather.
static void det_pack(const Stage *s, long *hdr, float *v) {
    for (int j = 0; j < s->n_layers + s->has_head; j++) {
        const DetTree *t = &s->det->tree[j];
        for (int i = 0; i < t->n; i++) {
            *hdr++ = j; *hdr++ = t->nodes[i].level; *hdr++ = t->nodes[i].start;
            memcpy(v, t->nodes[i].v, sizeof(float) * t->len);
            v += t->len;
        }
    }
}

// --deterministic: the replicas' sum as the rows' tree (base/det.h). Every replica's subtrees go to every replica (an
// all-gather) and each adds the others' into its own tree, whose shape the rows alone decide: every replica ends with
// the bits one process summing all the rows would have. (ZeRO-1 then updates its shard of the whole gradient, which
// every rank holds; ZeRO-2 and 3 fold the trees into their shards, zero.c.)
void gradsync_det_gather(GradSync *g) {
    Stage *s = g->s;
    int D = g->comm->replicas, me = g->comm->replica;
    long mine[2] = {0, 0};  // subtrees, floats
    for (int j = 0; j < s->n_layers + s->has_head; j++) {
        mine[0] += s->det->tree[j].n;
        mine[1] += (long)s->det->tree[j].n * (long)s->det->tree[j].len;
    }
    long *all = xmalloc(sizeof(long) * 2 * (size_t)D); MPI_Request q;
    MPI_CHECK(MPI_Iallgather(mine, 2, MPI_LONG, all, 2, MPI_LONG, g->comm->dp, &q));
    wd_wait_all(&q, g->comm->dp, "an all-gather");
    int *hn = xmalloc(sizeof(int) * 4 * (size_t)D), *hd = hn + D, *fn = hn + 2 * D, *fd = hn + 3 * D;
    long nh = 0, nf = 0;
    for (int r = 0; r < D; r++) {
        CHECK(all[2 * r + 1] < 1L << 30, "--deterministic: %ld floats of subtrees from one replica", all[2 * r + 1]);
        hn[r] = (int)(3 * all[2 * r]); hd[r] = (int)nh; fn[r] = (int)all[2 * r + 1]; fd[r] = (int)nf;
        nh += hn[r]; nf += fn[r];
    }
    long *hdr = xmalloc(sizeof(long) * (size_t)(nh + 1));
    float *v = xmalloc(sizeof(float) * (size_t)(nf + 1));
    det_pack(s, hdr + hd[me], v + fd[me]);
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hdr, hn, hd, MPI_LONG, g->comm->dp, &q));
    wd_wait_all(&q, g->comm->dp, "an all-gather");
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v, fn, fd, MPI_FLOAT, g->comm->dp, &q));
    wd_wait_all(&q, g->comm->dp, "an all-gather");
    for (int r = 0; r < D; r++) {
        const float *x = v + fd[r];
        for (int i = 0; r != me && i < hn[r]; i += 3) {
            const long *h = hdr + hd[r] + i;
            DetTree *t = &s->det->tree[h[0]];
            float *buf = det_tree_buffer(t);
            memcpy(buf, x, sizeof(float) * t->len);
            x += t->len;
            det_tree_add(t, (int)h[1], h[2], buf);
        }
    }
    free(all); free(hn); free(hdr); free(v);
}

static void det_sum(GradSync *g) {
    double t0 = now_sec();
    gradsync_det_gather(g);
    stage_det_finish(g->s);
    g->spans[g->n_spans++] = (Span){t0, now_sec(), 0, 0};  // one collective: the all-gathers and the tree
    g->calls++;
}

void gradsync_init(GradSync *g, Comm *c, Comm *peers, Stage *s, int sync, int algo, double bucket_bytes) {
    memset(g, 0, sizeof *g);
    g->comm = c;
    g->peers = peers;
    g->s = s;
    g->sync = sync;
    g->algo = algo;
    g->D = c->replicas;
    int top = s->n_layers + (s->has_head ? 1 : 0);  // local layers j < top; j == n_layers is the head
    if (sync == SYNC_NAIVE) {                       // one per parameter tensor, in the order backward finishes them
        for (int j = top - 1; j >= 0; j--) {
            size_t w = stage_weight_len(s, j);
            size_t off = layer_off(s, j), len = layer_len(s, j);
            if (expert_layer(g, j)) {  // --ep: the experts, then the router
                add_expert_bucket(g, j);
                add_bucket(g, off, moe_router_len(s->H, s->moe->spec.experts), j, j + 1);
                continue;
            }
            add_bucket(g, off + w, len - w, j, j + 1);  // bias
            add_bucket(g, off, w, j, j + 1);            // weight
        }
    } else {  // whole layers, newest first; a bucket closes once it holds bucket_bytes (as PyTorch DDP's cap)
        int hi = top;
        size_t bytes = 0;
        for (int j = top - 1; j >= 0; j--) {
            if (expert_layer(g, j)) {  // --ep: the layers above closed, then the router's bucket and the experts'
                if (hi > j + 1) add_bucket(g, layer_off(s, j + 1), layer_off(s, hi) - layer_off(s, j + 1), j + 1, hi);
                add_bucket(g, layer_off(s, j), moe_router_len(s->H, s->moe->spec.experts), j, j + 1);
                add_expert_bucket(g, j);
                hi = j;
                bytes = 0;
                continue;
            }
            bytes += layer_len(s, j) * sizeof(float);
            if (bytes >= bucket_bytes || j == 0) {
                add_bucket(g, layer_off(s, j), layer_off(s, hi - 1) + layer_len(s, hi - 1) - layer_off(s, j), j, hi);
                hi = j;
                bytes = 0;
            }
        }
        s->hooks.on_layer_grad = on_layer_grad;
        s->hooks.hook_ctx = g;
    }
    g->spans = xcalloc((size_t)g->nb * 2, sizeof(Span));
}

void gradsync_free(GradSync *g) {
    if (g->sharded) g->sharded->free(g);
    if (g->s && g->s->hooks.hook_ctx == g) {
        g->s->hooks.on_layer_grad = NULL;
        g->s->hooks.hook_ctx = NULL;
    }
    free(g->b);
    free(g->spans);
    memset(g, 0, sizeof *g);
}

void gradsync_begin_step(GradSync *g) {
    g->next = 0;
    g->final = 0;
    g->calls = 0;
    g->n_spans = 0;
    g->ag_bytes = g->rs_bytes = 0;
    if (g->sharded && g->sharded->begin_step) g->sharded->begin_step(g);
}

void gradsync_set_final(GradSync *g, int final) { g->final = final; }

void gradsync_finish(GradSync *g) {
    g->s->be->sync();  // the compute's end on the device (a GPU's queue drained), not when the host queued it
    g->t_compute_end = now_sec();
    if (g->s->det && g->sharded && g->sharded->finish) {  // ZeRO-2, 3: the trees folded into the shards (zero.c)
        g->sharded->finish(g);
        return;
    }
    if (g->s->det && !g->det_pair) {
        det_sum(g);
        return;
    }
    if (g->s->det) stage_det_finish(g->s);  // (the layers no hook folded: naive sync's)
    if (g->sharded && g->sharded->finish) {
        g->sharded->finish(g);
        return;
    }
    if (g->compressed) {  // --compress (axes/compress.c)
        g->compressed(g);
        return;
    }
    if (g->sync == SYNC_NAIVE) {  // the lesson's baseline: one blocking collective per tensor
        for (int i = 0; i < g->nb; i++) run_blocking(g, &g->b[i]);
        return;
    }
    for (int i = g->next; i < g->nb; i++) start(g, &g->b[i]);  // (the hooks started them all already)
    g->next = g->nb;
    for (int i = 0; i < g->nb; i++) g->spans[i].t1 = comm_wait(g->b[i].req);  // started in bucket order
}

long gradsync_optimizer_step(GradSync *g, const OptimStep *o) {
    if (g->sharded) return g->sharded->optimizer_step(g, o);  // ZeRO: this rank's shards
    return stage_optimizer_step(g->s, o);
}

double gradsync_grad_sumsq(GradSync *g, int replicated_too, DetSum *exact) {
    Stage *s = g->s;
    double sum = 0;
    if (!g->sharded && g->peers) {  // --ep: each bucket on the first rank of the group that summed it
        for (int i = 0; i < g->nb; i++) {
            const Bucket *b = &g->b[i];
            if (!b->comm->replica) sum += stage_grad_sumsq(s, s->grads + b->off, b->off, b->n, replicated_too, exact);
        }
        return sum;
    }
    if (!g->sharded) return g->comm->replica ? 0 : stage_grad_sumsq(s, s->grads, 0, s->n_params, replicated_too, exact);
    for (int i = 0; i < g->nb; i++) {
        const Bucket *b = &g->b[i];
        sum += stage_grad_sumsq(s, g->sharded->grad_shard(g, i), b->off + b->shard_off, b->shard_n, replicated_too,
                                exact);
    }
    return sum;
}

void gradsync_grad_scale(GradSync *g, float a) {
    Stage *s = g->s;
    if (!g->sharded) {
        s->be->scale(s->grads, a, s->n_params);
        return;
    }
    for (int i = 0; i < g->nb; i++) s->be->scale(g->sharded->grad_shard(g, i), a, g->b[i].shard_n);
}

void gradsync_gather_grads(GradSync *g) {
    if (g->sharded) g->sharded->gather_grads(g);
}

void gradsync_unshard(GradSync *g) {
    if (g->sharded) g->sharded->unshard(g);
}

void gradsync_reshard(GradSync *g) {
    if (g->sharded) g->sharded->reshard(g);
}

static int cmp_span(const void *a, const void *b) {
    double x = ((const Span *)a)->t0, y = ((const Span *)b)->t0;
    return (x > y) - (x < y);
}

void gradsync_end_step(GradSync *g, double compute_end, double *comm_s, double *exposed_s) {
    // Union of the spans (they overlap when several buckets are in flight), and its part after
    // compute_end.
    qsort(g->spans, (size_t)g->n_spans, sizeof(Span), cmp_span);
    double total = 0, exposed = 0, a = 0, z = -1;
    for (int i = 0; i <= g->n_spans; i++) {
        if (i < g->n_spans && g->spans[i].t0 <= z) {
            if (g->spans[i].t1 > z) z = g->spans[i].t1;
            continue;
        }
        if (z > a) {  // close the merged interval [a, z]
            total += z - a;
            double from = a > compute_end ? a : compute_end;
            if (z > from) exposed += z - from;
        }
        if (i < g->n_spans) {
            a = g->spans[i].t0;
            z = g->spans[i].t1;
        }
    }
    *comm_s = total;
    *exposed_s = exposed;
    g->step_ag = g->ag_bytes;
    g->step_rs = g->rs_bytes;
    g->step_calls = g->calls;
}

uint64_t stage_param_checksum(const Stage *s, int shared_only) {
    float *h = xmalloc(s->n_params * sizeof(float));
    s->be->to_host(h, s->params, s->n_params * sizeof(float));
    uint64_t x = mix64(s->n_params);
    int ep = shared_only && s->moe && s->moe->spec.shards > 1;
    for (int j = 0; j < s->n_layers + s->has_head; j++) {
        size_t off = stage_layer_off(s, j), n = stage_layer_len(s, j);
        if (ep && j < s->n_layers && moe_is(s->moe, j)) n = moe_router_len(s->H, s->moe->spec.experts);
        for (size_t i = off; i < off + n; i++) {
            uint32_t bits;
            memcpy(&bits, &h[i], sizeof bits);
            x = mix64(x ^ bits);
        }
    }
    free(h);
    return x;
}

// ---- rules ----

// --bucket-mb's default (0): the gradients of DATA_BUCKET_LAYERS hidden layers (a rank's shards of them), at
// most PyTorch DDP's 25 MiB. A bucket per few layers starts the first all-reduce early in the backward and
// leaves only a short last one after it, so the overlap shows on small models too; big ones get PyTorch's cap.
double data_bucket_mb(const TrainConfig *c, const Degrees *d) {
    if (c->ddp.bucket_mb > 0) return c->ddp.bucket_mb;
    double h = c->hidden, layer = h * h / (d->tp > 0 ? d->tp : 1) + h;  // floats of one hidden layer on a rank
    return fmin(DATA_BUCKET_LAYERS * layer * sizeof(float) / (1024 * 1024), 25);
}

int data_compress_parse(const char *text, double *arg) {
    *arg = 0;
    if (!text[0]) return COMPRESS_NONE;
    if (!strcmp(text, "sign")) return COMPRESS_SIGN;
    int method = !strncmp(text, "topk:", 5) ? COMPRESS_TOPK : !strncmp(text, "powersgd:", 9) ? COMPRESS_POWERSGD : -1;
    if (method < 0) return -1;
    const char *num = text + (method == COMPRESS_TOPK ? 5 : 9);
    char *end;
    *arg = strtod(num, &end);
    return end == num || *end || !isfinite(*arg) ? -1 : method;
}

void data_part(const TrainConfig *c, const Degrees *d, Plan *p) {
    p->data = (DataPlan){
        .zero = d->zero, .sync = c->ddp.ddp_sync, .algo = c->ddp.allreduce, .bucket_mb = data_bucket_mb(c, d)};
    p->data.bucket_layers = c->ddp.bucket_mb <= 0 && p->data.bucket_mb < 25 ? DATA_BUCKET_LAYERS : 0;
    p->data.sync_every = p->data_parallel ? (int)c->ddp.sync_every : 0;
    p->data.outer_lr = c->ddp.outer_lr;
    p->data.outer_momentum = c->ddp.outer_momentum;
    double arg;
    int method = p->data_parallel ? data_compress_parse(c->ddp.compress, &arg) : COMPRESS_NONE;
    p->data.compress = method < 0 ? COMPRESS_NONE : method;  // (-1: compress_rules refuses the text)
    p->data.topk = method == COMPRESS_TOPK ? arg : 0;
    p->data.psgd_rank = method == COMPRESS_POWERSGD && arg >= 1 && arg <= 1 << 20 && arg == floor(arg) ? (int)arg : 0;
}

// --sync-every's rules: what local SGD leaves out (ZeRO's shards, --deterministic's one sum order, a
// checkpoint between two outer steps), and its outer optimizer's flags only with it.
static int localsgd_rules(const TrainConfig *c, const Plan *p, Err *e) {
    long long h = c->ddp.sync_every;
    if (!h && (seen_typed(e->seen, "outer-lr") || seen_typed(e->seen, "outer-momentum")))
        return refuse(e, "train: --outer-lr and --outer-momentum set local SGD's outer optimizer: add --sync-every H, "
                         "or drop them");
    if (!h || !p->data_parallel) return 0;
    if (c->ddp.zero)
        return refuse(e, "train: --sync-every %lld keeps a whole model on every replica, and --zero %lld shards it: "
                         "drop one of them", h, (long long)c->ddp.zero);
    if (seen_typed(e->seen, "bucket-mb") || seen_typed(e->seen, "ddp-sync"))
        return refuse(e, "train: --sync-every %lld sums the whole model once every H steps, in no buckets: drop "
                         "--bucket-mb and --ddp-sync", h);
    if (c->guard.clip_grad > 0)
        return refuse(e, "train: --clip-grad clips the norm of the replicas' summed gradients, and --sync-every %lld "
                         "sums none: drop one of them", h);
    if (c->gemm.deterministic)
        return refuse(e, "train: --deterministic sums the replicas' gradients in one order, and --sync-every %lld sums "
                         "none: drop one of them", h);
    if (c->ckpt.save_every % h)
        return refuse(e, "train: --save-every %lld is no multiple of --sync-every %lld: a checkpoint is taken at an "
                         "outer step (every replica at the anchor); use --save-every %lld",
                      (long long)c->ckpt.save_every, h, ((long long)c->ckpt.save_every / h + 1) * h);
    if (c->ckpt.save_best)
        return refuse(e, "train: --save-best saves at an epoch's end, between --sync-every %lld's outer steps: drop "
                         "--save-best", h);
    return 0;
}

int data_rules(const TrainConfig *c, const Degrees *d, Plan *p, Err *e) {
    data_part(c, d, p);
    if (p->data_parallel && c->ddp.bucket_mb <= 0 && seen_set(e->seen, "bucket-mb"))
        return refuse(e,
                      "train: --bucket-mb %g must be positive: give a bucket capacity in MiB, e.g. 25, or leave it "
                      "out (a bucket per 2 layers)",
                      c->ddp.bucket_mb);
    if (c->ddp.zero >= 2 && c->ddp.ddp_sync == SYNC_NAIVE)
        return refuse(e,
                      "train: --zero %lld reduce-scatters buckets while the backward runs, and --ddp-sync naive has "
                      "none: drop --ddp-sync naive (bucketed is the default)",
                      (long long)c->ddp.zero);
    if (c->ddp.ddp_sync == SYNC_NAIVE && seen_typed(e->seen, "bucket-mb"))
        return refuse(e, "train: --bucket-mb applies to --ddp-sync bucketed (naive all-reduces one tensor at a time): "
                         "drop one of them");
    return localsgd_rules(c, p, e);
}

// Why shm windows cannot hold this plan's parameters and gradients ("" when they can), from the
// facts of every rank, as comms.c's comm_shared_require would find it on the lowest rank that cannot:
// each stage's replicas on one node, /dev/shm room for every rank of a node (the tensor-parallel
// group's windows included: tensor_rules_facts decides them first). what: "train", or ""
// (auto asks only whether).
static void shm_unfit(const TrainConfig *c, const Facts *f, const Plan *p, const char *what, char *why, size_t n) {
    const Hardware *d = f->devices;
    double *bytes = xcalloc((size_t)p->world, sizeof(double));  // each rank's windows (params and grads, or ZeRO's)
    for (int r = 0; r < p->world; r++) {
        bytes[r] = tensor_shm_bytes(c, p);  // the tensor-parallel group's window, when in shm too
        for (int k = 0, stage = p->pipelined ? plan_rank_stage(p, r) : 0; k < p->V; k++)
            bytes[r] += data_shm_floats(c, p, plan_vstage(p, stage, k)) * sizeof(float);
    }
    why[0] = 0;
    for (int r = 0; r < p->world && !why[0]; r++) {
        int local = 0, node_ranks = 0;
        double need = 0;
        for (int q = 0; q < p->world; q++) {
            if (d->node_of[q] != d->node_of[r]) continue;
            node_ranks++;
            need += bytes[q];
            // the same stage and tensor-parallel rank: r's dp group
            local += plan_rank_stage(p, q) == plan_rank_stage(p, r) && plan_rank_tp(p, q) == plan_rank_tp(p, r);
        }
        comm_shm_unfit(what, p->D, local, need, node_ranks, d->shm_free[r], why, n);
    }
    free(bytes);
}

// Why --allreduce hier cannot run as meant on this plan's dp groups ("" when it can), as comm_hier_why
// would find it: each stage's replicas on 2 or more nodes, the same number on each, node after node (a
// dp group's ranks in world order are its replicas in order). *L: the replicas per node.
static void hier_unfit(const Facts *f, const Plan *p, char *why, size_t n, int *L) {
    int *nodes = xmalloc(sizeof(int) * (size_t)p->world);
    why[0] = 0;
    for (int r = 0; r < p->world && !why[0]; r++) {
        int D = 0;
        for (int q = 0; q < p->world; q++)  // r's dp group: the same stage and tensor-parallel rank
            if (plan_rank_stage(p, q) == plan_rank_stage(p, r) && plan_rank_tp(p, q) == plan_rank_tp(p, r))
                nodes[D++] = f->devices->node_of[q];
        int N = comm_hier_layout(nodes, D, L);
        if (!N)
            snprintf(why, n, "train: --allreduce hier needs the %d replicas of each stage in equal runs, node after "
                     "node, and rank %d's are not: use --allreduce ring or mpi", p->D, r);
        else if (N < 2)
            snprintf(why, n, "train: --allreduce hier needs the replicas on 2 or more nodes, and the %d of rank %d's "
                     "stage share one: use --allreduce shm or auto", p->D, r);
    }
    free(nodes);
}

int data_rules_facts(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    p->data.algo = c->ddp.allreduce;
    int a = c->ddp.allreduce, L = 0;
    if (!p->data_parallel || !f->devices || (a != ALLREDUCE_SHM && a != ALLREDUCE_HIER && a != ALLREDUCE_AUTO))
        return 0;
    char why[300] = "";
    if (a == ALLREDUCE_AUTO) {  // on the CPU: shm on one node, else hier where 2+ replicas share each node
        p->data.algo = ALLREDUCE_MPI;
        if (p->device != DEVICE_CPU) return 0;
        shm_unfit(c, f, p, "", why, sizeof why);
        if (!why[0]) p->data.algo = ALLREDUCE_SHM;
        else if (hier_unfit(f, p, why, sizeof why, &L), !why[0] && L >= 2) p->data.algo = ALLREDUCE_HIER;
        return 0;
    }
    if (a == ALLREDUCE_HIER) hier_unfit(f, p, why, sizeof why, &L);
    else shm_unfit(c, f, p, "train", why, sizeof why);
    return why[0] ? refuse(e, "%s", why) : 0;
}


// ---- sizes ----

double data_largest_bucket(const TrainConfig *c, const Plan *p, int vs) {
    double cap = p->data.bucket_mb * 1024 * 1024, most = 0, floats = 0;
    int n = plan_layers(p, vs), head = vs == p->S - 1;
    MoeSpec moe = {.experts = (int)c->moe.experts, .every = (int)c->moe.every};
    for (int j = n + head - 1; j >= 0; j--) {
        if (p->expert.N > 1 && j < n && moe_layer(&moe, p->lo[vs] + j)) {  // --ep: the layers above closed, then
            most = fmax(most, fmax(floats, tensor_layer_floats(c, p, vs, j)));  // the MoE layer alone (gradsync_init)
            floats = 0;
            continue;
        }
        floats += tensor_layer_floats(c, p, vs, j);
        if (floats * sizeof(float) >= cap || j == 0) {
            most = floats > most ? floats : most;
            floats = 0;
        }
    }
    return most;
}

double data_shm_floats(const TrainConfig *c, const Plan *p, int vs) {
    int zero = p->data.zero;
    double params = tensor_params(c, p, vs), work = ZERO_BUFS * data_largest_bucket(c, p, vs);
    return zero >= 3 ? 2 * work : zero == 2 ? params + work : 2 * params;
}

void data_sizes(const TrainConfig *c, const Plan *p, int vs, double params, MemNeed *m) {
    double f = sizeof(float);
    // ZeRO shards over the replicas: 1 Adam's moments, 2 the gradients too, 3 the weights too
    int zero = p->data.zero;
    // (--ep: a rank's experts are sharded over their dp/N holders, the rest over all dp)
    double experts = zero >= 1 ? expert_held_floats(c, p, vs) : 0, holders = (double)p->D / p->expert.N;
    double sharded = (params - experts) * f / p->D + experts * f / holders;
    m->weights += zero >= 3 ? sharded : params * f;
    m->grads += zero >= 2 ? sharded : params * f;
    if (c->optimizer != OPTIM_SGD) m->optimizer += 2 * (zero >= 1 ? sharded : params * f);
    // ZeRO-2, 3: the working buckets (axes/zero.c): ZERO_BUFS of gradients, and of gathered weights at 3
    if (zero >= 2) m->buffers += ZERO_BUFS * data_largest_bucket(c, p, vs) * f * (zero >= 3 ? 2 : 1);
}

// ---- set-up ----

// Replicas must start from identical parameters: compare checksums within each dp group and let
// every rank of the world learn the verdict, so all decide alike.
// (ZeRO-3 holds no whole parameters: each rank draws only its shards, from the same options.)
// (--ep: the experts among the replicas holding them, peers; the rest over dp)
static void check_replicas_agree(const Stage *local, int n_local, const Comm *comm, const Comm *peers) {
    double differ[1] = {0};
    for (int k = 0; k < n_local && local[k].params; k++) {
        differ[0] += !comm_same_u64(stage_param_checksum(&local[k], 1), comm->dp);
        if (peers) differ[0] += !comm_same_u64(stage_param_checksum(&local[k], 0), peers->dp);
    }
    comm_allreduce_max_double(differ, 1, MPI_COMM_WORLD);
    if (differ[0])
        user_error("train: the replicas start from different parameters (checksums differ across the dp group): give "
                   "every rank the same --seed and model options");
}

// One gradient sync per local stage (a chunk each, interleaved). --allreduce shm (the plan's choice, from
// every rank's node and /dev/shm): the replicas read each other's gradients (and, for ZeRO-1 and 2,
// parameters) in place, so both move into windows shared by each stage's dp group; ZeRO-2's gradients and
// ZeRO-3's working buckets are zero.c's windows (zero_init).
void data_setup(const Plan *p, Comm *comm, Comm *peers, Stage *local, int n_local, GradSync **sync) {
    const DataPlan *dp = &p->data;
    check_replicas_agree(local, n_local, comm, peers);
    for (int k = 0; k < n_local && comm_algo_windows(dp->algo) && dp->zero < 3; k++) {
        float *params = comm_shared_alloc(comm, local[k].n_params);
        stage_share(&local[k], params, dp->zero >= 2 ? NULL : comm_shared_alloc(comm, local[k].n_params));
    }
    if (dp->algo == ALLREDUCE_HIER) comm_hier_prepare(comm);  // its groups now, not at a bucket's start
    *sync = xcalloc((size_t)n_local, sizeof(GradSync));
    long R = (long)p->rows * p->M;  // a replica's rows in a micro-step
    for (int k = 0; k < n_local; k++) {
        gradsync_init(&(*sync)[k], comm, peers, &local[k], dp->sync, dp->algo, dp->bucket_mb * 1024 * 1024);
        // --deterministic: with 2 replicas, one micro-step and a power of two of rows each, replica 0 holds
        // rows [0, R) and replica 1 [R, 2R): sibling subtrees, whose canonical sum is one add, a + b, which
        // every collective computes for 2 ranks (ring, shm, hier and MPI: IEEE's a + b == b + a). So each
        // layer's tree is folded as its last backward ends, and the buckets sum it as they would without the
        // option, overlapping the backward. Otherwise det_sum all-gathers the subtrees at the step's end.
        (*sync)[k].det_pair = p->D == 2 && p->N == 1 && (R & (R - 1)) == 0;
    }
}

// ---- report ----

static void names(const Plan *p, DataReport *r) {
    choice_name(SYNC_CHOICES, p->data.sync, r->sync, sizeof r->sync);
    choice_name(ALLREDUCE_CHOICES, p->data.algo, r->algo, sizeof r->algo);
}

void data_report_header(const Plan *p, const GradSync *sync, int n_sync) {
    DataReport r;
    names(p, &r);
    int nb = 0;
    size_t shards = 0, params = 0;
    for (int k = 0; k < n_sync; k++) {
        nb += sync[k].nb;
        shards += sync[k].shard_total;
        params += sync[k].s->n_params;
    }
    if (p->data.sync_every) {  // local SGD: no buckets, an outer all-reduce of the whole model every H steps
        printf("data parallel: %d replicas | local SGD: an outer step every %d steps (Nesterov, lr %g, momentum %g) "
               "| all-reduce %s\n",
               p->D, p->data.sync_every, p->data.outer_lr, p->data.outer_momentum,
               p->data.algo == ALLREDUCE_SHM ? "mpi" : r.algo);
        fflush(stdout);
        return;
    }
    printf("data parallel: %d replicas | %s sync, %d %s%s", p->D, r.sync, nb,
           p->data.sync == SYNC_BUCKETED ? "bucket" : "tensor", nb == 1 ? "" : "s");
    char layers[32] = "";  // the default capacity says what it holds
    if (p->data.bucket_layers) snprintf(layers, sizeof layers, ", %d layers", p->data.bucket_layers);
    if (p->data.sync == SYNC_BUCKETED)
        printf(" (cap %.3g MiB%s)%s", p->data.bucket_mb, layers,
               p->pipelined ? p->V > 1 ? " on stage 0's chunks" : " on stage 0" : "");
    printf(" | %s %s", p->data.zero ? "reduce-scatter + all-gather" : "all-reduce", r.algo);
    if (p->data.zero) printf(" | ZeRO-%d: this rank updates %zu of %zu parameters", p->data.zero, shards, params);
    if (p->data.compress == COMPRESS_TOPK)
        printf(" | compressed: top-k %g, all-gathered, error feedback", p->data.topk);
    if (p->data.compress == COMPRESS_POWERSGD)
        printf(" | compressed: PowerSGD rank %d, all-gathered, error feedback", p->data.psgd_rank);
    if (p->data.compress == COMPRESS_SIGN) printf(" | compressed: sign, all-gathered, error feedback");
    printf("\n");
    fflush(stdout);
}

// comm_ms: the time per step during which at least one of this rank's gradient collectives was in flight
// (from its start to the moment its completion was seen; completion is noticed at the next layer boundary
// while the backward runs), averaged over the ranks, median over the steps. comm_hidden: the share of that
// in-flight time that passed while the step's forward/backward work was still running (ddp: this rank's;
// hybrid: any stage of this rank's pipeline, i.e. the cool-down counts), summed over ranks and steps; the
// rest is exposed (the optimizer step waited for it). Naive sync starts after the backward, so in ddp it
// is 0 by construction; ZeRO-1's parameter all-gather is always exposed.
static void fill_comm_time(DataReport *r, const Plan *p, double *comm_s, double *exposed_s, int start, int n,
                           int skip) {
    int world = p->world;
    comm_allreduce_sum_double(comm_s + start, n, MPI_COMM_WORLD);
    comm_allreduce_sum_double(exposed_s + start, n, MPI_COMM_WORLD);
    double tot = 0, exp = 0;
    for (int t = start; t < start + n; t++) {
        comm_s[t] /= world;
        exposed_s[t] /= world;
        if (t >= start + skip) {
            tot += comm_s[t];
            exp += exposed_s[t];
        }
    }
    r->comm_ms = median(comm_s + start + skip, n - skip) * 1e3;
    r->comm_hidden = tot > 0 ? 1.0 - exp / tot : 0;
}

// The optimizer state per rank (Adam's two moments), the largest over the ranks; a replica's buckets and
// collectives per step (the sum over its stages and their chunks); ZeRO's bytes of one step, per rank (the
// largest).
void data_report_fill(DataReport *r, const Plan *p, const Comm *comm, const GradSync *sync, int n_sync, int optimizer,
                      double *comm_s, double *exposed_s, int start, int n, int skip) {
    memset(r, 0, sizeof *r);
    names(p, r);
    fill_comm_time(r, p, comm_s, exposed_s, start, n, skip);
    size_t held = 0;
    double nb[2] = {0, 0}, v[3] = {0};
    for (int k = 0; k < n_sync; k++) {
        held += p->data.zero ? sync[k].shard_total : sync[k].s->n_params;
        nb[0] += sync[k].nb;
        nb[1] += sync[k].step_calls;
        v[1] += sync[k].step_ag;
        v[2] += sync[k].step_rs;
    }
    v[0] = optimizer == OPTIM_ADAM ? 2.0 * sizeof(float) * (double)held : 0;
    comm_allreduce_max_double(v, 3, MPI_COMM_WORLD);
    r->optimizer_bytes = v[0];
    r->allgather_bytes = v[1];
    r->reduce_scatter_bytes = v[2];
    comm_allreduce_sum_double(nb, 2, comm->pp);
    r->buckets = nb[0];
    r->collectives = nb[1];
    r->shm_collectives = comm_shared_count(comm);
}

void data_report_fill_outer(DataReport *r, const Plan *p, int optimizer, double optimizer_floats, int syncs,
                            double seconds, double floats) {
    memset(r, 0, sizeof *r);
    names(p, r);
    double v[3] = {syncs ? seconds / syncs * 1e3 : 0, syncs ? floats / syncs * sizeof(float) : 0,
                   optimizer == OPTIM_ADAM ? 2.0 * sizeof(float) * optimizer_floats : 0};
    comm_allreduce_max_double(v, 3, MPI_COMM_WORLD);
    r->outer_syncs = syncs;
    r->outer_ms = v[0];
    r->outer_bytes = v[1];
    r->optimizer_bytes = v[2];
}

void data_report_text(const Plan *p, const DataReport *r, double weights, double grads, double optimizer) {
    if (!p->data_parallel) return;
    char b[6][32];  // memory in binary units, as `micropp plan` prints it; traffic in decimal (GB/s is 1e9)
    if (p->data.sync_every) {
        printf("local SGD: %.0f outer steps (every %d steps) | %.2f ms each | %s all-reduced per rank each | "
               "optimizer state %s per rank\n", r->outer_syncs, p->data.sync_every, r->outer_ms,
               fmt_bytes(r->outer_bytes, b[0], 32), fmt_bytes_binary(r->optimizer_bytes, b[1], 32));
        return;
    }
    printf("gradient sync: %.0f collectives/step | in flight %.2f ms/step | %.0f%% hidden behind compute | "
           "optimizer state %s per rank\n",
           r->collectives, r->comm_ms, 100 * r->comm_hidden, fmt_bytes_binary(r->optimizer_bytes, b[0], 32));
    char how[64];
    if (p->data.compress == COMPRESS_TOPK) snprintf(how, sizeof how, "top-k %g of each bucket", p->data.topk);
    if (p->data.compress == COMPRESS_POWERSGD) snprintf(how, sizeof how, "PowerSGD rank %d", p->data.psgd_rank);
    if (p->data.compress == COMPRESS_SIGN) snprintf(how, sizeof how, "sign and a scale per matrix");
    if (p->data.compress)
        printf("compressed: %s | %s sent per rank per step, against %s for the exact sum\n", how,
               fmt_bytes(r->compress_sent, b[0], 32), fmt_bytes(r->compress_exact, b[1], 32));
    if (!p->data.zero) return;
    printf("ZeRO-%d per rank: all-gather %s + reduce-scatter %s per step | weights %s, gradients %s, optimizer %s "
           "(+ %s working buckets)\n",
           p->data.zero, fmt_bytes(r->allgather_bytes, b[0], 32), fmt_bytes(r->reduce_scatter_bytes, b[1], 32),
           fmt_bytes_binary(weights, b[2], 32), fmt_bytes_binary(grads, b[3], 32),
           fmt_bytes_binary(optimizer, b[4], 32), fmt_bytes_binary(r->working_bytes, b[5], 32));
}

void data_report_json(cJSON *o, cJSON *mem, const Plan *p, const DataReport *r) {
    if (p->data.zero >= 2) {  // ZeRO-2, 3: the working buckets, apart from the shards
        cJSON_AddNumberToObject(mem, "working", r->working_bytes);
        cJSON_AddNumberToObject(mem, "gathered_weights_peak", r->gathered_peak_bytes);
    }
    if (!p->data_parallel) return;
    if (p->pipelined) cJSON_AddNumberToObject(o, "pp", p->K);
    cJSON_AddNumberToObject(o, "dp", p->D);
    cJSON_AddStringToObject(o, "ddp_sync", r->sync);
    cJSON_AddStringToObject(o, "allreduce", r->algo);
    cJSON_AddNumberToObject(o, "zero", p->data.zero);
    if (p->data.sync_every) {
        cJSON_AddNumberToObject(o, "sync_every", p->data.sync_every);
        cJSON_AddNumberToObject(o, "outer_lr", p->data.outer_lr);
        cJSON_AddNumberToObject(o, "outer_momentum", p->data.outer_momentum);
        cJSON_AddNumberToObject(o, "outer_steps", r->outer_syncs);
        cJSON_AddNumberToObject(o, "outer_ms", r->outer_ms);
        cJSON_AddNumberToObject(o, "outer_bytes", r->outer_bytes);
    }
    if (p->data.sync == SYNC_BUCKETED) cJSON_AddNumberToObject(o, "bucket_mb", p->data.bucket_mb);
    cJSON_AddNumberToObject(o, "bucket_count", r->buckets);
    cJSON_AddNumberToObject(o, "collectives_per_step", r->collectives);
    if (p->data.algo == ALLREDUCE_SHM) cJSON_AddNumberToObject(o, "shm_collectives", r->shm_collectives);
    cJSON_AddNumberToObject(o, "comm_ms", r->comm_ms);
    cJSON_AddNumberToObject(o, "comm_hidden_fraction", r->comm_hidden);
    cJSON_AddNumberToObject(o, "optimizer_bytes_per_rank", r->optimizer_bytes);
    if (p->data.zero) {  // the shards' traffic of one step, per rank (docs/data-parallel.md has the formula)
        cJSON_AddNumberToObject(o, "allgather_bytes_per_step", r->allgather_bytes);
        cJSON_AddNumberToObject(o, "reduce_scatter_bytes_per_step", r->reduce_scatter_bytes);
    }
    if (p->data.zero >= 3) cJSON_AddNumberToObject(o, "prefetched_gathers_per_step", r->prefetches);
    if (p->data.compress) {  // the last step's bytes a rank sent, and what the exact sum's ring would send
        if (p->data.compress == COMPRESS_TOPK) cJSON_AddNumberToObject(o, "compress_topk", p->data.topk);
        if (p->data.compress == COMPRESS_POWERSGD) cJSON_AddNumberToObject(o, "compress_powersgd", p->data.psgd_rank);
        if (p->data.compress == COMPRESS_SIGN) cJSON_AddStringToObject(o, "compress", "sign");
        cJSON_AddNumberToObject(o, "compressed_bytes_per_step", r->compress_sent);
        cJSON_AddNumberToObject(o, "uncompressed_bytes_per_step", r->compress_exact);
    }
}

// ---- price ----

DataTraffic data_price(const TrainConfig *c, const Plan *p, int stage) {
    DataTraffic t = {0};
    int zero = p->data.zero;
    double layer_experts = (double)c->moe.experts / (p->expert.N > 1 ? p->expert.N : 1) * (double)c->hidden *
                           (double)(c->hidden + 1);  // (--ep: an MoE layer's experts on one rank, moe.h)
    for (int k = 0; k < p->V; k++) {
        t.params += tensor_params(c, p, plan_vstage(p, stage, k));
        t.expert_bytes += 4 * expert_held_floats(c, p, plan_vstage(p, stage, k));
    }
    t.bytes = t.params * 4;
    t.epieces = t.expert_bytes > 0 ? t.expert_bytes / (4 * layer_experts) : 0;
    t.peers = p->expert.N > 1 ? p->D / p->expert.N : p->D;
    double bucket = p->data.bucket_mb * 1024 * 1024, layers = (double)p->lo[p->S] / p->K + 1;  // (+1: the head's)
    t.pieces = p->data.sync == SYNC_NAIVE ? 2 * layers : ceil((t.bytes - t.expert_bytes) / fmax(bucket, 4));
    t.zpieces = ceil(layers / fmax(1, floor(bucket / (t.bytes / layers))));  // (whole layers a bucket)
    t.scatter = zero > 0;
    t.per_backward = zero >= 2;
    t.gather_after = zero == 1 || zero == 2;
    t.gathers_around = zero == 3 && p->D > 1;
    t.overlapped = p->data.sync != SYNC_NAIVE;
    return t;
}

int data_price_algo(const Plan *p, int shm_measured) {
    if (p->data.algo != ALLREDUCE_AUTO) return p->data.algo;
    return shm_measured ? ALLREDUCE_SHM : ALLREDUCE_MPI;
}

double data_price_optimizer_params(const Plan *p, const DataTraffic *t) {
    double experts = t->expert_bytes / 4;  // (--ep: ZeRO-1 shards the experts over their holders)
    return p->data.zero && p->D > 1 ? (t->params - experts) / p->D + experts / t->peers : t->params;
}

double data_price_exposed(const DataTraffic *t, double sync_s, double gather_s, double overlap, double window,
                          int backwards) {
    double last = sync_s / fmax(t->per_backward ? t->zpieces : t->pieces, 1);  // the last bucket waits for the
    if (t->per_backward) sync_s *= backwards;                                    // backward's end: never hidden
    return sync_s - overlap * fmin(sync_s - last, window) + gather_s;
}

double data_price_gathers(const DataTraffic *t, double all_s, double overlap, double compute) {
    double first = all_s / t->zpieces, rest = all_s - first;
    return first + rest - overlap * fmin(rest, compute);
}
