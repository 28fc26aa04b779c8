// axes/compress.c: compressed gradients (--compress topk:F, powersgd:R, sign), the data axis' fourth file: its
// rules, the top-k selection with error feedback of each bucket, the all-gather of the (index, value) pairs and
// their sum (powersgd and sign: axes/lowrank.c), --verify's exact sum of step 1, and the state a checkpoint
// keeps of it on every rank (error buffers; PowerSGD's Q).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/util.h"
#include "base/safetensors.h"
#include "comms/watchdog.h"
#include "axes/compress.h"

#define FILE_PREFIX "compress-rank-"

// ---- rules ----

// powersgd:R's R against the layers' width, min(H, inputs) (a narrower matrix, the head's [C, H], takes
// min(R, C) as PyTorch's hook does).
static int powersgd_rules(const TrainConfig *c, const Plan *p, double r, Err *e) {
    int H = (int)c->hidden, D = p->inputs, most = H < D ? H : D;
    if (r >= 1 && r <= most && r == floor(r)) return 0;
    return refuse(e, "train: --compress powersgd:%g: R is each weight matrix's rank, an integer from 1 to the "
                     "layers' width %d (%s %d): e.g. --compress powersgd:%d",
                  r, most, most == H ? "--hidden" : "--inputs", most, most < 4 ? most : 4);
}

int compress_rules(const TrainConfig *c, const Plan *p, Err *e) {
    const char *t = c->ddp.compress;
    if (!t[0] || !p->data_parallel) return 0;
    double arg;
    int method = data_compress_parse(t, &arg);
    if (method < 0 || (method == COMPRESS_TOPK && !(arg > 0 && arg <= 1)))
        return refuse(e, "train: --compress %s: give topk:F with 0 < F <= 1, the share of each bucket's gradients "
                         "sent (e.g. topk:0.01), powersgd:R with R >= 1 (e.g. powersgd:4), or sign", t);
    if (method == COMPRESS_POWERSGD && powersgd_rules(c, p, arg, e)) return -1;
    if (c->ddp.zero)
        return refuse(e, "train: --compress %s sums whole buckets compressed, and --zero %lld "
                         "reduce-scatters them into shards: drop one of them", t, (long long)c->ddp.zero);
    if (c->gemm.deterministic)
        return refuse(e, "train: --deterministic sums every replica's rows in one tree, and --compress %s sums "
                         "each replica's compressed buckets: drop one of them", t);
    if (c->ddp.sync_every)
        return refuse(e, "train: --sync-every %lld sums no gradients (it averages the replicas' moves), so "
                         "--compress %s has none to compress: drop one of them", (long long)c->ddp.sync_every, t);
    if (p->T > 1)
        return refuse(e, "train: --compress %s compresses a whole layer's gradients, and --tp %d "
                         "splits the layer over ranks: drop one of them", t, p->T);
    return 0;
}

// ---- set-up ----

static size_t bucket_k(const Compress *x, size_t n) {
    size_t k = (size_t)ceil(x->fraction * (double)n);
    return k < 1 ? 1 : k > n ? n : k;
}

// powersgd, sign: the message buffers of the largest bucket's exchange, and PowerSGD's Q.
static void lowrank_setup(Compress *x, const GradSync *g) {
    size_t most = 1;
    for (int i = 0; i < g->nb; i++) {
        size_t m = lowrank_message_floats(x, g->s, &g->b[i]);
        most = m > most ? m : most;
    }
    x->tx = xmalloc(sizeof(float) * most);
    x->rx = xmalloc(sizeof(float) * most * (size_t)g->D);
    x->sum = xmalloc(sizeof(float) * most);
    if (x->method == COMPRESS_POWERSGD) x->q_n = lowrank_q_setup(x, g->s);
}

void compress_setup(const Plan *p, GradSync *sync, int n_sync, int keep_plain) {
    for (int s = 0; s < n_sync; s++) {
        GradSync *g = &sync[s];
        Compress *x = xcalloc(1, sizeof *x);
        x->method = p->data.compress;
        x->fraction = x->method == COMPRESS_TOPK ? p->data.topk : 1;
        x->rank = p->data.psgd_rank;
        size_t most = 1, most_k = 1, n = g->s->n_params;
        for (int i = 0; i < g->nb; i++) {
            most = g->b[i].n > most ? g->b[i].n : most;
            most_k = bucket_k(x, g->b[i].n) > most_k ? bucket_k(x, g->b[i].n) : most_k;
        }
        if (x->method != COMPRESS_TOPK) {
            lowrank_setup(x, g);
            most_k = 1;
        }
        x->err = xcalloc(n ? n : 1, sizeof(float));
        x->work = xmalloc(sizeof(float) * most);
        x->mag = xmalloc(sizeof(float) * most);
        x->idx = xmalloc(sizeof(int) * most_k * (size_t)g->D);
        x->val = xmalloc(sizeof(float) * most_k * (size_t)g->D);
        x->plain = keep_plain ? xmalloc(sizeof(float) * (n ? n : 1)) : NULL;
        g->cx = x;
        g->compressed = compress_finish;
    }
}

