/* Register-blocked GEMM. The C tile of MR rows x NR columns stays in vector registers while the
 * k loop streams a column of A (broadcast) and a row of B; K is cut into KC-deep blocks so that
 * the KC x NR strip of B being reused stays in L1. */
#include "gemm.h"

/* 6 rows x 2 vectors, or fewer rows where the target chose a smaller packed tile (gemm_tile,
 * gemm.h): in wasm, V8 holds 6 x 2's twelve accumulators and six broadcasts of A only by
 * spilling; 4 rows ran MiniLM (128 tokens, 36 MatMuls) in 0.71 of the time in node. */
#if MLCC_GEMM_TILE_ROWS < 6
#define MR MLCC_GEMM_TILE_ROWS
#else
#define MR 6
#endif
#define KC 256

#if MLCC_HAVE_VECTORS
#define NR (2 * MLCC_VF_LANES)

/* acc[r] (two vectors) = sum over p < kc of A[r][p] * B[p][0..NR) */
static inline void tile_full(ptrdiff_t mr, ptrdiff_t kc, const float *a, ptrdiff_t ars,
                             ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c,
                             ptrdiff_t ldc, float alpha, int accumulate) {
    mlcc_vf acc0[MR], acc1[MR];
    ptrdiff_t r, p;
    for (r = 0; r < MR; r++) acc0[r] = acc1[r] = mlcc_vf_splat(0.0f);
    for (p = 0; p < kc; p++) {
        const mlcc_vf b0 = mlcc_vf_load(b + p * ldb);
        const mlcc_vf b1 = mlcc_vf_load(b + p * ldb + MLCC_VF_LANES);
        for (r = 0; r < mr; r++) {
            const mlcc_vf av = mlcc_vf_splat(a[r * ars + p * acs]);
            acc0[r] += av * b0;
            acc1[r] += av * b1;
        }
    }
    for (r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        mlcc_vf c0 = acc0[r] * alpha, c1 = acc1[r] * alpha;
        if (accumulate) {
            c0 += mlcc_vf_load(cr);
            c1 += mlcc_vf_load(cr + MLCC_VF_LANES);
        }
        mlcc_vf_store(cr, c0);
        mlcc_vf_store(cr + MLCC_VF_LANES, c1);
    }
}
#else
#define NR 8
#endif

/* The same product for a tile narrower than NR columns (the right edge), in scalar code. */
static void tile_edge(ptrdiff_t mr, ptrdiff_t nr, ptrdiff_t kc, const float *a, ptrdiff_t ars,
                      ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                      float alpha, int accumulate) {
    ptrdiff_t r, j, p;
    for (r = 0; r < mr; r++) {
        float acc[NR];
        for (j = 0; j < nr; j++) acc[j] = 0.0f;
        for (p = 0; p < kc; p++) {
            const float av = a[r * ars + p * acs];
            const float *bp = b + p * ldb;
            for (j = 0; j < nr; j++) acc[j] += av * bp[j];
        }
        for (j = 0; j < nr; j++) c[r * ldc + j] = alpha * acc[j] + (accumulate ? c[r * ldc + j] : 0.0f);
    }
}

