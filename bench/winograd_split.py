"""What splitting one Winograd layer between two threads costs, apart from the machine's load.

    python bench/winograd_split.py                       # ResNet-18's and YOLOv8n's F(4x4) maps
    python bench/winograd_split.py 64,64,56,56 128,128,28,28 --runs 300

Each layer (in channels, out channels, height, width; 3x3, padding 1, ReLU, F(4x4)) runs,
alternately: on one thread (the kernel without a pool); as each of the two units of the
2-thread split (thread_range, or the phase-by-phase path on maps of fewer than two panels of
tiles) alone on CPU 0; both units at once on two threads of their own pinned to CPU 0 and 1;
and on a pool of 2. Per kind the fastest run is kept (other jobs only ever add time), and
for the concurrent run only runs where both threads overlapped. "alone / half" is the slower
unit alone over half the 1-thread time: the work the partition adds, which needs no second
core to see (1.16 on the 56 x 56 layers before the last partial panel was shared; 1.09
after). "together / alone" is what running at the same time adds: the caches, the memory
and the fabric between the cores (a busy machine inflates it; compare runs made in the same
minutes, with `vcpu_placement.py` before). The kernel is built from runtime_c with the
x86-native target's flags, with its static functions included (a measuring tool only).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mlcc.targets import load_target  # noqa: E402

SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
#include "winograd.c"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static winograd_job job;
static int phase_path;

/* Unit u of the 2-thread split on thread u: thread_range, or each phase's units of thread u
 * (winograd_blocks' phase-by-phase path; alone, no barrier is needed) */
static void run_unit(int u) {
    if (!phase_path) {
        thread_range(&job, u, u);
    } else {
        const mlcc_conv2d_params *p = &job.pp->conv;
        winograd_job j = job;
        int k;
        j.units = (int)phase_units((ptrdiff_t)p->in_channels, 2);
        for (k = u * (int)j.units / 2; k < (u + 1) * (int)j.units / 2; k++) j.in_fn(&j, k, u);
        j.units = (int)phase_units(j.ne, 2);
        for (k = u * (int)j.units / 2; k < (u + 1) * (int)j.units / 2; k++) products(&j, k, u);
        j.units = (int)phase_units((ptrdiff_t)p->out_channels, 2);
        for (k = u * (int)j.units / 2; k < (u + 1) * (int)j.units / 2; k++) j.out_fn(&j, k, u);
    }
}

/* go counts the threads on their CPUs: each starts once both are (the caller, pinned to CPU 0
 * too, only creates and joins them; a flag it set had let CPU 1's unit start a time slice
 * before CPU 0's, and every sample was discarded as not simultaneous) */
typedef struct { int u; volatile int *go; double t0, t1; } arg_t;
static void *unit_thread(void *p) {
    arg_t *a = (arg_t *)p;
    pin(a->u);
    __sync_fetch_and_add(a->go, 1);
    while (*a->go < 2) {
    }
    a->t0 = now();
    run_unit(a->u);
    a->t1 = now();
    return NULL;
}

int main(int argc, char **argv) {
    const int cin = atoi(argv[1]), cout = atoi(argv[2]), h = atoi(argv[3]), w = atoi(argv[4]);
    const int runs = atoi(argv[5]);
    const ptrdiff_t block = atol(argv[6]), ne = 36, cout_pad = (cout + 7) / 8 * 8;
    mlcc_conv2d_packed_params pp;
    mlcc_threadpool *pool;
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    float *x, *u, *bias, *y, *scratch;
    ptrdiff_t i, tiles;
    int r, step;
    memset(&pp, 0, sizeof pp);
    pp.conv.batch = 1, pp.conv.in_channels = cin, pp.conv.in_h = h, pp.conv.in_w = w;
    pp.conv.out_channels = cout, pp.conv.out_h = h, pp.conv.out_w = w;
    pp.conv.kernel_h = pp.conv.kernel_w = 3, pp.conv.stride_h = pp.conv.stride_w = 1;
    pp.conv.dilation_h = pp.conv.dilation_w = 1, pp.conv.pad_top = pp.conv.pad_left = 1;
    pp.conv.groups = 1, pp.conv.act.kind = MLCC_ACT_RELU;
    pp.block_cols = block;
    x = malloc(4 * (size_t)cin * h * w), u = malloc(4 * (size_t)(ne * cout_pad * cin));
    bias = malloc(4 * (size_t)cout), y = malloc(4 * (size_t)cout * h * w);
    if (posix_memalign((void **)&scratch, 64, 4 * (size_t)mlcc_winograd_4x4_scratch_floats(&pp)))
        return 1;
    for (i = 0; i < (ptrdiff_t)cin * h * w; i++) x[i] = (float)(i * 7919 % 1000) / 1000 - 0.5f;
    for (i = 0; i < ne * cout_pad * cin; i++) u[i] = (float)(i * 104729 % 1000) / 1000 - 0.5f;
    for (i = 0; i < cout; i++) bias[i] = 0.01f * (float)i;
    if (mlcc_threadpool_create(&pool, 2) != 0) return 1;
    /* winograd_run's job for 2 threads */
    tiles = (ptrdiff_t)((h + 3) / 4) * ((w + 3) / 4);
    memset(&job, 0, sizeof job);
    job.pp = &pp, job.x = x, job.u = u, job.bias = bias, job.y = y, job.ne = ne;
    job.vplane = (ptrdiff_t)cin * block + MLCC_WINOGRAD_PLANE_PAD;
    job.mplane = (ptrdiff_t)cout * block + MLCC_WINOGRAD_PLANE_PAD;
    job.v = scratch, job.m = scratch + ne * job.vplane, job.rows = job.m + ne * job.mplane;
    job.in_fn = input_transform_4x4, job.out_fn = output_transform_4x4;
    job.tiles = tiles, job.units = 2;
    job.chunk = block / MLCC_GEMM_NR / 2 * MLCC_GEMM_NR;
    job.split_tail = job.chunk > 0 && split_tail(tiles, job.chunk, 2);
    phase_path = !(job.chunk > 0 && (tiles + MLCC_GEMM_NR - 1) / MLCC_GEMM_NR >= 2);
    if (phase_path) job.t0 = 0, job.nb = tiles;
    for (r = 0; r < runs; r++)
        for (step = 0; step < 9; step++) {
            /* 1 thread, unit 0, unit 1 (all on CPU 0), then three times both together and
             * the pool three times, each first one not counted: each thread's scratch slice
             * and outputs then last written on its own core, as from one layer to the next */
            static const int kinds[9] = {0, 1, 2, 3, 3, 3, 4, 4, 4};
            const int k = kinds[step];
            double t;
            if (k == 3) {   /* both units together, each on a thread of its own */
                volatile int go = 0;
                arg_t a[2] = {{0, &go, 0, 0}, {1, &go, 0, 0}};
                pthread_t th[2];
                pthread_create(&th[0], NULL, unit_thread, &a[0]);
                pthread_create(&th[1], NULL, unit_thread, &a[1]);
                pthread_join(th[0], NULL);
                pthread_join(th[1], NULL);
                t = fmax(a[0].t1, a[1].t1) - fmin(a[0].t0, a[1].t0);
                if (fmin(a[0].t1, a[1].t1) - fmax(a[0].t0, a[1].t0) < 0.9 * t)
                    continue;   /* they did not run at the same time */
            } else {
                pin(0);
                t = now();
                if (k == 0) mlcc_f32_conv2d__winograd_4x4(&pp, x, u, bias, y, scratch, NULL);
                else if (k == 4) mlcc_f32_conv2d__winograd_4x4(&pp, x, u, bias, y, scratch, pool);
                else run_unit(k - 1);
                t = now() - t;
            }
            if (step != 3 && step != 6 && t < best[k]) best[k] = t;
        }
    printf("%d %d %d %d %ld %d %d %.6f %.6f %.6f %.6f %.6f\n", cin, cout, h, w, (long)tiles,
           phase_path, job.split_tail, best[0], best[1], best[2], best[3], best[4]);
    mlcc_threadpool_destroy(pool);
    return 0;
}
"""

