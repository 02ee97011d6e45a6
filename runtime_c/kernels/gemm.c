/* Register-blocked GEMM. The C tile of MR rows x NR columns stays in vector registers while the
 * k loop streams a column of A (broadcast) and a row of B; K is cut into KC-deep blocks so that
 * the KC x NR strip of B being reused stays in L1. */
#include "gemm.h"
#if defined(__FMA__)
#include <immintrin.h>
#endif

/* 8 rows x 2 vectors where there are 32 vector registers (AVX-512, aarch64: 16 accumulators,
 * 2 B vectors and a broadcast), else 6 x 2 (SSE2, AVX2: 12 + 3 of 16), or fewer rows where the
 * target chose a smaller packed tile (gemm_tile, gemm.h): in wasm, V8 holds 6 x 2's twelve
 * accumulators and six broadcasts of A only by spilling; 4 rows ran MiniLM (128 tokens, 36
 * MatMuls) in 0.71 of the time in node. 8 rows: the 32 and 128 rows of MiniLM's products are
 * whole tiles (6 left a tile of 2 rows that streamed the B strip once more for 2 rows) and
 * each B load feeds 8 FMAs: 32 x 384 x 1536 0.90x, with B in panels (below) 0.93x. The tile
 * never changes a result: every element is one sum in k order per k block. */
#if MLCC_GEMM_TILE_ROWS < 6
#define MR MLCC_GEMM_TILE_ROWS
#elif MLCC_HAVE_VECTORS && MLCC_VECTOR_REGISTERS == 32
#define MR 8
#else
#define MR 6
#endif
#define KC 256

#if MLCC_HAVE_VECTORS
#define NR (2 * MLCC_VF_LANES)

/* acc[r] (two vectors) = sum over p < kc of A[r][p] * B[p][0..NR) */
static inline void tile_full(ptrdiff_t mr, ptrdiff_t kc, const float *a, ptrdiff_t ars,
                             ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c,
                             ptrdiff_t ldc, float alpha, int accumulate) {
    mlcc_vf acc0[MR], acc1[MR];
    ptrdiff_t r, p;
    for (r = 0; r < MR; r++) acc0[r] = acc1[r] = mlcc_vf_splat(0.0f);
    for (p = 0; p < kc; p++) {
        const mlcc_vf b0 = mlcc_vf_load(b + p * ldb);
        const mlcc_vf b1 = mlcc_vf_load(b + p * ldb + MLCC_VF_LANES);
        for (r = 0; r < mr; r++) {
            const mlcc_vf av = mlcc_vf_splat(a[r * ars + p * acs]);
            acc0[r] += av * b0;
            acc1[r] += av * b1;
        }
    }
    for (r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        mlcc_vf c0 = acc0[r] * alpha, c1 = acc1[r] * alpha;
        if (accumulate) {
            c0 += mlcc_vf_load(cr);
            c1 += mlcc_vf_load(cr + MLCC_VF_LANES);
        }
        mlcc_vf_store(cr, c0);
        mlcc_vf_store(cr + MLCC_VF_LANES, c1);
    }
}
#if MLCC_GEMM_B_PANEL % (MLCC_VECTOR_BYTES / 4 * 2) != 0
#error "a B panel must hold whole NR-column tiles"
#endif
#else
#define NR 8
#endif

/* The same product for a tile narrower than NR columns (the right edge), in scalar code. */
static void tile_edge(ptrdiff_t mr, ptrdiff_t nr, ptrdiff_t kc, const float *a, ptrdiff_t ars,
                      ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                      float alpha, int accumulate) {
    ptrdiff_t r, j, p;
    for (r = 0; r < mr; r++) {
        float acc[NR];
        for (j = 0; j < nr; j++) acc[j] = 0.0f;
        for (p = 0; p < kc; p++) {
            const float av = a[r * ars + p * acs];
            const float *bp = b + p * ldb;
            for (j = 0; j < nr; j++) acc[j] += av * bp[j];
        }
        for (j = 0; j < nr; j++) c[r * ldc + j] = alpha * acc[j] + (accumulate ? c[r * ldc + j] : 0.0f);
    }
}

#if MLCC_HAVE_VECTORS
/* One row of C (a matrix-vector product: batch-1 Gemm, the classifiers of CNNs), columns
 * [0, n) of one k block: 8, then 4 and 2 vectors of columns at a time, so that each step of p reads
 * a contiguous run of a B row and feeds independent accumulators (tile_full with one row has
 * two chains of dependent FMAs, and reads 2 vectors per B row, rows ldb apart); then the
 * last vector and partial vector of columns. Only for products of one row, so
 * that every element of a product is computed by the same code whatever the partition into
 * blocks (a one-row block of a larger product keeps the tiles). */
#define GEMV_VECS 8
/* One vector of c = alpha * acc (+ c): one copy of this code, never inlined nor cloned per
 * width, so that the compiler's choice of contracting it into an FMA is the same for every
 * column whatever the cut of the columns into blocks (inlined into each width, or cloned per
 * constant count, it differed: 2 threads gave other bits). Called once per vector and k block. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noinline, noclone))
#else
__attribute__((noinline))
#endif
static void gemv_store(float *c, const mlcc_vf *acc, float alpha, int accumulate) {
    mlcc_vf cv = *acc * alpha;
    if (accumulate) cv += mlcc_vf_load(c);
    mlcc_vf_store(c, cv);
}

/* The rows of B that one k block of a one-row product reads, as bits: row p is read if bit
 * p % 64 of word[p / 64] is set. */
typedef struct gemv_rows {
    uint64_t word[KC / 64];
    ptrdiff_t words;
} gemv_rows;

/* Rows p < kc of the block, those whose A value is zero left out where skip_zeros (b_finite in
 * gemm.h: they change no bit). Bits rather than a list of rows: after a ReLU, which A values
 * are zero is random, and the loops over the rows then take no branch on it. */
static void gemv_rows_of(gemv_rows *rows, ptrdiff_t kc, const float *a, ptrdiff_t acs,
                         int skip_zeros) {
    ptrdiff_t w, p;
    rows->words = (kc + 63) / 64;
    for (w = 0; w < rows->words; w++) {
        const ptrdiff_t end = kc - w * 64 < 64 ? kc - w * 64 : 64;
        uint64_t bits = 0;
        for (p = 0; p < end; p++)
            bits |= (uint64_t)(!skip_zeros || a[(w * 64 + p) * acs] != 0.0f) << p;
        rows->word[w] = bits;
    }
}

/* nv vectors of columns from b: nv independent chains of FMAs over the rows in order (inlined
 * with a constant nv) */
static inline void gemv_vecs(ptrdiff_t nv, const gemv_rows *rows, const float *a,
                             ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c,
                             float alpha, int accumulate) {
    mlcc_vf acc[GEMV_VECS];
    ptrdiff_t w, v;
    for (v = 0; v < nv; v++) acc[v] = mlcc_vf_splat(0.0f);
    for (w = 0; w < rows->words; w++) {
        uint64_t bits = rows->word[w];
        if (bits == ~(uint64_t)0) {
            ptrdiff_t p;
            for (p = w * 64; p < w * 64 + 64; p++) {
                const mlcc_vf av = mlcc_vf_splat(a[p * acs]);
                const float *bp = b + p * ldb;
                for (v = 0; v < nv; v++) acc[v] += av * mlcc_vf_load(bp + v * MLCC_VF_LANES);
            }
            continue;
        }
        while (bits != 0) {
            const ptrdiff_t p = w * 64 + __builtin_ctzll(bits);
            const mlcc_vf av = mlcc_vf_splat(a[p * acs]);
            const float *bp = b + p * ldb;
            bits &= bits - 1;
            for (v = 0; v < nv; v++) acc[v] += av * mlcc_vf_load(bp + v * MLCC_VF_LANES);
        }
    }
    for (v = 0; v < nv; v++) gemv_store(c + v * MLCC_VF_LANES, &acc[v], alpha, accumulate);
}

/* One row of the last r < one vector of columns: read in place, past the r columns (lanes
 * dropped at the store), while the vector ends within the block's rows (limit floats from b),
 * else through a zero-padded copy. */
static inline mlcc_vf gemv_tail_row(const float *b, ptrdiff_t offset, ptrdiff_t r,
                                    ptrdiff_t limit) {
    float row[MLCC_VF_LANES];
    ptrdiff_t t;
    if (offset + MLCC_VF_LANES <= limit) return mlcc_vf_load(b + offset);
    for (t = 0; t < MLCC_VF_LANES; t++) row[t] = t < r ? b[offset + t] : 0.0f;
    return mlcc_vf_load(row);
}

