// axes/zero.c: ZeRO-2 and ZeRO-3 (DeepSpeed's stages 2 and 3, PyTorch's FSDP) on GradSync's buckets:
// the stage's gradient hooks point each layer's dW/db into a working bucket that is reduce-scattered
// into this rank's shard the moment its last layer is done; ZeRO-3's weight hook gathers the bucket a
// pass reads next while the current one computes. No rank ever holds the whole gradient (nor, in 3,
// the whole weights): a shard, plus ZERO_BUFS working buckets of each.
#include <string.h>
#include "axes/zero.h"
#include "base/util.h"

static Zero *zero_of(GradSync *g) { return g->zs; }

static int span_start(Zero *z, int kind, double bytes) {
    GradSync *g = z->g;
    if (g->n_spans == z->span_cap) {
        z->span_cap *= 2;
        g->spans = realloc(g->spans, sizeof(Span) * (size_t)z->span_cap);
        CHECK(g->spans, "out of memory recording collectives");
    }
    g->spans[g->n_spans] = (Span){now_sec(), 0, kind, bytes};
    g->calls++;
    return g->n_spans++;
}

// Points local layer j's weight and bias (params) or their gradients at base, the whole layer's floats
// (NULL: no view).
static void set_views(Stage *s, int j, float *base, int grads) {
    size_t w = stage_weight_len(s, j);  // (with --tp: this rank's part of the layer, model.h)
    float **W = j == s->n_layers ? (grads ? &s->dWh : &s->Wh) : (grads ? &s->dW[j] : &s->W[j]);
    float **b = j == s->n_layers ? (grads ? &s->dbh : &s->bh) : (grads ? &s->db[j] : &s->b[j]);
    *W = base;
    *b = base ? base + w : NULL;
}

// ---- gradients: a working bucket per backward, reduce-scattered into the shard ----

// Waits for the reduce-scatter of buffer x and adds its shard in (the step's first of the bucket wrote it
// there itself). The oldest is waited for first, so a bucket's first lands before a later one is added.
static void grad_fold(Zero *z, ZeroBuf *x) {
    GradSync *g = z->g;
    const Backend *be = g->s->be;
    Bucket *b = &g->b[x->bucket];
    g->spans[x->span].t1 = comm_wait(x->req);
    x->req = NULL;
    if (!x->direct) be->axpy(z->gshard + b->moment_off, 1.0f, x->buf + b->shard_off, b->shard_n);
    x->bucket = -1;
}

// The oldest collective in flight among bufs (NULL: none).
static ZeroBuf *oldest(ZeroBuf *bufs) {
    ZeroBuf *o = NULL;
    for (int i = 0; i < ZERO_BUFS; i++)
        if (bufs[i].req && (!o || bufs[i].seq < o->seq)) o = &bufs[i];
    return o;
}

// The working buffer bucket k's gradient is written into in this backward.
static ZeroBuf *grad_buf(Zero *z, int k) {
    for (int i = 0; i < ZERO_BUFS; i++)
        if (z->gb[i].bucket == k && !z->gb[i].req) return &z->gb[i];
    for (;;) {
        for (int i = 0; i < ZERO_BUFS; i++)
            if (z->gb[i].bucket < 0) { z->gb[i].bucket = k; return &z->gb[i]; }
        ZeroBuf *o = oldest(z->gb);
        CHECK(o, "ZeRO: no gradient buffer is free and none is in flight");
        grad_fold(z, o);
    }
}

// Stage.on_grad: layer j's dW and db are about to be written: into its bucket's working buffer, fresh.
static void on_grad(void *ctx, int j) {
    Zero *z = ctx;
    Stage *s = z->g->s;
    Bucket *b = &z->g->b[z->bucket_of[j]];
    ZeroBuf *x = grad_buf(z, z->bucket_of[j]);
    set_views(s, j, x->buf + (stage_layer_off(s, j) - b->off), 1);
    s->grad_fresh[j] = 1;
}

// Stage.on_layer_grad: once the bucket's last layer (its lowest) is done, its reduce-scatter starts.
static void on_layer_grad(void *ctx, int j) {
    Zero *z = ctx;
    GradSync *g = z->g;
    int k = z->bucket_of[j];
    if (j == g->b[k].lo) {
        ZeroBuf *x = grad_buf(z, k);
        // the step's first of the bucket lands in the shard itself (no copy), the others are added in
        x->direct = z->gfresh[k];
        z->gfresh[k] = 0;
        float *to = x->direct ? z->gshard + g->b[k].moment_off : NULL;
        x->req = comm_reduce_scatter_to(g->comm, x->buf, g->b[k].n, 1.0f, g->algo, to);
        x->span = span_start(z, EV_REDUCE_SCATTER, (double)g->b[k].n * sizeof(float));
        x->seq = z->seq++;
        g->rs_bytes += (double)g->b[k].n * sizeof(float);
    }
    comm_progress();
}

// ---- ZeRO-3's weights: gathered bucket by bucket, the next one prefetched ----

