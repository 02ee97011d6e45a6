"""Nanoseconds per one-row product (gemm.c's gemv_block) on the digits MLP's shapes, and the
time to read its 68 KiB of weights: the measurements behind the ninth round in
docs/performance-log.md.

    python bench/gemv_bench.py                      # this checkout's runtime_c
    python bench/gemv_bench.py --runtime OLD/runtime_c --no-b-finite   # code before b_finite

Builds a small C driver against the runtime's gemm.c with -O3 -march=native and prints, per
case, the fastest of many batches of calls (ns per call): the product's weights stay in cache
(that is the compute side; in a model they come from L2, which the sweep line measures).
A measuring tool like ab_models.py: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gemm.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* fastest of 200 batches of `calls` calls, ns per call */
static double product(int n, int k, int ldb, double zeros, int b_finite) {
    mlcc_gemm_params p = {0};
    float *b = aligned_alloc(64, (size_t)k * ldb * 4 + 64), *bias = aligned_alloc(64, 4 * n + 64);
    float *a = aligned_alloc(64, 4 * k + 64), *c = aligned_alloc(64, 4 * n + 64);
    double best = 1e9;
    int i, r, calls = 2000;
    p.m = 1, p.n = n, p.k = k, p.a_row_stride = k, p.a_col_stride = 1, p.ldb = ldb, p.ldc = n;
    p.bias_col_stride = 1, p.alpha = p.beta = 1.0f, p.act.kind = MLCC_ACT_RELU;
#ifdef HAVE_B_FINITE
    p.b_finite = b_finite;
#else
    (void)b_finite;
#endif
    srand(1);
    for (i = 0; i < k * ldb; i++) b[i] = (rand() % 1000) * 0.001f - 0.5f;
    for (i = 0; i < n; i++) bias[i] = 0.1f;
    for (i = 0; i < k; i++) a[i] = rand() < zeros * RAND_MAX ? 0.0f : (rand() % 100) * 0.01f + 0.01f;
    for (r = 0; r < 200; r++) {
        double t = now();
        for (i = 0; i < calls; i++) mlcc_f32_gemm(&p, a, b, bias, c);
        t = (now() - t) / calls * 1e9;
        if (t < best) best = t;
    }
    free(b), free(bias), free(a), free(c);
    return best;
}

/* summing `bytes` of floats again and again, 8 vectors of 16 at a time: ns per sweep (the
 * bandwidth of L1 or L2: the loop itself runs at one vector load per cycle) */
typedef float vf16 __attribute__((vector_size(64)));
__attribute__((noinline)) static float sweep_once(const float *w, long n) {
    vf16 s[8] = {{0}};
    long i;
    int v;
    for (i = 0; i < n; i += 128)
        for (v = 0; v < 8; v++) s[v] += *(const vf16 *)(w + i + 16 * v);
    for (v = 1; v < 8; v++) s[0] += s[v];
    for (v = 1; v < 16; v++) s[0][0] += s[0][v];
    return s[0][0];
}

static double sweep(long bytes) {
    const long n = bytes / 4;
    float *w = aligned_alloc(64, bytes), sink = 0;
    double best = 1e9;
    long i;
    int r, calls = 2000;
    for (i = 0; i < n; i++) w[i] = i * 1e-9f;
    for (r = 0; r < 50; r++) {
        double t = now();
        for (i = 0; i < calls; i++) {
            __asm__ volatile("" ::: "memory");
            sink += sweep_once(w, n);
        }
        t = (now() - t) / calls * 1e9;
        if (t < best) best = t;
    }
    free(w);
    return best + 0.0 * sink;
}

int main(int argc, char **argv) {
    const int b_finite = argc > 1 ? atoi(argv[1]) : 1;
    printf("| product (n x k, zeros in A) | ldb | ns per call |\n|---|---:|---:|\n");
    printf("| fc1 128 x 64, none | 128 | %.0f |\n", product(128, 64, 128, 0.0, b_finite));
    printf("| fc1 128 x 64, half | 128 | %.0f |\n", product(128, 64, 128, 0.5, b_finite));
    printf("| fc2 64 x 128, none | 64 | %.0f |\n", product(64, 128, 64, 0.0, b_finite));
    printf("| fc2 64 x 128, half | 64 | %.0f |\n", product(64, 128, 64, 0.5, b_finite));
    printf("| fc3 10 x 64, half | 10 | %.0f |\n", product(10, 64, 10, 0.5, b_finite));
    printf("| fc3 10 x 64, half | 16 | %.0f |\n", product(10, 64, 16, 0.5, b_finite));
    printf("\nsumming 16 KiB (L1): %.0f ns; 68 KiB (the MLP's weights, from L2): %.0f ns\n",
           sweep(16 << 10), sweep(68 << 10));
    return 0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", type=Path, default=ROOT / "runtime_c",
                    help="a runtime_c folder (e.g. of an older checkout)")
    ap.add_argument("--no-b-finite", action="store_true",
                    help="for a runtime without mlcc_gemm_params.b_finite")
    args = ap.parse_args()
    rt = args.runtime.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "gemv_bench.c", Path(tmp) / "gemv_bench"
        src.write_text(DRIVER)
        flags = [] if args.no_b_finite else ["-DHAVE_B_FINITE"]
        subprocess.run(["cc", "-O3", "-march=native", "-ffp-contract=fast", "-std=gnu11",
                        "-DMLCC_VECTOR_BYTES=64", *flags, f"-I{rt / 'include'}",
                        f"-I{rt / 'kernels'}", "-o", str(exe), str(src),
                        str(rt / "kernels" / "gemm.c"), str(rt / "src" / "mlcc_runtime.c"),
                        str(rt / "src" / "mlcc_threadpool.c"), "-lm", "-pthread"], check=True)
        subprocess.run([str(exe)], check=True)


if __name__ == "__main__":
    main()
