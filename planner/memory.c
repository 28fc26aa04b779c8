// planner/memory.c: a run's memory, reckoned from the plan before anything is allocated (it follows what
// stage_init, stage_enable_split and the optimizers allocate), and checked against the node's
// MemAvailable on every rank, with one verdict for all.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/memory.h"
#include "axes/data.h"
#include "axes/expert.h"
#include "axes/pipeline.h"
#include "axes/tensor.h"
#include "schedule_auto.h"
#include "base/util.h"

void memory_reckon(const TrainConfig *c, const Plan *p, const int *vs_of, const int *slots, int n, MemNeed *m) {
    double H = (double)c->hidden, C = (double)c->classes, rows = p->rows, f = sizeof(float);
    memset(m, 0, sizeof *m);
    for (int k = 0; k < n; k++) {
        int vs = vs_of[k];
        double in = p->lo[vs] == 0 ? (double)p->inputs : H;  // layer 0 reads --inputs features
        double params = tensor_params(c, p, vs);
        data_sizes(c, p, vs, params, m);  // the weights, gradients and optimizer state, as ZeRO shards them
        if (c->guard.post_validate)  // the copy that undoes an update (train/postval.c; never with ZeRO)
            m->optimizer += params * f * ((c->optimizer == OPTIM_SGD ? 1 : 3) + (c->guard.clip_grad > 0));
        pipeline_sizes(c, p, vs, slots[k], m);  // the activations it stashes
        expert_sizes(c, p, vs, slots[k], m);    // its MoE layers' routing state and scratch
        m->buffers += 2 * rows * H * f;  // the backward's ping-pong
        double wide = in > H ? (in > C ? in : C) : (H > C ? H : C);
        if (c->precision == PRECISION_BF16) m->buffers += 3 * rows * wide * f;  // the fp32 work buffers of bf16 stashes
    }
    m->buffers += 2 * rows * H * f + rows * (double)p->inputs * f + rows * H * 2;  // dout, din, the host rows, wire
    m->total = m->weights + m->grads + m->optimizer + m->activations + m->buffers;
}

double memory_live_peak(const TrainConfig *c, const Plan *p, const ActionList *list, int stage) {
    double H = (double)c->hidden, rows = p->rows, a = pipeline_activation_elem(c->precision);
    int ckpt = p->pipe.ckpt, V = p->V, M = p->M;
    // model.c's bytes of a slot of each chunk: after F (stash), through B (all: recomputed when
    // checkpointing), through I (all and every dz), after I until W (deferred)
    double stash[64], all[64], in_i[64], deferred[64], *live = xcalloc((size_t)V * (size_t)M, sizeof(double)), now = 0,
                                                       peak = 0;
    for (int k = 0; k < V && k < 64; k++) {
        int vs = plan_vstage(p, stage, k), n = plan_layers(p, vs), head = vs == p->S - 1;
        double in = rows * (p->lo[vs] == 0 ? (double)p->inputs : H) * a,
               logits = head ? rows * (double)c->classes * a : 0, outs = rows * a * tensor_out_widths(c, p, vs, 0, n);
        stash[k] = in + (ckpt ? 0 : outs) + logits;
        all[k] = in + outs + logits;
        in_i[k] = all[k] + outs;
        // (model.c's deferred_bytes: every layer's input, the head's too, and every dz)
        deferred[k] = in + rows * a * tensor_out_widths(c, p, vs, 0, n - 1 + head) + outs + logits;
    }
    for (int i = 0; i < list->n; i++) {
        const Action *x = &list->a[i];
        int k = x->chunk;
        double *b = &live[k * M + x->mb], during, after;
        if (x->kind == ACT_FORWARD) during = after = stash[k];
        else if (x->kind == ACT_BACKWARD) { during = ckpt ? all[k] : 0; after = 0; }
        else if (x->kind == ACT_BACKWARD_INPUT) { during = in_i[k]; after = deferred[k]; }
        else if (x->kind == ACT_BACKWARD_WEIGHT) during = after = 0;
        else continue;
        now += during - *b;
        if (now > peak) peak = now;
        now += after - during;
        *b = after;
    }
    free(live);
    return peak;
}

