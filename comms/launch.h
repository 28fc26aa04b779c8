// launch.h: the launch agreement. Before any other message every rank shows what it was started to
// do (the binary's build id, the subcommand and its words); once the options are parsed, every
// resolved option. A difference ends every rank with exit 2, naming the first option that differs
// and the ranks on each side; otherwise ranks started alike would wait on each other forever.
#pragma once

// Called by comm_init right after MPI_Init (argv[0] is the subcommand). Collective over the world.
// It also hooks launch_agree_options into options_parse, so every subcommand's resolved options
// are compared as soon as they are parsed, and installs agree_on_contents's comparison (util.h), so
// the files every rank reads (--data, --schedule-file, ...) are compared as they are read.
void launch_agree_argv(int argc, char **argv);
// resolved: "name=value\n" for every option of cmd's table (options_parse makes it).
void launch_agree_options(const char *cmd, const char *resolved);
const char *launch_build_id(void);
// The host this rank runs on as mpiexec (Hydra) named it from its -hosts list, else as Slurm names the
// node (SLURMD_NODENAME), else the machine's name.
void launch_host_name(char *b, size_t n);  // the binary's GNU build id in hex, "unknown" without one
// Whether every rank runs on one node by the launcher's word (Hydra's MPI_LOCALNRANKS), agreed by all (1 or
// 0 alike on every rank; comm_choose_hardware asks, collective over the world). launch_world_one_node: its
// last answer (0 before), so that any group of ranks knows it shares a node without asking MPI.
int launch_one_node(int size);
int launch_world_one_node(void);