/* The last r < one vector of columns (the digits models' 10 logits), whose rows are readable
 * for `readable` floats from b (r, or up to the padded end of a constant B's rows: every row
 * is then read in place). One vector of columns is one chain of FMAs as deep as the block, so
 * row p goes to chain p % 4, the four added at the end: 64 rows took the latency of 64 FMAs.
 * Every row, even where A is zero: one vector a row is little to skip, and the sums then do
 * not depend on which rows were skipped. Only the last columns of a product come here,
 * whatever the cut of its columns into blocks (the cuts fall on whole tiles), so their order
 * of sums is always this one. The same store as the other columns (gemv_store, through a
 * copy of c). */
static void gemv_tail(ptrdiff_t r, ptrdiff_t readable, ptrdiff_t kc, const float *a,
                      ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c, float alpha,
                      int accumulate) {
    const ptrdiff_t limit = (kc - 1) * ldb + readable;
    /* rows p < in_place are read in place (p * ldb + lanes <= limit) */
    const ptrdiff_t in_place = limit < MLCC_VF_LANES ? 0 : (limit - MLCC_VF_LANES) / ldb + 1;
    float out[MLCC_VF_LANES];
    mlcc_vf acc0 = mlcc_vf_splat(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0, sum;
    ptrdiff_t p, t;
#define IN_PLACE_ROW(q) (mlcc_vf_splat(a[(q) * acs]) * mlcc_vf_load(b + (q) * ldb))
    for (p = 0; p + 4 <= kc && p + 4 <= in_place; p += 4) {
        acc0 += IN_PLACE_ROW(p);
        acc1 += IN_PLACE_ROW(p + 1);
        acc2 += IN_PLACE_ROW(p + 2);
        acc3 += IN_PLACE_ROW(p + 3);
    }
#undef IN_PLACE_ROW
#define TAIL_ROW(q) (mlcc_vf_splat(a[(q) * acs]) * gemv_tail_row(b, (q) * ldb, r, limit))
    for (; p + 4 <= kc; p += 4) {
        acc0 += TAIL_ROW(p);
        acc1 += TAIL_ROW(p + 1);
        acc2 += TAIL_ROW(p + 2);
        acc3 += TAIL_ROW(p + 3);
    }
    if (p < kc) acc0 += TAIL_ROW(p);
    if (p + 1 < kc) acc1 += TAIL_ROW(p + 1);
    if (p + 2 < kc) acc2 += TAIL_ROW(p + 2);
#undef TAIL_ROW
    sum = (acc0 + acc1) + (acc2 + acc3);
    for (t = 0; t < MLCC_VF_LANES; t++) out[t] = t < r ? c[t] : 0.0f;
    gemv_store(out, &sum, alpha, accumulate);
    for (t = 0; t < r; t++) c[t] = out[t];
}

/* Columns [0, n) of one k block of depth kc, B's rows readable for `readable` >= n floats */
static void gemv_block(ptrdiff_t n, ptrdiff_t readable, ptrdiff_t kc, const float *a,
                       ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c, float alpha,
                       int accumulate, int skip_zeros) {
    const ptrdiff_t whole = n / NR * NR;   /* a multiple of 2 vectors */
    ptrdiff_t j = 0;
    gemv_rows rows;
    gemv_rows_of(&rows, kc, a, acs, skip_zeros);
    for (; j + 8 * MLCC_VF_LANES <= whole; j += 8 * MLCC_VF_LANES)
        gemv_vecs(8, &rows, a, acs, b + j, ldb, c + j, alpha, accumulate);
    if (j + 4 * MLCC_VF_LANES <= whole) {
        gemv_vecs(4, &rows, a, acs, b + j, ldb, c + j, alpha, accumulate);
        j += 4 * MLCC_VF_LANES;
    }
    if (j < whole) {
        gemv_vecs(2, &rows, a, acs, b + j, ldb, c + j, alpha, accumulate);
        j += 2 * MLCC_VF_LANES;
    }
    if (j + MLCC_VF_LANES <= n) {
        gemv_vecs(1, &rows, a, acs, b + j, ldb, c + j, alpha, accumulate);
        j += MLCC_VF_LANES;
    }
    if (j < n)
        gemv_tail(n - j, readable - j, kc, a, acs, b + j, ldb, c + j, alpha, accumulate);
}
#endif

/* One copy of the code that computes an element, whatever calls it: inlined (or cloned per
 * constant argument) into its callers, the compiler may contract alpha * sum + c or beta * bias
 * + c into an FMA in one copy and not another (gemv_store below). gemm_block takes the strip
 * or the k-block order by the rows of its block (a cut of the product into units can change
 * that) and is reached with B in rows or in panels; the ASan build gave the panels other bits
 * than the rows until these two were kept out of line. */
#if defined(__GNUC__) && !defined(__clang__)
#define ONE_COPY __attribute__((noinline, noclone))
#elif defined(__GNUC__)
#define ONE_COPY __attribute__((noinline))
#else
#define ONE_COPY
#endif

/* Bias and activation of C[i0, i1) x [j0, j1), once its sums are complete. Per element the
 * same operations wherever the range falls (mlcc_act_apply's tail goes through a padded vector,
 * the same code as its body). */
ONE_COPY
static void block_epilogue(const mlcc_gemm_params *p, const float *bias, float *c, ptrdiff_t i0,
                           ptrdiff_t i1, ptrdiff_t j0, ptrdiff_t j1) {
    const ptrdiff_t ldc = (ptrdiff_t)p->ldc;
    ptrdiff_t i, j;
    for (i = i0; i < i1; i++) {
        float *ci = c + i * ldc + j0;
        if (bias != NULL) {
            const ptrdiff_t bcs = (ptrdiff_t)p->bias_col_stride;
            const float *bi = bias + i * (ptrdiff_t)p->bias_row_stride + j0 * bcs;
            const float beta = p->beta;
            if (bcs == 0) {
                const float v = beta * bi[0];
                for (j = 0; j < j1 - j0; j++) ci[j] += v;
            } else {
                for (j = 0; j < j1 - j0; j++) ci[j] += beta * bi[j * bcs];
            }
        }
        mlcc_act_apply(&p->act, ci, j1 - j0);
    }
}

/* Rows [i0, i1) x columns [j, j + nr) of C, k block k0 (depth kc) */
ONE_COPY
static void strip_kblock(const mlcc_gemm_params *p, const float *a, const float *b, float *c,
                         ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t j, ptrdiff_t nr, ptrdiff_t k0,
                         ptrdiff_t bw) {
    const ptrdiff_t k = (ptrdiff_t)p->k, kc = k - k0 < KC ? k - k0 : KC;
    const ptrdiff_t ars = (ptrdiff_t)p->a_row_stride, acs = (ptrdiff_t)p->a_col_stride;
    const ptrdiff_t ldb = bw ? bw : (ptrdiff_t)p->ldb, ldc = (ptrdiff_t)p->ldc;
    const int accumulate = k0 > 0;
    const float *ak = a + k0 * acs;
    /* column j of block k0's rows */
    const float *bj = bw ? b + (j / bw) * k * bw + k0 * bw + j % bw : b + k0 * ldb + j;
    ptrdiff_t i;
    for (i = i0; i < i1; i += MR) {
        const ptrdiff_t mr = i1 - i < MR ? i1 - i : MR;
#if MLCC_HAVE_VECTORS
        if (nr == NR) {
            /* one copy per row count: with mr a constant the accumulators stay in registers
             * (a variable mr kept them in memory: 5 x 512 x 257 took 1.9x onnxruntime's time) */
#define TILE_ROWS(rows)                                                                       \
            case rows:                                                                        \
                tile_full(rows, kc, ak + i * ars, ars, acs, bj, ldb, c + i * ldc + j, ldc,    \
                          p->alpha, accumulate);                                              \
                break;
            switch (mr) {
            TILE_ROWS(1)
#if MR > 1
            TILE_ROWS(2)
#endif
#if MR > 2
            TILE_ROWS(3)
#endif
#if MR > 3
            TILE_ROWS(4)
#endif
#if MR > 4
            TILE_ROWS(5)
#endif
#if MR > 5
            TILE_ROWS(6)
#endif
#if MR > 6
            TILE_ROWS(7)
#endif
#if MR > 7
            TILE_ROWS(8)
#endif
            default:
                tile_full(mr, kc, ak + i * ars, ars, acs, bj, ldb, c + i * ldc + j, ldc,
                          p->alpha, accumulate);
            }
#undef TILE_ROWS
            continue;
        }
#endif
        tile_edge(mr, nr, kc, ak + i * ars, ars, acs, bj, ldb, c + i * ldc + j, ldc, p->alpha,
                  accumulate);
    }
}

/* A block of A (rows x depth) up to this many floats (256 KiB) is read whole for each strip of
 * NR columns, all k blocks of the strip in turn and then its epilogue, while the strip of C
 * (rows x NR) stays in L1: MiniLM's 32 x 1536 x 384 products had gone over all of C (and the
 * bias and GELU passes over it again) once per k block. Larger blocks of A go k block by k
 * block over all strips, so that the block of A is what stays in cache. Each element is summed
 * the same way in both orders. */
#define STRIP_A_FLOATS (64 * 1024)

/* C[i0, i1) x [j0, j1) with its bias and activation: j0 a multiple of NR, the order of the sums
 * for an element (k blocks in order, then bias, then activation) the same wherever the block
 * boundaries fall, so that any partition into blocks gives the same bits. bw: 0 for B in rows
 * (ldb apart), MLCC_GEMM_B_PANEL for B in column panels (gemm.h): a tile of NR columns then
 * reads one panel's rows, bw floats apart, and the order of the sums is the same. */
static void gemm_block(const mlcc_gemm_params *p, const float *a, const float *b,
                       const float *bias, float *c, ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t j0,
                       ptrdiff_t j1, ptrdiff_t bw) {
    const ptrdiff_t k = (ptrdiff_t)p->k;
    const ptrdiff_t ldc = (ptrdiff_t)p->ldc;
    ptrdiff_t i, j, k0;

    if (k == 0) {
        for (i = i0; i < i1; i++)
            for (j = j0; j < j1; j++) c[i * ldc + j] = 0.0f;
    }
#if MLCC_HAVE_VECTORS
    if (p->m == 1 && bw == 0) {   /* not a one-row block of a larger product: its bits */
        const ptrdiff_t ars = (ptrdiff_t)p->a_row_stride, acs = (ptrdiff_t)p->a_col_stride;
        const ptrdiff_t ldb = (ptrdiff_t)p->ldb;
        for (k0 = 0; k0 < k; k0 += KC)
            gemv_block(j1 - j0, ldb - j0, k - k0 < KC ? k - k0 : KC, a + k0 * acs + i0 * ars,
                       acs, b + k0 * ldb + j0, ldb, c + i0 * ldc + j0, p->alpha, k0 > 0,
                       p->b_finite);
        block_epilogue(p, bias, c, i0, i1, j0, j1);
        return;
    }
#endif
    if ((double)(i1 - i0) * (double)k <= (double)STRIP_A_FLOATS) {
        for (j = j0; j < j1; j += NR) {
            const ptrdiff_t nr = j1 - j < NR ? j1 - j : NR;
            for (k0 = 0; k0 < k; k0 += KC) strip_kblock(p, a, b, c, i0, i1, j, nr, k0, bw);
            block_epilogue(p, bias, c, i0, i1, j, j + nr);
        }
        return;
    }
    for (k0 = 0; k0 < k; k0 += KC)
        for (j = j0; j < j1; j += NR)
            strip_kblock(p, a, b, c, i0, i1, j, j1 - j < NR ? j1 - j : NR, k0, bw);
    block_epilogue(p, bias, c, i0, i1, j0, j1);
}

void mlcc_f32_gemm(const mlcc_gemm_params *p, const float *a, const float *b, const float *bias,
                   float *c) {
    gemm_block(p, a, b, bias, c, 0, (ptrdiff_t)p->m, 0, (ptrdiff_t)p->n, 0);
}

/* The threaded forms cut each product into at most GEMM_UNITS blocks: by ranges of NR-column
 * tiles first (each unit then streams its own strip of B, the larger operand in the MatMuls of
 * transformers), then by ranges of MR-row tiles when there are fewer column tiles than units.
 * The cut depends on the shape only, never on the pool; and since gemm_block gives the same
 * bits for any cut, results are those of mlcc_f32_gemm on any number of threads, which is what
 * runs on one thread (one block: 5-15% faster than 24 blocks on MiniLM's products). */
#define GEMM_UNITS 16

typedef struct gemm_job {
    const mlcc_gemm_params *p;
    const float *a, *b, *bias;
    float *c;
    const int64_t *a_offsets, *b_offsets;   /* NULL: one product; in matrices of: */
    int64_t a_matrix, b_matrix, c_batch_stride;
    ptrdiff_t bw;                            /* gemm_block's B layout */
    ptrdiff_t col_tiles, row_tiles, col_units, row_units;
} gemm_job;

static void gemm_job_init(gemm_job *job, const mlcc_gemm_params *p) {
    job->p = p;
    job->col_tiles = ((ptrdiff_t)p->n + NR - 1) / NR;
    job->row_tiles = ((ptrdiff_t)p->m + MR - 1) / MR;
    job->col_units = job->col_tiles < GEMM_UNITS ? job->col_tiles : GEMM_UNITS;
    if (job->col_units < 1) job->col_units = 1;
    job->row_units = (GEMM_UNITS + job->col_units - 1) / job->col_units;
    if (job->row_units > job->row_tiles) job->row_units = job->row_tiles;
    if (job->row_units < 1) job->row_units = 1;
}

static void gemm_unit(void *arg, int unit, int thread) {
    const gemm_job *job = (const gemm_job *)arg;
    const mlcc_gemm_params *p = job->p;
    const ptrdiff_t per = job->col_units * job->row_units;
    const ptrdiff_t t = unit / per, u = unit % per;
    const ptrdiff_t cu = u % job->col_units, ru = u / job->col_units;
    const ptrdiff_t m = (ptrdiff_t)p->m, n = (ptrdiff_t)p->n;
    ptrdiff_t i0 = job->row_tiles * ru / job->row_units * MR;
    ptrdiff_t i1 = job->row_tiles * (ru + 1) / job->row_units * MR;
    ptrdiff_t j0 = job->col_tiles * cu / job->col_units * NR;
    ptrdiff_t j1 = job->col_tiles * (cu + 1) / job->col_units * NR;
    const float *a = job->a, *b = job->b;
    float *c = job->c;
    (void)thread;
    if (i1 > m) i1 = m;
    if (j1 > n) j1 = n;
    if (i0 >= i1 || j0 >= j1) return;
    if (job->a_offsets != NULL) {
        a += job->a_offsets[t] * job->a_matrix;
        b += job->b_offsets[t] * job->b_matrix;
        c += t * job->c_batch_stride;
    }
    gemm_block(p, a, b, job->bias, c, i0, i1, j0, j1, job->bw);
}

/* Whether a product is split between threads: from MLCC_MIN_PARALLEL_MACS multiply-adds, and a
 * one-row product (a classifier's GEMV, bound by reading B: 4 bytes per multiply-add) from an
 * eighth of that. On the caller alone, the 512 x 1000 and 1024 x 1000 classifiers of
 * ResNet-18 and Inception v1 (60 and 115 us) were the largest serial calls of their 2-thread
 * runs. */
static int gemm_parallel(const mlcc_gemm_params *p, int64_t batch) {
    return (double)batch * (double)p->m * (double)p->n * (double)p->k >=
           (double)MLCC_MIN_PARALLEL_MACS / (p->m == 1 ? 8.0 : 1.0);
}

static void gemm_threaded(const mlcc_gemm_params *p, const float *a, const float *b,
                          const float *bias, float *c, mlcc_threadpool *pool, ptrdiff_t bw) {
    gemm_job job;
    if (mlcc_threadpool_size(pool) == 1 || !gemm_parallel(p, 1)) {
        gemm_block(p, a, b, bias, c, 0, (ptrdiff_t)p->m, 0, (ptrdiff_t)p->n, bw);   /* same bits */
        return;
    }
    gemm_job_init(&job, p);
    job.a = a, job.b = b, job.bias = bias, job.c = c;
    job.a_offsets = job.b_offsets = NULL;
    job.c_batch_stride = 0;
    job.bw = bw;
    mlcc_threadpool_for(pool, gemm_unit, &job, (int)(job.col_units * job.row_units),
                        mlcc_threadpool_size(pool));
}

void mlcc_f32_gemm__threaded(const mlcc_gemm_params *p, const float *a, const float *b,
                             const float *bias, float *c, mlcc_threadpool *pool) {
    gemm_threaded(p, a, b, bias, c, pool, 0);
}

void mlcc_f32_gemm__panels_threaded(const mlcc_gemm_params *p, const float *a,
                                    const float *b_panels, const float *bias, float *c,
                                    mlcc_threadpool *pool) {
    gemm_threaded(p, a, b_panels, bias, c, pool, MLCC_GEMM_B_PANEL);
}

void mlcc_f32_gemm__panels_of_threaded(const mlcc_gemm_params *p, const float *a,
                                       const float *b_panels, ptrdiff_t width,
                                       const float *bias, float *c, mlcc_threadpool *pool) {
    gemm_threaded(p, a, b_panels, bias, c, pool, width);
}

void mlcc_f32_batched_gemm(const mlcc_batched_gemm_params *p, const float *a, const float *b,
                           const float *bias, float *c, const int64_t *a_offsets,
                           const int64_t *b_offsets, mlcc_threadpool *pool) {
    gemm_job job;
    int64_t t;
    gemm_job_init(&job, &p->gemm);
    job.a = a, job.b = b, job.bias = bias, job.c = c;
    job.a_offsets = a_offsets, job.b_offsets = b_offsets;
    job.c_batch_stride = p->c_batch_stride;
    job.a_matrix = p->a_matrix, job.b_matrix = p->b_matrix;
    job.bw = 0;
    if (mlcc_threadpool_size(pool) > 1 && gemm_parallel(&p->gemm, p->batch) &&
        (double)p->batch * (double)(job.col_units * job.row_units) <= 65535.0) {
        mlcc_threadpool_for(pool, gemm_unit, &job,
                            (int)(p->batch * job.col_units * job.row_units),
                            mlcc_threadpool_size(pool));
        return;
    }
    for (t = 0; t < p->batch; t++)   /* one thread, or more units than one loop takes */
        mlcc_f32_gemm__threaded(&p->gemm, a + a_offsets[t] * p->a_matrix,
                                b + b_offsets[t] * p->b_matrix, bias,
                                c + t * p->c_batch_stride, pool);
}

/* ---- The packed GEMM (see gemm.h for the panel layouts) ---- */

#define PMR MLCC_GEMM_MR
/* The packed GEMM is instantiated twice, with and without a residual, inlined whole into each
 * entry point, so that the one without has no trace of it: every convolution going through the
 * residual entry point with a NULL residual made MobileNetV2 3-5% slower (A/B, interleaved). */
#if defined(__GNUC__)
#define PACKED_INLINE inline __attribute__((always_inline))
#else
#define PACKED_INLINE inline
#endif
#define PNR MLCC_GEMM_NR
#define PTR MLCC_GEMM_TILE_ROWS   /* rows per tile: PMR, a divisor of it, or 6 */
/* Rows of the tile at row i of [i, end): PTR, except that 6-row tiles leave no 2-row tile where
 * the rows are a multiple of 8 (16 = 6 + 6 + 4: 8 accumulators each; 6 + 6 + 2 left a 2-row
 * tile latency-bound on its 4 chains of FMAs), and take 4 for the last 8 or 4. */
#define PACKED_TILE_H(left)                                                                   \
    (PMR % PTR == 0 ? PTR : (left) == 8 || (left) == 4 ? 4 : (left) < PTR ? (left) : PTR)

/* Where row r of a tile starting o rows into an A panel (of depth kc) reads, from the tile's
 * first row: in the panel, else (a 6-row tile straddling two panels) at the same depth in the
 * next panel, kc x PMR floats on. A constant r where PTR divides PMR. */
static inline ptrdiff_t packed_row_offset(ptrdiff_t r, ptrdiff_t o, ptrdiff_t kc) {
    return PMR % PTR == 0 || o + r < PMR ? r : r + (kc - 1) * PMR;
}
/* The column-major nest fetches the next block of A ahead (gemm_packed); not in wasm, whose
 * engines ignore the hint. */
#if MLCC_HAVE_VECTORS && !defined(__wasm_simd128__) && !defined(__wasm__)
#define GEMM_PREFETCH_A 1
#else
#define GEMM_PREFETCH_A 0
#endif

/* Adds bias (and the residual), applies the activation and writes (or adds, unless first) one
 * tile row. */
static inline void packed_store_row(float *cr, const float *tile_row, ptrdiff_t nr, int first,
                                    int last, const float *bias_r, const float *res_r,
                                    const mlcc_act *act) {
    ptrdiff_t j;
    if (first) {
        memcpy(cr, tile_row, (size_t)nr * sizeof(float));
    } else {
        for (j = 0; j < nr; j++) cr[j] += tile_row[j];
    }
    if (last) {
        if (bias_r != NULL)
            for (j = 0; j < nr; j++) cr[j] += *bias_r;
        if (res_r != NULL)
            for (j = 0; j < nr; j++) cr[j] += res_r[j];
        {
            const mlcc_act a = *act;   /* a copy: act's kind stays a constant where it is one */
            mlcc_act_apply(&a, cr, nr);
        }
    }
}

#if MLCC_HAVE_VECTORS && defined(__wasm_simd128__)
/* wasm: the activation of n vectors of an edge or narrow tile, out of line: one copy of every
 * kind's code instead of one per tile shape (the module's size; those tiles are few). */
static __attribute__((noinline)) void wasm_act_n(const mlcc_act *act, mlcc_vf *x, int n) {
    mlcc_wasm_act_vecs(act, x, n);
}
#endif

#if MLCC_HAVE_VECTORS
/* The micro-kernel: a TILE_ROWS x NR tile of C in NV * TILE_ROWS vector registers; per k step,
 * NV vector loads of B and TILE_ROWS broadcasts of A (a points at the tile's first row in an
 * MR-row A panel). With -ffp-contract=fast the multiply-add is one FMA. */
static PACKED_INLINE void packed_tile(ptrdiff_t kc, const float *MLCC_RESTRICT a,
                                      const float *MLCC_RESTRICT b, float *c, ptrdiff_t ldc,
                                      ptrdiff_t mr, ptrdiff_t nr, int first, int last,
                                      const float *bias, const float *res,
                                      const mlcc_act *act, int half, const int act_call,
                                      const float *pf, ptrdiff_t pf_n, ptrdiff_t o) {
    /* half (a constant at each call): only the first vector of each row, for panels of at
     * most one vector of columns (small feature maps); act_call (a constant, wasm): the
     * activation through wasm_act_n, out of line (in packed_tile_edge: the module's size; a
     * call inside the shared nests made their whole tiles 3-6% slower in V8); pf_n cache
     * lines from pf fetched while the k loop runs (gemm_packed); o: the tile's first row in
     * its A panel (packed_row_offset) */
    const ptrdiff_t nv = half ? 1 : MLCC_GEMM_NV;
    mlcc_vf acc[PTR][MLCC_GEMM_NV];
    ptrdiff_t r, v, p, a_row[PTR];
    /* rows past mr read the first row (their sums are dropped): no read past the last panel */
    for (r = 0; r < PTR; r++) a_row[r] = r < mr ? packed_row_offset(r, o, kc) : 0;
#if !defined(__wasm_simd128__)
    (void)act_call;
#endif
    for (r = 0; r < PTR; r++)
        for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] = mlcc_vf_splat(0.0f);
#if defined(__GNUC__)
    /* the residual rows are a feature map apart: fetch them while the k loop runs */
    if (res != NULL && last)
        for (r = 0; r < mr; r++)
            for (v = 0; v < nv; v++)
                __builtin_prefetch(res + r * ldc + v * MLCC_VF_LANES);
#endif
#if !GEMM_PREFETCH_A
    (void)pf;
    (void)pf_n;
#endif
    for (p = 0; p < kc; p++) {
        mlcc_vf bv[MLCC_GEMM_NV];
#if GEMM_PREFETCH_A
        if (p < pf_n) MLCC_PREFETCH(pf + p * MLCC_PF_FLOATS);
#endif
        for (v = 0; v < nv; v++) bv[v] = mlcc_vf_load(b + p * PNR + v * MLCC_VF_LANES);
        for (r = 0; r < PTR; r++) {
            const mlcc_vf av = mlcc_vf_splat(a[p * PMR + a_row[r]]);
            for (v = 0; v < nv; v++) acc[r][v] += av * bv[v];
        }
    }
    if (nr == nv * MLCC_VF_LANES) {
        for (r = 0; r < mr; r++) {
            float *cr = c + r * ldc;
            for (v = 0; v < nv; v++) {
                mlcc_vf out = acc[r][v];
                if (!first) out += mlcc_vf_load(cr + v * MLCC_VF_LANES);
                if (last) {
                    if (bias != NULL) out += bias[r];
                    if (res != NULL) out += mlcc_vf_load(res + r * ldc + v * MLCC_VF_LANES);
#if defined(__wasm_simd128__)
                    if (act_call)
                        wasm_act_n(act, &out, 1);
                    else
#endif
                    out = mlcc_vf_act(act, out);
                }
                mlcc_vf_store(cr + v * MLCC_VF_LANES, out);
            }
        }
        return;
    }
    for (r = 0; r < mr; r++) {
        float row[PNR];
        for (v = 0; v < MLCC_GEMM_NV; v++) mlcc_vf_store(row + v * MLCC_VF_LANES, acc[r][v]);
        packed_store_row(c + r * ldc, row, nr, first, last, bias ? bias + r : NULL,
                         res ? res + r * ldc : NULL, act);
    }
}
#else
static void packed_tile(ptrdiff_t kc, const float *a, const float *b, float *c, ptrdiff_t ldc,
                        ptrdiff_t mr, ptrdiff_t nr, int first, int last, const float *bias,
                        const float *res, const mlcc_act *act, int half, const int act_call,
                        const float *pf, ptrdiff_t pf_n, ptrdiff_t o) {
    float acc[PTR][PNR];
    ptrdiff_t r, j, p;
    for (r = 0; r < PTR; r++)
        for (j = 0; j < PNR; j++) acc[r][j] = 0.0f;
    for (p = 0; p < kc; p++)
        for (r = 0; r < PTR; r++)
            for (j = 0; j < PNR; j++)
                acc[r][j] += (r < mr ? a[p * PMR + packed_row_offset(r, o, kc)] : 0.0f) *
                             b[p * PNR + j];
    (void)half;
    (void)act_call;
    (void)pf;
    (void)pf_n;
    for (r = 0; r < mr; r++)
        packed_store_row(c + r * ldc, acc[r], nr, first, last, bias ? bias + r : NULL,
                         res ? res + r * ldc : NULL, act);
}
#endif


