// tests/unit_plan.c: the plan of `micropp train` (plan.c, rules.c) without MPI: the layout it derives
// for every mode (stages, replicas, micro-batches, chunks, rows, partition), the choices it makes
// from the facts of the world (device, transport, all-reduce, steps, rows evaluated), and every
// rule's refusal, message included, for the options as a user types them and the facts given.
#include <stdlib.h>
#include <unistd.h>
#include "unit.h"
#include "model.h"
#include "schedule_file.h"
#include "train/plan.h"
#include "planner/memory.h"
#include "axes/tensor.h"
#include "axes/expert.h"  // expert_sizes
#include "train/options.h"

#define TAG_UB 2147483647LL

// Parses "--mode pp --micro-batches 8" as train's command line, then plans it with the facts f.
static int plan_with(const Facts *f, const char *args, Plan *p, char *err, size_t n) {
    static TrainConfig c;
    char buf[512], *argv[64] = {"train"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", args);
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    static OptionsSeen seen;
    train_config_defaults(&c);
    options_parse("train", train_options, &c, &seen, argc, argv, "", "");
    Degrees d;
    if (degrees_resolve(&c, &seen, f->world, &d, err, n)) return -1;
    return plan_make(&c, &d, &seen, f, p, err, n);
}

// ... for `world` ranks (no other fact known yet).
static int plan_args(int world, long long tag_ub, const char *args, Plan *p, char *err, size_t n) {
    Facts f = {.world = world, .tag_ub = tag_ub};
    return plan_with(&f, args, p, err, n);
}

static Plan plan_ok(const char *name, int world, const char *args) {
    Plan p;
    char err[1024];
    int rc = plan_args(world, TAG_UB, args, &p, err, sizeof err);
    EXPECT(name, rc == 0, "refused: %s", err);
    return p;
}

// The refusal of args on `world` ranks must contain `want`.
static void refused(const char *name, int world, const char *args, const char *want) {
    Plan p;
    char err[1024];
    int rc = plan_args(world, TAG_UB, args, &p, err, sizeof err);
    EXPECT(name, rc == -1 && strstr(err, want) && !strchr(err, '\n'), "rc %d, message '%s', expected '%s'", rc, err, want);
}

static int lo_is(const Plan *p, const int *want, int n) {
    for (int i = 0; i <= n; i++) if (p->lo[i] != want[i]) return 0;
    return 1;
}

static void test_layouts(void) {
    Plan p = plan_ok("plan/monolith defaults", 1, "");
    EXPECT("plan/monolith: one stage, one replica, the whole batch", p.K == 1 && p.D == 1 && p.M == 1 && p.N == 1 && p.V == 1 && p.S == 1 &&
           p.rows == 32 && p.lo[0] == 0 && p.lo[1] == 16 && !p.pipelined && !p.data_parallel && !p.distributed, "K %d D %d rows %d", p.K, p.D, p.rows);
    p = plan_ok("plan/pp 4 ranks", 4, "--mode pp");
    int even[] = {0, 4, 8, 12, 16};
    EXPECT("plan/pp: a stage per rank, 4 micro-batches of 8 rows, even split", p.K == 4 && p.M == 4 && p.rows == 8 && lo_is(&p, even, 4) &&
           p.pipelined && p.distributed && !p.data_parallel, "K %d M %d rows %d", p.K, p.M, p.rows);
    p = plan_ok("plan/pp uneven layers", 3, "--mode pp --layers 10");
    int rem[] = {0, 4, 7, 10};
    EXPECT("plan/pp: the remainder goes to the first stages", lo_is(&p, rem, 3), "lo %d %d %d %d", p.lo[0], p.lo[1], p.lo[2], p.lo[3]);
    p = plan_ok("plan/pp partition", 4, "--mode pp --partition 5,4,4,3");
    int part[] = {0, 5, 9, 13, 16};
    EXPECT("plan/pp: --partition sets each stage's layers", lo_is(&p, part, 4), "lo[1] %d", p.lo[1]);
    p = plan_ok("plan/interleaved", 4, "--mode pp --schedule interleaved --virtual-stages 2 --micro-batches 8");
    EXPECT("plan/interleaved: 8 chunks of 2 layers, rank 1's chunks are virtual stages 1 and 5", p.V == 2 && p.S == 8 &&
           plan_layers(&p, 7) == 2 && plan_vstage(&p, 1, 1) == 5 && plan_stage_of(&p, 5) == 1 && plan_chunk_of(&p, 5) == 1, "V %d S %d", p.V, p.S);
    p = plan_ok("plan/hybrid", 4, "--mode hybrid --pp 2 --dp 2");
    EXPECT("plan/hybrid: 2 stages x 2 replicas, 32 rows / 2 replicas / 4 micro-batches", p.K == 2 && p.D == 2 && p.rows == 4 &&
           p.pipelined && p.data_parallel, "K %d D %d rows %d", p.K, p.D, p.rows);
    p = plan_ok("plan/hybrid from --pp alone", 6, "--mode hybrid --pp 3 --batch 48");
    EXPECT("plan/hybrid: --dp follows from the world", p.K == 3 && p.D == 2, "K %d D %d", p.K, p.D);
    p = plan_ok("plan/ddp grad-accum", 2, "--mode ddp --grad-accum 4");
    EXPECT("plan/ddp: a replica per rank, 4 micro-steps, 16 rows each", p.K == 1 && p.D == 2 && p.N == 4 && p.M == 1 && p.rows == 16,
           "D %d N %d rows %d", p.D, p.N, p.rows);
    p = plan_ok("plan/manual", 1, "--mode manual --parts 4 --layers 8");
    EXPECT("plan/manual: 4 parts of 2 layers in one process", p.K == 4 && p.S == 4 && plan_layers(&p, 3) == 2 && !p.distributed, "K %d", p.K);
    p = plan_ok("plan/manual --pp 3 (--parts' one name)", 1, "--mode manual --pp 3 --layers 6");
    EXPECT("plan/manual --pp 3: 3 parts in one process", p.K == 3 && p.S == 3 && !p.distributed, "K %d", p.K);
    p = plan_ok("plan/manual without --pp", 1, "--mode manual --layers 6");
    EXPECT("plan/manual without --pp: 2 parts", p.K == 2 && !p.distributed, "K %d", p.K);
}

// Degrees alone describe a run (no --mode): each degree given is kept, dp is the ranks left; --mode is a
// spelling of them, and agrees with them when both are given.
static void test_degrees(void) {
    Plan p = plan_ok("plan/degrees: pp 2 x tp 2 on 8 ranks", 8, "--pp 2 --tp 2");
    EXPECT("plan/degrees: dp = 8 / (2 x 2)",
           p.K == 2 && p.D == 2 && p.T == 2 && p.pipelined && p.data_parallel && p.mode == MODE_HYBRID,
           "K %d D %d T %d mode %d", p.K, p.D, p.T, p.mode);
    p = plan_ok("plan/degrees: --pp 2 --dp 2 on 4 ranks", 4, "--pp 2 --dp 2");
    EXPECT("plan/degrees: a hybrid without --mode", p.K == 2 && p.D == 2 && p.T == 1 && p.mode == MODE_HYBRID,
           "K %d D %d", p.K, p.D);
    p = plan_ok("plan/degrees: --pp 4 on 4 ranks", 4, "--pp 4");
    EXPECT("plan/degrees: a pipeline of 4, dp 1",
           p.K == 4 && p.D == 1 && p.pipelined && !p.data_parallel && p.mode == MODE_PP, "K %d D %d", p.K, p.D);
    p = plan_ok("plan/degrees: nothing on 2 ranks", 2, "");
    EXPECT("plan/degrees: the ranks are replicas by default", p.K == 1 && p.D == 2 && p.mode == MODE_DDP, "K %d D %d",
           p.K, p.D);
    p = plan_ok("plan/degrees: --tp 2 on 4 ranks", 4, "--tp 2");
    EXPECT("plan/degrees: the groups left are replicas", p.K == 1 && p.D == 2 && p.T == 2, "K %d D %d T %d", p.K, p.D,
           p.T);
    p = plan_ok("plan/degrees: --mode pp --pp 2 agrees", 2, "--mode pp --pp 2");
    EXPECT("plan/degrees: --mode pp --pp 2 on 2 ranks", p.K == 2 && p.D == 1, "K %d D %d", p.K, p.D);
    p = plan_ok("plan/degrees: --mode ddp --dp 2 agrees", 2, "--mode ddp --dp 2");
    EXPECT("plan/degrees: --mode ddp --dp 2 on 2 ranks", p.K == 1 && p.D == 2, "K %d D %d", p.K, p.D);
    p = plan_ok("plan/degrees: --zero with degrees alone", 4, "--dp 4 --zero 2");
    EXPECT("plan/degrees: dp 4, ZeRO-2", p.D == 4, "D %d", p.D);
    refused("plan/refuse: a degree that does not divide the world", 6, "--pp 4",
            "train: --pp 4 does not divide the 6 ranks: use --pp 1, 2, 3 or 6, or 'mpiexec -n 4'");
    refused("plan/refuse: --dp that does not divide the groups", 8, "--dp 3 --tp 2",
            "train: --dp 3 does not divide the 8 ranks (4 groups of --tp 2): use --dp 1, 2 or 4, or 'mpiexec -n 6'");
    refused("plan/refuse: degrees against the world", 4, "--pp 2 --dp 3",
            "train: --pp 2 x --dp 3 = 6 ranks, but 4 were started: run 'mpiexec -n 6' or choose P x D = 4");
    refused("plan/refuse: the generic rule names the flag and the degree", 4, "--pp 4 --bucket-mb 5",
            "train: --bucket-mb applies to data parallelism (--dp > 1), and this run is pp 4 x dp 1 x tp 1: drop it or "
            "set --dp");
    refused("plan/refuse: the generic rule for an option of two axes at once", 4, "--dp 2 --tp 2 --tp-message slice",
            "train: --tp-message applies to a pipeline (--pp > 1) with tensor parallelism (--tp > 1), and this run is "
            "pp 1 x dp 2 x tp 2: drop it or set --pp");
    refused("plan/refuse: the generic rule under --mode manual", 1, "--mode manual --schedule gpipe",
            "train: --schedule applies to a pipeline (--pp > 1), and this run is --mode manual (2 parts in one "
            "process): drop it or set --pp");
}

static void test_flags_apply(void) {
    refused("plan/refuse: monolith on 2 ranks", 2, "--mode monolith",
            "train: --mode monolith runs in one process but 2 were started: drop 'mpiexec -n 2', or drop --mode "
            "monolith (the ranks then run dp 2)");
    refused("plan/refuse: --trace outside pp", 1, "--trace t.json",
            "train: --trace applies to a pipeline (--pp > 1), data parallelism (--dp > 1) or tensor parallelism (--tp "
            "> 1), and this run is pp 1 x dp 1 x tp 1: drop it or set --pp, --dp or --tp");
    plan_ok("plan: --trace and --timeline in ddp (the buckets' all-reduces)", 2,
            "--mode ddp --trace t.json --timeline t.svg --timeline-step 2");
    refused("plan/refuse: --gantt in ddp even with --zero", 2, "--mode ddp --zero 3 --gantt",
            "train: --gantt applies to a pipeline (--pp > 1), and this run is pp 1 x dp 2 x tp 1: drop it or set --pp");
    refused("plan/refuse: --timeline in monolith even with --tp", 2, "--tp 2 --timeline t.svg",
            "train: --timeline applies to a pipeline (--pp > 1) or data parallelism (--dp > 1), and this run is pp 1 x "
            "dp 1 x tp 2");
    plan_ok("plan: --trace in ddp with --zero 3", 2, "--mode ddp --zero 3 --trace t.json");
    // a pipeline's observers, a track per rank: hybrid's replicas too
    plan_ok("plan: --trace, --timeline and --gantt in hybrid", 4, "--mode hybrid --pp 2 --dp 2 --trace t.json "
            "--timeline t.svg --gantt");
    refused("plan/refuse: --schedule outside a pipeline", 2, "--mode ddp --schedule gpipe",
            "--schedule applies to a pipeline (--pp > 1), and this run is pp 1 x dp 2 x tp 1: drop it or set --pp");
    refused("plan/refuse: --parts outside manual is --pp on ranks", 1, "--parts 3",
            "train: --pp 3 runs a stage per rank, and 1 rank was started: run 'mpiexec -n 3', or add --mode manual");

    refused("plan/refuse: --samples with a data file", 1, "--data x.npy --samples 5", "--samples sizes the synthetic data set, and --data 'x.npy' is a file");
    refused("plan/refuse: --zero outside data parallelism", 2, "--mode pp --zero 1",
            "--zero applies to data parallelism (--dp > 1), and this run is pp 2 x dp 1 x tp 1: drop it or set --dp");
    refused("plan/refuse: --mode pp with another --pp", 2, "--mode pp --pp 3",
            "train: --mode pp runs a stage per rank, so --pp 3 needs 3 ranks, but 2 were started: run 'mpiexec -n 3', "
            "or drop --pp");
    refused("plan/refuse: --dp beside --mode pp", 2, "--mode pp --dp 2",
            "train: --mode pp is one replica (dp 1), and --dp 2 asks for 2");
    refused("plan/refuse: --pp beside --mode ddp", 2, "--mode ddp --pp 2",
            "train: --mode ddp is one stage (pp 1), and --pp 2 asks for 2");
    refused("plan/refuse: --pp beside --mode monolith", 1, "--mode monolith --pp 2",
            "train: --mode monolith is pp 1 x dp 1, and --pp asks for more");
    refused("plan/refuse: --dp beside --mode manual", 1, "--mode manual --dp 2",
            "train: --dp is a degree over ranks, and --mode manual runs its --pp parts in one process");
    refused("plan/refuse: --grad-accum in a pipeline", 2, "--mode pp --grad-accum 2",
            "train: --grad-accum applies to a run without a pipeline (--pp 1), and this run is pp 2 x dp 1 x tp 1: a "
            "pipeline already accumulates over --micro-batches");
    refused("plan/refuse: --bucket-mb 0", 2, "--mode ddp --bucket-mb 0", "--bucket-mb 0 must be positive");
    for (int z = 1; z <= 3; z++) {  // the checkpoints of sharded runs are the unsharded files
        char args[96], name[96];
        snprintf(args, sizeof args, "--mode ddp --zero %d --save ck --resume ck", z);
        snprintf(name, sizeof name, "plan: --zero %d saves and resumes", z);
        plan_ok(name, 2, args);
    }
    plan_ok("plan: --zero 3 with --tp (each rank shards its tensor-parallel part)", 4, "--mode ddp --dp 2 --tp 2 --zero 3");
    plan_ok("plan: --zero 2 with --tp, hybrid", 8, "--mode hybrid --pp 2 --dp 2 --tp 2 --zero 2");
    refused("plan/refuse: --zero 2 with naive sync", 2, "--mode ddp --zero 2 --ddp-sync naive",
            "--zero 2 reduce-scatters buckets while the backward runs, and --ddp-sync naive has none");
    Plan zs = plan_ok("plan: --zero 3 with --allreduce shm", 2, "--mode hybrid --pp 1 --dp 2 --zero 3 --allreduce shm");
    EXPECT("plan: --zero 3 keeps --allreduce shm (its working buckets are windows)", zs.data.algo == ALLREDUCE_SHM,
           "%d", zs.data.algo);
    refused("plan/refuse: naive sync with --bucket-mb", 2, "--mode ddp --ddp-sync naive --bucket-mb 4", "--bucket-mb applies to --ddp-sync bucketed");
}

static void test_grid(void) {
    refused("plan/refuse: ddp --dp against the world", 2, "--mode ddp --dp 3", "--dp 3 but 2 ranks were started");
    refused("plan/refuse: hybrid without --pp/--dp", 4, "--mode hybrid", "--mode hybrid needs --pp P (stages) and --dp D (replicas) with P x D = 4");
    refused("plan/refuse: hybrid P x D against the world", 4, "--mode hybrid --pp 2 --dp 3", "--pp 2 x --dp 3 = 6 ranks, but 4 were started: run 'mpiexec -n 6'");
    refused("plan/refuse: hybrid --pp not dividing", 4, "--mode hybrid --pp 3", "--pp 3 does not divide the 4 ranks");
    refused("plan/refuse: hybrid --dp not dividing", 4, "--mode hybrid --dp 3", "--dp 3 does not divide the 4 ranks");
    refused("plan/refuse: pp on 1 rank", 1, "--mode pp", "--mode pp needs at least 2 ranks (one per stage), got 1");
    refused(
        "plan/refuse: more stages than layers", 8, "--mode pp --layers 4",
        "train: 8 stages (--pp) but only 4 layers: every stage needs a layer, so use --layers >= 8 or a smaller --pp");
    refused("plan/refuse: more parts than layers", 1, "--mode manual --parts 5 --layers 4", "5 parts but only 4 layers");
}

static void test_schedule(void) {
    refused("plan/refuse: --max-inflight without zb-auto", 2, "--mode pp --schedule zb-h2 --max-inflight 4",
            "train: --max-inflight is zb-auto's memory limit, not zb-h2's: drop it or add --schedule zb-auto");
    refused("plan/refuse: --max-inflight outside a pipeline", 1, "--max-inflight 4",
            "train: --max-inflight applies to a pipeline (--pp > 1), and this run is pp 1 x dp 1 x tp 1: drop it or "
            "set --pp");
    Plan za = plan_ok("plan/zb-auto: one chunk, the loop, split backwards", 2, "--mode pp --schedule zb-auto --max-inflight 3");
    EXPECT("plan/zb-auto: one chunk, the loop, split backwards, tagged", za.V == 1 && za.chunk_order == CHUNKS_LOOP && za.split && za.schedule == SCHED_ZBAUTO,
           "V %d order %d split %d", za.V, za.chunk_order, za.split);
    refused("plan/refuse: --virtual-stages without interleaved", 2, "--mode pp --virtual-stages 2", "--virtual-stages applies to --schedule interleaved or looped-bfs, not 1f1b: drop it or add --schedule interleaved");
    refused("plan/refuse: interleaved with 1 chunk", 2, "--mode pp --schedule interleaved --virtual-stages 1", "needs --virtual-stages >= 2 (got 1;");
    Plan p = plan_ok("plan/interleaved M % K != 0 runs", 4, "--mode pp --schedule interleaved --micro-batches 6 --batch 48");
    EXPECT("plan/interleaved: M = 6 on 4 ranks, 2 chunks each, loop chunk order", p.M == 6 && p.V == 2 && p.chunk_order == CHUNKS_LOOP, "M %d V %d", p.M, p.V);
    plan_ok("plan/interleaved M < K runs", 4, "--mode pp --schedule interleaved --micro-batches 2");
    p = plan_ok("plan/looped-bfs M < K runs", 4, "--mode pp --schedule looped-bfs --virtual-stages 3 --micro-batches 2 --layers 12");
    EXPECT("plan/looped-bfs: --virtual-stages chunks per rank in the loop, full backwards", p.V == 3 && p.S == 12 && p.chunk_order == CHUNKS_LOOP &&
           !p.split && plan_vstage(&p, 1, 2) == 9, "V %d S %d order %d split %d", p.V, p.S, p.chunk_order, p.split);
    refused("plan/refuse: looped-bfs with 1 chunk", 2, "--mode pp --schedule looped-bfs --virtual-stages 1",
            "train: --schedule looped-bfs needs --virtual-stages >= 2 (got 1; with 1 chunk per rank it is gpipe: use --schedule gpipe)");
    p = plan_ok("plan/zb-v", 4, "--mode pp --schedule zb-v --micro-batches 8");
    int v_ok = p.V == 2 && p.S == 8 && p.chunk_order == CHUNKS_V;
    for (int s = 0; s < 4; s++)  // rank s holds vs s and 7-s; the helpers invert each other
        v_ok &= plan_vstage(&p, s, 0) == s && plan_vstage(&p, s, 1) == 7 - s && plan_stage_of(&p, s) == s && plan_stage_of(&p, 7 - s) == s &&
                plan_chunk_of(&p, s) == 0 && plan_chunk_of(&p, 7 - s) == 1;
    EXPECT("plan/zb-v: 2 chunks per rank in a V, rank 0 holds vs 0 and 7 (the head)", v_ok && plan_stage_of(&p, p.S - 1) == 0, "V %d S %d chunk order %d", p.V, p.S, p.chunk_order);
    p = plan_ok("plan/dualpipev M = 2K", 2, "--mode pp --schedule dualpipev --micro-batches 4");
    EXPECT("plan/dualpipev: V chunk order, 4 chunks on 2 ranks", p.chunk_order == CHUNKS_V && p.S == 4 && plan_vstage(&p, 1, 1) == 2, "chunk order %d S %d", p.chunk_order, p.S);
    refused("plan/refuse: dualpipev M < 2K", 4, "--mode pp --schedule dualpipev --micro-batches 4",
            "dualpipev needs --micro-batches >= 2 x 4 ranks = 8 (DualPipeV's own limit), got 4: use --micro-batches 8 or --schedule zb-v");
    refused("plan/refuse: zb-v more chunks than layers", 4, "--mode pp --schedule zb-v --micro-batches 8 --layers 6",
            "zb-v holds 2 chunks per rank: 4 ranks x 2 = 8 chunks but only 6 layers: use --layers >= 8 or fewer ranks");
    refused("plan/refuse: zb-v partition per stage", 2, "--mode pp --schedule zb-v --micro-batches 4 --partition 8,8",
            "has 2 entries but 2 ranks x 2 chunks make 4: give one layer count per chunk, in pipeline order (rank r holds chunks r and 3-r, a V)");
    refused("plan/refuse: --virtual-stages with zb-v", 2, "--mode pp --schedule zb-v --virtual-stages 2", "--virtual-stages applies to --schedule interleaved or looped-bfs, not zb-v");
    refused("plan/refuse: more chunks than any model's layers: no --layers advised past 4096", 4096, "--mode pp --schedule zb-v --layers 4096 --batch 4096 --micro-batches 4096",
            "train: 4096 ranks x 2 chunks = 8192 chunks, more than the 4096 layers a model can have (every chunk needs a layer): use fewer ranks");
    refused("plan/refuse: more chunks than layers", 4, "--mode pp --schedule interleaved --virtual-stages 4 --layers 8",
            "4 ranks x 4 virtual stages = 16 chunks but only 8 layers");
    // the simulator's limit (SCHEDULE_MAX_SIM = 4194304 passes): 2 x 1 x 1048576 runs, 8 x 2 x 262144 runs, one more is refused
    plan_ok("plan/2 stages x 1048576 micro-batches (2097152 passes) runs", 2, "--mode pp --micro-batches 1048576 --batch 1048576");
    plan_ok("plan/8 x 2 chunks x 262144 micro-batches: the simulator's limit runs", 8,
            "--mode pp --schedule interleaved --micro-batches 262144 --batch 262144");
    refused("plan/refuse: 8 x 2 chunks x 524288 micro-batches, over the simulator's limit", 8,
            "--mode pp --schedule interleaved --micro-batches 524288 --batch 524288",
            "train: 8 stages x 2 chunks x 524288 micro-batches = 8388608 passes to simulate, more than the 4194304 the simulator takes "
            "(it proves the schedule and sizes the stashes before the run): use --micro-batches 262144 or fewer");
    char err[1024];
    int rc = plan_args(2, 1000, "--mode pp --micro-batches 512 --batch 512", &p, err, sizeof err);
    EXPECT("plan/refuse: tags beyond MPI's limit", rc == -1 && strstr(err, "need message tags up to 2047 but this MPI allows 1000"), "%s", err);
}

static void test_batch_and_partition(void) {
    refused("plan/refuse: batch across replicas", 2, "--mode ddp --batch 31", "--batch 31 is not divisible by the 2 replicas: use --batch 30 or 32 (multiples of 2)");
    refused("plan/refuse: batch across replicas x micro-batches", 4, "--mode hybrid --pp 2 --dp 2 --batch 36",
            "--batch 36 is not divisible by 2 replicas x 4 micro-batches = 8: use --batch 32 or 40 (multiples of 8), or --micro-batches 1, 2, 3, 6, 9, 18");
    refused("plan/refuse: batch by micro-batches", 2, "--mode pp --micro-batches 5", "--batch 32 is not divisible by --micro-batches 5: use micro-batches that divide it (1, 2, 4, 8, 16, 32, ...)");
    refused("plan/refuse: partition not a list", 4, "--mode pp --partition 5,x", "--partition '5,x' is not a comma-separated list");
    refused("plan/refuse: partition entries", 4, "--mode pp --partition 8,4,4", "has 3 entries but there are 4 stages");
    refused("plan/refuse: partition entries per chunk", 4, "--mode pp --schedule interleaved --micro-batches 8 --partition 4,4,4,4",
            "4 ranks x 2 virtual stages make 8 chunks: give one layer count per chunk");
    refused("plan/refuse: partition with an empty stage", 4, "--mode pp --partition 8,0,4,4", "stage 1 gets 0 layers; every stage needs at least 1");
    refused("plan/refuse: partition sum", 4, "--mode pp --partition 5,4,4,2", "sums to 15 but --layers is 16");
}

static void test_observers(void) {
    refused("plan/refuse: --gantt with --json", 2, "--mode pp --gantt --json", "--gantt prints a chart and --json one JSON object");
    refused("plan/refuse: --timeline-step alone", 2, "--mode pp --timeline-step 2", "--timeline-step picks the step drawn by --timeline or --gantt");
    refused("plan/refuse: --timeline-step past the end", 2, "--mode pp --gantt --timeline-step 9 --steps 5", "--timeline-step 9 is past the last step: use 1..5");
    refused("plan/refuse: --warmup-steps longer than the run", 1, "--warmup-steps 100 --steps 10",
            "train: --warmup-steps 100 is longer than the run's 10 steps, so the learning rate would never reach --lr 0.001: use --warmup-steps 10 or fewer, or more --steps");
    plan_ok("plan/--warmup-steps as long as the run (the peak --lr at the last step)", 1, "--warmup-steps 10 --steps 10");
    char path[] = "/tmp/micropp-unit-plan-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (f) { fputs("{\"warmup_steps\": 200, \"steps\": 100}", f); fclose(f); }
    char args[128];
    snprintf(args, sizeof args, "--config %s", path);
    refused("plan/refuse: a config's warm-up longer than its own steps", 1, args, "--warmup-steps 200 is longer than the run's 100 steps");
    snprintf(args, sizeof args, "--config %s --steps 2", path);
    plan_ok("plan/a config's warm-up with the run cut short on the command line is taken (it ends in the warm-up, as asked)", 1, args);
    snprintf(args, sizeof args, "--config %s --steps 2 --warmup-steps 3", path);
    refused("plan/refuse: --warmup-steps typed longer than --steps typed, over a config", 1, args, "--warmup-steps 3 is longer than the run's 2 steps");
    unlink(path);
}

