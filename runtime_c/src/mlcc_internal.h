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
