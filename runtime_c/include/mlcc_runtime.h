/*
 * mlcc runtime: the part of every compiled model that is not generated.
 *
 * A compiled model "net" (the prefix is the model's name) is used like this:
 *
 *     #include "net.h"
 *     static float arena[NET_ARENA_SIZE / sizeof(float)];   // or any NET_ARENA_ALIGN-aligned memory
 *     mlcc_context ctx;
 *     int st = net_init(&ctx, weights, weights_size, arena, sizeof arena);
 *     if (st != MLCC_OK) { fprintf(stderr, "%s\n", mlcc_status_string(st)); return 1; }
 *     st = net_run(&ctx, input, output);                    // typed pointers, one per tensor
 *
 * Memory: the caller owns everything. The weights (the model's weights.bin, loaded or embedded,
 * aligned to MLCC_WEIGHTS_ALIGN) and the arena (NET_ARENA_SIZE bytes aligned to NET_ARENA_ALIGN)
 * must outlive the context. Nothing in the runtime allocates memory or keeps global state.
 *
 * Threads: a context is thread-compatible: one thread at a time may run it. Any number of
 * contexts may run concurrently, each with its own arena; they may share one weights buffer,
 * which the runtime only reads. To use several cores for one inference, create a thread pool
 * (the only function that allocates) and attach it to the context:
 *
 *     mlcc_threadpool *pool;
 *     st = mlcc_threadpool_create(&pool, 2);                // 2 threads: the caller + 1 worker
 *     if (st == MLCC_OK) st = mlcc_context_set_threadpool(&ctx, pool);
 *     ...                                                    // net_run(&ctx, ...) as before
 *     mlcc_threadpool_destroy(pool);                         // after the last run
 *
 * Results are bit-identical whatever the pool's size (kernels split work by a static
 * partition). A pool is thread-safe: contexts that share one may run concurrently from several
 * threads, but their parallel sections then take turns (one section at a time per pool); give
 * each concurrently running context its own pool to use more cores.
 *
 * Errors: every function returns an int status, MLCC_OK (0) on success. The runtime never aborts
 * and never prints.
 */
#ifndef MLCC_RUNTIME_H
#define MLCC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the weight blob format (the header that weights.bin starts with). */
#define MLCC_WEIGHTS_FORMAT_VERSION 1u
#define MLCC_WEIGHTS_HEADER_SIZE 64u
#define MLCC_WEIGHTS_ALIGN 64u
#define MLCC_MAX_RANK 8

/* The model's and the runtime's API, exported from the shared library. Where the library
 * itself is compiled (MLCC_BUILDING_LIBRARY: model.c, weights.c and the runtime's sources
 * define it before their includes), "protected" on ELF: exported, but the library's own calls
 * (NAME_run_v -> NAME_run, NAME_init -> mlcc_context_init) bind to its own definitions. With
 * "default", a model compiled under the name "svc" had its svc_run_v call glibc's svc_run (Sun
 * RPC), loaded first, and two models in one process could call each other's runtime. An
 * application including this header sees the default: a protected declaration would tell its
 * linker that the symbol is its own. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__ELF__) && defined(MLCC_BUILDING_LIBRARY)
#define MLCC_EXPORT __attribute__((visibility("protected")))
#elif defined(__GNUC__) || defined(__clang__)
#define MLCC_EXPORT __attribute__((visibility("default")))
#else
#define MLCC_EXPORT
#endif

/* Alignment for static buffers (arenas, embedded weights). */
#if defined(__GNUC__) || defined(__clang__)
#define MLCC_ALIGNED(n) __attribute__((aligned(n)))
#elif defined(_MSC_VER)
#define MLCC_ALIGNED(n) __declspec(align(n))
#else
#define MLCC_ALIGNED(n) /* init checks the alignment and reports MLCC_ERR_MISALIGNED */
#endif

enum mlcc_status {
    MLCC_OK = 0,
    MLCC_ERR_NULL_ARGUMENT = 1,        /* a required pointer is NULL */
    MLCC_ERR_NOT_INITIALIZED = 2,      /* the context was not initialized for this model */
    MLCC_ERR_ARENA_TOO_SMALL = 3,      /* arena_size < the model's ARENA_SIZE */
    MLCC_ERR_MISALIGNED = 4,           /* arena or weights not aligned as the header says */
    MLCC_ERR_WEIGHTS_MAGIC = 5,        /* not an mlcc weight blob */
    MLCC_ERR_WEIGHTS_VERSION = 6,      /* a blob format this runtime does not read */
    MLCC_ERR_WEIGHTS_SIZE = 7,         /* truncated or too long */
    MLCC_ERR_WEIGHTS_CHECKSUM = 8,     /* corrupted */
    MLCC_ERR_WEIGHTS_MODEL = 9,        /* a valid blob, but of another model */
    MLCC_ERR_INDEX_OUT_OF_RANGE = 10,  /* an index input (e.g. of Gather) is outside its axis */
    MLCC_ERR_THREADS = 11,             /* no thread pool: built without threads (wasm,
                                          MLCC_NO_THREADS), a bad size or out of resources */
    MLCC_ERR_LOOP_LIMIT = 12,          /* a Loop would run more iterations than its
                                          compile-time maximum */
    MLCC_ERR_OUTPUT_TOO_LARGE = 13,    /* a data-dependent output size (NonZero, TopK's k, ...)
                                          exceeds the maximum it was compiled for */
    MLCC_ERR_DIMS_OUT_OF_RANGE = 14    /* a dynamic size outside the range it was compiled
                                          for (--shape x=LO..HI), or no such output */
};

