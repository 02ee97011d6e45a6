#include "cast.h"

/* Two's complement narrowing without implementation-defined conversions. */
static inline int64_t wrap_signed(uint64_t u, int bits) {
    const uint64_t sign = (uint64_t)1 << (bits - 1);
    const uint64_t mask = bits == 64 ? ~(uint64_t)0 : (sign << 1) - 1;
    u &= mask;
    return (u & sign) ? -(int64_t)(mask - u) - 1 : (int64_t)u;
}

/* Truncation toward zero; out of range and NaN give the x86 "integer indefinite" value. */
static inline int64_t f_to_i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN;
}
static inline int64_t f_to_i32(double v) {
    return (v > -2147483649.0 && v < 2147483648.0) ? (int64_t)v : (int64_t)INT32_MIN;
}
static inline uint64_t f_to_u64(double v) {
    return (v > -1.0 && v < 18446744073709551616.0) ? (uint64_t)v : (uint64_t)f_to_i64(v);
}

static double half_to_double(uint16_t h) {
    const int exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    double v;
    if (exp == 0) v = ldexp((double)mant, -24);
    else if (exp == 31) v = mant ? (double)NAN : (double)INFINITY;
    else v = ldexp((double)(mant | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* Round-to-nearest-even from the exact double (float32 and float64 sources round once). */
static uint16_t double_to_half(double v) {
    uint16_t sign = 0;
    double a, scaled, r;
    int e;
    if (v != v) return 0x7E00;
    if (signbit(v)) { sign = 0x8000; v = -v; }
    if (v >= 65520.0) return (uint16_t)(sign | 0x7C00);       /* rounds past the largest */
    if (v < ldexp(1.0, -14)) {                                  /* subnormal (or zero) */
        scaled = v * 16777216.0;                                /* units of 2^-24 */
        r = nearbyint(scaled);                                  /* default mode: to even */
        return (uint16_t)(sign | (uint16_t)r);
    }
    a = frexp(v, &e);                                           /* v = a * 2^e, a in [0.5,1) */
    r = nearbyint(a * 2048.0);                                  /* 11 significant bits */
    if (r >= 2048.0) { r /= 2.0; e++; }
    if (e + 14 >= 31) return (uint16_t)(sign | 0x7C00);
    return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | ((uint16_t)r & 0x3FF));
}

/* Every source element is read as a double (floats) or as 64 integer bits (integers). */
typedef struct { int is_float; double f; uint64_t u; int is_signed; } scalar;

static scalar load(int dtype, const void *x, ptrdiff_t i) {
    scalar s = {0, 0.0, 0, 0};
    switch (dtype) {
    case MLCC_FLOAT32: s.is_float = 1; s.f = ((const float *)x)[i]; break;
    case MLCC_FLOAT64: s.is_float = 1; s.f = ((const double *)x)[i]; break;
    case MLCC_FLOAT16: s.is_float = 1; s.f = half_to_double(((const uint16_t *)x)[i]); break;
    case MLCC_INT8: s.is_signed = 1; s.u = (uint64_t)(int64_t)((const int8_t *)x)[i]; break;
    case MLCC_INT16: s.is_signed = 1; s.u = (uint64_t)(int64_t)((const int16_t *)x)[i]; break;
    case MLCC_INT32: s.is_signed = 1; s.u = (uint64_t)(int64_t)((const int32_t *)x)[i]; break;
    case MLCC_INT64: s.is_signed = 1; s.u = (uint64_t)((const int64_t *)x)[i]; break;
    case MLCC_UINT8: case MLCC_BOOL: s.u = ((const uint8_t *)x)[i]; break;
    case MLCC_UINT16: s.u = ((const uint16_t *)x)[i]; break;
    case MLCC_UINT32: s.u = ((const uint32_t *)x)[i]; break;
    case MLCC_UINT64: s.u = ((const uint64_t *)x)[i]; break;
    default: break;
    }
    return s;
}

static double as_double(scalar s) {
    if (s.is_float) return s.f;
    return s.is_signed ? (double)(int64_t)s.u : (double)s.u;
}

/* The integer bits for an integer target of `bits` bits (floats truncated first). */
static uint64_t as_bits(scalar s, int bits) {
    if (!s.is_float) return s.u;
    if (bits == 64) return (uint64_t)f_to_i64(s.f);
    return (uint64_t)f_to_i32(s.f);
}

static void store(int dtype, void *y, ptrdiff_t i, scalar s) {
    switch (dtype) {
    case MLCC_FLOAT32: ((float *)y)[i] = (float)as_double(s); break;
    case MLCC_FLOAT64: ((double *)y)[i] = as_double(s); break;
    case MLCC_FLOAT16:
        /* float32 sources round once; integer sources through double are exact below 2^53 */
        ((uint16_t *)y)[i] = double_to_half(as_double(s));
        break;
    case MLCC_BOOL:
        ((uint8_t *)y)[i] = (uint8_t)(s.is_float ? s.f != 0.0 : s.u != 0);
        break;
    case MLCC_INT8: ((int8_t *)y)[i] = (int8_t)wrap_signed(as_bits(s, 32), 8); break;
    case MLCC_INT16: ((int16_t *)y)[i] = (int16_t)wrap_signed(as_bits(s, 32), 16); break;
    case MLCC_INT32: ((int32_t *)y)[i] = (int32_t)wrap_signed(as_bits(s, 32), 32); break;
    case MLCC_INT64: ((int64_t *)y)[i] = wrap_signed(as_bits(s, 64), 64); break;
    case MLCC_UINT8: ((uint8_t *)y)[i] = (uint8_t)as_bits(s, 32); break;
    case MLCC_UINT16: ((uint16_t *)y)[i] = (uint16_t)as_bits(s, 32); break;
    case MLCC_UINT32: ((uint32_t *)y)[i] = (uint32_t)as_bits(s, 64); break;
    case MLCC_UINT64:
        ((uint64_t *)y)[i] = s.is_float ? f_to_u64(s.f) : s.u;
        break;
    default: break;
    }
}

void mlcc_cast(const mlcc_cast_params *p, const void *x, void *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n;
    ptrdiff_t i;
    /* The common float32 <-> int64/int32 conversions get plain loops. */
    if (p->from == MLCC_INT64 && p->to == MLCC_FLOAT32) {
        for (i = 0; i < n; i++) ((float *)y)[i] = (float)((const int64_t *)x)[i];
        return;
    }
    if (p->from == MLCC_FLOAT32 && p->to == MLCC_INT64) {
        for (i = 0; i < n; i++) ((int64_t *)y)[i] = f_to_i64(((const float *)x)[i]);
        return;
    }
    for (i = 0; i < n; i++) store(p->to, y, i, load(p->from, x, i));
}
