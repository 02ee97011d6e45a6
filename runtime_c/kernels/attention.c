/* Attention: for each (batch, head) K is packed transposed ([d][sk], rows padded) into scratch,
 * so that up to ROWS query rows at a time compute their scores with vector loads along j; then
 * each row's softmax and its weighted sum of V rows (vectorized along the head dimension when
 * V and out are contiguous there). */
#include "attention.h"

#define ROWS 4

static ptrdiff_t padded(ptrdiff_t n) {
    return (n + MLCC_ATTENTION_PAD - 1) / MLCC_ATTENTION_PAD * MLCC_ATTENTION_PAD;
}

/* e^x for x <= 0 over n values in place (x - max of a softmax row). */
static void exp_row(float *x, ptrdiff_t n) {
    ptrdiff_t j = 0;
#if MLCC_HAVE_VECTORS
    for (; j + MLCC_VF_LANES <= n; j += MLCC_VF_LANES)
        mlcc_vf_store(x + j, mlcc_vf_exp(mlcc_vf_load(x + j)));
    if (j < n) {   /* the tail through a padded vector: same results as the body */
        float tmp[MLCC_VECTOR_BYTES / sizeof(float)] = {0};
        memcpy(tmp, x + j, (size_t)(n - j) * sizeof(float));
        mlcc_vf_store(tmp, mlcc_vf_exp(mlcc_vf_load(tmp)));
        memcpy(x + j, tmp, (size_t)(n - j) * sizeof(float));
    }
#else
    for (; j < n; j++) x[j] = expf(x[j]);
#endif
}

/* scores[r][j] = sum_c q_r[c] * kt[c][j] for r < rows, j < skp (kt rows are skp long). */
static void scores_block(ptrdiff_t rows, ptrdiff_t d, ptrdiff_t skp, const float *const *qr,
                         ptrdiff_t qcs, const float *kt, float *scores) {
    ptrdiff_t r, c, j;
#if MLCC_HAVE_VECTORS
    for (j = 0; j < skp; j += MLCC_VF_LANES) {
        mlcc_vf acc[ROWS];
        for (r = 0; r < ROWS; r++) acc[r] = mlcc_vf_splat(0.0f);
        for (c = 0; c < d; c++) {
            const mlcc_vf kv = mlcc_vf_load(kt + c * skp + j);
            for (r = 0; r < rows; r++) acc[r] += mlcc_vf_splat(qr[r][c * qcs]) * kv;
        }
        for (r = 0; r < rows; r++) mlcc_vf_store(scores + r * skp + j, acc[r]);
    }
#else
    for (r = 0; r < rows; r++) {
        for (j = 0; j < skp; j++) scores[r * skp + j] = 0.0f;
        for (c = 0; c < d; c++) {
            const float qv = qr[r][c * qcs];
            for (j = 0; j < skp; j++) scores[r * skp + j] += qv * kt[c * skp + j];
        }
    }
#endif
}

void mlcc_f32_attention(const mlcc_attention_params *p, const float *q, const float *k,
                        const float *v, const float *mask, float *out, float *scratch) {
    const ptrdiff_t sq = (ptrdiff_t)p->sq, sk = (ptrdiff_t)p->sk, d = (ptrdiff_t)p->d;
    const ptrdiff_t skp = padded(sk);
    const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides;
    const int64_t *ms = p->mask_strides, *os = p->out_strides;
    float *kt = scratch, *scores = scratch + d * skp;
    int64_t b, h;
    ptrdiff_t i0, r, j, c;

    for (b = 0; b < p->batch; b++) {
        for (h = 0; h < p->heads; h++) {
            const float *kb = k + b * ks[0] + h * ks[1];
            const float *vb = v + b * vs[0] + h * vs[1];
            for (c = 0; c < d; c++) {
                for (j = 0; j < sk; j++) kt[c * skp + j] = kb[j * ks[2] + c * ks[3]];
                for (; j < skp; j++) kt[c * skp + j] = 0.0f;
            }
            for (i0 = 0; i0 < sq; i0 += ROWS) {
                const ptrdiff_t rows = sq - i0 < ROWS ? sq - i0 : ROWS;
                const float *qr[ROWS];
                for (r = 0; r < rows; r++)
                    qr[r] = q + b * qs[0] + h * qs[1] + (i0 + r) * qs[2];
                scores_block(rows, d, skp, qr, (ptrdiff_t)qs[3], kt, scores);
                for (r = 0; r < rows; r++) {
                    float *s = scores + r * skp;
                    float *o = out + b * os[0] + h * os[1] + (i0 + r) * os[2];
                    float mx, sum = 0.0f, inv;
                    if (mask != NULL) {
                        const float *m = mask + b * ms[0] + h * ms[1] + (i0 + r) * ms[2];
                        for (j = 0; j < sk; j++) s[j] = s[j] * p->scale + m[j * ms[3]];
                    } else {
                        for (j = 0; j < sk; j++) s[j] *= p->scale;
                    }
                    mx = s[0];
                    for (j = 1; j < sk; j++) mx = s[j] > mx ? s[j] : mx;
                    for (j = 0; j < sk; j++) s[j] -= mx;
                    exp_row(s, sk);
                    for (j = 0; j < sk; j++) sum += s[j];
                    inv = 1.0f / sum;
                    for (j = 0; j < sk; j++) s[j] *= inv;
                    c = 0;
#if MLCC_HAVE_VECTORS
                    if (vs[3] == 1 && os[3] == 1) {
                        for (; c + 2 * MLCC_VF_LANES <= d; c += 2 * MLCC_VF_LANES) {
                            mlcc_vf a0 = mlcc_vf_splat(0.0f), a1 = mlcc_vf_splat(0.0f);
                            for (j = 0; j < sk; j++) {
                                const float *vr = vb + j * vs[2] + c;
                                const mlcc_vf pj = mlcc_vf_splat(s[j]);
                                a0 += pj * mlcc_vf_load(vr);
                                a1 += pj * mlcc_vf_load(vr + MLCC_VF_LANES);
                            }
                            mlcc_vf_store(o + c, a0);
                            mlcc_vf_store(o + c + MLCC_VF_LANES, a1);
                        }
                        for (; c + MLCC_VF_LANES <= d; c += MLCC_VF_LANES) {
                            mlcc_vf a0 = mlcc_vf_splat(0.0f);
                            for (j = 0; j < sk; j++)
                                a0 += mlcc_vf_splat(s[j]) * mlcc_vf_load(vb + j * vs[2] + c);
                            mlcc_vf_store(o + c, a0);
                        }
                    }
#endif
                    for (; c < d; c++) {
                        float acc = 0.0f;
                        for (j = 0; j < sk; j++) acc += s[j] * vb[j * vs[2] + c * vs[3]];
                        o[c * os[3]] = acc;
                    }
                }
            }
        }
    }
}
