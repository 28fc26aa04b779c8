// train/options.h: the options of `micropp train` (train/options.c): the one table that config.c's machinery
// turns into the parser, the config-file reader and --help, and their defaults. TrainConfig itself is
// base/config.h's (the foundations parse it); each row names the axes it applies to.
#pragma once
#include "base/config.h"

extern const Option train_options[];
extern const OptionSection train_sections[];  // --help's titles over the table's rows
void train_config_defaults(TrainConfig *c);