void compress_free(GradSync *sync, int n_sync) {
    for (int s = 0; s < n_sync; s++) {
        Compress *x = sync[s].cx;
        if (!x) continue;
        free(x->err); free(x->work); free(x->mag); free(x->idx); free(x->val); free(x->plain);
        free(x->q); free(x->q_off); free(x->tx); free(x->rx); free(x->sum);
        free(x);
        sync[s].cx = NULL;
        sync[s].compressed = NULL;
    }
}

// ---- the step ----

// The k-th largest of a[0..n) (1 <= k <= n); a is reordered (Hoare's selection).
static float kth_largest(float *a, long n, long k) {
    long lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return a[want];
}

// This rank's pairs of one bucket: the k entries of w = g' largest in magnitude (ties: the lower indices), in
// index order, into idx and val; the error buffer e keeps the rest (and 0 where an entry was sent).
static float magnitude(float v) { return isnan(v) ? INFINITY : fabsf(v); }  // (a NaN is sent: the loss shows it)

static void select_top(Compress *x, const float *w, size_t n, size_t k, float *e, int *idx, float *val) {
    for (size_t i = 0; i < n; i++) x->mag[i] = magnitude(w[i]);
    float t = kth_largest(x->mag, (long)n, (long)k);
    size_t above = 0, m = 0;
    for (size_t i = 0; i < n; i++) above += magnitude(w[i]) > t;
    size_t ties = k - above;  // entries equal to t still to send (at most k - 1 lie above the k-th largest)
    for (size_t i = 0; i < n; i++) {
        float a = magnitude(w[i]);
        int send = a > t || (a == t && ties > 0);
        if (a == t && send) ties--;
        if (send) {
            idx[m] = (int)i;
            val[m++] = w[i];
            e[i] = 0;
        } else e[i] = w[i];
    }
}

// One bucket: g' = g + e, its top k, the all-gather of every replica's pairs, and their sum in rank order.
static void bucket_exchange(GradSync *g, const Bucket *b) {
    Compress *x = g->cx;
    Stage *s = g->s;
    size_t n = b->n, k = bucket_k(x, n);
    int D = g->D, me = g->comm->replica;
    float *e = x->err + b->off;
    s->be->to_host(x->work, s->grads + b->off, sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x->work[i] += e[i];
    select_top(x, x->work, n, k, e, x->idx + (size_t)me * k, x->val + (size_t)me * k);
    MPI_Request q[2];  // (waited under --timeout, yielding the core where ranks share one: comms/watchdog.h)
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x->idx, (int)k, MPI_INT, g->comm->dp, &q[0]));
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x->val, (int)k, MPI_FLOAT, g->comm->dp, &q[1]));
    wd_wait_all(&q[0], g->comm->dp, "the indices of a compressed bucket");
    wd_wait_all(&q[1], g->comm->dp, "the values of a compressed bucket");
    memset(x->work, 0, sizeof(float) * n);
    for (int r = 0; r < D; r++)
        for (size_t j = 0; j < k; j++) x->work[x->idx[(size_t)r * k + j]] += x->val[(size_t)r * k + j];
    s->be->to_device(s->grads + b->off, x->work, sizeof(float) * n);
    x->sent += (double)(D - 1) * (double)k * (sizeof(int) + sizeof(float));
    x->exact += 2.0 * (D - 1) / D * (double)n * sizeof(float);
}

