/* 2-D max and average pooling over NCHW planes (1-D pooling runs with in_h = out_h = 1).
 *
 * Thread-compatible: no state; x, y and scratch must not overlap. */
#ifndef MLCC_POOL_H
#define MLCC_POOL_H

#include "mlcc_kernel.h"

/* Output pixel (oh, ow) of plane n covers the input taps
 *   (oh * stride_h + kh * dilation_h - pad_top, ow * stride_w + kw * dilation_w - pad_left)
 * for kh < kernel_h, kw < kernel_w; taps outside the input are padding. Bottom/right padding
 * and ceil_mode are already in out_h/out_w.
 *
 * For stride_w > 1 each input plane is first split into stride_w phases (phase q holds the
 * columns q, q + stride_w, ...; phase_width = ceil(in_w / stride_w) columns each) in scratch,
 * so that every kernel column reads contiguous inputs. tap_offsets[kw] (kernel_w entries,
 * precomputed by the compiler) is where kernel column kw of output column ow sits in a row:
 *   stride_w == 1: at x_row[ow + tap_offsets[kw]]     (kw * dilation_w - pad_left)
 *   stride_w  > 1: at phases_row[ow + tap_offsets[kw]] (q * phase_width + floor(t / stride_w)
 *                  with t = kw * dilation_w - pad_left and q = t mod stride_w)
 * A plane's scratch holds in_h * stride_w * phase_width floats when stride_w > 1 (else it may
 * be NULL). tap_offsets may be NULL when stride_w > 1 and kernel_w <= MLCC_POOL_MAX_TAPS: the
 * kernel then computes them from the parameters at each call (a dynamic width, whose
 * phase_width changes with the size: mlcc/ops/pool.py). */
typedef struct mlcc_pool2d_params {
    int64_t planes;                   /* batch * channels */
    int64_t in_h, in_w, out_h, out_w;
    int64_t kernel_h, kernel_w;
    int64_t stride_h, stride_w;
    int64_t dilation_h, dilation_w;
    int64_t pad_top, pad_left;
    int64_t phase_width;              /* ceil(in_w / stride_w) */
    int64_t scratch_slice;            /* floats of scratch per thread (one plane's work) */
} mlcc_pool2d_params;

/* Threads of a pool that share a 2-D pooling, by planes: scratch holds this many slices of
 * scratch_slice floats (one in builds without threads: mlcc/ops/pool.py POOL_SLICES). */
#define MLCC_POOL_SLICES 4

/* Kernel columns of a pooling whose tap offsets the kernel computes (tap_offsets NULL):
 * mlcc/ops/pool.py POOL_MAX_TAPS. */
#define MLCC_POOL_MAX_TAPS 64

/* Maximum over the taps inside the input; -FLT_MAX for a window that is all padding (as
 * onnxruntime). NaN inputs are skipped, except that with stride_w > 1 a NaN on a window
 * column's top tap can come out (pool.c max_plane_separable says when). */
/* Max pools of stride 1 and dilation 1 whose output rows are at most MLCC_MAXPOOL_SMALL_W
 * wide run over a padded copy of each plane (pool.c max_plane_small): scratch holds
 * mlcc_maxpool_small_floats() floats then (mlcc/ops/pool.py computes the same). */
#define MLCC_MAXPOOL_SMALL_W 32
static inline int mlcc_maxpool_small(const mlcc_pool2d_params *p) {
    return p->stride_h == 1 && p->stride_w == 1 && p->dilation_h == 1 && p->dilation_w == 1 &&
           p->out_w <= MLCC_MAXPOOL_SMALL_W;
}
static inline ptrdiff_t mlcc_maxpool_small_floats(const mlcc_pool2d_params *p) {
    const ptrdiff_t pitch = (ptrdiff_t)(p->out_w + p->kernel_w - 1);
    /* the padded plane, then the column maxima (out_h rows of pitch, and kernel_w more) */
    return (ptrdiff_t)(p->out_h + p->kernel_h - 1) * pitch + (ptrdiff_t)p->out_h * pitch +
           (ptrdiff_t)p->kernel_w;
}
void mlcc_f32_maxpool2d(const mlcc_pool2d_params *p, const float *x, const int64_t *tap_offsets,
                        float *y, float *scratch, mlcc_threadpool *pool);

/* Sum over the taps inside the input times inv_count[oh] * inv_count[out_h + ow]: the
 * divisor (taps inside the input, or inside the padded input for count_include_pad) is a
 * product of a row and a column count, precomputed by the compiler as reciprocals
 * (out_h + out_w floats; 0 for an empty count). */
void mlcc_f32_avgpool2d(const mlcc_pool2d_params *p, const float *x, const int64_t *tap_offsets,
                        const float *inv_count, float *y, float *scratch, mlcc_threadpool *pool);

/* The general form: up to 3 spatial axes (1-D and 2-D windows given as 3-D with leading
 * extents 1), MaxPool's Indices output, other element types. A direct loop over each window:
 * the 2-D float kernels above are the fast path; this one serves what they do not cover.
 * Output pixel o covers the taps o[a] * stride[a] + k[a] * dilation[a] - pad[a] along each
 * axis a; taps outside the input are padding (skipped). */
typedef struct mlcc_poolnd_params {
    int64_t planes;                   /* batch * channels */
    int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad[3];
    int32_t storage_order;            /* Indices: 0 row-major, 1 column-major spatial index */
} mlcc_poolnd_params;

/* Maximum over the taps inside the input (the first one on ties; NaN skipped; the type's
 * lowest value for a window that is all padding). indices (may be NULL): per output, the
 * flat index of the maximum in x, plane * in[0] * in[1] * in[2] plus the spatial index in
 * storage_order (-1 for an all-padding window). */
void mlcc_f32_maxpool_nd(const mlcc_poolnd_params *p, const float *x, float *y,
                         int64_t *indices);
void mlcc_u8_maxpool_nd(const mlcc_poolnd_params *p, const uint8_t *x, uint8_t *y,
                        int64_t *indices);
void mlcc_s8_maxpool_nd(const mlcc_poolnd_params *p, const int8_t *x, int8_t *y,
                        int64_t *indices);

/* Sum over the taps inside the input times inv_count[o0] * inv_count[out0 + o1] *
 * inv_count[out0 + out1 + o2] (per-axis reciprocal counts, as mlcc_f32_avgpool2d). */
void mlcc_f32_avgpool_nd(const mlcc_poolnd_params *p, const float *x, const float *inv_count,
                         float *y);

/* LpPool and GlobalLpPool: y = (sum over the taps inside the input of |x|^p)^(1/p) (padding
 * taps add 0). GlobalLpPool is one window over the flattened spatial axes. */
typedef struct mlcc_lppool_params {
    mlcc_poolnd_params pool;
    float p;
} mlcc_lppool_params;

void mlcc_f32_lppool_nd(const mlcc_lppool_params *p, const float *x, float *y);

#endif /* MLCC_POOL_H */