// With the facts f, args must be planned (the plan comes back) or refused with `want` in one line.
static Plan facts_ok(const char *name, const Facts *f, const char *args) {
    Plan p;
    char err[1024];
    int rc = plan_with(f, args, &p, err, sizeof err);
    EXPECT(name, rc == 0, "refused: %s", err);
    return p;
}
static void facts_refused(const char *name, const Facts *f, const char *args, const char *want) {
    Plan p;
    char err[1024];
    int rc = plan_with(f, args, &p, err, sizeof err);
    EXPECT(name, rc == -1 && strstr(err, want) && !strchr(err, '\n'), "rc %d, message '%s', expected '%s'", rc, err, want);
}

// --epochs: the steps of an epoch (whole steps; the rest of the shuffle dropped), once the data's
// rows are a fact, and its rules.
static void test_epochs(void) {
    Facts fm = {.world = 1, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 60000, .test_rows = 10000};
    Plan p = plan_ok("plan/epochs before the data's rows are known", 1, "--data fashion-mnist --epochs 3 --batch 128");
    EXPECT("plan/epochs: the steps wait for the data's rows", p.epochs == 3 && p.steps == 0, "epochs %d steps %lld", p.epochs, p.steps);
    p = facts_ok("plan/epochs", &fm, "--data fashion-mnist --epochs 3 --batch 128");
    EXPECT("plan/epochs: 60000 rows in steps of 128 = 468 steps an epoch, 96 rows dropped, 1404 steps",
           p.epochs == 3 && p.steps_per_epoch == 468 && p.dropped == 96 && p.epoch_rows == 59904 && p.steps == 1404,
           "epochs %d spe %lld dropped %lld steps %lld", p.epochs, p.steps_per_epoch, p.dropped, p.steps);
    Facts f45 = {.world = 1, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 45};
    p = facts_ok("plan/epochs with grad-accum", &f45, "--data x.npy --labels y.npy --epochs 1 --batch 10 --grad-accum 2");
    EXPECT("plan/epochs: a step of grad-accum 2 x 10 rows: 2 steps of 45 rows, 5 dropped", p.steps_per_epoch == 2 && p.dropped == 5 && p.steps == 2,
           "spe %lld dropped %lld", p.steps_per_epoch, p.dropped);
    Facts f15 = {.world = 1, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 15};
    facts_refused("plan/refuse: an epoch shorter than a step", &f15, "--data x.npy --epochs 1 --batch 10 --grad-accum 2",
                  "train: an epoch of 15 training rows holds no whole step of 20 rows (--batch 10 x --grad-accum): use a smaller --batch");
    facts_refused("plan/refuse: --warmup-steps longer than the epochs' steps (known once the data is read)", &fm,
                  "--data fashion-mnist --epochs 3 --batch 128 --warmup-steps 1405",
                  "--warmup-steps 1405 is longer than the run's 1404 steps (3 epochs of 468), so the learning rate would never reach --lr 0.001: "
                  "use --warmup-steps 1404 or fewer, or more --epochs");
    facts_ok("plan/epochs: a warm-up as long as the run is taken", &fm, "--data fashion-mnist --epochs 3 --batch 128 --warmup-steps 1404");
    Facts f2 = {.world = 2, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 60000};
    facts_refused("plan/refuse: --timeline-step past the epochs' last step", &f2, "--mode pp --data fashion-mnist --epochs 1 --batch 30000 --gantt --timeline-step 3",
                  "train: --timeline-step 3 is past the last step: use 1..2, or 0 for the median-time step");
    p = plan_ok("plan/steps on the command line win over a config's epochs", 1, "--data x.npy --steps 7");
    EXPECT("plan/no epochs without --epochs; steps = --steps", p.epochs == 0 && p.steps == 7, "epochs %d steps %lld", p.epochs, p.steps);
    refused("plan/refuse: --epochs and --steps", 1, "--data x.npy --epochs 2 --steps 5", "--epochs 2 and --steps 5 both set the run's length");
    refused("plan/refuse: --epochs on synthetic data", 1, "--epochs 2", "--epochs passes over a data set, and --data is synthetic");
    refused("plan/refuse: --save-best without --save", 1, "--data x.npy --epochs 2 --save-best", "--save-best keeps the best checkpoint in --save DIR");
    refused("plan/refuse: --save-best without --epochs", 1, "--data x.npy --save /tmp/x --save-best", "--save-best evaluates after every epoch");
    refused("plan/refuse: --save-best with --save-every", 1, "--data x.npy --epochs 2 --save /tmp/x --save-best --save-every 5",
            "--save-best keeps only the best epoch's checkpoint");
    refused("plan/refuse: --fresh-state without --resume", 2, "--mode ddp --compress sign --fresh-state",
            "--fresh-state starts the state of --compress or --sync-every afresh on --resume");
    refused("plan/refuse: --fresh-state without a method", 2, "--mode ddp --resume ck --fresh-state",
            "add --resume DIR and one of them, or drop --fresh-state");
    plan_ok("plan/--fresh-state with --resume and --sync-every", 2, "--mode ddp --sync-every 2 --resume ck --fresh-state");
}

