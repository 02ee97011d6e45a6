#include "winograd.h"

#include "gemm.h"

typedef struct winograd_job {
    const mlcc_conv2d_packed_params *pp;
    const float *x, *u, *bias;
    float *y, *v, *m, *rows;
    ptrdiff_t n, t0, nb, units;
} winograd_job;

/* Units of a phase: ranges of channels (or of the 16 products), at most 4 per thread. */
static ptrdiff_t phase_units(ptrdiff_t items, ptrdiff_t nt) {
    return nt == 1 ? 1 : items < 4 * nt ? items : 4 * nt;
}

/* Up to this many threads share a convolution: each has its own row buffers in scratch. */
#define WINOGRAD_SLICES MLCC_WINOGRAD_SLICES

/* The four input rows of tile row ty, zero-padded and split by column parity: row i of the
 * tiles' 4x4 patches is even[i][tx], odd[i][tx], even[i][tx + 1], odd[i][tx + 1] (columns
 * 2 tx .. 2 tx + 3 of the padded input), so that consecutive tiles read consecutive floats. */
static void fill_rows(const mlcc_conv2d_params *p, const float *xc, ptrdiff_t ty, float *buf) {
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t tw = ((ptrdiff_t)p->out_w + 1) / 2, pl = (ptrdiff_t)p->pad_left;
    int i;
    for (i = 0; i < 4; i++) {
        const ptrdiff_t yy = 2 * ty - (ptrdiff_t)p->pad_top + i;
        float *even = buf + 2 * i * (tw + 1), *odd = even + tw + 1;
        ptrdiff_t k;
        if (yy < 0 || yy >= ih) {
            for (k = 0; k <= tw; k++) even[k] = odd[k] = 0.0f;
            continue;
        }
        k = 0;
        for (; k <= tw && 2 * k - pl < 0; k++) {
            const ptrdiff_t x0 = 2 * k - pl, x1 = x0 + 1;
            even[k] = x0 >= 0 && x0 < iw ? xc[yy * iw + x0] : 0.0f;
            odd[k] = x1 >= 0 && x1 < iw ? xc[yy * iw + x1] : 0.0f;
        }
#if MLCC_HAVE_VECTORS && MLCC_VECTOR_BYTES == 16
        for (; k + 4 <= tw + 1 && 2 * k - pl + 8 <= iw; k += 4) {   /* inside: by shuffles */
            const float *src = xc + yy * iw + 2 * k - pl;
            const mlcc_vf v0 = mlcc_vf_load(src), v1 = mlcc_vf_load(src + 4);
            mlcc_vf_store(even + k, __builtin_shufflevector(v0, v1, 0, 2, 4, 6));
            mlcc_vf_store(odd + k, __builtin_shufflevector(v0, v1, 1, 3, 5, 7));
        }
#endif
        for (; k <= tw; k++) {
            const ptrdiff_t x0 = 2 * k - pl, x1 = x0 + 1;
            even[k] = x0 >= 0 && x0 < iw ? xc[yy * iw + x0] : 0.0f;
            odd[k] = x1 >= 0 && x1 < iw ? xc[yy * iw + x1] : 0.0f;
        }
    }
}

/* V = B^T d B of every tile of the block, for channels [c0, c1), written as the 16 GEMMs' B
 * panels: product e's panels start at v + e * in_channels * block; tile tl of the block is
 * column tl % NR of panel tl / NR. */
