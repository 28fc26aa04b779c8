// tests/unit_bf16.c: bf16 rounding (ops_math.h) against hand-worked bit patterns (ties to even,
// NaN, Inf, subnormals, overflow past the largest finite), and the CPU backend's bf16 gemm
// (oneDNN) against fp32 and bf16-input references for every transpose, alpha, beta and padding.
// Also the backend's bf16 packing, bias_grad's rounding, and that bf16 stashes (model.c) leave gradients unchanged.
#include <stdlib.h>
#include "unit.h"
#include "base/data.h"
#include "model.h"
#include "base/ops.h"
#include "base/util.h"

static float from_bits(uint32_t u) { return f32_from_bits(u); }

static void test_round(void) {
    static const struct { uint32_t in; uint16_t out; const char *what; } cases[] = {
        {0x3f800000u, 0x3f80, "1.0 exact"},
        {0x3f807fffu, 0x3f80, "just below half an ulp: down"},
        {0x3f808000u, 0x3f80, "tie, kept bit even: down"},
        {0x3f808001u, 0x3f81, "just above half an ulp: up"},
        {0x3f818000u, 0x3f82, "tie, kept bit odd: up to even"},
        {0xbf808000u, 0xbf80, "negative tie: to even"},
        {0xbf818000u, 0xbf82, "negative tie, odd: away to even"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x7f800000u, 0x7f80, "+Inf stays Inf"},
        {0xff800000u, 0xff80, "-Inf stays Inf"},
        {0x7fc00000u, 0x7fc0, "quiet NaN"},
        {0x7f800001u, 0x7fc0, "NaN with its payload in the dropped bits only: still NaN, quiet"},
        {0xff800001u, 0xffc0, "negative signalling NaN: quiet, sign kept"},
        {0x7fa00000u, 0x7fe0, "signalling NaN with a payload: quiet, payload kept"},
        {0x7f7f0000u, 0x7f7f, "largest finite bf16 exact"},
        {0x7f7f7fffu, 0x7f7f, "below half a step past the largest finite: stays finite"},
        {0x7f7f8000u, 0x7f80, "tie past the largest finite (odd): overflows to Inf"},
        {0x7f7fffffu, 0x7f80, "largest finite fp32: overflows to Inf"},
        {0xff7fffffu, 0xff80, "most negative finite fp32: -Inf"},
        {0x00000001u, 0x0000, "smallest subnormal: to +0"},
        {0x00008000u, 0x0000, "subnormal tie, even: to 0"},
        {0x00008001u, 0x0001, "subnormal above the tie: smallest bf16 subnormal"},
        {0x00018000u, 0x0002, "subnormal tie, odd: up to even"},
        {0x007fffffu, 0x0080, "largest subnormal: carries into the smallest normal"},
        {0x80018000u, 0x8002, "negative subnormal tie, odd: to even"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = bf16_from_f32(from_bits(cases[i].in));
        char name[160];
        snprintf(name, sizeof name, "bf16/round %08x: %s", cases[i].in, cases[i].what);
        EXPECT(name, got == cases[i].out, "got %04x, want %04x", got, cases[i].out);
    }
    EXPECT("bf16/widen 1.0", bf16_to_f32(0x3f80) == 1.0f, "got %g", bf16_to_f32(0x3f80));
    EXPECT("bf16/widen -2.5", bf16_to_f32(0xc020) == -2.5f, "got %g", bf16_to_f32(0xc020));
    EXPECT("bf16/widen smallest subnormal 2^-133", bf16_to_f32(0x0001) == ldexpf(1.0f, -133), "got %g", bf16_to_f32(0x0001));
    EXPECT("bf16/widen largest finite", bf16_to_f32(0x7f7f) == ldexpf(255.0f, 120), "got %g", bf16_to_f32(0x7f7f));
    EXPECT("bf16/widen Inf", isinf(bf16_to_f32(0xff80)) && bf16_to_f32(0xff80) < 0, "got %g", bf16_to_f32(0xff80));
    EXPECT("bf16/widen NaN", isnan(bf16_to_f32(0x7fc0)), "got %g", bf16_to_f32(0x7fc0));
    // Every bf16 value round-trips exactly; and rounding is monotonic and within half an ulp.
    int bad = -1;
    for (uint32_t h = 0; h < 0x10000u && bad < 0; h++)
        if (!isnan(bf16_to_f32((uint16_t)h)) && bf16_from_f32(bf16_to_f32((uint16_t)h)) != h) bad = (int)h;
    EXPECT("bf16/every finite or infinite bf16 round-trips", bad < 0, "pattern %04x", bad);
    double worst = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        float x = ldexpf(2.0f * rng_uniform(7, i) - 1.0f, (int)(rng_uniform(8, i) * 60) - 30);
        if (x != 0.0f) worst = fmax(worst, fabs((double)bf16_round(x) - x) / fabs((double)x));
    }
    // bf16 keeps 8 significant bits (7 stored): half an ulp is at most 2^-8 of the value (unit roundoff u).
    EXPECT("bf16/relative rounding error <= u = 2^-8 on normals", worst <= ldexp(1, -8) && worst > ldexp(1, -9), "worst %g", worst);
}

