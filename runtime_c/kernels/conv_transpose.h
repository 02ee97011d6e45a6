/* 1-D, 2-D and 3-D transposed convolution (NC + spatial activations) with fused bias and
 * activation. */
#ifndef MLCC_CONV_TRANSPOSE_H
#define MLCC_CONV_TRANSPOSE_H

#include "mlcc_kernel.h"

/* Output y[n][m][oh][ow] sums x[n][c][ih][iw] * W[c][m % (M/groups)][kh][kw] over the input
 * channels c of m's group and the taps with oh = ih * stride_h + kh * dilation_h - pad_top
 * (likewise for ow). Output positions no tap reaches (output_padding) hold the bias. */
typedef struct mlcc_conv_transpose2d_params {
    int64_t batch, in_channels, in_h, in_w;
    int64_t out_channels, out_h, out_w;
    int64_t kernel_h, kernel_w;
    int64_t stride_h, stride_w;
    int64_t dilation_h, dilation_w;
    int64_t pad_top, pad_left;        /* begin padding; the end follows from out_h/out_w */
    int64_t groups;
    mlcc_act act;
    /* The depth axis of a 3-D convolution (1, 1, 1, 1, 1, 0 for 1-D and 2-D): activations
     * are [N][C][in_d][in_h][in_w], the weight [C][M/groups][kernel_d][kernel_h][kernel_w]. */
    int64_t in_d, out_d, kernel_d, stride_d, dilation_d, pad_front;
} mlcc_conv_transpose2d_params;

/* One GEMM per group into a column buffer, then a col2im scatter-add into y, both split
 * between the pool's threads when large enough (the GEMM by column and row tiles, the
 * scatter-add by output channels and rows: the same bits on any number of threads).
 * w is packed at compile time as [groups][out_channels/groups * kernel_d * kernel_h *
 *   kernel_w][in_channels/groups] (each group's weight slice transposed).
 * scratch holds (out_channels / groups) * kernel_d * kernel_h * kernel_w * in_d * in_h * in_w
 * floats, or nothing
 * (NULL) for a 1x1 kernel with stride 1, no padding and out == in, which multiplies directly.
 * bias may be NULL. y must not overlap x, w, bias or scratch. */
void mlcc_f32_conv_transpose2d(const mlcc_conv_transpose2d_params *p, const float *x,
                               const float *w, const float *bias, float *y, float *scratch,
                               mlcc_threadpool *pool);

#endif /* MLCC_CONV_TRANSPOSE_H */
