// tests/unit_idx.c: the IDX reader (idx.c) on small files this test writes itself: plain and gzip
// round trips, and every bad file a user can hand it (wrong magic, another element type, truncated
// header or data, plain or gzip, a corrupt gzip stream, a damaged gzip trailer, a missing file),
// each refused with one line that says what is wrong.
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>
#include "unit.h"
#include "idx.h"

static char dir[] = "/tmp/micropp-unit-idx.XXXXXX";

static const char *path_of(const char *name) {
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void write_bytes(const char *name, const void *b, size_t n) {
    FILE *f = fopen(path_of(name), "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static size_t read_bytes(const char *name, uint8_t *b, size_t cap) {
    FILE *f = fopen(path_of(name), "rb");
    size_t n = fread(b, 1, cap, f);
    fclose(f);
    return n;
}

// The file must be refused with a one-line reason containing want.
static void refused(const char *test, const char *name, const char *want) {
    Idx x;
    char err[512] = "";
    int rc = idx_read(path_of(name), &x, err, sizeof err);
    EXPECT(test, rc == -1 && strstr(err, want) && !strchr(err, '\n') && !x.data, "rc %d, reason '%s', expected '%s'", rc, err, want);
}

static void test_round_trips(void) {
    uint8_t img[3 * 4 * 5], lab[3] = {0, 9, 4};
    for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)(i * 7);
    int64_t dims[3] = {3, 4, 5}, ldims[1] = {3};
    for (int gz = 0; gz < 2; gz++) {
        char name[32], test[96];
        snprintf(name, sizeof name, "img%s", gz ? ".gz" : "");
        EXPECT(gz ? "idx/write gzip" : "idx/write plain", idx_write(path_of(name), 3, dims, img, gz) == 0, "write failed");
        Idx x;
        char err[256] = "";
        int rc = idx_read(path_of(name), &x, err, sizeof err);
        snprintf(test, sizeof test, "idx/read %s images: 3 dims 3x4x5, the same bytes", gz ? "gzip" : "plain");
        EXPECT(test, rc == 0 && x.ndim == 3 && x.dims[0] == 3 && x.dims[1] == 4 && x.dims[2] == 5 && x.count == 60 && !memcmp(x.data, img, 60),
               "rc %d '%s' ndim %d", rc, err, x.ndim);
        free(x.data);
        snprintf(name, sizeof name, "lab%s", gz ? ".gz" : "");
        idx_write(path_of(name), 1, ldims, lab, gz);
        rc = idx_read(path_of(name), &x, err, sizeof err);
        snprintf(test, sizeof test, "idx/read %s labels: 1 dim of 3", gz ? "gzip" : "plain");
        EXPECT(test, rc == 0 && x.ndim == 1 && x.dims[0] == 3 && x.data[1] == 9, "rc %d '%s'", rc, err);
        free(x.data);
    }
    uint8_t b[64];
    EXPECT("idx/a gzip file is gzip on disk (magic 1f 8b)", read_bytes("img.gz", b, sizeof b) > 2 && b[0] == 0x1f && b[1] == 0x8b, "%02x %02x", b[0], b[1]);
    EXPECT("idx/a plain file starts with the IDX magic 00 00 08 03", read_bytes("img", b, sizeof b) > 4 && !b[0] && !b[1] && b[2] == 8 && b[3] == 3, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
    int64_t none[1] = {0};
    idx_write(path_of("empty"), 1, none, lab, 0);
    Idx x;
    char err[256];
    EXPECT("idx/zero rows read as zero rows", idx_read(path_of("empty"), &x, err, sizeof err) == 0 && x.count == 0, "%s", err);
    free(x.data);
}

static void test_bad_files(void) {
    uint8_t b[4096];
    size_t n;
    refused("idx/refuse: missing file", "nothing-here", "cannot open");
    write_bytes("npy", "\x93NUMPY\x01\x00", 8);
    refused("idx/refuse: wrong magic", "npy", "wrong magic 0x93");
    write_bytes("float", "\x00\x00\x0d\x01\x00\x00\x00\x01\x00\x00\x00\x00", 12);
    refused("idx/refuse: float elements", "float", "element type 0x0d is not supported");
    write_bytes("dims0", "\x00\x00\x08\x00", 4);
    refused("idx/refuse: zero dimensions", "dims0", "wrong magic");
    write_bytes("short", "\x00\x00", 2);
    refused("idx/refuse: shorter than the magic", "short", "truncated: the magic number");
    write_bytes("hdr", "\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00", 10);
    refused("idx/refuse: truncated dimensions", "hdr", "truncated: the dimensions");
    n = read_bytes("img", b, sizeof b);
    write_bytes("cut", b, n - 7);
    refused("idx/refuse: truncated data (plain)", "cut", "truncated: the header promises 60 bytes");
    n = read_bytes("img.gz", b, sizeof b);
    write_bytes("cut.gz", b, n / 2);
    refused("idx/refuse: truncated gzip stream", "cut.gz", "truncated");
    for (size_t i = 12; i < n - 8; i++) b[i] ^= 0x5a;  // the deflate data, past the 10-byte gzip header
    write_bytes("bad.gz", b, n);
    refused("idx/refuse: corrupt gzip stream", "bad.gz", "corrupt gzip stream");
    n = read_bytes("img.gz", b, sizeof b);
    b[n - 6] ^= 0xff;  // the trailer's CRC-32
    write_bytes("crc.gz", b, n);
    refused("idx/refuse: damaged gzip trailer (CRC)", "crc.gz", "corrupt gzip stream");
    write_bytes("huge", "\x00\x00\x08\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 16);
    refused("idx/refuse: dimensions too large", "huge", "a corrupt header");
    write_bytes("lies", "\x00\x00\x08\x01\x10\x00\x00\x00\x01\x02", 10);  // 256 Mi labels promised, 2 bytes given
    refused("idx/refuse: a header that promises more than the file holds", "lies", "truncated: the header promises 268435456 bytes");
}

int main(void) {
    if (!mkdtemp(dir)) { printf("FAIL idx/mkdtemp\n"); return 1; }
    test_round_trips();
    test_bad_files();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("# could not remove %s\n", dir);
    return unit_failures ? 1 : 0;
}
