/* Integer 2-D convolutions on uint8 NCHW activations and int8 weights (see qgemm.h for the
 * arithmetic and the epilogue).
 *
 * Thread-compatible: no state; x, y and scratch must not overlap. */
#ifndef MLCC_QCONV_H
#define MLCC_QCONV_H

#include "qgemm.h"

/* Geometry as for mlcc_f32_conv2d: output (oh, ow) reads input taps
 * (oh * stride_h + kh * dilation_h - pad_top, ow * stride_w + kw * dilation_w - pad_left);
 * taps outside the input read the input zero point x_zero_point (real 0). */
typedef struct mlcc_qconv2d_params {
    int64_t batch, in_channels, in_h, in_w;
    int64_t out_channels, out_h, out_w;
    int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_left, groups;
    int32_t x_zero_point;
    mlcc_requant rq;
} mlcc_qconv2d_params;

/* The input rows and columns the kernel window reaches, padding included (the padded planes
 * both kernels read). */
#define MLCC_QCONV_PADDED_H(p) \
    (((p)->out_h - 1) * (p)->stride_h + ((p)->kernel_h - 1) * (p)->dilation_h + 1)
#define MLCC_QCONV_PADDED_W(p) \
    (((p)->out_w - 1) * (p)->stride_w + ((p)->kernel_w - 1) * (p)->dilation_w + 1)

/* Grouped or plain convolution as im2col + mlcc_u8s8_gemm. w: [out_channels][4 * k4] int8,
 * k4 = ceil(in_channels / groups * kernel_h * kernel_w / 4), zero-padded; bias already holds
 * -x_zero_point * sum(w[c]) (the compiler folds it). scratch: 4 * k4 * out_h * out_w +
 * in_channels / groups * MLCC_QCONV_PADDED_H(p) * MLCC_QCONV_PADDED_W(p) bytes (the packed
 * columns, then one group's input planes padded with the zero point). */
void mlcc_u8_conv2d(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                    const int32_t *bias, const float *scale, const float *fbias,
                    const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch);

/* Depthwise convolution (groups = in_channels = out_channels), direct:
 * acc = bias[c] + sum over taps inside the input of w[c][kh][kw] * (x - x_zero_point);
 * bias here is the quantized bias alone. scratch: 2 * MLCC_QCONV_PADDED_H(p) *
 * MLCC_QCONV_PADDED_W(p) bytes, 2-byte aligned (one channel plane, padded, as int16). */
void mlcc_u8_conv2d__depthwise(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                               const int32_t *bias, const float *scale, const float *fbias,
                               const int32_t *mult, const int32_t *shift, void *y,
                               uint8_t *scratch);

#endif /* MLCC_QCONV_H */
