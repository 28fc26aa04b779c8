// tests/fuzz/fuzz_npy.c: libFuzzer target of the .npy reader (npy_read): any input must give an
// array whose data the header describes, or an error message, never a crash or a leak.
#include <string.h>
#include "data.h"
#include "fuzz_stubs.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    Npy a;
    char err[512];
    if (npy_read(input_path(data, size), &a, err, sizeof err) == 0) {
        size_t esize = strcmp(a.dtype, "<i8") ? 4 : 8, n = 1;
        for (int i = 0; i < a.ndim; i++) n *= (size_t)a.shape[i];
        volatile unsigned char sum = 0;  // touch every byte the header promised
        for (size_t i = 0; i < n * esize; i++) sum ^= ((unsigned char *)a.data)[i];
        free(a.data);
    } else if (!err[0]) {
        abort();  // a failure must say why
    }
    return 0;
}
