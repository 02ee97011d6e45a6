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


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) of two float64 vectors by numpy's own (pairwise) summation, not BLAS: the
    same bits on every machine (OpenBLAS splits a long dot product between its threads, one
    per core, and rounds differently with each count), and no thread wake-ups, which on a
    loaded machine cost ~10x the arithmetic (OpenBLAS spins while it waits)."""
    return float(np.add.reduce(a * b))


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
        rr, e = _dot(r, r), r - q
        self.signal += rr
        self.noise += _dot(e, e)
        self.dot += _dot(r, q)
        self.norm_a += rr
        self.norm_b += _dot(q, q)
        self.count += r.size
        if qp is not None:
            lo = qp.scale * (qp.qmin - qp.zero_point)
            hi = qp.scale * (qp.qmax - qp.zero_point)
            self.clipped += int(np.count_nonzero((r < lo) | (r > hi)))
            own = dequantize_linear(quantize_linear(ref, qp), qp).astype(np.float64).reshape(-1)
            self.own_noise += _dot(r - own, r - own)
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
             outputs: list[tuple[str, ErrorStats]], mixed: dict | None = None,
             w8a16_layers: list[str] = ()) -> str:
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
    if w8a16_layers:
        lines += ["", "## Layers at W8A16 (int16 activations, int8 weights)", ""]
        lines += [f"- `{n}`" for n in w8a16_layers]
    if mixed is not None:
        lines += ["", "## Mixed precision", "", mixed_text(mixed)]
    return "\n".join(lines) + "\n"


def _target_cost_text(m: dict) -> str:
    """Where the default mix missed its target within the budget: what the target needs, and
    why the budget was or was not raised to it."""
    if m["target_cost"] is None:
        return f"{m['value']:g} dB is not reached with every move taken."
    text = (f"{m['value']:g} dB needs a budget of {m['target_cost']:.4g} of float's estimated "
            f"time (the same moves searched without a budget): ")
    if m.get("budget_raised"):
        return text + "the default budget was raised to it."
    if m.get("budget_given"):
        return text + "more than the `--time-budget` given."
    if m.get("probability_outputs"):
        return text + ("the default budget is not raised for class probabilities ("
                       + ", ".join(f"`{o}`" for o in m["probability_outputs"])
                       + "); `--time-budget` sets it.")
    if not m.get("time_model", "").startswith("fitted"):
        return text + ("the default budget is raised only by a fitted cost table; "
                       "`--time-budget` sets it.")
    return text + (f"above the cap of the default budget ({m['budget_cap']:g}); "
                   f"`--time-budget` sets it.")


def mixed_text(m: dict) -> str:
    """The mixed-precision search (mlcc.api's manifest entry plus its timing) as markdown: the
    target and how it was met, the simulated and built steps, and per layer its sensitivity,
    its chosen precision and the estimated time it costs in float."""
    def num(x) -> str:
        return "inf" if x == math.inf else f"{x:.2f}"
    met = "met" if m["met"] else "NOT met"
    kept = set(m["kept"])
    w16 = set(m.get("w8a16", ()))

    def precision(node: str) -> str:
        return "float" if node in kept else "W8A16" if node in w16 else "int8"
    cost = m.get("extra_ms_per_float_mac", math.nan)
    if m.get("auto"):       # the default mix: simulated only, bounded by a time budget
        lines = [f"Default mix ({m['target']}): {met} with {len(m['kept'])} of "
                 f"{len(m['macs'])} candidate layers in float"
                 + (f" and {len(w16)} at W8A16" if m.get("w8a16_offered") else "")
                 + f" (simulated output SQNR "
                 f"{num(m['final'])} dB on {m['samples']} samples; estimated int8 / float "
                 f"time {m['time_ratio']:.2f} by {m.get('time_model', 'multiply-accumulates')}"
                 f", budget {m['budget']:.2f}; `--pure-int8` turns it off).", "",
                 "Search, simulated by fake quantization (moves taken -> score; the moves: "
                 "the most sensitive layers to W8A16 where offered, then to float): "
                 + ", ".join(f"{k} -> {num(v)}" for k, v in m["steps"]) + "."]
        if "target_cost" in m:
            lines += ["", _target_cost_text(m)]
        if m["order"]:
            cost = m.get("move_cost", {})
            ok = {"float": set(m.get("affordable", ())),
                  "w8a16": set(m.get("affordable_w8a16", ()))}

            def priced(p: str, node: str) -> str:
                if node not in cost.get(p, {}):
                    return ""
                return f"{cost[p][node]:+.4f}" + ("" if node in ok[p] else " (not taken)")
            lines += ["", f"Layers, most sensitive first: the output SQNR with only that "
                      f"layer quantized (simulated, {m['rank_samples']} samples), the "
                      f"precision chosen, and the estimated time each move adds to the "
                      f"int8 / float ratio where the search priced it (W8A16 is offered "
                      f"where its kernel is estimated cheaper than float's; a move is not "
                      f"taken when the other precision was cheaper or it exceeds the "
                      f"budget).", "",
                      "| layer | SQNR alone (dB) | precision | MACs | W8A16 cost | float cost |",
                      "|---|---:|---|---:|---:|---:|"]
            lines += [f"| `{node}` | {num(m['sensitivity_db'][node])} | {precision(node)} | "
                      f"{m['macs'][node]} | {priced('w8a16', node)} | "
                      f"{priced('float', node)} |" for node in m["order"]]
        return "\n".join(lines)
    lines = [f"Target {m['target']}: {met} with {len(m['kept'])} of {len(m['order'])} "
             f"candidate layers in float (score {num(m['final'])} on {m['samples']} samples, "
             f"built and run); the program takes {m.get('ms', math.nan):.3g} ms on this "
             f"machine, weights {m['weights']} bytes.", "",
             "Search, simulated by fake quantization (layers kept in float -> score): "
             + ", ".join(f"{k} -> {num(v)}" for k, v in m["steps"])
             + "; verified by building: "
             + ", ".join(f"{k} -> {num(v)}" for k, v in m["verified"]) + ".", "",
             f"Layers, most sensitive first: the output SQNR with only that layer quantized "
             f"(simulated, {m['rank_samples']} samples), the precision chosen, and the "
             f"estimated extra time of running it in float (its multiply-accumulates at "
             f"this program's measured time per MAC, an int8 MAC costing "
             f"{m.get('int8_float_ratio', math.nan):g} of a float one).", "",
             "| layer | SQNR alone (dB) | precision | MACs | est. float cost (ms) |",
             "|---|---:|---|---:|---:|"]
    for node in m["order"]:
        lines.append(f"| `{node}` | {num(m['sensitivity_db'][node])} | {precision(node)} | "
                     f"{m['macs'][node]} | "
                     f"{m['macs'][node] * cost:.3g} |")
    return "\n".join(lines)
