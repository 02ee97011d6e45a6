/* Integer convolutions (see qconv.h). */
#include "qconv.h"
#include "qmve.h"

/* Rows [r0, r0 + nr) of the input channels of one group padded with the zero point on every
 * side the kernel window reaches (padded row r is input row r - pad_top; the padded planes
 * are MLCC_QCONV_PADDED_H x _W), so that tap (c, kh, kw) of output (oh, ow) is window plane
 * c at row oh * stride_h + kh * dilation_h - r0, column ow * stride_w + kw * dilation_w, with
 * no bounds check. A window that reads no padding is read in place (returned, plane stride
 * in_h * in_w, row stride in_w); otherwise it is copied into `dst`, planes `plane` bytes
 * apart, rows wp (returned), except its first `keep` rows, which are there already. */
static const uint8_t *padded_window(const mlcc_qconv2d_params *p, const uint8_t *x, int64_t cg,
                                    int64_t r0, int64_t nr, int64_t keep, int64_t wp,
                                    int64_t plane, uint8_t *dst, int64_t *plane_stride,
                                    int64_t *row_stride) {
    const uint8_t zp = (uint8_t)p->x_zero_point;
    /* ptrdiff_t: 32-bit arithmetic on 32-bit cores */
    const ptrdiff_t in_h = (ptrdiff_t)p->in_h, in_w = (ptrdiff_t)p->in_w;
    const ptrdiff_t pad_top = (ptrdiff_t)p->pad_top, pad_left = (ptrdiff_t)p->pad_left;
    const ptrdiff_t lo = pad_left < wp ? pad_left : (ptrdiff_t)wp;
    const ptrdiff_t hi = pad_left + in_w < wp ? pad_left + in_w : (ptrdiff_t)wp;
    ptrdiff_t c, r;
    if (p->pad_top == 0 && p->pad_left == 0 && wp <= p->in_w && r0 + nr <= p->in_h) {
        *plane_stride = p->in_h * p->in_w;
        *row_stride = p->in_w;
        return x + r0 * p->in_w;
    }
    for (c = 0; c < cg; c++) {
        const uint8_t *src = x + c * in_h * in_w;
        uint8_t *d = dst + c * plane + keep * wp;
        for (r = (ptrdiff_t)keep; r < nr; r++, d += wp) {
            const ptrdiff_t ih = (ptrdiff_t)r0 + r - pad_top;
            if (ih < 0 || ih >= in_h) {
                memset(d, zp, (size_t)wp);
                continue;
            }
            memset(d, zp, (size_t)lo);
            if (hi > lo) memcpy(d + lo, src + ih * in_w + (lo - pad_left), (size_t)(hi - lo));
            if (wp > hi) memset(d + hi, zp, (size_t)(wp - hi));
        }
    }
    *plane_stride = plane;
    *row_stride = wp;
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

/* Cortex-M4/M7/M55 (the DSP extension, qgemm.h): SMLAD for the depthwise convolution's tap
 * pairs. */
#define MLCC_QCONV_SMLAD (!MLCC_QCONV_AVX512 && !MLCC_QMVE && MLCC_SMLAD)

#if MLCC_QCONV_AVX512
/* One row of 16 requantized to uint8 with one channel's constants (qgemm.h). */
static inline void store_u8(__m512i c, int32_t bias, float scale, const mlcc_requant *rq,
                            __mmask16 mask, uint8_t *out) {
    mlcc_u8_store_requant16(c, _mm512_set1_epi32(bias), _mm512_set1_ps(scale), rq, mask, out);
}
#endif

/* d[4 q + t] = r_t[q] for q < n: 4 rows interleaved into words. The AVX-512 path takes 16
 * pixels at a time with masked loads and stores, so that the short rows of small feature maps
 * (20 or 40 pixels) do not fall to a scalar loop. */
#if !MLCC_QMVE || MLCC_QCONV_AVX512
static void interleave4(const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                        const uint8_t *r3, ptrdiff_t n, uint8_t *d) {
    ptrdiff_t q = 0;
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
#elif MLCC_SMLAD && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Cortex-M (the DSP extension): 4 pixels at a time, a 4 x 4 byte transpose of one word
     * of each row: UXTB16 (with ROR 8 for the odd bytes) and a shift pair rows 0 and 1 (and
     * 2 and 3) as (r0[0], r1[0], r0[2], r1[2]) and (r0[1], r1[1], r0[3], r1[3]), and the
     * halves of two such words make each output word (PKHBT / PKHTB): 24 instructions
     * for 4 pixels, against 4 byte loads, 3 ORs and a store per pixel */
    for (; q + 4 <= n; q += 4) {
        const uint32_t a = mlcc_load_u32(r0 + q), b = mlcc_load_u32(r1 + q);
        const uint32_t c = mlcc_load_u32(r2 + q), e = mlcc_load_u32(r3 + q);
        const uint32_t ab02 = (uint32_t)mlcc_uxtb16_even(a) | (uint32_t)mlcc_uxtb16_even(b) << 8;
        const uint32_t ab13 = (uint32_t)mlcc_uxtb16_odd(a) | (uint32_t)mlcc_uxtb16_odd(b) << 8;
        const uint32_t ce02 = (uint32_t)mlcc_uxtb16_even(c) | (uint32_t)mlcc_uxtb16_even(e) << 8;
        const uint32_t ce13 = (uint32_t)mlcc_uxtb16_odd(c) | (uint32_t)mlcc_uxtb16_odd(e) << 8;
        const uint32_t w[4] = {(ab02 & 0xFFFFu) | ce02 << 16, (ab13 & 0xFFFFu) | ce13 << 16,
                               ab02 >> 16 | (ce02 & 0xFFFF0000u),
                               ab13 >> 16 | (ce13 & 0xFFFF0000u)};
        memcpy(d + 4 * q, w, 16);
    }
#endif
    for (; q < n; q++) PUT4(d + 4 * q, r0[q], r1[q], r2[q], r3[q]);
}
#endif

/* Packs output rows [oh0, oh1) of the im2col matrix of one group into [k4][P][4] (qgemm.h's
 * column operand, P = (oh1 - oh0) * out_w) straight from the padded planes, rows wp bytes
 * apart (or a window of them whose first row is output row 0's first): for each group of 4
 * rows (taps) and output row, one pass that reads the 4 taps' input rows and writes the
 * interleaved words (one vectorizable loop; strides 1 and 2 are constants for the compiler).
 * Rows k >= K (padding to a multiple of 4) meet zero weights, so they read any valid tap. */
static void pack_columns(const mlcc_qconv2d_params *p, const uint8_t *xp, ptrdiff_t plane_stride,
                         ptrdiff_t wp, ptrdiff_t k4, ptrdiff_t oh0, ptrdiff_t oh1, uint8_t *col) {
    const ptrdiff_t cg = p->in_channels / p->groups;
    const ptrdiff_t kk = p->kernel_h * p->kernel_w, K = cg * kk, kwn = p->kernel_w;
    const ptrdiff_t dh = p->dilation_h, dw = p->dilation_w;
    const ptrdiff_t OW = p->out_w, P = (oh1 - oh0) * OW;
    const ptrdiff_t sw = p->stride_w, row_step = p->stride_h * wp;
    /* output rows contiguous in the source too: one loop over all P pixels */
    const int contiguous = sw == 1 && row_step == OW;
    ptrdiff_t g, t, oh, q;
    for (g = 0; g < k4; g++) {
        const uint8_t *r[4];
        uint8_t *dst = col + g * P * 4;
        for (t = 0; t < 4; t++) {
            const ptrdiff_t k = 4 * g + t < K ? 4 * g + t : 0;
            const ptrdiff_t c = k / kk, kh = (k % kk) / kwn, kw = k % kwn;
            r[t] = xp + c * plane_stride + (oh0 * (ptrdiff_t)p->stride_h + kh * dh) * wp +
                   kw * dw;
        }
        if (contiguous) {
            const uint8_t *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
#if MLCC_QMVE
            mlcc_mve_interleave4(r0, r1, r2, r3, P, 1, dst);
#else
            interleave4(r0, r1, r2, r3, P, dst);
#endif
            continue;
        }
        for (oh = 0; oh < oh1 - oh0; oh++) {
            const uint8_t *r0 = r[0] + oh * row_step, *r1 = r[1] + oh * row_step,
                          *r2 = r[2] + oh * row_step, *r3 = r[3] + oh * row_step;
            uint8_t *d = dst + 4 * oh * OW;
#if MLCC_QMVE
            mlcc_mve_interleave4(r0, r1, r2, r3, OW, sw, d);
            (void)q;
#else
            if (sw == 1) {
                interleave4(r0, r1, r2, r3, OW, d);
            } else if (sw == 2) {
                for (q = 0; q < OW; q++)
                    PUT4(d + 4 * q, r0[2 * q], r1[2 * q], r2[2 * q], r3[2 * q]);
            } else {
                for (q = 0; q < OW; q++)
                    PUT4(d + 4 * q, r0[q * sw], r1[q * sw], r2[q * sw], r3[q * sw]);
            }
#endif
        }
    }
}

#if MLCC_QCONV_AVX512 && defined(__AVX512VNNI__)
/* Direct ("implicit GEMM") convolution for stride_w 1 and kernels of more than one tap, with
 * AVX512-VNNI: no im2col. The input is rewritten once as planes of 4 interleaved channels,
 * xc[c4][hp][wp][4] (padded with the zero point), so that for a tap (kh, kw) and a group of
 * 4 channels the [k4][P][4] words of 16 consecutive outputs of one row are 64 contiguous
 * bytes of xc: the product reads them in place. The K order becomes (kh, kw, c4) and the
 * weights are reordered to it per call (out_channels * taps * 4 * c4 bytes, small next to
 * the input). PP-OCR det's 96 -> 24 3x3 convolutions at 160 x 160 packed 22 MB of columns
 * per call; this reads a 2.5 MB plane set. Exact integer sums, the same epilogue: the result
 * is the packed path's bit for bit. Scratch: 4 * c4 * hp * wp bytes of planes (c4 =
 * ceil(in_channels / 4)), then the weights, out_channels * taps * 4 * c4 bytes: the compiler
 * reserves them and sets p->direct (mlcc/ops/quant.py, QConv). */
#define MLCC_QCONV_DIRECT 1

/* Input channel groups [g0, g1) of the c4n. */
static void direct_input(const mlcc_qconv2d_params *p, const uint8_t *x, int64_t g0, int64_t g1,
                         int64_t hp, int64_t wp, uint8_t *xc) {
    const uint8_t zp = (uint8_t)p->x_zero_point;
    const int64_t C = p->in_channels, plane = p->in_h * p->in_w;
    const int64_t lo = p->pad_left < wp ? p->pad_left : wp;
    const int64_t hi = p->pad_left + p->in_w < wp ? p->pad_left + p->in_w : wp;
    int64_t c4, r, t;
    for (c4 = g0; c4 < g1; c4++) {
        for (r = 0; r < hp; r++) {
            uint8_t *d = xc + (c4 * hp + r) * wp * 4;
            const int64_t ih = r - p->pad_top;
            const uint8_t *src[4];
            if (ih < 0 || ih >= p->in_h) {
                memset(d, zp, (size_t)(4 * wp));
                continue;
            }
            memset(d, zp, (size_t)(4 * lo));
            if (hi > lo) {
                /* channels past C meet zero weights: they may read any valid row */
                for (t = 0; t < 4; t++)
                    src[t] = x + (4 * c4 + t < C ? 4 * c4 + t : C - 1) * plane +
                             ih * p->in_w + (lo - p->pad_left);
                interleave4(src[0], src[1], src[2], src[3], hi - lo, d + 4 * lo);
            }
            if (wp > hi) memset(d + 4 * hi, zp, (size_t)(4 * (wp - hi)));
        }
    }
}

/* wd[m][tap][c4][4] from the packed rows w[m][4 * k4] (k = c * taps + tap), zeros past C, for
 * output channels [m0, m1). */
static void direct_weights(const mlcc_qconv2d_params *p, const int8_t *w, int64_t c4n,
                           int64_t m0, int64_t m1, int8_t *wd) {
    const int64_t C = p->in_channels, kk = p->kernel_h * p->kernel_w, k4 = (C * kk + 3) / 4;
    int64_t m, tap, c;
    for (m = m0; m < m1; m++)
        for (tap = 0; tap < kk; tap++) {
            int8_t *d = wd + (m * kk + tap) * c4n * 4;
            for (c = 0; c < 4 * c4n; c++)
                d[c] = c < C ? w[m * 4 * k4 + c * kk + tap] : 0;
        }
}

static inline __m512i dbcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

#define DSTEP(cr0, cr1, r)                                                                  \
    do {                                                                                    \
        const __m512i a_ = dbcast4(a + (r) * wstride);                                      \
        cr0 = _mm512_dpbusd_epi32(cr0, b0, a_);                                             \
        if (NV > 1) cr1 = _mm512_dpbusd_epi32(cr1, b1, a_);                                 \
    } while (0)

/* Output channels [i0, i0 + mr) (mr <= 8; rows past mr repeat the last one, computed, never
 * stored) x NV vectors of 16 outputs of row oh from column ow0 (masks m0, m1). */
static inline __attribute__((always_inline)) void direct_tile(
        const mlcc_qconv2d_params *p, const mlcc_qchannels *ch, const uint8_t *xc, int64_t hp,
        int64_t wp, int64_t c4n, const int8_t *wd, int64_t i0, int64_t mr, int64_t oh,
        int64_t ow0, __mmask16 m0, __mmask16 m1, const int NV, void *y) {
    const int64_t kk = p->kernel_h * p->kernel_w, wstride = kk * c4n * 4;
    const int64_t plane4 = hp * wp * 4, P = p->out_h * p->out_w;
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
            c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00,
            c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    int64_t kh, kw, c4, r;
    const int64_t rr[8] = {0, mr > 1 ? 1 : 0, mr > 2 ? 2 : 0, mr > 3 ? 3 : 0, mr > 4 ? 4 : 0,
                           mr > 5 ? 5 : 0, mr > 6 ? 6 : 0, mr > 7 ? 7 : 0};
    for (kh = 0; kh < p->kernel_h; kh++) {
        for (kw = 0; kw < p->kernel_w; kw++) {
            const uint8_t *b = xc + ((oh * p->stride_h + kh * p->dilation_h) * wp + ow0 +
                                     kw * p->dilation_w) * 4;
            const int8_t *a0 = wd + i0 * wstride + (kh * p->kernel_w + kw) * c4n * 4;
            for (c4 = 0; c4 < c4n; c4++, b += plane4, a0 += 4) {
                const __m512i b0 = _mm512_maskz_loadu_epi32(m0, b);
                const __m512i b1 = NV > 1 ? _mm512_maskz_loadu_epi32(m1, b + 64) : b0;
                const int8_t *a = a0;
                if (mr > 4) {
                    DSTEP(c00, c01, rr[0]); DSTEP(c10, c11, rr[1]); DSTEP(c20, c21, rr[2]);
                    DSTEP(c30, c31, rr[3]); DSTEP(c40, c41, rr[4]); DSTEP(c50, c51, rr[5]);
                    DSTEP(c60, c61, rr[6]); DSTEP(c70, c71, rr[7]);
                } else {
                    DSTEP(c00, c01, rr[0]); DSTEP(c10, c11, rr[1]); DSTEP(c20, c21, rr[2]);
                    DSTEP(c30, c31, rr[3]);
                }
            }
        }
    }
    {
        const __m512i cs[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                                  {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
        const __mmask16 ms[2] = {m0, m1};
        const int64_t base = oh * p->out_w + ow0;
        int v;
        for (r = 0; r < mr; r++) {
            const int64_t c = i0 + r;
            for (v = 0; v < NV; v++) {
                const int64_t n = ow0 + 16 * v >= p->out_w ? 0
                                  : (p->out_w - ow0 - 16 * v < 16 ? p->out_w - ow0 - 16 * v : 16);
                if (n == 0) continue;
                if (p->rq.out_kind == MLCC_QOUT_U8 && p->rq.mode == MLCC_REQUANT_FLOAT) {
                    store_u8(cs[r][v], ch->bias[c], ch->scale[c], &p->rq, ms[v],
                                    (uint8_t *)y + c * P + base + 16 * v);
                } else {
                    int32_t acc[16];
                    _mm512_storeu_si512((void *)acc, cs[r][v]);
                    mlcc_requant_run(&p->rq, ch, c, acc, n, y, c * P + base + 16 * v);
                }
            }
        }
    }
}
#undef DSTEP

typedef struct {
    const mlcc_qconv2d_params *p;
    const mlcc_qchannels *ch;
    const uint8_t *xc;
    const int8_t *wd;
    uint8_t *yn;
    int64_t c4n, hp, wp;
    /* direct_prep_range: the image's input, the packed weights, the scratch xc and wd are */
    const uint8_t *xn;
    const int8_t *w;
    uint8_t *scratch;
} direct_job;

/* One output row (unit oh) of every channel. */
static void direct_row(void *arg, int oh, int thread) {
    const direct_job *j = (const direct_job *)arg;
    const mlcc_qconv2d_params *p = j->p;
    const int64_t M = p->out_channels, OW = p->out_w;
    int64_t ow0, i0;
    (void)thread;
    for (ow0 = 0; ow0 < OW; ow0 += 32) {
        const int64_t rem = OW - ow0;
        const __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xFFFFu : (1u << rem) - 1u);
        const __mmask16 m1 = (__mmask16)(rem >= 32 ? 0xFFFFu
                                         : rem > 16 ? (1u << (rem - 16)) - 1u : 0u);
        for (i0 = 0; i0 < M; i0 += 8) {
            const int64_t mr = M - i0 < 8 ? M - i0 : 8;
            if (rem > 16)
                direct_tile(p, j->ch, j->xc, j->hp, j->wp, j->c4n, j->wd, i0, mr, oh, ow0, m0,
                            m1, 2, j->yn);
            else
                direct_tile(p, j->ch, j->xc, j->hp, j->wp, j->c4n, j->wd, i0, mr, oh, ow0, m0,
                            m1, 1, j->yn);
        }
    }
}

/* The copies before the products, one parallel loop: items [0, c4n) are the input's channel
 * groups (of image xn), the rest the weights' output channels (the first image only). On the caller alone they were 7-9 us of every direct call (YOLOv8n int8 on 2
 * threads: 0.15 ms of serial time). Copies: the same bytes on any pool. */
static void direct_prep_range(void *arg, ptrdiff_t i0, ptrdiff_t i1) {
    const direct_job *d = (const direct_job *)arg;
    if (i0 < d->c4n)
        direct_input(d->p, d->xn, i0, i1 < d->c4n ? i1 : d->c4n, d->hp, d->wp, d->scratch);
    if (i1 > d->c4n)
        direct_weights(d->p, d->w, d->c4n, (i0 > d->c4n ? i0 : d->c4n) - d->c4n, i1 - d->c4n,
                       (int8_t *)(d->scratch + 4 * d->c4n * d->hp * d->wp));
}

static void qconv_direct(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                         const mlcc_qchannels *ch, void *y, int64_t c4n, int64_t hp, int64_t wp,
                         uint8_t *scratch, mlcc_threadpool *pool) {
    const size_t esize = p->rq.out_kind == MLCC_QOUT_U8 ? 1 : 4;
    direct_job job;
    int64_t n;
    job.p = p; job.ch = ch; job.xc = scratch; job.c4n = c4n; job.hp = hp; job.wp = wp;
    job.wd = (int8_t *)(scratch + 4 * c4n * hp * wp);
    job.w = w; job.scratch = scratch;
    for (n = 0; n < p->batch; n++) {
        const int64_t items = c4n + (n == 0 ? p->out_channels : 0);
        job.yn = (uint8_t *)y + (size_t)(n * p->out_channels * p->out_h * p->out_w) * esize;
        job.xn = x + n * p->in_channels * p->in_h * p->in_w;
        mlcc_parallel_ranges(pool, direct_prep_range, &job, (ptrdiff_t)items,
                             4.0 * (double)(c4n * hp * wp) +
                                 (n == 0 ? 4.0 * (double)(p->out_channels * c4n) *
                                               (double)(p->kernel_h * p->kernel_w) : 0.0),
                             (double)MLCC_MIN_PARALLEL_ELEMENTS);
        /* rows are independent and their sums exact: any split gives the same bytes */
        mlcc_threadpool_for(pool, direct_row, &job, (int)p->out_h, MLCC_MAX_THREADS);
    }
}
#else
#define MLCC_QCONV_DIRECT 0
#endif

typedef struct {
    const mlcc_qconv2d_params *p;
    mlcc_qchannels ch;
    const uint8_t *xg;
    const int8_t *w;
    uint8_t *y, *scratch;
    int64_t k4, rows, slice_rows;
    size_t esize, slice_bytes;
} im2col_job;

/* Output rows [oh0, oh1) of one group on a slice of scratch: the input window they read
 * (padded rows [r0, r0 + nr), the first `keep` of them already in the slice's window), packed
 * into columns, multiplied. Returns whether the window was copied into the slice. */
static int im2col_rows(const im2col_job *j, int64_t oh0, int64_t oh1, uint8_t *slice,
                       int64_t keep) {
    const mlcc_qconv2d_params *p = j->p;
    const int64_t wp = MLCC_QCONV_PADDED_W(p);
    uint8_t *win = slice + 4 * j->k4 * j->slice_rows * p->out_w;
    int64_t plane_stride, row_stride;
    const uint8_t *xp = padded_window(p, j->xg, p->in_channels / p->groups, oh0 * p->stride_h,
                                      MLCC_QCONV_WINDOW_H(p, oh1 - oh0), keep, wp,
                                      MLCC_QCONV_WINDOW_H(p, j->slice_rows) * wp, win,
                                      &plane_stride, &row_stride);
    mlcc_qgemm_desc d;
    pack_columns(p, xp, plane_stride, row_stride, j->k4, 0, oh1 - oh0, slice);
    d.m = p->out_channels / p->groups; d.n = (oh1 - oh0) * p->out_w; d.k4 = j->k4;
    d.lda = 4 * j->k4; d.ldy = p->out_h * p->out_w;
    d.n0 = 0; d.ldb = d.n;
    d.channel_is_row = 1; d.a_signed = 1;
    mlcc_u8s8_gemm(&d, j->w, slice, &p->rq, &j->ch, j->y + (size_t)(oh0 * p->out_w) * j->esize);
    return xp == win;
}

/* A pool's unit: output rows [unit * rows, +rows), on the thread's own slice. */
static void im2col_chunk(void *arg, int unit, int thread) {
    const im2col_job *j = (const im2col_job *)arg;
    const int64_t oh0 = unit * j->rows;
    const int64_t oh1 = oh0 + j->rows < j->p->out_h ? oh0 + j->rows : j->p->out_h;
    im2col_rows(j, oh0, oh1, j->scratch + (size_t)thread * j->slice_bytes, 0);
}

/* A lone caller: the chunks in order, each window's rows that the previous window holds
 * moved to its start rather than read again. That is also what lets y share x's bytes (the
 * compiler plans it where out_h, out_w = in_h, in_w, stride 1, one group, batch 1 and
 * out_channels <= in_channels: mlcc/ops/quant.py): a chunk overwrites input rows below its
 * last output row + 1 only, and the next chunk reads the rows from there on (pad_top <=
 * taps - 1) from the window, the ones after it from x. */
static void im2col_lone(const im2col_job *j) {
    const mlcc_qconv2d_params *p = j->p;
    const int64_t cg = p->in_channels / p->groups, wp = MLCC_QCONV_PADDED_W(p);
    const int64_t plane = MLCC_QCONV_WINDOW_H(p, j->slice_rows) * wp;
    uint8_t *win = j->scratch + 4 * j->k4 * j->slice_rows * p->out_w;
    int64_t oh0, have0 = 0, have1 = 0;      /* padded rows [have0, have1) in the window */
    for (oh0 = 0; oh0 < p->out_h; oh0 += j->rows) {
        const int64_t oh1 = oh0 + j->rows < p->out_h ? oh0 + j->rows : p->out_h;
        const int64_t r0 = oh0 * p->stride_h, nr = MLCC_QCONV_WINDOW_H(p, oh1 - oh0);
        int64_t keep = 0, c;
        if (have0 <= r0 && r0 < have1) {
            keep = have1 - r0 < nr ? have1 - r0 : nr;
            for (c = 0; c < cg; c++)
                memmove(win + c * plane, win + c * plane + (r0 - have0) * wp, (size_t)(keep * wp));
        }
        if (im2col_rows(j, oh0, oh1, j->scratch, keep)) {
            have0 = r0;
            have1 = r0 + nr;
        } else {
            have0 = have1 = 0;
        }
    }
}

void mlcc_u8_conv2d(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                    const int32_t *bias, const float *scale, const float *fbias,
                    const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch,
                    mlcc_threadpool *pool) {
    const int64_t cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
    const int64_t k4 = MLCC_QCONV_K4(p);
    const int64_t P = p->out_h * p->out_w;
    const size_t esize = p->rq.out_kind == MLCC_QOUT_U8 ? 1 : 4;   /* float or int32 */
    im2col_job job;
    int64_t n, g;
    if ((double)p->batch * (double)p->out_channels * (double)P * (double)cg *
            (double)(p->kernel_h * p->kernel_w) < (double)MLCC_MIN_PARALLEL_INT8_MACS)
        pool = NULL;
#if MLCC_QCONV_DIRECT
    {
        const int64_t c4n = (p->in_channels + 3) / 4;
        /* rows are tiled by 16 outputs: a row of 20 computes 32. Worth it while the lanes
         * lost (out_channels * (padded - out_w)) cost less than the packing saved, about 12
         * channels' products per output (measured: PP-OCR det's 24-channel outputs gain at
         * widths 40 and 160, YOLOv8n's 64-channel ones lose 4-23% at widths 40 and 20). The
         * compiler sets p->direct where the scratch has room (mlcc/ops/quant.py) */
        const int64_t lost = (16 - p->out_w % 16) % 16;
        if (p->direct && p->groups == 1 && p->stride_w == 1 &&
            p->kernel_h * p->kernel_w > 1 && p->out_channels * lost < 12 * p->out_w) {
            const mlcc_qchannels ch = {bias, scale, fbias, mult, shift};
            qconv_direct(p, x, w, &ch, y, c4n, MLCC_QCONV_PADDED_H(p), MLCC_QCONV_PADDED_W(p),
                         scratch, pool);
            return;
        }
    }
#endif
    {   /* y over x (planned by the compiler): the lone caller's order only */
        const uintptr_t xa = (uintptr_t)x, ya = (uintptr_t)y;
        const uintptr_t xn = (uintptr_t)(p->batch * p->in_channels * p->in_h * p->in_w);
        const uintptr_t yn = (uintptr_t)(p->batch * p->out_channels * P) * esize;
        if (ya < xa + xn && xa < ya + yn) pool = NULL;
    }
    job.p = p; job.k4 = k4; job.esize = esize; job.scratch = scratch;
    /* a lone caller takes chunks of chunk_rows (the columns of one chunk stay in cache while
     * the product reads them: PP-OCR det's 96 -> 24 3x3 convolutions at 160 x 160 pack 22 MB
     * whole); a pool's threads take about two chunks each, on their own slices */
    job.rows = job.slice_rows = p->chunk_rows;
    if (mlcc_threadpool_size(pool) > 1) {
        const int64_t per = (p->out_h + 2 * mlcc_threadpool_size(pool) - 1) /
                            (2 * mlcc_threadpool_size(pool));
        job.slice_rows = MLCC_QCONV_POOL_ROWS(p);
        job.rows = per < job.slice_rows ? per : job.slice_rows;
    }
    job.slice_bytes = MLCC_QCONV_SLICE_BYTES(p, job.slice_rows);
    for (n = 0; n < p->batch; n++) {
        for (g = 0; g < p->groups; g++) {
            const int64_t c0 = g * mg;
            job.xg = x + (n * p->in_channels + g * cg) * p->in_h * p->in_w;
            job.ch.bias = bias + c0;
            job.ch.scale = scale ? scale + c0 : NULL;
            job.ch.fbias = fbias ? fbias + c0 : NULL;
            job.ch.mult = mult ? mult + c0 : NULL;
            job.ch.shift = shift ? shift + c0 : NULL;
            job.w = w + c0 * 4 * k4;
            job.y = (uint8_t *)y + (size_t)((n * p->out_channels + c0) * P) * esize;
            if (mlcc_threadpool_size(pool) > 1)
                mlcc_threadpool_for(pool, im2col_chunk, &job,
                                    (int)((p->out_h + job.rows - 1) / job.rows),
                                    MLCC_DW_SLICES);
            else
                im2col_lone(&job);
        }
    }
}

#define DW_CHUNK 256

/* One channel plane minus the zero point as int16, padded with real zeros (code zx) on every
 * side the kernel window reaches: hp x wp, so that the tap loops below have no bounds checks
 * and vectorize (each output row is a sum of kernel_h * kernel_w shifted rows). */
static void dw_padded_plane(const mlcc_qconv2d_params *p, const uint8_t *plane, ptrdiff_t hp,
                            ptrdiff_t wp, int16_t *dst) {
    const int32_t zp = p->x_zero_point;
    /* ptrdiff_t: 32-bit arithmetic on 32-bit cores */
    const ptrdiff_t in_h = (ptrdiff_t)p->in_h, in_w = (ptrdiff_t)p->in_w;
    const ptrdiff_t pad_top = (ptrdiff_t)p->pad_top, pad_left = (ptrdiff_t)p->pad_left;
    ptrdiff_t r, q;
    for (r = 0; r < hp; r++) {
        const ptrdiff_t ih = r - pad_top;
        int16_t *d = dst + r * wp;
        const uint8_t *src;
        ptrdiff_t lo, hi;
        if (ih < 0 || ih >= in_h) {
            memset(d, 0, sizeof(int16_t) * (size_t)wp);
            continue;
        }
        /* padded columns [lo, hi) hold input columns [lo - pad_left, hi - pad_left) */
        lo = pad_left < wp ? pad_left : wp;
        hi = pad_left + in_w < wp ? pad_left + in_w : wp;
        for (q = 0; q < lo; q++) d[q] = 0;
        src = plane + ih * in_w - pad_left;
        q = lo;
#if MLCC_QCONV_AVX512
        /* 32 columns at a time (uint8 may alias the int16 plane for the compiler, which
         * then left this loop scalar) */
        for (; q < hi; q += 32) {
            const __mmask32 m = (__mmask32)(hi - q >= 32 ? 0xFFFFFFFFu
                                            : (1u << (hi - q)) - 1u);
            _mm512_mask_storeu_epi16(d + q, m, _mm512_sub_epi16(
                _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + q)),
                _mm512_set1_epi16((int16_t)zp)));
        }
#endif
        for (; q < hi; q++) d[q] = (int16_t)((int32_t)src[q] - zp);
        for (q = hi; q < wp; q++) d[q] = 0;
    }
}

