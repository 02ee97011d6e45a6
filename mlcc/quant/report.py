"""Accuracy of a quantized program against float: streaming error statistics and the markdown
report (`--report`).

Per quantized tensor, over the samples given: the SQNR (10 log10 of signal energy over error
energy, in dB) and the cosine similarity of the int8 program's value (dequantized) against the
float program's, and the SQNR of the float tensor quantized on its own with its parameters
(the error this tensor's own quantization adds, whatever came before it: the column the report
is sorted by, most damaging first), the calibrated range and the share of float values that
fall outside the representable range (clipped).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .scheme import QParams, dequantize_linear, quantize_linear


class ErrorStats:
    """Streaming sums for SQNR and cosine; memory independent of the number of samples."""

    def __init__(self):
        self.signal = 0.0
        self.noise = 0.0
        self.dot = 0.0
        self.norm_a = 0.0
        self.norm_b = 0.0
        self.count = 0
        self.clipped = 0
        self.own_noise = 0.0
        self.argmax_same = 0
        self.argmax_rows = 0

    def update(self, ref: np.ndarray, got: np.ndarray, qp: QParams | None = None) -> None:
        r = ref.astype(np.float64).reshape(-1)
        q = got.astype(np.float64).reshape(-1)
        self.signal += float(r @ r)
        self.noise += float((r - q) @ (r - q))
        self.dot += float(r @ q)
        self.norm_a += float(r @ r)
        self.norm_b += float(q @ q)
        self.count += r.size
        if qp is not None:
            lo = qp.scale * (qp.qmin - qp.zero_point)
            hi = qp.scale * (qp.qmax - qp.zero_point)
            self.clipped += int(np.count_nonzero((r < lo) | (r > hi)))
            own = dequantize_linear(quantize_linear(ref, qp), qp).astype(np.float64).reshape(-1)
            self.own_noise += float((r - own) @ (r - own))
        if ref.ndim >= 2 and ref.shape[-1] > 1:
            a = ref.reshape(-1, ref.shape[-1]).argmax(axis=1)
            b = got.reshape(-1, got.shape[-1]).argmax(axis=1)
            self.argmax_same += int(np.sum(a == b))
            self.argmax_rows += a.size

    @staticmethod
    def _db(signal: float, noise: float) -> float:
        if noise == 0:
            return math.inf
        if signal == 0:
            return -math.inf
        return 10.0 * math.log10(signal / noise)

    @property
    def sqnr_db(self) -> float:
        return self._db(self.signal, self.noise)

    @property
    def own_sqnr_db(self) -> float:
        return self._db(self.signal, self.own_noise)

    @property
    def cosine(self) -> float:
        den = math.sqrt(self.norm_a * self.norm_b)
        return self.dot / den if den else 1.0

    @property
    def clipped_share(self) -> float:
        return self.clipped / self.count if self.count else 0.0

    @property
    def argmax_agreement(self) -> float | None:
        return self.argmax_same / self.argmax_rows if self.argmax_rows else None


@dataclass
class LayerRow:
    value: str
    node: str
    op: str
    stats: ErrorStats
    lo: float
    hi: float
    qp: QParams | None


def range_text(r: LayerRow) -> str:
    """The calibrated range; a value without one of its own (an average pool's output, which
    keeps its input's scale; a float output) shows what its parameters represent, marked."""
    if not (math.isnan(r.lo) or math.isnan(r.hi)):
        return f"[{r.lo:.4g}, {r.hi:.4g}]"
    if r.qp is None:
        return "float"
    lo = (r.qp.qmin - r.qp.zero_point) * r.qp.scale
    hi = (r.qp.qmax - r.qp.zero_point) * r.qp.scale
    return f"[{lo:.4g}, {hi:.4g}] (input's)"


def markdown(title: str, header: list[str], rows: list[LayerRow], float_layers: list[str],
             outputs: list[tuple[str, ErrorStats]], min_sqnr: dict | None = None) -> str:
    def num(x: float, fmt: str = ".1f") -> str:
        return "inf" if x == math.inf else ("-inf" if x == -math.inf else format(x, fmt))

    lines = [f"# {title}", ""] + header + ["", "## Outputs", "",
                                           "| output | SQNR (dB) | cosine | argmax agreement |",
                                           "|---|---:|---:|---:|"]
    for name, st in outputs:
        agree = "" if st.argmax_agreement is None else f"{100 * st.argmax_agreement:.1f}%"
        lines.append(f"| {name} | {num(st.sqnr_db)} | {st.cosine:.5f} | {agree} |")
    lines += ["", "## Layers, most damaging first", "",
              "Sorted by the SQNR of the tensor quantized on its own (the error its own "
              "quantization adds); `SQNR in program` is the accumulated error of the int8 "
              "program at that tensor.", "",
              "| tensor | node | op | own SQNR (dB) | SQNR in program (dB) | cosine | range | "
              "scale / zero point | clipped |", "|---|---|---|---:|---:|---:|---|---|---:|"]
    for r in sorted(rows, key=lambda r: (r.stats.own_sqnr_db if r.qp else math.inf,
                                         r.stats.sqnr_db)):
        qp = f"{r.qp.scale:.4g} / {r.qp.zero_point}" if r.qp else "float output"
        own = num(r.stats.own_sqnr_db) if r.qp else ""
        lines.append(f"| `{r.value}` | `{r.node}` | {r.op} | {own} | {num(r.stats.sqnr_db)} | "
                     f"{r.stats.cosine:.5f} | {range_text(r)} | {qp} | "
                     f"{100 * r.stats.clipped_share:.3f}% |")
    lines += ["", "## Layers kept in float", ""]
    lines += [f"- `{n}`" for n in float_layers] or ["none"]
    if min_sqnr is not None:
        lines += ["", "## --min-sqnr", "", min_sqnr_text(min_sqnr)]
    return "\n".join(lines) + "\n"


def min_sqnr_text(m: dict) -> str:
    """The --min-sqnr search (mlcc.api's manifest entry) as markdown: the target, what was kept
    in float in the order kept with the output SQNR after each, and the cost in speed and size
    against the program with every group in integer."""
    met = "met" if m["met"] else "NOT met (every candidate group tried)"
    lines = [f"Target {m['target_db']:g} dB on {m['samples']} calibration samples: {met}. "
             f"Output SQNR with every group in integer {m['base_db']:.2f} dB, after "
             f"{len(m['kept'])} groups kept in float {m['final_db']:.2f} dB "
             f"({m['evaluations']} programs built and measured).", "",
             f"Cost: latency {m['ms_all_integer']:.3g} ms -> {m['ms']:.3g} ms (this machine, "
             f"x86-native build, timed alternately), weights {m['weights_all_integer']} -> "
             f"{m['weights']} bytes.", "",
             "| kept in float (in order) | gain alone (dB) | output SQNR after (dB) |",
             "|---|---:|---:|"]
    for node, db in m["steps"]:
        lines.append(f"| `{node}` | {m['gains'].get(node, math.nan):+.2f} | {db:.2f} |")
    return "\n".join(lines)
