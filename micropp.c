// micropp.c: the entry point: picks the fastest BLAS kernel the CPU supports, then dispatches to a
// subcommand (the table below: train, bubble, plan, plot, pingpong, allreduce, alltoall, selftest). Each
// subcommand's options live in one table that also prints its --help.
#include <string.h>
#include "base/config.h"
#include "base/ops.h"
#include "base/suggest.h"
#include "commands.h"
#include "base/util.h"

#define MICROPP_VERSION "0.1.0"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} Command;

static const Command commands[] = {
    {"train", cmd_train, "train the MLP: monolith, manual split, pipeline- and/or data-parallel over MPI"},
    {"bubble", cmd_bubble, "predict schedules without running them: bubble, memory, Gantt chart (no MPI)"},
    {"plan", cmd_plan, "the memory wall per schedule and stages; --auto: every layout ranked by its predicted step"},
    {"plot", cmd_plot, "draw train --metrics logs as curves: loss, accuracy, learning rate, step time (SVG, no MPI)"},
    {"pingpong", cmd_pingpong, "send a tensor between 2 ranks; --sweep measures latency and bandwidth"},
    {"allreduce", cmd_allreduce, "time the data-parallel all-reduce over all ranks: MPI's own, the ring, shm"},
    {"alltoall", cmd_alltoall, "time expert parallelism's all-to-all over all ranks: MPI's own, pairwise, shm, nccl"},
    {"selftest", cmd_selftest, "check every backend operation and a training step (GPU vs CPU, or CPU vs naive loops)"},
    {0},
};

static void usage(FILE *f) {
    fprintf(f, "micropp %s: pipeline-parallel training of a deep MLP, in C, over MPI\n\n"
               "Usage: micropp COMMAND [options]       (under mpiexec -n N for several ranks)\n\nCommands:\n",
            MICROPP_VERSION);
    for (const Command *c = commands; c->name; c++) fprintf(f, "  %-10s %s\n", c->name, c->summary);
    fprintf(f, "\nmicropp help COMMAND (or micropp COMMAND --help) shows a command's options; micropp --version its "
               "version.\n\n"
               "Examples:\n  micropp train\n  mpiexec -n 4 micropp train --mode pp --schedule 1f1b --micro-batches 8\n"
               "  micropp bubble --schedule gpipe --stages 4 --micro-batches 4 --gantt\n"
               "  micropp plan --params 10B --device-memory 24G\n"
               "  micropp plot run.jsonl --svg run.svg\n"
               "  mpiexec -n 2 micropp pingpong --sweep\n  micropp selftest --device cuda\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    util_set_command(argc, argv);  // (fix hints echo it whole)
    char *help_argv[] = {argv[0], argc > 2 ? argv[2] : NULL, "--help", NULL};
    if (!strcmp(argv[1], "help") && argc == 3) {  // micropp help CMD = micropp CMD --help
        argc = 3;
        argv = help_argv;
    } else if (!strcmp(argv[1], "help") && argc > 3) {
        user_error("help takes one command: micropp help %s (or micropp %s --help)", argv[2], argv[2]);
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return stdout_closed_ok() ? 0 : 1;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("micropp %s\n", MICROPP_VERSION);
        return stdout_closed_ok() ? 0 : 1;
    }
    for (const Command *c = commands; c->name; c++) {
        if (strcmp(argv[1], c->name)) continue;
        blas_pick_kernel(argv);
        int code = c->run(argc - 1, argv + 1);
        return stdout_closed_ok() ? code : 1;
    }
    const char *names[16];
    int n = 0;
    for (const Command *c = commands; c->name && n < 16; c++) names[n++] = c->name;
    const char *near = nearest_name(argv[1], names, n);
    user_error("unknown command '%s'%s%s%s: use one of train, bubble, plan, plot, pingpong, allreduce, alltoall, "
               "selftest (see micropp --help)",
               argv[1], near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
}
