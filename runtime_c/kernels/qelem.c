/* Boundary and element-wise integer kernels (see qelem.h). */
#include "qelem.h"
#include "qmve.h"

#include <math.h>

/* A flat element-wise kernel of `count` elements cut between a pool's threads into ranges of
 * whole 64-element lines (the uint8 side's cache lines: no line written by two threads), from
 * `threshold` elements up (MLCC_MIN_PARALLEL_ELEMENTS; 4x that for a table lookup, 64 codes
 * per two instructions with AVX-512 VBMI, as fast as a copy); part(c, i0, i1) runs elements [i0, i1) through the
 * kernel's one-thread loop with count i1 - i0. Every element is computed alone: the same bytes
 * on any pool, and an output may be its input (in place). On the caller alone, YOLOv8n int8's
 * 57 SiLU tables and 31 requantizations were 0.22 ms of its serial time on 2 threads. */
typedef struct elem_call elem_call;
struct elem_call {
    void (*part)(const elem_call *c, ptrdiff_t i0, ptrdiff_t i1);
    const void *p, *a, *b;
    void *y;
    ptrdiff_t count;
};

static void elem_lines(void *arg, ptrdiff_t l0, ptrdiff_t l1) {
    const elem_call *c = (const elem_call *)arg;
    c->part(c, l0 * 64, l1 * 64 < c->count ? l1 * 64 : c->count);
}

static void elem_run(void (*part)(const elem_call *, ptrdiff_t, ptrdiff_t), const void *p,
                     const void *a, const void *b, void *y, int64_t count, double threshold,
                     mlcc_threadpool *pool) {
    elem_call c;
    c.part = part;
    c.p = p;
    c.a = a;
    c.b = b;
    c.y = y;
    c.count = (ptrdiff_t)count;
    mlcc_parallel_ranges(pool, elem_lines, &c, (c.count + 63) / 64, (double)count, threshold);
}

static void quantize_run(const mlcc_quantize_params *p, const float *x, uint8_t *y) {
    /* locals: y (uint8_t) may alias *p, which would force reloads and block vectorization */
    const float s = p->scale, lo = (float)(0 - p->zero_point), hi = (float)(255 - p->zero_point);
    const float magic = 12582912.0f;
    const int32_t zp = p->zero_point;
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) {
        float f = x[i] / s;
        f = f > lo ? f : lo;          /* NaN -> lo */
        f = f < hi ? f : hi;
        f = (f + magic) - magic;      /* round half to even */
        y[i] = (uint8_t)((int32_t)f + zp);
    }
}

static void quantize_part(const elem_call *c, ptrdiff_t i0, ptrdiff_t i1) {
    mlcc_quantize_params q = *(const mlcc_quantize_params *)c->p;
    q.count = i1 - i0;
    quantize_run(&q, (const float *)c->a + i0, (uint8_t *)c->y + i0);
}

void mlcc_f32_quantize(const mlcc_quantize_params *p, const float *x, uint8_t *y,
                       mlcc_threadpool *pool) {
    elem_run(quantize_part, p, x, NULL, y, p->count, (double)MLCC_MIN_PARALLEL_ELEMENTS,
             pool);
}

void mlcc_u8_dequantize(const mlcc_quantize_params *p, const uint8_t *x, float *y) {
    const int32_t zp = p->zero_point;
    const float s = p->scale;
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp) * s;
}

void mlcc_f32_dynamic_quantize(const mlcc_dynamic_quantize_params *p, const float *x,
                               uint8_t *y, float *y_scale, uint8_t *y_zero_point) {
    mlcc_quantize_params q;
    float lo = 0.0f, hi = 0.0f;
    mlcc_f32_widen_range(x, p->count, &lo, &hi);
    q.count = p->count;
    mlcc_dynamic_qparams(lo, hi, &q.scale, &q.zero_point);
    quantize_run(&q, x, y);
    *y_scale = q.scale;
    *y_zero_point = (uint8_t)q.zero_point;
}