# ResNet-18's F(4x4) maps, then YOLOv8n's at 640 x 640 that split by tiles
DEFAULT = ["64,64,56,56", "128,128,28,28", "256,256,14,14", "32,32,80,80", "64,64,80,80",
           "64,64,40,40"]


def build(folder: Path) -> Path:
    tgt = load_target("x86-native")
    src = folder / "winograd_split.c"
    src.write_text(SOURCE)
    rt = ROOT / "runtime_c"
    exe = folder / "winograd_split"
    subprocess.run([tgt.toolchain.cc, *[f for f in tgt.toolchain.cflags if f != "-fPIC"],
                    *tgt.defines(), f"-I{rt / 'include'}", f"-I{rt / 'kernels'}",
                    f"-I{rt / 'src'}", str(src), str(rt / "kernels" / "gemm.c"),
                    str(rt / "kernels" / "conv.c"), str(rt / "src" / "mlcc_threadpool.c"),
                    str(rt / "src" / "mlcc_runtime.c"), "-lm", "-o", str(exe)], check=True)
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("layers", nargs="*", default=DEFAULT,
                    help="in,out,height,width of each layer (default: %(default)s)")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args(argv)
    from mlcc.ops import winograd
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        print("layer | 1 thread | units alone | alone / half | together | together / alone"
              " | pool of 2 | 1 thread / pool (ms, fastest runs)")
        for layer in args.layers:
            cin, cout, h, w = (int(v) for v in layer.split(","))
            block = int(winograd.plan(cin, cout, h, w, 4)[0])
            out = subprocess.run([str(exe), str(cin), str(cout), str(h), str(w),
                                  str(args.runs), str(block)], check=True, capture_output=True,
                                 text=True).stdout.split()
            tiles, phases, tail = int(out[4]), int(out[5]), int(out[6])
            one, a0, a1, both, pool = (float(v) * 1e3 for v in out[7:12])
            alone = max(a0, a1)
            how = "phases" if phases else "tiles" + (", tail shared" if tail else "")
            print(f"{cin}->{cout} {h}x{w} ({tiles} tiles, {how}) | {one:.3f} | {a0:.3f} "
                  f"{a1:.3f} | {alone / (one / 2):.2f} | {both:.3f} | {both / alone:.2f} | "
                  f"{pool:.3f} | {one / pool:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