static void input_transform(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cin = (ptrdiff_t)p->in_channels, tw = ((ptrdiff_t)p->out_w + 1) / 2;
    const ptrdiff_t plane = cin * (ptrdiff_t)job->pp->block_cols;
    const ptrdiff_t c0 = cin * unit / job->units, c1 = cin * (unit + 1) / job->units;
    float *buf = job->rows + thread * 8 * (tw + 1);
    ptrdiff_t c, tl;
    for (c = c0; c < c1; c++) {
        const float *xc = job->x + (job->n * cin + c) * (ptrdiff_t)(p->in_h * p->in_w);
        float *vc = job->v + c * MLCC_GEMM_NR;
        ptrdiff_t ty = job->t0 / tw, tx = job->t0 % tw;
        tl = 0;
        while (tl < job->nb) {
            /* the block's tiles in tile row ty: [tx, txe) */
            const ptrdiff_t txe = tw - tx < job->nb - tl ? tw : tx + (job->nb - tl);
            const float *r0, *r1, *r2, *r3;
            fill_rows(p, xc, ty, buf);
            r0 = buf, r1 = buf + 2 * (tw + 1), r2 = buf + 4 * (tw + 1), r3 = buf + 6 * (tw + 1);
#if MLCC_HAVE_VECTORS
            for (; tx + MLCC_VF_LANES <= txe; tx += MLCC_VF_LANES, tl += MLCC_VF_LANES) {
                const ptrdiff_t o = tw + 1;
                float *vo = vc + (tl / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR + tl % MLCC_GEMM_NR;
                mlcc_vf d[4][4], r[4][4], v[16];
                const float *rows[4];
                int i, j;
                rows[0] = r0, rows[1] = r1, rows[2] = r2, rows[3] = r3;
                for (i = 0; i < 4; i++) {
                    d[i][0] = mlcc_vf_load(rows[i] + tx);
                    d[i][1] = mlcc_vf_load(rows[i] + o + tx);
                    d[i][2] = mlcc_vf_load(rows[i] + tx + 1);
                    d[i][3] = mlcc_vf_load(rows[i] + o + tx + 1);
                }
                for (j = 0; j < 4; j++) {
                    r[0][j] = d[0][j] - d[2][j];
                    r[1][j] = d[1][j] + d[2][j];
                    r[2][j] = d[2][j] - d[1][j];
                    r[3][j] = d[1][j] - d[3][j];
                }
                for (i = 0; i < 4; i++) {
                    v[4 * i + 0] = r[i][0] - r[i][2];
                    v[4 * i + 1] = r[i][1] + r[i][2];
                    v[4 * i + 2] = r[i][2] - r[i][1];
                    v[4 * i + 3] = r[i][1] - r[i][3];
                }
                if (tl % MLCC_GEMM_NR + MLCC_VF_LANES <= MLCC_GEMM_NR) {
                    for (i = 0; i < 16; i++) mlcc_vf_store(vo + i * plane, v[i]);
                } else {   /* the tiles straddle two panels */
                    ptrdiff_t l;
                    for (l = 0; l < MLCC_VF_LANES; l++) {
                        float *vl = vc + ((tl + l) / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR +
                                    (tl + l) % MLCC_GEMM_NR;
                        for (i = 0; i < 16; i++) vl[i * plane] = v[i][l];
                    }
                }
            }
#endif
            for (; tx < txe; tx++, tl++) {
                const ptrdiff_t o = tw + 1;
                float *vo = vc + (tl / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR + tl % MLCC_GEMM_NR;
                float d[4][4], r[4][4];
                const float *rows[4];
                int i, j;
                rows[0] = r0, rows[1] = r1, rows[2] = r2, rows[3] = r3;
                for (i = 0; i < 4; i++) {
                    d[i][0] = rows[i][tx];
                    d[i][1] = rows[i][o + tx];
                    d[i][2] = rows[i][tx + 1];
                    d[i][3] = rows[i][o + tx + 1];
                }
                for (j = 0; j < 4; j++) {   /* B^T d: rows */
                    r[0][j] = d[0][j] - d[2][j];
                    r[1][j] = d[1][j] + d[2][j];
                    r[2][j] = d[2][j] - d[1][j];
                    r[3][j] = d[1][j] - d[3][j];
                }
                for (i = 0; i < 4; i++) {   /* (B^T d) B: columns */
                    vo[(4 * i + 0) * plane] = r[i][0] - r[i][2];
                    vo[(4 * i + 1) * plane] = r[i][1] + r[i][2];
                    vo[(4 * i + 2) * plane] = r[i][2] - r[i][1];
                    vo[(4 * i + 3) * plane] = r[i][1] - r[i][3];
                }
            }
            if (tx == tw) tx = 0, ty++;
        }
        /* the last panel's columns past the block: zeros, so that nothing undefined is read */
        for (tl = job->nb; tl % MLCC_GEMM_NR; tl++) {
            int e;
            for (e = 0; e < 16; e++)
                vc[e * plane + (tl / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR + tl % MLCC_GEMM_NR] =
                    0.0f;
        }
    }
}

/* M_e = U_e V_e for products e in this unit's range. */
static void products(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cin = (ptrdiff_t)p->in_channels, cout = (ptrdiff_t)p->out_channels;
    const ptrdiff_t cout_pad = (cout + MLCC_GEMM_MR - 1) / MLCC_GEMM_MR * MLCC_GEMM_MR;
    const ptrdiff_t block = (ptrdiff_t)job->pp->block_cols;
    const ptrdiff_t e0 = 16 * unit / job->units, e1 = 16 * (unit + 1) / job->units;
    const mlcc_act none = {MLCC_ACT_NONE, 0.0f, 0.0f};
    ptrdiff_t e;
    (void)thread;
    for (e = e0; e < e1; e++)
        mlcc_f32_gemm_packed(cout, job->nb, cin, job->u + e * cout_pad * cin, cout_pad, 0,
                             job->v + e * cin * block, NULL, &none, job->m + e * cout * block,
                             block);
}

/* Y = A^T M A + bias of every tile of the block, for output channels [k0, k1). */
static void output_transform(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cout = (ptrdiff_t)p->out_channels, oh = (ptrdiff_t)p->out_h;
    const ptrdiff_t ow = (ptrdiff_t)p->out_w, tw = (ow + 1) / 2;
    const ptrdiff_t plane = cout * (ptrdiff_t)job->pp->block_cols;
    const ptrdiff_t k0 = cout * unit / job->units, k1 = cout * (unit + 1) / job->units;
    ptrdiff_t k, tl;
    (void)thread;
    for (k = k0; k < k1; k++) {
        float *yk = job->y + (job->n * cout + k) * oh * ow;
        const float *mk = job->m + k * (ptrdiff_t)job->pp->block_cols;
        const float b = job->bias ? job->bias[k] : 0.0f;
        ptrdiff_t ty = job->t0 / tw, tx = job->t0 % tw;
        tl = 0;
        while (tl < job->nb) {
            const ptrdiff_t txe = tw - tx < job->nb - tl ? tw : tx + (job->nb - tl);
            const ptrdiff_t y0 = 2 * ty;
#if MLCC_HAVE_VECTORS && MLCC_VECTOR_BYTES == 16
            /* four tiles at once where their 2 x 8 outputs are all inside: the rows of the
             * 2x2 results interleaved into two runs of 8 floats */
            for (; y0 + 1 < oh && tx + 4 <= txe && 2 * tx + 8 <= ow; tx += 4, tl += 4) {
                const mlcc_vf vb = mlcc_vf_splat(b);
                mlcc_vf sv[2][4], o[2][2];
                int j;
                for (j = 0; j < 4; j++) {
                    const mlcc_vf m0 = mlcc_vf_load(mk + (0 + j) * plane + tl);
                    const mlcc_vf m1 = mlcc_vf_load(mk + (4 + j) * plane + tl);
                    const mlcc_vf m2 = mlcc_vf_load(mk + (8 + j) * plane + tl);
                    const mlcc_vf m3 = mlcc_vf_load(mk + (12 + j) * plane + tl);
                    sv[0][j] = m0 + m1 + m2;
                    sv[1][j] = m1 - m2 - m3;
                }
                for (j = 0; j < 2; j++) {
                    float *yr = yk + (y0 + j) * ow + 2 * tx;
                    o[j][0] = sv[j][0] + sv[j][1] + sv[j][2] + vb;
                    o[j][1] = sv[j][1] - sv[j][2] - sv[j][3] + vb;
                    mlcc_vf_store(yr, __builtin_shufflevector(o[j][0], o[j][1], 0, 4, 1, 5));
                    mlcc_vf_store(yr + 4, __builtin_shufflevector(o[j][0], o[j][1], 2, 6, 3, 7));
                }
            }
#endif
            for (; tx < txe; tx++, tl++) {
                float sc[2][4], o[2][2];
                const ptrdiff_t x0 = 2 * tx;
                int j;
                for (j = 0; j < 4; j++) {   /* A^T M: rows */
                    const float m0 = mk[(0 + j) * plane + tl], m1 = mk[(4 + j) * plane + tl];
                    const float m2 = mk[(8 + j) * plane + tl], m3 = mk[(12 + j) * plane + tl];
                    sc[0][j] = m0 + m1 + m2;
                    sc[1][j] = m1 - m2 - m3;
                }
                for (j = 0; j < 2; j++) {   /* (A^T M) A: columns, then the bias */
                    o[j][0] = sc[j][0] + sc[j][1] + sc[j][2] + b;
                    o[j][1] = sc[j][1] - sc[j][2] - sc[j][3] + b;
                }
                yk[y0 * ow + x0] = o[0][0];
                if (x0 + 1 < ow) yk[y0 * ow + x0 + 1] = o[0][1];
                if (y0 + 1 < oh) {
                    yk[(y0 + 1) * ow + x0] = o[1][0];
                    if (x0 + 1 < ow) yk[(y0 + 1) * ow + x0 + 1] = o[1][1];
                }
            }
            if (tx == tw) tx = 0, ty++;
        }
    }
}

/* The activation over whole output planes, once all blocks are written. */
static void activate(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cout = (ptrdiff_t)p->out_channels, hw = (ptrdiff_t)(p->out_h * p->out_w);
    const ptrdiff_t k0 = cout * unit / job->units, k1 = cout * (unit + 1) / job->units;
    (void)thread;
    mlcc_act_apply(&p->act, job->y + (job->n * cout + k0) * hw, (k1 - k0) * hw);
}

void mlcc_f32_conv2d_winograd(const mlcc_conv2d_packed_params *pp, const float *x,
                              const float *u, const float *bias, float *y, float *scratch,
                              mlcc_threadpool *pool) {
    const mlcc_conv2d_params *p = &pp->conv;
    const ptrdiff_t tiles = ((ptrdiff_t)p->out_h + 1) / 2 * (((ptrdiff_t)p->out_w + 1) / 2);
    const ptrdiff_t block = (ptrdiff_t)pp->block_cols;
    ptrdiff_t nt = mlcc_threadpool_size(pool);
    winograd_job job;
    if ((double)p->out_channels * (double)p->in_channels * 16.0 * (double)tiles <
        (double)MLCC_MIN_PARALLEL_MACS)
        nt = 1, pool = NULL;
    job.pp = pp;
    job.x = x;
    job.u = u;
    job.bias = bias;
    job.y = y;
    job.v = scratch;
    job.m = scratch + 16 * (ptrdiff_t)p->in_channels * block;
    job.rows = job.m + 16 * (ptrdiff_t)p->out_channels * block;
    if (nt > WINOGRAD_SLICES) nt = WINOGRAD_SLICES;
    for (job.n = 0; job.n < p->batch; job.n++) {
        for (job.t0 = 0; job.t0 < tiles; job.t0 += block) {
            job.nb = tiles - job.t0 < block ? tiles - job.t0 : block;
            job.units = phase_units((ptrdiff_t)p->in_channels, nt);
            mlcc_threadpool_for(pool, input_transform, &job, (int)job.units, (int)nt);
            job.units = phase_units(16, nt);
            mlcc_threadpool_for(pool, products, &job, (int)job.units, (int)nt);
            job.units = phase_units((ptrdiff_t)p->out_channels, nt);
            mlcc_threadpool_for(pool, output_transform, &job, (int)job.units, (int)nt);
        }
        if (p->act.kind != MLCC_ACT_NONE) {
            job.units = phase_units((ptrdiff_t)p->out_channels, nt);
            mlcc_threadpool_for(pool, activate, &job, (int)job.units, (int)nt);
        }
    }
}
