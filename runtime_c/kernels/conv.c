#include "conv.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "gemm.h"

/* dst[t] = src[2 t] for t < n, where src has avail readable floats: with 4-lane vectors the
 * even lanes of two loads (stride-2 convolutions' im2col rows). */
static void copy_stride2(float *dst, const float *src, ptrdiff_t n, ptrdiff_t avail) {
    ptrdiff_t t = 0;
#if MLCC_HAVE_VECTORS && MLCC_VECTOR_BYTES == 16
    for (; t + 4 <= n && 2 * t + 8 <= avail; t += 4) {
        const mlcc_vf v0 = mlcc_vf_load(src + 2 * t), v1 = mlcc_vf_load(src + 2 * t + 4);
        mlcc_vf_store(dst + t, __builtin_shufflevector(v0, v1, 0, 2, 4, 6));
    }
#else
    (void)avail;
#endif
    for (; t < n; t++) dst[t] = src[2 * t];
}

/* Rows of the im2col matrix: one per (channel, kh, kw), out_h * out_w columns. */
static void im2col(const mlcc_conv2d_params *p, ptrdiff_t channels, const float *x, float *col) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    ptrdiff_t c, kh, kw, oh, ow;
    for (c = 0; c < channels; c++) {
        const float *xc = x + c * ih_n * iw_n;
        for (kh = 0; kh < p->kernel_h; kh++) {
            const ptrdiff_t ioff = kh * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top;
            for (kw = 0; kw < p->kernel_w; kw++) {
                const ptrdiff_t joff = kw * (ptrdiff_t)p->dilation_w;
                ptrdiff_t lo, hi;
                mlcc_conv_valid_range(ow_n, sw, (ptrdiff_t)p->pad_left, joff, iw_n, &lo, &hi);
                for (oh = 0; oh < oh_n; oh++) {
                    const ptrdiff_t ih = oh * sh + ioff;
                    float *row = col + oh * ow_n;
                    if (ih < 0 || ih >= ih_n) {
                        for (ow = 0; ow < ow_n; ow++) row[ow] = 0.0f;
                        continue;
                    }
                    {
                        /* in-bounds input column of output column ow: ow * sw + shift */
                        const float *xr = xc + ih * iw_n;
                        const ptrdiff_t shift = joff - (ptrdiff_t)p->pad_left;
                        for (ow = 0; ow < lo; ow++) row[ow] = 0.0f;
                        if (sw == 1 && hi > lo)
                            memcpy(row + lo, xr + lo + shift, (size_t)(hi - lo) * sizeof(float));
                        else
                            for (ow = lo; ow < hi; ow++) row[ow] = xr[ow * sw + shift];
                        for (ow = hi; ow < ow_n; ow++) row[ow] = 0.0f;
                    }
                }
                col += oh_n * ow_n;
            }
        }
    }
}

void mlcc_f32_conv2d(const mlcc_conv2d_params *p, const float *x, const float *w,
                     const float *bias, float *y, float *scratch) {
    const ptrdiff_t groups = (ptrdiff_t)p->groups;
    const ptrdiff_t cin_g = (ptrdiff_t)p->in_channels / groups;
    const ptrdiff_t cout_g = (ptrdiff_t)p->out_channels / groups;
    const ptrdiff_t kdim = cin_g * (ptrdiff_t)(p->kernel_h * p->kernel_w);
    const ptrdiff_t spatial = (ptrdiff_t)(p->out_h * p->out_w);
    const ptrdiff_t in_plane = (ptrdiff_t)(p->in_h * p->in_w);
    const int direct = p->kernel_h == 1 && p->kernel_w == 1 && p->stride_h == 1 &&
                       p->stride_w == 1 && p->pad_top == 0 && p->pad_left == 0 &&
                       p->out_h == p->in_h && p->out_w == p->in_w;
    mlcc_gemm_params g;
    ptrdiff_t n, gi;

    g.m = cout_g;
    g.n = spatial;
    g.k = kdim;
    g.a_row_stride = kdim;
    g.a_col_stride = 1;
    g.ldb = spatial;
    g.ldc = spatial;
    g.bias_row_stride = 1;
    g.bias_col_stride = 0;
    g.alpha = 1.0f;
    g.beta = 1.0f;
    g.act = p->act;
    g.b_finite = 0;
    for (n = 0; n < p->batch; n++) {
        for (gi = 0; gi < groups; gi++) {
            const float *xg = x + (n * (ptrdiff_t)p->in_channels + gi * cin_g) * in_plane;
            const float *b = xg;
            if (!direct) {
                im2col(p, cin_g, xg, scratch);
                b = scratch;
            }
            mlcc_f32_gemm(&g, w + gi * cout_g * kdim, b, bias ? bias + gi * cout_g : NULL,
                          y + (n * (ptrdiff_t)p->out_channels + gi * cout_g) * spatial);
        }
    }
}

static inline void copy_panel_row(float *d, const float *src) {
#if MLCC_HAVE_VECTORS
    ptrdiff_t t;
    for (t = 0; t < MLCC_GEMM_NR; t += MLCC_VF_LANES) mlcc_vf_store(d + t, mlcc_vf_load(src + t));
#else
    memcpy(d, src, MLCC_GEMM_NR * sizeof(float));
#endif
}

/* A 1x1 convolution's panels (stride 1, no padding: row k of the im2col matrix is input plane k):
 * PACK_1X1_GROUP planes at a time, panel by panel, each panel row copied by whole vectors. Plane
 * by plane (the earlier copy, one plane's row into every panel in turn, the panels 4 KiB apart and
 * so in one L1 set at depth 32) took MobileNetV2's 32 -> 16 on 112 x 112 0.161 ms, of which the
 * packing was 0.113; panel by panel over all planes 0.081 (Zen 5, one thread, the layer alone),
 * and groups of 16 planes were better than of all of them or of 64 on deeper layers (ResNet-50's
 * 256 -> 64 on 56 x 56 0.96x, SqueezeNet's 512 -> 1000 0.97x; 12 layers 0.88x in all). wasm keeps
 * groups of two (each 64-byte line of its 8-float panel rows written whole; V8 paid for every
 * further read stream: four planes at a time 0.89-0.96x of two, eight 0.88-0.97x; two against
 * plane by plane, MobileNetV2's projections 0.78-0.95x). */
#if defined(__wasm_simd128__)
#define PACK_1X1_GROUP 2
#else
#define PACK_1X1_GROUP 16
#endif
static void pack_1x1(const float *x, ptrdiff_t plane, ptrdiff_t channels, ptrdiff_t j0,
                     ptrdiff_t nc, float *panels) {
    const ptrdiff_t panel_size = channels * MLCC_GEMM_NR;
    const ptrdiff_t nfull = nc / MLCC_GEMM_NR, rem = nc - nfull * MLCC_GEMM_NR;
    ptrdiff_t c0, c1, c, q, t;
    for (c0 = 0; c0 < channels; c0 = c1) {
        c1 = channels - c0 < PACK_1X1_GROUP ? channels : c0 + PACK_1X1_GROUP;
        for (q = 0; q <= nfull; q++) {
            const float *s = x + c0 * plane + j0 + q * MLCC_GEMM_NR;
            float *d = panels + q * panel_size + c0 * MLCC_GEMM_NR;
            if (q == nfull && rem == 0) break;
            for (c = c0; c < c1; c++, s += plane, d += MLCC_GEMM_NR) {
                if (q < nfull)
                    copy_panel_row(d, s);
                else   /* the last, partial panel: zeros past the columns */
                    for (t = 0; t < MLCC_GEMM_NR; t++) d[t] = t < rem ? s[t] : 0.0f;
            }
        }
    }
}

/* Columns [j0, j0 + nc) of the im2col matrix of x (channels planes) as B panels (gemm.h),
 * zero-padded to a whole panel; row (nc rounded up to a panel floats) is working space. */
static void pack_im2col(const mlcc_conv2d_params *p, ptrdiff_t channels, const float *x,
                        ptrdiff_t j0, ptrdiff_t nc, float *panels, float *row) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t khw = (ptrdiff_t)(p->kernel_h * p->kernel_w);
    const ptrdiff_t kdim = channels * khw;
    const ptrdiff_t panel_size = kdim * MLCC_GEMM_NR;
    const ptrdiff_t ncp = (nc + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR * MLCC_GEMM_NR;
    ptrdiff_t c, kh, kw;
    if (khw == 1 && sh == 1 && sw == 1 && p->pad_top == 0 && p->pad_left == 0 &&
        p->out_h == ih_n && ow_n == iw_n) {
        /* 1x1, stride 1, no padding: row k of the im2col matrix is input plane k */
        pack_1x1(x, ih_n * iw_n, channels, j0, nc, panels);
        return;
    }
    /* Each im2col row is built contiguously in row (after the panels: ncp floats), a few
     * long copies per output row, then dealt out to the panels a whole vector at a time. */
    for (c = 0; c < channels; c++) {
        const float *xc = x + c * ih_n * iw_n;
        for (kh = 0; kh < p->kernel_h; kh++) {
            const ptrdiff_t ioff = kh * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top;
            for (kw = 0; kw < p->kernel_w; kw++) {
                const ptrdiff_t k = (c * (ptrdiff_t)p->kernel_h + kh) * (ptrdiff_t)p->kernel_w + kw;
                const ptrdiff_t joff = kw * (ptrdiff_t)p->dilation_w;
                const ptrdiff_t shift = joff - (ptrdiff_t)p->pad_left;
                ptrdiff_t lo, hi, jj = 0, oh = j0 / ow_n, ow = j0 % ow_n, t;
                mlcc_conv_valid_range(ow_n, sw, (ptrdiff_t)p->pad_left, joff, iw_n, &lo, &hi);
                while (jj < nc) {
                    /* output row oh, columns [ow, end) */
                    const ptrdiff_t end = ow + (nc - jj < ow_n - ow ? nc - jj : ow_n - ow);
                    const ptrdiff_t ih = oh * sh + ioff;
                    float *r = row + jj - ow;      /* r[o]: output column o of this row */
                    if (ih < 0 || ih >= ih_n) {
                        for (t = ow; t < end; t++) r[t] = 0.0f;
                    } else {
                        const float *xr = xc + ih * iw_n;
                        const ptrdiff_t a = ow > lo ? ow : lo, b = end < hi ? end : hi;
                        if (a < b) {
                            for (t = ow; t < a; t++) r[t] = 0.0f;
                            if (sw == 1 && b - a > 16)
                                memcpy(r + a, xr + a + shift, (size_t)(b - a) * sizeof(float));
                            else if (sw == 1)   /* short runs (small maps): no libc call */
                                for (t = a; t < b; t++) r[t] = xr[t + shift];
                            else if (sw == 2)
                                copy_stride2(r + a, xr + a * 2 + shift, b - a,
                                             iw_n - (a * 2 + shift));
                            else
                                for (t = a; t < b; t++) r[t] = xr[t * sw + shift];
                            for (t = b; t < end; t++) r[t] = 0.0f;
                        } else {
                            for (t = ow; t < end; t++) r[t] = 0.0f;
                        }
                    }
                    jj += end - ow;
                    oh++;
                    ow = 0;
                }
                for (t = nc; t < ncp; t++) row[t] = 0.0f;
                for (t = 0; t < ncp; t += MLCC_GEMM_NR)
                    copy_panel_row(panels + (t / MLCC_GEMM_NR) * panel_size + k * MLCC_GEMM_NR,
                                   row + t);
            }
        }
    }
}

