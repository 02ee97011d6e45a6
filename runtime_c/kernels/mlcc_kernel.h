/* What every kernel shares: fused activation epilogues and portable SIMD vector types.
 *
 * Kernels are plain C99. Where the compiler is GCC or Clang, hot loops use the compilers' vector
 * extensions, which compile to SSE/AVX/AVX-512, NEON or WASM SIMD128 from one source;
 * MLCC_VECTOR_BYTES (set from the target's vector_bits) picks the width. Elsewhere the same
 * kernels fall back to scalar loops; -DMLCC_NO_VECTORS (a target with `simd: none`) forces
 * those portable loops on GCC and Clang too, e.g. to compare their cost with the vector code. */
#ifndef MLCC_KERNEL_H
#define MLCC_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../src/mlcc_internal.h"
#include "mlcc_runtime.h"

/* Kernels of fewer multiply-adds (or, for memory-bound loops, fewer elements) than this run on
 * the caller even with a pool: waking a worker costs more than it saves (the digits CNN, 0.3 M
 * per layer, was 2x slower on 2 threads than on 1). */
#ifndef MLCC_MIN_PARALLEL_MACS
#define MLCC_MIN_PARALLEL_MACS (1L << 20)
#endif
/* Elementwise kernels and copies (memory-bound: a few operations per element) are split
 * between threads from this many elements up. */
#ifndef MLCC_MIN_PARALLEL_ELEMENTS
#define MLCC_MIN_PARALLEL_ELEMENTS (1L << 16)
#endif
/* Units of a parallel loop over `items` independent pieces on nt threads: 1 (the caller
 * alone) when nt is 1 or `work` is below `threshold`, else a few per thread (load balance
 * against a late worker), at most one per item. */
static inline int mlcc_parallel_units(ptrdiff_t nt, double work, double threshold,
                                      ptrdiff_t items) {
    if (nt <= 1 || work < threshold || items < 2) return 1;
    return (int)(items < 4 * nt ? items : 4 * nt);
}
/* A parallel loop over `items` independent pieces cut into contiguous ranges: range(arg, i0,
 * i1) for each unit's [i0, i1), on the caller alone when mlcc_parallel_units says so. For
 * kernels whose every output is computed whole by one range (the same bits on any count). */
typedef void (*mlcc_range_fn)(void *arg, ptrdiff_t i0, ptrdiff_t i1);
typedef struct mlcc_ranges {
    mlcc_range_fn range;
    void *arg;
    ptrdiff_t items;
    int units;
} mlcc_ranges;
static inline void mlcc_ranges_unit(void *job, int unit, int thread) {
    const mlcc_ranges *r = (const mlcc_ranges *)job;
    (void)thread;
    r->range(r->arg, r->items * unit / r->units, r->items * (unit + 1) / r->units);
}
static inline void mlcc_parallel_ranges(mlcc_threadpool *pool, mlcc_range_fn range, void *arg,
                                        ptrdiff_t items, double work, double threshold) {
    mlcc_ranges r;
    r.range = range;
    r.arg = arg;
    r.items = items;
    r.units = mlcc_parallel_units(mlcc_threadpool_size(pool), work, threshold, items);
    if (r.units <= 1)
        range(arg, 0, items);
    else
        mlcc_threadpool_for(pool, mlcc_ranges_unit, &r, r.units, r.units);
}
/* fn over units of `items` on at most `slices` threads, for kernels with a scratch slice per
 * thread (unit fn(job, u, thread) works in slice `thread`): *units, which the units read to
 * find their range, is set before any runs; the caller alone where mlcc_parallel_units says. */
static inline void mlcc_parallel_sliced(mlcc_threadpool *pool, ptrdiff_t slices, mlcc_unit_fn fn,
                                        void *job, ptrdiff_t *units, ptrdiff_t items,
                                        double work, double threshold) {
    ptrdiff_t nt = mlcc_threadpool_size(pool);
    if (nt > slices) nt = slices;
    *units = mlcc_parallel_units(nt, work, threshold, items);
    if (*units <= 1)
        fn(job, 0, 0);
    else
        mlcc_threadpool_for(pool, fn, job, (int)*units, (int)nt);
}
/* A kernel's loop: when `last` (nothing after it in the kernel reads what it writes, and job
 * points to nothing on the kernel's stack), one a loop group may run with its siblings'
 * (mlcc_threadpool_for_last, mlcc_internal.h); else at once. */
