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

/* K(x, sv) from the sum over the features (x.sv, or |x - sv|^2 for RBF). */
static float svm_kernel_of(const mlcc_svm_params *p, float sum) {
    switch (p->kernel) {
    case MLCC_SVM_RBF: return expf(-p->gamma * sum);
    case MLCC_SVM_POLY: return powf(p->gamma * sum + p->coef0, p->degree);
    case MLCC_SVM_SIGMOID: return tanhf(p->gamma * sum + p->coef0);
    default: return sum;
    }
}

/* The kernel values of row x against support vector block b (MLCC_SVM_BLOCK of them, ml.h's
 * layout) into k[0..MLCC_SVM_BLOCK). Each vector's sum runs over the features in order, a
 * vector of lanes at a time; RBF's exponential by mlcc_vf_exp (within 2 ulp of expf), the
 * other kernels' functions per value. */
static void svm_block(const mlcc_svm_params *p, const float *x, const float *svb, float *k) {
    const ptrdiff_t f = (ptrdiff_t)p->features;
    const int rbf = p->kernel == MLCC_SVM_RBF;
    ptrdiff_t j, i;
#if MLCC_HAVE_VECTORS
    enum { NV = MLCC_SVM_BLOCK / MLCC_VF_LANES > 0 ? MLCC_SVM_BLOCK / MLCC_VF_LANES : 1 };
    mlcc_vf acc[NV];
    for (i = 0; i < NV; i++) acc[i] = mlcc_vf_splat(0.0f);
    for (j = 0; j < f; j++) {
        const mlcc_vf xv = mlcc_vf_splat(x[j]);
        for (i = 0; i < NV; i++) {
            const mlcc_vf s = mlcc_vf_load(svb + j * MLCC_SVM_BLOCK + i * MLCC_VF_LANES);
            if (rbf) {
                const mlcc_vf d = xv - s;
                acc[i] += d * d;
            } else {
                acc[i] += xv * s;
            }
        }
    }
    for (i = 0; i < NV; i++) {
        if (rbf) acc[i] = mlcc_vf_exp(acc[i] * -p->gamma);
        mlcc_vf_store(k + i * MLCC_VF_LANES, acc[i]);
    }
    if (!rbf)
        for (i = 0; i < MLCC_SVM_BLOCK; i++) k[i] = svm_kernel_of(p, k[i]);
#else
    for (i = 0; i < MLCC_SVM_BLOCK; i++) {
        float sum = 0.0f;
        for (j = 0; j < f; j++) {
            const float s = svb[j * MLCC_SVM_BLOCK + i];
            sum += rbf ? (x[j] - s) * (x[j] - s) : x[j] * s;
        }
        k[i] = svm_kernel_of(p, sum);
    }
#endif
}

/* The rows [r0, r1) of a regressor or classifier (svm_job), on scratch slice `thread`. */
typedef struct svm_job {
    const mlcc_svm_params *p;
    const mlcc_svm_classifier_params *cp;   /* NULL for the regressor */
    const float *x, *sv, *coef, *rho;
    const int64_t *per_class, *labels;
    int64_t *label;
    float *y;                               /* regressor values, or classifier scores */
    unsigned char *scratch;
    ptrdiff_t units;
} svm_job;

static void svm_regressor_rows(const svm_job *job, ptrdiff_t r0, ptrdiff_t r1) {
    const mlcc_svm_params *p = job->p;
    const ptrdiff_t f = (ptrdiff_t)p->features, nv = (ptrdiff_t)p->vectors;
    float k[MLCC_SVM_BLOCK];
    ptrdiff_t r, j, b;
    for (r = r0; r < r1; r++) {
        const float *xr = job->x + r * f;
        float v = 0.0f;
        if (nv > 0) {
            for (b = 0; b * MLCC_SVM_BLOCK < nv; b++) {
                const ptrdiff_t n = nv - b * MLCC_SVM_BLOCK;
                svm_block(p, xr, job->sv + b * f * MLCC_SVM_BLOCK, k);
                for (j = 0; j < (n < MLCC_SVM_BLOCK ? n : MLCC_SVM_BLOCK); j++)
                    v += job->coef[b * MLCC_SVM_BLOCK + j] * k[j];
            }
        } else {
            for (j = 0; j < f; j++) v += xr[j] * job->coef[j];
        }
        v += p->rho;
        job->y[r] = p->one_class ? (v > 0.0f ? 1.0f : -1.0f) : v;
    }
}

