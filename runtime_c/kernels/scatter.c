#include "scatter.h"

#include "indexing.h"

/* dst[0..n) (reduction)= src[0..n), elements of type T. Add and mul compute in W (uint64_t
 * for integers: they wrap, with no signed overflow nor promotion to int) and store the bits
 * of UT, the unsigned type of T (floats: T itself). */
#define COMBINE(T, UT, W)                                                                    \
    do {                                                                                     \
        T *d = (T *)dst;                                                                     \
        const T *s = (const T *)src;                                                         \
        for (i = 0; i < n; i++) {                                                            \
            UT r;                                                                            \
            switch (red) {                                                                   \
            case MLCC_SCATTER_ADD: r = (UT)((W)d[i] + (W)s[i]); break;                       \
            case MLCC_SCATTER_MUL: r = (UT)((W)d[i] * (W)s[i]); break;                       \
            case MLCC_SCATTER_MAX: r = (UT)(s[i] > d[i] ? s[i] : d[i]); break;               \
            default: r = (UT)(s[i] < d[i] ? s[i] : d[i]); break;                             \
            }                                                                                \
            memcpy(&d[i], &r, sizeof r);                                                     \
        }                                                                                    \
    } while (0)

static void combine(int red, int dtype, int es, uint8_t *dst, const uint8_t *src, ptrdiff_t n) {
    ptrdiff_t i;
    if (red == MLCC_SCATTER_NONE) {
        memcpy(dst, src, (size_t)(n * es));
        return;
    }
    switch (dtype) {
    case MLCC_FLOAT32: COMBINE(float, float, float); break;
    case MLCC_FLOAT64: COMBINE(double, double, double); break;
    case MLCC_INT8: COMBINE(int8_t, uint8_t, uint64_t); break;
    case MLCC_UINT8: COMBINE(uint8_t, uint8_t, uint64_t); break;
    case MLCC_INT16: COMBINE(int16_t, uint16_t, uint64_t); break;
    case MLCC_UINT16: COMBINE(uint16_t, uint16_t, uint64_t); break;
    case MLCC_INT32: COMBINE(int32_t, uint32_t, uint64_t); break;
    case MLCC_UINT32: COMBINE(uint32_t, uint32_t, uint64_t); break;
    case MLCC_INT64: COMBINE(int64_t, uint64_t, uint64_t); break;
    case MLCC_UINT64: COMBINE(uint64_t, uint64_t, uint64_t); break;
    default: break;
    }
}

/* The element offset of tuple t (k coordinates) within its block, or -1 when out of range. */
static ptrdiff_t nd_offset(const mlcc_nd_index_params *p, const int64_t *tuple) {
    ptrdiff_t off = 0;
    int64_t j;
    for (j = 0; j < p->k; j++) {
        int64_t c = tuple[j];
        if (c < -p->dims[j] || c >= p->dims[j]) return -1;
        if (c < 0) c += p->dims[j];
        off += (ptrdiff_t)(c * p->strides[j]);
    }
    return off;
}

/* Tuple t counts when its coordinate along the data-dependent axis of the indices (idx_max
 * positions of idx_inner tuples each) is below valid; every tuple counts when idx_max is 0. */
static int nd_counted(ptrdiff_t t, int64_t idx_max, int64_t idx_inner, int64_t valid) {
    return idx_max == 0 || (t / idx_inner) % idx_max < valid;
}

static int nd_check(const mlcc_nd_index_params *p, const int64_t *indices, int64_t idx_max,
                    int64_t idx_inner, int64_t valid) {
    ptrdiff_t t;
    for (t = 0; t < (ptrdiff_t)(p->batch * p->n); t++)
        if (nd_counted(t, idx_max, idx_inner, valid) && nd_offset(p, indices + t * p->k) < 0)
            return MLCC_ERR_INDEX_OUT_OF_RANGE;
    return MLCC_OK;
}

static int gather_nd(const mlcc_nd_index_params *p, const void *data, const int64_t *indices,
                     int64_t idx_max, int64_t idx_inner, int64_t valid, void *out) {
    const ptrdiff_t es = p->elem_size, slice = (ptrdiff_t)p->slice;
    const uint8_t *src = (const uint8_t *)data;
    uint8_t *dst = (uint8_t *)out;
    ptrdiff_t b, t;
    if (nd_check(p, indices, idx_max, idx_inner, valid) != MLCC_OK)
        return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (b = 0; b < (ptrdiff_t)p->batch; b++)
        for (t = 0; t < (ptrdiff_t)p->n; t++) {
            const ptrdiff_t at = b * (ptrdiff_t)p->n + t;
            if (!nd_counted(at, idx_max, idx_inner, valid)) {
                memset(dst + at * slice * es, 0, (size_t)(slice * es));
                continue;
            }
            memcpy(dst + at * slice * es,
                   src + (b * (ptrdiff_t)p->batch_stride + nd_offset(p, indices + at * p->k)) * es,
                   (size_t)(slice * es));
        }
    return MLCC_OK;
}

int mlcc_gather_nd(const mlcc_nd_index_params *p, const void *data, const int64_t *indices,
                   void *out) {
    return gather_nd(p, data, indices, 0, 1, 0, out);
}

int mlcc_gather_nd__counted(const mlcc_gather_nd_counted_params *p, const void *data,
                            const int64_t *indices, const int64_t *count, void *out) {
    return gather_nd(&p->nd, data, indices, p->idx_max, p->idx_inner, *count, out);
}

