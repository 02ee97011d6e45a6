/*
 * mlcc_harness: runs a compiled model on raw files, for targets that Python cannot load
 * directly (a cross-compiled library run under an emulator or on a board).
 *
 *     harness WEIGHTS IN_0 ... IN_{n-1} OUT_0 ... OUT_{m-1}
 *     harness --runs N WEIGHTS IN_0 ... OUT_0 ...
 *     harness --dims D_0,D_1,... WEIGHTS IN_0 ... OUT_0 ...
 *     harness --info
 *
 * WEIGHTS is the model's weights.bin. Each IN_i holds input i in model order as raw
 * little-endian elements of the input's type (exactly its size in bytes); each OUT_i is written
 * the same way. --info prints the model's name, arena and weight sizes, and the name, type and
 * shape of every input and output (the order the files follow). --runs N (1 to 1000000, default
 * 1) runs the model N times on the same inputs before writing the outputs: a cost measure
 * under an emulator subtracts the instructions of N = 1 from those of N = 2 to get exactly one
 * inference, without the start-up, file reading and init around it. --dims (a model compiled
 * for a range of sizes, docs/dynamic-shapes.md) gives the size of each dynamic dimension:
 * inputs and outputs are then at those sizes (without it, at the largest ones).
 *
 * Outputs whose size depends on the data (docs/dynamic-outputs.md; built with
 * -DMLCC_OUTPUT_SHAPES, which the folder's Makefile passes for such models): after the run, a
 * line "output_shape I D0,D1,..." on stdout gives each output's actual shape (from
 * <prefix>_output_shape(), at the --dims sizes if given), and OUT_i holds only its valid
 * elements (that shape, contiguous), not the padded buffer.
 *
 * Exit status: 0 success; 1 wrong usage or a file that cannot be read or written (or has the
 * wrong size); 2 the model returned an error status from init or run, printed on stderr as
 * "harness: init failed: <mlcc_status_string> (status N)" or "harness: run failed: ...".
 *
 * The program is generic: it only uses the model's public API, <prefix>_model_info(),
 * <prefix>_init() and <prefix>_run_v(), and is linked against the model's library. The prefix
 * comes from the command line of the build: -DMLCC_MODEL=<prefix> (the folder's Makefile passes
 * it), and for a model of dynamic dimensions -DMLCC_MODEL_DIMS=<their number> (then it also
 * uses <prefix>_run_dims() and <prefix>_tensor_shape()). Plain C99 and the C library; all
 * memory is allocated here, none by the model.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlcc_runtime.h"

#ifndef MLCC_MODEL
#error "build with -DMLCC_MODEL=<model prefix> (the Makefile in the model folder does)"
#endif

#define MLCC_PASTE_(a, b) a##b
#define MLCC_PASTE(a, b) MLCC_PASTE_(a, b)
#define MODEL_FN(suffix) MLCC_PASTE(MLCC_MODEL, suffix)

/* The model's API (also declared in model.h, which this file does not need). */
MLCC_EXPORT const mlcc_model_info *MODEL_FN(_model_info)(void);
MLCC_EXPORT int MODEL_FN(_init)(mlcc_context *ctx, const void *weights, size_t weights_size,
                                void *arena, size_t arena_size);
MLCC_EXPORT int MODEL_FN(_run_v)(const mlcc_context *ctx, const void *const *inputs,
                                 void *const *outputs);
#ifdef MLCC_OUTPUT_SHAPES
MLCC_EXPORT int MODEL_FN(_output_shape)(const mlcc_context *ctx, const int64_t *dims, int index,
                                        int64_t *shape);
#endif
#ifdef MLCC_MODEL_DIMS
MLCC_EXPORT int MODEL_FN(_run_dims)(const mlcc_context *ctx, const int64_t *dims,
                                    const void *const *inputs, void *const *outputs);
MLCC_EXPORT int MODEL_FN(_tensor_shape)(const int64_t *dims, int is_output, int index,
                                        int64_t *shape);
#define NUM_DIMS MLCC_MODEL_DIMS
#else
#define NUM_DIMS 0
#endif

enum { EXIT_USAGE = 1, EXIT_STATUS = 2, MAX_DIMS = 64 };

/* A block of at least `size` bytes whose start is a multiple of `align` (a power of two).
 * `*base` receives what must be passed to free(). */
