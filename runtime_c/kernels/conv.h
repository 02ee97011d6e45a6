/* 2-D convolution (NCHW activations, OIHW weights) with fused bias and activation. */
#ifndef MLCC_CONV_H
#define MLCC_CONV_H

#include "mlcc_kernel.h"

typedef struct mlcc_conv2d_params {
    int64_t batch, in_channels, in_h, in_w;
    int64_t out_channels, out_h, out_w;
    int64_t kernel_h, kernel_w;
    int64_t stride_h, stride_w;
    int64_t dilation_h, dilation_w;
    int64_t pad_top, pad_left;        /* bottom/right padding follows from out_h/out_w */
    int64_t groups;
    mlcc_act act;
} mlcc_conv2d_params;

/* General grouped convolution as im2col + GEMM per group, with unpacked weights (OIHW): the
 * portable reference of mlcc_f32_conv2d_packed. scratch holds
 * (in_channels / groups) * kernel_h * kernel_w * out_h * out_w floats, or nothing for a
 * 1x1 convolution with stride 1 and no padding (which multiplies x directly).
 * bias may be NULL. */
void mlcc_f32_conv2d(const mlcc_conv2d_params *p, const float *x, const float *w,
                     const float *bias, float *y, float *scratch);

/* Depthwise convolution (groups == in_channels == out_channels), computed directly. */
void mlcc_f32_conv2d_depthwise(const mlcc_conv2d_params *p, const float *x, const float *w,
                               const float *bias, float *y);

/* pool: see mlcc_runtime.h (NULL: the calling thread only); results do not depend on it.
 * Convolutions of fewer multiply-adds than this run on the caller: waking a worker costs more
 * than it saves (the digits CNN, 0.3 M per layer, was 2x slower on 2 threads than on 1). */
#ifndef MLCC_MIN_PARALLEL_MACS
#define MLCC_MIN_PARALLEL_MACS (1L << 20)
#endif

/* General grouped convolution as a GEMM of the weights, packed at compile time (gemm.h's A
 * layout per group: ceil(out_channels / groups / MLCC_GEMM_MR) panels, each kernel_size deep),
 * by the im2col matrix, which is never materialized whole: block_cols output positions at a time
 * are gathered straight into the GEMM's B panels in scratch. block_cols is a multiple of 64 (so
 * of MLCC_GEMM_NR) chosen by the compiler so that the panels stay in L2; scratch holds
 * (in_channels / groups * kernel_h * kernel_w + 1) * block floats, where block = min(block_cols,
 * out_h * out_w rounded up to 64) (the panels and one im2col row). bias may be NULL. */
typedef struct mlcc_conv2d_packed_params {
    mlcc_conv2d_params conv;
    int64_t block_cols;
} mlcc_conv2d_packed_params;

void mlcc_f32_conv2d_packed(const mlcc_conv2d_packed_params *p, const float *x, const float *w,
                            const float *bias, float *y, float *scratch, mlcc_threadpool *pool);

/* The same convolution for small feature maps, where the im2col rows are made of short runs:
 * the im2col matrix is gathered through a table made at compile time, table[k * out_h * out_w
 * + j] = the offset in the group's input of im2col row k, column j, or -1 for padding. */
void mlcc_f32_conv2d_packed_table(const mlcc_conv2d_packed_params *p, const float *x,
                                  const float *w, const float *bias, const int32_t *table,
                                  float *y, float *scratch, mlcc_threadpool *pool);

/* Depthwise convolution with vectors along the output row: each channel's zero-padded input is
 * first copied into scratch split by column phase (column c of the padded input goes to phase
 * c % stride_w, position c / stride_w), so that every kernel tap reads contiguous input for
 * consecutive outputs whatever the stride; the taps accumulate in registers. scratch holds
 * MLCC_DW_SLICES * mlcc_dw_scratch_floats(p) floats (mlcc/ops/conv.py computes the same
 * number): on a pool, up to MLCC_DW_SLICES threads each take a range of channels and a slice. */
#define MLCC_DW_SLICES 4
#define MLCC_DW_SLACK 32   /* zero columns past each phase row: two whole vectors may be loaded */
static inline ptrdiff_t mlcc_dw_phase_width(const mlcc_conv2d_params *p) {
    const ptrdiff_t pw = (ptrdiff_t)((p->out_w - 1) * p->stride_w + (p->kernel_w - 1) * p->dilation_w + 1);
    return (pw + (ptrdiff_t)p->stride_w - 1) / (ptrdiff_t)p->stride_w + MLCC_DW_SLACK;
}
static inline ptrdiff_t mlcc_dw_scratch_floats(const mlcc_conv2d_params *p) {
    const ptrdiff_t ph = (ptrdiff_t)((p->out_h - 1) * p->stride_h + (p->kernel_h - 1) * p->dilation_h + 1);
    return ph * (ptrdiff_t)p->stride_w * mlcc_dw_phase_width(p);
}
void mlcc_f32_conv2d_depthwise_vec(const mlcc_conv2d_params *p, const float *x, const float *w,
                                   const float *bias, float *y, float *scratch,
                                   mlcc_threadpool *pool);

#endif /* MLCC_CONV_H */
