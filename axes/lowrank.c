// axes/lowrank.c: the matrix compressors of --compress (axes/compress.h): PowerSGD's rank-R product and the
// sign compressor, each with error feedback on one bucket's weight matrices (biases and mixture-of-experts
// layers are sent whole), all-gathered and summed in rank order so that every replica holds the same bits.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/data.h"  // rng_normal, rng_key
#include "base/ops.h"   // cpu_sgemm_fp32
#include "base/util.h"
#include "comms/watchdog.h"
#include "axes/compress.h"

// ---- a bucket's geometry ----

// Is local layer j's weight a plain [out, in] matrix (compressed), or sent whole (a mixture-of-experts layer)?
static int is_matrix(const Stage *s, int j) { return !(j < s->n_layers && moe_is(s->moe, j)); }
static size_t rows_of(const Stage *s, int j) { return j == s->n_layers ? (size_t)s->C : (size_t)stage_out_w(s, j); }
static size_t cols_of(const Stage *s, int j) { return j == s->n_layers ? (size_t)s->H : (size_t)stage_in_w(s, j); }
// PowerSGD's rank of layer j's matrix: R, or min(out, in) where that is less (the head's C classes), as PyTorch.
static size_t rank_of(const Compress *x, const Stage *s, int j) {
    size_t r = (size_t)x->rank, o = rows_of(s, j), i = cols_of(s, j);
    return r < o ? r < i ? r : i : o < i ? o : i;
}
// Floats of layer j sent whole: its bias (after the weight), or all of it.
static size_t whole_len(const Stage *s, int j) {
    return is_matrix(s, j) ? stage_layer_len(s, j) - stage_weight_len(s, j) : stage_layer_len(s, j);
}
static size_t whole_off(const Stage *s, int j) {  // (in the stage's flat buffer)
    return stage_layer_off(s, j) + (is_matrix(s, j) ? stage_weight_len(s, j) : 0);
}

size_t lowrank_message_floats(const Compress *x, const Stage *s, const Bucket *b) {
    size_t p = 0, q = 0, whole = 0, signs = 0, scales = 0;
    for (int j = b->lo; j < b->hi; j++) {
        whole += whole_len(s, j);
        if (!is_matrix(s, j)) continue;
        p += rows_of(s, j) * rank_of(x, s, j);
        q += cols_of(s, j) * rank_of(x, s, j);
        signs += rows_of(s, j) * cols_of(s, j);
        scales++;
    }
    if (x->method == COMPRESS_SIGN) return scales + whole + (signs + 31) / 32;
    return p + whole > q ? p + whole : q;
}

size_t lowrank_q_setup(Compress *x, const Stage *s) {
    int top = s->n_layers + (s->has_head ? 1 : 0);
    x->q_off = xcalloc((size_t)top + 1, sizeof(size_t));
    size_t n = 0;
    for (int j = 0; j < top; j++) {
        x->q_off[j] = n;
        n += is_matrix(s, j) ? cols_of(s, j) * rank_of(x, s, j) : 0;
    }
    x->q = xmalloc(sizeof(float) * (n ? n : 1));
    for (int j = 0; j < top; j++) {  // a standard normal Q per matrix, keyed by its global layer: every replica's
        uint64_t key = rng_key(0x5053474451ULL, (uint64_t)(s->lo + j), (uint64_t)x->rank);
        size_t len = is_matrix(s, j) ? cols_of(s, j) * rank_of(x, s, j) : 0;
        for (size_t i = 0; i < len; i++) x->q[x->q_off[j] + i] = rng_normal(key, i);
    }
    return n;
}

// ---- the exchange ----

// Every replica's message of len floats (this rank's in x->tx) into x->rx, rank after rank.
static void gather(GradSync *g, size_t len, const char *what) {
    Compress *x = g->cx;
    MPI_Request q;  // (waited under --timeout, yielding the core where ranks share one: comms/watchdog.h)
    MPI_CHECK(MPI_Iallgather(x->tx, (int)len, MPI_FLOAT, x->rx, (int)len, MPI_FLOAT, g->comm->dp, &q));
    wd_wait_all(&q, g->comm->dp, what);
    x->sent += (double)(g->D - 1) * (double)len * sizeof(float);
}

// sum[0..n) = the replicas' floats at `at` of their messages of len floats, added in rank order.
static void sum_floats(const GradSync *g, size_t len, size_t at, size_t n, float *sum) {
    const float *rx = g->cx->rx;
    memcpy(sum, rx + at, sizeof(float) * n);
    for (int r = 1; r < g->D; r++) {
        const float *v = rx + (size_t)r * len + at;
        for (size_t i = 0; i < n; i++) sum[i] += v[i];
    }
}

