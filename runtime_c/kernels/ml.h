/* The ai.onnx.ml operators other than the tree ensembles (mlcc/ops/ml.py; trees.h has
 * those): linear models, SVMRegressor and SVMClassifier, Scaler, Normalizer, Binarizer,
 * Imputer, OneHotEncoder and LabelEncoder, as onnxruntime computes them (float32), and the
 * post transforms they share with the trees. Thread-compatible: no state; outputs must not overlap inputs. */
#ifndef MLCC_ML_H
#define MLCC_ML_H

#include "mlcc_kernel.h"

enum mlcc_ml_post {
    MLCC_ML_POST_NONE = 0, MLCC_ML_POST_LOGISTIC = 1, MLCC_ML_POST_SOFTMAX = 2,
    MLCC_ML_POST_SOFTMAX_ZERO = 3, MLCC_ML_POST_PROBIT = 4
};

/* The post transforms on one row of n scores, in place, as onnxruntime computes them:
 * logistic 1 / (1 + exp(-|v|)) mirrored for v < 0; probit sqrt(2) erfinv(2v - 1) by
 * Winitzki's approximation (a = 0.147, onnxruntime's); softmax from the row's maximum;
 * SOFTMAX_ZERO leaves scores within 1e-7 of 0 at 0. */
float mlcc_ml_logistic(float v);
float mlcc_ml_probit(float v);
void mlcc_ml_post_transform(int post, float *s, ptrdiff_t n);
/* The two score columns of a two-class classifier with one score s (which: onnxruntime's
 * add_second_class, 0 to 3, or -1). */
void mlcc_ml_binary_scores(float sc, int post, int which, float *out);

/* LinearRegressor and LinearClassifier: scores[r, t] = sum_f x[r, f] coef[t, f] +
 * intercepts[t], then the post transform over each row. classifier: also label[r], the
 * label of the row's first highest score; binary (one coefficient row, two labels): the
 * label labels[score > 0] and two score columns (mlcc_ml_binary_scores, which = 1). */
typedef struct mlcc_linear_params {
    int64_t rows, features, targets;
    int32_t post;               /* enum mlcc_ml_post */
    int32_t classifier, binary;
} mlcc_linear_params;

void mlcc_f32_linear(const mlcc_linear_params *p, const float *x, const float *coef,
                     const float *intercepts, const int64_t *labels, int64_t *label,
                     float *scores);

/* SVMRegressor: with support vectors (vectors > 0),
 *   y[r] = sum_j coef[j] K(x_r, sv_j) + rho
 * K: LINEAR x.sv, POLY (gamma x.sv + coef0)^degree, SIGMOID tanh(gamma x.sv + coef0), RBF
 * exp(-gamma |x - sv|^2); without (vectors = 0, liblinear), y[r] = x_r.coef + rho. one_class:
 * y = y > 0 ? 1 : -1.
 * The support vectors come in blocks of MLCC_SVM_BLOCK, each feature-major (sv[(b F + f) B + i]
 * is feature f of vector b B + i; zeros past the last vector: mlcc/ops/ml.py svm_blocks), so
 * that a block's kernel values are computed a vector of lanes at a time, each one's sum over
 * the features in feature order. Rows are split over the pool (at most MLCC_SVM_SLICES
 * threads), each row whole on one thread: the same bits on any number of threads. */
#define MLCC_SVM_BLOCK 16
#define MLCC_SVM_SLICES 4
enum mlcc_svm_kernel {
    MLCC_SVM_LINEAR = 0, MLCC_SVM_POLY = 1, MLCC_SVM_RBF = 2, MLCC_SVM_SIGMOID = 3
};
typedef struct mlcc_svm_params {
    int64_t rows, features, vectors;
    int32_t kernel;             /* enum mlcc_svm_kernel */
    int32_t one_class;
    float gamma, coef0, degree, rho;
} mlcc_svm_params;

void mlcc_f32_svm_regressor(const mlcc_svm_params *p, const float *x, const float *sv,
                            const float *coef, float *y, mlcc_threadpool *pool);

