/* Single-precision matrix multiplication with a fused bias and activation epilogue. */
#ifndef MLCC_GEMM_H
#define MLCC_GEMM_H

#include "mlcc_kernel.h"

/* C[i][j] = act(alpha * sum_p A[i][p] * B[p][j] + beta * bias[i][j]) for i < m, j < n, where
 *   A[i][p]    = a[i * a_row_stride + p * a_col_stride]   (any strides: transposed A is free)
 *   B[p][j]    = b[p * ldb + j]                          (rows contiguous)
 *   C[i][j]    = c[i * ldc + j]
 *   bias[i][j] = bias[i * bias_row_stride + j * bias_col_stride]  (0 strides broadcast; NULL: none)
 * c must not overlap a, b or bias. All k rows of B are readable up to ldb (>= n): a constant B
 * of a one-row product is stored with its rows padded to whole cache lines (mlcc/ops/gemm.py),
 * which its last partial vector of columns then reads in place.
 * b_finite: B holds no infinity or NaN (a constant, checked at compile time). A one-row product
 * then skips the rows of B whose A value is zero (the ReLU outputs before a classifier: about
 * half), which changes no bit: each such row adds 0 * B = +-0, and a sum that starts at +0
 * never becomes -0, so adding +-0 leaves it as it is. */
typedef struct mlcc_gemm_params {
    int64_t m, n, k;
    int64_t a_row_stride, a_col_stride;
    int64_t ldb, ldc;
    int64_t bias_row_stride, bias_col_stride;
    float alpha, beta;
    mlcc_act act;
    int32_t b_finite;
} mlcc_gemm_params;

void mlcc_f32_gemm(const mlcc_gemm_params *p, const float *a, const float *b, const float *bias,
                   float *c);

/* The same product on pool (NULL: the calling thread only), cut into blocks of columns and rows
 * by the shape alone: the same bits as mlcc_f32_gemm on any number of threads. Products of
 * fewer than MLCC_MIN_PARALLEL_MACS multiply-adds run on the caller. */
void mlcc_f32_gemm__threaded(const mlcc_gemm_params *p, const float *a, const float *b,
                             const float *bias, float *c, mlcc_threadpool *pool);

/* The same product with B (constant weights: MatMul's and Gemm's B) stored at compile time in
 * column panels of MLCC_GEMM_B_PANEL columns (mlcc/ops/gemm.py pack_b_panels):
 *   B[p][j] = b_panels[(j / W) * k * W + p * W + j % W],  W = MLCC_GEMM_B_PANEL,
 * columns past n zero; p->ldb is not read. The register tiles' B strips are then contiguous in
 * the order the k loop walks them, so weights that come from memory at every call (MiniLM's
 * 85 MB) stream at the prefetchers' speed rather than as 128-byte pieces rows apart: 32 x 384
 * x 1536 0.83x. The same sums in the same order as mlcc_f32_gemm__threaded on B in rows.
 * 16 columns on 256-bit vectors, the width of the tile there (2 vectors): each tile's strip of
 * B is then contiguous, where in panels of 32 it read 64 of every 128 bytes and its lines fell
 * on half the L1's sets (Zen 3, MiniLM's products: 1.02-1.24x). Elsewhere 32 (the AVX-512 tile;
 * 128-bit targets not measured). Target.gemm_b_panel() says the same to the compiler. */
#if MLCC_HAVE_VECTORS && MLCC_VECTOR_BYTES == 32
#define MLCC_GEMM_B_PANEL 16
#else
#define MLCC_GEMM_B_PANEL 32
#endif
void mlcc_f32_gemm__panels_threaded(const mlcc_gemm_params *p, const float *a,
                                    const float *b_panels, const float *bias, float *c,
                                    mlcc_threadpool *pool);
/* The same with panels of `width` columns, a multiple of 2 vectors (recurrent.c's, 32 on every
 * target). */
void mlcc_f32_gemm__panels_of_threaded(const mlcc_gemm_params *p, const float *a,
                                       const float *b_panels, ptrdiff_t width,
                                       const float *bias, float *c, mlcc_threadpool *pool);

/* Batched form (MatMul): batch b multiplies a + a_offsets[b] * a_matrix,
 * b + b_offsets[b] * b_matrix into c + b * c_batch_stride. The offsets are tables in the
 * weight blob, counted in matrices, so that any broadcasting of batch dimensions costs nothing
 * at run time, and one table holds for matrices of any size (a_matrix = m * k and
 * b_matrix = k * n elements, over bounded dynamic sizes: attention over a KV cache). Threaded
 * as mlcc_f32_gemm__threaded (units: batches x blocks). */
