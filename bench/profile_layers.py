"""Per-kernel-call times of a compiled model, alone or against another build, interleaved.

    python bench/profile_layers.py OUT_DIR [--runs 21] [--top 25]
    python bench/profile_layers.py OLD_DIR NEW_DIR [--runs 21]    # A/B, calls alternating
    python bench/profile_layers.py OLD_DIR NEW_DIR --cpu   # the caller's CPU time per call
    python bench/profile_layers.py A_DIR B_DIR --cpu --json calls.json   # every call's time
    python bench/profile_layers.py DIR --threads 1,2 [--pool-stats]  # the same build on 1 and 2
    python bench/profile_layers.py STATIC_DIR RANGE_DIR --feed x=1,3,48,320   # a range build

OUT_DIR is an `mlcc compile` output folder for this machine. Its generated model.c is copied
into a temporary folder with a timer around every kernel call (CLOCK_MONOTONIC, summed into
a static array: a measuring build only, never shipped), rebuilt with the folder's Makefile and
loaded with mlcc.runtime; each run resets and reads the timers. Prints the median time per
kernel (summed over calls) and the slowest calls with the convolution shapes from the params.
With two folders of the same model (e.g. compiled by two versions of mlcc), both are loaded
into one process and run alternately, so machine load affects both alike: compare the ratios.
--threads N or N,M runs the build(s) on a pool of N (and M) threads; with one folder and two
thread counts, that folder is loaded twice (an A/B of the thread counts). --pool-stats builds
the runtime with -DMLCC_POOL_STATS and prints, per kernel, what survives a busy machine: the
CPU time spent in parallel units (all threads), the caller's CPU time outside them (serial
work), its wait for workers, and the share of units the workers ran. "work" = serial + unit
CPU time: on 2 threads against 1, work above 1.0x is work the partition adds or slows down
(duplicated gathers, cache or bandwidth contention), not the machine's load.
On a pool of 2 threads or more, the calls of a loop group (docs/kernels.md) hand their last
loops to the group: their time is then that of the `mlcc_loop_group_run` line after them.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlcc.runtime import load  # noqa: E402
from mlcc.profiling import FIELDS, instrument  # noqa: E402

def describe(params: str) -> str:
    def get(key):
        m = re.search(r"\." + key + r" = (\d+)", params)
        return m.group(1) if m else "?"
    if ".kernel_h" not in params or ".in_channels" not in params:
        return ""
    return (f"{get('in_channels')}->{get('out_channels')} {get('in_h')}x{get('in_w')}->"
            f"{get('out_h')}x{get('out_w')} k{get('kernel_h')}x{get('kernel_w')} "
            f"s{get('stride_h')} g{get('groups')}")


def stats(samples: np.ndarray) -> dict[str, np.ndarray]:
    """Per-call medians (ms) over runs of the wall time and, from the pool statistics, the work:
    serial (the caller's CPU time outside units and waits), units (all threads' CPU time in
    parallel units), wait (the caller's wall time waiting for workers) and the workers' share
    of the units run."""
    s = np.asarray(samples)                                 # runs x calls x FIELDS
    serial = s[:, :, 1] - s[:, :, 2] - s[:, :, 5]
    units = s[:, :, 2] + s[:, :, 3]
    ran = s[:, :, 6] + s[:, :, 7]
    return {"wall": np.median(s[:, :, 0], axis=0) * 1e3,
            "serial": np.median(serial, axis=0) * 1e3,
            "units": np.median(units, axis=0) * 1e3,
            "work": np.median(serial + units, axis=0) * 1e3,
            "wait": np.median(s[:, :, 4], axis=0) * 1e3,
            "share": np.sum(s[:, :, 7], axis=0) / np.maximum(np.sum(ran, axis=0), 1),
            "join": np.median(s[:, :, 8], axis=0) * 1e3,
            "sleeps": np.mean(s[:, :, 9], axis=0)}



def print_per_kernel(builds, meds, n: int) -> None:
    """Per kernel function (A -> B when the builds differ): the medians of its calls summed,
    per build, slowest first, with B/A for two builds."""
    per_kernel: dict[tuple, list[float]] = {}
    for i in range(n):
        key = tuple(b[0][i][0] for b in builds)
        acc = per_kernel.setdefault(key, [0.0] * len(builds))
        for k, med in enumerate(meds):
            acc[k] += med[i]
    for key, times in sorted(per_kernel.items(), key=lambda kv: -kv[1][0]):
        cols = "  ".join(f"{t:8.3f}" for t in times)
        ratio = f"  {times[1] / times[0]:5.2f}" if len(times) == 2 and times[0] else ""
        print(f"  {' -> '.join(key):60s} {cols} ms{ratio}")

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="one folder, or two for an A/B")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--threads", default="1",
                    help="threads of each build: N, or N,M (one folder twice, or one per folder)")
    ap.add_argument("--cpu", action="store_true",
                    help="time each call by the calling thread's CPU time, not wall-clock "
                         "(1 thread on a busy machine: preempted calls do not count)")
    ap.add_argument("--feed", action="append", default=[], metavar="NAME=D0,D1,...",
                    help="the shape of an input's feed (a range build: a size in its range; "
                         "default: its largest)")
    ap.add_argument("--json", type=Path, metavar="FILE",
                    help="also write every call's median time (ms; CPU time with --cpu) per "
                         "build, with its kernel and convolution shape, to FILE (e.g. to "
                         "refit mlcc/quant/latency.py's cost table)")
    ap.add_argument("--pool-stats", action="store_true",
                    help="build with -DMLCC_POOL_STATS; print work, serial time and waits")
    args = ap.parse_args()
    try:
        shapes = {k: tuple(int(d) for d in v.split(","))
                  for k, v in (f.split("=", 1) for f in args.feed)}
    except ValueError:
        ap.error("--feed takes NAME=D0,D1,... (integers)")
    threads = [int(t) for t in args.threads.split(",")]
    if len(args.folders) > 2 or len(threads) > 2:
        ap.error("one folder, or two for an A/B; one or two thread counts")
    folders = args.folders * (2 if len(args.folders) == 1 and len(threads) == 2 else 1)
    threads = threads * (len(folders) if len(threads) == 1 else 1)
    if len(threads) != len(folders):
        ap.error("one thread count, or one per build")
    with tempfile.TemporaryDirectory() as tmp:
        builds = []
        for i, (folder, nt) in enumerate(zip(folders, threads)):
            calls, params = instrument(folder, Path(tmp) / f"m{i}", args.pool_stats)
            model = load(Path(tmp) / f"m{i}", threads=nt)
            model._ffi.cdef("double *mlcc_prof(void);")
            manifest = json.loads((folder / "manifest.json").read_text())
            rng = np.random.default_rng(0)
            # (a range build, --shape x=LO..HI: at its largest sizes unless --feed)
            feeds = {t["name"]: rng.random(shapes.get(t["name"], t.get("max_shape", t["shape"])))
                     .astype(t.get("dtype", "float32")) for t in manifest["inputs"]}
            run, _ = model.prepare(feeds)
            builds.append((calls, params, model, run, model._lib.mlcc_prof(), []))
        for r in range(args.runs + 2):                       # 2 warm-up runs
            for calls, params, model, run, prof, samples in builds:
                m = len(calls)
                for i in range(m * FIELDS):
                    prof[i] = 0.0
                run()
                if r >= 2:
                    samples.append(np.frombuffer(model._ffi.buffer(prof, m * FIELDS * 8))
                                   .reshape(m, FIELDS).copy())
        # the calls that ran (a range build's layers by size class: one of two variants)
        for k, b in enumerate(builds):
            ran = np.flatnonzero(np.array(b[5])[:, :, 0].sum(axis=0) > 0)
            builds[k] = ([b[0][i] for i in ran],) + b[1:5] + ([s[ran] for s in b[5]],)
        col = 1 if args.cpu else 0
        # each build's whole run (the calls compared one by one below are the first n)
        totals = [float(np.median(np.array(b[5])[:, :, col].sum(axis=1))) * 1e3 for b in builds]
        if args.json:           # every call of each build (the comparison below cuts them)
            args.json.write_text(json.dumps([
                {"folder": str(f), "threads": t, "cpu": args.cpu, "runs": args.runs,
                 "calls": [{"kernel": c[0], "shape": describe(b[1].get(c[1], "")),
                            "ms": float(m)} for c, m in
                           zip(b[0], np.median(np.array(b[5])[:, :, col], axis=0) * 1e3)]}
                for f, t, b in zip(folders, threads, builds)], indent=1) + "\n")
        n = min(len(b[0]) for b in builds)
        for k, b in enumerate(builds):
            builds[k] = (b[0][:n],) + b[1:5] + ([s[:n] for s in b[5]],)
        if len(builds) == 2 and [c[0] for c in builds[0][0]] != [c[0] for c in builds[1][0]]:
            print("note: the two builds call different kernels (compared call by call)")
        st = [stats(b[5]) for b in builds]
        meds = [np.median(np.array(b[5])[:, :, col], axis=0) * 1e3 for b in builds]
        calls, params = builds[0][0], builds[0][1]
        names = " / ".join(f"{f.name} on {t} thread{'s' if t > 1 else ''}"
                           for f, t in zip(folders, threads))
        if len(builds) == 1:
            print(f"{names}: total {totals[0]:.3f} ms over {n} kernel calls "
                  f"(median of {args.runs})")
        else:
            print(f"{names}: total A {totals[0]:.3f} ms, B {totals[1]:.3f} ms, B/A "
                  f"{totals[1] / totals[0]:.3f} (medians of {args.runs} alternating runs)")
        print_per_kernel(builds, meds, n)
        if args.pool_stats:
            print("work (ms, medians summed over calls): serial + units = work; wait; workers' "
                  "share of units" + ("; work B/A" if len(builds) == 2 else ""))
            for k, x in enumerate(st):
                print(f"  {'AB'[k]}: serial {x['serial'].sum():8.3f}  units {x['units'].sum():8.3f}"
                      f"  work {x['work'].sum():8.3f}  wait {x['wait'].sum():8.3f}  wall "
                      f"{x['wall'].sum():8.3f}  workers' join delay {x['join'].sum():8.3f}"
                      f"  sleeps per run {x['sleeps'].sum():6.1f}")
        print(f"slowest calls{' (of A)' if len(builds) == 2 else ''}:")
        for i in sorted(range(n), key=lambda i: -meds[0][i])[:args.top]:
            times = "  ".join(f"{med[i]:7.3f}" for med in meds)
            ratio = f" {meds[1][i] / meds[0][i]:5.2f}" if len(meds) == 2 and meds[0][i] else ""
            extra = ""
            if args.pool_stats:
                extra = " |" + " |".join(
                    f" work {x['work'][i]:6.3f} ser {x['serial'][i]:6.3f} wait {x['wait'][i]:6.3f}"
                    f" wk {x['share'][i]:4.2f} join {x['join'][i]:6.3f}" for x in st)
                if len(st) == 2 and st[0]["work"][i]:
                    extra += f" | work B/A {st[1]['work'][i] / st[0]['work'][i]:5.2f}"
            print(f"{i:4d} {times} ms{ratio}  {calls[i][0]} "
                  f"{describe(params.get(calls[i][1], ''))}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