// The rows the accuracy is measured on, from the data's rows: a test split whole unless
// --eval-samples is set, else --eval-samples of the training rows or of synthetic samples.
static void test_eval_rows(void) {
    Facts test = {.world = 1, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 60000, .test_rows = 10000};
    Facts train = {.world = 1, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 700};
    Facts synthetic = {.world = 1, .tag_ub = TAG_UB, .data_known = 1};
    Plan p = facts_ok("plan/eval: a test split", &test, "--data fashion-mnist");
    EXPECT("plan/eval: a test split is evaluated whole", p.eval_rows == 10000, "%lld", p.eval_rows);
    p = facts_ok("plan/eval: a test split and --eval-samples", &test, "--data fashion-mnist --eval-samples 500");
    EXPECT("plan/eval: --eval-samples cuts a test split", p.eval_rows == 500, "%lld", p.eval_rows);
    p = facts_ok("plan/eval: training rows", &train, "--data x.npy --labels y.npy");
    EXPECT("plan/eval: no test split: --eval-samples (1024) of the 700 training rows, at most all", p.eval_rows == 700, "%lld", p.eval_rows);
    p = facts_ok("plan/eval: synthetic", &synthetic, "--eval-samples 300");
    EXPECT("plan/eval: synthetic: --eval-samples", p.eval_rows == 300, "%lld", p.eval_rows);
    p = plan_ok("plan/eval: before the data", 1, "");
    EXPECT("plan/eval: 0 until the data's rows are known", p.eval_rows == 0, "%lld", p.eval_rows);
}

