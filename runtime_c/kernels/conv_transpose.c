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

/* The arguments of one group's scatter-add, for scatter_rows. */
typedef struct scatter_call {
    const mlcc_conv_transpose2d_params *p;
    const float *col, *bias;    /* bias: the group's, or NULL */
    float *y;                   /* the group's output channels */
    ptrdiff_t rows;             /* output rows per channel: out_d * out_h */
} scatter_call;

/* Items [r0, r1) of the group's (channel, output row) pairs, channel-major: each output row
 * starts at its bias, gets col[(m, kd, kh, kw)][d][i][j] added at y[m][d*sd + kd*dd - pf]
 * [i*sh + kh*dh - pt][j*sw + kw*dw - pl] for every tap that lands in it, in the order of the
 * taps (kd, kh, kw), then the activation. Each output's sum is the same whatever the split:
 * the same bits on any number of threads. */
static void scatter_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const scatter_call *sc = (const scatter_call *)arg;
    const mlcc_conv_transpose2d_params *p = sc->p;
    const ptrdiff_t id_n = (ptrdiff_t)p->in_d, ih_n = (ptrdiff_t)p->in_h;
    const ptrdiff_t iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t od_n = (ptrdiff_t)p->out_d, oh_n = (ptrdiff_t)p->out_h;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t sd = (ptrdiff_t)p->stride_d, sh = (ptrdiff_t)p->stride_h;
    const ptrdiff_t sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t in_vol = id_n * ih_n * iw_n, out_plane = oh_n * ow_n;
    const ptrdiff_t taps = (ptrdiff_t)(p->kernel_d * p->kernel_h * p->kernel_w);
    ptrdiff_t m, kd, kh, kw, d, i, j, t;
    for (m = r0 / sc->rows; m * sc->rows < r1; m++) {
        /* this channel's rows [lo, hi) of the od_n * oh_n */
        const ptrdiff_t lo = r0 > m * sc->rows ? r0 - m * sc->rows : 0;
        const ptrdiff_t hi = r1 < (m + 1) * sc->rows ? r1 - m * sc->rows : sc->rows;
        float *MLCC_RESTRICT ym = sc->y + m * od_n * out_plane;
        const float *col = sc->col + m * taps * in_vol;
        const float b = sc->bias ? sc->bias[m] : 0.0f;
        for (t = lo * ow_n; t < hi * ow_n; t++) ym[t] = b;
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
                        const ptrdiff_t row0 = (d * sd + doff) * oh_n;   /* its plane's first */
                        float *MLCC_RESTRICT yd = ym + (d * sd + doff) * out_plane;
                        for (i = ilo; i < ihi; i++) {
                            const float *MLCC_RESTRICT c = col + (d * ih_n + i) * iw_n;
                            float *MLCC_RESTRICT yr = yd + (i * sh + hoff) * ow_n;
                            const ptrdiff_t row = row0 + i * sh + hoff;
                            if (row < lo || row >= hi) continue;
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
        mlcc_act_apply(&p->act, ym + lo * ow_n, (hi - lo) * ow_n);
    }
}

void mlcc_f32_conv_transpose2d(const mlcc_conv_transpose2d_params *p, const float *x,
                               const float *w, const float *bias, float *y, float *scratch,
                               mlcc_threadpool *pool) {
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
    scatter_call sc;
    ptrdiff_t n, gi;

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
    sc.p = p;
    sc.col = scratch;
    sc.rows = (ptrdiff_t)(p->out_d * p->out_h);
    for (n = 0; n < p->batch; n++) {
        const float *xn = x + n * (ptrdiff_t)p->in_channels * in_plane;
        float *yn = y + n * out_image;
        for (gi = 0; gi < groups; gi++) {
            const float *wg = w + gi * rows * cin_g, *xg = xn + gi * cin_g * in_plane;
            /* the threaded GEMM: mlcc_f32_gemm's bits on any number of threads (gemm.c) */
            if (direct) {
                /* 1x1, stride 1, same size: y = W^T x per group, bias and activation fused */
                mlcc_f32_gemm__threaded(&g, wg, xg, bias ? bias + gi * cout_g : NULL,
                                        yn + gi * cout_g * out_plane, pool);
                continue;
            }
            mlcc_f32_gemm__threaded(&g, wg, xg, NULL, scratch, pool);
            sc.bias = bias ? bias + gi * cout_g : NULL;
            sc.y = yn + gi * cout_g * out_plane;
            mlcc_parallel_ranges(pool, scatter_rows, &sc, cout_g * sc.rows,
                                 (double)cout_g * (double)out_plane,
                                 (double)MLCC_MIN_PARALLEL_ELEMENTS);
        }
    }
}
