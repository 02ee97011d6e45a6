/* Index-driven gathers and scatters of ONNX's N-D forms: GatherND, ScatterND, ScatterElements,
 * and OneHot. Indices given at run time are checked before anything is written: an index outside
 * its axis makes the call return MLCC_ERR_INDEX_OUT_OF_RANGE (negative indices count from the
 * end), never an access out of bounds. Elements are moved by size (elem_size bytes); the
 * scatter reductions compute on dtype (enum mlcc_dtype). */
#ifndef MLCC_SCATTER_H
#define MLCC_SCATTER_H

#include "mlcc_kernel.h"

enum mlcc_scatter_reduction {
    MLCC_SCATTER_NONE = 0, MLCC_SCATTER_ADD, MLCC_SCATTER_MUL, MLCC_SCATTER_MAX,
    MLCC_SCATTER_MIN
};

/* An N-D index: tuples of k int64 coordinates into the axes dims[0..k) (element strides
 * strides[0..k)) of each of `batch` blocks of batch_stride elements; each tuple names a slice
 * of `slice` contiguous elements. n tuples per block. */
typedef struct mlcc_nd_index_params {
    int64_t batch, n, k, slice, batch_stride;
    int32_t elem_size, dtype, reduction;      /* the last two: ScatterND only */
    int64_t dims[MLCC_MAX_RANK];
    int64_t strides[MLCC_MAX_RANK];
} mlcc_nd_index_params;

/* GatherND: out[b, t, :] = data[b][slice of tuple t of block b]. */
int mlcc_gather_nd(const mlcc_nd_index_params *p, const void *data, const int64_t *indices,
                   void *out);

/* The same when the indices have a size that depends on the data along one of their axes
 * before the last (NonZero -> Transpose; docs/dynamic-outputs.md): the batch * n tuples
 * viewed as [batch * n / (idx_max * idx_inner), idx_max, idx_inner], only the tuples before
 * *count along idx_max are checked and gathered; the others (the padding) give zeros. */
typedef struct mlcc_gather_nd_counted_params {
    mlcc_nd_index_params nd;
    int64_t idx_max, idx_inner;
} mlcc_gather_nd_counted_params;

int mlcc_gather_nd__counted(const mlcc_gather_nd_counted_params *p, const void *data,
                            const int64_t *indices, const int64_t *count, void *out);

/* ScatterND on y (already holding a copy of data): y[slice of tuple t] (reduction)=
 * updates[t, :], tuples in order (batch = 1). */
int mlcc_scatter_nd(const mlcc_nd_index_params *p, const int64_t *indices, const void *updates,
                    void *y);

/* ScatterElements on y (already holding data; y's shape data_shape, contiguous): for every
 * index i of updates (contiguous, shape[0..rank)), y[i with the axis coordinate replaced by
 * indices[i]] (reduction)= updates[i]. */
typedef struct mlcc_scatter_elements_params {
    int32_t rank, axis, elem_size, dtype, reduction;
    int64_t axis_dim;
    int64_t shape[MLCC_MAX_RANK];
    int64_t y_strides[MLCC_MAX_RANK];
} mlcc_scatter_elements_params;

int mlcc_scatter_elements__i64(const mlcc_scatter_elements_params *p, const int64_t *indices,
                               const void *updates, void *y);
int mlcc_scatter_elements__i32(const mlcc_scatter_elements_params *p, const int32_t *indices,
                               const void *updates, void *y);

/* OneHot: indices ([outer, inner], of index_dtype, float ones truncated) to y [outer, depth,
 * inner] of values[1] where the index (+ depth when negative) equals the position along
 * depth, values[0] elsewhere. Indices outside [-depth, depth) give a row of values[0]. */
typedef struct mlcc_one_hot_params {
    int64_t outer, depth, inner;
    int32_t index_dtype, elem_size;
} mlcc_one_hot_params;

void mlcc_one_hot(const mlcc_one_hot_params *p, const void *indices, const void *values,
                  void *y);

/* TensorScatter on y (already holding past_cache; y and update contiguous, the sequence axis
 * between `outer` leading rows and `inner` trailing elements of elem_size bytes): row s < seq
 * of prefix o of update goes to row w + s of prefix o of y, w = write_indices[o / (outer /
 * batch)] (0 when write_indices is NULL); circular: (w + s) modulo max_seq. In linear mode a
 * row outside [0, max_seq) returns MLCC_ERR_INDEX_OUT_OF_RANGE before anything is written. */
typedef struct mlcc_tensor_scatter_params {
    int64_t batch, outer, max_seq, seq, inner;
    int32_t elem_size, circular;
} mlcc_tensor_scatter_params;

int mlcc_tensor_scatter(const mlcc_tensor_scatter_params *p, const int64_t *write_indices,
                        const void *update, void *y);

#endif /* MLCC_SCATTER_H */
