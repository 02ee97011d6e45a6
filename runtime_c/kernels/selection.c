#include "selection.h"

/* ------------------------------------------------------------------ element comparisons */

/* -1, 0 or 1 as a < b, a == b, a > b for elements of type dtype (NaN: equal to NaN and
 * above every number, so that every order is total and deterministic). */
#define MLCC_SEL_CMP(T)                                                                       \
    do {                                                                                      \
        const T x_ = *(const T *)a, y_ = *(const T *)b;                                       \
        return x_ < y_ ? -1 : (x_ > y_ ? 1 : 0);                                              \
    } while (0)

static int cmp_elem(int32_t dtype, const void *a, const void *b) {
    switch (dtype) {
    case MLCC_FLOAT32: {
        const float x = *(const float *)a, y = *(const float *)b;
        if (x != x || y != y) return (x != x) - (y != y);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    case MLCC_FLOAT64: {
        const double x = *(const double *)a, y = *(const double *)b;
        if (x != x || y != y) return (x != x) - (y != y);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    case MLCC_BFLOAT16: {         /* the high half of a float32 */
        uint32_t xb = (uint32_t)*(const uint16_t *)a << 16, yb = (uint32_t)*(const uint16_t *)b
                                                             << 16;
        float x, y;
        memcpy(&x, &xb, 4);
        memcpy(&y, &yb, 4);
        if (x != x || y != y) return (x != x) - (y != y);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    case MLCC_INT8: MLCC_SEL_CMP(int8_t);
    case MLCC_INT16: MLCC_SEL_CMP(int16_t);
    case MLCC_INT32: MLCC_SEL_CMP(int32_t);
    case MLCC_INT64: MLCC_SEL_CMP(int64_t);
    case MLCC_UINT16: MLCC_SEL_CMP(uint16_t);
    case MLCC_UINT32: MLCC_SEL_CMP(uint32_t);
    case MLCC_UINT64: MLCC_SEL_CMP(uint64_t);
    default: MLCC_SEL_CMP(uint8_t);           /* uint8, bool */
    }
}

static size_t elem_size(int32_t dtype) {
    switch (dtype) {
    case MLCC_FLOAT64: case MLCC_INT64: case MLCC_UINT64: return 8;
    case MLCC_FLOAT32: case MLCC_INT32: case MLCC_UINT32: return 4;
    case MLCC_INT16: case MLCC_UINT16: case MLCC_FLOAT16: case MLCC_BFLOAT16: return 2;
    default: return 1;
    }
}

/* ------------------------------------------------------------------------------- TopK */

/* The heap holds the k best indices seen so far with the worst at the root. For largest,
 * a is better than b when x[a] > x[b], or they are equal and a < b. */
#define MLCC_TOPK_BODY(T, GREATER)                                                            \
    do {                                                                                      \
        const T *xs = (const T *)x;                                                           \
        T *vs = (T *)values;                                                                  \
        for (o = 0; o < p->outer; o++)                                                        \
            for (i = 0; i < p->inner; i++) {                                                  \
                const T *row = xs + o * n * inner + i;                                        \
                int64_t h = 0, j, r;                                                          \
                for (j = 0; j < valid && k > 0; j++) {                                        \
                    const T v = row[j * inner];                                               \
                    int64_t c;                                                                \
                    if (h < k) { /* sift up from the end */                                   \
                        c = h++;                                                              \
                        while (c > 0) {                                                       \
                            const int64_t par = (c - 1) / 2;                                  \
                            const T pv = row[heap[par] * inner];                              \
                            /* par worse than new? then new goes below it */                 \
                            if (!(BETTER_(pv, heap[par], v, j, GREATER))) break;             \
                            heap[c] = heap[par];                                              \
                            c = par;                                                          \
                        }                                                                     \
                        heap[c] = j;                                                          \
                    } else if (BETTER_(v, j, row[heap[0] * inner], heap[0], GREATER)) {       \
                        c = 0;                                                                \
                        for (;;) { /* sift the new element down from the root */             \
                            int64_t w = 2 * c + 1;                                            \
                            if (w >= h) break;                                                \
                            if (w + 1 < h && BETTER_(row[heap[w] * inner], heap[w],           \
                                                     row[heap[w + 1] * inner], heap[w + 1],   \
                                                     GREATER)) w++;                           \
                            if (!BETTER_(v, j, row[heap[w] * inner], heap[w], GREATER)) break; \
                            heap[c] = heap[w];                                                \
                            c = w;                                                            \
                        }                                                                     \
                        heap[c] = j;                                                          \
                    }                                                                         \
                }                                                                             \
                /* heap sort: the worst goes to the end each time, the best ends first */    \
                for (r = h - 1; r > 0; r--) {                                                 \
                    const int64_t last = heap[r];                                             \
                    int64_t c = 0;                                                            \
                    heap[r] = heap[0];                                                        \
                    for (;;) {                                                                \
                        int64_t w = 2 * c + 1;                                                \
                        if (w >= r) break;                                                    \
                        if (w + 1 < r && BETTER_(row[heap[w] * inner], heap[w],               \
                                                 row[heap[w + 1] * inner], heap[w + 1],       \
                                                 GREATER)) w++;                               \
                        if (!BETTER_(row[last * inner], last, row[heap[w] * inner], heap[w],  \
                                     GREATER)) break;                                         \
                        heap[c] = heap[w];                                                    \
                        c = w;                                                                \
                    }                                                                         \
                    heap[c] = last;                                                           \
                }                                                                             \
                for (r = 0; r < p->k_max; r++) {                                              \
                    const int64_t at = (o * p->k_max + r) * inner + i;                        \
                    vs[at] = r < k ? row[heap[r] * inner] : (T)0;                             \
                    indices[at] = r < k ? heap[r] : 0;                                        \
                }                                                                             \
            }                                                                                 \
    } while (0)

/* a (value av at index ai) better than b: larger (or smaller), ties to the lower index */
#define BETTER_(av, ai, bv, bi, GREATER)                                                      \
    ((GREATER) ? ((av) > (bv) || ((av) == (bv) && (ai) < (bi)))                               \
               : ((av) < (bv) || ((av) == (bv) && (ai) < (bi))))

/* The rows' first `valid` elements (of n) compete. */
static int topk(const mlcc_topk_params *p, const void *x, int64_t valid, const int64_t *k_in,
                void *values, int64_t *indices, int64_t *count, void *scratch) {
    const int64_t n = p->n, inner = p->inner;
    const int64_t k = k_in != NULL ? *k_in : p->k_max;
    int64_t *heap = (int64_t *)scratch;
    int64_t o, i;
    if (k < 0 || k > p->k_max || k > valid) return MLCC_ERR_OUTPUT_TOO_LARGE;
    if (count != NULL) *count = k;
#define MLCC_TOPK_CASE(T)                                                                     \
    if (p->largest) MLCC_TOPK_BODY(T, 1); else MLCC_TOPK_BODY(T, 0);                          \
    break
    switch (p->dtype) {
    case MLCC_FLOAT32: MLCC_TOPK_CASE(float);
    case MLCC_FLOAT64: MLCC_TOPK_CASE(double);
    case MLCC_INT8: MLCC_TOPK_CASE(int8_t);
    case MLCC_INT16: MLCC_TOPK_CASE(int16_t);
    case MLCC_INT32: MLCC_TOPK_CASE(int32_t);
    case MLCC_INT64: MLCC_TOPK_CASE(int64_t);
    case MLCC_UINT16: MLCC_TOPK_CASE(uint16_t);
    case MLCC_UINT32: MLCC_TOPK_CASE(uint32_t);
    case MLCC_UINT64: MLCC_TOPK_CASE(uint64_t);
    default: MLCC_TOPK_CASE(uint8_t);                /* uint8, bool */
    }
#undef MLCC_TOPK_CASE
    return MLCC_OK;
}

int mlcc_topk(const mlcc_topk_params *p, const void *x, const int64_t *k, void *values,
              int64_t *indices, int64_t *count, void *scratch) {
    return topk(p, x, p->n, k, values, indices, count, scratch);
}

int mlcc_topk__counted(const mlcc_topk_params *p, const void *x, const int64_t *n_count,
                       const int64_t *k, void *values, int64_t *indices, int64_t *count,
                       void *scratch) {
    if (*n_count < 0 || *n_count > p->n) return MLCC_ERR_OUTPUT_TOO_LARGE;
    return topk(p, x, *n_count, k, values, indices, count, scratch);
}

/* ---------------------------------------------------------------------------- NonZero */

static int is_nonzero(int32_t dtype, const uint8_t *e, size_t es) {
    size_t b;
    switch (dtype) {
    case MLCC_FLOAT32: { float v; memcpy(&v, e, 4); return v != 0.0f; }
    case MLCC_FLOAT64: { double v; memcpy(&v, e, 8); return v != 0.0; }
    case MLCC_FLOAT16: case MLCC_BFLOAT16: {
        uint16_t v;
        memcpy(&v, e, 2);
        return (v & 0x7fffu) != 0;
    }
    default:
        for (b = 0; b < es; b++)
            if (e[b]) return 1;
        return 0;
    }
}

int mlcc_nonzero(const mlcc_nonzero_params *p, const void *x, int64_t *out, int64_t *count) {
    const size_t es = elem_size(p->dtype);
    const uint8_t *e = (const uint8_t *)x;
    int64_t coord[MLCC_MAX_RANK] = {0};
    int64_t j, found = 0;
    int d;
    for (j = 0; j < p->numel; j++, e += es) {
        if (is_nonzero(p->dtype, e, es)) {
            if (found == p->max) return MLCC_ERR_OUTPUT_TOO_LARGE;
            for (d = 0; d < p->rank; d++) out[d * p->max + found] = coord[d];
            found++;
        }
        for (d = p->rank - 1; d >= 0; d--) {        /* the next element's coordinates */
            if (++coord[d] < p->dims[d]) break;
            coord[d] = 0;
        }
    }
    for (d = 0; d < p->rank; d++)
        for (j = found; j < p->max; j++) out[d * p->max + j] = 0;
    *count = found;
    return MLCC_OK;
}

/* --------------------------------------------------------------------------- Compress */

int mlcc_compress(const mlcc_compress_params *p, const void *x, const uint8_t *cond, void *out,
                  int64_t *count) {
    const size_t block = (size_t)p->inner * (size_t)p->elem_size;
    const int64_t n = p->n_cond < p->dim ? p->n_cond : p->dim;
    const uint8_t *src = (const uint8_t *)x;
    uint8_t *dst = (uint8_t *)out;
    int64_t o, j, kept = 0;
    for (j = 0; j < n; j++) kept += cond[j] != 0;
    if (kept > p->max) return MLCC_ERR_OUTPUT_TOO_LARGE;
    for (o = 0; o < p->outer; o++) {
        uint8_t *row = dst + (size_t)(o * p->max) * block;
        for (j = 0; j < n; j++)
            if (cond[j]) {
                memcpy(row, src + (size_t)(o * p->dim + j) * block, block);
                row += block;
            }
        memset(row, 0, (size_t)(p->max - kept) * block);
    }
    *count = kept;
    return MLCC_OK;
}

/* ----------------------------------------------------------------------------- Unique */

/* Slices a and b of x ([outer, dim, inner]) compared element by element, outer-major. */
static int cmp_slices(const mlcc_unique_params *p, const uint8_t *x, size_t es, int64_t a,
                      int64_t b) {
    int64_t o, i;
    for (o = 0; o < p->outer; o++)
        for (i = 0; i < p->inner; i++) {
            const size_t row = (size_t)(o * p->dim) * (size_t)p->inner + (size_t)i;
            const int c = cmp_elem(p->dtype, x + (row + (size_t)(a * p->inner)) * es,
                                   x + (row + (size_t)(b * p->inner)) * es);
            if (c != 0) return c;
        }
    return 0;
}

int mlcc_unique(const mlcc_unique_params *p, const void *x, void *y, int64_t *indices,
                int64_t *inverse, int64_t *counts, int64_t *count, void *scratch) {
    const size_t es = elem_size(p->dtype);
    const int64_t dim = p->dim, inner = p->inner;
    const uint8_t *xs = (const uint8_t *)x;
    int64_t *order = (int64_t *)scratch, *tmp = order + dim, *grp = tmp + dim;
    int64_t width, j, g, groups = 0, o;
    /* stable bottom-up merge sort of the slice indices: equal slices keep index order */
    for (j = 0; j < dim; j++) order[j] = j;
    for (width = 1; width < dim; width *= 2) {
        int64_t lo;
        for (lo = 0; lo < dim; lo += 2 * width) {
            int64_t mid = lo + width < dim ? lo + width : dim;
            int64_t hi = lo + 2 * width < dim ? lo + 2 * width : dim;
            int64_t a = lo, b = mid, t = lo;
            while (a < mid && b < hi)
                tmp[t++] = cmp_slices(p, xs, es, order[b], order[a]) < 0 ? order[b++]
                                                                          : order[a++];
            while (a < mid) tmp[t++] = order[a++];
            while (b < hi) tmp[t++] = order[b++];
        }
        memcpy(order, tmp, (size_t)dim * sizeof *order);
    }
    /* groups of equal slices in sorted order; tmp[g] = the group's first occurrence */
    for (j = 0; j < dim; j++) {
        if (j == 0 || cmp_slices(p, xs, es, order[j - 1], order[j]) != 0) tmp[groups++] = order[j];
        grp[order[j]] = groups - 1;
    }
    if (groups > p->max) return MLCC_ERR_OUTPUT_TOO_LARGE;
    /* order[g] = the output position of group g: g itself, or by first occurrence */
    if (p->sorted) {
        for (g = 0; g < groups; g++) order[g] = g;
    } else {
        int64_t next = 0;
        for (j = 0; j < dim; j++)
            if (tmp[grp[j]] == j) order[grp[j]] = next++;
    }
    for (o = 0; o < p->outer; o++) {
        uint8_t *dst = (uint8_t *)y + (size_t)(o * p->max * inner) * es;
        const uint8_t *src = xs + (size_t)(o * dim * inner) * es;
        for (g = 0; g < groups; g++)
            memcpy(dst + (size_t)(order[g] * inner) * es, src + (size_t)(tmp[g] * inner) * es,
                   (size_t)inner * es);
        memset(dst + (size_t)(groups * inner) * es, 0, (size_t)((p->max - groups) * inner) * es);
    }
    for (j = 0; j < p->max; j++) {
        if (indices != NULL) indices[j] = 0;
        if (counts != NULL) counts[j] = 0;
    }
    for (g = 0; g < groups; g++)
        if (indices != NULL) indices[order[g]] = tmp[g];
    for (j = 0; j < dim; j++) {
        if (inverse != NULL) inverse[j] = order[grp[j]];
        if (counts != NULL) counts[order[grp[j]]]++;
    }
    *count = groups;
    return MLCC_OK;
}

/* -------------------------------------------------------------------- NonMaxSuppression */

static void min_max(float a, float b, float *lo, float *hi) {
    if (a >= b) {
        *lo = b;
        *hi = a;
    } else {
        *lo = a;
        *hi = b;
    }
}

/* A box's extent along x (or y): the two corners' coordinates in order (center_point_box 0,
 * [y1, x1, y2, x2]), or center -+ half the size (1, [x_center, y_center, width, height]). */
static void extent(const float *box, int center, int along_x, float *lo, float *hi) {
    if (center == 0) {
        min_max(box[along_x ? 1 : 0], box[along_x ? 3 : 2], lo, hi);
    } else {
        const float c = box[along_x ? 0 : 1], half = box[along_x ? 2 : 3] / 2;
        *lo = c - half;
        *hi = c + half;
    }
}

/* The boxes kept so far, as onnxruntime's SuppressByIOU reads them: extents along x and y and
 * the area, one array each (scratch), so that a candidate is checked against a vector of them
 * at a time. */
typedef struct nms_kept {
    float *x0, *x1, *y0, *y1, *area;
} nms_kept;

/* Whether the candidate (extents ax0..ay1, area aa) overlaps kept box q by more than iou, as
 * SuppressByIOU in float32: no overlap, an empty intersection, an empty box or union, or NaN
 * anywhere suppress nothing. Written as comparisons that are false on NaN, the same decision
 * as its chain of early returns. */
static int overlaps(float ax0, float ax1, float ay0, float ay1, float aa, const nms_kept *k,
                    ptrdiff_t q, float iou) {
    const float ix0 = ax0 > k->x0[q] ? ax0 : k->x0[q], ix1 = ax1 < k->x1[q] ? ax1 : k->x1[q];
    const float iy0 = ay0 > k->y0[q] ? ay0 : k->y0[q], iy1 = ay1 < k->y1[q] ? ay1 : k->y1[q];
    const float inter = (ix1 - ix0) * (iy1 - iy0);
    const float uni = aa + k->area[q] - inter;
    return ix1 > ix0 && iy1 > iy0 && inter > 0.0f && aa > 0.0f && k->area[q] > 0.0f &&
           uni > 0.0f && inter / uni > iou;
}

/* Whether any of the nk kept boxes suppresses the candidate: a vector of them at a time (the
 * same operations per pair as overlaps()), the rest one by one. A candidate among 27,000
 * boxes of SSDlite's batched NMS took 66 ms one kept box at a time through extent(). */
static int suppressed(float ax0, float ax1, float ay0, float ay1, const nms_kept *k,
                      ptrdiff_t nk, float iou) {
    const float aa = (ax1 - ax0) * (ay1 - ay0);
    ptrdiff_t q = 0;
#if MLCC_HAVE_VECTORS
    const mlcc_vf vx0 = mlcc_vf_splat(ax0), vx1 = mlcc_vf_splat(ax1);
    const mlcc_vf vy0 = mlcc_vf_splat(ay0), vy1 = mlcc_vf_splat(ay1);
    const mlcc_vf va = mlcc_vf_splat(aa), vi = mlcc_vf_splat(iou), zero = mlcc_vf_splat(0.0f);
    for (; q + MLCC_VF_LANES <= nk; q += MLCC_VF_LANES) {
        const mlcc_vf bx0 = mlcc_vf_load(k->x0 + q), bx1 = mlcc_vf_load(k->x1 + q);
        const mlcc_vf by0 = mlcc_vf_load(k->y0 + q), by1 = mlcc_vf_load(k->y1 + q);
        const mlcc_vf ba = mlcc_vf_load(k->area + q);
        const mlcc_vf ix0 = mlcc_vf_select(vx0 > bx0, vx0, bx0);
        const mlcc_vf ix1 = mlcc_vf_select(vx1 < bx1, vx1, bx1);
        const mlcc_vf iy0 = mlcc_vf_select(vy0 > by0, vy0, by0);
        const mlcc_vf iy1 = mlcc_vf_select(vy1 < by1, vy1, by1);
        const mlcc_vf inter = (ix1 - ix0) * (iy1 - iy0);
        const mlcc_vf uni = va + ba - inter;
        const mlcc_vi hit = (ix1 > ix0) & (iy1 > iy0) & (inter > zero) & (va > zero) &
                            (ba > zero) & (uni > zero) & (inter / uni > vi);
        int32_t lanes[MLCC_VF_LANES];
        int l;
        memcpy(lanes, &hit, sizeof lanes);
        for (l = 0; l < MLCC_VF_LANES; l++)
            if (lanes[l]) return 1;
    }
#endif
    for (; q < nk; q++)
        if (overlaps(ax0, ax1, ay0, ay1, aa, k, q, iou)) return 1;
    return 0;
}

/* candidate a before b: higher score, ties to the lower index */
static int nms_before(const float *s, int32_t a, int32_t b) {
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

static void nms_sift_down(const float *s, int32_t *heap, int64_t h, int64_t c) {
    const int32_t v = heap[c];
    for (;;) {
        int64_t w = 2 * c + 1;
        if (w >= h) break;
        if (w + 1 < h && nms_before(s, heap[w + 1], heap[w])) w++;
        if (!nms_before(s, heap[w], v)) break;
        heap[c] = heap[w];
        c = w;
    }
    heap[c] = v;
}

/* Boxes (and scores) at positions below `valid` (of n) are candidates. */
static int nms(const mlcc_nms_params *p, int64_t valid, const float *boxes, const float *scores,
               const int64_t *max_per_class, const float *iou_threshold,
               const float *score_threshold, int64_t *out, int64_t *count, void *scratch) {
    const int64_t n = p->n;
    const int64_t limit = max_per_class != NULL && *max_per_class > 0 ? *max_per_class : 0;
    const float iou = iou_threshold != NULL ? *iou_threshold : 0.0f;
    int32_t *heap = (int32_t *)scratch;
    nms_kept k;
    int64_t b, c, j, rows = 0;
    k.x0 = (float *)(heap + n);
    k.x1 = k.x0 + n;
    k.y0 = k.x1 + n;
    k.y1 = k.y0 + n;
    k.area = k.y1 + n;
    for (b = 0; b < p->batches; b++) {
        const float *bb = boxes + b * n * 4;
        for (c = 0; c < p->classes; c++) {
            const float *s = scores + (b * p->classes + c) * n;
            int64_t h = 0, nk = 0;
            for (j = 0; j < valid; j++)
                if (score_threshold == NULL || s[j] > *score_threshold) heap[h++] = (int32_t)j;
            for (j = h / 2 - 1; j >= 0; j--) nms_sift_down(s, heap, h, j);
            while (h > 0 && nk < limit) {
                const int32_t top = heap[0];
                float x0, x1, y0, y1;
                extent(bb + (int64_t)top * 4, p->center_point_box, 1, &x0, &x1);
                extent(bb + (int64_t)top * 4, p->center_point_box, 0, &y0, &y1);
                if (!suppressed(x0, x1, y0, y1, &k, (ptrdiff_t)nk, iou)) {
                    if (rows == p->max) return MLCC_ERR_OUTPUT_TOO_LARGE;
                    k.x0[nk] = x0;
                    k.x1[nk] = x1;
                    k.y0[nk] = y0;
                    k.y1[nk] = y1;
                    k.area[nk++] = (x1 - x0) * (y1 - y0);
                    out[rows * 3] = b;
                    out[rows * 3 + 1] = c;
                    out[rows * 3 + 2] = top;
                    rows++;
                }
                heap[0] = heap[--h];
                nms_sift_down(s, heap, h, 0);
            }
        }
    }
    for (j = rows * 3; j < p->max * 3; j++) out[j] = 0;
    *count = rows;
    return MLCC_OK;
}

int mlcc_f32_nms(const mlcc_nms_params *p, const float *boxes, const float *scores,
                 const int64_t *max_per_class, const float *iou_threshold,
                 const float *score_threshold, int64_t *out, int64_t *count, void *scratch) {
    return nms(p, p->n, boxes, scores, max_per_class, iou_threshold, score_threshold, out,
               count, scratch);
}

int mlcc_f32_nms__counted(const mlcc_nms_params *p, const float *boxes, const float *scores,
                          const int64_t *n_count, const int64_t *max_per_class,
                          const float *iou_threshold, const float *score_threshold,
                          int64_t *out, int64_t *count, void *scratch) {
    if (*n_count < 0 || *n_count > p->n) return MLCC_ERR_OUTPUT_TOO_LARGE;
    return nms(p, *n_count, boxes, scores, max_per_class, iou_threshold, score_threshold, out,
               count, scratch);
}

/* ---------------------------------------------------------------------------- Sizes */

void mlcc_i64_sizes(const mlcc_sizes_params *p, int64_t *out) {
    int64_t i;
    for (i = 0; i < p->n; i++) out[i] = p->values[i];
}

/* --------------------------------------------------------------------- Concat (counted) */

int mlcc_concat__counted(const mlcc_concat_counted_params *p, const void *src,
                         const int64_t *src_count, int64_t *count, void *dst) {
    const size_t es = (size_t)p->elem_size, row = (size_t)p->inner * es;
    const int64_t n = src_count != NULL ? *src_count : p->src_max;
    int64_t o, at;
    if (p->first) {
        memset(dst, 0, (size_t)(p->outer * p->dst_max) * row);
        *count = 0;
    }
    at = *count;
    if (n < 0 || n > p->src_max || at + n > p->dst_max) return MLCC_ERR_OUTPUT_TOO_LARGE;
    if (n > 0)
        for (o = 0; o < p->outer; o++)
            memcpy((uint8_t *)dst + (size_t)(o * p->dst_max + at) * row,
                   (const uint8_t *)src + (size_t)(o * p->src_max) * row, (size_t)n * row);
    *count = at + n;
    return MLCC_OK;
}

/* ------------------------------------------------------------------------ fill padding */

int mlcc_fill_padding(const mlcc_fill_padding_params *p, const void *src, const int64_t *count,
                      const void *fill, void *dst) {
    const size_t es = (size_t)p->elem_size, row = (size_t)p->inner * es;
    const int64_t n = *count;
    int64_t o, j;
    if (n < 0 || n > p->max) return MLCC_ERR_OUTPUT_TOO_LARGE;
    for (o = 0; o < p->outer; o++) {
        uint8_t *d = (uint8_t *)dst + (size_t)(o * p->max) * row;
        if (n > 0) memmove(d, (const uint8_t *)src + (size_t)(o * p->max) * row, (size_t)n * row);
        for (j = n * p->inner; j < p->max * p->inner; j++) memcpy(d + (size_t)j * es, fill, es);
    }
    return MLCC_OK;
}
