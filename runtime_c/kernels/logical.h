/* Comparisons and boolean logic with broadcasting (bool outputs), and Where for elements of any
 * size. bool tensors hold one byte per element, 0 or 1. */
#ifndef MLCC_LOGICAL_H
#define MLCC_LOGICAL_H

#include "mlcc_kernel.h"

enum mlcc_compare_op {
    MLCC_COMPARE_EQUAL = 0, MLCC_COMPARE_LESS, MLCC_COMPARE_LESS_EQUAL, MLCC_COMPARE_GREATER,
    MLCC_COMPARE_GREATER_EQUAL,
    MLCC_COMPARE_AND, MLCC_COMPARE_OR, MLCC_COMPARE_XOR   /* operands tested for != 0 */
};

/* y[i] = a[i] op b[i] over a contiguous output of shape[0..rank); a and b, both of type dtype
 * (enum mlcc_dtype), are read through their strides (0 on broadcast axes). */
typedef struct mlcc_compare_params {
    int32_t op;                 /* enum mlcc_compare_op */
    int32_t dtype;              /* enum mlcc_dtype of a and b */
    int32_t rank;
    int64_t shape[MLCC_MAX_RANK];
    int64_t a_strides[MLCC_MAX_RANK];
    int64_t b_strides[MLCC_MAX_RANK];
} mlcc_compare_params;

void mlcc_compare(const mlcc_compare_params *p, const void *a, const void *b, uint8_t *y);

/* out[i] = cond[i] ? x[i] : y[i] over a contiguous output, each input read through its
 * strides. */
typedef struct mlcc_where_params {
    int32_t elem_size;          /* bytes per element of x, y and out */
    int32_t rank;
    int64_t shape[MLCC_MAX_RANK];
    int64_t c_strides[MLCC_MAX_RANK];
    int64_t x_strides[MLCC_MAX_RANK];
    int64_t y_strides[MLCC_MAX_RANK];
} mlcc_where_params;

void mlcc_where(const mlcc_where_params *p, const uint8_t *cond, const void *x, const void *y,
                void *out);

/* IsNaN (is_inf = 0) and IsInf (is_inf = 1, +inf counted when detect_positive, -inf when
 * detect_negative) of n float32 values, as bool bytes. */
typedef struct mlcc_classify_params {
    int64_t n;
    int32_t is_inf, detect_negative, detect_positive;
} mlcc_classify_params;

void mlcc_f32_classify(const mlcc_classify_params *p, const float *x, uint8_t *y);

#endif /* MLCC_LOGICAL_H */
