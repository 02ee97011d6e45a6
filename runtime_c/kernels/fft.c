#include "fft.h"

#define MAX_GENERIC_RADIX 13

/* One Stockham stage of radix r over n complex values (a -> b). Before it, a holds the
 * length-L DFTs of the s = n / L interleaved subsequences (a[j + s * k] = X_j[k]); after it,
 * b holds those of the s / r subsequences of length L * r. tw: (r - 1) * L twiddles, then for
 * the generic butterfly r roots of unity. */
static void fft_stage(int32_t r, ptrdiff_t n, ptrdiff_t L, const double *tw,
                      const double *MLCC_RESTRICT a, double *MLCC_RESTRICT b) {
    const ptrdiff_t s = n / L, s2 = s / r;
    ptrdiff_t k, j;
    for (k = 0; k < L; k++) {
        const double *w = tw + 2 * k * (r - 1);
        const double *in = a + 2 * s * k;
        double *out = b + 2 * s2 * k;
        if (r == 2) {
            const double w1r = w[0], w1i = w[1];
            for (j = 0; j < s2; j++) {
                const double *x0 = in + 2 * j, *x1 = in + 2 * (j + s2);
                const double t1r = x1[0] * w1r - x1[1] * w1i, t1i = x1[0] * w1i + x1[1] * w1r;
                double *y0 = out + 2 * j, *y1 = out + 2 * (j + s2 * L);
                y0[0] = x0[0] + t1r;
                y0[1] = x0[1] + t1i;
                y1[0] = x0[0] - t1r;
                y1[1] = x0[1] - t1i;
            }
        } else if (r == 4) {
            const double w1r = w[0], w1i = w[1], w2r = w[2], w2i = w[3], w3r = w[4], w3i = w[5];
            for (j = 0; j < s2; j++) {
                const double *x0 = in + 2 * j, *x1 = in + 2 * (j + s2);
                const double *x2 = in + 2 * (j + 2 * s2), *x3 = in + 2 * (j + 3 * s2);
                const double t1r = x1[0] * w1r - x1[1] * w1i, t1i = x1[0] * w1i + x1[1] * w1r;
                const double t2r = x2[0] * w2r - x2[1] * w2i, t2i = x2[0] * w2i + x2[1] * w2r;
                const double t3r = x3[0] * w3r - x3[1] * w3i, t3i = x3[0] * w3i + x3[1] * w3r;
                const double ar = x0[0] + t2r, ai = x0[1] + t2i;     /* t0 + t2 */
                const double br = x0[0] - t2r, bi = x0[1] - t2i;     /* t0 - t2 */
                const double cr = t1r + t3r, ci = t1i + t3i;         /* t1 + t3 */
                const double dr = t1r - t3r, di = t1i - t3i;         /* t1 - t3 */
                double *y0 = out + 2 * j, *y1 = out + 2 * (j + s2 * L);
                double *y2 = out + 2 * (j + 2 * s2 * L), *y3 = out + 2 * (j + 3 * s2 * L);
                y0[0] = ar + cr;
                y0[1] = ai + ci;
                y2[0] = ar - cr;
                y2[1] = ai - ci;
                y1[0] = br + di;                                    /* b - i d */
                y1[1] = bi - dr;
                y3[0] = br - di;                                    /* b + i d */
                y3[1] = bi + dr;
            }
        } else {
            const double *root = tw + 2 * L * (r - 1);
            double t[2 * MAX_GENERIC_RADIX];
            int32_t q, m;
            for (j = 0; j < s2; j++) {
                t[0] = in[2 * j];
                t[1] = in[2 * j + 1];
                for (q = 1; q < r; q++) {
                    const double *xq = in + 2 * (j + q * s2);
                    const double wr = w[2 * (q - 1)], wi = w[2 * (q - 1) + 1];
                    t[2 * q] = xq[0] * wr - xq[1] * wi;
                    t[2 * q + 1] = xq[0] * wi + xq[1] * wr;
                }
                for (m = 0; m < r; m++) {
                    double sr = t[0], si = t[1];
                    int32_t e = 0;
                    for (q = 1; q < r; q++) {
                        e += m;
                        if (e >= r) e -= r;                         /* e = q * m mod r */
                        sr += t[2 * q] * root[2 * e] - t[2 * q + 1] * root[2 * e + 1];
                        si += t[2 * q] * root[2 * e + 1] + t[2 * q + 1] * root[2 * e];
                    }
                    out[2 * (j + m * s2 * L)] = sr;
                    out[2 * (j + m * s2 * L) + 1] = si;
                }
            }
        }
    }
}

/* Doubles of plan a stage of radix r after L reads: twiddles, a generic radix's roots. */
static ptrdiff_t stage_values(int32_t r, ptrdiff_t L) {
    return 2 * L * (r - 1) + (r == 2 || r == 4 ? 0 : 2 * r);
}

/* The DFT of the n complex values in a, using b as the other buffer; returns the buffer that
 * holds the result. *plan is advanced past the stages' twiddles. */
static double *fft_run(const mlcc_dft_params *p, ptrdiff_t n, const double **plan, double *a,
                      double *b) {
    ptrdiff_t L = 1;
    int32_t s;
    for (s = 0; s < p->nstages; s++) {
        const int32_t r = p->radix[s];
        double *t;
        fft_stage(r, n, L, *plan, a, b);
        *plan += stage_values(r, L);
        L *= r;
        t = a;
        a = b;
        b = t;
    }
    return a;
}