enum mlcc_dtype {
    MLCC_FLOAT32 = 1, MLCC_UINT8 = 2, MLCC_INT8 = 3, MLCC_UINT16 = 4, MLCC_INT16 = 5,
    MLCC_INT32 = 6, MLCC_INT64 = 7, MLCC_BOOL = 9, MLCC_FLOAT16 = 10, MLCC_FLOAT64 = 11,
    MLCC_UINT32 = 12, MLCC_UINT64 = 13,  /* the values of ONNX TensorProto.DataType */
    /* Storage-only types: graph inputs and outputs and Cast, no arithmetic. bfloat16 and the
     * float8 types are one code per element (uint16_t, uint8_t); int4, uint4 and float4 e2m1
     * are two per byte, int2 and uint2 four per byte, the lowest index in the lowest bits
     * (ONNX's packing; a tensor of n elements takes ceil(n * bits / 8) bytes). */
    MLCC_BFLOAT16 = 16, MLCC_FLOAT8E4M3FN = 17, MLCC_FLOAT8E4M3FNUZ = 18, MLCC_FLOAT8E5M2 = 19,
    MLCC_FLOAT8E5M2FNUZ = 20, MLCC_UINT4 = 21, MLCC_INT4 = 22, MLCC_FLOAT4E2M1 = 23,
    MLCC_FLOAT8E8M0 = 24, MLCC_UINT2 = 25, MLCC_INT2 = 26
};

/* Shape and type of one model input or output. */
typedef struct mlcc_tensor_info {
    const char *name;                  /* as in the ONNX model */
    int dtype;                         /* enum mlcc_dtype */
    int rank;
    int64_t dims[MLCC_MAX_RANK];
    size_t size_bytes;
} mlcc_tensor_info;

/* Everything a generic caller (bindings, test harnesses) needs to know about a model. The
 * sizes and shapes of a model with dynamic dimensions are those at the largest sizes. */
typedef struct mlcc_model_info {
    const char *name;
    const char *mlcc_version;
    uint64_t model_id;                 /* ties a weight blob to the code generated with it */
    size_t arena_size, arena_align;
    size_t weights_size;
    int num_inputs, num_outputs;
    const mlcc_tensor_info *inputs, *outputs;
} mlcc_model_info;

/* A pool of threads that run the parallel sections of kernels (opaque). */
typedef struct mlcc_threadpool mlcc_threadpool;

/* The largest pool mlcc_threadpool_create accepts. */
#define MLCC_MAX_THREADS 64

/* Filled by a model's init function; opaque to callers, who must not change it. */
typedef struct mlcc_context {
    const uint8_t *weights;
    uint8_t *arena;
    const mlcc_model_info *model;      /* NULL until init succeeds */
    mlcc_threadpool *pool;             /* NULL (after init): everything runs on the caller */
} mlcc_context;

/* A short English description of a status code (a static string). */
MLCC_EXPORT const char *mlcc_status_string(int status);

/* Checks a weight blob (magic, version, size, model, checksum, alignment) and, if it is valid,
 * fills ctx. Generated init functions call this; applications call the model's init. */
MLCC_EXPORT int mlcc_context_init(mlcc_context *ctx, const mlcc_model_info *model,
                                  const void *weights, size_t weights_size,
                                  void *arena, size_t arena_size);

/* Checks the blob only (no context): useful to validate a file before keeping it. */
MLCC_EXPORT int mlcc_weights_check(const mlcc_model_info *model, const void *weights,
                                   size_t weights_size);

/* Creates a pool of nthreads threads (1 <= nthreads <= MLCC_MAX_THREADS), the thread that calls
 * a model's run being one of them: nthreads - 1 workers are started, and sleep when idle. The
 * only allocating function of the runtime; pair it with mlcc_threadpool_destroy. Fails with
 * MLCC_ERR_THREADS (and *pool = NULL) in builds without threads (wasm, -DMLCC_NO_THREADS). */
MLCC_EXPORT int mlcc_threadpool_create(mlcc_threadpool **pool, int nthreads);

/* Stops and joins the workers and frees the pool. No context may be running with it, and none
 * may run with it afterwards. NULL is ignored. */
MLCC_EXPORT void mlcc_threadpool_destroy(mlcc_threadpool *pool);

/* Threads of the pool (the caller included); 1 for NULL. */
MLCC_EXPORT int mlcc_threadpool_size(const mlcc_threadpool *pool);

/* Runs ctx's kernels on pool from now on (NULL: on the calling thread only). Call after init
 * (init resets it to NULL); the pool must outlive every run of ctx that uses it. */
MLCC_EXPORT int mlcc_context_set_threadpool(mlcc_context *ctx, mlcc_threadpool *pool);

#ifdef __cplusplus
}
#endif

#endif /* MLCC_RUNTIME_H */
