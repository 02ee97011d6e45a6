/* mlcc thread pool: a fixed set of worker threads that run one parallel loop at a time.
 *
 * mlcc_threadpool_for(pool, fn, arg, units, max_threads) calls fn(arg, u, t) once for every
 * unit u < units, t being the index of the thread that runs it (0 = the caller, t <
 * max_threads), and returns when all calls have returned. Kernels cut their work into units by
 * a static partition, so results never depend on timing; which thread runs a unit is decided
 * at run time (each takes the next unit from a shared counter), so a worker that the OS has
 * not scheduled yet (a machine busy with other jobs) costs nothing: the others take its share,
 * and the caller does not wait for a worker that has not joined.
 *
 * Workers spin briefly on the loop counter (yielding now and then) before sleeping on a
 * condition variable: the loops of one inference follow each other within microseconds, while
 * between inferences the workers sleep. Allocation happens in mlcc_threadpool_create only. Built without threads
 * (MLCC_NO_THREADS, set by the wasm target, or a compiler without pthreads), create fails with
 * MLCC_ERR_THREADS and mlcc_threadpool_for runs every unit on the caller. */
#if defined(MLCC_POOL_STATS) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L   /* clock_gettime under -std=c99 */
#endif
#include "mlcc_internal.h"

#include <stdlib.h>

#if !defined(MLCC_NO_THREADS) && (defined(__unix__) || defined(__APPLE__)) && \
    (defined(__GNUC__) || defined(__clang__))
#define MLCC_THREADS 1
#else
#define MLCC_THREADS 0
#endif

#if MLCC_THREADS
#include <pthread.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* Pause iterations before sleeping: 10-40 us here. Spinning longer made 2-thread runs slower,
 * not faster, on a machine shared with other jobs (1000 vs 20000, MobileNetV2). */
#ifndef MLCC_SPIN
#define MLCC_SPIN 1000
#endif
#define SPIN MLCC_SPIN

/* The loop state, one atomic word: loop number (24 bits, wrapping), max_threads (8 bits), next
 * unit and units (16 bits each). A worker takes a unit with a compare-and-swap that also checks
 * the loop number, so a worker that wakes late never takes a unit of another loop (it would
 * have to stall between two instructions for 2^24 loops). */
#define ST_LOOP(s) ((s) >> 40)
#define ST_MAXT(s) (((s) >> 32) & 0xFFu)
#define ST_NEXT(s) (((s) >> 16) & 0xFFFFu)
#define ST_UNITS(s) ((s) & 0xFFFFu)
#define MAX_UNITS 0xFFFFu

/* Measuring builds only (-DMLCC_POOL_STATS, bench/profile_layers.py --pool-stats): per thread,
 * the CPU time spent taking and running units (CLOCK_THREAD_CPUTIME_ID: what a preempted thread
 * did not run is not counted) and the units run; for the caller, the wall time it waited for
 * workers after the last unit, and the loops. Read and reset by mlcc_threadpool_stats. */
