/* u8 x s8 -> s32 matrix products and the requantizing epilogue (see qgemm.h). */
#include "qgemm.h"
#include "qmve.h"

#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__)   /* mlcc_u8_store_rq16 (qgemm.h) */
#include <immintrin.h>
#define MLCC_QGEMM_VNNI 1
#else
#define MLCC_QGEMM_VNNI 0
#endif

/* Cortex-M4/M7 (the DSP extension, qgemm.h): two 16-bit multiply-accumulates per
 * instruction; the M55 has it too but runs Helium (qmve.h) unless built with -DMLCC_NO_MVE. */
#define MLCC_QGEMM_SMLAD (!MLCC_QGEMM_VNNI && !MLCC_QMVE && MLCC_SMLAD)

#define QMR 8     /* rows per tile */
#define QNR 16    /* columns per tile: one 512-bit vector of int32 */

/* The float requantization of one channel run to uint8 codes. restrict: without it the byte
 * stores may alias the accumulators and the loop stays scalar (it was a fifth of YOLOv8n's
 * int8 time). */
static void requant_float_u8(const int32_t *restrict acc, int32_t bias, float s, int32_t zp,
                             int32_t qmin, int32_t qmax, int64_t count, uint8_t *restrict out) {
    const float lo = (float)(qmin - zp), hi = (float)(qmax - zp);
    int64_t i;
    for (i = 0; i < count; i++) out[i] = mlcc_requant_float_one(acc[i] + bias, s, lo, hi, zp);
}

void mlcc_requant_run(const mlcc_requant *rq, const mlcc_qchannels *ch, int64_t channel,
                      const int32_t *acc, int64_t count, void *y, int64_t y_index) {
    int64_t i;
    const int32_t bias = ch->bias[channel];
    if (rq->out_kind == MLCC_QOUT_S32) {
        int32_t *out = (int32_t *)y + y_index;
        for (i = 0; i < count; i++) out[i] = acc[i] + bias;
        return;
    }
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
            const mlcc_rq1 q = mlcc_rq1_prep(rq, ch, channel);
            const ptrdiff_t n = (ptrdiff_t)count;
            ptrdiff_t k;
            /* the tests outside the loop (GCC -O2 does not unswitch) */
            if (q.fast && q.full)
                for (k = 0; k < n; k++) out[k] = mlcc_rq1_fast(&q, acc[k], 1);
            else if (q.fast)
                for (k = 0; k < n; k++) out[k] = mlcc_rq1_fast(&q, acc[k], 0);
            else
                for (k = 0; k < n; k++) out[k] = mlcc_rq1_apply(&q, acc[k]);
        } else {
            requant_float_u8(acc, bias, ch->scale[channel], zp, qmin, qmax, count, out);
        }
    }
}

