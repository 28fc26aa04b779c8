// schedule.h: a pipeline schedule is DATA: for each rank, the ordered list of actions it runs in
// one training step. The executor (train/executor.c) runs a list for real; the simulator below runs all
// ranks' lists against each other with costs, which yields the bubble, the peak number of
// micro-batches in flight, a Gantt chart, and a proof that the schedule cannot deadlock.
//
// Virtual stages. A rank holds v model chunks (its kind's row says how many: 1 for most, 2 for zb-v,
// dualpipev, v-half and v-min, --virtual-stages for interleaved and looped-bfs): the K*v chunks in pipeline
// order are the virtual stages; activations flow vs -> vs+1, gradients vs+1 -> vs. Which rank holds which virtual
// stage is part of the schedule (its chunk order, below): the loop of interleaving puts chunk c of
// rank s at vs = c*K + s (rank s holds s, s+K, ...); the V of zb-v and dualpipev folds the pipeline
// back (rank 0 holds the first and the last chunk). With v = 1, virtual stage = stage = rank.
#pragma once
#include <stddef.h>

// The schedule kinds, in the order of SCHED_NAMES; each has its row in the table (ScheduleKind,
// below; the rows in schedule.c). SCHED_ZBAUTO: zb-auto, the lists a search builds from the
// stages' costs and a memory limit (schedule_auto.c); SCHED_ZBAUTOV: zb-auto-v, its search over the V's
// placement (two chunks per rank). SCHED_FILE: the schedule of a file
// (--schedule-file, schedule_file.c): no --schedule choice, and SCHED_NAMES names it "file". The
// lists of both travel with the kind (SchedFile, below). A new kind: its value here, its name in
// SCHED_CHOICES, its row and its generator.
enum {
    SCHED_NAIVE,
    SCHED_GPIPE,
    SCHED_1F1B,
    SCHED_INTERLEAVED,
    SCHED_ZBH1,
    SCHED_ZBV,
    SCHED_DUALPIPEV,
    SCHED_ZBH2,
    SCHED_LOOPED_BFS,
    SCHED_VHALF,
    SCHED_VMIN,
    SCHED_ZBAUTO,
    SCHED_ZBAUTOV,
    SCHED_FILE,
    SCHED_KINDS
};
// The option's choice list (tests/unit_schedules.c checks it against the table's names).
#define SCHED_CHOICES \
    "naive|gpipe|1f1b|interleaved|zb-h1|zb-v|dualpipev|zb-h2|looped-bfs|v-half|v-min|zb-auto|zb-auto-v"
#define SCHED_NAMES SCHED_CHOICES "|file"

// The chunk order. CHUNKS_LOOP: chunk c of rank s is vs = c*K + s. CHUNKS_V: even chunks
// run down the ranks, odd chunks back up: chunk c of rank s is c*K + s (c even) or c*K + K-1-s (c
// odd), so with 2 chunks rank s holds vs s and 2K-1-s. These three are THE map; plan.h wraps them.
enum { CHUNKS_LOOP, CHUNKS_V };
static inline int vstage_of(int chunk_order, int K, int s, int c) {
    return c * K + (chunk_order == CHUNKS_V && (c & 1) ? K - 1 - s : s);
}
static inline int chunk_of_vstage(int K, int vs) { return vs / K; }
static inline int stage_of_vstage(int chunk_order, int K, int vs) {
    return chunk_order == CHUNKS_V && (vs / K & 1) ? K - 1 - vs % K : vs % K;
}

// Kinds as a table: one const row per schedule kind, everything the simulator, `bubble`, the Plan,
// the planner and the executor ask of a kind. schedule_kind(kind) gives the row; a kind out of range
// is a bug and stops the run (never another kind's facts).
enum { CHUNKS_OPTION = 0, CHUNKS_OF_LISTS = -1 };  // ScheduleKind.chunks, beside a fixed count
struct SchedAt;  // where a generator writes: one rank's list and its place in the pipeline (schedule.c)
typedef struct {
    const char *name;         // as --schedule spells it (SCHED_NAMES, in SCHED_* order)
    int chunks;               // chunks per rank: a count, CHUNKS_OPTION (--virtual-stages, at least
                              // least_chunks), or CHUNKS_OF_LISTS (chunks, order and split: its file's)
    int least_chunks;         // CHUNKS_OPTION: the fewest chunks it runs with, and the kind it is
    const char *one_chunk;    //   with one (the fix a refusal names)
    int chunk_order;          // CHUNKS_LOOP or CHUNKS_V
    int split;                // 1: splits backwards into I and W (some or all of them)
    int least_m;              // runs with M >= least_m x ranks only (0: any M), by whose rule, and
    const char *least_m_rule; //   the kind to run instead
    const char *least_m_else;
    void (*generate)(const struct SchedAt *at, int M);  // one rank's list; NULL: a copy of the lists it is
                                                        // given (zb-auto's search, a file), not in 'all'
    double (*bubble)(int K, int M, int v);  // the textbook bubble, idle / makespan; NULL: no closed form
    // where that formula holds: at F = I = W only (uniform), for M >= m_per_k x K - m_less, and for
    // M a multiple of K only (whole_groups); elsewhere the simulator's figure counts
    struct { int uniform, m_per_k, m_less, whole_groups; } holds;
    int searched;             // 1: plan --auto's search (planner/auto.c) tries it
} ScheduleKind;
const ScheduleKind *schedule_kind(int kind);