static unsigned char *alloc_aligned(size_t size, size_t align, void **base) {
    unsigned char *raw = (unsigned char *)malloc(size + align);
    size_t skip;
    *base = raw;
    if (raw == NULL) return NULL;
    skip = (size_t)((align - (uintptr_t)raw % align) % align);
    return raw + skip;
}

/* Reads exactly `size` bytes from `path` into `dst`; the file must hold no more. */
static int read_exact(const char *path, void *dst, size_t size) {
    FILE *f = fopen(path, "rb");
    int ok;
    if (f == NULL) {
        fprintf(stderr, "harness: cannot open %s\n", path);
        return 0;
    }
    ok = fread(dst, 1, size, f) == size && fgetc(f) == EOF;
    fclose(f);
    if (!ok) fprintf(stderr, "harness: %s must hold exactly %lu bytes\n", path,
                     (unsigned long)size);
    return ok;
}

static int write_all(const char *path, const void *src, size_t size) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (f == NULL) {
        fprintf(stderr, "harness: cannot create %s\n", path);
        return 0;
    }
    ok = fwrite(src, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok) fprintf(stderr, "harness: cannot write %s\n", path);
    return ok;
}

#ifdef MLCC_OUTPUT_SHAPES
/* Writes output t's valid part: the elements below dims[axis] along the first axis where the
 * actual shape dims differs from the planned one (all of it when none does). */
static int write_output(const char *path, const void *buf, const mlcc_tensor_info *t,
                        const int64_t *dims) {
    FILE *f;
    size_t outer = 1, inner = 1, numel = 1, es, o;
    int d, axis = -1, ok = 1;
    for (d = 0; d < t->rank; d++) {
        numel *= (size_t)t->dims[d];
        if (axis < 0 && dims[d] != t->dims[d]) axis = d;
    }
    if (axis < 0 || numel == 0) return write_all(path, buf, t->size_bytes);
    es = t->size_bytes / numel;
    for (d = 0; d < axis; d++) outer *= (size_t)t->dims[d];
    for (d = axis + 1; d < t->rank; d++) inner *= (size_t)t->dims[d];
    f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "harness: cannot create %s\n", path);
        return 0;
    }
    for (o = 0; o < outer && ok; o++) {
        const size_t n = (size_t)dims[axis] * inner * es;
        ok = fwrite((const unsigned char *)buf + o * (size_t)t->dims[axis] * inner * es, 1, n,
                    f) == n;
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok) fprintf(stderr, "harness: cannot write %s\n", path);
    return ok;
}
#endif

static const char *dtype_name(int dtype) {
    switch (dtype) {
    case MLCC_FLOAT32: return "float32";
    case MLCC_UINT8: return "uint8";
    case MLCC_INT8: return "int8";
    case MLCC_INT32: return "int32";
    case MLCC_INT64: return "int64";
    case MLCC_BOOL: return "bool";
    case MLCC_INT16: return "int16";
    case MLCC_UINT16: return "uint16";
    case MLCC_UINT32: return "uint32";
    case MLCC_UINT64: return "uint64";
    case MLCC_FLOAT16: return "float16";
    case MLCC_FLOAT64: return "float64";
    case MLCC_BFLOAT16: return "bfloat16";
    case MLCC_FLOAT8E4M3FN: return "float8_e4m3fn";
    case MLCC_FLOAT8E4M3FNUZ: return "float8_e4m3fnuz";
    case MLCC_FLOAT8E5M2: return "float8_e5m2";
    case MLCC_FLOAT8E5M2FNUZ: return "float8_e5m2fnuz";
    case MLCC_FLOAT8E8M0: return "float8_e8m0fnu";
    case MLCC_FLOAT4E2M1: return "float4_e2m1fn";     /* packed: see mlcc_runtime.h */
    case MLCC_INT4: return "int4";
    case MLCC_UINT4: return "uint4";
    case MLCC_INT2: return "int2";
    case MLCC_UINT2: return "uint2";
    default: return "unknown";
    }
}

static void print_tensor(const char *kind, int index, const mlcc_tensor_info *t) {
    int d;
    printf("%s %d %s %s [", kind, index, t->name, dtype_name(t->dtype));
    for (d = 0; d < t->rank; d++) printf("%s%lld", d ? "," : "", (long long)t->dims[d]);
    printf("] %lu bytes\n", (unsigned long)t->size_bytes);
}

