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

/* The same over sizes known only at run time (bounded dynamic shapes), every mode: the maps
 * are computed at each call into the scratch (sum of out_shape int32). Output index i of axis
 * k reads input index j = i - begin[k] where that lies in the part kept after cropping,
 * [first, first + n) with first = max(0, -begin[k]), n = in_dim[k] - first - max(0, -end[k]);
 * elsewhere the constant (MLCC_PAD_CONSTANT), the nearest kept index (MLCC_PAD_EDGE), the
 * index mirrored about the kept part's ends without repeating them, periodic with period
 * 2 (n - 1) (MLCC_PAD_REFLECT; n = 1: the one index), or j - first modulo n (MLCC_PAD_WRAP):
 * numpy's np.pad (the ONNX reference) for pads of any width. The kept part is never empty
 * where a mode other than constant pads an axis (the compiler checks it over the range). */
enum { MLCC_PAD_CONSTANT = 0, MLCC_PAD_EDGE = 1, MLCC_PAD_REFLECT = 2, MLCC_PAD_WRAP = 3 };

typedef struct mlcc_pad_computed_params {
    mlcc_pad_params base;
    int64_t in_dim[MLCC_MAX_RANK];
    int64_t begin[MLCC_MAX_RANK];
    int64_t end[MLCC_MAX_RANK];
    int32_t mode;                       /* MLCC_PAD_CONSTANT, _EDGE, _REFLECT or _WRAP */
} mlcc_pad_computed_params;

void mlcc_pad__computed(const mlcc_pad_computed_params *p, const void *x, const void *value,
                        void *y, void *scratch);

#endif /* MLCC_PAD_H */
