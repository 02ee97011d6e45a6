#include "range.h"

void mlcc_f32_range(const mlcc_range_params *p, float *y) {
    const float start = (float)p->start, delta = (float)p->delta;
    int64_t i;
    for (i = 0; i < p->count; i++) y[i] = start + (float)i * delta;
}

void mlcc_i64_range(const mlcc_range_params *p, int64_t *y) {
    int64_t i;
    for (i = 0; i < p->count; i++) y[i] = p->start + i * p->delta;
}

void mlcc_i32_range(const mlcc_range_params *p, int32_t *y) {
    int64_t i;
    for (i = 0; i < p->count; i++) y[i] = (int32_t)(p->start + i * p->delta);
}
