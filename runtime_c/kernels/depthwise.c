#include "depthwise.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

void mlcc_f32_conv2d__depthwise(const mlcc_conv2d_params *p, const float *x, const float *w,
                                const float *bias, float *y) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels;
    ptrdiff_t n, c, oh, kh, kw, ow;
    for (n = 0; n < p->batch; n++) {
        for (c = 0; c < channels; c++) {
            const float *xc = x + (n * channels + c) * ih_n * iw_n;
            const float *wc = w + c * kh_n * kw_n;
            float *yc = y + (n * channels + c) * oh_n * ow_n;
            const float b = bias ? bias[c] : 0.0f;
            for (oh = 0; oh < oh_n; oh++) {
                float *yr = yc + oh * ow_n;
                for (ow = 0; ow < ow_n; ow++) yr[ow] = b;
                for (kh = 0; kh < kh_n; kh++) {
                    const ptrdiff_t ih = oh * sh + kh * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top;
                    if (ih < 0 || ih >= ih_n) continue;
                    for (kw = 0; kw < kw_n; kw++) {
                        const ptrdiff_t joff = kw * (ptrdiff_t)p->dilation_w;
                        const float wv = wc[kh * kw_n + kw];
                        const float *xr = xc + ih * iw_n;
                        const ptrdiff_t shift = joff - (ptrdiff_t)p->pad_left;
                        ptrdiff_t lo, hi;
                        mlcc_conv_valid_range(ow_n, sw, (ptrdiff_t)p->pad_left, joff, iw_n,
                                              &lo, &hi);
                        if (sw == 1)
                            for (ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow + shift];
                        else
                            for (ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * sw + shift];
                    }
                }
                mlcc_act_apply(&p->act, yr, ow_n);
            }
        }
    }
}

#define DW_MAX_TAPS 64

typedef struct dw_job {
    const mlcc_conv2d_params *p;
    const float *x, *w, *bias;
    float *y, *scratch;
    ptrdiff_t units;
    /* per thread: its scratch slice holds the zero padding already. The units of one call
     * write the same positions of the slice, so a thread zeroes it once, not once per unit
     * (8 units of 66 KiB each on 2 threads for a 112 x 112 layer: 1.07-1.14x the work of one
     * thread). Each thread writes only its own entry. */
    unsigned char zeroed[MLCC_DW_SLICES];
    int cil;   /* AVX-512: channels in lanes (dw_cil_channels), units of 16 channels; 2: wide
                * planes of stride 1 in place (dw_direct_channels) */
} dw_job;

/* ---- Depthwise over the whole plane as one run (depthwise.h: the flat layout) ---- */

/* One channel's virtual outputs q = oh * wq + ow, q < nv, four vectors at a time (four
 * independent chains of ntaps adds), into out (rounded up to MLCC_DW_CHUNK floats). Each
 * output sums its taps in order, as the direct reference kernel does. */
#if MLCC_HAVE_VECTORS
static inline void dw_flat_run(const float *base, const ptrdiff_t *off, const float *wt,
                               ptrdiff_t ntaps, float b, float *out, ptrdiff_t nv,
                               const mlcc_act *act) {
    ptrdiff_t q, t;
    for (q = 0; q < nv; q += 4 * MLCC_VF_LANES) {
        mlcc_vf acc0 = mlcc_vf_splat(b), acc1 = acc0, acc2 = acc0, acc3 = acc0;
        for (t = 0; t < ntaps; t++) {
            const float *src = base + off[t] + q;
            acc0 += wt[t] * mlcc_vf_load(src);
            acc1 += wt[t] * mlcc_vf_load(src + MLCC_VF_LANES);
            acc2 += wt[t] * mlcc_vf_load(src + 2 * MLCC_VF_LANES);
            acc3 += wt[t] * mlcc_vf_load(src + 3 * MLCC_VF_LANES);
        }
        mlcc_vf_store(out + q, mlcc_vf_act(act, acc0));
        mlcc_vf_store(out + q + MLCC_VF_LANES, mlcc_vf_act(act, acc1));
        mlcc_vf_store(out + q + 2 * MLCC_VF_LANES, mlcc_vf_act(act, acc2));
        mlcc_vf_store(out + q + 3 * MLCC_VF_LANES, mlcc_vf_act(act, acc3));
    }
}
#else
static void dw_flat_run(const float *base, const ptrdiff_t *off, const float *wt,
                        ptrdiff_t ntaps, float b, float *out, ptrdiff_t nv,
                        const mlcc_act *act) {
    ptrdiff_t q, t;
    for (q = 0; q < nv; q++) {
        float acc = b;
        for (t = 0; t < ntaps; t++) acc += wt[t] * base[off[t] + q];
        out[q] = mlcc_act_scalar(act, acc);
    }
}
#endif

/* Copies rows of n floats (src rows src_step apart, dst rows dst_step apart, ascending) in
 * whole vectors, the lanes past n zeroed, while the last vector of a row ends at or before
 * dst_limit floats past dst and src_limit past src; memcpy for the rest. A row's overrun
 * writes zeros on the following rows' places: their padding stays zero and their values are
 * written after it. Rows of a few values (7 x 7 maps) would cost a memcpy call each. */
static inline void dw_copy_rows(float *dst, ptrdiff_t dst_step, ptrdiff_t dst_limit,
                                const float *src, ptrdiff_t src_step, ptrdiff_t src_limit,
                                ptrdiff_t rows, ptrdiff_t n) {
    ptrdiff_t r = 0;
#if MLCC_HAVE_VECTORS
    const ptrdiff_t nv = (n + MLCC_VF_LANES - 1) / MLCC_VF_LANES * MLCC_VF_LANES;
    const ptrdiff_t full = n / MLCC_VF_LANES * MLCC_VF_LANES;
    mlcc_vi tail;
    ptrdiff_t j;
    for (j = 0; j < MLCC_VF_LANES; j++) tail[j] = j < n - full ? -1 : 0;
    for (; r < rows && r * dst_step + nv <= dst_limit && r * src_step + nv <= src_limit; r++) {
        float *d = dst + r * dst_step;
        const float *sr = src + r * src_step;
        for (j = 0; j < full; j += MLCC_VF_LANES) mlcc_vf_store(d + j, mlcc_vf_load(sr + j));
        if (full < n) mlcc_vf_store(d + full, (mlcc_vf)((mlcc_vi)mlcc_vf_load(sr + full) & tail));
    }
#else
    (void)dst_limit;
    (void)src_limit;
#endif
    for (; r < rows; r++) memcpy(dst + r * dst_step, src + r * src_step, (size_t)n * sizeof(float));
}

/* The stride-2 deinterleave of one input row (dw_flat_fill) in whole vectors: pe[j] = xr[2 j]
 * for j < ne, po[j] = xr[2 j + 1] for j < no, the lanes past them zeros, while the reads stay
 * within the avail floats from xr and the writes within room floats from pe and from po (the
 * rest of their sub-planes). The zeros land on the row's right padding and on the following
 * rows' places of the same sub-plane, whose padding stays zero and whose values are written
 * after (as dw_copy_rows does). Returns the j where the scalar loop goes on: MobileNetV2's
 * 14 -> 7 layer (rows of 7 per phase) ran the scalar loop for every value, a third of its
 * time. */
static inline ptrdiff_t dw_deinterleave_vec(const float *xr, ptrdiff_t avail, float *pe,
                                            float *po, ptrdiff_t ne, ptrdiff_t no,
                                            ptrdiff_t room) {
    ptrdiff_t j = 0;
#if MLCC_HAVE_VECTORS && defined(MLCC_VF_DEINTERLEAVE)
    mlcc_vi iota;
    ptrdiff_t t;
    for (t = 0; t < MLCC_VF_LANES; t++) iota[t] = (int32_t)t;
#if defined(__wasm_simd128__) && MLCC_VECTOR_BYTES == 16
    {   /* wasm: the vectors inside both phases' rows first, without the lane masks (compares
         * and selects: MobileNetV2's stride-2 depthwise layers 0.88-0.91x, the fill being
         * 70-80% of their time in node) */
        const ptrdiff_t both = ne < no ? ne : no;
        ptrdiff_t end = both < room ? both : room;
        if (end > avail / 2) end = avail / 2;
        for (; j + MLCC_VF_LANES <= end; j += MLCC_VF_LANES) {
            const mlcc_vf v0 = mlcc_vf_load(xr + 2 * j);
            const mlcc_vf v1 = mlcc_vf_load(xr + 2 * j + MLCC_VF_LANES);
            mlcc_vf ev, od;
            mlcc_vf_deinterleave(v0, v1, &ev, &od);
            mlcc_vf_store(pe + j, ev);
            mlcc_vf_store(po + j, od);
        }
    }
#endif
    for (; j < ne && j + MLCC_VF_LANES <= room && 2 * (j + MLCC_VF_LANES) <= avail;
         j += MLCC_VF_LANES) {
        const mlcc_vf v0 = mlcc_vf_load(xr + 2 * j), v1 = mlcc_vf_load(xr + 2 * j + MLCC_VF_LANES);
        mlcc_vf ev, od;
        mlcc_vf_deinterleave(v0, v1, &ev, &od);
        const mlcc_vi at = iota + (int32_t)j;
        mlcc_vf_store(pe + j, mlcc_vf_select(at < (int32_t)ne, ev, mlcc_vf_splat(0.0f)));
        mlcc_vf_store(po + j, mlcc_vf_select(at < (int32_t)no, od, mlcc_vf_splat(0.0f)));
    }
    if (j > ne) j = ne;   /* the last vector covered both rows' ends */
#else
    (void)xr;
    (void)avail;
    (void)pe;
    (void)po;
    (void)ne;
    (void)no;
    (void)room;
#endif
    return j;
}

/* One channel's zero-padded input split by stride phase into sh * sw sub-planes of hq x wq
 * (implicit_fill's layout for one channel). Writes only the input's values: the padding lies
 * at the same places for every channel and dw_flat_task zeroes it once. */
static void dw_flat_fill(const mlcc_conv2d_params *p, const float *xc, float *pad,
                         ptrdiff_t hq, ptrdiff_t wq) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    ptrdiff_t ry, rx, r, j;
    if (sh == 1 && sw == 1 && pl + iw_n <= wq) {
        /* rows pt.. hold input rows; whole-vector copies overrun (with zeros) at most one
         * vector past the last one, into the bottom padding or the slack */
        const ptrdiff_t r1 = pt + ih_n < hq ? pt + ih_n : hq;
        if (r1 > pt)
            dw_copy_rows(pad + pt * wq + pl, wq, (hq - pt) * wq + MLCC_DW_CHUNK - pl, xc, iw_n,
                         ih_n * iw_n, r1 - pt, iw_n);
        return;
    }
    if (sw == 2) {
        /* one pass per input row, both column phases at once (a deinterleave): input column i
         * is padded column i + pl, phase (i + pl) % 2, position (i + pl) / 2 */
        const ptrdiff_t e_at = pl / 2, o_at = (pl + 1) / 2;
        ptrdiff_t ne = (iw_n + 1) / 2, no = iw_n / 2, both, ih;
        ptrdiff_t ry = pt % sh, r = pt / sh;   /* padded row ih + pt: sub-plane ry, row r */
        if (ne > wq - e_at) ne = wq - e_at;
        if (no > wq - o_at) no = wq - o_at;
        both = ne < no ? ne : no;
        for (ih = 0; ih < ih_n && r < hq; ih++) {
            const float *MLCC_RESTRICT xr = xc + ih * iw_n;
            float *row = pad + ry * 2 * hq * wq + r * wq;
            float *MLCC_RESTRICT pe = row + (pl % 2) * hq * wq + e_at;
            float *MLCC_RESTRICT po = row + ((pl + 1) % 2) * hq * wq + o_at;
            j = dw_deinterleave_vec(xr, (ih_n - ih) * iw_n, pe, po, ne, no,
                                    hq * wq - (r * wq + (e_at > o_at ? e_at : o_at)));
            for (; j < both; j++) {
                pe[j] = xr[2 * j];
                po[j] = xr[2 * j + 1];
            }
            for (; j < ne; j++) pe[j] = xr[2 * j];
            for (; j < no; j++) po[j] = xr[2 * j + 1];
            if (++ry == sh) {   /* no division per row */
                ry = 0;
                r++;
            }
        }
        return;
    }
    for (ry = 0; ry < sh; ry++) {
        for (rx = 0; rx < sw; rx++) {
            float *dq = pad + (ry * sw + rx) * hq * wq;
            /* positions [lo, hi) of this phase: padded column j * sw + rx, input column - pl */
            ptrdiff_t lo, hi;
            mlcc_conv_valid_range(wq, sw, pl, rx, iw_n, &lo, &hi);
            for (r = 0; r < hq; r++) {
                const ptrdiff_t ih = r * sh + ry - pt;
                const float *xr;
                if (ih < 0 || ih >= ih_n) continue;
                xr = xc + ih * iw_n;
                if (sw == 1)
                    memcpy(dq + r * wq + lo, xr + (lo - pl), (size_t)(hi - lo) * sizeof(float));
                else
                    for (j = lo; j < hi; j++) dq[r * wq + j] = xr[j * sw + rx - pl];
            }
        }
    }
}