// The training stream: a step reads N micro-steps of B = rows x M x D samples; replica d takes
// [d B/D, (d+1) B/D) of each, micro-batch mb rows mb x rows of that; synthetic data cycles through
// --samples (default one step's B x N), a data set does not (data.c maps the stream itself).
static void test_stream(void) {
    Facts synthetic = {.world = 2, .tag_ub = TAG_UB, .data_known = 1};
    Plan p = facts_ok("plan/stream: ddp with grad-accum", &synthetic, "--mode ddp --grad-accum 4 --batch 32");
    uint64_t at = plan_step_sample(&p, 0, 0, 3);
    EXPECT("plan/stream: step 3 of 4 micro-steps of 32 starts at 384; micro-step 2 of replica 1 at 64 + 16, cycled at 128",
           p.synthetic_samples == 128 && at == 384 && plan_sample(&p, at, 2, 1, 0) == 80, "cycle %lld at %llu sample %llu",
           p.synthetic_samples, (unsigned long long)at, (unsigned long long)plan_sample(&p, at, 2, 1, 0));
    Facts set = {.world = 2, .tag_ub = TAG_UB, .data_known = 1, .train_rows = 1000};
    p = facts_ok("plan/stream: a data set", &set, "--mode ddp --grad-accum 4 --batch 32 --data x.npy --labels y.npy");
    EXPECT("plan/stream: a data set's stream does not cycle", p.synthetic_samples == 0 && plan_sample(&p, 5000, 1, 1, 0) == 5048,
           "cycle %lld sample %llu", p.synthetic_samples, (unsigned long long)plan_sample(&p, 5000, 1, 1, 0));
    Facts four = {.world = 4, .tag_ub = TAG_UB, .data_known = 1};
    p = facts_ok("plan/stream: hybrid, resumed", &four, "--mode hybrid --pp 2 --dp 2 --batch 32 --micro-batches 4 --samples 50");
    at = plan_step_sample(&p, 100, 5, 7);  // resumed at step 5 from sample 100: step 7 is two steps of 32 on
    EXPECT("plan/stream: hybrid: replica 1's micro-batch 3 of step 7 starts at 164 + 16 + 12, cycled at --samples 50",
           p.rows == 4 && at == 164 && plan_sample(&p, at, 0, 1, 3) == 42 && plan_sample(&p, 0, 0, 1, 3) == 28,
           "rows %d at %llu sample %llu", p.rows, (unsigned long long)at, (unsigned long long)plan_sample(&p, at, 0, 1, 3));
}

// The devices' facts (comm_choose_hardware): every rank with a GPU on its own, or not.
static Hardware gpus(int world, int crowded) {
    static int node_of[8];
    static double shm[8];
    for (int r = 0; r < 8; r++) { node_of[r] = 0; shm[r] = -1; }
    return (Hardware){.gpus_probed = 1, .no_gpu_rank = -1, .crowded = crowded, .crowded_ranks = crowded ? world : 0, .crowded_gpus = crowded ? 1 : 0,
                       .local_size = world, .nodes = 1, .node_of = node_of, .shm_free = shm};
}

// Device and transport from what the ranks found; the schedules that need tags take MPI.
static void test_devices(void) {
    Hardware g = gpus(2, 0), crowded = gpus(2, 1), none = gpus(2, 0);
    none.no_gpu_rank = 1;
    snprintf(none.no_gpu_why, sizeof none.no_gpu_why, "no driver");
    Facts fg = {.world = 2, .tag_ub = TAG_UB, .devices = &g}, fc = {.world = 2, .tag_ub = TAG_UB, .devices = &crowded},
          fn = {.world = 2, .tag_ub = TAG_UB, .devices = &none};
    Plan p = facts_ok("plan/devices: GPUs", &fg, "--mode pp");
    EXPECT("plan/devices: a GPU on every rank, one each: auto takes cuda over mpi until NCCL has run on such a machine, and says so",
           p.device == DEVICE_CUDA && p.transport == TRANSPORT_MPI && p.transport_why == PLAN_NCCL_UNPROVEN &&
           !strcmp(p.transport_why, "--transport auto takes mpi: the NCCL transport has not yet run on a machine with two GPUs or more "
                                    "(docs/gpus.md); --transport nccl asks for it"),
           "device %d transport %d why '%s'", p.device, p.transport, p.transport_why);
    p = facts_ok("plan/devices: GPUs, --transport nccl", &fg, "--mode pp --transport nccl");
    EXPECT("plan/devices: --transport nccl stays available", p.device == DEVICE_CUDA && p.transport == TRANSPORT_NCCL && !p.transport_why[0],
           "device %d transport %d why '%s'", p.device, p.transport, p.transport_why);
    p = facts_ok("plan/devices: zb-h1 on GPUs", &fg, "--mode pp --schedule zb-h1");
    EXPECT("plan/devices: zb-h1's messages need tags: the plan takes mpi, and says why", p.device == DEVICE_CUDA && p.transport == TRANSPORT_MPI &&
           strstr(p.transport_why, "tags"), "transport %d why '%s'", p.transport, p.transport_why);
    p = facts_ok("plan/devices: interleaved on GPUs", &fg, "--mode pp --schedule interleaved --micro-batches 4");
    EXPECT("plan/devices: interleaved takes mpi", p.transport == TRANSPORT_MPI, "transport %d", p.transport);
    facts_refused("plan/refuse: a tagged schedule over --transport nccl", &fg, "--mode pp --schedule zb-h1 --transport nccl",
                  "train: --schedule zb-h1 runs over --transport mpi only (NCCL matches messages in order, without tags): drop --transport nccl");
    p = facts_ok("plan/devices: two ranks on one GPU", &fc, "--mode pp");
    EXPECT("plan/devices: a crowded node: cuda over mpi (NCCL could not run: nothing to say)",
           p.device == DEVICE_CUDA && p.transport == TRANSPORT_MPI && !p.transport_why[0], "transport %d why '%s'", p.transport, p.transport_why);
    Hardware g4 = gpus(4, 0);
    Facts f4 = {.world = 4, .tag_ub = TAG_UB, .devices = &g4};
    p = facts_ok("plan/devices: --ep over --transport nccl", &f4, "--pp 2 --dp 2 --experts 4 --ep 2 --transport nccl");
    EXPECT("plan/devices: --ep over --transport nccl takes the all-to-all over NCCL too (no silent MPI fall-back)",
           p.device == DEVICE_CUDA && p.transport == TRANSPORT_NCCL && p.expert.N == 2 && p.expert.nccl,
           "device %d transport %d N %d nccl %d", p.device, p.transport, p.expert.N, p.expert.nccl);
    p = facts_ok("plan/devices: --ep over --transport nccl, --alltoall mpi", &f4,
                 "--pp 2 --dp 2 --experts 4 --ep 2 --transport nccl --alltoall mpi");
    EXPECT("plan/devices: --alltoall mpi keeps the all-to-all on MPI under --transport nccl",
           p.transport == TRANSPORT_NCCL && p.expert.N == 2 && !p.expert.nccl && p.expert.algo == ALLTOALL_MPI,
           "transport %d N %d nccl %d algo %d", p.transport, p.expert.N, p.expert.nccl, p.expert.algo);
    // ... and its device buffers, both ways, counted with the MoE layers' (expert_sizes; comms/alltoall.c's cap:
    // rows x k x H x N floats each, per lane): the two plans' reckonings differ by them alone
    TrainConfig c;
    train_config_defaults(&c);
    c.moe.experts = 4, c.moe.top_k = 2;
    MemNeed over_nccl = {0}, over_mpi = {0};
    Plan pn = facts_ok("plan/devices: --ep over nccl's plan", &f4, "--pp 2 --dp 2 --experts 4 --ep 2 --transport nccl");
    expert_sizes(&c, &pn, 0, 2, &over_nccl);
    expert_sizes(&c, &p, 0, 2, &over_mpi);
    double cap = (double)pn.rows * 2 * (double)c.hidden * 2;
    EXPECT("memory/--ep over nccl: 2 device buffers of rows x k x H x N floats beside the MoE layers' own",
           over_mpi.buffers > 0 && over_nccl.buffers - over_mpi.buffers == 2 * cap * sizeof(float),
           "nccl %.0f mpi %.0f cap %.0f", over_nccl.buffers, over_mpi.buffers, cap);
    p = facts_ok("plan/devices: --ep on GPUs over --transport auto", &f4, "--pp 2 --dp 2 --experts 4 --ep 2");
    EXPECT("plan/devices: --ep on GPUs takes mpi (the all-to-all staged through the host)",
           p.device == DEVICE_CUDA && p.transport == TRANSPORT_MPI && p.expert.N == 2 && !p.expert.nccl,
           "device %d transport %d N %d nccl %d", p.device, p.transport, p.expert.N, p.expert.nccl);
    facts_refused("plan/refuse: --transport nccl on a crowded node", &fc, "--mode pp --transport nccl",
                  "train: --transport nccl needs one GPU per rank, but a node runs 2 ranks on 1 GPU: use --transport mpi");
    p = facts_ok("plan/devices: a rank without a GPU", &fn, "--mode pp");
    EXPECT("plan/devices: auto falls back to the cpu", p.device == DEVICE_CPU && p.transport == TRANSPORT_MPI, "device %d", p.device);
    facts_refused("plan/refuse: --device cuda without a GPU", &fn, "--mode pp --device cuda", "no CUDA device (rank 1): no driver");
    facts_refused("plan/refuse: --transport nccl without a GPU", &fn, "--mode pp --transport nccl",
                  "train: --transport nccl needs a GPU on every rank, but there is no CUDA device (rank 1): no driver");
    facts_refused("plan/refuse: --tf32 without a GPU", &fn, "--mode pp --tf32", "train: --tf32 needs a GPU, but there is no CUDA device (rank 1)");
    refused("plan/refuse: --device cpu --transport nccl (the options alone)", 2, "--mode pp --device cpu --transport nccl",
            "train: --transport nccl moves GPU buffers, and --device is cpu: drop --transport nccl or use --device cuda");
    refused("plan/refuse: --device cpu --tf32", 1, "--device cpu --tf32", "train: --tf32 applies to cuBLAS on a GPU, and --device is cpu");
    p = plan_ok("plan/devices: not known yet", 2, "--mode pp --schedule zb-h1");
    EXPECT("plan/devices: before the facts, the cpu and mpi (nothing refused)", p.device == DEVICE_CPU && p.transport == TRANSPORT_MPI, "device %d", p.device);
    Facts ft = {.world = 1, .tag_ub = TAG_UB, .blas_max_threads = 4};
    facts_refused("plan/refuse: --threads above BLAS's", &ft, "--threads 8",
                  "train: --threads 8 is more than the 4 this OpenBLAS was built for: use --threads 4 or fewer");
    facts_ok("plan/--threads at BLAS's most", &ft, "--threads 4");
}

