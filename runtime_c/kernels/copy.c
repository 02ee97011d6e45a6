#include "copy.h"

/* Copies the innermost axis: one memcpy when both sides are contiguous. */
static void copy_row(const uint8_t *src, uint8_t *dst, ptrdiff_t n, ptrdiff_t ss, ptrdiff_t ds,
                     ptrdiff_t es) {
    ptrdiff_t i;
    if (ss == 1 && ds == 1) {
        memcpy(dst, src, (size_t)(n * es));
    } else if (es == 4) {
        for (i = 0; i < n; i++) memcpy(dst + i * ds * 4, src + i * ss * 4, 4);
    } else {
        for (i = 0; i < n; i++) memcpy(dst + i * ds * es, src + i * ss * es, (size_t)es);
    }
}

void mlcc_copy_strided(const mlcc_copy_params *p, const void *src, void *dst) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const int inner = p->rank - 1;
    const uint8_t *s = (const uint8_t *)src + (ptrdiff_t)p->src_offset * es;
    uint8_t *d = (uint8_t *)dst + (ptrdiff_t)p->dst_offset * es;
    mlcc_odometer o;
    if (!mlcc_odometer_init(&o, p->rank, p->shape, p->src_strides, p->dst_strides, NULL))
        return;
    do {
        copy_row(s + o.off[0] * es, d + o.off[1] * es, (ptrdiff_t)p->shape[inner],
                 (ptrdiff_t)p->src_strides[inner], (ptrdiff_t)p->dst_strides[inner], es);
    } while (mlcc_odometer_next(&o));
}