#if MLCC_QCONV_AVX512 || MLCC_QCONV_SMLAD
#define DW_MAX_PAIRS 64      /* kernel_h * ceil(kernel_w / 2) of the tap-pair paths */

/* The weight pairs of one channel as the int32 words vpmaddwd and SMLAD take (w0 | w1 << 16,
 * an odd kernel width's last tap as (0, w)): computed once per channel, not per row. */
static void dw_weight_pairs(const int8_t *wc, int64_t kh_n, int64_t kw_n, int32_t *pairs) {
    int64_t kh, kw, i = 0;
    for (kh = 0; kh < kh_n; kh++)
        for (kw = 0; kw < kw_n; kw += 2) {
            const int last = kw + 1 >= kw_n;
            const int32_t w0 = last ? 0 : wc[kh * kw_n + kw];
            const int32_t w1 = last ? wc[kh * kw_n + kw] : wc[kh * kw_n + kw + 1];
            pairs[i++] = (int32_t)((uint32_t)(uint16_t)w0 | ((uint32_t)(uint16_t)w1 << 16));
        }
}
#endif

#if MLCC_QCONV_SMLAD
static inline int32_t pair_at(const int16_t *x) { return (int32_t)mlcc_load_u32(x); }

/* acc[r * nw + o] = sum over taps of w[kh][kw] * row_kh[o * sw + kw] for o < nw and `rows`
 * output rows r (dilation_w 1, kernel_w >= 2; row_kh = row0 + r * row_step + kh * step):
 * the taps in horizontal pairs as dw_rows_pairs takes them. A 32-bit load at int16 element
 * j holds (x[j], x[j + 1]) and SMLAD adds both products with the pair's weights to the sum,
 * which stays in a register over all taps of one output. Several rows per call, the
 * constants set up once (KWS's rows of 5 outputs had cost as much in setup as in sums);
 * 3 x 3 kernels unrolled, at stride 1 two outputs at a time: the pair at x + 1 is the
 * second pair of output o and the first of output o + 1, so 3 loads a kernel row serve
 * both (4 with one output at a time). Exact integer sums: the portable loop's bits. */
