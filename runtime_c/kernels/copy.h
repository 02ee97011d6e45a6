/* Strided copies of any element type: the one kernel behind Transpose, Slice, Concat, Split,
 * Expand, Tile and plain copies. */
#ifndef MLCC_COPY_H
#define MLCC_COPY_H

#include "mlcc_kernel.h"

/* For every index i of shape[0..rank):
 *   dst[dst_offset + sum_k i_k * dst_strides[k]] = src[src_offset + sum_k i_k * src_strides[k]]
 * Strides and offsets count elements of elem_size bytes; a 0 source stride broadcasts.
 * The compiler merges contiguous axes first, so the innermost axis is usually long. */
typedef struct mlcc_copy_params {
    int32_t rank;
    int32_t elem_size;
    int64_t shape[MLCC_MAX_RANK];
    int64_t src_strides[MLCC_MAX_RANK];
    int64_t dst_strides[MLCC_MAX_RANK];
    int64_t src_offset, dst_offset;
} mlcc_copy_params;

/* Large copies are split by rows between the threads of pool (NULL: the caller alone). */
void mlcc_copy_strided(const mlcc_copy_params *p, const void *src, void *dst,
                       mlcc_threadpool *pool);

#endif /* MLCC_COPY_H */