// Which ranks share a GPU, by the GPU's UUID key (comm_gpu_sharing): a per-rank CUDA_VISIBLE_DEVICES
// (each rank sees one device, a different one) is not crowded; two ranks on one GPU are, per node.
static void test_gpu_sharing(void) {
    int node_of[4] = {0, 0, 1, 1};
    uint64_t own[4] = {11, 22, 11, 22}, shared[4] = {11, 11, 33, 44};
    Hardware h = {0};
    comm_gpu_sharing(4, 0, node_of, own, &h);
    EXPECT("hardware/gpus: one GPU per rank (per-rank CUDA_VISIBLE_DEVICES; UUIDs alike across nodes): not crowded",
           !h.crowded && h.gpu_ranks == 1, "crowded %d gpu_ranks %d", h.crowded, h.gpu_ranks);
    comm_gpu_sharing(4, 1, node_of, shared, &h);
    EXPECT("hardware/gpus: two ranks on node 0's one GPU: crowded, 2 ranks on 1 GPU, each rank's GPU serves 2",
           h.crowded && h.crowded_ranks == 2 && h.crowded_gpus == 1 && h.gpu_ranks == 2, "crowded %d %d/%d gpu_ranks %d",
           h.crowded, h.crowded_ranks, h.crowded_gpus, h.gpu_ranks);
    comm_gpu_sharing(4, 3, node_of, shared, &h);
    EXPECT("hardware/gpus: a rank with its own GPU on a node beside a crowded one", h.crowded && h.gpu_ranks == 1,
           "crowded %d gpu_ranks %d", h.crowded, h.gpu_ranks);
}

// What a GPU holds beyond the model's buffers (memory_check adds it on cuda): cuBLAS's workspace always,
// the NCCL transport's staging copies (a rows x H message per micro-batch), bf16's two packed operands.
static void test_device_memory(void) {
    TrainConfig c;
    train_config_defaults(&c);
    c.hidden = 1000;
    c.classes = 10;
    Plan p = {.pipelined = 1, .transport = TRANSPORT_MPI, .M = 8, .rows = 4, .inputs = 1000};
    double mpi = memory_device_extra(&c, &p);
    p.transport = TRANSPORT_NCCL;
    double nccl = memory_device_extra(&c, &p);
    c.precision = PRECISION_BF16;
    double bf16 = memory_device_extra(&c, &p);
    EXPECT("memory/gpu: cuBLAS's workspace; NCCL adds M x rows x H floats of staging; bf16 two packed operands",
           mpi == MEMORY_CUBLAS_WORKSPACE && nccl - mpi == 8.0 * 4 * 1000 * 4 && bf16 - nccl == 2.0 * 2 * 1000 * 1000,
           "mpi %.0f nccl %.0f bf16 %.0f", mpi, nccl, bf16);
}

// Data parallelism's all-reduce: shm where every stage's replicas share a node and /dev/shm holds
// the windows (auto takes it on the cpu, else mpi), from every rank's facts.
static void test_allreduce(void) {
    static int one_node[4] = {0, 0, 0, 0}, two_nodes[4] = {0, 0, 1, 1};
    static double unknown[4] = {-1, -1, -1, -1}, small[4] = {1e6, 1e6, 1e6, 1e6};
    Hardware cpu1 = {.no_gpu_rank = -1, .nodes = 1, .node_of = one_node, .shm_free = unknown};
    Hardware cpu2 = {.no_gpu_rank = -1, .nodes = 2, .node_of = two_nodes, .shm_free = unknown};
    Hardware tight = {.no_gpu_rank = -1, .nodes = 1, .node_of = one_node, .shm_free = small};
    Hardware g = gpus(2, 0);
    Facts f1 = {.world = 2, .tag_ub = TAG_UB, .devices = &cpu1}, f2 = {.world = 4, .tag_ub = TAG_UB, .devices = &cpu2},
          ft = {.world = 2, .tag_ub = TAG_UB, .devices = &tight}, fg = {.world = 2, .tag_ub = TAG_UB, .devices = &g};
    Plan p = facts_ok("plan/allreduce auto, one node", &f1, "--mode ddp");
    EXPECT("plan/allreduce: auto on one node of cpus is shm", p.data.algo == ALLREDUCE_SHM, "%d", p.data.algo);
    p = facts_ok("plan/allreduce auto, replicas on two nodes", &f2, "--mode ddp");
    EXPECT("plan/allreduce: auto with 2 replicas on each of two nodes is hier", p.data.algo == ALLREDUCE_HIER, "%d",
           p.data.algo);
    p = facts_ok("plan/allreduce auto, hybrid, one replica of a stage per node", &f2,
                 "--mode hybrid --pp 2 --dp 2 --placement stages");
    EXPECT("plan/allreduce: auto with one replica of a stage per node is mpi (hier would be a plain ring)",
           p.data.algo == ALLREDUCE_MPI, "%d", p.data.algo);
    p = facts_ok("plan/allreduce hier, hybrid, one replica of a stage per node", &f2,
                 "--mode hybrid --pp 2 --dp 2 --placement stages --allreduce hier");
    EXPECT("plan/allreduce: --allreduce hier with one replica of a stage per node runs", p.data.algo == ALLREDUCE_HIER,
           "%d", p.data.algo);
    facts_refused("plan/refuse: --allreduce hier on one node", &f1, "--mode ddp --allreduce hier",
                  "train: --allreduce hier needs the replicas on 2 or more nodes, and the 2 of rank 0's stage share one: "
                  "use --allreduce shm or auto");
    static int uneven[4] = {0, 0, 0, 1}, interleaved[4] = {0, 1, 0, 1};
    Hardware cpu_uneven = cpu2, cpu_interleaved = cpu2;
    cpu_uneven.node_of = uneven;
    cpu_interleaved.node_of = interleaved;
    Facts fu = f2, fi = f2;
    fu.devices = &cpu_uneven;
    fi.devices = &cpu_interleaved;
    facts_refused("plan/refuse: --allreduce hier on nodes of 3 and 1", &fu, "--mode ddp --allreduce hier",
                  "train: --allreduce hier needs the 4 replicas of each stage in equal runs, node after node, and rank "
                  "0's are not: use --allreduce ring or mpi");
    facts_refused("plan/refuse: --allreduce hier on interleaved nodes", &fi, "--mode ddp --allreduce hier",
                  "train: --allreduce hier needs the 4 replicas of each stage in equal runs");
    p = facts_ok("plan/allreduce auto, interleaved nodes", &fi, "--mode ddp");
    EXPECT("plan/allreduce: auto on interleaved nodes is mpi", p.data.algo == ALLREDUCE_MPI, "%d", p.data.algo);
    p = facts_ok("plan/allreduce auto, hybrid, each stage's replicas on one node", &f2, "--mode hybrid --pp 2 --dp 2 --placement replicas");
    EXPECT("plan/allreduce: auto, hybrid with each stage's replicas on a node: shm", p.data.algo == ALLREDUCE_SHM, "%d",
           p.data.algo);
    p = facts_ok("plan/allreduce auto, /dev/shm too small", &ft, "--mode ddp");
    EXPECT("plan/allreduce: auto with /dev/shm too small is mpi", p.data.algo == ALLREDUCE_MPI, "%d", p.data.algo);
    p = facts_ok("plan/allreduce auto, GPUs", &fg, "--mode ddp");
    EXPECT("plan/allreduce: auto with the gradients on GPUs is mpi", p.data.algo == ALLREDUCE_MPI, "%d", p.data.algo);
    facts_refused("plan/refuse: --allreduce shm with the gradients on a GPU", &fg, "--mode ddp --allreduce shm",
                  "train: --allreduce shm sums host memory, and the gradients live on the GPU: use --allreduce mpi or ring with --device cuda");
    facts_refused("plan/refuse: --allreduce shm across nodes", &f2, "--mode ddp --allreduce shm",
                  "train: --allreduce shm needs the 4 replicas of each stage on one node, and only 2 share this rank's: use --allreduce mpi or ring");
    facts_refused("plan/refuse: --allreduce shm, /dev/shm too small", &ft, "--mode ddp --allreduce shm",
                  "train: --allreduce shm needs 4.23 MB of /dev/shm for the 2 ranks of this node, and 1 MB are free");
    p = facts_ok("plan/allreduce auto, --zero 3", &f1, "--mode ddp --zero 3");
    EXPECT("plan/allreduce: auto with ZeRO-3 is shm (its working buckets in windows)", p.data.algo == ALLREDUCE_SHM,
           "%d", p.data.algo);
    p = facts_ok("plan/allreduce auto, --zero 2", &f1, "--mode ddp --zero 2");
    EXPECT("plan/allreduce: auto with ZeRO-2 is shm", p.data.algo == ALLREDUCE_SHM, "%d", p.data.algo);
    // /dev/shm's room counts ZeRO's windows, per rank (16 layers of 128, 16 buckets of a layer, 16512 floats):
    // ddp's params + grads 2.1 MB, ZeRO-2's params + 2 buckets 1.19 MB, ZeRO-3's 2 + 2 buckets 0.26 MB; 1 MB for 2
    p = facts_ok("plan/allreduce auto, --zero 2, /dev/shm small", &ft, "--mode ddp --zero 2 --bucket-mb 0.004");
    EXPECT("plan/allreduce: ZeRO-2's params and buckets do not fit 1 MB: mpi", p.data.algo == ALLREDUCE_MPI, "%d",
           p.data.algo);
    p = facts_ok("plan/allreduce auto, --zero 3, /dev/shm small", &ft, "--mode ddp --zero 3 --bucket-mb 0.004");
    EXPECT("plan/allreduce: ZeRO-3's working buckets fit 1 MB: shm", p.data.algo == ALLREDUCE_SHM, "%d", p.data.algo);
    facts_refused("plan/refuse: --zero 2 --allreduce shm, /dev/shm too small for its windows", &ft,
                  "--mode ddp --zero 2 --bucket-mb 0.004 --allreduce shm",
                  "train: --allreduce shm needs 2.38 MB of /dev/shm for the 2 ranks of this node, and 1 MB are free");
    p = facts_ok("plan/allreduce auto, --zero 1", &f1, "--mode ddp --zero 1");
    EXPECT("plan/allreduce: auto with ZeRO-1 stays shm", p.data.algo == ALLREDUCE_SHM, "%d", p.data.algo);
    p = plan_ok("plan/allreduce: before the facts", 2, "--mode ddp --allreduce shm");
    EXPECT("plan/allreduce: shm as asked until the facts are known", p.data.algo == ALLREDUCE_SHM, "%d", p.data.algo);
}