typedef struct mlcc_batched_gemm_params {
    mlcc_gemm_params gemm;
    int64_t batch;
    int64_t c_batch_stride;
    int64_t a_matrix, b_matrix;
} mlcc_batched_gemm_params;

void mlcc_f32_batched_gemm(const mlcc_batched_gemm_params *p, const float *a, const float *b,
                           const float *bias, float *c, const int64_t *a_offsets,
                           const int64_t *b_offsets, mlcc_threadpool *pool);

/* The packed GEMM: A (the constant operand, weights) packed at compile time, B packed at run
 * time into the panels the micro-kernel reads, both contiguous in the order the k loop walks.
 *
 *   A packed: k cut into MLCC_GEMM_KC-deep blocks, block-major (block k0 at k0 * a_rows, where
 *             a_rows is the rows rounded up to MLCC_GEMM_MR); within a block of depth kc,
 *             a_rows / MR panels of kc x MLCC_GEMM_MR floats (panel i, depth p, row r holds
 *             A[i * MR + r][k0 + p]; rows past m are zero), so that the weights one k block
 *             streams are contiguous (weights larger than L2 came from memory 1.6x slower in
 *             whole-depth panels). mlcc/ops/gemm.py pack_a() writes it.
 *   B panels: ceil(n / MLCC_GEMM_NR) panels of k x MLCC_GEMM_NR floats (panel j, depth p, column
 *             t holds B[p][j * NR + t]; columns past n are zero).
 *
 * MLCC_GEMM_MR is fixed (the blob's layout must not depend on the vector width); MLCC_GEMM_NR is
 * the vector width times the vectors per tile row (MLCC_GEMM_NV), and the register tile is
 * MLCC_GEMM_TILE_ROWS x NV vectors of accumulators, sized to the vector registers:
 *   - 32 registers (AVX-512, aarch64): 8 rows x 2 vectors (16 accumulators, 2 B vectors and a
 *     broadcast of A);
 *   - 16 registers of 256 bits (x86 AVX2): 6 rows x 2 vectors (12 + 2 + 1), the tile of BLIS
 *     and onnxruntime's FMA3 kernel. On a Zen 3 (92 GFLOP/s a core), 8 x 1 (8 accumulators:
 *     the FMA latency times 2 units, no slack; 9 loads per 8 FMAs) ran ResNet's and
 *     MobileNetV2's products at 56-78 GFLOP/s, 6 x 2 (8 loads per 12 FMAs) at 59-89: 1.05-1.35x,
 *     whole models 0.80-0.90x the time. A 6-row tile straddles two A panels where it starts
 *     past a panel's second row (packed_row_offset, gemm.c);
 *   - otherwise (SSE2, 16 registers of 128 bits): 8 x 1.
 * A target may choose its own tile (the target file's `gemm_tile`, passed as
 * -DMLCC_GEMM_TILE_ROWS and -DMLCC_GEMM_NV): wasm takes 4 rows x 2 vectors, each 8-row A panel
 * then read as two 4-row halves. V8 issues a k step's broadcasts of A before its multiplies,
 * so 8 x 1 needs 17 of the 16 xmm registers and keeps an accumulator on the stack; 4 x 2 needs
 * 14 and half the broadcasts per multiply (1.6x the speed: README, wasm Speed). Every output
 * is still one product sum in k order, so the tile shape never changes a result. */
#define MLCC_GEMM_MR 8
#if MLCC_HAVE_VECTORS
#if MLCC_VECTOR_BYTES >= 64 || defined(__aarch64__)
#define MLCC_VECTOR_REGISTERS 32
#else
#define MLCC_VECTOR_REGISTERS 16
#endif
#ifndef MLCC_GEMM_NV
#if MLCC_VECTOR_REGISTERS == 32 || MLCC_VECTOR_BYTES == 32
#define MLCC_GEMM_NV 2
#else
#define MLCC_GEMM_NV 1
#endif
#endif
#define MLCC_GEMM_NR (MLCC_GEMM_NV * MLCC_VF_LANES)
#else
#define MLCC_GEMM_NR 8
#endif
/* Rows of C per tile of the packed GEMM: a divisor of MLCC_GEMM_MR (the tile reads rows
 * [r0, r0 + TILE_ROWS) of an A panel), or 6 (tiles that may straddle two panels). */
