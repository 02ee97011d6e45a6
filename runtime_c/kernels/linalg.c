#include "linalg.h"

static double lu_det(double *a, ptrdiff_t n) {
    double det = 1.0;
    ptrdiff_t k, i, j;
    for (k = 0; k < n; k++) {
        ptrdiff_t piv = k;
        double best = fabs(a[k * n + k]);
        for (i = k + 1; i < n; i++)
            if (fabs(a[i * n + k]) > best) {
                best = fabs(a[i * n + k]);
                piv = i;
            }
        if (best == 0.0) return 0.0;
        if (piv != k) {
            for (j = 0; j < n; j++) {
                const double t = a[k * n + j];
                a[k * n + j] = a[piv * n + j];
                a[piv * n + j] = t;
            }
            det = -det;
        }
        det *= a[k * n + k];
        for (i = k + 1; i < n; i++) {
            const double f = a[i * n + k] / a[k * n + k];
            for (j = k + 1; j < n; j++) a[i * n + j] -= f * a[k * n + j];
        }
    }
    return det;
}

void mlcc_f32_det(const mlcc_det_params *p, const float *x, float *y, void *scratch) {
    const ptrdiff_t n = (ptrdiff_t)p->n, size = n * n;
    double *a = (double *)scratch;
    ptrdiff_t b, i;
    for (b = 0; b < (ptrdiff_t)p->batch; b++) {
        for (i = 0; i < size; i++) a[i] = x[b * size + i];
        y[b] = (float)lu_det(a, n);
    }
}
