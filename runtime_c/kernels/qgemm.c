/* u8 x s8 -> s32 matrix products and the requantizing epilogue (see qgemm.h). */
#include "qgemm.h"

#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define MLCC_QGEMM_VNNI 1
#else
#define MLCC_QGEMM_VNNI 0
#endif

#define QMR 4     /* rows per tile */
#define QNR 16    /* columns per tile: one 512-bit vector of int32 */

/* gemmlowp's SaturatingRoundingDoublingHighMul. */
static inline int32_t srdhm(int32_t a, int32_t b) {
    int64_t ab, nudge;
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    ab = (int64_t)a * (int64_t)b;
    nudge = ab >= 0 ? ((int64_t)1 << 30) : (1 - ((int64_t)1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31));   /* C division: toward zero */
}

/* gemmlowp's RoundingDivideByPOT (round half away from zero). */
static inline int32_t rdbpot(int32_t x, int32_t e) {
    const int32_t mask = (int32_t)(((int64_t)1 << e) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (remainder > threshold ? 1 : 0);
}

static inline int32_t fixed_requant(int32_t acc, int32_t mult, int32_t shift) {
    int64_t v = (int64_t)acc * ((int64_t)1 << (shift > 0 ? shift : 0));
    if (v > INT32_MAX) v = INT32_MAX;
    if (v < INT32_MIN) v = INT32_MIN;
    return rdbpot(srdhm((int32_t)v, mult), shift < 0 ? -shift : 0);
}

void mlcc_requant_run(const mlcc_requant *rq, const mlcc_qchannels *ch, int64_t channel,
                      const int32_t *acc, int64_t count, void *y, int64_t y_index) {
    int64_t i;
    const int32_t bias = ch->bias[channel];
    if (rq->out_kind == MLCC_QOUT_F32) {
        float *out = (float *)y + y_index;
        const float s = ch->scale[channel], fb = ch->fbias ? ch->fbias[channel] : 0.0f;
        for (i = 0; i < count; i++) out[i] = (float)(acc[i] + bias) * s + fb;
        mlcc_act_apply(&rq->act, out, (ptrdiff_t)count);
        return;
    }
    {
        uint8_t *out = (uint8_t *)y + y_index;
        const int32_t zp = rq->zero_point, qmin = rq->qmin, qmax = rq->qmax;
        if (rq->mode == MLCC_REQUANT_FIXED) {
            const int32_t m = ch->mult[channel], sh = ch->shift[channel];
            for (i = 0; i < count; i++) {
                int32_t v = fixed_requant(acc[i] + bias, m, sh) + zp;
                out[i] = (uint8_t)(v < qmin ? qmin : (v > qmax ? qmax : v));
            }
        } else {
            const float s = ch->scale[channel];
            const float lo = (float)(qmin - zp), hi = (float)(qmax - zp);
            const float magic = 12582912.0f;
            for (i = 0; i < count; i++) {
                float f = (float)(acc[i] + bias) * s;
                f = f < lo ? lo : f;
                f = f > hi ? hi : f;
                f = (f + magic) - magic;
                out[i] = (uint8_t)((int32_t)f + zp);
            }
        }
    }
}

/* The epilogue of one tile: acc[r][j] for rows i0 + r, columns j0 + j. */
static void tile_epilogue(const mlcc_qgemm_desc *d, const mlcc_requant *rq,
                          const mlcc_qchannels *ch, int32_t acc[QMR][QNR], int64_t i0,
                          int64_t mr, int64_t j0, int64_t nr, void *y) {
    int64_t r, j;
    if (d->channel_is_row) {
        for (r = 0; r < mr; r++)
            mlcc_requant_run(rq, ch, i0 + r, acc[r], nr, y, (i0 + r) * d->ldy + j0);
        return;
    }
    for (r = 0; r < mr; r++)
        for (j = 0; j < nr; j++)
            mlcc_requant_run(rq, ch, j0 + j, &acc[r][j], 1, y, (i0 + r) * d->ldy + j0 + j);
}

#define PORTABLE_TILE(ATYPE, BTYPE)                                                         \
    for (k4 = 0; k4 < d->k4; k4++) {                                                       \
        const BTYPE *bk = (const BTYPE *)b + (k4 * d->n + j0) * 4;                         \
        for (r = 0; r < mr; r++) {                                                         \
            const ATYPE *ar = (const ATYPE *)a + (i0 + r) * d->lda + k4 * 4;               \
            const int32_t a0 = ar[0], a1 = ar[1], a2 = ar[2], a3 = ar[3];                  \
            for (j = 0; j < nr; j++) {                                                     \
                const BTYPE *bj = bk + j * 4;                                              \
                acc[r][j] += a0 * (int32_t)bj[0] + a1 * (int32_t)bj[1] +                   \
                             a2 * (int32_t)bj[2] + a3 * (int32_t)bj[3];                    \
            }                                                                              \
        }                                                                                  \
    }

void mlcc_qgemm_u8s8_portable(const mlcc_qgemm_desc *d, const void *a, const void *b,
                              const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    int64_t i0, j0, k4, r, j;
    for (i0 = 0; i0 < d->m; i0 += QMR) {
        const int64_t mr = d->m - i0 < QMR ? d->m - i0 : QMR;
        for (j0 = 0; j0 < d->n; j0 += QNR) {
            const int64_t nr = d->n - j0 < QNR ? d->n - j0 : QNR;
            int32_t acc[QMR][QNR];
            memset(acc, 0, sizeof acc);
            if (d->a_signed) {
                PORTABLE_TILE(int8_t, uint8_t)
            } else {
                PORTABLE_TILE(uint8_t, int8_t)
            }
            tile_epilogue(d, rq, ch, acc, i0, mr, j0, nr, y);
        }
    }
}

#if MLCC_QGEMM_VNNI
static inline __m512i bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* vpdpbusd multiplies unsigned bytes of its second operand by signed bytes of its third and
 * adds groups of 4 to int32 lanes without saturation: exactly the portable sum. */
static void qgemm_vnni(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
                       const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    int64_t i0, j0, k4, r;
    const int64_t lda = d->lda;
    for (i0 = 0; i0 < d->m; i0 += QMR) {
        const int64_t mr = d->m - i0 < QMR ? d->m - i0 : QMR;
        for (j0 = 0; j0 < d->n; j0 += QNR) {
            const int64_t nr = d->n - j0 < QNR ? d->n - j0 : QNR;
            const __mmask16 mask = (__mmask16)(nr == QNR ? 0xFFFFu : ((1u << nr) - 1u));
            __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0;
            int32_t acc[QMR][QNR];
            const uint8_t *a0 = a + i0 * lda, *a1 = a0 + (mr > 1 ? lda : 0),
                          *a2 = a0 + (mr > 2 ? 2 * lda : 0), *a3 = a0 + (mr > 3 ? 3 * lda : 0);
            if (d->a_signed) {
                for (k4 = 0; k4 < d->k4; k4++) {
                    const __m512i bv = _mm512_maskz_loadu_epi32(mask, b + (k4 * d->n + j0) * 4);
                    c0 = _mm512_dpbusd_epi32(c0, bv, bcast4(a0 + k4 * 4));
                    c1 = _mm512_dpbusd_epi32(c1, bv, bcast4(a1 + k4 * 4));
                    c2 = _mm512_dpbusd_epi32(c2, bv, bcast4(a2 + k4 * 4));
                    c3 = _mm512_dpbusd_epi32(c3, bv, bcast4(a3 + k4 * 4));
                }
            } else {
                for (k4 = 0; k4 < d->k4; k4++) {
                    const __m512i bv = _mm512_maskz_loadu_epi32(mask, b + (k4 * d->n + j0) * 4);
                    c0 = _mm512_dpbusd_epi32(c0, bcast4(a0 + k4 * 4), bv);
                    c1 = _mm512_dpbusd_epi32(c1, bcast4(a1 + k4 * 4), bv);
                    c2 = _mm512_dpbusd_epi32(c2, bcast4(a2 + k4 * 4), bv);
                    c3 = _mm512_dpbusd_epi32(c3, bcast4(a3 + k4 * 4), bv);
                }
            }
            _mm512_storeu_si512((void *)acc[0], c0);
            _mm512_storeu_si512((void *)acc[1], c1);
            _mm512_storeu_si512((void *)acc[2], c2);
            _mm512_storeu_si512((void *)acc[3], c3);
            (void)r;
            tile_epilogue(d, rq, ch, acc, i0, mr, j0, nr, y);
        }
    }
}
#endif

void mlcc_qgemm_u8s8(const mlcc_qgemm_desc *d, const void *a, const void *b,
                     const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
#if MLCC_QGEMM_VNNI
    qgemm_vnni(d, (const uint8_t *)a, (const uint8_t *)b, rq, ch, y);
#else
    mlcc_qgemm_u8s8_portable(d, a, b, rq, ch, y);
#endif
}

void mlcc_u8_qfc(const mlcc_qfc_params *p, const uint8_t *x, const int8_t *w_packed,
                 const int32_t *bias, const float *scale, const float *fbias,
                 const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch) {
    const int64_t k4 = (p->k + 3) / 4;
    const mlcc_qchannels ch = {bias, scale, fbias, mult, shift};
    mlcc_qgemm_desc d;
    const uint8_t *a = x;
    d.m = p->m; d.n = p->n; d.k4 = k4; d.lda = 4 * k4; d.ldy = p->n;
    d.channel_is_row = 0; d.a_signed = 0;
    if (p->k % 4 != 0) {
        int64_t i;
        for (i = 0; i < p->m; i++) {
            memcpy(scratch + i * 4 * k4, x + i * p->k, (size_t)p->k);
            memset(scratch + i * 4 * k4 + p->k, 0, (size_t)(4 * k4 - p->k));
        }
        a = scratch;
    } else {
        d.lda = p->k;
    }
    mlcc_qgemm_u8s8(&d, a, w_packed, &p->rq, &ch, y);
}
