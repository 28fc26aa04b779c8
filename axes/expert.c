// axes/expert.c: expert parallelism (--ep N), the fourth axis (axes/expert.h): the rules of --ep, the expert
// group and its all-to-all behind the MoE layers' hook, the MoE layers' buffers (sizes), and the report's
// part (the all-to-all's bytes and time per step).
//
// The group is N consecutive replicas of one stage: replica d is rank d % N of group d / N. Each rank routes
// its own rows (the same routing, capacity and drops as without --ep: moe.c decides them on the sending
// rank), sends each row to the rank holding its expert, runs its E/N experts on the rows it got from the N
// ranks, and sends the results back; the backward runs the same exchanges. A rank holds only its E/N
// experts (moe.h's moe_held: weights, gradients, optimizer state): their gradients are summed over the
// peers, the D/N replicas of the same rank in their groups that hold them (axes/data.c's expert buckets),
// the rest of the model over all D as without --ep.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "axes/expert.h"
#include "comms.h"  // comm_split_known
#include "comms/collectives.h"
#include "comms/hardware.h"  // TRANSPORT_NCCL
#include "comms.h"           // comm_nccl_group
#include "base/util.h"

// The values of --ep that work: the divisors of D that also divide E (at least 2), as "2, 4".
static const char *ep_fits(int D, int E, char *buf, size_t n) {
    buf[0] = 0;
    for (int v = 2; v <= D; v++)
        if (D % v == 0 && E % v == 0) snprintf(buf + strlen(buf), n - strlen(buf), "%s%d", buf[0] ? ", " : "", v);
    if (!buf[0]) snprintf(buf, n, "1 (none)");
    return buf;
}

// ---- sizes ----

void expert_sizes(const TrainConfig *c, const Plan *p, int vs, int slots, MemNeed *m) {
    MoeSpec s = {.experts = (int)c->moe.experts, .every = (int)c->moe.every, .top_k = (int)c->moe.top_k,
                 .capacity = (float)c->moe.capacity};
    int layers = 0, n = plan_layers(p, vs), N = p->expert.N > 1 ? p->expert.N : 1;
    for (int i = 0; i < n; i++) layers += moe_layer(&s, p->lo[vs] + i);
    if (!layers) return;
    double H = (double)c->hidden, E = s.experts, k = s.top_k, rows = p->rows, f = sizeof(float), w = sizeof(int);
    double mine = E / N, cap = moe_capacity(&s, p->rows), most = rows * (k < mine ? k : mine);
    double got = N * (most < mine * cap ? most : mine * cap);  // rows my experts receive at most
    double all = N * most;  // ... in evaluation, which drops nothing (no capacity)
    // a state (moe.h's MoeState): p [rows, E], gate [rows, k], idx and pos (ints), send and recv [E] (ints),
    // hs [rows, k, H]; xe and he [got, H] (the evaluation's state: [all, H])
    double state = rows * E * f + rows * k * (f + 2 * w) + 2 * E * w + rows * k * H * f;
    // the scratch: xh, yh [rows, H]; lg, dp, dl [rows, E]; xs [rows, k, H]; dz, dh, xo [all, H]; then the load
    double scratch = 2 * rows * H * f + 3 * rows * E * f + rows * k * H * f + 3 * all * H * f;
    int lanes = c->moe.overlap == EP_OVERLAP_PAIR && N > 1 ? 2 : 1;  // pair: a second scratch, at its first pass
    m->buffers += layers * ((slots + 1) * state + 2 * (slots * got + all) * H * f) + lanes * scratch + E * sizeof(long);
    if (p->expert.nccl && N > 1)  // each lane's device buffers, both ways (comms/alltoall.c; expert_setup's cap)
        m->buffers += lanes * 2 * fmax(rows * k * H * N, E) * f;
}

double expert_held_floats(const TrainConfig *c, const Plan *p, int vs) {
    MoeSpec s = {.experts = (int)c->moe.experts, .every = (int)c->moe.every, .shards = p->expert.N};
    int first, held = moe_held(&s, &first), layers = 0;
    for (int i = 0; i < plan_layers(p, vs) && p->expert.N > 1; i++) layers += moe_layer(&s, p->lo[vs] + i);
    return (double)layers * held * (double)moe_expert_len((int)c->hidden);
}

double expert_model_params(const TrainConfig *c, int inputs) {
    MoeSpec s = {.experts = (int)c->moe.experts, .every = (int)c->moe.every};
    int H = (int)c->hidden;
    double n = (double)model_param_count((int)c->layers, inputs, H, (int)c->classes);
    for (int l = 1; l < c->layers; l++)
        if (moe_layer(&s, l)) n += (double)moe_layer_len(H, s.experts) - ((double)H * H + H);
    return n;
}