static void fill_rand(float *x, long n, uint64_t key) {
    for (long i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(key, (uint64_t)i) - 1.0f;
}

// C = alpha op(A) op(B) + beta C on bf16 inputs: each output against (1) a double-precision sum of
// the inputs rounded to bf16 (what bf16 products should compute: fp32 accumulation only adds
// rounding of order K x 2^-24) and (2) the fp32 inputs' exact sum, within bf16's input rounding:
// |error| <= (2u + u^2) x sum |alpha a b| with u = 2^-8 (each product's two inputs off by at most u relative).
static void gemm_case(int ta, int tb, int M, int N, int K, int pad, float alpha, float beta) {
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    float *A = malloc(sizeof(float) * (size_t)(ta ? K : M) * lda), *B = malloc(sizeof(float) * (size_t)(tb ? N : K) * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);
    fill_rand(A, (long)(ta ? K : M) * lda, 11); fill_rand(B, (long)(tb ? N : K) * ldb, 12); fill_rand(C, (long)M * ldc, 13);
    memcpy(C0, C, sizeof(float) * (size_t)M * ldc);
    backend_cpu.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst_r = 0, worst_f = 0;
    for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) {
        double sr = 0, sf = 0, mag = 0;
        for (int k = 0; k < K; k++) {
            float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k], b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
            sr += (double)bf16_round(a) * bf16_round(b);
            sf += (double)a * b;
            mag += fabs((double)a * b);
        }
        double c0 = (double)beta * C0[(size_t)i * ldc + j], got = C[(size_t)i * ldc + j];
        double scale = fabs(alpha) * mag + fabs(c0) + 1e-30;
        worst_r = fmax(worst_r, fabs(got - (alpha * sr + c0)) / scale);
        worst_f = fmax(worst_f, fabs(got - (alpha * sf + c0)) / scale);
    }
    int untouched = 1;  // the padding of C stays as it was
    for (int i = 0; i < M; i++) for (int j = N; j < ldc; j++) untouched &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
    char name[160];
    snprintf(name, sizeof name, "bf16/gemm ta=%d tb=%d %dx%dx%d pad %d alpha %g beta %g", ta, tb, M, N, K, pad, alpha, beta);
    double u = ldexp(1, -8), bound = 2 * u + u * u;
    EXPECT(name, worst_r <= 1e-5 && worst_f <= bound && untouched,
           "error vs bf16 inputs %.3g (<= 1e-5), vs fp32 %.3g (<= %.3g), padding untouched %d", worst_r, worst_f, bound, untouched);
    free(A); free(B); free(C); free(C0);
}

static void test_gemm(void) {
    char err[256] = "";
    if (backend_cpu.set_precision(PRECISION_BF16, err, sizeof err) != 0) {
        printf("SKIP bf16/gemm: %s\n", err);
        return;
    }
    for (int ta = 0; ta < 2; ta++) for (int tb = 0; tb < 2; tb++) {
        gemm_case(ta, tb, 33, 17, 70, 0, 1.0f, 0.0f);
        gemm_case(ta, tb, 33, 17, 70, 0, 1.0f, 1.0f);   // gradient accumulation: beta = 1
        gemm_case(ta, tb, 9, 40, 130, 3, 0.5f, 0.25f);  // padded leading dimensions, general alpha, beta
        gemm_case(ta, tb, 33, 17, 70, 0, 1.0f, 0.0f);   // the cached primitive again
    }
    // The fp32 path is OpenBLAS again once switched back: exact products of these small integers.
    backend_cpu.set_precision(PRECISION_FP32, err, sizeof err);
    float A[2] = {1.0f + ldexpf(1, -12), 1.0f}, B[2] = {1.0f, 1.0f}, C[1];
    backend_cpu.gemm(0, 0, 1, 1, 2, 1.0f, A, 2, B, 1, 0.0f, C, 1);
    EXPECT("bf16/fp32 again keeps the low bits", C[0] == 2.0f + ldexpf(1, -12), "got %.9g", C[0]);
    backend_cpu.set_precision(PRECISION_BF16, err, sizeof err);
    backend_cpu.gemm(0, 0, 1, 1, 2, 1.0f, A, 2, B, 1, 0.0f, C, 1);
    EXPECT("bf16/bf16 rounds them away", C[0] == 2.0f, "got %.9g", C[0]);
    backend_cpu.set_precision(PRECISION_FP32, err, sizeof err);
}