/* What a dw_flat task needs before its channels: each tap's offset in the stride-phase
 * sub-planes (off, kernel_h * kernel_w entries) and, once per call and thread, the thread's
 * slice zeroed: the padding and the slack read by the last chunk, where dw_flat_fill writes
 * only input values (job.zeroed). */
static void dw_flat_prepare(dw_job *job, int thread, float *pad, ptrdiff_t *off) {
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t dh = (ptrdiff_t)p->dilation_h, dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t hq = mlcc_implicit_sub_h(p), wq = mlcc_implicit_sub_w(p);
    ptrdiff_t kh, kw;
    for (kh = 0; kh < kh_n; kh++)
        for (kw = 0; kw < kw_n; kw++)
            off[kh * kw_n + kw] = ((kh * dh % sh) * sw + kw * dw % sw) * hq * wq +
                                  (kh * dh / sh) * wq + kw * dw / sw;
    if (!job->zeroed[thread]) {
        memset(pad, 0, (size_t)(sh * sw * hq * wq + kw_n * dw + MLCC_DW_CHUNK) * sizeof(float));
        job->zeroed[thread] = 1;
    }
}

/* ---- Small planes, stride 1, output size = input size ("same" padding) ----
 * The plane (n = H x W values, contiguous in x and y) is computed flat: output q's tap t reads
 * input q + d_t (d_t = dy * W + dx), the lanes whose column + dx leaves [0, W) set to zero
 * (what the padding holds), the rows above and below read from zeros around a contiguous copy
 * of the plane. No padded rows, no virtual outputs, no copy out: a 7 x 7 map is 4 vectors
 * (the last one overlapping the third: the same values written twice), where the padded
 * layout computed 63 virtual outputs, filled 7 rows and copied 7 rows out per channel. Each
 * output sums its taps in the same order from the bias (zeros where padding was read): the
 * same bits as dw_flat_run. Measured (bench/profile_layers.py, MobileNetV2): 7 x 7 and 14 x 14
 * 0.8-0.95x the padded layout; 28 x 28 1.2x slower (the lane masks cost more than the
 * virtual columns they save), and copies of the plane per kernel column, zeroed where no valid
 * output reads them, instead of masks: 28 x 28 0.9x, 14 x 14 0.95x, 7 x 7 1.02-1.15x slower
 * (the tap loads read across the just-written copies' stores). */
#if MLCC_HAVE_VECTORS
#define DW_SMALL_MAX_W 16            /* widths up to this take it (measured: 7, 14, 28) */
#define DW_SMALL_MAX_VECS 64         /* planes of at most 64 vectors (a column-mask table) */
#define DW_SMALL_MAX_KW 5

typedef struct dw_small_plan {
    ptrdiff_t n, w, mb, nvec;        /* plane, width, zeros before the copy, vectors */
    ptrdiff_t d[DW_MAX_TAPS];        /* tap t's offset from the output position */
    mlcc_vi ok[DW_SMALL_MAX_VECS][DW_SMALL_MAX_KW];   /* lanes of vector j whose column + dx is in */
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
    /* AVX-512: lanes of vector j whose tap t lies inside the plane, for masked loads straight
     * from the input (a masked-off lane is not read: no copy, no zeros around it) */
    __mmask16 km[DW_SMALL_MAX_VECS][DW_MAX_TAPS];
#endif
} dw_small_plan;

/* The scratch floats dw_small needs (zeros, the plane, zeros), or 0 where it does not apply. */
static ptrdiff_t dw_small_floats(const mlcc_conv2d_params *p, ptrdiff_t *mb) {
    const ptrdiff_t h = (ptrdiff_t)p->in_h, w = (ptrdiff_t)p->in_w;
    const ptrdiff_t kh = (ptrdiff_t)p->kernel_h, kw = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t n = h * w;
    ptrdiff_t lo, hi, need;
    if (p->stride_h != 1 || p->stride_w != 1 || p->out_h != p->in_h || p->out_w != p->in_w ||
        w > DW_SMALL_MAX_W || kw > DW_SMALL_MAX_KW || n < MLCC_VF_LANES ||
        (n + MLCC_VF_LANES - 1) / MLCC_VF_LANES > DW_SMALL_MAX_VECS)
        return 0;
    /* the smallest and largest tap offsets */
    lo = -(ptrdiff_t)p->pad_top * w - (ptrdiff_t)p->pad_left;
    hi = ((kh - 1) * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top) * w +
         (kw - 1) * (ptrdiff_t)p->dilation_w - (ptrdiff_t)p->pad_left;
    *mb = lo < 0 ? -lo : 0;
    need = *mb + n + (hi > 0 ? hi : 0) + MLCC_VF_LANES;
    return need <= mlcc_dw_scratch_floats(p) ? need : 0;
}

static void dw_small_prepare(const mlcc_conv2d_params *p, ptrdiff_t mb, dw_small_plan *s) {
    const ptrdiff_t w = (ptrdiff_t)p->in_w, kw_n = (ptrdiff_t)p->kernel_w;
    ptrdiff_t kh, kw, j, l;
    s->n = (ptrdiff_t)(p->in_h * p->in_w);
    s->w = w;
    s->mb = mb;
    s->nvec = (s->n + MLCC_VF_LANES - 1) / MLCC_VF_LANES;
    for (kh = 0; kh < (ptrdiff_t)p->kernel_h; kh++)
        for (kw = 0; kw < kw_n; kw++) {
            s->d[kh * kw_n + kw] = (kh * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top) * w +
                                   kw * (ptrdiff_t)p->dilation_w - (ptrdiff_t)p->pad_left;
        }
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
    for (j = 0; j < s->nvec; j++) {
        const ptrdiff_t q0 = (j + 1) * 16 > s->n ? s->n - 16 : j * 16;
        for (kh = 0; kh < (ptrdiff_t)p->kernel_h; kh++)
            for (kw = 0; kw < kw_n; kw++) {
                const ptrdiff_t dy = kh * (ptrdiff_t)p->dilation_h - (ptrdiff_t)p->pad_top;
                const ptrdiff_t dx = kw * (ptrdiff_t)p->dilation_w - (ptrdiff_t)p->pad_left;
                ptrdiff_t row = q0 / w, col = q0 % w;
                unsigned m = 0;
                for (l = 0; l < 16; l++) {
                    if (row + dy >= 0 && row + dy < (ptrdiff_t)p->in_h && col + dx >= 0 &&
                        col + dx < w)
                        m |= 1u << l;
                    if (++col == w) col = 0, row++;
                }
                s->km[j][kh * kw_n + kw] = (__mmask16)m;
            }
    }
#endif
    for (j = 0; j < s->nvec; j++) {
        /* the last vector starts at n - lanes (overlapping the one before) */
        const ptrdiff_t q0 = (j + 1) * MLCC_VF_LANES > s->n ? s->n - MLCC_VF_LANES : j * MLCC_VF_LANES;
        for (kw = 0; kw < kw_n; kw++) {
            const ptrdiff_t dx = kw * (ptrdiff_t)p->dilation_w - (ptrdiff_t)p->pad_left;
            ptrdiff_t col = q0 % w;   /* lane l's column, counted along (no division) */
            for (l = 0; l < MLCC_VF_LANES; l++) {
                s->ok[j][kw][l] = col + dx >= 0 && col + dx < w ? -1 : 0;
                if (++col == w) col = 0;
            }
        }
    }
}

static inline __attribute__((always_inline)) void
dw_small_plane(const dw_small_plan *s, const float *MLCC_RESTRICT xc, float *MLCC_RESTRICT buf,
               const float *MLCC_RESTRICT wt, const ptrdiff_t ntaps, const ptrdiff_t kw_n,
               const ptrdiff_t free_kw, float b, float *MLCC_RESTRICT yc, const mlcc_act *act) {
    const ptrdiff_t n = s->n;
    const mlcc_vf zero = mlcc_vf_splat(0.0f);
    float *pl = buf + s->mb;
    ptrdiff_t q, j, t;
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
    /* masked loads from the input itself: the same terms, zeros where padding was read */
#define DW_SMALL_KTAP(j, q0) \
    (wt[t] * (mlcc_vf)_mm512_maskz_loadu_ps(s->km[j][t], xc + (q0) + s->d[t]))
    (void)buf, (void)pl, (void)q, (void)zero, (void)free_kw;
    j = 0;
    for (; j + 4 <= s->nvec; j += 4) {   /* four chains (a 7 x 7 plane: its 4 vectors) */
        const ptrdiff_t q0 = j * 16, q1 = q0 + 16, q2 = q0 + 32;
        const ptrdiff_t q3 = (j + 4) * 16 > n ? n - 16 : q0 + 48;
        mlcc_vf a0 = mlcc_vf_splat(b), a1 = a0, a2 = a0, a3 = a0;
        for (t = 0; t < ntaps; t++) {
            a0 += DW_SMALL_KTAP(j, q0);
            a1 += DW_SMALL_KTAP(j + 1, q1);
            a2 += DW_SMALL_KTAP(j + 2, q2);
            a3 += DW_SMALL_KTAP(j + 3, q3);
        }
        mlcc_vf_store(yc + q0, mlcc_vf_act(act, a0));
        mlcc_vf_store(yc + q1, mlcc_vf_act(act, a1));
        mlcc_vf_store(yc + q2, mlcc_vf_act(act, a2));
        mlcc_vf_store(yc + q3, mlcc_vf_act(act, a3));
    }
    for (; j < s->nvec; j++) {
        const ptrdiff_t q0 = (j + 1) * 16 > n ? n - 16 : j * 16;
        mlcc_vf acc = mlcc_vf_splat(b);
        for (t = 0; t < ntaps; t++) acc += DW_SMALL_KTAP(j, q0);
        mlcc_vf_store(yc + q0, mlcc_vf_act(act, acc));
    }
#undef DW_SMALL_KTAP
    return;
#endif
    for (q = 0; q + MLCC_VF_LANES <= n; q += MLCC_VF_LANES) mlcc_vf_store(pl + q, mlcc_vf_load(xc + q));
    if (q < n) mlcc_vf_store(pl + n - MLCC_VF_LANES, mlcc_vf_load(xc + n - MLCC_VF_LANES));
/* free_kw: a kernel column of shift 0, which needs no mask (-1: none known at compile time) */
#define DW_SMALL_TAP(k, j, q0)                                                               \
    (t % kw_n == free_kw ? wt[t] * mlcc_vf_load(pl + (q0) + s->d[t])                        \
                         : wt[t] * mlcc_vf_select(s->ok[j][t % kw_n],                       \
                                                  mlcc_vf_load(pl + (q0) + s->d[t]), zero))
    j = 0;
    for (; j + 4 <= s->nvec && (j + 4) * MLCC_VF_LANES <= n; j += 4) {   /* four chains */
        const ptrdiff_t q0 = j * MLCC_VF_LANES;
        mlcc_vf a0 = mlcc_vf_splat(b), a1 = a0, a2 = a0, a3 = a0;
        for (t = 0; t < ntaps; t++) {
            a0 += DW_SMALL_TAP(t, j, q0);
            a1 += DW_SMALL_TAP(t, j + 1, q0 + MLCC_VF_LANES);
            a2 += DW_SMALL_TAP(t, j + 2, q0 + 2 * MLCC_VF_LANES);
            a3 += DW_SMALL_TAP(t, j + 3, q0 + 3 * MLCC_VF_LANES);
        }
        mlcc_vf_store(yc + q0, mlcc_vf_act(act, a0));
        mlcc_vf_store(yc + q0 + MLCC_VF_LANES, mlcc_vf_act(act, a1));
        mlcc_vf_store(yc + q0 + 2 * MLCC_VF_LANES, mlcc_vf_act(act, a2));
        mlcc_vf_store(yc + q0 + 3 * MLCC_VF_LANES, mlcc_vf_act(act, a3));
    }
    for (; j < s->nvec; j++) {
        const ptrdiff_t q0 = (j + 1) * MLCC_VF_LANES > n ? n - MLCC_VF_LANES : j * MLCC_VF_LANES;
        mlcc_vf acc = mlcc_vf_splat(b);
        for (t = 0; t < ntaps; t++) acc += DW_SMALL_TAP(t, j, q0);
        mlcc_vf_store(yc + q0, mlcc_vf_act(act, acc));
    }
#undef DW_SMALL_TAP
}

