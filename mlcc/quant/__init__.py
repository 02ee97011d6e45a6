"""Post-training quantization: calibration data (calib.py), streaming observers and
calibrators (observers.py), the integer scheme and numpy models of its arithmetic (scheme.py),
and the float -> integer graph rewrite (rewrite.py).

How a model is calibrated: the caller (mlcc.api) runs the float model once per sample with
every run-time value as an output, one sample at a time, and hands each sample's tensors to
`calibrate`'s observers; nothing is kept per sample.
"""
from __future__ import annotations

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
              channels: frozenset = frozenset()) -> dict[str, Range]:
    """Ranges of `names` over the calibration samples. `run(sample)` returns the float values
    (graph inputs included or not: the sample's own arrays are observed too). The values in
    `channels` also get per-channel (last axis) minima and maxima."""
    cal = Calibrator(method, percentile, channels)
    for p in range(cal.passes):
        k = 0
        for sample in data:
            values = run(sample)
            cal.observe(p, {n: (values[n] if n in values else sample[n]) for n in names
                            if n in values or n in sample})
            k += 1
            if progress is not None:
                progress(p, cal.passes, k)
    return cal.ranges()


__all__ = ["CALIBRATORS", "DEFAULT_CALIBRATOR", "CalibrationSet", "Calibrator", "QParams", "QuantOptions",
           "QuantResult", "Range", "activation_qparams", "calibrate", "needed_ranges",
           "observed_values",
           "quantize_graph", "split_table_activations", "conv_transpose_as_conv"]
