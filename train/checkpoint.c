// train/checkpoint.c: saving and resuming training state (see checkpoint.h): the safetensors files of
// the stages, the manifest that commits them, re-partitioning on load, the one-verdict-for-all-ranks
// checks of bad checkpoints.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "train/checkpoint.h"
#include "train/manifest.h"
#include "axes/tensor.h"  // the whole tensors of a stage and a rank's shards
#include "axes/localsgd.h"  // its files in the folder
#include "axes/compress.h"  // its files in the folder
#include "comms.h"
#include "base/data.h"
#include "base/fault.h"
#include "comms/launch.h"
#include "comms/watchdog.h"  // wd_wait_all
#include "base/safetensors.h"
#include "base/util.h"

#define MANIFEST_MAX (16u << 20)
#define FILE_MAX ((size_t)1 << 40)
#define ERR_LEN 2048  // a one-line reason: "train: --resume DIR: " + WHY_LEN
#define WHY_LEN 1024

static uint32_t g_run_id;        // part of this run's file names, so no save overwrites a live file
static int64_t g_last_saved = -1;

// ---- names ----

static const char *optim_name(int optimizer) { return optimizer == OPTIM_SGD ? "sgd" : "adam"; }

typedef struct {
    char name[64];
    int ndim;
    int64_t shape[2];
    size_t offset;  // in floats, within the whole stage's flat params (axes/tensor.c's stage_full_off; moments alike)
    int layer;      // global layer index, -1 for the head
} TensorRef;

