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
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L   /* clock_gettime under -std=c99 */
#endif
#include "mlcc_internal.h"

#include <stdlib.h>
#include <string.h>

/* The first int of a pool and of a loop group (mlcc_internal.h): a group passed where kernels
 * take a pool stands for the pool it was opened on, and may keep their last loops. */
#define KIND_POOL 0x4d4c5050
#define KIND_GROUP 0x4d4c4752

static int is_group(const mlcc_threadpool *pool) {
    return pool != NULL && *(const int *)(const void *)pool == KIND_GROUP;
}

/* The pool that runs a loop given `pool`: itself, or the pool a group was opened on. */
static mlcc_threadpool *loop_pool(const mlcc_threadpool *pool) {
    return is_group(pool) ? ((const mlcc_loop_group *)(const void *)pool)->pool
                          : (mlcc_threadpool *)pool;
}

#if !defined(MLCC_NO_THREADS) && (defined(__unix__) || defined(__APPLE__)) && \
    (defined(__GNUC__) || defined(__clang__))
#define MLCC_THREADS 1
#else
#define MLCC_THREADS 0
#endif

#if MLCC_THREADS
#include <pthread.h>
#include <sched.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a worker waiting for the next loop, or the caller waiting for workers, spins
 * (pausing, yielding every 64 pauses so that other runnable threads get the CPU) before it
 * sleeps. Long enough to span the serial work between loops and the caller's own work between
 * back-to-back inferences: a thread that sleeps lets its CPU idle, and on a virtual machine an
 * idle vCPU may come back on a core far from the other's (measured on a 2-vCPU Zen 5 VM: a
 * cache-line round trip between the two threads went from 80 to 370 ns and ResNet-18 on 2
 * threads from 7.3 to 11.3 ms, for as long as the placement lasted; with 40 us of spin that
 * happened in about a third of the processes, with 2 ms in none). The pauses yield, so on a
 * busy machine the spin gives its CPU to other work. */
#ifndef MLCC_SPIN_US
#define MLCC_SPIN_US 2000
#endif

static uint64_t monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One step of a bounded spin: pauses, and every 64 steps yields and tells whether the spin
 * that started at *start (0: not yet) has lasted MLCC_SPIN_US. */
static int spin_expired(int step, uint64_t *start) {
    CPU_RELAX();
    if (step % 64 != 63) return 0;
    sched_yield();
    if (*start == 0) {
        *start = monotonic_ns();
        return 0;
    }
    return monotonic_ns() - *start >= (uint64_t)MLCC_SPIN_US * 1000u;
}

/* The loop state, one atomic word: loop number (24 bits, wrapping) and max_threads (8 bits).
 * Each thread t < max_threads owns a contiguous range of the units, [t * units / max_threads,
 * (t + 1) * units / max_threads), in one atomic word of its own: loop number, first and end
 * (16 bits each). The owner takes units from the front of its range, a thread whose range is
 * empty steals from the back of another's. Contiguous ranges keep the data a thread wrote in
 * one loop under the same thread in the next (kernels cut rows and tiles in order), which
 * matters where the two cores share no cache: units dealt out one by one made every layer read
 * half its input from the other core (ResNet-18 on 2 threads 1.5x slower when the VM put its
 * vCPUs on different CCDs, onnxruntime 1.05x). A take is a compare-and-swap that also checks
 * the loop number, so a worker that wakes late never takes a unit of another loop (it would
 * have to stall between two instructions for 2^24 loops). */
#define ST_LOOP(s) ((s) >> 40)
#define ST_MAXT(s) (((s) >> 32) & 0xFFu)
#define RANGE_FIRST(r) (((r) >> 16) & 0xFFFFu)
#define RANGE_END(r) ((r) & 0xFFFFu)
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
    int kind;                          /* KIND_POOL */
    int size;                          /* threads, the caller included */
    int started;                       /* workers created (size - 1 once create succeeds) */
    pthread_mutex_t run_lock;          /* serializes loops of contexts sharing the pool */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t state;                    /* atomic: see ST_* */
    uint64_t ranges[MLCC_MAX_THREADS][8];   /* atomic, [t][0]: thread t's units (a line each) */
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

/* Takes a unit of loop `loop` from thread owner's range, from its front (the owner) or its
 * back (a thief); -1 when the range is empty or belongs to another loop. */