/* The panels of im2col columns [j0, j0 + nc) from the compile-time table of input offsets
 * (kdim x spatial, -1 for padding): one indexed load per value, no run logic (small maps).
 * With AVX-512, 16 values per masked gather instruction. */
static void gather_im2col(const int32_t *table, ptrdiff_t spatial, ptrdiff_t kdim,
                          const float *x, ptrdiff_t j0, ptrdiff_t nc, float *panels) {
    const ptrdiff_t ncp = (nc + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR * MLCC_GEMM_NR;
    ptrdiff_t k, j;
#if defined(__AVX512F__) && MLCC_HAVE_VECTORS && MLCC_VECTOR_BYTES >= 64   /* NR = 32 */
    for (k = 0; k < kdim; k++) {
        const int32_t *tk = table + k * spatial + j0;
        for (j = 0; j < ncp; j += 16) {
            float *d = panels + (j / MLCC_GEMM_NR) * kdim * MLCC_GEMM_NR + k * MLCC_GEMM_NR +
                       j % MLCC_GEMM_NR;
            const ptrdiff_t left = nc - j;
            const __mmask16 lanes = left >= 16 ? (__mmask16)0xFFFF
                                    : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
            const __m512i idx = _mm512_maskz_loadu_epi32(lanes, tk + j);
            const __mmask16 m = _mm512_mask_cmpge_epi32_mask(lanes, idx, _mm512_setzero_si512());
            _mm512_storeu_ps(d, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, x, 4));
        }
    }
#else
    ptrdiff_t t;
    for (k = 0; k < kdim; k++) {
        const int32_t *tk = table + k * spatial + j0;
        for (j = 0; j < ncp; j += MLCC_GEMM_NR) {
            float *d = panels + (j / MLCC_GEMM_NR) * kdim * MLCC_GEMM_NR + k * MLCC_GEMM_NR;
            for (t = 0; t < MLCC_GEMM_NR; t++) {
                const int32_t o = j + t < nc ? tk[j + t] : -1;
                d[t] = o >= 0 ? x[o] : 0.0f;
            }
        }
    }
#endif
}

/* Gathers columns [j0, j0 + nc) of the group's im2col matrix into panels: from the table if
 * there is one, else with pack_im2col (row is its buffer of one im2col row). */
static void gather_block(const mlcc_conv2d_params *p, const int32_t *table, ptrdiff_t cin_g,
                         const float *xg, ptrdiff_t j0, ptrdiff_t nc, float *panels, float *row) {
    if (table != NULL)
        gather_im2col(table, (ptrdiff_t)(p->out_h * p->out_w),
                      cin_g * (ptrdiff_t)(p->kernel_h * p->kernel_w), xg, j0, nc, panels);
    else
        pack_im2col(p, cin_g, xg, j0, nc, panels, row);
}

/* The packed convolution on a pool. Output positions come in blocks of block_cols; within a
 * block, panels of MLCC_GEMM_NR columns. Two static partitions into units, chosen by which
 * balances better:
 *  - by panels (one loop for the whole convolution): unit u owns the same range of panels in
 *    every block, gathers them (into its own part of scratch: panels and the im2col row buffer
 *    are laid out by column) and multiplies all weight rows by them;
 *  - by weight rows (few panels, many output channels: late layers of deep networks): per
 *    block, one loop gathers the panels, one unit per range of panels, and a second one
 *    multiplies, one unit per range of MLCC_GEMM_MR-row weight panels.
 * Every output is computed by the same tile code with the same k order whatever the units, so
 * results are bit-identical whatever the number of threads. */
typedef struct conv_packed_job {
    const mlcc_conv2d_packed_params *pp;
    const float *x, *w, *bias;
    float *y, *scratch;
    const int32_t *table;              /* NULL, or the im2col offsets (mlcc_f32_conv2d__packed_table) */
    const float *residual;             /* NULL, or added before the activation (_residual) */
    ptrdiff_t block;                   /* columns per block (block_cols) */
    ptrdiff_t np_block;                /* panels in a (full) block */
    ptrdiff_t units;
    ptrdiff_t n, gi, j0, nc;           /* the current block (partition by rows) */
} conv_packed_job;

static void conv_packed_geometry(const mlcc_conv2d_params *p, ptrdiff_t *cin_g,
                                 ptrdiff_t *cout_g, ptrdiff_t *cout_pad, ptrdiff_t *kdim,
                                 ptrdiff_t *spatial, ptrdiff_t *in_plane) {
    *cin_g = (ptrdiff_t)p->in_channels / (ptrdiff_t)p->groups;
    *cout_g = (ptrdiff_t)p->out_channels / (ptrdiff_t)p->groups;
    *cout_pad = (*cout_g + MLCC_GEMM_MR - 1) / MLCC_GEMM_MR * MLCC_GEMM_MR;
    *kdim = *cin_g * (ptrdiff_t)(p->kernel_h * p->kernel_w);
    *spatial = (ptrdiff_t)(p->out_h * p->out_w);
    *in_plane = (ptrdiff_t)(p->in_h * p->in_w);
}

/* The packed GEMM of one block, with the residual (at the same offset as c) when there is one:
 * mlcc_f32_gemm__packed has no trace of residuals (gemm.c). */
static void block_gemm(const conv_packed_job *job, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                       const float *a, ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b,
                       const float *bias, ptrdiff_t c_off, ptrdiff_t ldc) {
    const mlcc_act *act = &job->pp->conv.act;
    if (job->residual)
        mlcc_f32_gemm_residual__packed(m, n, k, a, a_rows, a_row0, b, bias,
                                       job->residual + c_off, act, job->y + c_off, ldc);
    else
        mlcc_f32_gemm__packed(m, n, k, a, a_rows, a_row0, b, bias, act, job->y + c_off, ldc);
}

