/* Attention: for each (batch, head) K is packed transposed ([d][sk], rows padded) into scratch,
 * so that ROWS query rows at a time compute their scores with vector loads along j; then each
 * row's softmax (vectorized over the padded row, with the vector exp of mlcc_kernel.h), and the
 * rows' weighted sums of V rows, which share every load of a V row (vectorized along the head
 * dimension when V and out are contiguous there). */
#include "attention.h"

#define ROWS 4

static ptrdiff_t padded(ptrdiff_t n) {
    return (n + MLCC_ATTENTION_PAD - 1) / MLCC_ATTENTION_PAD * MLCC_ATTENTION_PAD;
}

/* scores[r][j] = sum_c q_r[c] * kt[c][j] for r < rows, j < skp (kt rows are skp long). */
static void scores_block(ptrdiff_t rows, ptrdiff_t d, ptrdiff_t skp, const float *const *qr,
                         ptrdiff_t qcs, const float *kt, float *scores) {
    ptrdiff_t r, c, j;
#if MLCC_HAVE_VECTORS
    if (rows == ROWS) {   /* four named accumulators stay in registers */
        for (j = 0; j < skp; j += MLCC_VF_LANES) {
            mlcc_vf a0 = mlcc_vf_splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
            for (c = 0; c < d; c++) {
                const mlcc_vf kv = mlcc_vf_load(kt + c * skp + j);
                a0 += mlcc_vf_splat(qr[0][c * qcs]) * kv;
                a1 += mlcc_vf_splat(qr[1][c * qcs]) * kv;
                a2 += mlcc_vf_splat(qr[2][c * qcs]) * kv;
                a3 += mlcc_vf_splat(qr[3][c * qcs]) * kv;
            }
            mlcc_vf_store(scores + j, a0);
            mlcc_vf_store(scores + skp + j, a1);
            mlcc_vf_store(scores + 2 * skp + j, a2);
            mlcc_vf_store(scores + 3 * skp + j, a3);
        }
        return;
    }
    for (r = 0; r < rows; r++) {
        for (j = 0; j < skp; j += MLCC_VF_LANES) {
            mlcc_vf acc = mlcc_vf_splat(0.0f);
            for (c = 0; c < d; c++)
                acc += mlcc_vf_splat(qr[r][c * qcs]) * mlcc_vf_load(kt + c * skp + j);
            mlcc_vf_store(scores + r * skp + j, acc);
        }
    }
#else
    for (r = 0; r < rows; r++) {
        for (j = 0; j < skp; j++) scores[r * skp + j] = 0.0f;
        for (c = 0; c < d; c++) {
            const float qv = qr[r][c * qcs];
            for (j = 0; j < skp; j++) scores[r * skp + j] += qv * kt[c * skp + j];
        }
    }
#endif
}

/* s[j] = softmax_j(cap(s[j] * scale) + m[j * mstride]) over j < sk (m NULL: no mask; cap:
 * softcap * tanh(x / softcap), or x when softcap is 0); s is skp long and s[sk..skp) ends 0.
 * A row whose mask is -inf at every key ends all 0. */