// ---- rules ----

int expert_rules(const TrainConfig *c, Plan *p, Err *e) {
    int N = c->grid.ep > 1 ? (int)c->grid.ep : 1, E = (int)c->moe.experts, D = p->D;
    p->expert = (ExpertPlan){.N = 1, .algo = c->moe.alltoall, .overlap = c->moe.overlap};
    if (N == 1) return 0;
    char fits[96];
    if (!E)
        return refuse(e, "train: --ep %d shards the experts of MoE layers, and this model has none: add --experts E "
                         "(a multiple of %d) or drop --ep", N, N);
    if (p->T > 1)
        return refuse(e, "train: --ep with --tp %d: an MoE layer's experts are not split over a tensor-parallel group "
                         "(its rows would have to be exchanged twice): drop --tp or --ep", p->T);
    if (D % N)
        return refuse(e, "train: --ep %d with dp %d: the expert group is --ep replicas of one stage, so N must divide "
                         "dp: use --ep %s", N, D, ep_fits(D, E, fits, sizeof fits));
    if (p->data.sync_every || p->data.topk > 0)
        return refuse(e, "train: --ep with %s: its sums take every parameter over all replicas, and each expert lives "
                         "on dp/--ep of them: drop --ep or %s", p->data.sync_every ? "--sync-every" : "--compress",
                      p->data.sync_every ? "--sync-every" : "--compress");
    if (E % N)
        return refuse(e, "train: --experts %d over --ep %d: each rank of the group runs E/N experts, and %d is not a "
                         "multiple of %d: use --ep %s, or --experts %d or %d",
                      E, N, E, N, ep_fits(D, E, fits, sizeof fits), E / N * N > 0 ? E / N * N : N, (E / N + 1) * N);
    // --transport nccl: the all-to-all over NCCL too (the host's rows through device buffers), unless --alltoall
    // names a host algorithm
    p->expert.nccl = p->device == DEVICE_CUDA && p->transport == TRANSPORT_NCCL && p->expert.algo == ALLTOALL_AUTO;
    p->expert.N = N;
    return 0;
}

// ---- the hook the MoE layers call ----

// A wait in an exchange, kept for the observers (one slice with the wait just before it of the same kind).
static void keep_wait(ExpertGroup *g, int kind, double t0, double bytes) {
    double t1 = now_sec();
    Span *last = g->n_spans ? &g->spans[g->n_spans - 1] : NULL;
    if (last && last->kind == kind && t0 - last->t1 < 1e-6) { last->t1 = t1; last->bytes += bytes; return; }
    if (g->n_spans == g->cap_spans) {
        g->cap_spans = g->cap_spans ? 2 * g->cap_spans : 64;
        g->spans = realloc(g->spans, sizeof(Span) * (size_t)g->cap_spans);
        CHECK(g->spans, "out of memory recording the all-to-alls");
    }
    g->spans[g->n_spans++] = (Span){t0, t1, kind, bytes};
}

// counts: send[E] rows to each global expert (owner r's E/N in a row), recv[N x E/N].
static void ex_counts(void *ctx, const int *send, int *recv) {
    ExpertLane *l = ctx;
    ExpertGroup *g = l->g;
    double t0 = now_sec();
    alltoall_counts(l->a2a, send, recv, g->per);
    g->flight += now_sec() - t0;
    keep_wait(g, EV_A2A_DISPATCH, t0, (double)g->N * g->per * sizeof(int));
}

// rows: the forward's counts say how many rows go to each rank (send: by global expert, owner after owner)
// and come from each (recv: by source rank, then my expert); back = 1 swaps the two. Returns the bytes sent.
static double ex_counts_per_rank(ExpertGroup *g, const int *send_counts, const int *recv_counts, int w, int back) {
    int El = g->per;
    double bytes = 0;
    for (int r = 0; r < g->N; r++) {
        int s = 0, q = 0;
        for (int e = 0; e < El; e++) s += send_counts[r * El + e], q += recv_counts[r * El + e];
        g->scount[r] = back ? q : s;
        g->rcount[r] = back ? s : q;
        if (r != g->rank) bytes += (double)g->scount[r] * w * sizeof(float);
    }
    return bytes;
}

