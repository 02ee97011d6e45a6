"""The operator registry: one OpDef per ONNX operator (and version range), found by lookup().

An OpDef owns everything mlcc knows about an operator: which attributes and values it supports
(`check`), its output types and static shapes (`infer`), how it folds when its inputs are
constant (`fold`, by default the ONNX reference implementation), how it lowers to C kernels
(`lower`) and its cost (`flops`). Adding an operator means adding one class in one module.
Two hooks let the passes and the quantizer ask an operator instead of testing op-type strings:
`activation` (is this node an activation a producer's epilogue can run, and which one) and
`quant_rules` (which of the quantizer's per-family rules may run it on uint8 codes).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from .refusals import ML_REFUSED, REFUSED, ZIPMAP_ADVICE, refusal

TypeShape = tuple[str, tuple[int, ...]]


class OpDef:
    op_type: str = ""
    domain: str = ""
    since: int = 1
    until: int | None = None
    # Supported attributes: name -> None (any value) or a predicate on the value that says
    # whether mlcc handles it. Attributes not listed make the node unsupported.
    attributes: dict[str, Callable[[Any], bool] | None] = {}
    # The quantizer's rules (mlcc/quant/rules.py RULES) that may run this operator on uint8
    # codes, tried in this order; none: it runs in float32 between Dequantize/Quantize.
    quant_rules: tuple[str, ...] = ()
    # Its kernels apply a fused activation (attrs["_act"], passes.fuse_activations).
    fuses_activation: bool = False
    # An output size that is a data-dependent count (a Shape of a NonZero's output as the
    # shape input) may be planned at its maximum, the count becoming that axis's Value.dyn
    # (docs/dynamic-outputs.md): "fill" when, computed over the maximum, the first `count`
    # positions along the axis are the result (ConstantOfShape); "view" when the output is
    # a view of an input that has that very count on that axis (Reshape). "": refused.
    counted_shapes: str = ""

    def check(self, node: Node) -> list[str]:
        """What about this node (from its attributes alone) mlcc does not support."""
        problems = []
        for key, value in sorted(node.attrs.items()):
            if key not in self.attributes:
                problems.append(f"attribute {key!r} is not supported")
            else:
                accept = self.attributes[key]
                if accept is not None and not accept(value):
                    problems.append(f"attribute {key}={value!r} is not supported")
        return problems

    def infer(self, node: Node, inputs: list[Value | None], g: Graph) -> list[TypeShape]:
        raise NotImplementedError

    def fold(self, node: Node, arrays: list[np.ndarray | None]) -> list[np.ndarray] | None:
        """Evaluates the node on constant inputs; None means: use the ONNX reference."""
        return None

    def lower(self, node: Node, lo: Lowering) -> None:
        raise UnsupportedError(f"node {node.name!r} ({node.op_type}) has no run-time kernel")

    def activation(self, node: Node, g: Graph) -> tuple[str, float, float] | None:
        """(kind, alpha, beta) of mlcc/ops/activations.py if this node is an activation that
        the epilogue of the Conv, Gemm or MatMul producing its input can run; else None."""
        return None

    def flops(self, node: Node, g: Graph) -> int:
        """Floating-point operations at run time (a multiply-add counts as two)."""
        return 0

    def dynamic(self, node: Node, inputs: list[Value | None], g: Graph
                ) -> list[tuple[int, str] | None]:
        """Value.dyn of each output: (axis, key) where its size along axis depends on the
        data (its static shape is then the maximum), else None. The operators that make such
        sizes (NonZero, TopK with a run-time k, ...) and those that carry one through
        (elementwise, Gather, Slice, ...: docs/dynamic-outputs.md) override this; the
        others refuse a data-dependent input."""
        refuse_dynamic(node, inputs)
        return [None] * len(node.outputs)


def refuse_dynamic(node: Node, inputs: list[Value | None], allowed: str = "") -> None:
    """Refuses the node when one of its inputs has a data-dependent size (Value.dyn);
    `allowed` says which uses of such inputs the operator does support."""
    for v in inputs:
        if v is not None and v.dyn is not None:
            axis, key = v.dyn
            raise UnsupportedError(
                f"input {v.name!r} has a size that depends on the data (axis {axis}, up to "
                f"{v.shape[axis]}, counted at run time by {key!r}), and {node.op_type} "
                + (allowed or "cannot consume it") + "; mlcc carries such sizes through "
                "elementwise operators, Cast, Gather, GatherND, Slice, Split, Squeeze, "
                "Unsqueeze, Transpose and Concat on the other axes, and a few across it "
                "(docs/dynamic-outputs.md)")


_REGISTRY: dict[tuple[str, str], list[OpDef]] = {}


def register(op_type: str, *, since: int = 1, until: int | None = None, domain: str = ""):
    """Class decorator: registers an OpDef for ONNX schema versions since..until of op_type."""
    def wrap(cls):
        inst = cls()
        inst.op_type, inst.domain, inst.since, inst.until = op_type, domain, since, until
        _REGISTRY.setdefault((domain, op_type), []).append(inst)
        _REGISTRY[(domain, op_type)].sort(key=lambda d: d.since)
        return cls
    return wrap


def lookup(node: Node) -> OpDef | None:
    """The definition that covers this node's schema version, or None."""
    best = None
    for d in _REGISTRY.get((node.domain, node.op_type), []):
        if d.since <= node.version and (d.until is None or node.version <= d.until):
            best = d
    return best


