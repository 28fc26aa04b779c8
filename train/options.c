// train/options.c: the options of `micropp train` in one table (flag, JSON key, type, range, help)
// that config.c's machinery turns into the parser, the config-file reader and --help, and their
// defaults. The values of each choice are the enums of the code that owns them.
#include <string.h>
#include "comms.h"
#include "base/config.h"
#include "axes/data.h"
#include "train/live.h"
#include "model.h"
#include "train/plan.h"
#include "axes/tensor.h"
#include "axes/expert.h"
#include "schedule.h"
#include "train/options.h"

#define T(field) offsetof(TrainConfig, field)
const Option train_options[] = {
    {"config", 'c', OPT_STR, T(config), 0, 0, 0, "FILE", "JSON file of options (keys = flag names)", 0},
    {"mode", 'm', OPT_CHOICE, T(grid.mode), MODE_CHOICES, 0, 0, "MODE",
     "a spelling of the degrees: monolith (pp 1 x dp 1), manual (--pp P parts in one process), pp (a stage per rank), "
     "ddp (a replica per rank), hybrid (--pp x --dp); without it the degrees alone describe the run",
     0},
    {"layers", 'L', OPT_INT, T(layers), 0, 1, MAX_LAYERS, "L", "hidden layers, each Linear(H,H)+ReLU", 0},
    {"hidden", 'H', OPT_INT, T(hidden), 0, 1, 65536, "H", "hidden size", 0},
    {"inputs", 0, OPT_INT, T(inputs), 0, 0, 1 << 24, "D", "input features: layer 0 is Linear(D,H) (0: D = --hidden)",
     0},
    {"classes", 'C', OPT_INT, T(classes), 0, 2, 65536, "C", "output classes", 0},
    {"batch", 'B', OPT_INT, T(batch), 0, 1, 1 << 24, "B", "global batch size (rows per step)", 0},
    {"steps", 0, OPT_INT, T(steps), 0, 1, 1 << 30, "N",
     "optimizer steps in total (with --resume: train up to step N)", 0},
    {"epochs", 0, OPT_INT, T(epochs), 0, 0, 1 << 20, "N",
     "real data: N shuffled passes over the training set instead of --steps (last partial batch dropped)", 0},
    {"lr", 0, OPT_FLOAT, T(lr), 0, 1e-12, 1e3, "LR",
     "learning rate (the peak, with --lr-schedule cosine or --warmup-steps)", 0},
    {"lr-schedule", 0, OPT_CHOICE, T(optim.lr_schedule), LR_CHOICES, 0, 0, "SCHED",
     "learning rate over the run: constant, or cosine from --lr down to --min-lr at the last step", 0},
    {"min-lr", 0, OPT_FLOAT, T(optim.min_lr), 0, 0, 1e3, "LR",
     "--lr-schedule cosine: the learning rate at the last step (Megatron's --min-lr; at most --lr)", 0},
    {"diverge-factor", 0, OPT_FLOAT, T(guard.diverge_factor), 0, 0, 1e30, "F",
     "end the run (exit 1) when the loss stays above F x the first step's for 3 steps in a row (0: never)", 0},
    {"warmup-steps", 0, OPT_INT, T(optim.warmup_steps), 0, 0, 1 << 30, "N",
     "linear warm-up of the learning rate over the first N steps (at most the run's steps)", 0},
    {"optimizer", 0, OPT_CHOICE, T(optimizer), OPTIM_CHOICES, 0, 0, "OPT", "adam (PyTorch semantics) or plain sgd", 0},
    {"adam-beta1", 0, OPT_FLOAT, T(optim.adam_beta1), 0, 0, 0.999999, "B1",
     "adam: decay of the gradient's running mean (PyTorch's betas[0])", 0},
    {"adam-beta2", 0, OPT_FLOAT, T(optim.adam_beta2), 0, 0, 0.999999, "B2",
     "adam: decay of the squared gradient's running mean (PyTorch's betas[1])", 0},
    {"adam-eps", 0, OPT_FLOAT, T(optim.adam_eps), 0, 1e-30, 1, "EPS", "adam: added to the denominator's root", 0},
    {"weight-decay", 0, OPT_FLOAT, T(weight_decay), 0, 0, 1e3, "WD",
     "decoupled weight decay (adam: AdamW, PyTorch semantics): p *= 1 - lr x WD each step", 0},
    {"clip-grad", 0, OPT_FLOAT, T(guard.clip_grad), 0, 1e-30, 1e30, "NORM",
     "scale every gradient by min(1, NORM / (norm + 1e-6)) before the optimizer step, norm the global L2 norm of all "
     "of them (PyTorch's clip_grad_norm_)",
     0},
    {"post-validate", 0, OPT_BOOL, T(guard.post_validate), 0, 0, 0, 0,
     "steps overlap: no barrier between steps, each rank updates at once and the global check (a non-finite "
     "gradient anywhere, --clip-grad's norm) and the loss arrive a step later; a failed step is undone and skipped "
     "on every rank, a clipped one redone",
     0},
    {"experts", 0, OPT_INT, T(moe.experts), 0, 0, 4096, "E",
     "mixture of experts: hidden layers after layer 0 (--moe-every) become a router and E experts Linear(H,H)+ReLU "
     "(0: dense; docs/experts.md)",
     0},
    {"moe-every", 0, OPT_INT, T(moe.every), 0, 1, MAX_LAYERS, "N",
     "--experts: every Nth hidden layer is an MoE layer (global layers l >= 1 with l % N == 0)", 0},
    {"top-k", 0, OPT_INT, T(moe.top_k), 0, 1, 4096, "K", "--experts: experts per row, their gates renormalised", 0},
    {"capacity-factor", 0, OPT_FLOAT, T(moe.capacity), 0, 1e-3, 4096, "CF",
     "--experts: an expert takes at most ceil(CF x rows x K / E) rows of a micro-batch (at most E); the rest are "
     "dropped",
     0},
    {"aux-loss", 0, OPT_FLOAT, T(moe.aux), 0, 0, 1e3, "A",
     "--experts: coefficient of the load-balancing loss A x E x sum_e f_e P_e (Switch), added per MoE layer", 0},
    {"seed", 's', OPT_INT, T(seed), 0, 0, 9.0e15, "S", "seed of weights and synthetic data", 0},
    {"threads", 't', OPT_INT, T(threads), 0, 1, 1024, "T", "BLAS threads per rank", 0},
    {"data", 0, OPT_STR, T(data), 0, 0, 0, "SRC",
     "'synthetic', 'fashion-mnist' (Debian's dataset-fashion-mnist), a folder of MNIST-style IDX files, or a features "
     "FILE (.npy float32 [N,D], or IDX images)",
     0},
    {"labels", 0, OPT_STR, T(labels), 0, 0, 0, "FILE", "labels for --data FILE: .npy (int32/int64 [N]) or IDX labels",
     0},
    {"test-data", 0, OPT_STR, T(test_data), 0, 0, 0, "FILE",
     "held-out test features (.npy or IDX) for --data FILE: accuracy is measured on them", 0},
    {"test-labels", 0, OPT_STR, T(test_labels), 0, 0, 0, "FILE", "labels of --test-data", 0},
    {"log-every", 0, OPT_INT, T(log_every), 0, 0, 1 << 30, "N", "print a line every N steps (0: never)", 0},
    {"json", 0, OPT_BOOL, T(json), 0, 0, 0, 0, "print one JSON object on stdout instead of text", 0},
    {"metrics", 0, OPT_STR, T(observe.metrics), 0, 0, 0, "FILE.jsonl",
     "write a JSON line per step (loss, lr, time, bubble), per evaluation and per epoch, as the run goes ('-': "
     "standard output, with --json; --resume keeps the lines up to its step); micropp plot draws them",
     0},
    {"metrics-every", 0, OPT_INT, T(observe.metrics_every), 0, 0, 1 << 30, "N",
     "--metrics: a step's line every N steps, whatever --log-every prints (0: none, evaluations and epochs only)", 0},
    {"eval-every", 0, OPT_INT, T(observe.eval_every), 0, 0, 1 << 30, "N",
     "evaluate on the held-out rows every N steps: a line, and a test point in --metrics (0: at the end, and after "
     "each epoch)",
     0},
    {"live", 0, OPT_CHOICE, T(observe.live), LIVE_CHOICES, 0, 0, "WHEN",
     "a line rewritten in place with the steps done, samples/s and the time left: on a terminal (auto), also on "
     "a pipe (on: mpiexec hands rank 0 a pipe), or never",
     0},
    {"samples", 0, OPT_INT, T(samples), 0, 0, 1LL << 40, "N",
     "synthetic: training set of N samples, cycled (0: one fixed batch, as the course)", 0},
    {"eval-samples", 0, OPT_INT, T(eval_samples), 0, 0, 1 << 24, "N",
     "held-out samples for the accuracy (synthetic data; with a test split: the whole split unless given)", 0},
    {"schedule", 'S', OPT_CHOICE, T(pipe.schedule), SCHED_CHOICES, 0, 0, "SCHED", "pipeline (--pp): its schedule",
     AXIS_PIPELINE},
    {"schedule-file", 0, OPT_STR, T(pipe.schedule_file), 0, 0, 0, "FILE.csv",
     "pipeline (--pp): run the schedule in FILE: a row per rank of actions like 0F0,0I0,0W0 (PyTorch's notation; "
     "'micropp bubble --dump-csv' writes one)",
     AXIS_PIPELINE},
    {"micro-batches", 'M', OPT_INT, T(pipe.micro_batches), 0, 1, 1 << 20, "M",
     "pipeline (--pp): micro-batches per step (per replica with --dp), a count: each holds --batch / M rows",
     AXIS_PIPELINE},
    {"virtual-stages", 0, OPT_INT, T(pipe.virtual_stages), 0, 1, 64, "V",
     "pipeline (--pp), interleaved and looped-bfs: model chunks per rank (rank r holds chunks r, r+K, ...)",
     AXIS_PIPELINE},
    {"max-inflight", 0, OPT_INT, T(pipe.max_inflight), 0, 0, 1 << 20, "N",
     "pipeline (--pp), zb-auto: the most micro-batches a stage may hold from F to W, its search's limit (0: 2 x "
     "stages)",
     AXIS_PIPELINE},
    {"partition", 0, OPT_STR, T(pipe.partition), 0, 0, 0, "LIST",
     "pipeline (--pp): layers per stage (interleaved: per chunk, in pipeline order), e.g. 5,4,4,3 (default: even "
     "split)",
     AXIS_PIPELINE},
    {"checkpoint-activations", 0, OPT_BOOL, T(pipe.checkpoint_activations), 0, 0, 0, 0,
     "pipeline (--pp): keep only stage inputs, recompute in backward", AXIS_PIPELINE},
    {"verify", 0, OPT_BOOL, T(verify), 0, 0, 0, 0,
     "after step 1 compare loss and gradients with a monolith reference computed on the CPU", 0},
    {"trace", 0, OPT_STR, T(observe.trace), 0, 0, 0, "FILE.json",
     "pp, ddp, hybrid, any mode with --tp: write a Chrome trace of every step, a track per rank and one for its "
     "collectives (Perfetto)",
     AXIS_PIPELINE | AXIS_DATA | AXIS_TENSOR},
    {"timeline", 0, OPT_STR, T(observe.timeline), 0, 0, 0, "FILE.svg",
     "pp, hybrid: draw one step's measured Gantt chart (and the simulated one) as SVG; ddp: the step's forward, "
     "backward and bucket all-reduces",
     AXIS_PIPELINE | AXIS_DATA},
    {"timeline-step", 0, OPT_INT, T(observe.timeline_step), 0, 0, 1 << 30, "N",
     "pp, hybrid, ddp: the step drawn by --timeline and --gantt (0: the median-time step)", AXIS_PIPELINE | AXIS_DATA},
    {"gantt", 0, OPT_BOOL, T(observe.gantt), 0, 0, 0, 0,
     "pp, hybrid: print that step's measured Gantt chart at the end", AXIS_PIPELINE},
    {"width", 0, OPT_INT, T(observe.gantt_width), 0, 0, 100000, "N",
     "--gantt: each chart at most N columns wide, labels included (0: $COLUMNS on a terminal, else 160)",
     AXIS_PIPELINE},
    {"device", 0, OPT_CHOICE, T(device), DEVICE_CHOICES, 0, 0, "DEV",
     "where to train: auto = cuda when every rank sees a GPU, else cpu", 0},
    {"transport", 0, OPT_CHOICE, T(transport), TRANSPORT_CHOICES, 0, 0, "T",
     "pp or --tp on cuda: nccl (one GPU per rank; with --tp the group's all-reduce too) or mpi (via pinned host "
     "memory; ranks may share a GPU); auto = mpi until NCCL has run on 2+ GPUs",
     AXIS_PIPELINE | AXIS_TENSOR},
    {"tf32", 0, OPT_BOOL, T(gemm.tf32), 0, 0, 0, 0,
     "cuda: let cuBLAS round fp32 gemm inputs to TF32 (tensor cores; ~1e-3 relative error)", 0},
    {"precision", 0, OPT_CHOICE, T(precision), PRECISION_CHOICES, 0, 0, "P",
     "matrix products: fp32, or bf16 inputs with fp32 accumulation (cpu: oneDNN; weights, gradients, optimizer and "
     "loss stay fp32)",
     0},
    {"gemm-timing", 0, OPT_BOOL, T(gemm.timing), 0, 0, 0, 0,
     "time every gemm and report the share of step time in BLAS and its GFLOP/s", 0},
    {"deterministic", 0, OPT_BOOL, T(gemm.deterministic), 0, 0, 0, 0,
     "every sum in one canonical order: the same weights, bit for bit, on every layout (cpu; docs/determinism.md)",
     0},
    {"det-rows", 0, OPT_INT, T(gemm.det_rows), 0, 1, 4096, "N",
     "--deterministic: the canonical chunk, a power of two: every product and gradient leaf over N rows (a "
     "micro-batch holds whole chunks)",
     0},
    {"auto", 0, OPT_BOOL, T(auto_layout), 0, 0, 0, 0,
     "run the layout micropp plan --auto ranks first for these ranks (with --profile); prints its prediction", 0},
    {"profile", 0, OPT_STR, T(profile), 0, 0, 0, "FILE",
     "the costs measured by micropp plan --calibrate: --auto picks by them; without --auto the summary prints the "
     "layout's prediction beside its measured step", 0},
    {"pp", 0, OPT_INT, T(grid.pp), 0, 1, 4096, "P",
     "pipeline stages, a degree: ranks = P x D x T (0: not given, 1; --mode pp: the ranks; --mode manual: the parts "
     "in one process, 2)",
     0},
    {"dp", 0, OPT_INT, T(grid.dp), 0, 1, 1 << 20, "D",
     "data-parallel replicas, a degree: ranks = P x D x T (0: not given, the ranks left, ranks / (P x T))", 0},
    {"tp", 0, OPT_INT, T(grid.tp), 0, 1, 4096, "T",
     "tensor parallelism: T adjacent ranks share each stage's layers (Megatron's column/row pairs; --hidden divisible "
     "by T), a degree: ranks = P x D x T",
     0},
    {"ep", 0, OPT_INT, T(grid.ep), 0, 1, 4096, "N",
     "expert parallelism: N replicas of a stage share each MoE layer's experts, E/N each, their rows exchanged by an "
     "all-to-all (N divides dp and --experts; docs/experts.md)",
     AXIS_DATA},
    {"alltoall", 0, OPT_CHOICE, T(moe.alltoall), ALLTOALL_CHOICES, 0, 0, "ALG",
     "--ep's all-to-all: MPI_Alltoallv, pairwise messages, shared memory (one node), or auto: nccl under --transport "
     "nccl, else shm where the group sits on one node, else mpi",
     AXIS_DATA},
    {"ep-overlap", 0, OPT_CHOICE, T(moe.overlap), EP_OVERLAP_CHOICES, 0, 0, "WHEN",
     "--ep: on (default) starts each all-to-all of rows and runs the layer's own rows through its experts (and, "
     "backward, the router) while the other ranks' travel; off waits for each exchange as soon as it starts; pair "
     "(pipelines) also runs a stage's forward of one micro-batch and the backward of another that follows it in "
     "turn, each one's all-to-all in flight during the other's compute. The same bits every way",
     AXIS_DATA},
    {"tp-message", 0, OPT_CHOICE, T(tensor.tp_message), TP_MESSAGE_CHOICES, 0, 0, "M",
     "--tp with a pipeline: a message between two groups as the whole activation from every rank (full), or each "
     "rank's 1/T slice and an all-gather on the receiving side (slice); auto: both timed at start-up, the faster "
     "kept",
     AXIS_TENSOR | AXIS_PIPELINE | AXES_ALL},
    {"placement", 0, OPT_CHOICE, T(ddp.placement), PLACEMENT_CHOICES, 0, 0, "P",
     "hybrid: what sits on adjacent ranks (one node): stages = each replica's pipeline, replicas = each stage's "
     "data-parallel group; auto = the side with more traffic per step",
     AXIS_PIPELINE | AXIS_DATA | AXES_ALL},
    {"ddp-sync", 0, OPT_CHOICE, T(ddp.ddp_sync), SYNC_CHOICES, 0, 0, "SYNC",
     "data parallel (--dp): naive = one all-reduce per tensor after backward; bucketed = overlapped with backward",
     AXIS_DATA},
    {"allreduce", 0, OPT_CHOICE, T(ddp.allreduce), ALLREDUCE_CHOICES, 0, 0, "ALG",
     "ddp/hybrid and --tp's group: MPI's own collectives, the from-scratch ring, shared memory (one node), rings "
     "inside and across nodes (hier), or auto: shm where it can, hier across nodes of 2+ replicas each, else mpi",
     AXIS_DATA | AXIS_TENSOR},
    {"bucket-mb", 0, OPT_FLOAT, T(ddp.bucket_mb), 0, 0, 1e12, "MB",
     "ddp/hybrid bucketed: bucket capacity in MiB (0: 2 layers' gradients, at most 25 as PyTorch's)", AXIS_DATA},
    {"grad-accum", 0, OPT_INT, T(grad_accum), 0, 1, 1 << 20, "N",
     "monolith/ddp: N micro-steps of --batch rows per optimizer step", 0},
    {"zero", 0, OPT_INT, T(ddp.zero), 0, 0, 3, "Z",
     "data parallel (--dp): ZeRO stage, sharded over the replicas: 1 = optimizer state, 2 = + gradients, 3 = + "
     "parameters",
     AXIS_DATA},
    {"sync-every", 0, OPT_INT, T(ddp.sync_every), 0, 1, 1 << 30, "H",
     "data parallel (--dp): local SGD / DiLoCo: each replica steps alone H steps, then their mean move from the "
     "anchor is all-reduced and an outer optimizer moves the anchor (and the run's last step); ZeRO 0 only",
     AXIS_DATA},
    {"outer-lr", 0, OPT_FLOAT, T(ddp.outer_lr), 0, 1e-12, 1e3, "LR",
     "--sync-every: the outer optimizer's learning rate (DiLoCo's 0.7; 1 with --outer-momentum 0: the mean)",
     AXIS_DATA},
    {"outer-momentum", 0, OPT_FLOAT, T(ddp.outer_momentum), 0, 0, 0.999999, "MU",
     "--sync-every: the outer optimizer's Nesterov momentum (DiLoCo's 0.9; 0: none)", AXIS_DATA},
    {"compress", 0, OPT_STR, T(ddp.compress), 0, 0, 0, "SPEC",
     "data parallel (--dp): topk:F, each bucket sends its F largest-magnitude gradients (index, value), the rest "
     "kept in an error buffer added to the next step's (error feedback); powersgd:R, each weight matrix a rank-R "
     "product (PowerSGD); sign, each weight matrix's signs and mean magnitude; ZeRO 0 only",
     AXIS_DATA},
    {"save", 0, OPT_STR, T(ckpt.save), 0, 0, 0, "DIR",
     "write checkpoints (safetensors per stage + manifest.json) to DIR, at the end and every --save-every", 0},
    {"save-every", 0, OPT_INT, T(ckpt.save_every), 0, 0, 1 << 30, "N",
     "with --save: also save after every N steps (0: only at the end)", 0},
    {"timeout", 0, OPT_FLOAT, T(timeout), 0, 0, 1e7, "S",
     "watchdog: a rank waiting this many seconds for another ends the job, naming the action and the peer (0: wait "
     "forever; else at least 1: a healthy run waits that long at times)",
     0},
    {"wait-policy", 0, OPT_CHOICE, T(wait_policy), WAIT_POLICY_CHOICES, 0, 0, "W",
     "how a rank waiting for another spends its core: active spins (yielding it where a node has more ranks than "
     "cores), passive sleeps after a short spin, auto is passive where a node has more ranks than cores; the same "
     "numbers either way (default: MICROPP_WAIT_POLICY, else active)",
     0},
    {"resume", 0, OPT_STR, T(ckpt.resume), 0, 0, 0, "DIR",
     "continue from the checkpoint in DIR (any mode or partition); --steps stays the total", 0},
    {"save-best", 0, OPT_BOOL, T(ckpt.save_best), 0, 0, 0, 0,
     "with --save DIR and --epochs: after each epoch's evaluation, save when the test accuracy is the best so far (DIR "
     "keeps the best)",
     0},
    {"fresh-state", 0, OPT_BOOL, T(ckpt.fresh_state), 0, 0, 0, 0,
     "with --resume and --compress or --sync-every: start the error buffers (--compress) or the outer momentum "
     "(--sync-every; each replica's Adam moments: the checkpoint's) at zero instead of reading them from DIR (a "
     "checkpoint saved without them)",
     AXIS_DATA},
    {0},
};
#undef T