static inline void mlcc_parallel_loop(mlcc_threadpool *pool, int last, mlcc_unit_fn fn,
                                      void *job, size_t job_bytes, ptrdiff_t units,
                                      ptrdiff_t threads) {
    if (last)
        mlcc_threadpool_for_last(pool, fn, job, job_bytes, (int)units, (int)threads);
    else
        mlcc_threadpool_for(pool, fn, job, (int)units, (int)threads);
}
/* Integer (u8 x s8) products run 4 multiply-adds per float one's lane: 4x the threshold. */
#define MLCC_MIN_PARALLEL_INT8_MACS (4 * MLCC_MIN_PARALLEL_MACS)

/* Threads of a pool that share a depthwise convolution, float or integer: each takes a slice
 * of its scratch (mlcc/ops/conv_kernels.py DW_SLICES). */
#define MLCC_DW_SLICES 4

#if defined(__GNUC__) || defined(__clang__)
#define MLCC_RESTRICT __restrict__
#else
#define MLCC_RESTRICT
#endif

/* A hint to fetch the cache line at p (read, kept in the outer caches): weights that the next
 * tiles need, fetched from memory while the current ones compute. Changes no result; nothing
 * where the compiler has no such builtin. MLCC_PF_FLOATS: floats per line fetched. */
#if defined(__GNUC__) || defined(__clang__)
#define MLCC_PREFETCH(p) __builtin_prefetch((p), 0, 2)
#else
#define MLCC_PREFETCH(p) ((void)(p))
#endif
#define MLCC_PF_FLOATS 16

#if (defined(__GNUC__) || defined(__clang__)) && !defined(MLCC_NO_VECTORS)
#define MLCC_HAVE_VECTORS 1
#ifndef MLCC_VECTOR_BYTES
#define MLCC_VECTOR_BYTES 16
#endif
typedef float mlcc_vf __attribute__((vector_size(MLCC_VECTOR_BYTES)));
#define MLCC_VF_LANES ((ptrdiff_t)(MLCC_VECTOR_BYTES / sizeof(float)))

/* Unaligned loads and stores through memcpy: no aliasing or alignment assumptions, and
 * compilers turn them into single vector instructions. */
static inline mlcc_vf mlcc_vf_load(const float *p) {
    mlcc_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void mlcc_vf_store(float *p, mlcc_vf v) { memcpy(p, &v, sizeof v); }
/* x in every lane. x - 0 is x for every float (-0 included), so compilers emit a bare
 * broadcast; x + 0 would turn -0 into +0 and costs a scalar add before each broadcast (6 of
 * the 41 instructions of a k step in the arm GEMM's inner loop). */
static inline mlcc_vf mlcc_vf_splat(float x) { return x - (mlcc_vf){0}; }
#else
#define MLCC_HAVE_VECTORS 0
#endif

/* v clamped to [lo, hi] (NaN stays NaN). */
static inline float mlcc_clampf(float v, float lo, float hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* The activations fused into the epilogue of Conv, Gemm and MatMul, one per line:
 * X(KIND, its value in enum mlcc_act_kind, y as an expression of x and the parameters a = alpha
 * and b = beta). That expression is the definition (mlcc_act_scalar); the vector and in-place
 * forms below compute the same, some kinds through faster code of their own. mlcc/ops/
 * activations.py has one row per kind (tests/test_activations.py checks names and values). */
#define MLCC_ACT_KINDS(X)                                                                  \
    X(NONE, 0, x)                                                                          \
    X(RELU, 1, x > 0.0f ? x : 0.0f)                                                        \
    X(CLIP, 2, mlcc_clampf(x, a, b))                  /* a = min, b = max */               \
    X(LEAKY_RELU, 3, x >= 0.0f ? x : x * a)           /* a = slope */                      \
    X(SIGMOID, 4, 1.0f / (1.0f + expf(-x)))                                                \
    X(HARD_SIGMOID, 5, mlcc_clampf(a * x + b, 0.0f, 1.0f))                                 \
    /* x * relu6(x + 3) / 6, in the order exporters write it out */                        \
    X(HARD_SWISH, 6, x * mlcc_clampf(x + 3.0f, 0.0f, 6.0f) / 6.0f)                         \
    X(TANH, 7, tanhf(x))                                                                   \
    /* x * sigmoid(a * x): SiLU with a = 1, ONNX Swish */                                  \
    X(SILU, 8, x / (1.0f + expf(-a * x)))                                                  \
    /* x * (1 + erf(x / sqrt 2)) * 0.5, in the order exporters write */                    \
    X(GELU, 9, x * (1.0f + erff(x * 0.70710678118654752f)) * 0.5f)                         \
    /* the tanh approximation: x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 */        \
    X(GELU_TANH, 10, 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))))

