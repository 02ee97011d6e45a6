/* Linear algebra: Det.
 *
 * Thread-compatible: no state; y must not overlap x. */
#ifndef MLCC_LINALG_H
#define MLCC_LINALG_H

#include "mlcc_kernel.h"

/* Determinants of `batch` n x n matrices (x: [batch, n, n], y: [batch]) by LU decomposition
 * with partial pivoting in double precision; scratch: n * n doubles. A singular matrix (an
 * all-zero pivot column) gives 0. */
typedef struct mlcc_det_params {
    int64_t batch, n;
} mlcc_det_params;

void mlcc_f32_det(const mlcc_det_params *p, const float *x, float *y, void *scratch);

#endif /* MLCC_LINALG_H */
