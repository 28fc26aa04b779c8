// axes/zero.c: ZeRO 1 to 3 (llm.c's ZeRO-1, DeepSpeed's stages 2 and 3, PyTorch's FSDP) on GradSync's
// buckets, the data axis' second file: each rank updates only its shard of every bucket, with the one
// optimizer step of every level. ZeRO-1 reduce-scatters the sync's buckets in place and all-gathers the
// updated weights; 2's gradient hooks point each layer's dW/db into a working bucket that is
// reduce-scattered into this rank's shard the moment its last layer is done; 3's weight hook gathers the
// bucket a pass reads next while the current one computes. From 2 no rank holds the whole gradient (nor,
// in 3, the whole weights): a shard, plus ZERO_BUFS working buckets of each.
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

// ---- gradients: a working unit per backward, each bucket reduce-scattered into its shard ----

// Waits for the reduce-scatters of buffer x and adds their shards in (the step's first of the unit wrote
// them there itself). The oldest is waited for first, so a unit's first lands before a later one is added.
static void grad_fold(Zero *z, ZeroBuf *x) {
    GradSync *g = z->g;
    const ZeroUnit *u = &z->units[x->unit];
    for (int i = 0; i < u->n; i++) {
        Bucket *b = &g->b[u->first + i];
        g->spans[x->span[i]].t1 = comm_wait(x->req[i]);
        x->req[i] = NULL;
        if (!x->direct)
            g->s->be->axpy(z->gshard + b->moment_off, 1.0f, x->buf + (b->off - u->off) + b->shard_off, b->shard_n);
    }
    x->unit = -1;
}

// The oldest collective in flight among bufs (NULL: none).
static ZeroBuf *oldest(ZeroBuf *bufs) {
    ZeroBuf *o = NULL;
    for (int i = 0; i < ZERO_BUFS; i++)
        if (bufs[i].req[0] && (!o || bufs[i].seq < o->seq)) o = &bufs[i];
    return o;
}

// The working buffer holding unit k's gradients written since its last reduce-scatter (NULL: none).
static ZeroBuf *written(Zero *z, int k) {
    for (int i = 0; i < ZERO_BUFS; i++)
        if (z->gb[i].unit == k && !z->gb[i].req[0]) return &z->gb[i];
    return NULL;
}

// The working buffer unit k's gradient is written into in this backward.
static ZeroBuf *grad_buf(Zero *z, int k) {
    ZeroBuf *w = written(z, k);
    if (w) return w;
    for (;;) {
        for (int i = 0; i < ZERO_BUFS; i++)
            if (z->gb[i].unit < 0) { z->gb[i].unit = k; return &z->gb[i]; }
        ZeroBuf *o = oldest(z->gb);
        CHECK(o, "ZeRO: no gradient buffer is free and none is in flight");
        grad_fold(z, o);
    }
}

// Stage.on_grad: layer j's dW and db are about to be written: into its unit's working buffer, fresh.
static void on_grad(void *ctx, int j) {
    Zero *z = ctx;
    Stage *s = z->g->s;
    if (s->det) return;  // --deterministic: the rows go into the stage's trees (zero_det_finish)
    const Bucket *b = &z->g->b[z->units[z->unit_of[j]].first];
    CHECK(!s->split || !moe_is(s->moe, j) || (b->lo == j && b->hi == j + 1),
          "ZeRO: MoE layer %d shares its unit with dense layers under split backwards (train/plan.c refuses it)", j);
    ZeroBuf *x = grad_buf(z, z->unit_of[j]);
    set_views(s, j, x->buf + (stage_layer_off(s, j) - z->units[z->unit_of[j]].off), 1);
    s->grad_fresh[j] = 1;
}

