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
    return b;
}

// Naive sync: one bucket (one tensor) reduced to completion before the next starts.
static void run_blocking(GradSync *g, Bucket *b) {
    double t0 = now_sec();
    float *x = g->s->grads + b->off;
    if (g->scatter) g->rs_bytes += (double)b->n * sizeof(float);
    if (g->scatter) comm_reduce_scatter(g->comm, x, b->n, 1.0f, g->algo);
    else comm_allreduce(g->comm, x, b->n, 1.0f, g->algo);
    g->spans[g->n_spans++] = (Span){t0, now_sec(), 0, 0};
    g->calls++;
}

static void start(GradSync *g, Bucket *b) {
    Comm *c = g->comm;
    float *x = g->s->grads + b->off;
    if (g->scatter) g->rs_bytes += (double)b->n * sizeof(float);
    // A plain sum: each replica's loss gradient is already scaled by 1 / (rows of the whole step
    // over all replicas) (Stage.grad_scale), so the sum IS the average gradient, and the collective
    // saves a pass over the buffer (PyTorch's gradient pre-division does the same).
    b->req = g->scatter ? comm_reduce_scatter_start(c, x, b->n, 1.0f, g->algo)
                        : comm_allreduce_start(c, x, b->n, 1.0f, g->algo);
    g->spans[g->n_spans++] = (Span){now_sec(), 0, 0, 0};
    g->calls++;
}

// The gradient hook: called by stage_backward after each layer's dW/db (head first, then down).
static void on_layer_grad(void *ctx, int layer) {
    GradSync *g = ctx;
    if (g->final && g->next < g->nb && layer == g->b[g->next].lo) start(g, &g->b[g->next++]);
    comm_progress();  // move every bucket in flight along before the next layer's gemms
}

