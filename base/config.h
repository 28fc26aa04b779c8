// base/config.h: the options of every subcommand, described once in a table (name, type, range, help)
// that drives the command-line parser, the JSON config reader and --help alike, so none can drift.
// Order of precedence: defaults -> JSON file (--config) -> command-line flags.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef enum { OPT_INT, OPT_FLOAT, OPT_STR, OPT_BOOL, OPT_CHOICE, OPT_SIZE } OptType;

typedef struct {
    const char *name;     // long flag "--name" and JSON key "name" (underscores accepted for dashes)
    char short_name;      // 0 when none
    OptType type;         // INT/SIZE: int64_t, FLOAT: double, STR: char[PATH_LEN], BOOL/CHOICE: int
    size_t offset;        // where the value lives in the subcommand's struct
    const char *choices;  // OPT_CHOICE: "a|b|c", stored as the index
    double lo, hi;        // numeric range, inclusive
    const char *metavar;  // shown in --help
    const char *help;
    unsigned axes;  // AXIS_* bits: the axes of parallelism it applies to (0: every run)
} Option;

// The axes an option row applies to (Option.axes): typed for a run whose degrees make none of them
// active, it is refused by one rule (axes/degrees.c's degrees_check_flags); with AXES_ALL, unless all are.
enum { AXIS_PIPELINE = 1, AXIS_DATA = 2, AXIS_TENSOR = 4, AXES_ALL = 0x100 };

#define PATH_LEN 512

// What a parse saw, per row of its option table: whether the config file set the option, and
// whether it was typed on the command line. A flag typed for a run whose degrees do not use it is an
// error; the same key in a config file (a job description shared by runs) is left unused.
// A zeroed record has seen nothing.
#define OPTIONS_MAX 128  // rows of one option table
typedef struct {
    const Option *opts;                // the table the rows index (NULL: nothing seen)
    unsigned char in_config[OPTIONS_MAX], typed[OPTIONS_MAX];
} OptionsSeen;
int seen_set(const OptionsSeen *s, const char *name);    // in the config file or on the command line
int seen_typed(const OptionsSeen *s, const char *name);  // on the command line
// (A name that is no row of the table is a bug: fatal.)

// Parses argv (after the subcommand) into base: first --config FILE (if the table has "config"),
// then every flag, and records in *seen what set each option (seen may be NULL). Bad input ends
// the run through user_error (exit 2). -h/--help prints the help (base holds the defaults at that
// point) and exits 0.
void options_parse(const char *cmd, const Option *opts, void *base, OptionsSeen *seen, int argc, char **argv,
                   const char *usage, const char *examples);
// One JSON config file into base; its keys are recorded in seen->in_config (seen may be NULL).
void options_load_json(const char *cmd, const Option *opts, void *base, OptionsSeen *seen, const char *path);
// The help: a line per row (wrapped to $COLUMNS, 80 without it, 100 at most), under its section's
// title where options_sections gave the table some.
void options_help(FILE *f, const char *cmd, const char *usage, const Option *opts,
                  const void *defaults, const char *examples);
// Titles for a table's --help: each before the row it names (first), in table order; {0} ends them.
typedef struct { const char *first, *title; } OptionSection;
void options_sections(const Option *opts, const OptionSection *sections);
int parse_size(const char *s, int64_t *out);  // "64K" -> 65536; returns 0 on success
int parse_int_list(const char *s, int *out, int max);  // "5,4,4,3" -> count, or -1 when malformed
// One grammar for the counts a command sweeps (bubble's and plan's --pp, --micro-batches, --dp, --tp,
// --zero): "4", a range "2:8" (inclusive), a list "2,4,8", or a mix ("1,4:6"); each in lo..max, at
// most cap in all. Returns the count; a malformed text ends the run (user_error, naming --flag).
int parse_counts(const char *cmd, const char *flag, const char *text, int lo, int max, int *out, int cap);
// Called at the end of every options_parse with the resolved options, "name=value\n" per option in
// table order: the launch agreement (launch.c) compares them across ranks. NULL: none (no MPI).
void options_set_agree_hook(void (*hook)(const char *cmd, const char *resolved));