enum mlcc_act_kind {
#define MLCC_ACT_ENUM(kind, value, expr) MLCC_ACT_##kind = value,
    MLCC_ACT_KINDS(MLCC_ACT_ENUM)
#undef MLCC_ACT_ENUM
};

typedef struct mlcc_act {
    int32_t kind;
    float alpha, beta;
} mlcc_act;

static inline float mlcc_act_scalar(const mlcc_act *act, float x) {
    const float a = act->alpha, b = act->beta;
    switch (act->kind) {
#define MLCC_ACT_CASE(kind, value, expr) \
    case MLCC_ACT_##kind: return (expr);
    MLCC_ACT_KINDS(MLCC_ACT_CASE)
#undef MLCC_ACT_CASE
    default: return x;
    }
}

#if MLCC_HAVE_VECTORS
typedef int32_t mlcc_vi __attribute__((vector_size(MLCC_VECTOR_BYTES)));    /* masks */
typedef uint32_t mlcc_vu __attribute__((vector_size(MLCC_VECTOR_BYTES)));   /* float bits */

/* Lane-wise select: where mask (from a vector comparison) is set, a; elsewhere b. */
static inline mlcc_vf mlcc_vf_select(mlcc_vi mask, mlcc_vf a, mlcc_vf b) {
    return (mlcc_vf)(((mlcc_vi)a & mask) | ((mlcc_vi)b & ~mask));
}

/* A stride-2 deinterleave of the 2 x MLCC_VF_LANES floats v0, v1: their even lanes and their
 * odd lanes (16-, 32- and 64-byte vectors: MLCC_VF_DEINTERLEAVE). */
#if MLCC_VECTOR_BYTES == 16 || MLCC_VECTOR_BYTES == 32 || MLCC_VECTOR_BYTES == 64
#define MLCC_VF_DEINTERLEAVE 1
static inline void mlcc_vf_deinterleave(mlcc_vf v0, mlcc_vf v1, mlcc_vf *even, mlcc_vf *odd) {
#if MLCC_VECTOR_BYTES == 64
    *even = __builtin_shufflevector(v0, v1, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                    28, 30);
    *odd = __builtin_shufflevector(v0, v1, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
                                   29, 31);
#elif MLCC_VECTOR_BYTES == 32
    *even = __builtin_shufflevector(v0, v1, 0, 2, 4, 6, 8, 10, 12, 14);
    *odd = __builtin_shufflevector(v0, v1, 1, 3, 5, 7, 9, 11, 13, 15);
#else
    *even = __builtin_shufflevector(v0, v1, 0, 2, 4, 6);
    *odd = __builtin_shufflevector(v0, v1, 1, 3, 5, 7);
#endif
}
#endif

/* e^x for every lane, within 2 ulp of expf on [-87.3, 88] (Cephes' expf: x = n ln2 + r with
 * |r| <= ln2 / 2, e^r by a polynomial, 2^n written into the exponent bits). Inputs are clamped
 * to that range, so lanes below it give ~1e-38 instead of 0 and lanes above it 1.65e38 instead
 * of infinity (what sigmoid needs); NaN lanes stay NaN (their comparisons are false). */
static inline mlcc_vf mlcc_vf_exp(mlcc_vf x) {
    const mlcc_vf hi = mlcc_vf_splat(88.0f), lo = mlcc_vf_splat(-87.3365447505531f);
    const mlcc_vf magic = mlcc_vf_splat(12582912.0f);   /* 1.5 * 2^23: rounds to an integer */
    mlcc_vf t, n, r, p;
    x = mlcc_vf_select(x > hi, hi, x);
    x = mlcc_vf_select(x < lo, lo, x);
    t = x * 1.44269504088896341f + magic;
    n = t - magic;                                      /* round(x / ln2), in [-126, 127] */
    r = x - n * 0.693359375f;                           /* ln2 in two parts: r exact */
    r = r - n * -2.12194440e-4f;
    p = mlcc_vf_splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    /* t's low mantissa bits hold n: 2^n has the float bits (n + 127) << 23 */
    return p * (mlcc_vf)(((mlcc_vu)t - (mlcc_vu)magic + 127u) << 23);
}