/* Channels [c0, c1) of every image by dw_small_plane, when the planes are small enough for it
 * (dw_small_floats); 0 otherwise. Shared by the generic and the wasm depthwise tasks. */
static int dw_small_channels(dw_job *job, int thread, ptrdiff_t c0, ptrdiff_t c1, float *pad) {
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t in_plane = (ptrdiff_t)p->in_h * (ptrdiff_t)p->in_w;
    const ptrdiff_t out_plane = (ptrdiff_t)p->out_h * (ptrdiff_t)p->out_w;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels;
    const ptrdiff_t kw_n = (ptrdiff_t)p->kernel_w, ntaps = (ptrdiff_t)p->kernel_h * kw_n;
    ptrdiff_t mb = 0, n, c;
    dw_small_plan sp;
    if (dw_small_floats(p, &mb) <= 0) return 0;
    dw_small_prepare(p, mb, &sp);
    if (!job->zeroed[thread]) {   /* the zeros around the copy, once per call */
        memset(pad, 0, (size_t)mlcc_dw_scratch_floats(p) * sizeof(float));
        job->zeroed[thread] = 1;
    }
    for (n = 0; n < p->batch; n++)
        for (c = c0; c < c1; c++) {
            const float *xc = job->x + (n * channels + c) * in_plane;
            float *yc = job->y + (n * channels + c) * out_plane;
            const float b = job->bias ? job->bias[c] : 0.0f;
            if (ntaps == 9 && kw_n == 3 && p->dilation_w == p->pad_left)
                dw_small_plane(&sp, xc, pad, job->w + c * 9, 9, 3, 1, b, yc, &p->act);
            else
                dw_small_plane(&sp, xc, pad, job->w + c * ntaps, ntaps, kw_n, -1, b, yc, &p->act);
        }
    return 1;
}
#endif

/* ---- AVX-512: channels in lanes ----
 * Sixteen channels at a time, one per lane, the way onnxruntime's NCHWc layout computes
 * depthwise: each input row of the sixteen channels is transposed (16 x 16 blocks of
 * shuffles) into a ring of padded rows of vectors, every output position is then 9 FMAs on
 * full vectors whatever the plane's width or stride (no virtual columns, no phase split, no
 * lanes past a 7-wide row), and each 16 positions are transposed back and stored straight
 * into the channels' output planes (the last ones masked). Rows are transposed as the outputs
 * reach them, so the ring holds only the rows one chunk of 16 outputs reads. Each output sums
 * its taps in the same order from the bias, zeros where padding was read: the same bits as
 * dw_flat_run. A tail of fewer than 16 channels runs with the lanes past it zero. */
#if MLCC_HAVE_VECTORS && defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64 && \
    !defined(__wasm_simd128__)
#define DW_CIL 1

