// tests/unit_cost.c: the planner's cost model (planner/cost.c), its predictions (planner/predict.c) and
// its search (planner/auto.c), without MPI: curves interpolated and made monotone; a machine file's
// roofline and rings; a profile written and read back; a fixed profile's predictions equal to what
// the schedule's arithmetic gives by hand (1F1B's (M+K-1)(F+B), a ddp step with half its all-reduce
// hidden, ZeRO-1's reduce-scatter, optimizer shard and all-gather; --tp's slices and all-reduces;
// ZeRO-2's reduce-scatter per backward, ZeRO-3's gathers around each pass); and the search's ranking,
// memory rule and axes (tp within a node, ZeRO 0-3); the collectives' wait beyond their curves (issue 32). A change
// to the model that moves a prediction fails here first.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include "unit.h"
#include "base/ops.h"
#include "base/util.h"
#include "model.h"
#include "planner/auto.h"
#include "planner/predict.h"
#include "axes/compress.h"
#include "planner/price.h"
#include "train/executor.h"
#include "train/plan.h"
#include "train/options.h"

#define A 1e-3  // a hidden layer's forward: A seconds per row

static Curve line(double per_row) { return (Curve){.n = 2, .x = {1, 1024}, .s = {per_row, 1024 * per_row}}; }
static Curve flat(double s) { return (Curve){.n = 1, .x = {1}, .s = {s}}; }

// A measured profile of 2 ranks for hidden 8 (inputs 8, classes 2): F = A per row per layer, B = 2A,
// I = W = A; the head, the data, messages and the fixed cost free; collectives flat.
static void fixed_profile(Profile *pf) {
    memset(pf, 0, sizeof *pf);
    pf->calibrated = 1;
    pf->world = 2;
    pf->threads = 1;
    pf->hidden = 8, pf->inputs = 8, pf->classes = 2;
    pf->has_precision[PRECISION_FP32] = 1;
    snprintf(pf->file, sizeof pf->file, "fixed");
    for (int k = 0; k < LAYER_KINDS; k++) {
        int head = k == LAYER_HEAD;
        pf->layer[0][k][PASS_F] = head ? flat(0) : line(A);
        pf->layer[0][k][PASS_B] = head ? flat(0) : line(2 * A);
        pf->layer[0][k][PASS_I] = head ? flat(0) : line(A);
        pf->layer[0][k][PASS_W] = head ? flat(0) : line(A);
    }
    pf->p2p = flat(0);
    pf->coll[ALLREDUCE_MPI][COLL_ALLREDUCE][2] = flat(0.010);
    pf->coll[ALLREDUCE_MPI][COLL_REDUCE_SCATTER][2] = flat(0.004);
    pf->coll[ALLREDUCE_MPI][COLL_ALLGATHER][2] = flat(0.003);
    pf->overlap[ALLREDUCE_MPI] = 0.5;
}

static TrainConfig small_model(void) {
    TrainConfig c;
    train_config_defaults(&c);
    c.layers = 4, c.hidden = 8, c.inputs = 8, c.classes = 2, c.batch = 64, c.pipe.micro_batches = 4;
    c.optimizer = OPTIM_ADAM;
    c.ddp.bucket_mb = 25;  // one bucket (the default would hold 2 layers): the costs below are of one collective
    return c;
}

static void test_curves(void) {
    Curve c = {.n = 3, .x = {1, 4, 16}, .s = {1, 4, 10}};
    EXPECT("curve_between", fabs(cost_curve_at(&c, 2.5) - 2.5) < 1e-12, "%g", cost_curve_at(&c, 2.5));
    EXPECT("curve_between_second", fabs(cost_curve_at(&c, 10) - 7) < 1e-12, "%g", cost_curve_at(&c, 10));
    EXPECT("curve_below_first", cost_curve_at(&c, 0.5) == 1, "%g", cost_curve_at(&c, 0.5));
    EXPECT("curve_beyond_last_slope", fabs(cost_curve_at(&c, 28) - 16) < 1e-12, "%g", cost_curve_at(&c, 28));
    Curve m = {.n = 5, .x = {1, 2, 3, 4, 5}, .s = {9, 1, 3, 2, 4}};
    cost_monotone(&m);
    EXPECT("monotone", m.s[0] == 1 && m.s[1] == 1 && m.s[2] == 2 && m.s[3] == 2 && m.s[4] == 4,
           "%g %g %g %g %g", m.s[0], m.s[1], m.s[2], m.s[3], m.s[4]);
}

static const char machine_json[] =
    "{\"micropp_machine\": 1, \"name\": \"test box\", \"sources\": [\"made up\"], \"devices_per_node\": 4,"
    " \"device_memory_bytes\": 1e9, \"gemm_flops\": {\"fp32\": 1e12, \"bf16\": 4e12}, \"gemm_efficiency\": 0.5,"
    " \"memory_bandwidth_bytes_per_s\": 1e11, \"kernel_launch_s\": 1e-6, \"collective_overlap\": 0.8,"
    " \"step_fixed_s\": 1e-4, \"intra_node\": {\"bandwidth_bytes_per_s\": 1e10, \"latency_s\": 1e-6},"
    " \"inter_node\": {\"bandwidth_bytes_per_s\": 1e9, \"latency_s\": 1e-5}}";

