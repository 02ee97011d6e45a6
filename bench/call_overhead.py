"""Nanoseconds per Python call of a compiled model, with the C helper mlcc.runtime._fastcall and
without it (cffi ABI mode): the table in docs/python-api.md.

    python bench/call_overhead.py MODEL_FOLDER        # e.g. mlcc compile digits_mlp.onnx ...

Rows: prepare()'s call; the Python part alone (run_v given a NULL context returns at once);
run(). Each is the median over 15 rounds of the mean of many calls, the two paths alternating
in one process. A measuring tool like ab_models.py: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlcc.runtime import loader  # noqa: E402


def per_call_ns(call, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t) / n * 1e9


def paths(folder: str, fast) -> dict:
    """The three calls of one model loaded with or without the helper."""
    saved, loader._fastcall = loader._fastcall, fast
    try:
        model = loader.load(folder)
        feeds = {t["name"]: np.random.default_rng(0).standard_normal(t["shape"]).astype(t["dtype"])
                 for t in model.inputs}
        call, _ = model.prepare(feeds)
        null = model._ffi.NULL
        in_ptrs = model._ffi.new("void *[]", 1)
        out_ptrs = model._ffi.new("void *[]", 1)
        if fast is not None:
            python_part = fast.Call(model._address(model._run), 0, model._address(in_ptrs),
                                    model._address(out_ptrs), release_gil=False).run
        else:   # the loader's fallback: a partial of the cffi function
            python_part = functools.partial(model._run, null, in_ptrs, out_ptrs)
        return {"prepare()'s call": (call, 20000), "the Python part alone": (python_part, 20000),
                "run()": (lambda: model.run(feeds), 2000)}
    finally:
        loader._fastcall = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    folder = ap.parse_args().folder
    if loader._fastcall is None:
        sys.exit("mlcc.runtime._fastcall is not built (pip install needs a C compiler and "
                 "the Python headers)")
    runs = {"with the helper": paths(folder, loader._fastcall),
            "without it (cffi ABI)": paths(folder, None)}
    rows = list(next(iter(runs.values())))
    times = {(r, p): [] for r in rows for p in runs}
    for _ in range(15):
        for row in rows:
            for path, calls in runs.items():
                fn, n = calls[row]
                times[row, path].append(per_call_ns(fn, n))
    print("| per call | " + " | ".join(runs) + " |\n|---|" + "---:|" * len(runs))
    for row in rows:
        print(f"| {row} | " + " | ".join(f"{statistics.median(times[row, p]):.0f} ns"
                                         for p in runs) + " |")


if __name__ == "__main__":
    main()