// Gram-Schmidt on the R columns of P [rows, R], in column order, as PyTorch's _orthogonalize_gram_schmidt,
// in double and twice ("twice is enough": a column nearly dependent on the earlier ones comes out orthogonal
// too). A column left with less than DEPENDENT of its norm lies in the earlier ones' span up to fp32's
// rounding (P = M Q: a rank-deficient M, e.g. a dead unit's zero row): it becomes zero, not normalised noise,
// so P P^T projects onto P's span and R = min(out, in) gives P P^T M = M. The same bits on every replica.
#define DEPENDENT 1e-5
void lowrank_orthogonalise(float *P, size_t rows, size_t R) {
    double *c = xmalloc(sizeof(double) * rows * R);  // column-major
    for (size_t o = 0; o < rows; o++)
        for (size_t k = 0; k < R; k++) c[k * rows + o] = P[o * R + k];
    for (size_t k = 0; k < R; k++) {
        double *v = c + k * rows, before = 0;
        for (size_t o = 0; o < rows; o++) before += v[o] * v[o];
        for (int pass = 0; pass < 2; pass++)
            for (size_t d = 0; d < k; d++) {
                double dot = 0;
                for (size_t o = 0; o < rows; o++) dot += c[d * rows + o] * v[o];
                for (size_t o = 0; o < rows; o++) v[o] -= dot * c[d * rows + o];
            }
        double norm = 0;
        for (size_t o = 0; o < rows; o++) norm += v[o] * v[o];
        double inv = norm > 0 && norm > DEPENDENT * DEPENDENT * before ? 1 / sqrt(norm) : 0;
        for (size_t o = 0; o < rows; o++) v[o] *= inv;
    }
    for (size_t o = 0; o < rows; o++)
        for (size_t k = 0; k < R; k++) P[o * R + k] = (float)c[k * rows + o];
    free(c);
}

// PowerSGD's three products, on host memory, through OpenBLAS in fp32 (cpu_sgemm_fp32: never the model's bf16
// path, whose rounding of M would land in the error feedback). Every replica makes the same calls on the same shapes,
// and the two that must agree bit for bit (the orthogonalised P and the summed Q) read the same floats everywhere.
// P [rows, R] = M [rows, cols] Q [cols, R].
static void m_times_q(const float *M, const float *Q, float *P, size_t rows, size_t cols, size_t R) {
    cpu_sgemm_fp32(0, 0, (int)rows, (int)R, (int)cols, 1.0f, M, (int)cols, Q, (int)R, 0.0f, P, (int)R);
}
// Q [cols, R] = M^T P.
static void mt_times_p(const float *M, const float *P, float *Q, size_t rows, size_t cols, size_t R) {
    cpu_sgemm_fp32(1, 0, (int)cols, (int)R, (int)rows, 1.0f, M, (int)cols, P, (int)R, 0.0f, Q, (int)R);
}
// out [rows, cols] = P Q^T.
static void p_times_qt(const float *P, const float *Q, float *out, size_t rows, size_t cols, size_t R) {
    cpu_sgemm_fp32(0, 1, (int)rows, (int)cols, (int)R, 1.0f, P, (int)R, Q, (int)R, 0.0f, out, (int)cols);
}

// The layers' whole floats (biases, mixture-of-experts layers) of M into the message at *at, floats.
static void put_whole(const Stage *s, const Bucket *b, const float *M, float *msg, size_t *at) {
    for (int j = b->lo; j < b->hi; j++) {
        memcpy(msg + *at, M + whole_off(s, j) - b->off, sizeof(float) * whole_len(s, j));
        *at += whole_len(s, j);
    }
}
// Their sums into out (no error: sent exactly), from the summed floats at *at.
static void take_whole(const Stage *s, const Bucket *b, const float *sum, float *out, float *e, size_t *at) {
    for (int j = b->lo; j < b->hi; j++) {
        size_t o = whole_off(s, j) - b->off, n = whole_len(s, j);
        memcpy(out + o, sum + *at, sizeof(float) * n);
        memset(e + o, 0, sizeof(float) * n);
        *at += n;
    }
}

