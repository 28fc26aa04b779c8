// schedule.h: a pipeline schedule is DATA: for each rank, the ordered list of actions it runs in
// one training step. The executor (pipeline.c) runs a list for real; the simulator below runs all
// ranks' lists against each other with costs, which yields the bubble, the peak number of
// micro-batches in flight, a Gantt chart, and a proof that the schedule cannot deadlock.
//
// Virtual stages. A rank holds v model chunks (v = 1 except for the interleaved schedule): chunk c
// of rank s is virtual stage vs = c*K + s of the K*v in the pipeline, so rank s holds virtual stages
// s, s+K, s+2K, ... Activations flow vs -> vs+1 (from the last rank back to rank 0 between chunks),
// gradients vs+1 -> vs. With v = 1, virtual stage = stage = rank.
#pragma once

enum { SCHED_NAIVE, SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1 };
#define SCHED_CHOICES "naive|gpipe|1f1b|interleaved|zb-h1"

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

// 1 when the schedule splits the backward into I and W (zb-h1), 0 when it runs full backwards.
int schedule_splits_backward(int kind);
// The action list of rank `stage` (0-based) for schedule kind (SCHED_*), K ranks, M micro-batches
// and v chunks per rank (v must be 1 unless kind is SCHED_INTERLEAVED, which needs v >= 2 and
// M % K == 0; schedule_check says so in words).
void schedule_build(int kind, int K, int M, int v, int stage, ActionList *out);
// Evaluation: every batch forward through every chunk in order (no backward): rank s of K with v
// chunks. The pipeline runs it over the wire; one process holding all chunks (K = 1) hands each
// chunk's output to the next in memory.
void schedule_build_forward(int K, int v, int s, int batches, ActionList *out);
void action_list_free(ActionList *l);
// NULL when (kind, K, M, v) can run, else why not (a phrase for a user_error line).
const char *schedule_check(int kind, int K, int M, int v);

typedef struct { int kind, mb; double t0, t1; int chunk; } Interval;  // a busy slice (F, B, I or W)

// What to simulate. Costs are those of a whole stage (all of a rank's layers); an interleaved
// chunk action costs 1/v of them, so makespans compare across schedules. A full backward (B)
// costs b + w: with F = B = W = 1 the old schedules see the textbook F = 1, B = 2.
typedef struct {
    int kind, K, M, v;
    double f, b, w;     // forward, backward-input (I), backward-weight (W)
    double comm;        // a message arrives this long after its send
    const double *stage_f, *stage_b, *stage_w;  // optional [K] per-rank costs overriding f, b, w
} SimSpec;

typedef struct {
    int K, M, v;
    double makespan;
    double *busy;         // [K] compute time per rank
    double *bubble;       // [K] idle / makespan of each rank
    double bubble_mean;   // idle time of all ranks / (K * makespan)
    int *peak_inflight;   // [K] most micro-batches (of a chunk) between F and their B or I, over the
                          //     rank's chunks: the activation stash that 1F1B's memory bound counts
    int *peak_deferred;   // [K] most micro-batches between I and W (waiting for their weight gradient)
    int *peak_slots;      // [K*v] per virtual stage: most micro-batches holding memory (F .. B or W)
    Interval **slices;    // [K] busy slices in time order, n_slices[K] each
    int *n_slices;
    int deadlock;         // 1 when some rank could not finish
    char why[256];        // which rank waits for what, when deadlock
} SimResult;

// Runs every rank's action list against the others: compute actions take their cost, a message
// arrives spec->comm after its send, a receive waits for its message, sends never block.
void schedule_sim(const SimSpec *spec, SimResult *r);
void sim_result_free(SimResult *r);
// The bubble with uniform costs, as a fraction of the makespan (idle / (idle + busy)):
//   naive (K-1)/K; gpipe, 1f1b (K-1)/(M+K-1) (any F, B);
//   interleaved (K-1)/(v*M+K-1) (any F, B) -- Megatron's (K-1)/(v*M) of the ideal time, i.e.
//     bubble time / busy time, is the same quantity normalised by busy instead of makespan;
//   zb-h1 (K-1)/(3M+K-1) for F = I = W (M >= K): the bubble of 1F1B made of F+I-W instead of F+B.
double schedule_bubble_formula(int kind, int K, int M, int v);