#ifdef MLCC_POOL_STATS
#include <string.h>
#include <time.h>
typedef struct pool_stats {
    double unit_cpu, wait, wait_cpu, join;
    long units, loops, sleeps;
    char pad[64 - 4 * sizeof(double) - 3 * sizeof(long)];   /* one cache line per thread */
} pool_stats;
static double stats_clock(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
#define STATS_CPU() stats_clock(CLOCK_THREAD_CPUTIME_ID)
#define STATS_WALL() stats_clock(CLOCK_MONOTONIC)
#endif

typedef struct worker {
    struct mlcc_threadpool *pool;
    int index;
    pthread_t thread;
} worker;

struct mlcc_threadpool {
    int size;                          /* threads, the caller included */
    int started;                       /* workers created (size - 1 once create succeeds) */
    pthread_mutex_t run_lock;          /* serializes loops of contexts sharing the pool */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t state;                    /* atomic: see ST_* */
    int busy;                          /* atomic: workers inside the current loop */
    int stop;                          /* atomic */
    /* the current loop; written by the caller before it publishes state, read by a worker
     * only while it holds a unit (the caller waits for busy == 0 before changing them) */
    mlcc_unit_fn fn;
    void *arg;
    worker workers[MLCC_MAX_THREADS];
#ifdef MLCC_POOL_STATS
    pool_stats stats[MLCC_MAX_THREADS];
    double published;                  /* wall time the current loop was published */
#endif
};

/* Takes the next unit of loop `loop` for thread `index`; -1 when there is none for it. */
static long take_unit(struct mlcc_threadpool *pool, uint64_t loop, int index) {
    uint64_t s = __atomic_load_n(&pool->state, __ATOMIC_ACQUIRE);
    while (ST_LOOP(s) == loop && (uint64_t)index < ST_MAXT(s) && ST_NEXT(s) < ST_UNITS(s)) {
        if (__atomic_compare_exchange_n(&pool->state, &s, s + (1u << 16), 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return (long)ST_NEXT(s);
    }
    return -1;
}

static void *worker_main(void *p) {
    worker *w = (worker *)p;
    struct mlcc_threadpool *pool = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t now = ST_LOOP(__atomic_load_n(&pool->state, __ATOMIC_ACQUIRE));
        long u;
        int i;
        /* Yield now and then: a worker woken onto the caller's CPU (the other one busy) must
         * not spin away the time the caller needs to finish the loop and start the next. */
        for (i = 0; now == seen && i < SPIN; i++) {
            CPU_RELAX();
            now = ST_LOOP(__atomic_load_n(&pool->state, __ATOMIC_ACQUIRE));
            if (i % 64 == 63) sched_yield();
        }
        if (now == seen) {
#ifdef MLCC_POOL_STATS
            pool->stats[w->index].sleeps++;
#endif
            pthread_mutex_lock(&pool->mu);
            while ((now = ST_LOOP(__atomic_load_n(&pool->state, __ATOMIC_ACQUIRE))) == seen &&
                   !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&pool->wake, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (now == seen) return NULL;  /* stop */
        seen = now;
        /* join before taking units: the caller waits for busy == 0 once the units are gone */
        __atomic_add_fetch(&pool->busy, 1, __ATOMIC_SEQ_CST);
        {
#ifdef MLCC_POOL_STATS
            const double t0 = STATS_CPU();
            long n = 0;
            while ((u = take_unit(pool, now, w->index)) >= 0) {
                if (n == 0) pool->stats[w->index].join += STATS_WALL() - pool->published;
                pool->fn(pool->arg, (int)u, w->index);
                n++;
            }
            pool->stats[w->index].unit_cpu += STATS_CPU() - t0;
            pool->stats[w->index].units += n;
#else
            while ((u = take_unit(pool, now, w->index)) >= 0)
                pool->fn(pool->arg, (int)u, w->index);
#endif
        }
        if (__atomic_sub_fetch(&pool->busy, 1, __ATOMIC_SEQ_CST) == 0) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

static void stop_workers(struct mlcc_threadpool *pool) {
    int i;
    pthread_mutex_lock(&pool->mu);
    __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (i = 0; i < pool->started; i++) pthread_join(pool->workers[i + 1].thread, NULL);
}

int mlcc_threadpool_create(mlcc_threadpool **out, int nthreads) {
    struct mlcc_threadpool *pool;
    int i;
    if (out == NULL) return MLCC_ERR_NULL_ARGUMENT;
    *out = NULL;
    if (nthreads < 1 || nthreads > MLCC_MAX_THREADS) return MLCC_ERR_THREADS;
    pool = (struct mlcc_threadpool *)calloc(1, sizeof *pool);
    if (pool == NULL) return MLCC_ERR_THREADS;
    pool->size = nthreads;
    if (pthread_mutex_init(&pool->run_lock, NULL) != 0) goto fail_run_lock;
    if (pthread_mutex_init(&pool->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&pool->wake, NULL) != 0) goto fail_wake;
    if (pthread_cond_init(&pool->done, NULL) != 0) goto fail_done;
    for (i = 1; i < nthreads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].index = i;
        if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]) != 0)
            break;
        pool->started++;
    }
    if (pool->started != nthreads - 1) {
        stop_workers(pool);
        pthread_cond_destroy(&pool->done);
        goto fail_done;
    }
    *out = pool;
    return MLCC_OK;
fail_done:
    pthread_cond_destroy(&pool->wake);
fail_wake:
    pthread_mutex_destroy(&pool->mu);
fail_mu:
    pthread_mutex_destroy(&pool->run_lock);
fail_run_lock:
    free(pool);
    return MLCC_ERR_THREADS;
}

void mlcc_threadpool_destroy(mlcc_threadpool *pool) {
    if (pool == NULL) return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->run_lock);
    free(pool);
}

int mlcc_threadpool_size(const mlcc_threadpool *pool) {
    return pool == NULL ? 1 : pool->size;
}

void mlcc_threadpool_for(mlcc_threadpool *pool, mlcc_unit_fn fn, void *arg, int units,
                         int max_threads) {
    uint64_t loop;
    long u;
    int i;
    if (units <= 0) return;
    if (pool == NULL || pool->size == 1 || max_threads <= 1 || units == 1 ||
        (unsigned)units > MAX_UNITS) {
        for (i = 0; i < units; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&pool->run_lock);
    if (max_threads > pool->size) max_threads = pool->size;
    pool->fn = fn;
    pool->arg = arg;
#ifdef MLCC_POOL_STATS
    pool->published = STATS_WALL();
#endif
    pthread_mutex_lock(&pool->mu);
    loop = (ST_LOOP(__atomic_load_n(&pool->state, __ATOMIC_RELAXED)) + 1) & 0xFFFFFFu;
    __atomic_store_n(&pool->state, (loop << 40) | ((uint64_t)max_threads << 32) |
                     (uint64_t)units, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
#ifdef MLCC_POOL_STATS
    {
        const double t0 = STATS_CPU();
        long n = 0;
        while ((u = take_unit(pool, loop, 0)) >= 0) {
            fn(arg, (int)u, 0);
            n++;
        }
        pool->stats[0].unit_cpu += STATS_CPU() - t0;
        pool->stats[0].units += n;
        pool->stats[0].loops++;
        pool->stats[0].wait -= STATS_WALL();
        pool->stats[0].wait_cpu -= STATS_CPU();
    }
#else
    while ((u = take_unit(pool, loop, 0)) >= 0) fn(arg, (int)u, 0);
#endif
    /* a worker still busy may have been preempted: yield, so that it can run here */
    for (i = 0; __atomic_load_n(&pool->busy, __ATOMIC_SEQ_CST) != 0 && i < SPIN; i++) {
        CPU_RELAX();
        if (i % 64 == 63) sched_yield();
    }
    if (__atomic_load_n(&pool->busy, __ATOMIC_SEQ_CST) != 0) {
        pthread_mutex_lock(&pool->mu);
        while (__atomic_load_n(&pool->busy, __ATOMIC_SEQ_CST) != 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
#ifdef MLCC_POOL_STATS
    pool->stats[0].wait += STATS_WALL();
    pool->stats[0].wait_cpu += STATS_CPU();
#endif
    pthread_mutex_unlock(&pool->run_lock);
}

#ifdef MLCC_POOL_STATS
/* out[7 * t + 0..6] of thread t < size: unit CPU seconds, units, wait (wall) seconds, wait CPU
 * seconds, loops (those three for the caller, t = 0), then for workers the wall seconds from
 * each loop's start to their first unit of it, and the times they went to sleep; then zeroes
 * them. Call between runs (a worker that goes to sleep after a loop returned may count
 * that sleep after the reset). */
void mlcc_threadpool_stats(mlcc_threadpool *pool, double *out) {
    int t;
    for (t = 0; pool != NULL && t < pool->size; t++) {
        out[7 * t] = pool->stats[t].unit_cpu;
        out[7 * t + 1] = (double)pool->stats[t].units;
        out[7 * t + 2] = pool->stats[t].wait;
        out[7 * t + 3] = pool->stats[t].wait_cpu;
        out[7 * t + 4] = (double)pool->stats[t].loops;
        out[7 * t + 5] = pool->stats[t].join;
        out[7 * t + 6] = (double)pool->stats[t].sleeps;
        memset(&pool->stats[t], 0, sizeof pool->stats[t]);
    }
}
#endif

#else /* no threads */

struct mlcc_threadpool {
    int size;
};

int mlcc_threadpool_create(mlcc_threadpool **out, int nthreads) {
    if (out == NULL) return MLCC_ERR_NULL_ARGUMENT;
    *out = NULL;
    (void)nthreads;
    return MLCC_ERR_THREADS;
}

void mlcc_threadpool_destroy(mlcc_threadpool *pool) { (void)pool; }

int mlcc_threadpool_size(const mlcc_threadpool *pool) {
    (void)pool;
    return 1;
}

void mlcc_threadpool_for(mlcc_threadpool *pool, mlcc_unit_fn fn, void *arg, int units,
                         int max_threads) {
    int i;
    (void)pool;
    (void)max_threads;
    for (i = 0; i < units; i++) fn(arg, i, 0);
}

#endif

int mlcc_context_set_threadpool(mlcc_context *ctx, mlcc_threadpool *pool) {
    if (ctx == NULL) return MLCC_ERR_NULL_ARGUMENT;
    if (ctx->model == NULL) return MLCC_ERR_NOT_INITIALIZED;
    ctx->pool = pool;
    return MLCC_OK;
}