static long take_from(struct mlcc_threadpool *pool, uint64_t loop, int owner, int front) {
    uint64_t *word = &pool->ranges[owner][0];
    uint64_t r = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    while (ST_LOOP(r) == loop && RANGE_FIRST(r) < RANGE_END(r)) {
        const uint64_t taken = front ? r + (1u << 16) : r - 1u;
        if (__atomic_compare_exchange_n(word, &r, taken, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return front ? (long)RANGE_FIRST(r) : (long)RANGE_END(r) - 1;
    }
    return -1;
}

/* Takes the next unit of loop `loop` for thread `index`: its own first, then the others';
 * -1 when there is none left for it. */
static long take_unit(struct mlcc_threadpool *pool, uint64_t loop, int index) {
    const uint64_t s = __atomic_load_n(&pool->state, __ATOMIC_ACQUIRE);
    const int threads = (int)ST_MAXT(s);
    long u;
    int v;
    if (ST_LOOP(s) != loop || index >= threads) return -1;
    if ((u = take_from(pool, loop, index, 1)) >= 0) return u;
    for (v = 1; v < threads; v++)
        if ((u = take_from(pool, loop, (index + v) % threads, 0)) >= 0) return u;
    return -1;
}

static void *worker_main(void *p) {
    worker *w = (worker *)p;
    struct mlcc_threadpool *pool = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t now = ST_LOOP(__atomic_load_n(&pool->state, __ATOMIC_ACQUIRE));
        uint64_t spin_start;
        long u;
        int i;
        /* The spin yields: a worker woken onto the caller's CPU (the other one busy) must
         * not spin away the time the caller needs to finish the loop and start the next. */
        for (i = 0, spin_start = 0; now == seen && !spin_expired(i, &spin_start); i++)
            now = ST_LOOP(__atomic_load_n(&pool->state, __ATOMIC_ACQUIRE));
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
    pool->kind = KIND_POOL;
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
    pool = loop_pool(pool);
    return pool == NULL ? 1 : pool->size;
}

void mlcc_threadpool_for(mlcc_threadpool *pool, mlcc_unit_fn fn, void *arg, int units,
                         int max_threads) {
    uint64_t loop, spin_start = 0;
    long u;
    int i;
    if (units <= 0) return;
    pool = loop_pool(pool);
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
    for (i = 0; i < max_threads; i++) {
        const uint64_t first = (uint64_t)units * (uint64_t)i / (uint64_t)max_threads;
        const uint64_t end = (uint64_t)units * (uint64_t)(i + 1) / (uint64_t)max_threads;
        __atomic_store_n(&pool->ranges[i][0], (loop << 40) | (first << 16) | end,
                         __ATOMIC_RELAXED);
    }
    __atomic_store_n(&pool->state, (loop << 40) | ((uint64_t)max_threads << 32),
                     __ATOMIC_RELEASE);
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
    for (i = 0; __atomic_load_n(&pool->busy, __ATOMIC_SEQ_CST) != 0 &&
                !spin_expired(i, &spin_start); i++) {
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
    int kind;
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

mlcc_threadpool *mlcc_loop_group_open(mlcc_loop_group *group, mlcc_threadpool *pool) {
    group->kind = KIND_GROUP;
    group->count = 0;
    group->threads = 1;
    group->pool = loop_pool(pool);
    return mlcc_threadpool_size(group->pool) > 1 ? (mlcc_threadpool *)(void *)group
                                                 : group->pool;
}

void mlcc_threadpool_for_last(mlcc_threadpool *pool, mlcc_unit_fn fn, const void *job,
                              size_t job_bytes, int units, int max_threads) {
    if (is_group(pool) && units > 0) {
        mlcc_loop_group *g = (mlcc_loop_group *)(void *)pool;
        if (g->count < MLCC_GROUP_LOOPS && job_bytes <= MLCC_GROUP_JOB_BYTES) {
            mlcc_group_loop *l = &g->loops[g->count++];
            l->fn = fn;
            l->units = units;
            l->max_threads = max_threads;
            memcpy(l->job.bytes, job, job_bytes);
            return;
        }
    }
    mlcc_threadpool_for(pool, fn, (void *)job, units, max_threads);
}

/* Unit `unit` of a group's loop. Its units are ordered by thread, then by loop: thread t's
 * share of every loop (the range mlcc_threadpool_for would give it in that loop alone), so
 * that, as the pool hands each thread a contiguous range of the units, a thread runs about
 * the parts of each loop it would have run alone (its rows of the next layer's input). */
static void group_unit(void *arg, int unit, int thread) {
    const mlcc_loop_group *g = (const mlcc_loop_group *)arg;
    int t, i;
    for (t = 0; t < g->threads; t++)
        for (i = 0; i < g->count; i++) {
            const mlcc_group_loop *l = &g->loops[i];
            const int first = (int)((long)l->units * t / g->threads);
            const int n = (int)((long)l->units * (t + 1) / g->threads) - first;
            if (unit < n) {
                l->fn((void *)l->job.bytes, first + unit, thread);
                return;
            }
            unit -= n;
        }
}

void mlcc_loop_group_run(mlcc_loop_group *group) {
    int i, units = 0, threads = mlcc_threadpool_size(group->pool);
    for (i = 0; i < group->count; i++) {
        units += group->loops[i].units;
        if (group->loops[i].max_threads < threads) threads = group->loops[i].max_threads;
    }
    group->threads = threads < 1 ? 1 : threads;
    if (group->count == 1)
        mlcc_threadpool_for(group->pool, group->loops[0].fn, group->loops[0].job.bytes,
                            group->loops[0].units, group->loops[0].max_threads);
    else if (group->count > 1)
        mlcc_threadpool_for(group->pool, group_unit, group, units, group->threads);
    group->count = 0;
}

int mlcc_context_set_threadpool(mlcc_context *ctx, mlcc_threadpool *pool) {
    if (ctx == NULL) return MLCC_ERR_NULL_ARGUMENT;
    if (ctx->model == NULL) return MLCC_ERR_NOT_INITIALIZED;
    ctx->pool = pool;
    return MLCC_OK;
}
