/* 2-D convolution (NCHW activations, OIHW weights) with fused bias and activation. */
#ifndef MLCC_CONV_H
#define MLCC_CONV_H

#include "mlcc_kernel.h"
#include "gemm.h"

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
 * portable reference of mlcc_f32_conv2d__packed. scratch holds
 * (in_channels / groups) * kernel_h * kernel_w * out_h * out_w floats, or nothing for a
 * 1x1 convolution with stride 1 and no padding (which multiplies x directly).
 * bias may be NULL. */
void mlcc_f32_conv2d(const mlcc_conv2d_params *p, const float *x, const float *w,
                     const float *bias, float *y, float *scratch);

/* ---- Shared by conv.c and depthwise.c ---- */

/* The output columns [lo, hi) whose input column ow * stride - pad + offset lies in [0, size),
 * lo <= hi <= out_size (also the columns of one phase of a strided plane: conv.c, depthwise.c). */
static inline void mlcc_conv_valid_range(ptrdiff_t out_size, ptrdiff_t stride, ptrdiff_t pad,
                                         ptrdiff_t offset, ptrdiff_t size, ptrdiff_t *lo,
                                         ptrdiff_t *hi) {
    /* smallest o with o*stride >= pad - offset; largest o with o*stride <= size - 1 + pad - offset */
    ptrdiff_t first = pad - offset, last = size - 1 + pad - offset;
    ptrdiff_t l = first <= 0 ? 0 : (first + stride - 1) / stride;
    ptrdiff_t h = last < 0 ? -1 : last / stride;
    if (l > out_size) l = out_size;
    if (h > out_size - 1) h = out_size - 1;
    *lo = l;
    *hi = h + 1 > l ? h + 1 : l;
}

/* Units per thread: enough for the threads that run to take over the share of one the OS
 * has not scheduled (a busy machine), few enough to keep each unit's GEMM large. */
#define MLCC_CONV_UNITS_PER_THREAD 4

/* pool: see mlcc_runtime.h (NULL: the calling thread only); results do not depend on it.
 * Convolutions of fewer than MLCC_MIN_PARALLEL_MACS multiply-adds (mlcc_kernel.h) run on the
 * caller. */

/* General grouped convolution as a GEMM of the weights, packed at compile time (gemm.h's A
 * layout per group, of out_channels / groups rows rounded up to MLCC_GEMM_MR, kernel_size deep),
 * by the im2col matrix, which is never materialized whole: block_cols output positions at a time
 * are gathered straight into the GEMM's B panels in scratch. block_cols is a multiple of 64 (so
 * of MLCC_GEMM_NR) chosen by the compiler so that the panels stay in L2; scratch holds
 * (in_channels / groups * kernel_h * kernel_w + 1) * block floats, where block = min(block_cols,
 * out_h * out_w rounded up to 64) (the panels and one im2col row). bias may be NULL. */
typedef struct mlcc_conv2d_packed_params {
    mlcc_conv2d_params conv;
    int64_t block_cols;
} mlcc_conv2d_packed_params;

void mlcc_f32_conv2d__packed(const mlcc_conv2d_packed_params *p, const float *x, const float *w,
                             const float *bias, float *y, float *scratch, mlcc_threadpool *pool);

/* The same convolution followed by a residual Add and the activation, fused
 * (passes.fuse_residual_add): y = act(conv(x) + bias + residual), summed in that order (the
 * unfused Conv -> Add -> activation's, so the results are the same bits), in the GEMM's
 * epilogue (mlcc_f32_gemm_residual__packed). residual has y's shape and must not overlap y. */
void mlcc_f32_conv2d_residual__packed(const mlcc_conv2d_packed_params *p, const float *x,
                                      const float *w, const float *bias, const float *residual,
                                      float *y, float *scratch, mlcc_threadpool *pool);

/* The same convolution for small feature maps, where the im2col rows are made of short runs:
 * the im2col matrix is gathered through a table made at compile time, table[k * out_h * out_w
 * + j] = the offset in the group's input of im2col row k, column j, or -1 for padding. */
void mlcc_f32_conv2d__packed_table(const mlcc_conv2d_packed_params *p, const float *x,
                                   const float *w, const float *bias, const int32_t *table,
                                   float *y, float *scratch, mlcc_threadpool *pool);