void mlcc_f32_gemm(const mlcc_gemm_params *p, const float *a, const float *b, const float *bias,
                   float *c) {
    const ptrdiff_t m = (ptrdiff_t)p->m, n = (ptrdiff_t)p->n, k = (ptrdiff_t)p->k;
    const ptrdiff_t ars = (ptrdiff_t)p->a_row_stride, acs = (ptrdiff_t)p->a_col_stride;
    const ptrdiff_t ldb = (ptrdiff_t)p->ldb, ldc = (ptrdiff_t)p->ldc;
    ptrdiff_t i, j, k0;

    if (k == 0) {
        for (i = 0; i < m; i++)
            for (j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
    }
    for (k0 = 0; k0 < k; k0 += KC) {
        const ptrdiff_t kc = k - k0 < KC ? k - k0 : KC;
        const int accumulate = k0 > 0;
        const float *ak = a + k0 * acs;
        const float *bk = b + k0 * ldb;
        for (j = 0; j < n; j += NR) {
            const ptrdiff_t nr = n - j < NR ? n - j : NR;
            for (i = 0; i < m; i += MR) {
                const ptrdiff_t mr = m - i < MR ? m - i : MR;
#if MLCC_HAVE_VECTORS
                if (nr == NR) {
                    if (mr == MR)
                        tile_full(MR, kc, ak + i * ars, ars, acs, bk + j, ldb, c + i * ldc + j,
                                  ldc, p->alpha, accumulate);
                    else
                        tile_full(mr, kc, ak + i * ars, ars, acs, bk + j, ldb, c + i * ldc + j,
                                  ldc, p->alpha, accumulate);
                    continue;
                }
#endif
                tile_edge(mr, nr, kc, ak + i * ars, ars, acs, bk + j, ldb, c + i * ldc + j, ldc,
                          p->alpha, accumulate);
            }
        }
    }
    for (i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (bias != NULL) {
            const float *bi = bias + i * (ptrdiff_t)p->bias_row_stride;
            const ptrdiff_t bcs = (ptrdiff_t)p->bias_col_stride;
            const float beta = p->beta;
            if (bcs == 0) {
                const float v = beta * bi[0];
                for (j = 0; j < n; j++) ci[j] += v;
            } else {
                for (j = 0; j < n; j++) ci[j] += beta * bi[j * bcs];
            }
        }
        mlcc_act_apply(&p->act, ci, n);
    }
}

void mlcc_f32_batched_gemm(const mlcc_batched_gemm_params *p, const float *a, const float *b,
                           const float *bias, float *c, const int64_t *a_offsets,
                           const int64_t *b_offsets) {
    int64_t t;
    for (t = 0; t < p->batch; t++)
        mlcc_f32_gemm(&p->gemm, a + a_offsets[t], b + b_offsets[t], bias,
                      c + t * p->c_batch_stride);
}

/* ---- The packed GEMM (see gemm.h for the panel layouts) ---- */

#define PMR MLCC_GEMM_MR
/* The packed GEMM is instantiated twice, with and without a residual, inlined whole into each
 * entry point, so that the one without has no trace of it: every convolution going through the
 * residual entry point with a NULL residual made MobileNetV2 3-5% slower (A/B, interleaved). */
#if defined(__GNUC__)
#define PACKED_INLINE inline __attribute__((always_inline))
#else
#define PACKED_INLINE inline
#endif
#define PNR MLCC_GEMM_NR
#define PTR MLCC_GEMM_TILE_ROWS   /* rows per tile: PMR or a divisor of it */

/* Adds bias (and the residual), applies the activation and writes (or adds, unless first) one
 * tile row. */
static inline void packed_store_row(float *cr, const float *tile_row, ptrdiff_t nr, int first,
                                    int last, const float *bias_r, const float *res_r,
                                    const mlcc_act *act) {
    ptrdiff_t j;
    if (first) {
        memcpy(cr, tile_row, (size_t)nr * sizeof(float));
    } else {
        for (j = 0; j < nr; j++) cr[j] += tile_row[j];
    }
    if (last) {
        if (bias_r != NULL)
            for (j = 0; j < nr; j++) cr[j] += *bias_r;
        if (res_r != NULL)
            for (j = 0; j < nr; j++) cr[j] += res_r[j];
        mlcc_act_apply(act, cr, nr);
    }
}

#if MLCC_HAVE_VECTORS
/* The micro-kernel: a TILE_ROWS x NR tile of C in NV * TILE_ROWS vector registers; per k step,
 * NV vector loads of B and TILE_ROWS broadcasts of A (a points at the tile's first row in an
 * MR-row A panel). With -ffp-contract=fast the multiply-add is one FMA. */
static PACKED_INLINE void packed_tile(ptrdiff_t kc, const float *MLCC_RESTRICT a,
                                      const float *MLCC_RESTRICT b, float *c, ptrdiff_t ldc,
                                      ptrdiff_t mr, ptrdiff_t nr, int first, int last,
                                      const float *bias, const float *res,
                                      const mlcc_act *act, int half) {
    /* half (a constant at each call): only the first vector of each row, for panels of at
     * most one vector of columns (small feature maps) */
    const ptrdiff_t nv = half ? 1 : MLCC_GEMM_NV;
    mlcc_vf acc[PTR][MLCC_GEMM_NV];
    ptrdiff_t r, v, p;
    for (r = 0; r < PTR; r++)
        for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] = mlcc_vf_splat(0.0f);
#if defined(__GNUC__)
    /* the residual rows are a feature map apart: fetch them while the k loop runs */
    if (res != NULL && last)
        for (r = 0; r < mr; r++)
            for (v = 0; v < nv; v++)
                __builtin_prefetch(res + r * ldc + v * MLCC_VF_LANES);
#endif
    for (p = 0; p < kc; p++) {
        mlcc_vf bv[MLCC_GEMM_NV];
        for (v = 0; v < nv; v++) bv[v] = mlcc_vf_load(b + p * PNR + v * MLCC_VF_LANES);
        for (r = 0; r < PTR; r++) {
            const mlcc_vf av = mlcc_vf_splat(a[p * PMR + r]);
            for (v = 0; v < nv; v++) acc[r][v] += av * bv[v];
        }
    }
    if (nr == nv * MLCC_VF_LANES) {
        for (r = 0; r < mr; r++) {
            float *cr = c + r * ldc;
            for (v = 0; v < nv; v++) {
                mlcc_vf out = acc[r][v];
                if (!first) out += mlcc_vf_load(cr + v * MLCC_VF_LANES);
                if (last) {
                    if (bias != NULL) out += bias[r];
                    if (res != NULL) out += mlcc_vf_load(res + r * ldc + v * MLCC_VF_LANES);
                    out = mlcc_vf_act(act, out);
                }
                mlcc_vf_store(cr + v * MLCC_VF_LANES, out);
            }
        }
        return;
    }
    for (r = 0; r < mr; r++) {
        float row[PNR];
        for (v = 0; v < MLCC_GEMM_NV; v++) mlcc_vf_store(row + v * MLCC_VF_LANES, acc[r][v]);
        packed_store_row(c + r * ldc, row, nr, first, last, bias ? bias + r : NULL,
                         res ? res + r * ldc : NULL, act);
    }
}
#else
static void packed_tile(ptrdiff_t kc, const float *a, const float *b, float *c, ptrdiff_t ldc,
                        ptrdiff_t mr, ptrdiff_t nr, int first, int last, const float *bias,
                        const float *res, const mlcc_act *act, int half) {
    float acc[PTR][PNR];
    ptrdiff_t r, j, p;
    for (r = 0; r < PTR; r++)
        for (j = 0; j < PNR; j++) acc[r][j] = 0.0f;
    for (p = 0; p < kc; p++)
        for (r = 0; r < PTR; r++)
            for (j = 0; j < PNR; j++) acc[r][j] += a[p * PMR + r] * b[p * PNR + j];
    (void)half;
    for (r = 0; r < mr; r++)
        packed_store_row(c + r * ldc, acc[r], nr, first, last, bias ? bias + r : NULL,
                         res ? res + r * ldc : NULL, act);
}
#endif