/* erf(x) per lane, within 2e-7 absolute of erff: Eigen's rational approximation (odd degree-13
 * numerator over an even degree-8 denominator) on x clamped to [-4, 4], where erf is 1 to float
 * precision. NaN lanes stay NaN. */
static inline mlcc_vf mlcc_vf_erf(mlcc_vf x) {
    const mlcc_vf hi = mlcc_vf_splat(4.0f), lo = mlcc_vf_splat(-4.0f);
    mlcc_vf x2, p, q;
    x = mlcc_vf_select(x > hi, hi, x);
    x = mlcc_vf_select(x < lo, lo, x);
    x2 = x * x;
    p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return x * p / q;
}

/* GELU (erf form) per lane, as MLCC_ACT_GELU. */
static inline mlcc_vf mlcc_vf_gelu(mlcc_vf x) {
    return x * (1.0f + mlcc_vf_erf(x * 0.70710678118654752f)) * 0.5f;
}

/* 1 / (1 + e^-(alpha x)) per lane; NaN stays NaN. */
static inline mlcc_vf mlcc_vf_sigmoid(mlcc_vf x, float alpha) {
    return 1.0f / (1.0f + mlcc_vf_exp(x * -alpha));
}

/* GELU (tanh form) per lane, as MLCC_ACT_GELU_TANH: (1 + tanh(u)) / 2 is sigmoid(2 u). */
static inline mlcc_vf mlcc_vf_gelu_tanh(mlcc_vf x) {
    return x * mlcc_vf_sigmoid(x + x * x * x * 0.044715f, 2.0f * 0.79788456080286536f);
}
#endif

#if MLCC_HAVE_VECTORS
/* The activation of one vector, lane for lane what mlcc_act_apply computes: epilogues apply it in
 * registers before the store. */
static inline mlcc_vf mlcc_vf_act(const mlcc_act *act, mlcc_vf x) {
    const mlcc_vf zero = mlcc_vf_splat(0.0f);
    switch (act->kind) {
    case MLCC_ACT_NONE: return x;
    case MLCC_ACT_RELU: return mlcc_vf_select(x > zero, x, zero);
    case MLCC_ACT_CLIP: {
        const mlcc_vf lo = mlcc_vf_splat(act->alpha), hi = mlcc_vf_splat(act->beta);
        return mlcc_vf_select(x < lo, lo, mlcc_vf_select(x > hi, hi, x));
    }
    case MLCC_ACT_LEAKY_RELU: return mlcc_vf_select(x >= zero, x, x * act->alpha);
    case MLCC_ACT_HARD_SIGMOID: {
        const mlcc_vf v = x * act->alpha + act->beta, one = mlcc_vf_splat(1.0f);
        return mlcc_vf_select(v < zero, zero, mlcc_vf_select(v > one, one, v));
    }
    case MLCC_ACT_HARD_SWISH: {
        const mlcc_vf v = x + 3.0f, six = mlcc_vf_splat(6.0f);
        return x * mlcc_vf_select(v < zero, zero, mlcc_vf_select(v > six, six, v)) / 6.0f;
    }
    case MLCC_ACT_SIGMOID: return mlcc_vf_sigmoid(x, 1.0f);
    case MLCC_ACT_SILU:
    case MLCC_ACT_GELU_TANH: {
        /* x sigmoid(a u): one inlined vector exp for both (each epilogue instantiates this
         * switch; a second exp grew the digits wasm module by 21 KB). The operations are
         * mlcc_vf_gelu_tanh's, in its order. */
        const int silu = act->kind == MLCC_ACT_SILU;
        const mlcc_vf u = silu ? x : x + x * x * x * 0.044715f;
        return x * mlcc_vf_sigmoid(u, silu ? act->alpha : 2.0f * 0.79788456080286536f);
    }
    default: {
        float tmp[MLCC_VECTOR_BYTES / sizeof(float)];
        ptrdiff_t i;
        mlcc_vf_store(tmp, x);
        for (i = 0; i < MLCC_VF_LANES; i++) tmp[i] = mlcc_act_scalar(act, tmp[i]);
        return mlcc_vf_load(tmp);
    }
    }
}
#endif

