// tests/fuzz/fuzz_npy.c: libFuzzer target of the data files' readers: the .npy reader (npy_read) and
// the IDX reader (idx_read, plain or gzip, linked here with data.c). Any input must give an array
// whose data the header describes, or an error message, never a crash or a leak.
#include <string.h>
#include "base/data.h"
#include "base/idx.h"
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
    Idx x;
    err[0] = 0;
    if (idx_read(input_path(data, size), &x, err, sizeof err) == 0) {
        size_t n = 1;
        for (int i = 0; i < x.ndim; i++) n *= (size_t)x.dims[i];
        if (n != x.count || x.s) abort();
        volatile unsigned char sum = 0;
        for (size_t i = 0; i < x.count; i++) sum ^= x.data[i];
        free(x.data);
    } else if (!err[0] || x.data || x.s) {
        abort();
    }
    return 0;
}