void compress_finish(GradSync *g) {
    Compress *x = g->cx;
    Stage *s = g->s;
    if (x->plain && x->steps == 0) {  // --verify: step 1's exact sum, kept aside (the run takes the compressed)
        s->be->to_host(x->plain, s->grads, sizeof(float) * s->n_params);
        comm_allreduce(g->comm, x->plain, s->n_params, 1.0f, ALLREDUCE_MPI);
    }
    x->sent = x->exact = 0;
    x->steps++;
    for (int i = 0; i < g->nb; i++) {
        double t0 = now_sec();
        if (x->method == COMPRESS_TOPK) bucket_exchange(g, &g->b[i]);
        else lowrank_exchange(g, &g->b[i]);
        g->spans[g->n_spans++] = (Span){t0, now_sec(), EV_GRAD_ALLREDUCE, (double)g->b[i].n * sizeof(float)};
        g->calls++;
    }
}

void compress_report_fill(DataReport *r, const struct GradSync *sync, int n_sync) {
    double v[2] = {0, 0};
    for (int k = 0; k < n_sync; k++) {
        v[0] += sync[k].cx ? sync[k].cx->sent : 0;
        v[1] += sync[k].cx ? sync[k].cx->exact : 0;
    }
    comm_allreduce_max_double(v, 2, MPI_COMM_WORLD);
    r->compress_sent = v[0];
    r->compress_exact = v[1];
}

void compress_swap_plain(GradSync *sync, int n_sync) {
    for (int k = 0; k < n_sync; k++) {
        Compress *x = sync[k].cx;
        Stage *s = sync[k].s;
        if (!x || !x->plain) continue;
        size_t bytes = sizeof(float) * s->n_params;
        float *now = xmalloc(bytes ? bytes : 1);
        s->be->to_host(now, s->grads, bytes);
        s->be->to_device(s->grads, x->plain, bytes);
        memcpy(x->plain, now, bytes);
        free(now);
    }
}

// ---- price ----

CompressTraffic compress_price(const TrainConfig *c, const Plan *p, int stage, int method, double arg) {
    CompressTraffic x = {0};
    double H = (double)c->hidden, floats = 0;
    for (int k = 0; k < p->V; k++) {
        int vs = plan_vstage(p, stage, k), n = plan_layers(p, vs), head = vs == p->S - 1;
        for (int i = 0; i < n + head; i++) {
            double out = i == n ? (double)c->classes : H, in = i < n && p->lo[vs] + i == 0 ? p->inputs : H;
            double r = fmin(arg, fmin(out, in));
            x.params += out * in + out;
            if (method == COMPRESS_POWERSGD)
                floats += (out + in) * r + out, x.mults += 3 * out * in * r, x.ortho += out * r * (2 * r + 3);
            if (method == COMPRESS_SIGN) floats += out * in / 32 + 1 + out;
        }
    }
    if (method == COMPRESS_TOPK) floats = 2 * arg * x.params;
    x.bytes = (p->D - 1) * 4 * floats;
    return x;
}

// ---- checkpoints ----

int compress_owns(const char *name) { return !strncmp(name, FILE_PREFIX, strlen(FILE_PREFIX)); }

static void file_path(const GradSync *sync, const char *dir, char *path, size_t n) {
    snprintf(path, n, "%s/" FILE_PREFIX "%05d.safetensors", dir, sync[0].comm->rank);
}

// The method's spelling in a checkpoint's metadata: topk:F, powersgd:R or sign.
static void method_text(const Compress *x, char *text, size_t n) {
    if (x->method == COMPRESS_TOPK) snprintf(text, n, "topk:%g", x->fraction);
    else if (x->method == COMPRESS_POWERSGD) snprintf(text, n, "powersgd:%d", x->rank);
    else snprintf(text, n, "sign");
}