/* As mlcc_requant_run, with the channel advancing along the run (Gemm: channel = column). */
static void requant_cols(const mlcc_requant *rq, const mlcc_qchannels *ch, int64_t c0,
                         const int32_t *acc, int64_t count, void *y, int64_t y_index) {
    int64_t i;
    if (rq->out_kind == MLCC_QOUT_S32) {
        int32_t *out = (int32_t *)y + y_index;
        for (i = 0; i < count; i++) out[i] = acc[i] + ch->bias[c0 + i];
        return;
    }
    if (rq->out_kind == MLCC_QOUT_F32) {
        float *out = (float *)y + y_index;
        for (i = 0; i < count; i++)
            out[i] = (float)(acc[i] + ch->bias[c0 + i]) * ch->scale[c0 + i] +
                     (ch->fbias ? ch->fbias[c0 + i] : 0.0f);
        mlcc_act_apply(&rq->act, out, (ptrdiff_t)count);
        return;
    }
    {
        uint8_t *out = (uint8_t *)y + y_index;
        const int32_t zp = rq->zero_point, qmin = rq->qmin, qmax = rq->qmax;
        if (rq->mode == MLCC_REQUANT_FIXED) {
            for (i = 0; i < count; i++) {
                const mlcc_mbqm_c c = mlcc_mbqm_prep(ch->mult[c0 + i], ch->shift[c0 + i]);
                out[i] = mlcc_requant_fixed_one(acc[i] + ch->bias[c0 + i], &c, zp, qmin, qmax);
            }
        } else {
            const float lo = (float)(qmin - zp), hi = (float)(qmax - zp);
            for (i = 0; i < count; i++)
                out[i] = mlcc_requant_float_one(acc[i] + ch->bias[c0 + i], ch->scale[c0 + i],
                                                lo, hi, zp);
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
        requant_cols(rq, ch, j0, acc[r], nr, y, (i0 + r) * d->ldy + j0);
    (void)j;
}

#define PORTABLE_TILE(ATYPE, BTYPE)                                                        \
    for (k4 = 0; k4 < d->k4; k4++) {                                                       \
        const BTYPE *bk = (const BTYPE *)b + (k4 * d->ldb + j0) * 4;                         \
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

void mlcc_u8s8_gemm__portable(const mlcc_qgemm_desc *d, const void *a, const void *b,
                              const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    int64_t i0, j0, k4, r, j;
    /* Column blocks outside: one block of the packed operand (k4 x 64 bytes) stays in L1
     * while every row block passes over it. */
    for (j0 = d->n0; j0 < d->n; j0 += QNR) {
        const int64_t nr = d->n - j0 < QNR ? d->n - j0 : QNR;
        for (i0 = 0; i0 < d->m; i0 += QMR) {
            const int64_t mr = d->m - i0 < QMR ? d->m - i0 : QMR;
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
#define VNNI_STEP(c, row)                                                                  \
    c = d->a_signed ? _mm512_dpbusd_epi32(c, bv, bcast4(row + k4 * 4))                     \
                    : _mm512_dpbusd_epi32(c, bcast4(row + k4 * 4), bv)

static void qgemm_vnni(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
                       const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    int64_t i0, j0, k4;
    const int64_t lda = d->lda;
    for (j0 = d->n0; j0 < d->n; j0 += QNR) {
        const int64_t nr = d->n - j0 < QNR ? d->n - j0 : QNR;
        const __mmask16 mask = (__mmask16)(nr == QNR ? 0xFFFFu : ((1u << nr) - 1u));
        const uint8_t *bj = b + j0 * 4;
        /* The next column block's line of each k4 row, fetched while the first row block
         * passes over this one: the packed operand's k4 rows are n * 4 bytes apart, too far
         * for the hardware prefetcher, so a wide B (an FC's 8210 classes) came from memory
         * one strided miss at a time. */
        const uint8_t *next = j0 + QNR < d->n ? bj + QNR * 4 : NULL;
        for (i0 = 0; i0 < d->m; i0 += QMR) {
            const int64_t mr = d->m - i0 < QMR ? d->m - i0 : QMR;
            const uint8_t *pf = i0 == 0 && next ? next : bj;   /* bj: in cache, a no-op */
            __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0,
                    c6 = c0, c7 = c0;
            int32_t acc[QMR][QNR];
            /* rows past the end repeat the last row (computed, never stored) */
            const uint8_t *r0 = a + i0 * lda;
            const uint8_t *r1 = r0 + (mr > 1 ? 1 : 0) * lda, *r2 = r0 + (mr > 2 ? 2 : 0) * lda,
                          *r3 = r0 + (mr > 3 ? 3 : 0) * lda, *r4 = r0 + (mr > 4 ? 4 : 0) * lda,
                          *r5 = r0 + (mr > 5 ? 5 : 0) * lda, *r6 = r0 + (mr > 6 ? 6 : 0) * lda,
                          *r7 = r0 + (mr > 7 ? 7 : 0) * lda;
            if (mr > 4) {
                for (k4 = 0; k4 < d->k4; k4++) {
                    const __m512i bv = _mm512_maskz_loadu_epi32(mask, bj + k4 * d->ldb * 4);
                    _mm_prefetch((const char *)(pf + k4 * d->ldb * 4), _MM_HINT_T0);
                    VNNI_STEP(c0, r0); VNNI_STEP(c1, r1); VNNI_STEP(c2, r2); VNNI_STEP(c3, r3);
                    VNNI_STEP(c4, r4); VNNI_STEP(c5, r5); VNNI_STEP(c6, r6); VNNI_STEP(c7, r7);
                }
            } else {
                for (k4 = 0; k4 < d->k4; k4++) {
                    const __m512i bv = _mm512_maskz_loadu_epi32(mask, bj + k4 * d->ldb * 4);
                    _mm_prefetch((const char *)(pf + k4 * d->ldb * 4), _MM_HINT_T0);
                    VNNI_STEP(c0, r0); VNNI_STEP(c1, r1); VNNI_STEP(c2, r2); VNNI_STEP(c3, r3);
                }
            }
            if (rq->out_kind == MLCC_QOUT_U8 && rq->mode == MLCC_REQUANT_FLOAT) {
                uint8_t *yt = (uint8_t *)y + i0 * d->ldy + j0;
                const __m512i cs[QMR] = {c0, c1, c2, c3, c4, c5, c6, c7};
                const mlcc_rq16 k = mlcc_rq16_prep(rq);   /* once, not after every store */
                int64_t r;
                if (d->channel_is_row) {
                    for (r = 0; r < mr; r++)
                        mlcc_u8_store_rq16(cs[r], _mm512_set1_epi32(ch->bias[i0 + r]),
                                           _mm512_set1_ps(ch->scale[i0 + r]), &k, mask,
                                           yt + r * d->ldy);
                } else {
                    const __m512i bias = _mm512_maskz_loadu_epi32(mask, ch->bias + j0);
                    const __m512 scale = _mm512_maskz_loadu_ps(mask, ch->scale + j0);
                    for (r = 0; r < mr; r++)
                        mlcc_u8_store_rq16(cs[r], bias, scale, &k, mask, yt + r * d->ldy);
                }
                continue;
            }
            _mm512_storeu_si512((void *)acc[0], c0);
            _mm512_storeu_si512((void *)acc[1], c1);
            _mm512_storeu_si512((void *)acc[2], c2);
            _mm512_storeu_si512((void *)acc[3], c3);
            _mm512_storeu_si512((void *)acc[4], c4);
            _mm512_storeu_si512((void *)acc[5], c5);
            _mm512_storeu_si512((void *)acc[6], c6);
            _mm512_storeu_si512((void *)acc[7], c7);
            tile_epilogue(d, rq, ch, acc, i0, mr, j0, nr, y);
        }
    }
}
#endif

#if MLCC_QGEMM_SMLAD
/* Groups of 4 k of a 2 x 2 block (a 1 x 2 block for a last odd row): the bytes of each word
 * split into 16-bit lanes, even (bytes 0 and 2) and odd (1 and 3), signed (SXTB16) or unsigned
 * (UXTB16) as the operand is, then SMLAD adds both lane products to the int32 sum: the
 * portable sum exactly (integer, no saturation: like the portable kernel, it wraps only where
 * int32 itself would overflow). */
#define SMLAD_STEP2(XA, XB)                                                                \
    for (; pa != pend; pa += 4, pb += bstep) {                                             \
        const uint32_t wa0 = mlcc_load_u32(pa), wb0 = mlcc_load_u32(pb);                   \
        const uint32_t wa1 = mlcc_load_u32(pa + da), wb1 = mlcc_load_u32(pb + db);         \
        const int16x2_t a0e = XA##_even(wa0), a0o = XA##_odd(wa0);                         \
        const int16x2_t b0e = XB##_even(wb0), b0o = XB##_odd(wb0);                         \
        const int16x2_t a1e = XA##_even(wa1), a1o = XA##_odd(wa1);                         \
        const int16x2_t b1e = XB##_even(wb1), b1o = XB##_odd(wb1);                         \
        s00 = __smlad(a0o, b0o, __smlad(a0e, b0e, s00));                                   \
        s10 = __smlad(a1o, b0o, __smlad(a1e, b0e, s10));                                   \
        s01 = __smlad(a0o, b1o, __smlad(a0e, b1e, s01));                                   \
        s11 = __smlad(a1o, b1o, __smlad(a1e, b1e, s11));                                   \
    }

#define SMLAD_STEP1(XA, XB)                                                                \
    for (; pa != pend; pa += 4, pb += bstep) {                                             \
        const uint32_t wa0 = mlcc_load_u32(pa), wb0 = mlcc_load_u32(pb);                   \
        const uint32_t wb1 = mlcc_load_u32(pb + db);                                       \
        const int16x2_t a0e = XA##_even(wa0), a0o = XA##_odd(wa0);                         \
        const int16x2_t b0e = XB##_even(wb0), b0o = XB##_odd(wb0);                         \
        const int16x2_t b1e = XB##_even(wb1), b1o = XB##_odd(wb1);                         \
        s00 = __smlad(a0o, b0o, __smlad(a0e, b0e, s00));                                   \
        s01 = __smlad(a0o, b1o, __smlad(a0e, b1e, s01));                                   \
    }

/* The convolution's product (int8 weights x uint8 columns, uint8 outputs, k4 up to
 * SMLAD_PANEL_K4) with the columns widened to 16 bits once: per pair of columns, all their
 * k as the 16-bit lane pairs SMLAD takes, in a panel on the stack (2.5 KiB at most), which
 * every pair of weight rows then reads. The k loop extracts the weights only; the columns'
 * lanes are ordered as the weights' extraction gives them: a weight word (w0, w1, w2, w3)
 * makes (w0, w2) by SXTB16 and (w1, w3) by SXTB16 ROR 8, so a column word (b0, b1, b2, b3)
 * goes into the panel as (b0, b2) and (b1, b3) (UXTB16 and UXTB16 ROR 8). Per 4 k of a block
 * of 2 rows x 2 columns: two weight loads, four extractions, two double-word panel loads
 * and eight SMLAD, against four loads, eight extractions and eight SMLAD with both operands
 * extracted in the loop. The four sums are requantized where they are (no tile of
 * accumulators). Exact integer sums and the epilogue's own rounding: the portable kernel's
 * bits. */
#define SMLAD_PANEL_K4 160

static void widen_columns(const uint8_t *b, size_t bstep, ptrdiff_t db, ptrdiff_t k4,
                          uint32_t *panel) {
    ptrdiff_t g;
    for (g = 0; g < k4; g++, b += bstep, panel += 4) {
        const uint32_t w0 = mlcc_load_u32(b), w1 = mlcc_load_u32(b + db);
        panel[0] = (uint32_t)mlcc_uxtb16_even(w0);
        panel[1] = (uint32_t)mlcc_uxtb16_odd(w0);
        panel[2] = (uint32_t)mlcc_uxtb16_even(w1);
        panel[3] = (uint32_t)mlcc_uxtb16_odd(w1);
    }
}

/* The k loop of a block of 2 rows (pa, pa + da) x 2 columns (the panel from pp to ppend), in
 * assembly: the four sums, the four pointers and six temporaries take all 14 registers, which
 * GCC 12 did not manage from C (it spilled in the loop). Per group of 4 k: the two rows' words
 * (one post-incremented), their four lane pairs, and for each column a double-word load of
 * its two lane pairs and four SMLAD. */
static inline void panel_block(const uint8_t *pa, ptrdiff_t da, const uint32_t *pp,
                               const uint32_t *ppend, int32_t s[4]) {
    int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;
    uint32_t t0, t1, t2, t3, t4, t5;
    __asm__ volatile(
        "1:\n\t"
        "ldr    %[t1], [%[pa], %[da]]\n\t"
        "ldr    %[t0], [%[pa]], #4\n\t"
        "sxtb16 %[t2], %[t0]\n\t"
        "sxtb16 %[t0], %[t0], ror #8\n\t"
        "sxtb16 %[t3], %[t1]\n\t"
        "sxtb16 %[t1], %[t1], ror #8\n\t"
        "ldrd   %[t4], %[t5], [%[pp]], #8\n\t"
        "smlad  %[s00], %[t2], %[t4], %[s00]\n\t"
        "smlad  %[s00], %[t0], %[t5], %[s00]\n\t"
        "smlad  %[s10], %[t3], %[t4], %[s10]\n\t"
        "smlad  %[s10], %[t1], %[t5], %[s10]\n\t"
        "ldrd   %[t4], %[t5], [%[pp]], #8\n\t"
        "smlad  %[s01], %[t2], %[t4], %[s01]\n\t"
        "smlad  %[s01], %[t0], %[t5], %[s01]\n\t"
        "smlad  %[s11], %[t3], %[t4], %[s11]\n\t"
        "smlad  %[s11], %[t1], %[t5], %[s11]\n\t"
        "cmp    %[pp], %[ppend]\n\t"
        "bne    1b\n\t"
        : [s00] "+r"(s00), [s01] "+r"(s01), [s10] "+r"(s10), [s11] "+r"(s11), [pa] "+r"(pa),
          [pp] "+r"(pp), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3),
          [t4] "=&r"(t4), [t5] "=&r"(t5)
        : [da] "r"(da), [ppend] "r"(ppend)
        : "cc", "memory");
    s[0] = s00;
    s[1] = s01;
    s[2] = s10;
    s[3] = s11;
}

/* Rows pa and pa + da times the nb columns of the panel, requantized into y0 and y1 (fast,
 * a constant where this is inlined: 1, both rows' constants take mlcc_rq1_fast; 2, with
 * full; 0, mlcc_rq1_apply). A last odd row or column repeats the one before: computed,
 * stored once. */
static inline __attribute__((always_inline)) void panel_rows(
        const uint8_t *pa, ptrdiff_t da, const uint32_t *pp, ptrdiff_t words, ptrdiff_t nb,
        const mlcc_rq1 *q0, const mlcc_rq1 *q1, const int fast, uint8_t *y0, uint8_t *y1) {
    uint8_t *const end = y0 + nb;
    for (; y0 < end; y0 += 2, y1 += 2, pp += words) {
        int32_t s[4];
        panel_block(pa, da, pp, pp + words, s);
        y1[0] = fast ? mlcc_rq1_fast(q1, s[2], fast == 2) : mlcc_rq1_apply(q1, s[2]);
        y0[0] = fast ? mlcc_rq1_fast(q0, s[0], fast == 2) : mlcc_rq1_apply(q0, s[0]);
        if (y0 + 1 < end) {
            y1[1] = fast ? mlcc_rq1_fast(q1, s[3], fast == 2) : mlcc_rq1_apply(q1, s[3]);
            y0[1] = fast ? mlcc_rq1_fast(q0, s[1], fast == 2) : mlcc_rq1_apply(q0, s[1]);
        }
    }
}

/* Columns in blocks of as many pairs as the panel holds (at most 8 pairs: short k), each
 * block widened once; then for each pair of rows, their requantization constants gathered
 * once for the block's columns. Indices in ptrdiff_t: 32-bit arithmetic on these cores. */
static void qgemm_smlad_panel(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
                              const mlcc_requant *rq, const mlcc_qchannels *ch, uint8_t *y) {
    uint32_t panel[4 * SMLAD_PANEL_K4];
    const ptrdiff_t m = (ptrdiff_t)d->m, n = (ptrdiff_t)d->n, k4 = (ptrdiff_t)d->k4;
    const ptrdiff_t lda = (ptrdiff_t)d->lda, ldy = (ptrdiff_t)d->ldy, words = 4 * k4;
    const ptrdiff_t block = 2 * (SMLAD_PANEL_K4 / k4 < 8 ? SMLAD_PANEL_K4 / k4 : 8);
    ptrdiff_t i, j0, j;
    for (j0 = (ptrdiff_t)d->n0; j0 < n; j0 += block) {
        const ptrdiff_t nb = n - j0 < block ? n - j0 : block;
        for (j = 0; j < nb; j += 2)
            widen_columns(b + (j0 + j) * 4, (size_t)d->ldb * 4, j + 1 < nb ? 4 : 0, k4,
                          panel + j / 2 * words);
        for (i = 0; i < m; i += 2) {
            const int rows = i + 1 < m ? 2 : 1;
            const mlcc_rq1 q0 = mlcc_rq1_prep(rq, ch, i), q1 = mlcc_rq1_prep(rq, ch, i + rows - 1);
            uint8_t *y0 = y + i * ldy + j0, *y1 = y0 + (rows > 1 ? ldy : 0);
            const uint8_t *pa = a + i * lda;
            if (q0.fast && q1.fast && q0.full)     /* (the clamp is the layer's) */
                panel_rows(pa, rows > 1 ? lda : 0, panel, words, nb, &q0, &q1, 2, y0, y1);
            else if (q0.fast && q1.fast)
                panel_rows(pa, rows > 1 ? lda : 0, panel, words, nb, &q0, &q1, 1, y0, y1);
            else
                panel_rows(pa, rows > 1 ? lda : 0, panel, words, nb, &q0, &q1, 0, y0, y1);
        }
    }
}

/* The portable kernel's tiles and epilogue, each tile computed in blocks of 2 rows x 2
 * columns whose four sums stay in registers; a block past the last row or column repeats it
 * (computed, not stored). */
static void qgemm_smlad(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
                        const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    const size_t bstep = (size_t)d->ldb * 4;     /* 32-bit steps in the k loop */
    int64_t i0, j0, r, j;
    for (j0 = d->n0; j0 < d->n; j0 += QNR) {
        const int64_t nr = d->n - j0 < QNR ? d->n - j0 : QNR;
        for (i0 = 0; i0 < d->m; i0 += QMR) {
            const int64_t mr = d->m - i0 < QMR ? d->m - i0 : QMR;
            int32_t acc[QMR][QNR];
            for (r = 0; r < mr; r += 2) {
                const uint8_t *a0 = a + (i0 + r) * d->lda;
                const uint8_t *a1 = r + 1 < mr ? a0 + d->lda : a0;
                for (j = 0; j < nr; j += 2) {
                    /* one pointer per operand, the second row / column at a fixed
                     * distance: fewer live registers in the k loop (the M4 spilled) */
                    const uint8_t *pa = a0, *pend = a0 + 4 * d->k4;
                    const uint8_t *pb = b + (j0 + j) * 4;
                    const ptrdiff_t da = a1 - a0, db = j + 1 < nr ? 4 : 0;
                    int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;
                    if (r + 1 == mr && d->a_signed) {
                        SMLAD_STEP1(mlcc_sxtb16, mlcc_uxtb16)
                    } else if (r + 1 == mr) {
                        SMLAD_STEP1(mlcc_uxtb16, mlcc_sxtb16)
                    } else if (d->a_signed) {
                        SMLAD_STEP2(mlcc_sxtb16, mlcc_uxtb16)
                    } else {
                        SMLAD_STEP2(mlcc_uxtb16, mlcc_sxtb16)
                    }
                    acc[r][j] = s00;
                    if (j + 1 < nr) acc[r][j + 1] = s01;
                    if (r + 1 < mr) {
                        acc[r + 1][j] = s10;
                        if (j + 1 < nr) acc[r + 1][j + 1] = s11;
                    }
                }
            }
            tile_epilogue(d, rq, ch, acc, i0, mr, j0, nr, y);
        }
    }
}
#endif

void mlcc_u8s8_gemm(const mlcc_qgemm_desc *d, const void *a, const void *b,
                    const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
#if MLCC_QGEMM_VNNI
    qgemm_vnni(d, (const uint8_t *)a, (const uint8_t *)b, rq, ch, y);
#elif MLCC_QMVE
    mlcc_mve_qgemm(d, (const uint8_t *)a, (const uint8_t *)b, rq, ch, y);
#elif MLCC_QGEMM_SMLAD
    if (d->a_signed && d->channel_is_row && rq->out_kind == MLCC_QOUT_U8 &&
        d->k4 <= SMLAD_PANEL_K4)
        qgemm_smlad_panel(d, (const uint8_t *)a, (const uint8_t *)b, rq, ch, (uint8_t *)y);
    else
        qgemm_smlad(d, (const uint8_t *)a, (const uint8_t *)b, rq, ch, y);
#else
    mlcc_u8s8_gemm__portable(d, a, b, rq, ch, y);
#endif
}

typedef struct {
    const mlcc_qfc_params *p;
    const uint8_t *x;
    const int8_t *w_packed;
    mlcc_qchannels ch;
    void *y;
    uint8_t *scratch;
    int64_t rows;          /* per unit, a multiple of QMR; 0 when the units split columns */
    int64_t cols;          /* per unit, a multiple of QNR, when they do */
} fc_job;

/* One unit of the product: rows [unit * rows, +rows), or with `cols` every row of columns
 * [unit * cols, +cols) (the channel is the column: rows and columns are independent). */
static void fc_unit(void *arg, int unit, int thread) {
    const fc_job *j = (const fc_job *)arg;
    const mlcc_qfc_params *p = j->p;
    const int64_t k4 = (p->k + 3) / 4, i0 = j->cols ? 0 : unit * j->rows;
    const int64_t m = j->cols ? p->m : (p->m - i0 < j->rows ? p->m - i0 : j->rows);
    const size_t esize = p->rq.out_kind == MLCC_QOUT_U8 ? 1 : 4;
    const uint8_t *a = j->x + i0 * p->k;
    mlcc_qgemm_desc d;
    (void)thread;
    d.m = m; d.n = p->n; d.k4 = k4; d.lda = p->k; d.ldy = p->n; d.n0 = 0; d.ldb = p->n;
    d.channel_is_row = 0; d.a_signed = 0;
    if (j->cols) {
        d.n0 = unit * j->cols;
        d.n = d.n0 + j->cols < p->n ? d.n0 + j->cols : p->n;
    }
    if (p->k % 4 != 0) {    /* rows padded to a multiple of 4 bytes, in the rows' own part */
        uint8_t *pad = j->scratch + i0 * 4 * k4;
        int64_t i;
        for (i = 0; i < m; i++) {
            memcpy(pad + i * 4 * k4, a + i * p->k, (size_t)p->k);
            memset(pad + i * 4 * k4 + p->k, 0, (size_t)(4 * k4 - p->k));
        }
        a = pad;
        d.lda = 4 * k4;
    }
    mlcc_u8s8_gemm(&d, a, j->w_packed, &p->rq, &j->ch,
                   (uint8_t *)j->y + (size_t)(i0 * p->n) * esize);
}

void mlcc_u8_fc(const mlcc_qfc_params *p, const uint8_t *x, const int8_t *w_packed,
                const int32_t *bias, const float *scale, const float *fbias,
                const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch,
                mlcc_threadpool *pool) {
    fc_job job;
    const int64_t blocks = (p->m + QMR - 1) / QMR, col_blocks = (p->n + QNR - 1) / QNR;
    int64_t units = mlcc_threadpool_size(pool), count;
    job.p = p; job.x = x; job.w_packed = w_packed; job.y = y; job.scratch = scratch;
    job.ch.bias = bias; job.ch.scale = scale; job.ch.fbias = fbias; job.ch.mult = mult;
    job.ch.shift = shift;
    job.rows = job.cols = 0;
    if ((double)p->m * (double)p->n * (double)p->k < (double)MLCC_MIN_PARALLEL_INT8_MACS)
        units = 1;
    /* The sums are exact, so any split gives the same bytes. By columns where there are as
     * many blocks of them as units: each thread then reads its part of the weights, not all
     * of them, and few rows (an FC over 20 time steps: blocks of 16 and 4 rows) no longer
     * leave a thread idle. Rows need their own padding when K is not a multiple of 4. */
    if (units > 1 && p->k % 4 == 0 && col_blocks >= units) {
        job.cols = (col_blocks + units - 1) / units * QNR;
        count = (p->n + job.cols - 1) / job.cols;
    } else {
        if (units > blocks) units = blocks;
        if (units < 1) units = 1;
        job.rows = (blocks + units - 1) / units * QMR;
        count = (p->m + job.rows - 1) / job.rows;
    }
    mlcc_threadpool_for(units > 1 ? pool : NULL, fc_unit, &job, (int)count, (int)units);
}
