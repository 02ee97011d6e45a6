/* Elementwise float operations: unary functions and broadcasting binary operators. */
#ifndef MLCC_ELEMENTWISE_H
#define MLCC_ELEMENTWISE_H

#include "mlcc_kernel.h"

/* The unary operations besides MLCC_UNARY_ACT, one per line: X(NAME, y as an expression of
 * the input v and the parameters alpha and beta), expanded into enum mlcc_unary_op here and into
 * one loop per operation in elementwise.c (which defines the helpers some of them call). A new
 * operation is one line here and one in mlcc/ops/elementwise.py's UNARY_OPS
 * (tests/test_activations.py checks that the two sides name the same operations). */
#define MLCC_UNARY_OPS(X)                                                                    \
    X(EXP, expf(v))                                                                          \
    X(LOG, logf(v))                                                                          \
    X(SQRT, sqrtf(v))                                                                        \
    X(NEG, -v)                                                                               \
    X(ABS, fabsf(v))                                                                         \
    X(RECIPROCAL, 1.0f / v)                                                                  \
    X(ERF, erff(v))                                                                          \
    X(FLOOR, floorf(v))                                                                      \
    X(CEIL, ceilf(v))                                                                        \
    X(ROUND, nearbyintf(v))     /* default rounding mode: ties to even, keeps -0 (-0.4 -> -0) */ \
    X(SIN, sinf(v))                                                                          \
    X(COS, cosf(v))                                                                          \
    X(ELU, v >= 0.0f ? v : alpha * (expf(v) - 1.0f))                                         \
    X(SOFTPLUS, softplus(v))                                                                 \
    X(SOFTSIGN, v / (1.0f + fabsf(v)))                                                       \
    X(SIGN, v != v ? v : (float)((v > 0.0f) - (v < 0.0f)))      /* NaN stays NaN */           \
    X(GELU, 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)))                              \
    X(GELU_TANH, 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)))) \
    X(SELU, beta * (v > 0.0f ? v : alpha * (expf(v) - 1.0f)))                                \
    X(MISH, v * tanhf(softplus(v)))                                                          \
    X(CELU, celu(v, alpha))                                                                  \
    X(THRESHOLDED_RELU, v > alpha ? v : 0.0f)                                                \
    X(TAN, tanf(v))                                                                          \
    X(ASIN, asinf(v))                                                                        \
    X(ACOS, acosf(v))                                                                        \
    X(ATAN, atanf(v))                                                                        \
    X(SINH, sinhf(v))                                                                        \
    X(COSH, coshf(v))                                                                        \
    X(ASINH, asinhf(v))                                                                      \
    X(ACOSH, acoshf(v))                                                                      \
    X(ATANH, atanhf(v))                                                                      \
    X(SHRINK, v < -alpha ? v + beta : (v > alpha ? v - beta : 0.0f))  /* alpha = lambd, beta = bias */

enum mlcc_unary_op {
    MLCC_UNARY_ACT = 0,         /* the activation in params.act */
#define MLCC_UNARY_ENUM(name, expr) MLCC_UNARY_##name,
    MLCC_UNARY_OPS(MLCC_UNARY_ENUM)
#undef MLCC_UNARY_ENUM
};

typedef struct mlcc_unary_params {
    int64_t n;
    int64_t plane;              /* elements per plane (NCHW: H x W) for the thread split; 0: none */
    int32_t op;                 /* enum mlcc_unary_op */
    float alpha, beta;          /* Elu/Selu/Celu/ThresholdedRelu parameters */
    mlcc_act act;
} mlcc_unary_params;

/* y[i] = f(x[i]) for i < n; y may equal x. Large ones split between the threads of pool: each
 * thread the same part of every plane where the planes are large (MLCC_PLANE_SPLIT_MIN), else
 * a range of the elements. */
void mlcc_f32_unary(const mlcc_unary_params *p, const float *x, float *y, mlcc_threadpool *pool);

enum mlcc_binary_op {
    MLCC_BINARY_ADD = 0, MLCC_BINARY_SUB, MLCC_BINARY_MUL, MLCC_BINARY_DIV, MLCC_BINARY_POW,
    MLCC_BINARY_MAX, MLCC_BINARY_MIN, MLCC_BINARY_PRELU,  /* a >= 0 ? a : a * b */
    MLCC_BINARY_FMOD,                                     /* fmodf(a, b) */
    MLCC_BINARY_MOD                                       /* fmodf(a, b), sign of b */
};

/* y[i] = a[i] op b[i] over a contiguous output of shape[0..rank); a and b are read through
 * their strides (0 on broadcast axes). */
typedef struct mlcc_binary_params {
    int32_t op;
    int32_t rank;
    int64_t shape[MLCC_MAX_RANK];
    int64_t a_strides[MLCC_MAX_RANK];
    int64_t b_strides[MLCC_MAX_RANK];
} mlcc_binary_params;

void mlcc_f32_binary(const mlcc_binary_params *p, const float *a, const float *b, float *y,
                     mlcc_threadpool *pool);

#endif /* MLCC_ELEMENTWISE_H */