// --timeline-step of a resumed run, from the checkpoint's step (a fact read before the plan).
static void test_resumed(void) {
    Facts f = {.world = 2, .tag_ub = TAG_UB, .resume_step = 5}, past = {.world = 2, .tag_ub = TAG_UB, .resume_step = 12};
    facts_refused("plan/refuse: --timeline-step before the resumed step", &f, "--mode pp --gantt --timeline-step 3 --steps 10 --resume ck",
                  "train: --timeline-step 3 was done before the checkpoint (step 5): use 6..10, or 0 for the median-time step");
    facts_refused("plan/refuse: --timeline-step at the resumed step", &f, "--mode pp --gantt --timeline-step 5 --steps 10 --resume ck",
                  "--timeline-step 5 was done before the checkpoint (step 5)");
    facts_ok("plan/--timeline-step after the resumed step", &f, "--mode pp --gantt --timeline-step 6 --steps 10 --resume ck");
    facts_ok("plan/a checkpoint past the run's steps is left to ckpt_resume", &past, "--mode pp --gantt --timeline-step 3 --steps 10 --resume ck");
    plan_ok("plan/--timeline-step before the resumed step is unknown without the fact", 2, "--mode pp --gantt --timeline-step 3 --steps 10 --resume ck");
}

// The rules of the options alone that setup used to hold: checkpoints, outputs, the timeout, the width.
static void test_run_rules(void) {
    refused("plan/refuse: --save-every without --save", 1, "--save-every 5", "train: --save-every 5 needs --save DIR (where to write the checkpoints)");
    refused("plan/refuse: --resume with --verify", 1, "--resume ck --verify",
            "train: --verify compares step 1 from the initial weights, so it cannot be combined with --resume: drop one");
    refused("plan/refuse: --trace - in a pipeline", 2, "--mode pp --trace -",
            "train: --trace - would mix the file into the summary train prints on standard output: give a file name");
    refused("plan/refuse: --timeline -", 2, "--mode pp --timeline -", "train: --timeline - would mix the file");
    refused("plan/refuse: --metrics - without --json", 1, "--metrics -",
            "train: --metrics - would mix its JSON lines into the text train prints on standard output: add --json");
    plan_ok("plan/--metrics - with --json: the lines, then the summary", 2, "--mode pp --metrics - --json");
    plan_ok("plan/--metrics FILE in every mode", 2, "--mode ddp --metrics m.jsonl");
    refused("plan/refuse: --live on with --json", 1, "--live on --json",
            "train: --live on rewrites a line of text and --json prints one JSON object: drop one");
    plan_ok("plan/--live off with --json", 1, "--live off --json");
    refused("plan/refuse: --timeout below the minimum", 1, "--timeout 0.5", "train: --timeout 0.5 is below the 1 s minimum");
    Plan p = plan_ok("plan/--inputs 0", 1, "--hidden 64");
    EXPECT("plan/--inputs 0 is --hidden", p.inputs == 64, "%d", p.inputs);
    p = plan_ok("plan/--inputs 784", 1, "--inputs 784");
    EXPECT("plan/--inputs given", p.inputs == 784 && !p.grad_accum_given, "%d", p.inputs);
    p = plan_ok("plan/--grad-accum 1 given", 1, "--grad-accum 1");
    EXPECT("plan/--grad-accum given (the report shows it even at 1)", p.grad_accum_given, "%d", p.grad_accum_given);
}

// --schedule-file: the file read and proven is a fact, and fixes ranks, micro-batches and chunks.
static void test_schedule_file(void) {
    char path[] = "/tmp/micropp-unit-plan-sched-XXXXXX", err[512], *text = NULL;
    int fd = mkstemp(path);
    FILE *out = fd < 0 ? NULL : fdopen(fd, "w");
    if (out) { schedule_file_write(out, SCHED_ZBV, NULL, 2, 4, 2); fclose(out); }
    SchedFile file = {0};
    int rc = schedule_file_read(path, &text, err, sizeof err) || schedule_file_parse(text, path, &file, err, sizeof err);
    EXPECT("plan/schedule file: zb-v's written and read back", rc == 0 && file.K == 2 && file.M == 4 && file.v == 2 && file.chunk_order == CHUNKS_V, "%s", err);
    free(text);
    unlink(path);
    if (rc) return;
    Facts f = {.world = 2, .tag_ub = TAG_UB, .schedule_file = &file}, f3 = {.world = 3, .tag_ub = TAG_UB, .schedule_file = &file};
    char args[160];
    snprintf(args, sizeof args, "--mode pp --schedule-file %s", path);
    Plan p = facts_ok("plan/schedule file", &f, args);
    EXPECT("plan/schedule file: kind file, its micro-batches, chunks in a V, split backward", p.schedule == SCHED_FILE && p.file == &file &&
           p.M == 4 && p.V == 2 && p.chunk_order == CHUNKS_V && p.split, "schedule %d M %d V %d", p.schedule, p.M, p.V);
    facts_refused("plan/refuse: a schedule file's rows against the ranks", &f3, args, "has 2 rows (one per rank) but the pipeline has 3 stages");
    snprintf(args, sizeof args, "--mode pp --schedule-file %s --micro-batches 8", path);
    facts_refused("plan/refuse: --micro-batches against the file's", &f, args, "--micro-batches 8 but --schedule-file");
    sched_file_free(&file);
}

// The learning rate schedule (model.c's lr_at): warm-up, constant, cosine to 0 at the last step.
static void test_lr_schedule(void) {
    EXPECT("lr/cosine ends at --min-lr, starts at --lr, halfway between at the middle",
           fabs(lr_at(LR_COSINE, 0.1, 0.01, 0, 10, 11) - 0.01) < 1e-15 && lr_at(LR_COSINE, 0.1, 0.01, 0, 0, 11) == 0.1 &&
               fabs(lr_at(LR_COSINE, 0.1, 0.01, 0, 5, 11) - 0.055) < 1e-12,
           "%g %g %g", lr_at(LR_COSINE, 0.1, 0.01, 0, 10, 11), lr_at(LR_COSINE, 0.1, 0.01, 0, 0, 11),
           lr_at(LR_COSINE, 0.1, 0.01, 0, 5, 11));
    EXPECT("lr/constant", lr_at(LR_CONSTANT, 0.1, 0, 0, 5, 10) == 0.1, "%g", lr_at(LR_CONSTANT, 0.1, 0, 0, 5, 10));
    EXPECT("lr/warm-up is linear from lr/warmup", fabs(lr_at(LR_CONSTANT, 0.1, 0, 4, 0, 10) - 0.025) < 1e-15 && fabs(lr_at(LR_COSINE, 0.1, 0, 4, 3, 10) - 0.1) < 1e-15,
           "%g %g", lr_at(LR_CONSTANT, 0.1, 0, 4, 0, 10), lr_at(LR_COSINE, 0.1, 0, 4, 3, 10));
    EXPECT("lr/cosine: lr after warm-up, half way lr/2, 0 at the last step",
           fabs(lr_at(LR_COSINE, 0.1, 0, 0, 0, 11) - 0.1) < 1e-15 && fabs(lr_at(LR_COSINE, 0.1, 0, 0, 5, 11) - 0.05) < 1e-12 && fabs(lr_at(LR_COSINE, 0.1, 0, 0, 10, 11)) < 1e-12,
           "%g %g %g", lr_at(LR_COSINE, 0.1, 0, 0, 0, 11), lr_at(LR_COSINE, 0.1, 0, 0, 5, 11), lr_at(LR_COSINE, 0.1, 0, 0, 10, 11));
}

