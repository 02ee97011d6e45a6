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
    /* mlcc_u8_conv2d only (0 elsewhere): the output rows it packs and multiplies per chunk
     * (>= 1; the compiler picks them from the target's cache: mlcc/ops/quant.py), and 1 where
     * its scratch has room for the direct AVX512-VNNI path (qconv.c; ignored elsewhere) */
    int64_t chunk_rows;
    int32_t direct;
} mlcc_qconv2d_params;

/* The input rows and columns the kernel window reaches, padding included (the padded planes
 * both kernels read). */
#define MLCC_QCONV_PADDED_H(p) \
    (((p)->out_h - 1) * (p)->stride_h + ((p)->kernel_h - 1) * (p)->dilation_h + 1)
#define MLCC_QCONV_PADDED_W(p) \
    (((p)->out_w - 1) * (p)->stride_w + ((p)->kernel_w - 1) * (p)->dilation_w + 1)

/* The padded input rows that `rows` consecutive output rows read. */
#define MLCC_QCONV_WINDOW_H(p, rows) \
    (((rows) - 1) * (p)->stride_h + ((p)->kernel_h - 1) * (p)->dilation_h + 1)
#define MLCC_QCONV_K4(p) \
    (((p)->in_channels / (p)->groups * (p)->kernel_h * (p)->kernel_w + 3) / 4)
/* Whether the kernel window reads no padding: the input is read in place, never copied. */
#define MLCC_QCONV_NO_PADDING(p)                                                            \
    ((p)->pad_top == 0 && (p)->pad_left == 0 && MLCC_QCONV_PADDED_H(p) <= (p)->in_h &&     \
     MLCC_QCONV_PADDED_W(p) <= (p)->in_w)
/* One thread's slice of mlcc_u8_conv2d's scratch for chunks of `rows` output rows: their
 * packed columns (4 * k4 bytes per output position), then the input window they read, padded
 * with the zero point (in_channels / groups planes of MLCC_QCONV_WINDOW_H x PADDED_W; none
 * without padding), 64-byte multiples. */
#define MLCC_QCONV_SLICE_BYTES(p, rows)                                                     \
    ((size_t)(4 * MLCC_QCONV_K4(p) * (rows) * (p)->out_w +                                  \
              (MLCC_QCONV_NO_PADDING(p) ? 0 : (p)->in_channels / (p)->groups *              \
               MLCC_QCONV_WINDOW_H(p, rows) * MLCC_QCONV_PADDED_W(p)) + 63) / 64 * 64)
/* The rows of a chunk on a pool of two threads or more: at most chunk_rows, and two chunks
 * per thread of two (more threads take fewer rows each). */
#define MLCC_QCONV_POOL_ROWS(p) \
    ((p)->chunk_rows < ((p)->out_h + 3) / 4 ? (p)->chunk_rows : ((p)->out_h + 3) / 4)

/* Grouped or plain convolution as im2col + mlcc_u8s8_gemm. w: [out_channels][4 * k4] int8,
 * k4 = MLCC_QCONV_K4(p), zero-padded; bias already holds -x_zero_point * sum(w[c]) (the
 * compiler folds it). Output rows go in chunks of p->chunk_rows: each chunk's input window is
 * padded into scratch (read in place when there is no padding), packed into im2col columns
 * ([k4][P][4], qgemm.h) and multiplied, so the scratch holds one chunk, not the whole output.
 * scratch: MLCC_QCONV_SLICE_BYTES(p, p->chunk_rows) bytes in builds without threads
 * (MLCC_NO_THREADS); with them, the larger of that (a lone caller) and MLCC_DW_SLICES slices
 * of MLCC_QCONV_SLICE_BYTES(p, MLCC_QCONV_POOL_ROWS(p)) (the threads of a pool, each on its
 * own slice); where p->direct is set, also at least the direct path's bytes (qconv.c). The
 * sums are exact integers: any chunking gives the same bytes. */
void mlcc_u8_conv2d(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                    const int32_t *bias, const float *scale, const float *fbias,
                    const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch,
                    mlcc_threadpool *pool);

/* Depthwise convolution (groups = in_channels = out_channels), direct:
 * acc = bias[c] + sum over taps inside the input of w[c][kh][kw] * (x - x_zero_point);
 * bias here is the quantized bias alone. scratch: slices * MLCC_QCONV_DW_SLICE_BYTES(p)
 * bytes, 64-byte aligned: a slice per thread (one channel plane, padded, as int16); slices
 * is MLCC_DW_SLICES, or 1 in builds without threads (MLCC_NO_THREADS), where only the
 * caller runs. */
#define MLCC_QCONV_DW_SLICE_BYTES(p) \
    ((size_t)(2 * MLCC_QCONV_PADDED_H(p) * MLCC_QCONV_PADDED_W(p) + 63) / 64 * 64)
void mlcc_u8_conv2d__depthwise(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                               const int32_t *bias, const float *scale, const float *fbias,
                               const int32_t *mult, const int32_t *shift, void *y,
                               uint8_t *scratch, mlcc_threadpool *pool);

/* ONNX ConvInteger with the zero point of x read at run time (DynamicQuantizeLinear's):
 * y = sum over taps inside the input of w * (x - *x_zero_point), int32 (conv.rq.out_kind is
 * MLCC_QOUT_S32, conv.x_zero_point is replaced by *x_zero_point, NULL: 0). Runs
 * mlcc_u8_conv2d__depthwise (depthwise = 1; w as that kernel takes it, w_rowsum NULL) or
 * mlcc_u8_conv2d (w packed as it takes it; w_rowsum: int32 [out_channels], sum of each
 * output channel's weights, for the bias -zx * w_rowsum it folds). scratch:
 * MLCC_CONV_INTEGER_BIAS_BYTES(out_channels) (the bias), then the scratch of the kernel it
 * runs. */
typedef struct mlcc_conv_integer_params {
    mlcc_qconv2d_params conv;
    int32_t depthwise;
} mlcc_conv_integer_params;

#define MLCC_CONV_INTEGER_BIAS_BYTES(m) ((((m) * 4 + 63) / 64) * 64)

void mlcc_u8_conv_integer(const mlcc_conv_integer_params *p, const uint8_t *x,
                          const uint8_t *x_zero_point, const int8_t *w,
                          const int32_t *w_rowsum, int32_t *y, uint8_t *scratch,
                          mlcc_threadpool *pool);

/* The weight zero point of ONNX ConvInteger, after mlcc_u8_conv_integer without it:
 *   y[b][c][i] -= w_zero_point[c] * xsum[b][c / (channels / groups)][i]
 * where xsum is the window sum of (x - x_zero_point) over each group's input channels
 * (mlcc_u8_conv_integer with all-one weights, one output channel per group). */
typedef struct mlcc_conv_zero_point_params {
    int64_t batch, channels, groups, plane;
} mlcc_conv_zero_point_params;

void mlcc_i32_conv_zero_point_correct(const mlcc_conv_zero_point_params *p,
                                      const int32_t *xsum, const int32_t *w_zero_point,
                                      int32_t *y);

#endif /* MLCC_QCONV_H */
