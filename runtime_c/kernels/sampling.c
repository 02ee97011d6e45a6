#include "sampling.h"

/* Reflects v at lo and hi until it lies between them (ONNX's reference _gs_reflect). */
static double reflect(double v, double lo, double hi) {
    const double range = hi - lo;
    double dx, k, r;
    if (!(range > 0.0)) return lo;
    if (v >= lo && v <= hi) return v;
    dx = v < lo ? lo - v : v - hi;
    k = floor(dx / range);
    r = dx - k * range;
    if (fmod(k, 2.0) == 0.0) return v < lo ? lo + r : hi - r;
    return v < lo ? hi - r : lo + r;
}

/* The pixel that index i reads along an axis of size d, or -1 for a zero (padding). */
static int64_t pixel_index(int64_t i, int64_t d, int padding, double lo, double hi) {
    if (padding == MLCC_GRID_ZEROS) return i >= 0 && i < d ? i : -1;
    if (padding == MLCC_GRID_REFLECTION) i = (int64_t)reflect((double)i, lo, hi);
    return i < 0 ? 0 : (i >= d ? d - 1 : i);
}

static void cubic_coeffs(float t, float *w) {
    const float a = -0.75f;
    const float t1 = t + 1.0f, t2 = 1.0f - t, t3 = 2.0f - t;
    w[0] = ((a * t1 - 5.0f * a) * t1 + 8.0f * a) * t1 - 4.0f * a;
    w[1] = ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f;
    w[2] = ((a + 2.0f) * t2 - (a + 3.0f)) * t2 * t2 + 1.0f;
    w[3] = ((a * t3 - 5.0f * a) * t3 + 8.0f * a) * t3 - 4.0f * a;
}

typedef struct sampling_job {
    const void *p;
    const float *x, *grid, *w, *offset, *bias, *mask, *rois;
    const int64_t *batch_indices;
    float *y;
} sampling_job;

/* Output points [r0, r1) of the batch x points, every channel of each. */
static void grid_sample_points(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const sampling_job *job = (const sampling_job *)arg;
    const mlcc_grid_sample_params *p = (const mlcc_grid_sample_params *)job->p;
    const float *x = job->x, *grid = job->grid;
    float *y = job->y;
    const int nd = p->nd;
    const int taps = p->mode == MLCC_GRID_NEAREST ? 1 : (p->mode == MLCC_GRID_LINEAR ? 2 : 4);
    ptrdiff_t plane = 1, r, ch;
    int i, t;
    for (i = 0; i < nd; i++) plane *= (ptrdiff_t)p->in_dims[i];
    for (r = r0; r < r1; r++) {
        const ptrdiff_t b = r / (ptrdiff_t)p->points, q = r % (ptrdiff_t)p->points;
        int64_t idx[MLCC_GRID_SAMPLE_MAX_DIMS][4];
        float w[MLCC_GRID_SAMPLE_MAX_DIMS][4];
        ptrdiff_t offs[64];
        float weights[64];
        int combos = 1, k;
        const float *g = grid + (b * (ptrdiff_t)p->points + q) * nd;
        for (i = 0; i < nd; i++) {
            const int64_t d = p->in_dims[i];
            const double lo = p->align_corners ? 0.0 : -0.5;
            const double hi = p->align_corners ? (double)(d - 1) : (double)d - 0.5;
            const float u = g[nd - 1 - i];
            float v = p->align_corners ? (u + 1.0f) / 2.0f * (float)(d - 1)
                                       : ((u + 1.0f) * (float)d - 1.0f) / 2.0f;
            int64_t base;
            if (p->mode == MLCC_GRID_NEAREST) v = rintf(v);
            /* a point outside moves inside first, except cubic with border padding,
             * which clamps each of its taps instead (onnxruntime and PyTorch; for nearest
             * and linear the two agree) */
            if ((v < lo || v > hi) &&
                !(p->mode == MLCC_GRID_CUBIC && p->padding == MLCC_GRID_BORDER)) {
                if (p->padding == MLCC_GRID_BORDER)
                    v = v < 0.0f ? 0.0f : (float)(d - 1);
                else if (p->padding == MLCC_GRID_REFLECTION)
                    v = (float)reflect((double)v, lo, hi);
            }
            /* far outside (or NaN) reads only padding either way: keep the ints small */
            if (!(v >= -8.0f)) v = -8.0f;
            if (v > (float)d + 8.0f) v = (float)d + 8.0f;
            if (p->mode == MLCC_GRID_NEAREST) {
                idx[i][0] = pixel_index((int64_t)v, d, p->padding, lo, hi);
                w[i][0] = 1.0f;
                continue;
            }
            base = (int64_t)floorf(v);
            if (p->mode == MLCC_GRID_LINEAR) {
                w[i][0] = 1.0f - (v - (float)base);
                w[i][1] = v - (float)base;
            } else {
                cubic_coeffs(v - (float)base, w[i]);
                base -= 1;
            }
            for (t = 0; t < taps; t++)
                idx[i][t] = pixel_index(base + t, d, p->padding, lo, hi);
        }
        /* every combination of one tap per axis: its offset in a plane and its weight */
        for (i = 0; i < nd; i++) combos *= taps;
        for (k = 0; k < combos; k++) {
            ptrdiff_t off = 0;
            float wk = 1.0f;
            int rest = k;
            for (i = 0; i < nd; i++) {
                const int div = i == nd - 1 ? 1 : (i == nd - 2 ? taps : taps * taps);
                const int tap = (rest / div) % taps;
                if (off >= 0 && idx[i][tap] >= 0)
                    off = off * (ptrdiff_t)p->in_dims[i] + (ptrdiff_t)idx[i][tap];
                else
                    off = -1;
                wk *= w[i][tap];
            }
            offs[k] = off;
            weights[k] = wk;
        }
        for (ch = 0; ch < (ptrdiff_t)p->c; ch++) {
            const float *xc = x + (b * (ptrdiff_t)p->c + ch) * plane;
            float acc = 0.0f;
            for (k = 0; k < combos; k++)
                if (offs[k] >= 0) acc += weights[k] * xc[offs[k]];
            y[(b * (ptrdiff_t)p->c + ch) * (ptrdiff_t)p->points + q] = acc;
        }
    }
}