static void dw_rows_smlad(const int16_t *row0, int step, const int32_t *pairs, int kh_n,
                          int kw_n, int sw, int nw, int rows, int row_step, int32_t *acc) {
    const int np = (kw_n + 1) / 2;
    int off[DW_MAX_PAIRS];
    int o, kh, i, r;
    if (kh_n == 3 && kw_n == 3) {
        const int32_t p0 = pairs[0], p1 = pairs[1], p2 = pairs[2], p3 = pairs[3],
                      p4 = pairs[4], p5 = pairs[5];
        for (r = 0; r < rows; r++, row0 += row_step, acc += nw) {
            o = 0;
            if (sw == 1) {
                for (; o + 1 < nw; o += 2) {
                    const int16_t *x = row0 + o;
                    int32_t a = pair_at(x), b = pair_at(x + 1), c = pair_at(x + 2);
                    int32_t s = __smlad(b, p1, __smlad(a, p0, 0));
                    int32_t t = __smlad(c, p1, __smlad(b, p0, 0));
                    a = pair_at(x + step);
                    b = pair_at(x + step + 1);
                    c = pair_at(x + step + 2);
                    s = __smlad(b, p3, __smlad(a, p2, s));
                    t = __smlad(c, p3, __smlad(b, p2, t));
                    a = pair_at(x + 2 * step);
                    b = pair_at(x + 2 * step + 1);
                    c = pair_at(x + 2 * step + 2);
                    acc[o] = __smlad(b, p5, __smlad(a, p4, s));
                    acc[o + 1] = __smlad(c, p5, __smlad(b, p4, t));
                }
            }
            for (; o < nw; o++) {
                const int16_t *x = row0 + o * sw;
                int32_t s = __smlad(pair_at(x), p0, 0);
                s = __smlad(pair_at(x + 1), p1, s);
                s = __smlad(pair_at(x + step), p2, s);
                s = __smlad(pair_at(x + step + 1), p3, s);
                s = __smlad(pair_at(x + 2 * step), p4, s);
                acc[o] = __smlad(pair_at(x + 2 * step + 1), p5, s);
            }
        }
        return;
    }
    for (i = 0; i < np; i++) off[i] = 2 * i + 1 >= kw_n ? 2 * i - 1 : 2 * i;
    for (r = 0; r < rows; r++, row0 += row_step, acc += nw) {
        for (o = 0; o < nw; o++) {
            const int16_t *x = row0 + o * sw;
            const int32_t *pw = pairs;
            int32_t s = 0;
            for (kh = 0; kh < kh_n; kh++, x += step)
                for (i = 0; i < np; i++, pw++) s = __smlad(pair_at(x + off[i]), *pw, s);
            acc[o] = s;
        }
    }
}
#endif

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

