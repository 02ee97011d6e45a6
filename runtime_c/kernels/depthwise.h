/* Depthwise convolution (groups == in_channels == out_channels) of float tensors: the direct
 * reference and the vector kernels (depthwise.c). Their parameters are the convolutions' own
 * (conv.h). A file of its own so that models without a depthwise layer do not compile it. */
#ifndef MLCC_DEPTHWISE_H
#define MLCC_DEPTHWISE_H

#include "conv.h"

/* Depthwise convolution (groups == in_channels == out_channels), computed directly. */
void mlcc_f32_conv2d__depthwise(const mlcc_conv2d_params *p, const float *x, const float *w,
                                const float *bias, float *y);


/* Depthwise convolution with vectors along the output plane: each channel's zero-padded input
 * is first copied into scratch split by stride phase (conv.h's implicit GEMM sub-planes,
 * for one channel: stride_h x stride_w sub-planes of hq x wq), so that every kernel tap reads
 * one contiguous run of input for the whole plane of "virtual" outputs q = oh * wq + ow, which
 * is computed as one run of vectors (taps accumulated in registers) into scratch; its rows are
 * then copied out. A row of 7 outputs costs 9 virtual columns, not a whole chunk of vectors.
 * Each output sums its taps in order (the results are the reference's, up to contraction into
 * FMAs). scratch holds MLCC_DW_SLICES * mlcc_dw_scratch_floats(p) floats (mlcc/ops/conv.py
 * dw_scratch_floats computes the same number): the sub-planes, zeros past them for the last
 * chunk's reads, then the plane of virtual outputs rounded up to a chunk, and one chunk more
 * (read by the whole-vector row copies); on a pool, up to MLCC_DW_SLICES threads each take a
 * range of channels and a slice (MLCC_DW_SLICES: mlcc_kernel.h). */
#define MLCC_DW_CHUNK 64   /* floats per step along the plane (4 vectors of up to 16 lanes) */
static inline ptrdiff_t mlcc_dw_scratch_floats(const mlcc_conv2d_params *p) {
    const ptrdiff_t hq = (ptrdiff_t)(p->out_h + (p->kernel_h - 1) * p->dilation_h / p->stride_h);
    const ptrdiff_t wq = (ptrdiff_t)(p->out_w + (p->kernel_w - 1) * p->dilation_w / p->stride_w);
    const ptrdiff_t nv = (ptrdiff_t)p->out_h * wq;
    const ptrdiff_t flat = (ptrdiff_t)(p->stride_h * p->stride_w) * hq * wq +
                           (ptrdiff_t)(p->kernel_w * p->dilation_w) + MLCC_DW_CHUNK +
                           (nv + 2 * MLCC_DW_CHUNK - 1) / MLCC_DW_CHUNK * MLCC_DW_CHUNK;
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64 && !defined(__wasm_simd128__)
    /* 3 x 3 kernels of stride 1 or 2 and output rows of at most 8 (AVX-512 takes channels in
     * lanes, depthwise.c's dw_cil): a ring of rr padded rows of wp 16-float vectors, and a row of
     * zeros. mlcc/ops/conv.py allocates the larger of the two for every target. */
    if (p->kernel_h == 3 && p->kernel_w == 3 && p->dilation_h == 1 && p->dilation_w == 1 &&
        p->stride_h == p->stride_w && p->stride_h >= 1 && p->stride_h <= 2 && p->out_w <= 8) {
        const ptrdiff_t s = (ptrdiff_t)p->stride_h, ow = (ptrdiff_t)p->out_w;
        ptrdiff_t wp = (ow - 1) * s + 3, span = (ow + 14) / ow + 1, ring;
        if (wp < (ptrdiff_t)(p->pad_left + p->in_w)) wp = (ptrdiff_t)(p->pad_left + p->in_w);
        if (span > (ptrdiff_t)p->out_h) span = (ptrdiff_t)p->out_h;
        ring = ((span - 1) * s + 4) * wp * 16;
        if (ring > flat) return ring;
    }
#endif
    return flat;
}
void mlcc_f32_conv2d__depthwise_vec(const mlcc_conv2d_params *p, const float *x, const float *w,
                                    const float *bias, float *y, float *scratch,
                                    mlcc_threadpool *pool);

#endif /* MLCC_DEPTHWISE_H */
