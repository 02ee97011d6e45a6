/* Two pinned threads on the two CPUs, for telling what far-placed vCPUs slow down
 * (docs/performance.md, "Far vCPUs"). Build and run (bench/vcpu_placement.py says near or far):
 *
 *   gcc -O2 -march=native -pthread bench/stream_pair.c -o /tmp/stream_pair
 *   /tmp/stream_pair THREADS CROSS     # THREADS 1 or 2; CROSS 0 or 1; or
 *   /tmp/stream_pair fma THREADS       # only multiply-adds in registers
 *
 * Streaming: per "layer" each thread reads a half of one 1.5 MB buffer and writes its half of
 * another, a spin barrier between layers, as two threads of a convolution would; CROSS 1 reads
 * the other thread's half. Prints microseconds per layer. fma: 12 independent chains of
 * multiply-adds per thread (no memory), seconds per thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FLOATS (384 * 1024) /* per buffer: 1.5 MB */
#define LAYERS 2000

static float *buf_a, *buf_b;
static int nthreads, cross, fma_only;
static volatile int bar_count, bar_gen;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void barrier(void) {
    const int g = bar_gen;
    if (__atomic_add_fetch(&bar_count, 1, __ATOMIC_ACQ_REL) == nthreads) {
        bar_count = 0;
        __atomic_store_n(&bar_gen, g + 1, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&bar_gen, __ATOMIC_ACQUIRE) == g) {
        }
    }
}

static void *run(void *arg) {
    const long id = (long)arg;
    cpu_set_t set;
    double t;
    CPU_ZERO(&set);
    CPU_SET((int)id, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    barrier();
    t = now();
    if (fma_only) {
        float acc[12][16];
        long k;
        int i, l;
        for (i = 0; i < 12; i++)
            for (l = 0; l < 16; l++) acc[i][l] = 1.0f + (float)i * 1e-3f;
        for (k = 0; k < 20000000; k++)
            for (i = 0; i < 12; i++)
                for (l = 0; l < 16; l++) acc[i][l] = acc[i][l] * 0.9999f + 1e-4f;
        printf("thread %ld: %.3f s (%g)\n", id, now() - t, (double)acc[11][15]);
        return NULL;
    }
    {
        const long half = FLOATS / nthreads;
        int layer;
        for (layer = 0; layer < LAYERS; layer++) {
            const float *src = (layer % 2 ? buf_b : buf_a) +
                               (cross ? (id + layer) % nthreads : id) * half;
            float *dst = (layer % 2 ? buf_a : buf_b) + id * half;
            long i;
            for (i = 0; i < half; i++) dst[i] = src[i] * 0.5f + 1.0f;
            barrier();
        }
    }
    if (id == 0)
        printf("threads %d cross %d: %.1f us per layer\n", nthreads, cross,
               (now() - t) / LAYERS * 1e6);
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t threads[2];
    long i;
    if (argc != 3) {
        fprintf(stderr, "usage: %s THREADS CROSS | fma THREADS\n", argv[0]);
        return 2;
    }
    fma_only = strcmp(argv[1], "fma") == 0;
    nthreads = atoi(argv[fma_only ? 2 : 1]);
    cross = fma_only ? 0 : atoi(argv[2]);
    if (nthreads < 1 || nthreads > 2) return 2;
    buf_a = aligned_alloc(64, FLOATS * sizeof(float));
    buf_b = aligned_alloc(64, FLOATS * sizeof(float));
    if (buf_a == NULL || buf_b == NULL) return 1;
    memset(buf_a, 0, FLOATS * sizeof(float));
    memset(buf_b, 0, FLOATS * sizeof(float));
    for (i = 0; i < nthreads; i++) pthread_create(&threads[i], NULL, run, (void *)i);
    for (i = 0; i < nthreads; i++) pthread_join(threads[i], NULL);
    return 0;
}
