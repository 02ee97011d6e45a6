#include "elementwise.h"

void mlcc_f32_unary(const mlcc_unary_params *p, const float *x, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n;
    const float alpha = p->alpha, beta = p->beta;
    ptrdiff_t i;
    switch (p->op) {
    case MLCC_UNARY_ACT:
        if (y != x) memmove(y, x, (size_t)n * sizeof(float));
        mlcc_act_apply(&p->act, y, n);
        return;
    case MLCC_UNARY_EXP: for (i = 0; i < n; i++) y[i] = expf(x[i]); return;
    case MLCC_UNARY_LOG: for (i = 0; i < n; i++) y[i] = logf(x[i]); return;
    case MLCC_UNARY_SQRT: for (i = 0; i < n; i++) y[i] = sqrtf(x[i]); return;
    case MLCC_UNARY_NEG: for (i = 0; i < n; i++) y[i] = -x[i]; return;
    case MLCC_UNARY_ABS: for (i = 0; i < n; i++) y[i] = fabsf(x[i]); return;
    case MLCC_UNARY_RECIPROCAL: for (i = 0; i < n; i++) y[i] = 1.0f / x[i]; return;
    case MLCC_UNARY_ERF: for (i = 0; i < n; i++) y[i] = erff(x[i]); return;
    case MLCC_UNARY_FLOOR: for (i = 0; i < n; i++) y[i] = floorf(x[i]); return;
    case MLCC_UNARY_CEIL: for (i = 0; i < n; i++) y[i] = ceilf(x[i]); return;
    /* the default rounding mode rounds ties to even and keeps the sign of zero (-0.4 -> -0) */
    case MLCC_UNARY_ROUND: for (i = 0; i < n; i++) y[i] = nearbyintf(x[i]); return;
    case MLCC_UNARY_SIN: for (i = 0; i < n; i++) y[i] = sinf(x[i]); return;
    case MLCC_UNARY_COS: for (i = 0; i < n; i++) y[i] = cosf(x[i]); return;
    case MLCC_UNARY_ELU:
        for (i = 0; i < n; i++) y[i] = x[i] >= 0.0f ? x[i] : alpha * (expf(x[i]) - 1.0f);
        return;
    case MLCC_UNARY_SELU:
        for (i = 0; i < n; i++)
            y[i] = beta * (x[i] > 0.0f ? x[i] : alpha * (expf(x[i]) - 1.0f));
        return;
    case MLCC_UNARY_CELU:
        /* max(0, x) + min(0, alpha (e^(x/alpha) - 1)): one term is 0 on either side of 0;
           NaN takes the second branch and stays NaN */
        for (i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : alpha * (expf(x[i] / alpha) - 1.0f);
        return;
    case MLCC_UNARY_THRESHOLDED_RELU:
        for (i = 0; i < n; i++) y[i] = x[i] > alpha ? x[i] : 0.0f;
        return;
    case MLCC_UNARY_SOFTPLUS:
        /* log(1 + e^x) without overflow for large x */
        for (i = 0; i < n; i++) y[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
        return;
    case MLCC_UNARY_SOFTSIGN: for (i = 0; i < n; i++) y[i] = x[i] / (1.0f + fabsf(x[i])); return;
    case MLCC_UNARY_SIGN:
        for (i = 0; i < n; i++)   /* NaN stays NaN */
            y[i] = x[i] != x[i] ? x[i] : (float)((x[i] > 0.0f) - (x[i] < 0.0f));
        return;
    case MLCC_UNARY_GELU:
        for (i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
        return;
    case MLCC_UNARY_GELU_TANH:
        for (i = 0; i < n; i++) {
            const float v = x[i];
            y[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        return;
    case MLCC_UNARY_MISH:
        for (i = 0; i < n; i++) {
            const float sp = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
            y[i] = x[i] * tanhf(sp);
        }
        return;
    default:
        return;
    }
}

/* Python's float %: fmod, moved into the divisor's sign. */
static inline float py_mod(float x, float z) {
    const float r = fmodf(x, z);
    return (r != 0.0f && ((r < 0.0f) != (z < 0.0f))) ? r + z : r;
}

#define BINARY_LOOPS(EXPR)                                                          \
    do {                                                                            \
        if (sa == 1 && sb == 1) {                                                   \
            for (i = 0; i < n; i++) { const float x = a[i], z = b[i]; y[i] = EXPR; } \
        } else if (sa == 1 && sb == 0) {                                            \
            const float z = b[0];                                                   \
            for (i = 0; i < n; i++) { const float x = a[i]; y[i] = EXPR; }          \
        } else if (sa == 0 && sb == 1) {                                            \
            const float x = a[0];                                                   \
            for (i = 0; i < n; i++) { const float z = b[i]; y[i] = EXPR; }          \
        } else {                                                                    \
            for (i = 0; i < n; i++) {                                               \
                const float x = a[i * sa], z = b[i * sb];                           \
                y[i] = EXPR;                                                        \
            }                                                                       \
        }                                                                           \
    } while (0)

/* One innermost row: n outputs, inputs at strides sa and sb. */
static void binary_row(int op, const float *a, ptrdiff_t sa, const float *b, ptrdiff_t sb,
                       float *y, ptrdiff_t n) {
    ptrdiff_t i;
    switch (op) {
    case MLCC_BINARY_ADD: BINARY_LOOPS(x + z); return;
    case MLCC_BINARY_SUB: BINARY_LOOPS(x - z); return;
    case MLCC_BINARY_MUL: BINARY_LOOPS(x * z); return;
    case MLCC_BINARY_DIV: BINARY_LOOPS(x / z); return;
    case MLCC_BINARY_POW: BINARY_LOOPS(powf(x, z)); return;
    case MLCC_BINARY_MAX: BINARY_LOOPS((x > z || x != x) ? x : z); return;
    case MLCC_BINARY_MIN: BINARY_LOOPS((x < z || x != x) ? x : z); return;
    case MLCC_BINARY_PRELU: BINARY_LOOPS(x >= 0.0f ? x : x * z); return;
    case MLCC_BINARY_FMOD: BINARY_LOOPS(fmodf(x, z)); return;
    case MLCC_BINARY_MOD: BINARY_LOOPS(py_mod(x, z)); return;
    default: return;
    }
}

void mlcc_f32_binary(const mlcc_binary_params *p, const float *a, const float *b, float *y) {
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner];
    mlcc_odometer o;
    if (!mlcc_odometer_init(&o, p->rank, p->shape, p->a_strides, p->b_strides, NULL)) return;
    do {
        binary_row(p->op, a + o.off[0], (ptrdiff_t)p->a_strides[inner], b + o.off[1],
                   (ptrdiff_t)p->b_strides[inner], y, n);
        y += n;
    } while (mlcc_odometer_next(&o));
}