// Stage.on_layer_grad: once the unit's last layer (its lowest) is done, its buckets' reduce-scatters start,
// each over the group that sums it. Under split backwards an MoE layer (--ep: a unit of its own) is called
// at the end of its I, which makes its gradients, and again at W, when nothing is written since: no-op.
static void on_layer_grad(void *ctx, int j) {
    Zero *z = ctx;
    GradSync *g = z->g;
    int k = z->unit_of[j];
    const ZeroUnit *u = &z->units[k];
    ZeroBuf *x = g->s->det ? NULL : written(z, k);
    if (j == g->b[u->first].lo && x) {
        // the step's first of the unit lands in the shards themselves (no copy), the others are added in
        x->direct = z->gfresh[k];
        z->gfresh[k] = 0;
        for (int i = 0; i < u->n; i++) {
            const Bucket *b = &g->b[u->first + i];
            float *to = x->direct ? z->gshard + b->moment_off : NULL;
            x->req[i] = comm_reduce_scatter_to(b->comm, x->buf + (b->off - u->off), b->n, 1.0f, b->algo, to);
            x->span[i] = span_start(z, EV_REDUCE_SCATTER, (double)b->n * sizeof(float));
            g->rs_bytes += (double)b->n * sizeof(float);
        }
        x->seq = z->seq++;
    }
    comm_progress();
}

// ---- ZeRO-3's weights: gathered unit by unit, the next one prefetched ----

// Waits for the gathers of x's unit (each bucket's over its group).
static void weights_wait(Zero *z, ZeroBuf *x) {
    for (int i = 0; i < z->units[x->unit].n; i++) {
        if (x->req[i]) z->g->spans[x->span[i]].t1 = comm_wait(x->req[i]);
        x->req[i] = NULL;
    }
}

static void weights_release(Zero *z, ZeroBuf *x) {
    const ZeroUnit *u = &z->units[x->unit];
    weights_wait(z, x);
    for (int j = z->g->b[u->first].lo; j < z->g->b[u->first].hi; j++) set_views(z->g->s, j, NULL, 0);
    z->gathered -= (double)u->len * sizeof(float);
    x->unit = -1;
}

static ZeroBuf *weights_start(Zero *z, int k) {
    GradSync *g = z->g;
    const ZeroUnit *u = &z->units[k];
    ZeroBuf *x = NULL;
    for (int i = 0; i < ZERO_BUFS && !x; i++) if (z->pb[i].unit < 0) x = &z->pb[i];
    CHECK(x, "ZeRO-3: no free buffer to gather unit %d into", k);
    x->unit = k;
    for (int i = 0; i < u->n; i++) {
        const Bucket *b = &g->b[u->first + i];
        float *at = x->buf + (b->off - u->off);
        g->s->be->copy(at + b->shard_off, z->pshard + b->moment_off, b->shard_n * sizeof(float));
        x->req[i] = comm_allgather_start(b->comm, at, b->n, b->algo);
        x->span[i] = span_start(z, EV_GATHER, (double)b->n * sizeof(float));
        g->ag_bytes += (double)b->n * sizeof(float);
    }
    x->seq = z->seq++;
    z->gathered += (double)u->len * sizeof(float);
    if (z->gathered > z->peak_gathered) z->peak_gathered = z->gathered;
    return x;
}

static ZeroBuf *weights_held(Zero *z, int k) {
    for (int i = 0; i < ZERO_BUFS; i++) if (z->pb[i].unit == k) return &z->pb[i];
    return NULL;
}

// Stage.on_weights: layer j is read now and layer next after it. Units no longer read are given back,
// j's is waited for (gathered now if no prefetch started it), next's is started before j computes.
static void on_weights(void *ctx, int j, int next) {
    Zero *z = ctx;
    GradSync *g = z->g;
    int k = j < 0 ? -1 : z->unit_of[j], kn = next < 0 ? -1 : z->unit_of[next];
    for (int i = 0; i < ZERO_BUFS; i++)
        if (z->pb[i].unit >= 0 && z->pb[i].unit != k && z->pb[i].unit != kn) weights_release(z, &z->pb[i]);
    if (k < 0) return;
    ZeroBuf *x = weights_held(z, k);
    if (!x) x = weights_start(z, k);
    if (x->req[0]) {
        weights_wait(z, x);
        const ZeroUnit *u = &z->units[k];
        for (int l = g->b[u->first].lo; l < g->b[u->first].hi; l++)
            set_views(g->s, l, x->buf + (stage_layer_off(g->s, l) - u->off), 0);
    }
    if (kn >= 0 && kn != k && !weights_held(z, kn)) {  // the prefetch: in flight while layer j computes
        weights_start(z, kn);
        z->prefetches++;
    }
    comm_progress();
}

