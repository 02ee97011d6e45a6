/* Integer convolutions (see qconv.h). */
#include "qconv.h"

/* The input channels of one group, padded with the zero point on every side the kernel window
 * reaches: cg planes of hp x wp (MLCC_QCONV_PADDED_H / _W), so that tap (c, kh, kw) of output
 * (oh, ow) is plane c at row oh * stride_h + kh * dilation_h, column ow * stride_w +
 * kw * dilation_w, with no bounds check. An unpadded input already has that layout and is
 * used in place (returned); otherwise it is copied into `dst`. */
static const uint8_t *padded_planes(const mlcc_qconv2d_params *p, const uint8_t *x, int64_t cg,
                                    int64_t hp, int64_t wp, uint8_t *dst) {
    const uint8_t zp = (uint8_t)p->x_zero_point;
    int64_t c, r;
    if (p->pad_top == 0 && p->pad_left == 0 && wp == p->in_w && hp <= p->in_h && hp > 0)
        return x;       /* plane stride in_h * in_w: callers use plane_stride() */
    for (c = 0; c < cg; c++) {
        const uint8_t *plane = x + c * p->in_h * p->in_w;
        uint8_t *d = dst + c * hp * wp;
        for (r = 0; r < hp; r++, d += wp) {
            const int64_t ih = r - p->pad_top;
            const int64_t lo = p->pad_left < wp ? p->pad_left : wp;
            const int64_t hi = p->pad_left + p->in_w < wp ? p->pad_left + p->in_w : wp;
            if (ih < 0 || ih >= p->in_h) {
                memset(d, zp, (size_t)wp);
                continue;
            }
            memset(d, zp, (size_t)lo);
            if (hi > lo) memcpy(d + lo, plane + ih * p->in_w + (lo - p->pad_left),
                                (size_t)(hi - lo));
            if (wp > hi) memset(d + hi, zp, (size_t)(wp - hi));
        }
    }
    return dst;
}

/* 4 bytes from 4 rows as one little-endian word: the [k4][P][4] layout of qgemm.h. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PUT4(d, a, b, c, e) do {                                                            \
        const uint32_t v_ = (uint32_t)(a) | ((uint32_t)(b) << 8) | ((uint32_t)(c) << 16) |  \
                            ((uint32_t)(e) << 24);                                         \
        memcpy((d), &v_, 4);                                                               \
    } while (0)
#else
#define PUT4(d, a, b, c, e) do {                                                            \
        (d)[0] = (a); (d)[1] = (b); (d)[2] = (c); (d)[3] = (e);                             \
    } while (0)
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define MLCC_QCONV_AVX512 1
#else
#define MLCC_QCONV_AVX512 0
#endif

/* d[4 q + t] = r_t[q] for q < n: 4 rows interleaved into words. The AVX-512 path takes 16
 * pixels at a time with masked loads and stores, so that the short rows of small feature maps
 * (20 or 40 pixels) do not fall to a scalar loop. */
static void interleave4(const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                        const uint8_t *r3, int64_t n, uint8_t *d) {
    int64_t q = 0;
#if MLCC_QCONV_AVX512
    for (; q < n; q += 16) {
        const __mmask16 m = (__mmask16)(n - q >= 16 ? 0xFFFFu : (1u << (n - q)) - 1u);
        const __m512i a = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r0 + q));
        const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r1 + q));
        const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r2 + q));
        const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, r3 + q));
        const __m512i v = _mm512_or_si512(
            _mm512_or_si512(a, _mm512_slli_epi32(b, 8)),
            _mm512_or_si512(_mm512_slli_epi32(c, 16), _mm512_slli_epi32(e, 24)));
        _mm512_mask_storeu_epi32((void *)(d + 4 * q), m, v);
    }
#endif
    for (; q < n; q++) PUT4(d + 4 * q, r0[q], r1[q], r2[q], r3[q]);
}

/* Packs output rows [oh0, oh1) of the im2col matrix of one group into [k4][P][4] (qgemm.h's
 * column operand, P = (oh1 - oh0) * out_w) straight
 * from the padded planes: for each group of 4 rows (taps) and output row, one pass that reads
 * the 4 taps' input rows and writes the interleaved words (one vectorizable loop; strides 1
 * and 2 are constants for the compiler). Rows k >= K (padding to a multiple of 4) meet zero
 * weights, so they read any valid tap. */