static void softmax_row(float *s, ptrdiff_t sk, ptrdiff_t skp, float scale, float softcap,
                        const float *m, ptrdiff_t mstride) {
    ptrdiff_t j;
    float mx, sum = 0.0f, inv;
    if (m != NULL) {
        for (j = 0; j < sk && m[j * mstride] == -INFINITY; j++) {}
        if (j == sk) {              /* no key may be attended: a zero row, not NaN */
            for (j = 0; j < skp; j++) s[j] = 0.0f;
            return;
        }
    }
    if (softcap > 0.0f) {
        for (j = 0; j < sk; j++) s[j] = softcap * tanhf(s[j] * scale / softcap);
        if (m != NULL)
            for (j = 0; j < sk; j++) s[j] += m[j * mstride];
    } else if (m == NULL)
        for (j = 0; j < sk; j++) s[j] *= scale;
    else if (mstride == 1)
        for (j = 0; j < sk; j++) s[j] = s[j] * scale + m[j];
    else
        for (j = 0; j < sk; j++) s[j] = s[j] * scale + m[j * mstride];
#if MLCC_HAVE_VECTORS
    {
        const mlcc_vf lo = mlcc_vf_splat(-87.0f), zero = mlcc_vf_splat(0.0f);
        mlcc_vf vmax, vsum = zero;
        for (j = sk; j < skp; j++) s[j] = -3.4028234663852886e38f;
        vmax = mlcc_vf_load(s);
        for (j = MLCC_VF_LANES; j < skp; j += MLCC_VF_LANES) {
            const mlcc_vf x = mlcc_vf_load(s + j);
            vmax = mlcc_vf_select(x > vmax, x, vmax);
        }
        mx = vmax[0];
        for (j = 1; j < MLCC_VF_LANES; j++) mx = vmax[j] > mx ? vmax[j] : mx;
        for (j = 0; j < skp; j += MLCC_VF_LANES) {
            /* exactly 0 where e^x underflows (masked keys): mlcc_vf_exp clamps them to ~1e-38,
             * which the division by the sum would make subnormal, and every multiply-add of the
             * P x V loop with a subnormal operand costs ~100 cycles on x86 */
            const mlcc_vf x = mlcc_vf_load(s + j) - mx;
            mlcc_vf_store(s + j, mlcc_vf_select(x < lo, zero, mlcc_vf_exp(x)));
        }
        for (j = sk; j < skp; j++) s[j] = 0.0f;
        for (j = 0; j < skp; j += MLCC_VF_LANES) vsum += mlcc_vf_load(s + j);
        for (j = 0; j < MLCC_VF_LANES; j++) sum += vsum[j];
        inv = 1.0f / sum;
        for (j = 0; j < skp; j += MLCC_VF_LANES) mlcc_vf_store(s + j, mlcc_vf_load(s + j) * inv);
    }
#else
    (void)skp;
    mx = s[0];
    for (j = 1; j < sk; j++) mx = s[j] > mx ? s[j] : mx;
    for (j = 0; j < sk; j++) s[j] = s[j] - mx < -87.0f ? 0.0f : expf(s[j] - mx);   /* as above */
    for (j = 0; j < sk; j++) sum += s[j];
    inv = 1.0f / sum;
    for (j = 0; j < sk; j++) s[j] *= inv;
#endif
}

/* Query rows [r0, r1) of head h of batch b; kt and scores: this thread's scratch. */
static void attention_rows(const mlcc_attention_params *p, const float *q, const float *k,
                           const float *v, const float *mask, float *out, float *scratch,
                           int64_t b, int64_t h, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t sk = (ptrdiff_t)p->sk, d = (ptrdiff_t)p->d, dv = (ptrdiff_t)p->dv;
    const int64_t g = h / p->group;     /* the key/value head of query head h */
    const ptrdiff_t skp = padded(sk);
    const int64_t *qs = p->q_strides, *ks = p->k_strides, *vs = p->v_strides;
    const int64_t *ms = p->mask_strides, *os = p->out_strides;
    float *kt = scratch, *scores = scratch + d * skp;
    const float *kb = k + b * ks[0] + g * ks[1];
    const float *vb = v + b * vs[0] + g * vs[1];
    ptrdiff_t i0, r, j, c;

    for (c = 0; c < d; c++) {
        for (j = 0; j < sk; j++) kt[c * skp + j] = kb[j * ks[2] + c * ks[3]];
        for (; j < skp; j++) kt[c * skp + j] = 0.0f;
    }
    for (i0 = r0; i0 < r1; i0 += ROWS) {
        const ptrdiff_t rows = r1 - i0 < ROWS ? r1 - i0 : ROWS;
        const float *qr[ROWS];
        float *o[ROWS];
        for (r = 0; r < rows; r++) {
            qr[r] = q + b * qs[0] + h * qs[1] + (i0 + r) * qs[2];
            o[r] = out + b * os[0] + h * os[1] + (i0 + r) * os[2];
        }
        scores_block(rows, d, skp, qr, (ptrdiff_t)qs[3], kt, scores);
        for (r = 0; r < rows; r++)
            softmax_row(scores + r * skp, sk, skp, p->scale, p->softcap,
                        mask ? mask + b * ms[0] + h * ms[1] + (i0 + r) * ms[2] : NULL,
                        (ptrdiff_t)ms[3]);
        c = 0;
#if MLCC_HAVE_VECTORS
        if (vs[3] == 1 && os[3] == 1 && rows == ROWS) {
            /* four rows share each load of a V row */
            const float *s0 = scores, *s1 = scores + skp, *s2 = scores + 2 * skp,
                        *s3 = scores + 3 * skp;
            for (; c + MLCC_VF_LANES <= dv; c += MLCC_VF_LANES) {
                mlcc_vf a0 = mlcc_vf_splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
                for (j = 0; j < sk; j++) {
                    const mlcc_vf vr = mlcc_vf_load(vb + j * vs[2] + c);
                    a0 += mlcc_vf_splat(s0[j]) * vr;
                    a1 += mlcc_vf_splat(s1[j]) * vr;
                    a2 += mlcc_vf_splat(s2[j]) * vr;
                    a3 += mlcc_vf_splat(s3[j]) * vr;
                }
                mlcc_vf_store(o[0] + c, a0);
                mlcc_vf_store(o[1] + c, a1);
                mlcc_vf_store(o[2] + c, a2);
                mlcc_vf_store(o[3] + c, a3);
            }
        } else if (vs[3] == 1 && os[3] == 1) {
            for (; c + MLCC_VF_LANES <= dv; c += MLCC_VF_LANES) {
                for (r = 0; r < rows; r++) {
                    const float *sr = scores + r * skp;
                    mlcc_vf acc = mlcc_vf_splat(0.0f);
                    for (j = 0; j < sk; j++)
                        acc += mlcc_vf_splat(sr[j]) * mlcc_vf_load(vb + j * vs[2] + c);
                    mlcc_vf_store(o[r] + c, acc);
                }
            }
        }
#endif
        for (; c < dv; c++) {
            for (r = 0; r < rows; r++) {
                const float *sr = scores + r * skp;
                float acc = 0.0f;
                for (j = 0; j < sk; j++) acc += sr[j] * vb[j * vs[2] + c * vs[3]];
                o[r][c * os[3]] = acc;
            }
        }
        }
}