static void test_machine(void) {
    Profile pf;
    char why[512];
    int rc = cost_parse(machine_json, "m.json", &pf, why, sizeof why);
    EXPECT("machine_parse", rc == 0 && !pf.calibrated && pf.devices_per_node == 4, "%s", why);
    if (rc) return;
    // 4096 rows x 4096 x 4096: compute-bound; the forward = the gemm + 2 passes over the output + 2 launches
    double r = 4096, n = 4096, gemm = 2 * r * n * n / (1e12 * 0.5), act = r * n * 4 / 1e11;
    double f = cost_layer(&pf, LAYER_MID, PASS_F, PRECISION_FP32, r, n, n);
    EXPECT("machine_forward_roofline", fabs(f - (gemm + 2 * act + 2e-6)) < 1e-12, "%g vs %g", f, gemm + 2 * act + 2e-6);
    double fb = cost_layer(&pf, LAYER_MID, PASS_F, PRECISION_BF16, r, n, n);
    EXPECT("machine_bf16_faster", fb < f / 2, "bf16 %g fp32 %g", fb, f);
    double first = cost_layer(&pf, LAYER_FIRST, PASS_I, PRECISION_FP32, r, n, n);
    EXPECT("machine_first_layer_no_input_gradient", fabs(first - (3 * act + 2e-6)) < 1e-12, "%g", first);
    // 1 row x 4096 x 4096: memory-bound (the weights' bytes at the memory's bandwidth)
    double small = cost_layer(&pf, LAYER_MID, PASS_W, PRECISION_FP32, 1, n, n), wbytes = (n + n * n + n) * 4 / 1e11;
    EXPECT("machine_memory_bound", fabs(small - (wbytes + n * 4 / 1e11 + 2e-6)) < 1e-12, "%g", small);
    double B = 8e6, ar = cost_collective(&pf, COLL_ALLREDUCE, ALLREDUCE_MPI, 4, B, 4);
    EXPECT("machine_ring_allreduce", fabs(ar - 6 * (1e-6 + B / 4 / 1e10)) < 1e-15, "%g", ar);
    double rs = cost_collective(&pf, COLL_REDUCE_SCATTER, ALLREDUCE_MPI, 4, B, 0);
    EXPECT("machine_ring_reduce_scatter_inter", fabs(rs - 3 * (1e-5 + B / 4 / 1e9)) < 1e-15, "%g", rs);
    // across nodes, a ring per member a node holds, each out by its own NIC (1e9), up to NVLink's 1e10
    rs = cost_collective(&pf, COLL_REDUCE_SCATTER, ALLREDUCE_MPI, 8, B, 4);
    EXPECT("machine_ring_every_nic", fabs(rs - 7 * (1e-5 + B / 8 / 4e9)) < 1e-15, "%g", rs);
    rs = cost_collective(&pf, COLL_REDUCE_SCATTER, ALLREDUCE_MPI, 64, B, 16);
    EXPECT("machine_ring_nics_capped_by_nvlink", fabs(rs - 63 * (1e-5 + B / 64 / 1e10)) < 1e-15, "%g", rs);
    EXPECT("machine_one_rank_free", cost_collective(&pf, COLL_ALLREDUCE, 0, 1, B, 1) == 0, "not 0");
    EXPECT("machine_p2p", fabs(cost_p2p(&pf, 1e6, 0) - (1e-5 + 1e-3)) < 1e-15, "%g", cost_p2p(&pf, 1e6, 0));
    char bad[sizeof machine_json + 16];
    snprintf(bad, sizeof bad, "%s", machine_json);
    memcpy(strstr(bad, "sources"), "sourcez", 7);
    rc = cost_parse(bad, "m.json", &pf, why, sizeof why);
    EXPECT("machine_needs_sources", rc < 0 && strstr(why, "sources") && strstr(why, "m.json"), "%d %s", rc, why);
    rc = cost_parse("{\"x\": 1}", "y.json", &pf, why, sizeof why);
    EXPECT("neither_profile_nor_machine", rc < 0 && strstr(why, "micropp_profile"), "%s", why);
}

// A written profile with one key changed to value, read back: its error line (empty when read).
static void reread(const char *key, double value, char *why, size_t n) {
    Profile pf, back;
    fixed_profile(&pf);
    pf.p2p = (Curve){.n = 2, .x = {8, 4096}, .s = {1e-6, 3e-6}};
    char *text = cost_to_json(&pf);
    cJSON *o = cJSON_Parse(text);
    free(text);
    cJSON_ReplaceItemInObject(o, key, cJSON_CreateNumber(value));
    text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    why[0] = 0;
    cost_parse(text, "p.json", &back, why, n);
    free(text);
}

// Issue 37: a profile's numbers were cast unchecked ("world": 1e30 tried 0 layouts, a hidden of 1e12
// became -2147483648), huge times priced layouts at inf and named a best one, and no version was read.
static void test_profile_numbers(void) {
    char why[512];
    reread("world", 1e30, why, sizeof why);
    EXPECT("profile_world_1e30_refused", strstr(why, "\"world\" must be a whole number in [1, 1048576]"), "'%s'", why);
    reread("hidden", 1e12, why, sizeof why);
    EXPECT("profile_hidden_1e12_refused", strstr(why, "\"hidden\" must be a whole number in [1, 65536]"), "'%s'", why);
    reread("hidden", 8.5, why, sizeof why);
    EXPECT("profile_hidden_fraction_refused", strstr(why, "\"hidden\" must be a whole number"), "'%s'", why);
    reread("step_fixed_s", 1e300, why, sizeof why);
    EXPECT("profile_huge_time_refused", strstr(why, "\"step_fixed_s\" must be a time in seconds, in [0, 1e+06]"),
           "'%s'", why);
    reread("micropp_profile", 2, why, sizeof why);
    EXPECT("profile_other_version_refused", strstr(why, "\"micropp_profile\" is 2, and this micropp reads format 1"),
           "'%s'", why);
    reread("world", 2, why, sizeof why);
    EXPECT("profile_reread_ok", !why[0], "'%s'", why);
}

static void test_roundtrip(void) {
    Profile pf, back;
    fixed_profile(&pf);
    pf.p2p = (Curve){.n = 2, .x = {8, 4096}, .s = {1e-6, 3e-6}};
    char *text = cost_to_json(&pf), why[512];
    int rc = cost_parse(text, "p.json", &back, why, sizeof why);
    free(text);
    EXPECT("profile_roundtrip", rc == 0 && back.calibrated && back.hidden == 8 && back.world == 2, "%s", why);
    if (rc) return;
    const Curve *a = &pf.layer[0][LAYER_MID][PASS_B], *b = &back.layer[0][LAYER_MID][PASS_B];
    EXPECT("profile_roundtrip_curve", a->n == b->n && a->s[1] == b->s[1] && a->x[1] == b->x[1], "%d %d", a->n, b->n);
    EXPECT("profile_roundtrip_coll", back.coll[ALLREDUCE_MPI][COLL_ALLGATHER][2].s[0] == 0.003 &&
           back.overlap[ALLREDUCE_MPI] == 0.5 && back.p2p.s[1] == 3e-6, "lost");
    TrainConfig c = small_model();
    c.hidden = 16;
    const char *w = cost_fits_model(&back, &c, why, sizeof why);
    EXPECT("profile_other_widths_refused", w && strstr(why, "hidden 8") && strstr(why, "--calibrate"), "%s", w ? w : "");
}