void mlcc_i32_zero_point_correct(const mlcc_zero_point_params *p, const uint8_t *x,
                                 const uint8_t *x_zero_point, const int32_t *colsum,
                                 const int32_t *w_zero_point, int32_t *y) {
    const int64_t m = p->m, n = p->n, k = p->k;
    const int64_t zx = x_zero_point ? (int64_t)*x_zero_point : 0;
    int64_t i, j, t;
    for (i = 0; i < m; i++) {
        int64_t rowsum = 0;
        int32_t *yr = y + i * n;
        if (w_zero_point)
            for (t = 0; t < k; t++) rowsum += x[i * k + t];
        for (j = 0; j < n; j++) {
            const int64_t zw = w_zero_point ? (int64_t)w_zero_point[j] : 0;
            /* in int64, then back: the exact result fits int32 whenever onnxruntime's does */
            yr[j] = (int32_t)((int64_t)yr[j] + k * zx * zw - zx * (int64_t)colsum[j] -
                              zw * rowsum);
        }
    }
}

void mlcc_i32_rescale(const mlcc_rescale_params *p, const int32_t *acc, const float *a_scale,
                      const float *b_scale, const float *bias, float *y) {
    const int64_t m = p->m, n = p->n;
    const float as = *a_scale;
    int64_t i, j;
    for (i = 0; i < m; i++) {
        const int32_t *ar = acc + i * n;
        float *yr = y + i * n;
        for (j = 0; j < n; j++) {
            const float mul = as * b_scale[p->per_column ? j : 0];
            const float v = (float)ar[j] * mul;
            yr[j] = bias ? v + bias[j] : v;
        }
        mlcc_act_apply(&p->act, yr, (ptrdiff_t)n);
    }
}

static inline uint8_t clamp_u8(int32_t v, const mlcc_requant *rq) {
    return (uint8_t)(v < rq->qmin ? rq->qmin : (v > rq->qmax ? rq->qmax : v));
}

#if MLCC_QMVE
/* mlcc_u8_add / mlcc_u8_sub (sub = 1) in the fixed mode on Helium, 4 codes at a time: qmve.h's
 * mlcc_mve_fixed is mbqm lane for lane, the rest the same integer operations. */
static void add_fixed_mve(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b,
                          uint8_t *y, int sub) {
    const int32x4_t am = vdupq_n_s32(p->a_mult), as = vdupq_n_s32(p->a_shift);
    const int32x4_t bm = vdupq_n_s32(p->b_mult), bs = vdupq_n_s32(p->b_shift);
    const int32x4_t om = vdupq_n_s32(p->out_mult), os = vdupq_n_s32(p->out_shift);
    const int32x4_t za = vdupq_n_s32(p->a_zero_point), zb = vdupq_n_s32(p->b_zero_point);
    const int32x4_t lo = vdupq_n_s32(p->rq.qmin), hi = vdupq_n_s32(p->rq.qmax);
    int64_t i;
    for (i = 0; i < p->count; i += 4) {
        const mve_pred16_t m = mlcc_mve_lanes(p->count - i);
        const int32x4_t xa = vreinterpretq_s32_u32(vldrbq_z_u32(a + i, m));
        const int32x4_t xb = vreinterpretq_s32_u32(vldrbq_z_u32(b + i, m));
        const int32x4_t sa = mlcc_mve_fixed(vshlq_n_s32(vsubq_s32(xa, za), 20), am, as);
        const int32x4_t sb = mlcc_mve_fixed(vshlq_n_s32(vsubq_s32(xb, zb), 20), bm, bs);
        int32x4_t v = mlcc_mve_fixed(sub ? vsubq_s32(sa, sb) : vaddq_s32(sa, sb), om, os);
        v = vaddq_s32(v, vdupq_n_s32(p->rq.zero_point));
        vstrbq_p_s32((int8_t *)y + i, vminq_s32(vmaxq_s32(v, lo), hi), m);
    }
}
#endif

/* TFLite's integer ADD (sub = 0) and SUB (sub = 1, a constant where this is inlined): both
 * inputs to the common scale, then to the output's, each multiplier's constants prepared
 * once. */
