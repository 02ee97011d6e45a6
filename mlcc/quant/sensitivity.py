"""`--min-sqnr DB`: keep the most sensitive layers in float, one by one, until the model's
output meets a target SQNR on the calibration set.

Sensitivity is measured end to end on the fused groups the rewrite quantizes (a Conv with its
folded BatchNorm, bias and activation; a MatMul with its bias; a requantizing Add; a Concat
that requantizes), never layer by layer in isolation: the program with every group in integer
is the baseline, and a group's sensitivity is the gain in output SQNR of the same program with
only that group kept in float. Groups are then kept in float in the order of their gains, the
program rebuilt and measured after each one, until the target is met (greedy on one ranking:
N + k evaluations for N candidate groups and k groups kept). The error of one group's
quantization compounds through the layers after it, which an isolated per-layer SQNR does not
see (measured on PP-OCR rec: keeping the layers with the worst own error in float did not
help).

`evaluate(keep)` is given by the caller (mlcc.api builds and runs the real integer program, so
what is measured is what ships): the worst output SQNR in dB over the samples.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import Callable

from ..ir import Graph
from .rewrite import LayerPlan

# Integer groups whose quantization adds error (data movement and MaxPool on uint8 are exact).
LOSSY = ("Conv", "Gemm", "MatMul", "Add", "Concat", "AveragePool", "GlobalAveragePool")


@dataclass
class SearchResult:
    target_db: float
    base_db: float                                # every candidate group in integer
    final_db: float
    met: bool
    kept: list[str] = field(default_factory=list)   # node names, in the order kept
    steps: list[tuple[str, float]] = field(default_factory=list)   # (node kept, SQNR after)
    gains: dict[str, float] = field(default_factory=dict)          # node -> dB alone
    evaluations: int = 0


def candidates(layers: list[LayerPlan]) -> list[str]:
    """The integer groups worth trying in float (lossy ones), in graph order."""
    return [lp.node for lp in layers if lp.integer and lp.op.split("+")[0] in LOSSY]


def search(cands: list[str], evaluate: Callable[[frozenset], float], target_db: float,
           say: Callable[[str], None] = lambda text: None) -> SearchResult:
    base = evaluate(frozenset())
    res = SearchResult(target_db, base, base, base >= target_db, evaluations=1)
    if res.met or not cands:
        return res
    for i, c in enumerate(cands):
        res.gains[c] = evaluate(frozenset([c])) - base
        res.evaluations += 1
        say(f"min-sqnr: sensitivity {i + 1}/{len(cands)}: {c} {res.gains[c]:+.2f} dB")
    # most helpful first; ties (and losses) in graph order
    order = sorted(cands, key=lambda c: (-res.gains[c], cands.index(c)))
    kept: list[str] = []
    sq = base
    for c in order:
        kept.append(c)
        sq = evaluate(frozenset(kept))
        res.evaluations += 1
        res.steps.append((c, sq))
        say(f"min-sqnr: {len(kept)} kept in float (+{c}): output SQNR {sq:.2f} dB "
            f"(target {target_db:g})")
        if sq >= target_db:
            break
    res.kept, res.final_db, res.met = kept, sq, sq >= target_db
    return res


def worst_db(values: list[float]) -> float:
    return min(values) if values else math.inf


def select_nodes(g: Graph, patterns) -> tuple[frozenset, list[str]]:
    """`--keep-float` patterns -> (node names of g, patterns that matched nothing). A pattern
    is `op:TYPE` (every node of that ONNX op type: `op:Conv`, `op:MatMul`; a fused Conv
    keeps its type) or a shell-style pattern over node names as the report and the compile
    output print them (`p2o.Conv.3[3-7]`, `p2o.MatMul.*`), matched case-sensitively."""
    names: set[str] = set()
    unmatched = []
    for pat in patterns:
        if pat.startswith("op:"):
            hit = {n.name for n in g.nodes if n.op_type == pat[3:]}
        else:
            hit = {n.name for n in g.nodes if fnmatch.fnmatchcase(n.name, pat)}
        names |= hit
        if not hit:
            unmatched.append(pat)
    return frozenset(names), unmatched
