#include "loop.h"

static int slice_position(const mlcc_slice_params *p, const int64_t *index, int64_t *k) {
    if (*index < 0 || *index >= p->count) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    *k = p->reverse ? p->count - 1 - *index : *index;
    return MLCC_OK;
}

int mlcc_slice_store(const mlcc_slice_params *p, const void *src, void *dst,
                     const int64_t *index) {
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t k, o;
    int status = slice_position(p, index, &k);
    if (status != MLCC_OK) return status;
    for (o = 0; o < p->outer; o++)
        memcpy(d + (size_t)((o * p->count + k) * p->inner_bytes), s + (size_t)(o * p->inner_bytes),
               (size_t)p->inner_bytes);
    return MLCC_OK;
}

int mlcc_slice_load(const mlcc_slice_params *p, const void *src, void *dst,
                    const int64_t *index) {
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t k, o;
    int status = slice_position(p, index, &k);
    if (status != MLCC_OK) return status;
    for (o = 0; o < p->outer; o++)
        memcpy(d + (size_t)(o * p->inner_bytes), s + (size_t)((o * p->count + k) * p->inner_bytes),
               (size_t)p->inner_bytes);
    return MLCC_OK;
}
