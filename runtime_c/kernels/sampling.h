/* Sampling and rearranging images: GridSample (the values of an image at the points of a grid,
 * interpolated) and Col2Im (blocks summed back into an image, the inverse of im2col).
 *
 * Thread-compatible: no state; y must not overlap the inputs. GridSample and DeformConv split
 * their output points between a pool's threads, RoiAlign and MaxRoiPool their RoIs, each
 * computed whole by one. */
#ifndef MLCC_SAMPLING_H
#define MLCC_SAMPLING_H

#include "mlcc_kernel.h"

#define MLCC_GRID_SAMPLE_MAX_DIMS 3

enum mlcc_grid_mode { MLCC_GRID_NEAREST = 0, MLCC_GRID_LINEAR = 1, MLCC_GRID_CUBIC = 2 };
enum mlcc_grid_padding { MLCC_GRID_ZEROS = 0, MLCC_GRID_BORDER = 1, MLCC_GRID_REFLECTION = 2 };

/* x: [n, c, in_dims...] (nd spatial axes, 1 to 3), grid: [n, points, nd] with the coordinates
 * of each output point in [-1, 1], innermost axis first (x, y, z: grid[..., 0] indexes the
 * last axis of x), y: [n, c, points]. As ONNX GridSample (and its reference implementation):
 * a coordinate u maps to (u + 1) / 2 * (size - 1) with align_corners, else
 * ((u + 1) * size - 1) / 2; nearest rounds it half to even; linear and cubic (Keys, a =
 * -0.75) interpolate separably over 2 or 4 pixels per axis. Pixels outside the image are 0
 * (zeros), the nearest edge pixel (border), or reflected at the image's edges (reflection:
 * at the outer pixels' centres with align_corners, else at their outer edges). A point
 * outside is first moved inside the same way, except with cubic and border padding, where
 * each tap is clamped instead, as onnxruntime does (ONNX's reference implementation clamps
 * the point there too, which differs near the edges; no node test has the case). */
typedef struct mlcc_grid_sample_params {
    int64_t n, c, points;
    int32_t nd;
    int64_t in_dims[MLCC_GRID_SAMPLE_MAX_DIMS];
    int32_t mode;               /* enum mlcc_grid_mode */
    int32_t padding;            /* enum mlcc_grid_padding */
    int32_t align_corners;
} mlcc_grid_sample_params;

void mlcc_f32_grid_sample(const mlcc_grid_sample_params *p, const float *x, const float *grid,
                          float *y, mlcc_threadpool *pool);

/* x: [n, c * prod(block), prod(cols)], y: [n, c, image...] (nd spatial axes): every column
 * entry (channel, block offset k, block position l) is added to the image at
 * l * strides - pads_begin + k * dilations (entries that fall on the padding are dropped).
 * Each image element sums its entries in the order of the column's index. */
typedef struct mlcc_col2im_params {
    int64_t n, c;
    int32_t nd;
    int64_t image[MLCC_MAX_RANK], block[MLCC_MAX_RANK], cols[MLCC_MAX_RANK];
    int64_t strides[MLCC_MAX_RANK], dilations[MLCC_MAX_RANK], pads_begin[MLCC_MAX_RANK];
} mlcc_col2im_params;

void mlcc_f32_col2im(const mlcc_col2im_params *p, const float *x, float *y);

/* RoiAlign (ONNX opset 10, 16, 22, as its reference implementation and onnxruntime): x: [n, c,
 * height, width], rois: [num_rois, 4] boxes (x1, y1, x2, y2) in input coordinates times
 * spatial_scale (minus 0.5 with half_pixel), batch_indices: [num_rois], y: [num_rois, c,
 * out_h, out_w]. Each output bin averages (or takes the largest of, mode max: the largest of
 * the 4 weighted corner values of each sample, as onnxruntime does) a grid of bilinear samples
 * (sampling_ratio per axis, or ceil(bin size) when 0); samples beyond one pixel outside the
 * image count as 0. Without half_pixel boxes are at least 1 x 1.
 * Return MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (checked for every RoI before any is computed:
 * the output is then untouched) for a batch index outside [0, n) or a box whose sampling grid
 * would be non-finite or larger than 16 times the image along an axis (a box far outside the
 * image: a bound on the work). */
typedef struct mlcc_roi_align_params {
    int64_t n, c, height, width, num_rois, out_h, out_w;
    int64_t sampling_ratio;
    float spatial_scale;
    int32_t half_pixel;
    int32_t max_mode;
} mlcc_roi_align_params;

int mlcc_f32_roi_align__i64(const mlcc_roi_align_params *p, const float *x, const float *rois,
                            const int64_t *batch_indices, float *y, mlcc_threadpool *pool);

/* MaxRoiPool (ONNX opset 1, as onnxruntime): x: [n, c, height, width], rois: [num_rois, 5] rows
 * (batch index, x1, y1, x2, y2), y: [num_rois, c, out_h, out_w]. Corners are rounded (half away
 * from zero) after scaling by spatial_scale; the box, end inclusive and at least 1 x 1, is cut
 * into out_h x out_w bins [floor(i * size / out), ceil((i + 1) * size / out)), each clipped to
 * the image; a bin's output is its largest element, 0 for a bin entirely outside the image.
 * Return MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (the output then undefined) for a batch index
 * that truncates to outside [0, n), or a scaled corner that is non-finite or beyond +-2^30. */
typedef struct mlcc_max_roi_pool_params {
    int64_t n, c, height, width, num_rois, out_h, out_w;
    float spatial_scale;
} mlcc_max_roi_pool_params;

int mlcc_f32_max_roi_pool(const mlcc_max_roi_pool_params *p, const float *x, const float *rois,
                          float *y, mlcc_threadpool *pool);

/* DeformConv, 2-D (ONNX opset 19, 22): a convolution whose taps read x at their position plus
 * a learned offset, bilinearly (pixels outside the image are 0), times an optional mask.
 * x: [n, c, height, width], w: [oc, c / group, kh, kw], offset: [n, offset_group * kh * kw * 2,
 * out_h, out_w] ((dy, dx) per tap), bias: [oc] or NULL, mask: [n, offset_group * kh * kw,
 * out_h, out_w] or NULL (all 1), y: [n, oc, out_h, out_w]. */
typedef struct mlcc_deform_conv_params {
    int64_t n, c, height, width, oc, out_h, out_w, kh, kw;
    int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, group, offset_group;
} mlcc_deform_conv_params;

void mlcc_f32_deform_conv2d(const mlcc_deform_conv_params *p, const float *x, const float *w,
                            const float *offset, const float *bias, const float *mask,
                            float *y, mlcc_threadpool *pool);

#endif /* MLCC_SAMPLING_H */