/* r[i] (lane j) -> r[j] (lane i), in 64 shuffles */
static inline __attribute__((always_inline)) void dw_cil_transpose(__m512 r[16]) {
    __m512 t[16], u[16];
    int i, j;
    for (i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 4; i++) {
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (j = 0; j < 4; j++) {
        const __m512 p = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
        const __m512 q = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
        const __m512 s = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
        const __m512 v = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_f32x4(p, q, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(p, q, 0xDD);
        r[8 + j] = _mm512_shuffle_f32x4(s, v, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(s, v, 0xDD);
    }
}

/* The ring's geometry: row width wp (vectors), rows rr; 0 where the layer does not take it */
static ptrdiff_t dw_cil_floats(const mlcc_conv2d_params *p, ptrdiff_t *wp, ptrdiff_t *rr) {
    const ptrdiff_t ow_n = (ptrdiff_t)p->out_w, oh_n = (ptrdiff_t)p->out_h;
    const ptrdiff_t s = (ptrdiff_t)p->stride_h, c = (ptrdiff_t)p->out_channels;
    const ptrdiff_t lanes = (c + 15) / 16 * 16;
    ptrdiff_t span;
    /* output rows of at most 8 and three quarters of the lanes filled with channels; the other
     * layers read their rows in place (dw_direct), measured against it: 576 channels 14 -> 7
     * 0.8x, 960 of 7 x 7 1.0x, 19 channels 13 -> 7 1.15x, 14 x 14 stride 1 1.2-1.45x */
    if (p->kernel_h != 3 || p->kernel_w != 3 || p->dilation_h != 1 || p->dilation_w != 1 ||
        p->stride_w != p->stride_h || s < 1 || s > 2 || ow_n > 8 || 4 * c < 3 * lanes)
        return 0;
    *wp = (ow_n - 1) * s + 3;
    if (*wp < (ptrdiff_t)(p->pad_left + p->in_w)) *wp = (ptrdiff_t)(p->pad_left + p->in_w);
    span = (15 + ow_n - 1) / ow_n + 1;   /* output rows 16 consecutive outputs touch */
    if (span > oh_n) span = oh_n;
    *rr = (span - 1) * s + 3;
    if ((*rr + 1) * *wp * 16 > mlcc_dw_scratch_floats(p)) return 0;   /* (depthwise.h counts it) */
    return (*rr + 1) * *wp * 16;   /* the ring and a row of zeros */
}

/* Input row ih of channels [c, c + nc) of image n (x: the row in the first channel),
 * transposed into ring row dst (the row's first input column) */
static inline __attribute__((always_inline)) void
dw_cil_row(const float *x, ptrdiff_t plane, ptrdiff_t iw_n, ptrdiff_t nc, float *dst) {
    __m512 r[16];
    ptrdiff_t w0 = 0, i, j;
    const __mmask16 m = iw_n < 16 ? (__mmask16)((1u << iw_n) - 1u) : (__mmask16)0xFFFF;
    for (;;) {   /* 16 columns at a time, the last 16 overlapping the ones before */
        const ptrdiff_t at = w0 + 16 <= iw_n || iw_n < 16 ? w0 : iw_n - 16;
        if (nc == 16)
            for (i = 0; i < 16; i++) r[i] = _mm512_maskz_loadu_ps(m, x + i * plane + at);
        else
            for (i = 0; i < 16; i++)
                r[i] = i < nc ? _mm512_maskz_loadu_ps(m, x + i * plane + at) : _mm512_setzero_ps();
        dw_cil_transpose(r);
        for (j = 0; j < 16 && at + j < iw_n; j++) _mm512_storeu_ps(dst + (at + j) * 16, r[j]);
        w0 += 16;
        if (w0 >= iw_n) break;
    }
}

enum { DW_CIL_NONE, DW_CIL_RELU, DW_CIL_CLIP, DW_CIL_OTHER };

/* mlcc_vf_act's bits: max(x, 0) is x > 0 ? x : 0; max(lo, min(hi, x)) is
 * x < lo ? lo : (x > hi ? hi : x) for lo <= hi (NaN and -0 included: minps/maxps return their
 * second operand for them) */
static inline __attribute__((always_inline)) __m512 dw_cil_act(int cls, __m512 x, __m512 lo,
                                                               __m512 hi, const mlcc_act *act) {
    switch (cls) {
    case DW_CIL_NONE: return x;
    case DW_CIL_RELU: return _mm512_max_ps(x, _mm512_setzero_ps());
    case DW_CIL_CLIP: return _mm512_max_ps(lo, _mm512_min_ps(hi, x));
    default: (void)act; return x;   /* the others after the stores: dw_act_after */
    }
}

/* The other activations (hard swish, sigmoid, ...) over n values just stored, by
 * mlcc_act_apply (lane for lane mlcc_vf_act: the same bits as dw_flat_run), out of line: inlined
 * in the loops that computed them, the scalar fallback of mlcc_vf_act spilled their registers
 * (PP-OCR det's hard-swish layers 1.6x slower than the flat kernel). */
static __attribute__((noinline)) void dw_act_after(const mlcc_act *act, float *y, ptrdiff_t n) {
    mlcc_act_apply(act, y, n);
}

/* Output positions ow0.. ow0 + len - 1 of one output row (r0, r1, r2: its three input rows in
 * the ring, from padded column 0) into res; four positions at a time (independent chains) */
#define DW_CIL_TAPS(acc, o)                                                       \
    do {                                                                          \
        acc = _mm512_fmadd_ps(wv[0], _mm512_loadu_ps(r0 + (o)), acc);             \
        acc = _mm512_fmadd_ps(wv[1], _mm512_loadu_ps(r0 + (o) + 16), acc);        \
        acc = _mm512_fmadd_ps(wv[2], _mm512_loadu_ps(r0 + (o) + 32), acc);        \
        acc = _mm512_fmadd_ps(wv[3], _mm512_loadu_ps(r1 + (o)), acc);             \
        acc = _mm512_fmadd_ps(wv[4], _mm512_loadu_ps(r1 + (o) + 16), acc);        \
        acc = _mm512_fmadd_ps(wv[5], _mm512_loadu_ps(r1 + (o) + 32), acc);        \
        acc = _mm512_fmadd_ps(wv[6], _mm512_loadu_ps(r2 + (o)), acc);             \
        acc = _mm512_fmadd_ps(wv[7], _mm512_loadu_ps(r2 + (o) + 16), acc);        \
        acc = _mm512_fmadd_ps(wv[8], _mm512_loadu_ps(r2 + (o) + 32), acc);        \
    } while (0)

static inline __attribute__((always_inline)) void
dw_cil_seg(const float *r0, const float *r1, const float *r2, ptrdiff_t s, ptrdiff_t ow0,
           ptrdiff_t len, const __m512 *wv, __m512 bv, __m512 *res, int cls, __m512 lo,
           __m512 hi, const mlcc_act *act) {
    ptrdiff_t j = 0;
    for (; j + 4 <= len; j += 4) {
        const ptrdiff_t o = (ow0 + j) * s * 16;
        __m512 a0 = bv, a1 = bv, a2 = bv, a3 = bv;
        DW_CIL_TAPS(a0, o);
        DW_CIL_TAPS(a1, o + s * 16);
        DW_CIL_TAPS(a2, o + 2 * s * 16);
        DW_CIL_TAPS(a3, o + 3 * s * 16);
        res[j] = dw_cil_act(cls, a0, lo, hi, act);
        res[j + 1] = dw_cil_act(cls, a1, lo, hi, act);
        res[j + 2] = dw_cil_act(cls, a2, lo, hi, act);
        res[j + 3] = dw_cil_act(cls, a3, lo, hi, act);
    }
    for (; j < len; j++) {
        __m512 a0 = bv;
        DW_CIL_TAPS(a0, (ow0 + j) * s * 16);
        res[j] = dw_cil_act(cls, a0, lo, hi, act);
    }
}
#undef DW_CIL_TAPS

/* Channels [c, c + nc) of image n: x and y point at channel c's planes */
static inline __attribute__((always_inline)) void
dw_cil_block(const mlcc_conv2d_params *p, const float *x, const float *wt, const float *bias,
             float *y, ptrdiff_t nc, float *ring, ptrdiff_t wp, ptrdiff_t rr, int cls) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t s = (ptrdiff_t)p->stride_h, pt = (ptrdiff_t)p->pad_top;
    const ptrdiff_t pl = (ptrdiff_t)p->pad_left;
    const ptrdiff_t in_plane = ih_n * iw_n, out_plane = oh_n * ow_n;
    const float *zrow = ring + rr * wp * 16;
    const __m512 lo = _mm512_set1_ps(p->act.alpha), hi = _mm512_set1_ps(p->act.beta);
    __m512 wv[9], bv, res[16];
    ptrdiff_t loaded = 0, q0, i, t;
    {
        float tmp[9][16], bt[16];
        for (i = 0; i < 16; i++) {
            for (t = 0; t < 9; t++) tmp[t][i] = i < nc ? wt[i * 9 + t] : 0.0f;
            bt[i] = i < nc && bias ? bias[i] : 0.0f;
        }
        for (t = 0; t < 9; t++) wv[t] = _mm512_loadu_ps(tmp[t]);
        bv = _mm512_loadu_ps(bt);
    }
    for (q0 = 0; q0 < out_plane; q0 += 16) {
        const ptrdiff_t cnt = out_plane - q0 < 16 ? out_plane - q0 : 16;
        ptrdiff_t need = (q0 + cnt - 1) / ow_n * s + 3 - pt, oh = q0 / ow_n, ow = q0 % ow_n, j;
        if (need > ih_n) need = ih_n;
        for (; loaded < need; loaded++)   /* the rows these outputs read, into the ring */
            dw_cil_row(x + loaded * iw_n, in_plane, iw_n, nc, ring + (loaded % rr) * wp * 16 + pl * 16);
        for (j = 0; j < cnt;) {   /* the run of this chunk in output row oh */
            const ptrdiff_t len = ow_n - ow < cnt - j ? ow_n - ow : cnt - j;
            const float *rk[3];
            ptrdiff_t k;
            for (k = 0; k < 3; k++) {
                const ptrdiff_t ih = oh * s + k - pt;
                rk[k] = ih >= 0 && ih < ih_n ? ring + (ih % rr) * wp * 16 : zrow;
            }
            dw_cil_seg(rk[0], rk[1], rk[2], s, ow, len, wv, bv, res + j, cls, lo, hi, &p->act);
            j += len;
            ow = 0;
            oh++;
        }
        for (; j < 16; j++) res[j] = _mm512_setzero_ps();
        dw_cil_transpose(res);
        {
            const __mmask16 m = (__mmask16)((1u << cnt) - 1u);
            for (i = 0; i < nc; i++) _mm512_mask_storeu_ps(y + i * out_plane + q0, m, res[i]);
        }
    }
}

/* Channels [c0, c1) of every image; 0 where the layer does not take this path. */
static int dw_cil_channels(dw_job *job, int thread, ptrdiff_t c0, ptrdiff_t c1, float *pad) {
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels;
    const ptrdiff_t in_plane = (ptrdiff_t)(p->in_h * p->in_w);
    const ptrdiff_t out_plane = (ptrdiff_t)(p->out_h * p->out_w);
    const int kind = (int)p->act.kind;
    ptrdiff_t wp, rr, n, c;
    if (dw_cil_floats(p, &wp, &rr) <= 0) return 0;
    if (!job->zeroed[thread]) {   /* the padding columns and the zero row, once per call */
        memset(pad, 0, (size_t)((rr + 1) * wp * 16) * sizeof(float));
        job->zeroed[thread] = 1;
    }
    for (n = 0; n < p->batch; n++)
        for (c = c0; c < c1; c += 16) {
            const ptrdiff_t nc = c1 - c < 16 ? c1 - c : 16;
            const float *x = job->x + (n * channels + c) * in_plane, *wt = job->w + c * 9;
            const float *bias = job->bias ? job->bias + c : NULL;
            float *y = job->y + (n * channels + c) * out_plane;
            if (kind == MLCC_ACT_CLIP && p->act.alpha <= p->act.beta)
                dw_cil_block(p, x, wt, bias, y, nc, pad, wp, rr, DW_CIL_CLIP);
            else if (kind == MLCC_ACT_RELU)
                dw_cil_block(p, x, wt, bias, y, nc, pad, wp, rr, DW_CIL_RELU);
            else if (kind == MLCC_ACT_NONE)
                dw_cil_block(p, x, wt, bias, y, nc, pad, wp, rr, DW_CIL_NONE);
            else {
                ptrdiff_t i;
                dw_cil_block(p, x, wt, bias, y, nc, pad, wp, rr, DW_CIL_OTHER);
                for (i = 0; i < nc; i++) dw_act_after(&p->act, y + i * out_plane, out_plane);
            }
        }
    return 1;
}

/* ---- AVX-512: wide planes of stride 1 read in place ----
 * Each output row in vectors of 16 columns: tap (kh, kw) is a load of input row
 * oh + kh - pad_top at column j0 + kw - pad_left, its lanes outside the row masked off (they
 * read nothing and add the zero the padding holds); rows above and below the input read a
 * row of zeros. No copy in, no virtual columns, no copy out, no transposes. The same terms in
 * the same order as dw_flat_run: the same bits. */
static inline __attribute__((always_inline)) __mmask16 dw_row_mask(ptrdiff_t c, ptrdiff_t w) {
    const ptrdiff_t lo = c < 0 ? -c : 0, hi = w - c;
    unsigned m;
    if (hi <= lo) return 0;
    m = hi >= 16 ? 0xFFFFu : (1u << hi) - 1u;
    return (__mmask16)(m & ~((1u << lo) - 1u));
}

static inline __attribute__((always_inline)) void
dw_direct_plane(const mlcc_conv2d_params *p, const float *xc, const float *wt, float b, float *yc,
                const float *zrow, int cls) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    const __m512 lo = _mm512_set1_ps(p->act.alpha), hi = _mm512_set1_ps(p->act.beta);
    __m512 wv[9];
    const __m512 bv = _mm512_set1_ps(b);
    ptrdiff_t oh, j0, t;
    for (t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(wt[t]);
#define DW_DIRECT_ROW(ih) ((ih) >= 0 && (ih) < ih_n ? xc + (ih) * iw_n : zrow)
    if (pl == 1 && ow_n == iw_n) {
        /* columns j - 1, j, j + 1: one load per row and vector (from column j0, aligned where
         * the row is), the last lane of the vector before and the first of the next one
         * shifted in */
#define DW_DIRECT1_ROW(r, prev, cur, v0, v1, v2)                                             \
    do {                                                                                    \
        const __m512 nx = _mm512_maskz_loadu_ps(mn, (r) + j0 + 16);                         \
        v0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(cur),              \
                                                     _mm512_castps_si512(prev), 15));       \
        v1 = cur;                                                                           \
        v2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(nx),               \
                                                     _mm512_castps_si512(cur), 1));         \
        prev = cur;                                                                         \
        cur = nx;                                                                           \
    } while (0)
        const __mmask16 m00 = dw_row_mask(0, iw_n);
        for (oh = 0; oh < oh_n; oh += 2) {
            const int two = oh + 1 < oh_n;
            const float *r0 = DW_DIRECT_ROW(oh - pt), *r1 = DW_DIRECT_ROW(oh + 1 - pt);
            const float *r2 = DW_DIRECT_ROW(oh + 2 - pt), *r3 = two ? DW_DIRECT_ROW(oh + 3 - pt) : zrow;
            __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;
            __m512 c0 = _mm512_maskz_loadu_ps(m00, r0), c1 = _mm512_maskz_loadu_ps(m00, r1);
            __m512 c2 = _mm512_maskz_loadu_ps(m00, r2), c3 = _mm512_maskz_loadu_ps(m00, r3);
            for (j0 = 0; j0 < ow_n; j0 += 16) {
                const __mmask16 mn = dw_row_mask(j0 + 16, iw_n);
                const __mmask16 ms = ow_n - j0 >= 16 ? (__mmask16)0xFFFF
                                                     : (__mmask16)((1u << (ow_n - j0)) - 1u);
                __m512 a = bv, d = bv, v0, v1, v2;
                DW_DIRECT1_ROW(r0, p0, c0, v0, v1, v2);
                a = _mm512_fmadd_ps(wv[0], v0, a);
                a = _mm512_fmadd_ps(wv[1], v1, a);
                a = _mm512_fmadd_ps(wv[2], v2, a);
                DW_DIRECT1_ROW(r1, p1, c1, v0, v1, v2);
                a = _mm512_fmadd_ps(wv[3], v0, a);
                a = _mm512_fmadd_ps(wv[4], v1, a);
                a = _mm512_fmadd_ps(wv[5], v2, a);
                d = _mm512_fmadd_ps(wv[0], v0, d);
                d = _mm512_fmadd_ps(wv[1], v1, d);
                d = _mm512_fmadd_ps(wv[2], v2, d);
                DW_DIRECT1_ROW(r2, p2, c2, v0, v1, v2);
                a = _mm512_fmadd_ps(wv[6], v0, a);
                a = _mm512_fmadd_ps(wv[7], v1, a);
                a = _mm512_fmadd_ps(wv[8], v2, a);
                d = _mm512_fmadd_ps(wv[3], v0, d);
                d = _mm512_fmadd_ps(wv[4], v1, d);
                d = _mm512_fmadd_ps(wv[5], v2, d);
                _mm512_mask_storeu_ps(yc + oh * ow_n + j0, ms, dw_cil_act(cls, a, lo, hi, &p->act));
                DW_DIRECT1_ROW(r3, p3, c3, v0, v1, v2);
                if (two) {
                    d = _mm512_fmadd_ps(wv[6], v0, d);
                    d = _mm512_fmadd_ps(wv[7], v1, d);
                    d = _mm512_fmadd_ps(wv[8], v2, d);
                    _mm512_mask_storeu_ps(yc + (oh + 1) * ow_n + j0, ms,
                                          dw_cil_act(cls, d, lo, hi, &p->act));
                }
            }
            if (cls == DW_CIL_OTHER) dw_act_after(&p->act, yc + oh * ow_n, (two ? 2 : 1) * ow_n);
        }
#undef DW_DIRECT1_ROW
        return;
    }
    for (oh = 0; oh < oh_n; oh += 2) {   /* two output rows share two of their input rows */
        const int two = oh + 1 < oh_n;
        const float *r0 = DW_DIRECT_ROW(oh - pt), *r1 = DW_DIRECT_ROW(oh + 1 - pt);
        const float *r2 = DW_DIRECT_ROW(oh + 2 - pt), *r3 = two ? DW_DIRECT_ROW(oh + 3 - pt) : zrow;
        for (j0 = 0; j0 < ow_n; j0 += 16) {
            const ptrdiff_t c = j0 - pl;
            const __mmask16 m0 = dw_row_mask(c, iw_n), m1 = dw_row_mask(c + 1, iw_n);
            const __mmask16 m2 = dw_row_mask(c + 2, iw_n);
            const __mmask16 ms = ow_n - j0 >= 16 ? (__mmask16)0xFFFF
                                                 : (__mmask16)((1u << (ow_n - j0)) - 1u);
            __m512 a = bv, d = bv, v0, v1, v2;
            v0 = _mm512_maskz_loadu_ps(m0, r0 + c);
            v1 = _mm512_maskz_loadu_ps(m1, r0 + c + 1);
            v2 = _mm512_maskz_loadu_ps(m2, r0 + c + 2);
            a = _mm512_fmadd_ps(wv[0], v0, a);
            a = _mm512_fmadd_ps(wv[1], v1, a);
            a = _mm512_fmadd_ps(wv[2], v2, a);
            v0 = _mm512_maskz_loadu_ps(m0, r1 + c);
            v1 = _mm512_maskz_loadu_ps(m1, r1 + c + 1);
            v2 = _mm512_maskz_loadu_ps(m2, r1 + c + 2);
            a = _mm512_fmadd_ps(wv[3], v0, a);
            a = _mm512_fmadd_ps(wv[4], v1, a);
            a = _mm512_fmadd_ps(wv[5], v2, a);
            d = _mm512_fmadd_ps(wv[0], v0, d);
            d = _mm512_fmadd_ps(wv[1], v1, d);
            d = _mm512_fmadd_ps(wv[2], v2, d);
            v0 = _mm512_maskz_loadu_ps(m0, r2 + c);
            v1 = _mm512_maskz_loadu_ps(m1, r2 + c + 1);
            v2 = _mm512_maskz_loadu_ps(m2, r2 + c + 2);
            a = _mm512_fmadd_ps(wv[6], v0, a);
            a = _mm512_fmadd_ps(wv[7], v1, a);
            a = _mm512_fmadd_ps(wv[8], v2, a);
            d = _mm512_fmadd_ps(wv[3], v0, d);
            d = _mm512_fmadd_ps(wv[4], v1, d);
            d = _mm512_fmadd_ps(wv[5], v2, d);
            _mm512_mask_storeu_ps(yc + oh * ow_n + j0, ms, dw_cil_act(cls, a, lo, hi, &p->act));
            if (two) {
                d = _mm512_fmadd_ps(wv[6], _mm512_maskz_loadu_ps(m0, r3 + c), d);
                d = _mm512_fmadd_ps(wv[7], _mm512_maskz_loadu_ps(m1, r3 + c + 1), d);
                d = _mm512_fmadd_ps(wv[8], _mm512_maskz_loadu_ps(m2, r3 + c + 2), d);
                _mm512_mask_storeu_ps(yc + (oh + 1) * ow_n + j0, ms,
                                      dw_cil_act(cls, d, lo, hi, &p->act));
            }
        }
        if (cls == DW_CIL_OTHER) dw_act_after(&p->act, yc + oh * ow_n, (two ? 2 : 1) * ow_n);
    }
