"""Mixed precision: `--min-sqnr DB` / `--max-drop D` keep the most sensitive layers in float
until the model meets its target.

1. Sensitivity, in one pass over the samples and without building a program per layer: each
   candidate layer (an integer group whose quantization adds error: a Conv with its folded
   BatchNorm and activation, a MatMul with its bias, a requantizing Add or Concat, a pool)
   quantized alone, its int8 weights and its input and output activations at their
   calibrated scales, simulated by the fake-quant program (mlcc/quant/fakequant.py); its
   sensitivity is the model's output SQNR against float with only that layer quantized.
2. The search: layers kept in float in the order of their sensitivity (lowest SQNR first);
   the number kept is bisected on the simulated metric of the whole mix (the rewrite's real
   plan for that set, so a float layer's neighbours are quantized as they will be), about
   log2(N) + 2 evaluations. The metric is the worst output SQNR (`--min-sqnr`), or for
   `--max-drop` a score of the float and the quantized outputs (`--metric FILE.py:FN`, or
   the built-in top-1 agreement) whose drop from the float model's own score must stay
   within D.
3. mlcc.api verifies the choice once with a real build, and keeps more layers in float if
   the real program misses what the simulation promised.

The error of one layer's quantization compounds through the layers after it, which is why
the measure is the model's output and not the layer's own error (on PP-OCR rec, keeping the
layers with the worst own error in float did not help).
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from ..ir import Graph
from .calib import user_module
from .rewrite import LayerPlan
from .rules import is_movement
from .report import ErrorStats

# Integer groups whose quantization adds error (data movement and MaxPool on uint8 are exact).
LOSSY = ("Conv", "Gemm", "MatMul", "Add", "Concat", "AveragePool", "GlobalAveragePool")

Outputs = list[dict[str, np.ndarray]]       # one dict of model outputs per sample

# The default mix (no --min-sqnr / --max-drop given, not --pure-int8): keep the layers the
# sensitivity ranks worst in float until the simulated output SQNR reaches AUTO_SQNR_DB, as
# long as the estimated int8 / float time stays within AUTO_TIME_BUDGET.
AUTO_SQNR_DB = 30.0
AUTO_TIME_BUDGET = 0.5
AUTO_TIME_MARGIN = 0.05   # what float layers may add where all integer is already above it
# without --time-budget, where the target is out of reach within AUTO_TIME_BUDGET the budget
# rises to what reaches it (the least such mix of the same moves) if that is at most this
# (int8 stays faster than float where the estimate errs by 0.1, as it did for MiniLM's W8A16
# MatMuls: 0.88 estimated, 0.98 measured), except for a model with class probabilities among
# its outputs (raised_budget)
AUTO_TIME_CAP = 0.8
# outputs that are probabilities over classes (a decision is their argmax)
PROBABILITY_OPS = ("Softmax", "LogSoftmax")
# --time-budget R: the estimated int8 / float time the default mix may spend, at most this
# (an all-float mix estimates a little above 1.0: its Q/DQ crossings)
MAX_TIME_BUDGET = 1.5
# when the target is out of reach within the budget: the fewest layers whose simulated SQNR
# is within this of the best mix tried (more float layers need not help: a float layer's
# neighbours quantize at other points, and a saturating output such as softmax
# probabilities stops improving)
AUTO_NEAR_BEST_DB = 1.0
# the default mix ranks layers on fewer samples for bigger models: about as many simulated
# multiply-accumulates per candidate as 8 samples of PP-OCRv4 rec (0.7 G each), 2 at least
AUTO_RANK_MACS = 6e9
INT8_FLOAT_RATIO = 0.4    # time of an int8 MAC / a float one, for the time estimates
                          # (docs/quantization.md: 0.32-0.43 measured on the conv nets)


def candidates(layers: list[LayerPlan]) -> list[str]:
    """The integer groups worth trying in float (lossy ones), in graph order."""
    return [lp.node for lp in layers if lp.integer and lp.op.split("+")[0] in LOSSY]


def worst_db(values: list[float]) -> float:
    return min(values) if values else math.inf


def output_sqnr(refs: Outputs, outs: Outputs) -> float:
    """The worst output's SQNR (dB) over all samples."""
    stats: dict[str, ErrorStats] = {}
    for r, o in zip(refs, outs, strict=True):
        for name, ref in r.items():
            stats.setdefault(name, ErrorStats()).update(ref, o[name])
    return worst_db([st.sqnr_db for st in stats.values()])


