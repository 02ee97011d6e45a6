#include "rotary.h"

int mlcc_f32_rotary_embedding(const mlcc_rotary_params *p, const float *x, const float *cos,
                              const float *sin, const int64_t *pos, float *y) {
    const ptrdiff_t batch = (ptrdiff_t)p->batch, seq = (ptrdiff_t)p->seq;
    const ptrdiff_t half = (ptrdiff_t)(p->rot_dim / 2), head = (ptrdiff_t)p->head_size;
    const ptrdiff_t step = p->interleaved ? 2 : 1, second = p->interleaved ? 1 : half;
    ptrdiff_t b, s, h, j;
    if (pos != NULL)
        for (j = 0; j < batch * seq; j++)
            if (pos[j] < 0 || pos[j] >= p->max_pos) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (b = 0; b < batch; b++)
        for (s = 0; s < seq; s++) {
            const ptrdiff_t row = pos != NULL ? (ptrdiff_t)pos[b * seq + s] : b * seq + s;
            const float *c = cos + row * half, *sn = sin + row * half;
            for (h = 0; h < (ptrdiff_t)p->heads; h++) {
                const ptrdiff_t off = b * (ptrdiff_t)p->stride_b + s * (ptrdiff_t)p->stride_s +
                                      h * (ptrdiff_t)p->stride_h;
                const float *xh = x + off;
                float *yh = y + off;
                for (j = 0; j < half; j++) {
                    const float x1 = xh[j * step], x2 = xh[j * step + second];
                    yh[j * step] = c[j] * x1 - sn[j] * x2;
                    yh[j * step + second] = sn[j] * x1 + c[j] * x2;
                }
                for (j = 2 * half; j < head; j++) yh[j] = xh[j];
            }
        }
    return MLCC_OK;
}
