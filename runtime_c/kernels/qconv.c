/* Integer convolutions (see qconv.h). */
#include "qconv.h"

/* Row k of the im2col matrix of one group ((channel, kh, kw) of the kernel window over all
 * output pixels) as P contiguous bytes: padding taps read the zero point. Rows of a 1 x 1,
 * stride 1, unpadded convolution are the input planes themselves and are not copied. */
static const uint8_t *im2col_row(const mlcc_qconv2d_params *p, const uint8_t *x, int64_t k,
                                 uint8_t *row) {
    const int64_t kk = p->kernel_h * p->kernel_w;
    const int64_t c = k / kk, kh = (k % kk) / p->kernel_w, kw = k % p->kernel_w;
    const uint8_t *plane = x + c * p->in_h * p->in_w;
    const uint8_t zp = (uint8_t)p->x_zero_point;
    const int64_t off = kw * p->dilation_w - p->pad_left, sw = p->stride_w;
    int64_t oh, ow, lo, hi;
    if (kk == 1 && p->stride_h == 1 && sw == 1 && p->pad_top == 0 && p->pad_left == 0 &&
        p->out_h == p->in_h && p->out_w == p->in_w)
        return plane;
    /* output columns whose tap ow * sw + off lies inside the row: [lo, hi) */
    lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
    hi = p->in_w - off <= 0 ? 0 : (p->in_w - off + sw - 1) / sw;
    if (hi > p->out_w) hi = p->out_w;
    if (lo > hi) lo = hi;
    for (oh = 0; oh < p->out_h; oh++) {
        const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
        uint8_t *dst = row + oh * p->out_w;
        if (ih < 0 || ih >= p->in_h) {
            memset(dst, zp, (size_t)p->out_w);
            continue;
        }
        memset(dst, zp, (size_t)lo);
        if (sw == 1) {
            memcpy(dst + lo, plane + ih * p->in_w + lo + off, (size_t)(hi - lo));
        } else {
            const uint8_t *src = plane + ih * p->in_w + off;
            for (ow = lo; ow < hi; ow++) dst[ow] = src[ow * sw];
        }
        memset(dst + hi, zp, (size_t)(p->out_w - hi));
    }
    return row;
}

/* Packs the im2col matrix of one group into [k4][P][4] (qgemm.h's column operand), four rows
 * at a time through `rows` (4 * P bytes); padding rows (k >= K) are 0. */
static void pack_columns(const mlcc_qconv2d_params *p, const uint8_t *x, int64_t k4,
                         uint8_t *col, uint8_t *rows) {
    const int64_t cg = p->in_channels / p->groups;
    const int64_t K = cg * p->kernel_h * p->kernel_w;
    const int64_t P = p->out_h * p->out_w;
    int64_t g, q, t;
    for (g = 0; g < k4; g++) {
        const uint8_t *r[4];
        uint8_t *dst = col + g * P * 4;
        for (t = 0; t < 4; t++) {
            const int64_t k = 4 * g + t;
            if (k < K) {
                r[t] = im2col_row(p, x, k, rows + t * P);
            } else {
                memset(rows + t * P, 0, (size_t)P);
                r[t] = rows + t * P;
            }
        }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* one 32-bit word per pixel: vectorizes as widen, shift, or */
        for (q = 0; q < P; q++) {
            const uint32_t v = (uint32_t)r[0][q] | ((uint32_t)r[1][q] << 8) |
                               ((uint32_t)r[2][q] << 16) | ((uint32_t)r[3][q] << 24);
            memcpy(dst + 4 * q, &v, 4);
        }
#else
        for (q = 0; q < P; q++) {
            dst[4 * q] = r[0][q];
            dst[4 * q + 1] = r[1][q];
            dst[4 * q + 2] = r[2][q];
            dst[4 * q + 3] = r[3][q];
        }
#endif
    }
}

void mlcc_u8_qconv2d(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                     const int32_t *bias, const float *scale, const float *fbias,
                     const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch) {
    const int64_t cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
    const int64_t k4 = (cg * p->kernel_h * p->kernel_w + 3) / 4;
    const int64_t P = p->out_h * p->out_w;
    const size_t esize = p->rq.out_kind == MLCC_QOUT_U8 ? 1 : 4;   /* float or int32 */
    int64_t n, g;
    for (n = 0; n < p->batch; n++) {
        for (g = 0; g < p->groups; g++) {
            const int64_t c0 = g * mg;
            const mlcc_qchannels ch = {bias + c0, scale ? scale + c0 : NULL,
                                       fbias ? fbias + c0 : NULL, mult ? mult + c0 : NULL,
                                       shift ? shift + c0 : NULL};
            mlcc_qgemm_desc d;
            pack_columns(p, x + (n * p->in_channels + g * cg) * p->in_h * p->in_w, k4, scratch,
                         scratch + 4 * k4 * P);
            d.m = mg; d.n = P; d.k4 = k4; d.lda = 4 * k4; d.ldy = P;
            d.channel_is_row = 1; d.a_signed = 1;
            mlcc_qgemm_u8s8(&d, w + c0 * 4 * k4, scratch, &p->rq, &ch,
                            (uint8_t *)y + (size_t)((n * p->out_channels + c0) * P) * esize);
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

void mlcc_u8_qconv2d_depthwise(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                               const int32_t *bias, const float *scale, const float *fbias,
                               const int32_t *mult, const int32_t *shift, void *y,
                               uint8_t *scratch) {
    const int64_t C = p->out_channels, P = p->out_h * p->out_w;
    const int64_t kk = p->kernel_h * p->kernel_w;
    const int64_t hp = MLCC_QDW_PADDED_H(p), wp = MLCC_QDW_PADDED_W(p);
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
