"""One engine timed alone in its own process: the child of a multi-thread `mlcc bench`
(mlcc/benchmark.py, measure_in_processes). Two thread pools in one process disturb each other,
so with several threads each engine runs here, one process per round, the rounds alternating.

    python -m mlcc.benchmark_worker ENGINE --model MODEL.onnx --folder OUT_DIR
        --feeds FEEDS.npz --threads N --budget SECONDS [--runs R] [--settle SECONDS]
        [--outputs OUT.npz]

ENGINE is "mlcc" (the compiled library of OUT_DIR on a pool of N threads) or "onnxruntime"
(MODEL.onnx with N intra-op threads). The engine is loaded, run once on the feeds (its outputs
written to OUT.npz if given), warmed up and timed as in one process (benchmark.measure, with
`budget` as the time budget). The result is one JSON line on stdout: engine, pid, per-sample
latencies (seconds), calls per sample, the monotonic clock (system-wide on Linux) at the
start and end of the timed part, and `helper_cpu`: the CPU time the process's busiest other
thread (the engine's worker) had during the timed part over the calling thread's (Linux; null
elsewhere or with one thread). Both engines' workers spin between loops, so it reads about 1
when the worker had a CPU of its own; near 0 when another job held the second CPU and the
worker waited behind the caller on its CPU: that process timed one thread, whatever it was
given (docs/performance.md, "Small layers on two threads"). Any failure exits non-zero with
the reason on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from .benchmark import ENGINES, load_arrays, measure, onnxruntime_runner, save_arrays
from .errors import MlccError
from .runtime import load


def _engine(engine: str, model: str, folder: str, feeds: dict, threads: int):
    """(call, outputs) of the engine after one checked run."""
    if engine == "mlcc":
        compiled = load(folder, threads=threads)
        call, outs = compiled.prepare(feeds)
        status = call()
        if status != 0:
            raise MlccError(f"mlcc run failed: {compiled.status_string(status)}")
        return call, outs
    call, outs = onnxruntime_runner(model, feeds, threads)
    call()
    return call, outs


def thread_cpu_ns() -> dict[int, int] | None:
    """Nanoseconds on a CPU of each thread of this process (Linux's schedstat), or None."""
    try:
        out = {}
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        return out
    except (OSError, ValueError, IndexError):
        return None


def helper_cpu(before: dict[int, int] | None, after: dict[int, int] | None,
               caller: int) -> float | None:
    """The busiest other thread's CPU time between the two readings over the caller's."""
    if not before or not after or caller not in after:
        return None
    own = after[caller] - before.get(caller, 0)
    others = [after[t] - before.get(t, 0) for t in after if t != caller]
    return max(others) / own if others and own > 0 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlcc.benchmark_worker",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("--model", required=True, help="the ONNX file (onnxruntime)")
    ap.add_argument("--folder", required=True, help="the compiled output folder (mlcc)")
    ap.add_argument("--feeds", required=True, help=".npz of the inputs, keyed by input name")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=float, required=True, help="timed seconds")
    ap.add_argument("--runs", type=int, default=None, help="samples (default: fill budget)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="untimed calls before each sample, seconds")
    ap.add_argument("--outputs", default=None, help="write the outputs to this .npz")
    args = ap.parse_args(argv)
    feeds = load_arrays(args.feeds)
    call, outs = _engine(args.engine, args.model, args.folder, feeds, args.threads)
    if args.outputs:
        save_arrays(args.outputs, outs)
    cpu_before = thread_cpu_ns()
    start = time.monotonic()
    samples = measure({args.engine: call}, args.runs, settle_s=args.settle,
                      budget_s=args.budget)
    end = time.monotonic()
    share = (helper_cpu(cpu_before, thread_cpu_ns(), threading.get_native_id())
             if args.threads > 1 else None)
    print(json.dumps({"engine": args.engine, "pid": os.getpid(), "threads": args.threads,
                      "latencies": samples[args.engine], "calls": int(samples["_calls"][0]),
                      "start": start, "end": end, "helper_cpu": share}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
