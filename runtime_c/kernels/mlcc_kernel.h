/* What every kernel shares: fused activation epilogues and portable SIMD vector types.
 *
 * Kernels are plain C99. Where the compiler is GCC or Clang, hot loops use the compilers' vector
 * extensions, which compile to SSE/AVX/AVX-512, NEON or WASM SIMD128 from one source;
 * MLCC_VECTOR_BYTES (set from the target's vector_bits) picks the width. Elsewhere the same
 * kernels fall back to scalar loops. */
#ifndef MLCC_KERNEL_H
#define MLCC_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mlcc_runtime.h"

#if defined(__GNUC__) || defined(__clang__)
#define MLCC_RESTRICT __restrict__
#define MLCC_HAVE_VECTORS 1
#ifndef MLCC_VECTOR_BYTES
#define MLCC_VECTOR_BYTES 16
#endif
typedef float mlcc_vf __attribute__((vector_size(MLCC_VECTOR_BYTES)));
#define MLCC_VF_LANES ((ptrdiff_t)(MLCC_VECTOR_BYTES / sizeof(float)))

/* Unaligned loads and stores through memcpy: no aliasing or alignment assumptions, and
 * compilers turn them into single vector instructions. */
static inline mlcc_vf mlcc_vf_load(const float *p) {
    mlcc_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void mlcc_vf_store(float *p, mlcc_vf v) { memcpy(p, &v, sizeof v); }
static inline mlcc_vf mlcc_vf_splat(float x) { return (mlcc_vf){0} + x; }
#else
#define MLCC_RESTRICT
#define MLCC_HAVE_VECTORS 0
#endif

/* Activation fused into the epilogue of Conv, Gemm and MatMul. */
enum mlcc_act_kind {
    MLCC_ACT_NONE = 0,
    MLCC_ACT_RELU = 1,
    MLCC_ACT_CLIP = 2,          /* alpha = min, beta = max */
    MLCC_ACT_LEAKY_RELU = 3,    /* alpha = slope */
    MLCC_ACT_SIGMOID = 4,
    MLCC_ACT_HARD_SIGMOID = 5,  /* max(0, min(1, alpha * x + beta)) */
    MLCC_ACT_HARD_SWISH = 6,
    MLCC_ACT_TANH = 7
};

typedef struct mlcc_act {
    int32_t kind;
    float alpha, beta;
} mlcc_act;

static inline float mlcc_act_scalar(const mlcc_act *act, float x) {
    switch (act->kind) {
    case MLCC_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case MLCC_ACT_CLIP: return x < act->alpha ? act->alpha : (x > act->beta ? act->beta : x);
    case MLCC_ACT_LEAKY_RELU: return x >= 0.0f ? x : x * act->alpha;
    case MLCC_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case MLCC_ACT_HARD_SIGMOID: {
        float y = act->alpha * x + act->beta;
        return y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y);
    }
    case MLCC_ACT_HARD_SWISH: {
        float y = x / 6.0f + 0.5f;
        return x * (y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y));
    }
    case MLCC_ACT_TANH: return tanhf(x);
    default: return x;
    }
}

/* Applies the activation to n contiguous values in place. The switch sits outside the loops
 * so that each loop vectorizes. */
static inline void mlcc_act_apply(const mlcc_act *act, float *y, ptrdiff_t n) {
    ptrdiff_t i;
    switch (act->kind) {
    case MLCC_ACT_NONE: return;
    case MLCC_ACT_RELU:
        for (i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        return;
    case MLCC_ACT_CLIP: {
        const float lo = act->alpha, hi = act->beta;
        for (i = 0; i < n; i++) y[i] = y[i] < lo ? lo : (y[i] > hi ? hi : y[i]);
        return;
    }
    default:
        for (i = 0; i < n; i++) y[i] = mlcc_act_scalar(act, y[i]);
        return;
    }
}

#endif /* MLCC_KERNEL_H */