static void test_predictions(void) {
    Profile pf;
    fixed_profile(&pf);
    TrainConfig c = small_model();
    Prediction pr;
    char why[512];
    // 1F1B on 2 stages of 2 layers, 4 micro-batches of 16 rows: F = 2 x 16A, B = 2 x 32A per stage.
    Layout l = {.pp = 2, .dp = 1, .tp = 1, .schedule = SCHED_1F1B, .v = 1, .M = 4};
    int rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    double F = 32 * A, B = 64 * A, P = (double)model_param_count(4, 8, 8, 2);
    EXPECT("predict_1f1b", rc == 0 && fabs(pr.step_s - 5 * (F + B)) < 1e-9, "%s %g vs %g", why, pr.step_s, 5 * (F + B));
    EXPECT("predict_1f1b_bubble", fabs(pr.bubble - 0.2) < 1e-9, "%g", pr.bubble);
    EXPECT("predict_1f1b_samples", fabs(pr.samples_s - 64 / pr.step_s) < 1e-6, "%g", pr.samples_s);
    l.ckpt = 1;  // checkpointing recomputes the forward in the backward
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_checkpointing", rc == 0 && fabs(pr.step_s - 5 * (2 * F + B)) < 1e-9, "%s %g vs %g", why,
           pr.step_s, 5 * (2 * F + B));
    l.ckpt = 0;
    predict_step(&pf, &c, &l, &pr, why, sizeof why);
    pf.p2p = flat(0.002);
    Prediction slow;
    predict_step(&pf, &c, &l, &slow, why, sizeof why);
    EXPECT("predict_messages_cost", slow.step_s >= pr.step_s + 2 * 0.002 - 1e-12 &&
           fabs(slow.comm_s - (slow.step_s - pr.step_s)) < 1e-9, "%g -> %g, comm %g", pr.step_s, slow.step_s,
           slow.comm_s);
    pf.p2p = flat(0);
    // ddp on 2 replicas: 32 rows each; the all-reduce (0.010) of the model's one bucket starts when the
    // backward ends: none of it hidden (the last bucket never is); Adam.
    pf.adam_s = 1e-9;
    l = (Layout){.pp = 1, .dp = 2, .tp = 1, .v = 1, .M = 1};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    double want = 4 * 3 * A * 32 + 0.010 + P * 1e-9;
    EXPECT("predict_ddp", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    EXPECT("predict_ddp_comm", fabs(pr.comm_s - 0.010) < 1e-12, "%g", pr.comm_s);
    // MFU counts the FLOPs done: 6 a parameter a row, less the first layer's input gradient (8 x 8, 2 each)
    double done = (6 * P - 2 * 8 * 8) * 64;
    EXPECT("predict_mfu_flops_done", pr.peak > 0 && fabs(pr.mfu * pr.step_s * 2 * pr.peak / done - 1) < 1e-12 &&
           model_row_flops(P, 8, 8) == 6 * P - 128, "mfu %g, peak %g", pr.mfu, pr.peak);
    l.zero = 1;  // the reduce-scatter (one bucket) exposed, the optimizer on half the parameters, the all-gather
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    want = 4 * 3 * A * 32 + 0.004 + P / 2 * 1e-9 + 0.003;
    EXPECT("predict_zero1", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    l = (Layout){.pp = 1, .dp = 4, .tp = 1, .v = 1, .M = 1};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_no_collective_of_4", rc < 0 && strstr(why, "4 ranks") && strstr(why, "--calibrate"), "%s", why);
    l = (Layout){.pp = 1, .dp = 1, .tp = 1, .v = 1, .M = 1, .precision = PRECISION_BF16};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_precision_not_measured", rc < 0 && strstr(why, "bf16"), "%s", why);
}

static void test_search(void) {
    Profile pf;
    fixed_profile(&pf);
    TrainConfig c = small_model();
    Search s;
    auto_search(&pf, &c, 2, 1e12, &s);
    int sorted = 1, has_ddp = 0, has_pp = 0;
    for (int i = 1; i < s.n; i++) sorted &= s.c[i - 1].pr.step_s <= s.c[i].pr.step_s;
    for (int i = 0; i < s.n; i++) {
        has_ddp |= s.c[i].l.pp == 1 && s.c[i].l.dp == 2;
        has_pp |= s.c[i].l.pp == 2 && s.c[i].l.dp == 1;
    }
    EXPECT("search_ranked", s.n > 10 && s.n_fit == s.n && sorted && has_ddp && has_pp, "n %d fit %d sorted %d", s.n,
           s.n_fit, sorted);
    int ckpt = 0;
    for (int i = 0; i < s.n; i++) ckpt |= s.c[i].l.ckpt;
    EXPECT("search_no_checkpointing_when_it_fits", !ckpt, "a checkpointed layout though everything fits");
    auto_free(&s);
    // A device between a 1F1B pipeline's bytes with and without checkpointing: checkpointing is tried
    // for it, and only the checkpointed layout is kept.
    c.hidden = 8, c.batch = 4096, c.pipe.micro_batches = 4;
    Layout a = {.pp = 2, .dp = 1, .tp = 1, .schedule = SCHED_GPIPE, .v = 1, .M = 16}, b = a;
    b.ckpt = 1;
    Prediction pa, pb;
    char why[256];
    predict_step(&pf, &c, &a, &pa, why, sizeof why);
    predict_step(&pf, &c, &b, &pb, why, sizeof why);
    auto_search(&pf, &c, 2, 0.5 * (pa.memory + pb.memory), &s);
    int plain = 0, ckpt_fits = 0;
    for (int i = 0; i < s.n; i++) {
        const Layout *l = &s.c[i].l;
        if (l->pp == 2 && l->schedule == SCHED_GPIPE && l->M == 16) {
            plain += !l->ckpt;
            ckpt_fits += l->ckpt && s.c[i].fits;
        }
    }
    EXPECT("search_checkpointing_where_needed", pb.memory < pa.memory && ckpt_fits == 1 && plain == 0,
           "bytes %g -> %g, checkpointed fitting %d, plain kept %d", pa.memory, pb.memory, ckpt_fits, plain);
    auto_free(&s);
    c = small_model();
    auto_search(&pf, &c, 2, 1000, &s);  // 1000 bytes: nothing fits
    EXPECT("search_nothing_fits", s.n > 0 && s.n_fit == 0 && !s.c[0].fits, "n %d fit %d", s.n, s.n_fit);
    auto_free(&s);
    c.batch = 63;  // no replica split, no micro-batches of 2 stages: only --tp 2 splits no batch
    auto_search(&pf, &c, 2, 1e12, &s);
    EXPECT("search_batch_must_divide", s.n == 1 && s.c[0].l.tp == 2 && s.c[0].l.pp == 1 && s.c[0].l.dp == 1,
           "%d layouts", s.n);
    auto_free(&s);
}

// --tp T and ZeRO-2/3 against hand-computed steps on the fixed profile (F = A per row per layer, B =
// 2A; the tensor-parallel all-reduce 1 ms over shm; reduce-scatter 4 ms, all-gather 3 ms, half hidden).
static void test_tp_zero(void) {
    Profile pf;
    fixed_profile(&pf);
    pf.coll[ALLREDUCE_SHM][COLL_ALLREDUCE][2] = flat(0.001);  // (only the tp group uses it: ddp has no shm here)
    TrainConfig c = small_model();
    Prediction pr;
    char why[512], cmd[1024], name[96];
    // monolith --tp 2, 4 layers of 8 in two column/row pairs, 64 rows: each layer's passes at 32 rows less
    // the half of the weights' share (a pass at one row: F A, B 2A) the slice does not touch; two forward
    // all-reduces (the row layers) and one backward (layer 2's: layer 0 computes no input gradient)
    Layout l = {.pp = 1, .dp = 1, .tp = 2, .v = 1, .M = 1};
    int rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    double want = 4 * (32 * A - A / 2) + 4 * (64 * A - A) + 3 * 0.001;
    EXPECT("predict_tp2", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    EXPECT("predict_tp2_comm", fabs(pr.comm_s - 0.003) < 1e-12, "%g", pr.comm_s);
    pf.refit[FAMILY_TP] = 1.5;  // --validate's factor of the family scales the step and its parts alike
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_refit", rc == 0 && fabs(pr.step_s - 1.5 * want) < 1e-9 && fabs(pr.comm_s - 0.0045) < 1e-12,
           "%s %.9g vs %.9g", why, pr.step_s, 1.5 * want);
    pf.refit[FAMILY_TP] = 0;
    layout_command(&l, &c, "", 1, cmd, sizeof cmd);
    EXPECT("tp_command", strstr(cmd, "mpiexec -n 2 ") && strstr(cmd, " --mode monolith --tp 2 ") &&
           !strcmp(layout_name(&l, name, sizeof name), "monolith tp2 fp32"), "%s | %s", cmd, name);
    l.tp = 4;  // no all-reduce of 4 measured
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_tp4_unmeasured", rc < 0 && strstr(why, "collectives of 4 ranks"), "%d %s", rc, why);
    // ddp 2 x 32 rows: ZeRO-2 as ZeRO-1 (one backward: its reduce-scatter of one bucket exposed, the
    // all-gather after)
    pf.adam_s = 1e-9;
    double P = (double)model_param_count(4, 8, 8, 2), flat_step = 4 * 3 * A * 32;
    l = (Layout){.pp = 1, .dp = 2, .tp = 1, .zero = 2, .v = 1, .M = 1};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    want = flat_step + 0.004 + P / 2 * 1e-9 + 0.003;
    EXPECT("predict_zero2", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    // ZeRO-3, one bucket: no all-gather after the step; one gather before the forward and one before the
    // backward, neither prefetched (the first bucket is waited for)
    l.zero = 3;
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    want = flat_step + 0.004 + P / 2 * 1e-9 + 2 * 0.003;
    EXPECT("predict_zero3", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    layout_command(&l, &c, "", 1, cmd, sizeof cmd);
    EXPECT("zero3_command", strstr(cmd, " --mode ddp --zero 3 ") && strstr(layout_name(&l, name, 96), "zero3"), "%s",
           cmd);
    // buckets of 612 bytes, whole layers each (the model's 1224 in 5 layers, the head's among them: 2 a
    // bucket, 3 buckets): each pass waits for the first gather, the other two are prefetched and half
    // hidden; three reduce-scatters (0.004 each), the first two half hidden, the last exposed
    c.ddp.bucket_mb = 612.0 / (1024 * 1024);
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    want = flat_step + 0.008 + P / 2 * 1e-9 + 2 * (0.003 + 0.003);
    EXPECT("predict_zero3_prefetch", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s,
           want);
    c = small_model();
    // hybrid 2 x 2, 1F1B, 4 micro-batches of 8 rows, ZeRO-2: 5 x (F + B) = 5 x 48A, then four
    // reduce-scatters of one bucket (one per backward), all but the last's bucket half hidden behind the
    // step's backward, and the all-gather
    pf.adam_s = 0;
    l = (Layout){.pp = 2, .dp = 2, .tp = 1, .zero = 2, .schedule = SCHED_1F1B, .v = 1, .M = 4};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    want = 5 * 48 * A + 4 * 0.004 - 0.5 * 3 * 0.004 + 0.003;
    EXPECT("predict_hybrid_zero2", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    // hybrid 2 x 2 without ZeRO, a stage's gradients in 2 buckets of 0.1 s each: all but the last bucket
    // hides, by the overlap share (half), behind the last micro-batch's backward, one micro-batch's
    // B = 2 layers x 8 rows x 2A = 32 ms: 0.2 - 16 ms exposed (not behind B / M = 8 ms, which would leave 0.2 - 4 ms)
    l.zero = 0;
    pf.coll[ALLREDUCE_SHM][COLL_ALLREDUCE][2] = (Curve){0};  // (MPI's all-reduce, as ddp's auto picks without shm)
    pf.coll[ALLREDUCE_MPI][COLL_ALLREDUCE][2] = flat(0.1);
    c.ddp.bucket_mb = 330.0 / (1024 * 1024);  // (each stage's 576 and 648 bytes in 2 buckets)
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    want = 5 * 48 * A + 0.2 - 0.5 * fmin(0.1, 32 * A);
    EXPECT("predict_hybrid_ddp_window", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s,
           want);
}

// The search on 4 ranks of a profile measured on 4: tp widths within the node, ZeRO levels 0 to 3
// with replicas, ZeRO-2/3 with --tp among them (axes/zero.c shards each rank's tp part).
static void test_search_tp_zero(void) {
    Profile pf;
    fixed_profile(&pf);
    pf.world = 4;
    for (int D = 2; D <= 4; D += 2) {
        pf.coll[ALLREDUCE_MPI][COLL_ALLREDUCE][D] = flat(0.010);
        pf.coll[ALLREDUCE_MPI][COLL_REDUCE_SCATTER][D] = flat(0.004);
        pf.coll[ALLREDUCE_MPI][COLL_ALLGATHER][D] = flat(0.003);
    }
    TrainConfig c = small_model();
    Search s;
    auto_search(&pf, &c, 4, 1e12, &s);
    int pp_tp = 0, ddp_tp = 0, mono_tp4 = 0, zero[4] = {0}, zero_tp = 0;
    for (int i = 0; i < s.n; i++) {
        const Layout *l = &s.c[i].l;
        pp_tp += l->pp == 2 && l->tp == 2;
        ddp_tp += l->pp == 1 && l->dp == 2 && l->tp == 2;
        mono_tp4 += l->tp == 4;
        zero[l->zero] += l->dp > 1;
        zero_tp += l->zero >= 2 && l->tp > 1;
    }
    EXPECT("search_tp_and_zero", pp_tp && ddp_tp && mono_tp4 && zero[0] && zero[1] && zero[2] && zero[3] && zero_tp,
           "pp x tp2 %d, ddp x tp2 %d, tp4 %d, zero %d %d %d %d, zero>=2 with tp %d", pp_tp, ddp_tp, mono_tp4, zero[0],
           zero[1], zero[2], zero[3], zero_tp);
    auto_free(&s);
    pf.world = 2;  // measured on 2 ranks: a group of 4 is wider than what it measured on one node
    auto_search(&pf, &c, 4, 1e12, &s);
    mono_tp4 = 0;
    for (int i = 0; i < s.n; i++) mono_tp4 += s.c[i].l.tp == 4;
    EXPECT("search_tp_within_node", s.n > 0 && !mono_tp4, "%d layouts of tp 4", mono_tp4);
    auto_free(&s);
}

// A pipeline message is priced at the bytes the executor sends (train/executor.c's pipe_message_bytes): 4 a
// value in fp32, 2 in bf16, where both the activation and its gradient cross the wire as bf16.
static void test_message_bytes(void) {
    Plan *p = calloc(1, sizeof *p);
    p->rows = 16;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        Stage s = {.H = 8, .bf16 = bf16};
        double priced = pipeline_price_message_bytes(p, 8, bf16 ? PRECISION_BF16 : PRECISION_FP32),
               sent = pipe_message_bytes(p, &s);
        EXPECT(bf16 ? "message_bytes_bf16" : "message_bytes_fp32", priced == sent && sent == 16 * 8 * (bf16 ? 2 : 4),
               "priced %g, sent %g", priced, sent);
    }
    free(p);
}

// Where train puts a layout's groups on a machine file's nodes (4 devices each): tp innermost, then the
// stages (a replica's pipeline on adjacent ranks) or the replicas; and plan_layout resolves --placement
// auto as train does, so the planner prices the placement the run will have.
static void test_links(void) {
    Profile pf;
    char why[512];
    cost_parse(machine_json, "m.json", &pf, why, sizeof why);
    Plan *p = calloc(1, sizeof *p);
    *p = (Plan){.pipelined = 1, .K = 2, .D = 8, .T = 2, .placement = PLACEMENT_REPLICAS};
    Links k = predict_links(&pf, p);  // a stage's 16 ranks span 4 nodes: 2 replicas on each; stages apart
    EXPECT("links_replicas", k.dp_local == 2 && !k.pp_intra, "dp %d per node, pipeline inside %d", k.dp_local,
           k.pp_intra);
    p->placement = PLACEMENT_STAGES;  // a replica's 2 x 2 ranks on one node: 1 replica per node
    k = predict_links(&pf, p);
    EXPECT("links_stages", k.dp_local == 1 && k.pp_intra, "dp %d per node, pipeline inside %d", k.dp_local,
           k.pp_intra);
    *p = (Plan){.K = 1, .D = 2, .T = 2, .placement = PLACEMENT_STAGES};  // ddp tp2: one node
    k = predict_links(&pf, p);
    EXPECT("links_one_node", k.dp_local == 2 && k.pp_intra, "dp %d per node", k.dp_local);
    TrainConfig c = small_model();
    Degrees d = {.pp = 2, .dp = 2, .tp = 1};
    int rc = plan_layout(&c, &d, p, why, sizeof why);
    EXPECT("plan_layout_places", rc == 0 && p->placement != PLACEMENT_AUTO &&
           p->placement == (p->dp_bytes > p->pp_bytes ? PLACEMENT_REPLICAS : PLACEMENT_STAGES),
           "%s placement %d (dp %g, pp %g bytes)", why, p->placement, p->dp_bytes, p->pp_bytes);
    free(p);
}

// The synthetic data where train makes it (exec_load_inputs): the input rows on the first stage, their
// labels on the head (a stage doing both: the labels' time alone, made from its rows); a profile written
// before the two were timed apart splits its one figure in half;
// a machine file carries the host's rates.
static void test_data_costs(void) {
    Profile pf;
    fixed_profile(&pf);
    TrainConfig c = small_model();
    Prediction pr;
    char why[512];
    Layout l = {.pp = 1, .dp = 1, .tp = 1, .v = 1, .M = 1};
    pf.data_s_per_value = A / 16, pf.label_s_per_value = A / 8;  // 64 rows x 8 inputs: 32A and 64A
    int rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    double want = 4 * 3 * A * 64 + 64 * A;
    EXPECT("predict_data_monolith", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    // 1F1B on 2 stages, 4 micro-batches of 16 rows (F = 32A, B = 64A a stage): stage 0 ends the step, and
    // its busy time has the rows (16 x 8 x A/16 = 8A a micro-batch) and none of the labels
    l = (Layout){.pp = 2, .dp = 1, .tp = 1, .schedule = SCHED_1F1B, .v = 1, .M = 4};
    pf.label_s_per_value = 0;
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_rows_on_first_stage", rc == 0 && fabs(pr.compute_s - 4 * (96 * A + 8 * A)) < 1e-9, "%s %.9g",
           why, pr.compute_s);
    pf.data_s_per_value = 0, pf.label_s_per_value = A / 16;
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_labels_on_head", rc == 0 && fabs(pr.compute_s - 4 * 96 * A) < 1e-9 &&
           fabs(pr.step_s - 5 * 96 * A - 4 * 8 * A) < 1e-9, "%s compute %.9g step %.9g", why, pr.compute_s, pr.step_s);
    pf.data_s_per_value = 2e-9, pf.label_s_per_value = 0;
    char *text = cost_to_json(&pf);
    char *key = strstr(text, "\"label_s_per_value\"");
    if (key) key[1] = 'X';  // (a profile of before: no such key)
    Profile old;
    rc = cost_parse(text, "old.json", &old, why, sizeof why);
    free(text);
    EXPECT("profile_without_labels_halves", rc == 0 && old.data_s_per_value == 1e-9 && old.label_s_per_value == 1e-9,
           "%s %g %g", why, old.data_s_per_value, old.label_s_per_value);
    char m[sizeof machine_json + 80];
    snprintf(m, sizeof m, "%.*s, \"data_s_per_value\": 6e-10, \"label_s_per_value\": 6e-9}",
             (int)strlen(machine_json) - 1, machine_json);
    rc = cost_parse(m, "m.json", &pf, why, sizeof why);
    EXPECT("machine_host_data_rates", rc == 0 && pf.data_s_per_value == 6e-10 && pf.label_s_per_value == 6e-9, "%s",
           why);
}

// MFU's peak of a calibration (predict_peak): the fastest gemm of every pass it timed, by each pass's FLOPs (a
// hidden layer's backward 4 a weight a row, the rest 2), so that a backward faster than the forward, or a
// first layer faster than the hidden ones, cannot carry a predicted row past 100%.
static void test_peak(void) {
    Profile pf;
    fixed_profile(&pf);
    TrainConfig c = small_model();
    Prediction pr;
    char why[512];
    double F = 2 * 8 * 8 / A;  // the hidden layer's forward: 128 FLOPs a row in A seconds
    EXPECT("peak_of_the_forward", fabs(predict_peak(&pf, PRECISION_FP32) / F - 1) < 1e-12, "%g vs %g",
           predict_peak(&pf, PRECISION_FP32), F);
    for (int q = 0; q < PASSES; q++)  // the head (8 -> 2) at the forward's rate: its FLOPs are the model's too
        pf.layer[0][LAYER_HEAD][q] = line(q == PASS_B ? A / 2 : A / 4);
    pf.layer[0][LAYER_MID][PASS_B] = line(1.5 * A);  // the backward's 256 FLOPs a row in 1.5A: 4/3 the forward's rate
    Layout l = {.pp = 1, .dp = 1, .tp = 1, .v = 1, .M = 1};
    int rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("peak_of_a_faster_backward", rc == 0 && fabs(pr.peak / (F * 4 / 3) - 1) < 1e-12 && pr.mfu > 0 &&
           pr.mfu <= 1, "%s peak %g, mfu %g", why, pr.peak, pr.mfu);
    pf.layer[0][LAYER_FIRST][PASS_W] = line(A / 4);  // the first layer's weight gradient at 4x the forward's rate
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("peak_of_the_first_layer", rc == 0 && fabs(pr.peak / (4 * F) - 1) < 1e-12 && pr.mfu > 0 && pr.mfu <= 1,
           "%s peak %g, mfu %g", why, pr.peak, pr.mfu);
}

// One layout as its options give it (predict_config, `plan --profile` without --auto): the same step as
// the search's layout, --partition honoured, and the parts adding up to the step.
static void test_one_layout(void) {
    Profile pf;
    fixed_profile(&pf);
    pf.adam_s = 1e-9;
    TrainConfig c = small_model();
    Prediction a, b;
    char why[512];
    Layout l = {.pp = 2, .dp = 1, .tp = 1, .schedule = SCHED_1F1B, .v = 1, .M = 4};
    Degrees d = layout_degrees(&l);
    c.pipe.schedule = SCHED_1F1B;
    int rc = predict_step(&pf, &c, &l, &a, why, sizeof why) || predict_config(&pf, &c, &d, &b, why, sizeof why);
    EXPECT("predict_config_as_search", rc == 0 && a.step_s == b.step_s && a.memory == b.memory, "%s %g %g", why,
           a.step_s, b.step_s);
    EXPECT("predict_parts_add_up", fabs(b.compute_s + b.msgs_s + b.coll_s + b.fixed_s + 0.2 * 5 * 96 * A - b.step_s) <
           1e-9 && b.opt_s > 0, "compute %g msgs %g coll %g fixed %g step %g", b.compute_s, b.msgs_s, b.coll_s,
           b.fixed_s, b.step_s);
    // --partition 3,1: stage 0 holds 3 layers (F = 48A, B = 96A a micro-batch of 16 rows), stage 1 one
    // (F + B = 48A, inside any one of stage 0's passes): stage 0 never waits, 4 x 144A (even: 5 x 96A)
    snprintf(c.pipe.partition, sizeof c.pipe.partition, "3,1");
    rc = predict_config(&pf, &c, &d, &b, why, sizeof why);
    double want = 4 * 144 * A;
    EXPECT("predict_config_partition", rc == 0 && fabs(b.step_s - b.opt_s - want) < 1e-9, "%s %.9g vs %.9g", why,
           b.step_s - b.opt_s, want);
}

// MoE layers (cost_moe, moe_passes): 4 experts, top-2, capacity factor 1.25 on layers 1-3 of the small model.
static void test_moe(void) {
    Profile pf;
    fixed_profile(&pf);
    TrainConfig c = small_model();
    c.moe.experts = 4, c.moe.every = 1, c.moe.top_k = 2, c.moe.capacity = 1.25;
    Prediction pr;
    char why[512];
    // the monolith, 64 rows: layer 0 F = 64A, B = 128A; an MoE layer's router is 64 x 4 / 8 = 32 rows of a hidden
    // layer, each of its 4 experts at most its capacity ceil(1.25 x 64 x 2 / 4) = 40 rows: F = 32A + 4 x 40A
    Layout l = {.pp = 1, .dp = 1, .tp = 1, .v = 1, .M = 1};
    int rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    double F = 64 * A + 3 * (32 + 160) * A, want = 3 * F;  // B = 2F
    EXPECT("predict_moe_monolith", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    // --ep 2 over dp 2, 32 rows a replica: capacity ceil(1.25 x 32 x 2 / 4) = 20 rows from each of the 2 ranks, so
    // each of my 2 experts at 40 rows, the router 16 rows: an MoE layer's F = 16A + 2 x 40A; per MoE layer four
    // all-to-alls of rows and one of counts, each one round of a message (p2p 1 ms); the all-reduce 10 ms exposed
    pf.p2p = flat(0.001);
    l = (Layout){.pp = 1, .dp = 2, .tp = 1, .v = 1, .M = 1, .ep = 2};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    F = 32 * A + 3 * (16 + 80) * A, want = 3 * F + 3 * 5 * 0.001 + 0.010;
    EXPECT("predict_moe_ep2", rc == 0 && fabs(pr.step_s - want) < 1e-9, "%s %.9g vs %.9g", why, pr.step_s, want);
    EXPECT("predict_moe_ep2_comm", fabs(pr.comm_s - (0.015 + 0.010)) < 1e-9, "%.9g", pr.comm_s);
    // dp 4 with --ep 2: a rank holds 2 experts, summed over their 2 holders in a bucket per MoE layer (3 all-reduces
    // of 2 ranks, 10 ms each), the rest over all 4 (one bucket, 20 ms); the all-to-alls as above
    pf.coll[ALLREDUCE_MPI][COLL_ALLREDUCE][4] = flat(0.020);
    l = (Layout){.pp = 1, .dp = 4, .tp = 1, .v = 1, .M = 1, .ep = 2};
    rc = predict_step(&pf, &c, &l, &pr, why, sizeof why);
    EXPECT("predict_moe_ep2_dp4_expert_buckets", rc == 0 && fabs(pr.comm_s - (0.015 + 0.020 + 3 * 0.010)) < 1e-9,
           "%s %.9g", why, pr.comm_s);
    // the layer alone: W is 0 (moe.c runs its whole backward in I), I is B
    MoeSpec m = {.experts = 4, .every = 1, .top_k = 2, .capacity = 1.25f};
    EXPECT("cost_moe_w_zero_i_is_b", cost_moe(&pf, PASS_W, 0, 64, 8, &m, 1) == 0 &&
           fabs(cost_moe(&pf, PASS_I, 0, 64, 8, &m, 1) - 2 * 192 * A) < 1e-12, "%g", cost_moe(&pf, PASS_I, 0, 64, 8, &m, 1));
    // a capacity above the rows: an expert takes each row at most once (top-2 of 2 experts, factor 2: 64 rows)
    m = (MoeSpec){.experts = 2, .every = 1, .top_k = 2, .capacity = 2};
    EXPECT("cost_moe_capacity_bounded_by_rows", fabs(cost_moe(&pf, PASS_F, 0, 64, 8, &m, 1) - (16 + 2 * 64) * A) < 1e-12,
           "%g", cost_moe(&pf, PASS_F, 0, 64, 8, &m, 1));
    // plan --auto searches --ep: ddp over 2 with the experts shared by the 2 replicas (ep2) is tried beside ddp
    // alone, priced the same but for its 3 x 5 all-to-alls of 1 ms
    Search s;
    auto_search(&pf, &c, 2, 1e12, &s);
    const Candidate *one = NULL, *two = NULL;
    for (int i = 0; i < s.n; i++) {
        const Layout *x = &s.c[i].l;
        if (x->pp == 1 && x->dp == 2 && x->zero == 0) *(x->ep == 2 ? &two : &one) = &s.c[i];
    }
    char name[128];
    EXPECT("search_moe_ep", one && two && fabs(two->pr.step_s - one->pr.step_s - 0.015) < 1e-9 &&
           strstr(layout_name(&two->l, name, sizeof name), " ep2"), "%p %p", (const void *)one, (const void *)two);
    auto_free(&s);
    EXPECT("cost_alltoall_rounds", fabs(cost_alltoall(&pf, 4, 4096, 1) - 3 * 0.001) < 1e-12 &&
           cost_alltoall(&pf, 1, 4096, 1) == 0, "%g", cost_alltoall(&pf, 4, 4096, 1));
}

// --compress and local SGD priced (issue 36): each method's bytes by hand on the small model, a compressed ddp
// step's exposed all-gathers and host work, and the crossover bandwidth's two regimes.
static void test_compress_price(void) {
    TrainConfig c = small_model();
    Degrees d = {.pp = 1, .dp = 2, .tp = 1, .ep = 1};
    Plan *p = xmalloc(sizeof *p);
    char why[512];
    int rc = plan_layout(&c, &d, p, why, sizeof why);
    EXPECT("compress_plan", rc == 0, "%s", why);
    // 4 matrices [8, 8] and the head [2, 8], biases 8 and 2: 306 parameters. powersgd:4: (8 + 8) 4 + 8 = 72
    // floats a layer, the head at r = 2: (2 + 8) 2 + 2 = 22: 310 floats to the other replica, 1240 bytes
    CompressTraffic x = compress_price(&c, p, 0, COMPRESS_POWERSGD, 4);
    EXPECT("compress_powersgd_bytes", x.bytes == 1240 && x.params == 306 && x.mults == 3 * (4 * 64 * 4 + 16 * 2),
           "%g %g %g", x.bytes, x.params, x.mults);
    // its Gram-Schmidt: out r (2 r + 3) a matrix, 8 x 4 x 11 a layer and the head's 2 x 2 x 7: 1436 operations
    EXPECT("compress_powersgd_ortho", x.ortho == 4 * 8 * 4 * 11 + 2 * 2 * 7, "%g", x.ortho);
    x = compress_price(&c, p, 0, COMPRESS_SIGN, 0);  // 64 bits = 2 floats, a scale, 8 biases; the head 0.5 + 1 + 2
    EXPECT("compress_sign_bytes", x.bytes == 4 * (4 * 11 + 3.5), "%g", x.bytes);
    x = compress_price(&c, p, 0, COMPRESS_TOPK, 0.1);  // 30.6 (index, value) pairs
    EXPECT("compress_topk_bytes", fabs(x.bytes - 8 * 30.6) < 1e-9, "%g", x.bytes);
    // ddp + powersgd:4 on the fixed profile: one bucket, 2 all-gathers of 0.003 s (flat), 4 passes of SGD's
    // 1e-9 a parameter, 3168 multiply-adds at a forward of 4 rows' 4A over 4 x 8 x 8: 49.5 A, and the 1436
    // Gram-Schmidt operations at the calibration's 3e-9 each (a profile without that rate: SGD's 1e-9)
    Profile pf;
    fixed_profile(&pf);
    pf.sgd_s = 1e-9, pf.ortho_s = 3e-9;
    snprintf(c.ddp.compress, sizeof c.ddp.compress, "powersgd:4");
    Prediction pr;
    rc = predict_config(&pf, &c, &d, &pr, why, sizeof why);
    double want = 2 * 0.003 + 4 * 306 * 1e-9 + 3168 * A / 64 + 1436 * 3e-9;
    EXPECT("compress_priced_exposed", rc == 0 && fabs(pr.coll_s - want) < 1e-12, "%s %.12g vs %.12g", why, pr.coll_s,
           want);
    pf.ortho_s = 0;
    rc = predict_config(&pf, &c, &d, &pr, why, sizeof why);
    want -= 1436 * 2e-9;
    EXPECT("compress_ortho_unmeasured", rc == 0 && fabs(pr.coll_s - want) < 1e-12, "%s %.12g vs %.12g", why, pr.coll_s,
           want);
    // a profile's rate survives its JSON (an older profile's absence: 0, unmeasured)
    pf.ortho_s = 3e-9;
    char *text = cost_to_json(&pf);
    Profile back;
    rc = cost_parse(text, "p.json", &back, why, sizeof why);
    free(text);
    EXPECT("compress_ortho_roundtrip", rc == 0 && back.ortho_s == 3e-9, "%s %g", why, back.ortho_s);
    // ddp sends a = 1e6 bytes in 4 buckets, half its sum hidden behind a 0.1 s backward, a method m = 1e5 plus
    // host seconds: fast links, 1/B = host / (a (1 - 0.5 x 3/4) - m) = 0.01 / 525000; slow ones (where ddp's
    // sum outgrows the window, 1/B > 0.1 / 750000), 1/B = (0.05 + host) / (a - m)
    double bw = crossover_bandwidth(1e6, 1e5, 0.01, 0.1, 0.5, 4);
    EXPECT("crossover_fast_regime", fabs(bw - 52.5e6) < 1e-3, "%.9g", bw);
    bw = crossover_bandwidth(1e6, 1e5, 0.1, 0.1, 0.5, 4);
    EXPECT("crossover_slow_regime", fabs(bw - 6e6) < 1e-6, "%.9g", bw);
    EXPECT("crossover_no_host_every_link", isinf(crossover_bandwidth(1e6, 1e5, 0, 0.1, 0.5, 4)), "finite");
    EXPECT("crossover_more_bytes_never", crossover_bandwidth(1e6, 2e6, 0, 0.1, 0.5, 4) == 0, "not 0");
    free(p);
}

// Issue 32: a profile's collective wait (cost_coll_wait) adds, to each layout with collectives, entry_s a
// collective waited for and the drift's share of the compute since the ranks last met; layouts without
// collectives keep their step, and a profile without the term (an older one) reads as none.
static double step_of(const Profile *pf, const TrainConfig *c, Layout l) {
    Prediction pr;
    char why[512];
    return predict_step(pf, c, &l, &pr, why, sizeof why) ? -1 : pr.step_s;
}
static void test_coll_wait(void) {
    Profile pf, waits;
    fixed_profile(&pf);
    pf.coll[ALLREDUCE_SHM][COLL_ALLREDUCE][2] = flat(0.001);
    waits = pf;
    waits.wait = (CollWait){.entry_s = 0.0005, .drift = 0.1};
    TrainConfig c = small_model();
    // monolith --tp 2 (test_tp_zero's): two forward all-reduces after the forward's 4 (32A - A/2), one backward
    // after the backward's 4 (64A - A)
    Layout tp = {.pp = 1, .dp = 1, .tp = 2, .v = 1, .M = 1};
    double got = step_of(&waits, &c, tp) - step_of(&pf, &c, tp),
           want = 3 * 0.0005 + 0.1 * (4 * (32 * A - A / 2) + 4 * (64 * A - A));
    EXPECT("coll_wait_tp2", fabs(got - want) < 1e-12, "%.12g vs %.12g", got, want);
    // ddp on 2 replicas: the sync's one bucket waited for after the step's compute, 4 layers x 32 rows x 3A;
    // ZeRO-1: and its all-gather after the update
    Layout ddp = {.pp = 1, .dp = 2, .tp = 1, .v = 1, .M = 1};
    got = step_of(&waits, &c, ddp) - step_of(&pf, &c, ddp), want = 0.0005 + 0.1 * 4 * 32 * 3 * A;
    EXPECT("coll_wait_ddp", fabs(got - want) < 1e-12, "%.12g vs %.12g", got, want);
    ddp.zero = 1;
    got = step_of(&waits, &c, ddp) - step_of(&pf, &c, ddp), want += 0.0005;
    EXPECT("coll_wait_zero1", fabs(got - want) < 1e-12, "%.12g vs %.12g", got, want);
    TrainConfig three = c;  // 3 buckets (test_tp_zero's): their all-gathers after the update in flight together, one wait
    three.ddp.bucket_mb = 612.0 / (1024 * 1024);
    got = step_of(&waits, &three, ddp) - step_of(&pf, &three, ddp);
    EXPECT("coll_wait_zero1_buckets", fabs(got - want) < 1e-12, "%.12g vs %.12g", got, want);
    // hybrid 2 x 2, 1F1B, 4 micro-batches of 8 rows: each stage's busy 4 x (2 layers x 8 rows x 3A)
    Layout hybrid = {.pp = 2, .dp = 2, .tp = 1, .schedule = SCHED_1F1B, .v = 1, .M = 4};
    got = step_of(&waits, &c, hybrid) - step_of(&pf, &c, hybrid), want = 0.0005 + 0.1 * 4 * 48 * A;
    EXPECT("coll_wait_hybrid", fabs(got - want) < 1e-12, "%.12g vs %.12g", got, want);
    // no collectives: the pipeline and the monolith priced as before
    Layout pp = {.pp = 2, .dp = 1, .tp = 1, .schedule = SCHED_1F1B, .v = 1, .M = 4}, mono = {.pp = 1, .dp = 1, .tp = 1,
                                                                                          .v = 1, .M = 1};
    EXPECT("coll_wait_not_pipeline_monolith", step_of(&waits, &c, pp) == step_of(&pf, &c, pp) &&
           step_of(&waits, &c, mono) == step_of(&pf, &c, mono) && step_of(&pf, &c, mono) > 0, "changed");
    // the term survives its JSON; a profile without it reads as none; a drift past the compute is refused
    waits.p2p = pf.p2p = (Curve){.n = 2, .x = {8, 4096}, .s = {1e-6, 3e-6}};
    char *text = cost_to_json(&waits), why[512];
    Profile back;
    int rc = cost_parse(text, "p.json", &back, why, sizeof why);
    free(text);
    EXPECT("coll_wait_roundtrip", rc == 0 && back.wait.entry_s == 0.0005 && back.wait.drift == 0.1, "%s", why);
    text = cost_to_json(&pf);
    rc = cost_parse(text, "p.json", &back, why, sizeof why);
    EXPECT("coll_wait_old_profile", rc == 0 && !strstr(text, "collective_wait") && back.wait.entry_s == 0 &&
           back.wait.drift == 0, "%s", why);
    free(text);
    waits.wait.drift = 2;
    text = cost_to_json(&waits);
    rc = cost_parse(text, "p.json", &back, why, sizeof why);
    free(text);
    EXPECT("coll_wait_drift_refused", rc < 0 && strstr(why, "\"drift\" is a share of the compute: at most 1"), "%s",
           why);
}

int main(void) {
    test_curves();
    test_machine();
    test_roundtrip();
    test_profile_numbers();
    test_predictions();
    test_search();
    test_tp_zero();
    test_search_tp_zero();
    test_message_bytes();
    test_links();
    test_data_costs();
    test_one_layout();
    test_peak();
    test_moe();
    test_compress_price();
    test_coll_wait();
    return unit_failures != 0;
}