/* Parses --dims' "D0,D1,..." into dims[info->num_dims]; 0 (and a message) if malformed. */
static int parse_dims(const char *text, int64_t *dims) {
    int i;
    const char *p = text;
    if (NUM_DIMS <= 0 || NUM_DIMS > MAX_DIMS) {
        fprintf(stderr, "harness: --dims: the model has no dynamic dimensions\n");
        return 0;
    }
    for (i = 0; i < NUM_DIMS; i++) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end != (i + 1 < NUM_DIMS ? ',' : '\0'))) {
            fprintf(stderr, "harness: --dims needs %d comma-separated sizes, not '%s'\n",
                    NUM_DIMS, text);
            return 0;
        }
        dims[i] = (int64_t)v;
        p = end + 1;
    }
    return 1;
}

/* Bytes of tensor t at the sizes in dims (its size_bytes without dims): its element count
 * there, times the bytes per element of its largest size. */
static int tensor_bytes(const mlcc_model_info *info, const int64_t *dims, int is_output,
                        int index, size_t *bytes) {
    const mlcc_tensor_info *t = is_output ? &info->outputs[index] : &info->inputs[index];
    int64_t shape[MLCC_MAX_RANK], n = 1, n_max = 1;
    int d, status;
    *bytes = t->size_bytes;
    if (dims == NULL) return MLCC_OK;
#ifdef MLCC_MODEL_DIMS
    status = MODEL_FN(_tensor_shape)(dims, is_output, index, shape);
#else
    status = MLCC_ERR_DIMS_OUT_OF_RANGE;     /* (unreachable: parse_dims refused --dims) */
#endif
    if (status != MLCC_OK) return status;
    for (d = 0; d < t->rank; d++) {
        n *= shape[d];
        n_max *= t->dims[d];
    }
    *bytes = n_max > 0 ? (size_t)(t->size_bytes / (size_t)n_max * (size_t)n) : 0;
    return MLCC_OK;
}

static int print_info(const mlcc_model_info *info) {
    int i;
    printf("model %s (mlcc %s), id %016llx\n", info->name, info->mlcc_version,
           (unsigned long long)info->model_id);
    printf("arena %lu bytes (align %lu), weights %lu bytes\n", (unsigned long)info->arena_size,
           (unsigned long)info->arena_align, (unsigned long)info->weights_size);
    for (i = 0; i < info->num_inputs; i++) print_tensor("input", i, &info->inputs[i]);
    for (i = 0; i < info->num_outputs; i++) print_tensor("output", i, &info->outputs[i]);
    return 0;
}

static void usage(const mlcc_model_info *info) {
    fprintf(stderr, "usage: harness WEIGHTS IN... OUT...  (%d input file%s, then %d output "
                    "file%s, in model order)\n"
                    "       harness --runs N WEIGHTS IN... OUT...  (runs the model N times)\n"
                    "       harness --dims D0,D1,... WEIGHTS IN... OUT...  (dynamic sizes)\n"
                    "       harness --info                (lists them)\n",
            info->num_inputs, info->num_inputs == 1 ? "" : "s", info->num_outputs,
            info->num_outputs == 1 ? "" : "s");
}