#if MLCC_HAVE_VECTORS && !defined(__wasm_simd128__)
/* The activations other than ReLU and Clip (gemm.h, mlcc_tile_act): their code (SiLU's exp)
 * inlined next to a tile's accumulators made GCC keep all of them on the stack. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noinline, noclone))
#else
__attribute__((noinline))
#endif
void mlcc_vf_act_n(const mlcc_act *act, mlcc_vf *x, ptrdiff_t n) {
    ptrdiff_t i;
    if (act->kind == MLCC_ACT_SILU) {   /* YOLOv8n's: the switch once, not per vector */
        const float alpha = act->alpha;
        for (i = 0; i < n; i++) x[i] = x[i] * mlcc_vf_sigmoid(x[i], alpha);
        return;
    }
    for (i = 0; i < n; i++) x[i] = mlcc_vf_act(act, x[i]);
}
#endif

#if MLCC_HAVE_VECTORS
/* A whole tile of `rows` (a constant: PTR, or 4 beside 6-row tiles) x NR (nearly every tile)
 * with the epilogue in registers: the rows a constant, the activation's kind switched once per tile (mlcc_tile_act in gemm.h; wasm:
 * mlcc_wasm_act_vecs in mlcc_kernel.h, ReLU and Clip as pmax/pmin). packed_tile's epilogue (a
 * variable number of rows, mlcc_vf_act's switch per vector) made GCC and clang spill the
 * accumulators after every k loop (and V8 run a br_table per vector): on MobileNetV2's
 * 16 -> 96 layer (k = 16) that was a third of the time, on x86 and in wasm. The same
 * operations in the same order as packed_tile: the same bits. */
