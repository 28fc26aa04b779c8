// axes/ddp.c: data-parallel gradient synchronisation, the lesson of PyTorch DDP and llm.c's ZeRO-1 in
// one place: buckets over the flat gradient buffer, the gradient hook that starts a bucket's
// all-reduce the moment its last layer's gradient is final, the sharded optimizer step, and the
// measured overlap of all that communication with the backward pass.
#include <string.h>
#include "base/data.h"
#include "axes/ddp.h"
#include "base/util.h"

static size_t layer_off(const Stage *s, int j) { return stage_layer_off(s, j); }
static size_t layer_len(const Stage *s, int j) { return stage_layer_len(s, j); }

static Bucket *add_bucket(GradSync *g, size_t off, size_t n, int lo, int hi) {
    g->b = realloc(g->b, sizeof(Bucket) * (size_t)(g->nb + 1));
    CHECK(g->b, "out of memory building buckets");
    Bucket *b = &g->b[g->nb++];
    memset(b, 0, sizeof *b);
    b->off = off; b->n = n; b->lo = lo; b->hi = hi;
    return b;
}

// Naive sync: one bucket (one tensor) reduced to completion before the next starts.
static void run_blocking(GradSync *g, Bucket *b) {
    double t0 = now_sec();
    float *x = g->s->grads + b->off;
    if (g->zero) g->rs_bytes += (double)b->n * sizeof(float);
    if (g->zero) comm_reduce_scatter(g->comm, x, b->n, 1.0f, g->algo);
    else comm_allreduce(g->comm, x, b->n, 1.0f, g->algo);
    g->spans[g->n_spans++] = (Span){t0, now_sec(), 0, 0};
    g->calls++;
}

static void start(GradSync *g, Bucket *b) {
    Comm *c = g->comm;
    float *x = g->s->grads + b->off;
    if (g->zero) g->rs_bytes += (double)b->n * sizeof(float);
    // A plain sum: each replica's loss gradient is already scaled by 1 / (rows of the whole step
    // over all replicas) (Stage.grad_scale), so the sum IS the average gradient, and the collective
    // saves a pass over the buffer (PyTorch's gradient pre-division does the same).
    b->req = g->zero ? comm_reduce_scatter_start(c, x, b->n, 1.0f, g->algo)
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

void gradsync_init(GradSync *g, Comm *c, Stage *s, int sync, int algo, int zero, double bucket_bytes) {
    memset(g, 0, sizeof *g);
    g->comm = c; g->s = s; g->sync = sync; g->algo = algo; g->zero = zero;
    g->D = c->replicas;
    int top = s->n_layers + (s->has_head ? 1 : 0);  // local layers j < top; j == n_layers is the head
    if (sync == SYNC_NAIVE) {  // one per parameter tensor, in the order backward finishes them
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
        s->on_layer_grad = on_layer_grad;
        s->hook_ctx = g;
    }
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        comm_shard(b->n, g->D, c->replica, &b->shard_off, &b->shard_n);
        b->moment_off = g->shard_total;
        g->shard_total += b->shard_n;
    }
    g->spans = xcalloc((size_t)g->nb * 2, sizeof(Span));
}

void gradsync_free(GradSync *g) {
    if (g->sharded) g->sharded->free(g);
    if (g->s && g->s->hook_ctx == g) { g->s->on_layer_grad = NULL; g->s->hook_ctx = NULL; }
    if (g->m) { g->s->be->free(g->m); g->s->be->free(g->v); }
    free(g->b); free(g->spans);
    memset(g, 0, sizeof *g);
}

void gradsync_begin_step(GradSync *g) {
    g->next = 0; g->final = 0; g->calls = 0; g->n_spans = 0;
    g->ag_bytes = g->rs_bytes = 0;
    if (g->sharded) g->sharded->begin_step(g);
}

void gradsync_set_final(GradSync *g, int final) { g->final = final; }