const OptionSection train_sections[] = {
    {"config", "The run and the model"},
    {"lr", "Optimizer"},
    {"seed", "Seed and threads"},
    {"data", "Data"},
    {"log-every", "Output"},
    {"samples", "Synthetic data"},
    {"schedule", "Pipeline (--pp)"},
    {"verify", "Checking and observing"},
    {"device", "Device"},
    {"auto", "Planner"},
    {"pp", "Degrees: ranks = P x D x T"},
    {"tp-message", "Tensor parallelism (--tp)"},
    {"placement", "Data parallelism (--dp)"},
    {"save", "Checkpoints and the watchdog"},
    {0},
};

void train_config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof *c);
    c->grid.mode = MODE_MONOLITH;
    c->layers = 16;
    c->hidden = 128;
    c->classes = 2;
    c->batch = 32;
    c->steps = 50;
    c->lr = 1e-3;
    c->optim.adam_beta1 = ADAM_BETA1;
    c->optim.adam_beta2 = ADAM_BETA2;
    c->optim.adam_eps = ADAM_EPS;
    c->optimizer = OPTIM_ADAM;
    c->seed = 42;
    c->threads = 1;
    strcpy(c->data, "synthetic");
    c->log_every = 10;
    c->observe.metrics_every = 1;
    c->eval_samples = 1024;
    c->pipe.schedule = SCHED_1F1B;
    c->pipe.micro_batches = 4;
    c->gemm.det_rows = 32;
    c->pipe.virtual_stages = 2;
    c->ddp.ddp_sync = SYNC_BUCKETED;
    c->ddp.allreduce = ALLREDUCE_AUTO;
    c->ddp.placement = PLACEMENT_AUTO;
    c->grid.tp = 1;
    c->grid.ep = 1;
    c->moe.alltoall = ALLTOALL_AUTO;
    c->moe.overlap = 1;
    c->tensor.tp_message = TP_MESSAGE_AUTO;
    c->grad_accum = 1;
    c->ddp.outer_lr = 0.7;
    c->ddp.outer_momentum = 0.9;
    c->moe.every = 1;
    c->moe.top_k = 2;
    c->moe.capacity = 1.25;
    c->moe.aux = 0.01;
    c->guard.diverge_factor = 100;
    c->timeout = WD_DEFAULT_TIMEOUT;
}