static PACKED_INLINE void packed_tile_whole(const int rows, ptrdiff_t kc,
                                            const float *MLCC_RESTRICT a,
                                            const float *MLCC_RESTRICT b, float *c,
                                            ptrdiff_t ldc, int first, int last,
                                            const float *bias, const float *res,
                                            const mlcc_act *act, const int act_call,
                                            const float *pf, ptrdiff_t pf_n, ptrdiff_t o) {
    mlcc_vf acc[PTR][MLCC_GEMM_NV];
    ptrdiff_t r, v, p, a_row[PTR];
    for (r = 0; r < rows; r++) a_row[r] = packed_row_offset(r, o, kc);
    for (r = 0; r < rows; r++)
        for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] = mlcc_vf_splat(0.0f);
#if defined(__GNUC__) && !defined(__wasm_simd128__)
    if (res != NULL && last)
        for (r = 0; r < rows; r++)
            for (v = 0; v < MLCC_GEMM_NV; v++)
                __builtin_prefetch(res + r * ldc + v * MLCC_VF_LANES);
#endif
    /* pointers bumped per k step, not indexed: clang's p * 32 + base address arithmetic was a
     * third of the k loop's instructions in V8's code. (Two k steps per iteration, to save V8's
     * per-iteration interrupt check, made SqueezeNet 1.44x slower: V8 loads both steps'
     * operands first and spills.) */