static inline __attribute__((always_inline)) void add_fixed(
        const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y,
        const int sub) {
    const int32_t za = p->a_zero_point, zb = p->b_zero_point, zy = p->rq.zero_point;
    const mlcc_mbqm_c ca = mlcc_mbqm_prep(p->a_mult, p->a_shift);
    const mlcc_mbqm_c cb = mlcc_mbqm_prep(p->b_mult, p->b_shift);
    const mlcc_mbqm_c co = mlcc_mbqm_prep(p->out_mult, p->out_shift);
    const ptrdiff_t n = (ptrdiff_t)p->count;
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        const int32_t sa = mlcc_mbqm_apply(((int32_t)a[i] - za) * (1 << 20), &ca);
        const int32_t sb = mlcc_mbqm_apply(((int32_t)b[i] - zb) * (1 << 20), &cb);
        y[i] = clamp_u8(mlcc_mbqm_apply(sub ? sa - sb : sa + sb, &co) + zy, &p->rq);
    }
}

static void add_run(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y) {
    const int64_t n = p->count;
    int64_t i;
    const int32_t za = p->a_zero_point, zb = p->b_zero_point, zy = p->rq.zero_point;
    if (p->rq.mode == MLCC_REQUANT_FIXED) {
#if MLCC_QMVE
        add_fixed_mve(p, a, b, y, 0);
        return;
#endif
        add_fixed(p, a, b, y, 0);
        return;
    }
    {
        const double ma = p->a_mult_f, mb = p->b_mult_f, magic = 6755399441055744.0;
        const double lo = (double)(p->rq.qmin - zy), hi = (double)(p->rq.qmax - zy);
        for (i = 0; i < n; i++) {
            double f = (double)((int32_t)a[i] - za) * ma + (double)((int32_t)b[i] - zb) * mb;
            f = f < lo ? lo : f;
            f = f > hi ? hi : f;
            f = (f + magic) - magic;
            y[i] = (uint8_t)((int32_t)f + zy);
        }
    }
}

static void requantize_run(const mlcc_qrequant_params *p, const uint8_t *x, uint8_t *y) {
    const int64_t n = p->count;
    int64_t i;
    const int32_t zx = p->x_zero_point, zy = p->rq.zero_point;
    if (p->rq.mode == MLCC_REQUANT_FIXED) {
        const mlcc_mbqm_c c = mlcc_mbqm_prep(p->mult, p->shift);
        for (i = 0; i < n; i++)
            y[i] = clamp_u8(mlcc_mbqm_apply((int32_t)x[i] - zx, &c) + zy, &p->rq);
        return;
    }
    {
        const float m = p->mult_f, magic = 12582912.0f;
        const float lo = (float)(p->rq.qmin - zy), hi = (float)(p->rq.qmax - zy);
        for (i = 0; i < n; i++) {
            float f = (float)((int32_t)x[i] - zx) * m;
            f = f < lo ? lo : f;
            f = f > hi ? hi : f;
            f = (f + magic) - magic;
            y[i] = (uint8_t)((int32_t)f + zy);
        }
    }
}

static void add_part(const elem_call *c, ptrdiff_t i0, ptrdiff_t i1) {
    mlcc_qadd_params q = *(const mlcc_qadd_params *)c->p;
    q.count = i1 - i0;
    add_run(&q, (const uint8_t *)c->a + i0, (const uint8_t *)c->b + i0, (uint8_t *)c->y + i0);
}

void mlcc_u8_add(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y,
                 mlcc_threadpool *pool) {
    elem_run(add_part, p, a, b, y, p->count, (double)MLCC_MIN_PARALLEL_ELEMENTS,
             pool);
}

static void requantize_part(const elem_call *c, ptrdiff_t i0, ptrdiff_t i1) {
    mlcc_qrequant_params q = *(const mlcc_qrequant_params *)c->p;
    q.count = i1 - i0;
    requantize_run(&q, (const uint8_t *)c->a + i0, (uint8_t *)c->y + i0);
}

void mlcc_u8_requantize(const mlcc_qrequant_params *p, const uint8_t *x, uint8_t *y,
                        mlcc_threadpool *pool) {
    elem_run(requantize_part, p, x, NULL, y, p->count, (double)MLCC_MIN_PARALLEL_ELEMENTS,
             pool);
}

