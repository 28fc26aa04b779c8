// tests/unit_idx.c: the IDX reader (idx.c) on small files this test writes itself: plain and gzip
// round trips, and every bad file a user can hand it (wrong magic, another element type, truncated
// header or data, plain or gzip, a corrupt gzip stream, a damaged gzip trailer, a missing file), each
// refused with one line that says what is wrong; the ends of a file (a gzip trailer missing or cut,
// a wrong length, bytes after the stream or after the promised data; gzip members concatenated are
// one file); the header read alone before the data; a FIFO refused at once; the hash ranks compare.
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "unit.h"
#include "base/idx.h"

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

// raw[n] as one gzip member (deflateInit2's 16 + 15 window bits: gzip framing) into out; its length.
static size_t gz_member(const void *raw, size_t n, uint8_t *out, size_t cap) {
    z_stream z = {0};
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (Bytef *)(uintptr_t)raw; z.avail_in = (uInt)n;
    z.next_out = out; z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

// The 3x4x5 images of test_round_trips as a plain IDX: 16 header bytes and 60 of data.
static size_t plain_image(uint8_t *raw) {
    const uint8_t head[16] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5};
    memcpy(raw, head, 16);
    for (int i = 0; i < 60; i++) raw[16 + i] = (uint8_t)(i * 7);
    return 76;
}

static void test_ends(void) {
    uint8_t raw[256], b[4096], c[4096];
    size_t nraw = plain_image(raw), n = gz_member(raw, nraw, b, sizeof b);
    write_bytes("whole.gz", b, n);
    Idx x;
    char err[512] = "";
    EXPECT("idx/a gzip file of one member reads whole", idx_read(path_of("whole.gz"), &x, err, sizeof err) == 0 && x.count == 60, "%s", err);
    free(x.data);
    write_bytes("notrailer.gz", b, n - 8);
    refused("idx/refuse: gzip trailer missing (its CRC never checked)", "notrailer.gz", "truncated: the gzip stream ends before its trailer");
    write_bytes("cuttrailer.gz", b, n - 3);
    refused("idx/refuse: gzip trailer cut", "cuttrailer.gz", "truncated: the gzip stream ends before its trailer");
    memcpy(c, b, n);
    c[n - 1] ^= 0x01;  // the trailer's length (ISIZE)
    write_bytes("isize.gz", c, n);
    refused("idx/refuse: gzip trailer with the wrong length", "isize.gz", "corrupt gzip stream: incorrect length check");
    memcpy(c, b, n);
    memcpy(c + n, "junk", 4);
    write_bytes("junk.gz", c, n + 4);
    refused("idx/refuse: bytes after the gzip stream, counted", "junk.gz", "4 bytes follow the end of the gzip stream");
    write_bytes("one.gz", c, n + 1);
    refused("idx/refuse: one byte after the gzip stream", "one.gz", "1 byte follows the end of the gzip stream");
    size_t k = gz_member(raw, 40, c, sizeof c);  // the header and 24 bytes, then the other 36 in a second member
    k += gz_member(raw + 40, nraw - 40, c + k, sizeof c - k);
    write_bytes("two.gz", c, k);
    int rc = idx_read(path_of("two.gz"), &x, err, sizeof err);
    EXPECT("idx/two gzip members (cat a.gz b.gz) read as one file", rc == 0 && x.count == 60 && !memcmp(x.data, raw + 16, 60), "rc %d '%s'", rc, err);
    free(rc == 0 ? x.data : NULL);
    memcpy(c, raw, nraw);
    memcpy(c + nraw, "1234567", 7);
    write_bytes("long", c, nraw + 7);
    refused("idx/refuse: a plain file longer than its header promises", "long", "the file holds 7 bytes after the 60 bytes of data");
    k = gz_member(c, nraw + 7, b, sizeof b);
    write_bytes("long.gz", b, k);
    refused("idx/refuse: a gzip stream longer than its header promises", "long.gz", "the file holds 7 bytes after the 60 bytes of data");
    const uint8_t lie[16] = {0, 0, 8, 3, 0, 0x10, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28};  // 1 Mi images of 28x28: 822 GB
    k = gz_member(lie, 16, b, sizeof b);
    write_bytes("lie.gz", b, k);
    refused("idx/refuse: a gzip header promising more than deflate can pack in the file", "lie.gz", "holds at most");
}

// The header first, the data later: a file whose data is corrupt opens, and fails only when loaded.
static void test_two_steps(void) {
    uint8_t raw[256], b[4096];
    size_t nraw = plain_image(raw);
    z_stream z = {0};
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = raw; z.avail_in = 46;  // the header and 30 bytes of data in one block, then garbage
    z.next_out = b; z.avail_out = sizeof b;
    deflate(&z, Z_SYNC_FLUSH);
    size_t n = sizeof b - z.avail_out;
    deflateEnd(&z);
    memset(b + n, 0xff, 64);
    write_bytes("headonly.gz", b, n + 64);
    Idx x;
    char err[512] = "";
    int rc = idx_open(path_of("headonly.gz"), &x, err, sizeof err);
    EXPECT("idx/idx_open reads the header alone (the data is not inflated yet)", rc == 0 && x.ndim == 3 && x.dims[0] == 3 && x.count == 60 && !x.data && x.gz,
           "rc %d '%s'", rc, err);
    rc = rc ? -1 : idx_load(&x, err, sizeof err);
    EXPECT("idx/idx_load then finds the corrupt data", rc == -1 && strstr(err, "corrupt gzip stream") && !x.data && !x.s, "rc %d '%s'", rc, err);
    (void)nraw;
    // the hash: the same bytes alike, one data byte apart differs; the header's hash alone agrees
    Idx h1, h2, o1, o2;
    write_bytes("h1", raw, nraw);
    raw[50] ^= 1;
    write_bytes("h2", raw, nraw);
    int ok = !idx_open(path_of("h1"), &o1, err, sizeof err) && !idx_open(path_of("h2"), &o2, err, sizeof err) && o1.hash == o2.hash;
    idx_close(&o1); idx_close(&o2);
    EXPECT("idx/the header's hash is the same for files that differ in the data", ok && !o1.s && !o2.s, "%s", err);
    ok = !idx_read(path_of("h1"), &h1, err, sizeof err) && !idx_read(path_of("h2"), &h2, err, sizeof err) && h1.hash != h2.hash;
    Idx again;
    ok = ok && !idx_read(path_of("h1"), &again, err, sizeof err) && again.hash == h1.hash;
    EXPECT("idx/the hash of the whole file: one byte apart differs, the same file agrees", ok, "%s", err);
    free(h1.data); free(h2.data); free(again.data);
}

static void test_fifo(void) {
    if (mkfifo(path_of("fifo"), 0600) != 0) { printf("SKIP idx/a FIFO: mkfifo failed\n"); return; }
    alarm(10);  // blocking on the FIFO would be the bug: the alarm ends the test as a failure
    refused("idx/refuse: a FIFO, at once (opening it would wait for a writer forever)", "fifo", "it is a FIFO (named pipe), not a regular file");
    refused("idx/refuse: a folder", ".", "it is a folder, not a regular file");
    alarm(0);
}

int main(void) {
    if (!mkdtemp(dir)) { printf("FAIL idx/mkdtemp\n"); return 1; }
    test_round_trips();
    test_bad_files();
    test_ends();
    test_two_steps();
    test_fifo();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("# could not remove %s\n", dir);
    return unit_failures ? 1 : 0;
}