/* e += pairs . x (int16 pairs to int32): vpdpwssd where AVX512-VNNI is there (one
 * instruction; no saturation, so the same sums), else vpmaddwd + vpaddd. */
static inline __m512i dw_dot(__m512i e, __m512i x, __m512i w) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(e, x, w);
#else
    return _mm512_add_epi32(e, _mm512_madd_epi16(x, w));
#endif
}

static void dw_rows_pairs(const int16_t *row0, int64_t step, const int32_t *pairs,
                          int64_t kh_n, int64_t kw_n, int64_t nw, int32_t *acc,
                          const mlcc_requant *rq, int32_t bias, float scale, uint8_t *out) {
    const __m512i idx_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                            16, 0);
    const __m512i idx_hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                            25, 9, 24, 8);
    int64_t o0, kh, kw;
    for (o0 = 0; o0 < nw; o0 += 32) {
        const int64_t rem = nw - o0 < 32 ? nw - o0 : 32;
        const __mmask16 me = (__mmask16)((1u << ((rem + 1) / 2)) - 1u);
        const __mmask16 mo = (__mmask16)((1u << (rem / 2)) - 1u);
        /* two pairs of accumulators (even and odd kernel rows): the dependency chains of
         * the dot products are half as long (they, not the throughput, bounded the loop) */
        __m512i e = _mm512_setzero_si512(), od = e, e2 = e, od2 = e;
        const int32_t *pw = pairs;
        for (kh = 0; kh + 1 < kh_n; kh += 2) {
            const int16_t *r = row0 + kh * step + o0, *r2 = r + step;
            const int32_t *pw2 = pw + (kw_n + 1) / 2;
            for (kw = 0; kw < kw_n; kw += 2, pw++, pw2++) {
                const int64_t off = kw + 1 >= kw_n ? kw - 1 : kw;
                const __m512i wp = _mm512_set1_epi32(*pw), wp2 = _mm512_set1_epi32(*pw2);
                e = dw_dot(e, _mm512_maskz_loadu_epi32(me, r + off), wp);
                od = dw_dot(od, _mm512_maskz_loadu_epi32(mo, r + off + 1), wp);
                e2 = dw_dot(e2, _mm512_maskz_loadu_epi32(me, r2 + off), wp2);
                od2 = dw_dot(od2, _mm512_maskz_loadu_epi32(mo, r2 + off + 1), wp2);
            }
            pw = pw2;
        }
        if (kh < kh_n) {
            const int16_t *r = row0 + kh * step + o0;
            for (kw = 0; kw < kw_n; kw += 2, pw++) {
                const int64_t off = kw + 1 >= kw_n ? kw - 1 : kw;
                const __m512i wp = _mm512_set1_epi32(*pw);
                e = dw_dot(e, _mm512_maskz_loadu_epi32(me, r + off), wp);
                od = dw_dot(od, _mm512_maskz_loadu_epi32(mo, r + off + 1), wp);
            }
        }
        const __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xFFFFu : (1u << rem) - 1u);
        const __mmask16 m1 = (__mmask16)(rem > 16 ? (1u << (rem - 16)) - 1u : 0u);
        e = _mm512_add_epi32(e, e2);
        od = _mm512_add_epi32(od, od2);
        if (out != NULL) {      /* uint8, float requantization: in registers */
            store_u8(_mm512_permutex2var_epi32(e, idx_lo, od), bias, scale, rq, m0, out + o0);
            if (rem > 16)
                store_u8(_mm512_permutex2var_epi32(e, idx_hi, od), bias, scale, rq, m1,
                         out + o0 + 16);
            continue;
        }
        _mm512_mask_storeu_epi32(acc + o0, m0, _mm512_permutex2var_epi32(e, idx_lo, od));
        if (rem > 16)
            _mm512_mask_storeu_epi32(acc + o0 + 16, m1, _mm512_permutex2var_epi32(e, idx_hi, od));
    }
}