// The parameter tensors of a stage in file order, with their global names and [out, in] shapes, at
// their offsets in the whole stage (with --tp a rank holds a shard of it: saves gather, resumes cut);
// tensors_max: the most a stage of the model has (an MoE layer's 2 + 2E: moe_tensor).
static size_t tensors_max(const TrainConfig *c) { return (size_t)(2 + 2 * c->moe.experts) * (size_t)c->layers + 2; }
static int stage_tensors(const Stage *s, TensorRef *t) {
    int n = 0;
    for (int i = 0; i < s->n_layers; i++) {
        int E = s->moe ? s->moe->spec.experts : 0, l = s->lo + i;
        for (int j = 0; moe_is(s->moe, i) && j < 2 + 2 * E; j++, n++) {  // an MoE layer's (moe.h)
            t[n] = (TensorRef){.layer = l, .offset = stage_full_off(s, i)};
            t[n].ndim = moe_tensor(s->H, E, l, j, t[n].name, sizeof t->name, t[n].shape, &t[n].offset);
        }
        if (moe_is(s->moe, i)) continue;
        size_t off = stage_full_off(s, i), wlen = (size_t)s->H * stage_fan_in(s, i);
        TensorRef w = {"", 2, {s->H, stage_fan_in(s, i)}, off, s->lo + i};
        TensorRef b = {"", 1, {s->H, 0}, off + wlen, s->lo + i};
        snprintf(w.name, sizeof w.name, "layers.%d.weight", s->lo + i);
        snprintf(b.name, sizeof b.name, "layers.%d.bias", s->lo + i);
        t[n++] = w;
        t[n++] = b;
    }
    if (s->has_head) {
        size_t off = stage_full_off(s, s->n_layers);
        t[n++] = (TensorRef){"head.weight", 2, {s->C, s->H}, off, -1};
        t[n++] = (TensorRef){"head.bias", 1, {s->C, 0}, off + (size_t)s->C * s->H, -1};
    }
    return n;
}
static size_t tensor_numel(const TensorRef *t) {
    return (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
}

// ---- setup ----

static int mkdir_p(const char *dir) {
    char p[PATH_LEN];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(p, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

// Every rank must see the --save folder rank 0 made (the writers of the other stages write there, and
// a node-local scratch disk would fail the first save hours in): each reads rank 0's probe, which holds
// the run's id; the ranks that cannot, and their hosts, end the run at start-up with one line, exit 2.
static void check_shared(const char *dir, uint32_t id, MPI_Comm comm) {
    typedef struct { int ok; char host[64]; } Saw;
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    char probe[PATH_LEN + 32];
    snprintf(probe, sizeof probe, "%s/.micropp-probe", dir);
    Saw me = {0, ""}, *all = xcalloc((size_t)size, sizeof(Saw));
    FILE *f = fopen(probe, "r");
    if (f) {
        char text[16] = "";
        me.ok = fgets(text, sizeof text, f) && strtoul(text, NULL, 16) == id;
        fclose(f);
    }
    launch_host_name(me.host, sizeof me.host);
    MPI_Request q;
    MPI_CHECK(MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, comm, &q));
    wd_wait(&q, NULL, -1, "checking that every rank sees the --save folder");
    if (rank == 0) unlink(probe);  // (every rank has read it: the gather is complete)
    char ranks[160] = "", hosts[200] = "";
    int bad = 0;
    for (int r = 0; r < size; r++) {
        if (all[r].ok) continue;
        size_t k = strlen(ranks), h = strlen(hosts);
        if (bad++ < 8) snprintf(ranks + k, sizeof ranks - k, "%s%d", k ? ", " : "", r);
        if (!strstr(hosts, all[r].host) && h < 120)
            snprintf(hosts + h, sizeof hosts - h, "%s%s", h ? ", " : "", all[r].host);
    }
    if (bad)
        user_error("train: --save %s: rank%s %s%s (host%s %s) do%s not see the folder rank 0 made on %s: give --save a "
                   "folder every host shares (a network file system), not one on a node's own disk",
                   dir, bad > 1 ? "s" : "", ranks, bad > 8 ? ", ..." : "", strchr(hosts, ',') ? "s" : "", hosts,
                   bad > 1 ? "" : "es", all[0].host);
    free(all);
}

// The --save folder rank 0 made at start-up ("": it was there before, or none). A run that ends before
// its first save, a refusal at --resume's checks included, leaves nothing behind: rmdir removes the
// folder at exit only while it is empty (a folder made by an earlier run, or one with a checkpoint, stays).
static char g_made_save[PATH_LEN];
static void drop_unused_save(void) {
    if (g_made_save[0]) rmdir(g_made_save);
}

void ckpt_setup(const TrainConfig *c, MPI_Comm comm) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    char err[ERR_LEN] = "";
    uint32_t id = 0;
    if (rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = (uint32_t)mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 48));
        if (c->ckpt.resume[0]) {
            char path[PATH_LEN + 32];
            snprintf(path, sizeof path, "%s/" MANIFEST, c->ckpt.resume);
            if (access(path, R_OK) != 0)
                snprintf(err, sizeof err,
                         "train: --resume %s: no readable %s there (%s): give a folder written by --save",
                         c->ckpt.resume, MANIFEST, strerror(errno));
        }
        if (!err[0] && c->ckpt.save[0]) {
            char probe[PATH_LEN + 32];
            snprintf(probe, sizeof probe, "%s/.micropp-probe", c->ckpt.save);
            FILE *f = NULL;
            struct stat st;
            int existed = stat(c->ckpt.save, &st) == 0;
            if (mkdir_p(c->ckpt.save) != 0)
                snprintf(err, sizeof err, "train: --save %s: cannot create that folder: %s (choose a writable path)",
                         c->ckpt.save, strerror(errno));
            else if (!(f = fopen(probe, "w")) || fprintf(f, "%08x\n", id) < 0)
                snprintf(err, sizeof err, "train: --save %s: cannot write there: %s (choose a writable folder)",
                         c->ckpt.save, strerror(errno));
            if (f && fclose(f) != 0 && !err[0])
                snprintf(err, sizeof err, "train: --save %s: cannot write there: %s (choose a writable folder)",
                         c->ckpt.save, strerror(errno));
            if (err[0]) unlink(probe);
            if (!existed && !err[0] && !g_made_save[0]) {
                snprintf(g_made_save, sizeof g_made_save, "%s", c->ckpt.save);
                atexit(drop_unused_save);
            }
        }
    }
    comm_agree(comm, err);
    MPI_Request q;  // (not MPI_Bcast: a blocking collective spins where ranks outnumber cores)
    MPI_CHECK(MPI_Ibcast(&id, 1, MPI_UINT32_T, 0, comm, &q));
    wd_wait_all(&q, comm, "sharing the run's id");
    if (c->ckpt.save[0]) check_shared(c->ckpt.save, id, comm);
    g_run_id = id;
    g_last_saved = -1;
}

// ---- the manifest ----

// Rank 0 of comm reads the manifest; everyone gets its text, or ends with rank 0's reason.
static char *manifest_fetch(const char *dir, MPI_Comm comm) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    char err[ERR_LEN] = "";
    uint8_t *buf = NULL;
    size_t len = 0;
    if (rank == 0) {
        char path[PATH_LEN + 32];
        snprintf(path, sizeof path, "%s/" MANIFEST, dir);
        char why[WHY_LEN];
        if (read_file(path, MANIFEST_MAX, &buf, &len, why, sizeof why))
            snprintf(err, sizeof err, "train: --resume %s: %s", dir, why);
        else if (memchr(buf, 0, len))
            snprintf(err, sizeof err, "train: --resume %s: %s holds a NUL byte: it is corrupted", dir, MANIFEST);
    }
    comm_agree(comm, err);
    uint64_t n = len;
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm));
    char *text = xmalloc((size_t)n + 1);
    if (rank == 0) memcpy(text, buf, (size_t)n);
    free(buf);
    MPI_CHECK(MPI_Bcast(text, (int)n, MPI_CHAR, 0, comm));
    text[n] = 0;
    return text;
}

