#include "loop.h"

/* Copies slice k of the stacked tensor out of it (load) or into it (store). */
static int copy_slice(const mlcc_slice_params *p, const uint8_t *src, uint8_t *dst,
                      const int64_t *index, int store) {
    int64_t k, o;
    if (*index < 0 || *index >= p->count) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    k = p->reverse ? p->count - 1 - *index : *index;
    for (o = 0; o < p->outer; o++) {
        const size_t slice = (size_t)(o * p->inner_bytes);
        const size_t stacked = (size_t)((o * p->count + k) * p->inner_bytes);
        memcpy(dst + (store ? stacked : slice), src + (store ? slice : stacked),
               (size_t)p->inner_bytes);
    }
    return MLCC_OK;
}

int mlcc_slice_store(const mlcc_slice_params *p, const void *src, void *dst,
                     const int64_t *index) {
    return copy_slice(p, (const uint8_t *)src, (uint8_t *)dst, index, 1);
}

int mlcc_slice_load(const mlcc_slice_params *p, const void *src, void *dst,
                    const int64_t *index) {
    return copy_slice(p, (const uint8_t *)src, (uint8_t *)dst, index, 0);
}

int mlcc_sequence_pad(const mlcc_sequence_params *p, const int64_t *lengths, void *dst) {
    int64_t i;
    for (i = 0; i < p->items; i++)
        if (lengths[i] < 0 || lengths[i] > p->count) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    if (dst == NULL) return MLCC_OK;
    for (i = 0; i < p->items; i++) {
        uint8_t *row = (uint8_t *)dst + (size_t)((i * p->count + lengths[i]) * p->inner_bytes);
        memset(row, 0, (size_t)((p->count - lengths[i]) * p->inner_bytes));
    }
    return MLCC_OK;
}

int mlcc_sequence_load(const mlcc_sequence_params *p, const void *src, void *dst,
                       const int64_t *item, const int64_t *step, const int64_t *length) {
    const int64_t valid = length ? *length : p->count;
    const int64_t k = p->reverse ? valid - 1 - *step : *step;
    if (*item < 0 || *item >= p->items || valid > p->count || *step < 0 || *step >= valid ||
        k < 0 || k >= p->count)
        return MLCC_ERR_INDEX_OUT_OF_RANGE;
    memcpy(dst, (const uint8_t *)src + (size_t)((*item * p->count + k) * p->inner_bytes),
           (size_t)p->inner_bytes);
    return MLCC_OK;
}

int mlcc_sequence_store(const mlcc_sequence_params *p, const void *src, void *dst,
                        const int64_t *item, const int64_t *step) {
    if (*item < 0 || *item >= p->items || *step < 0 || *step >= p->count)
        return MLCC_ERR_INDEX_OUT_OF_RANGE;
    memcpy((uint8_t *)dst + (size_t)((*item * p->count + *step) * p->inner_bytes), src,
           (size_t)p->inner_bytes);
    return MLCC_OK;
}