static PACKED_INLINE void gemm_packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                                      const float *a_packed, ptrdiff_t a_rows, ptrdiff_t a_row0,
                                      const float *b_panels, const float *bias, const float *res,
                                      const mlcc_act *act, float *c, ptrdiff_t ldc) {
    ptrdiff_t k0, i0, i, j;
    for (k0 = 0; k0 < k; k0 += MLCC_GEMM_KC) {
        const ptrdiff_t kc = k - k0 < MLCC_GEMM_KC ? k - k0 : MLCC_GEMM_KC;
        const int first = k0 == 0, last = k0 + kc == k;
        /* MLCC_GEMM_MC rows of A (MC x kc) stay in L2 while each B panel (kc x NR, in L1)
         * passes over them */
        for (i0 = 0; i0 < m; i0 += MLCC_GEMM_MC) {
            const ptrdiff_t i1 = m - i0 < MLCC_GEMM_MC ? m : i0 + MLCC_GEMM_MC;
            for (j = 0; j < n; j += PNR) {
                const ptrdiff_t nr = n - j < PNR ? n - j : PNR;
                const float *bp = b_panels + (j / PNR) * k * PNR + k0 * PNR;
                for (i = i0; i < i1; i += PTR) {
                    const ptrdiff_t mr = m - i < PTR ? m - i : PTR;
                    /* block k0 of A: kc x a_rows, panel by panel (gemm.h); a tile of PTR
                     * rows starts i % PMR rows into its panel */
                    const float *at = a_packed + k0 * a_rows + (a_row0 + i - i % PMR) * kc +
                                      i % PMR;
                    const float *rt = res ? res + i * ldc + j : NULL;
                    const float *bt = bias ? bias + i : NULL;
#if MLCC_HAVE_VECTORS && MLCC_GEMM_NV > 1
                    if (nr <= MLCC_VF_LANES)   /* the same sums: half the work */
                        packed_tile(kc, at, bp, c + i * ldc + j, ldc, mr, nr, first, last, bt,
                                    rt, act, 1);
                    else
#endif
                        packed_tile(kc, at, bp, c + i * ldc + j, ldc, mr, nr, first, last, bt,
                                    rt, act, 0);
                }
            }
        }
    }
}

void mlcc_f32_gemm_packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed,
                          ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b_panels,
                          const float *bias, const mlcc_act *act, float *c, ptrdiff_t ldc) {
    gemm_packed(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, NULL, act, c, ldc);
}

void mlcc_f32_gemm_packed_residual(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed,
                                   ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b_panels,
                                   const float *bias, const float *res, const mlcc_act *act,
                                   float *c, ptrdiff_t ldc) {
    gemm_packed(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, res, act, c, ldc);
}