struct SchedFile;
// The chunk order a schedule kind runs with, and its chunks per rank (v_option: --virtual-stages,
// for the kinds that take it). file: SCHED_FILE's (NULL for the others).
int schedule_chunk_order(int kind, const struct SchedFile *file);
int schedule_chunks(int kind, int v_option, const struct SchedFile *file);
// The kinds that take --virtual-stages, for a message: "a", "a or b", "a, b or c".
const char *schedule_chunk_option_kinds(char *buf, size_t n);

typedef enum {
    ACT_FORWARD,          // F: forward of micro-batch mb through this chunk
    ACT_BACKWARD,         // B: the full backward of mb (input and weight gradients) = I + W
    ACT_SEND_ACT,         // send mb's output activation to the next virtual stage (non-blocking)
    ACT_RECV_ACT,         // receive mb's input activation from the previous virtual stage (blocking)
    ACT_SEND_GRAD,        // send the gradient of mb's input to the previous virtual stage (non-blocking)
    ACT_RECV_GRAD,        // receive the gradient of mb's output from the next virtual stage (blocking)
    ACT_BACKWARD_INPUT,   // I: only the gradient of mb's input (what the previous stage waits for);
                          //    keeps what W needs (the zero-bubble paper calls this pass B)
    ACT_BACKWARD_WEIGHT,  // W: the weight and bias gradients of mb, deferred; frees mb's memory
    ACT_KINDS
} ActionKind;

extern const char *const action_names[ACT_KINDS];  // "F", "B", "SEND_ACT", ..., "I", "W"
int action_is_compute(int kind);                    // F, B, I, W

typedef struct { int kind, mb, chunk; } Action;  // chunk: this rank's chunk (0..v-1), 0 when v = 1
typedef struct { Action *a; int n, cap; } ActionList;

// A schedule read from a file (schedule_file_parse makes one), run as kind SCHED_FILE, or built by
// zb-auto's search (schedule_auto makes one), run as kind SCHED_ZBAUTO: K ranks'
// action lists (with their sends and receives), M micro-batches, v chunks per rank placed by
// `chunk_order`, split = 1 when any action is I or W. Whoever builds or simulates SCHED_FILE passes it.
typedef struct SchedFile { ActionList *lists; int K, M, v, chunk_order, split; } SchedFile;
void sched_file_free(SchedFile *f);

// 1 when the schedule splits the backward into I and W (dualpipev runs both full backwards and
// split ones), 0 when it runs full backwards only.
int schedule_splits_backward(int kind, const SchedFile *file);
// The action list of rank `stage` (0-based) for schedule kind (SCHED_*), K ranks, M micro-batches
// and v chunks per rank (schedule_chunks(kind, ...); schedule_check says in words what runs);
// SCHED_FILE, SCHED_ZBAUTO and SCHED_ZBAUTOV: a copy of file's list (its K, M and v, or it is a bug).
void schedule_build(int kind, const SchedFile *file, int K, int M, int v, int stage, ActionList *out);
// Evaluation: every batch forward through every chunk in pipeline order (no backward): rank s of K
// with v chunks placed by `chunk_order`. The pipeline runs it over the wire; one process holding all
// chunks (K = 1) hands each chunk's output to the next in memory.
void schedule_build_forward(int K, int v, int chunk_order, int s, int batches, ActionList *out);
void action_list_free(ActionList *l);
// One compute action of rank s with its hand-offs, as every generator adds them (and PyTorch adds
// them to a file's compute actions): F receives its input first and sends its output after; B and
// I receive the output's gradient first and send the input's after; W has none.
void schedule_push_pass(ActionList *l, int chunk_order, int K, int v, int s, int kind, int chunk, int mb);
// A list of schedules as `--schedule` takes it in bubble and plan: 'all' (every built-in kind), or
// names of SCHED_CHOICES separated by commas, each once. Returns how many went into out (at most
// max), or -1 with why in words ("--schedule 'x' is not ..."; the caller names its command).
int schedule_parse_list(const char *text, int *out, int max, char *why, size_t n);
// NULL when (kind, K, M, v) can run, else why not (a phrase for a user_error line). SCHED_FILE: NULL
// (a file is proven when it is read, for its own K, M and v).
const char *schedule_check(int kind, int K, int M, int v);