#undef DW_DIRECT_ROW
}

/* Stride 2: output column j reads input columns 2 j + kw - pad_left, the even lanes of two
 * loads (kw = 0, 2: from column 2 j0 - pad_left and 2 more; kw = 1: the odd lanes of the
 * first pair), one permute each; two output rows share their middle input row. */
static inline __attribute__((always_inline)) void
dw_direct2_plane(const mlcc_conv2d_params *p, const float *xc, const float *wt, float b,
                 float *yc, const float *zrow, int cls) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    const __m512 lo = _mm512_set1_ps(p->act.alpha), hi = _mm512_set1_ps(p->act.beta);
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 wv[9];
    const __m512 bv = _mm512_set1_ps(b);
    ptrdiff_t oh, j0, t;
    for (t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(wt[t]);
#define DW_DIRECT_ROW(ih) ((ih) >= 0 && (ih) < ih_n ? xc + (ih) * iw_n : zrow)
#define DW_DIRECT2_TAPS(r, v0, v1, v2)                                                       \
    do {                                                                                    \
        const __m512 xa = _mm512_maskz_loadu_ps(ma, (r) + c);                               \
        const __m512 xb = _mm512_maskz_loadu_ps(mb, (r) + c + 16);                          \
        v0 = _mm512_permutex2var_ps(xa, ev, xb);                                            \
        v1 = _mm512_permutex2var_ps(xa, od, xb);                                            \
        v2 = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(mc, (r) + c + 2), ev,             \
                                    _mm512_maskz_loadu_ps(md, (r) + c + 18));               \
    } while (0)
    if (pl == 1) {
        /* columns 2 j - 1, 2 j, 2 j + 1: the odd lanes of the pair before shifted in, the
         * even and the odd lanes of two loads from column 2 j0 (aligned where the row is) */
#define DW_DIRECT2_PAIR(r, prev, v0, v1, v2)                                                 \
    do {                                                                                    \
        const __m512 xa = _mm512_maskz_loadu_ps(ma, (r) + 2 * j0);                          \
        const __m512 xb = _mm512_maskz_loadu_ps(mb, (r) + 2 * j0 + 16);                     \
        v1 = _mm512_permutex2var_ps(xa, ev, xb);                                            \
        v2 = _mm512_permutex2var_ps(xa, od, xb);                                            \
        v0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v2),               \
                                                     _mm512_castps_si512(prev), 15));       \
        prev = v2;                                                                          \
    } while (0)
        for (oh = 0; oh < oh_n; oh += 2) {
            const int two = oh + 1 < oh_n;
            const float *r0 = DW_DIRECT_ROW(2 * oh - pt), *r1 = DW_DIRECT_ROW(2 * oh + 1 - pt);
            const float *r2 = DW_DIRECT_ROW(2 * oh + 2 - pt);
            const float *r3 = two ? DW_DIRECT_ROW(2 * oh + 3 - pt) : zrow;
            const float *r4 = two ? DW_DIRECT_ROW(2 * oh + 4 - pt) : zrow;
            __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0;
            for (j0 = 0; j0 < ow_n; j0 += 16) {
                const __mmask16 ma = dw_row_mask(2 * j0, iw_n), mb = dw_row_mask(2 * j0 + 16, iw_n);
                const __mmask16 ms = ow_n - j0 >= 16 ? (__mmask16)0xFFFF
                                                     : (__mmask16)((1u << (ow_n - j0)) - 1u);
                __m512 a = bv, d = bv, v0, v1, v2;
                DW_DIRECT2_PAIR(r0, p0, v0, v1, v2);
                a = _mm512_fmadd_ps(wv[0], v0, a);
                a = _mm512_fmadd_ps(wv[1], v1, a);
                a = _mm512_fmadd_ps(wv[2], v2, a);
                DW_DIRECT2_PAIR(r1, p1, v0, v1, v2);
                a = _mm512_fmadd_ps(wv[3], v0, a);
                a = _mm512_fmadd_ps(wv[4], v1, a);
                a = _mm512_fmadd_ps(wv[5], v2, a);
                DW_DIRECT2_PAIR(r2, p2, v0, v1, v2);
                a = _mm512_fmadd_ps(wv[6], v0, a);
                a = _mm512_fmadd_ps(wv[7], v1, a);
                a = _mm512_fmadd_ps(wv[8], v2, a);
                d = _mm512_fmadd_ps(wv[0], v0, d);
                d = _mm512_fmadd_ps(wv[1], v1, d);
                d = _mm512_fmadd_ps(wv[2], v2, d);
                _mm512_mask_storeu_ps(yc + oh * ow_n + j0, ms, dw_cil_act(cls, a, lo, hi, &p->act));
                if (two) {
                    DW_DIRECT2_PAIR(r3, p3, v0, v1, v2);
                    d = _mm512_fmadd_ps(wv[3], v0, d);
                    d = _mm512_fmadd_ps(wv[4], v1, d);
                    d = _mm512_fmadd_ps(wv[5], v2, d);
                    DW_DIRECT2_PAIR(r4, p4, v0, v1, v2);
                    d = _mm512_fmadd_ps(wv[6], v0, d);
                    d = _mm512_fmadd_ps(wv[7], v1, d);
                    d = _mm512_fmadd_ps(wv[8], v2, d);
                    _mm512_mask_storeu_ps(yc + (oh + 1) * ow_n + j0, ms,
                                          dw_cil_act(cls, d, lo, hi, &p->act));
                }
            }
            if (cls == DW_CIL_OTHER) dw_act_after(&p->act, yc + oh * ow_n, (two ? 2 : 1) * ow_n);
        }
#undef DW_DIRECT2_PAIR
        return;
    }
    for (oh = 0; oh < oh_n; oh += 2) {
        const int two = oh + 1 < oh_n;
        const float *r0 = DW_DIRECT_ROW(2 * oh - pt), *r1 = DW_DIRECT_ROW(2 * oh + 1 - pt);
        const float *r2 = DW_DIRECT_ROW(2 * oh + 2 - pt);
        const float *r3 = two ? DW_DIRECT_ROW(2 * oh + 3 - pt) : zrow;
        const float *r4 = two ? DW_DIRECT_ROW(2 * oh + 4 - pt) : zrow;
        for (j0 = 0; j0 < ow_n; j0 += 16) {
            const ptrdiff_t c = 2 * j0 - pl;
            const __mmask16 ma = dw_row_mask(c, iw_n), mb = dw_row_mask(c + 16, iw_n);
            const __mmask16 mc = dw_row_mask(c + 2, iw_n), md = dw_row_mask(c + 18, iw_n);
            const __mmask16 ms = ow_n - j0 >= 16 ? (__mmask16)0xFFFF
                                                 : (__mmask16)((1u << (ow_n - j0)) - 1u);
            __m512 a = bv, d = bv, v0, v1, v2;
            DW_DIRECT2_TAPS(r0, v0, v1, v2);
            a = _mm512_fmadd_ps(wv[0], v0, a);
            a = _mm512_fmadd_ps(wv[1], v1, a);
            a = _mm512_fmadd_ps(wv[2], v2, a);
            DW_DIRECT2_TAPS(r1, v0, v1, v2);
            a = _mm512_fmadd_ps(wv[3], v0, a);
            a = _mm512_fmadd_ps(wv[4], v1, a);
            a = _mm512_fmadd_ps(wv[5], v2, a);
            DW_DIRECT2_TAPS(r2, v0, v1, v2);
            a = _mm512_fmadd_ps(wv[6], v0, a);
            a = _mm512_fmadd_ps(wv[7], v1, a);
            a = _mm512_fmadd_ps(wv[8], v2, a);
            d = _mm512_fmadd_ps(wv[0], v0, d);
            d = _mm512_fmadd_ps(wv[1], v1, d);
            d = _mm512_fmadd_ps(wv[2], v2, d);
            _mm512_mask_storeu_ps(yc + oh * ow_n + j0, ms, dw_cil_act(cls, a, lo, hi, &p->act));
            if (two) {
                DW_DIRECT2_TAPS(r3, v0, v1, v2);
                d = _mm512_fmadd_ps(wv[3], v0, d);
                d = _mm512_fmadd_ps(wv[4], v1, d);
                d = _mm512_fmadd_ps(wv[5], v2, d);
                DW_DIRECT2_TAPS(r4, v0, v1, v2);
                d = _mm512_fmadd_ps(wv[6], v0, d);
                d = _mm512_fmadd_ps(wv[7], v1, d);
                d = _mm512_fmadd_ps(wv[8], v2, d);
                _mm512_mask_storeu_ps(yc + (oh + 1) * ow_n + j0, ms,
                                      dw_cil_act(cls, d, lo, hi, &p->act));
            }
        }
        if (cls == DW_CIL_OTHER) dw_act_after(&p->act, yc + oh * ow_n, (two ? 2 : 1) * ow_n);
    }
#undef DW_DIRECT2_TAPS
#undef DW_DIRECT_ROW
}

/* Whether a layer can take dw_direct: 3 x 3, stride 1 or 2 (the zero row fits the slice) */
static int dw_direct_takes(const mlcc_conv2d_params *p) {
    return p->kernel_h == 3 && p->kernel_w == 3 && p->dilation_h == 1 && p->dilation_w == 1 &&
           p->stride_h == p->stride_w && p->stride_h >= 1 && p->stride_h <= 2 &&
           p->pad_left <= 2 && p->out_w <= p->in_w + 2 &&
           (ptrdiff_t)p->in_w + 64 <= mlcc_dw_scratch_floats(p);
}

static void dw_direct_channels(dw_job *job, int thread, ptrdiff_t c0, ptrdiff_t c1, float *pad) {
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels;
    const ptrdiff_t in_plane = (ptrdiff_t)(p->in_h * p->in_w);
    const ptrdiff_t out_plane = (ptrdiff_t)(p->out_h * p->out_w);
    const int kind = (int)p->act.kind;
    ptrdiff_t n, c;
    if (!job->zeroed[thread]) {   /* the row of zeros (read from 32 floats before it) */
        memset(pad, 0, (size_t)(p->in_w + 64) * sizeof(float));
        job->zeroed[thread] = 1;
    }
    for (n = 0; n < p->batch; n++)
        for (c = c0; c < c1; c++) {
            const float *xc = job->x + (n * channels + c) * in_plane, *wt = job->w + c * 9;
            const float b = job->bias ? job->bias[c] : 0.0f;
            float *yc = job->y + (n * channels + c) * out_plane;
            const int cls = kind == MLCC_ACT_CLIP && p->act.alpha <= p->act.beta ? DW_CIL_CLIP
                            : kind == MLCC_ACT_RELU ? DW_CIL_RELU
                            : kind == MLCC_ACT_NONE ? DW_CIL_NONE : DW_CIL_OTHER;
            /* one copy of the plane loop per activation: the generic one's scalar fallback
             * would otherwise spill the loop's registers (1.6x slower with none) */
#define DW_DIRECT_CASE(plane, k) \
    case k: plane(p, xc, wt, b, yc, pad + 32, k); break
            if (p->stride_h == 2)
                switch (cls) {
                DW_DIRECT_CASE(dw_direct2_plane, DW_CIL_CLIP);
                DW_DIRECT_CASE(dw_direct2_plane, DW_CIL_RELU);
                DW_DIRECT_CASE(dw_direct2_plane, DW_CIL_NONE);
                default: dw_direct2_plane(p, xc, wt, b, yc, pad + 32, DW_CIL_OTHER);
                }
            else
                switch (cls) {
                DW_DIRECT_CASE(dw_direct_plane, DW_CIL_CLIP);
                DW_DIRECT_CASE(dw_direct_plane, DW_CIL_RELU);
                DW_DIRECT_CASE(dw_direct_plane, DW_CIL_NONE);
                default: dw_direct_plane(p, xc, wt, b, yc, pad + 32, DW_CIL_OTHER);
                }
#undef DW_DIRECT_CASE
        }
}

