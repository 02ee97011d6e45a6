#include "cast.h"

#include <string.h>

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

/* A small float format: exponent and mantissa bits, bias, and how it spells inf and NaN. */
typedef struct {
    int mbits, bias, emax_field;  /* emax_field: the largest exponent field of a finite value */
    int has_inf, fnuz;            /* fnuz: no negative zero, the NaN is 0x80 */
    unsigned max_mant;            /* mantissa of the largest finite value */
    unsigned nan_code;            /* positive NaN (the sign bit is added for non-FNUZ) */
    int sign_shift;
} minifloat;

static const minifloat F_BF16 = {7, 127, 254, 1, 0, 0x7F, 0x7FC0, 15};
static const minifloat F_E4M3FN = {3, 7, 15, 0, 0, 6, 0x7F, 7};
static const minifloat F_E4M3FNUZ = {3, 8, 15, 0, 1, 7, 0x80, 7};
static const minifloat F_E5M2 = {2, 15, 30, 1, 0, 3, 0x7E, 7};
static const minifloat F_E5M2FNUZ = {2, 16, 31, 0, 1, 3, 0x80, 7};
static const minifloat F_E2M1 = {1, 1, 3, 0, 0, 1, 0, 3};

static const minifloat *minifloat_of(int dtype) {
    switch (dtype) {
    case MLCC_BFLOAT16: return &F_BF16;
    case MLCC_FLOAT8E4M3FN: return &F_E4M3FN;
    case MLCC_FLOAT8E4M3FNUZ: return &F_E4M3FNUZ;
    case MLCC_FLOAT8E5M2: return &F_E5M2;
    case MLCC_FLOAT8E5M2FNUZ: return &F_E5M2FNUZ;
    case MLCC_FLOAT4E2M1: return &F_E2M1;
    default: return NULL;
    }
}

static double minifloat_max(const minifloat *f) {
    return ldexp(1.0 + ldexp((double)f->max_mant, -f->mbits), f->emax_field - f->bias);
}

static double minifloat_decode(const minifloat *f, unsigned code) {
    const unsigned sign = (code >> f->sign_shift) & 1u;
    const unsigned mag = code & ((1u << f->sign_shift) - 1u);
    const int e = (int)(mag >> f->mbits);
    const unsigned m = mag & ((1u << f->mbits) - 1u);
    double v;
    /* NaNs keep their sign bit (the FNUZ NaN 0x80 has it set), as ml_dtypes decodes them */
    const double nan = sign ? -(double)NAN : (double)NAN;
    if (f->fnuz && code == 0x80) return nan;
    if (f->has_inf && e == f->emax_field + 1)                 /* bf16, e5m2: IEEE specials */
        return m ? nan : (sign ? -(double)INFINITY : (double)INFINITY);
    if (!f->has_inf && !f->fnuz && f->nan_code && mag == f->nan_code)
        return nan;                                           /* e4m3fn: S.1111.111 */
    if (e == 0) v = ldexp((double)m, 1 - f->bias - f->mbits);
    else v = ldexp((double)((1u << f->mbits) | m), e - f->bias - f->mbits);
    return sign ? -v : v;
}

/* Round to nearest even from the exact double v. Overflow: `saturate` clamps to the largest
 * finite value, else infinity where the format has one, else NaN (float4: always clamps). */
static unsigned minifloat_encode(const minifloat *f, double v, int saturate) {
    const unsigned sbit = 1u << f->sign_shift;
    const double vmax = minifloat_max(f);
    const unsigned max_code = ((unsigned)f->emax_field << f->mbits) | f->max_mant;
    unsigned sign = 0, code;
    double a, q, r;
    int e;
    if (f == &F_E2M1) saturate = 1;
    if (v != v) {
        if (f->fnuz) return 0x80;
        if (f == &F_E2M1) return signbit(v) ? 0u : 0x8u;   /* ml_dtypes' code for NaN */
        return f->nan_code | (signbit(v) ? sbit : 0u);
    }
    if (signbit(v)) { sign = sbit; v = -v; }
    a = v;
    if (a > vmax) {
        /* may still round down to the largest finite value */
        if (a != (double)INFINITY) {
            frexp(vmax, &e);
            q = ldexp(1.0, e - 1 - f->mbits);
            if (nearbyint(a / q) * q <= vmax) return sign | max_code;
        }
        if (saturate) return sign | max_code;
        if (f->has_inf) return sign | ((unsigned)(f->emax_field + 1) << f->mbits);
        return f->fnuz ? 0x80 : (f->nan_code | sign);
    }
    if (a < ldexp(1.0, 1 - f->bias)) {                       /* subnormal range */
        r = nearbyint(ldexp(a, f->bias - 1 + f->mbits));     /* units of the smallest step */
        code = (unsigned)r;                                  /* r == 2^mbits: smallest normal */
    } else {
        frexp(a, &e);                                        /* a in [2^(e-1), 2^e) */
        q = ldexp(1.0, e - 1 - f->mbits);
        r = nearbyint(a / q);                                /* in [2^mbits, 2^(mbits+1)] */
        if (r >= (double)(2u << f->mbits)) { r /= 2.0; e++; }
        code = ((unsigned)(e - 1 + f->bias) << f->mbits) | ((unsigned)r & ((1u << f->mbits) - 1u));
        if (code > max_code) {     /* rounded past the largest finite value */
            if (saturate) return sign | max_code;
            if (f->has_inf) return sign | ((unsigned)(f->emax_field + 1) << f->mbits);
            return f->fnuz ? 0x80 : (f->nan_code | sign);
        }
    }
    if (code == 0 && f->fnuz) return 0;                      /* no negative zero */
    return sign | code;
}