/* Planes [i0, i1) of the batch x channels (the scales travel in b). */
static void channel_scale_planes(const elem_call *e, ptrdiff_t i0, ptrdiff_t i1) {
    const mlcc_qchannel_scale_params *p = (const mlcc_qchannel_scale_params *)e->p;
    const float *s = (const float *)e->b;
    mlcc_qrequant_params q;
    ptrdiff_t i;
    q.count = p->plane;
    q.x_zero_point = p->x_zero_point;
    q.mult = 0;
    q.shift = 0;
    q.rq = p->rq;
    q.rq.mode = MLCC_REQUANT_FLOAT;
    for (i = i0; i < i1; i++) {
        const int64_t n = i / p->channels, c = i % p->channels;
        q.mult_f = (s[n * p->s_batch + c] + p->offset) * p->mult_f;
        requantize_run(&q, (const uint8_t *)e->a + i * p->plane, (uint8_t *)e->y + i * p->plane);
    }
}

static void channel_scale_range(void *arg, ptrdiff_t i0, ptrdiff_t i1) {
    const elem_call *e = (const elem_call *)arg;
    e->part(e, i0, i1);
}

/* Split by ranges of planes from MLCC_MIN_PARALLEL_ELEMENTS codes: PP-OCR det int8's ten
 * squeeze-excitation scales were 0.29 ms on the caller on 2 threads. */