#if !GEMM_PREFETCH_A
    (void)pf;
    (void)pf_n;
#endif
    for (p = 0; p < kc; p++, a += PMR, b += PNR) {
        mlcc_vf bv[MLCC_GEMM_NV];
#if GEMM_PREFETCH_A
        if (p < pf_n) MLCC_PREFETCH(pf + p * MLCC_PF_FLOATS);
#endif
        for (v = 0; v < MLCC_GEMM_NV; v++) bv[v] = mlcc_vf_load(b + v * MLCC_VF_LANES);
        for (r = 0; r < rows; r++) {
            const mlcc_vf av = mlcc_vf_splat(a[a_row[r]]);
            for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] += av * bv[v];
        }
    }
    if (!first)
        for (r = 0; r < rows; r++)
            for (v = 0; v < MLCC_GEMM_NV; v++)
                acc[r][v] += mlcc_vf_load(c + r * ldc + v * MLCC_VF_LANES);
    if (last) {
        if (bias != NULL)
            for (r = 0; r < rows; r++)
                for (v = 0; v < MLCC_GEMM_NV; v++) acc[r][v] += bias[r];
        if (res != NULL)
            for (r = 0; r < rows; r++)
                for (v = 0; v < MLCC_GEMM_NV; v++)
                    acc[r][v] += mlcc_vf_load(res + r * ldc + v * MLCC_VF_LANES);
#if defined(__wasm_simd128__)
        if (act_call)   /* (a constant) the shared row-major nest: kinds other than these */
            wasm_act_n(act, &acc[0][0], rows * MLCC_GEMM_NV);
        else
            mlcc_wasm_act_vecs(act, &acc[0][0], rows * MLCC_GEMM_NV);
#else
        (void)act_call;
        mlcc_tile_act(act, &acc[0][0], rows * MLCC_GEMM_NV);
#endif
    }
    for (r = 0; r < rows; r++)
        for (v = 0; v < MLCC_GEMM_NV; v++) mlcc_vf_store(c + r * ldc + v * MLCC_VF_LANES, acc[r][v]);
}
#endif

#if MLCC_HAVE_VECTORS && MLCC_GEMM_MR == 8 && \
    ((defined(__wasm_simd128__) && MLCC_VECTOR_BYTES == 16 && MLCC_GEMM_NV == 2) || \
     (!defined(__wasm_simd128__) && MLCC_VECTOR_BYTES == 32 && MLCC_GEMM_NV == 2))
/* A last panel of a few columns (7 x 7 maps: 49 = 48 + 1) transposed: the rows along the
 * vectors (an A panel's 8 rows are NARROW_PV vectors of each k step: two in wasm, one on AVX2),
 * the nr columns broadcast from B. The half-width tile computed 4 (wasm) or 8 (AVX2) columns
 * for 1, with 4 or 6 accumulators, and its epilogue went through a row buffer and
 * mlcc_act_apply. NP A panels (8 NP rows) x NC columns: NARROW_PV NP NC accumulators, 8-12
 * where possible: enough independent sums for the two FMA pipes. wasm: MobileNetV2's 7 x 7
 * layers 0.88-0.94x (4 columns, 14 x 14 maps, with this epilogue's gathers and scatters per
 * value made those layers 0.99-1.13x: narrow_tile4 transposes back by shuffles). Every output
 * is still one sum in k order plus C, bias, residual in packed_tile's order: the same bits. */
