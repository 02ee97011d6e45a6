"""Post-training quantization: calibration data (calib.py), streaming observers and
calibrators (observers.py), the integer scheme and numpy models of its arithmetic (scheme.py),
and the float -> integer graph rewrite (rewrite.py).

How a model is calibrated: the caller (mlcc.api) runs the float model once per sample with
every run-time value as an output, one sample at a time, and hands each sample's tensors to
`calibrate`'s observers; nothing is kept per sample.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np

from ..ir import Graph
from .calib import CalibrationSet
from .observers import CALIBRATORS, DEFAULT_CALIBRATOR, Calibrator, Range
from .rewrite import (QuantOptions, QuantResult, needed_ranges, quantize_graph,
                      conv_transpose_as_conv, split_table_activations)
from .scheme import QParams, activation_qparams
from . import recurrent as _recurrent  # noqa: F401  (registers the quantizer's "recurrent" rule)

RunFn = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def observed_values(g: Graph) -> list[str]:
    """The float run-time values whose ranges the rewrite may need (inputs and node outputs)."""
    names = [n for n in g.inputs if g.values[n].dtype == "float32"]
    for node in g.nodes:
        for o in node.outputs:
            if o and o in g.values and g.values[o].dtype == "float32" and o not in names:
                names.append(o)
    return names


def calibrate(data: Iterable[dict[str, np.ndarray]], run: RunFn, names: list[str], *,
              method: str = DEFAULT_CALIBRATOR, percentile: float = 99.99,
              progress: Callable[[int, int, int], None] | None = None,
              channels: frozenset = frozenset(), ahead: bool = True) -> dict[str, Range]:
    """Ranges of `names` over the calibration samples. `run(sample)` returns the float values
    (graph inputs included or not: the sample's own arrays are observed too). The values in
    `channels` also get per-channel (last axis) minima and maxima. `run` is called once per
    sample and pass, in order, one call at a time; with `ahead`, on a thread of its own, the
    run of the next sample overlapping the observation of this one (a compiled model's run
    releases the GIL; two samples' values are then in memory), which sees the samples in
    the same order as without it."""
    cal = Calibrator(method, percentile, channels)

    def observe(p: int, k: int, sample, values) -> None:
        cal.observe(p, {n: (values[n] if n in values else sample[n]) for n in names
                        if n in values or n in sample})
        if progress is not None:
            progress(p, cal.passes, k)
    with ThreadPoolExecutor(max_workers=1) as worker:
        for p in range(cal.passes):
            k, last = 0, None
            for sample in data:
                if last is not None and not ahead:     # one sample's values at a time
                    k += 1
                    observe(p, k, last[0], last[1].result())
                    last = None
                running = (sample, worker.submit(run, sample))
                if last is not None:
                    k += 1
                    observe(p, k, last[0], last[1].result())
                last = running
            if last is not None:
                observe(p, k + 1, last[0], last[1].result())
    return cal.ranges()


__all__ = ["CALIBRATORS", "DEFAULT_CALIBRATOR", "CalibrationSet", "Calibrator", "QParams", "QuantOptions",
           "QuantResult", "Range", "activation_qparams", "calibrate", "needed_ranges",
           "observed_values",
           "quantize_graph", "split_table_activations", "conv_transpose_as_conv"]