int64_t ckpt_resume_step(const char *dir, MPI_Comm comm) {
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    int64_t step = 0;
    if (rank == 0) {
        char path[PATH_LEN + 32], why[WHY_LEN];
        uint8_t *buf = NULL;
        size_t len = 0;
        Manifest m;
        snprintf(path, sizeof path, "%s/" MANIFEST, dir);
        if (!read_file(path, MANIFEST_MAX, &buf, &len, why, sizeof why) && !memchr(buf, 0, len)) {
            char *text = xmalloc(len + 1);
            memcpy(text, buf, len);
            text[len] = 0;
            if (!manifest_parse(text, &m, why, sizeof why)) { step = m.step; free(m.files); }
            free(text);
        }
        free(buf);
    }
    MPI_CHECK(MPI_Bcast(&step, 1, MPI_INT64_T, 0, comm));
    return step;
}

// ---- resume ----

static int ranges_meet(int lo1, int hi1, int lo2, int hi2) { return lo1 < hi2 && lo2 < hi1; }

// Copies tensor `want` (name, F32, shape) from file f into device memory dst. Returns 0 or -1 + err.
// Every value must be finite; Adam's second moment (squares, averaged: `squares`) not negative either.
static int load_tensor(const StFile *f, const char *file, const char *name, const TensorRef *want, int squares,
                       const Backend *be, float *dst, char *err, size_t errlen) {
    const StTensor *t = st_find(f, name);
    if (!t) { snprintf(err, errlen, "%s lacks tensor '%s' that the manifest places there", file, name); return -1; }
    if (strcmp(t->dtype, "F32")) {
        snprintf(err, errlen, "%s: tensor '%s' has dtype %s, expected F32", file, name, t->dtype);
        return -1;
    }
    int ok = t->ndim == want->ndim;
    for (int d = 0; ok && d < want->ndim; d++) ok = t->shape[d] == want->shape[d];
    if (!ok) {
        char got[96] = "", exp[64];
        for (int d = 0; d < t->ndim && d < 4; d++) {
            size_t l = strlen(got);
            snprintf(got + l, sizeof got - l, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        }
        if (want->ndim == 2)
            snprintf(exp, sizeof exp, "%lld,%lld", (long long)want->shape[0], (long long)want->shape[1]);
        else snprintf(exp, sizeof exp, "%lld", (long long)want->shape[0]);
        snprintf(err, errlen, "%s: tensor '%s' has shape [%s], expected [%s]", file, name, got, exp);
        return -1;
    }
    for (size_t i = 0, n = (t->end - t->begin) / sizeof(float); i < n; i++) {  // a diverged run's state is not resumed
        float v;
        memcpy(&v, f->data + t->begin + i * sizeof(float), sizeof v);  // (unaligned)
        if (isfinite(v) && !(squares && v < 0)) continue;
        if (!isfinite(v))
            snprintf(err, errlen,
                     "%s: tensor '%s' holds %s at index %zu: it was saved from a run that diverged; resume an earlier "
                     "checkpoint",
                     file, name, isnan(v) ? "NaN" : "Inf", i);
        else
            snprintf(err, errlen,
                "%s: tensor '%s' holds %g at index %zu, but Adam's second moment is a mean of squares and cannot be "
                "negative: the file was altered or damaged; resume an earlier checkpoint",
                file, name, v, i);
        return -1;
    }
    be->to_device(dst, f->data + t->begin, t->end - t->begin);  // data may be unaligned: to_device is a byte copy
    return 0;
}

// What a resumed run may change on purpose, said once (rank 0).
static void resume_notes(const TrainConfig *c, const Manifest *m) {
    if (m->seed >= 0 && m->seed != (double)c->seed)
        fprintf(stderr,
                "micropp: note: --seed %lld differs from the checkpoint's %.0f (the synthetic task and data depend "
                "on it)\n",
                (long long)c->seed, m->seed);
    if (m->batch >= 0 && m->batch != (double)c->batch)
        fprintf(stderr,
                "micropp: note: --batch %lld differs from the checkpoint's %.0f (the data stream goes on from "
                "sample %llu)\n",
                (long long)c->batch, m->batch, (unsigned long long)m->next_sample);
    if (m->samples >= 0 && m->samples != (double)c->samples)
        fprintf(stderr, "micropp: note: --samples %lld differs from the checkpoint's %.0f\n", (long long)c->samples,
                m->samples);
    if (m->data[0] && strcmp(m->data, c->data))
        fprintf(stderr, "micropp: note: --data %s differs from the checkpoint's %s\n", c->data, m->data);
    if (m->lr >= 0 && m->lr != c->lr)
        fprintf(stderr, "micropp: note: --lr %g differs from the checkpoint's %g\n", c->lr, m->lr);
}

// The manifest every rank parsed (the same text, so the same verdict without a message), checked
// against this run: the model's shape, the optimizer and the step must match; what may differ on
// purpose (a new learning rate, more data) is said once, by rank 0.
static void resume_manifest(const CkptLayout *l, int rank, Manifest *m) {
    const TrainConfig *c = l->c;
    const char *dir = c->ckpt.resume;
    char *text = manifest_fetch(dir, l->comm);
    char why[WHY_LEN], err[ERR_LEN] = "";
    if (manifest_parse(text, m, why, sizeof why)) snprintf(err, sizeof err, "train: --resume %s: %s", dir, why);
    free(text);
    if (err[0]) user_error("%s", err);
    const char *what = NULL;
    long long mine = 0, theirs = 0;
    if (m->layers != c->layers) { what = "layers"; mine = c->layers; theirs = m->layers; }
    else if (m->hidden != c->hidden) { what = "hidden"; mine = c->hidden; theirs = m->hidden; }
    else if (m->inputs != l->inputs) { what = "inputs"; mine = l->inputs; theirs = m->inputs; }
    else if (m->classes != c->classes) { what = "classes"; mine = c->classes; theirs = m->classes; }
    else if (m->experts != c->moe.experts) { what = "experts"; mine = c->moe.experts; theirs = m->experts; }
    else if (m->experts && m->moe_every != c->moe.every) {  // (which layers are MoE layers)
        what = "moe-every"; mine = c->moe.every; theirs = m->moe_every;
    }
    if (what) {
        free(m->files);
        user_error("train: --resume %s: the checkpoint has --%s %lld but this run has --%s %lld: use --%s %lld or "
                   "start without --resume",
                   dir, what, theirs, what, mine, what, theirs);
    }
    if (m->optimizer != c->optimizer) {
        free(m->files);
        user_error("train: --resume %s: the checkpoint was trained with --optimizer %s but this run uses %s: use "
                   "--optimizer %s",
                   dir, optim_name(m->optimizer), optim_name(c->optimizer), optim_name(m->optimizer));
    }
    if (m->step >= l->steps) {
        free(m->files);
        if (m->step >= (1LL << 30))  // train's --steps range ends below it: nothing to suggest
            user_error("train: --resume %s: the checkpoint is at step %lld, past the most --steps accepts (%lld): it "
                       "cannot be trained further",
                       dir, (long long)m->step, (long long)(1LL << 30));
        user_error("train: --resume %s: the checkpoint is at step %lld and --steps %lld is the TOTAL step count: use "
                   "--steps > %lld",
                   dir, (long long)m->step, (long long)l->steps, (long long)m->step);
    }
    if (rank == 0) resume_notes(c, m);
}

// A local stage's whole tensors on the host (params, Adam's moments), as the files hold them.
typedef struct { float *p, *m, *v; } Whole;

// One file some local stage needs: read it, check its size and CRC against the manifest, parse it,
// copy the tensors of every local stage it holds into that stage's Whole. Returns the tensors
// loaded; err on a failure ("" before), naming where a rank other than 0 read it.
static int resume_file(const CkptLayout *l, const FileRec *fr, int rank, TensorRef *refs, Whole *whole, char *err,
                       size_t errlen) {
    const char *dir = l->c->ckpt.resume;
    int adam = l->c->optimizer == OPTIM_ADAM, loaded = 0;
    char path[PATH_LEN + ST_NAME_LEN + 2], why[WHY_LEN], there[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, fr->file);
    if (rank != 0) {  // every rank checks its copy against the manifest rank 0 read
        char host[64];
        launch_host_name(host, sizeof host);
        snprintf(there, sizeof there,
                 " (read on rank %d, host %s; the manifest on rank 0: if the hosts hold different copies, copy the "
                 "same folder to every host)",
                 rank, host);
    }
    uint8_t *buf;
    size_t len;
    StFile f;
    if (read_file(path, FILE_MAX, &buf, &len, why, sizeof why)) {
        snprintf(err, errlen, "train: --resume %s: %s%s", dir, why, there);
        return 0;
    }
    uint32_t crc = crc32_update(0, buf, len);
    if (len != fr->bytes)
        snprintf(err, errlen,
                 "train: --resume %s: %s has %zu bytes but the manifest says %llu (truncated or replaced): restore "
                 "it or resume from another checkpoint%s",
                 dir, fr->file, len, (unsigned long long)fr->bytes, there);
    else if (crc != fr->crc)
        snprintf(err, errlen,
                 "train: --resume %s: %s is corrupted: its CRC-32 is %08x but the manifest says %08x: restore it "
                 "or resume from another checkpoint%s",
                 dir, fr->file, crc, fr->crc, there);
    else if (st_parse(buf, len, &f, why, sizeof why))
        snprintf(err, errlen, "train: --resume %s: %s is not a valid safetensors file: %s", dir, fr->file, why);
    if (err[0]) { free(buf); return 0; }
    for (int k = 0; k < l->n_local && !err[0]; k++) {
        Stage *s = &l->local[k];
        int nt = stage_tensors(s, refs);
        for (int j = 0; j < nt && !err[0]; j++) {
            const TensorRef *t = &refs[j];
            if (t->layer < 0 ? !fr->head : !(t->layer >= fr->lo && t->layer < fr->hi)) continue;
            char m_name[96], v_name[96];
            snprintf(m_name, sizeof m_name, "optim.exp_avg.%s", t->name);
            snprintf(v_name, sizeof v_name, "optim.exp_avg_sq.%s", t->name);
            const Backend *host = &backend_cpu;
            const Whole *to = &whole[k];
            int bad = load_tensor(&f, fr->file, t->name, t, 0, host, to->p + t->offset, why, sizeof why);
            if (!bad && adam)
                bad = load_tensor(&f, fr->file, m_name, t, 0, host, to->m + t->offset, why, sizeof why) ||
                      load_tensor(&f, fr->file, v_name, t, 1, host, to->v + t->offset, why, sizeof why);
            if (bad) snprintf(err, errlen, "train: --resume %s: %s", dir, why);
            else loaded++;
        }
    }
    st_free(&f);
    free(buf);
    return loaded;
}

// The whole tensors into the stage: its shard (stage_shard: its rank's part, --tp's or --ep's) onto the device.
static void whole_to_stage(Stage *s, const Whole *w) {
    float *local = xmalloc(sizeof(float) * s->n_params), *src[3] = {w->p, w->m, w->v},
          *dst[3] = {s->params, s->adam_m, s->adam_v};
    for (int j = 0; j < 3; j++) {
        if (!src[j] || !dst[j]) continue;
        stage_shard(s, stage_shard_rank(s), src[j], local);
        s->be->to_device(dst[j], local, sizeof(float) * s->n_params);
    }
    free(local);
}

int64_t ckpt_resume(const CkptLayout *l, uint64_t *next_sample, char *desc, size_t desc_len) {
    const TrainConfig *c = l->c;
    int rank;
    MPI_CHECK(MPI_Comm_rank(l->comm, &rank));
    Manifest m;
    resume_manifest(l, rank, &m);
    char err[ERR_LEN] = "";
    int n_loaded = 0, n_needed = 0;
    TensorRef *refs = xmalloc(sizeof(TensorRef) * tensors_max(c));
    for (int k = 0; k < l->n_local; k++) n_needed += stage_tensors(&l->local[k], refs);
    for (int k = 0; k < l->n_local && c->optimizer == OPTIM_ADAM; k++)
        if (!l->local[k].adam_m) {  // the moments exist from step 1 on; allocate them to load into
            l->local[k].adam_m = l->local[k].be->alloc(l->local[k].n_params * sizeof(float));
            l->local[k].adam_v = l->local[k].be->alloc(l->local[k].n_params * sizeof(float));
        }
    Whole *whole = xcalloc((size_t)l->n_local, sizeof(Whole));
    for (int k = 0; k < l->n_local; k++) {
        size_t nf = stage_full_params(&l->local[k]) * sizeof(float);
        whole[k] = (Whole){xmalloc(nf), c->optimizer == OPTIM_ADAM ? xmalloc(nf) : NULL,
                           c->optimizer == OPTIM_ADAM ? xmalloc(nf) : NULL};
    }
    for (int i = 0; i < m.n_files && !err[0]; i++) {
        const FileRec *fr = &m.files[i];
        int need = 0;
        for (int k = 0; k < l->n_local; k++)
            need |= ranges_meet(fr->lo, fr->hi, l->local[k].lo, l->local[k].hi) || (fr->head && l->local[k].has_head);
        if (need) n_loaded += resume_file(l, fr, rank, refs, whole, err, sizeof err);
    }
    for (int k = 0; k < l->n_local; k++) {  // this rank's shard of every whole tensor (T = 1: all of it)
        if (!err[0] && n_loaded == n_needed) whole_to_stage(&l->local[k], &whole[k]);
        free(whole[k].p); free(whole[k].m); free(whole[k].v);
    }
    free(whole);
    if (!err[0] && n_loaded != n_needed)  // cannot happen when the manifest covers every layer once
        snprintf(err, sizeof err, "train: --resume %s: found %d of the %d tensors this rank needs", c->ckpt.resume,
                 n_loaded, n_needed);
    free(refs);
    free(m.files);
    comm_agree_code(l->comm, err, 2 | AGREE_NAME_WHERE);
    *next_sample = m.next_sample;
    snprintf(desc, desc_len, "step %lld (written by %s, %d stage%s%s)", (long long)m.step, m.mode, m.stages,
             m.stages == 1 ? "" : "s", m.dp > 1 ? ", data-parallel" : "");
    return m.step;
}

// ---- save ----

// The group a stage's shards are gathered over: --tp's or --ep's (never both), its size and this rank's place.
static int shard_group(const CkptLayout *l, MPI_Comm *comm, int *me) {
    *comm = l->tp > 1 ? l->tp_comm : l->ep_comm;
    *me = l->tp > 1 ? l->tp_rank : l->ep > 1 ? l->ep_rank : 0;
    return l->tp > 1 ? l->tp : l->ep > 1 ? l->ep : 1;
}

// One of a local stage's flat buffers (params or a moment; NULL: zeros, Adam before its first step)
// made whole on the host: with --tp or --ep gathered from the group at its rank 0 and unsharded there
// (collective over the group; NULL on the other ranks).
static float *gather_whole(const CkptLayout *l, const Stage *s, const float *src) {
    MPI_Comm comm;
    int me;
    size_t n = s->n_params, T = (size_t)shard_group(l, &comm, &me);
    float *mine = xcalloc(n, sizeof(float)), *all = me == 0 ? xmalloc(sizeof(float) * n * T) : NULL, *whole = NULL;
    if (src) s->be->to_host(mine, src, sizeof(float) * n);
    if (T > 1) {
        CHECK(n <= INT_MAX, "a stage shard of %zu floats: more than MPI's int count", n);
        MPI_CHECK(MPI_Gather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, comm));
    } else memcpy(all, mine, sizeof(float) * n);
    if (all) {
        whole = xmalloc(sizeof(float) * stage_full_params(s));
        for (size_t t = 0; t < T; t++) stage_unshard(s, (int)t, all + t * n, whole);
    }
    free(mine); free(all);
    return whole;
}