// ---- set-up ----

// ZeRO-3: this rank's parameter shards from (seed, global layer), a unit at a time on the host: each
// layer as stage_init draws it (stage_layer_host: --tp's part, --ep's experts), then each bucket's shard.
static void init_shards(Zero *z, uint64_t seed, int L) {
    GradSync *g = z->g;
    Stage *s = g->s;
    float *host = xmalloc(z->most * sizeof(float)), *work = xmalloc(stage_whole_layer_len(s) * sizeof(float));
    for (int k = 0; k < z->n_units; k++) {
        const ZeroUnit *u = &z->units[k];
        for (int j = g->b[u->first].lo; j < g->b[u->first].hi; j++)
            stage_layer_host(s, j, L, seed, host + (stage_layer_off(s, j) - u->off), work);
        for (int i = 0; i < u->n; i++) {
            const Bucket *b = &g->b[u->first + i];
            s->be->to_device(z->pshard + b->moment_off, host + (b->off - u->off) + b->shard_off,
                             b->shard_n * sizeof(float));
        }
    }
    free(host); free(work);
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
    if (g->m) {
        be->free(g->m);
        be->free(g->v);
        g->m = g->v = NULL;
    }
    for (int i = 0; i < ZERO_BUFS && z->level >= 2 && !comm_algo_windows(g->algo);
         i++) {  // (windows: comm_shared_free's)
        be->free(z->gb[i].buf);
        if (z->pb[i].buf) be->free(z->pb[i].buf);
    }
    if (z->gshard) be->free(z->gshard);
    if (z->pshard) be->free(z->pshard);
    Stage *s = g->s;
    if (z->level >= 2) {  // (ZeRO-1's hooks are the sync's)
        s->hooks.on_grad = NULL;
        s->hooks.on_weights = NULL;
        s->hooks.zero_ctx = NULL;
        s->hooks.on_layer_grad = NULL;
        s->hooks.hook_ctx = NULL;
    }
    free(z->unit_of); free(z->units); free(z->gfresh); free(z);
    g->zs = NULL;
    g->sharded = NULL;
}

static void zero_begin_step(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    if (s->grads) { s->be->free(s->grads); s->grads = NULL; }  // (zero_gather_grads' whole copy, for --verify)
    for (int k = 0; k < z->n_units; k++) z->gfresh[k] = 1;
    z->step_prefetches = z->prefetches - z->prefetch_mark;
    z->prefetch_mark = z->prefetches;
}

// --deterministic: no hook reduce-scattered a bucket; the stage's trees hold this replica's rows. Bucket by
// bucket, its layers' trees are folded into a working buffer and this rank's shard taken from it: with 2
// replicas (det_pair) each holds its half of the canonical tree and the reduce-scatter adds the two (a + b,
// the same in either order); otherwise the trees were completed first by gradsync_det_gather, and the
// shard is the whole sum's slice. So the shard holds the monolith's bits.
static void zero_det_finish(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    int span = span_start(z, g->det_pair ? EV_REDUCE_SCATTER : 0, 0);
    if (!g->det_pair) gradsync_det_gather(g);
    ZeroBuf *x = &z->gb[0];
    for (int k = 0; k < g->nb; k++) {
        Bucket *b = &g->b[k];
        for (int j = b->lo; j < b->hi; j++) {
            set_views(s, j, x->buf + (stage_layer_off(s, j) - b->off), 1);
            stage_det_finish_layer(s, j);
            set_views(s, j, NULL, 1);
        }
        float *shard = z->gshard + b->moment_off;
        if (g->det_pair) {
            comm_wait(comm_reduce_scatter_to(g->comm, x->buf, b->n, 1.0f, g->algo, shard));
            g->rs_bytes += (double)b->n * sizeof(float);
        } else s->be->copy(shard, x->buf + b->shard_off, b->shard_n * sizeof(float));
    }
    g->spans[span].t1 = now_sec();  // (one span: the gather, the folds and the reduce-scatters)
}

