#include "conv_transpose.h"
#include "gemm.h"

/* The inputs [lo, hi) of a row whose output index i * stride + offset lies in [0, size). */
static void reach(ptrdiff_t in_size, ptrdiff_t stride, ptrdiff_t offset, ptrdiff_t size,
                  ptrdiff_t *lo, ptrdiff_t *hi) {
    /* smallest i with i*stride >= -offset; largest i with i*stride <= size - 1 - offset */
    const ptrdiff_t first = -offset, last = size - 1 - offset;
    ptrdiff_t l = first <= 0 ? 0 : (first + stride - 1) / stride;
    ptrdiff_t h = last < 0 ? -1 : last / stride;
    if (h > in_size - 1) h = in_size - 1;
    *lo = l;
    *hi = h + 1 > l ? h + 1 : l;
}

/* y[m][d*sd + kd*dd - pf][i*sh + kh*dh - pt][j*sw + kw*dw - pl] +=
 *     col[(m, kd, kh, kw)][d][i][j] for one group. */
static void col2im_add(const mlcc_conv_transpose2d_params *p, ptrdiff_t channels,
                       const float *MLCC_RESTRICT col, float *MLCC_RESTRICT y) {
    const ptrdiff_t id_n = (ptrdiff_t)p->in_d, ih_n = (ptrdiff_t)p->in_h;
    const ptrdiff_t iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t od_n = (ptrdiff_t)p->out_d, oh_n = (ptrdiff_t)p->out_h;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t sd = (ptrdiff_t)p->stride_d, sh = (ptrdiff_t)p->stride_h;
    const ptrdiff_t sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t in_vol = id_n * ih_n * iw_n, out_plane = oh_n * ow_n;
    ptrdiff_t m, kd, kh, kw, d, i, j;
    for (m = 0; m < channels; m++) {
        float *MLCC_RESTRICT ym = y + m * od_n * out_plane;
        for (kd = 0; kd < p->kernel_d; kd++) {
            const ptrdiff_t doff = kd * (ptrdiff_t)p->dilation_d - (ptrdiff_t)p->pad_front;
            ptrdiff_t dlo, dhi;
            reach(id_n, sd, doff, od_n, &dlo, &dhi);
            for (kh = 0; kh < p->kernel_h; kh++) {
                const ptrdiff_t hoff = kh * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top;
                ptrdiff_t ilo, ihi;
                reach(ih_n, sh, hoff, oh_n, &ilo, &ihi);
                for (kw = 0; kw < p->kernel_w; kw++) {
                    const ptrdiff_t woff = kw * (ptrdiff_t)p->dilation_w -
                                           (ptrdiff_t)p->pad_left;
                    ptrdiff_t jlo, jhi;
                    reach(iw_n, sw, woff, ow_n, &jlo, &jhi);
                    for (d = dlo; d < dhi; d++) {
                        float *MLCC_RESTRICT yd = ym + (d * sd + doff) * out_plane;
                        for (i = ilo; i < ihi; i++) {
                            const float *MLCC_RESTRICT c = col + (d * ih_n + i) * iw_n;
                            float *MLCC_RESTRICT yr = yd + (i * sh + hoff) * ow_n;
                            if (sw == 1) {
                                /* index j + woff >= 0 for j >= jlo: no pointer leaves the
                                 * row */
                                for (j = jlo; j < jhi; j++) yr[j + woff] += c[j];
                            } else {
                                for (j = jlo; j < jhi; j++) yr[j * sw + woff] += c[j];
                            }
                        }
                    }
                    col += in_vol;
                }
            }
        }
    }
}

void mlcc_f32_conv_transpose2d(const mlcc_conv_transpose2d_params *p, const float *x,
                               const float *w, const float *bias, float *y, float *scratch) {
    const ptrdiff_t groups = (ptrdiff_t)p->groups;
    const ptrdiff_t cin_g = (ptrdiff_t)p->in_channels / groups;
    const ptrdiff_t cout_g = (ptrdiff_t)p->out_channels / groups;
    const ptrdiff_t rows = cout_g * (ptrdiff_t)(p->kernel_d * p->kernel_h * p->kernel_w);
    const ptrdiff_t in_plane = (ptrdiff_t)(p->in_d * p->in_h * p->in_w);
    const ptrdiff_t out_plane = (ptrdiff_t)(p->out_d * p->out_h * p->out_w);
    const ptrdiff_t out_image = (ptrdiff_t)p->out_channels * out_plane;
    const int direct = p->kernel_d == 1 && p->kernel_h == 1 && p->kernel_w == 1 &&
                       p->stride_d == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                       p->pad_front == 0 && p->pad_top == 0 && p->pad_left == 0 &&
                       p->out_d == p->in_d && p->out_h == p->in_h && p->out_w == p->in_w;
    mlcc_gemm_params g;
    ptrdiff_t n, gi, m, t;

    g.m = rows;
    g.n = in_plane;
    g.k = cin_g;
    g.a_row_stride = cin_g;
    g.a_col_stride = 1;
    g.ldb = in_plane;
    g.ldc = in_plane;
    g.bias_row_stride = 1;
    g.bias_col_stride = 0;
    g.alpha = 1.0f;
    g.beta = 1.0f;
    g.act = p->act;
    g.b_finite = 0;
    if (!direct) g.act.kind = MLCC_ACT_NONE;   /* applied after the scatter-add */
    for (n = 0; n < p->batch; n++) {
        const float *xn = x + n * (ptrdiff_t)p->in_channels * in_plane;
        float *yn = y + n * out_image;
        if (direct) {
            /* 1x1, stride 1, same size: y = W^T x per group, bias and activation fused */
            for (gi = 0; gi < groups; gi++)
                mlcc_f32_gemm(&g, w + gi * rows * cin_g, xn + gi * cin_g * in_plane,
                              bias ? bias + gi * cout_g : NULL, yn + gi * cout_g * out_plane);
            continue;
        }
        for (m = 0; m < p->out_channels; m++) {
            const float b = bias ? bias[m] : 0.0f;
            float *ym = yn + m * out_plane;
            for (t = 0; t < out_plane; t++) ym[t] = b;
        }
        for (gi = 0; gi < groups; gi++) {
            mlcc_f32_gemm(&g, w + gi * rows * cin_g, xn + gi * cin_g * in_plane, NULL, scratch);
            col2im_add(p, cout_g, scratch, yn + gi * cout_g * out_plane);
        }
        mlcc_act_apply(&p->act, yn, out_image);
    }
}