// ---- train ----
// The options of `micropp train` as parsed; the enum values of its choices (MODE_*, SCHED_*,
// OPTIM_*, DEVICE_*, TRANSPORT_*, SYNC_*, ALLREDUCE_*) live beside the code that owns them, and its
// option table and defaults in train/options.c (train/options.h).
typedef struct {
    char config[PATH_LEN];
    // the degrees as given (axes/degrees.c resolves them once with the world)
    struct {
        int mode;        // MODE_* (axes/degrees.h): a spelling of the degrees
        int64_t pp, dp;  // pipeline stages, data-parallel replicas (0: not given)
        int64_t tp;      // tensor parallelism: ranks sharing each stage's layers (1: none)
        int64_t ep;      // expert parallelism: replicas sharing each MoE layer's experts (1: none; axes/expert.c)
    } grid;
    int64_t layers, hidden, classes, batch, steps;
    int64_t inputs;          // D, the input layer's width: Linear(D, H) (0 until resolved: = hidden)
    int64_t epochs;          // real data: passes over the training set (0: --steps counts instead)
    double lr;
    double weight_decay;     // decoupled (AdamW, PyTorch semantics); 0 = none
    struct {                 // what guards the steps (train.c)
        double diverge_factor;  // end the run when the loss stays above this x the first loss (0: never)
        double clip_grad;       // --clip-grad: the gradients' global L2 norm clipped to this (0: no clipping)
        int post_validate;      // --post-validate: no barrier between steps; a step's global check arrives late and
                                // a failed step is rolled back (train/postval.c)
    } guard;
    struct {                 // the optimizer's numbers besides --lr (model.c's lr_at and optimizer_update)
        int lr_schedule;         // LR_* (model.h): constant or cosine
        int64_t warmup_steps;    // linear warm-up from lr/warmup to lr
        double min_lr;           // cosine: the learning rate at the last step
        double adam_beta1, adam_beta2, adam_eps;
    } optim;
    int optimizer;           // OPTIM_* (model.h)
    struct {                 // mixture-of-experts layers (moe.h; docs/experts.md)
        int64_t experts;     // E experts per MoE layer (0: a dense model)
        int64_t every;       // every Nth hidden layer (global l >= 1, l % N == 0) is one
        int64_t top_k;       // experts per row
        double capacity;     // capacity factor: an expert takes ceil(cf x rows x k / E) rows of a micro-batch
        double aux;          // coefficient of Switch's load-balancing loss
        int alltoall;        // --alltoall: the expert group's all-to-all (ALLTOALL_*, axes/expert.h)
        int overlap;         // --ep-overlap: 1 (on) computes a layer's own rows while the others' travel
    } moe;
    int64_t seed;
    int64_t threads;
    char data[PATH_LEN];     // "synthetic", "fashion-mnist", a folder of IDX files, FILE.npy or FILE (IDX)
    char labels[PATH_LEN];
    char test_data[PATH_LEN], test_labels[PATH_LEN];  // a held-out test split (explicit files)
    int64_t log_every;
    int json;
    int64_t eval_samples;
    int64_t samples;         // synthetic training set size; 0 = one fixed batch
    struct {                 // the pipeline's options (axes/pipeline.c)
        int schedule;        // SCHED_* (schedule.h); SCHED_FILE once --schedule-file is read
        char schedule_file[PATH_LEN];  // "" = --schedule; else a CSV schedule (schedule_file.h)
        int64_t micro_batches;
        int64_t virtual_stages;    // interleaved: model chunks per rank
        int64_t max_inflight;      // zb-auto: its search's memory limit in micro-batches in flight (0: 2 x stages)
        char partition[PATH_LEN];  // "" = even split, else "5,4,4,3"
        int checkpoint_activations;
    } pipe;
    struct {               // data parallelism's options, ddp (axes/data.c, axes/zero.c)
        int placement;     // PLACEMENT_* (comms.h): with a pipeline, which neighbours sit on adjacent ranks
        int ddp_sync;      // SYNC_* (axes/data.h)
        int allreduce;     // ALLREDUCE_* (comms.h): the replicas' collectives, and the tensor-parallel group's
        double bucket_mb;  // bucket capacity, MiB
        int64_t zero;      // ZeRO stage: 0 (none), 1, 2 or 3
        int64_t sync_every;     // local SGD / DiLoCo (axes/localsgd.c): an outer step every H steps (0: ddp)
        double outer_lr, outer_momentum;  // its outer optimizer's (Nesterov SGD)
        char compress[PATH_LEN];  // --compress topk:F (axes/compress.c): "" = the exact sum
    } ddp;
    struct {             // tensor parallelism's options (axes/tensor.c)
        int tp_message;  // TP_MESSAGE_* (axes/tensor.h): how a pipeline message crosses between two groups
    } tensor;
    int verify;
    // device
    int device;              // DEVICE_* (comms.h): auto = cuda when every rank sees a GPU
    int transport;           // TRANSPORT_* (comms.h): how stages exchange device buffers
    int precision;           // PRECISION_* (ops.h): the matrix products' inputs in fp32 or bf16
    struct {                 // how the matrix products run
        int tf32;            // cuBLAS may round fp32 inputs to TF32
        int timing;          // time every gemm, report the share of step time in BLAS
        int deterministic;   // every sum in one canonical order, the same bits on every layout (base/det.h)
        int det_rows;        // --deterministic's chunk: the rows each product and each gradient leaf is taken over
    } gemm;
    struct {                 // observing the run (train/trace.c, train/metrics.c, train/live.c)
        char trace[PATH_LEN];     // Chrome trace JSON of every step, "" = none
        char timeline[PATH_LEN];  // SVG of one step's measured Gantt chart, "" = none
        int64_t timeline_step;    // 1-based step drawn by --timeline / --gantt; 0 = the median-time step
        int gantt;                // print that step's Gantt chart at the end
        int64_t gantt_width;      // --width: the chart's columns at most (0: $COLUMNS on a terminal, else 160)
        char metrics[PATH_LEN];   // a JSON line per step (metrics_every), evaluation and epoch, "" = none
        int64_t metrics_every;    // --metrics: a step's line every N steps (1: all; 0: none)
        int64_t eval_every;       // evaluate on the held-out rows every N steps (0: at the end, and per epoch)
        int live;                 // LIVE_* (train/live.h): the live line on a terminal
    } observe;
    int64_t grad_accum;      // micro-steps per optimizer step
    struct {                 // checkpoints (train/checkpoint.c)
        char save[PATH_LEN];    // "" = no checkpoints
        int64_t save_every;     // 0 = only at the end
        char resume[PATH_LEN];  // "" = start from the initial weights
        int save_best;          // with --save and --epochs: keep only the checkpoint of the best test accuracy
        int fresh_state;        // --resume: --compress's error buffers, --sync-every's outer state start at zero
    } ckpt;
    double timeout;          // watchdog (watchdog.c): the longest wait in seconds, 0 = unbounded
    int wait_policy;         // WAIT_* (comms/watchdog.h): how a waiting rank spends its core
    // the planner (planner/auto.c)
    int auto_layout;         // --auto: run the layout plan --auto ranks first for this world
    char profile[PATH_LEN];  // --auto: the costs (a profile written by plan --calibrate)
} TrainConfig;

const char *choice_name(const char *choices, int index, char *buf, size_t n);

// Prints o as one line of JSON on stdout (the --json output of every command), then frees it.
struct cJSON;
void json_print(struct cJSON *o);