// Backend.to_bf16/from_bf16 round exactly as bf16_from_f32; bias_grad in bf16 sums dz rounded.
static void test_pack_and_bias(void) {
    char err[256] = "";
    float x[5] = {1.0f + ldexpf(1, -9), -3.3f, 0.0f, 1e-30f, 65504.1f}, back[5];
    uint16_t h[5];
    backend_cpu.to_bf16(h, x, 5);
    backend_cpu.from_bf16(back, h, 5);
    int same = 1;
    for (int i = 0; i < 5; i++) same &= h[i] == bf16_from_f32(x[i]) && back[i] == bf16_round(x[i]);
    EXPECT("bf16/to_bf16 and from_bf16 are bf16_from_f32 and its exact inverse", same, "a value differs");
    if (backend_cpu.set_precision(PRECISION_BF16, err, sizeof err) != 0) { printf("SKIP bf16/bias_grad: %s\n", err); return; }
    float dz[2] = {1.0f + ldexpf(1, -12), 1.0f}, db[1] = {0};
    backend_cpu.bias_grad(db, dz, 2, 1);
    EXPECT("bf16/bias_grad sums dz rounded to bf16 (a product with ones)", db[0] == 2.0f, "got %.9g", db[0]);
    backend_cpu.set_precision(PRECISION_FP32, err, sizeof err);
    db[0] = 0;
    backend_cpu.bias_grad(db, dz, 2, 1);
    EXPECT("bf16/bias_grad in fp32 keeps the low bits", db[0] == 2.0f + ldexpf(1, -12), "got %.9g", db[0]);
}

// A stage with bf16 stashes computes the very gradients of one with fp32 stashes, products in bf16:
// every reader of a stashed value rounds it (or takes its sign), so storing it rounded changes nothing.
static void test_stash(void) {
    char err[256] = "";
    if (backend_cpu.set_precision(PRECISION_BF16, err, sizeof err) != 0) { printf("SKIP bf16/stash: %s\n", err); return; }
    enum { L = 3, H = 24, C = 5, D = 10, R = 8 };
    float x[R * D], *g[2];
    int32_t y[R];
    fill_rand(x, R * D, 11);
    for (int i = 0; i < R; i++) y[i] = i % C;
    size_t bytes[2], np = 0;
    for (int b = 0; b < 2; b++) {
        Stage s;
        stage_init(&s, &backend_cpu, (StageSpec){.layers = L, .hidden = H, .classes = C, .inputs = D, .lo = 0, .hi = L, .head = 1,
                                                 .rows = R, .slots = 1, .bf16 = b, .seed = 5});
        stage_zero_grads(&s);
        int slot = stage_slot_acquire(&s, 0);
        stage_load_input(&s, slot, x);
        stage_set_labels(&s, slot, y);
        stage_forward(&s, slot);
        stage_backward(&s, slot, NULL, NULL);
        np = s.n_params;
        g[b] = xmalloc(sizeof(float) * np);
        memcpy(g[b], s.grads, sizeof(float) * np);
        bytes[b] = s.mem.peak_act_bytes;
        stage_free(&s);
    }
    EXPECT("bf16/bf16 stashes: gradients bit-identical to fp32 stashes", memcmp(g[0], g[1], sizeof(float) * np) == 0, "they differ");
    EXPECT("bf16/bf16 stashes: peak activation bytes halve", 2 * bytes[1] == bytes[0], "fp32 %zu, bf16 %zu", bytes[0], bytes[1]);
    free(g[0]); free(g[1]);
    backend_cpu.set_precision(PRECISION_FP32, err, sizeof err);
}

int main(void) {
    test_round();
    test_gemm();
    test_pack_and_bias();
    test_stash();
    return unit_failures ? 1 : 0;
}