// Writes one stage's file into dir from its whole tensors (params, and Adam's moments or NULL); fills
// rec. Any failure ends the job (fatal).
static void write_stage(const CkptLayout *l, const Stage *s, const float *const whole[3], int stage, int64_t step,
                        uint64_t next_sample, FileRec *rec) {
    const TrainConfig *c = l->c;
    int adam = c->optimizer == OPTIM_ADAM;
    TensorRef *refs = xmalloc(sizeof(TensorRef) * tensors_max(c));
    int nt = stage_tensors(s, refs), n = nt * (adam ? 3 : 1);
    StSpec *specs = xmalloc(sizeof(StSpec) * (size_t)n);
    char (*names)[96] = xmalloc(sizeof(*names) * (size_t)n);
    size_t most = 0;
    for (int j = 0; j < n; j++) {
        const TensorRef *t = &refs[j % nt];
        if (j < nt) snprintf(names[j], sizeof names[j], "%s", t->name);
        else snprintf(names[j], sizeof names[j], "optim.%s.%s", j < 2 * nt ? "exp_avg" : "exp_avg_sq", t->name);
        specs[j] = (StSpec){names[j], t->ndim, {t->shape[0], t->shape[1]}};
        if (tensor_numel(t) > most) most = tensor_numel(t);
    }
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"format\":\"micropp\",\"step\":\"%lld\",\"next_sample\":\"%llu\",\"stage\":\"%d\",\"stages\":\"%d\","
             "\"layers\":\"%d-%d\",\"head\":\"%s\",\"optimizer\":\"%s\"}",
             (long long)step, (unsigned long long)next_sample, stage, l->stages, s->lo, s->hi,
             s->has_head ? "true" : "false", optim_name(c->optimizer));
    size_t hlen;
    char *header = st_header_f32(specs, n, meta, &hlen);
    CHECK(header, "out of memory building a safetensors header");
    snprintf(rec->file, sizeof rec->file, "step-%08lld-%08x-stage-%02d-of-%02d.safetensors", (long long)step, g_run_id,
             stage, l->stages);
    char path[PATH_LEN + ST_NAME_LEN + 2];
    snprintf(path, sizeof path, "%s/%s", c->ckpt.save, rec->file);
    StWriter w;
    if (st_writer_open(&w, path)) fatal("checkpoint: %s", w.err);
    // dies halfway through the data
    if (fault_due(FAULT_IO, step)) w.fail_after = 8 + hlen + (uint64_t)s->n_params * 2;
    float *host = xmalloc(sizeof(float) * (most ? most : 1));
    int bad = st_writer_header(&w, header, hlen);
    for (int j = 0; j < n && !bad; j++) {
        const TensorRef *t = &refs[j % nt];
        const float *src = whole[j / nt];
        size_t bytes = sizeof(float) * tensor_numel(t);
        memcpy(host, src + t->offset, bytes);
        bad = st_writer_write(&w, host, bytes);
    }
    if (!bad) bad = st_writer_commit(&w);
    if (bad) { st_writer_abort(&w); fatal("checkpoint: %s", w.err); }
    rec->stage = stage; rec->lo = s->lo; rec->hi = s->hi; rec->head = s->has_head;
    rec->bytes = w.bytes; rec->crc = w.crc;
    free(host); free(header); free(names); free(specs); free(refs);
}

