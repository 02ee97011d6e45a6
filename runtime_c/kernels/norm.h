/* Normalizations: BatchNormalization (inference, as a per-channel affine map), LRN,
 * InstanceNormalization, LayerNormalization, GroupNormalization (also
 * MeanVarianceNormalization), RMSNormalization and LpNormalization.
 *
 * Thread-compatible: no state; y must not overlap x (or the other inputs). On a pool, the
 * normalizations other than BatchNormalization in training mode and LpNormalization split
 * their rows (a row, a channel or a group normalized whole by one thread: the same bits on
 * any number of threads) from MLCC_MIN_PARALLEL_ELEMENTS values up. */
#ifndef MLCC_NORM_H
#define MLCC_NORM_H

#include "mlcc_kernel.h"

/* y[o][c][i] = x[o][c][i] * scale[c] + shift[c] over an [outer, channels, inner] view.
 * Inference BatchNormalization: the compiler folds gamma, beta, mean, var and epsilon into
 * scale = gamma / sqrt(var + epsilon) and shift = beta - mean * scale. */
typedef struct mlcc_channel_affine_params {
    int64_t outer, channels, inner;
} mlcc_channel_affine_params;

void mlcc_f32_channel_affine(const mlcc_channel_affine_params *p, const float *x,
                             const float *scale, const float *shift, float *y,
                             mlcc_threadpool *pool);

/* Local response normalization across channels of [batch, channels, inner]:
 *   y[n][c][i] = x[n][c][i] * (bias + alpha_over_size * sum_{c'} x[n][c'][i]^2)^-beta
 * over c - (size - 1) / 2 <= c' <= c + size / 2 (clipped to the channels). */
typedef struct mlcc_lrn_params {
    int64_t batch, channels, inner;
    int64_t size;
    float alpha_over_size, beta, bias;
} mlcc_lrn_params;

/* pool: ranges of (batch, channel) planes between threads (the same bits on any count). */
void mlcc_f32_lrn(const mlcc_lrn_params *p, const float *x, float *y, mlcc_threadpool *pool);

/* InstanceNormalization over [batch, channels, inner]: each (n, c) row of `inner` values is
 * normalized by its own mean and (biased) variance, then y = scale[c] * x_hat + bias[c]. */
typedef struct mlcc_instance_norm_params {
    int64_t batch, channels, inner;
    float epsilon;
} mlcc_instance_norm_params;

void mlcc_f32_instance_norm(const mlcc_instance_norm_params *p, const float *x,
                            const float *scale, const float *bias, float *y,
                            mlcc_threadpool *pool);

/* LayerNormalization over [outer, n]: each row of n values is normalized by its mean and
 * (biased) variance, then y[o][j] = x_hat[o][j] * scale[j] + bias[j]; bias may be NULL. */
typedef struct mlcc_layer_norm_params {
    int64_t outer, n;
    float epsilon;
} mlcc_layer_norm_params;

void mlcc_f32_layer_norm(const mlcc_layer_norm_params *p, const float *x, const float *scale,
                         const float *bias, float *y, mlcc_threadpool *pool);

/* The per-row statistics of the same normalization: mean[o] and inv_std[o] =
 * 1 / sqrt(var + epsilon), the optional Mean and InvStdDev outputs of LayerNormalization. */
void mlcc_f32_layer_norm_stats(const mlcc_layer_norm_params *p, const float *x, float *mean,
                               float *inv_std, mlcc_threadpool *pool);

/* BatchNormalization in training mode over [batch, channels, inner]: per channel, the mean
 * and (biased) variance over batch and inner, y = scale[c] (x - mean) / sqrt(var + epsilon)
 * + bias[c]; the running statistics (either may be NULL)
 *   running_mean[c] = in_mean[c] * momentum + mean * (1 - momentum), likewise for var. */
typedef struct mlcc_batchnorm_train_params {
    int64_t batch, channels, inner;
    float epsilon, momentum;
} mlcc_batchnorm_train_params;

void mlcc_f32_batchnorm_train(const mlcc_batchnorm_train_params *p, const float *x,
                              const float *scale, const float *bias, const float *in_mean,
                              const float *in_var, float *y, float *running_mean,
                              float *running_var);

/* GroupNormalization over [batch, groups * channels_per_group, inner]: each (n, g) row of
 * channels_per_group * inner values is normalized by its mean and (biased) variance,
 *   y = (x - mean) / (sqrt(var + epsilon) + std_epsilon) * scale[c] + bias[c]
 * with per-channel scale and bias, either of which may be NULL (1 and 0).
 * MeanVarianceNormalization is the case groups = rows, one channel, no scale or bias and
 * its epsilon added to the standard deviation (std_epsilon). */
typedef struct mlcc_group_norm_params {
    int64_t batch, groups, channels_per_group, inner;
    float epsilon, std_epsilon;
} mlcc_group_norm_params;

void mlcc_f32_group_norm(const mlcc_group_norm_params *p, const float *x, const float *scale,
                         const float *bias, float *y, mlcc_threadpool *pool);

/* RMSNormalization over [outer, n]: y[o][j] = x[o][j] / sqrt(mean_j x^2 + epsilon) *
 * scale[j]. */
typedef struct mlcc_rms_norm_params {
    int64_t outer, n;
    float epsilon;
} mlcc_rms_norm_params;

void mlcc_f32_rms_norm(const mlcc_rms_norm_params *p, const float *x, const float *scale,
                       float *y, mlcc_threadpool *pool);

/* LpNormalization along the middle axis of [outer, n, inner]: y = x / ||x||_p with p = 1
 * (sum of |x|) or p = 2 (Euclidean); a zero norm gives zeros. */
typedef struct mlcc_lp_norm_params {
    int64_t outer, n, inner, p;
} mlcc_lp_norm_params;

void mlcc_f32_lp_norm(const mlcc_lp_norm_params *p, const float *x, float *y);

#endif /* MLCC_NORM_H */
