/* Pad (constant, reflect, edge, wrap) for elements of any size, as a gather through per-axis
 * index maps computed at compile time: every padding mode is separable, so output index
 * (i_0, ..., i_r-1) reads input index (map_0[i_0], ..., map_r-1[i_r-1]), or the constant value
 * when any map entry is -1. Negative pads (cropping) are just maps that skip input indices. */
#ifndef MLCC_PAD_H
#define MLCC_PAD_H

#include "mlcc_kernel.h"

typedef struct mlcc_pad_params {
    int32_t rank;                       /* >= 1 */
    int32_t elem_size;                  /* bytes per element */
    int64_t out_shape[MLCC_MAX_RANK];
    int64_t in_strides[MLCC_MAX_RANK];  /* elements */
    int64_t map_offset[MLCC_MAX_RANK];  /* where axis k's map starts in the map table */
    /* On the innermost axis, out[run_begin .. run_begin + run_length) reads the contiguous
     * input run starting at index run_src (copied with one memcpy). */
    int64_t run_begin, run_length, run_src;
} mlcc_pad_params;

/* x: input; map: the concatenated per-axis maps (sum of out_shape entries); value: one element,
 * the constant for map entries of -1; y: contiguous output of out_shape. */
void mlcc_pad(const mlcc_pad_params *p, const void *x, const int32_t *map, const void *value,
              void *y);

/* The same over sizes known only at run time (bounded dynamic shapes), constant and edge
 * modes: the maps are computed at each call into the scratch (sum of out_shape int32). Output
 * index i of axis k reads input index i - begin[k] where that lies in [0, in_dim[k]); elsewhere
 * the constant, or (edge) the nearest index kept after cropping, in [max(0, -begin[k]),
 * in_dim[k] - max(0, -end[k])). */
typedef struct mlcc_pad_computed_params {
    mlcc_pad_params base;
    int64_t in_dim[MLCC_MAX_RANK];
    int64_t begin[MLCC_MAX_RANK];
    int64_t end[MLCC_MAX_RANK];
    int32_t edge;                       /* 0: constant, 1: edge */
} mlcc_pad_computed_params;

void mlcc_pad__computed(const mlcc_pad_computed_params *p, const void *x, const void *value,
                        void *y, void *scratch);

#endif /* MLCC_PAD_H */
