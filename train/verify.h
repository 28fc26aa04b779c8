// train/verify.h: --verify. After step 1, every local stage's gradients and the loss are compared with a
// monolith reference computed on the CPU from the same weights and the same global batch.
#pragma once
#include "train/run.h"

#define VERIFY_TOL 1e-5        // fp32 against fp32
#define VERIFY_TOL_TF32 1e-2   // TF32 gemms (10-bit mantissa inputs) against the fp32 CPU
// --precision bf16 against a bf16 reference (the same rounding of every product's inputs): bf16's
// unit roundoff u = 2^-8, what one input moved across a rounding tie by a reordered fp32 sum
// upstream can change a gradient by, relative to its tensor's largest value (docs/precision.md).
#define VERIFY_TOL_BF16 0.00390625
#define VERIFY_NOISE_FACTOR 8  // or within 8x the float noise of the reference itself

typedef struct {
    int S;             // virtual stages (manual: parts) compared
    double *err;       // [S] worst relative error of a gradient tensor (or the loss) per virtual stage
    double *noise;     // [S] worst relative difference between the reference's two row orders
    double *excess;    // [S] worst err / allowed: a stage passes when <= 1
    double *tied;      // [S] 1: an error past its allowance was explained by ReLU ties and let pass
    double *where;     // [S] the tensor furthest past its allowance: 2g layer g's weight, 2g + 1 its bias
                       //     (g == layers: the head), 2 * layers + 2 the loss
    double *where_err, *where_noise;  // [S] that tensor's error and the reference's own noise on it
    long relu_ties;    // hidden units of the reference within fp32's rounding bound of zero (flipped)
    double worst_err, worst_excess, tol;
    int failed;
    int det;           // --deterministic: the gradients must equal the reference's bit for bit ...
    double det_ulps;   // ... and the most ulps any of them lies from it (0: exact)
} VerifyResult;

// Called on every rank after step 1's gradients are final (averaged over the replicas) and its
// loss is known (st: step 1's place in the training stream, and the data); collective over the
// world in distributed modes. Every rank gets the result.
VerifyResult verify_step(const TrainConfig *c, const Plan *p, Model *model, const StepState *st, double loss);
void verify_free(VerifyResult *v);