def top1_agreement(refs: Outputs, outs: Outputs) -> float:
    """The built-in --max-drop metric: the share (%) of positions whose argmax over the last
    axis of each output is the float model's (a classifier's class, a CTC decoder's
    character per time step)."""
    same = total = 0
    for r, o in zip(refs, outs, strict=True):
        for name, ref in r.items():
            a = ref.reshape(-1, ref.shape[-1] if ref.ndim else 1).argmax(axis=1)
            b = o[name].reshape(a.shape[0], -1).argmax(axis=1)
            same += int(np.sum(a == b))
            total += a.size
    return 100.0 * same / total if total else 100.0


def load_metric(spec: str) -> tuple[Callable[[Outputs, Outputs], float], str]:
    """`FILE.py:FN` -> (FN, its name). FN(float_outputs, quantized_outputs) returns one number,
    higher is better; each argument is a list (one entry per sample) of dicts output name ->
    array."""
    path, sep, fn_name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not fn_name.isidentifier():
        raise InputError(f"--metric {spec}: expected FILE.py:FUNCTION")
    if not Path(path).is_file():
        raise InputError(f"--metric {spec}: {path} does not exist")
    module = user_module(Path(path), f"--metric {spec}")
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise InputError(f"--metric {spec}: {path} defines no function {fn_name}")
    return fn, f"{Path(path).name}:{fn_name}"


@dataclass
class Target:
    """What the mix must meet: the worst output SQNR >= value ("sqnr"), or the metric's drop
    from the float model's own score <= value ("drop")."""
    kind: str
    value: float
    metric: Callable[[Outputs, Outputs], float] | None = None
    name: str = "output SQNR"
    reference: float = math.nan           # the metric of float against itself ("drop")

    @classmethod
    def sqnr(cls, db: float) -> "Target":
        return cls("sqnr", db)

    @classmethod
    def drop(cls, points: float, metric=None, name: str = "top-1 agreement %") -> "Target":
        return cls("drop", points, metric or top1_agreement, name)

    def call(self, refs: Outputs, outs: Outputs) -> float:
        if self.kind == "sqnr":
            return output_sqnr(refs, outs)
        try:
            v = self.metric(refs, outs)
            v = float(v)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code failed
            raise InputError(f"--metric {self.name} failed ({type(exc).__name__}: {exc})") \
                from None
        if math.isnan(v):
            raise InputError(f"--metric {self.name} returned NaN")
        return v

    def start(self, refs: Outputs) -> None:
        """Scores the float model against itself (the reference of --max-drop)."""
        if self.kind == "drop":
            if self.metric is top1_agreement and refs and \
                    all(r.ndim == 0 or r.shape[-1] < 2 for r in refs[0].values()):
                raise InputError("--max-drop without --metric scores top-1 agreement, which "
                                 "needs an output with classes on its last axis; this "
                                 "model's outputs have none: give --metric FILE.py:FN or "
                                 "use --min-sqnr")
            self.reference = self.call(refs, refs)

    def meets(self, score: float) -> bool:
        return score >= self.value if self.kind == "sqnr" else \
            self.reference - score <= self.value

    def text(self, score: float) -> str:
        if self.kind == "sqnr":
            return f"{score:.2f} dB"
        return f"{score:.4g} (drop {self.reference - score:.4g})"

    def goal(self) -> str:
        if self.kind == "sqnr":
            return f"--min-sqnr {self.value:g} dB"
        return f"--max-drop {self.value:g} on {self.name} (float: {self.reference:.4g})"


def touched(g: Graph, node: str, slots: dict[str, int]) -> list[str]:
    """The quantized values a layer reads or writes (its activations in the simulation)."""
    n = next((x for x in g.nodes if x.name == node), None)
    return [] if n is None else [v for v in list(n.inputs) + list(n.outputs) if v in slots]


def _recorded(evaluate: Callable[[int], float]):
    """evaluate, memoized, and the list of every (k, score) it evaluated, in order."""
    steps: list[tuple[int, float]] = []
    memo: dict[int, float] = {}

    def ev(k: int) -> float:
        if k not in memo:
            memo[k] = evaluate(k)
            steps.append((k, memo[k]))
        return memo[k]
    return ev, steps, memo


