"""How far apart the host placed this VM's first two vCPUs: a cache-line round trip in ns.

    python bench/vcpu_placement.py            # one measurement, in ns
    python bench/vcpu_placement.py --watch 60 # one a second for a minute

Two threads, pinned to CPU 0 and CPU 1, hand one cache line back and forth; the time of a
round trip is the cost of every handoff between the two cores (a barrier, a stolen unit of
work, an activation written by one and read by the other). On the 2-vCPU project VM it reads
about 80 ns when the host runs both vCPUs near each other and 370-400 ns when far apart, and
the host moves them while a benchmark runs: mlcc's 2-thread times grow up to 1.5x far apart.
`bench_models.py --threads N` prints it before and after each model. A measuring tool: it
asserts nothing.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A clock and pinning a thread to a CPU, for the probes here and in crossing_cost.py.
HELPERS = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
"""

SOURCE = HELPERS + r"""
static _Alignas(64) atomic_int ball;
static atomic_int stop;

static void *partner(void *arg) {
    pin(*(int *)arg);
    for (;;) {
        while (atomic_load_explicit(&ball, memory_order_acquire) != 1)
            if (atomic_load_explicit(&stop, memory_order_relaxed)) return 0;
        atomic_store_explicit(&ball, 2, memory_order_release);
    }
}

struct pinger { int cpu, n; double ns; };

#define BURST 200

static void *pinger(void *arg) {
    struct pinger *p = arg;
    p->ns = -1.0;
    if (pin(p->cpu) != 0) return 0;
    double t0 = 0.0;
    for (int i = 0; i < p->n + 1000; i++) {
        if (i >= 1000 && (i - 1000) % BURST == 0) {
            const double t = now();
            if (i > 1000 && (p->ns < 0 || (t - t0) / BURST < p->ns)) p->ns = (t - t0) / BURST;
            t0 = t;
        }
        atomic_store_explicit(&ball, 1, memory_order_release);
        while (atomic_load_explicit(&ball, memory_order_acquire) != 2) {}
    }
    p->ns *= 1e9;
    return 0;
}

/* The round trip in ns between two threads of their own pinned to the two CPUs (the caller's
 * affinity, which child processes inherit, is left alone): the fastest of the bursts of BURST
 * handoffs in n after 1000 untimed ones, so that other jobs preempting either thread now and
 * then do not count (the mean of all handoffs read 0.5-1.4 us at load 4-6 whatever the
 * placement; the fastest burst 75-80 or 350-380 ns, as on the quiet machine); < 0 when they
 * cannot be pinned. */
double round_trip_ns(int cpu_a, int cpu_b, int n) {
    pthread_t a, b;
    struct pinger p = {cpu_a, n, -1.0};
    atomic_store(&stop, 0);
    atomic_store(&ball, 0);
    if (pthread_create(&b, 0, partner, &cpu_b) != 0) return -1.0;
    if (pthread_create(&a, 0, pinger, &p) == 0) pthread_join(a, 0);
    atomic_store(&stop, 1);
    atomic_store(&ball, 0);
    pthread_join(b, 0);
    return p.ns;
}
"""


def build_probe(name: str, source: str, flags: list[str], inputs: list[Path] = ()) -> Path:
    """`source` (and the C files `inputs`) built with cc and `flags` into a shared library in
    the temporary folder, once per content."""
    digest = hashlib.sha256(source.encode() + " ".join(flags).encode())
    for path in inputs:
        digest.update(path.read_bytes())
    lib = Path(tempfile.gettempdir()) / f"mlcc-{name}-{digest.hexdigest()[:12]}.so"
    if not lib.exists():
        src = lib.with_suffix(f".{os.getpid()}.c")
        src.write_text(source)
        tmp = lib.with_suffix(f".{os.getpid()}.so")
        subprocess.run(["cc", *flags, "-shared", "-fPIC", "-pthread", str(src),
                        *map(str, inputs), "-o", str(tmp)], check=True)
        src.unlink()
        tmp.replace(lib)
    return lib


def _library() -> ctypes.CDLL:
    """The probe, built once per source into the temporary folder."""
    so = ctypes.CDLL(str(build_probe("vcpu-placement", SOURCE, ["-O2", "-std=c11"])))
    so.round_trip_ns.restype = ctypes.c_double
    so.round_trip_ns.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return so


def round_trip_ns(handoffs: int = 100_000) -> float | None:
    """The round trip between CPU 0 and CPU 1 in ns; None with fewer than 2 CPUs or no cc."""
    if (os.cpu_count() or 1) < 2:
        return None
    try:
        value = _library().round_trip_ns(0, 1, handoffs)
    except (OSError, subprocess.CalledProcessError):
        return None
    return value if value > 0 else None


def describe(ns: float | None) -> str:
    return "unknown" if ns is None else f"{ns:.0f} ns"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--watch", type=float, default=0.0,
                    help="measure once a second for this many seconds")
    args = ap.parse_args(argv)
    end = time.monotonic() + args.watch
    while True:
        print(f"{time.strftime('%H:%M:%S')} round trip CPU 0 <-> CPU 1: "
              f"{describe(round_trip_ns())}", flush=True)
        if time.monotonic() >= end:
            return 0
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
