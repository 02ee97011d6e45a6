#include <float.h>
#include <stdint.h>

#include "pool.h"

#if MLCC_HAVE_VECTORS && (defined(__SSE__) || defined(__AVX__) || defined(__AVX512F__))
#include <immintrin.h>
#elif MLCC_HAVE_VECTORS && defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#define MAX_OF(a, v) ((v) > (a) ? (v) : (a))
#define ADD_TO(a, v) ((a) + (v))

#if MLCC_HAVE_VECTORS
#define VL MLCC_VF_LANES
/* Lane-wise (b > a ? b : a): x86's maxps(b, a) and WebAssembly's f32x4.pmax(a, b) are that
 * very rule (the first operand's lane when greater, else the second's: NaN and equal zeros
 * give a), one instruction; elsewhere (NEON's fmax returns NaN) a comparison and a select.
 * (GCC compiled the select to a compare and two masked xors on AVX-512; a loop over the lanes
 * stays a loop through the stack in clang's WebAssembly output: MaxPool 20x slower there.) */
static inline mlcc_vf vf_max(mlcc_vf a, mlcc_vf b) {
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
    return (mlcc_vf)_mm512_max_ps((__m512)b, (__m512)a);
#elif defined(__AVX__) && MLCC_VECTOR_BYTES == 32
    return (mlcc_vf)_mm256_max_ps((__m256)b, (__m256)a);
#elif defined(__SSE__) && MLCC_VECTOR_BYTES == 16
    return (mlcc_vf)_mm_max_ps((__m128)b, (__m128)a);
#elif defined(__wasm_simd128__) && MLCC_VECTOR_BYTES == 16
    return (mlcc_vf)wasm_f32x4_pmax((v128_t)a, (v128_t)b);
#else
    return mlcc_vf_select(b > a, b, a);
#endif
}
#define VMAX_OF(a, v) vf_max(a, v)
/* a + v where both are NaN gives a's NaN on x86 and arm (VF_ADD_PINNED), as the scalar
 * loop's adds (and sum_row's, whose loads are memory operands) do: the compiler may swap the
 * operands of a register add, which then gave v's NaN (inf - inf in a window with a NaN:
 * 0xffc00000 or 0x7fc00000). Elsewhere (wasm, whose NaN bits the spec leaves open) a plain
 * add, and the average pools keep the phase split there. */
static inline mlcc_vf vf_add(mlcc_vf a, mlcc_vf v) {
#if defined(__AVX__) && (MLCC_VECTOR_BYTES <= 32 || defined(__AVX512F__))
#define VF_ADD_PINNED 1
    mlcc_vf r;
    __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(a), "v"(v));
    return r;
#elif defined(__SSE__) && MLCC_VECTOR_BYTES == 16
#define VF_ADD_PINNED 1
    __asm__("addps %1, %0" : "+x"(a) : "x"(v));
    return a;
#elif defined(__aarch64__) && MLCC_VECTOR_BYTES == 16
#define VF_ADD_PINNED 1
    mlcc_vf r;
    __asm__("fadd %0.4s, %1.4s, %2.4s" : "=w"(r) : "w"(a), "w"(v));
    return r;
#else
    return a + v;
#endif
}
#define VADD_TO(a, v) vf_add(a, v)
#endif

/* floor(a / s) for s >= 1 (stride 1, the usual case, without a division). */
static ptrdiff_t div_floor(ptrdiff_t a, ptrdiff_t s) {
    if (s == 1) return a;
    return a >= 0 ? a / s : -((-a + s - 1) / s);
}

/* The first o >= 0 with o * stride + offset >= 0. */
static ptrdiff_t first_inside(ptrdiff_t stride, ptrdiff_t offset) {
    return offset >= 0 ? 0 : -div_floor(offset, stride);
}

/* One past the last o < out_size with o * stride + offset < size (0 if none). */
static ptrdiff_t end_inside(ptrdiff_t out_size, ptrdiff_t stride, ptrdiff_t offset,
                            ptrdiff_t size) {
    const ptrdiff_t last = size - 1 - offset;
    const ptrdiff_t end = last < 0 ? 0 : div_floor(last, stride) + 1;
    return end < out_size ? end : out_size;
}

/* The geometry of one output row: its source rows and which columns need bounds tests. */
typedef struct row_ctx {
    const float *x;          /* the input plane (border columns read it with bounds tests) */
    const float *src;        /* the tap source plane: x, or its phases in scratch */
    ptrdiff_t pitch;         /* row pitch of src */
    const int64_t *taps;     /* tap_offsets */
    ptrdiff_t ih0, kh_lo, kh_hi;       /* kernel rows kh_lo..kh_hi-1 are inside the input */
    ptrdiff_t lo, hi;                  /* columns [lo, hi) have every tap inside the input */
} row_ctx;

/* One output row. Inner columns run BLOCK outputs at a time (several vectors of independent
 * accumulators) reading contiguous taps; the few border columns test each tap. Taps are
 * addressed by index (ow + tap offset >= 0 inside [lo, hi)), never by a pointer before a row. */
#if MLCC_HAVE_VECTORS
#define VECTOR_BLOCKS(VCOMBINE)                                                              \
    for (; ow + 4 * VL <= c->hi; ow += 4 * VL) {                                             \
        mlcc_vf a0 = mlcc_vf_splat(init), a1 = a0, a2 = a0, a3 = a0;                         \
        for (kh = c->kh_lo; kh < c->kh_hi; kh++) {                                           \
            const float *r = c->src + (c->ih0 + kh * dh) * c->pitch;                         \
            for (kw = 0; kw < kw_n; kw++) {                                                  \
                const float *t = r + (ow + (ptrdiff_t)c->taps[kw]);                          \
                a0 = VCOMBINE(a0, mlcc_vf_load(t));                                          \
                a1 = VCOMBINE(a1, mlcc_vf_load(t + VL));                                     \
                a2 = VCOMBINE(a2, mlcc_vf_load(t + 2 * VL));                                 \
                a3 = VCOMBINE(a3, mlcc_vf_load(t + 3 * VL));                                 \
            }                                                                                \
        }                                                                                    \
        mlcc_vf_store(yr + ow, a0);                                                          \
        mlcc_vf_store(yr + ow + VL, a1);                                                     \
        mlcc_vf_store(yr + ow + 2 * VL, a2);                                                 \
        mlcc_vf_store(yr + ow + 3 * VL, a3);                                                 \
    }                                                                                        \
    for (; ow < c->hi && c->hi - c->lo >= VL; ow += VL) {                                   \
        mlcc_vf a0 = mlcc_vf_splat(init);                                                    \
        /* the last vector overlaps the one before: the columns it recomputes get the same \
         * values, and no scalar tail is left (rows of 55 had 6 scalar columns of 9 taps) */ \
        if (ow + VL > c->hi) ow = c->hi - VL;                                                \
        for (kh = c->kh_lo; kh < c->kh_hi; kh++) {                                           \
            const float *r = c->src + (c->ih0 + kh * dh) * c->pitch;                         \
            for (kw = 0; kw < kw_n; kw++)                                                    \
                a0 = VCOMBINE(a0, mlcc_vf_load(r + (ow + (ptrdiff_t)c->taps[kw])));          \
        }                                                                                    \
        mlcc_vf_store(yr + ow, a0);                                                          \
    }