void mlcc_u8_channel_scale(const mlcc_qchannel_scale_params *p, const uint8_t *x,
                           const float *s, uint8_t *y, mlcc_threadpool *pool) {
    elem_call e;
    e.part = channel_scale_planes;
    e.p = p;
    e.a = x;
    e.b = s;
    e.y = y;
    e.count = (ptrdiff_t)(p->batch * p->channels);
    mlcc_parallel_ranges(pool, channel_scale_range, &e, e.count,
                         (double)(p->batch * p->channels) * (double)p->plane,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

/* The arguments of one 2-D pooling, for its ranges of planes. */
typedef struct qpool_call {
    const mlcc_qpool2d_params *p;
    const uint8_t *x;
    uint8_t *y;
} qpool_call;

static void maxpool_planes(void *arg, ptrdiff_t c0, ptrdiff_t c1) {
    const qpool_call *q = (const qpool_call *)arg;
    const mlcc_qpool2d_params *p = q->p;
    int64_t c, oh, ow, kh, kw;
    for (c = c0; c < c1; c++) {
        const uint8_t *plane = q->x + c * p->in_h * p->in_w;
        uint8_t *out = q->y + c * p->out_h * p->out_w;
        for (oh = 0; oh < p->out_h; oh++) {
            for (ow = 0; ow < p->out_w; ow++) {
                int32_t best = -1;
                for (kh = 0; kh < p->kernel_h; kh++) {
                    const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
                    if (ih < 0 || ih >= p->in_h) continue;
                    for (kw = 0; kw < p->kernel_w; kw++) {
                        const int64_t iw = ow * p->stride_w + kw * p->dilation_w - p->pad_left;
                        if (iw >= 0 && iw < p->in_w && plane[ih * p->in_w + iw] > best)
                            best = plane[ih * p->in_w + iw];
                    }
                }
                out[oh * p->out_w + ow] = (uint8_t)(best < 0 ? p->pad_value : best);
            }
        }
    }
}

/* Planes are independent: split between a pool's threads by ranges of them from a quarter of
 * MLCC_MIN_PARALLEL_MACS taps (as the float pooling), the same bytes on any pool. On the
 * caller alone, YOLOv8n int8's three 5x5 max pools were 10% of its 2-thread time. */
static void qpool_run(const mlcc_qpool2d_params *p, const uint8_t *x, uint8_t *y,
                      mlcc_range_fn planes, mlcc_threadpool *pool) {
    qpool_call q;
    q.p = p;
    q.x = x;
    q.y = y;
    mlcc_parallel_ranges(pool, planes, &q, (ptrdiff_t)p->planes,
                         (double)p->planes * (double)(p->out_h * p->out_w) *
                             (double)(p->kernel_h * p->kernel_w),
                         (double)MLCC_MIN_PARALLEL_MACS / 4);
}

void mlcc_u8_maxpool2d(const mlcc_qpool2d_params *p, const uint8_t *x, uint8_t *y,
                       mlcc_threadpool *pool) {
    qpool_run(p, x, y, maxpool_planes, pool);
}

/* Sum of n codes: 32-bit partial sums over blocks of 2^16 (at most 255 * 2^16 < 2^32), a
 * loop the compiler vectorizes; a 64-bit total. */
static int64_t sum_codes(const uint8_t *x, int64_t n) {
    int64_t total = 0, i0, i;
    for (i0 = 0; i0 < n; i0 += 65536) {
        const int64_t end = n - i0 < 65536 ? n : i0 + 65536;
        uint32_t s = 0;
        for (i = i0; i < end; i++) s += x[i];
        total += (int64_t)s;
    }
    return total;
}

/* The sum of the codes of output (oh, ow)'s window that lie inside the plane, and their
 * count (average pooling: mlcc's and TFLite's). */
static inline int64_t window_sum(const mlcc_qpool2d_params *p, const uint8_t *plane,
                                 int64_t oh, int64_t ow, int64_t *count) {
    int64_t sum = 0, n = 0, kh, kw;
    for (kh = 0; kh < p->kernel_h; kh++) {
        const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
        if (ih < 0 || ih >= p->in_h) continue;
        for (kw = 0; kw < p->kernel_w; kw++) {
            const int64_t iw = ow * p->stride_w + kw * p->dilation_w - p->pad_left;
            if (iw >= 0 && iw < p->in_w) {
                sum += plane[ih * p->in_w + iw];
                n++;
            }
        }
    }
    *count = n;
    return sum;
}

#define QPOOL_COLS 1024      /* avgpool_planes' column sums per chunk of outputs */

static void avgpool_planes(void *arg, ptrdiff_t c0, ptrdiff_t c1) {
    const qpool_call *q = (const qpool_call *)arg;
    const mlcc_qpool2d_params *p = q->p;
    int64_t c, oh, ow;
    if (p->out_h == 1 && p->out_w == 1 && p->pad_top == 0 && p->pad_left == 0 &&
            p->kernel_h == p->in_h && p->kernel_w == p->in_w && p->dilation_h == 1 &&
            p->dilation_w == 1) {
        /* the window is the plane (GlobalAveragePool, the squeeze of squeeze-excitation
         * blocks): one contiguous sum per plane instead of a bounds check per tap */
        const int64_t count = p->in_h * p->in_w;
        for (c = c0; c < c1; c++)
            q->y[c] = (uint8_t)((sum_codes(q->x + c * count, count) + count / 2) / count);
        return;
    }
    if (p->pad_top == 0 && p->pad_left == 0 && p->dilation_h == 1 && p->dilation_w == 1 &&
            (p->out_h - 1) * p->stride_h + p->kernel_h <= p->in_h &&
            (p->out_w - 1) * p->stride_w + p->kernel_w <= p->in_w &&
            p->kernel_h * p->kernel_w <= 65536 && p->kernel_w <= QPOOL_COLS) {
        /* every window inside the plane (PP-OCR rec's last AvgPool, 3 x 2 over 3 x 80: 0.11
         * ms through window_sum's checks and 64-bit divisions, float's took 0.02): the taps
         * without bounds checks, and the same rounded quotient floor(x / count) as
         * (x * m) >> 40 with m = ceil(2^40 / count): exact, as x < 2^24 and count <= 2^16
         * make x (m count - 2^40) < 2^40, below the gap of 2^40 / count to the next integer */
        const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
        const ptrdiff_t in_w = (ptrdiff_t)p->in_w, sh = (ptrdiff_t)p->stride_h,
                        sw = (ptrdiff_t)p->stride_w, OW = (ptrdiff_t)p->out_w;
        const uint32_t count = (uint32_t)(kh_n * kw_n);
        const uint64_t m = (((uint64_t)1 << 40) + count - 1) / count;
        /* per output row, in chunks of outputs: the window rows summed per column (one
         * contiguous loop per row), then kernel_w columns per output, then the quotient:
         * loops the compiler vectorizes (a loop over a window's taps per output cost more in
         * setup than in sums) */
        uint32_t colsum[QPOOL_COLS], sum[QPOOL_COLS];
        const ptrdiff_t per = (QPOOL_COLS - kw_n) / sw + 1 < QPOOL_COLS
                                  ? (QPOOL_COLS - kw_n) / sw + 1 : QPOOL_COLS;
        ptrdiff_t kh, kw, j, o, o0;
        for (c = c0; c < c1; c++) {
            const uint8_t *plane = q->x + c * p->in_h * p->in_w;
            uint8_t *out = q->y + c * p->out_h * p->out_w;
            for (oh = 0; oh < p->out_h; oh++)
                for (o0 = 0; o0 < OW; o0 += per) {
                    const ptrdiff_t nw = OW - o0 < per ? OW - o0 : per;
                    const ptrdiff_t ncols = (nw - 1) * sw + kw_n;
                    const uint8_t *win = plane + (ptrdiff_t)oh * sh * in_w + o0 * sw;
                    for (j = 0; j < ncols; j++) colsum[j] = win[j];
                    for (kh = 1; kh < kh_n; kh++)
                        for (j = 0; j < ncols; j++) colsum[j] += win[kh * in_w + j];
                    for (o = 0; o < nw; o++) sum[o] = count / 2;
                    for (kw = 0; kw < kw_n; kw++)
                        for (o = 0; o < nw; o++) sum[o] += colsum[o * sw + kw];
                    for (o = 0; o < nw; o++)
                        out[oh * OW + o0 + o] = (uint8_t)(((uint64_t)sum[o] * m) >> 40);
                }
        }
        return;
    }
    for (c = c0; c < c1; c++) {
        const uint8_t *plane = q->x + c * p->in_h * p->in_w;
        uint8_t *out = q->y + c * p->out_h * p->out_w;
        for (oh = 0; oh < p->out_h; oh++) {
            for (ow = 0; ow < p->out_w; ow++) {
                int64_t count;
                const int64_t sum = window_sum(p, plane, oh, ow, &count);
                out[oh * p->out_w + ow] =
                    (uint8_t)(count ? (sum + count / 2) / count : p->pad_value);
            }
        }
    }
}

void mlcc_u8_avgpool2d(const mlcc_qpool2d_params *p, const uint8_t *x, uint8_t *y,
                       mlcc_threadpool *pool) {
    qpool_run(p, x, y, avgpool_planes, pool);
}

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
#define MLCC_LUT_VBMI 1
#else
#define MLCC_LUT_VBMI 0
#endif

static void lut_run(const mlcc_lut_params *p, const uint8_t *x, const uint8_t *table, uint8_t *y) {
    const int64_t n = p->count;
    int64_t i = 0;
#if MLCC_LUT_VBMI
    /* 64 lookups at a time: two 2-register byte permutes (entries 0-127 and 128-255, index
     * bit 6 picks the register) and a blend on index bit 7 */
    const __m512i t0 = _mm512_loadu_si512((const void *)table);
    const __m512i t1 = _mm512_loadu_si512((const void *)(table + 64));
    const __m512i t2 = _mm512_loadu_si512((const void *)(table + 128));
    const __m512i t3 = _mm512_loadu_si512((const void *)(table + 192));
    for (; i + 64 <= n; i += 64) {
        const __m512i idx = _mm512_loadu_si512((const void *)(x + i));
        const __m512i lo = _mm512_permutex2var_epi8(t0, idx, t1);
        const __m512i hi = _mm512_permutex2var_epi8(t2, idx, t3);
        _mm512_storeu_si512((void *)(y + i),
                            _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
    }
#endif
    for (; i < n; i++) y[i] = table[x[i]];
}

/* (the table travels in b) */
static void lut_part(const elem_call *c, ptrdiff_t i0, ptrdiff_t i1) {
    mlcc_lut_params q;
    q.count = i1 - i0;
    lut_run(&q, (const uint8_t *)c->a + i0, (const uint8_t *)c->b, (uint8_t *)c->y + i0);
}

void mlcc_u8_lut(const mlcc_lut_params *p, const uint8_t *x, const uint8_t *table, uint8_t *y,
                 mlcc_threadpool *pool) {
    elem_run(lut_part, p, x, table, y, p->count,
             4.0 * (double)MLCC_MIN_PARALLEL_ELEMENTS, pool);
}

/* ---- TensorFlow Lite's arithmetic (qelem.h) */

void mlcc_s8_to_u8(const mlcc_recenter_params *p, const int8_t *x, uint8_t *y) {
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) y[i] = (uint8_t)((int32_t)x[i] + 128);
}

void mlcc_u8_to_s8(const mlcc_recenter_params *p, const uint8_t *x, int8_t *y) {
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) y[i] = (int8_t)((int32_t)x[i] - 128);
}

void mlcc_f32_quantize__tflite(const mlcc_quantize_params *p, const float *x, uint8_t *y) {
    const float s = p->scale, lo = (float)(0 - p->zero_point), hi = (float)(255 - p->zero_point);
    const int32_t zp = p->zero_point;
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) {
        float f = x[i] / s;
        f = f > lo ? f : lo;          /* NaN -> lo; clamping first changes no result */
        f = f < hi ? f : hi;
        f = roundf(f);                /* TfLiteRound: half away from zero */
        y[i] = (uint8_t)((int32_t)f + zp);
    }
}