/* dw_rows_pairs for two adjacent output rows at once (stride_h = dilation_h = 1, uint8 with
 * the float requantization): input row j serves kernel row j of the first and kernel row
 * j - 1 of the second, so each loaded vector feeds two dot products (half the loads, which
 * bounded the loop: every one is unaligned and crosses a cache line). */
static void dw_two_rows_pairs(const int16_t *row0, int64_t step, const int32_t *pairs,
                              int64_t kh_n, int64_t kw_n, int64_t nw, const mlcc_requant *rq,
                              int32_t bias, float scale, uint8_t *out_a, uint8_t *out_b) {
    const __m512i idx_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                            16, 0);
    const __m512i idx_hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                            25, 9, 24, 8);
    const int64_t np = (kw_n + 1) / 2;
    int64_t o0, j, kw, i;
    for (o0 = 0; o0 < nw; o0 += 32) {
        const int64_t rem = nw - o0 < 32 ? nw - o0 : 32;
        const __mmask16 me = (__mmask16)((1u << ((rem + 1) / 2)) - 1u);
        const __mmask16 mo = (__mmask16)((1u << (rem / 2)) - 1u);
        const __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xFFFFu : (1u << rem) - 1u);
        const __mmask16 m1 = (__mmask16)(rem > 16 ? (1u << (rem - 16)) - 1u : 0u);
        __m512i ea = _mm512_setzero_si512(), oa = ea, eb = ea, ob = ea;
        for (j = 0; j <= kh_n; j++) {
            const int16_t *r = row0 + j * step + o0;
            for (kw = 0, i = 0; kw < kw_n; kw += 2, i++) {
                const int64_t off = kw + 1 >= kw_n ? kw - 1 : kw;
                const __m512i xe = _mm512_maskz_loadu_epi32(me, r + off);
                const __m512i xo = _mm512_maskz_loadu_epi32(mo, r + off + 1);
                if (j < kh_n) {
                    const __m512i w = _mm512_set1_epi32(pairs[j * np + i]);
                    ea = dw_dot(ea, xe, w);
                    oa = dw_dot(oa, xo, w);
                }
                if (j > 0) {
                    const __m512i w = _mm512_set1_epi32(pairs[(j - 1) * np + i]);
                    eb = dw_dot(eb, xe, w);
                    ob = dw_dot(ob, xo, w);
                }
            }
        }
        store_u8(_mm512_permutex2var_epi32(ea, idx_lo, oa), bias, scale, rq, m0, out_a + o0);
        store_u8(_mm512_permutex2var_epi32(eb, idx_lo, ob), bias, scale, rq, m0, out_b + o0);
        if (rem > 16) {
            store_u8(_mm512_permutex2var_epi32(ea, idx_hi, oa), bias, scale, rq, m1,
                     out_a + o0 + 16);
            store_u8(_mm512_permutex2var_epi32(eb, idx_hi, ob), bias, scale, rq, m1,
                     out_b + o0 + 16);
        }
    }
}

