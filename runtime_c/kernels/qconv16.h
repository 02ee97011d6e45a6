/* W8A16 integer kernels: int16 activations (symmetric, zero point 0) times int8 weights
 * (symmetric, per output channel), for the layers the int8 quantizer keeps at higher precision
 * (mlcc/quant/rules.py, docs/quantization.md "W8A16").
 *
 * Arithmetic (tests/test_quant_kernels16.py holds its numpy model):
 *   acc = sum_k x[k] * w[c][k]                      exact integer: int16 x int8 products summed
 *         in int32 over blocks of MLCC_S16_BLOCK_PAIRS pairs (512 products: 512 * 32768 * 127
 *         < 2^31, so a block cannot overflow), the blocks added in int64 (any K)
 *   f   = (float)((double)acc * (double)scale[c]) + fbias[c]     scale = x_scale * w_scale[c]
 *   f   = act(f)                                    the fused activation (mlcc_act, any kind)
 * then, per the consumer's precision (ep.out_kind):
 *   MLCC_S16_OUT_F32: y = f
 *   MLCC_S16_OUT_S16: y = clamp(rint_even(f / y_scale), -32768, 32767)      (int16)
 *   MLCC_S16_OUT_U8:  y = clamp(rint_even(f / y_scale), -zp, 255 - zp) + zp (uint8)
 * i.e. exactly QuantizeLinear of the float result (mlcc_f32_quantize's operations). The sums
 * are exact and every path shares the epilogue, so the vector paths (AVX-512 and AVX2
 * VPMADDWD on int16 pairs, AVX512-VNNI VPDPWSSD; chosen by the target's vector width,
 * MLCC_VECTOR_BYTES, and the instruction sets it compiles for) give the portable loops' bytes,
 * on any thread count.
 *
 * Layout of the product: the weights of each group as int16 pairs in tiles of MLCC_S16_MR rows
 * ([groups][rows / 8][k2][8][2], rows padded to 8, K to even: zeros), packed at compile time
 * for the __packed entries (mlcc/ops/quant16.py pack_weights16), widened into scratch per call
 * by the int8-weight ones; the input is packed per chunk of output positions into
 * [k2][cols][2] int16 (convolutions: im2col with zeros for the padding, two taps' rows
 * interleaved; fully connected: the rows of x), cols a multiple of 32; tiles of 8 channels x
 * 32 positions; the AVX-512 path keeps a tile's int32 sums in registers and runs the epilogue
 * on 16 lanes at a time (the same operations, lane for lane).
 * Depthwise convolutions (groups = in = out channels, kernel_h * kernel_w <= 512) take no
 * tiles and no weight scratch: each channel's window sums straight from its int16 plane, in
 * int32 (at most 512 products: exact), 16 outputs of a row per vector on AVX-512 (strides 1
 * and 2; (x, 0) x (w, 0) pairs), the portable loops elsewhere; the epilogue as above.
 *
 * Thread-compatible: no state; x, y and scratch must not overlap. */
#ifndef MLCC_QCONV16_H
#define MLCC_QCONV16_H

#include "qelem.h"

enum mlcc_s16_out_kind { MLCC_S16_OUT_F32 = 0, MLCC_S16_OUT_S16 = 1, MLCC_S16_OUT_U8 = 2 };

typedef struct mlcc_s16_epilogue {
    int32_t out_kind;          /* mlcc_s16_out_kind */
    float y_scale;             /* S16 and U8 outputs */
    int32_t zero_point;        /* U8 output */
    mlcc_act act;
} mlcc_s16_epilogue;

/* Pairs per int32 block of the sums (see above). */
#define MLCC_S16_BLOCK_PAIRS 256
#define MLCC_S16_K2(k) (((k) + 1) / 2)
#define MLCC_S16_MR 8
#define MLCC_S16_ROWS(m) (((m) + MLCC_S16_MR - 1) / MLCC_S16_MR * MLCC_S16_MR)
/* Scratch: the widened weights (not for the __packed entries), then one slice of packed
 * columns per thread (MLCC_DW_SLICES slices, 1 in builds without threads, MLCC_NO_THREADS),
 * 64-byte multiples each. */
#define MLCC_S16_WEIGHT_BYTES(groups, m_per_group, k) \
    (((size_t)(groups) * MLCC_S16_ROWS(m_per_group) * MLCC_S16_K2(k) * 4 + 63) / 64 * 64)
#define MLCC_S16_SLICE_BYTES(k, cols) (((size_t)MLCC_S16_K2(k) * (cols) * 4 + 63) / 64 * 64)

