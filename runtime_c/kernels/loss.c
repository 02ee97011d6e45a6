#include "loss.h"

static int64_t target_at(const void *target, int is32, ptrdiff_t i) {
    return is32 ? (int64_t)((const int32_t *)target)[i] : ((const int64_t *)target)[i];
}

static int nll_loss(const mlcc_nll_loss_params *p, const float *x, const void *target, int is32,
                    const float *weight, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n, c = (ptrdiff_t)p->c, d = (ptrdiff_t)p->d;
    double sum = 0.0, wsum = 0.0;
    ptrdiff_t i, j;
    for (i = 0; i < n * d; i++) {
        const int64_t t = target_at(target, is32, i);
        if (p->has_ignore && t == p->ignore_index) continue;
        if (t < 0 || t >= (int64_t)c) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    }
    for (i = 0; i < n; i++)
        for (j = 0; j < d; j++) {
            const int64_t t = target_at(target, is32, i * d + j);
            float loss = 0.0f;
            if (!(p->has_ignore && t == p->ignore_index)) {
                const float w = weight ? weight[t] : 1.0f;
                loss = -x[(i * c + (ptrdiff_t)t) * d + j] * w;
                wsum += (double)w;
            }
            if (p->reduction == MLCC_LOSS_NONE)
                y[i * d + j] = loss;
            else
                sum += (double)loss;
        }
    if (p->reduction == MLCC_LOSS_SUM) y[0] = (float)sum;
    if (p->reduction == MLCC_LOSS_MEAN) y[0] = (float)(sum / wsum);
    return MLCC_OK;
}

int mlcc_f32_nll_loss__i64(const mlcc_nll_loss_params *p, const float *x,
                           const int64_t *target, const float *weight, float *y) {
    return nll_loss(p, x, target, 0, weight, y);
}

int mlcc_f32_nll_loss__i32(const mlcc_nll_loss_params *p, const float *x,
                           const int32_t *target, const float *weight, float *y) {
    return nll_loss(p, x, target, 1, weight, y);
}
