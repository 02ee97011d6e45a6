/* Integer convolutions (see qconv.h). */
#include "qconv.h"

/* Packs the im2col matrix of one group into [k4][P][4] (qgemm.h's column operand): row k is
 * (channel, kh, kw) of the group; padding taps read the zero point, padding rows (k >= K) 0. */
static void pack_columns(const mlcc_qconv2d_params *p, const uint8_t *x, int64_t k4,
                         uint8_t *col) {
    const int64_t cg = p->in_channels / p->groups;
    const int64_t kk = p->kernel_h * p->kernel_w, K = cg * kk;
    const int64_t P = p->out_h * p->out_w;
    const uint8_t zp = (uint8_t)p->x_zero_point;
    int64_t k, oh, ow;
    for (k = 0; k < 4 * k4; k++) {
        uint8_t *dst = col + (k / 4) * P * 4 + (k % 4);
        if (k >= K) {
            int64_t q;
            for (q = 0; q < P; q++) dst[q * 4] = 0;
            continue;
        }
        {
            const int64_t c = k / kk, kh = (k % kk) / p->kernel_w, kw = k % p->kernel_w;
            const uint8_t *plane = x + c * p->in_h * p->in_w;
            for (oh = 0; oh < p->out_h; oh++) {
                const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
                uint8_t *drow = dst + oh * p->out_w * 4;
                if (ih < 0 || ih >= p->in_h) {
                    for (ow = 0; ow < p->out_w; ow++) drow[ow * 4] = zp;
                    continue;
                }
                for (ow = 0; ow < p->out_w; ow++) {
                    const int64_t iw = ow * p->stride_w + kw * p->dilation_w - p->pad_left;
                    drow[ow * 4] = (iw < 0 || iw >= p->in_w) ? zp : plane[ih * p->in_w + iw];
                }
            }
        }
    }
}

void mlcc_u8_qconv2d(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                     const int32_t *bias, const float *scale, const float *fbias,
                     const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch) {
    const int64_t cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
    const int64_t k4 = (cg * p->kernel_h * p->kernel_w + 3) / 4;
    const int64_t P = p->out_h * p->out_w;
    const size_t esize = p->rq.out_kind == MLCC_QOUT_F32 ? sizeof(float) : 1;
    int64_t n, g;
    for (n = 0; n < p->batch; n++) {
        for (g = 0; g < p->groups; g++) {
            const int64_t c0 = g * mg;
            const mlcc_qchannels ch = {bias + c0, scale ? scale + c0 : NULL,
                                       fbias ? fbias + c0 : NULL, mult ? mult + c0 : NULL,
                                       shift ? shift + c0 : NULL};
            mlcc_qgemm_desc d;
            pack_columns(p, x + (n * p->in_channels + g * cg) * p->in_h * p->in_w, k4, scratch);
            d.m = mg; d.n = P; d.k4 = k4; d.lda = 4 * k4; d.ldy = P;
            d.channel_is_row = 1; d.a_signed = 1;
            mlcc_qgemm_u8s8(&d, w + c0 * 4 * k4, scratch, &p->rq, &ch,
                            (uint8_t *)y + (size_t)((n * p->out_channels + c0) * P) * esize);
        }
    }
}

#define DW_CHUNK 256

void mlcc_u8_qconv2d_depthwise(const mlcc_qconv2d_params *p, const uint8_t *x, const int8_t *w,
                               const int32_t *bias, const float *scale, const float *fbias,
                               const int32_t *mult, const int32_t *shift, void *y) {
    const int64_t C = p->out_channels, P = p->out_h * p->out_w;
    const int64_t kk = p->kernel_h * p->kernel_w;
    const int32_t zp = p->x_zero_point;
    const mlcc_qchannels ch = {bias, scale, fbias, mult, shift};
    int32_t acc[DW_CHUNK];
    int64_t n, c, oh, ow0, ow, kh, kw;
    for (n = 0; n < p->batch; n++) {
        for (c = 0; c < C; c++) {
            const uint8_t *plane = x + (n * C + c) * p->in_h * p->in_w;
            const int8_t *wc = w + c * kk;
            for (oh = 0; oh < p->out_h; oh++) {
                for (ow0 = 0; ow0 < p->out_w; ow0 += DW_CHUNK) {
                    const int64_t nw = p->out_w - ow0 < DW_CHUNK ? p->out_w - ow0 : DW_CHUNK;
                    memset(acc, 0, sizeof(int32_t) * (size_t)nw);
                    for (kh = 0; kh < p->kernel_h; kh++) {
                        const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
                        if (ih < 0 || ih >= p->in_h) continue;
                        for (kw = 0; kw < p->kernel_w; kw++) {
                            const int32_t wv = wc[kh * p->kernel_w + kw];
                            const uint8_t *row = plane + ih * p->in_w;
                            for (ow = 0; ow < nw; ow++) {
                                const int64_t iw = (ow0 + ow) * p->stride_w +
                                                   kw * p->dilation_w - p->pad_left;
                                if (iw >= 0 && iw < p->in_w)
                                    acc[ow] += wv * ((int32_t)row[iw] - zp);
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