/* dw_rows_pairs for stride_w 2: output o's pair (x[2 o + kw], x[2 o + kw + 1]) is the int32
 * word at int16 element 2 o + kw, so one load from row + kw + 2 o0 holds the pairs of 16
 * consecutive outputs, in order (no even / odd split). Two vectors (32 outputs) per pass. */
static void dw_rows_pairs_s2(const int16_t *row0, int64_t step, const int32_t *pairs,
                             int64_t kh_n, int64_t kw_n, int64_t nw, int32_t *acc,
                             const mlcc_requant *rq, int32_t bias, float scale, uint8_t *out) {
    int64_t o0, kh, kw;
    for (o0 = 0; o0 < nw; o0 += 32) {
        const int64_t rem = nw - o0 < 32 ? nw - o0 : 32;
        const __mmask16 m0 = (__mmask16)(rem >= 16 ? 0xFFFFu : (1u << rem) - 1u);
        const __mmask16 m1 = (__mmask16)(rem > 16 ? (1u << (rem - 16)) - 1u : 0u);
        __m512i e = _mm512_setzero_si512(), f = e;
        const int32_t *pw = pairs;
        for (kh = 0; kh < kh_n; kh++) {
            const int16_t *r = row0 + kh * step + 2 * o0;
            for (kw = 0; kw < kw_n; kw += 2, pw++) {
                const int64_t off = kw + 1 >= kw_n ? kw - 1 : kw;
                const __m512i wp = _mm512_set1_epi32(*pw);
                e = dw_dot(e, _mm512_maskz_loadu_epi32(m0, r + off), wp);
                f = dw_dot(f, _mm512_maskz_loadu_epi32(m1, r + off + 32), wp);
            }
        }
        if (out != NULL) {
            store_u8(e, bias, scale, rq, m0, out + o0);
            if (rem > 16) store_u8(f, bias, scale, rq, m1, out + o0 + 16);
            continue;
        }
        _mm512_mask_storeu_epi32(acc + o0, m0, e);
        if (rem > 16) _mm512_mask_storeu_epi32(acc + o0 + 16, m1, f);
    }
}
#endif

#if MLCC_QCONV_AVX512 && defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
/* Depthwise 3 x 3 and 5 x 5 on the uint8 codes themselves (AVX512-VNNI and VBMI), strides 1
 * and 2: vpdpbusd multiplies 4 uint8 x int8 pairs per int32 lane, so 4 taps of a kernel row
 * go in one instruction (the int16 pairs above take 2, after widening the plane). vpermb
 * (VBMI) builds, from one 64-byte load of an input row, the words (x[s i + 4 g], ...,
 * x[s i + 4 g + 3]) of 16 consecutive outputs i (stride s) for each group g of 4 taps: the
 * outputs stay in order and stride 2 needs no gather. DW_BYTES_ROWS output rows at once:
 * each loaded and permuted input row feeds every output row whose window holds it, and the
 * rows' sums are independent dependency chains. No padded copy of the plane: a load takes
 * the input's bytes under a mask of the columns inside it and the zero point elsewhere (rows
 * outside: all zero point), and sum w (x - zp) = sum w x - zp sum w, the correction folded
 * into the bias; all exact in int32 (|sum| <= 255 * 128 * 25), so the bytes are the portable
 * loop's. Taps past kernel_w have zero weights. Kernel, strides and rows are constants of
 * each specialization (dw_bytes_plane's switch), so the loops unroll and the sums, weights
 * and permutations stay in registers. */
#define MLCC_QCONV_DW_BYTES 1
#define DW_BYTES_ROWS 4
/* Without the uint8 requantization in registers (float or int32 outputs, the fixed mode),
 * the sums of DW_BYTES_ROWS whole rows go to mlcc_requant_run a row at a time (per 16 sums
 * its calls had cost 6x the convolution): rows of at most this many outputs. */
#define DW_BYTES_MAX_W 512

typedef struct {
    const uint8_t *x;           /* the channel's input plane */
    ptrdiff_t in_h, in_w, pad_top, pad_left, out_h, out_w;
    int32_t quads[5 * 2];       /* kernel row kh's taps 4 g .. 4 g + 3 at [kh * nq + g] */
    int32_t bias;               /* with the zero point's correction */
    float scale;
    uint8_t zp;
    mlcc_rq16 rq;
    uint8_t *out;               /* the channel's uint8 output plane (float requantization) */
    int32_t *acc;               /* else the sums of a block's rows here (DW_BYTES_ACC) */
    const mlcc_qconv2d_params *p;
    const mlcc_qchannels *ch;
    int64_t c, y_at;
    void *y;
} dw_bytes_args;

/* The sums of output rows [oh0, oh0 + R), columns [ow0, ow0 + 16), into s[0 .. R). x: the
 * channel's input plane; w: the weight words, broadcast; idx: vpermb's indices per tap
 * group. Branch-free: a row outside the input reads under mask 0 (from row 0). */
static inline __attribute__((always_inline)) void dw_bytes_sums(
        const uint8_t *x, ptrdiff_t in_h, ptrdiff_t in_w, ptrdiff_t pad_top,
        ptrdiff_t pad_left, __m512i zpv, const __m512i *w, const __m512i *idx, const int KH,
        const int NQ, const int SH, const int SW, const int R, ptrdiff_t oh0, ptrdiff_t ow0,
        __m512i *s) {
    /* input columns [ic, ic + 64) of a load: the mask of those inside the row */
    const ptrdiff_t ic = ow0 * SW - pad_left;
    const ptrdiff_t lo = ic < 0 ? -ic : 0, hi = in_w - ic < 64 ? in_w - ic : 64;
    const __mmask64 mcol = hi <= lo ? 0 :
        ((hi - lo >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (hi - lo)) - 1)) << lo);
    int r, j, g;
#pragma GCC unroll 4
    for (r = 0; r < R; r++) s[r] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (j = 0; j < (R - 1) * SH + KH; j++) {
        const ptrdiff_t ih = oh0 * SH + j - pad_top;
        const ptrdiff_t in = (size_t)ih < (size_t)in_h;
        const __m512i v = _mm512_mask_loadu_epi8(
            zpv, mcol & (__mmask64)(0 - (uint64_t)in), x + ih * in * in_w + ic);
#pragma GCC unroll 2
        for (g = 0; g < NQ; g++) {
            const __m512i p = _mm512_permutexvar_epi8(idx[g], v);
#pragma GCC unroll 4
            for (r = 0; r < R; r++) {
                const int kh = j - r * SH;
                if (kh >= 0 && kh < KH) s[r] = _mm512_dpbusd_epi32(s[r], p, w[kh * NQ + g]);
            }
        }
    }
}

