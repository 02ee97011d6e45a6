/* Index-producing and index-driven operators: ArgMax/ArgMin, CumSum, CumProd, GatherElements
 * and ReverseSequence. */
#ifndef MLCC_INDEXING_H
#define MLCC_INDEXING_H

#include "mlcc_kernel.h"

/* x viewed as [outer, dim, inner] (dtype: float32, float64, or an integer type of 8 to 64
 * bits), y as [outer, inner] (int64): the index along dim of the largest (is_min = 0) or
 * smallest (is_min = 1) value, the first one of equal values, or the last one with
 * select_last. NaN compares as neither larger nor smaller. */
typedef struct mlcc_arg_reduce_params {
    int64_t outer, dim, inner;
    int32_t dtype, is_min, select_last;
} mlcc_arg_reduce_params;

void mlcc_arg_reduce(const mlcc_arg_reduce_params *p, const void *x, int64_t *y);

/* Running sums along dim of x viewed as [outer, dim, inner]: y[o, k, i] = sum of x[o, j, i]
 * over j <= k (j < k when exclusive), or over j >= k (j > k) when reverse. dtype is float32,
 * float64, int32, int64, uint32 or uint64 (integers wrap). mlcc_cumprod: the products. */
typedef struct mlcc_cumsum_params {
    int64_t outer, dim, inner;
    int32_t dtype, exclusive, reverse;
} mlcc_cumsum_params;

typedef mlcc_cumsum_params mlcc_cumprod_params;

void mlcc_cumsum(const mlcc_cumsum_params *p, const void *x, void *y);
void mlcc_cumprod(const mlcc_cumprod_params *p, const void *x, void *y);

/* GatherElements: for every index i of the output (contiguous, shape[0..rank)),
 * out[i] = data[i with axis coordinate replaced by indices[i]] (negative indices count from
 * the end). data is read through data_strides (elements); indices has the output's shape. */
typedef struct mlcc_gather_elements_params {
    int32_t rank, axis, elem_size;
    int64_t axis_dim;
    int64_t shape[MLCC_MAX_RANK];
    int64_t data_strides[MLCC_MAX_RANK];
} mlcc_gather_elements_params;

/* The walk that GatherElements and ScatterElements share: positions n < total of a contiguous
 * index tensor of shape[0..rank), with off the element offset (through strides) of the
 * position's coordinates, the axis coordinate left out. */
static inline int64_t mlcc_elements_index(const void *indices, int wide, ptrdiff_t n) {
    return wide ? ((const int64_t *)indices)[n] : (int64_t)((const int32_t *)indices)[n];
}

/* MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE when an index lies outside [-dim, dim). */
static inline int mlcc_elements_check(const void *indices, int wide, ptrdiff_t total,
                                      int64_t dim) {
    ptrdiff_t n;
    for (n = 0; n < total; n++) {
        const int64_t idx = mlcc_elements_index(indices, wide, n);
        if (idx < -dim || idx >= dim) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    }
    return MLCC_OK;
}

/* Steps index[] (and off) to the next position. */
static inline void mlcc_elements_next(int rank, int skip_axis, const int64_t *shape,
                                      const int64_t *strides, int64_t *index, ptrdiff_t *off) {
    int axis;
    for (axis = rank - 1; axis >= 0; axis--) {
        index[axis]++;
        if (axis != skip_axis) *off += (ptrdiff_t)strides[axis];
        if (index[axis] < shape[axis]) return;
        if (axis != skip_axis) *off -= (ptrdiff_t)(strides[axis] * shape[axis]);
        index[axis] = 0;
    }
}

/* Return MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (having checked every index before writing)
 * when an index lies outside [-axis_dim, axis_dim). */
int mlcc_gather_elements__i64(const mlcc_gather_elements_params *p, const void *data,
                              const int64_t *indices, void *out);
int mlcc_gather_elements__i32(const mlcc_gather_elements_params *p, const void *data,
                              const int32_t *indices, void *out);

/* ReverseSequence: x holds `batch` sequences of `time` rows of `inner` contiguous elements,
 * row t of sequence b at (b * batch_stride + t * time_stride) elements. The first lens[b] rows
 * of sequence b are reversed, the others copied. Returns MLCC_ERR_INDEX_OUT_OF_RANGE (before
 * writing) when a length lies outside [0, time]. */
typedef struct mlcc_reverse_sequence_params {
    int64_t batch, time, inner, batch_stride, time_stride;
    int32_t elem_size;
} mlcc_reverse_sequence_params;

int mlcc_reverse_sequence(const mlcc_reverse_sequence_params *p, const void *x,
                          const int64_t *lens, void *y);

#endif /* MLCC_INDEXING_H */