/* Partition by panels: unit u of job->units, every block. */
static void conv_packed_by_panels(void *arg, int u, int thread) {
    const conv_packed_job *job = (const conv_packed_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, n, gi, j0;
    const ptrdiff_t q0 = job->np_block * u / job->units;
    const ptrdiff_t q1 = job->np_block * (u + 1) / job->units;
    (void)thread;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    for (n = 0; n < p->batch; n++) {
        for (gi = 0; gi < (ptrdiff_t)p->groups; gi++) {
            const float *xg = job->x + (n * (ptrdiff_t)p->in_channels + gi * cin_g) * in_plane;
            float *yg = job->y + (n * (ptrdiff_t)p->out_channels + gi * cout_g) * spatial;
            for (j0 = 0; j0 < spatial; j0 += job->block) {
                const ptrdiff_t nc = spatial - j0 < job->block ? spatial - j0 : job->block;
                const ptrdiff_t c0 = q0 * MLCC_GEMM_NR;
                const ptrdiff_t c1 = q1 * MLCC_GEMM_NR < nc ? q1 * MLCC_GEMM_NR : nc;
                float *panels = job->scratch + q0 * kdim * MLCC_GEMM_NR;
                if (c0 >= c1) continue;
                gather_block(p, job->table, cin_g, xg, j0 + c0, c1 - c0, panels,
                             job->scratch + kdim * job->block + c0);
                block_gemm(job, cout_g, c1 - c0, kdim, job->w + gi * cout_pad * kdim, cout_pad,
                           0, panels, job->bias ? job->bias + gi * cout_g : NULL,
                           (yg - job->y) + j0 + c0, spatial);
            }
        }
    }
}

/* Partition by rows, first loop: gather the current block's panels, unit u a range of them. */
static void conv_packed_gather(void *arg, int u, int thread) {
    const conv_packed_job *job = (const conv_packed_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, c0, c1;
    const ptrdiff_t np = (job->nc + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR;
    const ptrdiff_t units = np < job->units ? np : job->units;
    (void)thread;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    if (u >= units) return;
    c0 = np * u / units * MLCC_GEMM_NR;
    c1 = np * (u + 1) / units * MLCC_GEMM_NR;
    if (c1 > job->nc) c1 = job->nc;
    gather_block(p, job->table, cin_g,
                 job->x + (job->n * (ptrdiff_t)p->in_channels + job->gi * cin_g) * in_plane,
                 job->j0 + c0, c1 - c0, job->scratch + c0 * kdim,
                 job->scratch + kdim * job->block + c0);
}

/* Partition by rows, second loop: multiply, unit u a range of MLCC_GEMM_MR-row weight panels. */
static void conv_packed_multiply(void *arg, int u, int thread) {
    const conv_packed_job *job = (const conv_packed_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, r0, r1, mb;
    (void)thread;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    mb = cout_pad / MLCC_GEMM_MR;
    r0 = mb * u / job->units * MLCC_GEMM_MR;
    r1 = mb * (u + 1) / job->units * MLCC_GEMM_MR;
    if (r1 > cout_g) r1 = cout_g;
    if (r0 >= r1) return;
    block_gemm(job, r1 - r0, job->nc, kdim, job->w + job->gi * cout_pad * kdim, cout_pad, r0,
               job->scratch, job->bias ? job->bias + job->gi * cout_g + r0 : NULL,
               (job->n * (ptrdiff_t)p->out_channels + job->gi * cout_g + r0) * spatial + job->j0,
               spatial);
}

/* Of `units` equal parts over nt threads, the fraction the busiest thread does not waste
 * (1024 = perfect balance). */
static ptrdiff_t balance(ptrdiff_t units, ptrdiff_t nt) {
    return units * 1024 / (nt * ((units + nt - 1) / nt));
}

/* The same for the partition by panels over all blocks: `units` units, unit u the panels
 * [np_block u / units, np_block (u + 1) / units) of every block, thread t the units of its
 * own range (mlcc_threadpool_for), so that a last block of fewer panels leaves the threads of
 * the last units idle: SqueezeNet's 512 -> 1000 classifier on 13 x 13 (blocks of 4 and 2
 * panels) ran 4 panels on one thread and 2 on the other. */
static ptrdiff_t panels_balance(ptrdiff_t spatial, ptrdiff_t block, ptrdiff_t np_block,
                                ptrdiff_t units, ptrdiff_t nt) {
    ptrdiff_t t, j0, total = 0, busiest = 0;
    for (t = 0; t < nt; t++) {
        const ptrdiff_t q0 = np_block * (units * t / nt) / units;
        const ptrdiff_t q1 = np_block * (units * (t + 1) / nt) / units;
        ptrdiff_t work = 0;
        for (j0 = 0; j0 < spatial; j0 += block) {
            const ptrdiff_t nc = spatial - j0 < block ? spatial - j0 : block;
            const ptrdiff_t np = (nc + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR;
            work += (q1 < np ? q1 : np) - (q0 < np ? q0 : np);
        }
        total += work;
        if (work > busiest) busiest = work;
    }
    return busiest == 0 ? 1024 : total * 1024 / (nt * busiest);
}

static void conv_packed(const mlcc_conv2d_packed_params *pp, const float *x, const float *w,
                        const float *bias, const int32_t *table, const float *residual,
                        float *y, float *scratch, mlcc_threadpool *pool) {
    const mlcc_conv2d_params *p = &pp->conv;
    ptrdiff_t nt = mlcc_threadpool_size(pool);
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, mb;
    conv_packed_job job;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    job.pp = pp;
    job.x = x;
    job.w = w;
    job.bias = bias;
    job.y = y;
    job.scratch = scratch;
    job.table = table;
    job.residual = residual;
    /* scratch holds (kdim + 1) x block floats, block = block_cols capped at the output positions
     * rounded up to 64 (conv.h): the im2col row buffer sits at kdim * block */
    job.block = (spatial + 63) / 64 * 64;
    if ((ptrdiff_t)pp->block_cols < job.block) job.block = (ptrdiff_t)pp->block_cols;
    job.np_block = ((spatial < job.block ? spatial : job.block) + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR;
    mb = cout_pad / MLCC_GEMM_MR;
    if ((double)cout_g * (double)spatial * (double)kdim * (double)p->batch * (double)p->groups <
        (double)MLCC_MIN_PARALLEL_MACS)
        nt = 1, pool = NULL;
    job.units = nt == 1 ? 1 : job.np_block < MLCC_CONV_UNITS_PER_THREAD * nt
                                  ? job.np_block : MLCC_CONV_UNITS_PER_THREAD * nt;
    if (nt == 1 ||
        panels_balance(spatial, job.block, job.np_block, job.units, nt) + 64 >= balance(mb, nt)) {
        /* the only loop: a loop group may run it with its siblings' */
        mlcc_parallel_loop(pool, 1, conv_packed_by_panels, &job, sizeof job, job.units, nt);
        return;
    }
    for (job.n = 0; job.n < p->batch; job.n++)
        for (job.gi = 0; job.gi < (ptrdiff_t)p->groups; job.gi++)
            for (job.j0 = 0; job.j0 < spatial; job.j0 += job.block) {
                const ptrdiff_t np0 = job.np_block;
                job.nc = spatial - job.j0 < job.block ? spatial - job.j0 : job.block;
                job.units = np0 < MLCC_CONV_UNITS_PER_THREAD * nt ? np0
                                                                  : MLCC_CONV_UNITS_PER_THREAD * nt;
                mlcc_threadpool_for(pool, conv_packed_gather, &job, (int)job.units, (int)nt);
                job.units = mb < MLCC_CONV_UNITS_PER_THREAD * nt ? mb
                                                                 : MLCC_CONV_UNITS_PER_THREAD * nt;
                mlcc_threadpool_for(pool, conv_packed_multiply, &job, (int)job.units, (int)nt);
            }
}

void mlcc_f32_conv2d__packed(const mlcc_conv2d_packed_params *pp, const float *x, const float *w,
                             const float *bias, float *y, float *scratch, mlcc_threadpool *pool) {
    conv_packed(pp, x, w, bias, NULL, NULL, y, scratch, pool);
}

void mlcc_f32_conv2d_residual__packed(const mlcc_conv2d_packed_params *pp, const float *x,
                                      const float *w, const float *bias, const float *residual,
                                      float *y, float *scratch, mlcc_threadpool *pool) {
    conv_packed(pp, x, w, bias, NULL, residual, y, scratch, pool);
}

void mlcc_f32_conv2d__packed_table(const mlcc_conv2d_packed_params *pp, const float *x,
                                   const float *w, const float *bias, const int32_t *table,
                                   float *y, float *scratch, mlcc_threadpool *pool) {
    conv_packed(pp, x, w, bias, table, NULL, y, scratch, pool);
}

/* The parallel loop of image n, group gi of a convolution whose loops end there: the last
 * one may run with its siblings' in a loop group (mlcc_parallel_loop); the jobs hold no
 * pointer into the kernel's stack. */
static void image_loop(const mlcc_conv2d_params *p, ptrdiff_t n, ptrdiff_t gi,
                       mlcc_threadpool *pool, mlcc_unit_fn fn, void *job, size_t job_bytes,
                       ptrdiff_t units, ptrdiff_t nt) {
    mlcc_parallel_loop(pool, n + 1 == (ptrdiff_t)p->batch && gi + 1 == (ptrdiff_t)p->groups,
                       fn, job, job_bytes, units, nt);
}

/* ---- Convolution as an implicit GEMM (conv.h) ---- */

/* MLCC_IMPLICIT_SLACK must cover the reads past the planes of one B panel */
typedef char mlcc_implicit_slack_covers_a_panel[MLCC_GEMM_NR <= MLCC_IMPLICIT_SLACK ? 1 : -1];

/* The offsets of the im2col rows (conv.h): the compiler's table, or, when it passed none (a
 * feature map of a dynamic size), the same numbers computed from the parameters into the
 * first mlcc_implicit_offsets_floats() floats of *scratch, which then moves past them.
 * cols: mlcc_f32_conv2d__implicit_cols's shifted planes, else the stride-phase sub-planes. */
static const int32_t *implicit_offsets(const mlcc_conv2d_params *p, const int32_t *offsets,
                                       int cols, float **scratch) {
    const ptrdiff_t cin_g = (ptrdiff_t)(p->in_channels / p->groups);
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t dh = (ptrdiff_t)p->dilation_h, dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w;
    int32_t *off;
    ptrdiff_t c, ki, kj, k = 0;
    if (offsets != NULL) return offsets;
    off = (int32_t *)(void *)*scratch;
    *scratch += mlcc_implicit_offsets_floats(p);
    for (c = 0; c < cin_g; c++)
        for (ki = 0; ki < kh_n; ki++)
            for (kj = 0; kj < kw_n; kj++) {
                if (cols) {
                    const ptrdiff_t hp = mlcc_implicit_cols_h(p);
                    off[k++] = (int32_t)(((c * kw_n + kj) * hp + ki * dh) * ow_n);
                } else {
                    const ptrdiff_t hq = mlcc_implicit_sub_h(p), wq = mlcc_implicit_sub_w(p);
                    const ptrdiff_t plane = (c * sh + ki * dh % sh) * sw + kj * dw % sw;
                    off[k++] = (int32_t)(plane * hq * wq + ki * dh / sh * wq + kj * dw / sw);
                }
            }
    return off;
}

/* Where the columns of one virtual panel go in the output: n columns from tile column t to
 * output position y (at most one run per column). */
typedef struct implicit_segs {
    ptrdiff_t count;
    ptrdiff_t t[MLCC_GEMM_NR], n[MLCC_GEMM_NR], y[MLCC_GEMM_NR];
} implicit_segs;

static void implicit_panel_segs(ptrdiff_t q0, ptrdiff_t nv, ptrdiff_t wq, ptrdiff_t ow_n,
                                implicit_segs *s) {
    ptrdiff_t t = 0, oh = q0 / wq, ow = q0 % wq;   /* then advanced without dividing */
    s->count = 0;
    if (wq == ow_n) {   /* no padding columns (mlcc_f32_conv2d__implicit_cols): one run */
        s->count = 1;
        s->t[0] = 0;
        s->n[0] = nv - q0 < MLCC_GEMM_NR ? nv - q0 : MLCC_GEMM_NR;
        s->y[0] = q0;
        return;
    }
    while (t < MLCC_GEMM_NR && q0 + t < nv) {
        const ptrdiff_t q = q0 + t;
        if (ow >= ow_n) {       /* a padding column: skip to the next output row */
            t += wq - ow;
            oh++;
            ow = 0;
            continue;
        }
        {
            ptrdiff_t n = ow_n - ow;
            if (n > MLCC_GEMM_NR - t) n = MLCC_GEMM_NR - t;
            if (n > nv - q) n = nv - q;
            s->t[s->count] = t;
            s->n[s->count] = n;
            s->y[s->count] = oh * ow_n + ow;
            s->count++;
            t += n;
            ow += n;
        }
    }
}

/* Output row r of a tile (row[] = its NR values after bias and activation) into y. */
static inline void implicit_scatter_row(float *yr, const float *row, const implicit_segs *s) {
    ptrdiff_t i, t;
    for (i = 0; i < s->count; i++) {
        float *d = yr + s->y[i];
        const float *src = row + s->t[i];
        for (t = 0; t < s->n[i]; t++) d[t] = src[t];
    }
}

/* One PANEL_ROWS x NR tile (gemm.h: MR, or a divisor of it on targets with few registers):
 * rows of an A panel (kc x MR, packed; a points at the tile's first row) times the B rows
 * b + off[p]. Partial sums (not last) go to part (row stride ldp); the last k block adds bias, applies the activation and
 * writes the output columns into y (row stride ldy). Same order of operations as packed_tile. */
#if MLCC_HAVE_VECTORS
/* The k loop of a PANEL_ROWS x nvec-vector tile: acc = the A panel's rows (kc x MR, packed; a
 * points at the tile's first row) times the B rows b + off[p], summed over p in order. Shared
 * by implicit_tile and rows_tile_whole, always inlined into them (the accumulators stay in
 * registers only in a copy specialized for a constant nvec). */
static inline __attribute__((always_inline)) void
implicit_products(ptrdiff_t kc, const float *MLCC_RESTRICT a, const float *MLCC_RESTRICT b,
                  const int32_t *MLCC_RESTRICT off, const ptrdiff_t nvec,
                  mlcc_vf acc[MLCC_GEMM_PANEL_ROWS][MLCC_GEMM_NV]) {
    ptrdiff_t r, v, p;
    for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
        for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] = mlcc_vf_splat(0.0f);
    for (p = 0; p < kc; p++) {
        const float *bp = b + off[p];
        mlcc_vf bv[MLCC_GEMM_NV];
        for (v = 0; v < nvec; v++) bv[v] = mlcc_vf_load(bp + v * MLCC_VF_LANES);
        for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++) {
            const mlcc_vf av = mlcc_vf_splat(a[p * MLCC_GEMM_MR + r]);
            for (v = 0; v < nvec; v++) acc[r][v] += av * bv[v];
        }
    }
}

/* always inlined: each call site passes a constant nvec, and only a copy specialized for it
 * keeps the accumulators in registers (clang for wasm left one shared copy with a variable
 * nvec: YOLOv8n's and ResNet-50's implicit layers ran 2-3x slower in node) */
static inline __attribute__((always_inline)) void
implicit_tile(ptrdiff_t kc, const float *MLCC_RESTRICT a,
                                 const float *MLCC_RESTRICT b, const int32_t *MLCC_RESTRICT off,
                                 ptrdiff_t mr, float *part, ptrdiff_t ldp, int first, int last,
                                 float *y, ptrdiff_t ldy, const implicit_segs *s,
                                 const float *bias, const mlcc_act *act, const ptrdiff_t nvec) {
    mlcc_vf acc[MLCC_GEMM_PANEL_ROWS][MLCC_GEMM_NV];
    ptrdiff_t r, v;
    implicit_products(kc, a, b, off, nvec, acc);
#if defined(__wasm_simd128__)
    /* wasm: a whole tile's last k block written in one run (nearly every tile), the epilogue
     * in registers and the activation switched once (gemm.c, packed_tile_whole) */
    if (last && mr == MLCC_GEMM_PANEL_ROWS && s->count == 1 && s->n[0] == MLCC_GEMM_NR) {
        if (!first)
            for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
                for (v = 0; v < MLCC_GEMM_NV; v++)
                    acc[r][v] += mlcc_vf_load(part + r * ldp + v * MLCC_VF_LANES);
        if (bias != NULL)
            for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
                for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] += bias[r];
        mlcc_wasm_act_vecs(act, &acc[0][0], MLCC_GEMM_PANEL_ROWS * MLCC_GEMM_NV);
        for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
            for (v = 0; v < MLCC_GEMM_NV; v++)
                mlcc_vf_store(y + r * ldy + s->y[0] + v * MLCC_VF_LANES, acc[r][v]);
        return;
    }
#endif
    for (r = 0; r < mr; r++) {
        float *pr = part + r * ldp;
        float row[MLCC_GEMM_NR];
        const int whole = s->count == 1 && s->n[0] == nvec * MLCC_VF_LANES;
        for (v = 0; v < nvec; v++) {
            mlcc_vf out = acc[r][v];
            if (!first) out += mlcc_vf_load(pr + v * MLCC_VF_LANES);
            if (!last) {
                mlcc_vf_store(pr + v * MLCC_VF_LANES, out);
                continue;
            }
            if (bias != NULL) out += bias[r];
            out = mlcc_vf_act(act, out);
            if (whole)
                mlcc_vf_store(y + r * ldy + s->y[0] + v * MLCC_VF_LANES, out);
            else
                mlcc_vf_store(row + v * MLCC_VF_LANES, out);
        }
        if (last && !whole) implicit_scatter_row(y + r * ldy, row, s);
    }
}
#else
static void implicit_tile(ptrdiff_t kc, const float *a, const float *b, const int32_t *off,
                          ptrdiff_t mr, float *part, ptrdiff_t ldp, int first, int last, float *y,
                          ptrdiff_t ldy, const implicit_segs *s, const float *bias,
                          const mlcc_act *act, ptrdiff_t nvec) {
    float acc[MLCC_GEMM_PANEL_ROWS][MLCC_GEMM_NR];
    ptrdiff_t r, j, p;
    (void)nvec;
    for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
        for (j = 0; j < MLCC_GEMM_NR; j++) acc[r][j] = 0.0f;
    for (p = 0; p < kc; p++)
        for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
            for (j = 0; j < MLCC_GEMM_NR; j++) acc[r][j] += a[p * MLCC_GEMM_MR + r] * b[off[p] + j];
    for (r = 0; r < mr; r++) {
        float *pr = part + r * ldp;
        for (j = 0; j < MLCC_GEMM_NR; j++) {
            float out = acc[r][j];
            if (!first) out += pr[j];
            if (!last) {
                pr[j] = out;
                continue;
            }
            if (bias != NULL) out += bias[r];
            acc[r][j] = mlcc_act_scalar(act, out);
        }
        if (last) implicit_scatter_row(y + r * ldy, acc[r], s);
    }
}
#endif

#if MLCC_HAVE_VECTORS
#define IMPLICIT_NV MLCC_GEMM_NV
#else
#define IMPLICIT_NV 1   /* unused by the scalar tile */
#endif

typedef struct implicit_job {
    const mlcc_conv2d_packed_params *pp;
    const float *w, *bias, *pad;       /* pad: the current group's padded input */
    const int32_t *off;
    float *y, *part;                   /* y: the current group's output */
    ptrdiff_t gi;
    ptrdiff_t hq, wq, nv, bc, nb;      /* sub-plane, virtual columns, block width, blocks */
    ptrdiff_t col_units, row_units;    /* unit u: column blocks of u % col_units, rows of u / */
    ptrdiff_t part_floats;             /* per thread slice */
} implicit_job;

static void implicit_task(void *arg, int u, int thread) {
    const implicit_job *job = (const implicit_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane;
    ptrdiff_t b0, b1, r0, r1, mb, jb, i0, k0, i, j;
    float *part = job->part + thread * job->part_floats;
    implicit_segs segs;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    segs.count = 0;   /* set before every last k block, which alone reads it */
    mb = cout_pad / MLCC_GEMM_MR;
    b0 = job->nb * (u % job->col_units) / job->col_units;
    b1 = job->nb * (u % job->col_units + 1) / job->col_units;
    r0 = mb * (u / job->col_units) / job->row_units * MLCC_GEMM_MR;
    r1 = mb * (u / job->col_units + 1) / job->row_units * MLCC_GEMM_MR;
    if (r1 > cout_g) r1 = cout_g;
    for (jb = b0; jb < b1; jb++) {
        const ptrdiff_t js = jb * job->bc;
        const ptrdiff_t je = js + job->bc < job->nv ? js + job->bc : job->nv;
        for (i0 = r0; i0 < r1; i0 += MLCC_GEMM_MC) {
            const ptrdiff_t i1 = r1 - i0 < MLCC_GEMM_MC ? r1 : i0 + MLCC_GEMM_MC;
            for (k0 = 0; k0 < kdim; k0 += MLCC_GEMM_KC) {
                const ptrdiff_t kc = kdim - k0 < MLCC_GEMM_KC ? kdim - k0 : MLCC_GEMM_KC;
                const int first = k0 == 0, last = k0 + kc == kdim;
                for (j = js; j < je; j += MLCC_GEMM_NR) {
                    if (last) implicit_panel_segs(j, job->nv, job->wq, (ptrdiff_t)p->out_w, &segs);
                    for (i = i0; i < i1; i += MLCC_GEMM_PANEL_ROWS) {
                        const ptrdiff_t mr = i1 - i < MLCC_GEMM_PANEL_ROWS ? i1 - i
                                                                           : MLCC_GEMM_PANEL_ROWS;
                        /* weights k-block-major (gemm.h): block k0 holds kc x cout_pad; a
                         * tile starts i % MR rows into its panel */
                        const float *a = job->w + job->gi * cout_pad * kdim + k0 * cout_pad +
                                         (i - i % MLCC_GEMM_MR) * kc + i % MLCC_GEMM_MR;
                        float *pt = part + (i - i0) * job->bc + (j - js);
                        const float *bi = job->bias ? job->bias + job->gi * cout_g + i : NULL;
                        /* a panel of at most one vector of columns: the half-width tile
                         * (the same sums, half the FMAs; a constant count per call site) */
#if MLCC_HAVE_VECTORS
                        if (MLCC_GEMM_NV > 1 && je - j <= MLCC_VF_LANES)
                            implicit_tile(kc, a, job->pad + j, job->off + k0, mr, pt, job->bc,
                                          first, last, job->y + i * spatial, spatial, &segs, bi,
                                          &p->act, 1);
                        else
#endif
                            implicit_tile(kc, a, job->pad + j, job->off + k0, mr, pt, job->bc,
                                          first, last, job->y + i * spatial, spatial, &segs, bi,
                                          &p->act, IMPLICIT_NV);
                    }
                }
            }
        }
    }
}

/* Group gi's input, zero-padded and split by stride phase (conv.h), into scratch: per channel,
 * stride_h * stride_w sub-planes of hq x wq (and zeros past them). This writes the sub-planes
 * [q0, q1) of the cin_g * stride_h * stride_w, sub-plane q = (c * stride_h + ry) * stride_w
 * + rx; with phase0 only those of phase (0, 0), the only ones a 1x1 window reads (the others
 * are left unwritten: implicit_t's flat tiles read exactly their positions, nothing past
 * them). */
static void implicit_fill_planes(const mlcc_conv2d_params *p, const float *xg, ptrdiff_t q0,
                                 ptrdiff_t q1, ptrdiff_t hq, ptrdiff_t wq, float *pad,
                                 int phase0) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    const ptrdiff_t sub = hq * wq;
    ptrdiff_t q, r, j;
    for (q = q0; q < q1; q++) {
        const ptrdiff_t c = q / (sh * sw), ry = q / sw % sh, rx = q % sw;
        const float *xc = xg + c * ih_n * iw_n;
        float *dq = pad + q * sub;
        /* positions [lo, hi) of this phase: padded column j * sw + rx, input column - pl */
        ptrdiff_t lo, hi;
        if (phase0 && (ry != 0 || rx != 0)) continue;
        mlcc_conv_valid_range(wq, sw, pl, rx, iw_n, &lo, &hi);
        for (r = 0; r < hq; r++) {
            const ptrdiff_t ih = r * sh + ry - pt;
            float *d = dq + r * wq;
            const float *xr;
            if (ih < 0 || ih >= ih_n) {
                memset(d, 0, (size_t)wq * sizeof(float));
                continue;
            }
            xr = xc + ih * iw_n;
            memset(d, 0, (size_t)lo * sizeof(float));
            if (sw == 1)
                memcpy(d + lo, xr + (lo - pl), (size_t)(hi - lo) * sizeof(float));
            else if (sw == 2)   /* a constant stride: compilers vectorize it */
                for (j = lo; j < hi; j++) d[j] = xr[2 * j + rx - pl];
            else
                for (j = lo; j < hi; j++) d[j] = xr[j * sw + rx - pl];
            memset(d + hi, 0, (size_t)(wq - hi) * sizeof(float));
        }
    }
}

/* The arguments of one implicit_fill, for fill_range. */
typedef struct fill_call {
    const mlcc_conv2d_params *p;
    const float *xg;
    float *pad;
    ptrdiff_t hq, wq;
    int phase0;
} fill_call;

static void fill_range(void *arg, ptrdiff_t q0, ptrdiff_t q1) {
    const fill_call *c = (const fill_call *)arg;
    implicit_fill_planes(c->p, c->xg, q0, q1, c->hq, c->wq, c->pad, c->phase0);
}

/* The copy above of all cin_g channels, split by sub-planes between the pool's threads from
 * a quarter of MLCC_MIN_PARALLEL_ELEMENTS floats (a copy: the same bits; on the caller alone,
 * the copies of the stride-2 layers of ResNet-18 and YOLOv8n, 35-55 us each, were most of
 * the serial time of their 2-thread runs), then the slack zeroed. */
static void implicit_fill(const mlcc_conv2d_params *p, const float *xg, ptrdiff_t cin_g,
                          ptrdiff_t hq, ptrdiff_t wq, float *pad, mlcc_threadpool *pool,
                          int phase0) {
    const ptrdiff_t planes = cin_g * (ptrdiff_t)(p->stride_h * p->stride_w);
    fill_call call;
    call.p = p;
    call.xg = xg;
    call.pad = pad;
    call.hq = hq;
    call.wq = wq;
    call.phase0 = phase0;
    mlcc_parallel_ranges(pool, fill_range, &call, planes,
                         (double)(phase0 ? cin_g : planes) * hq * wq,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS / 4);
    memset(pad + planes * hq * wq, 0,
           (size_t)((p->kernel_w - 1) * p->dilation_w + MLCC_IMPLICIT_SLACK) * sizeof(float));
}

/* Group input for mlcc_f32_conv2d__implicit_cols (stride 1, conv.h): per channel c and kernel
 * column kj, a plane of hp x out_w whose row r, column j is input row r - pad_top, column
 * j + kj * dilation_w - pad_left (zero outside the input), written in address order. Vector
 * stores may run past a row or a plane: what they write there is written again later (the
 * lanes past the last plane land in the slack, zeroed last). Vector reads stay inside the
 * input tensor (xs floats from x0), else that vector goes one value at a time. When the input
 * rows are as wide as the output's (padding "same": the digits CNN), a plane's rows of input
 * are one flat run of the channel shifted by kj * dilation_w - pad_left, its columns outside
 * the input zeroed by lane masks that repeat every period vectors; else row by row. */
#define IMPLICIT_COLS_MAX_KW 8
#define IMPLICIT_COLS_MAX_PERIOD 4
static void implicit_fill_cols(const mlcc_conv2d_params *p, const float *xg, ptrdiff_t cin_g,
                               ptrdiff_t hp, const float *x0, ptrdiff_t xs, float *pad) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    const ptrdiff_t xg_off = xg - x0;
    ptrdiff_t c, kj, r, j;
#if MLCC_HAVE_VECTORS
    const ptrdiff_t VL = MLCC_VF_LANES;
    ptrdiff_t period = ow_n, g = VL, v;
    mlcc_vi keep[IMPLICIT_COLS_MAX_KW][IMPLICIT_COLS_MAX_PERIOD];
    int flat;
    while (g != 0) {   /* period = ow / gcd(ow, VL) vectors */
        const ptrdiff_t t = period % g;
        period = g;
        g = t;
    }
    period = ow_n / period;
    flat = iw_n == ow_n && kw_n <= IMPLICIT_COLS_MAX_KW && period <= IMPLICIT_COLS_MAX_PERIOD;
    for (kj = 0; flat && kj < kw_n; kj++) {
        const ptrdiff_t s = kj * dw - pl;
        for (v = 0; v < period; v++)
            for (j = 0; j < VL; j++) {
                const ptrdiff_t col = (v * VL + j) % ow_n;
                keep[kj][v][j] = col + s >= 0 && col + s < iw_n ? -1 : 0;
            }
    }
#else
    (void)xs;
#endif
    for (c = 0; c < cin_g; c++) {
        for (kj = 0; kj < kw_n; kj++) {
            const ptrdiff_t s = kj * dw - pl;   /* input column of output column 0 */
            const ptrdiff_t lo = s < 0 ? (-s < ow_n ? -s : ow_n) : 0;
            ptrdiff_t hi = iw_n - s < ow_n ? iw_n - s : ow_n;
            float *d = pad + (c * kw_n + kj) * hp * ow_n;
            if (hi < lo) hi = lo;
#if MLCC_HAVE_VECTORS
            if (flat) {
                /* rows pt .. pt + ih_n - 1 as one run (its last vector may run into the
                 * bottom rows, zeroed after it), then the padding rows */
                const ptrdiff_t n = ih_n * ow_n, src = xg_off + c * ih_n * iw_n + s;
                float *dd = d + pt * ow_n;
                for (v = 0, j = 0; j < n; j += VL, v = v + 1 == period ? 0 : v + 1) {
                    if (src + j >= 0 && src + j + VL <= xs) {
                        mlcc_vf_store(dd + j, (mlcc_vf)((mlcc_vi)mlcc_vf_load(x0 + src + j) &
                                                        keep[kj][v]));
                    } else {
                        ptrdiff_t t;
                        for (t = 0; t < VL && j + t < n; t++)
                            dd[j + t] = keep[kj][v][t] ? x0[src + j + t] : 0.0f;
                    }
                }
                for (j = 0; j < pt * ow_n; j++) d[j] = 0.0f;
                for (j = (pt + ih_n) * ow_n; j < hp * ow_n; j++) d[j] = 0.0f;
                continue;
            }
#endif
            for (r = 0; r < hp; r++) {
                const ptrdiff_t ih = r - pt;
                float *dr = d + r * ow_n;
                const ptrdiff_t src = xg_off + (c * ih_n + ih) * iw_n + s;   /* from x0 */
                if (ih < 0 || ih >= ih_n || hi == lo) {
                    for (j = 0; j < ow_n; j++) dr[j] = 0.0f;
                    continue;
                }
                for (j = 0; j < ow_n; j++) dr[j] = j >= lo && j < hi ? x0[src + j] : 0.0f;
            }
        }
    }
    memset(pad + cin_g * kw_n * hp * ow_n, 0, MLCC_IMPLICIT_SLACK * sizeof(float));
}

static void implicit_conv(const mlcc_conv2d_packed_params *pp, const float *x, const float *w,
                          const float *bias, const int32_t *offsets, float *y, float *scratch,
                          mlcc_threadpool *pool, int cols) {
    const mlcc_conv2d_params *p = &pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, mb, nt, n;
    implicit_job job;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    job.pp = pp;
    job.w = w;
    job.bias = bias;
    job.off = implicit_offsets(p, offsets, cols, &scratch);
    job.pad = scratch;
    job.hq = cols ? mlcc_implicit_cols_h(p) : mlcc_implicit_sub_h(p);
    job.wq = cols ? (ptrdiff_t)p->out_w : mlcc_implicit_sub_w(p);
    job.nv = (ptrdiff_t)p->out_h * job.wq;
    job.bc = (ptrdiff_t)pp->block_cols;
    job.nb = (job.nv + job.bc - 1) / job.bc;
    job.part = scratch + (cols ? mlcc_implicit_cols_pad_floats(p) : mlcc_implicit_pad_floats(p));
    job.part_floats = kdim <= MLCC_GEMM_KC ? 0   /* one k block: no partial sums */
                      : (cout_pad < MLCC_GEMM_MC ? cout_pad : MLCC_GEMM_MC) * job.bc;
    mb = cout_pad / MLCC_GEMM_MR;
    nt = mlcc_threadpool_size(pool);
    if (nt > MLCC_IMPLICIT_SLICES) nt = MLCC_IMPLICIT_SLICES;
    if ((double)cout_g * (double)spatial * (double)kdim * (double)p->batch * (double)p->groups <
        (double)MLCC_MIN_PARALLEL_MACS)
        nt = 1, pool = NULL;
    /* units: column blocks first; rows of weight panels too when blocks are few */
    job.col_units = nt == 1 ? 1 : job.nb < MLCC_CONV_UNITS_PER_THREAD * nt
                                      ? job.nb : MLCC_CONV_UNITS_PER_THREAD * nt;
    job.row_units = 1;
    if (nt > 1 && job.col_units < MLCC_CONV_UNITS_PER_THREAD * nt) {
        job.row_units = (MLCC_CONV_UNITS_PER_THREAD * nt + job.col_units - 1) / job.col_units;
        if (job.row_units > mb) job.row_units = mb;
    }
    for (n = 0; n < p->batch; n++) {
        for (job.gi = 0; job.gi < (ptrdiff_t)p->groups; job.gi++) {
            const float *xg = x + (n * (ptrdiff_t)p->in_channels + job.gi * cin_g) * in_plane;
            if (cols)
                implicit_fill_cols(p, xg, cin_g, job.hq, x,
                                   (ptrdiff_t)p->batch * (ptrdiff_t)p->in_channels * in_plane,
                                   scratch);
            else
                implicit_fill(p, xg, cin_g, job.hq, job.wq, scratch, pool, 0);
            job.y = y + (n * (ptrdiff_t)p->out_channels + job.gi * cout_g) * spatial;
            image_loop(p, n, job.gi, pool, implicit_task, &job, sizeof job,
                       job.col_units * job.row_units, nt);
        }
    }
}

void mlcc_f32_conv2d__implicit(const mlcc_conv2d_packed_params *pp, const float *x,
                               const float *w, const float *bias, const int32_t *offsets,
                               float *y, float *scratch, mlcc_threadpool *pool) {
    implicit_conv(pp, x, w, bias, offsets, y, scratch, pool, 0);
}

void mlcc_f32_conv2d__implicit_cols(const mlcc_conv2d_packed_params *pp, const float *x,
                                    const float *w, const float *bias, const int32_t *offsets,
                                    float *y, float *scratch, mlcc_threadpool *pool) {
    implicit_conv(pp, x, w, bias, offsets, y, scratch, pool, 1);
}

/* ---- The implicit GEMM by output rows: shallow strided convolutions (conv.h) ---- */

#if MLCC_HAVE_VECTORS && !defined(__wasm_simd128__)
/* A whole PANEL_ROWS x nvec-vector tile of one output row, one k block (the whole depth), the
 * epilogue in registers (as gemm.c's packed_tile_whole): the same sums in the same order as
 * implicit_tile, the same bits. */
static inline __attribute__((always_inline)) void
rows_tile_whole(ptrdiff_t kc, const float *MLCC_RESTRICT a, const float *MLCC_RESTRICT b,
                const int32_t *MLCC_RESTRICT off, float *y, ptrdiff_t ldy, const float *bias,
                const mlcc_act *act, const int nvec) {
    mlcc_vf acc[MLCC_GEMM_PANEL_ROWS][MLCC_GEMM_NV];
    ptrdiff_t r, v;
    implicit_products(kc, a, b, off, nvec, acc);
    if (bias != NULL)
        for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
            for (v = 0; v < nvec; v++) acc[r][v] += bias[r];
    mlcc_tile_act(act, &acc[0][0], MLCC_GEMM_PANEL_ROWS * MLCC_GEMM_NV);
    for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
        for (v = 0; v < nvec; v++) mlcc_vf_store(y + r * ldy + v * MLCC_VF_LANES, acc[r][v]);
}
#endif

typedef struct rows_job {
    const mlcc_conv2d_packed_params *pp;
    const float *w, *bias, *pad;
    const int32_t *off;
    float *y, *dummy;
    ptrdiff_t gi, wq, units;
} rows_job;

#ifndef ROWS_BLOCK
#define ROWS_BLOCK 32
#endif
/* Unit u: a range of output rows; per row, column tiles of NR (the last one narrower), each
 * for every PANEL_ROWS of output channels, so that no tile straddles two output rows. */
static void rows_task(void *arg, int u, int thread) {
    const rows_job *job = (const rows_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w, oh_n = (ptrdiff_t)p->out_h;
    const ptrdiff_t h0 = oh_n * u / job->units, h1 = oh_n * (u + 1) / job->units;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, oh, ow0, i, hb;
    implicit_segs segs;
    (void)thread;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    for (hb = h0; hb < h1; hb += ROWS_BLOCK)
    for (i = 0; i < cout_g; i += MLCC_GEMM_PANEL_ROWS)
    for (oh = hb; oh < (h1 - hb < ROWS_BLOCK ? h1 : hb + ROWS_BLOCK); oh++) {
        for (ow0 = 0; ow0 < ow_n; ow0 += MLCC_GEMM_NR) {
            const ptrdiff_t nc = ow_n - ow0 < MLCC_GEMM_NR ? ow_n - ow0 : MLCC_GEMM_NR;
            const float *b = job->pad + oh * job->wq + ow0;
            segs.count = 1;
            segs.t[0] = 0;
            segs.n[0] = nc;
            segs.y[0] = oh * ow_n + ow0;
            {
                const ptrdiff_t mr = cout_g - i < MLCC_GEMM_PANEL_ROWS ? cout_g - i
                                                                      : MLCC_GEMM_PANEL_ROWS;
                const float *a = job->w + job->gi * cout_pad * kdim +
                                 (i - i % MLCC_GEMM_MR) * kdim + i % MLCC_GEMM_MR;
                const float *bi = job->bias ? job->bias + job->gi * cout_g + i : NULL;
                float *yt = job->y + i * spatial;
#if MLCC_HAVE_VECTORS && !defined(__wasm_simd128__)
                if (mr == MLCC_GEMM_PANEL_ROWS && nc == MLCC_GEMM_NR) {
                    rows_tile_whole(kdim, a, b, job->off, yt + segs.y[0], spatial, bi, &p->act,
                                    MLCC_GEMM_NV);
                    continue;
                }
                if (MLCC_GEMM_NV > 1 && mr == MLCC_GEMM_PANEL_ROWS && nc == MLCC_VF_LANES) {
                    rows_tile_whole(kdim, a, b, job->off, yt + segs.y[0], spatial, bi, &p->act,
                                    1);
                    continue;
                }
                if (mr == MLCC_GEMM_PANEL_ROWS) {   /* a row's last columns: through a copy */
                    float tmp[MLCC_GEMM_PANEL_ROWS * MLCC_GEMM_NR];
                    ptrdiff_t r, t;
                    if (MLCC_GEMM_NV > 1 && nc <= MLCC_VF_LANES)
                        rows_tile_whole(kdim, a, b, job->off, tmp, MLCC_GEMM_NR, bi, &p->act, 1);
                    else
                        rows_tile_whole(kdim, a, b, job->off, tmp, MLCC_GEMM_NR, bi, &p->act,
                                        MLCC_GEMM_NV);
                    for (r = 0; r < MLCC_GEMM_PANEL_ROWS; r++)
                        for (t = 0; t < nc; t++)
                            yt[r * spatial + segs.y[0] + t] = tmp[r * MLCC_GEMM_NR + t];
                    continue;
                }
#endif
#if MLCC_HAVE_VECTORS
                if (MLCC_GEMM_NV > 1 && nc <= MLCC_VF_LANES)
                    implicit_tile(kdim, a, b, job->off, mr, job->dummy, 0, 1, 1, yt, spatial,
                                  &segs, bi, &p->act, 1);
                else
#endif
                    implicit_tile(kdim, a, b, job->off, mr, job->dummy, 0, 1, 1, yt, spatial,
                                  &segs, bi, &p->act, IMPLICIT_NV);
            }
        }
    }
}

void mlcc_f32_conv2d__implicit_rows(const mlcc_conv2d_packed_params *pp, const float *x,
                                    const float *w, const float *bias, const int32_t *offsets,
                                    float *y, float *scratch, mlcc_threadpool *pool) {
    const mlcc_conv2d_params *p = &pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, nt, n;
    rows_job job;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    job.pp = pp;
    job.w = w;
    job.bias = bias;
    job.off = implicit_offsets(p, offsets, 0, &scratch);
    job.pad = scratch;
    job.dummy = scratch;   /* implicit_tile's partial sums: never used (one k block) */
    job.wq = mlcc_implicit_sub_w(p);
    nt = mlcc_threadpool_size(pool);
    if (nt > MLCC_IMPLICIT_SLICES) nt = MLCC_IMPLICIT_SLICES;
    if ((double)cout_g * (double)spatial * (double)kdim * (double)p->batch * (double)p->groups <
        (double)MLCC_MIN_PARALLEL_MACS)
        nt = 1, pool = NULL;
    job.units = nt == 1 ? 1 : (ptrdiff_t)p->out_h < MLCC_CONV_UNITS_PER_THREAD * nt
                                  ? (ptrdiff_t)p->out_h : MLCC_CONV_UNITS_PER_THREAD * nt;
    for (n = 0; n < p->batch; n++) {
        for (job.gi = 0; job.gi < (ptrdiff_t)p->groups; job.gi++) {
            const float *xg = x + (n * (ptrdiff_t)p->in_channels + job.gi * cin_g) * in_plane;
            implicit_fill(p, xg, cin_g, mlcc_implicit_sub_h(p), job.wq, scratch, pool, 0);
            job.y = y + (n * (ptrdiff_t)p->out_channels + job.gi * cout_g) * spatial;
            image_loop(p, n, job.gi, pool, rows_task, &job, sizeof job, job.units, nt);
        }
    }
}

/* ---- The implicit GEMM transposed: output channels along the vectors (conv.h) ---- */

#define TCP MLCC_CONVT_CP
#define TRMAX MLCC_CONVT_FLAT_RMAX   /* the largest tile (flat tiles; row chunks: CONVT_RMAX) */

/* acc (R positions x nc channels, rows of TCP floats in out) = sum over p < kc of the input at
 * b[off[p] + r] times the weights a[p * TCP + ch]: one k block of one tile. nc is TCP, or TCP / 2
 * for a last panel of at most that many channels (out's other half is left unset and never
 * read). Each value is one chain of multiply-adds over p in order, from zero, as in
 * implicit_tile. */
#if MLCC_HAVE_VECTORS
#if MLCC_VECTOR_BYTES / 2 <= TCP   /* 2 * lanes <= TCP */
#define TCH (2 * MLCC_VF_LANES)   /* channels per pass: two vectors */
#else
#define TCH TCP
#endif
static inline __attribute__((always_inline)) void
convt_tile(ptrdiff_t R, const int nc, ptrdiff_t kc, const float *MLCC_RESTRICT a,
           const float *MLCC_RESTRICT b, const int32_t *MLCC_RESTRICT off,
           float *MLCC_RESTRICT out, const float *pf, ptrdiff_t pf_n) {
    ptrdiff_t c0, p, r, v;
    for (c0 = 0; c0 < nc; c0 += TCH) {
        const ptrdiff_t nvec = (nc - c0 < TCH ? nc - c0 : TCH) / MLCC_VF_LANES;
        mlcc_vf acc[TRMAX][TCH / MLCC_VF_LANES];
        for (r = 0; r < R; r++)
            for (v = 0; v < nvec; v++) acc[r][v] = mlcc_vf_splat(0.0f);
        for (p = 0; p < kc; p++) {
            const float *bp = b + off[p];
            mlcc_vf wv[TCH / MLCC_VF_LANES];
            if (c0 == 0 && p < pf_n) MLCC_PREFETCH(pf + p * MLCC_PF_FLOATS);
            if (c0 == 0 && p + kc < pf_n) MLCC_PREFETCH(pf + (p + kc) * MLCC_PF_FLOATS);
            for (v = 0; v < nvec; v++) wv[v] = mlcc_vf_load(a + p * TCP + c0 + v * MLCC_VF_LANES);
            for (r = 0; r < R; r++) {
                const mlcc_vf xv = mlcc_vf_splat(bp[r]);
                for (v = 0; v < nvec; v++) acc[r][v] += xv * wv[v];
            }
        }
        for (r = 0; r < R; r++)
            for (v = 0; v < nvec; v++)
                mlcc_vf_store(out + r * TCP + c0 + v * MLCC_VF_LANES, acc[r][v]);
    }
    if (nc < TCP)   /* a half panel: convt_store works on whole rows */
        for (r = 0; r < R; r++) memset(out + r * TCP + nc, 0, (TCP - nc) * sizeof(float));
}

/* AVX-512, tiles with a residual: the flat tile's epilogue on the tile transposed in registers
 * (16 x 16 blocks: 64 shuffles), one vector per output channel holding its R <= 16 positions,
 * so that the residual is one masked load and the output one store per channel, where the
 * positions-major tile gathered the residual and wrote the tile with 32 x R scalar copies.
 * Bias, residual and activation are lane-wise: the same operations on the same values, the
 * same bits. MobileNetV2's residual 1x1 layers 0.95-0.98x. Without a residual the scalar copies
 * are cheaper: they run on the load/store ports beside the next tile's FMAs, the shuffles on
 * the vector ports (160 -> 960 on 7 x 7 1.07x slower transposed). */
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64 && MLCC_CONVT_FLAT_RMAX <= 16   /* TCH 32 */
#define CONVT_TRANSPOSE_REGS 1
/* r[i] lane j -> r[j] lane i */
static inline __attribute__((always_inline)) void convt_tr16(__m512 *r) {
    __m512 t[16];
    int i, m;
    for (i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* r[4g + m], 128-bit lane l: column 4l + m of rows 4g..4g+3 */
    for (m = 0; m < 4; m++) {
        const __m512 v0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
        const __m512 w0 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
        t[m] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        t[4 + m] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        t[8 + m] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
        t[12 + m] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
    for (i = 0; i < 16; i++) r[i] = t[i];
}
#else
#define CONVT_TRANSPOSE_REGS 0
#endif

/* A 1x1 convolution's tile over every k block in turn, with its epilogue: kdim deep; w: the
 * group's weights, block k0 at w + k0 * cpad, this panel ch0 * kc into it; input row p at
 * b + p * bs. Each block's sums from zero, added to the earlier blocks' total (acc + total, as
 * convt_store adds the partial sums), in registers; then, in registers too, bias (e: TCP
 * floats, zero past the panel's channels), residual and activation in convt_store's order,
 * and the tile written transposed into y (nch channels of y, R positions from y0). */
typedef struct convt_epi {
    const float *bias, *res;   /* res: the residual of the panel's first channel, or NULL */
    const mlcc_act *act;
    float *y;                  /* the panel's first output channel */
    ptrdiff_t spatial, nch;
    ptrdiff_t end;             /* the unit's positions end here: later ones are another's */
    /* this tile is number pf_tile of pf_tiles over the panel; pf_tiles 0: no next panel */
    ptrdiff_t pf_tile, pf_tiles;
} convt_epi;

#if CONVT_TRANSPOSE_REGS
static inline __attribute__((always_inline)) void
convt_epilogue_t(ptrdiff_t R, ptrdiff_t nvec, ptrdiff_t c0, mlcc_vf (*total)[2],
                 const convt_epi *e, ptrdiff_t y0) {
    const __mmask16 mask = (__mmask16)((1u << R) - 1u);
    ptrdiff_t v, r, j;
    for (v = 0; v < nvec; v++) {
        const ptrdiff_t cv = c0 + v * MLCC_VF_LANES;   /* the block's first channel */
        const ptrdiff_t nj = e->nch - cv < 16 ? e->nch - cv : 16;
        __m512 t[16];
        mlcc_vf o[16];
        if (nj <= 0) break;
        for (r = 0; r < 16; r++) t[r] = _mm512_setzero_ps();
        for (r = 0; r < R && r < TRMAX; r++) t[r] = (__m512)total[r][v];
        convt_tr16(t);   /* t[j]: channel cv + j, lane r: position y0 + r */
        for (j = 0; j < 16; j++) {
            o[j] = (mlcc_vf)t[j];
            if (e->bias != NULL) o[j] += e->bias[cv + j];
            if (e->res != NULL && j < nj)
                o[j] += (mlcc_vf)_mm512_maskz_loadu_ps(mask, e->res + (cv + j) * e->spatial + y0);
        }
        mlcc_tile_act(e->act, o, 16);
        /* masked stores are slow here (Zen 4: the 160 -> 960 layer 1.08x slower with them
         * all): a whole vector where the lanes past the tile fall on positions of this unit
         * that a later tile writes */
        if (y0 + 16 <= e->end)
            for (j = 0; j < nj; j++)
                _mm512_storeu_ps(e->y + (cv + j) * e->spatial + y0, (__m512)o[j]);
        else
            for (j = 0; j < nj; j++)
                _mm512_mask_storeu_ps(e->y + (cv + j) * e->spatial + y0, mask, (__m512)o[j]);
    }
}
#endif

static inline __attribute__((always_inline)) void
convt_tile_k(ptrdiff_t R, const int nc, ptrdiff_t kdim, ptrdiff_t cpad, ptrdiff_t ch0,
             const float *MLCC_RESTRICT w, const float *MLCC_RESTRICT b, ptrdiff_t bs,
             const convt_epi *e, ptrdiff_t y0, const int transposed) {
    float tile[TRMAX * TCP];
    ptrdiff_t c0, p, r, v, k0, j;
    for (c0 = 0; c0 < nc; c0 += TCH) {
        const ptrdiff_t nvec = (nc - c0 < TCH ? nc - c0 : TCH) / MLCC_VF_LANES;
        mlcc_vf total[TRMAX][TCH / MLCC_VF_LANES];
        /* set by the first k block; zeroed so that GCC need not prove it (-Wmaybe-uninit) */
        for (r = 0; r < R; r++)
            for (v = 0; v < nvec; v++) total[r][v] = mlcc_vf_splat(0.0f);
        for (k0 = 0; k0 < kdim; k0 += MLCC_GEMM_KC) {
            const ptrdiff_t kc = kdim - k0 < MLCC_GEMM_KC ? kdim - k0 : MLCC_GEMM_KC;
            const float *a = w + k0 * cpad + ch0 * kc;
            const float *bk = b + k0 * bs;
            /* the next channel panel's weights of this k block (kc x TCP floats right after
             * this panel's), this tile's share of their cache lines: fetched while the tiles
             * of this panel compute, so that the next panel's first tile does not wait for
             * memory at every k step (weights larger than the caches: ResNet-50's 7 x 7 and
             * 14 x 14 layers streamed each panel at memory speed in their first tile) */
            const ptrdiff_t pf_all = e->pf_tiles > 0 && c0 == 0 ? kc * TCP / MLCC_PF_FLOATS : 0;
            const ptrdiff_t pf_lo = e->pf_tiles > 0 ? pf_all * e->pf_tile / e->pf_tiles : 0;
            const ptrdiff_t pf_n = e->pf_tiles > 0
                                       ? pf_all * (e->pf_tile + 1) / e->pf_tiles - pf_lo : 0;
            const float *pf = a + kc * TCP + pf_lo * MLCC_PF_FLOATS;
            mlcc_vf acc[TRMAX][TCH / MLCC_VF_LANES];
            for (r = 0; r < R; r++)
                for (v = 0; v < nvec; v++) acc[r][v] = mlcc_vf_splat(0.0f);
            for (p = 0; p < kc; p++) {
                const float *bp = bk + p * bs;
                mlcc_vf wv[TCH / MLCC_VF_LANES];
                if (p < pf_n) MLCC_PREFETCH(pf + p * MLCC_PF_FLOATS);
                if (p + kc < pf_n) MLCC_PREFETCH(pf + (p + kc) * MLCC_PF_FLOATS);
                for (v = 0; v < nvec; v++)
                    wv[v] = mlcc_vf_load(a + p * TCP + c0 + v * MLCC_VF_LANES);
                for (r = 0; r < R; r++) {
                    const mlcc_vf xv = mlcc_vf_splat(bp[r]);
                    for (v = 0; v < nvec; v++) acc[r][v] += xv * wv[v];
                }
            }
            for (r = 0; r < R; r++)
                for (v = 0; v < nvec; v++) total[r][v] = k0 == 0 ? acc[r][v] : acc[r][v] + total[r][v];
        }
#if CONVT_TRANSPOSE_REGS
        if (transposed) {   /* a constant: e->res != NULL */
            convt_epilogue_t(R, nvec, c0, total, e, y0);
            continue;
        }
#endif
        for (r = 0; r < R; r++) {
            float res[TCH];
            if (e->res != NULL)
                for (j = 0; j < TCH; j++)
                    res[j] = c0 + j < e->nch ? e->res[(c0 + j) * e->spatial + y0 + r] : 0.0f;
            for (v = 0; v < nvec; v++) {
                mlcc_vf o = total[r][v];
                if (e->bias != NULL) o += mlcc_vf_load(e->bias + c0 + v * MLCC_VF_LANES);
                if (e->res != NULL) o += mlcc_vf_load(res + v * MLCC_VF_LANES);
                mlcc_vf_store(tile + r * TCP + c0 + v * MLCC_VF_LANES, mlcc_vf_act(e->act, o));
            }
        }
    }
#if CONVT_TRANSPOSE_REGS
    if (transposed) return;   /* written by convt_epilogue_t */
#else
    (void)transposed;
#endif
    for (j = 0; j < e->nch; j++) {
        float *yj = e->y + j * e->spatial + y0;
        for (r = 0; r < R; r++) yj[r] = tile[r * TCP + j];
    }
}

#if MLCC_VECTOR_BYTES >= 64
/* a constant R and nc per copy: the accumulators stay in registers (row tiles: R <= 8; flat
 * tiles: R <= 12, 24 of the 32 registers) */
#define CONVT_CASES(nc)                                                   \
    switch (R) {                                                          \
    case 8: convt_tile(8, nc, kc, a, b, off, out, pf, pf_n); break;       \
    case 7: convt_tile(7, nc, kc, a, b, off, out, pf, pf_n); break;       \
    case 6: convt_tile(6, nc, kc, a, b, off, out, pf, pf_n); break;       \
    case 5: convt_tile(5, nc, kc, a, b, off, out, pf, pf_n); break;       \
    default: convt_tile(R, nc, kc, a, b, off, out, pf, pf_n); break;      \
    }
#define CONVT_K_CASES(nc, tr)                                                  \
    switch (R) {                                                               \
    case 12: convt_tile_k(12, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;     \
    case 11: convt_tile_k(11, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;     \
    case 10: convt_tile_k(10, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;     \
    case 9: convt_tile_k(9, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;       \
    case 8: convt_tile_k(8, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;       \
    case 7: convt_tile_k(7, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;       \
    default: convt_tile_k(R, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr); break;      \
    }
#else
/* the kernel is chosen for 512-bit targets only (channel_tiles): elsewhere one copy, small */
#define CONVT_CASES(nc) convt_tile(R, nc, kc, a, b, off, out, pf, pf_n)
#define CONVT_K_CASES(nc, tr) convt_tile_k(R, nc, kdim, cpad, ch0, w, b, bs, e, y0, tr)
#endif
static void convt_tile_any(ptrdiff_t R, int half, ptrdiff_t kc, const float *a, const float *b,
                           const int32_t *off, float *out, const float *pf, ptrdiff_t pf_n) {
    if (half) {
        CONVT_CASES(TCP / 2);
    } else {
        CONVT_CASES(TCP);
    }
}
#if CONVT_TRANSPOSE_REGS
/* tiles with a residual: their own copies, in their own function (a branch inside the copies
 * cost the others 3%, a branch beside them 1-4%) */
__attribute__((noinline)) static void convt_tile_k_res(ptrdiff_t R, int half, ptrdiff_t kdim,
                                                       ptrdiff_t cpad, ptrdiff_t ch0,
                                                       const float *w, const float *b,
                                                       ptrdiff_t bs, const convt_epi *e,
                                                       ptrdiff_t y0) {
    if (half) {
        CONVT_K_CASES(TCP / 2, 1);
    } else {
        CONVT_K_CASES(TCP, 1);
    }
}
#endif
static void convt_tile_k_any(ptrdiff_t R, int half, ptrdiff_t kdim, ptrdiff_t cpad, ptrdiff_t ch0,
                             const float *w, const float *b, ptrdiff_t bs, const convt_epi *e,
                             ptrdiff_t y0) {
    if (half) {
        CONVT_K_CASES(TCP / 2, 0);
    } else {
        CONVT_K_CASES(TCP, 0);
    }
}
#else
static void convt_tile_any(ptrdiff_t R, int half, ptrdiff_t kc, const float *a, const float *b,
                           const int32_t *off, float *out, const float *pf, ptrdiff_t pf_n) {
    const ptrdiff_t nc = half ? TCP / 2 : TCP;
    ptrdiff_t p, r, j;
    (void)pf;
    (void)pf_n;
    for (r = 0; r < R; r++) {
        float *o = out + r * TCP;
        for (j = 0; j < nc; j++) o[j] = 0.0f;
        for (p = 0; p < kc; p++) {
            const float xv = b[off[p] + r];
            for (j = 0; j < nc; j++) o[j] += xv * a[p * TCP + j];
        }
        for (j = nc; j < TCP; j++) o[j] = 0.0f;
    }
}
typedef struct convt_epi {
    const float *bias, *res;
    const mlcc_act *act;
    float *y;
    ptrdiff_t spatial, nch, end;
    ptrdiff_t pf_tile, pf_tiles;   /* (no prefetch in the portable loops) */
} convt_epi;
static void convt_tile_k_any(ptrdiff_t R, int half, ptrdiff_t kdim, ptrdiff_t cpad, ptrdiff_t ch0,
                             const float *w, const float *b, ptrdiff_t bs, const convt_epi *e,
                             ptrdiff_t y0) {
    const ptrdiff_t nc = half ? TCP / 2 : TCP;
    float acc[TCP], out[TCP];
    ptrdiff_t k0, r, j, p;
    for (r = 0; r < R; r++) {
        for (k0 = 0; k0 < kdim; k0 += MLCC_GEMM_KC) {
            const ptrdiff_t kc = kdim - k0 < MLCC_GEMM_KC ? kdim - k0 : MLCC_GEMM_KC;
            for (j = 0; j < nc; j++) acc[j] = 0.0f;
            for (p = 0; p < kc; p++) {
                const float xv = b[(k0 + p) * bs + r];
                for (j = 0; j < nc; j++) acc[j] += xv * w[k0 * cpad + ch0 * kc + p * TCP + j];
            }
            for (j = 0; j < nc; j++) out[j] = k0 == 0 ? acc[j] : acc[j] + out[j];
        }
        for (j = 0; j < nc; j++) {
            if (e->bias != NULL) out[j] += e->bias[j];
            if (e->res != NULL && j < e->nch) out[j] += e->res[j * e->spatial + y0 + r];
        }
        mlcc_act_apply(e->act, out, nc);
        for (j = 0; j < e->nch; j++) e->y[j * e->spatial + y0 + r] = out[j];
    }
}
#endif

/* The tile's epilogue: partial sums (part: TCP per position) unless last; on the last k block
 * bias, residual and activation in the order of implicit_tile / packed_store_row, then the
 * tile transposed into y (nch channels of y, R positions from y0 of each plane). */
static void convt_store(ptrdiff_t R, float *tile, float *part, int first, int last,
                        const float *bias, const float *res, const mlcc_act *act, float *y,
                        ptrdiff_t spatial, ptrdiff_t y0, ptrdiff_t nch) {
    ptrdiff_t r, j;
    if (!first)
        for (j = 0; j < R * TCP; j++) tile[j] += part[j];
    if (!last) {
        memcpy(part, tile, (size_t)(R * TCP) * sizeof(float));
        return;
    }
    for (r = 0; r < R; r++) {
        float *t = tile + r * TCP;
        if (bias != NULL)
            for (j = 0; j < TCP; j++) t[j] += bias[j];
        if (res != NULL)
            for (j = 0; j < nch; j++) t[j] += res[j * spatial + y0 + r];
        mlcc_act_apply(act, t, TCP);
    }
    for (j = 0; j < nch; j++) {
        float *yj = y + j * spatial + y0;
        for (r = 0; r < R; r++) yj[r] = tile[r * TCP + j];
    }
}

typedef struct convt_job {
    const mlcc_conv2d_packed_params *pp;
    const float *w, *bias, *pad, *res;
    const int32_t *off;
    float *y, *part;
    ptrdiff_t gi, wq, cout_g, cpan, chunks, row_units, rows_per_block, part_floats;
    ptrdiff_t bstride;   /* flat: from one input channel's (sub-)plane to the next */
    int flat;
} convt_job;

/* Unit u: channel panel u % cpan, output rows of range u / cpan (of row_units). Each block of
 * rows is cut into tiles: per output row into `chunks` nearly equal runs (at most CONVT_RMAX),
 * or, when flat (kernel_w == 1: the virtual columns are the output positions, wq == out_w),
 * the block's positions as one run cut into nearly equal tiles of at most CONVT_FLAT_RMAX,
 * across rows (a 7 x 7 map: 5 tiles of 9-10 instead of 7 of 7). */
static void convt_task(void *arg, int u, int thread) {
    const convt_job *job = (const convt_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w, oh_n = (ptrdiff_t)p->out_h;
    const ptrdiff_t spatial = oh_n * ow_n;
    const ptrdiff_t kdim = (ptrdiff_t)(p->in_channels / p->groups * p->kernel_h * p->kernel_w);
    const ptrdiff_t cpad = job->cpan * TCP;
    const ptrdiff_t cp = u % job->cpan, ru = u / job->cpan;
    const ptrdiff_t h0 = oh_n * ru / job->row_units, h1 = oh_n * (ru + 1) / job->row_units;
    const ptrdiff_t ch0 = cp * TCP;
    const ptrdiff_t nch = job->cout_g - ch0 < TCP ? job->cout_g - ch0 : TCP;
    const int half = nch <= TCP / 2;   /* a last panel of at most half the channels */
    /* (no offset from a NULL part: flat tiles and one k block keep no partial sums) */
    float *part = job->part_floats > 0 ? job->part + thread * job->part_floats : job->part;
    float bias[TCP];
    float tile[MLCC_CONVT_RMAX * TCP];
    ptrdiff_t hb, k0, oh, c, j;
    for (j = 0; j < TCP; j++)
        bias[j] = job->bias != NULL && j < nch ? job->bias[job->gi * job->cout_g + ch0 + j] : 0.0f;
    if (job->flat) {   /* tiles across rows, each over the whole depth */
        const float *wg = job->w + job->gi * cpad * kdim;
        const ptrdiff_t s0 = h0 * ow_n, n = (h1 - h0) * ow_n;
        const ptrdiff_t tiles = (n + MLCC_CONVT_FLAT_RMAX - 1) / MLCC_CONVT_FLAT_RMAX;
        convt_epi e;
        e.bias = job->bias != NULL ? bias : NULL;
        e.res = job->res != NULL ? job->res + ch0 * spatial : NULL;
        e.act = &p->act;
        e.y = job->y + ch0 * spatial;
        e.spatial = spatial;
        e.nch = nch;
        e.end = s0 + n;
        e.pf_tiles = ch0 + TCP < cpad ? tiles : 0;
        for (c = 0; c < tiles; c++) {
            const ptrdiff_t y0 = s0 + n * c / tiles, y1 = s0 + n * (c + 1) / tiles;
            e.pf_tile = c;
#if CONVT_TRANSPOSE_REGS
            if (e.res != NULL) {
                convt_tile_k_res(y1 - y0, half, kdim, cpad, ch0, wg, job->pad + y0,
                                 job->bstride, &e, y0);
                continue;
            }
#endif
            convt_tile_k_any(y1 - y0, half, kdim, cpad, ch0, wg, job->pad + y0, job->bstride,
                             &e, y0);
        }
        return;
    }
    for (hb = h0; hb < h1; hb += job->rows_per_block) {   /* partial sums of rb rows */
        const ptrdiff_t he = h1 - hb < job->rows_per_block ? h1 : hb + job->rows_per_block;
        for (k0 = 0; k0 < kdim; k0 += MLCC_GEMM_KC) {
            const ptrdiff_t kc = kdim - k0 < MLCC_GEMM_KC ? kdim - k0 : MLCC_GEMM_KC;
            const int first = k0 == 0, last = k0 + kc == kdim;
            /* weights k-block-major: block k0 holds kc x cpad, panels of kc x TCP */
            const float *a = job->w + job->gi * cpad * kdim + k0 * cpad + ch0 * kc;
            const float *res = job->res != NULL ? job->res + ch0 * spatial : NULL;
            /* this panel's weights of the next k block (as in convt_tile_k), a share of their
             * cache lines per tile of this block */
            const ptrdiff_t next_kc = kdim - k0 - kc < MLCC_GEMM_KC ? kdim - k0 - kc : MLCC_GEMM_KC;
            const float *pf = job->w + job->gi * cpad * kdim + (k0 + kc) * cpad + ch0 * next_kc;
            const ptrdiff_t pf_all = last ? 0 : next_kc * TCP / MLCC_PF_FLOATS;
            const ptrdiff_t tiles = (he - hb) * job->chunks;
            for (oh = hb; oh < he; oh++) {
                for (c = 0; c < job->chunks; c++) {
                    const ptrdiff_t w0 = ow_n * c / job->chunks;
                    const ptrdiff_t w1 = ow_n * (c + 1) / job->chunks;
                    const ptrdiff_t y0 = oh * ow_n + w0;
                    const ptrdiff_t t = (oh - hb) * job->chunks + c;
                    const ptrdiff_t pf_lo = pf_all * t / tiles;
                    convt_tile_any(w1 - w0, half, kc, a, job->pad + oh * job->wq + w0,
                                   job->off + k0, tile, pf + pf_lo * MLCC_PF_FLOATS,
                                   pf_all * (t + 1) / tiles - pf_lo);
                    convt_store(w1 - w0, tile, part + (y0 - hb * ow_n) * TCP, first, last,
                                job->bias != NULL ? bias : NULL, res, &p->act,
                                job->y + ch0 * spatial, spatial, y0, nch);
                }
            }
        }
    }
}

static void conv_implicit_t(const mlcc_conv2d_packed_params *pp, const float *x, const float *w,
                            const float *bias, const int32_t *offsets, const float *residual,
                            float *y, float *scratch, mlcc_threadpool *pool) {
    const mlcc_conv2d_params *p = &pp->conv;
    ptrdiff_t cin_g, cout_g, cout_pad, kdim, spatial, in_plane, nt, n, units;
    convt_job job;
    /* 1x1, stride 1, no padding: the tiles read their R inputs from one input row */
    const int direct = p->kernel_h == 1 && p->kernel_w == 1 && p->stride_h == 1 &&
                       p->stride_w == 1 && p->in_h == p->out_h && p->in_w == p->out_w;
    conv_packed_geometry(p, &cin_g, &cout_g, &cout_pad, &kdim, &spatial, &in_plane);
    job.pp = pp;
    job.w = w;
    job.bias = bias;
    job.off = implicit_offsets(p, offsets, 0, &scratch);
    job.pad = scratch;
    job.wq = mlcc_implicit_sub_w(p);
    job.flat = p->kernel_h == 1 && p->kernel_w == 1;
    job.bstride = direct ? in_plane : (ptrdiff_t)(p->stride_h * p->stride_w) * spatial;
    job.cout_g = cout_g;
    job.cpan = (cout_g + TCP - 1) / TCP;
    job.chunks = ((ptrdiff_t)p->out_w + MLCC_CONVT_RMAX - 1) / MLCC_CONVT_RMAX;
    job.part = scratch + (direct ? 0 : mlcc_implicit_pad_floats(p));
    job.rows_per_block = mlcc_convt_block_rows(p);
    job.part_floats = kdim <= MLCC_GEMM_KC || job.flat ? 0
                      : job.rows_per_block * (ptrdiff_t)p->out_w * TCP;
    nt = mlcc_threadpool_size(pool);
    if (nt > MLCC_IMPLICIT_SLICES) nt = MLCC_IMPLICIT_SLICES;
    if ((double)cout_g * (double)spatial * (double)kdim * (double)p->batch * (double)p->groups <
        (double)MLCC_MIN_PARALLEL_MACS)
        nt = 1, pool = NULL;
    /* units: channel panels; rows of the output too when panels are few */
    job.row_units = 1;
    if (nt > 1 && job.cpan < MLCC_CONV_UNITS_PER_THREAD * nt) {
        job.row_units = (MLCC_CONV_UNITS_PER_THREAD * nt + job.cpan - 1) / job.cpan;
        if (job.row_units > (ptrdiff_t)p->out_h) job.row_units = (ptrdiff_t)p->out_h;
    }
    units = nt == 1 ? 1 : job.cpan * job.row_units;
    for (n = 0; n < p->batch; n++) {
        for (job.gi = 0; job.gi < (ptrdiff_t)p->groups; job.gi++) {
            const ptrdiff_t yo = (n * (ptrdiff_t)p->out_channels + job.gi * cout_g) * spatial;
            const float *xg = x + (n * (ptrdiff_t)p->in_channels + job.gi * cin_g) * in_plane;
            if (direct)   /* the input planes are the sub-planes: read in place */
                job.pad = xg;
            else
                implicit_fill(p, xg, cin_g, mlcc_implicit_sub_h(p), job.wq, scratch, pool,
                              job.flat);
            job.y = y + yo;
            job.res = residual != NULL ? residual + yo : NULL;
            if (units == 1) {
                ptrdiff_t u;
                for (u = 0; u < job.cpan; u++) convt_task(&job, (int)u, 0);
            } else {
                image_loop(p, n, job.gi, pool, convt_task, &job, sizeof job, units, nt);
            }
        }
    }
}

void mlcc_f32_conv2d__implicit_t(const mlcc_conv2d_packed_params *pp, const float *x,
                                 const float *w, const float *bias, const int32_t *offsets,
                                 float *y, float *scratch, mlcc_threadpool *pool) {
    conv_implicit_t(pp, x, w, bias, offsets, NULL, y, scratch, pool);
}

void mlcc_f32_conv2d_residual__implicit_t(const mlcc_conv2d_packed_params *pp, const float *x,
                                          const float *w, const float *bias,
                                          const int32_t *offsets, const float *residual,
                                          float *y, float *scratch, mlcc_threadpool *pool) {
    conv_implicit_t(pp, x, w, bias, offsets, residual, y, scratch, pool);
}

void mlcc_f32_conv2d__frames(const mlcc_conv2d_frames_params *p, const float *x,
                             const float *w_panels, const float *bias, float *y, float *scratch,
                             mlcc_threadpool *pool) {
    const ptrdiff_t positions = (ptrdiff_t)p->gemm.m, channels = (ptrdiff_t)p->gemm.n;
    ptrdiff_t n, c, q;
    for (n = 0; n < (ptrdiff_t)p->batch; n++) {
        float *yn = y + n * channels * positions;
        mlcc_f32_gemm__panels_threaded(&p->gemm, x + n * (ptrdiff_t)p->image_floats, w_panels,
                                       bias, scratch, pool);
        for (c = 0; c < channels; c++)
            for (q = 0; q < positions; q++) yn[c * positions + q] = scratch[q * channels + c];
    }
}