static void pack_columns(const mlcc_qconv2d_params *p, const uint8_t *xp, int64_t plane_stride,
                         int64_t wp, int64_t k4, int64_t oh0, int64_t oh1, uint8_t *col) {
    const int64_t cg = p->in_channels / p->groups;
    const int64_t kk = p->kernel_h * p->kernel_w, K = cg * kk;
    const int64_t OW = p->out_w, P = (oh1 - oh0) * OW;
    const int64_t sw = p->stride_w, row_step = p->stride_h * wp;
    /* output rows contiguous in the source too: one loop over all P pixels */
    const int contiguous = sw == 1 && row_step == OW;
    int64_t g, t, oh, q;
    for (g = 0; g < k4; g++) {
        const uint8_t *r[4];
        uint8_t *dst = col + g * P * 4;
        for (t = 0; t < 4; t++) {
            const int64_t k = 4 * g + t < K ? 4 * g + t : 0;
            const int64_t c = k / kk, kh = (k % kk) / p->kernel_w, kw = k % p->kernel_w;
            r[t] = xp + c * plane_stride + (oh0 * p->stride_h + kh * p->dilation_h) * wp +
                   kw * p->dilation_w;
        }
        if (contiguous) {
            const uint8_t *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
            interleave4(r0, r1, r2, r3, P, dst);
            continue;
        }
        for (oh = 0; oh < oh1 - oh0; oh++) {
            const uint8_t *r0 = r[0] + oh * row_step, *r1 = r[1] + oh * row_step,
                          *r2 = r[2] + oh * row_step, *r3 = r[3] + oh * row_step;
            uint8_t *d = dst + 4 * oh * OW;
            if (sw == 1) {
                interleave4(r0, r1, r2, r3, OW, d);
            } else if (sw == 2) {
                for (q = 0; q < OW; q++)
                    PUT4(d + 4 * q, r0[2 * q], r1[2 * q], r2[2 * q], r3[2 * q]);
            } else {
                for (q = 0; q < OW; q++)
                    PUT4(d + 4 * q, r0[q * sw], r1[q * sw], r2[q * sw], r3[q * sw]);
            }
        }
    }
}

#define QCONV_CHUNK_BYTES 262144     /* within a core's L2 on the machines measured */

void mlcc_u8_qconv2d(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                     const int32_t *bias, const float *scale, const float *fbias,
                     const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch) {
    const int64_t cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
    const int64_t k4 = (cg * p->kernel_h * p->kernel_w + 3) / 4;
    const int64_t P = p->out_h * p->out_w;
    const int64_t hp = MLCC_QCONV_PADDED_H(p), wp = MLCC_QCONV_PADDED_W(p);
    const size_t esize = p->rq.out_kind == MLCC_QOUT_U8 ? 1 : 4;   /* float or int32 */
    /* output rows packed and multiplied per chunk of about QCONV_CHUNK_BYTES of columns, so
     * that the packed columns are still in cache when the product reads them (PP-OCR det's
     * 96 -> 24 3x3 convolutions at 160 x 160 pack 22 MB whole) */
    const int64_t row_bytes = 4 * k4 * p->out_w;
    const int64_t rows = row_bytes >= QCONV_CHUNK_BYTES ? 1 : QCONV_CHUNK_BYTES / row_bytes;
    int64_t n, g;
    for (n = 0; n < p->batch; n++) {
        for (g = 0; g < p->groups; g++) {
            const int64_t c0 = g * mg;
            const mlcc_qchannels ch = {bias + c0, scale ? scale + c0 : NULL,
                                       fbias ? fbias + c0 : NULL, mult ? mult + c0 : NULL,
                                       shift ? shift + c0 : NULL};
            mlcc_qgemm_desc d;
            const uint8_t *xg = x + (n * p->in_channels + g * cg) * p->in_h * p->in_w;
            const uint8_t *xp = padded_planes(p, xg, cg, hp, wp, scratch + 4 * k4 * P);
            int64_t oh0;
            for (oh0 = 0; oh0 < p->out_h; oh0 += rows) {
                const int64_t oh1 = oh0 + rows < p->out_h ? oh0 + rows : p->out_h;
                pack_columns(p, xp, xp == xg ? p->in_h * p->in_w : hp * wp, wp, k4, oh0, oh1,
                             scratch);
                d.m = mg; d.n = (oh1 - oh0) * p->out_w; d.k4 = k4; d.lda = 4 * k4; d.ldy = P;
                d.channel_is_row = 1; d.a_signed = 1;
                mlcc_qgemm_u8s8(&d, w + c0 * 4 * k4, scratch, &p->rq, &ch,
                                (uint8_t *)y + (size_t)((n * p->out_channels + c0) * P +
                                                        oh0 * p->out_w) * esize);
            }
        }
    }
}

