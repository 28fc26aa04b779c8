// tests/fuzz/replay_main.c: runs a fuzz target over saved inputs without libFuzzer (any C compiler):
// `replay_X FILE...` calls LLVMFuzzerTestOneInput on each file; a crash is a failed test.
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) { perror(argv[i]); return 1; }
        size_t cap = 1 << 16, n = 0;
        unsigned char *buf = malloc(cap);
        size_t k;
        while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
            n += k;
            if (n == cap) {
                unsigned char *grown = realloc(buf, cap *= 2);
                if (!grown) free(buf);  // (a failed realloc keeps the old block)
                buf = grown;
            }
        }
        fclose(f);
        if (!buf) { fprintf(stderr, "out of memory reading %s\n", argv[i]); return 1; }
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
