/* Reductions over the middle axis of an [outer, reduce, inner] view (ReduceSum, ReduceMean,
 * ReduceMax, ..., GlobalAveragePool). The compiler merges adjacent axes so that any set of
 * reduced axes becomes one call per group of adjacent reduced axes.
 *
 * Thread-compatible: no state; x and y must not overlap. */
#ifndef MLCC_REDUCE_H
#define MLCC_REDUCE_H

#include "mlcc_kernel.h"

enum mlcc_reduce_op {
    MLCC_REDUCE_SUM = 0,
    MLCC_REDUCE_SUM_SQUARE,      /* sum of x * x */
    MLCC_REDUCE_SUM_ABS,         /* sum of |x| */
    MLCC_REDUCE_MAX,             /* -inf over nothing */
    MLCC_REDUCE_MIN,             /* +inf over nothing */
    MLCC_REDUCE_PROD,
    MLCC_REDUCE_LOG_SUM_EXP      /* log(sum(exp(x))), computed as max + log(sum(exp(x - max))) */
};

enum mlcc_reduce_post {
    MLCC_REDUCE_POST_NONE = 0,
    MLCC_REDUCE_POST_SQRT,
    MLCC_REDUCE_POST_LOG
};

/* y[o * inner + i] = post(scale * R_{r < reduce} x[(o * reduce + r) * inner + i]) where R is
 * the reduction `op`. Sums and products accumulate in double. */
typedef struct mlcc_reduce_params {
    int64_t outer, reduce, inner;
    int32_t op;                  /* enum mlcc_reduce_op */
    int32_t post;                /* enum mlcc_reduce_post */
    float scale;                 /* 1, or 1 / count for a mean */
} mlcc_reduce_params;

/* pool: ranges of outputs between threads (each output reduced whole by one: the same bits). */
void mlcc_f32_reduce(const mlcc_reduce_params *p, const float *x, float *y,
                     mlcc_threadpool *pool);

#endif /* MLCC_REDUCE_H */
