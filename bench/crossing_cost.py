"""What the second thread costs a small layer: the pool's barrier and data moved between cores.

    python bench/crossing_cost.py            # once, with the vCPU placement
    python bench/crossing_cost.py --repeat 5 # five times, a second apart

Prints, with the cache-line round trip of bench/vcpu_placement.py (near about 80 ns, far
350-400 ns on the 2-vCPU project VM):

- barrier: the wall time of one mlcc_threadpool_for of 2 units on a pool of 2 threads, each
  unit waiting for the other to start (runtime_c/src/mlcc_threadpool.c as built for models;
  the fastest of bursts of 200 loops): what every parallel kernel call pays at least;
- N KiB read: the time CPU 0 takes to read (sum) N KiB that a thread on CPU 1 has just
  written, against reading N KiB it wrote itself; write: the time it takes to write over N
  KiB that CPU 1 wrote last, against N KiB it wrote itself; for N from 16 KiB to 1 MiB (the
  fastest of 30 repetitions): what a layer pays when its input was written on the other core
  (a serial kernel after a parallel one, or a partition that does not follow its producer's)
  and when its output or scratch lies where the other core wrote last.

A measuring tool like vcpu_placement.py: it asserts nothing. docs/performance.md ("Small
layers on two threads") has what it read.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vcpu_placement  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SOURCE = vcpu_placement.HELPERS + r"""
#include <stdlib.h>
#include "mlcc_internal.h"

static atomic_long arrived;

/* A unit that returns once both units of its loop have started: the two threads meet in
 * every loop (an empty unit would let the caller take both before the worker wakes). */
static void meet(void *arg, int unit, int thread) {
    const long loop = *(long *)arg;
    long n;
    (void)unit;
    (void)thread;
    atomic_fetch_add(&arrived, 1);
    for (n = 1; atomic_load(&arrived) < 2 * loop; n++)
        if (n % 4096 == 0) sched_yield();   /* the other thread waits for this CPU */
}

/* ns of one loop of 2 units on a pool of 2, both threads taking part: the fastest of 20
 * bursts of 200 */
double barrier_ns(void) {
    mlcc_threadpool *pool;
    double best = -1.0;
    long loop = 0;
    int b, i;
    if (mlcc_threadpool_create(&pool, 2) != 0) return -1.0;
    atomic_store(&arrived, 0);
    for (i = 0; i < 2000; i++) loop++, mlcc_threadpool_for(pool, meet, &loop, 2, 2);
    for (b = 0; b < 20; b++) {
        const double t0 = now();
        for (i = 0; i < 200; i++) loop++, mlcc_threadpool_for(pool, meet, &loop, 2, 2);
        const double t = (now() - t0) / 200 * 1e9;
        if (best < 0 || t < best) best = t;
    }
    mlcc_threadpool_destroy(pool);
    return best;
}

static unsigned *buf;
static long nfloats;
static atomic_int turn;   /* 1: writer writes, 2: reader reads */

static void fill(unsigned v) {
    long i;
    for (i = 0; i < nfloats; i++) buf[i] = v + (unsigned)i;
}

static unsigned sum(void) {   /* vectorized: memory-bound, as a layer's loads */
    unsigned s = 0;
    long i;
    for (i = 0; i < nfloats; i++) s += buf[i];
    return s;
}

static void *writer(void *arg) {
    int k;
    pin(1);
    for (k = 0; k < 2 * *(int *)arg; k++) {
        while (atomic_load(&turn) != 1) {}
        fill((unsigned)k);
        atomic_store(&turn, 2);
    }
    return 0;
}

volatile unsigned sink;

/* ns for CPU 0 to read `bytes` that CPU 1 wrote (out[0]) and that it wrote itself (out[1]),
 * then to write over them when CPU 1 wrote them last (out[2]) and when it did (out[3]), the
 * fastest of reps each */
int read_cost(long bytes, int reps, double *out) {
    pthread_t w;
    int k;
    nfloats = bytes / 4;
    buf = aligned_alloc(64, (size_t)bytes);
    if (buf == 0 || pin(0) != 0) return -1;
    out[0] = out[1] = out[2] = out[3] = -1.0;
    atomic_store(&turn, 1);
    if (pthread_create(&w, 0, writer, &reps) != 0) return -1;
    for (k = 0; k < reps; k++) {
        double t0, t;
        while (atomic_load(&turn) != 2) {}
        t0 = now();
        sink = sum();
        t = (now() - t0) * 1e9;
        if (out[0] < 0 || t < out[0]) out[0] = t;
        fill((unsigned)k);
        t0 = now();
        sink = sum();
        t = (now() - t0) * 1e9;
        if (out[1] < 0 || t < out[1]) out[1] = t;
        t0 = now();
        fill((unsigned)k + 1u);
        t = (now() - t0) * 1e9;
        if (out[3] < 0 || t < out[3]) out[3] = t;
        atomic_store(&turn, 1);
        while (atomic_load(&turn) != 2) {}
        t0 = now();
        fill((unsigned)k + 2u);
        t = (now() - t0) * 1e9;
        if (out[2] < 0 || t < out[2]) out[2] = t;
        atomic_store(&turn, 1);
    }
    pthread_join(w, 0);
    free(buf);
    return 0;
}
"""

SIZES_KIB = (16, 64, 256, 1024)


def _library() -> ctypes.CDLL:
    """The probe and the thread pool, built once per content into the temporary folder."""
    lib = vcpu_placement.build_probe(
        "crossing-cost", SOURCE,
        ["-O3", "-march=native", "-std=c11", f"-I{ROOT / 'runtime_c' / 'include'}",
         f"-I{ROOT / 'runtime_c' / 'src'}"],
        [ROOT / "runtime_c" / "src" / "mlcc_threadpool.c"])
    so = ctypes.CDLL(str(lib))
    so.barrier_ns.restype = ctypes.c_double
    so.read_cost.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    return so


def measure() -> str:
    so = _library()
    before = vcpu_placement.round_trip_ns()
    parts = [f"barrier {so.barrier_ns() / 1e3:.2f} us"]
    out = (ctypes.c_double * 4)()
    for kib in SIZES_KIB:
        if so.read_cost(kib * 1024, 30, out) != 0:
            return "cannot pin threads to CPUs 0 and 1"
        parts.append(f"{kib} KiB read {out[0] / 1e3:.1f} / {out[1] / 1e3:.1f}, "
                     f"write {out[2] / 1e3:.1f} / {out[3] / 1e3:.1f} us")
    after = vcpu_placement.round_trip_ns()
    return (f"round trip {vcpu_placement.describe(before)} / {vcpu_placement.describe(after)}: "
            + "; ".join(parts) + " (other core's / own)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        print("needs 2 CPUs")
        return 1
    for i in range(args.repeat):
        if i:
            time.sleep(1.0)
        print(f"{time.strftime('%H:%M:%S')} {measure()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