static void zero_finish(GradSync *g) {
    Zero *z = zero_of(g);
    if (g->s->det) {
        zero_det_finish(g);
        return;
    }
    for (ZeroBuf *o; (o = oldest(z->gb));) grad_fold(z, o);
    for (int i = 0; i < ZERO_BUFS; i++) z->gb[i].unit = -1;
    for (int k = 0; k < z->n_units; k++)
        CHECK(!z->gfresh[k], "ZeRO: unit %d got no gradient this step (the backward skipped its layers)", k);
}

// ---- the optimizer step of this rank's shards, every level ----

// Bucket i's shard of the averaged gradient: in the stage's buffer (1, summed there by the reduce-scatter)
// or in the gradient shard (2, 3).
static float *zero_grad_shard(GradSync *g, int i) {
    const Bucket *b = &g->b[i];
    return zero_of(g)->level >= 2 ? zero_of(g)->gshard + b->moment_off : g->s->grads + b->off + b->shard_off;
}

// ZeRO-1, 2: the updated weights all-gathered, bucket by bucket (naive: one at a time, blocking; else all
// in flight together, then waited for). ZeRO-1's spans are not drawn (kind 0), ZeRO-2's are.
static void gather_weights(Zero *z) {
    GradSync *g = z->g;
    Stage *s = g->s;
    int base = g->n_spans, kind = z->level >= 2 ? EV_GATHER : 0;
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        double bytes = (double)b->n * sizeof(float);
        g->ag_bytes += bytes;
        if (g->sync == SYNC_NAIVE) {
            int at = span_start(z, kind, bytes);
            comm_allgather(b->comm, s->params + b->off, b->n, b->algo);
            g->spans[at].t1 = now_sec();
            continue;
        }
        b->req = comm_allgather_start(b->comm, s->params + b->off, b->n, b->algo);
        span_start(z, kind, bytes);
    }
    if (g->sync != SYNC_NAIVE)
        for (int i = 0; i < g->nb; i++) g->spans[base + i].t1 = comm_wait(g->b[i].req);
}

// Each bucket's shard updated where this rank holds it: the parameters in the stage (ZeRO-1, 2) or the
// parameter shard (3), the gradients in the stage's buffer (1, summed there by the reduce-scatter) or in
// the gradient shard (2, 3); then the weights gathered for the next step (1, 2; 3 gathers them around
// every pass).
static long zero_optimizer_step(GradSync *g, const OptimStep *step) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    long bad = -1;
    if (step->optimizer != OPTIM_SGD && !g->m) {
        g->m = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
        g->v = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
    }
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        size_t o = b->off + b->shard_off;
        float *p = z->level >= 3 ? z->pshard + b->moment_off : s->params + o;
        const float *grad = zero_grad_shard(g, i);
        long at = optimizer_update(s->be, step, p, grad, g->m ? g->m + b->moment_off : NULL,
                                   g->v ? g->v + b->moment_off : NULL, b->shard_n);
        if (at >= 0 && bad < 0) bad = (long)o + at;
    }
    if (z->level < 3) gather_weights(z);  // (ZeRO-3: the weights stay sharded: the next forward gathers them)
    return bad;
}

// ---- the whole state, for --verify and checkpoints ----