#else
#define VECTOR_BLOCKS(VCOMBINE)
#endif

/* Rows whose interior columns are fewer than a vector: with 16 lanes (AVX-512) one masked
 * vector, the taps in the same order (Inception v2's 3x3/1 average pools on 14 x 14 and 7 x 7
 * maps took every tap of every output one at a time). max_row_narrow and sum_row_narrow are
 * max_row and sum_row made with it: in the same functions it made wide rows 5-10% slower. */
#if MLCC_HAVE_VECTORS && defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
#define POOL_NARROW_ROWS 1
#define VECTOR_NARROW(VCOMBINE)                                                              \
    if (ow < c->hi) {                                                                        \
        const __mmask16 m_ = (__mmask16)((1u << (c->hi - ow)) - 1);                          \
        mlcc_vf a0 = mlcc_vf_splat(init);                                                    \
        for (kh = c->kh_lo; kh < c->kh_hi; kh++) {                                           \
            const float *r = c->src + (c->ih0 + kh * dh) * c->pitch;                         \
            for (kw = 0; kw < kw_n; kw++)                                                    \
                a0 = VCOMBINE(a0, (mlcc_vf)_mm512_maskz_loadu_ps(                           \
                                      m_, r + (ow + (ptrdiff_t)c->taps[kw])));               \
        }                                                                                    \
        _mm512_mask_storeu_ps(yr + ow, m_, (__m512)a0);                                      \
        ow = c->hi;                                                                          \
    }
#endif

#define POOL_ROW(NAME, COMBINE, VCOMBINE, VECTORS)                                           \
    static void NAME(const mlcc_pool2d_params *p, const row_ctx *c, float init, float *yr) { \
        const ptrdiff_t iw_n = (ptrdiff_t)p->in_w, ow_n = (ptrdiff_t)p->out_w;               \
        const ptrdiff_t kw_n = (ptrdiff_t)p->kernel_w, sw = (ptrdiff_t)p->stride_w;          \
        const ptrdiff_t dh = (ptrdiff_t)p->dilation_h, dw = (ptrdiff_t)p->dilation_w;        \
        const ptrdiff_t pl = (ptrdiff_t)p->pad_left;                                         \
        ptrdiff_t ow, kh, kw;                                                                \
        for (ow = 0; ow < ow_n; ow++) {                                                      \
            float acc = init;                                                                \
            if (ow == c->lo && c->hi > c->lo) {                                              \
                ow = c->hi - 1;                                                              \
                continue;                                                                    \
            }                                                                                \
            for (kh = c->kh_lo; kh < c->kh_hi; kh++) {                                       \
                const float *xr = c->x + (c->ih0 + kh * dh) * iw_n;                          \
                for (kw = 0; kw < kw_n; kw++) {                                              \
                    const ptrdiff_t iw = ow * sw - pl + kw * dw;                             \
                    if (iw >= 0 && iw < iw_n) acc = COMBINE(acc, xr[iw]);                    \
                }                                                                            \
            }                                                                                \
            yr[ow] = acc;                                                                    \
        }                                                                                    \
        ow = c->lo;                                                                          \
        VECTORS(VCOMBINE)                                                                    \
        for (; ow < c->hi; ow++) {                                                           \
            float acc = init;                                                                \
            for (kh = c->kh_lo; kh < c->kh_hi; kh++) {                                       \
                const float *r = c->src + (c->ih0 + kh * dh) * c->pitch;                     \
                for (kw = 0; kw < kw_n; kw++)                                                \
                    acc = COMBINE(acc, r[ow + (ptrdiff_t)c->taps[kw]]);                      \
            }                                                                                \
            yr[ow] = acc;                                                                    \
        }                                                                                    \
    }

POOL_ROW(max_row, MAX_OF, VMAX_OF, VECTOR_BLOCKS)
POOL_ROW(sum_row, ADD_TO, VADD_TO, VECTOR_BLOCKS)
#ifdef POOL_NARROW_ROWS
POOL_ROW(max_row_narrow, MAX_OF, VMAX_OF, VECTOR_NARROW)
POOL_ROW(sum_row_narrow, ADD_TO, VADD_TO, VECTOR_NARROW)
#define NARROW_ROWS(c) ((c).hi > (c).lo && (c).hi - (c).lo < VL)
#else
#define max_row_narrow max_row
#define sum_row_narrow sum_row
#define NARROW_ROWS(c) 0
#endif

/* Phase q of row r goes to phases[r * stride * width + q * width + j] = x[r * in_w + q +
 * j * stride] for the j that stay inside the row. */
static void split_phases(const float *x, ptrdiff_t rows, ptrdiff_t in_w, ptrdiff_t stride,
                         ptrdiff_t width, float *phases) {
    ptrdiff_t q, r, j;
    if (stride == 2) {
        /* one pass per row, both phases at once (vectorizes as a deinterleave) */
        const ptrdiff_t pairs = in_w / 2;
        for (r = 0; r < rows; r++) {
            const float *xr = x + r * in_w;
            float *even = phases + r * 2 * width, *odd = even + width;
            for (j = 0; j < pairs; j++) {
                even[j] = xr[2 * j];
                odd[j] = xr[2 * j + 1];
            }
            if (in_w % 2) even[pairs] = xr[in_w - 1];
        }
        return;
    }
    for (q = 0; q < stride && q < in_w; q++) {
        const ptrdiff_t n = (in_w - q + stride - 1) / stride;
        for (r = 0; r < rows; r++) {
            const float *xr = x + r * in_w + q;
            float *pr = phases + r * stride * width + q * width;
            for (j = 0; j < n; j++) pr[j] = xr[j * stride];
        }
    }
}

#if MLCC_HAVE_VECTORS && defined(MLCC_VF_DEINTERLEAVE)
#define MAX_ROW_S2 1
/* The maximum over the kernel rows of column j, rows r[0], r[1], r[2] in that order (a window
 * of two rows passes r[2] = r[1] and of one row r[0] = r[1] = r[2]: max(max(a, b), b) is
 * max(a, b) bit for bit, NaN and signed zeros included, so every row count takes the same
 * code); for the second output row of a pair, rows r[2], r[3], r[4]. */
#define COL3(r, j) MAX_OF(MAX_OF((r)[0][j], (r)[1][j]), (r)[2][j])

/* Lanes 1.. of a, then the first lane of b (vf_next_first) or its last (vf_next_last). */
#if MLCC_VECTOR_BYTES == 64
#define VF_NEXT(a, b, l) \
    __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, l)
#elif MLCC_VECTOR_BYTES == 32
#define VF_NEXT(a, b, l) __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, l)
#else
#define VF_NEXT(a, b, l) __builtin_shufflevector(a, b, 1, 2, 3, l)
#endif
#define vf_next_first(a, b) VF_NEXT(a, b, MLCC_VECTOR_BYTES / 4)
#define vf_next_last(a, b) VF_NEXT(a, b, MLCC_VECTOR_BYTES / 2 - 1)

#define S2_INLINE static inline __attribute__((always_inline))

/* 16-lane builds (AVX-512) end a row with masked loads and a masked store (no load past the
 * row's last tap, no store past its last output), so rows narrower than a vector (SqueezeNet's
 * 13 outputs) take the vector path too. */
