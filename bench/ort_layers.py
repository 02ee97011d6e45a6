"""onnxruntime's time per node of a model (its profiler, `enable_profiling`), to set beside
mlcc's per-kernel times (bench/profile_layers.py) when looking for the layers where one engine
is faster: the medians over the last two thirds of the runs, slowest first, with each node's
op type and shapes. A measuring tool: nothing here asserts a time.

    python bench/ort_layers.py MODEL.onnx [--threads 2] [--shape 1,3,224,224] [--runs 300]
"""
from __future__ import annotations

import argparse
import collections
import json
import os

import numpy as np
import onnxruntime as ort


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", help="the first input's shape (default: its dims, 1 for names)")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.enable_profiling = True
    session = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    shape = ([int(v) for v in args.shape.split(",")] if args.shape else
             [d if isinstance(d, int) else 1 for d in first.shape])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for _ in range(args.runs):
        session.run(None, {first.name: x})
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    times, info, runs = collections.defaultdict(list), {}, []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            times[name].append(e["dur"])
            info[name] = (e["args"].get("op_name"), e["args"].get("input_type_shape"))
        elif e.get("cat") == "Session" and e["name"] == "model_run":
            runs.append(e["dur"])
    rows = sorted(((float(np.median(v[len(v) // 3:])), k) for k, v in times.items()),
                  reverse=True)
    print(f"model_run median {np.median(runs[len(runs) // 3:]) / 1000:.3f} ms "
          f"({args.threads} thread(s), profiling on); nodes sum "
          f"{sum(r[0] for r in rows) / 1000:.3f} ms")
    for t, name in rows[:args.top]:
        op, shapes = info[name]
        print(f"{t / 1000:8.3f} ms  {name} ({op}) {str(shapes)[:100]}")


if __name__ == "__main__":
    main()