// The shards of src (shard_total floats, bucket by bucket at moment_off) made whole in dst (n_params
// floats) on every rank of dp: copied in place, then all-gathered.
static void make_whole(GradSync *g, float *dst, const float *src) {
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        g->s->be->copy(dst + b->off + b->shard_off, src + b->moment_off, b->shard_n * sizeof(float));
        comm_allgather(b->comm, dst + b->off, b->n, b->algo);
    }
}

// --verify: the averaged gradient whole in the stage's buffer: ZeRO-1 all-gathers it in place (each rank
// summed its shards there); 2 and 3 make it whole from the gradient shards (allocated; freed next step).
static void zero_gather_grads(GradSync *g) {
    Stage *s = g->s;
    if (zero_of(g)->level == 1) {
        for (int i = 0; i < g->nb; i++) {
            const Bucket *b = &g->b[i];
            comm_allgather(b->comm, s->grads + b->off, b->n, b->algo);
        }
        return;
    }
    if (!s->grads) s->grads = s->be->alloc(s->n_params * sizeof(float));
    make_whole(g, s->grads, zero_of(g)->gshard);
}

// Before a checkpoint: Adam's moments whole in the stage (s->adam_m, s->adam_v), and ZeRO-3's parameters.
static void zero_unshard(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    if (g->m && !s->adam_m) {
        s->adam_m = s->be->alloc(s->n_params * sizeof(float));
        s->adam_v = s->be->alloc(s->n_params * sizeof(float));
        make_whole(g, s->adam_m, g->m);
        make_whole(g, s->adam_v, g->v);
    }
    if (z->level < 3 || s->params) return;
    s->params = s->be->alloc(s->n_params * sizeof(float));
    make_whole(g, s->params, z->pshard);
}

// After it (or a resume): cut back into this rank's shards, the whole copies freed.
static void zero_reshard(GradSync *g) {
    Zero *z = zero_of(g);
    Stage *s = g->s;
    if (s->adam_m) {
        if (!g->m) {
            g->m = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
            g->v = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
        }
        for (int i = 0; i < g->nb; i++) {
            Bucket *b = &g->b[i];
            size_t bytes = b->shard_n * sizeof(float), at = b->off + b->shard_off;
            s->be->copy(g->m + b->moment_off, s->adam_m + at, bytes);
            s->be->copy(g->v + b->moment_off, s->adam_v + at, bytes);
        }
        s->be->free(s->adam_m);
        s->be->free(s->adam_v);
        s->adam_m = s->adam_v = NULL;
    }
    if (z->level < 3 || !s->params) return;
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        s->be->copy(z->pshard + b->moment_off, s->params + b->off + b->shard_off, b->shard_n * sizeof(float));
    }
    s->be->free(s->params);
    s->params = NULL;
}

// ---- set-up ----

// ZeRO-1 keeps the sync's own step (the bucketed hooks, reduce-scattering in place); 2 and 3 take it over.
static const ShardOps ops1 = {NULL,      NULL,         zero_optimizer_step, zero_gather_grads, zero_grad_shard,
                              zero_free, zero_unshard, zero_reshard};
static const ShardOps ops = {zero_begin_step, zero_finish,  zero_optimizer_step, zero_gather_grads, zero_grad_shard,
                             zero_free,       zero_unshard, zero_reshard};

// Each bucket's shard on this rank (comm_shard's cut over the replicas), and where its moments start.
static void cut_shards(GradSync *g) {
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        comm_shard(b->n, b->comm->replicas, b->comm->replica, &b->shard_off, &b->shard_n);  // (--ep: experts' peers)
        b->moment_off = g->shard_total;
        g->shard_total += b->shard_n;
    }
}