def unsupported_reason(node: Node, graph_outputs=()) -> list[str]:
    """Why this node cannot be compiled at run time (empty if it can); graph_outputs: the
    names of the graph's outputs (a ZipMap's refusal says when it makes one)."""
    defs = _REGISTRY.get((node.domain, node.op_type))
    if not defs:
        if node.domain in ("", "ai.onnx") and node.op_type in REFUSED:
            return [f"operator {node.op_type} is not supported: "
                    f"{refusal(REFUSED[node.op_type])}"]
        if node.domain == "ai.onnx.ml" and node.op_type in ML_REFUSED:
            category, why = ML_REFUSED[node.op_type]
            text = f"operator {node.op_type} (ai.onnx.ml) is not supported: {why}: " \
                   f"{refusal(category)}"
            if node.op_type == "ZipMap":
                out = node.outputs[0] if node.outputs else ""
                where = f"its output {out!r} is a graph output; " if out in graph_outputs \
                    else ""
                text += "; " + where + ZIPMAP_ADVICE.format(
                    scores=node.inputs[0] if node.inputs else "")
            return [text]
        where = f" in domain {node.domain!r}" if node.domain else ""
        return [f"operator {node.op_type}{where} is not supported"]
    d = lookup(node)
    if d is None:
        known = ", ".join(f"{x.since}..{x.until or 'latest'}" for x in defs)
        return [f"version {node.version} is not supported (supported: {known})"]
    return d.check(node)


def registered_ops() -> list[str]:
    return sorted(op for (_, op) in _REGISTRY)


def registered_operators() -> list[tuple[str, str]]:
    """(domain, op type) of every registered operator; mlcc's own ops are in domain "mlcc"."""
    return sorted(_REGISTRY)


def definitions(domain: str, op_type: str) -> list[OpDef]:
    """The definitions (one per version range) registered for an operator."""
    return list(_REGISTRY.get((domain, op_type), []))


def describe(node: Node) -> str:
    return f"node {node.name!r} ({node.op_type}-{node.version})"


def static_only(node: Node, values: list[Value | None], exc: TypeError) -> UnsupportedError:
    """The error for an OpDef whose infer or lower met a dynamic size (ir.symbolic) where it
    computes with numpy over static sizes (np.arange(n), ...), which numpy refuses with a
    TypeError; a TypeError on static sizes is a bug and is raised as it is."""
    dynamic = [v for v in values if v is not None and v.is_dynamic]
    if not dynamic:
        raise exc
    return UnsupportedError(f"{describe(node)}: supports static sizes only, and "
                            f"{dynamic[0].name!r} has shape {list(dynamic[0].shape)} (a dynamic "
                            f"size: give it a fixed --shape)")