#if defined(__AVX512F__) && MLCC_VECTOR_BYTES == 64
#define MAX_ROW_S2_MASKED 1
#define S2_MIN_INTERIOR 1   /* interior outputs max_rows_s2 needs */
typedef __mmask16 s2_mask;
#define S2_LOAD(p, m) ((mlcc_vf)_mm512_maskz_loadu_ps(m, p))
/* A row's last m < VL outputs from cols input columns: the masks of the first VL columns
 * (ma), of the rest (mb) and of the outputs (mo). */
typedef struct s2_tail {
    __mmask16 ma, mb, mo;
} s2_tail;
static inline s2_tail s2_tail_masks(ptrdiff_t m, ptrdiff_t cols) {
    s2_tail t;
    t.ma = (__mmask16)(cols >= VL ? 0xffff : (1u << cols) - 1);
    t.mb = (__mmask16)(cols > VL ? (1u << (cols - VL)) - 1 : 0);
    t.mo = (__mmask16)((1u << m) - 1);
    return t;
}
#else
#define S2_MIN_INTERIOR VL
typedef int s2_mask;
#define S2_LOAD(p, m) ((void)(m), mlcc_vf_load(p))
#endif

/* The column maxima of columns j.. (the lanes of mask m) for one output row (ca) or two (cb
 * too), their shared row r[2] loaded once. */
S2_INLINE void s2_cols(const float *const *r, int two, ptrdiff_t j, s2_mask m, mlcc_vf *ca,
                       mlcc_vf *cb) {
    const mlcc_vf x2 = S2_LOAD(r[2] + j, m);
    *ca = vf_max(vf_max(S2_LOAD(r[0] + j, m), S2_LOAD(r[1] + j, m)), x2);
    if (two) *cb = vf_max(vf_max(x2, S2_LOAD(r[3] + j, m)), S2_LOAD(r[4] + j, m));
}

/* VL outputs from the column maxima a (columns j..), b (j + VL..) and, for 3-wide windows,
 * c: the next VL columns (its first lane is column j + 2 VL: how 0), the VL columns that end
 * at j + 2 VL (how 1), or none (how 2: only the outputs below VL - 1 are right). */
S2_INLINE mlcc_vf s2_out(mlcc_vf a, mlcc_vf b, mlcc_vf c, ptrdiff_t kw_n, int how) {
    mlcc_vf e0, o0;
    mlcc_vf_deinterleave(a, b, &e0, &o0);
    if (kw_n == 2) return vf_max(vf_max(mlcc_vf_splat(-FLT_MAX), e0), o0);
    return vf_max(vf_max(e0, o0), how == 0   ? vf_next_first(e0, c)
                                  : how == 1 ? vf_next_last(e0, c)
                                             : vf_next_first(e0, e0));
}

/* One output row (ya; two: and the next, yb) of a 2- or 3-wide, stride-2, undilated max
 * window (the 3x3/2 pools of SqueezeNet and ResNet, the 2x2/2 of small CNNs) over at most
 * three input rows, in one pass: the row maxima of each column go straight into the column
 * maxima, in registers. Two output rows of 3-row windows of stride 2 share a row, loaded once
 * for both. Interior columns [lo, hi) (every tap inside; hi - lo >= S2_MIN_INTERIOR) take VL
 * outputs at a time from 2 VL columns of row maxima: their even and odd lanes
 * (mlcc_vf_deinterleave), and for 3-wide windows the even lanes one pair on, which are the
 * even lanes but the first, then column 2 VL: the first lane of the next block's row maxima,
 * which the next block then uses (or, on a row's last block, the last lane of the row maxima
 * of the VL columns before it). 6 loads per VL outputs of one row, 5 in a pair (12 before).
 * The row's end: a masked block (MAX_ROW_S2_MASKED), or the last vector overlapping the one
 * before (the same values again); no scalar tail either way, and no load past the row's last
 * tap. Border columns test their taps. The same comparisons in the same order as the two
 * passes through a row buffer (max_plane_separable below): interior 3-wide windows
 * max(max(c0, c1), c2), 2-wide ones and borders from -FLT_MAX, so the same bits, NaN
 * included. The row buffer cost a store and a misaligned reload of every row maximum; this
 * costs a second set of loads instead, which pays with 4 lanes too now that a block takes 6
 * loads and not 12 (SqueezeNet's and ResNet's pools against the row buffer: SSE 0.58-0.82x
 * the time, wasm in node 0.22-0.65x, NEON 0.60-0.67x the instructions under qemu). */
S2_INLINE void max_rows_s2(const float *const *r, int two, ptrdiff_t iw_n, ptrdiff_t ow_n,
                           ptrdiff_t kw_n, ptrdiff_t pl, ptrdiff_t lo, ptrdiff_t hi, float *ya,
                           float *yb) {
    const s2_mask all = (s2_mask)-1;
    ptrdiff_t ow, kw, j;
    mlcc_vf aa, ab = mlcc_vf_splat(0.0f), ba, bb = ab, na, nb = ab;
    for (ow = 0; ow < ow_n; ow++) {
        float acc = -FLT_MAX, acc2 = -FLT_MAX;
        if (ow == lo) {
            ow = hi - 1;
            continue;
        }
        for (kw = 0; kw < kw_n; kw++) {
            const ptrdiff_t iw = 2 * ow - pl + kw;
            if (iw >= 0 && iw < iw_n) {
                acc = MAX_OF(acc, COL3(r, iw));
                if (two) acc2 = MAX_OF(acc2, COL3(r + 2, iw));
            }
        }
        ya[ow] = acc;
        if (two) yb[ow] = acc2;
    }
    ow = lo;
    aa = ab;
    if (ow + VL <= hi) s2_cols(r, two, 2 * ow - pl, all, &aa, &ab);
    for (; ow + VL <= hi; ow += VL) {
        const int next = ow + 2 * VL <= hi;   /* column j + 2 VL starts the next block */
        mlcc_vf oa, ob = ab;
        j = 2 * ow - pl;
        s2_cols(r, two, j + VL, all, &ba, &bb);
        if (kw_n == 2) {
            oa = s2_out(aa, ba, ba, 2, 0);
            if (two) ob = s2_out(ab, bb, bb, 2, 0);
            if (next) s2_cols(r, two, j + 2 * VL, all, &aa, &ab);
        } else if (next) {
            s2_cols(r, two, j + 2 * VL, all, &na, &nb);
            oa = s2_out(aa, ba, na, 3, 0);
            if (two) ob = s2_out(ab, bb, nb, 3, 0);
            aa = na, ab = nb;
        } else {                              /* it ends the row's last tap */
            s2_cols(r, two, j + VL + 1, all, &na, &nb);
            oa = s2_out(aa, ba, na, 3, 1);
            if (two) ob = s2_out(ab, bb, nb, 3, 1);
        }
        mlcc_vf_store(ya + ow, oa);
        if (two) mlcc_vf_store(yb + ow, ob);
    }
    if (ow == hi) return;
#ifdef MAX_ROW_S2_MASKED
    {
        /* hi - ow < VL outputs from the 2 (hi - ow) + kw_n - 2 columns at j */
        const s2_tail t = s2_tail_masks(hi - ow, 2 * (hi - ow) + kw_n - 2);
        j = 2 * ow - pl;
        s2_cols(r, two, j, t.ma, &aa, &ab);
        s2_cols(r, two, j + VL, t.mb, &ba, &bb);
        _mm512_mask_storeu_ps(ya + ow, t.mo, (__m512)s2_out(aa, ba, ba, kw_n, 2));
        if (two) _mm512_mask_storeu_ps(yb + ow, t.mo, (__m512)s2_out(ab, bb, bb, kw_n, 2));
    }
#else
    /* the last vector overlaps the one before (hi - lo >= VL) */
    ow = hi - VL;
    j = 2 * ow - pl;
    s2_cols(r, two, j, all, &aa, &ab);
    s2_cols(r, two, j + VL, all, &ba, &bb);
    na = ba, nb = bb;
    if (kw_n == 3) s2_cols(r, two, j + VL + 1, all, &na, &nb);
    mlcc_vf_store(ya + ow, s2_out(aa, ba, na, kw_n, 1));
    if (two) mlcc_vf_store(yb + ow, s2_out(ab, bb, nb, kw_n, 1));
#endif
}