#define NARROW_PANEL 1
#define NARROW_PV (PMR / MLCC_VF_LANES)
/* the last panel's column counts that take it: 1, 2 or 4 in wasm, 1 to 4 on AVX2 */
#if defined(__wasm_simd128__)
#define NARROW_COLS(nr) ((nr) == 1 || (nr) == 2 || (nr) == 4)
#else
#define NARROW_COLS(nr) ((nr) >= 1 && (nr) <= 4)
#endif
#if defined(__wasm_simd128__)
#define NARROW_ACT(act, x, n) wasm_act_n(act, x, n)
#else
#define NARROW_ACT(act, x, n) mlcc_tile_act(act, x, n)
#endif
/* acc += a * b as one FMA, whatever the copy: GCC tuned for Zen (-march=native there sets
 * avoid-fma-max-bits=256) splits a loop's lone chain of multiply-adds into multiplies and adds,
 * so the copy of one A panel and one column rounded otherwise than the copy of 8 panels, and
 * 3 threads (rows cut into 8-row units) gave other bits than 1 */
#if defined(__FMA__) && MLCC_VECTOR_BYTES == 32
#define NARROW_FMA(acc, a, b) ((acc) = (mlcc_vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(acc)))
#else
#define NARROW_FMA(acc, a, b) ((acc) += (a) * (b))
#endif
static PACKED_INLINE void narrow_tile(const int NP, const int NC, ptrdiff_t kc,
                                      const float *MLCC_RESTRICT a, ptrdiff_t a_step,
                                      const float *MLCC_RESTRICT b, float *c, ptrdiff_t ldc,
                                      ptrdiff_t mr, int first, int last, const float *bias,
                                      const float *res, const mlcc_act *act) {
    mlcc_vf acc[12];   /* [q][h][t]: panel q, rows h * lanes.. of it, column t */
    ptrdiff_t p, l;
    int q, h, t;
    for (q = 0; q < NARROW_PV * NP * NC; q++) acc[q] = mlcc_vf_splat(0.0f);
    for (p = 0; p < kc; p++, a += PMR, b += PNR) {
        mlcc_vf bv[4];
        for (t = 0; t < NC; t++) bv[t] = mlcc_vf_splat(b[t]);
        for (q = 0; q < NP; q++)
            for (h = 0; h < NARROW_PV; h++) {
                const mlcc_vf av = mlcc_vf_load(a + q * a_step + h * MLCC_VF_LANES);
                for (t = 0; t < NC; t++) NARROW_FMA(acc[(q * NARROW_PV + h) * NC + t], av, bv[t]);
            }
    }
    for (q = 0; q < NARROW_PV * NP; q++) {   /* rows q * lanes.. */
        const ptrdiff_t r0 = (ptrdiff_t)q * MLCC_VF_LANES;
        const ptrdiff_t n = mr - r0 < MLCC_VF_LANES ? mr - r0 : MLCC_VF_LANES;
        if (n <= 0) break;
        for (t = 0; t < NC; t++) {
            mlcc_vf v = acc[q * NC + t];
            if (!first) {
                mlcc_vf o = mlcc_vf_splat(0.0f);
                for (l = 0; l < n; l++) o[l] = c[(r0 + l) * ldc + t];
                v += o;
            }
            if (last) {
                if (bias != NULL) {
                    mlcc_vf bb = mlcc_vf_splat(0.0f);
                    for (l = 0; l < n; l++) bb[l] = bias[r0 + l];
                    v += bb;
                }
                if (res != NULL) {
                    mlcc_vf rr = mlcc_vf_splat(0.0f);
                    for (l = 0; l < n; l++) rr[l] = res[(r0 + l) * ldc + t];
                    v += rr;
                }
            }
            acc[q * NC + t] = v;
        }
        if (last) NARROW_ACT(act, &acc[q * NC], NC);
        for (t = 0; t < NC; t++)
            for (l = 0; l < n; l++) c[(r0 + l) * ldc + t] = acc[q * NC + t][l];
    }
}

#if defined(__wasm_simd128__)
/* wasm: the same for exactly 4 columns (14 x 14 maps: 196 = 192 + 4), one A panel: the 8 x 4 tile
 * transposed back by shuffles (4 x 4 blocks), so that the epilogue reads and writes whole rows
 * of 4 as packed_tile's half-width path does, in its order. Instead of that path's 4 x 1-vector
 * tile (4 broadcasts per 4 multiplies): MobileNetV2's 14 x 14 1x1 layers 0.97-0.99x. */
static PACKED_INLINE void narrow_tile4(ptrdiff_t kc, const float *MLCC_RESTRICT a,
                                       const float *MLCC_RESTRICT b, float *c, ptrdiff_t ldc,
                                       ptrdiff_t mr, int first, int last, const float *bias,
                                       const float *res, const mlcc_act *act) {
    mlcc_vf acc[8], row[8];   /* acc[h * 4 + t]: rows h * 4.., column t; row[r]: row r */
    ptrdiff_t p;
    int h, t, r;
    for (t = 0; t < 8; t++) acc[t] = mlcc_vf_splat(0.0f);
    for (p = 0; p < kc; p++, a += PMR, b += PNR) {
        const mlcc_vf a0 = mlcc_vf_load(a), a1 = mlcc_vf_load(a + MLCC_VF_LANES);
        for (t = 0; t < 4; t++) {
            const mlcc_vf bv = mlcc_vf_splat(b[t]);
            acc[t] += a0 * bv;
            acc[4 + t] += a1 * bv;
        }
    }
    for (h = 0; h < 2; h++) {
        const mlcc_vf *q = acc + 4 * h;
        const mlcc_vf t0 = __builtin_shufflevector(q[0], q[1], 0, 4, 1, 5);
        const mlcc_vf t1 = __builtin_shufflevector(q[2], q[3], 0, 4, 1, 5);
        const mlcc_vf t2 = __builtin_shufflevector(q[0], q[1], 2, 6, 3, 7);
        const mlcc_vf t3 = __builtin_shufflevector(q[2], q[3], 2, 6, 3, 7);
        row[4 * h + 0] = __builtin_shufflevector(t0, t1, 0, 1, 4, 5);
        row[4 * h + 1] = __builtin_shufflevector(t0, t1, 2, 3, 6, 7);
        row[4 * h + 2] = __builtin_shufflevector(t2, t3, 0, 1, 4, 5);
        row[4 * h + 3] = __builtin_shufflevector(t2, t3, 2, 3, 6, 7);
    }
    if (mr == PMR) {
        if (!first)
            for (r = 0; r < 8; r++) row[r] += mlcc_vf_load(c + r * ldc);
        if (last) {
            if (bias != NULL)
                for (r = 0; r < 8; r++) row[r] += bias[r];
            if (res != NULL)
                for (r = 0; r < 8; r++) row[r] += mlcc_vf_load(res + r * ldc);
            wasm_act_n(act, row, 8);
        }
        for (r = 0; r < 8; r++) mlcc_vf_store(c + r * ldc, row[r]);
        return;
    }
    for (r = 0; r < mr; r++) {
        mlcc_vf v = row[r];
        if (!first) v += mlcc_vf_load(c + r * ldc);
        if (last) {
            if (bias != NULL) v += bias[r];
            if (res != NULL) v += mlcc_vf_load(res + r * ldc);
            wasm_act_n(act, &v, 1);
        }
        mlcc_vf_store(c + r * ldc, v);
    }
}
#endif

/* Rows [i0, i1) x the nr (NARROW_COLS) columns of the panel at j of k block k0, by narrow_tile.
 * Out of line: inlined into gemm_packed's nests, it made V8 run every layer's tiles 2.4-3x
 * slower (bench/profile_wasm.py). */
