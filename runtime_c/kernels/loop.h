/* The per-iteration copies of Loop and Scan run at run time (mlcc/ops/control_flow.py): one
 * slice of a stacked tensor, picked by the iteration number, read into or written from a
 * body tensor; for Scan-8, one step of one sequence of a batch, and the checks and zero
 * padding of its sequence_lens. */
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

/* Scan-8's batch of sequences: a tensor [items, count, inner_bytes] (batch axis first, then
 * the sequence axis), whose sequence `item` has `length` valid steps (count when no lengths
 * are given). */
typedef struct mlcc_sequence_params {
    int64_t items;
    int64_t count;
    int64_t inner_bytes;
    int32_t reverse;          /* step s reads position length - 1 - s (mlcc_sequence_load) */
} mlcc_sequence_params;

/* Checks every lengths[items] is within [0, count], else returns
 * MLCC_ERR_INDEX_OUT_OF_RANGE and writes nothing; then, when dst is not NULL, zeroes every
 * sequence's positions from its length to count (a scan output's steps that never run). */
int mlcc_sequence_pad(const mlcc_sequence_params *p, const int64_t *lengths, void *dst);
/* dst = src[*item, k]: k = *step, or L - 1 - *step when reverse, where L = *length (NULL:
 * count). An item, step or position outside the tensor returns MLCC_ERR_INDEX_OUT_OF_RANGE
 * and copies nothing. */
int mlcc_sequence_load(const mlcc_sequence_params *p, const void *src, void *dst,
                       const int64_t *item, const int64_t *step, const int64_t *length);
/* dst[*item, *step] = src (a scan output's step, always forward). */
int mlcc_sequence_store(const mlcc_sequence_params *p, const void *src, void *dst,
                        const int64_t *item, const int64_t *step);

#endif /* MLCC_LOOP_H */
