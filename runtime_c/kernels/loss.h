/* Loss functions: NegativeLogLikelihoodLoss (SoftmaxCrossEntropyLoss is LogSoftmax along the
 * class axis, then this kernel).
 *
 * Thread-compatible: no state; y must not overlap x. */
#ifndef MLCC_LOSS_H
#define MLCC_LOSS_H

#include "mlcc_kernel.h"

enum mlcc_loss_reduction { MLCC_LOSS_NONE = 0, MLCC_LOSS_SUM = 1, MLCC_LOSS_MEAN = 2 };

/* x: [n, c, d] (the class axis second, every later axis flattened into d), target: [n, d]
 * class indices, weight: [c] or NULL (all 1).
 *   loss[i, j] = -x[i, target[i, j], j] * weight[target[i, j]]
 * and 0 where target[i, j] == ignore_index (when has_ignore). y is [n, d] (MLCC_LOSS_NONE),
 * or one value: the sum of the losses, or that sum divided by the sum of the weights of the
 * targets that are not ignored (MLCC_LOSS_MEAN; 0 / 0 = NaN when all are). Sums run in
 * double, in index order.
 * Return MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (writing nothing) when a target that is not
 * ignored lies outside [0, c). */
typedef struct mlcc_nll_loss_params {
    int64_t n, c, d;
    int64_t ignore_index;
    int32_t has_ignore;
    int32_t reduction;          /* enum mlcc_loss_reduction */
} mlcc_nll_loss_params;

int mlcc_f32_nll_loss__i64(const mlcc_nll_loss_params *p, const float *x,
                           const int64_t *target, const float *weight, float *y);
int mlcc_f32_nll_loss__i32(const mlcc_nll_loss_params *p, const float *x,
                           const int32_t *target, const float *weight, float *y);

#endif /* MLCC_LOSS_H */