// The units: consecutive buckets of the same layers (--ep: an MoE layer's router and experts, in either
// order), and the unit holding each layer; z->most, the largest unit's floats.
static void make_units(Zero *z) {
    GradSync *g = z->g;
    z->units = xcalloc((size_t)g->nb, sizeof(ZeroUnit));
    z->unit_of = xcalloc((size_t)g->s->n_layers + 1, sizeof(int));
    for (int k = 0; k < g->nb; k++) {
        const Bucket *b = &g->b[k];
        ZeroUnit *u = z->n_units ? &z->units[z->n_units - 1] : NULL;
        if (u && u->n < ZERO_UNIT && g->b[u->first].lo == b->lo && g->b[u->first].hi == b->hi) {
            size_t end = u->off + u->len > b->off + b->n ? u->off + u->len : b->off + b->n;
            u->off = u->off < b->off ? u->off : b->off;
            u->len = end - u->off;
            u->n++;
        } else z->units[z->n_units++] = (ZeroUnit){k, 1, b->off, b->n};
        for (int j = b->lo; j < b->hi; j++) z->unit_of[j] = z->n_units - 1;
    }
    for (int k = 0; k < z->n_units; k++) {
        if (z->units[k].len > z->most) z->most = z->units[k].len;
        CHECK(z->units[k].len == stage_layer_off(g->s, g->b[z->units[k].first].hi) -
                                    stage_layer_off(g->s, g->b[z->units[k].first].lo),
              "ZeRO: unit %d's buckets do not cover its layers whole", k);
    }
}

void zero_init(GradSync *g, int level, uint64_t seed, int layers) {
    Stage *s = g->s;
    const Backend *be = s->be;
    Zero *z = xcalloc(1, sizeof(Zero));
    g->zs = z;
    g->zero = level;
    z->g = g;
    z->level = level;
    cut_shards(g);
    z->span_cap = 2 * g->nb + 8;
    g->spans = realloc(g->spans, sizeof(Span) * (size_t)z->span_cap);
    CHECK(g->spans, "out of memory recording collectives");
    if (level == 1) {  // the buckets' collective becomes a reduce-scatter; the step, this rank's shards'
        g->scatter = 1;
        g->sharded = &ops1;
        return;
    }
    make_units(z);
    size_t shard = g->shard_total ? g->shard_total : 1;
    z->gshard = be->alloc(shard * sizeof(float));
    z->gfresh = xcalloc((size_t)z->n_units, sizeof(int));
    for (int i = 0; i < ZERO_BUFS; i++) {
        z->gb[i] = (ZeroBuf){.buf = work_alloc(g, z->most), .unit = -1};
        if (level >= 3) z->pb[i] = (ZeroBuf){.buf = work_alloc(g, z->most), .unit = -1};
    }
    g->sharded = &ops;
    s->hooks.on_grad = on_grad;
    s->hooks.on_layer_grad = on_layer_grad;
    s->hooks.hook_ctx = s->hooks.zero_ctx = z;
    if (level >= 3) {
        z->pshard = be->alloc(shard * sizeof(float));
        init_shards(z, seed, layers);
        s->hooks.on_weights = on_weights;
    }
}

void zero_setup(const Plan *p, GradSync *sync, int n_sync, uint64_t seed, int layers) {
    for (int k = 0; k < n_sync && p->data.zero; k++) zero_init(&sync[k], p->data.zero, seed, layers);
}

double zero_working_bytes(const GradSync *g) {
    const Zero *z = g->zs;
    return (double)ZERO_BUFS * (double)z->most * sizeof(float) * (z->level >= 3 ? 2 : 1);
}

void zero_report_fill(DataReport *r, const Plan *p, const GradSync *sync, int n_sync) {
    double v[3] = {0};  // working, gathered at once, prefetches: the largest over the ranks
    for (int k = 0; k < n_sync && p->data.zero >= 2; k++) {
        v[0] += zero_working_bytes(&sync[k]);
        v[1] += sync[k].zs->peak_gathered;
        v[2] += (double)sync[k].zs->step_prefetches;
    }
    comm_allreduce_max_double(v, 3, MPI_COMM_WORLD);
    r->working_bytes = v[0];
    r->gathered_peak_bytes = v[1];
    r->prefetches = v[2];
}