#if MLCC_HAVE_VECTORS && defined(__wasm_simd128__)
/* wasm: the activation of n vectors (a constant where inlined: they stay in registers), the
 * kind switched once, not per vector as mlcc_vf_act in a loop (a br_table per vector in V8,
 * and clang keeps such a loop's vectors on the stack). ReLU and Clip as f32x4.pmax/pmin, one
 * maxps/minps each in V8, with mlcc_vf_act's bits: pmax(0, x) = 0 < x ? x : 0 is ReLU's
 * select (x > 0 ? x : 0: -0 and NaN give +0), pmax(pmin(x, hi), lo) is Clip's
 * (x < lo ? lo : (x > hi ? hi : x)). */
static inline __attribute__((always_inline)) void mlcc_wasm_act_vecs(const mlcc_act *act,
                                                                     mlcc_vf *x, int n) {
    int i;
    switch (act->kind) {
    case MLCC_ACT_NONE: return;
    case MLCC_ACT_RELU: {
        const mlcc_vf zero = mlcc_vf_splat(0.0f);
        for (i = 0; i < n; i++) x[i] = __builtin_wasm_pmax_f32x4(zero, x[i]);
        return;
    }
    case MLCC_ACT_CLIP: {
        const mlcc_vf lo = mlcc_vf_splat(act->alpha), hi = mlcc_vf_splat(act->beta);
        for (i = 0; i < n; i++) x[i] = __builtin_wasm_pmax_f32x4(__builtin_wasm_pmin_f32x4(x[i], hi), lo);
        return;
    }
    default:
        for (i = 0; i < n; i++) x[i] = mlcc_vf_act(act, x[i]);
    }
}
#endif

/* Applies the activation to n contiguous values in place. The switch sits outside the loops
 * so that each loop vectorizes. */
static inline void mlcc_act_apply(const mlcc_act *act, float *y, ptrdiff_t n) {
    ptrdiff_t i;
    switch (act->kind) {
    case MLCC_ACT_NONE: return;
    case MLCC_ACT_RELU:
        for (i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        return;
    case MLCC_ACT_CLIP: {
        const float lo = act->alpha, hi = act->beta;
        for (i = 0; i < n; i++) y[i] = y[i] < lo ? lo : (y[i] > hi ? hi : y[i]);
        return;
    }
    case MLCC_ACT_LEAKY_RELU: {
        const float a = act->alpha;
        for (i = 0; i < n; i++) y[i] = y[i] >= 0.0f ? y[i] : y[i] * a;
        return;
    }
    case MLCC_ACT_HARD_SIGMOID: {
        const float a = act->alpha, b = act->beta;
        for (i = 0; i < n; i++) {
            const float v = a * y[i] + b;
            y[i] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
        }
        return;
    }
    case MLCC_ACT_HARD_SWISH:   /* as in mlcc_act_scalar */
        for (i = 0; i < n; i++) {
            const float v = y[i] + 3.0f;
            y[i] = y[i] * (v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v)) / 6.0f;
        }
        return;
#if MLCC_HAVE_VECTORS
    case MLCC_ACT_SIGMOID:
    case MLCC_ACT_SILU: {
        const int silu = act->kind == MLCC_ACT_SILU;
        const float a = silu ? act->alpha : 1.0f;
        for (i = 0; i + MLCC_VF_LANES <= n; i += MLCC_VF_LANES) {
            const mlcc_vf v = mlcc_vf_load(y + i), s = mlcc_vf_sigmoid(v, a);
            mlcc_vf_store(y + i, silu ? v * s : s);
        }
        if (i < n) {   /* the tail through a zero-padded vector: same results as the body */
            float tmp[MLCC_VECTOR_BYTES / sizeof(float)] = {0};
            mlcc_vf v, s;
            memcpy(tmp, y + i, (size_t)(n - i) * sizeof(float));
            v = mlcc_vf_load(tmp);
            s = mlcc_vf_sigmoid(v, a);
            mlcc_vf_store(tmp, silu ? v * s : s);
            memcpy(y + i, tmp, (size_t)(n - i) * sizeof(float));
        }
        return;
    }
    case MLCC_ACT_GELU:
    case MLCC_ACT_GELU_TANH: {
        const int tanh_form = act->kind == MLCC_ACT_GELU_TANH;
        for (i = 0; i + MLCC_VF_LANES <= n; i += MLCC_VF_LANES) {
            const mlcc_vf v = mlcc_vf_load(y + i);
            mlcc_vf_store(y + i, tanh_form ? mlcc_vf_gelu_tanh(v) : mlcc_vf_gelu(v));
        }
        if (i < n) {   /* zero-padded tail vector, as above */
            float tmp[MLCC_VECTOR_BYTES / sizeof(float)] = {0};
            mlcc_vf v;
            memcpy(tmp, y + i, (size_t)(n - i) * sizeof(float));
            v = mlcc_vf_load(tmp);
            mlcc_vf_store(tmp, tanh_form ? mlcc_vf_gelu_tanh(v) : mlcc_vf_gelu(v));
            memcpy(y + i, tmp, (size_t)(n - i) * sizeof(float));
        }
        return;
    }
#endif
    default:
        for (i = 0; i < n; i++) y[i] = mlcc_act_scalar(act, y[i]);
        return;
    }
}

