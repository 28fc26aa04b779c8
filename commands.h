// commands.h: the subcommands' entry points, called by micropp.c's dispatch.
#pragma once
#include <stddef.h>
#include "base/config.h"
int cmd_train(int argc, char **argv);
int cmd_pingpong(int argc, char **argv);
int cmd_allreduce(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_bubble(int argc, char **argv);  // bubble.c
int cmd_plan(int argc, char **argv);    // plan_cmd.c
// Each stage's peak activation bytes, as train measures them (peak_activation_bytes), for `model`
// run under schedule `kind` on K stages with M micro-batches (V chunks per rank for interleaved);
// 0, or -1 with why the layout cannot run. plan_cmd.c; bubble --model prints it.
int plan_stage_activations(const TrainConfig *model, int kind, int K, int M, int V, double *act, char *why, size_t n);
