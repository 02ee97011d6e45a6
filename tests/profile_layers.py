"""Per-kernel-call times of a compiled model, alone or against another build, interleaved.

    python tests/profile_layers.py OUT_DIR [--runs 21] [--top 25]
    python tests/profile_layers.py OLD_DIR NEW_DIR [--runs 21]    # A/B, calls alternating

OUT_DIR is an `mlcc compile` output folder for this machine. Its generated model.c is copied
into a temporary folder with a timer around every kernel call (CLOCK_MONOTONIC, summed into
a static array: a measuring build only, never shipped), rebuilt with the folder's Makefile and
loaded with mlcc.runtime; each run resets and reads the timers. Prints the median time per
kernel (summed over calls) and the slowest calls with the convolution shapes from the params.
With two folders of the same model (e.g. compiled by two versions of mlcc), both are loaded
into one process and run alternately, so machine load affects both alike: compare the ratios.
This is a measuring tool, not a test: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlcc.runtime.loader import load  # noqa: E402

CALL = re.compile(r"^    (mlcc_[a-z0-9_]+)\((?:&(p_\w+))?")
TIMER = """#include <time.h>
static double mlcc_prof_t[4096];
static double mlcc_prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
__attribute__((visibility("default"))) double *mlcc_prof(void) { return mlcc_prof_t; }
"""


def instrument(folder: Path, into: Path) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Copies folder to into with every kernel call of model.c timed; rebuilds it."""
    shutil.copytree(folder, into)
    calls, lines = [], []
    source = (into / "model.c").read_text()
    for line in source.split("\n"):
        m = CALL.match(line)
        if m and line.rstrip().endswith(";") and len(calls) < 4096:
            lines += ["    { double mlcc_prof_t0 = mlcc_prof_now();", line,
                      f"    mlcc_prof_t[{len(calls)}] += mlcc_prof_now() - mlcc_prof_t0; }}"]
            calls.append((m.group(1), m.group(2) or ""))
        else:
            lines.append(line)
    text = "\n".join(lines).replace('#include "model.h"\n', '#include "model.h"\n' + TIMER, 1)
    (into / "model.c").write_text(text)
    subprocess.run(["make", "-s", "-B", "-C", str(into)], check=True)
    params = dict(re.findall(r"static const \w+ (p_\w+) = \{(.*?)\n\};", text, re.S))
    return calls, params


def describe(params: str) -> str:
    def get(key):
        m = re.search(r"\." + key + r" = (\d+)", params)
        return m.group(1) if m else "?"
    if ".kernel_h" not in params or ".in_channels" not in params:
        return ""
    return (f"{get('in_channels')}->{get('out_channels')} {get('in_h')}x{get('in_w')}->"
            f"{get('out_h')}x{get('out_w')} k{get('kernel_h')}x{get('kernel_w')} "
            f"s{get('stride_h')} g{get('groups')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="one folder, or two for an A/B")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if len(args.folders) > 2:
        ap.error("one folder, or two for an A/B")
    with tempfile.TemporaryDirectory() as tmp:
        builds = []
        for i, folder in enumerate(args.folders):
            calls, params = instrument(folder, Path(tmp) / f"m{i}")
            model = load(Path(tmp) / f"m{i}")
            model._ffi.cdef("double *mlcc_prof(void);")
            manifest = json.loads((folder / "manifest.json").read_text())
            rng = np.random.default_rng(0)
            feeds = {t["name"]: rng.random(t["shape"]).astype(t.get("dtype", "float32"))
                     for t in manifest["inputs"]}
            run, _ = model.prepare(feeds)
            builds.append((calls, params, model, run, model._lib.mlcc_prof(), []))
        n = min(len(b[0]) for b in builds)
        if len(builds) == 2 and [c[0] for c in builds[0][0][:n]] != [c[0] for c in builds[1][0][:n]]:
            print("note: the two builds call different kernels (compared call by call)")
        for r in range(args.runs + 2):                       # 2 warm-up runs
            for calls, params, model, run, prof, samples in builds:
                for i in range(n):
                    prof[i] = 0.0
                run()
                if r >= 2:
                    samples.append([prof[i] for i in range(n)])
        meds = [np.median(np.array(b[5]), axis=0) * 1e3 for b in builds]
        totals = [float(np.median(np.array(b[5]).sum(axis=1))) * 1e3 for b in builds]
        calls, params = builds[0][0], builds[0][1]
        if len(builds) == 1:
            print(f"total {totals[0]:.3f} ms over {n} kernel calls (median of {args.runs})")
        else:
            print(f"total A {totals[0]:.3f} ms, B {totals[1]:.3f} ms, B/A "
                  f"{totals[1] / totals[0]:.3f} (medians of {args.runs} alternating runs)")
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
        print(f"slowest calls{' (of A)' if len(builds) == 2 else ''}:")
        for i in sorted(range(n), key=lambda i: -meds[0][i])[:args.top]:
            times = "  ".join(f"{med[i]:7.3f}" for med in meds)
            ratio = f" {meds[1][i] / meds[0][i]:5.2f}" if len(meds) == 2 and meds[0][i] else ""
            print(f"{i:4d} {times} ms{ratio}  {calls[i][0]} "
                  f"{describe(params.get(calls[i][1], ''))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