void gradsync_finish(GradSync *g) {
    g->t_compute_end = now_sec();
    if (g->sharded) { g->sharded->finish(g); return; }
    if (g->sync == SYNC_NAIVE) {  // the lesson's baseline: one blocking collective per tensor
        for (int i = 0; i < g->nb; i++) run_blocking(g, &g->b[i]);
        return;
    }
    for (int i = g->next; i < g->nb; i++) start(g, &g->b[i]);  // (the hooks started them all already)
    g->next = g->nb;
    for (int i = 0; i < g->nb; i++) g->spans[i].t1 = comm_wait(g->b[i].req);  // started in bucket order
}

long gradsync_optimizer_step(GradSync *g, int optimizer, float lr, float wd, int t) {
    Stage *s = g->s;
    if (!g->zero) return stage_optimizer_step(s, optimizer, lr, wd, t);
    if (g->sharded) return g->sharded->optimizer_step(g, optimizer, lr, wd, t);
    long bad = -1;
    if (optimizer != OPTIM_SGD && !g->m) {
        g->m = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
        g->v = s->be->alloc((g->shard_total ? g->shard_total : 1) * sizeof(float));
    }
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        size_t o = b->off + b->shard_off;
        long at = optimizer_update(s->be, optimizer, s->params + o, s->grads + o, g->m ? g->m + b->moment_off : NULL,
                                   g->v ? g->v + b->moment_off : NULL, b->shard_n, lr, wd, t);
        if (at >= 0 && bad < 0) bad = (long)o + at;
    }
    // Every rank updated its shards; gather the new parameters everywhere.
    int base = g->n_spans;
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        g->ag_bytes += (double)b->n * sizeof(float);
        if (g->sync == SYNC_NAIVE) {
            double t0 = now_sec();
            comm_allgather(g->comm, s->params + b->off, b->n, g->algo);
            g->spans[g->n_spans++] = (Span){t0, now_sec(), 0, 0};
        } else {  // all in flight together, then waited for
            b->req = comm_allgather_start(g->comm, s->params + b->off, b->n, g->algo);
            g->spans[g->n_spans++] = (Span){now_sec(), 0, 0, 0};
        }
        g->calls++;
    }
    if (g->sync != SYNC_NAIVE)
        for (int i = 0; i < g->nb; i++) g->spans[base + i].t1 = comm_wait(g->b[i].req);
    return bad;
}

void gradsync_gather_grads(GradSync *g) {
    if (!g->zero) return;
    if (g->sharded) { g->sharded->gather_grads(g); return; }
    for (int i = 0; i < g->nb; i++) comm_allgather(g->comm, g->s->grads + g->b[i].off, g->b[i].n, g->algo);
}

void gradsync_whole(GradSync *g, float *dst, const float *src) {
    for (int i = 0; i < g->nb; i++) {
        Bucket *b = &g->b[i];
        g->s->be->copy(dst + b->off + b->shard_off, src + b->moment_off, b->shard_n * sizeof(float));
        comm_allgather(g->comm, dst + b->off, b->n, g->algo);
    }
}

void gradsync_unshard(GradSync *g) {
    Stage *s = g->s;
    if (!g->zero) return;
    if (g->m && !s->adam_m) {
        s->adam_m = s->be->alloc(s->n_params * sizeof(float));
        s->adam_v = s->be->alloc(s->n_params * sizeof(float));
        gradsync_whole(g, s->adam_m, g->m);
        gradsync_whole(g, s->adam_v, g->v);
    }
    if (g->sharded) g->sharded->unshard(g);
}

void gradsync_reshard(GradSync *g) {
    Stage *s = g->s;
    if (!g->zero) return;
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
        s->be->free(s->adam_m); s->be->free(s->adam_v);
        s->adam_m = s->adam_v = NULL;
    }
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
        if (i < g->n_spans && g->spans[i].t0 <= z) { if (g->spans[i].t1 > z) z = g->spans[i].t1; continue; }
        if (z > a) {  // close the merged interval [a, z]
            total += z - a;
            double from = a > compute_end ? a : compute_end;
            if (z > from) exposed += z - from;
        }
        if (i < g->n_spans) { a = g->spans[i].t0; z = g->spans[i].t1; }
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
