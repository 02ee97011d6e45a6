#include "pad.h"

static void fill(uint8_t *dst, const uint8_t *value, ptrdiff_t n, ptrdiff_t es) {
    ptrdiff_t i;
    if (es == 1) {
        memset(dst, *value, (size_t)n);
    } else if (es == 4) {
        for (i = 0; i < n; i++) memcpy(dst + i * 4, value, 4);
    } else {
        for (i = 0; i < n; i++) memcpy(dst + i * es, value, (size_t)es);
    }
}

/* Output elements [begin, end) of one row, through the innermost axis map. */
static void mapped(uint8_t *row, const uint8_t *src, const int32_t *map, ptrdiff_t begin,
                   ptrdiff_t end, const uint8_t *value, ptrdiff_t es) {
    ptrdiff_t i;
    for (i = begin; i < end; i++)
        memcpy(row + i * es, map[i] < 0 ? value : src + (ptrdiff_t)map[i] * es, (size_t)es);
}

void mlcc_pad(const mlcc_pad_params *p, const void *x, const int32_t *map, const void *value,
              void *y) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->out_shape[inner];
    const ptrdiff_t run_begin = (ptrdiff_t)p->run_begin;
    const ptrdiff_t run_end = run_begin + (ptrdiff_t)p->run_length;
    const int32_t *inner_map = map + p->map_offset[inner];
    const uint8_t *v = (const uint8_t *)value;
    uint8_t *row = (uint8_t *)y;
    int64_t index[MLCC_MAX_RANK] = {0};
    int axis;
    for (axis = 0; axis < p->rank; axis++)
        if (p->out_shape[axis] == 0) return;
    for (;;) {
        /* Where this row starts in the input, or -1 if an outer axis is in the padding. */
        ptrdiff_t base = 0;
        for (axis = 0; axis < inner; axis++) {
            int32_t m = map[p->map_offset[axis] + index[axis]];
            if (m < 0) {
                base = -1;
                break;
            }
            base += (ptrdiff_t)m * (ptrdiff_t)p->in_strides[axis];
        }
        if (base < 0) {
            fill(row, v, n, es);
        } else {
            const uint8_t *src = (const uint8_t *)x + base * es;
            mapped(row, src, inner_map, 0, run_begin, v, es);
            if (run_end > run_begin)
                memcpy(row + run_begin * es, src + (ptrdiff_t)p->run_src * es,
                       (size_t)((run_end - run_begin) * es));
            mapped(row, src, inner_map, run_end, n, v, es);
        }
        row += n * es;
        for (axis = inner - 1; axis >= 0; axis--) {
            if (++index[axis] < p->out_shape[axis]) break;
            index[axis] = 0;
        }
        if (axis < 0) return;
    }
}

/* The source index of padded position j - first (outside [0, n)) of a kept part of n. */
static int64_t outside(int64_t r, int64_t n, int32_t mode) {
    if (mode == MLCC_PAD_WRAP) {
        r %= n;
        return r < 0 ? r + n : r;
    }
    if (n == 1) return 0;          /* reflect */
    {
        const int64_t period = 2 * (n - 1);
        r %= period;
        if (r < 0) r += period;
        return r < n ? r : period - r;
    }
}

void mlcc_pad__computed(const mlcc_pad_computed_params *p, const void *x, const void *value,
                        void *y, void *scratch) {
    int32_t *map = (int32_t *)scratch;
    int axis;
    for (axis = 0; axis < p->base.rank; axis++) {
        const int64_t d = p->in_dim[axis], b = p->begin[axis];
        const int64_t first = b < 0 ? -b : 0;
        const int64_t n = d - first - (p->end[axis] < 0 ? -p->end[axis] : 0);
        int32_t *m = map + p->base.map_offset[axis];
        int64_t i;
        for (i = 0; i < p->base.out_shape[axis]; i++) {
            int64_t r = i - b - first;
            if (r < 0 || r >= n) {
                if (p->mode == MLCC_PAD_CONSTANT) r = -1 - first;
                else if (p->mode == MLCC_PAD_EDGE) r = r < 0 ? 0 : n - 1;
                else r = outside(r, n, p->mode);
            }
            m[i] = (int32_t)(first + r);
        }
    }
    mlcc_pad(&p->base, x, map, value, y);
}
