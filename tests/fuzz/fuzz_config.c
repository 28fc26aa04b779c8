// tests/fuzz/fuzz_config.c: libFuzzer target of the JSON config reader (options_load_json with the
// train table): any input must end in a parsed config or a user_error, never a crash.
// Leaks on the user_error path are by design (the real program exits there): fuzz with -detect_leaks=0.
#include <string.h>
#include "base/config.h"
#include "fuzz_stubs.h"
#include "train/options.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    const char *path = input_path(data, size);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    user_error_armed = 1;
    if (setjmp(user_error_jump) == 0) options_load_json("train", train_options, &cfg, NULL, path);
    user_error_armed = 0;
    return 0;
}