static void write_manifest(const CkptLayout *l, int64_t step, uint64_t next_sample, const FileRec *recs, int n) {
    const TrainConfig *c = l->c;
    cJSON *o = cJSON_CreateObject(), *cfg = cJSON_CreateObject(), *lay = cJSON_CreateObject(),
          *files = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "format", "micropp-checkpoint");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "next_sample", (double)next_sample);
    cJSON_AddNumberToObject(cfg, "layers", (double)c->layers);
    cJSON_AddNumberToObject(cfg, "hidden", (double)c->hidden);
    cJSON_AddNumberToObject(cfg, "inputs", (double)l->inputs);
    cJSON_AddNumberToObject(cfg, "classes", (double)c->classes);
    if (c->moe.experts) cJSON_AddNumberToObject(cfg, "experts", (double)c->moe.experts);
    if (c->moe.experts) cJSON_AddNumberToObject(cfg, "moe_every", (double)c->moe.every);
    cJSON_AddStringToObject(cfg, "optimizer", optim_name(c->optimizer));
    cJSON_AddNumberToObject(cfg, "lr", c->lr);
    cJSON_AddNumberToObject(cfg, "batch", (double)c->batch);
    cJSON_AddNumberToObject(cfg, "seed", (double)c->seed);
    cJSON_AddStringToObject(cfg, "data", c->data);
    cJSON_AddNumberToObject(cfg, "samples", (double)c->samples);
    cJSON_AddItemToObject(o, "config", cfg);
    cJSON_AddStringToObject(lay, "mode", l->mode);
    cJSON_AddNumberToObject(lay, "world", l->world);
    cJSON_AddNumberToObject(lay, "stages", l->stages);
    cJSON_AddNumberToObject(lay, "dp", l->dp);
    cJSON_AddNumberToObject(lay, "tp", l->tp > 1 ? l->tp : 1);
    int *part = xmalloc(sizeof(int) * (size_t)l->stages);
    for (int k = 0; k < l->stages; k++) part[k] = l->lo[k + 1] - l->lo[k];
    cJSON_AddItemToObject(lay, "partition", cJSON_CreateIntArray(part, l->stages));
    free(part);
    cJSON_AddItemToObject(o, "layout", lay);
    cJSON_AddStringToObject(o, "checksum", "crc32 (zlib.crc32 of the whole file)");
    for (int i = 0; i < n; i++) {
        cJSON *f = cJSON_CreateObject();
        int range[2] = {recs[i].lo, recs[i].hi};
        cJSON_AddStringToObject(f, "file", recs[i].file);
        cJSON_AddNumberToObject(f, "stage", recs[i].stage);
        cJSON_AddItemToObject(f, "layers", cJSON_CreateIntArray(range, 2));
        cJSON_AddBoolToObject(f, "head", recs[i].head);
        cJSON_AddNumberToObject(f, "bytes", (double)recs[i].bytes);
        cJSON_AddNumberToObject(f, "crc32", (double)recs[i].crc);
        cJSON_AddItemToArray(files, f);
    }
    cJSON_AddItemToObject(o, "files", files);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    CHECK(text, "out of memory printing the manifest");
    char path[PATH_LEN + 32];
    snprintf(path, sizeof path, "%s/" MANIFEST, c->ckpt.save);
    StWriter w;
    if (st_writer_open(&w, path) || st_writer_write(&w, text, strlen(text)) || st_writer_write(&w, "\n", 1) ||
        st_writer_commit(&w)) {
        st_writer_abort(&w);
        fatal("checkpoint: %s", w.err);
    }
    free(text);
}