// plan_layout (micropp plan): any K x D without a world or typed flags, by plan_make's rules.
static void test_layout(void) {
    TrainConfig c;
    Plan p;
    char err[1024];
    train_config_defaults(&c);
    c.pipe.micro_batches = 4;
    EXPECT("plan/layout: 4 stages x 2 replicas is a hybrid of 4-row micro-batches, even split",
           plan_layout(&c, &(Degrees){.pp = 4, .dp = 2, .tp = 1}, &p, err, sizeof err) == 0 && p.mode == MODE_HYBRID &&
               p.K == 4 && p.D == 2 && p.rows == 4 && p.lo[1] == 4,
           "%s mode %d rows %d", err, p.mode, p.rows);
    EXPECT("plan/layout: K = 1 is no pipeline (the whole batch, one micro-batch)",
           plan_layout(&c, &(Degrees){.pp = 1, .dp = 1, .tp = 1}, &p, err, sizeof err) == 0 && !p.pipelined &&
               p.M == 1 && p.rows == 32,
           "%s", err);
    c.pipe.schedule = SCHED_INTERLEAVED;
    EXPECT("plan/layout: interleaved takes --virtual-stages chunks",
           plan_layout(&c, &(Degrees){.pp = 4, .dp = 1, .tp = 1}, &p, err, sizeof err) == 0 && p.V == 2 && p.S == 8,
           "%s", err);
    EXPECT("plan/layout: 32 stages of 16 layers is refused in one line",
           plan_layout(&c, &(Degrees){.pp = 32, .dp = 1, .tp = 1}, &p, err, sizeof err) == -1 &&
               strstr(err, "only 16 layers") && !strchr(err, '\n'),
           "'%s'", err);
}

// --placement: the grid on ranks, and auto's choice from the traffic of a step (the same on every
// rank: a pure function of the options and the world).
static void test_placement(void) {
    // dp-heavy: the defaults (16 x 128 wide, 264450 parameters) with rows of 4: the all-reduce
    // moves 2 x (2-1) x 264450 x 4 bytes, the pipeline 2 directions x 1 boundary x 4 micro-batches x
    // 2 replicas x 4 rows x 128 x 4 bytes.
    Plan p = plan_ok("plan/placement dp-heavy", 4, "--mode hybrid --pp 2 --dp 2");
    EXPECT("plan/placement: auto, dp-heavy -> replicas (a stage's replicas on adjacent ranks)",
           p.placement == PLACEMENT_REPLICAS && p.placement_auto && p.pp_bytes == 32768 && p.dp_bytes == 2115600, "placement %d pp %g dp %g",
           p.placement, p.pp_bytes, p.dp_bytes);
    // --ep 2 over dp 4 with 4 experts on layers 1-15 (each 4 x (128 x 128 + 128) floats: 990720 of the model's
    // 1015230): the experts all-reduced among their 2 holders, 2 x (3 x 24510 + 1 x 990720) x 4 bytes in all
    Plan e = plan_ok("plan/placement --ep", 8, "--mode hybrid --pp 2 --dp 4 --experts 4 --ep 2");
    EXPECT("plan/placement: --ep's experts travel among their holders only", e.dp_bytes == 8514000, "dp %g",
           e.dp_bytes);
    EXPECT("plan/placement replicas: rank = stage x D + replica", plan_rank_stage(&p, 1) == 0 && plan_rank_replica(&p, 1) == 1 &&
           plan_rank_stage(&p, 2) == 1 && plan_rank_replica(&p, 2) == 0, "rank 1: stage %d replica %d", plan_rank_stage(&p, 1), plan_rank_replica(&p, 1));
    // pp-heavy: 2 layers 16 wide (578 parameters), micro-batches of 256 rows.
    p = plan_ok("plan/placement pp-heavy", 4, "--mode hybrid --pp 2 --dp 2 --layers 2 --hidden 16 --batch 4096 --micro-batches 8");
    EXPECT("plan/placement: auto, pp-heavy -> stages (a replica's pipeline on adjacent ranks)",
           p.placement == PLACEMENT_STAGES && p.placement_auto && p.pp_bytes == 524288 && p.dp_bytes == 4624, "placement %d pp %g dp %g",
           p.placement, p.pp_bytes, p.dp_bytes);
    EXPECT("plan/placement stages: rank = replica x P + stage", plan_rank_stage(&p, 1) == 1 && plan_rank_replica(&p, 1) == 0 &&
           plan_rank_stage(&p, 2) == 0 && plan_rank_replica(&p, 2) == 1, "rank 1: stage %d replica %d", plan_rank_stage(&p, 1), plan_rank_replica(&p, 1));
    p = plan_ok("plan/placement given", 6, "--mode hybrid --pp 3 --dp 2 --layers 6 --hidden 16 --batch 4096 --micro-batches 8 --placement replicas");
    EXPECT("plan/placement: --placement replicas overrides auto's stages", p.placement == PLACEMENT_REPLICAS && !p.placement_auto &&
           plan_rank_stage(&p, 5) == 2 && plan_rank_replica(&p, 5) == 1 && plan_rank_stage(&p, 2) == 1, "placement %d", p.placement);
    // Boundaries between ranks: interleaved's chunks all cross (S-1), the V keeps its turn on one rank.
    p = plan_ok("plan/placement interleaved", 4, "--mode hybrid --pp 2 --dp 2 --schedule interleaved --virtual-stages 2 --placement stages");
    EXPECT("plan/placement: interleaved 2 x 2 chunks cross ranks 3 times", p.pp_bytes == 3 * 32768.0 && p.placement == PLACEMENT_STAGES, "pp %g", p.pp_bytes);
    p = plan_ok("plan/placement zb-v", 4, "--mode hybrid --pp 2 --dp 2 --schedule zb-v");
    EXPECT("plan/placement: zb-v's 4 chunks cross ranks twice (chunks 1 and 2 share rank 1)", p.pp_bytes == 2 * 32768.0, "pp %g", p.pp_bytes);
    p = plan_ok("plan/placement pp", 4, "--mode pp");
    EXPECT("plan/placement: pp has one replica (stages), no all-reduce", p.placement == PLACEMENT_STAGES && p.dp_bytes == 0, "dp %g", p.dp_bytes);
    refused("plan/placement: refused outside hybrid", 4, "--mode pp --placement replicas",
            "train: --placement applies to a pipeline (--pp > 1) with data parallelism (--dp > 1), and this run is pp "
            "4 x dp 1 x tp 1: drop it or set --dp");
}