#endif

#if MLCC_HAVE_VECTORS && (defined(__wasm_simd128__) || MLCC_VECTOR_BYTES == 32)
#define DW_IP 1
/* The activation of the kernels below, its class chosen once per call: ReLU and Clip inline
 * (wasm: f32x4.pmax/pmin; elsewhere as mlcc_tile_act), the others by mlcc_vf_act. Lane for lane
 * mlcc_vf_act: the same bits (gemm.c, packed_tile_whole). */
enum { DW_ACT_NONE, DW_ACT_RELU, DW_ACT_CLIP, DW_ACT_OTHER };

static inline __attribute__((always_inline)) mlcc_vf dw_act_vec(int cls, mlcc_vf x, mlcc_vf lo,
                                                                mlcc_vf hi,
                                                                const mlcc_act *act) {
    switch (cls) {
    case DW_ACT_NONE: return x;
#if defined(__wasm_simd128__)
    case DW_ACT_RELU: return __builtin_wasm_pmax_f32x4(lo, x);
    case DW_ACT_CLIP: return __builtin_wasm_pmax_f32x4(__builtin_wasm_pmin_f32x4(x, hi), lo);
#else
    case DW_ACT_RELU: return mlcc_vf_select(x > lo, x, lo);
    case DW_ACT_CLIP: return mlcc_vf_select(x < lo, lo, mlcc_vf_select(x > hi, hi, x));
#endif
    default: return mlcc_vf_act(act, x);
    }
}

static int dw_act_class(const mlcc_act *act) {
    return act->kind == MLCC_ACT_NONE ? DW_ACT_NONE : act->kind == MLCC_ACT_RELU ? DW_ACT_RELU
           : act->kind == MLCC_ACT_CLIP ? DW_ACT_CLIP : DW_ACT_OTHER;
}

/* clang (wasm) keeps these loops rolled: V8 issues a block's loads before its arithmetic */
#if defined(__clang__)
#define DW_NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define DW_NO_UNROLL
#endif
#endif

#if MLCC_HAVE_VECTORS && defined(__wasm_simd128__)
/* ---- wasm: the flat depthwise kernel writing the output rows directly ----
 * dw_flat_task computes a channel's virtual outputs into a buffer (oh rows of wq >= ow columns)
 * and copies the rows out, and applies the activation through mlcc_vf_act (a br_table per
 * vector in V8). Here each output row's vectors are stored in place (a row's last vector may
 * run past its end into the next row, which is written afterwards; never past the plane), and
 * the activation is chosen once per call: ReLU and Clip as f32x4.pmax/pmin, the same bits as
 * mlcc_vf_act (gemm.c, packed_tile_whole). Each output sums its taps in the same order. */

/* nv vectors (1, 2 or 4: a constant after inlining) of virtual outputs from src into y */
static inline __attribute__((always_inline)) void dw_wasm_vecs(int nv, const float *src,
                                                               const ptrdiff_t *off,
                                                               const float *wt, ptrdiff_t ntaps,
                                                               float b, float *y, int cls,
                                                               mlcc_vf lo, mlcc_vf hi,
                                                               const mlcc_act *act) {
    mlcc_vf acc[4];
    ptrdiff_t t, v;
    for (v = 0; v < nv; v++) acc[v] = mlcc_vf_splat(b);
    for (t = 0; t < ntaps; t++) {
        const mlcc_vf w = mlcc_vf_splat(wt[t]);
        for (v = 0; v < nv; v++) acc[v] += w * mlcc_vf_load(src + off[t] + v * MLCC_VF_LANES);
    }
    for (v = 0; v < nv; v++) mlcc_vf_store(y + v * MLCC_VF_LANES, dw_act_vec(cls, acc[v], lo, hi, act));
}

/* The same for a 3x3 window of stride s (1 or 2) without dilation, from row pointers: for
 * window row kh, e[kh] is the sub-plane row of column phase 0 and o[kh] of phase 1 (stride 2),
 * so every load is a row pointer plus a constant (dw_wasm_vecs reads each tap's offset from
 * the off array in every step: 9 loads and address computations more per step) */
static inline __attribute__((always_inline)) void dw3_vecs(int nv, int s, const float *const *e,
                                                           const float *const *o, ptrdiff_t j,
                                                           const float *wt, float b, float *y,
                                                           int cls, mlcc_vf lo, mlcc_vf hi,
                                                           const mlcc_act *act) {
    mlcc_vf acc[4];
    ptrdiff_t kh, kw, v;
    for (v = 0; v < nv; v++) acc[v] = mlcc_vf_splat(b);
    /* window rows not unrolled: V8 issues a block's loads before its arithmetic, and 36 loads
     * of 9 taps spilled most of them (the rolled loop: 0.83-0.90x in a node micro-benchmark) */
DW_NO_UNROLL
    for (kh = 0; kh < 3; kh++)
        for (kw = 0; kw < 3; kw++) {
            const float *src = s == 1 ? e[kh] + j + kw : kw == 1 ? o[kh] + j : e[kh] + j + kw / 2;
            const mlcc_vf w = mlcc_vf_splat(wt[kh * 3 + kw]);
            for (v = 0; v < nv; v++) acc[v] += w * mlcc_vf_load(src + v * MLCC_VF_LANES);
        }
    for (v = 0; v < nv; v++) mlcc_vf_store(y + v * MLCC_VF_LANES, dw_act_vec(cls, acc[v], lo, hi, act));
}

/* nv vectors of output row yr from column j: the 3x3 form when s3 (its stride) is set */
#define DW_WASM_STEP(nv, dst)                                                                 \
    do {                                                                                      \
        if (s3)                                                                               \
            dw3_vecs(nv, s3, e, o, j, wt, b, dst, cls, lo, hi, act);                          \
        else                                                                                  \
            dw_wasm_vecs(nv, src + j, off, wt, ntaps, b, dst, cls, lo, hi, act);              \
    } while (0)

static inline __attribute__((always_inline)) void dw_wasm_plane(const float *base,
                                                                const ptrdiff_t *off,
                                                                const float *wt,
                                                                ptrdiff_t ntaps, float b,
                                                                float *y, ptrdiff_t oh_n,
                                                                ptrdiff_t ow_n, ptrdiff_t wq,
                                                                ptrdiff_t hq, int s3, int cls,
                                                                const mlcc_act *act) {
    const ptrdiff_t plane = oh_n * ow_n;
    const float *e[3] = {NULL, NULL, NULL}, *o[3] = {NULL, NULL, NULL};
    mlcc_vf lo, hi;
    ptrdiff_t oh, j, kh;
    if (cls == DW_ACT_CLIP) {
        lo = mlcc_vf_splat(act->alpha);
        hi = mlcc_vf_splat(act->beta);
    } else {
        lo = hi = mlcc_vf_splat(0.0f);
    }
    for (oh = 0; oh < oh_n; oh++) {
        const float *src = base + oh * wq;
        float *yr = y + oh * ow_n;
        for (kh = 0; kh < 3 && s3; kh++) {   /* sub-plane (kh % s3, phase), row oh + kh / s3 */
            e[kh] = base + (kh % s3) * s3 * hq * wq + (oh + kh / s3) * wq;
            o[kh] = e[kh] + hq * wq;
        }
        j = 0;
        while (j < ow_n) {
            /* 4 vectors while more than 2 remain, then 2 or 1: a row's last step may write
             * up to 3 vectors past its end (small maps: 14 columns in one step of 16) */
            const ptrdiff_t rem = ow_n - j;
            const ptrdiff_t nv = rem > 2 * MLCC_VF_LANES ? 4 : rem > MLCC_VF_LANES ? 2 : 1;
            if (oh * ow_n + j + nv * MLCC_VF_LANES <= plane) {
                if (nv == 4)
                    DW_WASM_STEP(4, yr + j);
                else if (nv == 2)
                    DW_WASM_STEP(2, yr + j);
                else
                    DW_WASM_STEP(1, yr + j);
                j += nv * MLCC_VF_LANES;
            } else if (rem >= MLCC_VF_LANES) {   /* near the plane's end: exact vectors */
                DW_WASM_STEP(1, yr + j);
                j += MLCC_VF_LANES;
            } else {   /* the plane's last values: not past its end */
                float tmp[MLCC_VF_LANES];
                ptrdiff_t t;
                DW_WASM_STEP(1, tmp);
                for (t = 0; t < rem; t++) yr[j + t] = tmp[t];
                j = ow_n;
            }
        }
    }
}

#endif

#if DW_IP
/* ---- 3x3 depthwise, pad 1, stride 1 or 2, reading the input in place (wasm, AVX2) ----
 * dw_wasm_plane reads a padded (for stride 2, phase-split) copy of each channel's plane that
 * dw_flat_fill writes first: 1.8 ms of MobileNetV2's 4.2 ms of depthwise in node. Here each
 * output row reads its three input rows directly (a row above or below the input points at a
 * row of zeros in scratch), and only the row ends differ: a row's first vector takes its
 * column -1 (the left padding) as a zero lane shifted in, its last vector its column iw (the
 * right padding, stride 1, or odd widths at stride 2) the same way. Stride 2 splits each pair
 * of loaded vectors into even and odd columns by shuffles. Each output sums the same terms in
 * the same order as the reference kernel (zeros where padding was read): the same bits. */

/* (a's last lane, b's lanes but the last) and (a's lanes but the first, b's first lane): one
 * palignr each in V8 */
#if MLCC_VECTOR_BYTES == 16
#define DW_IP_SHL1(a, b) __builtin_shufflevector(a, b, 3, 4, 5, 6)
#define DW_IP_SHR1(a, b) __builtin_shufflevector(a, b, 1, 2, 3, 4)
#else
#define DW_IP_SHL1(a, b) __builtin_shufflevector(a, b, 7, 8, 9, 10, 11, 12, 13, 14)
#define DW_IP_SHR1(a, b) __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8)
#endif
/* The first column a step other than a row's first may start at: its loads begin at column
 * s j - 1 (stride 1) or 2 j - lanes (stride 2, the previous vector's odd columns). */
#define DW_IP_MIN_J (MLCC_VF_LANES / 2)

/* nv vectors of outputs (columns j, j + lanes, ...) of one output row from its input rows r[3],
 * stride s; left (a constant, as all flags) when the first vector is the row's first (column
 * -1 is padding), right when the last vector's rightmost tap is past the row (padding). The
 * loads are a base pointer plus constants >= 0 (wasm's offset field: V8 computes a negative
 * one separately, one instruction per load). */