#define DW_CHUNK 256

/* One channel plane minus the zero point as int16, padded with real zeros (code zx) on every
 * side the kernel window reaches: hp x wp, so that the tap loops below have no bounds checks
 * and vectorize (each output row is a sum of kernel_h * kernel_w shifted rows). */
static void dw_padded_plane(const mlcc_qconv2d_params *p, const uint8_t *plane, int64_t hp,
                            int64_t wp, int16_t *dst) {
    const int32_t zp = p->x_zero_point;
    int64_t r, q;
    for (r = 0; r < hp; r++) {
        const int64_t ih = r - p->pad_top;
        int16_t *d = dst + r * wp;
        const uint8_t *src;
        int64_t lo, hi;
        if (ih < 0 || ih >= p->in_h) {
            memset(d, 0, sizeof(int16_t) * (size_t)wp);
            continue;
        }
        /* padded columns [lo, hi) hold input columns [lo - pad_left, hi - pad_left) */
        lo = p->pad_left < wp ? p->pad_left : wp;
        hi = p->pad_left + p->in_w < wp ? p->pad_left + p->in_w : wp;
        for (q = 0; q < lo; q++) d[q] = 0;
        src = plane + ih * p->in_w - p->pad_left;
        for (q = lo; q < hi; q++) d[q] = (int16_t)((int32_t)src[q] - zp);
        for (q = hi; q < wp; q++) d[q] = 0;
    }
}

#if MLCC_QCONV_AVX512
/* acc[o] = sum over taps of w[kh][kw] * row_kh[o + kw] for o < nw (stride_w = dilation_w = 1,
 * kernel_w >= 2; row_kh = row0 + kh * step). The taps go in horizontal pairs through
 * vpmaddwd: an int32 load at int16 element j holds (x[j], x[j + 1]), so one load from
 * row + kw + o0 gives the pairs of the even outputs o0, o0 + 2, ... and one from
 * row + kw + o0 + 1 those of the odd outputs; an odd kernel width's last tap is paired with
 * a zero weight on its left neighbour (no read past the row). 32 outputs stay in two
 * registers over all taps and are interleaved back into order once. Exact integer sums
 * (|pair| <= 2 * 255 * 128), so the result is the portable loop's bit for bit. Masked loads
 * keep the tails inside the padded plane. */