/* Convolution as an implicit GEMM (no im2col at all): each group's input is copied once,
 * zero-padded and split by stride phase, into scratch: per channel, stride_h x stride_w
 * sub-planes (phase (ry, rx) holds padded rows ry, ry + stride_h, ... and columns rx,
 * rx + stride_w, ...) of hq x wq = (out_h + (kernel_h - 1) * dilation_h / stride_h) x
 * (out_w + (kernel_w - 1) * dilation_w / stride_w) (integer divisions); stride 1 is one
 * sub-plane, the padded input itself. The GEMM then runs over "virtual" output positions
 * q = oh * wq + ow, for which row k = (c, kh, kw) of the im2col matrix is the contiguous run
 * starting at offsets[k] = ((c * stride_h + kh * dilation_h % stride_h) * stride_w + kw *
 * dilation_w % stride_w) * hq * wq + (kh * dilation_h / stride_h) * wq + kw * dilation_w /
 * stride_w. The micro-kernel reads those runs in place; the columns ow >= out_w are computed
 * and dropped (wq - out_w of every wq). w is packed as for mlcc_f32_conv2d__packed, and every
 * output sums its terms in the same order: the results are bit-identical to it.
 * block_cols (a multiple of 64) is the virtual columns per block; when the depth
 * (in_channels / groups * kernel_h * kernel_w) exceeds MLCC_GEMM_KC, partial sums of
 * min(MLCC_GEMM_MC, out_channels / groups rounded up to 8) rows x block_cols columns are kept
 * in scratch, one such buffer per thread, up to MLCC_IMPLICIT_SLICES threads.
 * scratch: mlcc_implicit_pad_floats() floats, then the partial sums (mlcc/ops/conv.py
 * implicit_plan computes the same). */
#define MLCC_IMPLICIT_SLICES 4
#define MLCC_IMPLICIT_SLACK 64  /* zeros past the sub-planes: reads of the last panel */
static inline ptrdiff_t mlcc_implicit_sub_h(const mlcc_conv2d_params *p) {
    return (ptrdiff_t)(p->out_h + (p->kernel_h - 1) * p->dilation_h / p->stride_h);
}
static inline ptrdiff_t mlcc_implicit_sub_w(const mlcc_conv2d_params *p) {
    return (ptrdiff_t)(p->out_w + (p->kernel_w - 1) * p->dilation_w / p->stride_w);
}
static inline ptrdiff_t mlcc_implicit_pad_floats(const mlcc_conv2d_params *p) {
    return (ptrdiff_t)(p->in_channels / p->groups * p->stride_h * p->stride_w) *
               mlcc_implicit_sub_h(p) * mlcc_implicit_sub_w(p) +
           (ptrdiff_t)((p->kernel_w - 1) * p->dilation_w) + MLCC_IMPLICIT_SLACK;
}
void mlcc_f32_conv2d__implicit(const mlcc_conv2d_packed_params *p, const float *x,
                               const float *w, const float *bias, const int32_t *offsets,
                               float *y, float *scratch, mlcc_threadpool *pool);
/* offsets == NULL (a feature map of a dynamic size: the compiler cannot tabulate them), in
 * every implicit variant below too: the kernel computes the offsets from the parameters at
 * each call into the first mlcc_implicit_offsets_floats() floats of scratch (in_channels /
 * groups x kernel_h x kernel_w int32, rounded up to 64 bytes), and the scratch described
 * follows them. */
static inline ptrdiff_t mlcc_implicit_offsets_floats(const mlcc_conv2d_params *p) {
    return ((ptrdiff_t)(p->in_channels / p->groups * p->kernel_h * p->kernel_w) + 15) / 16 * 16;
}

/* The same implicit GEMM (same sub-planes, offsets, weights and bits) for depths of at most
 * MLCC_GEMM_KC, tiled by output rows: a tile covers columns of one output row only (a last one
 * narrower), so no virtual column is computed and every tile is stored whole, in registers,
 * straight into the output (the 3-channel stems: MobileNetV2's 3x3/2). scratch:
 * mlcc_implicit_pad_floats() floats. */
void mlcc_f32_conv2d__implicit_rows(const mlcc_conv2d_packed_params *p, const float *x,
                                    const float *w, const float *bias, const int32_t *offsets,
                                    float *y, float *scratch, mlcc_threadpool *pool);

/* The same implicit GEMM for stride-1 convolutions on small maps, without virtual columns:
 * per input channel c and kernel column kj, the input shifted by kj * dilation_w - pad_left
 * columns (zero-padded) is copied into scratch as a plane of hp x out_w, hp = out_h +
 * (kernel_h - 1) * dilation_h (padded rows); row k = (c, kh, kw) of the im2col matrix is then
 * the run of out_h * out_w values at offsets[k] = ((c * kernel_w + kw) * hp + kh *
 * dilation_h) * out_w. kernel_w copies of the input instead of one, but no dropped columns:
 * an 8 x 8 map of a 3x3 kernel computes 64 columns instead of 80 (96 in whole panels of 32),
 * a 4 x 4 map 16 instead of 24 (32). Same sums in the same order as the packed convolution.
 * scratch: mlcc_implicit_cols_pad_floats() floats, then the partial sums as above
 * (mlcc/ops/conv.py implicit_plan(..., cols=True)). */
