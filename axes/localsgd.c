// axes/localsgd.c: local SGD / DiLoCo (--sync-every H), the data axis' third file: the outer step that
// averages the replicas' moves from the anchor every H steps and moves the anchor by an outer Nesterov
// SGD, --verify's averaged gradients, and the state a checkpoint keeps of it on every rank.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "base/util.h"
#include "base/safetensors.h"
#include "comms/hier.h"
#include "axes/localsgd.h"

#define FILE_PREFIX "localsgd-rank-"

void localsgd_setup(LocalSgd *l, const Plan *p, Comm *comm, Stage *local, int n_local) {
    *l = (LocalSgd){.comm = comm,
                    .algo = p->data.algo == ALLREDUCE_SHM ? ALLREDUCE_MPI : p->data.algo,
                    .every = p->data.sync_every,
                    .lr = (float)p->data.outer_lr,
                    .momentum = (float)p->data.outer_momentum,
                    .local = local,
                    .n = n_local};
    if (l->algo == ALLREDUCE_HIER) comm_hier_prepare(comm);
    l->anchor = xcalloc((size_t)n_local, sizeof(float *));
    l->mom = xcalloc((size_t)n_local, sizeof(float *));
    size_t most = 1;
    for (int k = 0; k < n_local; k++) {
        size_t n = local[k].n_params;
        most = n > most ? n : most;
        l->anchor[k] = xmalloc(sizeof(float) * (n ? n : 1));
        l->mom[k] = xcalloc(n ? n : 1, sizeof(float));
        local[k].be->to_host(l->anchor[k], local[k].params, sizeof(float) * n);
    }
    l->work = xmalloc(sizeof(float) * most);
}

void localsgd_free(LocalSgd *l) {
    for (int k = 0; k < l->n; k++) {
        free(l->anchor[k]);
        free(l->mom[k]);
    }
    free(l->anchor);
    free(l->mom);
    free(l->work);
    memset(l, 0, sizeof *l);
}

int localsgd_due(const LocalSgd *l, int step, long long steps) {
    return (step + 1) % l->every == 0 || step + 1 == steps;
}

// One stage's outer step (see localsgd.h); d: the host's copy of its parameters on entry.
static void outer_step(LocalSgd *l, int k, float *d) {
    Stage *s = &l->local[k];
    size_t n = s->n_params;
    float *a = l->anchor[k], *m = l->mom[k], mu = l->momentum, lr = l->lr;
    for (size_t i = 0; i < n; i++) d[i] -= a[i];
    comm_allreduce(l->comm, d, n, 1.0f / (float)l->comm->replicas, l->algo);  // the replicas' mean move
    for (size_t i = 0; i < n; i++) {
        float g = -d[i];
        m[i] = mu * m[i] + g;
        a[i] -= lr * (g + mu * m[i]);
    }
    s->be->to_device(s->params, a, sizeof(float) * n);
    l->floats += (double)n;
}

void localsgd_sync(LocalSgd *l) {
    double t0 = now_sec();
    for (int k = 0; k < l->n; k++) {
        Stage *s = &l->local[k];
        s->be->to_host(l->work, s->params, sizeof(float) * s->n_params);
        outer_step(l, k, l->work);
    }
    l->syncs++;
    l->seconds += now_sec() - t0;
}

void localsgd_average_grads(LocalSgd *l, float ***saved) {
    *saved = xcalloc((size_t)l->n, sizeof(float *));
    for (int k = 0; k < l->n; k++) {
        Stage *s = &l->local[k];
        size_t bytes = sizeof(float) * s->n_params;
        (*saved)[k] = xmalloc(bytes ? bytes : 1);
        s->be->to_host((*saved)[k], s->grads, bytes);
        memcpy(l->work, (*saved)[k], bytes);
        comm_allreduce(l->comm, l->work, s->n_params, 1.0f / (float)l->comm->replicas, l->algo);
        s->be->to_device(s->grads, l->work, bytes);
    }
}

void localsgd_restore_grads(LocalSgd *l, float **saved) {
    for (int k = 0; k < l->n; k++) {
        Stage *s = &l->local[k];
        s->be->to_device(s->grads, saved[k], sizeof(float) * s->n_params);
        free(saved[k]);
    }
    free(saved);
}

// ---- checkpoints ----

int localsgd_owns(const char *name) { return !strncmp(name, FILE_PREFIX, strlen(FILE_PREFIX)); }

static void file_path(const LocalSgd *l, const char *dir, char *path, size_t n) {
    snprintf(path, n, "%s/" FILE_PREFIX "%05d.safetensors", dir, l->comm->rank);
}

// The tensors of a rank's file, in order: per stage its outer momentum, then (adam) its two moments.
static int file_tensors(const LocalSgd *l, int adam, char (*names)[ST_NAME_LEN], const float **host, float **dev) {
    int n = 0;
    for (int k = 0; k < l->n; k++) {
        snprintf(names[n], ST_NAME_LEN, "outer.momentum.%d", k);
        host[n] = l->mom[k];
        dev[n++] = NULL;
        for (int j = 0; j < 2 && adam; j++) {
            snprintf(names[n], ST_NAME_LEN, "optim.%s.%d", j ? "exp_avg_sq" : "exp_avg", k);
            host[n] = NULL;
            dev[n++] = j ? l->local[k].adam_v : l->local[k].adam_m;
        }
    }
    return n;
}