/* Geometry as mlcc_qconv2d_params (taps outside the input read 0); w: int8
 * [out_channels][in_channels / groups * kernel_h * kernel_w]; chunk_cols: output positions
 * packed per chunk, a positive multiple of 32. scratch: MLCC_S16_WEIGHT_BYTES(groups,
 * out_channels / groups, in_channels / groups * kernel_h * kernel_w) + slices *
 * MLCC_S16_SLICE_BYTES(same k, chunk_cols). */
typedef struct mlcc_s16_conv2d_params {
    int64_t batch, in_channels, in_h, in_w;
    int64_t out_channels, out_h, out_w;
    int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_left, groups;
    int64_t chunk_cols;
    /* __packed only: the weights' K in (tap, channel pair) order (pack_weights16 with
     * tap_major), and, in builds with the AVX-512 path and groups == 1, the direct product:
     * no im2col, the input rewritten once per batch as planes of channel pairs
     * (MLCC_S16_DIRECT_BYTES of scratch), each tap's pairs of 16 outputs of a row read in
     * place; other builds pack those K columns (the same sums, the same bytes). */
    int64_t direct;
    mlcc_s16_epilogue ep;
} mlcc_s16_conv2d_params;

/* The direct path's planes: [rows][ceil(in_channels / 2)][stride_w][cols][2] int16, the
 * padded rows and columns (per phase) the window reaches. */
#define MLCC_S16_DIRECT_ROWS(p) (((p)->out_h - 1) * (p)->stride_h + \
                                 ((p)->kernel_h - 1) * (p)->dilation_h + 1)
#define MLCC_S16_DIRECT_COLS(p) ((((p)->out_w - 1) * (p)->stride_w + \
                                  ((p)->kernel_w - 1) * (p)->dilation_w + 1 + \
                                  (p)->stride_w - 1) / (p)->stride_w)
#define MLCC_S16_DIRECT_BYTES(p) \
    ((size_t)(((p)->in_channels + 1) / 2) * MLCC_S16_DIRECT_ROWS(p) * (p)->stride_w * \
     MLCC_S16_DIRECT_COLS(p) * 4)

void mlcc_s16_conv2d(const mlcc_s16_conv2d_params *p, const int16_t *x, const int8_t *w,
                     const float *scale, const float *fbias, void *y, uint8_t *scratch,
                     mlcc_threadpool *pool);
/* The portable loops alone (the same bytes; tests compare them). */
void mlcc_s16_conv2d__portable(const mlcc_s16_conv2d_params *p, const int16_t *x,
                               const int8_t *w, const float *scale, const float *fbias, void *y,
                               uint8_t *scratch, mlcc_threadpool *pool);

/* w: the packed int16 weights (layout above); scratch: slices * MLCC_S16_SLICE_BYTES(k,
 * chunk_cols) (depthwise: none; the int8 entry takes those). */
void mlcc_s16_conv2d__packed(const mlcc_s16_conv2d_params *p, const int16_t *x,
                             const int16_t *w, const float *scale, const float *fbias, void *y,
                             uint8_t *scratch, mlcc_threadpool *pool);

/* y[i][j] = epilogue(sum_k x[i][k] w[j][k]): x int16 [m][k], w int8 [n][k], y [m][n];
 * scratch: MLCC_S16_WEIGHT_BYTES(1, n, k) + slices * MLCC_S16_SLICE_BYTES(k, chunk_cols). */
typedef struct mlcc_s16_fc_params {
    int64_t m, n, k;
    int64_t chunk_cols;
    mlcc_s16_epilogue ep;
} mlcc_s16_fc_params;

void mlcc_s16_fc(const mlcc_s16_fc_params *p, const int16_t *x, const int8_t *w,
                 const float *scale, const float *fbias, void *y, uint8_t *scratch,
                 mlcc_threadpool *pool);
void mlcc_s16_fc__portable(const mlcc_s16_fc_params *p, const int16_t *x, const int8_t *w,
                           const float *scale, const float *fbias, void *y, uint8_t *scratch,
                           mlcc_threadpool *pool);
/* w packed as mlcc_s16_conv2d__packed's (one group); scratch: slices * MLCC_S16_SLICE_BYTES. */
void mlcc_s16_fc__packed(const mlcc_s16_fc_params *p, const int16_t *x, const int16_t *w,
                         const float *scale, const float *fbias, void *y, uint8_t *scratch,
                         mlcc_threadpool *pool);

/* y = clamp(rint_even(x / scale), -32768, 32767) (ONNX QuantizeLinear to int16 with zero
 * point 0; NaN gives -32768): the input of a W8A16 layer. p->zero_point must be 0. */
void mlcc_f32_quantize_int16(const mlcc_quantize_params *p, const float *x, int16_t *y);

#endif /* MLCC_QCONV16_H */