static inline ptrdiff_t mlcc_implicit_cols_h(const mlcc_conv2d_params *p) {
    return (ptrdiff_t)(p->out_h + (p->kernel_h - 1) * p->dilation_h);
}
static inline ptrdiff_t mlcc_implicit_cols_pad_floats(const mlcc_conv2d_params *p) {
    return (ptrdiff_t)(p->in_channels / p->groups * p->kernel_w) * mlcc_implicit_cols_h(p) *
               (ptrdiff_t)p->out_w + MLCC_IMPLICIT_SLACK;
}
void mlcc_f32_conv2d__implicit_cols(const mlcc_conv2d_packed_params *p, const float *x,
                                    const float *w, const float *bias, const int32_t *offsets,
                                    float *y, float *scratch, mlcc_threadpool *pool);

/* The same implicit GEMM transposed, for small maps: output channels along the vectors, so
 * that no virtual column is computed (a 7 x 7 map costs 49 positions, not 64 columns). Tiles
 * of MLCC_CONVT_CP output channels (a last panel of at most half that: half the vectors) x
 * up to MLCC_CONVT_RMAX output positions of one output row (the row cut into
 * ceil(out_w / RMAX) nearly equal chunks); per k step the tile broadcasts the R inputs at
 * offsets[k] + q (q = oh * wq + ow as above: consecutive) and loads CP weights. 1x1 kernels
 * (virtual columns = output positions) take flat tiles instead: a unit's positions cut into
 * nearly equal runs of at most MLCC_CONVT_FLAT_RMAX across rows, each over the whole depth
 * with the sums of earlier k blocks in registers, bias, residual and activation applied in
 * registers. w is packed like gemm.h's A layout with panels of MLCC_CONVT_CP rows instead of
 * MLCC_GEMM_MR (mlcc/ops/conv.py: pack_a(..., CONVT_CP)). Each output sums its terms in the
 * order of mlcc_f32_conv2d__implicit (k blocks of MLCC_GEMM_KC, each a fresh chain, added to
 * the partial sums): bit-identical to it and to the gathered path. mlcc/ops/conv.py decides
 * where it runs (convt_applies, convt_1x1_applies: 512-bit targets). scratch:
 * mlcc_implicit_pad_floats() floats (none for 1x1 convolutions of stride 1 without padding,
 * which read their input in place), then, for KxK kernels deeper than MLCC_GEMM_KC, partial
 * sums of mlcc_convt_block_rows() output rows (about MLCC_CONVT_PART_POS positions) x
 * MLCC_CONVT_CP floats per thread (up to MLCC_IMPLICIT_SLICES).
 * The _residual form adds residual (y's shape) after the bias, before the activation, as
 * mlcc_f32_conv2d_residual__packed does. */
#define MLCC_CONVT_CP 32
#define MLCC_CONVT_RMAX 8
#define MLCC_CONVT_FLAT_RMAX 12
#define MLCC_CONVT_PART_POS 512
static inline ptrdiff_t mlcc_convt_block_rows(const mlcc_conv2d_params *p) {
    const ptrdiff_t rows = MLCC_CONVT_PART_POS / (ptrdiff_t)p->out_w;
    return rows < 1 ? 1 : rows > (ptrdiff_t)p->out_h ? (ptrdiff_t)p->out_h : rows;
}
void mlcc_f32_conv2d__implicit_t(const mlcc_conv2d_packed_params *p, const float *x,
                                 const float *w, const float *bias, const int32_t *offsets,
                                 float *y, float *scratch, mlcc_threadpool *pool);
void mlcc_f32_conv2d_residual__implicit_t(const mlcc_conv2d_packed_params *p, const float *x,
                                          const float *w, const float *bias,
                                          const int32_t *offsets, const float *residual,
                                          float *y, float *scratch, mlcc_threadpool *pool);

/* A 1-D convolution over one input channel with few output positions and many output
 * channels (the STFT and filterbank front ends of audio models: 512-sample windows, 5
 * positions, 257 channels), where the GEMMs above put the positions along the vectors and use
 * a few of their lanes: the product frames x weights^T instead, frame p the window at
 * p * stride_w read in place (gemm.a_row_stride = stride_w, a_col_stride = dilation_w), the
 * weights^T in gemm.h's B panels (mlcc/ops/gemm.py pack_b_panels), so that the vectors run
 * along the output channels; bias and activation in the GEMM's epilogue, into scratch
 * (positions x out_channels floats), then transposed into y per image. The product sums each
 * output in window order as mlcc_f32_gemm does; mlcc/ops/conv_kernels.py decides where it
 * runs (frames_fit). */
typedef struct mlcc_conv2d_frames_params {
    mlcc_gemm_params gemm;               /* m = positions, n = out_channels, k = kernel_w */
    int64_t batch, image_floats;         /* images, and the floats of one input image */
} mlcc_conv2d_frames_params;
void mlcc_f32_conv2d__frames(const mlcc_conv2d_frames_params *p, const float *x,
                             const float *w_panels, const float *bias, float *y, float *scratch,
                             mlcc_threadpool *pool);

#endif /* MLCC_CONV_H */