void compress_save(const GradSync *sync, int n_sync, const char *dir, long long step) {
    int has_q = sync[0].cx->method == COMPRESS_POWERSGD, per = has_q ? 2 : 1;  // tensors per stage: error (and Q)
    char(*names)[ST_NAME_LEN] = xcalloc((size_t)(per * n_sync), ST_NAME_LEN);
    StSpec *specs = xcalloc((size_t)(per * n_sync), sizeof(StSpec));
    for (int k = 0; k < n_sync; k++) {
        snprintf(names[per * k], ST_NAME_LEN, "error.%d", k);
        specs[per * k] = (StSpec){names[per * k], 1, {(int64_t)sync[k].s->n_params, 0}};
        if (!has_q) continue;
        snprintf(names[per * k + 1], ST_NAME_LEN, "q.%d", k);
        specs[per * k + 1] = (StSpec){names[per * k + 1], 1, {(int64_t)sync[k].cx->q_n, 0}};
    }
    char meta[200], method[64], path[PATH_LEN + 64];
    method_text(sync[0].cx, method, sizeof method);
    snprintf(meta, sizeof meta, "{\"step\":\"%lld\",\"world\":\"%d\",\"compress\":\"%s\"}", step,
             sync[0].comm->size, method);
    size_t hlen;
    char *header = st_header_f32(specs, per * n_sync, meta, &hlen);
    file_path(sync, dir, path, sizeof path);
    StWriter w;
    if (st_writer_open(&w, path)) fatal("checkpoint: %s", w.err);
    int bad = st_writer_header(&w, header, hlen);
    for (int k = 0; k < n_sync && !bad; k++) {
        bad = st_writer_write(&w, sync[k].cx->err, sizeof(float) * sync[k].s->n_params);
        if (!bad && has_q) bad = st_writer_write(&w, sync[k].cx->q, sizeof(float) * sync[k].cx->q_n);
    }
    if (!bad) bad = st_writer_commit(&w);
    if (bad) {
        st_writer_abort(&w);
        fatal("checkpoint: %s", w.err);
    }
    free(header); free(specs); free(names);
}

// Copies the F32 vector `name` of n floats into to; 0, or -1 with why.
static int load_vector(const StFile *f, const char *name, size_t n, float *to, char *why, size_t n_why) {
    const StTensor *t = st_find(f, name);
    if (!t || strcmp(t->dtype, "F32") || t->ndim != 1 || t->shape[0] != (int64_t)n) {
        snprintf(why, n_why, "holds no %s of %zu floats", name, n);
        return -1;
    }
    memcpy(to, f->data + t->begin, sizeof(float) * n);  // (F32, little-endian: the machine's)
    return 0;
}

// Loads a rank's file into the error buffers (powersgd: and Q); "" or why not.
static void load_file(GradSync *sync, int n_sync, const StFile *f, long long step, char *why, size_t n_why) {
    char step_text[32], world_text[32], method[64];
    snprintf(step_text, sizeof step_text, "%lld", step);
    snprintf(world_text, sizeof world_text, "%d", sync[0].comm->size);
    const char *s = st_meta(f, "step"), *w = st_meta(f, "world"), *m = st_meta(f, "compress");
    if (!s || strcmp(s, step_text) || !w || strcmp(w, world_text)) {
        snprintf(why, n_why, "was written at step %s by %s ranks, not at step %lld by %d", s ? s : "?",
                 w ? w : "?", step, sync[0].comm->size);
        return;
    }
    method_text(sync[0].cx, method, sizeof method);
    size_t name_len = strcspn(method, ":");  // (topk: any F; powersgd: the same R, as Q's shape)
    int same = m && (sync[0].cx->method == COMPRESS_POWERSGD ? !strcmp(m, method) : !strncmp(m, method, name_len) &&
                                                                                        strcspn(m, ":") == name_len);
    if (!same) {
        snprintf(why, n_why, "holds the state of --compress %s, not of %s", m ? m : "?", method);
        return;
    }
    for (int k = 0; k < n_sync; k++) {
        char name[ST_NAME_LEN];
        snprintf(name, sizeof name, "error.%d", k);
        if (load_vector(f, name, sync[k].s->n_params, sync[k].cx->err, why, n_why)) return;
        snprintf(name, sizeof name, "q.%d", k);
        if (sync[k].cx->q && load_vector(f, name, sync[k].cx->q_n, sync[k].cx->q, why, n_why)) return;
    }
}

void compress_resume(GradSync *sync, int n_sync, const char *dir, long long step) {
    char path[PATH_LEN + 64], why[PATH_LEN + 400] = "", err[2 * PATH_LEN + 600] = "";
    file_path(sync, dir, path, sizeof path);
    uint8_t *buf = NULL;
    size_t len = 0;
    StFile f = {0};
    if (read_file(path, (size_t)1 << 40, &buf, &len, why, sizeof why) == 0 &&
        st_parse(buf, len, &f, why, sizeof why) == 0) {
        load_file(sync, n_sync, &f, step, why, sizeof why);
        st_free(&f);
    }
    free(buf);
    if (why[0])
        snprintf(err, sizeof err,
                 "train: --resume %s holds no state for this --compress on rank %d (%s: %s): resume it with the "
                 "ranks, layout and --compress that saved it, without --compress, or with --fresh-state (error buffers "
                 "from zero)",
                 dir, sync[0].comm->rank, path, why);
    agree_on_error(err[0] ? err : NULL);
}
