"""Whole-model A/B of two compiled builds, called alternately in one process.

    python bench/ab_models.py OLD_DIR NEW_DIR [--threads N] [--rounds 200]
    python bench/ab_models.py --model M.onnx --without-pass fuse_residual_add \
        [--target x86-native] [--shape NAME=D1,D2,...] [--threads N] [--rounds 200]

The first form loads two `mlcc compile` output folders of the same model (e.g. compiled by two
versions of mlcc). The second compiles the model twice with this checkout, once with the full
pass pipeline and once without the named passes, to measure what a pass buys. Each round calls
both builds once on the same random inputs, in a random order (a build that always runs second
inherits the first one's caches and the workers' spin), and records wall-clock time and the
calling thread's CPU time (with 1 thread, CPU time ignores the time the process was not
scheduled, so it scatters less on a shared machine). Prints medians, the median of the
per-round ratios NEW/OLD, and the largest difference between the two builds' outputs.
A measuring tool like profile_layers.py: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlcc import api, passes  # noqa: E402
from mlcc.runtime import load  # noqa: E402


def random_feeds(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs in the range real ones have: floats ~ N(0, 1), integers 0 or 1."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in model.inputs:
        dtype = np.dtype(t["dtype"])
        if dtype.kind == "f":
            feeds[t["name"]] = rng.standard_normal(t["shape"]).astype(dtype)
        else:
            feeds[t["name"]] = rng.integers(0, 2, t["shape"]).astype(dtype)
    return feeds


def compile_pair(model: str, without: list[str], target: str, shapes, into: Path
                 ) -> tuple[Path, Path]:
    """The model compiled with the whole pipeline and without the named passes."""
    names = [p.__name__ for p in passes.PIPELINE]
    unknown = sorted(set(without) - set(names))
    if unknown:
        sys.exit(f"no pass named {', '.join(unknown)} (the pipeline: {', '.join(names)})")
    full, reduced = into / "with", into / "without"
    api.compile(model, full, target=target, shapes=shapes)
    kept = [p for p in passes.PIPELINE if p.__name__ not in without]
    saved = passes.PIPELINE[:]
    passes.PIPELINE[:] = kept      # run_pipeline reads the list when called
    try:
        api.compile(model, reduced, target=target, shapes=shapes)
    finally:
        passes.PIPELINE[:] = saved
    return reduced, full


def ab(old_dir: Path, new_dir: Path, threads: int, rounds: int, seed: int) -> None:
    old, new = load(old_dir, threads=threads), load(new_dir, threads=threads)
    feeds = random_feeds(old)
    calls = {}
    for label, m in (("old", old), ("new", new)):
        call, outs = m.prepare(feeds)
        calls[label] = (call, outs)
        for _ in range(3):                       # warm-up: page in weights, wake the pool
            call()
    diff = max(float(np.max(np.abs(calls["old"][1][k].astype(np.float64) -
                                   calls["new"][1][k].astype(np.float64))))
               for k in calls["old"][1])
    wall = {"old": [], "new": []}
    cpu = {"old": [], "new": []}
    order = random.Random(seed)
    for _ in range(rounds):
        labels = ["old", "new"]
        order.shuffle(labels)
        for label in labels:
            call = calls[label][0]
            w, c = time.perf_counter(), time.thread_time()
            call()
            cpu[label].append(time.thread_time() - c)
            wall[label].append(time.perf_counter() - w)

    def row(name: str, times: dict) -> str:
        ratios = [n / o for o, n in zip(times["old"], times["new"]) if o > 0]
        return (f"{name:>16}: old {statistics.median(times['old']) * 1e3:.3f} ms, "
                f"new {statistics.median(times['new']) * 1e3:.3f} ms, new/old of medians "
                f"{statistics.median(times['new']) / statistics.median(times['old']):.3f}, "
                f"median of per-round ratios {statistics.median(ratios):.3f}")

    print(f"old {old_dir}\nnew {new_dir}\n{rounds} rounds, {threads} thread(s), "
          f"max |old - new| over the outputs {diff:.3g}")
    print(row("wall clock", wall))
    print(row("caller CPU time", cpu))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, help="OLD_DIR NEW_DIR")
    ap.add_argument("--model", help="an ONNX model to compile with and without --without-pass")
    ap.add_argument("--without-pass", action="append", default=[],
                    help="a pass of mlcc/passes PIPELINE to leave out (repeatable)")
    ap.add_argument("--target", default="x86-native")
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.model:
        if a.folders or not a.without_pass:
            ap.error("--model takes --without-pass and no folders")
        with tempfile.TemporaryDirectory(prefix="mlcc-ab-") as tmp:
            old_dir, new_dir = compile_pair(a.model, a.without_pass, a.target,
                                            api.parse_shapes(a.shape), Path(tmp))
            print(f"old = without {', '.join(a.without_pass)}, new = the full pipeline")
            ab(old_dir, new_dir, a.threads, a.rounds, a.seed)
    elif len(a.folders) == 2:
        ab(a.folders[0], a.folders[1], a.threads, a.rounds, a.seed)
    else:
        ap.error("give OLD_DIR NEW_DIR, or --model M.onnx --without-pass NAME")


if __name__ == "__main__":
    main()