static void weights_release(Zero *z, ZeroBuf *x) {
    GradSync *g = z->g;
    if (x->req) g->spans[x->span].t1 = comm_wait(x->req);
    x->req = NULL;
    Bucket *b = &g->b[x->bucket];
    for (int j = b->lo; j < b->hi; j++) set_views(g->s, j, NULL, 0);
    z->gathered -= (double)b->n * sizeof(float);
    x->bucket = -1;
}

static ZeroBuf *weights_start(Zero *z, int k) {
    GradSync *g = z->g;
    Bucket *b = &g->b[k];
    ZeroBuf *x = NULL;
    for (int i = 0; i < ZERO_BUFS && !x; i++) if (z->pb[i].bucket < 0) x = &z->pb[i];
    CHECK(x, "ZeRO-3: no free buffer to gather bucket %d into", k);
    g->s->be->copy(x->buf + b->shard_off, z->pshard + b->moment_off, b->shard_n * sizeof(float));
    x->bucket = k;
    x->req = comm_allgather_start(g->comm, x->buf, b->n, g->algo);
    x->span = span_start(z, EV_GATHER, (double)b->n * sizeof(float));
    x->seq = z->seq++;
    g->ag_bytes += (double)b->n * sizeof(float);
    z->gathered += (double)b->n * sizeof(float);
    if (z->gathered > z->peak_gathered) z->peak_gathered = z->gathered;
    return x;
}

static ZeroBuf *weights_held(Zero *z, int k) {
    for (int i = 0; i < ZERO_BUFS; i++) if (z->pb[i].bucket == k) return &z->pb[i];
    return NULL;
}

// Stage.on_weights: layer j is read now and layer next after it. Buckets no longer read are given back,
// j's is waited for (gathered now if no prefetch started it), next's is started before j computes.
static void on_weights(void *ctx, int j, int next) {
    Zero *z = ctx;
    GradSync *g = z->g;
    int k = j < 0 ? -1 : z->bucket_of[j], kn = next < 0 ? -1 : z->bucket_of[next];
    for (int i = 0; i < ZERO_BUFS; i++)
        if (z->pb[i].bucket >= 0 && z->pb[i].bucket != k && z->pb[i].bucket != kn) weights_release(z, &z->pb[i]);
    if (k < 0) return;
    ZeroBuf *x = weights_held(z, k);
    if (!x) x = weights_start(z, k);
    if (x->req) {
        g->spans[x->span].t1 = comm_wait(x->req);
        x->req = NULL;
        Bucket *b = &g->b[k];
        for (int l = b->lo; l < b->hi; l++) set_views(g->s, l, x->buf + (stage_layer_off(g->s, l) - b->off), 0);
    }
    if (kn >= 0 && kn != k && !weights_held(z, kn)) {  // the prefetch: in flight while layer j computes
        weights_start(z, kn);
        z->prefetches++;
    }
    comm_progress();
}

// ---- set-up ----

// ZeRO-3: this rank's parameter shards from (seed, global layer), a bucket at a time on the host: each
// layer drawn whole, then (--tp) this rank's part of it (as stage_init would), then this rank's shard.
static void init_shards(Zero *z, uint64_t seed, int L) {
    GradSync *g = z->g;
    Stage *s = g->s;
    float *host = xmalloc(z->most * sizeof(float));
    float *whole = xmalloc(((size_t)s->H * (s->D > s->H ? s->D : s->H) + s->H) * sizeof(float));
    for (int k = 0; k < g->nb; k++) {
        Bucket *b = &g->b[k];
        for (int j = b->lo; j < b->hi; j++) {
            float *at = host + (stage_layer_off(s, j) - b->off);
            size_t w = stage_weight_len(s, j), in = (size_t)stage_fan_in(s, j);
            if (j == s->n_layers) init_layer_host(seed, L, s->H, s->C, at, at + w);  // the head, whole on every rank
            else {
                init_layer_host(seed, s->lo + j, (int)in, s->H, whole, whole + (size_t)s->H * in);
                stage_shard_layer(s, j, s->tp_rank, whole, whole + (size_t)s->H * in, at, at + w);
            }
        }
        s->be->to_device(z->pshard + b->moment_off, host + b->shard_off, b->shard_n * sizeof(float));
    }
    free(host); free(whole);
}

// A working bucket of n floats: with --allreduce shm in a window shared by the dp group (collective: every
// rank allocates its buckets in the same order), so that its collectives run in shared memory.
static float *work_alloc(GradSync *g, size_t n) {
    return comm_algo_windows(g->algo) ? comm_shared_alloc(g->comm, n) : g->s->be->alloc(n * sizeof(float));
}

static void zero_free(GradSync *g) {
    Zero *z = zero_of(g);
    if (!z) return;
    const Backend *be = g->s->be;
    for (int i = 0; i < ZERO_BUFS && !comm_algo_windows(g->algo); i++) {  // (windows: comm_shared_free's)
        be->free(z->gb[i].buf);
        if (z->pb[i].buf) be->free(z->pb[i].buf);
    }
    be->free(z->gshard);
    if (z->pshard) be->free(z->pshard);
    Stage *s = g->s;
    s->on_grad = NULL; s->on_weights = NULL; s->zero_ctx = NULL; s->on_layer_grad = NULL; s->hook_ctx = NULL;
    free(z->bucket_of); free(z->gfresh); free(z);
    g->zs = NULL;
    g->sharded = NULL;
}

