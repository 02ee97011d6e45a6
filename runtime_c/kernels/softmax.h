/* Softmax and LogSoftmax along the middle axis of an [outer, n, inner] view.
 *
 * A non-last axis is handled in place (inner > 1: TILE contiguous columns at a time), never
 * by transposing. Thread-compatible: no state; x and y must not overlap unless equal. */
#ifndef MLCC_SOFTMAX_H
#define MLCC_SOFTMAX_H

#include "mlcc_kernel.h"

/* For every o < outer, i < inner, over a < n with v[a] = x[(o * n + a) * inner + i]:
 *   softmax:     y = exp(v[a] - max v) / sum_b exp(v[b] - max v)
 *   log_softmax: y = (v[a] - max v) - log(sum_b exp(v[b] - max v))
 * Sums accumulate in double. */
typedef struct mlcc_softmax_params {
    int64_t outer, n, inner;
    int32_t log;                 /* 0: Softmax, 1: LogSoftmax */
} mlcc_softmax_params;

/* pool: ranges of the softmax vectors between threads (each whole on one: the same bits). */
void mlcc_f32_softmax(const mlcc_softmax_params *p, const float *x, float *y,
                      mlcc_threadpool *pool);

/* Hardmax on the same view: y = 1 at the first a of the largest v[a], 0 elsewhere (NaN is
 * never larger). */
typedef struct mlcc_hardmax_params {
    int64_t outer, n, inner;
} mlcc_hardmax_params;

void mlcc_f32_hardmax(const mlcc_hardmax_params *p, const float *x, float *y);

#endif /* MLCC_SOFTMAX_H */