/* The loop nest around the innermost row of a strided or broadcasting kernel (binary ops,
 * comparisons, Where, strided copies): an odometer over the outer axes 0..rank-2 that keeps
 * the element offset of up to three operands read (or written) through their own strides.
 * Usage:
 *     mlcc_odometer o;
 *     if (!mlcc_odometer_init(&o, rank, shape, a_strides, b_strides, NULL)) return;
 *     do { row(a + o.off[0], b + o.off[1], ...); } while (mlcc_odometer_next(&o));
 * A caller-stack object: no allocation, nothing shared. */
typedef struct mlcc_odometer {
    int rank;
    const int64_t *shape;
    const int64_t *strides[3];          /* an absent operand reads mlcc_zero_strides */
    int64_t index[MLCC_MAX_RANK];
    ptrdiff_t off[3];                   /* element offsets of the current row's start */
} mlcc_odometer;

static const int64_t mlcc_zero_strides[MLCC_MAX_RANK] = {0};

/* 0 when a dimension is 0 (nothing to visit), else 1 with every offset at 0. rank >= 1;
 * s1 and s2 may be NULL (fewer operands). */
static inline int mlcc_odometer_init(mlcc_odometer *o, int rank, const int64_t *shape,
                                     const int64_t *s0, const int64_t *s1, const int64_t *s2) {
    int axis;
    o->rank = rank;
    o->shape = shape;
    o->strides[0] = s0;
    o->strides[1] = s1 ? s1 : mlcc_zero_strides;
    o->strides[2] = s2 ? s2 : mlcc_zero_strides;
    o->off[0] = o->off[1] = o->off[2] = 0;
    for (axis = 0; axis < rank; axis++) {
        o->index[axis] = 0;
        if (shape[axis] == 0) return 0;
    }
    return 1;
}

/* Moves to row `row` (rows counted in order over axes 0..rank-2), from a fresh init: where a
 * thread's share of the rows starts. */
static inline void mlcc_odometer_seek(mlcc_odometer *o, int64_t row) {
    int axis;
    for (axis = o->rank - 2; axis >= 0; axis--) {
        const int64_t i = row % o->shape[axis];
        row /= o->shape[axis];
        o->index[axis] = i;
        o->off[0] += (ptrdiff_t)(i * o->strides[0][axis]);
        o->off[1] += (ptrdiff_t)(i * o->strides[1][axis]);
        o->off[2] += (ptrdiff_t)(i * o->strides[2][axis]);
    }
}

/* The rows (outer index space) of an odometer loop: rank-1 outer axes' product. */
static inline int64_t mlcc_odometer_rows(int rank, const int64_t *shape) {
    int64_t rows = 1;
    int axis;
    for (axis = 0; axis + 1 < rank; axis++) rows *= shape[axis];
    return rows;
}

/* Moves to the next row (the last axis is the caller's); 0 after the last row. Branch-light
 * on purpose: with rows of a few elements this runs once per few outputs. */
static inline int mlcc_odometer_next(mlcc_odometer *o) {
    int axis;
    for (axis = o->rank - 2; axis >= 0; axis--) {
        const int64_t *s0 = o->strides[0], *s1 = o->strides[1], *s2 = o->strides[2];
        if (++o->index[axis] < o->shape[axis]) {
            o->off[0] += (ptrdiff_t)s0[axis];
            o->off[1] += (ptrdiff_t)s1[axis];
            o->off[2] += (ptrdiff_t)s2[axis];
            return 1;
        }
        o->index[axis] = 0;    /* carry: rewind this axis */
        o->off[0] -= (ptrdiff_t)(s0[axis] * (o->shape[axis] - 1));
        o->off[1] -= (ptrdiff_t)(s1[axis] * (o->shape[axis] - 1));
        o->off[2] -= (ptrdiff_t)(s2[axis] * (o->shape[axis] - 1));
    }
    return 0;
}

#endif /* MLCC_KERNEL_H */