void mlcc_u8_dequantize__tflite(const mlcc_quantize_params *p, const uint8_t *x, float *y) {
    const int32_t zp = p->zero_point;
    const double s = (double)p->scale;
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) y[i] = (float)(s * (double)((int32_t)x[i] - zp));
}

/* gemmlowp's one_over_one_plus_x_for_x_in_0_1 (Q0.31 in and out; Newton-Raphson in Q2.29). */
static int32_t one_over_one_plus_x(int32_t a) {
    const int64_t sum = (int64_t)a + INT32_MAX;
    const int32_t half_denominator = (int32_t)((sum + (sum >= 0 ? 1 : -1)) / 2);
    int32_t x = (int32_t)((uint32_t)1515870810 + (uint32_t)mlcc_srdhm(half_denominator, -1010580540));
    int i;
    for (i = 0; i < 3; i++) {
        const int32_t hdx = mlcc_srdhm(half_denominator, x);
        const int32_t one_minus = (int32_t)((uint32_t)(1 << 29) - (uint32_t)hdx);
        int32_t t = mlcc_srdhm(x, one_minus);             /* Q4.27 -> Q2.29: saturating << 2 */
        const int32_t th = (1 << 29) - 1;
        t = t > th ? INT32_MAX : (t < -th ? INT32_MIN : (int32_t)((uint32_t)t << 2));
        x = (int32_t)((uint32_t)x + (uint32_t)t);
    }
    /* x / 2 as Q1.30 -> Q0.31: saturating << 1 */
    return x > (1 << 30) - 1 ? INT32_MAX : (x < -((1 << 30) - 1) ? INT32_MIN :
                                             (int32_t)((uint32_t)x << 1));
}