// A stage file's name, or one of an interrupted save: "step-...safetensors[.tmp]".
static int stage_file_name(const char *nm) {
    size_t len = strlen(nm);
    return !strncmp(nm, "step-", 5) && ((len > 12 && !strcmp(nm + len - 12, ".safetensors")) ||
                                        (len > 16 && !strcmp(nm + len - 16, ".safetensors.tmp")));
}

int ckpt_owns(const char *name) {
    return stage_file_name(name) || !strcmp(name, MANIFEST) || !strncmp(name, MANIFEST ".", strlen(MANIFEST) + 1) ||
           !strcmp(name, ".micropp-probe") || localsgd_owns(name) || compress_owns(name);
}

// After the manifest is committed: remove the stage files (and leftovers of interrupted saves)
// that it does not name. Only our own names ("step-...safetensors[.tmp]") are touched.
static void remove_stale(const char *dir, const FileRec *recs, int n) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!stage_file_name(nm)) continue;
        int live = 0;
        for (int i = 0; i < n && !live; i++) live = !strcmp(recs[i].file, nm);
        if (live) continue;
        char path[PATH_LEN + 300];
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        unlink(path);
    }
    closedir(d);
}

double ckpt_save(const CkptLayout *l, int64_t step, uint64_t next_sample) {
    if (step == g_last_saved) return 0;
    g_last_saved = step;
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(l->comm, &rank));
    MPI_CHECK(MPI_Comm_size(l->comm, &size));
    MPI_Comm group;
    int me;
    shard_group(l, &group, &me);
    int mine = l->writer && me == 0 ? l->n_local : 0;
    FileRec *recs = xcalloc((size_t)(l->n_local ? l->n_local : 1), sizeof(FileRec));
    for (int k = 0; k < l->n_local && l->writer; k++) {  // (the writer's group gathers at its rank 0)
        const Stage *s = &l->local[k];
        int adam = l->c->optimizer == OPTIM_ADAM;
        float *whole[3] = {gather_whole(l, s, s->params), adam ? gather_whole(l, s, s->adam_m) : NULL,
                           adam ? gather_whole(l, s, s->adam_v) : NULL};
        if (mine)
            write_stage(l, s, (const float *const *)whole, l->stage_of ? l->stage_of[k] : l->first_stage + k, step,
                        next_sample, &recs[k]);
        for (int j = 0; j < 3; j++) free(whole[j]);
    }
    // Gather the file records at rank 0: counts, then the records as bytes.
    int *counts = rank == 0 ? xcalloc((size_t)size, sizeof(int)) : NULL, *displs = NULL;
    MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, l->comm));
    FileRec *all = NULL;
    int total = 0;
    if (rank == 0) {
        displs = xcalloc((size_t)size, sizeof(int));
        for (int i = 0; i < size; i++) {
            displs[i] = total * (int)sizeof(FileRec);
            total += counts[i];
            counts[i] *= (int)sizeof(FileRec);
        }
        all = xcalloc((size_t)(total ? total : 1), sizeof(FileRec));
    }
    MPI_CHECK(MPI_Gatherv(recs, mine * (int)sizeof(FileRec), MPI_BYTE, all, counts, displs, MPI_BYTE, 0, l->comm));
    double bytes = 0;
    if (rank == 0) {
        CHECK(total == l->stages,
              "checkpoint: %d stage files were written but the layout has %d stages (is exactly one writer set per "
              "stage?)",
              total, l->stages);
        write_manifest(l, step, next_sample, all, total);
        remove_stale(l->c->ckpt.save, all, total);
        for (int i = 0; i < total; i++) bytes += (double)all[i].bytes;
    }
    free(recs); free(counts); free(displs); free(all);
    // Nobody goes on before the manifest is committed: once ckpt_save returns on any rank, the
    // checkpoint of this step is the one a resume finds, whatever happens next.
    comm_barrier(l->comm);
    return bytes;
}
