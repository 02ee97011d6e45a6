"""The W8A16 (or int8) convolution rates of mlcc/quant/latency.py's cost table, fitted on
measured per-call times.

    python bench/profile_layers.py FLOAT_DIR W8A16_DIR --cpu --runs 15 --json calls.json
    python bench/fit_w16_rates.py calls.json [--table x86_64-avx512]
    python bench/profile_layers.py FLOAT_DIR INT8_DIR --cpu --runs 15 --json calls.json
    python bench/fit_w16_rates.py calls.json --kind int8 [--only-dw]

FLOAT_DIR is a float build of a model and W8A16_DIR the same model with its convolutions at
W8A16 (`mlcc compile ... --quantize int8 --pure-int8 --w8a16 op:Conv`), or INT8_DIR its
all-integer build (`--pure-int8`), both for the target of the table, profiled in one process
with their runs alternating (profile_layers.py). The W8A16 convolutions' times
(mlcc_s16_conv2d; with --kind int8 the integer ones, mlcc_u8_conv2d*) are fitted by
non-negative least squares, each call weighted by 1 / sqrt of its time as the table's other
rates were, as the table's fixed cost per call plus a rate per multiply-accumulate (dense;
depthwise and grouped) and per output. The machine's speed during the run is divided out by
the float build's convolutions in the same run: their time as the table estimates it, over
their measured time. Prints the three rates to copy into the table (w16_mac, w16_dw_mac,
w16_out, or int8_mac, int8_dw_mac, int8_out) and the quantized / float time of each
convolution shape. --only-dw fits the depthwise rate alone, the table's rate per output of
that kind kept (after a change to the depthwise kernel only). This is not a test: nothing
here asserts a number.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlcc.quant.latency import TABLES  # noqa: E402

# --kind: the kernels' name prefix in the profile and what they are
KINDS = {"w16": ("mlcc_s16_conv", "W8A16"), "int8": ("mlcc_u8_conv2d", "int8")}
SHAPE = re.compile(r"(\d+)->(\d+) (\d+)x(\d+)->(\d+)x(\d+) k(\d+)x(\d+) s(\d+) g(\d+)")


def work(shape: str) -> tuple[int, int, bool] | None:
    """(multiply-accumulates, outputs, grouped) of a convolution from its profile shape."""
    m = SHAPE.fullmatch(shape)
    if m is None:
        return None
    cin, cout, _, _, oh, ow, kh, kw, _, g = (int(v) for v in m.groups())
    outs = cout * oh * ow
    return outs * cin // g * kh * kw, outs, g > 1


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients, by trying every subset of the columns
    (three here)."""
    best, rates = np.inf, np.zeros(a.shape[1])
    for mask in range(1, 1 << a.shape[1]):
        cols = [j for j in range(a.shape[1]) if mask >> j & 1]
        x, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        err = float(np.sum((a[:, cols] @ x - b) ** 2))
        if np.all(x >= 0) and err < best:
            best, rates = err, np.zeros(a.shape[1])
            rates[cols] = x
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calls", type=Path, help="profile_layers.py --json output (two builds)")
    ap.add_argument("--table", default="x86_64-avx512", choices=sorted(TABLES))
    ap.add_argument("--kind", default="w16", choices=sorted(KINDS),
                    help="the rates to fit: W8A16 (mlcc_s16_conv2d) or int8 (mlcc_u8_conv2d*)")
    ap.add_argument("--only-dw", action="store_true",
                    help="fit the depthwise rate alone, the table's per-output rate kept")
    a = ap.parse_args()
    t = TABLES[a.table]
    builds = json.loads(a.calls.read_text())
    convs = {}
    for b in builds:
        for c in b["calls"]:
            w = work(c["shape"])
            if w is not None and c["ms"] > 0:
                convs.setdefault(c["kernel"], []).append((c["ms"] * 1e6, *w, c["shape"]))
    flt = [x for k, v in convs.items() if k.startswith("mlcc_f32_conv") for x in v]
    prefix, label = KINDS[a.kind]
    w16 = [x for k, v in convs.items() if k.startswith(prefix) for x in v]
    if not flt or not w16:
        raise SystemExit(f"need float convolutions (mlcc_f32_conv*) and {label} ones "
                         f"({prefix}*) in the profile")
    est = sum(t.call + m * (t.float_dw_mac if grp else t.float_mac) + t.float_out * o
              for _, m, o, grp, _ in flt)
    speed = est / sum(ns for ns, *_ in flt)
    print(f"the float convolutions: {len(flt)} calls, the table's estimate / measured = "
          f"{speed:.3f} (the machine's speed in this run against the table's)")
    k = a.kind
    if a.only_dw:
        out_rate = getattr(t, k + "_out")
        dw = [c for c in w16 if c[3]]
        y = np.array([ns * speed - t.call - out_rate * o for ns, _, o, *_ in dw])
        x = np.array([[m] for _, m, *_ in dw], float)
        wt = 1 / np.sqrt(np.array([ns for ns, *_ in dw]))
        (rate,) = nnls(x * wt[:, None], y * wt)
        print(f"{len(dw)} {label} depthwise convolutions: {k}_dw_mac={rate:.4f} ({k}_out="
              f"{out_rate} kept; the table's now: {k}_dw_mac={getattr(t, k + '_dw_mac')}, "
              f"float_dw_mac={t.float_dw_mac})")
        return 0
    y = np.array([ns * speed - t.call for ns, *_ in w16])
    x = np.array([[0 if grp else m, m if grp else 0, o] for _, m, o, grp, _ in w16], float)
    wt = 1 / np.sqrt(np.array([ns for ns, *_ in w16]))
    rates = nnls(x * wt[:, None], y * wt)
    print(f"{len(w16)} {label} convolutions: {k}_mac={rates[0]:.4f}, {k}_dw_mac={rates[1]:.4f}, "
          f"{k}_out={rates[2]:.4f} (ns; the table's now: {k}_mac={getattr(t, k + '_mac')}, "
          f"{k}_dw_mac={getattr(t, k + '_dw_mac')}, {k}_out={getattr(t, k + '_out')}; float: "
          f"float_mac={t.float_mac}, float_dw_mac={t.float_dw_mac}, float_out={t.float_out})")
    by_shape: dict[str, list[list[float]]] = {}
    for k, calls in ((0, flt), (1, w16)):
        for ns, *_, shape in calls:
            by_shape.setdefault(shape, [[], []])[k].append(ns)
    print(f"{label} / float time per shape (medians of the calls of each shape):")
    for shape, (f, s) in sorted(by_shape.items()):
        if f and s:
            print(f"  {shape:<40} {np.median(s) / np.median(f):5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
