#include "ml.h"

float mlcc_ml_logistic(float v) {
    const float e = 1.0f / (1.0f + expf(-fabsf(v)));
    return v < 0.0f ? 1.0f - e : e;
}

/* sqrt(2) * erfinv(2v - 1), erfinv by Winitzki's closed form with a = 0.147 (the
 * approximation onnxruntime uses, so that PROBIT outputs agree with it). */
float mlcc_ml_probit(float v) {
    const float a = 0.147f, pi = 3.14159f;
    float x = 2.0f * v - 1.0f;
    const float sgn = x < 0.0f ? -1.0f : 1.0f;
    const float ln = logf((1.0f - x) * (1.0f + x));
    const float t = 2.0f / (pi * a) + 0.5f * ln;
    x = sgn * sqrtf(-t + sqrtf(t * t - ln / a));
    return 1.41421356f * x;
}

void mlcc_ml_post_transform(int post, float *s, ptrdiff_t n) {
    ptrdiff_t i;
    float mx = -3.402823466e38f, sum = 0.0f;
    switch (post) {
    case MLCC_ML_POST_LOGISTIC:
        for (i = 0; i < n; i++) s[i] = mlcc_ml_logistic(s[i]);
        break;
    case MLCC_ML_POST_PROBIT:
        for (i = 0; i < n; i++) s[i] = mlcc_ml_probit(s[i]);
        break;
    case MLCC_ML_POST_SOFTMAX:
        for (i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
        for (i = 0; i < n; i++) {
            s[i] = expf(s[i] - mx);
            sum += s[i];
        }
        for (i = 0; i < n; i++) s[i] /= sum;
        break;
    case MLCC_ML_POST_SOFTMAX_ZERO: {
        /* scores of (nearly) 0 stay 0 after the exponential: "no score" */
        float scale;
        for (i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
        scale = expf(-mx);
        for (i = 0; i < n; i++) {
            if (s[i] > 1e-7f || s[i] < -1e-7f) {
                s[i] = expf(s[i] - mx);
                sum += s[i];
            } else {
                s[i] *= scale;
            }
        }
        for (i = 0; i < n; i++) s[i] /= sum;
        break;
    }
    default:
        break;
    }
}

/* The two score columns of a two-class classifier that has one score s, as onnxruntime
 * writes them: with LOGISTIC logistic(-s), logistic(s); otherwise, for weights all positive
 * (which = 0 or 1: a probability) 1 - s, s, for mixed weights (which = 2 or 3: a margin)
 * -s, s; which = -1 (two class ids, the second without a score in this row): s, 0. */
void mlcc_ml_binary_scores(float sc, int post, int which, float *out) {
    if (which >= 0 && post == MLCC_ML_POST_LOGISTIC) {
        out[0] = mlcc_ml_logistic(-sc);
        out[1] = mlcc_ml_logistic(sc);
    } else if (which == 0 || which == 1) {
        out[0] = 1.0f - sc;
        out[1] = sc;
    } else if (which >= 2) {
        out[0] = -sc;
        out[1] = sc;
    } else {
        out[0] = sc;
        out[1] = 0.0f;
    }
}

void mlcc_f32_linear(const mlcc_linear_params *p, const float *x, const float *coef,
                     const float *intercepts, const int64_t *labels, int64_t *label,
                     float *scores) {
    const ptrdiff_t f = (ptrdiff_t)p->features, c = (ptrdiff_t)p->targets;
    ptrdiff_t r, t, k;
    for (r = 0; r < (ptrdiff_t)p->rows; r++) {
        const float *xr = x + r * f;
        float *s = scores + r * (p->binary ? 2 : c);
        for (t = 0; t < c; t++) {
            float acc = 0.0f;
            for (k = 0; k < f; k++) acc += xr[k] * coef[t * f + k];
            s[t] = acc + intercepts[t];
        }
        if (p->binary) {
            label[r] = labels[s[0] > 0.0f];
            mlcc_ml_binary_scores(s[0], p->post, 1, s);
            continue;
        }
        if (p->classifier) {
            ptrdiff_t best = 0;
            for (t = 1; t < c; t++)
                if (s[t] > s[best]) best = t;
            label[r] = labels[best];
        }
        mlcc_ml_post_transform(p->post, s, c);
    }
}

static float svm_kernel(const mlcc_svm_params *p, const float *x, const float *sv) {
    const ptrdiff_t f = (ptrdiff_t)p->features;
    float sum = 0.0f;
    ptrdiff_t k;
    if (p->kernel == MLCC_SVM_RBF) {
        for (k = 0; k < f; k++) sum += (x[k] - sv[k]) * (x[k] - sv[k]);
        return expf(-p->gamma * sum);
    }
    for (k = 0; k < f; k++) sum += x[k] * sv[k];
    if (p->kernel == MLCC_SVM_POLY) return powf(p->gamma * sum + p->coef0, p->degree);
    if (p->kernel == MLCC_SVM_SIGMOID) return tanhf(p->gamma * sum + p->coef0);
    return sum;
}

void mlcc_f32_svm_regressor(const mlcc_svm_params *p, const float *x, const float *sv,
                            const float *coef, float *y) {
    const ptrdiff_t f = (ptrdiff_t)p->features;
    ptrdiff_t r, j;
    for (r = 0; r < (ptrdiff_t)p->rows; r++) {
        const float *xr = x + r * f;
        float v = 0.0f;
        if (p->vectors > 0) {
            for (j = 0; j < (ptrdiff_t)p->vectors; j++)
                v += coef[j] * svm_kernel(p, xr, sv + j * f);
        } else {
            for (j = 0; j < f; j++) v += xr[j] * coef[j];
        }
        v += p->rho;
        y[r] = p->one_class ? (v > 0.0f ? 1.0f : -1.0f) : v;
    }
}

void mlcc_f32_svm_classifier(const mlcc_svm_classifier_params *p, const float *x,
                             const float *sv, const float *coef, const float *rho,
                             const int64_t *per_class, const int64_t *labels, int64_t *label,
                             float *scores, void *scratch) {
    const mlcc_svm_params *q = &p->svm;
    const ptrdiff_t f = (ptrdiff_t)q->features, nv = (ptrdiff_t)q->vectors;
    const ptrdiff_t nc = (ptrdiff_t)p->classes;
    const ptrdiff_t width = nv > 0 ? (nc > 2 ? nc * (nc - 1) / 2 : 2) : nc;
    float *kern = (float *)scratch;
    int64_t *votes = (int64_t *)((char *)scratch + (size_t)(nv > 0 ? nv : 1) * sizeof(float));
    ptrdiff_t r, a, b, m, v;
    for (r = 0; r < (ptrdiff_t)q->rows; r++) {
        const float *xr = x + r * f;
        float *s = scores + r * width;
        ptrdiff_t best = 0;
        if (nv == 0) {
            for (a = 0; a < nc; a++) {
                float acc = 0.0f;
                for (m = 0; m < f; m++) acc += xr[m] * coef[a * f + m];
                s[a] = acc + q->rho;
            }
            for (a = 1; a < nc; a++)
                if (s[a] > s[best]) best = a;
            if (nc == 2 && ((p->all_positive && s[best] >= 0.5f) ||
                            (!p->all_positive && s[best] > 0.0f)))
                best = 1;
            label[r] = labels[best];
            mlcc_ml_post_transform(p->post, s, nc);
            continue;
        }
        for (v = 0; v < nv; v++) kern[v] = svm_kernel(q, xr, sv + v * f);
        for (a = 0; a < nc; a++) votes[a] = 0;
        {
            ptrdiff_t pair = 0, start_a = 0;
            for (a = 0; a < nc - 1; a++) {
                ptrdiff_t start_b = start_a + (ptrdiff_t)per_class[a];
                for (b = a + 1; b < nc; b++) {
                    double d = 0.0;
                    for (m = 0; m < (ptrdiff_t)per_class[a]; m++)
                        d += (double)(coef[(b - 1) * nv + start_a + m] * kern[start_a + m]);
                    for (m = 0; m < (ptrdiff_t)per_class[b]; m++)
                        d += (double)(coef[a * nv + start_b + m] * kern[start_b + m]);
                    d += (double)rho[pair];
                    s[pair++] = (float)d;
                    votes[d > 0.0 ? a : b]++;
                    start_b += (ptrdiff_t)per_class[b];
                }
                start_a += (ptrdiff_t)per_class[a];
            }
        }
        for (a = 1; a < nc; a++)
            if (votes[a] > votes[best]) best = a;
        label[r] = labels[best];
        if (nc == 2)
            mlcc_ml_binary_scores(s[0], p->post, p->post == MLCC_ML_POST_NONE ? 2 : 0, s);
        else
            mlcc_ml_post_transform(p->post, s, width);
    }
}

void mlcc_f32_scaler(const mlcc_ml_features_params *p, const float *x, const float *offset,
                     const float *scale, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n, f = (ptrdiff_t)p->features;
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        const ptrdiff_t j = i % f;
        y[i] = (x[i] - offset[p->n_offset > 1 ? j : 0]) * scale[p->n_scale > 1 ? j : 0];
    }
}

void mlcc_f32_imputer(const mlcc_ml_features_params *p, const float *x, const float *imputed,
                      float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n, f = (ptrdiff_t)p->features;
    const float replaced = p->value;
    const int nan = replaced != replaced;
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        const int hit = nan ? x[i] != x[i] : x[i] == replaced;
        y[i] = hit ? imputed[p->n_offset > 1 ? i % f : 0] : x[i];
    }
}

