#include "linear_attention.h"

void mlcc_f32_linear_attention(const mlcc_linear_attention_params *p, const float *q,
                               const float *k, const float *v, const float *past,
                               const float *decay, const float *beta, float *out,
                               float *state, float *scratch) {
    const ptrdiff_t T = (ptrdiff_t)p->t, qh = (ptrdiff_t)p->qh, kvh = (ptrdiff_t)p->kvh;
    const ptrdiff_t dk = (ptrdiff_t)p->dk, dv = (ptrdiff_t)p->dv, group = qh / kvh;
    const ptrdiff_t n = (ptrdiff_t)p->batch * kvh * dk * dv;
    float *u = scratch;
    ptrdiff_t b, t, h, g, d, m, i;
    if (past != NULL)
        memmove(state, past, (size_t)n * sizeof(float));
    else
        for (i = 0; i < n; i++) state[i] = 0.0f;
    for (b = 0; b < (ptrdiff_t)p->batch; b++)
        for (t = 0; t < T; t++)
            for (h = 0; h < kvh; h++) {
                float *S = state + (b * kvh + h) * dk * dv;
                const float *kt = k + ((b * T + t) * kvh + h) * dk;
                const float *vt = v + ((b * T + t) * kvh + h) * dv;
                if (decay != NULL) {
                    const float *gt = decay + (b * T + t) * kvh * (p->decay_dk ? dk : 1) +
                                      h * (p->decay_dk ? dk : 1);
                    for (d = 0; d < dk; d++) {
                        const float e = expf(gt[p->decay_dk ? d : 0]);
                        for (m = 0; m < dv; m++) S[d * dv + m] *= e;
                    }
                }
                if (beta != NULL) {
                    const float bt = beta[(b * T + t) * p->beta_heads +
                                          (p->beta_heads == 1 ? 0 : h)];
                    for (m = 0; m < dv; m++) u[m] = 0.0f;
                    for (d = 0; d < dk; d++)
                        for (m = 0; m < dv; m++) u[m] += S[d * dv + m] * kt[d];
                    for (m = 0; m < dv; m++) u[m] = bt * (vt[m] - u[m]);
                } else {
                    for (m = 0; m < dv; m++) u[m] = vt[m];
                }
                for (d = 0; d < dk; d++)
                    for (m = 0; m < dv; m++) S[d * dv + m] += kt[d] * u[m];
                for (g = h * group; g < (h + 1) * group; g++) {
                    const float *qt = q + ((b * T + t) * qh + g) * dk;
                    float *ot = out + ((b * T + t) * qh + g) * dv;
                    for (m = 0; m < dv; m++) ot[m] = 0.0f;
                    for (d = 0; d < dk; d++)
                        for (m = 0; m < dv; m++) ot[m] += qt[d] * S[d * dv + m];
                    for (m = 0; m < dv; m++) ot[m] *= p->scale;
                }
            }
}