def _least_between(ev, meets, lo: int, hi: int) -> int:
    """The least k in (lo, hi] that meets, lo failing and hi meeting (scores growing)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(ev(mid)):
            hi = mid
        else:
            lo = mid
    return hi


def bisect(count: int, evaluate: Callable[[int], float], meets: Callable[[float], bool]
           ) -> tuple[int, list[tuple[int, float]]]:
    """The least k in 0..count whose evaluate(k) meets the target, by bisection (the score is
    taken to grow with k, the layers kept in float), or count if none does; and every
    (k, score) evaluated, in order."""
    ev, steps, _ = _recorded(evaluate)
    if meets(ev(0)) or count == 0:
        return 0, steps
    if not meets(ev(count)):
        return count, steps
    return _least_between(ev, meets, 0, count), steps


def grid_search(count: int, evaluate: Callable[[int], float], meets: Callable[[float], bool],
                near_best: float) -> tuple[int, list[tuple[int, float]]]:
    """The default mix's search over k in 0..count layers kept in float, which does not take
    the score to grow with k: k = 0, 1, 2, 4, ... and count are evaluated; the least that
    meets the target, refined by bisection from the grid point before it, or if none meets,
    the least whose score is within `near_best` of the best evaluated. Returns k and every
    (k, score) evaluated, in order."""
    ev, steps, memo = _recorded(evaluate)
    grid = sorted({0, count} | {1 << i for i in range(count.bit_length()) if 1 << i < count})
    prev = None
    for k in grid:
        if meets(ev(k)):
            return (k if prev is None else _least_between(ev, meets, prev, k)), steps
        prev = k
    best = max(memo.values())
    return min(k for k, v in memo.items() if v >= best - near_best), steps


@dataclass
class MixResult:
    """The search's outcome (mlcc.api fills `verified` from the real build)."""
    target: Target
    order: list[str]                                   # candidates, most sensitive first
    sensitivity: dict[str, float]                      # node -> output SQNR (dB) alone
    steps: list[tuple[int, float]] = field(default_factory=list)   # (kept, simulated score)
    kept: list[str] = field(default_factory=list)
    w8a16: list[str] = field(default_factory=list)                 # layers moved to W8A16
    simulated: float = math.nan
    verified: list[tuple[int, float]] = field(default_factory=list)  # (kept, real score)
    met: bool = False


def macs(g: Graph, node: str) -> int:
    """Multiply-accumulates of a layer for one run (an element-wise layer: its outputs)."""
    n = next((x for x in g.nodes if x.name == node), None)
    if n is None:
        return 0
    out = g.values[n.outputs[0]]
    size = int(np.prod(out.shape)) if out.shape else 1
    w = g.const(n.input(1)) if len(n.inputs) > 1 else None
    if n.op_type == "Conv" and w is not None:
        return size * int(np.prod(w.shape[1:]))
    if n.op_type in ("MatMul", "Gemm") and w is not None:
        k = w.shape[0] if n.op_type == "MatMul" or n.attr("transB", 0) == 0 else w.shape[1]
        return size * int(k)
    return size


def time_ratio(layers: list[LayerPlan], layer_macs: dict[str, int]) -> float:
    """The estimated time of a plan against the all-float program: the candidate layers'
    multiply-accumulates, an integer one costing INT8_FLOAT_RATIO of a float one (layers of
    no candidate, such as float attention, are left out: they cost the same in both)."""
    integer = {lp.node for lp in layers if lp.integer}
    total = sum(layer_macs.values())
    if total == 0:
        return INT8_FLOAT_RATIO
    return sum(m * (INT8_FLOAT_RATIO if c in integer else 1.0)
               for c, m in layer_macs.items()) / total