void memory_rank(const TrainConfig *c, const Plan *p, const SimResult *sim, int stage, MemNeed *m) {
    int n = p->pipelined ? p->V : p->K, *vs_of = xmalloc(sizeof(int) * (size_t)n),
        *slots = xmalloc(sizeof(int) * (size_t)n);
    for (int k = 0; k < n; k++) {
        vs_of[k] = p->pipelined ? plan_vstage(p, stage, k) : k;
        slots[k] = p->pipelined ? sim->peak_slots[vs_of[k]] : 1;
    }
    memory_reckon(c, p, vs_of, slots, n, m);
    free(vs_of);
    free(slots);
}

void memory_zbauto(const TrainConfig *c, const Plan *p, SchedFile *out) {
    double *work = xmalloc(sizeof(double) * (size_t)p->K);
    for (int s = 0; s < p->K; s++) {  // a rank's work: its chunks' (zb-auto-v: the two of its V)
        work[s] = 0;
        for (int k = 0; k < p->V; k++) work[s] += tensor_params(c, p, plan_vstage(p, s, k));
    }
    AutoSpec a = {p->K, p->M, work, work, work, 0, p->pipe.max_inflight, 1, p->V};
    schedule_auto(&a, out, NULL);
    free(work);
}

// The schedule simulated with F = I = W = 1, as train sizes its stashes. A search reckons hundreds of layouts on
// a few pipelines, so the last UNIT_SIMS of a kind, stages, micro-batches and chunks are kept, each valid until
// the next call; a searched schedule's lists (file) are simulated into *own.
#define UNIT_SIMS 16
static struct { int kind, K, M, v; SimResult sim; } unit_sims[UNIT_SIMS];
static int unit_next;
static const SimResult *unit_sim(int kind, const SchedFile *file, int K, int M, int v, SimResult *own) {
    SimSpec spec = {.kind = kind, .file = file, .K = K, .M = M, .v = v, .f = 1, .b = 1, .w = 1};
    if (file) {
        schedule_sim(&spec, own);
        return own;
    }
    for (int i = 0; i < UNIT_SIMS; i++)
        if (unit_sims[i].K == K && unit_sims[i].kind == kind && unit_sims[i].M == M && unit_sims[i].v == v)
            return &unit_sims[i].sim;
    int i = unit_next;
    unit_next = (unit_next + 1) % UNIT_SIMS;
    if (unit_sims[i].K) sim_result_free(&unit_sims[i].sim);
    unit_sims[i].kind = kind, unit_sims[i].K = K, unit_sims[i].M = M, unit_sims[i].v = v;
    schedule_sim(&spec, &unit_sims[i].sim);
    return &unit_sims[i].sim;
}

int memory_layout(const TrainConfig *c, int kind, const Degrees *d, MemLayout *out, char *why, size_t n) {
    TrainConfig t = *c;
    Plan *p = xmalloc(sizeof *p);  // (a Plan holds the partition of up to MAX_STAGES stages)
    int K = d->pp, D = d->dp;
    t.pipe.schedule = kind;
    memset(out, 0, sizeof *out);
    if (plan_layout(&t, d, p, why, n)) {
        free(p);
        return -1;
    }
    *out = (MemLayout){.K = K,
                       .D = D,
                       .V = p->V,
                       .M = p->M,
                       .rows = p->rows,
                       .need = xcalloc((size_t)K, sizeof(MemNeed)),
                       .act = xcalloc((size_t)K, sizeof(double)),
                       .inflight = xcalloc((size_t)K, sizeof(int)),
                       .T = p->T,
                       .tp_bytes = xcalloc((size_t)K, sizeof(double))};
    SimResult own = {0};
    const SimResult *sim = NULL;
    SchedFile lists = {0};  // zb-auto: the lists train builds for this plan
    int searched = kind == SCHED_ZBAUTO || kind == SCHED_ZBAUTOV;
    if (p->pipelined && searched) memory_zbauto(&t, p, &lists);
    const SchedFile *file = searched ? &lists : NULL;
    if (p->pipelined) {
        sim = unit_sim(kind, file, K, p->M, p->V, &own);
        if (sim->deadlock) fatal("schedule deadlocks at K=%d M=%d: %s", K, p->M, sim->why);
        out->bubble = sim->bubble_mean;
    }
    for (int s = 0; s < K; s++) {
        memory_rank(&t, p, sim, s, &out->need[s]);
        out->act[s] = out->need[s].activations;  // no pipeline: the one slot
        out->inflight[s] = p->pipelined ? sim->peak_inflight[s] : 1;
        for (int k = 0; k < p->V; k++)  // every micro-batch through each of the stage's chunks
            out->tp_bytes[s] += p->M * tensor_allreduce_floats(&t, p, p->pipelined ? plan_vstage(p, s, k) : s) * 4;
        if (!p->pipelined) continue;
        ActionList l = {0};
        schedule_build(kind, file, K, p->M, p->V, s, &l);
        out->act[s] = memory_live_peak(&t, p, &l, s);
        action_list_free(&l);
    }
    if (sim == &own) sim_result_free(&own);
    sched_file_free(&lists);
    free(p);
    return 0;
}