static void dw_rows_pairs(const int16_t *row0, int64_t step, const int8_t *wc, int64_t kh_n,
                          int64_t kw_n, int64_t nw, int32_t *acc) {
    const __m512i idx_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                            16, 0);
    const __m512i idx_hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                            25, 9, 24, 8);
    int64_t o0, kh, kw;
    for (o0 = 0; o0 < nw; o0 += 32) {
        const int64_t rem = nw - o0 < 32 ? nw - o0 : 32;
        const __mmask16 me = (__mmask16)((1u << ((rem + 1) / 2)) - 1u);
        const __mmask16 mo = (__mmask16)((1u << (rem / 2)) - 1u);
        __m512i e = _mm512_setzero_si512(), od = _mm512_setzero_si512();
        for (kh = 0; kh < kh_n; kh++) {
            const int16_t *r = row0 + kh * step + o0;
            const int8_t *wr = wc + kh * kw_n;
            for (kw = 0; kw < kw_n; kw += 2) {
                const int last = kw + 1 >= kw_n;
                const int64_t off = last ? kw - 1 : kw;
                const int32_t w0 = last ? 0 : wr[kw], w1 = last ? wr[kw] : wr[kw + 1];
                const __m512i wp = _mm512_set1_epi32((int32_t)((uint32_t)(uint16_t)w0 |
                                                               ((uint32_t)(uint16_t)w1 << 16)));
                e = _mm512_add_epi32(e, _mm512_madd_epi16(
                        _mm512_maskz_loadu_epi32(me, r + off), wp));
                od = _mm512_add_epi32(od, _mm512_madd_epi16(
                        _mm512_maskz_loadu_epi32(mo, r + off + 1), wp));
            }
        }
        _mm512_mask_storeu_epi32(acc + o0, (__mmask16)(rem >= 16 ? 0xFFFFu
                                                       : (1u << rem) - 1u),
                                 _mm512_permutex2var_epi32(e, idx_lo, od));
        if (rem > 16)
            _mm512_mask_storeu_epi32(acc + o0 + 16, (__mmask16)((1u << (rem - 16)) - 1u),
                                     _mm512_permutex2var_epi32(e, idx_hi, od));
    }
}
#endif

void mlcc_u8_qconv2d_depthwise(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                               const int32_t *bias, const float *scale, const float *fbias,
                               const int32_t *mult, const int32_t *shift, void *y,
                               uint8_t *scratch) {
    const int64_t C = p->out_channels, P = p->out_h * p->out_w;
    const int64_t kk = p->kernel_h * p->kernel_w;
    const int64_t hp = MLCC_QCONV_PADDED_H(p), wp = MLCC_QCONV_PADDED_W(p);
    const int64_t sw = p->stride_w;
    const mlcc_qchannels ch = {bias, scale, fbias, mult, shift};
    int16_t *xp = (int16_t *)(void *)scratch;
    int32_t acc[DW_CHUNK];
    int64_t n, c, oh, ow0, o, kh, kw;
    for (n = 0; n < p->batch; n++) {
        for (c = 0; c < C; c++) {
            const int8_t *wc = w + c * kk;
            dw_padded_plane(p, x + (n * C + c) * p->in_h * p->in_w, hp, wp, xp);
            for (oh = 0; oh < p->out_h; oh++) {
                for (ow0 = 0; ow0 < p->out_w; ow0 += DW_CHUNK) {
                    const int64_t nw = p->out_w - ow0 < DW_CHUNK ? p->out_w - ow0 : DW_CHUNK;
#if MLCC_QCONV_AVX512
                    if (sw == 1 && p->dilation_w == 1 && p->kernel_w >= 2) {
                        dw_rows_pairs(xp + oh * p->stride_h * wp + ow0, p->dilation_h * wp, wc,
                                      p->kernel_h, p->kernel_w, nw, acc);
                        mlcc_requant_run(&p->rq, &ch, c, acc, nw, y,
                                         (n * C + c) * P + oh * p->out_w + ow0);
                        continue;
                    }
#endif
                    memset(acc, 0, sizeof(int32_t) * (size_t)nw);
                    for (kh = 0; kh < p->kernel_h; kh++) {
                        const int16_t *row = xp + (oh * p->stride_h + kh * p->dilation_h) * wp +
                                             ow0 * sw;
                        for (kw = 0; kw < p->kernel_w; kw++) {
                            const int32_t wv = wc[kh * p->kernel_w + kw];
                            const int16_t *src = row + kw * p->dilation_w;
                            if (sw == 1) {
                                for (o = 0; o < nw; o++) acc[o] += wv * (int32_t)src[o];
                            } else if (sw == 2) {
                                for (o = 0; o < nw; o++) acc[o] += wv * (int32_t)src[2 * o];
                            } else {
                                for (o = 0; o < nw; o++) acc[o] += wv * (int32_t)src[o * sw];
                            }
                        }
                    }
                    mlcc_requant_run(&p->rq, &ch, c, acc, nw, y,
                                     (n * C + c) * P + oh * p->out_w + ow0);
                }
            }
        }
    }
}