/* Output rows [oh0, oh0 + R) of the plane (the sums, then the requantization). */
#define DW_BYTES_ROWS_OF(R) {                                                                \
    for (ow = 0; ow < OW; ow += 16) {                                                        \
        const int nw = OW - ow >= 16 ? 16 : (int)(OW - ow);                                  \
        const __mmask16 mo = (__mmask16)(nw >= 16 ? 0xFFFFu : (1u << nw) - 1u);              \
        __m512i s[DW_BYTES_ROWS];                                                            \
        int r;                                                                               \
        dw_bytes_sums(x, in_h, in_w, pad_top, pad_left, zpv, w, idx, KH, NQ, SH, SW, R, oh,  \
                      ow, s);                                                                \
        for (r = 0; r < R; r++) {                                                            \
            if (out != NULL)                                                                 \
                mlcc_u8_store_rq16(s[r], bias, scale, &rq, mo, out + (oh + r) * OW + ow);    \
            else                                                                             \
                _mm512_mask_storeu_epi32(acc + r * OW + ow, mo,                              \
                                         _mm512_add_epi32(s[r], bias));                      \
        }                                                                                    \
    }                                                                                        \
    if (out == NULL) {                                                                       \
        int r;                                                                               \
        for (r = 0; r < R; r++)                                                              \
            mlcc_requant_run(&a->p->rq, a->ch, a->c, acc + r * OW, OW, a->y,                 \
                             a->y_at + (oh + r) * OW);                                       \
    }                                                                                        \
}

static inline __attribute__((always_inline)) void dw_bytes_plane_t(
        const dw_bytes_args *a, const int KH, const int NQ, const int SH, const int SW) {
    /* locals: the output's stores may alias *a for the compiler */
    const uint8_t *x = a->x;
    const ptrdiff_t in_h = a->in_h, in_w = a->in_w, pad_top = a->pad_top,
                    pad_left = a->pad_left, OH = a->out_h, OW = a->out_w;
    const __m512i zpv = _mm512_set1_epi8((char)a->zp), bias = _mm512_set1_epi32(a->bias);
    const __m512 scale = _mm512_set1_ps(a->scale);
    const mlcc_rq16 rq = a->rq;
    uint8_t *out = a->out;
    int32_t *acc = a->acc;
    __m512i w[5 * 2], idx[2];
    ptrdiff_t oh, ow;
    int i, g;
    for (i = 0; i < KH * NQ; i++) w[i] = _mm512_set1_epi32(a->quads[i]);
    for (g = 0; g < NQ; g++) {
        int8_t t[64];
        for (i = 0; i < 64; i++) t[i] = (int8_t)(SW * (i / 4) + 4 * g + i % 4);
        idx[g] = _mm512_loadu_si512((const void *)t);
    }
    for (oh = 0; oh + DW_BYTES_ROWS <= OH; oh += DW_BYTES_ROWS) DW_BYTES_ROWS_OF(DW_BYTES_ROWS)
    /* the last rows: a block of as many (a constant each) */
    if (OH - oh == 3) DW_BYTES_ROWS_OF(3)
    else if (OH - oh == 2) DW_BYTES_ROWS_OF(2)
    else if (OH - oh == 1) DW_BYTES_ROWS_OF(1)
}
#undef DW_BYTES_ROWS_OF

#define DW_BYTES_SPECIAL(K, SH, SW) \
    static void dw_bytes_k##K##_##SH##SW(const dw_bytes_args *a) { \
        dw_bytes_plane_t(a, K, (K + 3) / 4, SH, SW);               \
    }
DW_BYTES_SPECIAL(3, 1, 1) DW_BYTES_SPECIAL(3, 1, 2) DW_BYTES_SPECIAL(3, 2, 1)
DW_BYTES_SPECIAL(3, 2, 2) DW_BYTES_SPECIAL(5, 1, 1) DW_BYTES_SPECIAL(5, 1, 2)
DW_BYTES_SPECIAL(5, 2, 1) DW_BYTES_SPECIAL(5, 2, 2)
#undef DW_BYTES_SPECIAL

/* One channel (unit n * C + c) by the specializations above; 0 where none fits (the tap-pair
 * or portable paths then). */
static int dw_bytes_plane(const mlcc_qconv2d_params *p, const mlcc_qchannels *ch, int64_t n,
                          int64_t c, const uint8_t *x, const int8_t *wc, void *y) {
    static void (*const fns[2][2][2])(const dw_bytes_args *) = {
        {{dw_bytes_k3_11, dw_bytes_k3_12}, {dw_bytes_k3_21, dw_bytes_k3_22}},
        {{dw_bytes_k5_11, dw_bytes_k5_12}, {dw_bytes_k5_21, dw_bytes_k5_22}}};
    const int k = (int)p->kernel_h, nq = (k + 3) / 4;
    const int64_t C = p->out_channels, unit = n * C + c;
    const int in_regs = p->rq.out_kind == MLCC_QOUT_U8 && p->rq.mode == MLCC_REQUANT_FLOAT;
    int32_t acc[DW_BYTES_ROWS * DW_BYTES_MAX_W];
    dw_bytes_args a;
    int32_t wsum = 0;
    int kh, g, b;
    if (p->kernel_w != k || (k != 3 && k != 5) || p->dilation_h != 1 || p->dilation_w != 1 ||
        p->stride_h < 1 || p->stride_h > 2 || p->stride_w < 1 || p->stride_w > 2 ||
        (!in_regs && p->out_w > DW_BYTES_MAX_W))
        return 0;
    a.p = p; a.ch = ch; a.c = c; a.y = y; a.acc = acc; a.rq = mlcc_rq16_prep(&p->rq);
    a.x = x + unit * p->in_h * p->in_w;
    a.in_h = (ptrdiff_t)p->in_h; a.in_w = (ptrdiff_t)p->in_w;
    a.pad_top = (ptrdiff_t)p->pad_top; a.pad_left = (ptrdiff_t)p->pad_left;
    a.out_h = (ptrdiff_t)p->out_h; a.out_w = (ptrdiff_t)p->out_w;
    a.y_at = unit * p->out_h * p->out_w;
    a.zp = (uint8_t)p->x_zero_point;
    for (kh = 0; kh < k; kh++)
        for (g = 0; g < nq; g++) {
            uint32_t q = 0;
            for (b = 0; b < 4; b++) {
                const int kw = 4 * g + b;
                const int8_t wv = kw < k ? wc[kh * k + kw] : 0;
                q |= (uint32_t)(uint8_t)wv << (8 * b);
                wsum += wv;
            }
            a.quads[kh * nq + g] = (int32_t)q;
        }
    /* uint8 with the float requantization in registers (the bias with the correction), else
     * the sums with the correction to mlcc_requant_run, which adds the bias */
    if (in_regs) {
        a.out = (uint8_t *)y + a.y_at;
        a.scale = ch->scale[c];
        a.bias = ch->bias[c] - p->x_zero_point * wsum;
    } else {
        a.out = NULL;
        a.scale = 0.0f;
        a.bias = -p->x_zero_point * wsum;
    }
    fns[k == 5][p->stride_h == 2][p->stride_w == 2](&a);
    return 1;
}
#else
#define MLCC_QCONV_DW_BYTES 0
#endif

typedef struct {
    const mlcc_qconv2d_params *p;
    mlcc_qchannels ch;
    const uint8_t *x;
    const int8_t *w;
    void *y;
    uint8_t *scratch;
    size_t slice_bytes;
} dw_job;