/* One output row (rows r[0..2]), or two of 3-wide windows that share a row (r[0..4]). */
static void max_row_s2(const float *const *r, ptrdiff_t iw_n, ptrdiff_t ow_n, ptrdiff_t kw_n,
                       ptrdiff_t pl, ptrdiff_t lo, ptrdiff_t hi, float *yr) {
    max_rows_s2(r, 0, iw_n, ow_n, kw_n, pl, lo, hi, yr, yr);
}
static void max_row_pair_s2(const float *const *r, ptrdiff_t iw_n, ptrdiff_t ow_n,
                            ptrdiff_t pl, ptrdiff_t lo, ptrdiff_t hi, float *yr) {
    max_rows_s2(r, 1, iw_n, ow_n, 3, pl, lo, hi, yr, yr + ow_n);
}
#endif

/* Max pooling with stride_w > 1, separably: per output row, the maximum over the kernel rows
 * (contiguous vectors) into tmp (in_w floats), then over the kernel columns of tmp. Max is
 * exact, so on numbers the result is that of the 2-D window. NaN: MAX_OF(a, v) keeps a when v
 * is NaN and stays NaN once a is, and the row maxima start from a column's top tap, so a NaN
 * there makes the column's maximum NaN, which the column pass then skips (from -FLT_MAX) or,
 * as the first column of a 3-wide interior window (no -FLT_MAX start), returns. Cheaper than
 * the phase split (SqueezeNet's 3x3 stride-2 pools: the split rewrote every input value).
 * Windows of three rows take them in one pass (3 loads and a store per vector instead of a
 * copy and two read-modify-writes of tmp): SqueezeNet's pools 0.61-0.93x. Vector builds take
 * windows of 2 or 3 columns over at most 3 rows, stride 2, without tmp (max_row_s2). */
static void max_plane_separable(const mlcc_pool2d_params *p, const float *x, float *y,
                                float *tmp, ptrdiff_t lo, ptrdiff_t hi) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t dh = (ptrdiff_t)p->dilation_h, dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    ptrdiff_t oh, ow, kh, kw, j;
    for (oh = 0; oh < oh_n; oh++) {
        const ptrdiff_t ih0 = oh * sh - pt;
        const ptrdiff_t kh_hi = end_inside(kh_n, dh, ih0, ih_n);
        ptrdiff_t kh_lo = first_inside(dh, ih0);
        float *yr = y + oh * ow_n;
        if (kh_hi <= kh_lo) {   /* all padding */
            for (ow = 0; ow < ow_n; ow++) yr[ow] = -FLT_MAX;
            continue;
        }
#ifdef MAX_ROW_S2
        if (kh_hi - kh_lo <= 3 && sw == 2 && dw == 1 && (kw_n == 2 || kw_n == 3) &&
            hi - lo >= S2_MIN_INTERIOR) {
            const float *r[5];
            r[0] = x + (ih0 + kh_lo * dh) * iw_n;
            r[2] = x + (ih0 + (kh_hi - 1) * dh) * iw_n;
            r[1] = kh_hi - kh_lo == 3 ? r[0] + dh * iw_n : r[2];
            if (kw_n == 3 && kh_n == 3 && kh_lo == 0 && kh_hi == 3 && sh == 2 * dh && oh + 1 < oh_n &&
                ih0 + sh + 2 * dh < ih_n) {   /* the next row's window: rows 2 to 4 */
                r[3] = r[2] + dh * iw_n;
                r[4] = r[3] + dh * iw_n;
                max_row_pair_s2(r, iw_n, ow_n, pl, lo, hi, yr);
                oh++;
                continue;
            }
            max_row_s2(r, iw_n, ow_n, kw_n, pl, lo, hi, yr);
            continue;
        }
#endif
        if (kh_hi - kh_lo == 3) {   /* 3-row windows (SqueezeNet, ResNet): one pass */
            const float *r0 = x + (ih0 + kh_lo * dh) * iw_n, *r1 = r0 + dh * iw_n;
            const float *r2 = r1 + dh * iw_n;
            j = 0;
#if MLCC_HAVE_VECTORS
            for (; j + VL <= iw_n; j += VL)
                mlcc_vf_store(tmp + j, vf_max(vf_max(mlcc_vf_load(r0 + j), mlcc_vf_load(r1 + j)),
                                              mlcc_vf_load(r2 + j)));
#endif
            for (; j < iw_n; j++) tmp[j] = MAX_OF(MAX_OF(r0[j], r1[j]), r2[j]);
            kh_lo = kh_hi;   /* done: skip the row loop below */
        } else {
            memcpy(tmp, x + (ih0 + kh_lo * dh) * iw_n, (size_t)iw_n * sizeof(float));
        }
        for (kh = kh_lo + 1; kh < kh_hi; kh++) {
            const float *r = x + (ih0 + kh * dh) * iw_n;
            j = 0;
#if MLCC_HAVE_VECTORS
            for (; j + VL <= iw_n; j += VL)
                mlcc_vf_store(tmp + j, vf_max(mlcc_vf_load(tmp + j), mlcc_vf_load(r + j)));
#endif
            for (; j < iw_n; j++) tmp[j] = MAX_OF(tmp[j], r[j]);
        }
        for (ow = 0; ow < ow_n; ow++) {
            float acc = -FLT_MAX;
            if (ow == lo && hi > lo) {   /* every tap inside */
                if (sw == 2 && kw_n == 3 && dw == 1) {
#if MLCC_HAVE_VECTORS && defined(MLCC_VF_DEINTERLEAVE)
                    /* VL outputs from 2 VL + 2 values of tmp: the even lanes, the odd lanes
                     * and the even lanes one pair on, combined in the scalar loop's order */
                    for (; ow + VL <= hi && 2 * (ow + VL) - pl + 2 <= iw_n; ow += VL) {
                        const float *t = tmp + 2 * ow - pl;
                        const mlcc_vf a0 = mlcc_vf_load(t), a1 = mlcc_vf_load(t + VL);
                        const mlcc_vf b0 = mlcc_vf_load(t + 2), b1 = mlcc_vf_load(t + 2 + VL);
                        mlcc_vf e0, o0, e2, o2;
                        mlcc_vf_deinterleave(a0, a1, &e0, &o0);
                        mlcc_vf_deinterleave(b0, b1, &e2, &o2);   /* o2: unused */
                        (void)o2;
                        mlcc_vf_store(yr + ow, vf_max(vf_max(e0, o0), e2));
                    }
#endif
                    for (; ow < hi; ow++) {
                        const float *t = tmp + 2 * ow - pl;
                        yr[ow] = MAX_OF(MAX_OF(t[0], t[1]), t[2]);
                    }
                } else {
                    for (; ow < hi; ow++) {
                        const float *t = tmp + ow * sw - pl;
                        acc = -FLT_MAX;
                        for (kw = 0; kw < kw_n; kw++) acc = MAX_OF(acc, t[kw * dw]);
                        yr[ow] = acc;
                    }
                }
                ow--;
                continue;
            }
            for (kw = 0; kw < kw_n; kw++) {
                const ptrdiff_t iw = ow * sw - pl + kw * dw;
                if (iw >= 0 && iw < iw_n) acc = MAX_OF(acc, tmp[iw]);
            }
            yr[ow] = acc;
        }
    }
}

