/* The per-iteration copies of Loop and Scan run at run time (mlcc/ops/control_flow.py): one
 * slice of a stacked tensor, picked by the iteration number, read into or written from a
 * body tensor. */
#ifndef MLCC_LOOP_H
#define MLCC_LOOP_H

#include "mlcc_kernel.h"

/* The stacked tensor is [outer, count, inner_bytes] (the iteration axis in the middle); slice
 * k is its [outer, inner_bytes] part at position k, where k = *index, or count - 1 - *index
 * when reverse is set. An index outside [0, count) returns MLCC_ERR_INDEX_OUT_OF_RANGE and
 * copies nothing. */
typedef struct mlcc_slice_params {
    int64_t outer;
    int64_t count;
    int64_t inner_bytes;
    int32_t reverse;
} mlcc_slice_params;

/* dst[outer, k, :] = src[outer, :] (a scan output's slice of this iteration). */
int mlcc_slice_store(const mlcc_slice_params *p, const void *src, void *dst,
                     const int64_t *index);
/* dst[outer, :] = src[outer, k, :] (a scan input's slice of this iteration). */
int mlcc_slice_load(const mlcc_slice_params *p, const void *src, void *dst,
                    const int64_t *index);

#endif /* MLCC_LOOP_H */
