/* Single-precision matrix multiplication with a fused bias and activation epilogue. */
#ifndef MLCC_GEMM_H
#define MLCC_GEMM_H

#include "mlcc_kernel.h"

/* C[i][j] = act(alpha * sum_p A[i][p] * B[p][j] + beta * bias[i][j]) for i < m, j < n, where
 *   A[i][p]    = a[i * a_row_stride + p * a_col_stride]   (any strides: transposed A is free)
 *   B[p][j]    = b[p * ldb + j]                          (rows contiguous)
 *   C[i][j]    = c[i * ldc + j]
 *   bias[i][j] = bias[i * bias_row_stride + j * bias_col_stride]  (0 strides broadcast; NULL: none)
 * c must not overlap a, b or bias. */
typedef struct mlcc_gemm_params {
    int64_t m, n, k;
    int64_t a_row_stride, a_col_stride;
    int64_t ldb, ldc;
    int64_t bias_row_stride, bias_col_stride;
    float alpha, beta;
    mlcc_act act;
} mlcc_gemm_params;

void mlcc_f32_gemm(const mlcc_gemm_params *p, const float *a, const float *b, const float *bias,
                   float *c);

/* Batched form (MatMul): batch b multiplies a + a_offsets[b], b + b_offsets[b] into
 * c + b * c_batch_stride. The offsets are tables in the weight blob, so that any broadcasting
 * of batch dimensions costs nothing at run time. */
typedef struct mlcc_batched_gemm_params {
    mlcc_gemm_params gemm;
    int64_t batch;
    int64_t c_batch_stride;
} mlcc_batched_gemm_params;

void mlcc_f32_batched_gemm(const mlcc_batched_gemm_params *p, const float *a, const float *b,
                           const float *bias, float *c, const int64_t *a_offsets,
                           const int64_t *b_offsets);

#endif /* MLCC_GEMM_H */
