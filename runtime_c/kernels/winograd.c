#include "winograd.h"

#include "gemm.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#if MLCC_HAVE_VECTORS
/* Four floats: the row splits and the output transforms' transposes work on vectors of four
 * tiles whatever the target's vector width (wasm, SSE2 and NEON: its own vectors; AVX2 and
 * AVX-512: their 128-bit halves, instead of the scalar loops these blocks had there). */
typedef float wino_v4 __attribute__((vector_size(16)));
static inline wino_v4 wino_v4_load(const float *p) {
    wino_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void wino_v4_store(float *p, wino_v4 v) { memcpy(p, &v, sizeof v); }
static inline wino_v4 wino_v4_splat(float x) { return x - (wino_v4){0}; }

/* Lanes [l0, l1) of v stored at p + l0 .. p + l1 - 1, the others not written. */
static inline void store_lanes(float *p, mlcc_vf v, ptrdiff_t l0, ptrdiff_t l1) {
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
    _mm512_mask_storeu_ps(p, (__mmask16)(((1u << l1) - 1u) & ~((1u << l0) - 1u)), (__m512)v);
#else
    ptrdiff_t l;
    for (l = l0; l < l1; l++) p[l] = v[l];
#endif
}

/* The first nl lanes of the count vectors v (block tiles tl .. tl + nl - 1, nl <= NR) into
 * their panels: a partial vector of tiles, or one that straddles two panels (lanes from
 * NR - tl % NR on go to the next panel's first columns). On AVX-512, two masked stores per
 * vector; 36 x 16 scalar stores were 30% of input_transform_4x4's time on YOLOv8n, whose tile
 * rows of 20, 10 and 5 tiles leave most vectors off the 32-column panels. */
static void store_tiles(float *vc, ptrdiff_t tl, ptrdiff_t nl, ptrdiff_t cin, ptrdiff_t plane,
                        const mlcc_vf *v, int count) {
    const ptrdiff_t a = MLCC_GEMM_NR - tl % MLCC_GEMM_NR;   /* lanes left in this panel */
    float *vo = vc + (tl / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR + tl % MLCC_GEMM_NR;
    int i;
    for (i = 0; i < count; i++) store_lanes(vo + i * plane, v[i], 0, nl < a ? nl : a);
    if (nl > a) {   /* lane l >= a: column l - a of the next panel */
        float *next = vc + (tl / MLCC_GEMM_NR + 1) * cin * MLCC_GEMM_NR - a;
        for (i = 0; i < count; i++) store_lanes(next + i * plane, v[i], a, nl);
    }
}
#endif

/* The last B panel's columns past the block's nb tiles, in the count products' panels of one
 * channel (vc: its row of the first panel): zeros, so that the GEMM, which computes whole
 * panels, reads nothing undefined. Product by product, each row's columns contiguous: a block
 * of 2 tiles after whole panels (a thread's share of ResNet-18's 196 tiles, 98, in steps of
 * 32) wrote 30 x 36 scalar zeros per channel a product apart, and the step's input transform
 * took as long as a step of 32 tiles. */
static void zero_past_block(float *vc, ptrdiff_t nb, ptrdiff_t cin, ptrdiff_t plane, int count) {
    const ptrdiff_t z0 = nb % MLCC_GEMM_NR;
    float *row = vc + nb / MLCC_GEMM_NR * cin * MLCC_GEMM_NR;
    int e;
    if (z0 == 0) return;
    for (e = 0; e < count; e++, row += plane) {
#if MLCC_HAVE_VECTORS
        const mlcc_vf zero = mlcc_vf_splat(0.0f);
        ptrdiff_t l;
        for (l = z0 / MLCC_VF_LANES * MLCC_VF_LANES; l < MLCC_GEMM_NR; l += MLCC_VF_LANES)
            store_lanes(row + l, zero, l < z0 ? z0 - l : 0, MLCC_VF_LANES);
#else
        ptrdiff_t l;
        for (l = z0; l < MLCC_GEMM_NR; l++) row[l] = 0.0f;
#endif
    }
}

typedef struct winograd_job {
    const mlcc_conv2d_packed_params *pp;
    const float *x, *u, *bias;
    float *y, *v, *m, *rows;
    ptrdiff_t n, t0, nb, units;
    ptrdiff_t tiles, chunk;     /* thread_range: the image's tiles, tiles per step of a thread */
    ptrdiff_t ne;   /* products: 16 for F(2x2, 3x3), 36 for F(4x4, 3x3) */
    ptrdiff_t vplane, mplane;   /* floats from one product's operand (V), result (M) to the next */
    mlcc_unit_fn in_fn, out_fn; /* the tile size's transforms */
    /* thread_range: whether the last partial panel of tiles is shared by output channels
     * (split_tail); its sub-jobs' output channels [k0, k1) for products and output transform
     * (k1 = 0: the unit's share of all of them) */
    int split_tail;
    ptrdiff_t k0, k1;
} winograd_job;

/* Output channels [*k0, *k1) of unit `unit` of a phase: the sub-job's own range if it has one. */
static void channel_range(const winograd_job *job, int unit, ptrdiff_t *k0, ptrdiff_t *k1) {
    const ptrdiff_t cout = (ptrdiff_t)job->pp->conv.out_channels;
    *k0 = job->k1 ? job->k0 : cout * unit / job->units;
    *k1 = job->k1 ? job->k1 : cout * (unit + 1) / job->units;
}

/* Units of a phase: ranges of channels (or of the 16 products), at most 4 per thread. */
static ptrdiff_t phase_units(ptrdiff_t items, ptrdiff_t nt) {
    return nt == 1 ? 1 : items < 4 * nt ? items : 4 * nt;
}

/* Up to this many threads share a convolution: each has its own row buffers in scratch. */
#define WINOGRAD_SLICES MLCC_WINOGRAD_SLICES

/* Floats per column phase of a row buffer: the tw + 1 columns a row of tw tiles reads, and
 * zeros up to tw + MLCC_WINOGRAD_ROW_SLACK, so that a vector of tiles starting at any tile of
 * the row reads inside the buffer (its lanes past the row are computed and not stored). */
#define ROW_STRIDE(tw) ((tw) + MLCC_WINOGRAD_ROW_SLACK)

/* The four input rows of tile row ty, zero-padded and split by column parity: row i of the
 * tiles' 4x4 patches is even[i][tx], odd[i][tx], even[i][tx + 1], odd[i][tx + 1] (columns
 * 2 tx .. 2 tx + 3 of the padded input), so that consecutive tiles read consecutive floats. */
static void fill_rows(const mlcc_conv2d_params *p, const float *xc, ptrdiff_t ty, float *buf) {
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t tw = ((ptrdiff_t)p->out_w + 1) / 2, pl = (ptrdiff_t)p->pad_left;
    int i;
    for (i = 0; i < 4; i++) {
        const ptrdiff_t yy = 2 * ty - (ptrdiff_t)p->pad_top + i;
        float *even = buf + 2 * i * ROW_STRIDE(tw), *odd = even + ROW_STRIDE(tw);
        ptrdiff_t k;
        for (k = tw + 1; k < ROW_STRIDE(tw); k++) even[k] = odd[k] = 0.0f;
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
#if MLCC_HAVE_VECTORS
        for (; k + 4 <= tw + 1 && 2 * k - pl + 8 <= iw; k += 4) {   /* inside: by shuffles */
            const float *src = xc + yy * iw + 2 * k - pl;
            const wino_v4 v0 = wino_v4_load(src), v1 = wino_v4_load(src + 4);
            wino_v4_store(even + k, __builtin_shufflevector(v0, v1, 0, 2, 4, 6));
            wino_v4_store(odd + k, __builtin_shufflevector(v0, v1, 1, 3, 5, 7));
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
 * panels: product e's panels start at v + e * vplane; tile tl of the block is
 * column tl % NR of panel tl / NR. */
static void input_transform(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cin = (ptrdiff_t)p->in_channels, tw = ((ptrdiff_t)p->out_w + 1) / 2;
    const ptrdiff_t plane = job->vplane;
    const ptrdiff_t c0 = cin * unit / job->units, c1 = cin * (unit + 1) / job->units;
    float *buf = job->rows + thread * mlcc_winograd_rows_floats(8, tw);
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
            r0 = buf, r1 = buf + 2 * ROW_STRIDE(tw), r2 = buf + 4 * ROW_STRIDE(tw);
            r3 = buf + 6 * ROW_STRIDE(tw);
#if MLCC_HAVE_VECTORS
            /* vectors of tiles; the row's last one may be partial (lanes past it not stored) */
            for (; tx < txe; tx += MLCC_VF_LANES, tl += MLCC_VF_LANES) {
                const ptrdiff_t o = ROW_STRIDE(tw);
                const ptrdiff_t nl = txe - tx < MLCC_VF_LANES ? txe - tx : MLCC_VF_LANES;
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
                if (nl == MLCC_VF_LANES && tl % MLCC_GEMM_NR + MLCC_VF_LANES <= MLCC_GEMM_NR) {
                    for (i = 0; i < 16; i++) mlcc_vf_store(vo + i * plane, v[i]);
                } else {   /* a partial vector, or tiles that straddle two panels */
                    store_tiles(vc, tl, nl, cin, plane, v, 16);
                }
                if (nl < MLCC_VF_LANES) tx -= MLCC_VF_LANES - nl, tl -= MLCC_VF_LANES - nl;
            }
#endif
            for (; tx < txe; tx++, tl++) {
                const ptrdiff_t o = ROW_STRIDE(tw);
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
        zero_past_block(vc, job->nb, cin, plane, 16);
    }
}

/* M_e = U_e V_e for products e in this unit's range. */
static void products(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cin = (ptrdiff_t)p->in_channels, cout = (ptrdiff_t)p->out_channels;
    const ptrdiff_t cout_pad = (cout + MLCC_GEMM_MR - 1) / MLCC_GEMM_MR * MLCC_GEMM_MR;
    const ptrdiff_t block = (ptrdiff_t)job->pp->block_cols;
    const ptrdiff_t e0 = job->ne * unit / job->units, e1 = job->ne * (unit + 1) / job->units;
    /* a sub-job's output channels (from a multiple of MLCC_GEMM_MR: whole A panels), else all */
    const ptrdiff_t k0 = job->k1 ? job->k0 : 0, k1 = job->k1 ? job->k1 : cout;
    const mlcc_act none = {MLCC_ACT_NONE, 0.0f, 0.0f};
    ptrdiff_t e;
    (void)thread;
    for (e = e0; e < e1; e++)
        mlcc_f32_gemm__packed(k1 - k0, job->nb, cin, job->u + e * cout_pad * cin, cout_pad, k0,
                              job->v + e * job->vplane, NULL, &none,
                              job->m + e * job->mplane + k0 * block, block);
}

/* Whether the output transforms apply the activation to each block's rows as they write them
 * (the kinds without exponentials: a few operations per element, cheap on short rows), or
 * one pass over whole planes after the last block does (sigmoid, SiLU, tanh, GELU: on
 * the rows of a block, often 20 to 80 wide, their vector code's padded tails and setup cost
 * YOLOv8n's SiLU layers 1.2x their time on one thread). */
static int act_per_block(const mlcc_act *act) {
    switch (act->kind) {
    case MLCC_ACT_RELU: case MLCC_ACT_CLIP: case MLCC_ACT_LEAKY_RELU: case MLCC_ACT_HARD_SIGMOID:
    case MLCC_ACT_HARD_SWISH:
        return 1;
    default:
        return 0;
    }
}

/* The activation over whole output planes once every block is written (the kinds that
 * act_per_block leaves), split by output channels. */
static void activate_planes(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cout = (ptrdiff_t)p->out_channels, hw = (ptrdiff_t)(p->out_h * p->out_w);
    const ptrdiff_t k0 = cout * unit / job->units, k1 = cout * (unit + 1) / job->units;
    (void)thread;
    mlcc_act_apply(&p->act, job->y + (job->n * cout + k0) * hw, (k1 - k0) * hw);
}

/* The activation of the outputs a block's tiles [t0, t0 + nb) wrote in one output plane yk
 * (tile x tile squares, tw to a row, clipped at the edges), row segment by row segment, right
 * after the output transform wrote them: while they are in this thread's cache, and with no
 * pass of its own (which split by channels read half of every plane from the other thread's
 * cache, behind one more barrier). mlcc_act_apply is elementwise, whatever the segments: the
 * same bits as one call over the plane. */
static void activate_tiles(const mlcc_act *act, float *yk, ptrdiff_t oh, ptrdiff_t ow,
                           ptrdiff_t tile, ptrdiff_t t0, ptrdiff_t nb) {
    const ptrdiff_t tw = (ow + tile - 1) / tile, last = t0 + nb - 1;
    ptrdiff_t ty, r;
    if (!act_per_block(act) || nb <= 0) return;
    for (ty = t0 / tw; ty <= last / tw; ty++) {
        const ptrdiff_t x0 = ty == t0 / tw ? t0 % tw * tile : 0;
        const ptrdiff_t x1 = ty == last / tw && (last % tw + 1) * tile < ow
                                 ? (last % tw + 1) * tile : ow;
        for (r = ty * tile; r < ty * tile + tile && r < oh; r++)
            mlcc_act_apply(act, yk + r * ow + x0, x1 - x0);
    }
}

/* Y = A^T M A + bias of every tile of the block, for output channels [k0, k1), then the
 * activation. */
static void output_transform(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cout = (ptrdiff_t)p->out_channels, oh = (ptrdiff_t)p->out_h;
    const ptrdiff_t ow = (ptrdiff_t)p->out_w, tw = (ow + 1) / 2;
    const ptrdiff_t plane = job->mplane;
    ptrdiff_t k0, k1, k, tl;
    (void)thread;
    channel_range(job, unit, &k0, &k1);
    for (k = k0; k < k1; k++) {
        float *yk = job->y + (job->n * cout + k) * oh * ow;
        const float *mk = job->m + k * (ptrdiff_t)job->pp->block_cols;
        const float b = job->bias ? job->bias[k] : 0.0f;
        ptrdiff_t ty = job->t0 / tw, tx = job->t0 % tw;
        tl = 0;
        while (tl < job->nb) {
            const ptrdiff_t txe = tw - tx < job->nb - tl ? tw : tx + (job->nb - tl);
            const ptrdiff_t y0 = 2 * ty;
#if MLCC_HAVE_VECTORS
            /* four tiles at once where their 2 x 8 outputs are all inside: the rows of the
             * 2x2 results interleaved into two runs of 8 floats */
            for (; y0 + 1 < oh && tx + 4 <= txe && 2 * tx + 8 <= ow; tx += 4, tl += 4) {
                const wino_v4 vb = wino_v4_splat(b);
                wino_v4 sv[2][4], o[2][2];
                int j;
                for (j = 0; j < 4; j++) {
                    const wino_v4 m0 = wino_v4_load(mk + (0 + j) * plane + tl);
                    const wino_v4 m1 = wino_v4_load(mk + (4 + j) * plane + tl);
                    const wino_v4 m2 = wino_v4_load(mk + (8 + j) * plane + tl);
                    const wino_v4 m3 = wino_v4_load(mk + (12 + j) * plane + tl);
                    sv[0][j] = m0 + m1 + m2;
                    sv[1][j] = m1 - m2 - m3;
                }
                for (j = 0; j < 2; j++) {
                    float *yr = yk + (y0 + j) * ow + 2 * tx;
                    o[j][0] = sv[j][0] + sv[j][1] + sv[j][2] + vb;
                    o[j][1] = sv[j][1] - sv[j][2] - sv[j][3] + vb;
                    wino_v4_store(yr, __builtin_shufflevector(o[j][0], o[j][1], 0, 4, 1, 5));
                    wino_v4_store(yr + 4, __builtin_shufflevector(o[j][0], o[j][1], 2, 6, 3, 7));
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
        activate_tiles(&p->act, yk, oh, ow, 2, job->t0, job->nb);
    }
}

/* F(4x4, 3x3). B^T of the 6x6 input patches, one dimension: r = B^T d (Lavin and Gray's
 * matrices, evaluated with shared differences as in NNPACK and ncnn). Works on floats and on
 * vectors of tiles alike. */
#define WINO4_BT(T, d0, d1, d2, d3, d4, d5, r)                      \
    do {                                                            \
        const T s12_ = (d4) - 4.0f * (d2), s13_ = (d3) - 4.0f * (d1); \
        const T s42_ = (d4) - (d2), s31_ = 2.0f * ((d3) - (d1));      \
        (r)[0] = 4.0f * (d0) - 5.0f * (d2) + (d4);                   \
        (r)[1] = s12_ + s13_;                                         \
        (r)[2] = s12_ - s13_;                                         \
        (r)[3] = s42_ + s31_;                                         \
        (r)[4] = s42_ - s31_;                                         \
        (r)[5] = 4.0f * (d1) - 5.0f * (d3) + (d5);                   \
    } while (0)
/* A^T of the products, one dimension: o = A^T m (4 outputs of 6). */
#define WINO4_AT(T, m0, m1, m2, m3, m4, m5, o)                      \
    do {                                                            \
        const T a_ = (m1) + (m2), b_ = (m1) - (m2);                 \
        const T c_ = (m3) + (m4), d_ = (m3) - (m4);                 \
        (o)[0] = (m0) + a_ + c_;                                    \
        (o)[1] = b_ + 2.0f * d_;                                    \
        (o)[2] = a_ + 4.0f * c_;                                    \
        (o)[3] = b_ + 8.0f * d_ + (m5);                             \
    } while (0)

/* The six input rows of tile row ty, zero-padded and split into four column phases: phase q of
 * row i is buf + (4 i + q) ROW_STRIDE(tw), element k holding padded column 4 k + q, so column j of
 * the patch of tile tx is phase j % 4, element tx + j / 4 (consecutive tiles, consecutive
 * floats). Phases are ROW_STRIDE(tw) floats apart. */
static void fill_rows_4x4(const mlcc_conv2d_params *p, const float *xc, ptrdiff_t ty,
                          float *buf) {
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t tw = ((ptrdiff_t)p->out_w + 3) / 4, pl = (ptrdiff_t)p->pad_left;
    int i, q;
    for (i = 0; i < 6; i++) {
        const ptrdiff_t yy = 4 * ty - (ptrdiff_t)p->pad_top + i;
        float *ph = buf + 4 * i * ROW_STRIDE(tw);
        const float *src = xc + yy * iw;
        ptrdiff_t k;
        for (q = 0; q < 4; q++)
            for (k = tw + 1; k < ROW_STRIDE(tw); k++) ph[q * ROW_STRIDE(tw) + k] = 0.0f;
        if (yy < 0 || yy >= ih) {
            for (q = 0; q < 4; q++)
                for (k = 0; k <= tw; k++) ph[q * ROW_STRIDE(tw) + k] = 0.0f;
            continue;
        }
        k = 0;
        for (; k <= tw && 4 * k - pl < 0; k++)
            for (q = 0; q < 4; q++) {
                const ptrdiff_t xx = 4 * k + q - pl;
                ph[q * ROW_STRIDE(tw) + k] = xx >= 0 && xx < iw ? src[xx] : 0.0f;
            }
#if MLCC_HAVE_VECTORS
        for (; k + 4 <= tw + 1 && 4 * k - pl + 16 <= iw; k += 4) {   /* inside: by shuffles */
            const float *s = src + 4 * k - pl;
            const wino_v4 v0 = wino_v4_load(s), v1 = wino_v4_load(s + 4);
            const wino_v4 v2 = wino_v4_load(s + 8), v3 = wino_v4_load(s + 12);
            const wino_v4 a = __builtin_shufflevector(v0, v1, 0, 2, 4, 6);
            const wino_v4 b = __builtin_shufflevector(v0, v1, 1, 3, 5, 7);
            const wino_v4 c = __builtin_shufflevector(v2, v3, 0, 2, 4, 6);
            const wino_v4 d = __builtin_shufflevector(v2, v3, 1, 3, 5, 7);
            wino_v4_store(ph + k, __builtin_shufflevector(a, c, 0, 2, 4, 6));
            wino_v4_store(ph + ROW_STRIDE(tw) + k, __builtin_shufflevector(b, d, 0, 2, 4, 6));
            wino_v4_store(ph + 2 * ROW_STRIDE(tw) + k, __builtin_shufflevector(a, c, 1, 3, 5, 7));
            wino_v4_store(ph + 3 * ROW_STRIDE(tw) + k, __builtin_shufflevector(b, d, 1, 3, 5, 7));
        }
#endif
        for (; k <= tw; k++)
            for (q = 0; q < 4; q++) {
                const ptrdiff_t xx = 4 * k + q - pl;
                ph[q * ROW_STRIDE(tw) + k] = xx >= 0 && xx < iw ? src[xx] : 0.0f;
            }
    }
}

/* V = B^T d B of every 4x4-output tile of the block (6x6 patches), for channels [c0, c1), as
 * the 36 GEMMs' B panels (laid out as in input_transform). */
static void input_transform_4x4(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cin = (ptrdiff_t)p->in_channels, tw = ((ptrdiff_t)p->out_w + 3) / 4;
    const ptrdiff_t plane = job->vplane, o = ROW_STRIDE(tw);
    const ptrdiff_t c0 = cin * unit / job->units, c1 = cin * (unit + 1) / job->units;
    float *buf = job->rows + thread * mlcc_winograd_rows_floats(24, tw);
    ptrdiff_t c, tl;
    for (c = c0; c < c1; c++) {
        const float *xc = job->x + (job->n * cin + c) * (ptrdiff_t)(p->in_h * p->in_w);
        float *vc = job->v + c * MLCC_GEMM_NR;
        ptrdiff_t ty = job->t0 / tw, tx = job->t0 % tw;
        tl = 0;
        while (tl < job->nb) {
            const ptrdiff_t txe = tw - tx < job->nb - tl ? tw : tx + (job->nb - tl);
            fill_rows_4x4(p, xc, ty, buf);
#if MLCC_HAVE_VECTORS
            for (; tx < txe; tx += MLCC_VF_LANES, tl += MLCC_VF_LANES) {   /* as in F(2x2) */
                const ptrdiff_t nl = txe - tx < MLCC_VF_LANES ? txe - tx : MLCC_VF_LANES;
                float *vo = vc + (tl / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR + tl % MLCC_GEMM_NR;
                mlcc_vf r[6][6], v[36];
                int i, j;
                for (j = 0; j < 6; j++) {   /* B^T d: column j of the patches */
                    const float *col = buf + (j % 4) * o + tx + j / 4;
                    WINO4_BT(mlcc_vf, mlcc_vf_load(col), mlcc_vf_load(col + 4 * o),
                             mlcc_vf_load(col + 8 * o), mlcc_vf_load(col + 12 * o),
                             mlcc_vf_load(col + 16 * o), mlcc_vf_load(col + 20 * o), r[j]);
                }
                for (i = 0; i < 6; i++)     /* (B^T d) B: row i */
                    WINO4_BT(mlcc_vf, r[0][i], r[1][i], r[2][i], r[3][i], r[4][i], r[5][i],
                             v + 6 * i);
                if (nl == MLCC_VF_LANES && tl % MLCC_GEMM_NR + MLCC_VF_LANES <= MLCC_GEMM_NR) {
                    for (i = 0; i < 36; i++) mlcc_vf_store(vo + i * plane, v[i]);
                } else {
                    store_tiles(vc, tl, nl, cin, plane, v, 36);
                }
                if (nl < MLCC_VF_LANES) tx -= MLCC_VF_LANES - nl, tl -= MLCC_VF_LANES - nl;
            }
#endif
            for (; tx < txe; tx++, tl++) {
                float *vo = vc + (tl / MLCC_GEMM_NR) * cin * MLCC_GEMM_NR + tl % MLCC_GEMM_NR;
                float r[6][6], v[6];
                int i, j;
                for (j = 0; j < 6; j++) {
                    const float *col = buf + (j % 4) * o + tx + j / 4;
                    WINO4_BT(float, col[0], col[4 * o], col[8 * o], col[12 * o], col[16 * o],
                             col[20 * o], r[j]);
                }
                for (i = 0; i < 6; i++) {
                    WINO4_BT(float, r[0][i], r[1][i], r[2][i], r[3][i], r[4][i], r[5][i], v);
                    for (j = 0; j < 6; j++) vo[(6 * i + j) * plane] = v[j];
                }
            }
            if (tx == tw) tx = 0, ty++;
        }
        zero_past_block(vc, job->nb, cin, plane, 36);
    }
}

/* Y = A^T M A + bias of every 4x4 tile of the block, for output channels [k0, k1): four tiles
 * at a time in block order (their products are consecutive floats whatever rows the tiles are
 * in), transposed into the tiles' output rows and stored tile by tile, clipped at the edges;
 * then the activation. */
static void output_transform_4x4(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const mlcc_conv2d_params *p = &job->pp->conv;
    const ptrdiff_t cout = (ptrdiff_t)p->out_channels, oh = (ptrdiff_t)p->out_h;
    const ptrdiff_t ow = (ptrdiff_t)p->out_w, tw = (ow + 3) / 4;
    const ptrdiff_t plane = job->mplane;
    ptrdiff_t k0, k1, k, tl;
    (void)thread;
    channel_range(job, unit, &k0, &k1);
    for (k = k0; k < k1; k++) {
        float *yk = job->y + (job->n * cout + k) * oh * ow;
        const float *mk = job->m + k * (ptrdiff_t)job->pp->block_cols;
        const float b = job->bias ? job->bias[k] : 0.0f;
        tl = 0;
#if MLCC_HAVE_VECTORS
        for (; tl + 4 <= job->nb; tl += 4) {
            const wino_v4 vb = wino_v4_splat(b);
            wino_v4 s[6][4], o[4], rows[4][4];   /* rows[i][t]: output row i of tile t */
            int i, j, t;
            for (j = 0; j < 6; j++) {   /* A^T M: column j */
                const float *mj = mk + j * plane + tl;
                WINO4_AT(wino_v4, wino_v4_load(mj), wino_v4_load(mj + 6 * plane),
                         wino_v4_load(mj + 12 * plane), wino_v4_load(mj + 18 * plane),
                         wino_v4_load(mj + 24 * plane), wino_v4_load(mj + 30 * plane), s[j]);
            }
            for (i = 0; i < 4; i++) {   /* (A^T M) A: output row i, transposed */
                wino_v4 t0, t1, t2, t3;
                WINO4_AT(wino_v4, s[0][i], s[1][i], s[2][i], s[3][i], s[4][i], s[5][i], o);
                o[0] += vb, o[1] += vb, o[2] += vb, o[3] += vb;
                t0 = __builtin_shufflevector(o[0], o[1], 0, 4, 1, 5);
                t1 = __builtin_shufflevector(o[2], o[3], 0, 4, 1, 5);
                t2 = __builtin_shufflevector(o[0], o[1], 2, 6, 3, 7);
                t3 = __builtin_shufflevector(o[2], o[3], 2, 6, 3, 7);
                rows[i][0] = __builtin_shufflevector(t0, t1, 0, 1, 4, 5);
                rows[i][1] = __builtin_shufflevector(t0, t1, 2, 3, 6, 7);
                rows[i][2] = __builtin_shufflevector(t2, t3, 0, 1, 4, 5);
                rows[i][3] = __builtin_shufflevector(t2, t3, 2, 3, 6, 7);
            }
            for (t = 0; t < 4; t++) {
                const ptrdiff_t tile = job->t0 + tl + t;
                const ptrdiff_t y0 = tile / tw * 4, x0 = tile % tw * 4;
                for (i = 0; i < 4 && y0 + i < oh; i++) {
                    float *yr = yk + (y0 + i) * ow + x0;
                    if (x0 + 4 <= ow) {
                        wino_v4_store(yr, rows[i][t]);
                    } else {
                        for (j = 0; j < ow - x0; j++) yr[j] = rows[i][t][j];
                    }
                }
            }
        }
#endif
        for (; tl < job->nb; tl++) {
            const ptrdiff_t tile = job->t0 + tl;
            const ptrdiff_t y0 = tile / tw * 4, x0 = tile % tw * 4;
            float s[6][4], o[4];
            int i, j;
            for (j = 0; j < 6; j++) {
                const float *mj = mk + j * plane + tl;
                WINO4_AT(float, mj[0], mj[6 * plane], mj[12 * plane], mj[18 * plane],
                         mj[24 * plane], mj[30 * plane], s[j]);
            }
            for (i = 0; i < 4 && y0 + i < oh; i++) {
                float *yr = yk + (y0 + i) * ow + x0;
                WINO4_AT(float, s[0][i], s[1][i], s[2][i], s[3][i], s[4][i], s[5][i], o);
                for (j = 0; j < 4 && x0 + j < ow; j++) yr[j] = o[j] + b;
            }
        }
        activate_tiles(&p->act, yk, oh, ow, 4, job->t0, job->nb);
    }
}

/* The three phases of one block for the unit's range of whole B panels of tiles (the last
 * one may be partial): a thread transforms, multiplies and writes back its own tiles, so that
 * V and M stay in its cache and the block needs one barrier, not three. */
static void tile_range(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const ptrdiff_t panels = (job->nb + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR;
    const ptrdiff_t p0 = panels * unit / job->units, p1 = panels * (unit + 1) / job->units;
    const ptrdiff_t tl0 = p0 * MLCC_GEMM_NR;
    winograd_job sub = *job;
    sub.t0 = job->t0 + tl0;
    sub.nb = (p1 * MLCC_GEMM_NR < job->nb ? p1 * MLCC_GEMM_NR : job->nb) - tl0;
    sub.v = job->v + p0 * (ptrdiff_t)job->pp->conv.in_channels * MLCC_GEMM_NR;
    sub.m = job->m + tl0;
    sub.units = 1;
    job->in_fn(&sub, 0, thread);
    products(&sub, 0, thread);
    job->out_fn(&sub, 0, thread);
}

/* A thread's contiguous share of the image's tiles (unit u of nt), in steps of job->chunk
 * tiles through its own slice of the block's scratch (thread t: panels [t * chunk / NR,
 * (t + 1) * chunk / NR) of V, columns [t * chunk, (t + 1) * chunk) of M), each step
 * transformed, multiplied and written back as tile_range does: one loop per convolution
 * instead of one per block, and each thread the same rows of the output whatever the block
 * size, which the next layer (split the same way) reads on the same thread. The share is
 * tiles [tiles * u / nt, tiles * (u + 1) / nt), or with job->split_tail (split_tail()) whole
 * panels [full * u / nt, full * (u + 1) / nt) of the full = tiles / NR, after which every
 * thread transforms the last partial panel's tiles itself and multiplies and writes back its
 * share of the output channels for them. */
static void thread_range(void *arg, int unit, int thread) {
    const winograd_job *job = (const winograd_job *)arg;
    const ptrdiff_t full = job->tiles / MLCC_GEMM_NR;
    const ptrdiff_t r0 = job->split_tail ? full * unit / job->units * MLCC_GEMM_NR
                                         : job->tiles * unit / job->units;
    const ptrdiff_t r1 = job->split_tail ? full * (unit + 1) / job->units * MLCC_GEMM_NR
                                         : job->tiles * (unit + 1) / job->units;
    winograd_job sub = *job;
    sub.v = job->v + thread * job->chunk * (ptrdiff_t)job->pp->conv.in_channels;
    sub.m = job->m + thread * job->chunk;
    sub.units = 1;
    sub.k0 = sub.k1 = 0;
    for (sub.t0 = r0; sub.t0 < r1; sub.t0 += job->chunk) {
        sub.nb = r1 - sub.t0 < job->chunk ? r1 - sub.t0 : job->chunk;
        job->in_fn(&sub, 0, thread);
        products(&sub, 0, thread);
        job->out_fn(&sub, 0, thread);
    }
    if (job->split_tail) {
        const ptrdiff_t cout = (ptrdiff_t)job->pp->conv.out_channels;
        const ptrdiff_t panels = (cout + MLCC_GEMM_MR - 1) / MLCC_GEMM_MR;
        sub.t0 = full * MLCC_GEMM_NR;
        sub.nb = job->tiles - sub.t0;
        sub.k0 = panels * unit / job->units * MLCC_GEMM_MR;
        sub.k1 = panels * (unit + 1) / job->units * MLCC_GEMM_MR;
        if (sub.k1 > cout) sub.k1 = cout;
        if (sub.k0 >= sub.k1) return;
        job->in_fn(&sub, 0, thread);
        products(&sub, 0, thread);
        job->out_fn(&sub, 0, thread);
    }
}

/* Whether thread_range shares the last partial panel of tiles by output channels, on nt
 * threads with steps of chunk tiles: where it takes fewer GEMM panels of the critical path
 * than cutting the tiles (counting the shared panel as 1 / nt). The GEMM multiplies whole
 * panels of NR tiles whatever their fill, so a share that ends a few tiles past a whole panel
 * costs that thread a step of its own: ResNet-18's 56 x 56 maps, 196 tiles of F(4x4) = 6
 * panels + 4 tiles, gave each of 2 threads 98 tiles, steps of 32 + 32 + 32 + 2, where the
 * step of 2 tiles took as long as one of 32 (4 panels against the 3.06 of its share); shared,
 * 3 + 1/2. Only for a last panel of at most NR / nt tiles, which every thread transforms. */
static int split_tail(ptrdiff_t tiles, ptrdiff_t chunk, ptrdiff_t nt) {
    const ptrdiff_t full = tiles / MLCC_GEMM_NR, tail = tiles % MLCC_GEMM_NR;
    ptrdiff_t u, cut = 0, shared = 0;
    if (tail == 0 || tail * nt > MLCC_GEMM_NR) return 0;
    for (u = 0; u < nt; u++) {   /* panels: the most of any thread, each way */
        const ptrdiff_t share = tiles * (u + 1) / nt - tiles * u / nt;
        const ptrdiff_t steps = share / chunk * (chunk / MLCC_GEMM_NR) +
                                (share % chunk + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR;
        const ptrdiff_t whole = full * (u + 1) / nt - full * u / nt;
        if (steps > cut) cut = steps;
        if (whole > shared) shared = whole;
    }
    return nt * shared + 1 < nt * cut;
}

/* Whether nt threads share `tiles` tiles by tiles (each its own range, transformed, multiplied
 * and written back in one loop) rather than phase by phase (input channels, products, output
 * channels: three loops). Only where every thread gets more than two B panels: split by
 * tiles, each thread multiplies all of U by its few panels, the last one partial; phase by
 * phase, each multiplies its share of the products (half of U on 2 threads) by all the
 * block's panels, at the cost of two more barriers and of reading the other thread's V and M.
 * Measured on 2 threads (Zen 5, vCPUs near): 128 -> 128 channels on 28x28 (49
 * tiles of F(4x4), 2 panels) took 0.91x the time, 32 -> 128 on 27x27 0.76x, 32 -> 32 and
 * 64 -> 64 on 40x40 (100 tiles, 4 panels) 0.88-0.95x; 56x56 and 80x80 maps (7 and 13
 * panels) the same either way, so they keep the one loop of the tile split. */
static int split_by_tiles(ptrdiff_t tiles, ptrdiff_t nt) {
    return nt > 1 && (tiles + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR > 2 * nt;
}

/* One image block by block (winograd_run's paths other than thread_range): on a pool, a
 * block split by tiles (split_by_tiles: tile_range); others (deep layers on small maps)
 * phase by phase: by input channels, products, output channels. */
static void winograd_blocks(winograd_job *job, mlcc_threadpool *pool, ptrdiff_t nt,
                            ptrdiff_t tiles, ptrdiff_t block, int last) {
    const mlcc_conv2d_params *p = &job->pp->conv;
    for (job->t0 = 0; job->t0 < tiles; job->t0 += block) {
        /* last: the last block's last loop may go to a loop group (a copy of *job) */
        const int final = last && job->t0 + block >= tiles;
        job->nb = tiles - job->t0 < block ? tiles - job->t0 : block;
        if (split_by_tiles(job->nb, nt)) {
            job->units = nt;
            mlcc_parallel_loop(pool, final, tile_range, job, sizeof *job, job->units, nt);
            continue;
        }
        job->units = phase_units((ptrdiff_t)p->in_channels, nt);
        mlcc_threadpool_for(pool, job->in_fn, job, (int)job->units, (int)nt);
        job->units = phase_units(job->ne, nt);
        mlcc_threadpool_for(pool, products, job, (int)job->units, (int)nt);
        job->units = phase_units((ptrdiff_t)p->out_channels, nt);
        mlcc_parallel_loop(pool, final, job->out_fn, job, sizeof *job, job->units, nt);
    }
}

/* The convolution by blocks of tiles: input transform, products, output transform per block
 * (tile: 2 or 4 outputs square; the output transform applies the cheap activations, a pass
 * over the planes the others: act_per_block). On a pool, maps split by tiles
 * (split_by_tiles), where a block holds one panel per thread, give each thread its share of
 * the image in steps of block / nt tiles (thread_range); otherwise block by block
 * (winograd_blocks). */
static void winograd_run(const mlcc_conv2d_packed_params *pp, const float *x, const float *u,
                         const float *bias, float *y, float *scratch, mlcc_threadpool *pool,
                         ptrdiff_t tile, mlcc_unit_fn in_fn, mlcc_unit_fn out_fn) {
    const mlcc_conv2d_params *p = &pp->conv;
    const ptrdiff_t tiles = ((ptrdiff_t)p->out_h + tile - 1) / tile *
                            (((ptrdiff_t)p->out_w + tile - 1) / tile);
    const ptrdiff_t block = (ptrdiff_t)pp->block_cols, ne = (tile + 2) * (tile + 2);
    ptrdiff_t nt = mlcc_threadpool_size(pool);
    winograd_job job;
    if ((double)p->out_channels * (double)p->in_channels * (double)ne * (double)tiles <
        (double)MLCC_MIN_PARALLEL_MACS)
        nt = 1, pool = NULL;
    job.pp = pp;
    job.x = x;
    job.u = u;
    job.bias = bias;
    job.y = y;
    job.ne = ne;
    job.v = scratch;
    job.vplane = (ptrdiff_t)p->in_channels * block + MLCC_WINOGRAD_PLANE_PAD;
    job.mplane = (ptrdiff_t)p->out_channels * block + MLCC_WINOGRAD_PLANE_PAD;
    job.m = scratch + ne * job.vplane;
    job.rows = job.m + ne * job.mplane;
    job.in_fn = in_fn;
    job.out_fn = out_fn;
    if (nt > WINOGRAD_SLICES) nt = WINOGRAD_SLICES;
    job.tiles = tiles;
    job.chunk = block / MLCC_GEMM_NR / nt * MLCC_GEMM_NR;
    job.split_tail = job.chunk > 0 && split_tail(tiles, job.chunk, nt);
    job.k0 = job.k1 = 0;
    for (job.n = 0; job.n < p->batch; job.n++) {
        /* the last image's last loop, when no activation pass follows: a loop group
         * (mlcc_internal.h) may run it with its siblings' */
        const int last = job.n + 1 == (ptrdiff_t)p->batch &&
                         (p->act.kind == MLCC_ACT_NONE || act_per_block(&p->act));
        if (job.chunk > 0 && split_by_tiles(tiles, nt)) {
            job.units = nt;
            mlcc_parallel_loop(pool, last, thread_range, &job, sizeof job, job.units, nt);
        } else {
            winograd_blocks(&job, pool, nt, tiles, block, last);
        }
        if (p->act.kind != MLCC_ACT_NONE && !act_per_block(&p->act)) {
            job.units = phase_units((ptrdiff_t)p->out_channels, nt);
            mlcc_threadpool_for(pool, activate_planes, &job, (int)job.units, (int)nt);
        }
    }
}


void mlcc_f32_conv2d__winograd_2x2(const mlcc_conv2d_packed_params *pp, const float *x,
                                   const float *u, const float *bias, float *y, float *scratch,
                                   mlcc_threadpool *pool) {
    winograd_run(pp, x, u, bias, y, scratch, pool, 2, input_transform, output_transform);
}

void mlcc_f32_conv2d__winograd_4x4(const mlcc_conv2d_packed_params *pp, const float *x,
                                   const float *u, const float *bias, float *y, float *scratch,
                                   mlcc_threadpool *pool) {
    winograd_run(pp, x, u, bias, y, scratch, pool, 4, input_transform_4x4, output_transform_4x4);
}