/* Max pooling of stride 1 on narrow maps (pool.h: mlcc_maxpool_small): the plane copied into
 * xp, padded with -FLT_MAX to (out_h + kernel_h - 1) rows of out_w + kernel_w - 1 columns, then
 * a flat pass over the virtual positions q = oh * pitch + ow (the implicit GEMM's trick):
 * v[q] = max over kh of xp[q + kh * pitch], every vector whole (YOLOv8n's SPPF: 5 x 5 windows
 * on 10 x 10 maps, where max_row tested the bounds of every tap of every output: 0.19 ms a
 * pool); then per output row y = max over kw of v[q + kw] (a masked end on AVX-512, else the
 * last vector overlapping or scalars). That pass wrote u and copied its rows out before:
 * Inception's 3x3/1 and the SPPF pools 0.70-0.72x without the copy (mlcc_maxpool_small_floats
 * still counts u's out_h * pitch floats). NaN is skipped and all padding gives -FLT_MAX, as in
 * max_row; the maximum of the same taps. */
static void max_plane_small(const mlcc_pool2d_params *p, const float *x, float *y,
                            float *scratch) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    const ptrdiff_t pitch = ow_n + kw_n - 1, rows = oh_n + kh_n - 1;
    const ptrdiff_t nq = oh_n * pitch;
    float *xp = scratch, *v = xp + rows * pitch;
    ptrdiff_t r, q, k, ow;
    for (r = 0; r < rows; r++) {   /* padded row r: input row r - pt, columns c - pl */
        float *d = xp + r * pitch;
        const ptrdiff_t ih = r - pt;
        for (q = 0; q < pitch; q++) {
            const ptrdiff_t iw = q - pl;
            d[q] = ih >= 0 && ih < ih_n && iw >= 0 && iw < iw_n ? x[ih * iw_n + iw] : -FLT_MAX;
        }
    }
    for (q = nq; q < nq + kw_n; q++) v[q] = -FLT_MAX;
    q = 0;
#if MLCC_HAVE_VECTORS
    for (; q + VL <= nq; q += VL) {
        mlcc_vf a = mlcc_vf_splat(-FLT_MAX);
        for (k = 0; k < kh_n; k++) a = vf_max(a, mlcc_vf_load(xp + q + k * pitch));
        mlcc_vf_store(v + q, a);
    }
#endif
    for (; q < nq; q++) {
        float a = -FLT_MAX;
        for (k = 0; k < kh_n; k++) a = MAX_OF(a, xp[q + k * pitch]);
        v[q] = a;
    }
    for (r = 0; r < oh_n; r++) {   /* the maxima across each row's windows, into y */
        const float *vr = v + r * pitch;
        float *yr = y + r * ow_n;
        ow = 0;
#if MLCC_HAVE_VECTORS
        for (; ow + VL <= ow_n; ow += VL) {
            mlcc_vf a = mlcc_vf_splat(-FLT_MAX);
            for (k = 0; k < kw_n; k++) a = vf_max(a, mlcc_vf_load(vr + ow + k));
            mlcc_vf_store(yr + ow, a);
        }
#ifdef MAX_ROW_S2_MASKED
        if (ow < ow_n) {
            const s2_tail t = s2_tail_masks(ow_n - ow, ow_n - ow);
            mlcc_vf a = mlcc_vf_splat(-FLT_MAX);
            for (k = 0; k < kw_n; k++) a = vf_max(a, S2_LOAD(vr + ow + k, t.mo));
            _mm512_mask_storeu_ps(yr + ow, t.mo, (__m512)a);
            continue;
        }
#else
        if (ow < ow_n && ow_n >= VL) {
            mlcc_vf a = mlcc_vf_splat(-FLT_MAX);
            ow = ow_n - VL;
            for (k = 0; k < kw_n; k++) a = vf_max(a, mlcc_vf_load(vr + ow + k));
            mlcc_vf_store(yr + ow, a);
            continue;
        }
#endif
#endif
        for (; ow < ow_n; ow++) {
            float a = -FLT_MAX;
            for (k = 0; k < kw_n; k++) a = MAX_OF(a, vr[ow + k]);
            yr[ow] = a;
        }
    }
}

#if defined(MAX_ROW_S2) && defined(VF_ADD_PINNED)
#define AVG_ROW_S2 1
/* The window sums of VL outputs (columns j.. of the kernel rows rows[0..n), masks ma, mb):
 * per row, the even lanes, the odd lanes and for 3-wide windows the even lanes one on (from
 * the VL columns that end at j + 2 VL if last, else only right below VL - 1). */
S2_INLINE mlcc_vf avg_block_s2(const float *const *rows, ptrdiff_t n, ptrdiff_t j,
                               ptrdiff_t kw_n, s2_mask ma, s2_mask mb, int last) {
    mlcc_vf acc = mlcc_vf_splat(0.0f), e0, o0;
    ptrdiff_t k;
    for (k = 0; k < n; k++) {
        mlcc_vf_deinterleave(S2_LOAD(rows[k] + j, ma), S2_LOAD(rows[k] + j + VL, mb), &e0, &o0);
        acc = VADD_TO(acc, e0);
        acc = VADD_TO(acc, o0);
        if (kw_n == 3)
            acc = VADD_TO(acc, last ? vf_next_last(e0, mlcc_vf_load(rows[k] + j + VL + 1))
                                    : vf_next_first(e0, e0));
    }
    return acc;
}

/* One output row of a 2- or 3-wide, stride-2, undilated average over the kernel rows inside
 * the input, rows[0..n) top to bottom (ShuffleNet's 3x3/2 pad 1 shortcuts), read in place as
 * max_rows_s2 reads them: the taps summed from 0 row by row, left to right, as sum_row sums
 * them, then times rh * rw[ow], so the same bits (before: the phase split copied every input
 * into scratch first). Columns [lo, hi) are interior (hi - lo >= S2_MIN_INTERIOR). */