void memory_layout_free(MemLayout *l) {
    free(l->need); free(l->act); free(l->inflight); free(l->tp_bytes);
    memset(l, 0, sizeof *l);
}

double memory_available(void) { return meminfo_available(); }

// The cheapest change that shrinks what dominates.
static const char *fix_for(const Plan *p, const MemNeed *m) {
    if (m->activations + m->buffers > m->total / 2)  // both grow with the rows of a micro-batch
        return p->pipelined ? "--checkpoint-activations, more --micro-batches, or more stages"
                            : "a smaller --batch (or --grad-accum), or a pipeline";
    if (p->data_parallel && !p->data.zero && m->optimizer > 0)
        return "--zero 1 (shards the optimizer state), more stages (--pp), or a smaller model";
    return "more pipeline stages (--pp, over more ranks), or a smaller model";
}

double memory_device_extra(const TrainConfig *c, const Plan *p) {
    double H = (double)c->hidden, C = (double)c->classes, in = (double)p->inputs, rows = p->rows;
    double wide = in > H ? (in > C ? in : C) : (H > C ? H : C), extra = MEMORY_CUBLAS_WORKSPACE;
    // the NCCL transport's staging copies: at most a message per micro-batch in flight, rows x H floats each
    if (p->pipelined && p->transport == TRANSPORT_NCCL) extra += (double)p->M * rows * H * sizeof(float);
    // bf16: kernels.cu's two packed operands (bf16, 2 bytes), each as large as the largest a product reads:
    // a weight matrix (wide x H at most) or a micro-batch's rows (rows x wide)
    if (c->precision == PRECISION_BF16) extra += 2.0 * 2.0 * wide * (H > rows ? H : rows);
    return extra;
}

void memory_check(const TrainConfig *c, const Plan *p, const Wire *w, const SimResult *sim) {
    MemNeed m;
    memory_rank(c, p, p->pipelined ? sim : NULL, p->pipelined ? w->stage : 0, &m);
    const Backend *be = w->be;
    int device = !be->on_host && be->memory_free;  // a GPU: its free bytes
    if (device) {  // what the GPU holds beyond the model's own buffers
        double extra = memory_device_extra(c, p);
        m.buffers += extra;
        m.total += extra;
    }
    double have = device ? be->memory_free() : memory_available();
    // the ranks sharing this GPU (--transport mpi allows several), or this node's memory
    int sharing = device ? w->hardware.gpu_ranks : w->hardware.local_size;
    double ranks = sharing > 0 ? sharing : 1;
    double need = m.total * ranks;  // each reckoned like this one
    char why[1024] = "";
    if (have > 0 && need > have) {
        char b[8][32];
        snprintf(why, sizeof why,
                 "train: rank %d needs about %s (weights %s, gradients %s, optimizer %s, activations %s, buffers %s), "
                 "%.0f rank%s on its %s %s, and the %s has %s %s: use %s",
                 w->rank, fmt_bytes_binary(m.total, b[0], 32), fmt_bytes_binary(m.weights, b[1], 32),
                 fmt_bytes_binary(m.grads, b[2], 32), fmt_bytes_binary(m.optimizer, b[3], 32),
                 fmt_bytes_binary(m.activations, b[4], 32), fmt_bytes_binary(m.buffers, b[5], 32), ranks,
                 ranks == 1 ? "" : "s", device ? "GPU" : "node", fmt_bytes_binary(need, b[6], 32),
                 device ? "GPU" : "node", fmt_bytes_binary(have, b[7], 32), device ? "free" : "available",
                 fix_for(p, &m));
    }
    agree_on_error(why);
}
