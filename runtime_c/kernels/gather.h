/* Gather along one axis, for elements of any size: the indices may come from the model's data
 * at run time, so they are checked and never used to read out of bounds. */
#ifndef MLCC_GATHER_H
#define MLCC_GATHER_H

#include "mlcc_kernel.h"

/* data is viewed as [outer, axis_dim, inner], the output as [outer, n_indices, inner]:
 *   out[o, j, i] = data[o, indices[j] (+ axis_dim if negative), i]
 * Sizes count elements of elem_size bytes. */
typedef struct mlcc_gather_params {
    int64_t outer;              /* product of the data dimensions before the axis */
    int64_t axis_dim;           /* data dimension along the axis */
    int64_t inner;              /* product of the data dimensions after the axis */
    int64_t n_indices;          /* number of indices */
    int32_t elem_size;          /* bytes per element */
} mlcc_gather_params;

/* Return MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (writing nothing) when an index lies outside
 * [-axis_dim, axis_dim). */
int mlcc_gather__i64(const mlcc_gather_params *p, const void *data, const int64_t *indices,
                     void *out);
int mlcc_gather__i32(const mlcc_gather_params *p, const void *data, const int32_t *indices,
                     void *out);

/* The same when the indices have a size that depends on the data along one of their axes
 * (NonMaxSuppression's selected rows, say; docs/dynamic-outputs.md): the indices viewed as
 * [n_indices / (idx_max * idx_inner), idx_max, idx_inner], only the positions before *count
 * along idx_max are checked and gathered; the others (the padding) give zeros. */
typedef struct mlcc_gather_counted_params {
    mlcc_gather_params gather;
    int64_t idx_max, idx_inner;
} mlcc_gather_counted_params;

int mlcc_gather__counted_i64(const mlcc_gather_counted_params *p, const void *data,
                             const int64_t *indices, const int64_t *count, void *out);
int mlcc_gather__counted_i32(const mlcc_gather_counted_params *p, const void *data,
                             const int32_t *indices, const int64_t *count, void *out);

/* Data whose size along the axis depends on the data (*size of axis_dim valid): indices are
 * checked against (and negative ones wrapped by) *size; count as above, or NULL when the
 * indices are all valid (idx_max = idx_inner = 1 then). */
int mlcc_gather__counted_data_i64(const mlcc_gather_counted_params *p, const void *data,
                                  const int64_t *size, const int64_t *indices,
                                  const int64_t *count, void *out);
int mlcc_gather__counted_data_i32(const mlcc_gather_counted_params *p, const void *data,
                                  const int64_t *size, const int32_t *indices,
                                  const int64_t *count, void *out);

#endif /* MLCC_GATHER_H */
