// tests/unit_safetensors.c: the safetensors writer and reader (round trip, alignment, CRC-32 of
// the bytes written), the reader's refusals of malformed files, and durable writes (an injected
// I/O error leaves neither a partial file nor a temporary one; a commit replaces a file whole).
#include <stdlib.h>
#include <unistd.h>
#include "unit.h"
#include "base/safetensors.h"

static char dir[] = "/tmp/micropp-unit-st.XXXXXX";

// A file from a JSON header (padded to 8) and n data bytes of value 0x11.
static size_t make(uint8_t *buf, const char *header, size_t n) {
    size_t h = strlen(header), padded = (h + 7) / 8 * 8;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, ' ', padded - h);
    memset(buf + 8 + padded, 0x11, n);
    return 8 + padded + n;
}

static void expect_refused(const char *name, const char *header, size_t n, const char *why) {
    static uint8_t buf[4096];
    size_t len = make(buf, header, n);
    StFile f;
    char err[512] = "";
    int rc = st_parse(buf, len, &f, err, sizeof err);
    EXPECT(name, rc == -1 && strstr(err, why), "rc %d, err '%s' (wanted '%s')", rc, err, why);
}

int main(void) {
    EXPECT("st/crc32 check value", crc32_update(0, "123456789", 9) == 0xCBF43926u, "got %08x", crc32_update(0, "123456789", 9));
    EXPECT("st/crc32 incremental", crc32_update(crc32_update(0, "1234", 4), "56789", 5) == 0xCBF43926u, "mismatch");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }

    // ---- round trip ----
    float w[6] = {1, -2, 3.5f, 4, 5, 6}, b[3] = {0.25f, -0.5f, 7};
    StSpec specs[2] = {{"layers.0.weight", 2, {3, 2}}, {"layers.0.bias", 1, {3, 0}}};
    size_t hlen;
    char *header = st_header_f32(specs, 2, "{\"step\":\"7\"}", &hlen);
    char path[256];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    StWriter wr;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int rc = st_writer_open(&wr, path) || st_writer_write(&wr, len8, 8) || st_writer_write(&wr, header, hlen) ||
             st_writer_write(&wr, w, sizeof w) || st_writer_write(&wr, b, sizeof b) || st_writer_commit(&wr);
    EXPECT("st/write", rc == 0, "%s", wr.err);
    EXPECT("st/header pads the data to 8 bytes", (8 + hlen) % 8 == 0, "8 + %zu", hlen);
    free(header);
    uint8_t *buf;
    size_t len;
    char err[512] = "";
    rc = read_file(path, 1 << 20, &buf, &len, err, sizeof err);
    EXPECT("st/read_file", rc == 0 && len == wr.bytes, "%s (len %zu, wrote %llu)", err, len, (unsigned long long)wr.bytes);
    EXPECT("st/writer's CRC-32 is the file's", rc == 0 && crc32_update(0, buf, len) == wr.crc, "mismatch");
    StFile f;
    rc = st_parse(buf, len, &f, err, sizeof err);
    EXPECT("st/parse what was written", rc == 0 && f.n == 2, "%s", err);
    if (rc == 0) {
        const StTensor *tw = st_find(&f, "layers.0.weight"), *tb = st_find(&f, "layers.0.bias");
        EXPECT("st/names, dtypes and shapes", tw && tb && !strcmp(tw->dtype, "F32") && tw->ndim == 2 && tw->shape[0] == 3 &&
               tw->shape[1] == 2 && tb->ndim == 1 && tb->shape[0] == 3, "wrong tensors");
        EXPECT("st/data", tw && tb && !memcmp(f.data + tw->begin, w, sizeof w) && !memcmp(f.data + tb->begin, b, sizeof b), "bytes differ");
        EXPECT("st/metadata", st_meta(&f, "step") && !strcmp(st_meta(&f, "step"), "7"), "step '%s'", st_meta(&f, "step"));
        st_free(&f);
    }
    free(buf);

    // ---- a commit replaces the old file whole; an injected I/O error leaves no trace ----
    rc = st_writer_open(&wr, path) || st_writer_write(&wr, "new", 3) || st_writer_commit(&wr);
    rc = rc || read_file(path, 1 << 20, &buf, &len, err, sizeof err);
    EXPECT("st/commit replaces the file", rc == 0 && len == 3 && !memcmp(buf, "new", 3), "len %zu", len);
    if (rc == 0) free(buf);
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    rc = st_writer_open(&wr, path);
    wr.fail_after = 10;
    rc = rc || st_writer_write(&wr, "0123456789abcdef", 16);
    EXPECT("st/injected I/O error", rc != 0 && strstr(wr.err, "Input/output error") && strstr(wr.err, "injected"), "rc %d err '%s'", rc, wr.err);
    st_writer_abort(&wr);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    EXPECT("st/abort leaves neither the file nor its .tmp", access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "a file remains");

    // ---- refusals ----
    StFile g;
    EXPECT("st/refuses a 5-byte file", st_parse((const uint8_t *)"abcde", 5, &g, err, sizeof err) == -1 && strstr(err, "too short"), "%s", err);
    uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    EXPECT("st/refuses a header length beyond the file", st_parse(big, 10, &g, err, sizeof err) == -1 && strstr(err, "exceeds"), "%s", err);
    expect_refused("st/refuses broken JSON", "{\"a\": ", 0, "not valid JSON");
    expect_refused("st/refuses a non-object header", "[1, 2]", 0, "not a JSON object");
    expect_refused("st/refuses an unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    expect_refused("st/refuses shape/size disagreement", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "shape needs");
    expect_refused("st/refuses a range past the data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "truncated");
    expect_refused("st/refuses overlapping tensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap");
    expect_refused("st/refuses a hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole");
    expect_refused("st/refuses trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing");
    expect_refused("st/refuses a duplicate name",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "twice");
    expect_refused("st/refuses a negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "not a non-negative integer");
    expect_refused("st/refuses an overflowing shape",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "too many");
    expect_refused("st/refuses non-string metadata", "{\"__metadata__\":{\"step\":3}}", 0, "not a string");
    snprintf(path, sizeof path, "rm -rf %s", dir);
    if (system(path) != 0) printf("# could not remove %s\n", dir);
    return unit_failures ? 1 : 0;
}