static void avg_row_s2(const float *const *rows, ptrdiff_t n, ptrdiff_t iw_n, ptrdiff_t ow_n,
                       ptrdiff_t kw_n, ptrdiff_t pl, ptrdiff_t lo, ptrdiff_t hi, float rh,
                       const float *rw, float *yr) {
    const mlcc_vf vrh = mlcc_vf_splat(rh);
    const s2_mask all = (s2_mask)-1;
    ptrdiff_t ow, kw, k;
    for (ow = 0; ow < ow_n; ow++) {   /* border columns: the taps inside */
        float acc = 0.0f;
        if (ow == lo) {
            ow = hi - 1;
            continue;
        }
        for (k = 0; k < n; k++)
            for (kw = 0; kw < kw_n; kw++) {
                const ptrdiff_t iw = 2 * ow - pl + kw;
                if (iw >= 0 && iw < iw_n) acc = ADD_TO(acc, rows[k][iw]);
            }
        yr[ow] = acc * (rh * rw[ow]);
    }
    for (ow = lo; ow + VL <= hi; ow += VL)
        mlcc_vf_store(yr + ow, avg_block_s2(rows, n, 2 * ow - pl, kw_n, all, all, 1) *
                                   (vrh * mlcc_vf_load(rw + ow)));
    if (ow == hi) return;
#ifdef MAX_ROW_S2_MASKED
    {
        /* hi - ow < VL outputs from the 2 (hi - ow) + kw_n - 2 columns at 2 ow - pl */
        const s2_tail t = s2_tail_masks(hi - ow, 2 * (hi - ow) + kw_n - 2);
        _mm512_mask_storeu_ps(yr + ow, t.mo,
                              (__m512)(avg_block_s2(rows, n, 2 * ow - pl, kw_n, t.ma, t.mb, 0) *
                                       (vrh * S2_LOAD(rw + ow, t.mo))));
    }
#else
    ow = hi - VL;   /* the last vector overlapping the one before */
    mlcc_vf_store(yr + ow, avg_block_s2(rows, n, 2 * ow - pl, kw_n, all, all, 1) *
                               (vrh * mlcc_vf_load(rw + ow)));
#endif
}
#endif

#ifdef AVG_ROW_S2
/* One output row of a 2x2/2 average whose windows are all inside: ((0 + a + b) + c) + d with
 * a, b from row r0 and c, d from r1, times rh * rw[ow]: sum_row's order and the scaling after
 * it, so the same bits. Vectors take the even and odd lanes of 2 VL columns of each row
 * (before: the phase split copied every input, then sum_row read the phases). */
static void avg_row_2x2(const float *r0, const float *r1, ptrdiff_t ow_n, float rh,
                        const float *rw, float *yr) {
    ptrdiff_t ow = 0;
    const mlcc_vf zero = mlcc_vf_splat(0.0f), vrh = mlcc_vf_splat(rh);
    const s2_mask all = (s2_mask)-1;
    mlcc_vf e0, o0, e1, o1;
#define AVG_2X2(ow, ma, mb, mo)                                                              \
    (mlcc_vf_deinterleave(S2_LOAD(r0 + 2 * (ow), ma), S2_LOAD(r0 + 2 * (ow) + VL, mb), &e0,  \
                          &o0),                                                              \
     mlcc_vf_deinterleave(S2_LOAD(r1 + 2 * (ow), ma), S2_LOAD(r1 + 2 * (ow) + VL, mb), &e1,  \
                          &o1),                                                              \
     vf_add(vf_add(vf_add(vf_add(zero, e0), o0), e1), o1) * (vrh * S2_LOAD(rw + (ow), mo)))
    for (; ow + VL <= ow_n; ow += VL) mlcc_vf_store(yr + ow, AVG_2X2(ow, all, all, all));
#ifdef MAX_ROW_S2_MASKED
    if (ow < ow_n) {   /* ow_n - ow < VL outputs from 2 (ow_n - ow) columns */
        const s2_tail t = s2_tail_masks(ow_n - ow, 2 * (ow_n - ow));
        _mm512_mask_storeu_ps(yr + ow, t.mo, (__m512)AVG_2X2(ow, t.ma, t.mb, t.mo));
        return;
    }
#else
    if (ow < ow_n && ow_n >= VL) {   /* the last vector overlapping the one before */
        ow = ow_n - VL;
        mlcc_vf_store(yr + ow, AVG_2X2(ow, all, all, all));
        return;
    }
#endif
#undef AVG_2X2
    for (; ow < ow_n; ow++) {
        float acc = 0.0f;
        acc = ADD_TO(acc, r0[2 * ow]);
        acc = ADD_TO(acc, r0[2 * ow + 1]);
        acc = ADD_TO(acc, r1[2 * ow]);
        acc = ADD_TO(acc, r1[2 * ow + 1]);
        yr[ow] = acc * (rh * rw[ow]);
    }
}
#define AVG_FAST 1
#else
#define AVG_FAST 0
#endif