def auto_rank_samples(layer_macs: dict[str, int], limit: int) -> int:
    """How many samples the default mix's sensitivity pass runs: 8 (`limit`) for a model of
    up to AUTO_RANK_MACS / 8 multiply-accumulates per inference, fewer for bigger ones (the
    pass runs once per candidate layer and sample), 2 at least."""
    total = max(1, sum(layer_macs.values()))
    return max(min(2, limit), min(limit, int(AUTO_RANK_MACS // total)))


def check_time_budget(budget: float) -> float:
    """`--time-budget R`: a number in (0, MAX_TIME_BUDGET], or an InputError."""
    if not isinstance(budget, (int, float)) or isinstance(budget, bool) or \
            not math.isfinite(budget) or not 0 < budget <= MAX_TIME_BUDGET:
        raise InputError(f"--time-budget must be a ratio of float's time in (0, "
                         f"{MAX_TIME_BUDGET:g}], not {budget!r}")
    return float(budget)


def probability_outputs(g: Graph) -> list[str]:
    """The model outputs a Softmax or LogSoftmax writes (through data movement): class
    probabilities, whose SQNR saturates where two classes are near a tie and says little of
    the decisions (their argmax)."""
    producer = g.producers()
    found = []
    for out in g.outputs:
        n = producer.get(out)
        while n is not None and is_movement(n) and n.inputs:
            n = producer.get(n.inputs[0])
        if n is not None and n.op_type in PROBABILITY_OPS:
            found.append(out)
    return found


def raised_budget(target_cost: float | None, probabilities: bool, fitted: bool = True
                  ) -> float | None:
    """The default mix's budget where its target is out of reach within auto_budget: what
    reaches the target (target_cost, the estimated int8 / float time of the least mix of the
    same moves, unbounded, that meets it) if that is at most AUTO_TIME_CAP, else None (the
    budget stays). Only by a fitted cost table (`fitted`): the cap's margin is that table's
    measured error, and the multiply-accumulate estimate of the other targets (arm, wasm, the
    microcontrollers, whose flash a float layer also fills) was never checked against their
    times. Never for a model with class probabilities among its outputs: there the
    output SQNR saturates below the target while the decisions already agree with float's
    (PP-OCR rec reads float's exact match at 22 dB, and 30 dB would cost 0.9 of float's
    time: there a budget above the default is a choice for --time-budget)."""
    if target_cost is None or probabilities or not fitted or target_cost > AUTO_TIME_CAP:
        return None
    return target_cost


def auto_budget(base: float) -> float:
    """The default mix's time budget, given the estimated int8 / float time of the
    all-integer program: AUTO_TIME_BUDGET, or for a program already estimated above it (a
    small model, whose time goes to each kernel call's fixed cost more than to
    multiply-accumulates), that estimate plus AUTO_TIME_MARGIN, so that such a model may
    still keep a few layers in float."""
    return AUTO_TIME_BUDGET if base <= AUTO_TIME_BUDGET else base + AUTO_TIME_MARGIN


def within_budget(order: list[str], ratio_of: Callable[[list[str]], float], budget: float
                  ) -> list[str]:
    """The layers of `order` (most sensitive first) taken in turn, each one only if the
    estimated time ratio with it and those taken before stays within the budget: every
    prefix of the result is affordable, so the search can cut it anywhere (`ladder` with
    float moves only)."""
    return [c for c, _ in ladder(order, (), lambda moves: ratio_of([c for c, _ in moves]),
                                 budget)]


FLOAT, W8A16 = "float", "w8a16"


def ladder(order: list[str], sixteen, ratio_of: Callable[[list], float] | None = None,
           budget: float = math.inf, costs: dict | None = None) -> list[tuple[str, str]]:
    """The mixes the searches try, as moves (layer, precision) in the order taken (a later
    move of a layer replaces its earlier one): each layer of `order` (most sensitive first)
    to its cheapest better precision, then the layers moved to W8A16 (int16 activations,
    int8 weights) to float, in the same order. W8A16 is considered for the layers of
    `sixteen` only (whose W8A16 kernel is estimated cheaper than their float one).

    Unpriced (no `ratio_of`): W8A16 for the layers of `sixteen`, float for the others. Priced:
    each move's estimated int8 / float time ratio with the moves taken before it,
    `ratio_of(moves)`; a layer takes the cheaper of W8A16 and float (float when it is not
    dearer: it is exact), and only a move that keeps the ratio within `budget` is taken, so
    every prefix of the result is affordable and the search can cut it anywhere. `costs`, if
    given, gets each move priced and its marginal cost (the ratio it adds to the moves
    taken before it)."""
    if ratio_of is None:
        return [(c, W8A16 if c in sixteen else FLOAT) for c in order] + \
            [(c, FLOAT) for c in order if c in sixteen]
    taken: list[tuple[str, str]] = []
    before = ratio_of([])

    def price(move) -> float:
        r = ratio_of(taken + [move])
        if costs is not None:
            costs[move] = r - before
        return r
    for c in order:
        options = [(price((c, FLOAT)), 0, (c, FLOAT))]
        if c in sixteen:
            options.append((price((c, W8A16)), 1, (c, W8A16)))
        r, _, move = min(options)
        if r <= budget:
            taken.append(move)
            before = r
    for c in [c for c, p in taken if p == W8A16]:
        r = price((c, FLOAT))
        if r <= budget:
            taken.append((c, FLOAT))
            before = r
    return taken


def mix_of(moves) -> tuple[list[str], list[str]]:
    """(layers in float, layers at W8A16) after the moves, in the order first moved."""
    precision: dict[str, str] = {}
    for c, p in moves:
        precision[c] = p
    return ([c for c, p in precision.items() if p == FLOAT],
            [c for c, p in precision.items() if p == W8A16])


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