/* SVMClassifier without probabilities, as onnxruntime: with support vectors (libsvm, one
 * vs one), the decision value of each pair of classes i < j, in that order,
 *   d = sum over class i's vectors v of coef[(j - 1) V + v] K(x, sv_v)
 *     + sum over class j's vectors v of coef[i V + v] K(x, sv_v) + rho[pair]
 * (summed in double) is a score, and a vote for i (d > 0) or j; the label is the first class
 * with the most votes; two classes give the scores -d, d (post NONE) or their logistic
 * (LOGISTIC). Without (liblinear, vectors = 0): the scores x.coef_c + rho[0], the label the
 * first highest (for two classes, the second label where that score passes 0.5 with all
 * coefficients positive, or 0 otherwise). Then the post transform. The scratch holds, per
 * thread (MLCC_SVM_SLICES, or 1 without threads), mlcc_svm_slice_bytes(p): the row's kernel
 * values (V rounded up to a block) and one int64 vote per class. */
typedef struct mlcc_svm_classifier_params {
    mlcc_svm_params svm;
    int64_t classes;
    int32_t post;               /* enum mlcc_ml_post */
    int32_t all_positive;
} mlcc_svm_classifier_params;

static inline size_t mlcc_svm_slice_bytes(const mlcc_svm_classifier_params *p) {
    const int64_t blocks = (p->svm.vectors + MLCC_SVM_BLOCK - 1) / MLCC_SVM_BLOCK;
    return (size_t)((blocks > 0 ? blocks : 1) * MLCC_SVM_BLOCK) * sizeof(float) +
           (size_t)p->classes * sizeof(int64_t);
}

void mlcc_f32_svm_classifier(const mlcc_svm_classifier_params *p, const float *x,
                             const float *sv, const float *coef, const float *rho,
                             const int64_t *per_class, const int64_t *labels, int64_t *label,
                             float *scores, void *scratch, mlcc_threadpool *pool);

/* Per feature f of rows of `features` values (n: the element count):
 *   Scaler:    y = (x - offset[f]) * scale[f]
 *   Imputer:   y = imputed[f] where x is `value` (any NaN when it is NaN), else x
 *   Binarizer: y = x > value ? 1 : 0 (NaN gives 0)
 * A parameter array of one value applies to every feature (n_offset: of offset or imputed;
 * n_scale). */
typedef struct mlcc_ml_features_params {
    int64_t n, features;
    int64_t n_offset, n_scale;
    float value;
} mlcc_ml_features_params;

void mlcc_f32_scaler(const mlcc_ml_features_params *p, const float *x, const float *offset,
                     const float *scale, float *y);
void mlcc_f32_imputer(const mlcc_ml_features_params *p, const float *x, const float *imputed,
                      float *y);
void mlcc_f32_binarizer(const mlcc_ml_features_params *p, const float *x, float *y);

/* Normalizer: each row of `features` values divided by its maximum (MAX), the sum of its
 * absolute values (L1) or its Euclidean norm (L2). */
enum mlcc_ml_norm { MLCC_ML_NORM_MAX = 0, MLCC_ML_NORM_L1 = 1, MLCC_ML_NORM_L2 = 2 };
typedef struct mlcc_normalizer_params {
    int64_t rows, features;
    int32_t norm;               /* enum mlcc_ml_norm */
} mlcc_normalizer_params;

void mlcc_f32_normalizer(const mlcc_normalizer_params *p, const float *x, float *y);

/* OneHotEncoder: y[i, c] = 1 where x[i] == cats[c] (categories distinct, in the model's
 * order), else 0, for each of the n values of x.
 * A value outside the categories gives a row of zeros (zeros = 1) or fails the call
 * (MLCC_ERR_INDEX_OUT_OF_RANGE, writing nothing; zeros = 0), as onnxruntime. */
typedef struct mlcc_one_hot_encoder_params {
    int64_t n, n_cats;
    int32_t zeros;
} mlcc_one_hot_encoder_params;

int mlcc_i64_one_hot_encoder(const mlcc_one_hot_encoder_params *p, const int64_t *x,
                             const int64_t *cats, float *y);

/* LabelEncoder: y[i] = values[k] where keys[k] == x[i] (keys sorted ascending at compile
 * time, each once, no NaN: NaN matches no key, as in onnxruntime), else the default.
 * Values and the default are elements of value_size bytes (int64 or float). */
typedef struct mlcc_label_encoder_params {
    int64_t n, n_keys;
    int32_t value_size;
} mlcc_label_encoder_params;

void mlcc_i64_label_encoder(const mlcc_label_encoder_params *p, const int64_t *x,
                            const int64_t *keys, const void *values, const void *dflt, void *y);
void mlcc_f32_label_encoder(const mlcc_label_encoder_params *p, const float *x,
                            const float *keys, const void *values, const void *dflt, void *y);

#endif /* MLCC_ML_H */
