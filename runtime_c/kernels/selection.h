/* Operators whose output size depends on the data, or that select elements by their values:
 * TopK, NonZero, Compress, Unique and NonMaxSuppression (docs/dynamic-outputs.md).
 *
 * An output whose size the data decides is planned for its maximum (a static size known at
 * compile time) and laid out as if it had that size along its data-dependent axis; the kernel
 * writes the actual size to *count and zeros past it, so that the operators reading the
 * padding (a Gather of its indices, say) see valid zero indices. A count above the maximum
 * (possible when the maximum was lowered with --max-output) returns MLCC_ERR_OUTPUT_TOO_LARGE
 * and never writes past the buffer. Element types: enum mlcc_dtype; the value comparisons
 * (TopK, Unique) handle the integer types, float32 and float64 (Unique also bfloat16). */
#ifndef MLCC_SELECTION_H
#define MLCC_SELECTION_H

#include "mlcc_kernel.h"

/* TopK: x viewed as [outer, n, inner], the k largest (or smallest) along n, best first, ties
 * to the lower index (as onnxruntime). values and indices are [outer, k_max, inner]; k is
 * k_max (k == NULL) or read at run time (*k in [0, k_max], else MLCC_ERR_OUTPUT_TOO_LARGE),
 * then written to *count (if not NULL) and positions k..k_max-1 are zero. A heap of k
 * indices per row (scratch: k_max int64): O(n log k), no full sort. */
typedef struct mlcc_topk_params {
    int64_t outer, n, inner, k_max;
    int32_t dtype, largest;
} mlcc_topk_params;

int mlcc_topk(const mlcc_topk_params *p, const void *x, const int64_t *k, void *values,
              int64_t *indices, int64_t *count, void *scratch);

/* The same over an axis whose size depends on the data (docs/dynamic-outputs.md): only the
 * first *n_count of the n elements of each row compete (the others are padding); a k above
 * *n_count is MLCC_ERR_OUTPUT_TOO_LARGE, as a k above the axis is. */
int mlcc_topk__counted(const mlcc_topk_params *p, const void *x, const int64_t *n_count,
                       const int64_t *k, void *values, int64_t *indices, int64_t *count,
                       void *scratch);

/* NonZero: the coordinates of the non-zero elements of x (shape dims[0..rank), row-major
 * order) as out[rank, max] (int64; column j is the j-th non-zero element). -0.0 is zero, NaN
 * is not. */
typedef struct mlcc_nonzero_params {
    int64_t numel, max;
    int32_t rank, dtype;
    int64_t dims[MLCC_MAX_RANK];
} mlcc_nonzero_params;

int mlcc_nonzero(const mlcc_nonzero_params *p, const void *x, int64_t *out, int64_t *count);

/* Compress: x viewed as [outer, dim, inner]; the slices j < min(dim, n_cond) whose cond[j]
 * is true, in order, as out[outer, max, inner]. */
typedef struct mlcc_compress_params {
    int64_t outer, dim, inner, n_cond, max;
    int32_t elem_size;
} mlcc_compress_params;

int mlcc_compress(const mlcc_compress_params *p, const void *x, const uint8_t *cond, void *out,
                  int64_t *count);

/* Unique: x viewed as [outer, dim, inner] (outer = inner = 1 without an axis: the flattened
 * tensor), the distinct slices along dim, sorted ascending (lexicographically, element by
 * element) when sorted, else in order of first occurrence. y is [outer, max, inner];
 * indices (first occurrence) and counts are [max]; inverse is [dim] (the position in y of
 * each slice of x). Any of the last three may be NULL. Scratch: 3 * dim int64 (a stable
 * merge sort of the slice indices). */
typedef struct mlcc_unique_params {
    int64_t outer, dim, inner, max;
    int32_t dtype, sorted;
} mlcc_unique_params;

int mlcc_unique(const mlcc_unique_params *p, const void *x, void *y, int64_t *indices,
                int64_t *inverse, int64_t *counts, int64_t *count, void *scratch);

/* NonMaxSuppression (float32) as onnxruntime computes it: per batch and class, the boxes
 * whose score is above *score_threshold (every box when it is NULL) by descending score
 * (ties: lower index first), each kept unless its IoU with a box kept before in that class
 * is above *iou_threshold (0 when NULL), at most *max_per_class per class (0 when NULL or
 * negative). boxes [batches, n, 4] as [y1, x1, y2, x2] (center_point_box 0, any two
 * opposite corners) or [x_center, y_center, width, height] (1); scores [batches, classes,
 * n]. out[max, 3] holds (batch, class, box) rows in that order. Scratch: n int32 (the
 * candidates' heap), then 5 * n floats (the kept boxes' extents and areas). */
typedef struct mlcc_nms_params {
    int64_t batches, classes, n, max;
    int32_t center_point_box;
} mlcc_nms_params;

int mlcc_f32_nms(const mlcc_nms_params *p, const float *boxes, const float *scores,
                 const int64_t *max_per_class, const float *iou_threshold,
                 const float *score_threshold, int64_t *out, int64_t *count, void *scratch);

/* The same when the number of boxes depends on the data (docs/dynamic-outputs.md): only the
 * first *n_count of the n boxes (and of each class's scores) are candidates. */
int mlcc_f32_nms__counted(const mlcc_nms_params *p, const float *boxes, const float *scores,
                          const int64_t *n_count, const int64_t *max_per_class,
                          const float *iou_threshold, const float *score_threshold,
                          int64_t *out, int64_t *count, void *scratch);

/* Concat along an axis whose size depends on the data: one call per input, src viewed as
 * [outer, src_max, inner] of which the first *src_count along src_max are valid (src_count
 * NULL: all src_max), appended at *count along dst's [outer, dst_max, inner], *count then
 * advanced; the first call (first = 1) zeros dst and sets *count to 0. So the valid parts
 * are packed one after the other and *count ends as their total. */
typedef struct mlcc_concat_counted_params {
    int64_t outer, src_max, inner, dst_max;
    int32_t elem_size, first;
} mlcc_concat_counted_params;

int mlcc_concat__counted(const mlcc_concat_counted_params *p, const void *src,
                         const int64_t *src_count, int64_t *count, void *dst);

/* dst = src ([outer, max, inner], the first *count along max valid) with every padding
 * element set to *fill (one element): a reduction over the data-dependent axis then runs over
 * the whole buffer, the padding being its identity (-inf for a maximum, 0 for a sum). */
typedef struct mlcc_fill_padding_params {
    int64_t outer, max, inner;
    int32_t elem_size;
} mlcc_fill_padding_params;

int mlcc_fill_padding(const mlcc_fill_padding_params *p, const void *src, const int64_t *count,
                      const void *fill, void *dst);

/* mlcc.Sizes: out[0..n) = values[0..n), which the generated code computes from the counts of
 * data-dependent sizes just before the call (a Shape of a NonZero's output, say, and the
 * integer arithmetic on it; docs/dynamic-outputs.md). */
typedef struct mlcc_sizes_params {
    int64_t n;
    int64_t values[8];
} mlcc_sizes_params;

void mlcc_i64_sizes(const mlcc_sizes_params *p, int64_t *out);

#endif /* MLCC_SELECTION_H */
