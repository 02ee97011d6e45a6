/* 3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3) or F(4x4, 3x3). */
#ifndef MLCC_WINOGRAD_H
#define MLCC_WINOGRAD_H

#include "conv.h"

/* y = act(conv(x, w) + bias) for kernel 3x3, stride 1, dilation 1, groups 1 (any padding),
 * computed on 2x2 output tiles: each tile's 4x4 input patch d becomes V = B^T d B, the weights
 * were transformed at compile time into U = G g G^T (16 matrices of out_channels x
 * in_channels, each packed as gemm.h's A: mlcc/ops/winograd.py writes them), the 16
 * element-wise products M = U V run as 16 packed GEMMs over in_channels, and each tile's
 * output is A^T M A. 2.25x fewer multiplications than the direct convolution, but rounded
 * differently (sums of transformed values): results differ from mlcc_f32_conv2d by a few ulps
 * of the largest terms, which is why a target opts in (`winograd: true`).
 * p->conv must describe such a convolution; p->block_cols (a multiple of 64) is the tiles per
 * block. scratch holds mlcc_winograd_scratch_floats(p) floats: the transformed input (16 x
 * in_channels x block), the products (16 x out_channels x block) and, per thread (up to
 * MLCC_WINOGRAD_SLICES), four input rows split by column parity (8 x (ceil(out_w / 2) +
 * MLCC_WINOGRAD_ROW_SLACK), rounded up to whole cache lines: mlcc_winograd_rows_floats).
 * pool: see mlcc_runtime.h; results do not depend on it. */
#define MLCC_WINOGRAD_SLICES 4
/* Floats between consecutive products' operands and results in scratch: their planes, of
 * channels x block floats (a power of two times 64 bytes in most networks), would otherwise
 * fall on the same L1 sets, and the transforms touch all 16 or 36 of them per tile. */
#define MLCC_WINOGRAD_PLANE_PAD 16
/* Slack after each row buffer's column phase: the widest vector's lanes (AVX-512: 16). */
#define MLCC_WINOGRAD_ROW_SLACK 16
/* Floats of one thread's row buffers (phases phases of tw tiles plus the slack), in whole
 * cache lines of 16 floats: the threads rewrite theirs for every channel and tile row, and
 * two threads' buffers in one line (24 x 23 floats each for F(4x4) on 28 x 28 maps) made that
 * line go back and forth between their cores. */
static inline ptrdiff_t mlcc_winograd_rows_floats(ptrdiff_t phases, ptrdiff_t tw) {
    return (phases * (tw + MLCC_WINOGRAD_ROW_SLACK) + 15) / 16 * 16;
}
static inline ptrdiff_t mlcc_winograd_scratch_floats(const mlcc_conv2d_packed_params *p) {
    return 16 * ((ptrdiff_t)(p->conv.in_channels + p->conv.out_channels) *
                     (ptrdiff_t)p->block_cols + 2 * MLCC_WINOGRAD_PLANE_PAD) +
           MLCC_WINOGRAD_SLICES * mlcc_winograd_rows_floats(8, ((ptrdiff_t)p->conv.out_w + 1) / 2);
}
void mlcc_f32_conv2d__winograd_2x2(const mlcc_conv2d_packed_params *p, const float *x,
                                   const float *u, const float *bias, float *y, float *scratch,
                                   mlcc_threadpool *pool);

/* The same convolution by F(4x4, 3x3): 4x4 output tiles from 6x6 input patches, 36 products
 * (U: 36 packed matrices of G g G^T with F(4x4, 3x3)'s G), 4x fewer multiplications than the
 * direct convolution instead of 2.25x, for 10-20x F(2x2, 3x3)'s rounding error in one-layer
 * tests (its transforms multiply by up to 8 and, in G, divide by 24). mlcc/ops/winograd.py
 * picks it per convolution where the map holds enough 4x4 tiles. scratch holds
 * mlcc_winograd_4x4_scratch_floats(p) floats: the transformed input (36 x in_channels x
 * block), the products (36 x out_channels x block) and, per thread, six input rows split into
 * four column phases (24 x (ceil(out_w / 4) + MLCC_WINOGRAD_ROW_SLACK), in whole lines). */
static inline ptrdiff_t mlcc_winograd_4x4_scratch_floats(const mlcc_conv2d_packed_params *p) {
    return 36 * ((ptrdiff_t)(p->conv.in_channels + p->conv.out_channels) *
                     (ptrdiff_t)p->block_cols + 2 * MLCC_WINOGRAD_PLANE_PAD) +
           MLCC_WINOGRAD_SLICES * mlcc_winograd_rows_floats(24, ((ptrdiff_t)p->conv.out_w + 3) / 4);
}
void mlcc_f32_conv2d__winograd_4x4(const mlcc_conv2d_packed_params *p, const float *x,
                                   const float *u, const float *bias, float *y, float *scratch,
                                   mlcc_threadpool *pool);

#endif /* MLCC_WINOGRAD_H */
