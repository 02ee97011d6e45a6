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
