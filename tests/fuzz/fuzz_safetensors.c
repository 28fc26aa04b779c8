// tests/fuzz/fuzz_safetensors.c: libFuzzer target of the safetensors reader (st_parse): any input
// must parse into tensors whose byte ranges lie inside the input, or fail with a reason.
#include <string.h>
#include "base/safetensors.h"
#include "fuzz_stubs.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    StFile f;
    char err[512] = "";
    if (st_parse(data, size, &f, err, sizeof err) == 0) {
        volatile unsigned char sum = 0;
        for (int i = 0; i < f.n; i++) {
            if (st_find(&f, f.t[i].name) != &f.t[i]) abort();  // names are unique
            for (uint64_t b = f.t[i].begin; b < f.t[i].end; b++) sum ^= f.data[b];  // ranges in bounds
        }
        (void)st_meta(&f, "step");
        st_free(&f);
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