int mlcc_scatter_nd(const mlcc_nd_index_params *p, const int64_t *indices, const void *updates,
                    void *y) {
    const ptrdiff_t es = p->elem_size, slice = (ptrdiff_t)p->slice;
    ptrdiff_t t;
    if (nd_check(p, indices, 0, 1, 0) != MLCC_OK) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (t = 0; t < (ptrdiff_t)p->n; t++)
        combine(p->reduction, p->dtype, (int)es,
                (uint8_t *)y + nd_offset(p, indices + t * p->k) * es,
                (const uint8_t *)updates + t * slice * es, slice);
    return MLCC_OK;
}

static int scatter_elements(const mlcc_scatter_elements_params *p, const void *indices,
                            int wide, const void *updates, void *y) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    int64_t index[MLCC_MAX_RANK] = {0};
    ptrdiff_t total = 1, n, off = 0;
    int axis;
    for (axis = 0; axis < p->rank; axis++) total *= (ptrdiff_t)p->shape[axis];
    if (mlcc_elements_check(indices, wide, total, p->axis_dim) != MLCC_OK)
        return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (n = 0; n < total; n++) {
        int64_t idx = mlcc_elements_index(indices, wide, n);
        if (idx < 0) idx += p->axis_dim;
        combine(p->reduction, p->dtype, (int)es,
                (uint8_t *)y + (off + (ptrdiff_t)(idx * p->y_strides[p->axis])) * es,
                (const uint8_t *)updates + n * es, 1);
        mlcc_elements_next(p->rank, p->axis, p->shape, p->y_strides, index, &off);
    }
    return MLCC_OK;
}

int mlcc_scatter_elements__i64(const mlcc_scatter_elements_params *p, const int64_t *indices,
                               const void *updates, void *y) {
    return scatter_elements(p, indices, 1, updates, y);
}

int mlcc_scatter_elements__i32(const mlcc_scatter_elements_params *p, const int32_t *indices,
                               const void *updates, void *y) {
    return scatter_elements(p, indices, 0, updates, y);
}

/* Index i of a OneHot indices tensor as an integer; floats truncate toward zero, and values
 * beyond the int64 range (NaN included) become -1 - depth, out of range. */
static int64_t one_hot_index(const mlcc_one_hot_params *p, const void *indices, ptrdiff_t i) {
    double f;
    switch (p->index_dtype) {
    case MLCC_INT64: return ((const int64_t *)indices)[i];
    case MLCC_INT32: return ((const int32_t *)indices)[i];
    case MLCC_INT16: return ((const int16_t *)indices)[i];
    case MLCC_INT8: return ((const int8_t *)indices)[i];
    case MLCC_UINT8: return ((const uint8_t *)indices)[i];
    case MLCC_UINT16: return ((const uint16_t *)indices)[i];
    case MLCC_UINT32: return ((const uint32_t *)indices)[i];
    case MLCC_UINT64: {
        const uint64_t u = ((const uint64_t *)indices)[i];
        return u > (uint64_t)INT64_MAX ? -1 - p->depth : (int64_t)u;
    }
    case MLCC_FLOAT32: f = ((const float *)indices)[i]; break;
    default: f = ((const double *)indices)[i]; break;
    }
    return f > -9.2e18 && f < 9.2e18 ? (int64_t)f : -1 - p->depth;
}

void mlcc_one_hot(const mlcc_one_hot_params *p, const void *indices, const void *values,
                  void *y) {
    const ptrdiff_t es = p->elem_size, depth = (ptrdiff_t)p->depth, inner = (ptrdiff_t)p->inner;
    const uint8_t *off = (const uint8_t *)values, *on = off + es;
    uint8_t *dst = (uint8_t *)y;
    ptrdiff_t o, d, i;
    for (o = 0; o < (ptrdiff_t)p->outer; o++)
        for (i = 0; i < inner; i++) {
            int64_t idx = one_hot_index(p, indices, o * inner + i);
            if (idx < 0) idx += depth;
            for (d = 0; d < depth; d++)
                memcpy(dst + ((o * depth + d) * inner + i) * es, d == idx ? on : off,
                       (size_t)es);
        }
}

int mlcc_tensor_scatter(const mlcc_tensor_scatter_params *p, const int64_t *write_indices,
                        const void *update, void *y) {
    const ptrdiff_t row = (ptrdiff_t)(p->inner * p->elem_size);
    const int64_t per_batch = p->batch > 0 ? p->outer / p->batch : 0;
    int64_t o, s;
    if (p->seq <= 0 || p->max_seq <= 0) return MLCC_OK;     /* nothing to write */
    if (write_indices != NULL && !p->circular) {
        for (o = 0; o < p->batch; o++)
            if (write_indices[o] < 0 || write_indices[o] > p->max_seq - p->seq)
                return MLCC_ERR_INDEX_OUT_OF_RANGE;
    }
    for (o = 0; o < p->outer; o++) {
        int64_t w = write_indices != NULL ? write_indices[o / per_batch] : 0;
        if (p->circular) w = (w % p->max_seq + p->max_seq) % p->max_seq;   /* no overflow */
        for (s = 0; s < p->seq; s++) {
            const int64_t r = p->circular ? (w + s % p->max_seq) % p->max_seq : w + s;
            memcpy((uint8_t *)y + (ptrdiff_t)(o * p->max_seq + r) * row,
                   (const uint8_t *)update + (ptrdiff_t)(o * p->seq + s) * row, (size_t)row);
        }
    }
    return MLCC_OK;
}