// The rows' exchange started (the layer moves its own rows itself); without --ep-overlap waited for at once.
// Counted as paired when the other lane has its own in flight (--ep-overlap pair: another pass's).
static void ex_start(void *ctx, const float *send, const int *send_counts, float *recv, const int *recv_counts,
                     int w, int back) {
    ExpertLane *l = ctx;
    ExpertGroup *g = l->g;
    double t0 = now_sec(), bytes = ex_counts_per_rank(g, send_counts, recv_counts, w, back);
    l->pending = back ? EV_A2A_COMBINE : EV_A2A_DISPATCH;
    l->t_start = t0;
    g->paired += g->lane[l == &g->lane[0]].on;
    alltoall_rows_start(l->a2a, send, g->scount, recv, g->rcount, w, 0);
    if (!g->overlap) alltoall_rows_wait(l->a2a);
    l->on = g->overlap != 0;
    keep_wait(g, l->pending, t0, bytes);
    if (!g->overlap) g->flight += now_sec() - t0;
}

static void ex_wait(void *ctx) {
    ExpertLane *l = ctx;
    ExpertGroup *g = l->g;
    if (!g->overlap) return;
    double t0 = now_sec();
    alltoall_rows_wait(l->a2a);
    l->on = 0;
    keep_wait(g, l->pending, t0, 0);
    g->flight += now_sec() - l->t_start;
}

// Where the layer packs the rows of its next start (the hook's send_buffer): shm's window, so that the start
// copies nothing. The wait for the window (every rank done reading its last exchange) is the exchange's.
static float *ex_send_buffer(void *ctx, size_t floats, int back) {
    ExpertLane *l = ctx;
    ExpertGroup *g = l->g;
    double t0 = now_sec();
    float *b = alltoall_send_buffer(l->a2a, floats);
    g->flight += now_sec() - t0;
    keep_wait(g, back ? EV_A2A_COMBINE : EV_A2A_DISPATCH, t0, 0);
    return b;
}

// In place (shm): where rank r's rows of the exchange just waited for lie, and letting them go.
static const float *ex_rows_at(void *ctx, int r) { return alltoall_rows_at(((ExpertLane *)ctx)->a2a, r); }
static void ex_release(void *ctx) { alltoall_rows_release(((ExpertLane *)ctx)->a2a); }

// The whole exchange in one call (the hook's exchange_rows; moe.c calls the halves).
static void ex_rows(void *ctx, const float *send, const int *send_counts, float *recv, const int *recv_counts,
                    int w, int back) {
    ExpertLane *l = ctx;
    ExpertGroup *g = l->g;
    double t0 = now_sec(), bytes = ex_counts_per_rank(g, send_counts, recv_counts, w, back);
    alltoall_rows(l->a2a, send, g->scount, recv, g->rcount, w);
    keep_wait(g, back ? EV_A2A_COMBINE : EV_A2A_DISPATCH, t0, bytes);
    g->flight += now_sec() - t0;
}

// Lane j: its all-to-all over the group and the hook every local MoE layer calls for it. The hook's buffers
// are on the host; nccl's go through device buffers of gpu (the lane's own NCCL communicator: two lanes'
// exchanges in flight at once never share one's order).
static void lane_open(ExpertGroup *g, int j, size_t cap, const Backend *gpu, Stage *local, int n_local) {
    ExpertLane *l = &g->lane[j];
    l->g = g;
    struct DevComm *dev = g->algo == ALLTOALL_NCCL ? comm_nccl_group(g->comm) : NULL;  // (comms.c closes it)
    l->a2a = alltoall_open(g->comm, g->algo, dev ? gpu : &backend_cpu, cap, dev);
    l->ex = (MoeExchange){.size = g->N, .rank = g->rank, .exchange_counts = ex_counts, .exchange_rows = ex_rows,
                          .start_rows = ex_start, .wait_rows = ex_wait, .send_buffer = ex_send_buffer, .ctx = l};
    if (alltoall_in_place(l->a2a)) l->ex.rows_at = ex_rows_at, l->ex.release_rows = ex_release;
    for (int k = 0; k < n_local; k++)
        if (local[k].moe) moe_set_exchange(local[k].moe, j, &l->ex);
}

