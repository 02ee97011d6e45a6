/* Resize (and Upsample) of the two innermost axes, nearest and linear. The compiler computes
 * every source index and interpolation weight per output row and column (tables in the weight
 * blob), so these kernels only gather and blend; all coordinate modes share them. */
#ifndef MLCC_RESIZE_H
#define MLCC_RESIZE_H

#include "mlcc_kernel.h"

/* The input is planes x in_h x in_w, the output planes x out_h x out_w, both contiguous. */
typedef struct mlcc_resize_params {
    int64_t planes;             /* product of the leading (not resized) dimensions */
    int64_t in_h, in_w, out_h, out_w;
    int32_t elem_size;          /* bytes per element (nearest only; linear is float) */
} mlcc_resize_params;

/* y[p, i, j] = x[p, map[i], map[out_h + j]]; map entries lie in [0, in_h) and [0, in_w).
 * Any element size. On a pool, large ones split by output rows (a copy: the same bits). */
void mlcc_resize_nearest(const mlcc_resize_params *p, const void *x, const int32_t *map,
                         void *y, mlcc_threadpool *pool);

/* Bilinear blend of two source rows and two source columns per output element:
 *   rows: r0 = map[i], r1 = map[out_h + i] with weights wt[i], wt[out_h + i]
 *   cols: c0 = map[2 out_h + j], c1 = map[2 out_h + out_w + j], weights at the same places
 *   y[p, i, j] = wr0 (wc0 x[r0, c0] + wc1 x[r0, c1]) + wr1 (wc0 x[r1, c0] + wc1 x[r1, c1])
 * scratch holds 2 * out_w floats per thread (MLCC_RESIZE_SLICES of them, one without threads):
 * source rows blended along the width, reused by the output rows that read them. On a pool,
 * large ones split by output rows (each computed whole by one thread: the same bits). */
#define MLCC_RESIZE_SLICES 4
void mlcc_f32_resize_linear(const mlcc_resize_params *p, const float *x, const int32_t *map,
                            const float *wt, float *y, float *scratch, mlcc_threadpool *pool);

/* The same two kernels where the sizes are known only at run time (bounded dynamic shapes):
 * the tables are computed from the sizes and the coordinate rules at each call, into the
 * scratch, in float32 as the compiler computes them for static sizes (mlcc/ops/resize.py). */
typedef enum mlcc_resize_coord {
    MLCC_RESIZE_ASYMMETRIC = 0,
    MLCC_RESIZE_HALF_PIXEL = 1,
    MLCC_RESIZE_PYTORCH_HALF_PIXEL = 2,
    MLCC_RESIZE_TF_HALF_PIXEL_FOR_NN = 3,
    MLCC_RESIZE_ALIGN_CORNERS = 4,
    MLCC_RESIZE_HALF_PIXEL_SYMMETRIC = 5,   /* mlcc_f32_resize_taps__computed only */
    MLCC_RESIZE_TF_CROP_AND_RESIZE = 6      /* mlcc_f32_resize_taps__computed only */
} mlcc_resize_coord;

typedef enum mlcc_resize_rounding {
    MLCC_RESIZE_ROUND_PREFER_FLOOR = 0,
    MLCC_RESIZE_ROUND_PREFER_CEIL = 1,
    MLCC_RESIZE_FLOOR = 2,
    MLCC_RESIZE_CEIL = 3,
    MLCC_RESIZE_SIMPLE = 4          /* Resize-10 / Upsample: ceil downsampling, else trunc */
} mlcc_resize_rounding;

typedef struct mlcc_resize_computed_params {
    mlcc_resize_params base;
    int32_t coord;                  /* mlcc_resize_coord */
    int32_t rounding;               /* mlcc_resize_rounding (nearest only) */
    float scale_h, scale_w;         /* 0: out / in at run time (the node gave sizes) */
} mlcc_resize_computed_params;

/* scratch: (out_h + out_w) int32. */
void mlcc_resize_nearest__computed(const mlcc_resize_computed_params *p, const void *x,
                                   void *y, void *scratch);

/* scratch: 2 (out_h + out_w) int32, 2 (out_h + out_w) floats, then 2 out_w floats. */
void mlcc_f32_resize_linear__computed(const mlcc_resize_computed_params *p, const float *x,
                                      float *y, void *scratch);

/* The general separable form (cubic, antialias, exclude_outside, tf_crop_and_resize):
 * taps_h source rows per output row and taps_w source columns per output column.
 *   map: out_h x taps_h row indices, then out_w x taps_w column indices, in [0, in_h) and
 *        [0, in_w), except that -1 as the first index of an output row or column marks it as
 *        outside the input: those outputs are extrapolation_value.
 *   wt:  the weights, laid out as map.
 *   y[p, i, j] = sum_a wr[i, a] sum_b wc[j, b] x[p, rows[i, a], cols[j, b]]
 * scratch holds in_h * out_w floats per thread (MLCC_RESIZE_SLICES, one without threads):
 * every source row resized along the width. On a pool, large ones split by planes. */
typedef struct mlcc_resize_taps_params {
    int64_t planes;
    int64_t in_h, in_w, out_h, out_w;
    int32_t taps_h, taps_w;
    float extrapolation_value;
} mlcc_resize_taps_params;

void mlcc_f32_resize_taps(const mlcc_resize_taps_params *p, const float *x, const int32_t *map,
                          const float *wt, float *y, float *scratch, mlcc_threadpool *pool);

/* Cubic, antialias, exclude_outside and tf_crop_and_resize where the sizes are known only at
 * run time: the taps of each output row and column and their weights computed at each call, in
 * double as the compiler's tables are for static sizes (mlcc/ops/resize.py: taps_table), then
 * mlcc_f32_resize_taps. An antialiased downscale takes more taps the smaller its scale:
 * base.taps_h and base.taps_w are the most that any size of the range takes (the scratch's
 * room); each call takes the count of its scale. scratch: (taps_h out_h + taps_w out_w) int32,
 * as many floats, then in_h * out_w floats. */
typedef struct mlcc_resize_taps_computed_params {
    mlcc_resize_taps_params base;
    int32_t coord;                  /* mlcc_resize_coord, not TF_HALF_PIXEL_FOR_NN */
    int32_t cubic;                  /* 1 cubic, 0 linear */
    int32_t antialias;
    int32_t exclude_outside;
    float scale_h, scale_w;         /* 0: out / in at run time (the node gave sizes) */
    float cubic_a;
    float roi_h0, roi_h1, roi_w0, roi_w1;   /* tf_crop_and_resize: the crop of each axis */
} mlcc_resize_taps_computed_params;

void mlcc_f32_resize_taps__computed(const mlcc_resize_taps_computed_params *p, const float *x,
                                    float *y, void *scratch);

#endif /* MLCC_RESIZE_H */