#ifndef MLCC_GEMM_TILE_ROWS
#if MLCC_HAVE_VECTORS && MLCC_VECTOR_REGISTERS == 16 && MLCC_GEMM_NV == 2
#define MLCC_GEMM_TILE_ROWS 6
#else
#define MLCC_GEMM_TILE_ROWS MLCC_GEMM_MR
#endif
#endif
#if MLCC_GEMM_MR % MLCC_GEMM_TILE_ROWS != 0 && MLCC_GEMM_TILE_ROWS != 6
#error "MLCC_GEMM_TILE_ROWS must divide MLCC_GEMM_MR, or be 6"
#endif
/* Rows per tile of the kernels whose tiles read one A panel only (conv.c's implicit GEMMs):
 * TILE_ROWS, or 4 where that is 6. */
#if MLCC_GEMM_TILE_ROWS == 6
#define MLCC_GEMM_PANEL_ROWS 4
#else
#define MLCC_GEMM_PANEL_ROWS MLCC_GEMM_TILE_ROWS
#endif
/* Depth of one k block: the B panel (MLCC_GEMM_KC x NR) stays in L1 while A panels stream.
 * A constant, not derived from the cache size, so that every target sums in the same order. */
#define MLCC_GEMM_KC 256
/* Rows of A per block: MC x KC floats (256 KiB) stay in L2. A multiple of MLCC_GEMM_MR. */
#define MLCC_GEMM_MC 256

/* C[i][j] = act(sum_p A[a_row0 + i][p] * B[p][j] + bias[i]) for i < m, j < n, where A (a_rows
 * rows in all, packed) starts at a_packed and a_row0 is a multiple of MLCC_GEMM_MR;
 * C[i][j] = c[i * ldc + j]. bias may be NULL. */
void mlcc_f32_gemm__packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed,
                           ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b_panels,
                           const float *bias, const mlcc_act *act, float *c, ptrdiff_t ldc);

/* The same with a residual added in the epilogue, in registers, before the activation:
 * C[i][j] = act(sum + bias[i] + res[i * ldc + j]) (the order of an unfused Add after the GEMM,
 * so the same bits). res must not overlap c. */
void mlcc_f32_gemm_residual__packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed,
                                    ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b_panels,
                                    const float *bias, const float *res, const mlcc_act *act,
                                    float *c, ptrdiff_t ldc);

#if MLCC_HAVE_VECTORS && !defined(__wasm_simd128__)
/* The activation of a register tile of n (a constant) vectors, its kind switched once: ReLU and
 * Clip inline, the others through mlcc_vf_act_n (gemm.c), out of line and on a copy, so that
 * the tile's accumulators stay in registers (GCC spilled them all when SiLU's exp was inlined
 * beside them, or when their address reached a call). Lane for lane mlcc_vf_act: the same bits.
 * (wasm has its own, mlcc_wasm_act_vecs in mlcc_kernel.h.) */
void mlcc_vf_act_n(const mlcc_act *act, mlcc_vf *x, ptrdiff_t n);

static inline __attribute__((always_inline)) void mlcc_tile_act(const mlcc_act *act, mlcc_vf *x,
                                                                const int n) {
    int i;
    switch (act->kind) {
    case MLCC_ACT_NONE: return;
    case MLCC_ACT_RELU: {
        const mlcc_vf zero = mlcc_vf_splat(0.0f);
        for (i = 0; i < n; i++) x[i] = mlcc_vf_select(x[i] > zero, x[i], zero);
        return;
    }
    case MLCC_ACT_CLIP: {
        const mlcc_vf lo = mlcc_vf_splat(act->alpha), hi = mlcc_vf_splat(act->beta);
        for (i = 0; i < n; i++) x[i] = mlcc_vf_select(x[i] < lo, lo, mlcc_vf_select(x[i] > hi, hi, x[i]));
        return;
    }
    default: {
        mlcc_vf t[MLCC_GEMM_TILE_ROWS * MLCC_GEMM_NV];   /* a copy: x never reaches the call */
        for (i = 0; i < n; i++) t[i] = x[i];
        mlcc_vf_act_n(act, t, n);
        for (i = 0; i < n; i++) x[i] = t[i];
    }
    }
}
#endif

#endif /* MLCC_GEMM_H */