/* One channel plane (unit = n * channels + c), with the thread's own slice of scratch. */
static void dw_channel(void *arg, int unit, int thread) {
    const dw_job *j = (const dw_job *)arg;
    const mlcc_qconv2d_params *p = j->p;
    const int64_t C = p->out_channels, P = p->out_h * p->out_w;
    const int64_t kk = p->kernel_h * p->kernel_w;
    const int64_t hp = MLCC_QCONV_PADDED_H(p), wp = MLCC_QCONV_PADDED_W(p);
    const int64_t sw = p->stride_w;
    const int64_t n = unit / C, c = unit % C;
    const mlcc_qchannels ch = j->ch;
    const int8_t *w = j->w;
    const uint8_t *x = j->x;
    void *y = j->y;
    int16_t *xp = (int16_t *)(void *)(j->scratch + (size_t)thread * j->slice_bytes);
    int32_t acc[DW_CHUNK];
    int64_t oh, ow0, o, kh, kw;
    const int8_t *wc = w + c * kk;
#if MLCC_QCONV_DW_BYTES
    if (dw_bytes_plane(p, &ch, n, c, x, wc, y)) return;
#endif
#if MLCC_QCONV_AVX512 || MLCC_QCONV_SMLAD
    int32_t pairs[DW_MAX_PAIRS];
    const int use_pairs = (MLCC_QCONV_SMLAD || sw == 1 || sw == 2) && p->dilation_w == 1 &&
                          p->kernel_w >= 2 &&
                          p->kernel_h * ((p->kernel_w + 1) / 2) <= DW_MAX_PAIRS;
    if (use_pairs) dw_weight_pairs(wc, p->kernel_h, p->kernel_w, pairs);
#endif
#if MLCC_QMVE
    mlcc_mve_dw_pad_plane(x + (n * C + c) * p->in_h * p->in_w, (ptrdiff_t)p->in_h,
                          (ptrdiff_t)p->in_w, (ptrdiff_t)p->pad_top, (ptrdiff_t)p->pad_left,
                          p->x_zero_point, (ptrdiff_t)hp, (ptrdiff_t)wp, xp);
    mlcc_mve_dw_plane(xp, hp, wp, wc, p->kernel_h, p->kernel_w, p->stride_h, sw, p->dilation_h,
                      p->dilation_w, p->out_h, p->out_w, &p->rq, &ch, c, y, (n * C + c) * P);
    return;
#endif
    dw_padded_plane(p, x + (n * C + c) * p->in_h * p->in_w, hp, wp, xp);
#if MLCC_QCONV_SMLAD
    if (use_pairs && p->out_w <= DW_CHUNK) {    /* as many whole rows as acc holds */
        const int64_t per = DW_CHUNK / p->out_w;
        for (oh = 0; oh < p->out_h; oh += per) {
            const int64_t nr = p->out_h - oh < per ? p->out_h - oh : per;
            dw_rows_smlad(xp + oh * p->stride_h * wp, (int)(p->dilation_h * wp), pairs,
                          (int)p->kernel_h, (int)p->kernel_w, (int)sw, (int)p->out_w, (int)nr,
                          (int)(p->stride_h * wp), acc);
            mlcc_requant_run(&p->rq, &ch, c, acc, nr * p->out_w, y,
                             (n * C + c) * P + oh * p->out_w);
        }
        return;
    }
#endif
    for (oh = 0; oh < p->out_h; oh++) {
#if MLCC_QCONV_AVX512
        if (use_pairs && sw == 1 && p->stride_h == 1 && p->dilation_h == 1 &&
            oh + 1 < p->out_h && p->rq.out_kind == MLCC_QOUT_U8 &&
            p->rq.mode == MLCC_REQUANT_FLOAT) {
            uint8_t *ya = (uint8_t *)y + (n * C + c) * P + oh * p->out_w;
            for (ow0 = 0; ow0 < p->out_w; ow0 += DW_CHUNK) {
                const int64_t nw = p->out_w - ow0 < DW_CHUNK ? p->out_w - ow0
                                                             : DW_CHUNK;
                dw_two_rows_pairs(xp + oh * wp + ow0, wp, pairs, p->kernel_h,
                                  p->kernel_w, nw, &p->rq, ch.bias[c], ch.scale[c],
                                  ya + ow0, ya + p->out_w + ow0);
            }
            oh++;       /* rows oh and oh + 1 done */
            continue;
        }
#endif
        for (ow0 = 0; ow0 < p->out_w; ow0 += DW_CHUNK) {
            const int64_t nw = p->out_w - ow0 < DW_CHUNK ? p->out_w - ow0 : DW_CHUNK;
#if MLCC_QCONV_AVX512
            if (use_pairs) {
                const int64_t at = (n * C + c) * P + oh * p->out_w + ow0;
                const int in_regs = p->rq.out_kind == MLCC_QOUT_U8 &&
                                    p->rq.mode == MLCC_REQUANT_FLOAT;
                (sw == 1 ? dw_rows_pairs : dw_rows_pairs_s2)(
                    xp + oh * p->stride_h * wp + ow0 * sw, p->dilation_h * wp, pairs,
                    p->kernel_h, p->kernel_w, nw, acc, &p->rq, ch.bias[c],
                    in_regs ? ch.scale[c] : 0.0f, in_regs ? (uint8_t *)y + at : NULL);
                if (in_regs) continue;
                mlcc_requant_run(&p->rq, &ch, c, acc, nw, y,
                                 (n * C + c) * P + oh * p->out_w + ow0);
                continue;
            }
#endif
#if MLCC_QCONV_SMLAD
            if (use_pairs) {    /* rows longer than acc: in chunks */
                dw_rows_smlad(xp + oh * p->stride_h * wp + ow0 * sw, (int)(p->dilation_h * wp),
                              pairs, (int)p->kernel_h, (int)p->kernel_w, (int)sw, (int)nw, 1, 0,
                              acc);
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

void mlcc_u8_conv2d__depthwise(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                               const int32_t *bias, const float *scale, const float *fbias,
                               const int32_t *mult, const int32_t *shift, void *y,
                               uint8_t *scratch, mlcc_threadpool *pool) {
    dw_job job;
    job.p = p; job.x = x; job.w = w; job.y = y; job.scratch = scratch;
    job.ch.bias = bias; job.ch.scale = scale; job.ch.fbias = fbias; job.ch.mult = mult;
    job.ch.shift = shift;
    job.slice_bytes = MLCC_QCONV_DW_SLICE_BYTES(p);
    if ((double)p->batch * (double)p->out_channels * (double)(p->out_h * p->out_w) *
            (double)(p->kernel_h * p->kernel_w) < (double)MLCC_MIN_PARALLEL_MACS / 4)
        pool = NULL;   /* as the float depthwise kernel */
    /* channels are independent and their sums exact: any split gives the same bytes */
    mlcc_threadpool_for(pool, dw_channel, &job, (int)(p->batch * p->out_channels),
                        MLCC_DW_SLICES);
}

void mlcc_u8_conv_integer(const mlcc_conv_integer_params *p, const uint8_t *x,
                          const uint8_t *x_zero_point, const int8_t *w,
                          const int32_t *w_rowsum, int32_t *y, uint8_t *scratch,
                          mlcc_threadpool *pool) {
    mlcc_qconv2d_params q = p->conv;
    const int64_t m = q.out_channels;
    const int32_t zx = x_zero_point ? (int32_t)*x_zero_point : 0;
    int32_t *bias = (int32_t *)(void *)scratch;
    uint8_t *rest = scratch + MLCC_CONV_INTEGER_BIAS_BYTES(m);
    int64_t c;
    q.x_zero_point = zx;
    /* the depthwise kernel subtracts the zero point itself; the im2col one takes it folded */
    for (c = 0; c < m; c++) bias[c] = p->depthwise ? 0 : -zx * w_rowsum[c];
    if (p->depthwise)
        mlcc_u8_conv2d__depthwise(&q, x, w, bias, NULL, NULL, NULL, NULL, y, rest, pool);
    else
        mlcc_u8_conv2d(&q, x, w, bias, NULL, NULL, NULL, NULL, y, rest, pool);
}

void mlcc_i32_conv_zero_point_correct(const mlcc_conv_zero_point_params *p,
                                      const int32_t *xsum, const int32_t *w_zero_point,
                                      int32_t *y) {
    const int64_t c_n = p->channels, per_group = p->channels / p->groups, plane = p->plane;
    int64_t b, c, i;
    for (b = 0; b < p->batch; b++)
        for (c = 0; c < c_n; c++) {
            const int32_t zw = w_zero_point[c];
            const int32_t *s = xsum + (b * p->groups + c / per_group) * plane;
            int32_t *yc = y + (b * c_n + c) * plane;
            for (i = 0; i < plane; i++) yc[i] -= zw * s[i];
        }
}