// The host algorithm of the group's all-to-all, the same on every rank (collective over world): auto takes shm
// where every group sits on one node and every node's /dev/shm holds its ranks' windows (a tmpfs too small, as
// Docker's 64 MB default, would end the job with SIGBUS on first touch), else mpi; --alltoall shm where either
// fails is refused in one line.
static int choose_algo(const Plan *p, const ExpertGroup *g, MPI_Comm world, size_t cap) {
    int algo = p->expert.algo;  // (ALLTOALL_AUTO's value is ALLTOALL_NCCL's: nccl is the plan's flag)
    if (p->expert.nccl || (algo != ALLTOALL_AUTO && algo != ALLTOALL_SHM)) return algo;
    int apart = !alltoall_shm_possible(g->comm);  // (this group's: every rank goes on to the collectives below)
    comm_agree(world, algo == ALLTOALL_SHM && apart ? "train: --alltoall shm needs every expert group on one node: "
                                                      "use --alltoall mpi, pair or auto" : "");
    int lanes = p->expert.overlap == EP_OVERLAP_PAIR ? 2 : 1, here;
    double need, room, v[1];
    v[0] = alltoall_shm_short(world, (double)lanes * (double)alltoall_shm_bytes(cap, g->N), &need, &room, &here);
    char why[300] = "";
    if (algo == ALLTOALL_SHM && v[0]) {
        char nb[32], rb[32];
        snprintf(why, sizeof why, "train: --alltoall shm needs %s of /dev/shm for the experts' windows of the %d "
                 "ranks of this node, and %s are free: enlarge it (docker run --shm-size) or use --alltoall mpi",
                 fmt_bytes(need, nb, sizeof nb), here, fmt_bytes(room, rb, sizeof rb));
    }
    comm_agree(world, why);
    comm_allreduce_sum_double(v, 1, world);  // (auto: mpi on every rank where a node lacks the room)
    return apart || v[0] > 0 ? ALLTOALL_MPI : ALLTOALL_SHM;
}

void expert_setup(const Plan *p, ExpertGroup *g, Comm *grid, Stage *local, int n_local) {
    memset(g, 0, sizeof *g);
    g->comm = MPI_COMM_NULL;
    g->N = p->expert.N;
    if (g->N <= 1) return;
    int D = grid->replicas, *at = xmalloc(sizeof(int) * 3 * (size_t)D);
    int *group = at, *place = at + D, *order = at + 2 * D;  // of every dp rank (its replica): split(group, replica)
    for (int r = 0; r < D; r++) group[r] = r / g->N, place[r] = r % g->N, order[r] = r;
    g->comm = comm_split_known(grid->dp, group, order, 1);
    MPI_CHECK(MPI_Comm_rank(g->comm, &g->rank));
    size_t cap = 0;  // the most floats a rank sends in one exchange: every row to every expert it routes to
    for (int k = 0; k < n_local; k++)
        if (local[k].moe) {
            const Moe *m = local[k].moe;
            size_t c = (size_t)m->rows * (size_t)m->spec.top_k * (size_t)m->H * (size_t)g->N;
            cap = c > cap ? c : cap;
            g->per = m->spec.experts / g->N;
        }
    g->algo = p->expert.nccl ? ALLTOALL_NCCL : choose_algo(p, g, grid->world, cap);
    if (g->algo == ALLTOALL_NCCL && cap < (size_t)g->N * g->per) cap = (size_t)g->N * g->per;  // (the counts too)
    g->scount = xcalloc((size_t)g->N, sizeof(int));
    g->rcount = xcalloc((size_t)g->N, sizeof(int));
    g->overlap = p->expert.overlap;
    for (int j = 0; j < (g->overlap == EP_OVERLAP_PAIR ? 2 : 1); j++) lane_open(g, j, cap, grid->be, local, n_local);
    g->peers = *grid;  // (the grid's device and transport; its own dp group, no windows, its own collectives' tags)
    g->peers.shm = NULL;
    g->peers.seq = 0;
    g->peers.dp = comm_split_known(grid->dp, place, order, 2);  // split(g->rank, replica)
    free(at);
    MPI_CHECK(MPI_Comm_rank(g->peers.dp, &g->peers.replica));
    MPI_CHECK(MPI_Comm_size(g->peers.dp, &g->peers.replicas));
}

Comm *expert_peers(ExpertGroup *g) { return g->N > 1 ? &g->peers : NULL; }

void expert_free(ExpertGroup *g) {
    if (g->N <= 1 || g->comm == MPI_COMM_NULL) return;
    alltoall_close(g->lane[0].a2a);
    alltoall_close(g->lane[1].a2a);
    MPI_Comm_free(&g->comm);
    MPI_Comm_free(&g->peers.dp);
    free(g->scount); free(g->rcount); free(g->step_bytes); free(g->step_seconds); free(g->step_flight); free(g->spans);
    g->N = 0;
}