static __attribute__((noinline)) void narrow_panel(ptrdiff_t m, ptrdiff_t nr, ptrdiff_t k, ptrdiff_t k0,
                                       ptrdiff_t kc, ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t j,
                                       const float *a_packed, ptrdiff_t a_rows,
                                       ptrdiff_t a_row0, const float *b_panels,
                                       const float *bias, const float *res,
                                       const mlcc_act act_v, float *c, ptrdiff_t ldc) {
    /* act by value: a pointer would escape here and keep gemm_packed's callers from folding
     * a constant activation kind */
    const mlcc_act *act = &act_v;
    const int first = k0 == 0, last = k0 + kc == k;
    const float *bp = b_panels + (j / PNR) * k * PNR + k0 * PNR;
    const ptrdiff_t a_step = PMR * kc;   /* one A panel to the next */
    const ptrdiff_t end = i1 < m ? i1 : m;
    ptrdiff_t i = i0;
#define NARROW_AT(i) (a_packed + k0 * a_rows + (a_row0 + (i)) * kc)
#define NARROW_CALL(NP, NC, i, mr)                                                            \
    narrow_tile(NP, NC, kc, NARROW_AT(i), a_step, bp, c + (i) * ldc + j, ldc, mr, first,      \
                last, bias ? bias + (i) : NULL, res ? res + (i) * ldc + j : NULL, act)
#define NARROW_ROWS(NP, NC)                                                                   \
    do {                                                                                      \
        for (; i + (NP) * PMR <= end; i += (NP) * PMR) NARROW_CALL(NP, NC, i, (NP) * PMR);    \
        for (; i < end; i += PMR) NARROW_CALL(1, NC, i, end - i < PMR ? end - i : PMR);       \
    } while (0)
#if defined(__wasm_simd128__)
    if (nr == 1) {
        NARROW_ROWS(4, 1);
    } else if (nr == 2) {
        NARROW_ROWS(2, 2);
    } else {
        for (; i < end; i += PMR)
            narrow_tile4(kc, NARROW_AT(i), bp, c + i * ldc + j, ldc,
                         end - i < PMR ? end - i : PMR, first, last, bias ? bias + i : NULL,
                         res ? res + i * ldc + j : NULL, act);
    }
#else
    /* AVX2: 8-12 accumulators, 2-8 A panels a tile */
    if (nr == 1)
        NARROW_ROWS(8, 1);
    else if (nr == 2)
        NARROW_ROWS(6, 2);
    else if (nr == 3)
        NARROW_ROWS(4, 3);
    else
        NARROW_ROWS(3, 4);
#endif
#undef NARROW_ROWS
#undef NARROW_CALL
#undef NARROW_AT
}
#else
#define NARROW_PANEL 0
#define NARROW_COLS(nr) 0
#endif

#if defined(__wasm_simd128__) && MLCC_HAVE_VECTORS
/* wasm: the edge tiles (fewer rows or columns than a whole tile; rare since narrow_panel) of
 * the row-major nests, out of line: one copy instead of one per nest (the module's size). In
 * the column-major nests, the call made the whole tiles 2-5% slower: inlined there. */
static __attribute__((noinline)) void packed_tile_edge(ptrdiff_t kc, const float *a,
                                                       const float *b, float *c, ptrdiff_t ldc,
                                                       ptrdiff_t mr, ptrdiff_t nr, int first,
                                                       int last, const float *bias,
                                                       const float *res, const mlcc_act *act,
                                                       ptrdiff_t o) {
#if MLCC_GEMM_NV > 1
    if (nr <= MLCC_VF_LANES)   /* the same sums: half the work */
        packed_tile(kc, a, b, c, ldc, mr, nr, first, last, bias, res, act, 1, 1, NULL, 0, o);
    else
#endif
        packed_tile(kc, a, b, c, ldc, mr, nr, first, last, bias, res, act, 0, 1, NULL, 0, o);
}
#endif

/* One tile of gemm_packed: rows [i, i + h) x columns [j, j + PNR) of k block k0, h rows a tile
 * (PACKED_TILE_H). */
static PACKED_INLINE void gemm_packed_tile(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, ptrdiff_t k0,
                                           ptrdiff_t kc, ptrdiff_t i, ptrdiff_t j,
                                           const float *a_packed, ptrdiff_t a_rows,
                                           ptrdiff_t a_row0, const float *b_panels,
                                           const float *bias, const float *res,
                                           const mlcc_act *act, float *c, ptrdiff_t ldc,
                                           const int edge_call, const float *pf,
                                           ptrdiff_t pf_n, ptrdiff_t h) {
    /* edge_call (a constant, wasm): 1, the edge tiles through packed_tile_edge; 2, also the
     * whole tiles' activation through wasm_act_n; pf_n cache lines from pf fetched while a
     * whole tile computes (the next block of A, gemm_packed) */
    const int first = k0 == 0, last = k0 + kc == k;
    const ptrdiff_t nr = n - j < PNR ? n - j : PNR;
    const ptrdiff_t mr = m - i < h ? m - i : h;
    const float *bp = b_panels + (j / PNR) * k * PNR + k0 * PNR;
    /* block k0 of A: kc x a_rows, panel by panel (gemm.h); a tile starts i % PMR rows into its
     * panel */
    const float *at = a_packed + k0 * a_rows + (a_row0 + i - i % PMR) * kc + i % PMR;
    const float *rt = res ? res + i * ldc + j : NULL;
    const float *bt = bias ? bias + i : NULL;
    (void)edge_call;
#if MLCC_HAVE_VECTORS
    if (mr == PTR && nr == PNR)
        packed_tile_whole(PTR, kc, at, bp, c + i * ldc + j, ldc, first, last, bt, rt, act,
                          edge_call == 2, pf, pf_n, i % PMR);
    else if (PTR == 6 && mr == 4 && nr == PNR)
        packed_tile_whole(4, kc, at, bp, c + i * ldc + j, ldc, first, last, bt, rt, act,
                          edge_call == 2, pf, pf_n, i % PMR);
    else
#endif
#if defined(__wasm_simd128__) && MLCC_HAVE_VECTORS
    if (edge_call)
        packed_tile_edge(kc, at, bp, c + i * ldc + j, ldc, mr, nr, first, last, bt, rt, act,
                         i % PMR);
    else
#endif
#if MLCC_HAVE_VECTORS && MLCC_GEMM_NV > 1
    if (nr <= MLCC_VF_LANES)   /* the same sums: half the work */
        packed_tile(kc, at, bp, c + i * ldc + j, ldc, mr, nr, first, last, bt, rt, act, 1, 0,
                    pf, pf_n, i % PMR);
    else
#endif
        packed_tile(kc, at, bp, c + i * ldc + j, ldc, mr, nr, first, last, bt, rt, act, 0, 0,
                    pf, pf_n, i % PMR);
}

/* Products of depth up to this (one k block) run the tiles row-major: each tile row's 8 output
 * rows are written as 8 contiguous streams across the block, instead of every row of C a few
 * cache lines at a time (96 streams for MobileNetV2's 16 -> 96 layer); the B panels, re-read
 * from L2 once per tile row, are short. A/B per layer (one process, alternating): the 3x3/2
 * stems (depth 27) 0.91x, MobileNetV2's 16 -> 96 0.95x, ResNet's 64 -> 256 0.95x; depths
 * 128-256 no better. The same tiles, the same sums: the same bits. */
#ifndef MLCC_GEMM_ROWS_OUTER_K
#define MLCC_GEMM_ROWS_OUTER_K 64
#endif
/* wasm: with the row-major nest inlined into the residual entry point too, V8 ran MobileNetV2's
 * residual 1x1 convolutions 2.6x slower (bench/profile_wasm.py); there only the entry point
 * without a residual has it */
#if defined(__wasm_simd128__)
#define RESIDUAL_ROWS_OUTER 0
#else
#define RESIDUAL_ROWS_OUTER 1
#endif

