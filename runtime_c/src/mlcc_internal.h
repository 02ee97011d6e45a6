/* mlcc runtime internals: what the runtime's own sources and the kernels share, and what an
 * application never calls. Applications include mlcc_runtime.h (and the model's header) only.
 *
 * This header lives next to the runtime sources (runtime/src/ in a model folder). The runtime
 * sources include it as "mlcc_internal.h" and the kernels' shared header as
 * "../src/mlcc_internal.h": quoted includes are looked up next to the including file first,
 * so no include path beyond the public ones (-Iruntime/include -Iruntime/kernels) is needed. */
#ifndef MLCC_INTERNAL_H
#define MLCC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifndef MLCC_BUILDING_LIBRARY
#define MLCC_BUILDING_LIBRARY 1   /* mlcc_runtime.h: these sources are the library's */
#endif
#include "mlcc_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For kernels: calls fn(arg, unit, thread) for every unit < units (at most 65535; more run on
 * the caller), on at most max_threads threads of the pool (thread < max_threads: 0 is the
 * caller; kernels index per-thread scratch with it), and returns when all calls have returned.
 * Which thread runs which unit depends on timing: a unit's result must not. pool may be NULL. */
typedef void (*mlcc_unit_fn)(void *arg, int unit, int thread);
void mlcc_threadpool_for(mlcc_threadpool *pool, mlcc_unit_fn fn, void *arg, int units,
                         int max_threads);

/* Loop groups: the last parallel loops of independent kernel calls (siblings that read the
 * same input and write disjoint outputs, such as an Inception block's or a fire module's
 * branches) run as one loop, so that the threads share out all of their units and meet at one
 * barrier instead of one per call. The generated code (codegen/groups.py decides which calls)
 * opens a group on the context's pool, passes what mlcc_loop_group_open returns to those
 * calls as their pool, and runs the group after the last of them:
 *
 *     mlcc_loop_group group;
 *     mlcc_threadpool *gpool = mlcc_loop_group_open(&group, ctx->pool);
 *     mlcc_f32_conv2d__packed(..., gpool);
 *     mlcc_f32_conv2d__winograd_4x4(..., gpool);
 *     mlcc_loop_group_run(&group);
 *
 * A kernel hands its last loop over with mlcc_threadpool_for_last (nothing after that loop in
 * the kernel may read what it writes, and its job may point to nothing on the kernel's stack:
 * it is copied and run after the kernel returned); every other loop runs at once, on the pool
 * the group was opened on. On a pool of one thread, or no pool, open returns that pool and
 * nothing is deferred. Units compute the same whichever thread runs them and whenever, so
 * the results are the bits of the calls run one after the other. */
#define MLCC_GROUP_LOOPS 4          /* codegen/groups.py GROUP_LOOPS */
#define MLCC_GROUP_JOB_BYTES 256
typedef struct mlcc_group_loop {
    mlcc_unit_fn fn;
    int units, max_threads;
    union {                         /* a copy of the kernel's job, aligned as any of its fields */
        unsigned char bytes[MLCC_GROUP_JOB_BYTES];
        void *p;
        double d;
        long long ll;
    } job;
} mlcc_group_loop;
typedef struct mlcc_loop_group {
    int kind;                       /* tells a group from a pool (mlcc_threadpool.c) */
    int count, threads;
    mlcc_threadpool *pool;
    mlcc_group_loop loops[MLCC_GROUP_LOOPS];
} mlcc_loop_group;
mlcc_threadpool *mlcc_loop_group_open(mlcc_loop_group *group, mlcc_threadpool *pool);
void mlcc_loop_group_run(mlcc_loop_group *group);
/* mlcc_threadpool_for, or, on a group's pool, the loop kept for mlcc_loop_group_run with a
 * copy of the job_bytes bytes at job (run at once when they do not fit or the group is full). */
void mlcc_threadpool_for_last(mlcc_threadpool *pool, mlcc_unit_fn fn, const void *job,
                              size_t job_bytes, int units, int max_threads);

/* CRC-32 (IEEE 802.3, as zlib computes it) of n bytes: the weight blob's checksum. */
uint32_t mlcc_crc32(const void *data, size_t n);

#ifdef MLCC_POOL_STATS
/* Measuring builds only (bench/profile_layers.py --pool-stats): per-thread statistics of the
 * pool's loops since the last call (mlcc_threadpool.c says what the 7 numbers per thread are),
 * then reset. */
MLCC_EXPORT void mlcc_threadpool_stats(mlcc_threadpool *pool, double *out);
#endif

#ifdef __cplusplus
}
#endif

#endif /* MLCC_INTERNAL_H */
