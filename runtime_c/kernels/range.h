/* Range of a size known only at run time (bounded dynamic shapes): y[i] = start + i * delta,
 * i < count, computed in the output type (as numpy's arange fills its output). The compiler
 * folds every Range of a static size; it lowers only integer starts and steps. */
#ifndef MLCC_RANGE_H
#define MLCC_RANGE_H

#include "mlcc_kernel.h"

typedef struct mlcc_range_params {
    int64_t count;
    int64_t start, delta;
} mlcc_range_params;

void mlcc_f32_range(const mlcc_range_params *p, float *y);
void mlcc_i64_range(const mlcc_range_params *p, int64_t *y);
void mlcc_i32_range(const mlcc_range_params *p, int32_t *y);

#endif /* MLCC_RANGE_H */