// PowerSGD on M = g + e: P = M Q, summed; P orthogonalised; Q = M^T P, summed (kept: the next step's warm
// start); the sum's approximation P Q^T; this replica's error M - P Q^T / D.
static void powersgd(GradSync *g, const Bucket *b, const float *M, float *out, float *e) {
    Compress *x = g->cx;
    const Stage *s = g->s;
    float *msg = x->tx;
    size_t at = 0;
    for (int j = b->lo; j < b->hi; j++)
        if (is_matrix(s, j)) {
            m_times_q(M + stage_layer_off(s, j) - b->off, x->q + x->q_off[j], msg + at, rows_of(s, j), cols_of(s, j),
                      rank_of(x, s, j));
            at += rows_of(s, j) * rank_of(x, s, j);
        }
    size_t p_n = at;
    put_whole(s, b, M, msg, &at);
    gather(g, at, "PowerSGD's P of a compressed bucket");
    sum_floats(g, at, 0, at, x->sum);
    take_whole(s, b, x->sum, out, e, &p_n);
    at = 0;
    size_t q_n = 0;
    for (int j = b->lo; j < b->hi; j++)
        if (is_matrix(s, j)) {
            size_t R = rank_of(x, s, j);
            lowrank_orthogonalise(x->sum + at, rows_of(s, j), R);
            mt_times_p(M + stage_layer_off(s, j) - b->off, x->sum + at, msg + q_n, rows_of(s, j), cols_of(s, j), R);
            at += rows_of(s, j) * R;
            q_n += cols_of(s, j) * R;
        }
    size_t q_len = q_n;
    gather(g, q_len, "PowerSGD's Q of a compressed bucket");
    at = q_n = 0;
    for (int j = b->lo; j < b->hi; j++)
        if (is_matrix(s, j)) {
            size_t rows = rows_of(s, j), cols = cols_of(s, j), R = rank_of(x, s, j), o = stage_layer_off(s, j) - b->off;
            sum_floats(g, q_len, q_n, cols * R, x->q + x->q_off[j]);
            p_times_qt(x->sum + at, x->q + x->q_off[j], out + o, rows, cols, R);
            for (size_t i = 0; i < rows * cols; i++) e[o + i] = M[o + i] - out[o + i] / (float)g->D;
            at += rows * R;
            q_n += cols * R;
        }
}

// Sign with error feedback on M = g + e: each matrix's signs (a bit each, 1: >= 0) and its scale mean |M|;
// the sum of the replicas' scale x sign; this replica's error M - scale x sign.
static void sign(GradSync *g, const Bucket *b, const float *M, float *out, float *e) {
    Compress *x = g->cx;
    const Stage *s = g->s;
    float *msg = x->tx;
    size_t n_scales = 0, at = 0, bits = 0;
    for (int j = b->lo; j < b->hi; j++) {
        n_scales += is_matrix(s, j);
        bits += is_matrix(s, j) ? rows_of(s, j) * cols_of(s, j) : 0;
    }
    at = n_scales;
    put_whole(s, b, M, msg, &at);
    unsigned char *packed = (unsigned char *)(x->tx + at);  // (the bits, in whole floats: the padding zero)
    memset(packed, 0, sizeof(float) * ((bits + 31) / 32));
    bits = 0;
    size_t k = 0;
    for (int j = b->lo; j < b->hi; j++)
        if (is_matrix(s, j)) {
            size_t n = rows_of(s, j) * cols_of(s, j), o = stage_layer_off(s, j) - b->off;
            double mean = 0;
            for (size_t i = 0; i < n; i++) mean += fabsf(M[o + i]);
            float scale = (float)(mean / (double)n);
            msg[k++] = scale;
            for (size_t i = 0; i < n; i++, bits++) {
                int up = M[o + i] >= 0;
                packed[bits / 8] |= (unsigned char)(up << (bits % 8));
                e[o + i] = M[o + i] - (up ? scale : -scale);
            }
        }
    size_t len = at + (bits + 31) / 32;
    gather(g, len, "the signs of a compressed bucket");
    sum_floats(g, len, 0, at, x->sum);
    size_t whole_at = n_scales;
    take_whole(s, b, x->sum, out, e, &whole_at);
    bits = k = 0;
    for (int j = b->lo; j < b->hi; j++)
        if (is_matrix(s, j)) {
            size_t n = rows_of(s, j) * cols_of(s, j), o = stage_layer_off(s, j) - b->off;
            for (size_t i = 0; i < n; i++, bits++) {
                float v = 0;
                for (int r = 0; r < g->D; r++) {
                    const float *m = x->rx + (size_t)r * len;
                    const unsigned char *signs = (const unsigned char *)(m + at);
                    v += (signs[bits / 8] >> (bits % 8)) & 1 ? m[k] : -m[k];
                }
                out[o + i] = v;
            }
            k++;
        }
}

void lowrank_exchange(GradSync *g, const Bucket *b) {
    Compress *x = g->cx;
    Stage *s = g->s;
    float *e = x->err + b->off;
    s->be->to_host(x->work, s->grads + b->off, sizeof(float) * b->n);
    for (size_t i = 0; i < b->n; i++) x->work[i] += e[i];
    if (x->method == COMPRESS_POWERSGD) powersgd(g, b, x->work, x->mag, e);
    else sign(g, b, x->work, x->mag, e);
    s->be->to_device(s->grads + b->off, x->mag, sizeof(float) * b->n);
    x->exact += 2.0 * (g->D - 1) / g->D * (double)b->n * sizeof(float);
}