/* float8 e8m0 from the float32 bits of the value, as onnx.numpy_helper.to_float8e8m0. */
static uint8_t e8m0_encode(float v, int saturate, int round_mode) {
    uint32_t bits;
    unsigned exponent;
    memcpy(&bits, &v, sizeof bits);
    exponent = (bits >> 23) & 0xFF;
    if (exponent == 0xFF) return 0xFF;
    if (round_mode == MLCC_ROUND_NEAREST) {
        const int g = (bits & 0x400000u) != 0, r = (bits & 0x200000u) != 0;
        const int s = (bits & 0x1FFFFFu) != 0, lsb = exponent > 0;
        if (g && (r || s || lsb) && !(saturate && exponent == 0xFE)) exponent++;
    } else if (round_mode == MLCC_ROUND_UP) {
        if ((bits & 0x7FFFFFu) && !(saturate && exponent == 0xFE)) exponent++;
    }
    return (uint8_t)exponent;
}

static double e8m0_decode(unsigned code) {
    return code == 0xFF ? (double)NAN : ldexp(1.0, (int)code - 127);
}

static unsigned load_packed(const void *x, ptrdiff_t i, int bits) {
    const uint8_t byte = ((const uint8_t *)x)[(i * bits) / 8];
    return (unsigned)(byte >> ((i * bits) % 8)) & ((1u << bits) - 1u);
}

static void store_packed(void *y, ptrdiff_t i, int bits, unsigned code) {
    uint8_t *byte = (uint8_t *)y + (i * bits) / 8;
    const int shift = (int)((i * bits) % 8);
    code &= (1u << bits) - 1u;
    if (shift == 0) *byte = (uint8_t)code;             /* the first element of each byte */
    else *byte = (uint8_t)(*byte | (code << shift));
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
    case MLCC_BFLOAT16:
        s.is_float = 1; s.f = minifloat_decode(&F_BF16, ((const uint16_t *)x)[i]); break;
    case MLCC_FLOAT8E4M3FN: case MLCC_FLOAT8E4M3FNUZ: case MLCC_FLOAT8E5M2:
    case MLCC_FLOAT8E5M2FNUZ:
        s.is_float = 1; s.f = minifloat_decode(minifloat_of(dtype), ((const uint8_t *)x)[i]);
        break;
    case MLCC_FLOAT8E8M0: s.is_float = 1; s.f = e8m0_decode(((const uint8_t *)x)[i]); break;
    case MLCC_FLOAT4E2M1: s.is_float = 1; s.f = minifloat_decode(&F_E2M1, load_packed(x, i, 4));
        break;
    case MLCC_UINT4: s.u = load_packed(x, i, 4); break;
    case MLCC_UINT2: s.u = load_packed(x, i, 2); break;
    case MLCC_INT4: s.is_signed = 1; s.u = (uint64_t)wrap_signed(load_packed(x, i, 4), 4); break;
    case MLCC_INT2: s.is_signed = 1; s.u = (uint64_t)wrap_signed(load_packed(x, i, 2), 2); break;
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

static void store(const mlcc_cast_params *p, void *y, ptrdiff_t i, scalar s) {
    const int dtype = p->to;
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
    case MLCC_BFLOAT16:
        /* IEEE conversion: saturate only concerns float8 */
        ((uint16_t *)y)[i] = (uint16_t)minifloat_encode(&F_BF16, as_double(s), 0);
        break;
    case MLCC_FLOAT8E4M3FN: case MLCC_FLOAT8E4M3FNUZ: case MLCC_FLOAT8E5M2:
    case MLCC_FLOAT8E5M2FNUZ:
        ((uint8_t *)y)[i] = (uint8_t)minifloat_encode(minifloat_of(dtype), as_double(s),
                                                      p->saturate);
        break;
    case MLCC_FLOAT8E8M0:
        ((uint8_t *)y)[i] = e8m0_encode((float)as_double(s), p->saturate, p->round_mode);
        break;
    case MLCC_FLOAT4E2M1:
        store_packed(y, i, 4, minifloat_encode(&F_E2M1, as_double(s), 1));
        break;
    case MLCC_INT4: case MLCC_UINT4: store_packed(y, i, 4, (unsigned)as_bits(s, 32)); break;
    case MLCC_INT2: case MLCC_UINT2: store_packed(y, i, 2, (unsigned)as_bits(s, 32)); break;
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
    /* An integer accumulator to float (ConvInteger and MatMulInteger outputs, before their
     * scale): one rounding, as through double (int32 and narrower are exact in a double). */
    if (p->from == MLCC_INT32 && p->to == MLCC_FLOAT32) {
        for (i = 0; i < n; i++) ((float *)y)[i] = (float)((const int32_t *)x)[i];
        return;
    }
    if (p->from == MLCC_UINT8 && p->to == MLCC_FLOAT32) {
        for (i = 0; i < n; i++) ((float *)y)[i] = (float)((const uint8_t *)x)[i];
        return;
    }
    if (p->from == MLCC_INT8 && p->to == MLCC_FLOAT32) {
        for (i = 0; i < n; i++) ((float *)y)[i] = (float)((const int8_t *)x)[i];
        return;
    }
    for (i = 0; i < n; i++) store(p, y, i, load(p->from, x, i));
}