/* Planes [plane0, plane1) of the pooling. */
static void pool2d_planes(const mlcc_pool2d_params *p, const float *x, const int64_t *taps,
                          float *y, float *scratch, int is_max, const float *inv_count,
                          ptrdiff_t plane0, ptrdiff_t plane1) {
    const ptrdiff_t ih_n = (ptrdiff_t)p->in_h, iw_n = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh_n = (ptrdiff_t)p->out_h, ow_n = (ptrdiff_t)p->out_w;
    const ptrdiff_t kh_n = (ptrdiff_t)p->kernel_h, kw_n = (ptrdiff_t)p->kernel_w;
    const ptrdiff_t sh = (ptrdiff_t)p->stride_h, sw = (ptrdiff_t)p->stride_w;
    const ptrdiff_t dh = (ptrdiff_t)p->dilation_h, dw = (ptrdiff_t)p->dilation_w;
    const ptrdiff_t pt = (ptrdiff_t)p->pad_top, pl = (ptrdiff_t)p->pad_left;
    const float init = is_max ? -FLT_MAX : 0.0f;
    /* Output columns whose first and last kernel columns (hence all) are inside the input. */
    const ptrdiff_t lo0 = first_inside(sw, -pl), lo1 = first_inside(sw, (kw_n - 1) * dw - pl);
    const ptrdiff_t hi0 = end_inside(ow_n, sw, -pl, iw_n);
    const ptrdiff_t hi1 = end_inside(ow_n, sw, (kw_n - 1) * dw - pl, iw_n);
    row_ctx c;
    ptrdiff_t plane, oh, ow;
    c.taps = taps;
    c.lo = lo0 > lo1 ? lo0 : lo1;
    c.hi = hi0 < hi1 ? hi0 : hi1;
    if (c.hi < c.lo) c.hi = c.lo;
    c.pitch = sw == 1 ? iw_n : sw * (ptrdiff_t)p->phase_width;
    if ((is_max || AVG_FAST) && kh_n == 2 && kw_n == 2 && sh == 2 && sw == 2 && dh == 1 &&
        dw == 1 && pt == 0 && pl == 0 && 2 * oh_n <= ih_n && 2 * ow_n <= iw_n) {
        /* 2x2/2 without padding (small CNNs: the digits CNN's 8 x 8 maps; DenseNet's
         * transitions average), every window inside: the rows of all planes in one loop, no
         * row buffer. The same maxima in the same order as max_plane_separable (rows first,
         * from -FLT_MAX); the same sums as sum_row (avg_row_2x2). */
        ptrdiff_t r;
        for (r = plane0 * oh_n; r < plane1 * oh_n; r++) {
            const float *r0 = x + (r / oh_n) * ih_n * iw_n + (r % oh_n) * 2 * iw_n;
            const float *r1 = r0 + iw_n;
            float *yr = y + r * ow_n;
#ifdef AVG_ROW_S2
            if (!is_max) {
                avg_row_2x2(r0, r1, ow_n, inv_count[r % oh_n], inv_count + oh_n, yr);
                continue;
            }
#endif
#ifdef MAX_ROW_S2
            if (ow_n >= S2_MIN_INTERIOR) {
                const float *rows[3];
                rows[0] = r0, rows[1] = rows[2] = r1;
                max_row_s2(rows, iw_n, ow_n, 2, 0, 0, ow_n, yr);
                continue;
            }
#endif
            for (ow = 0; ow < ow_n; ow++) {
                const float t0 = MAX_OF(r0[2 * ow], r1[2 * ow]);
                const float t1 = MAX_OF(r0[2 * ow + 1], r1[2 * ow + 1]);
                yr[ow] = MAX_OF(MAX_OF(-FLT_MAX, t0), t1);
            }
        }
        return;
    }
    for (plane = plane0; plane < plane1; plane++) {
        float *yp = y + plane * oh_n * ow_n;
        c.x = x + plane * ih_n * iw_n;
        c.src = c.x;
        if (is_max && mlcc_maxpool_small(p)) {
            max_plane_small(p, c.x, yp, scratch);
            continue;
        }
        if (is_max && sw > 1) {   /* scratch holds at least in_w floats */
            max_plane_separable(p, c.x, yp, scratch, c.lo, c.hi);
            continue;
        }
#ifdef AVG_ROW_S2
        if (!is_max && sw == 2 && dw == 1 && (kw_n == 2 || kw_n == 3) && kh_n <= 3 &&
            c.hi - c.lo >= S2_MIN_INTERIOR) {
            for (oh = 0; oh < oh_n; oh++) {
                const float *rows[3];
                ptrdiff_t kh, n = 0;
                c.ih0 = oh * sh - pt;
                for (kh = first_inside(dh, c.ih0); kh < end_inside(kh_n, dh, c.ih0, ih_n); kh++)
                    rows[n++] = c.x + (c.ih0 + kh * dh) * iw_n;
                avg_row_s2(rows, n, iw_n, ow_n, kw_n, pl, c.lo, c.hi, inv_count[oh],
                           inv_count + oh_n, yp + oh * ow_n);
            }
            continue;
        }
#endif
        if (sw > 1 && c.hi > c.lo) {
            split_phases(c.x, ih_n, iw_n, sw, (ptrdiff_t)p->phase_width, scratch);
            c.src = scratch;
        }
        for (oh = 0; oh < oh_n; oh++) {
            float *yr = yp + oh * ow_n;
            c.ih0 = oh * sh - pt;
            c.kh_lo = first_inside(dh, c.ih0);
            c.kh_hi = end_inside(kh_n, dh, c.ih0, ih_n);
            if (is_max) {
                if (NARROW_ROWS(c))
                    max_row_narrow(p, &c, init, yr);
                else
                    max_row(p, &c, init, yr);
            } else {
                const float rh = inv_count[oh];
                const float *rw = inv_count + oh_n;
                if (NARROW_ROWS(c))
                    sum_row_narrow(p, &c, init, yr);
                else
                    sum_row(p, &c, init, yr);
                for (ow = 0; ow < ow_n; ow++) yr[ow] *= rh * rw[ow];
            }
        }
    }
}

typedef struct pool2d_job {
    const mlcc_pool2d_params *p;
    const float *x, *inv_count;
    const int64_t *taps;
    float *y, *scratch;
    int is_max, units;
} pool2d_job;

static void pool2d_unit(void *arg, int unit, int thread) {
    const pool2d_job *job = (const pool2d_job *)arg;
    const ptrdiff_t planes = (ptrdiff_t)job->p->planes;
    pool2d_planes(job->p, job->x, job->taps, job->y,
                  job->scratch ? job->scratch + thread * (ptrdiff_t)job->p->scratch_slice : NULL,
                  job->is_max, job->inv_count, planes * unit / job->units,
                  planes * (unit + 1) / job->units);
}

/* By planes on a pool (each thread its slice of scratch), above a quarter of the parallel
 * threshold in taps, as the depthwise convolution: planes are independent, so the split
 * never changes a bit. */
static void pool2d(const mlcc_pool2d_params *p, const float *x, const int64_t *taps, float *y,
                   float *scratch, int is_max, const float *inv_count, mlcc_threadpool *pool) {
    const ptrdiff_t nt = mlcc_threadpool_size(pool) < MLCC_POOL_SLICES ?
                         mlcc_threadpool_size(pool) : MLCC_POOL_SLICES;
    int64_t own[MLCC_POOL_MAX_TAPS];
    pool2d_job job;
    if (taps == NULL && p->stride_w > 1 && p->kernel_w <= MLCC_POOL_MAX_TAPS) {
        /* the table the compiler writes for a static width (pool.h), at this phase_width */
        const ptrdiff_t sw = (ptrdiff_t)p->stride_w;
        ptrdiff_t kw;
        for (kw = 0; kw < (ptrdiff_t)p->kernel_w; kw++) {
            const ptrdiff_t t = kw * (ptrdiff_t)p->dilation_w - (ptrdiff_t)p->pad_left;
            const ptrdiff_t q = div_floor(t, sw);
            own[kw] = (int64_t)((t - q * sw) * (ptrdiff_t)p->phase_width + q);
        }
        taps = own;
    }
    job.p = p, job.x = x, job.inv_count = inv_count, job.taps = taps, job.y = y;
    job.scratch = scratch, job.is_max = is_max;
    job.units = mlcc_parallel_units(nt, (double)p->planes * (double)(p->out_h * p->out_w) *
                                            (double)(p->kernel_h * p->kernel_w),
                                    (double)MLCC_MIN_PARALLEL_MACS / 4, (ptrdiff_t)p->planes);
    if (job.units < 2) {
        pool2d_planes(p, x, taps, y, scratch, is_max, inv_count, 0, (ptrdiff_t)p->planes);
        return;
    }
    mlcc_threadpool_for(pool, pool2d_unit, &job, job.units, (int)nt);
}

void mlcc_f32_maxpool2d(const mlcc_pool2d_params *p, const float *x, const int64_t *tap_offsets,
                        float *y, float *scratch, mlcc_threadpool *pool) {
    pool2d(p, x, tap_offsets, y, scratch, 1, NULL, pool);
}

void mlcc_f32_avgpool2d(const mlcc_pool2d_params *p, const float *x, const int64_t *tap_offsets,
                        const float *inv_count, float *y, float *scratch, mlcc_threadpool *pool) {
    pool2d(p, x, tap_offsets, y, scratch, 0, inv_count, pool);
}

