#include "resize.h"

/* One output row of nearest: out[j] = row[cols[j]]. Fixed element sizes compile to plain
 * loads and stores. */
static void gather_row(uint8_t *out, const uint8_t *row, const int32_t *cols, ptrdiff_t n,
                       ptrdiff_t es) {
    ptrdiff_t j;
    switch (es) {
    case 1:
        for (j = 0; j < n; j++) out[j] = row[cols[j]];
        break;
    case 4:
        for (j = 0; j < n; j++) memcpy(out + j * 4, row + (ptrdiff_t)cols[j] * 4, 4);
        break;
    case 8:
        for (j = 0; j < n; j++) memcpy(out + j * 8, row + (ptrdiff_t)cols[j] * 8, 8);
        break;
    default:
        for (j = 0; j < n; j++)
            memcpy(out + j * es, row + (ptrdiff_t)cols[j] * es, (size_t)es);
        break;
    }
}

void mlcc_resize_nearest(const mlcc_resize_params *p, const void *x, const int32_t *map,
                         void *y) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh = (ptrdiff_t)p->out_h, ow = (ptrdiff_t)p->out_w;
    const int32_t *rows = map, *cols = map + oh;
    const size_t row_bytes = (size_t)(ow * es);
    const uint8_t *src = (const uint8_t *)x;
    uint8_t *dst = (uint8_t *)y;
    ptrdiff_t plane, i;
    for (plane = 0; plane < (ptrdiff_t)p->planes; plane++) {
        const uint8_t *in = src + plane * ih * iw * es;
        uint8_t *out = dst + plane * oh * ow * es;
        for (i = 0; i < oh; i++) {
            /* Upsampling repeats source rows: copy the previous output row instead. */
            if (i > 0 && rows[i] == rows[i - 1])
                memcpy(out + i * ow * es, out + (i - 1) * ow * es, row_bytes);
            else
                gather_row(out + i * ow * es, in + (ptrdiff_t)rows[i] * iw * es, cols, ow, es);
        }
    }
}

/* out[j] = w0[j] * row[c0[j]] + w1[j] * row[c1[j]] */
static void blend_row(float *MLCC_RESTRICT out, const float *MLCC_RESTRICT row,
                      const int32_t *c0, const int32_t *c1, const float *w0, const float *w1,
                      ptrdiff_t n) {
    ptrdiff_t j;
    for (j = 0; j < n; j++) out[j] = w0[j] * row[c0[j]] + w1[j] * row[c1[j]];
}

void mlcc_f32_resize_linear(const mlcc_resize_params *p, const float *x, const int32_t *map,
                            const float *wt, float *y, float *scratch) {
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh = (ptrdiff_t)p->out_h, ow = (ptrdiff_t)p->out_w;
    const int32_t *r0 = map, *r1 = map + oh, *c0 = map + 2 * oh, *c1 = c0 + ow;
    const float *wr0 = wt, *wr1 = wt + oh, *wc0 = wt + 2 * oh, *wc1 = wc0 + ow;
    float *buf[2];
    ptrdiff_t plane, i, j;
    buf[0] = scratch;
    buf[1] = scratch + ow;
    for (plane = 0; plane < (ptrdiff_t)p->planes; plane++) {
        const float *in = x + plane * ih * iw;
        float *out = y + plane * oh * ow;
        int32_t have[2] = {-1, -1};   /* which source row each buffer holds */
        for (i = 0; i < oh; i++) {
            const float *a, *b;
            const float u = wr0[i], v = wr1[i];
            int s0, s1;
            if (have[0] == r0[i]) {
                s0 = 0;
            } else if (have[1] == r0[i]) {
                s0 = 1;
            } else {
                s0 = have[0] == r1[i] ? 1 : 0;   /* keep the buffer the second row needs */
                blend_row(buf[s0], in + (ptrdiff_t)r0[i] * iw, c0, c1, wc0, wc1, ow);
                have[s0] = r0[i];
            }
            if (have[s0] == r1[i]) {
                s1 = s0;
            } else {
                s1 = 1 - s0;
                if (have[s1] != r1[i]) {
                    blend_row(buf[s1], in + (ptrdiff_t)r1[i] * iw, c0, c1, wc0, wc1, ow);
                    have[s1] = r1[i];
                }
            }
            a = buf[s0];
            b = buf[s1];
            for (j = 0; j < ow; j++) out[i * ow + j] = u * a[j] + v * b[j];
        }
    }
}

void mlcc_f32_resize_taps(const mlcc_resize_taps_params *p, const float *x, const int32_t *map,
                          const float *wt, float *y, float *scratch) {
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh = (ptrdiff_t)p->out_h, ow = (ptrdiff_t)p->out_w;
    const ptrdiff_t th = (ptrdiff_t)p->taps_h, tw = (ptrdiff_t)p->taps_w;
    const int32_t *rows = map, *cols = map + oh * th;
    const float *wr = wt, *wc = wt + oh * th;
    ptrdiff_t plane, r, i, j, k;
    for (plane = 0; plane < (ptrdiff_t)p->planes; plane++) {
        const float *in = x + plane * ih * iw;
        float *out = y + plane * oh * ow;
        /* Along the width: every source row, once. */
        for (r = 0; r < ih; r++) {
            const float *src = in + r * iw;
            float *dst = scratch + r * ow;
            for (j = 0; j < ow; j++) {
                const int32_t *c = cols + j * tw;
                const float *w = wc + j * tw;
                float acc = 0.0f;
                if (c[0] >= 0)
                    for (k = 0; k < tw; k++) acc += w[k] * src[c[k]];
                dst[j] = acc;
            }
        }
        /* Along the height: blend the resized rows. */
        for (i = 0; i < oh; i++) {
            const int32_t *rr = rows + i * th;
            const float *w = wr + i * th;
            float *o = out + i * ow;
            if (rr[0] < 0) {
                for (j = 0; j < ow; j++) o[j] = p->extrapolation_value;
                continue;
            }
            for (j = 0; j < ow; j++) o[j] = w[0] * scratch[(ptrdiff_t)rr[0] * ow + j];
            for (k = 1; k < th; k++) {
                const float *s = scratch + (ptrdiff_t)rr[k] * ow;
                const float wk = w[k];
                for (j = 0; j < ow; j++) o[j] += wk * s[j];
            }
            for (j = 0; j < ow; j++)
                if (cols[j * tw] < 0) o[j] = p->extrapolation_value;
        }
    }
}