void mlcc_u8_softmax(const mlcc_qsoftmax_params *p, const uint8_t *x, const int32_t *exp_q31,
                     const int32_t *exp_acc, uint8_t *y) {
    int64_t r, c;
    for (r = 0; r < p->rows; r++) {
        const uint8_t *row = x + r * p->depth;
        uint8_t *out = y + r * p->depth;
        uint32_t sum = 0;
        int32_t headroom = 0, bits_over_unit, shifted_scale, exponent;
        uint8_t top = 0;
        for (c = 0; c < p->depth; c++) top = row[c] > top ? row[c] : top;
        for (c = 0; c < p->depth; c++) sum += (uint32_t)exp_acc[top - row[c]];
        while (headroom < 32 && !(sum & (0x80000000u >> headroom))) headroom++;
        bits_over_unit = 12 - headroom;
        shifted_scale = one_over_one_plus_x((int32_t)((sum << headroom) - 0x80000000u));
        exponent = bits_over_unit + 31 - 8;
        for (c = 0; c < p->depth; c++) {
            const int32_t v = mlcc_rdbpot(mlcc_srdhm(shifted_scale, exp_q31[top - row[c]]), exponent);
            out[c] = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
        }
    }
}

void mlcc_u8_avgpool2d__tflite(const mlcc_qavgpool_tflite_params *p, const uint8_t *x,
                               uint8_t *y) {
    const mlcc_qpool2d_params *q = &p->pool;
    int64_t c, oh, ow;
    for (c = 0; c < q->planes; c++) {
        const uint8_t *plane = x + c * q->in_h * q->in_w;
        uint8_t *out = y + c * q->out_h * q->out_w;
        for (oh = 0; oh < q->out_h; oh++) {
            for (ow = 0; ow < q->out_w; ow++) {
                int64_t n;
                const int64_t codes = window_sum(q, plane, oh, ow, &n);
                const int32_t count = (int32_t)n, sum = (int32_t)(codes - 128 * n);
                int32_t avg;
                if (count == 0) {
                    out[oh * q->out_w + ow] = (uint8_t)q->pad_value;
                    continue;
                }
                avg = sum > 0 ? (sum + count / 2) / count : (sum - count / 2) / count;
                avg += 128;
                avg = avg < p->qmin ? p->qmin : (avg > p->qmax ? p->qmax : avg);
                out[oh * q->out_w + ow] = (uint8_t)avg;
            }
        }
    }
}

