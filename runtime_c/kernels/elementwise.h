/* Elementwise float operations: unary functions and broadcasting binary operators. */
#ifndef MLCC_ELEMENTWISE_H
#define MLCC_ELEMENTWISE_H

#include "mlcc_kernel.h"

enum mlcc_unary_op {
    MLCC_UNARY_ACT = 0,         /* the activation in params.act */
    MLCC_UNARY_EXP, MLCC_UNARY_LOG, MLCC_UNARY_SQRT, MLCC_UNARY_NEG, MLCC_UNARY_ABS,
    MLCC_UNARY_RECIPROCAL, MLCC_UNARY_ERF, MLCC_UNARY_FLOOR, MLCC_UNARY_CEIL,
    MLCC_UNARY_ROUND,           /* half to even, as ONNX Round */
    MLCC_UNARY_SIN, MLCC_UNARY_COS, MLCC_UNARY_ELU, MLCC_UNARY_SOFTPLUS, MLCC_UNARY_SOFTSIGN,
    MLCC_UNARY_SIGN, MLCC_UNARY_GELU, MLCC_UNARY_GELU_TANH, MLCC_UNARY_SELU, MLCC_UNARY_MISH,
    MLCC_UNARY_CELU, MLCC_UNARY_THRESHOLDED_RELU
};

typedef struct mlcc_unary_params {
    int64_t n;
    int32_t op;                 /* enum mlcc_unary_op */
    float alpha, beta;          /* Elu/Selu/Celu/ThresholdedRelu parameters */
    mlcc_act act;
} mlcc_unary_params;

/* y[i] = f(x[i]) for i < n; y may equal x. */
void mlcc_f32_unary(const mlcc_unary_params *p, const float *x, float *y);

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

void mlcc_f32_binary(const mlcc_binary_params *p, const float *a, const float *b, float *y);

#endif /* MLCC_ELEMENTWISE_H */
