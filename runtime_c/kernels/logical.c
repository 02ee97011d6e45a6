#include "logical.h"

#include <float.h>

/* One innermost row of a comparison for one element type T: the op switch sits outside the
 * loops so that each loop is a plain vectorizable compare. */
#define COMPARE_ROW(NAME, T)                                                                \
    static void NAME(int op, const void *va, ptrdiff_t sa, const void *vb, ptrdiff_t sb,   \
                     uint8_t *y, ptrdiff_t n) {                                            \
        const T *a = (const T *)va, *b = (const T *)vb;                                    \
        ptrdiff_t i;                                                                       \
        switch (op) {                                                                      \
        case MLCC_COMPARE_EQUAL:                                                           \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] == b[i * sb]);              \
            break;                                                                         \
        case MLCC_COMPARE_LESS:                                                            \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] < b[i * sb]);               \
            break;                                                                         \
        case MLCC_COMPARE_LESS_EQUAL:                                                      \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] <= b[i * sb]);              \
            break;                                                                         \
        case MLCC_COMPARE_GREATER:                                                         \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] > b[i * sb]);               \
            break;                                                                         \
        case MLCC_COMPARE_GREATER_EQUAL:                                                   \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] >= b[i * sb]);              \
            break;                                                                         \
        case MLCC_COMPARE_AND:                                                             \
            for (i = 0; i < n; i++) y[i] = (uint8_t)((a[i * sa] != 0) & (b[i * sb] != 0)); \
            break;                                                                         \
        case MLCC_COMPARE_OR:                                                              \
            for (i = 0; i < n; i++) y[i] = (uint8_t)((a[i * sa] != 0) | (b[i * sb] != 0)); \
            break;                                                                         \
        default:                                                                           \
            for (i = 0; i < n; i++) y[i] = (uint8_t)((a[i * sa] != 0) ^ (b[i * sb] != 0)); \
            break;                                                                         \
        }                                                                                  \
    }

COMPARE_ROW(compare_f32, float)
COMPARE_ROW(compare_i64, int64_t)
COMPARE_ROW(compare_i32, int32_t)
COMPARE_ROW(compare_i8, int8_t)
COMPARE_ROW(compare_u8, uint8_t)
COMPARE_ROW(compare_i16, int16_t)
COMPARE_ROW(compare_u16, uint16_t)
COMPARE_ROW(compare_u32, uint32_t)
COMPARE_ROW(compare_u64, uint64_t)
COMPARE_ROW(compare_f64, double)

void mlcc_compare(const mlcc_compare_params *p, const void *a, const void *b, uint8_t *y) {
    void (*row)(int, const void *, ptrdiff_t, const void *, ptrdiff_t, uint8_t *, ptrdiff_t);
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner];
    ptrdiff_t es;
    mlcc_odometer o;
    switch (p->dtype) {
    case MLCC_FLOAT32: row = compare_f32; es = 4; break;
    case MLCC_INT64: row = compare_i64; es = 8; break;
    case MLCC_INT32: row = compare_i32; es = 4; break;
    case MLCC_INT8: row = compare_i8; es = 1; break;
    case MLCC_INT16: row = compare_i16; es = 2; break;
    case MLCC_UINT16: row = compare_u16; es = 2; break;
    case MLCC_UINT32: row = compare_u32; es = 4; break;
    case MLCC_UINT64: row = compare_u64; es = 8; break;
    case MLCC_FLOAT64: row = compare_f64; es = 8; break;
    default: row = compare_u8; es = 1; break;   /* uint8 and bool */
    }
    if (!mlcc_odometer_init(&o, p->rank, p->shape, p->a_strides, p->b_strides, NULL)) return;
    do {
        row(p->op, (const uint8_t *)a + o.off[0] * es, (ptrdiff_t)p->a_strides[inner],
            (const uint8_t *)b + o.off[1] * es, (ptrdiff_t)p->b_strides[inner], y, n);
        y += n;
    } while (mlcc_odometer_next(&o));
}

/* One innermost row of Where for elements of ES bytes: memcpy of a constant size compiles to
 * one load and store, and keeps the element type out of the aliasing rules. */
#define WHERE_ROW(NAME, ES)                                                                  \
    static void NAME(const uint8_t *c, ptrdiff_t sc, const uint8_t *x, ptrdiff_t sx,        \
                     const uint8_t *y, ptrdiff_t sy, uint8_t *o, ptrdiff_t n) {              \
        ptrdiff_t i;                                                                         \
        for (i = 0; i < n; i++)                                                              \
            memcpy(o + i * (ES), c[i * sc] ? x + i * sx * (ES) : y + i * sy * (ES), (ES));  \
    }

WHERE_ROW(where_1, 1)
WHERE_ROW(where_4, 4)
WHERE_ROW(where_8, 8)

void mlcc_where(const mlcc_where_params *p, const uint8_t *cond, const void *x, const void *y,
                void *out) {
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner], es = (ptrdiff_t)p->elem_size;
    const uint8_t *xb = (const uint8_t *)x, *yb = (const uint8_t *)y;
    uint8_t *ob = (uint8_t *)out;
    const ptrdiff_t sc = (ptrdiff_t)p->c_strides[inner];
    const ptrdiff_t sx = (ptrdiff_t)p->x_strides[inner], sy = (ptrdiff_t)p->y_strides[inner];
    mlcc_odometer o;
    ptrdiff_t i;
    if (!mlcc_odometer_init(&o, p->rank, p->shape, p->c_strides, p->x_strides, p->y_strides))
        return;
    do {
        const uint8_t *c = cond + o.off[0];
        const ptrdiff_t xo = o.off[1], yo = o.off[2];
        switch (es) {
        case 1: where_1(c, sc, xb + xo, sx, yb + yo, sy, ob, n); break;
        case 4: where_4(c, sc, xb + xo * 4, sx, yb + yo * 4, sy, ob, n); break;
        case 8: where_8(c, sc, xb + xo * 8, sx, yb + yo * 8, sy, ob, n); break;
        default:
            for (i = 0; i < n; i++)
                memcpy(ob + i * es, c[i * sc] ? xb + (xo + i * sx) * es
                                              : yb + (yo + i * sy) * es, (size_t)es);
            break;
        }
        ob += n * es;
    } while (mlcc_odometer_next(&o));
}

void mlcc_f32_classify(const mlcc_classify_params *p, const float *x, uint8_t *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n;
    ptrdiff_t i;
    if (!p->is_inf) {
        for (i = 0; i < n; i++) y[i] = (uint8_t)(x[i] != x[i]);
        return;
    }
    for (i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = (uint8_t)((p->detect_positive && v > FLT_MAX) ||
                         (p->detect_negative && v < -FLT_MAX));
    }
}