static inline __attribute__((always_inline)) void dw_ip_vecs(int nv, int s, int left, int right,
                                                             const float *const *r, ptrdiff_t j,
                                                             const float *wt, float b, float *y,
                                                             int cls, mlcc_vf lo, mlcc_vf hi,
                                                             const mlcc_act *act) {
    const mlcc_vf zero = mlcc_vf_splat(0.0f);
    /* the base: column j - 1 (stride 1) or 2 j - lanes (stride 2: j >= DW_IP_MIN_J there), or j
     * at the left */
    const ptrdiff_t d = left ? 0 : s == 1 ? 1 : MLCC_VF_LANES;
    mlcc_vf acc[4];
    ptrdiff_t kh, v;
    for (v = 0; v < nv; v++) acc[v] = mlcc_vf_splat(b);
    /* window rows not unrolled: V8 issues a block's loads before its arithmetic */
DW_NO_UNROLL
    for (kh = 0; kh < 3; kh++) {
        const float *x = r[kh] + s * j - d;   /* column s * j - d */
        const mlcc_vf w0 = mlcc_vf_splat(wt[kh * 3]), w1 = mlcc_vf_splat(wt[kh * 3 + 1]);
        const mlcc_vf w2 = mlcc_vf_splat(wt[kh * 3 + 2]);
        mlcc_vf prev = zero;
        for (v = 0; v < nv; v++) {
            const ptrdiff_t q = d + s * v * MLCC_VF_LANES;   /* column s (j + lanes v) from x */
            mlcc_vf l, c, rr;
            if (s == 1) {
                c = mlcc_vf_load(x + q);
                l = left && v == 0 ? DW_IP_SHL1(zero, c) : mlcc_vf_load(x + q - 1);
                rr = right && v == nv - 1 ? DW_IP_SHR1(c, zero) : mlcc_vf_load(x + q + 1);
            } else {
                const mlcc_vf v0 = mlcc_vf_load(x + q);
                const mlcc_vf v1 =
                    right && v == nv - 1
                        ? DW_IP_SHR1(mlcc_vf_load(x + q + MLCC_VF_LANES - 1), zero)
                        : mlcc_vf_load(x + q + MLCC_VF_LANES);
                mlcc_vf_deinterleave(v0, v1, &c, &rr);
                /* column 2 (j + lanes v) - 1: the previous vector's last odd one, or loaded */
                if (v == 0 && !left) prev = mlcc_vf_load(x);
                l = DW_IP_SHL1(prev, rr);
                prev = rr;
            }
            acc[v] += w0 * l;
            acc[v] += w1 * c;
            acc[v] += w2 * rr;
        }
    }
    for (v = 0; v < nv; v++) mlcc_vf_store(y + v * MLCC_VF_LANES, dw_act_vec(cls, acc[v], lo, hi, act));
}

/* Stride 1, two output rows at once (y and y + ys) from their four input rows r[4]: each
 * input row's loads serve both (6 loads per output vector instead of 9). Each output still
 * sums its window rows in order: the top row takes input row i as window row i, the bottom
 * one as window row i - 1. */
static inline __attribute__((always_inline)) void dw_ip_vecs2(int nv, int left, int right,
                                                              const float *const *r, ptrdiff_t j,
                                                              const float *wt, float b, float *y,
                                                              ptrdiff_t ys, int cls, mlcc_vf lo,
                                                              mlcc_vf hi, const mlcc_act *act) {
    const mlcc_vf zero = mlcc_vf_splat(0.0f);
    const ptrdiff_t d = left ? 0 : 1;
    mlcc_vf a0[2], a1[2];
    ptrdiff_t i, v;
    for (v = 0; v < nv; v++) a0[v] = a1[v] = mlcc_vf_splat(b);
#define DW_IP_ROW(i, top, bot)                                                                \
    do {                                                                                      \
        const float *x = r[i] + j - d;                                                        \
        for (v = 0; v < nv; v++) {                                                            \
            const ptrdiff_t q = d + v * MLCC_VF_LANES;                                        \
            const mlcc_vf c = mlcc_vf_load(x + q);                                            \
            const mlcc_vf l = left && v == 0 ? DW_IP_SHL1(zero, c) : mlcc_vf_load(x + q - 1); \
            const mlcc_vf rr = right && v == nv - 1 ? DW_IP_SHR1(c, zero)                      \
                                                    : mlcc_vf_load(x + q + 1);                 \
            if (top) {                                                                        \
                a0[v] += mlcc_vf_splat(wt[(i) * 3]) * l;                                      \
                a0[v] += mlcc_vf_splat(wt[(i) * 3 + 1]) * c;                                  \
                a0[v] += mlcc_vf_splat(wt[(i) * 3 + 2]) * rr;                                 \
            }                                                                                 \
            if (bot) {                                                                        \
                a1[v] += mlcc_vf_splat(wt[(i) * 3 - 3]) * l;                                  \
                a1[v] += mlcc_vf_splat(wt[(i) * 3 - 2]) * c;                                  \
                a1[v] += mlcc_vf_splat(wt[(i) * 3 - 1]) * rr;                                 \
            }                                                                                 \
        }                                                                                     \
    } while (0)
    DW_IP_ROW(0, 1, 0);
DW_NO_UNROLL
    for (i = 1; i < 3; i++) DW_IP_ROW(i, 1, 1);
    DW_IP_ROW(3, 0, 1);
#undef DW_IP_ROW
    for (v = 0; v < nv; v++) {
        mlcc_vf_store(y + v * MLCC_VF_LANES, dw_act_vec(cls, a0[v], lo, hi, act));
        mlcc_vf_store(y + ys + v * MLCC_VF_LANES, dw_act_vec(cls, a1[v], lo, hi, act));
    }
}

/* Output rows oh, oh + 1 (stride 1) by dw_ip_vecs2, the same column steps as dw_ip_plane's */
static inline __attribute__((always_inline)) void dw_ip_rows2(const float *const *r,
                                                              const float *wt, float b, float *yr,
                                                              ptrdiff_t ow_n, int cls, mlcc_vf lo,
                                                              mlcc_vf hi, const mlcc_act *act) {
    /* pairs of vectors at the ends where their reads stay in the row (rows of 9 and more:
     * 14 x 14 layers 0.97x of single vectors there) */
    const ptrdiff_t edge = ow_n > 2 * MLCC_VF_LANES ? 2 * MLCC_VF_LANES : MLCC_VF_LANES;
    ptrdiff_t j;
    if (edge > MLCC_VF_LANES)
        dw_ip_vecs2(2, 1, 0, r, 0, wt, b, yr, ow_n, cls, lo, hi, act);
    else
        dw_ip_vecs2(1, 1, 0, r, 0, wt, b, yr, ow_n, cls, lo, hi, act);
    j = edge;
    while (j < ow_n - edge) {
        const int nv = ow_n - edge - j > MLCC_VF_LANES ? 2 : 1;
        if (j + nv * MLCC_VF_LANES > ow_n - edge) {
            j = ow_n - edge - nv * MLCC_VF_LANES;
            if (j < DW_IP_MIN_J) j = DW_IP_MIN_J;
        }
        if (nv == 2)
            dw_ip_vecs2(2, 0, 0, r, j, wt, b, yr + j, ow_n, cls, lo, hi, act);
        else
            dw_ip_vecs2(1, 0, 0, r, j, wt, b, yr + j, ow_n, cls, lo, hi, act);
        j += nv * MLCC_VF_LANES;
    }
    j = ow_n - edge;
    if (edge > MLCC_VF_LANES)
        dw_ip_vecs2(2, 0, 1, r, j, wt, b, yr + j, ow_n, cls, lo, hi, act);
    else
        dw_ip_vecs2(1, 0, 1, r, j, wt, b, yr + j, ow_n, cls, lo, hi, act);
}

/* Whether the in-place form applies: 3x3, pad 1 on the top and left, stride 1 or 2 both ways,
 * no dilation, the output size of pad 1 on the bottom and right, output rows of at least 1.5
 * vectors (a left and a right vector, whose reads stay inside the row: 6 columns of 4 lanes,
 * 12 of 8) and room for a row of zeros in scratch. */
static int dw_ip_ok(const mlcc_conv2d_params *p) {
    const ptrdiff_t s = (ptrdiff_t)p->stride_h;
    return (MLCC_VF_LANES == 4 || MLCC_VF_LANES == 8) && p->kernel_h == 3 && p->kernel_w == 3 &&
           p->dilation_h == 1 &&
           p->dilation_w == 1 && p->pad_top == 1 && p->pad_left == 1 && (s == 1 || s == 2) &&
           p->stride_w == p->stride_h && (ptrdiff_t)p->out_w >= 3 * MLCC_VF_LANES / 2 &&
           (ptrdiff_t)p->out_h == ((ptrdiff_t)p->in_h - 1) / s + 1 &&
           (ptrdiff_t)p->out_w == ((ptrdiff_t)p->in_w - 1) / s + 1 &&
           (ptrdiff_t)p->in_w <= mlcc_dw_scratch_floats(p);
}

static inline __attribute__((always_inline)) void dw_ip_plane(const float *xc, const float *zrow,
                                                              const float *wt, float b, float *y,
                                                              ptrdiff_t ih_n, ptrdiff_t iw_n,
                                                              ptrdiff_t oh_n, ptrdiff_t ow_n,
                                                              int s, int cls,
                                                              const mlcc_act *act) {
    /* stride 2: the last vector reads column 2 (ow - lanes) + 2 lanes - 1 = iw, the padding, for
     * odd widths */
    const int right = s == 1 || 2 * ow_n - 1 >= iw_n;
    /* the row's ends: groups of 4 vectors where the row has room for two, else single ones;
     * stride 1 takes single rows only for an odd last one: single vectors (less code) */
    const ptrdiff_t edge = s == 2 && ow_n >= 8 * MLCC_VF_LANES ? 4 * MLCC_VF_LANES : MLCC_VF_LANES;
    mlcc_vf lo, hi;
    ptrdiff_t oh, kh, j;
    if (cls == DW_ACT_CLIP) {
        lo = mlcc_vf_splat(act->alpha);
        hi = mlcc_vf_splat(act->beta);
    } else {
        lo = hi = mlcc_vf_splat(0.0f);
    }
    oh = 0;
    if (s == 1)   /* two rows at a time (measured 0.83-0.92x of one on MobileNetV2's) */
        for (; oh + 2 <= oh_n; oh += 2) {
            const float *r[4];
            for (kh = 0; kh < 4; kh++) {
                const ptrdiff_t ih = oh + kh - 1;
                r[kh] = ih >= 0 && ih < ih_n ? xc + ih * iw_n : zrow;
            }
            dw_ip_rows2(r, wt, b, y + oh * ow_n, ow_n, cls, lo, hi, act);
        }
    for (; oh < oh_n; oh++) {
        const float *r[3];
        float *yr = y + oh * ow_n;
        for (kh = 0; kh < 3; kh++) {
            const ptrdiff_t ih = oh * s + kh - 1;
            r[kh] = ih >= 0 && ih < ih_n ? xc + ih * iw_n : zrow;
        }
        if (edge > MLCC_VF_LANES)
            dw_ip_vecs(4, s, 1, 0, r, 0, wt, b, yr, cls, lo, hi, act);
        else
            dw_ip_vecs(1, s, 1, 0, r, 0, wt, b, yr, cls, lo, hi, act);
        /* the columns [edge, ow - edge) by plain vectors; a last short step moves back
         * (overlapping outputs already written, with the same values), not before column 2 */
        j = edge;
        while (j < ow_n - edge) {
            const ptrdiff_t rem = ow_n - edge - j;
            const int nv = s == 1 ? 1 : rem >= 4 * MLCC_VF_LANES ? 4 : rem > MLCC_VF_LANES ? 2 : 1;
            if (j + nv * MLCC_VF_LANES > ow_n - edge) {
                j = ow_n - edge - nv * MLCC_VF_LANES;
                if (j < DW_IP_MIN_J) j = DW_IP_MIN_J;
            }
            if (nv == 4)
                dw_ip_vecs(4, s, 0, 0, r, j, wt, b, yr + j, cls, lo, hi, act);
            else if (nv == 2)
                dw_ip_vecs(2, s, 0, 0, r, j, wt, b, yr + j, cls, lo, hi, act);
            else
                dw_ip_vecs(1, s, 0, 0, r, j, wt, b, yr + j, cls, lo, hi, act);
            j += nv * MLCC_VF_LANES;
        }
        j = ow_n - edge;
        if (edge > MLCC_VF_LANES) {
            if (right)
                dw_ip_vecs(4, s, 0, 1, r, j, wt, b, yr + j, cls, lo, hi, act);
            else
                dw_ip_vecs(4, s, 0, 0, r, j, wt, b, yr + j, cls, lo, hi, act);
        } else {
            if (right)
                dw_ip_vecs(1, s, 0, 1, r, j, wt, b, yr + j, cls, lo, hi, act);
            else
                dw_ip_vecs(1, s, 0, 0, r, j, wt, b, yr + j, cls, lo, hi, act);
        }
    }
}