static PACKED_INLINE void gemm_packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                                      const float *a_packed, ptrdiff_t a_rows, ptrdiff_t a_row0,
                                      const float *b_panels, const float *bias, const float *res,
                                      const mlcc_act *act, float *c, ptrdiff_t ldc,
                                      const int rows_outer) {
    ptrdiff_t k0, i0, i, j, h;   /* h: the rows of the tile at i (PACKED_TILE_H) */
    /* columns [0, n_tiles) by PNR-column tiles; the rest (NARROW_PANEL: a last panel of
     * NARROW_COLS columns) by narrow_panel */
    const ptrdiff_t n_tiles = NARROW_PANEL && NARROW_COLS(n % PNR) ? n - n % PNR : n;
    if (rows_outer == 2 || (rows_outer && k <= MLCC_GEMM_ROWS_OUTER_K)) {   /* 2: only this */
        for (i = 0; i < m; i += h) {
            h = PACKED_TILE_H(m - i);
            for (j = 0; j < n_tiles; j += PNR)
                gemm_packed_tile(m, n, k, 0, k, i, j, a_packed, a_rows, a_row0, b_panels, bias,
                                 res, act, c, ldc, rows_outer == 2 ? 1 : 2, NULL, 0, h);
        }
#if NARROW_PANEL
        if (n_tiles < n)
            narrow_panel(m, n - n_tiles, k, 0, k, 0, m, n_tiles, a_packed, a_rows, a_row0,
                         b_panels, bias, res, *act, c, ldc);
#endif
        return;
    }
    for (k0 = 0; k0 < k; k0 += MLCC_GEMM_KC) {
        const ptrdiff_t kc = k - k0 < MLCC_GEMM_KC ? k - k0 : MLCC_GEMM_KC;
        /* MLCC_GEMM_MC rows of A (MC x kc) stay in L2 while each B panel (kc x NR, in L1)
         * passes over them */
        for (i0 = 0; i0 < m; i0 += MLCC_GEMM_MC) {
            const ptrdiff_t i1 = m - i0 < MLCC_GEMM_MC ? m : i0 + MLCC_GEMM_MC;
            /* The block of A the nest takes next (the next rows of this k block, else the
             * first rows of the next k block: the next floats of the packed A), a share of its
             * cache lines fetched by each tile of the second and later panels, which multiply
             * this block from L2; weights larger than the caches otherwise come from memory
             * as the first panel runs, 8 rows of kc per tile. */
            const ptrdiff_t next_k0 = i1 < m ? k0 : k0 + MLCC_GEMM_KC;
            const ptrdiff_t next_kc = k - next_k0 < MLCC_GEMM_KC ? k - next_k0 : MLCC_GEMM_KC;
            const ptrdiff_t next_i0 = i1 < m ? i1 : 0;
            const ptrdiff_t next_rows = m - next_i0 < MLCC_GEMM_MC ? m - next_i0 : MLCC_GEMM_MC;
            const ptrdiff_t pf_lines =
                GEMM_PREFETCH_A && next_k0 < k
                    ? (next_rows + PMR - 1) / PMR * PMR * next_kc / MLCC_PF_FLOATS : 0;
            const float *pf = a_packed + (next_k0 < k ? next_k0 * a_rows + (a_row0 + next_i0) * next_kc : 0);
            ptrdiff_t row_tiles = 0, pf_calls, pf_t = 0;
            for (i = i0; i < i1; i += PACKED_TILE_H(i1 - i)) row_tiles++;   /* (pf_calls) */
            pf_calls = ((n_tiles + PNR - 1) / PNR - 1) * row_tiles;
            for (j = 0; j < n_tiles; j += PNR)
                for (i = i0; i < i1; i += h) {
                    ptrdiff_t last_panel;   /* the first row of the last A panel it reads */
                    ptrdiff_t l0 = 0, l1 = 0;
                    const float *tile_pf = pf;
                    h = PACKED_TILE_H(i1 - i);
                    last_panel = (i + h - 1) / PMR * PMR;
                    if (j > 0 && pf_lines > 0) {
                        l0 = pf_lines * pf_t / pf_calls;
                        l1 = pf_lines * (pf_t + 1) / pf_calls;
                        pf_t++;
                    } else if (GEMM_PREFETCH_A && n_tiles <= PNR &&
                               (i % PMR == 0 || last_panel > i)) {
                        /* One column panel (Winograd's products on maps of at most 32 tiles):
                         * no later panel fetches the next block, and each weight feeds only
                         * the panel's columns, so the A panels came from memory at the pace
                         * of the tiles' demand loads (16.8 MB in 1.3 ms for ResNet-50's
                         * 512 -> 512 F(2x2) on 7 x 7). The first tile to read each A panel
                         * fetches the next panel of the stream instead: the next rows of
                         * this block, else the next block's first rows. */
                        if (last_panel + PMR < i1) {
                            tile_pf = a_packed + k0 * a_rows + (a_row0 + last_panel + PMR) * kc;
                            l1 = PMR * kc / MLCC_PF_FLOATS;
                        } else if (pf_lines > 0) {
                            l1 = pf_lines < PMR * next_kc / MLCC_PF_FLOATS
                                     ? pf_lines : PMR * next_kc / MLCC_PF_FLOATS;
                        }
                    }
                    gemm_packed_tile(m, n, k, k0, kc, i, j, a_packed, a_rows, a_row0, b_panels,
                                     bias, res, act, c, ldc, 0, tile_pf + l0 * MLCC_PF_FLOATS,
                                     l1 - l0, h);
                }
#if NARROW_PANEL
            if (n_tiles < n)
                narrow_panel(m, n - n_tiles, k, k0, kc, i0, i1, n_tiles, a_packed, a_rows,
                             a_row0, b_panels, bias, res, *act, c, ldc);
#endif
        }
    }
}

#if defined(__wasm_simd128__)
/* wasm: the row-major nest (depth up to MLCC_GEMM_ROWS_OUTER_K) per activation kind (none,
 * ReLU, Clip), each out of line with its kind a constant, so that no tile switches on it.
 * Through the one nest for all kinds, V8 kept the other activations' constants (hoisted out of
 * the loops by clang) on the stack, reloaded them at every tile and spilled the 8
 * accumulators before each tile's jump table: at depth 16-32 about as long as 4 of the k
 * loop's steps. A node benchmark of gemm.c alone: 96 x 4096 x 16 0.85x, depth 24-32
 * 0.89-0.92x, 64 0.95x; MobileNetV2's 16 -> 96 0.85-0.88x, its 3x3/2 stem 0.86-0.87x,
 * 24 -> 144, 32 -> 192 and 64 -> 384 0.90-0.96x (bench/profile_wasm.py). The deeper nest stays
 * shared: specialized too, MobileNetV2's 7 x 7 layers ran 1.03-1.07x slower (and the module
 * grew by 48 KiB instead of 10). */
#define GEMM_ROWS_OUTER_KIND(name, KIND)                                                      \
    static __attribute__((noinline)) void name(                                               \
        ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed, ptrdiff_t a_rows,       \
        ptrdiff_t a_row0, const float *b_panels, const float *bias, const mlcc_act *act,      \
        float *c, ptrdiff_t ldc) {                                                            \
        mlcc_act kind = *act;                                                                 \
        kind.kind = KIND;                                                                     \
        gemm_packed(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, NULL, &kind, c, ldc,    \
                    2);                                                                       \
    }
GEMM_ROWS_OUTER_KIND(gemm_rows_outer_none, MLCC_ACT_NONE)
GEMM_ROWS_OUTER_KIND(gemm_rows_outer_relu, MLCC_ACT_RELU)
GEMM_ROWS_OUTER_KIND(gemm_rows_outer_clip, MLCC_ACT_CLIP)
#undef GEMM_ROWS_OUTER_KIND

/* The nests for any activation, out of line too. (Emscripten's optimizer, binaryen, inlines a
 * function called from one place whatever clang's noinline says: called directly, these four
 * became one function, and V8 ran every tile of it 2.5x slower. Hence the call through a
 * pointer chosen at run time, which binaryen leaves alone.) */
static __attribute__((noinline)) void gemm_packed_any(
    ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed, ptrdiff_t a_rows,
    ptrdiff_t a_row0, const float *b_panels, const float *bias, const mlcc_act *act, float *c,
    ptrdiff_t ldc) {
    gemm_packed(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, NULL, act, c, ldc, 1);
}
#endif

void mlcc_f32_gemm__packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed,
                           ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b_panels,
                           const float *bias, const mlcc_act *act, float *c, ptrdiff_t ldc) {
#if defined(__wasm_simd128__)
    void (*const nest)(ptrdiff_t, ptrdiff_t, ptrdiff_t, const float *, ptrdiff_t, ptrdiff_t,
                       const float *, const float *, const mlcc_act *, float *, ptrdiff_t) =
        k > MLCC_GEMM_ROWS_OUTER_K ? gemm_packed_any
        : act->kind == MLCC_ACT_NONE ? gemm_rows_outer_none
        : act->kind == MLCC_ACT_RELU ? gemm_rows_outer_relu
        : act->kind == MLCC_ACT_CLIP ? gemm_rows_outer_clip : gemm_packed_any;
    nest(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, act, c, ldc);
#else
    gemm_packed(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, NULL, act, c, ldc, 1);
#endif
}

void mlcc_f32_gemm_residual__packed(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k, const float *a_packed,
                                    ptrdiff_t a_rows, ptrdiff_t a_row0, const float *b_panels,
                                    const float *bias, const float *res, const mlcc_act *act,
                                    float *c, ptrdiff_t ldc) {
    gemm_packed(m, n, k, a_packed, a_rows, a_row0, b_panels, bias, res, act, c, ldc,
                RESIDUAL_ROWS_OUTER);
}