static void svm_classifier_rows(const svm_job *job, ptrdiff_t r0, ptrdiff_t r1, int thread) {
    const mlcc_svm_classifier_params *p = job->cp;
    const mlcc_svm_params *q = &p->svm;
    const ptrdiff_t f = (ptrdiff_t)q->features, nv = (ptrdiff_t)q->vectors;
    const ptrdiff_t nc = (ptrdiff_t)p->classes;
    const ptrdiff_t width = nv > 0 ? (nc > 2 ? nc * (nc - 1) / 2 : 2) : nc;
    const float *coef = job->coef;
    unsigned char *slice = job->scratch + (size_t)thread * mlcc_svm_slice_bytes(p);
    float *kern = (float *)slice;
    int64_t *votes = (int64_t *)(slice + mlcc_svm_slice_bytes(p) - (size_t)nc * sizeof(int64_t));
    ptrdiff_t r, a, b, m, v;
    for (r = r0; r < r1; r++) {
        const float *xr = job->x + r * f;
        float *s = job->y + r * width;
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
            job->label[r] = job->labels[best];
            mlcc_ml_post_transform(p->post, s, nc);
            continue;
        }
        for (v = 0; v * MLCC_SVM_BLOCK < nv; v++)
            svm_block(q, xr, job->sv + v * f * MLCC_SVM_BLOCK, kern + v * MLCC_SVM_BLOCK);
        for (a = 0; a < nc; a++) votes[a] = 0;
        {
            ptrdiff_t pair = 0, start_a = 0;
            for (a = 0; a < nc - 1; a++) {
                ptrdiff_t start_b = start_a + (ptrdiff_t)job->per_class[a];
                for (b = a + 1; b < nc; b++) {
                    double d = 0.0;
                    for (m = 0; m < (ptrdiff_t)job->per_class[a]; m++)
                        d += (double)(coef[(b - 1) * nv + start_a + m] * kern[start_a + m]);
                    for (m = 0; m < (ptrdiff_t)job->per_class[b]; m++)
                        d += (double)(coef[a * nv + start_b + m] * kern[start_b + m]);
                    d += (double)job->rho[pair];
                    s[pair++] = (float)d;
                    votes[d > 0.0 ? a : b]++;
                    start_b += (ptrdiff_t)job->per_class[b];
                }
                start_a += (ptrdiff_t)job->per_class[a];
            }
        }
        for (a = 1; a < nc; a++)
            if (votes[a] > votes[best]) best = a;
        job->label[r] = job->labels[best];
        if (nc == 2)
            mlcc_ml_binary_scores(s[0], p->post, p->post == MLCC_ML_POST_NONE ? 2 : 0, s);
        else
            mlcc_ml_post_transform(p->post, s, width);
    }
}

static void svm_unit(void *arg, int unit, int thread) {
    const svm_job *job = (const svm_job *)arg;
    const ptrdiff_t rows = (ptrdiff_t)job->p->rows;
    const ptrdiff_t r0 = rows * unit / job->units, r1 = rows * (unit + 1) / job->units;
    if (job->cp != NULL)
        svm_classifier_rows(job, r0, r1, thread);
    else
        svm_regressor_rows(job, r0, r1);
}

/* Rows over at most MLCC_SVM_SLICES threads (the classifier's scratch slices), where a row's
 * kernel values are worth a wake-up. */
static void svm_run(svm_job *job, mlcc_threadpool *pool) {
    const mlcc_svm_params *p = job->p;
    mlcc_parallel_sliced(pool, MLCC_SVM_SLICES, svm_unit, job, &job->units, (ptrdiff_t)p->rows,
                         (double)p->rows * (double)(p->vectors > 0 ? p->vectors : 1) *
                             (double)p->features,
                         (double)MLCC_MIN_PARALLEL_MACS);
}

void mlcc_f32_svm_regressor(const mlcc_svm_params *p, const float *x, const float *sv,
                            const float *coef, float *y, mlcc_threadpool *pool) {
    svm_job job = {0};
    job.p = p;
    job.x = x;
    job.sv = sv;
    job.coef = coef;
    job.y = y;
    svm_run(&job, pool);
}

void mlcc_f32_svm_classifier(const mlcc_svm_classifier_params *p, const float *x,
                             const float *sv, const float *coef, const float *rho,
                             const int64_t *per_class, const int64_t *labels, int64_t *label,
                             float *scores, void *scratch, mlcc_threadpool *pool) {
    svm_job job = {0};
    job.p = &p->svm;
    job.cp = p;
    job.x = x;
    job.sv = sv;
    job.coef = coef;
    job.rho = rho;
    job.per_class = per_class;
    job.labels = labels;
    job.label = label;
    job.y = scores;
    job.scratch = (unsigned char *)scratch;
    svm_run(&job, pool);
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
