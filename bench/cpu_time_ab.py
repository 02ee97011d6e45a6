"""CPU time per call of mlcc against onnxruntime on 1 thread, for the models of
bench_models.py, alternated in rounds: the measure docs/recurrent.md uses on a loaded machine.

    python bench/cpu_time_ab.py vad_stream bigru_2x256 bilstm_2x256 crnn [--rounds 7]

Each round times CALLS calls of one engine with time.thread_time() (the calling thread's CPU
time: both run on it, mlcc's prepare() call and onnxruntime's session.run with one intra-op
thread), the engines alternating which goes first; prints the median round and the range.
Preemption by other jobs does not count in CPU time (their cache pollution still does). This
is not a test: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_models as bm  # noqa: E402

import mlcc  # noqa: E402
from mlcc.api import random_inputs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help=f"models: {', '.join(bm.MODELS)}")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=None,
                    help="calls per round (default: 20, 2000 for models under 0.1 ms)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in bm.MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}")
    tmp = Path(tempfile.mkdtemp(prefix="mlcc-cpu-ab-"))
    for name in args.names:
        path, shapes = bm.MODELS[name](tmp)
        bind = bm.BIND.get(name)
        res = mlcc.compile(path, tmp / name, target="x86-native", shapes=shapes, bind=bind)
        feeds = random_inputs(res.graph, 0)
        call, _ = mlcc.load(tmp / name).prepare(feeds)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        ort_feeds = {**feeds, **mlcc.api.bound_feeds(path, shapes, bind)}
        engines = [call, lambda: sess.run(None, ort_feeds)]
        for fn in engines * 3:      # warm-up
            fn()
        t = time.perf_counter()
        for fn in engines:
            fn()
        calls = args.calls or (2000 if time.perf_counter() - t < 2e-4 else 20)
        times: list[list[float]] = [[], []]
        for r in range(args.rounds):
            for e in ((0, 1) if r % 2 == 0 else (1, 0)):
                fn = engines[e]
                t0 = time.thread_time()
                for _ in range(calls):
                    fn()
                times[e].append((time.thread_time() - t0) / calls * 1e3)
        (a, b) = (np.median(t) for t in times)
        print(f"{name}: mlcc {a:.4g} ms ({min(times[0]):.4g}-{max(times[0]):.4g}), "
              f"onnxruntime {b:.4g} ms ({min(times[1]):.4g}-{max(times[1]):.4g}) CPU time per "
              f"call, mlcc/ort {a / b:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
