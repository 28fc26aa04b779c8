// commands.h: the subcommands' entry points, called by micropp.c's dispatch.
#pragma once
int cmd_train(int argc, char **argv);
int cmd_pingpong(int argc, char **argv);
int cmd_allreduce(int argc, char **argv);
int cmd_alltoall(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_bubble(int argc, char **argv);  // bubble.c
int cmd_plan(int argc, char **argv);    // plan_cmd.c
int cmd_plot(int argc, char **argv);    // plot.c
