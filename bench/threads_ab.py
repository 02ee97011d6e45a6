"""Who slows whom on 2 threads: mlcc and onnxruntime timed right after each other, in one process.

    python bench/threads_ab.py OUT_DIR MODEL.onnx [--rounds 100]

OUT_DIR is an `mlcc compile` output folder of MODEL.onnx for this machine. Each round runs
every case once, in a random order; a case is a pair (first, then timed): mlcc on 1 or 2
threads and onnxruntime on 2 intra-op threads, whose worker by default keeps spinning for
tens of milliseconds after a run returns (about 30 ms of CPU time after MobileNetV2 here) and
with "session.force_spinning_stop" sleeps at once. `mlcc bench` interleaves the two engines'
samples, so whether mlcc on 2 threads is slowed by the spinning worker of the onnxruntime run
before it (and onnxruntime by a sleeping one) decides how fair the 2-thread table is. Run it
on a quiet machine and without `nice`: on a shared one a niced process's worker rarely gets
the second CPU at all (docs/performance-log.md, "Threads"). A measuring tool, not a test.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlcc.benchmark import onnxruntime_runner  # noqa: E402
from mlcc.runtime import load  # noqa: E402


def ort_runner(model: str, feeds: dict, stop_spinning: bool):
    """onnxruntime_runner's session, with or without force_spinning_stop."""
    import onnxruntime as ort
    if not stop_spinning:
        return onnxruntime_runner(model, feeds, 2)
    original_init = ort.InferenceSession.__init__

    def init(self, path, opts=None, *a, **kw):
        opts.add_session_config_entry("session.force_spinning_stop", "1")
        original_init(self, path, opts, *a, **kw)
    ort.InferenceSession.__init__ = init
    try:
        return onnxruntime_runner(model, feeds, 2)
    finally:
        ort.InferenceSession.__init__ = original_init


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    manifest = json.loads((args.folder / "manifest.json").read_text())
    rng = np.random.default_rng(0)
    feeds = {t["name"]: rng.random(t["shape"]).astype(t.get("dtype", "float32"))
             for t in manifest["inputs"]}
    keep = []                                  # models, sessions and their output buffers
    engines = {}
    for threads in (1, 2):
        model = load(args.folder, threads=threads)
        call, outs = model.prepare(feeds)
        keep.append((model, outs))
        engines[f"mlcc {threads}T"] = call
    for stop in (False, True):
        call, outs = ort_runner(args.model, feeds, stop)
        keep.append(outs)
        engines["ort 2T " + ("spin stopped" if stop else "spinning")] = call
    cases = [(a, b) for b in engines for a in engines
             if a == b or a.startswith("mlcc") != b.startswith("mlcc")]
    for _ in range(5):
        for call in engines.values():
            call()
    times: dict[tuple, list[float]] = {c: [] for c in cases}
    for _ in range(args.rounds):
        random.shuffle(cases)
        for first, timed in cases:
            engines[first]()
            t0 = time.perf_counter()
            engines[timed]()
            times[(first, timed)].append(time.perf_counter() - t0)
    for (first, timed), t in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{timed:22s} after {first:22s} median {np.median(t) * 1e3:8.3f} ms  "
              f"p10 {np.percentile(t, 10) * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