// The bytes and seconds both lanes' all-to-alls counted since the last take.
static void take_stats(ExpertGroup *g, double *bytes, double *seconds) {
    *bytes = *seconds = 0;
    for (int j = 0; j < 2; j++) {
        double b, s;
        if (!g->lane[j].a2a) continue;
        alltoall_take_stats(g->lane[j].a2a, &b, &s);
        *bytes += b, *seconds += s;
    }
}

void expert_step_begin(ExpertGroup *g) {
    double b, s;
    take_stats(g, &b, &s);
    g->flight = 0;
    g->n_spans = 0;
}

void expert_step_end(ExpertGroup *g) {
    double b, s;
    if (!g->lane[0].a2a) return;
    take_stats(g, &b, &s);
    if (g->steps == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->step_bytes = realloc(g->step_bytes, sizeof(double) * (size_t)g->cap);
        g->step_seconds = realloc(g->step_seconds, sizeof(double) * (size_t)g->cap);
        g->step_flight = realloc(g->step_flight, sizeof(double) * (size_t)g->cap);
        CHECK(g->step_bytes && g->step_seconds && g->step_flight, "out of memory for the all-to-all's step times");
    }
    g->step_bytes[g->steps] = b;
    g->step_flight[g->steps] = g->flight;
    g->step_seconds[g->steps++] = s;
}

// ---- report ----

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median_of(const double *x, int n) {  // (a copy sorted)
    if (n <= 0) return 0;
    double *t = xmalloc(sizeof(double) * (size_t)n);
    memcpy(t, x, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

void expert_report_fill(ExpertReport *r, const Plan *p, const ExpertGroup *g, const double *step_s, int skip) {
    memset(r, 0, sizeof *r);
    r->N = p->expert.N;
    r->overlap = p->expert.overlap;
    int from = g->steps > skip ? skip : 0, n = g->steps - from;
    double *share = xcalloc((size_t)(2 * n + 1), sizeof(double));  // each step's shares: in flight, exposed
    for (int i = 0; i < n; i++) {
        double t = step_s[from + i] > 0 ? step_s[from + i] : 1;
        share[i] = fmin(1, g->step_flight[from + i] / t);
        share[n + i] = fmin(1, g->step_seconds[from + i] / t);
    }
    double v[6] = {median_of(g->step_bytes + from, n), 1e3 * median_of(g->step_flight + from, n),
                   1e3 * median_of(g->step_seconds + from, n), median_of(share, n), median_of(share + n, n),
                   (double)g->paired};
    free(share);
    comm_allreduce_sum_double(v, 6, MPI_COMM_WORLD);  // (every rank calls it: the means over the world)
    r->paired = v[5];
    r->bytes = v[0] / p->world;
    r->ms = v[1] / p->world;
    r->exposed_ms = v[2] / p->world;
    r->share = v[3] / p->world;
    r->exposed_share = v[4] / p->world;
    snprintf(r->algo, sizeof r->algo, "%s", g->lane[0].a2a ? alltoall_algos[g->algo].name : "");
}

void expert_report_text(const ExpertReport *r) {
    if (r->N <= 1) return;
    char b[32];
    const char *how = r->overlap == EP_OVERLAP_PAIR ? ", overlapped in pairs" : r->overlap ? ", overlapped" : "";
    printf("expert parallelism: groups of %d replicas (--ep %d), all-to-all %s%s: %s sent and %.2f ms in flight per "
           "step and rank (%.1f%% of the step), %.2f ms exposed (%.1f%%)\n",
           r->N, r->N, r->algo, how, fmt_bytes(r->bytes, b, sizeof b), r->ms,
           100 * r->share, r->exposed_ms, 100 * r->exposed_share);
}

void expert_report_json(cJSON *o, const ExpertReport *r) {
    if (r->N <= 1) return;  // (a run without --ep keeps its keys as they were)
    cJSON_AddNumberToObject(o, "ep", r->N);
    cJSON_AddStringToObject(o, "alltoall", r->algo);
    cJSON_AddBoolToObject(o, "alltoall_overlap", r->overlap);
    cJSON_AddBoolToObject(o, "alltoall_pair", r->overlap == EP_OVERLAP_PAIR);
    cJSON_AddNumberToObject(o, "alltoall_paired", r->paired);
    cJSON_AddNumberToObject(o, "alltoall_bytes_per_step", r->bytes);
    cJSON_AddNumberToObject(o, "alltoall_ms_per_step", r->ms);
    cJSON_AddNumberToObject(o, "alltoall_share", r->share);
    cJSON_AddNumberToObject(o, "alltoall_exposed_ms_per_step", r->exposed_ms);
    cJSON_AddNumberToObject(o, "alltoall_exposed_share", r->exposed_share);
}