// --tp: groups of T adjacent ranks, the rules that count ranks count groups, the width T splits, the
// rank -> (stage, replica, tp rank) map, the per-rank parameters (the pairs' shards), the all-reduce.
static void test_tp(void) {
    Plan p = plan_ok("plan/tp monolith", 2, "--tp 2");
    EXPECT("plan/tp: --tp 2 alone is one group of 2 ranks, distributed", p.T == 2 && p.K == 1 && p.D == 1 && p.distributed &&
           !p.pipelined && !p.data_parallel && p.rows == 32, "T %d K %d D %d distributed %d", p.T, p.K, p.D, p.distributed);
    p = plan_ok("plan/tp 3D", 8, "--mode hybrid --pp 2 --dp 2 --tp 2 --placement replicas");
    EXPECT("plan/tp: hybrid 2 x 2 x 2 on 8 ranks, the groups adjacent (rank = group x T + tp rank)",
           p.K == 2 && p.D == 2 && p.T == 2 && plan_rank_tp(&p, 5) == 1 && plan_rank_stage(&p, 5) == 1 &&
           plan_rank_replica(&p, 5) == 0 && plan_rank_stage(&p, 3) == 0 && plan_rank_replica(&p, 3) == 1,
           "rank 5: stage %d replica %d tp %d", plan_rank_stage(&p, 5), plan_rank_replica(&p, 5), plan_rank_tp(&p, 5));
    p = plan_ok("plan/tp pp", 4, "--mode pp --tp 2");
    EXPECT("plan/tp: pp on 4 ranks with --tp 2 is 2 stages", p.K == 2 && p.D == 1 && p.T == 2, "K %d", p.K);
    p = plan_ok("plan/tp ddp", 6, "--mode ddp --tp 2 --batch 30");
    EXPECT("plan/tp: ddp on 6 ranks with --tp 2 is 3 replicas of 10 rows", p.D == 3 && p.rows == 10, "D %d rows %d", p.D, p.rows);
    p = plan_ok("plan/tp hybrid from --pp alone", 8, "--mode hybrid --pp 2 --tp 2");
    EXPECT("plan/tp: hybrid --pp 2 --tp 2 on 8 ranks: 2 replicas", p.K == 2 && p.D == 2, "K %d D %d", p.K, p.D);
    // 5 layers 32 wide, inputs 24, 4 classes, T = 2: column 16 x 24 + 16, row 32 x 16 + 32, column
    // 16 x 32 + 16, row 32 x 16 + 32, the odd last layer whole 32 x 32 + 32, the head 4 x 32 + 4.
    p = plan_ok("plan/tp params", 2, "--tp 2 --layers 5 --hidden 32 --inputs 24 --classes 4");
    double want = (16 * 24 + 16) + (32 * 16 + 32) + (16 * 32 + 16) + (32 * 16 + 32) + (32 * 32 + 32) + (4 * 32 + 4);
    TrainConfig c;
    train_config_defaults(&c);
    c.layers = 5; c.hidden = 32; c.inputs = 24; c.classes = 4; c.batch = 32;
    EXPECT("plan/tp: a rank's parameters are its shards (column, row, column, row, whole, head)",
           tensor_params(&c, &p, 0) == want, "%g, want %g", tensor_params(&c, &p, 0), want);
    // the all-reduces of a micro-batch: the 2 row layers' outputs (32 rows x 32) forward, the column
    // layer 2's input gradient (32 x 32) backward (layer 0, the model's first, computes none)
    EXPECT("plan/tp: all-reduced floats per micro-batch", tensor_allreduce_floats(&c, &p, 0) == 3 * 32 * 32, "%g",
           tensor_allreduce_floats(&c, &p, 0));
    p.data.bucket_mb = 1;  // one bucket of the rank's shards: ZeRO-2 and 3's working buffers (memory.c)
    EXPECT("plan/tp: the largest bucket holds the rank's shards", data_largest_bucket(&c, &p, 0) == want, "%g, want %g",
           data_largest_bucket(&c, &p, 0), want);
    refused("plan/refuse: --hidden not divisible by --tp", 3, "--tp 3 --hidden 32",
            "train: --hidden 32 is not divisible by --tp 3 (each rank holds H/T features of every split layer): use --hidden 30 or 33, or a --tp that divides 32");
    refused("plan/refuse: ranks not in whole groups", 3, "--mode ddp --tp 2",
            "train: --tp 2 makes groups of 2 adjacent ranks, and 3 ranks were started: use --tp 1 or 3 (the divisors "
            "of 3), or run 'mpiexec -n 4' (a multiple of 2)");
    refused("plan/refuse: monolith --tp on more ranks than one group", 4, "--mode monolith --tp 2",
            "train: --mode monolith --tp 2 runs one tensor-parallel group of 2 ranks, but 4 were started");
    refused("plan/refuse: pp --tp with one group", 2, "--mode pp --tp 2", "train: --mode pp --tp 2 needs at least 2 stages of 2 ranks (4 ranks), got 2");
    refused("plan/refuse: hybrid P x D x T != ranks", 4, "--mode hybrid --pp 2 --dp 2 --tp 2",
            "train: --pp 2 x --dp 2 x --tp 2 = 8 ranks, but 4 were started: run 'mpiexec -n 8' or choose P x D x T = 4");
    refused("plan/refuse: ddp --dp x --tp != ranks", 4, "--mode ddp --dp 4 --tp 2", "train: --dp 4 x --tp 2 = 8 ranks, but 4 were started");
    refused("plan/refuse: --tp with manual", 1, "--mode manual --tp 2", "--tp splits layers over ranks, and --mode manual runs in one process");
    // the observers with --tp: a track per rank (the group's all-reduces on its collectives track)
    plan_ok("plan/tp: pp x tp with --trace, --timeline and --gantt", 4, "--mode pp --tp 2 --trace t.json --timeline "
            "t.svg --gantt --timeline-step 1");
    plan_ok("plan/tp: hybrid x tp with --trace, --timeline and --gantt", 8, "--mode hybrid --pp 2 --dp 2 --tp 2 "
            "--trace t.json --timeline t.svg --gantt");
    plan_ok("plan/tp: --tp alone with --trace", 2, "--tp 2 --trace t.json");
    plan_ok("plan/tp: ddp x tp with --trace (no --zero)", 4, "--mode ddp --tp 2 --trace t.json");
    plan_ok("plan/tp: --allreduce picks the group's", 2, "--tp 2 --allreduce ring");
    p = plan_ok("plan/tp: --tp-message auto by default", 4, "--mode pp --tp 2");
    EXPECT("plan/tp: --tp-message auto by default in a pipeline", p.tensor.message == TP_MESSAGE_AUTO, "%d",
           p.tensor.message);
    p = plan_ok("plan/tp: --tp-message full", 4, "--mode pp --tp 2 --tp-message full");
    EXPECT("plan/tp: --tp-message full as asked", p.tensor.message == TP_MESSAGE_FULL, "%d", p.tensor.message);
    p = plan_ok("plan/tp: --tp-message slice", 4, "--mode pp --tp 2 --tp-message slice");
    EXPECT("plan/tp: --tp-message slice in a pipeline", p.tensor.message == TP_MESSAGE_SLICE, "%d", p.tensor.message);
    refused("plan/refuse: --tp-message without --tp", 1, "--tp-message slice",
            "train: --tp-message applies to a pipeline (--pp > 1) with tensor parallelism (--tp > 1), and this run is "
            "pp 1 x dp 1 x tp 1: drop it or set --pp and --tp");
    refused("plan/refuse: --tp-message without a pipeline", 2, "--tp 2 --tp-message slice",
            "train: --tp-message applies to a pipeline (--pp > 1) with tensor parallelism (--tp > 1), and this run is "
            "pp 1 x dp 1 x tp 2: drop it or set --pp");
    TrainConfig tc;  // a config file's "trace" key: the observers run with --tp as with the option
    train_config_defaults(&tc);
    tc.grid.mode = MODE_PP;
    tc.grid.tp = 2;
    snprintf(tc.observe.trace, sizeof tc.observe.trace, "t.json");
    static const OptionsSeen none;
    Facts f4 = {.world = 4, .tag_ub = TAG_UB};
    char err[512];
    EXPECT("plan/tp: a config file's trace with --tp",
           plan_make(&tc, &(Degrees){.pp = 2, .dp = 1, .tp = 2}, &none, &f4, &p, err, sizeof err) == 0 && p.T == 2,
           "%s", err);
    static int one_node[4] = {0, 0, 0, 0}, split_group[4] = {0, 0, 0, 1};
    static double unknown[4] = {-1, -1, -1, -1};
    Hardware h1 = {.no_gpu_rank = -1, .nodes = 1, .node_of = one_node, .shm_free = unknown};
    Hardware h2 = {.no_gpu_rank = -1, .nodes = 2, .node_of = split_group, .shm_free = unknown};
    Facts f1 = {.world = 4, .tag_ub = TAG_UB, .devices = &h1}, f2 = {.world = 4, .tag_ub = TAG_UB, .devices = &h2};
    p = facts_ok("plan/tp allreduce auto, one node", &f1, "--mode pp --tp 2");
    EXPECT("plan/tp: auto sums the group over shm on one node", p.tensor.algo == ALLREDUCE_SHM, "%d", p.tensor.algo);
    p = facts_ok("plan/tp allreduce auto, a group across nodes", &f2, "--mode pp --tp 2");
    EXPECT("plan/tp: auto with a group across nodes is mpi", p.tensor.algo == ALLREDUCE_MPI, "%d", p.tensor.algo);
    facts_refused("plan/refuse: --allreduce shm with a group across nodes", &f2, "--mode pp --tp 2 --allreduce shm",
                  "train: --allreduce shm needs each tensor-parallel group of 2 ranks on one node, and rank 3 is not on rank 2's: use --allreduce mpi or ring");
    // On GPUs (issue 22 item 4): --transport nccl carries the group's all-reduce too; auto keeps mpi
    Hardware g4 = gpus(4, 0);
    Facts fg4 = {.world = 4, .tag_ub = TAG_UB, .devices = &g4}, fg2 = {.world = 2, .tag_ub = TAG_UB, .devices = &g4};
    p = facts_ok("plan/tp over nccl", &fg2, "--tp 2 --transport nccl");
    EXPECT("plan/tp: --tp 2 --transport nccl (no pipeline) sums the group over NCCL",
           p.tensor.nccl && p.device == DEVICE_CUDA && p.transport == TRANSPORT_NCCL,
           "tp_nccl %d device %d transport %d", p.tensor.nccl, p.device, p.transport);
    p = facts_ok("plan/tp over nccl, pp2 x tp2", &fg4, "--mode pp --tp 2 --transport nccl --schedule 1f1b --micro-batches 4");
    EXPECT("plan/tp: pp2 x tp2 over nccl: the pipeline's messages and the group's all-reduce both",
           p.tensor.nccl && p.transport == TRANSPORT_NCCL, "tp_nccl %d transport %d", p.tensor.nccl, p.transport);
    p = facts_ok("plan/tp on GPUs, auto", &fg2, "--tp 2");
    EXPECT("plan/tp: on GPUs auto keeps the group's all-reduce on mpi (NCCL unproven there)",
           !p.tensor.nccl && p.device == DEVICE_CUDA && p.tensor.algo == ALLREDUCE_MPI, "tp_nccl %d %d", p.tensor.nccl,
           p.tensor.algo);
    facts_refused("plan/refuse: --tp --transport nccl with --allreduce", &fg2, "--tp 2 --transport nccl --allreduce ring",
                  "train: --transport nccl sums the tensor-parallel group over NCCL, and --allreduce asks for another way: drop one of them");
    refused("plan/refuse: --transport without a pipeline nor --tp", 2, "--mode ddp --transport nccl",
            "train: --transport applies to a pipeline (--pp > 1) or tensor parallelism (--tp > 1), and this run is pp "
            "1 x dp 2 x tp 1: drop it or set --pp or --tp");
    refused("plan/refuse: --tp 2 without a pipeline still refuses --schedule", 2, "--tp 2 --schedule gpipe",
            "train: --schedule applies to a pipeline (--pp > 1), and this run is pp 1 x dp 1 x tp 2");
    MemLayout l;
    char why[512];
    c.grid.tp = 2;
    c.hidden = 33;
    EXPECT("plan/tp: micropp plan's layout refuses a width --tp does not divide",
           memory_layout(&c, SCHED_1F1B, &(Degrees){.pp = 1, .dp = 1, .tp = 2}, &l, why, sizeof why) == -1 &&
               strstr(why, "--hidden 33 is not divisible by --tp 2"),
           "%s", why);
}

int main(void) {
    test_degrees();
    test_tp();
    test_layout();
    test_placement();
    test_layouts();
    test_flags_apply();
    test_grid();
    test_schedule();
    test_batch_and_partition();
    test_observers();
    test_epochs();
    test_eval_rows();
    test_stream();
    test_devices();
    test_gpu_sharing();
    test_device_memory();
    test_allreduce();
    test_resumed();
    test_run_rules();
    test_schedule_file();
    test_lr_schedule();
    return unit_failures ? 1 : 0;
}