/* The transforms of a dft_job's range, on its thread's scratch slice. */
typedef struct dft_job {
    const mlcc_dft_params *p;
    const float *x, *window;
    const double *plan;
    float *y;
    double *scratch;
    ptrdiff_t units;
} dft_job;

static void dft_unit(void *arg, int unit, int thread) {
    const dft_job *job = (const dft_job *)arg;
    const mlcc_dft_params *p = job->p;
    const float *x = job->x, *window = job->window;
    const double *plan = job->plan;
    float *y = job->y;
    const ptrdiff_t n = p->n, m = p->fft_n, inner = p->inner;
    const ptrdiff_t n_read = p->hermitian ? p->n : p->n_in < p->n ? p->n_in : p->n;
    const ptrdiff_t in_w = p->in_complex ? 2 : 1;
    const ptrdiff_t count = (ptrdiff_t)(p->outer * p->frames) * inner;
    const double sign = p->inverse ? -1.0 : 1.0;
    const double scale = p->inverse ? 1.0 / (double)p->n : 1.0;
    double *a = job->scratch + (ptrdiff_t)thread * 4 * m, *b = a + 2 * m;
    const double *chirp = NULL, *kernel_hat = NULL;
    ptrdiff_t j, t, k;
    if (p->bluestein) {
        /* after the FFT's stages (fft_run reads them from plan): the chirp, then B */
        const double *q = plan;
        int32_t s;
        ptrdiff_t L = 1;
        for (s = 0; s < p->nstages; s++) {
            q += stage_values(p->radix[s], L);
            L *= p->radix[s];
        }
        chirp = q;
        kernel_hat = q + 2 * n;
    }
    /* transform j: (outer o, frame f, inner i), in that order */
    for (j = count * unit / job->units; j < count * (unit + 1) / job->units; j++) {
        const ptrdiff_t i = j % inner, f = j / inner % (ptrdiff_t)p->frames;
        const ptrdiff_t o = j / inner / (ptrdiff_t)p->frames;
        const double *plan_at = plan;
        const ptrdiff_t base = (o * p->axis_len + f * p->frame_step) * inner + i;
        double *res;
        for (t = 0; t < n_read; t++) {
            /* hermitian: X[t] for t <= n / 2, conj(X[n - t]) above, 0 past n_in */
            const ptrdiff_t src = p->hermitian && 2 * t > n ? n - t : t;
            double re = 0.0, im = 0.0;
            if (src < p->n_in) {
                const float *v = x + (base + src * inner) * in_w;
                re = v[0];
                im = p->in_complex ? (src != t ? -sign : sign) * v[1] : 0.0;
            }
            if (p->windowed) {
                re *= window[t];
                im *= window[t];
            }
            if (chirp) {
                const double cr = chirp[2 * t], ci = chirp[2 * t + 1];
                a[2 * t] = re * cr - im * ci;
                a[2 * t + 1] = re * ci + im * cr;
            } else {
                a[2 * t] = re;
                a[2 * t + 1] = im;
            }
        }
        for (t = n_read; t < m; t++) {
            a[2 * t] = 0.0;
            a[2 * t + 1] = 0.0;
        }
        res = fft_run(p, m, &plan_at, a, b);
        if (chirp) {
            /* conv = conj(FFT(conj(A * B))) with B = FFT(b) / m; X[k] = c[k] conv[k] */
            double *other = res == a ? b : a;
            const double *q = plan;
            for (k = 0; k < m; k++) {
                const double ar = res[2 * k], ai = res[2 * k + 1];
                const double br = kernel_hat[2 * k], bi = kernel_hat[2 * k + 1];
                res[2 * k] = ar * br - ai * bi;
                res[2 * k + 1] = -(ar * bi + ai * br);
            }
            res = fft_run(p, m, &q, res, other);
            for (k = 0; k < p->n_out; k++) {
                const double cr = res[2 * k], ci = -res[2 * k + 1];
                const double wr = chirp[2 * k], wi = chirp[2 * k + 1];
                res[2 * k] = cr * wr - ci * wi;
                res[2 * k + 1] = cr * wi + ci * wr;
            }
        }
        for (k = 0; k < p->n_out; k++) {
            const ptrdiff_t at = ((o * p->frames + f) * p->n_out + k) * inner + i;
            if (p->hermitian) {
                y[at] = (float)(res[2 * k] * scale);      /* the real part only */
            } else {
                y[2 * at] = (float)(res[2 * k] * scale);
                y[2 * at + 1] = (float)(sign * res[2 * k + 1] * scale);
            }
        }
    }
}

/* On a pool, ranges of the transforms (frames, rows) between at most MLCC_DFT_SLICES threads,
 * each transform computed whole by one thread: the same bits on any number of threads. */
void mlcc_f32_dft(const mlcc_dft_params *p, const float *x, const float *window,
                  const double *plan, float *y, double *scratch, mlcc_threadpool *pool) {
    dft_job job;
    const ptrdiff_t count = (ptrdiff_t)(p->outer * p->frames * p->inner);
    job.p = p;
    job.x = x;
    job.window = window;
    job.plan = plan;
    job.y = y;
    job.scratch = scratch;
    /* work: about fft_n log2(fft_n) butterflies per transform, two FFTs with Bluestein */
    mlcc_parallel_sliced(pool, MLCC_DFT_SLICES, dft_unit, &job, &job.units, count,
                         (double)count * (double)p->fft_n * (double)(p->nstages + 1) *
                             (p->bluestein ? 2.0 : 1.0),
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}