int main(int argc, char **argv) {
    const mlcc_model_info *info = MODEL_FN(_model_info)();
    const int ni = info->num_inputs, no = info->num_outputs;
    /* One array of buffers for inputs then outputs, and the bases to free. */
    void **bases = NULL, **bufs = NULL;
    void *weights_base = NULL, *arena_base = NULL;
    unsigned char *weights, *arena;
    mlcc_context ctx;
    long runs = 1, r;
    int i, status, result = EXIT_USAGE;
    int64_t dims_buf[MAX_DIMS];
    const int64_t *dims = NULL;       /* --dims: the sizes of the dynamic dimensions */
    size_t *sizes = NULL;             /* bytes of each input, then output, at those sizes */

    if (argc == 2 && strcmp(argv[1], "--info") == 0) return print_info(info);
    if (argc >= 3 && strcmp(argv[1], "--dims") == 0) {
        if (!parse_dims(argv[2], dims_buf)) return EXIT_USAGE;
        dims = dims_buf;
        argc -= 2;
        argv += 2;
    }
    if (argc >= 3 && strcmp(argv[1], "--runs") == 0) {
        char *end;
        runs = strtol(argv[2], &end, 10);
        if (end == argv[2] || *end != '\0' || runs < 1 || runs > 1000000) {
            fprintf(stderr, "harness: --runs needs a count from 1 to 1000000, not '%s'\n",
                    argv[2]);
            return EXIT_USAGE;
        }
        argc -= 2;
        argv += 2;
    }
    if (argc != 2 + ni + no) {
        usage(info);
        return EXIT_USAGE;
    }
    /* Sizes + 1: malloc(0) may return NULL, which would read as a failure. */
    weights = alloc_aligned(info->weights_size + 1, MLCC_WEIGHTS_ALIGN, &weights_base);
    arena = alloc_aligned(info->arena_size + 1, info->arena_align, &arena_base);
    bases = (void **)calloc((size_t)(ni + no) + 1, sizeof *bases);
    bufs = (void **)calloc((size_t)(ni + no) + 1, sizeof *bufs);
    sizes = (size_t *)calloc((size_t)(ni + no) + 1, sizeof *sizes);
    if (weights == NULL || arena == NULL || bases == NULL || bufs == NULL || sizes == NULL) {
        fprintf(stderr, "harness: out of memory\n");
        goto done;
    }
    for (i = 0; i < ni + no; i++) {
        status = tensor_bytes(info, dims, i >= ni, i < ni ? i : i - ni, &sizes[i]);
        if (status != MLCC_OK) {
            fprintf(stderr, "harness: run failed: %s (status %d)\n",
                    mlcc_status_string(status), status);
            result = EXIT_STATUS;
            goto done;
        }
    }
    for (i = 0; i < ni + no; i++) {
        const mlcc_tensor_info *t = i < ni ? &info->inputs[i] : &info->outputs[i - ni];
        bufs[i] = alloc_aligned(t->size_bytes + 1, 64, &bases[i]);
        if (bufs[i] == NULL) {
            fprintf(stderr, "harness: out of memory\n");
            goto done;
        }
    }
    if (!read_exact(argv[1], weights, info->weights_size)) goto done;
    for (i = 0; i < ni; i++)
        if (!read_exact(argv[2 + i], bufs[i], sizes[i])) goto done;

    result = EXIT_STATUS;
    status = MODEL_FN(_init)(&ctx, weights, info->weights_size, arena, info->arena_size);
    if (status != MLCC_OK) {
        fprintf(stderr, "harness: init failed: %s (status %d)\n", mlcc_status_string(status),
                status);
        goto done;
    }
    for (r = 0; r < runs; r++) {
#ifdef MLCC_MODEL_DIMS
        if (dims != NULL)
            status = MODEL_FN(_run_dims)(&ctx, dims, (const void *const *)bufs, bufs + ni);
        else
#endif
            status = MODEL_FN(_run_v)(&ctx, (const void *const *)bufs, bufs + ni);
        if (status != MLCC_OK) {
            fprintf(stderr, "harness: run failed: %s (status %d)\n",
                    mlcc_status_string(status), status);
            goto done;
        }
    }
    result = EXIT_USAGE;
    for (i = 0; i < no; i++) {
#ifdef MLCC_OUTPUT_SHAPES
        /* the actual shape (dims NULL: the largest sizes, those of run_v) */
        const mlcc_tensor_info *t = &info->outputs[i];
        int64_t shape[MLCC_MAX_RANK];
        int d;
        status = MODEL_FN(_output_shape)(&ctx, dims, i, shape);
        if (status != MLCC_OK) {
            fprintf(stderr, "harness: run failed: %s (status %d)\n",
                    mlcc_status_string(status), status);
            result = EXIT_STATUS;
            goto done;
        }
        printf("output_shape %d ", i);
        for (d = 0; d < t->rank; d++) printf("%s%lld", d ? "," : "", (long long)shape[d]);
        printf("\n");
        if (dims == NULL) {     /* the buffer holds the maximum: only the valid part */
            if (!write_output(argv[2 + ni + i], bufs[ni + i], t, shape)) goto done;
            continue;
        }
#endif
        if (!write_all(argv[2 + ni + i], bufs[ni + i], sizes[ni + i])) goto done;
    }
    result = 0;

done:
    if (bases != NULL)
        for (i = 0; i < ni + no; i++) free(bases[i]);
    free(bases);
    free(bufs);
    free(sizes);
    free(arena_base);
    free(weights_base);
    return result;
}
