/* Broadcasting arithmetic on integer tensors (int8 to int64, uint8 to uint64), as ONNX defines
 * it for integers: results wrap around (two's complement), Div truncates toward zero, Mod
 * follows the divisor's sign (fmod=0, Python's %) or the dividend's (fmod=1, C's %), Pow
 * multiplies (a negative exponent gives 0 except for bases 1 and -1). Division or modulo by
 * zero has no ONNX-defined result; here it gives 0 (and INT_MIN / -1 wraps to INT_MIN),
 * never a trap. */
#ifndef MLCC_INT_ARITH_H
#define MLCC_INT_ARITH_H

#include "mlcc_kernel.h"

enum mlcc_int_op {
    MLCC_INT_ADD = 0, MLCC_INT_SUB, MLCC_INT_MUL, MLCC_INT_DIV, MLCC_INT_MOD, MLCC_INT_FMOD,
    MLCC_INT_MAX, MLCC_INT_MIN, MLCC_INT_POW,
    MLCC_INT_AND, MLCC_INT_OR, MLCC_INT_XOR,      /* bitwise, on the two's complement bits */
    MLCC_INT_SHL, MLCC_INT_SHR        /* BitShift: by the width or more (or by a negative
                                         amount) 0, or -1 for a negative value shifted right */
};

/* y[i] = a[i] op b[i] over a contiguous output of shape[0..rank); a, b and y all of type
 * dtype (enum mlcc_dtype), a and b read through their strides (0 on broadcast axes). */
typedef struct mlcc_int_binary_params {
    int32_t op;                 /* enum mlcc_int_op */
    int32_t dtype;
    int32_t rank;
    int64_t shape[MLCC_MAX_RANK];
    int64_t a_strides[MLCC_MAX_RANK];
    int64_t b_strides[MLCC_MAX_RANK];
} mlcc_int_binary_params;

void mlcc_int_binary(const mlcc_int_binary_params *p, const void *a, const void *b, void *y);

/* The integer ReduceSum, ReduceProd, ReduceMax and ReduceMin (op MLCC_INT_ADD, _MUL, _MAX,
 * _MIN) over the middle axis of an [outer, reduce, inner] view of x (reduce >= 1):
 * y[o * inner + i] = x[o][0][i] op x[o][1][i] op ..., wrapping as mlcc_int_binary does.
 * x and y (of type dtype) must not overlap. */
typedef struct mlcc_int_reduce_params {
    int64_t outer, reduce, inner;
    int32_t op;                 /* enum mlcc_int_op */
    int32_t dtype;
} mlcc_int_reduce_params;

void mlcc_int_reduce(const mlcc_int_reduce_params *p, const void *x, void *y);

#endif /* MLCC_INT_ARITH_H */
