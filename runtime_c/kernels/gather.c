#include "gather.h"

static int64_t load_index(const void *indices, int wide, ptrdiff_t j) {
    return wide ? ((const int64_t *)indices)[j] : (int64_t)((const int32_t *)indices)[j];
}

/* Copies one element; fixed sizes let the compiler emit a single load and store. */
static void copy_elem(uint8_t *dst, const uint8_t *src, ptrdiff_t es) {
    switch (es) {
    case 1: *dst = *src; break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, (size_t)es); break;
    }
}

/* Position j of the indices is valid when its coordinate along idx_max is below valid. */
static int counted(ptrdiff_t j, int64_t idx_max, int64_t idx_inner, int64_t valid) {
    return (j / idx_inner) % idx_max < valid;
}

/* Indices address the first `size` of the axis_dim positions (all of them but when the data
 * has a data-dependent size along the axis). */
static int gather(const mlcc_gather_params *p, const void *data, int64_t size,
                  const void *indices, int wide, int64_t idx_max, int64_t idx_inner,
                  int64_t valid, void *out) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size, n = (ptrdiff_t)p->n_indices;
    const ptrdiff_t dim = (ptrdiff_t)p->axis_dim, block = (ptrdiff_t)p->inner * es;
    const uint8_t *src = (const uint8_t *)data;
    uint8_t *dst = (uint8_t *)out;
    const int all = idx_max == 1 && valid >= 1;     /* no padding: every position counts */
    ptrdiff_t o, j;
    /* Validate every index before writing: a bad index fails the call as a whole. */
    for (j = 0; j < n; j++) {
        int64_t idx = load_index(indices, wide, j);
        if ((idx < -size || idx >= size) &&
            (all || counted(j, idx_max, idx_inner, valid))) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    }
    if (block == 0) return MLCC_OK;
    for (o = 0; o < (ptrdiff_t)p->outer; o++) {
        const uint8_t *plane = src + o * dim * block;
        for (j = 0; j < n; j++) {
            ptrdiff_t idx = (ptrdiff_t)load_index(indices, wide, j);
            if (idx < 0) idx += (ptrdiff_t)size;
            if (!all && !counted(j, idx_max, idx_inner, valid))
                memset(dst, 0, (size_t)block);
            else if (block == es)
                copy_elem(dst, plane + idx * block, es);
            else
                memcpy(dst, plane + idx * block, (size_t)block);
            dst += block;
        }
    }
    return MLCC_OK;
}

int mlcc_gather__i64(const mlcc_gather_params *p, const void *data, const int64_t *indices,
                     void *out) {
    return gather(p, data, p->axis_dim, indices, 1, 1, 1, 1, out);
}

int mlcc_gather__i32(const mlcc_gather_params *p, const void *data, const int32_t *indices,
                     void *out) {
    return gather(p, data, p->axis_dim, indices, 0, 1, 1, 1, out);
}

int mlcc_gather__counted_i64(const mlcc_gather_counted_params *p, const void *data,
                             const int64_t *indices, const int64_t *count, void *out) {
    return gather(&p->gather, data, p->gather.axis_dim, indices, 1, p->idx_max, p->idx_inner,
                  *count, out);
}

int mlcc_gather__counted_i32(const mlcc_gather_counted_params *p, const void *data,
                             const int32_t *indices, const int64_t *count, void *out) {
    return gather(&p->gather, data, p->gather.axis_dim, indices, 0, p->idx_max, p->idx_inner,
                  *count, out);
}

int mlcc_gather__counted_data_i64(const mlcc_gather_counted_params *p, const void *data,
                                  const int64_t *size, const int64_t *indices,
                                  const int64_t *count, void *out) {
    if (*size < 0 || *size > p->gather.axis_dim) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    return gather(&p->gather, data, *size, indices, 1, p->idx_max, p->idx_inner,
                  count != NULL ? *count : 1, out);
}

int mlcc_gather__counted_data_i32(const mlcc_gather_counted_params *p, const void *data,
                                  const int64_t *size, const int32_t *indices,
                                  const int64_t *count, void *out) {
    if (*size < 0 || *size > p->gather.axis_dim) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    return gather(&p->gather, data, *size, indices, 0, p->idx_max, p->idx_inner,
                  count != NULL ? *count : 1, out);
}