void mlcc_f32_binarizer(const mlcc_ml_features_params *p, const float *x, float *y) {
    ptrdiff_t i;
    for (i = 0; i < (ptrdiff_t)p->n; i++)
        y[i] = x[i] > p->value ? 1.0f : 0.0f;
}

void mlcc_f32_normalizer(const mlcc_normalizer_params *p, const float *x, float *y) {
    const ptrdiff_t f = (ptrdiff_t)p->features;
    ptrdiff_t r, k;
    for (r = 0; r < (ptrdiff_t)p->rows; r++) {
        const float *xr = x + r * f;
        float *yr = y + r * f, norm = 0.0f;
        if (p->norm == MLCC_ML_NORM_MAX) {
            norm = xr[0];
            for (k = 1; k < f; k++) norm = xr[k] > norm ? xr[k] : norm;
        } else if (p->norm == MLCC_ML_NORM_L1) {
            for (k = 0; k < f; k++) norm += fabsf(xr[k]);
        } else {
            for (k = 0; k < f; k++) norm += xr[k] * xr[k];
            norm = sqrtf(norm);
        }
        for (k = 0; k < f; k++) yr[k] = xr[k] / norm;
    }
}

static ptrdiff_t find_i64(const int64_t *keys, ptrdiff_t n, int64_t v) {
    ptrdiff_t lo = 0, hi = n;
    while (lo < hi) {
        const ptrdiff_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && keys[lo] == v ? lo : -1;
}

int mlcc_i64_one_hot_encoder(const mlcc_one_hot_encoder_params *p, const int64_t *x,
                             const int64_t *cats, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n, c = (ptrdiff_t)p->n_cats;
    ptrdiff_t i, k;
    if (!p->zeros)
        for (i = 0; i < n; i++) {
            for (k = 0; k < c && cats[k] != x[i]; k++) {
            }
            if (k == c) return MLCC_ERR_INDEX_OUT_OF_RANGE;
        }
    for (i = 0; i < n; i++)
        for (k = 0; k < c; k++) y[i * c + k] = cats[k] == x[i] ? 1.0f : 0.0f;
    return MLCC_OK;
}

void mlcc_i64_label_encoder(const mlcc_label_encoder_params *p, const int64_t *x,
                            const int64_t *keys, const void *values, const void *dflt, void *y) {
    const size_t size = (size_t)p->value_size;
    ptrdiff_t i;
    for (i = 0; i < (ptrdiff_t)p->n; i++) {
        const ptrdiff_t k = find_i64(keys, (ptrdiff_t)p->n_keys, x[i]);
        memcpy((char *)y + (size_t)i * size,
               k < 0 ? dflt : (const void *)((const char *)values + (size_t)k * size), size);
    }
}

void mlcc_f32_label_encoder(const mlcc_label_encoder_params *p, const float *x,
                            const float *keys, const void *values, const void *dflt, void *y) {
    const size_t size = (size_t)p->value_size;
    const ptrdiff_t nk = (ptrdiff_t)p->n_keys;
    ptrdiff_t i;
    for (i = 0; i < (ptrdiff_t)p->n; i++) {
        const float v = x[i];
        ptrdiff_t lo = 0, hi = nk;
        while (lo < hi) {       /* NaN compares false: it ends past the keys, not found */
            const ptrdiff_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < v)
                lo = mid + 1;
            else
                hi = mid;
        }
        memcpy((char *)y + (size_t)i * size,
               lo < nk && keys[lo] == v ? (const void *)((const char *)values + (size_t)lo * size)
                                        : dflt,
               size);
    }
}