void localsgd_save(const LocalSgd *l, const char *dir, long long step, int optimizer) {
    int adam = optimizer == OPTIM_ADAM && l->n && l->local[0].adam_m, most = 3 * l->n;
    char(*names)[ST_NAME_LEN] = xcalloc((size_t)most, ST_NAME_LEN);
    const float **host = xcalloc((size_t)most, sizeof(float *));
    float **dev = xcalloc((size_t)most, sizeof(float *));
    StSpec *specs = xcalloc((size_t)most, sizeof(StSpec));
    int n = file_tensors(l, adam, names, host, dev), per = adam ? 3 : 1;
    for (int j = 0; j < n; j++) specs[j] = (StSpec){names[j], 1, {(int64_t)l->local[j / per].n_params, 0}};
    char meta[160], path[PATH_LEN + 64];
    snprintf(meta, sizeof meta, "{\"step\":\"%lld\",\"world\":\"%d\",\"every\":\"%d\"}", step, l->comm->size,
             l->every);
    size_t hlen;
    char *header = st_header_f32(specs, n, meta, &hlen);
    file_path(l, dir, path, sizeof path);
    StWriter w;
    if (st_writer_open(&w, path)) fatal("checkpoint: %s", w.err);
    int bad = st_writer_header(&w, header, hlen);
    for (int j = 0; j < n && !bad; j++) {
        const Stage *s = &l->local[j / per];
        size_t bytes = sizeof(float) * s->n_params;
        if (dev[j]) s->be->to_host(l->work, dev[j], bytes);
        bad = st_writer_write(&w, dev[j] ? l->work : host[j], bytes);
    }
    if (!bad) bad = st_writer_commit(&w);
    if (bad) {
        st_writer_abort(&w);
        fatal("checkpoint: %s", w.err);
    }
    free(header); free(specs); free(dev); free(host); free(names);
}

// Loads a rank's file into the momentum and the moments; "" or why not.
static void load_file(LocalSgd *l, const StFile *f, int adam, char *why, size_t n_why) {
    int most = 3 * l->n, per = adam ? 3 : 1;
    char(*names)[ST_NAME_LEN] = xcalloc((size_t)most, ST_NAME_LEN);
    const float **host = xcalloc((size_t)most, sizeof(float *));
    float **dev = xcalloc((size_t)most, sizeof(float *));
    int n = file_tensors(l, adam, names, host, dev);
    for (int j = 0; j < n && !why[0]; j++) {
        Stage *s = &l->local[j / per];
        const StTensor *t = st_find(f, names[j]);
        if (!t || strcmp(t->dtype, "F32") || t->ndim != 1 || t->shape[0] != (int64_t)s->n_params) {
            snprintf(why, n_why, "holds no %s of %zu floats", names[j], s->n_params);
            break;
        }
        const void *src = f->data + t->begin;  // (F32, little-endian: the machine's floats)
        if (dev[j]) s->be->to_device(dev[j], src, sizeof(float) * s->n_params);
        else memcpy((float *)host[j], src, sizeof(float) * s->n_params);
    }
    free(dev); free(host); free(names);
}

void localsgd_resume(LocalSgd *l, const char *dir, long long step, int optimizer) {
    char path[PATH_LEN + 64], why[PATH_LEN + 400] = "", err[2 * PATH_LEN + 600] = "";
    file_path(l, dir, path, sizeof path);
    uint8_t *buf = NULL;
    size_t len = 0;
    StFile f = {0};
    char step_text[32], world_text[32];
    snprintf(step_text, sizeof step_text, "%lld", step);
    snprintf(world_text, sizeof world_text, "%d", l->comm->size);
    if (read_file(path, (size_t)1 << 40, &buf, &len, why, sizeof why) == 0 &&
        st_parse(buf, len, &f, why, sizeof why) == 0) {
        const char *s = st_meta(&f, "step"), *w = st_meta(&f, "world");
        if (!s || strcmp(s, step_text) || !w || strcmp(w, world_text))
            snprintf(why, sizeof why, "was written at step %s by %s ranks, not at step %lld by %d", s ? s : "?",
                     w ? w : "?", step, l->comm->size);
        else load_file(l, &f, optimizer == OPTIM_ADAM, why, sizeof why);
        st_free(&f);
    }
    free(buf);
    if (why[0])
        snprintf(err, sizeof err,
                 "train: --resume %s holds no local SGD state for --sync-every on rank %d (%s: %s): resume it with "
                 "the ranks and layout that saved it with --sync-every, without --sync-every, or with --fresh-state "
                 "(the outer state from zero)",
                 dir, l->comm->rank, path, why);
    agree_on_error(err[0] ? err : NULL);
}