// A busy slice (F, B, I or W). A forward run in turn with a backward (--ep-overlap pair) is one slice of both:
// pair_mb 1 + the backward's micro-batch, pair_chunk its chunk (0: a slice of one pass).
typedef struct { int kind, mb; double t0, t1; int chunk, pair_mb, pair_chunk; } Interval;

// What to simulate. Costs are those of a whole stage (all of a rank's layers); an interleaved
// chunk action costs 1/v of them, so makespans compare across schedules. A full backward (B)
// costs b + w: with F = B = W = 1 the old schedules see the textbook F = 1, B = 2.
typedef struct {
    int kind, K, M, v;
    const SchedFile *file;  // kind SCHED_FILE: the file's schedule (else NULL)
    double f, b, w;     // forward, backward-input (I), backward-weight (W)
    double comm;        // a message between two ranks arrives this long after its send (a hand-off
                        // between two chunks of one rank, as at the V's turn, arrives at once)
    const double *stage_f, *stage_b, *stage_w;  // optional [K] per-rank costs overriding f, b, w
    int slices;         // 1: keep every rank's busy slices (a Gantt chart); 0: SimResult.slices stays NULL
} SimSpec;

typedef struct {
    int K, M, v;
    double makespan;
    double *busy;         // [K] compute time per rank
    double *bubble;       // [K] idle / makespan of each rank
    double bubble_mean;   // idle time of all ranks / (K * makespan): one step alone (micropp's steps)
    double span;          // the longest rank span: from a rank's first pass's start to its last pass's end
    // idle / (K * span): the bubble when a step's edges overlap the steps beside it (no barrier or
    // global check between steps: the zero-bubble paper's optimizer post-validation), the measure of
    // its Table 5 (ZB-H2, ZB-1p, ZB-2p); <= bubble_mean, equal where rank 0 starts first and ends last
    double bubble_overlap;
    int *peak_inflight;   // [K] most micro-batches (of a chunk) between F and their B or I, over the
                          //     rank's chunks: the activation stash that 1F1B's memory bound counts
    int *peak_deferred;   // [K] most micro-batches between I and W (waiting for their weight gradient)
    int *peak_slots;      // [K*v] per virtual stage: most micro-batches holding memory (F .. B or W)
    int *peak_held;       // [K] most chunk passes a rank holds memory for at once, over its chunks (F .. B or W):
                          //     the activation memory of Qi et al.'s V schedules, in chunk passes (1/v of a stage)
    Interval **slices;    // [K] busy slices in time order, n_slices[K] each (only when spec->slices; else NULL)
    int *n_slices;        // [K] compute actions of each rank (counted either way)
    int deadlock;         // 1 when some rank could not finish
    char why[256];        // which rank waits for what, when deadlock
    int stuck_rank, stuck_at;  // deadlock: the first rank that could not finish, and the index in its list
} SimResult;

// The largest schedule the simulator takes, in passes: virtual stages x micro-batches (K x v x M).
// At the limit a zb-h1 run of it holds about 0.1 GB and takes half a second of one core; train
// (which proves its schedule and sizes its stashes with it before the run), plan, bubble and a
// schedule file refuse more, saying so.
#define SCHEDULE_MAX_SIM (1 << 22)

// Runs every rank's action list against the others: compute actions take their cost, a message
// arrives spec->comm after its send, a receive waits for its message, sends never block.
void schedule_sim(const SimSpec *spec, SimResult *r);
void sim_result_free(SimResult *r);
// The textbook bubble of a kind (its row's formula, idle / makespan; each row says why), NaN for a
// kind without one (zb-auto, a file); schedule_bubble_holds: 1 where it equals the simulator's, for
// costs F = I = W (uniform) or not. The bubble command prints both.
double schedule_bubble_formula(int kind, int K, int M, int v);
int schedule_bubble_holds(int kind, int K, int M, int uniform);