static void zero_begin_step(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    if (s->grads) { s->be->free(s->grads); s->grads = NULL; }  // (zero_gather_grads' whole copy, for --verify)
    for (int k = 0; k < g->nb; k++) z->gfresh[k] = 1;
    z->step_prefetches = z->prefetches - z->prefetch_mark;
    z->prefetch_mark = z->prefetches;
}

static void zero_finish(GradSync *g) {
    Zero *z = zero_of(g);
    for (ZeroBuf *o; (o = oldest(z->gb));) grad_fold(z, o);
    for (int i = 0; i < ZERO_BUFS; i++) z->gb[i].bucket = -1;
    for (int k = 0; k < g->nb; k++)
        CHECK(!z->gfresh[k], "ZeRO: bucket %d got no gradient this step (the backward skipped its layers)", k);
}

static long zero_optimizer_step(GradSync *g, int optimizer, float lr, float wd, int t) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    long bad = -1;
    if (optimizer != OPTIM_SGD && !g->m) {
        g->m = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
        g->v = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
    }
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        float *p = z->level >= 3 ? z->pshard + b->moment_off : s->params + b->off + b->shard_off;
        long at = optimizer_update(s->be, optimizer, p, z->gshard + b->moment_off, g->m ? g->m + b->moment_off : NULL,
                                   g->v ? g->v + b->moment_off : NULL, b->shard_n, lr, wd, t);
        if (at >= 0 && bad < 0) bad = (long)(b->off + b->shard_off) + at;
    }
    if (z->level >= 3) return bad;  // the weights stay sharded: the next forward gathers them
    int base = g->n_spans;
    for (int i = 0; i < g->nb; i++) {  // all in flight together, then waited for
        g->b[i].req = comm_allgather_start(g->comm, s->params + g->b[i].off, g->b[i].n, g->algo);
        span_start(z, EV_GATHER, (double)g->b[i].n * sizeof(float));
        g->ag_bytes += (double)g->b[i].n * sizeof(float);
    }
    for (int i = 0; i < g->nb; i++) g->spans[base + i].t1 = comm_wait(g->b[i].req);
    return bad;
}

static void zero_gather_grads(GradSync *g) {
    Stage *s = g->s;
    if (!s->grads) s->grads = s->be->alloc(s->n_params * sizeof(float));
    gradsync_whole(g, s->grads, zero_of(g)->gshard);
}

static void zero_unshard_params(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    if (z->level < 3 || s->params) return;
    s->params = s->be->alloc(s->n_params * sizeof(float));
    gradsync_whole(g, s->params, z->pshard);
}

static void zero_reshard_params(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    if (z->level < 3 || !s->params) return;
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        s->be->copy(z->pshard + b->moment_off, s->params + b->off + b->shard_off, b->shard_n * sizeof(float));
    }
    s->be->free(s->params);
    s->params = NULL;
}

static const ShardOps ops = {zero_begin_step, zero_finish, zero_optimizer_step, zero_gather_grads, zero_free,
                                zero_unshard_params, zero_reshard_params};

void zero_init(GradSync *g, int level, uint64_t seed, int layers) {
    Stage *s = g->s;
    const Backend *be = s->be;
    Zero *z = xcalloc(1, sizeof(Zero));
    g->zs = z;
    z->g = g;
    z->level = level;
    z->bucket_of = xcalloc((size_t)s->n_layers + 1, sizeof(int));
    for (int k = 0; k < g->nb; k++) {
        for (int j = g->b[k].lo; j < g->b[k].hi; j++) z->bucket_of[j] = k;
        if (g->b[k].n > z->most) z->most = g->b[k].n;
    }
    size_t shard = g->shard_total ? g->shard_total : 1;
    z->gshard = be->alloc(shard * sizeof(float));
    z->gfresh = xcalloc((size_t)g->nb, sizeof(int));
    for (int i = 0; i < ZERO_BUFS; i++) {
        z->gb[i] = (ZeroBuf){work_alloc(g, z->most), -1, NULL, 0, 0, 0};
        if (level >= 3) z->pb[i] = (ZeroBuf){work_alloc(g, z->most), -1, NULL, 0, 0, 0};
    }
    z->span_cap = 2 * g->nb + 8;
    g->spans = realloc(g->spans, sizeof(Span) * (size_t)z->span_cap);
    CHECK(g->spans, "out of memory recording collectives");
    g->sharded = &ops;
    s->on_grad = on_grad;
    s->on_layer_grad = on_layer_grad;
    s->hook_ctx = s->zero_ctx = z;
    if (level >= 3) {
        z->pshard = be->alloc(shard * sizeof(float));
        init_shards(z, seed, layers);
        s->on_weights = on_weights;
    }
}

double zero_working_bytes(const GradSync *g) {
    const Zero *z = g->zs;
    return (double)ZERO_BUFS * (double)z->most * sizeof(float) * (z->level >= 3 ? 2 : 1);
}