/* The window of output index o along one axis: kernel taps [k_lo, k_hi) are inside. */
static void window_nd(const mlcc_poolnd_params *p, int a, ptrdiff_t o, ptrdiff_t *start,
                      ptrdiff_t *k_lo, ptrdiff_t *k_hi) {
    *start = o * (ptrdiff_t)p->stride[a] - (ptrdiff_t)p->pad[a];
    *k_lo = first_inside((ptrdiff_t)p->dilation[a], *start);
    *k_hi = end_inside((ptrdiff_t)p->kernel[a], (ptrdiff_t)p->dilation[a], *start,
                       (ptrdiff_t)p->in[a]);
}

#define MAXPOOL_ND(NAME, T, LOWEST)                                                          \
    static void NAME(const mlcc_poolnd_params *p, const T *x, T *y, int64_t *indices) {    \
        const ptrdiff_t i0 = (ptrdiff_t)p->in[0], i1 = (ptrdiff_t)p->in[1];                  \
        const ptrdiff_t i2 = (ptrdiff_t)p->in[2], plane_size = i0 * i1 * i2;                 \
        const ptrdiff_t d0 = (ptrdiff_t)p->dilation[0], d1 = (ptrdiff_t)p->dilation[1];      \
        const ptrdiff_t d2 = (ptrdiff_t)p->dilation[2];                                      \
        ptrdiff_t n, o0, o1, o2, k0, k1, k2;                                                 \
        for (n = 0; n < (ptrdiff_t)p->planes; n++) {                                         \
            const T *xp = x + n * plane_size;                                                \
            for (o0 = 0; o0 < (ptrdiff_t)p->out[0]; o0++) {                                  \
                ptrdiff_t s0, a0, b0;                                                        \
                window_nd(p, 0, o0, &s0, &a0, &b0);                                          \
                for (o1 = 0; o1 < (ptrdiff_t)p->out[1]; o1++) {                              \
                    ptrdiff_t s1, a1, b1;                                                    \
                    window_nd(p, 1, o1, &s1, &a1, &b1);                                      \
                    for (o2 = 0; o2 < (ptrdiff_t)p->out[2]; o2++) {                          \
                        ptrdiff_t s2, a2, b2, best = -1;                                     \
                        T acc = LOWEST;                                                      \
                        window_nd(p, 2, o2, &s2, &a2, &b2);                                  \
                        for (k0 = a0; k0 < b0; k0++)                                         \
                            for (k1 = a1; k1 < b1; k1++)                                     \
                                for (k2 = a2; k2 < b2; k2++) {                               \
                                    const ptrdiff_t at = ((s0 + k0 * d0) * i1 + s1 +         \
                                                          k1 * d1) * i2 + s2 + k2 * d2;      \
                                    if (best < 0 ? !(xp[at] < acc) && xp[at] == xp[at]       \
                                                 : xp[at] > acc) {                           \
                                        acc = xp[at];                                        \
                                        best = at;                                           \
                                    }                                                        \
                                }                                                            \
                        *y++ = acc;                                                          \
                        if (indices) {                                                       \
                            ptrdiff_t idx = best;                                            \
                            if (best >= 0 && p->storage_order) {                             \
                                const ptrdiff_t h = best / i2 % i1, w = best % i2;           \
                                idx = best / (i1 * i2) + h * i0 + w * i0 * i1;               \
                            }                                                                \
                            *indices++ = best < 0 ? -1 : (int64_t)(n * plane_size + idx);    \
                        }                                                                    \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

MAXPOOL_ND(maxpool_nd_f32, float, -FLT_MAX)
MAXPOOL_ND(maxpool_nd_u8, uint8_t, 0)
MAXPOOL_ND(maxpool_nd_s8, int8_t, INT8_MIN)

void mlcc_f32_maxpool_nd(const mlcc_poolnd_params *p, const float *x, float *y,
                         int64_t *indices) {
    maxpool_nd_f32(p, x, y, indices);
}

void mlcc_u8_maxpool_nd(const mlcc_poolnd_params *p, const uint8_t *x, uint8_t *y,
                        int64_t *indices) {
    maxpool_nd_u8(p, x, y, indices);
}

void mlcc_s8_maxpool_nd(const mlcc_poolnd_params *p, const int8_t *x, int8_t *y,
                        int64_t *indices) {
    maxpool_nd_s8(p, x, y, indices);
}

static float lp_term(float v, float p) {
    const float a = fabsf(v);
    return p == 1.0f ? a : p == 2.0f ? a * a : powf(a, p);
}

/* The sum over each window of x (lp == 0), times the per-axis reciprocal counts, or of |x|^lp
 * then raised to 1 / lp: AveragePool's and LpPool's general loops. */
static void sum_pool_nd(const mlcc_poolnd_params *p, const float *x, const float *inv_count,
                        float lp, float *y) {
    const ptrdiff_t i0 = (ptrdiff_t)p->in[0], i1 = (ptrdiff_t)p->in[1];
    const ptrdiff_t i2 = (ptrdiff_t)p->in[2], plane_size = i0 * i1 * i2;
    const ptrdiff_t d0 = (ptrdiff_t)p->dilation[0], d1 = (ptrdiff_t)p->dilation[1];
    const ptrdiff_t d2 = (ptrdiff_t)p->dilation[2];
    const float *inv1 = inv_count != NULL ? inv_count + p->out[0] : NULL;
    const float *inv2 = inv1 != NULL ? inv1 + p->out[1] : NULL;
    const float inv_lp = lp != 0.0f ? 1.0f / lp : 0.0f;
    ptrdiff_t n, o0, o1, o2, k0, k1, k2;
    for (n = 0; n < (ptrdiff_t)p->planes; n++) {
        const float *xp = x + n * plane_size;
        for (o0 = 0; o0 < (ptrdiff_t)p->out[0]; o0++) {
            ptrdiff_t s0, a0, b0;
            window_nd(p, 0, o0, &s0, &a0, &b0);
            for (o1 = 0; o1 < (ptrdiff_t)p->out[1]; o1++) {
                ptrdiff_t s1, a1, b1;
                window_nd(p, 1, o1, &s1, &a1, &b1);
                for (o2 = 0; o2 < (ptrdiff_t)p->out[2]; o2++) {
                    ptrdiff_t s2, a2, b2;
                    float acc = 0.0f;
                    window_nd(p, 2, o2, &s2, &a2, &b2);
                    for (k0 = a0; k0 < b0; k0++)
                        for (k1 = a1; k1 < b1; k1++)
                            for (k2 = a2; k2 < b2; k2++) {
                                const float v = xp[((s0 + k0 * d0) * i1 + s1 + k1 * d1) * i2 +
                                                   s2 + k2 * d2];
                                acc += lp == 0.0f ? v : lp_term(v, lp);
                            }
                    if (lp == 0.0f)
                        *y++ = acc * (inv_count[o0] * inv1[o1] * inv2[o2]);
                    else
                        *y++ = lp == 1.0f ? acc : lp == 2.0f ? sqrtf(acc) : powf(acc, inv_lp);
                }
            }
        }
    }
}

void mlcc_f32_avgpool_nd(const mlcc_poolnd_params *p, const float *x, const float *inv_count,
                         float *y) {
    sum_pool_nd(p, x, inv_count, 0.0f, y);
}

void mlcc_f32_lppool_nd(const mlcc_lppool_params *lp, const float *x, float *y) {
    sum_pool_nd(&lp->pool, x, NULL, lp->p, y);
}