static void sub_run(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y) {
#if MLCC_QMVE
    add_fixed_mve(p, a, b, y, 1);
    return;
#endif
    add_fixed(p, a, b, y, 1);
}

static void sub_part(const elem_call *c, ptrdiff_t i0, ptrdiff_t i1) {
    mlcc_qadd_params q = *(const mlcc_qadd_params *)c->p;
    q.count = i1 - i0;
    sub_run(&q, (const uint8_t *)c->a + i0, (const uint8_t *)c->b + i0, (uint8_t *)c->y + i0);
}

void mlcc_u8_sub(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y,
                 mlcc_threadpool *pool) {
    elem_run(sub_part, p, a, b, y, p->count, (double)MLCC_MIN_PARALLEL_ELEMENTS,
             pool);
}

void mlcc_u8_mul(const mlcc_qmul_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y) {
    const int64_t n = p->count;
    const int32_t za = p->a_zero_point, zb = p->b_zero_point, zy = p->rq.zero_point;
    int64_t i;
    if (p->rq.mode == MLCC_REQUANT_FIXED) {
        const mlcc_mbqm_c c = mlcc_mbqm_prep(p->mult, p->shift);
        for (i = 0; i < n; i++)
            y[i] = clamp_u8(zy + mlcc_mbqm_apply(((int32_t)a[i] - za) * ((int32_t)b[i] - zb), &c),
                            &p->rq);
        return;
    }
    {
        const double m = p->mult_f, magic = 6755399441055744.0;
        const double lo = (double)(p->rq.qmin - zy), hi = (double)(p->rq.qmax - zy);
        for (i = 0; i < n; i++) {
            double f = (double)(((int32_t)a[i] - za) * ((int32_t)b[i] - zb)) * m;
            f = f < lo ? lo : f;
            f = f > hi ? hi : f;
            f = (f + magic) - magic;
            y[i] = (uint8_t)((int32_t)f + zy);
        }
    }
}

void mlcc_u8_mean(const mlcc_qmean_params *p, const uint8_t *x, uint8_t *y) {
    const mlcc_mbqm_c c = mlcc_mbqm_prep(p->mult, p->shift);
    int64_t o, r, i;
    for (o = 0; o < p->outer; o++)
        for (i = 0; i < p->inner; i++) {
            const uint8_t *src = x + o * p->reduce * p->inner + i;
            int32_t acc = 0, v;
            for (r = 0; r < p->reduce; r++) acc += (int32_t)src[r * p->inner];
            acc -= p->x_zero_point * (int32_t)p->reduce;
            v = mlcc_mbqm_apply(acc, &c) + p->y_zero_point;
            y[o * p->inner + i] = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
        }
}
