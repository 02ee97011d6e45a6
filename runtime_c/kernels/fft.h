/* DFT and STFT on a fast Fourier transform planned at compile time.
 *
 * One kernel, mlcc_f32_dft, runs both operators: ONNX DFT (one frame along an axis, inner > 1
 * for a non-last signal axis) and STFT (frames of n_in samples every frame_step samples,
 * each multiplied by a window). The transform of length n is a Stockham autosort FFT over the
 * radices in `radix` (2 and 4 with their own butterflies, other small primes by a generic one),
 * or, when n has a prime factor over 13, Bluestein's algorithm: a convolution of length
 * m (a power of two >= 2n - 1) done with that FFT. Every twiddle factor, the generic
 * butterflies' roots and Bluestein's chirp and its transform are computed by the compiler (in
 * double) and read from `plan`: nothing is computed with sin or cos at run time. The kernel
 * computes in double and rounds the outputs to float once (float sums missed the exact zeros,
 * e.g. the imaginary part of bin n/2 of a real signal, that ONNX's node tests check at atol
 * 1e-7); inverse transforms are forward ones on conjugates, divided by n. Thread-compatible: no state; x, y and scratch must not overlap. */
#ifndef MLCC_FFT_H
#define MLCC_FFT_H

#include "mlcc_kernel.h"

#define MLCC_FFT_MAX_STAGES 32

/* The input is read as x[((o * axis_len + f * frame_step + t) * inner + i) * in_complex_1]
 * (in_complex = 1: (re, im) pairs, else real values) for o < outer, f < frames, i < inner,
 * t < min(n_in, n): frame f of sequence (o, i), zero-padded to n when n_in < n; with a
 * window, sample t is multiplied by window[t] (t < n_in). The output is
 * y[(((o * frames + f) * n_out + k) * inner + i) * 2 + {0: re, 1: im}] = X[k] for k < n_out,
 * X the DFT of length n (inverse: exp(+2 pi i k t / n) / n).
 * hermitian (the one-sided inverse, irfft; frames = 1, n_in = axis_len): the input holds
 * X[0..n_in) of a Hermitian spectrum, read as X[t] (t <= n / 2) and conj(X[n - t]) (t > n / 2),
 * 0 past n_in; the output is real: y[(o * n_out + k) * inner + i], the real part (which
 * ignores the imaginary parts of bins 0 and n / 2, as numpy's irfft does). */
typedef struct mlcc_dft_params {
    int64_t outer, inner, axis_len, frames, frame_step;
    int32_t n_in;                /* samples read per frame (<= axis_len) */
    int32_t n;                   /* transform length */
    int32_t n_out;               /* bins written: n, or n / 2 + 1 (onesided) */
    int32_t in_complex;          /* 1: input pairs (re, im); 0: real input */
    int32_t inverse;             /* 1: inverse transform, scaled by 1 / n */
    int32_t windowed;            /* 1: window holds n_in floats */
    int32_t hermitian;           /* 1: one-sided inverse to a real output (see above) */
    int32_t fft_n;               /* length of the FFT run: n, or Bluestein's m */
    int32_t nstages;             /* radices of the FFT of length fft_n, in order */
    int32_t radix[MLCC_FFT_MAX_STAGES];
    int32_t bluestein;           /* 1: n by a convolution of length fft_n */
} mlcc_dft_params;

/* plan (complex doubles, re and im interleaved), in this order:
 *   per stage s (radix p, L = product of the earlier radices): (p - 1) * L twiddles
 *     w[k * (p - 1) + q - 1] = exp(-2 pi i q k / (L p)), k < L, 1 <= q < p;
 *     then, for a radix other than 2 and 4, the p roots exp(-2 pi i j / p);
 *   with bluestein: the chirp c[t] = exp(-pi i t^2 / n) (n values), then the fft_n values
 *     B = FFT(b) / fft_n of b[u] = conj(c[|u|]) on u = -(n - 1)..n - 1 (circularly).
 * scratch: 4 * fft_n doubles per thread (MLCC_DFT_SLICES of them, one without threads): on a
 * pool, the transforms are split between threads. */
#define MLCC_DFT_SLICES 4
void mlcc_f32_dft(const mlcc_dft_params *p, const float *x, const float *window,
                  const double *plan, float *y, double *scratch, mlcc_threadpool *pool);

#endif /* MLCC_FFT_H */