/* One plane per (stride, activation): its own wasm function (V8 allocates the registers of a
 * small function better than of the task with every variant inlined) */
typedef void (*dw_ip_fn)(const float *, const float *, const float *, float, float *, ptrdiff_t,
                         ptrdiff_t, ptrdiff_t, ptrdiff_t, const mlcc_act *);
#define DW_IP_VARIANT(name, s, cls)                                                           \
    static __attribute__((noinline)) void name(const float *xc, const float *zrow,             \
                                               const float *wt, float b, float *y,             \
                                               ptrdiff_t ih_n, ptrdiff_t iw_n, ptrdiff_t oh_n, \
                                               ptrdiff_t ow_n, const mlcc_act *act) {          \
        dw_ip_plane(xc, zrow, wt, b, y, ih_n, iw_n, oh_n, ow_n, s, cls, act);                 \
    }
DW_IP_VARIANT(dw_ip_plane_1none, 1, DW_ACT_NONE)
DW_IP_VARIANT(dw_ip_plane_2none, 2, DW_ACT_NONE)
DW_IP_VARIANT(dw_ip_plane_1relu, 1, DW_ACT_RELU)
DW_IP_VARIANT(dw_ip_plane_2relu, 2, DW_ACT_RELU)
DW_IP_VARIANT(dw_ip_plane_1clip, 1, DW_ACT_CLIP)
DW_IP_VARIANT(dw_ip_plane_2clip, 2, DW_ACT_CLIP)

/* Channels [c0, c1) of every image in place (dw_ip_ok), zrow a row of zeros. Activations but
 * ReLU and Clip go over each plane after its sums, by mlcc_act_apply (lane for lane
 * mlcc_vf_act, as the other kernels apply them: the same bits; one function fewer per
 * activation kind for every column step). */
static void dw_ip_channels(dw_job *job, ptrdiff_t c0, ptrdiff_t c1, const float *zrow, int cls) {
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels, plane_n = oh_n * ow_n;
    const int s = (int)p->stride_h;
    /* through a pointer: wasm-opt inlines a function called from one place */
    const dw_ip_fn plane =
        cls == DW_ACT_CLIP ? (s == 1 ? dw_ip_plane_1clip : dw_ip_plane_2clip)
        : cls == DW_ACT_RELU ? (s == 1 ? dw_ip_plane_1relu : dw_ip_plane_2relu)
                              : (s == 1 ? dw_ip_plane_1none : dw_ip_plane_2none);
    ptrdiff_t n, c;
    for (n = 0; n < p->batch; n++)
        for (c = c0; c < c1; c++) {
            float *yc = job->y + (n * channels + c) * plane_n;
            plane(job->x + (n * channels + c) * ih_n * iw_n, zrow, job->w + c * 9,
                  job->bias ? job->bias[c] : 0.0f, yc, ih_n, iw_n, oh_n, ow_n, &p->act);
            if (cls == DW_ACT_OTHER) mlcc_act_apply(&p->act, yc, plane_n);
        }
}


/* Channels [c0, c1) of every image in place, the thread's scratch slice (pad) holding the row
 * of zeros; 0 where the layer does not take this path (dw_ip_ok). */
static int dw_ip_try(dw_job *job, int thread, ptrdiff_t c0, ptrdiff_t c1, float *pad) {
    if (!dw_ip_ok(job->p)) return 0;
    if (!job->zeroed[thread]) {   /* the row of zeros, once per call */
        memset(pad, 0, (size_t)job->p->in_w * sizeof(float));
        job->zeroed[thread] = 1;
    }
    dw_ip_channels(job, c0, c1, pad, dw_act_class(&job->p->act));
    return 1;
}
#endif

#if MLCC_HAVE_VECTORS && defined(__wasm_simd128__)
/* dw_wasm_plane per (window, activation) as its own function, reached through a pointer (as
 * dw_ip_channels' planes): inlined into the task with every variant, V8 kept its accumulators
 * on the stack */
typedef void (*dw_wasm_fn)(const float *, const ptrdiff_t *, const float *, ptrdiff_t, float,
                           float *, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, int,
                           const mlcc_act *);
#define DW_WASM_VARIANT(name, s3, cls_)                                                        \
    static __attribute__((noinline)) void name(const float *base, const ptrdiff_t *off,        \
                                               const float *wt, ptrdiff_t ntaps, float b,      \
                                               float *y, ptrdiff_t oh_n, ptrdiff_t ow_n,       \
                                               ptrdiff_t wq, ptrdiff_t hq, int cls,            \
                                               const mlcc_act *act) {                          \
        (void)cls;                                                                             \
        dw_wasm_plane(base, off, wt, s3 ? 9 : ntaps, b, y, oh_n, ow_n, wq, hq, s3, cls_, act); \
    }
DW_WASM_VARIANT(dw_wasm_plane_1clip, 1, DW_ACT_CLIP)
DW_WASM_VARIANT(dw_wasm_plane_2clip, 2, DW_ACT_CLIP)
DW_WASM_VARIANT(dw_wasm_plane_1relu, 1, DW_ACT_RELU)
DW_WASM_VARIANT(dw_wasm_plane_2relu, 2, DW_ACT_RELU)
DW_WASM_VARIANT(dw_wasm_plane_1none, 1, DW_ACT_NONE)
DW_WASM_VARIANT(dw_wasm_plane_any, 0, cls)

static void dw_wasm_task(void *arg, int u, int thread) {
    dw_job *job = (dw_job *)arg;
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t dh = (ptrdiff_t)p->dilation_h, dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels;
    const ptrdiff_t hq = mlcc_implicit_sub_h(p), wq = mlcc_implicit_sub_w(p);
    const ptrdiff_t ntaps = kh_n * kw_n;
    const ptrdiff_t c0 = channels * u / job->units, c1 = channels * (u + 1) / job->units;
    const int cls = dw_act_class(&p->act);
    /* 3x3 windows of stride 1 or 2 (both ways), no dilation: the row-pointer form */
    const int s3 = kh_n == 3 && kw_n == 3 && dh == 1 && dw == 1 && sh == sw && sh <= 2
                   ? (int)sh : 0;
    float *pad = job->scratch + thread * mlcc_dw_scratch_floats(p);
    ptrdiff_t off[DW_MAX_TAPS];
    ptrdiff_t n, c;
    dw_wasm_fn plane;
    if (dw_ip_try(job, thread, c0, c1, pad)) return;
    if (dw_small_channels(job, thread, c0, c1, pad)) return;
    plane = s3 == 1 && cls == DW_ACT_CLIP   ? dw_wasm_plane_1clip
            : s3 == 2 && cls == DW_ACT_CLIP ? dw_wasm_plane_2clip
            : s3 == 1 && cls == DW_ACT_RELU ? dw_wasm_plane_1relu
            : s3 == 2 && cls == DW_ACT_RELU ? dw_wasm_plane_2relu
            : s3 == 1 && cls == DW_ACT_NONE ? dw_wasm_plane_1none
                                             : dw_wasm_plane_any;
    dw_flat_prepare(job, thread, pad, off);
    for (n = 0; n < p->batch; n++) {
        for (c = c0; c < c1; c++) {
            const float *wc = job->w + c * ntaps;
            float *yc = job->y + (n * channels + c) * oh_n * ow_n;
            const float b = job->bias ? job->bias[c] : 0.0f;
            dw_flat_fill(p, job->x + (n * channels + c) * ih_n * iw_n, pad, hq, wq);
            plane(pad, off, wc, ntaps, b, yc, oh_n, ow_n, wq, hq, cls, &p->act);
        }
    }
}
#endif

/* Unit u: channels [c0, c1) of every image, in the scratch slice of the thread running it. */
static void dw_flat_task(void *arg, int u, int thread) {
    dw_job *job = (dw_job *)arg;
    const mlcc_conv2d_params *p = job->p;
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t channels = (ptrdiff_t)p->out_channels;
    const ptrdiff_t hq = mlcc_implicit_sub_h(p), wq = mlcc_implicit_sub_w(p);
    const ptrdiff_t planes = sh * sw * hq * wq, nv = oh_n * wq;
    const ptrdiff_t ntaps = kh_n * kw_n;
    const ptrdiff_t c0 = channels * u / job->units, c1 = channels * (u + 1) / job->units;
    float *pad = job->scratch + thread * mlcc_dw_scratch_floats(p);
    float *out = pad + planes + kw_n * dw + MLCC_DW_CHUNK;
    ptrdiff_t off[DW_MAX_TAPS];
    ptrdiff_t n, c;
#ifdef DW_CIL
    if (job->cil == 2) {
        dw_direct_channels(job, thread, c0, c1, pad);
        return;
    }
    if (job->cil) {   /* whole blocks of 16 channels per unit */
        const ptrdiff_t nb = (channels + 15) / 16, b1 = 16 * (nb * (u + 1) / job->units);
        dw_cil_channels(job, thread, 16 * (nb * u / job->units), b1 < channels ? b1 : channels, pad);
        return;
    }
#endif
#if DW_IP   /* AVX2: 3x3, pad 1, stride 1 or 2, the input read in place */
    if (dw_ip_try(job, thread, c0, c1, pad)) return;
#endif
#if MLCC_HAVE_VECTORS
    if (dw_small_channels(job, thread, c0, c1, pad)) return;
#endif
    dw_flat_prepare(job, thread, pad, off);
    for (n = 0; n < p->batch; n++) {
        for (c = c0; c < c1; c++) {
            const float *wc = job->w + c * ntaps;
            float *yc = job->y + (n * channels + c) * oh_n * ow_n;
            const float b = job->bias ? job->bias[c] : 0.0f;
            dw_flat_fill(p, job->x + (n * channels + c) * ih_n * iw_n, pad, hq, wq);
            if (ntaps == 9)
                dw_flat_run(pad, off, wc, 9, b, out, nv, &p->act);
            else
                dw_flat_run(pad, off, wc, ntaps, b, out, nv, &p->act);
            dw_copy_rows(yc, ow_n, oh_n * ow_n, out, wq, nv + MLCC_DW_CHUNK, oh_n, ow_n);
        }
    }
}

void mlcc_f32_conv2d__depthwise_vec(const mlcc_conv2d_params *p, const float *x, const float *w,
                                    const float *bias, float *y, float *scratch,
                                    mlcc_threadpool *pool) {
    dw_job job;
    if (p->kernel_h * p->kernel_w > DW_MAX_TAPS) {   /* larger kernels than 8 x 8: direct */
        mlcc_f32_conv2d__depthwise(p, x, w, bias, y);
        return;
    }
    job.p = p;
    job.x = x;
    job.w = w;
    job.bias = bias;
    job.y = y;
    job.scratch = scratch;
    memset(job.zeroed, 0, sizeof job.zeroed);
    if ((double)p->out_channels * (double)(p->out_h * p->out_w) * (double)p->batch *
            (double)(p->kernel_h * p->kernel_w) < (double)MLCC_MIN_PARALLEL_MACS / 4)
        pool = NULL;   /* depthwise MACs are cheaper to split: a quarter of the threshold */
    {
        const ptrdiff_t nt = mlcc_threadpool_size(pool) < MLCC_DW_SLICES
                                 ? mlcc_threadpool_size(pool) : MLCC_DW_SLICES;
        const ptrdiff_t per = nt == 1 ? 1 : MLCC_CONV_UNITS_PER_THREAD * nt;
        job.units = p->out_channels < per ? (ptrdiff_t)p->out_channels : per;
        job.cil = 0;
#ifdef DW_CIL
        {
            ptrdiff_t wp, rr;
            const ptrdiff_t nb = ((ptrdiff_t)p->out_channels + 15) / 16;
            if (dw_cil_floats(p, &wp, &rr) > 0) {
                job.cil = 1;
                job.units = nb < per ? nb : per;
            } else if (dw_direct_takes(p))
                job.cil = 2;
        }
#endif
#if MLCC_HAVE_VECTORS && defined(__wasm_simd128__)
        (void)dw_flat_task;   /* wasm's own task replaces it */
        mlcc_threadpool_for(pool, dw_wasm_task, &job, (int)job.units, (int)nt);
#else
        mlcc_threadpool_for(pool, dw_flat_task, &job, (int)job.units, (int)nt);
#endif
    }
}