/* On a pool, ranges of output points (each point's channels computed by one thread: the same
 * bits on any number of threads). */
void mlcc_f32_grid_sample(const mlcc_grid_sample_params *p, const float *x, const float *grid,
                          float *y, mlcc_threadpool *pool) {
    sampling_job job = {0};
    const double taps = p->mode == MLCC_GRID_NEAREST ? 1.0
                        : p->mode == MLCC_GRID_LINEAR ? 2.0 : 4.0;
    job.p = p;
    job.x = x;
    job.grid = grid;
    job.y = y;
    mlcc_parallel_ranges(pool, grid_sample_points, &job, (ptrdiff_t)(p->n * p->points),
                         (double)p->n * (double)p->points * (double)p->c *
                             pow(taps, (double)p->nd),
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

void mlcc_f32_col2im(const mlcc_col2im_params *p, const float *x, float *y) {
    const int nd = p->nd;
    ptrdiff_t image = 1, block = 1, ncols = 1, plane, k, l;
    int i;
    for (i = 0; i < nd; i++) {
        image *= (ptrdiff_t)p->image[i];
        block *= (ptrdiff_t)p->block[i];
        ncols *= (ptrdiff_t)p->cols[i];
    }
    memset(y, 0, sizeof(float) * (size_t)(p->n * p->c * image));
    for (plane = 0; plane < (ptrdiff_t)(p->n * p->c); plane++) {
        const float *xp = x + plane * block * ncols;
        float *yp = y + plane * image;
        for (k = 0; k < block; k++)
            for (l = 0; l < ncols; l++) {
                ptrdiff_t kr = k, lr = l, off = 0, scale = 1;
                int inside = 1;
                for (i = nd - 1; i >= 0; i--) {
                    const int64_t ki = kr % p->block[i], li = lr % p->cols[i];
                    const int64_t pos = li * p->strides[i] - p->pads_begin[i] + ki * p->dilations[i];
                    kr /= (ptrdiff_t)p->block[i];
                    lr /= (ptrdiff_t)p->cols[i];
                    if (pos < 0 || pos >= p->image[i]) {
                        inside = 0;
                        break;
                    }
                    off += (ptrdiff_t)pos * scale;
                    scale *= (ptrdiff_t)p->image[i];
                }
                if (inside) yp[off] += xp[k * ncols + l];
            }
    }
}

/* One bilinear sample of RoiAlign: 4 pixel offsets in a plane and their weights (all 0 for a
 * sample more than one pixel outside the image). */
static void roi_sample(float yy, float xx, int64_t height, int64_t width, ptrdiff_t *pos,
                       float *w) {
    int64_t y_low, x_low, y_high, x_high;
    float ly, lx;
    if (yy < -1.0f || yy > (float)height || xx < -1.0f || xx > (float)width) {
        pos[0] = pos[1] = pos[2] = pos[3] = 0;
        w[0] = w[1] = w[2] = w[3] = 0.0f;
        return;
    }
    if (yy < 0.0f) yy = 0.0f;
    if (xx < 0.0f) xx = 0.0f;
    y_low = (int64_t)yy;
    x_low = (int64_t)xx;
    if (y_low >= height - 1) {
        y_high = y_low = height - 1;
        yy = (float)y_low;
    } else {
        y_high = y_low + 1;
    }
    if (x_low >= width - 1) {
        x_high = x_low = width - 1;
        xx = (float)x_low;
    } else {
        x_high = x_low + 1;
    }
    ly = yy - (float)y_low;
    lx = xx - (float)x_low;
    pos[0] = (ptrdiff_t)(y_low * width + x_low);
    pos[1] = (ptrdiff_t)(y_low * width + x_high);
    pos[2] = (ptrdiff_t)(y_high * width + x_low);
    pos[3] = (ptrdiff_t)(y_high * width + x_high);
    w[0] = (1.0f - ly) * (1.0f - lx);
    w[1] = (1.0f - ly) * lx;
    w[2] = ly * (1.0f - lx);
    w[3] = ly * lx;
}

/* A RoiAlign box's start, bin sizes and sampling grid. */
typedef struct roi_box {
    float start_h, start_w, bin_h, bin_w;
    int64_t grid_h, grid_w, count;
} roi_box;

/* The geometry of box (x1, y1, x2, y2): MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE for a grid
 * larger than 16 times the image along an axis, or a NaN start. */
static int roi_align_box(const mlcc_roi_align_params *p, const float *box, roi_box *g) {
    const float offset = p->half_pixel ? 0.5f : 0.0f;
    float roi_w, roi_h, grid_hf, grid_wf;
    g->start_w = box[0] * p->spatial_scale - offset;
    g->start_h = box[1] * p->spatial_scale - offset;
    roi_w = box[2] * p->spatial_scale - offset - g->start_w;
    roi_h = box[3] * p->spatial_scale - offset - g->start_h;
    if (!p->half_pixel) {
        roi_w = roi_w > 1.0f ? roi_w : 1.0f;
        roi_h = roi_h > 1.0f ? roi_h : 1.0f;
    }
    g->bin_h = roi_h / (float)p->out_h;
    g->bin_w = roi_w / (float)p->out_w;
    grid_hf = p->sampling_ratio > 0 ? (float)p->sampling_ratio : ceilf(g->bin_h);
    grid_wf = p->sampling_ratio > 0 ? (float)p->sampling_ratio : ceilf(g->bin_w);
    if (!(grid_hf <= 16.0f * (float)(p->height + 1)) ||
        !(grid_wf <= 16.0f * (float)(p->width + 1)) || !(g->start_h == g->start_h) ||
        !(g->start_w == g->start_w))
        return MLCC_ERR_INDEX_OUT_OF_RANGE;
    g->grid_h = grid_hf > 0.0f ? (int64_t)grid_hf : 0;
    g->grid_w = grid_wf > 0.0f ? (int64_t)grid_wf : 0;
    g->count = g->grid_h * g->grid_w > 1 ? g->grid_h * g->grid_w : 1;
    return MLCC_OK;
}

/* RoIs [r0, r1), every channel and bin of each (their boxes already checked). */
static void roi_align_rois(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const sampling_job *job = (const sampling_job *)arg;
    const mlcc_roi_align_params *p = (const mlcc_roi_align_params *)job->p;
    const ptrdiff_t c = (ptrdiff_t)p->c, plane = (ptrdiff_t)(p->height * p->width);
    const ptrdiff_t bins = (ptrdiff_t)(p->out_h * p->out_w);
    ptrdiff_t r, ph, pw, ch;
    for (r = r0; r < r1; r++) {
        const float *xr = job->x + (ptrdiff_t)job->batch_indices[r] * c * plane;
        float *yr = job->y + r * c * bins;
        roi_box g;
        int64_t iy, ix;
        (void)roi_align_box(p, job->rois + r * 4, &g);
        for (ph = 0; ph < (ptrdiff_t)p->out_h; ph++)
            for (pw = 0; pw < (ptrdiff_t)p->out_w; pw++) {
                const ptrdiff_t bin = ph * (ptrdiff_t)p->out_w + pw;
                for (ch = 0; ch < c; ch++) yr[ch * bins + bin] = 0.0f;
                for (iy = 0; iy < g.grid_h; iy++) {
                    const float yy = g.start_h + (float)ph * g.bin_h +
                                     ((float)iy + 0.5f) * g.bin_h / (float)g.grid_h;
                    for (ix = 0; ix < g.grid_w; ix++) {
                        const float xx = g.start_w + (float)pw * g.bin_w +
                                         ((float)ix + 0.5f) * g.bin_w / (float)g.grid_w;
                        const int first = iy == 0 && ix == 0;
                        ptrdiff_t pos[4];
                        float w[4];
                        roi_sample(yy, xx, p->height, p->width, pos, w);
                        for (ch = 0; ch < c; ch++) {
                            const float *xc = xr + ch * plane;
                            float *out = yr + ch * bins + bin;
                            if (p->max_mode) {
                                float v = w[0] * xc[pos[0]], t;
                                t = w[1] * xc[pos[1]];
                                v = t > v ? t : v;
                                t = w[2] * xc[pos[2]];
                                v = t > v ? t : v;
                                t = w[3] * xc[pos[3]];
                                v = t > v ? t : v;
                                *out = first || v > *out ? v : *out;
                            } else {
                                *out += w[0] * xc[pos[0]] + w[1] * xc[pos[1]] +
                                        w[2] * xc[pos[2]] + w[3] * xc[pos[3]];
                            }
                        }
                    }
                }
                if (!p->max_mode)
                    for (ch = 0; ch < c; ch++) yr[ch * bins + bin] /= (float)g.count;
            }
    }
}

/* Every box checked first (a bad one: the status, nothing computed), then on a pool ranges of
 * RoIs between threads (each RoI computed by one: the same bits on any number of threads). */
int mlcc_f32_roi_align__i64(const mlcc_roi_align_params *p, const float *x, const float *rois,
                            const int64_t *batch_indices, float *y, mlcc_threadpool *pool) {
    sampling_job job = {0};
    ptrdiff_t r;
    for (r = 0; r < (ptrdiff_t)p->num_rois; r++) {
        roi_box g;
        if (batch_indices[r] < 0 || batch_indices[r] >= p->n ||
            roi_align_box(p, rois + r * 4, &g) != MLCC_OK)
            return MLCC_ERR_INDEX_OUT_OF_RANGE;
    }
    job.p = p;
    job.x = x;
    job.rois = rois;
    job.batch_indices = batch_indices;
    job.y = y;
    mlcc_parallel_ranges(pool, roi_align_rois, &job, (ptrdiff_t)p->num_rois,
                         (double)p->num_rois * (double)p->c * (double)(p->out_h * p->out_w) * 4.0,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
    return MLCC_OK;
}

/* A MaxRoiPool bin's bounds along one axis, clipped to [0, size). */
static void roi_pool_bin(int64_t i, float bin, int64_t start, int64_t size, int64_t *lo,
                         int64_t *hi) {
    int64_t a = (int64_t)floorf((float)i * bin) + start;
    int64_t b = (int64_t)ceilf((float)(i + 1) * bin) + start;
    *lo = a < 0 ? 0 : a > size ? size : a;
    *hi = b < 0 ? 0 : b > size ? size : b;
}

/* A MaxRoiPool box's scaled corners (x1, y1, x2, y2): MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE
 * for a batch index that truncates to outside [0, n) or a corner beyond +-2^30 or NaN. */
static int max_roi_box(const mlcc_max_roi_pool_params *p, const float *box, int64_t *corner) {
    const float limit = 1073741824.0f; /* 2^30: corners and sizes stay exact int64 values */
    int k;
    if (!(box[0] > -1.0f && box[0] < (float)p->n)) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (k = 0; k < 4; k++) {
        const float v = roundf(box[1 + k] * p->spatial_scale);
        if (!(v >= -limit && v <= limit)) return MLCC_ERR_INDEX_OUT_OF_RANGE;
        corner[k] = (int64_t)v;
    }
    return MLCC_OK;
}

/* RoIs [r0, r1), every channel and bin of each (their boxes already checked). */
static void max_roi_pool_rois(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const sampling_job *job = (const sampling_job *)arg;
    const mlcc_max_roi_pool_params *p = (const mlcc_max_roi_pool_params *)job->p;
    const ptrdiff_t c = (ptrdiff_t)p->c, plane = (ptrdiff_t)(p->height * p->width);
    const ptrdiff_t bins = (ptrdiff_t)(p->out_h * p->out_w);
    ptrdiff_t r, ph, pw, ch;
    for (r = r0; r < r1; r++) {
        const float *box = job->rois + r * 5;
        int64_t corner[4], roi_w, roi_h;
        float bin_h, bin_w;
        const float *xr = job->x + (ptrdiff_t)(int64_t)box[0] * c * plane;
        float *yr = job->y + r * c * bins;
        (void)max_roi_box(p, box, corner);
        roi_w = corner[2] - corner[0] + 1;
        roi_h = corner[3] - corner[1] + 1;
        bin_h = (float)(roi_h > 1 ? roi_h : 1) / (float)p->out_h;
        bin_w = (float)(roi_w > 1 ? roi_w : 1) / (float)p->out_w;
        for (ph = 0; ph < (ptrdiff_t)p->out_h; ph++) {
            int64_t h0, h1;
            roi_pool_bin(ph, bin_h, corner[1], p->height, &h0, &h1);
            for (pw = 0; pw < (ptrdiff_t)p->out_w; pw++) {
                const ptrdiff_t bin = ph * (ptrdiff_t)p->out_w + pw;
                int64_t w0, w1, h, w;
                roi_pool_bin(pw, bin_w, corner[0], p->width, &w0, &w1);
                for (ch = 0; ch < c; ch++) {
                    const float *xc = xr + ch * plane;
                    float m = 0.0f;
                    if (h1 > h0 && w1 > w0) {
                        m = xc[h0 * p->width + w0];
                        for (h = h0; h < h1; h++)
                            for (w = w0; w < w1; w++)
                                m = xc[h * p->width + w] > m ? xc[h * p->width + w] : m;
                    }
                    yr[ch * bins + bin] = m;
                }
            }
        }
    }
}

/* Every box checked first, then on a pool ranges of RoIs between threads. */
int mlcc_f32_max_roi_pool(const mlcc_max_roi_pool_params *p, const float *x, const float *rois,
                          float *y, mlcc_threadpool *pool) {
    sampling_job job = {0};
    ptrdiff_t r;
    for (r = 0; r < (ptrdiff_t)p->num_rois; r++) {
        int64_t corner[4];
        if (max_roi_box(p, rois + r * 5, corner) != MLCC_OK) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    }
    job.p = p;
    job.x = x;
    job.rois = rois;
    job.y = y;
    mlcc_parallel_ranges(pool, max_roi_pool_rois, &job, (ptrdiff_t)p->num_rois,
                         (double)p->num_rois * (double)p->c * (double)(p->height * p->width),
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
    return MLCC_OK;
}

/* x (one plane of height x width) at (h, w), bilinearly; pixels outside are 0. */
static float bilinear_zero(const float *x, int64_t height, int64_t width, float h, float w) {
    float h0f, w0f, lh, lw, v = 0.0f;
    int64_t h0, w0;
    if (!(h > -1.0f && h < (float)height && w > -1.0f && w < (float)width)) return 0.0f;
    h0f = floorf(h);
    w0f = floorf(w);
    h0 = (int64_t)h0f;
    w0 = (int64_t)w0f;
    lh = h - h0f;
    lw = w - w0f;
    if (h0 >= 0 && w0 >= 0) v += (1.0f - lh) * (1.0f - lw) * x[h0 * width + w0];
    if (h0 >= 0 && w0 + 1 < width) v += (1.0f - lh) * lw * x[h0 * width + w0 + 1];
    if (h0 + 1 < height && w0 >= 0) v += lh * (1.0f - lw) * x[(h0 + 1) * width + w0];
    if (h0 + 1 < height && w0 + 1 < width) v += lh * lw * x[(h0 + 1) * width + w0 + 1];
    return v;
}

/* Output positions [r0, r1) of batch x out_h x out_w, every output channel of each: the sums in
 * the order of the input channels and taps, as on one thread. */
static void deform_conv_positions(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const sampling_job *job = (const sampling_job *)arg;
    const mlcc_deform_conv_params *p = (const mlcc_deform_conv_params *)job->p;
    const ptrdiff_t c = (ptrdiff_t)p->c, oc = (ptrdiff_t)p->oc, taps = (ptrdiff_t)(p->kh * p->kw);
    const ptrdiff_t plane = (ptrdiff_t)(p->height * p->width);
    const ptrdiff_t out = (ptrdiff_t)(p->out_h * p->out_w);
    const ptrdiff_t icpg = c / (ptrdiff_t)p->group, ocpg = oc / (ptrdiff_t)p->group;
    const ptrdiff_t icpo = c / (ptrdiff_t)p->offset_group;
    const float *w = job->w;
    float *y = job->y;
    ptrdiff_t b, ic, t, q, o;
    if (r0 >= r1) return;
    for (b = r0 / out; b <= (r1 - 1) / out; b++) {
        /* this batch's positions within [r0, r1) */
        const ptrdiff_t q0 = b == r0 / out ? r0 % out : 0;
        const ptrdiff_t q1 = b == (r1 - 1) / out ? (r1 - 1) % out + 1 : out;
        for (o = 0; o < oc; o++)
            for (q = q0; q < q1; q++) y[(b * oc + o) * out + q] = job->bias ? job->bias[o] : 0.0f;
        for (ic = 0; ic < c; ic++) {
            const ptrdiff_t og = ic / icpo, g = ic / icpg;
            const float *xc = job->x + (b * c + ic) * plane;
            for (t = 0; t < taps; t++) {
                const ptrdiff_t i = t / (ptrdiff_t)p->kw, j = t % (ptrdiff_t)p->kw;
                const float *dy =
                    job->offset + ((b * (ptrdiff_t)p->offset_group + og) * taps + t) * 2 * out;
                const float *dx = dy + out;
                const float *m = job->mask ? job->mask +
                    ((b * (ptrdiff_t)p->offset_group + og) * taps + t) * out : NULL;
                for (q = q0; q < q1; q++) {
                    const ptrdiff_t oh = q / (ptrdiff_t)p->out_w, ow = q % (ptrdiff_t)p->out_w;
                    const float h = (float)(oh * p->stride_h - p->pad_h + i * p->dil_h) + dy[q];
                    const float ww = (float)(ow * p->stride_w - p->pad_w + j * p->dil_w) + dx[q];
                    float v = bilinear_zero(xc, p->height, p->width, h, ww);
                    if (m) v *= m[q];
                    for (o = g * ocpg; o < (g + 1) * ocpg; o++)
                        y[(b * oc + o) * out + q] += w[(o * icpg + ic % icpg) * taps + t] * v;
                }
            }
        }
    }
}

/* On a pool, ranges of output positions (each position's outputs summed by one thread in the
 * same order: the same bits on any number of threads). */
void mlcc_f32_deform_conv2d(const mlcc_deform_conv_params *p, const float *x, const float *w,
                            const float *offset, const float *bias, const float *mask,
                            float *y, mlcc_threadpool *pool) {
    sampling_job job = {0};
    job.p = p;
    job.x = x;
    job.w = w;
    job.offset = offset;
    job.bias = bias;
    job.mask = mask;
    job.y = y;
    mlcc_parallel_ranges(pool, deform_conv_positions, &job,
                         (ptrdiff_t)(p->n * p->out_h * p->out_w),
                         (double)p->n * (double)(p->out_h * p->out_w) * (double)p->c *
                             (double)(p->kh * p->kw) * (double)(p->oc / p->group),
                         (double)MLCC_MIN_PARALLEL_MACS);
}
