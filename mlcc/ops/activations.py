"""The activations mlcc fuses into the epilogue of a Conv, Gemm, MatMul or ConvTranspose: one
row per `enum mlcc_act_kind` of runtime_c/kernels/mlcc_kernel.h, and the one place that says,
for each, what it computes, how it reaches the C kernels and how the int8 scheme runs it.

A fused activation travels as (kind, alpha, beta): attrs["_act"] of its producer, written by
passes.fuse_activations, lowered by act_params into the C struct mlcc_act. The ONNX operator
that computes an activation alone says so through its OpDef's `activation(node, g)` hook
(mlcc/ops/elementwise.py), which reads the attributes listed here; the quantizer writes such a
node back from a kind with `onnx_node_of`.

int8 rules (mlcc/quant/rewrite.py):
  "clamp"  the integer producer writes uint8 and the activation is its requantization's clamp
           (`clamp`: the interval of real outputs it keeps)
  "table"  the producer writes uint8 at the pre-activation scale and the activation runs as a
           256-entry table on the codes (mlcc.QLut); `window` bounds the input range that
           table needs (outside it the function is constant to within half an output step)
  "float"  the producer writes float32 through its float epilogue
tests/test_activations.py checks the kinds and codes against the C header, that every kind
has its case in the C switches, and each numpy reference against the C scalar code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir import Enum, Graph, Node
from .registry import lookup

Act = tuple  # (kind, alpha, beta)
NO_ACT: Act = ("NONE", 0.0, 0.0)
_ANY = (-np.inf, np.inf)


@dataclass(frozen=True)
class Activation:
    kind: str                        # MLCC_ACT_<kind>
    code: int                        # its value in enum mlcc_act_kind
    # y = ref(x, alpha, beta) on float64 arrays, as the float kernels compute it
    ref: Callable[[np.ndarray, float, float], np.ndarray]
    onnx: str | None = None          # the ONNX operator that computes it alone
    since: int = 1                   # the opset the quantizer writes that operator at
    # (attribute, default) read into alpha and beta; Clip (bounds are inputs) reads its own
    params: tuple[tuple[str, float], ...] = ()
    epilogue: bool = True            # fuses into a producer's epilogue
    int8: str = "float"              # "clamp", "table" or "float" (see above)
    window: Callable[[float, float], tuple[float, float]] = lambda a, b: _ANY
    # int8 "clamp": the interval of real outputs the clamp keeps, from (alpha, beta)
    clamp: Callable[[float, float], tuple[float, float]] | None = None


def _sigmoid(x, a, b):
    return 1.0 / (1.0 + np.exp(-x))


ACTIVATIONS: tuple[Activation, ...] = (
    Activation("NONE", 0, lambda x, a, b: x, epilogue=False, int8="clamp",
               clamp=lambda a, b: _ANY),
    Activation("RELU", 1, lambda x, a, b: np.maximum(x, 0.0), "Relu", 14, int8="clamp",
               clamp=lambda a, b: (0.0, np.inf)),
    Activation("CLIP", 2, lambda x, a, b: np.minimum(np.maximum(x, a), b), "Clip", 13,
               int8="clamp", clamp=lambda a, b: (a, b)),
    Activation("LEAKY_RELU", 3, lambda x, a, b: np.where(x >= 0, x, x * a), "LeakyRelu", 16,
               params=(("alpha", 0.01),)),
    # Sigmoid within 0.00034 of 0 or 1 beyond +-8: less than half a uint8 output step
    Activation("SIGMOID", 4, _sigmoid, "Sigmoid", 13, int8="table",
               window=lambda a, b: (-8.0, 8.0)),
    Activation("HARD_SIGMOID", 5, lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), "HardSigmoid",
               6, params=(("alpha", 0.2), ("beta", 0.5)), int8="table",
               window=lambda a, b: (-b / a, (1.0 - b) / a) if a > 0 else _ANY),
    # exactly 0 below -3
    Activation("HARD_SWISH", 6, lambda x, a, b: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
               "HardSwish", 14, int8="table", window=lambda a, b: (-3.0, np.inf)),
    # within 0.00068 of +-1 beyond +-4
    Activation("TANH", 7, lambda x, a, b: np.tanh(x), "Tanh", 13, int8="table",
               window=lambda a, b: (-4.0, 4.0)),
    # |x sigmoid(alpha x)| below 0.0027 under -8 / alpha
    Activation("SILU", 8, lambda x, a, b: x / (1.0 + np.exp(-a * x)), "Swish", 24,
               params=(("alpha", 1.0),), int8="table",
               window=lambda a, b: (-8.0 / a, np.inf) if a > 0 else _ANY),
    Activation("GELU", 9, lambda x, a, b: x * (1.0 + _erf(x / np.sqrt(2.0))) * 0.5, "Gelu", 20),
    # ONNX Gelu with approximate="tanh" (its OpDef says so), onnxruntime's FastGelu
    Activation("GELU_TANH", 10, lambda x, a, b: 0.5 * x * (
        1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))),
)

BY_KIND: dict[str, Activation] = {a.kind: a for a in ACTIVATIONS}
BY_ONNX: dict[str, Activation] = {a.onnx: a for a in ACTIVATIONS if a.onnx}
# the kinds an integer producer applies as its uint8 clamp (none, Relu, Clip)
CLAMP_ACTS = tuple(a.kind for a in ACTIVATIONS if a.int8 == "clamp")
# the kinds the quantizer runs as a table on uint8 codes
TABLE_ACTS = tuple(a.kind for a in ACTIVATIONS if a.int8 == "table")


def _erf(x):
    from math import erf
    return np.vectorize(erf, otypes=[np.float64])(x)


def act_from_attrs(op_type: str, node: Node) -> Act:
    """(kind, alpha, beta) of the activation `op_type` computes, from node's attributes."""
    a = BY_ONNX[op_type]
    vals = [float(node.attr(name, default)) for name, default in a.params]
    vals += [0.0] * (2 - len(vals))
    return (a.kind, vals[0], vals[1])


def onnx_node_of(act: Act) -> tuple[str, int, dict]:
    """(op type, opset version, attributes) of the ONNX node that computes act alone."""
    a = BY_KIND[act[0]]
    return a.onnx, a.since, {name: act[1 + i] for i, (name, _) in enumerate(a.params)}


def activation_of(node: Node, g: Graph) -> Act | None:
    """(kind, alpha, beta) if node is an activation one of the producers' epilogues can run
    (its OpDef's `activation` hook), else None."""
    d = lookup(node)
    return d.activation(node, g) if d is not None else None


def fused_act(node: Node) -> Act:
    """The activation fused into node (attrs["_act"]), or none."""
    return node.attrs.get("_act", NO_ACT)


def table_window(act: Act) -> tuple[float, float]:
    """The input interval a table activation's uint8 codes need to span."""
    return BY_KIND[act[0]].window(act[1], act[2])


def act_struct(act: Act) -> dict:
    """The C struct mlcc_act of (kind, alpha, beta)."""
    kind, alpha, beta = act
    return {"kind": Enum(f"MLCC_ACT_{kind}"), "alpha": float(alpha), "beta": float(beta)}
