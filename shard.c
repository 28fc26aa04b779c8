// shard.c: the tensor-parallel layout of a stage (model.h): which part of each layer's whole tensors
// rank t of the group holds, and the copies between the whole tensors and a rank's shards. Init takes
// its shard of the monolith's weights, --verify its shard of the reference's gradients, a checkpoint
// gathers the shards into the whole tensors (the file layout any T reads). Host memory, no MPI.
#include <stdio.h>
#include <string.h>
#include "model.h"

// Local layer i's whole tensors Wf [H, fan_in] and bf [H] -> rank t's shard W [out_w, in_w], b [out_w]
// (unshard: the other way, writing only the part rank t holds; a replicated part is written whole).
static void layer_copy(const Stage *s, int i, int t, float *Wf, float *bf, float *W, float *b, int to_shard) {
    int H = s->H, k = stage_fan_in(s, i), hs = H / s->tp;
    size_t wlen = (size_t)H * k, blen = (size_t)H, woff = 0, boff = 0;
    if (s->kind[i] == TP_COL) {  // rows [t H/T, (t+1) H/T) of W and b: contiguous
        wlen = (size_t)hs * k; blen = (size_t)hs;
        woff = (size_t)t * wlen; boff = (size_t)t * blen;
    } else if (s->kind[i] == TP_ROW) {  // columns [t H/T, (t+1) H/T) of every row of W; b whole
        for (int o = 0; o < H; o++) {
            float *whole = Wf + (size_t)o * H + (size_t)t * hs, *part = W + (size_t)o * hs;
            memcpy(to_shard ? part : whole, to_shard ? whole : part, sizeof(float) * (size_t)hs);
        }
        wlen = 0;
    }
    if (wlen) memcpy(to_shard ? W : Wf + woff, to_shard ? Wf + woff : W, sizeof(float) * wlen);
    memcpy(to_shard ? b : bf + boff, to_shard ? bf + boff : b, sizeof(float) * blen);
}

void stage_shard_layer(const Stage *s, int i, int t, const float *Wf, const float *bf, float *W, float *b) {
    layer_copy(s, i, t, (float *)Wf, (float *)bf, W, b, 1);  // (reads Wf and bf only)
}
void stage_unshard_layer(const Stage *s, int i, int t, const float *W, const float *b, float *Wf, float *bf) {
    layer_copy(s, i, t, Wf, bf, (float *)W, (float *)b, 0);  // (reads W and b only)
}

size_t stage_full_len(const Stage *s, int j) {
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

// Every layer of the flat buffers (local: rank t's, as stage_layer_off lays them out; full: the
// whole stage, stage_full_off), and the head, which every rank holds whole.
static void stage_copy(const Stage *s, int t, float *full, float *local, int to_shard) {
    for (int i = 0; i < s->n_layers; i++) {
        float *Wf = full + stage_full_off(s, i), *W = local + stage_layer_off(s, i);
        layer_copy(s, i, t, Wf, Wf + (size_t)s->H * stage_fan_in(s, i), W, W + stage_weight_len(s, i), to_shard);
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
        if (at >= size) { at -= size; continue; }
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