void gradsync_init(GradSync *g, Comm *c, Stage *s, int sync, int algo, double bucket_bytes) {
    memset(g, 0, sizeof *g);
    g->comm = c;
    g->s = s;
    g->sync = sync;
    g->algo = algo;
    g->D = c->replicas;
    int top = s->n_layers + (s->has_head ? 1 : 0);  // local layers j < top; j == n_layers is the head
    if (sync == SYNC_NAIVE) {                       // one per parameter tensor, in the order backward finishes them
        for (int j = top - 1; j >= 0; j--) {
            size_t w = stage_weight_len(s, j);
            size_t off = layer_off(s, j), len = layer_len(s, j);
            add_bucket(g, off + w, len - w, j, j + 1);  // bias
            add_bucket(g, off, w, j, j + 1);            // weight
        }
    } else {  // whole layers, newest first; a bucket closes once it holds bucket_bytes (as PyTorch DDP's cap)
        int hi = top;
        size_t bytes = 0;
        for (int j = top - 1; j >= 0; j--) {
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
    g->t_compute_end = now_sec();
    if (g->sharded && g->sharded->finish) {
        g->sharded->finish(g);
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

uint64_t stage_param_checksum(const Stage *s) {
    float *h = xmalloc(s->n_params * sizeof(float));
    s->be->to_host(h, s->params, s->n_params * sizeof(float));
    uint64_t x = mix64(s->n_params);
    for (size_t i = 0; i < s->n_params; i++) {
        uint32_t bits;
        memcpy(&bits, &h[i], sizeof bits);
        x = mix64(x ^ bits);
    }
    free(h);
    return x;
}

// ---- rules ----

void data_part(const TrainConfig *c, const Degrees *d, Plan *p) {
    p->data =
        (DataPlan){.zero = d->zero, .sync = c->ddp.ddp_sync, .algo = c->ddp.allreduce, .bucket_mb = c->ddp.bucket_mb};
}

int data_rules(const TrainConfig *c, const Degrees *d, Plan *p, Err *e) {
    data_part(c, d, p);
    if (degrees_axes(d) == AXIS_DATA && !d->zero && seen_typed(e->seen, "trace")) {
        char run[64];
        return refuse(e,
                      "train: --trace of data parallelism alone draws ZeRO's collectives, and this run is %s without "
                      "--zero: drop it or add --zero 3 (or a pipeline, --pp, or --tp)",
                      degrees_text(d, run, sizeof run));
    }
    if (p->data_parallel && c->ddp.bucket_mb <= 0)
        return refuse(e, "train: --bucket-mb %g must be positive: give a bucket capacity in MiB, e.g. 25",
                      c->ddp.bucket_mb);
    if (c->ddp.zero >= 2 && c->ddp.ddp_sync == SYNC_NAIVE)
        return refuse(e,
                      "train: --zero %lld reduce-scatters buckets while the backward runs, and --ddp-sync naive has "
                      "none: drop --ddp-sync naive (bucketed is the default)",
                      (long long)c->ddp.zero);
    if (c->ddp.ddp_sync == SYNC_NAIVE && seen_typed(e->seen, "bucket-mb"))
        return refuse(e, "train: --bucket-mb applies to --ddp-sync bucketed (naive all-reduces one tensor at a time): "
                         "drop one of them");
    return 0;
}

// Why shm windows cannot hold this plan's parameters and gradients ("" when they can), from the
// facts of every rank, as comms.c's comm_shared_require would find it on the lowest rank that cannot:
// each stage's replicas on one node, /dev/shm room for every rank of a node. what: "train", or ""
// (auto asks only whether).
static void shm_unfit(const TrainConfig *c, const Facts *f, const Plan *p, const char *what, char *why, size_t n) {
    const Hardware *d = f->devices;
    double *bytes = xcalloc((size_t)p->world, sizeof(double));  // each rank's windows (params and grads, or ZeRO's)
    for (int r = 0; r < p->world; r++)
        for (int k = 0, stage = p->pipelined ? plan_rank_stage(p, r) : 0; k < p->V; k++)
            bytes[r] += data_shm_floats(c, p, plan_vstage(p, stage, k)) * sizeof(float);
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

int data_rules_facts(const TrainConfig *c, const Facts *f, Plan *p, Err *e) {
    p->data.algo = c->ddp.allreduce;
    if (!p->data_parallel || !f->devices || (c->ddp.allreduce != ALLREDUCE_SHM && c->ddp.allreduce != ALLREDUCE_AUTO))
        return 0;
    char why[300] = "";
    if (c->ddp.allreduce == ALLREDUCE_AUTO) {
        if (p->device == DEVICE_CPU) shm_unfit(c, f, p, "", why, sizeof why);
        p->data.algo = p->device == DEVICE_CPU && !why[0] ? ALLREDUCE_SHM : ALLREDUCE_MPI;
        return 0;
    }
    shm_unfit(c, f, p, "train", why, sizeof why);
    return why[0] ? refuse(e, "%s", why) : 0;
}


// ---- sizes ----

double data_largest_bucket(const TrainConfig *c, const Plan *p, int vs) {
    double cap = p->data.bucket_mb * 1024 * 1024, most = 0, floats = 0;
    int n = plan_layers(p, vs), head = vs == p->S - 1;
    for (int j = n + head - 1; j >= 0; j--) {
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
    m->weights += params * f / (zero >= 3 ? p->D : 1);
    m->grads += params * f / (zero >= 2 ? p->D : 1);
    if (c->optimizer != OPTIM_SGD) m->optimizer += 2 * params * f / (zero >= 1 ? p->D : 1);
    // ZeRO-2, 3: the working buckets (axes/zero.c): ZERO_BUFS of gradients, and of gathered weights at 3
    if (zero >= 2) m->buffers += ZERO_BUFS * data_largest_bucket(c, p, vs) * f * (zero >= 3 ? 2 : 1);
}

// ---- set-up ----

// Replicas must start from identical parameters: compare checksums within each dp group and let
// every rank of the world learn the verdict, so all decide alike.
// (ZeRO-3 holds no whole parameters: each rank draws only its shards, from the same options.)
static void check_replicas_agree(const Stage *local, int n_local, const Comm *comm) {
    double differ[1] = {0};
    for (int k = 0; k < n_local && local[k].params; k++)
        differ[0] += !comm_same_u64(stage_param_checksum(&local[k]), comm->dp);
    comm_allreduce_max_double(differ, 1, MPI_COMM_WORLD);
    if (differ[0])
        user_error("train: the replicas start from different parameters (checksums differ across the dp group): give "
                   "every rank the same --seed and model options");
}

// One gradient sync per local stage (a chunk each, interleaved). --allreduce shm (the plan's choice, from
// every rank's node and /dev/shm): the replicas read each other's gradients (and, for ZeRO-1 and 2,
// parameters) in place, so both move into windows shared by each stage's dp group; ZeRO-2's gradients and
// ZeRO-3's working buckets are zero.c's windows (zero_init).
void data_setup(const Plan *p, Comm *comm, Stage *local, int n_local, GradSync **sync) {
    const DataPlan *dp = &p->data;
    check_replicas_agree(local, n_local, comm);
    for (int k = 0; k < n_local && comm_algo_windows(dp->algo) && dp->zero < 3; k++) {
        float *params = comm_shared_alloc(comm, local[k].n_params);
        stage_share(&local[k], params, dp->zero >= 2 ? NULL : comm_shared_alloc(comm, local[k].n_params));
    }
    *sync = xcalloc((size_t)n_local, sizeof(GradSync));
    for (int k = 0; k < n_local; k++)
        gradsync_init(&(*sync)[k], comm, &local[k], dp->sync, dp->algo, dp->bucket_mb * 1024 * 1024);
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
    printf("data parallel: %d replicas | %s sync, %d %s%s", p->D, r.sync, nb,
           p->data.sync == SYNC_BUCKETED ? "bucket" : "tensor", nb == 1 ? "" : "s");
    if (p->data.sync == SYNC_BUCKETED)
        printf(" (cap %g MiB)%s", p->data.bucket_mb,
               p->pipelined ? p->V > 1 ? " on stage 0's chunks" : " on stage 0" : "");
    printf(" | %s %s", p->data.zero ? "reduce-scatter + all-gather" : "all-reduce", r.algo);
    if (p->data.zero) printf(" | ZeRO-%d: this rank updates %zu of %zu parameters", p->data.zero, shards, params);
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

void data_report_text(const Plan *p, const DataReport *r, double weights, double grads, double optimizer) {
    if (!p->data_parallel) return;
    printf("gradient sync: %.0f collectives/step | in flight %.2f ms/step | %.0f%% hidden behind compute | "
           "optimizer state %.2f MB per rank\n",
           r->collectives, r->comm_ms, 100 * r->comm_hidden, r->optimizer_bytes / 1e6);
    if (!p->data.zero) return;
    printf("ZeRO-%d per rank: all-gather %.3f MB + reduce-scatter %.3f MB per step | weights %.2f MB, gradients "
           "%.2f MB, optimizer %.2f MB (+ %.2f MB working buckets)\n",
           p->data.zero, r->allgather_bytes / 1e6, r->reduce_scatter_bytes / 1e6, weights / 1e6, grads / 1e6,
           optimizer / 1e6, r->working_bytes / 1e6);
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
}

// ---- price ----

DataTraffic data_price(const TrainConfig *c, const Plan *p, int stage) {
    DataTraffic t = {0};
    int zero = p->data.zero;
    for (int k = 0; k < p->V; k++) t.params += tensor_params(c, p, plan_vstage(p, stage, k));
    t.bytes = t.params * 4;
    double bucket = p->data.bucket_mb * 1024 * 1024, layers = (double)p->lo[p->S] / p->K + 1;  // (+1: the head's)
    t.pieces = p->data.sync == SYNC_NAIVE ? 2 * layers : ceil(t.bytes / fmax(bucket, 4));
    t.zpieces = ceil(t.bytes / fmax(bucket, t.bytes / layers));
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
    return p->data.zero && p->D > 1 ? t->params / p->D : t->params;
}

double data_price_exposed(const DataTraffic *t, double sync_s, double gather_s, double overlap, double window,
                          int backwards) {
    if (t->per_backward) sync_s *= backwards;
    return sync_s - overlap * fmin(sync_s, window) + gather_s;
}

double data_price_gathers(const DataTraffic *t, double all_s, double overlap, double compute) {
    double first = all_s / t->zpieces, rest = all_s - first;
    return first + rest - overlap * fmin(rest, compute);
}