/* Units: (batch, head) pairs, each cut into q_units ranges of ROWS-row tiles when there are
 * fewer pairs than ATTENTION_UNITS (each unit packs its head's K again: d * sk copies against
 * its rows' 4 * d * sk multiply-adds per row). The cut depends on the shape alone, so results
 * are the same bits on any number of threads. */
#define ATTENTION_UNITS 16

typedef struct attention_job {
    const mlcc_attention_params *p;
    const float *q, *k, *v, *mask;
    float *out, *scratch;
    ptrdiff_t q_tiles, q_units, scratch_floats;
} attention_job;

static void attention_unit(void *arg, int unit, int thread) {
    const attention_job *job = (const attention_job *)arg;
    const ptrdiff_t pair = unit / job->q_units, qu = unit % job->q_units;
    const ptrdiff_t sq = (ptrdiff_t)job->p->sq;
    ptrdiff_t r0 = job->q_tiles * qu / job->q_units * ROWS;
    ptrdiff_t r1 = job->q_tiles * (qu + 1) / job->q_units * ROWS;
    if (r1 > sq) r1 = sq;
    if (r0 >= r1) return;
    attention_rows(job->p, job->q, job->k, job->v, job->mask, job->out,
                   job->scratch + thread * job->scratch_floats, pair / job->p->heads,
                   pair % job->p->heads, r0, r1);
}

void mlcc_f32_attention(const mlcc_attention_params *p, const float *q, const float *k,
                        const float *v, const float *mask, float *out, float *scratch,
                        mlcc_threadpool *pool) {
    const double pairs = (double)p->batch * (double)p->heads;
    const int nt = mlcc_threadpool_size(pool) < MLCC_ATTENTION_SLICES
                       ? mlcc_threadpool_size(pool) : MLCC_ATTENTION_SLICES;
    attention_job job;
    int64_t pair;
    job.p = p, job.q = q, job.k = k, job.v = v, job.mask = mask, job.out = out;
    job.scratch = scratch;
    job.scratch_floats = ((ptrdiff_t)p->d + ROWS) * padded((ptrdiff_t)p->sk);
    job.q_tiles = ((ptrdiff_t)p->sq + ROWS - 1) / ROWS;
    job.q_units = pairs >= ATTENTION_UNITS ? 1 : (ptrdiff_t)((ATTENTION_UNITS + pairs - 1) / pairs);
    if (job.q_units > job.q_tiles) job.q_units = job.q_tiles;
    if (job.q_units < 1) job.q_units = 1;
    if (nt > 1 && pairs * (double)job.q_units <= 65535.0 &&
        pairs * (double)p->sq * (double)p->sk * (double)p->d * 2.0 >=
            (double)MLCC_MIN_PARALLEL_MACS) {
        mlcc_threadpool_for(pool, attention_unit, &job, (int)(pairs * job.q_units), nt);
        return;
    }
    /* one thread: whole heads (query rows are tiled from 0 either way: the same bits) */
    for (pair = 0; pair < p->batch * p->heads; pair++)
        attention_rows(p, q, k, v, mask, out, scratch, pair / p->heads, pair % p->heads, 0,
                       (ptrdiff_t)p->sq);
}
