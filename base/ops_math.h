// base/ops_math.h: the element-wise arithmetic of training, written once. The CPU backend (ops_cpu.c)
// calls these in loops; the CUDA kernels (kernels.cu) call the very same functions per thread,
// so the CPU tests cover the arithmetic the GPU runs.
#pragma once
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HD __host__ __device__
#else
#define HD
#endif

// Adam as torch.optim.Adam (weight_decay=0, amsgrad=False), bias corrections precomputed per step.
typedef struct {
    float lr, beta1, beta2, eps;
    float bias_correction1;       // 1 - beta1^t
    float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
} AdamArgs;

// bf16 (bfloat16): fp32's sign, 8-bit exponent and top 7 mantissa bits, kept as the upper 16 bits
// of the fp32 pattern. Rounding is to nearest, ties to even, on the bits: subnormals round like any
// other value (a carry out of the mantissa lands in the exponent, as it should), values past the
// largest finite bf16 (0x7f7f) by half a step or more become Inf, Inf stays Inf, and a NaN stays a
// NaN (made quiet, so a payload in the dropped bits alone cannot turn it into Inf).
HD static inline uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    return u;
#endif
}
HD static inline float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
#endif
}
HD static inline uint16_t bf16_from_f32(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN: quiet
    u += 0x7fffu + ((u >> 16) & 1u);  // half an ulp of bf16, less one unless the kept bit is odd
    return (uint16_t)(u >> 16);
}
HD static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }
// f rounded to bf16's precision, kept in fp32.
HD static inline float bf16_round(float f) { return bf16_to_f32(bf16_from_f32(f)); }

HD static inline float relu_f(float x) { return x > 0.0f ? x : 0.0f; }

// One element of a linear layer's epilogue: y + b, through the ReLU when relu.
HD static inline float bias_act_f(float y, float b, int relu) { return relu ? relu_f(y + b) : y + b; }

// dz = dy where the ReLU was active (its output y > 0), else 0.
HD static inline float relu_backward_f(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

HD static inline void adam_update(float *p, float g, float *m, float *v, AdamArgs a) {
    float mi = a.beta1 * *m + (1.0f - a.beta1) * g;
    float vi = a.beta2 * *v + (1.0f - a.beta2) * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / a.bias_correction2_sqrt + a.eps;
    *p -= (a.lr / a.bias_correction1) * mi / denom;
}

HD static inline float sgd_update(float p, float g, float lr) { return p - lr * g; }

HD static inline float axpy_f(float y, float a, float x) { return y + a * x; }

// One row of softmax cross-entropy: returns -log softmax(logits)[label] and writes
// dlogits = (softmax - onehot(label)) * scale. dlogits may alias logits.
HD static inline float softmax_xent_row(const float *logits, int C, int label, float scale,
                                        float *dlogits, int *is_correct) {
    float mx = logits[0];
    int arg = 0;
    for (int j = 1; j < C; j++) if (logits[j] > mx) { mx = logits[j]; arg = j; }
    float sum = 0.0f;
    for (int j = 0; j < C; j++) sum += expf(logits[j] - mx);
    // cppcheck-suppress invalidFunctionArg ; sum >= 1: C >= 1, and the max's own term is expf(0) = 1
    float logsum = logf(sum);
    float loss = logsum - (logits[label] - mx);
    *is_correct = (arg == label);
    for (int j = 0; j < C; j++) {
        float p = expf(logits[j] - mx - logsum);
        dlogits[j] = (p - (j == label ? 1.0f : 0.0f)) * scale;
    }
    return loss;
}
