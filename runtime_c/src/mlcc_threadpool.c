/* mlcc thread pool: a fixed set of worker threads that run one parallel section at a time.
 *
 * mlcc_threadpool_run(pool, fn, arg) calls fn(arg, i, n) once for every i < n (n = the pool's
 * size), i = 0 on the calling thread, and returns when all calls have returned. Kernels split
 * their work by a static partition of i, so results never depend on timing.
 *
 * Workers spin briefly on the section counter before sleeping on a condition variable: the
 * sections of one inference follow each other within microseconds, while between inferences
 * the workers sleep. Allocation happens in mlcc_threadpool_create only. Built without threads
 * (MLCC_NO_THREADS, set by the wasm target, or a compiler without pthreads), create fails with
 * MLCC_ERR_THREADS and run calls fn(arg, 0, 1). */
#include "mlcc_runtime.h"

#include <stdlib.h>

#if !defined(MLCC_NO_THREADS) && (defined(__unix__) || defined(__APPLE__)) && \
    (defined(__GNUC__) || defined(__clang__))
#define MLCC_THREADS 1
#else
#define MLCC_THREADS 0
#endif

#if MLCC_THREADS
#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spin iterations before sleeping (a few tens of microseconds). */
#define SPIN 20000

typedef struct worker {
    struct mlcc_threadpool *pool;
    int index;
    pthread_t thread;
} worker;

struct mlcc_threadpool {
    int size;                          /* threads, the caller included */
    int started;                       /* workers created (size - 1 once create succeeds) */
    pthread_mutex_t run_lock;          /* serializes sections of contexts sharing the pool */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    /* written under mu with atomic stores; read atomically by spinners */
    unsigned long section;             /* incremented per section */
    int remaining;                     /* workers still running the current section */
    int stop;
    mlcc_task_fn fn;
    void *arg;
    worker workers[MLCC_MAX_THREADS];
};

static void *worker_main(void *p) {
    worker *w = (worker *)p;
    struct mlcc_threadpool *pool = w->pool;
    unsigned long seen = 0;
    for (;;) {
        unsigned long now = __atomic_load_n(&pool->section, __ATOMIC_ACQUIRE);
        int i;
        for (i = 0; now == seen && i < SPIN; i++) {
            CPU_RELAX();
            now = __atomic_load_n(&pool->section, __ATOMIC_ACQUIRE);
        }
        if (now == seen) {
            pthread_mutex_lock(&pool->mu);
            while ((now = __atomic_load_n(&pool->section, __ATOMIC_ACQUIRE)) == seen &&
                   !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&pool->wake, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (now == seen) return NULL;  /* stop */
        seen = now;
        pool->fn(pool->arg, w->index, pool->size);
        if (__atomic_sub_fetch(&pool->remaining, 1, __ATOMIC_ACQ_REL) == 0) {
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

void mlcc_threadpool_run(mlcc_threadpool *pool, mlcc_task_fn fn, void *arg) {
    int i;
    if (pool == NULL || pool->size == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool->run_lock);
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    __atomic_store_n(&pool->remaining, pool->size - 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pool->section, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->size);
    for (i = 0; __atomic_load_n(&pool->remaining, __ATOMIC_ACQUIRE) != 0 && i < SPIN; i++)
        CPU_RELAX();
    if (__atomic_load_n(&pool->remaining, __ATOMIC_ACQUIRE) != 0) {
        pthread_mutex_lock(&pool->mu);
        while (__atomic_load_n(&pool->remaining, __ATOMIC_ACQUIRE) != 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
    pthread_mutex_unlock(&pool->run_lock);
}

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

void mlcc_threadpool_run(mlcc_threadpool *pool, mlcc_task_fn fn, void *arg) {
    (void)pool;
    fn(arg, 0, 1);
}

#endif

int mlcc_context_set_threadpool(mlcc_context *ctx, mlcc_threadpool *pool) {
    if (ctx == NULL) return MLCC_ERR_NULL_ARGUMENT;
    if (ctx->model == NULL) return MLCC_ERR_NOT_INITIALIZED;
    ctx->pool = pool;
    return MLCC_OK;
}
