"""Elementwise float operators: activations and math functions (one unary kernel) and
broadcasting arithmetic (one binary kernel)."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..ir import Enum, Graph, Lowering, Node
from .common import (C_DTYPES, INT_DTYPES, MAX_RANK, act_params, broadcast_shapes,
                     broadcast_strides, emit_plain_copy, merge_broadcast_axes, require_dtype)
from .registry import OpDef, register


class _Unary(OpDef):
    attributes = {}
    unary_op = "ACT"
    act = ("NONE", 0.0, 0.0)

    def act_of(self, node: Node, g: Graph) -> tuple[str, float, float]:
        return self.act

    def params_of(self, node: Node) -> tuple[float, float]:
        return 0.0, 0.0

    def unary_op_of(self, node: Node) -> str:
        return self.unary_op

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], ["float32"])
        return [(ins[0].dtype, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        kind, a, b = self.act_of(node, lo.graph)
        alpha, beta = self.params_of(node)
        fake = Node("", "", [], [], {"_act": (kind, a, b)})
        lo.call("mlcc_f32_unary", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_unary_params",
                params={"n": x.numel, "op": Enum(f"MLCC_UNARY_{self.unary_op_of(node)}"),
                        "alpha": float(alpha), "beta": float(beta), "act": act_params(fake)})

    def flops(self, node, g):
        return g.values[node.outputs[0]].numel


def _unary(op_type: str, unary_op: str = "ACT", act: tuple = ("NONE", 0.0, 0.0), **kw):
    cls = type(op_type, (_Unary,), {"unary_op": unary_op, "act": act, **kw})
    register(op_type)(cls)
    return cls


_unary("Relu", act=("RELU", 0.0, 0.0))
_unary("Sigmoid", act=("SIGMOID", 0.0, 0.0))
_unary("Tanh", act=("TANH", 0.0, 0.0))
_unary("HardSwish", act=("HARD_SWISH", 0.0, 0.0))
for _name, _op in [("Exp", "EXP"), ("Log", "LOG"), ("Sqrt", "SQRT"), ("Neg", "NEG"),
                   ("Abs", "ABS"), ("Reciprocal", "RECIPROCAL"), ("Erf", "ERF"),
                   ("Floor", "FLOOR"), ("Ceil", "CEIL"), ("Round", "ROUND"), ("Sin", "SIN"),
                   ("Cos", "COS"), ("Softplus", "SOFTPLUS"), ("Softsign", "SOFTSIGN"),
                   ("Sign", "SIGN"), ("Mish", "MISH")]:
    _unary(_name, _op)


@register("LeakyRelu")
class LeakyRelu(_Unary):
    attributes = {"alpha": None}

    def act_of(self, node, g):
        return ("LEAKY_RELU", float(node.attr("alpha", 0.01)), 0.0)


@register("Swish")
class Swish(_Unary):
    """x * sigmoid(alpha * x) (ONNX opset 24); passes.fuse_silu also writes it for the
    Mul(x, Sigmoid(x)) of SiLU networks, so it fuses into a producing convolution."""
    attributes = {"alpha": None}

    def act_of(self, node, g):
        return ("SILU", float(node.attr("alpha", 1.0)), 0.0)


@register("HardSigmoid")
class HardSigmoid(_Unary):
    attributes = {"alpha": None, "beta": None}

    def act_of(self, node, g):
        return ("HARD_SIGMOID", float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))


@register("Elu")
class Elu(_Unary):
    attributes = {"alpha": None}
    unary_op = "ELU"

    def params_of(self, node):
        return float(node.attr("alpha", 1.0)), 0.0


@register("Selu")
class Selu(_Unary):
    attributes = {"alpha": None, "gamma": None}
    unary_op = "SELU"

    def params_of(self, node):
        return float(node.attr("alpha", 1.67326319217681884765625)), \
            float(node.attr("gamma", 1.05070102214813232421875))


@register("Celu")
class Celu(_Unary):
    attributes = {"alpha": None}
    unary_op = "CELU"

    def params_of(self, node):
        return float(node.attr("alpha", 1.0)), 0.0


@register("ThresholdedRelu")
class ThresholdedRelu(_Unary):
    attributes = {"alpha": None}
    unary_op = "THRESHOLDED_RELU"

    def params_of(self, node):
        return float(node.attr("alpha", 1.0)), 0.0


@register("Gelu")
class Gelu(_Unary):
    attributes = {"approximate": lambda v: v in ("none", "tanh")}

    def unary_op_of(self, node):
        return "GELU_TANH" if node.attr("approximate", "none") == "tanh" else "GELU"


@register("Clip")
class Clip(_Unary):
    """Float32 Clip with constant bounds is an activation (it fuses into a producer); bounds
    computed at run time, and integer tensors, run as Max then Min with the bound tensors."""
    attributes = {"min": None, "max": None}

    def _plain(self, node, g) -> bool:
        return g.values[node.inputs[0]].dtype == "float32" and (node.version < 11 or all(
            not node.input(i) or g.const(node.input(i)) is not None for i in (1, 2)))

    def infer(self, node, ins, g):
        x = ins[0]
        if node.version < 11:
            require_dtype(node, [x], ["float32"])
        else:
            require_dtype(node, [v for v in ins if v is not None], ["float32"] + INT_DTYPES)
        return [(x.dtype, x.shape)]

    def act_of(self, node, g):
        if node.version < 11:
            lo_v, hi_v = node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)
        else:
            lo_a, hi_a = g.const(node.input(1)), g.const(node.input(2))
            # bounds of shape [1] (onnxruntime accepts them) as well as scalars
            lo_v = float(lo_a.reshape(-1)[0]) if lo_a is not None else -3.4028234663852886e38
            hi_v = float(hi_a.reshape(-1)[0]) if hi_a is not None else 3.4028234663852886e38
        return ("CLIP", float(lo_v), float(hi_v))

    def lower(self, node: Node, lo: Lowering) -> None:
        if self._plain(node, lo.graph):
            super().lower(node, lo)
            return
        x, out = node.inputs[0], node.outputs[0]
        bounds = [(op, node.input(i)) for op, i in (("MAX", 1), ("MIN", 2)) if node.input(i)]
        if not bounds:
            emit_plain_copy(lo, x, out, op="Clip")
            return
        src = x
        for op, b in bounds:
            emit_arith(lo, op, src, b, out)
            src = out


# ---------------------------------------------------------------------------------------------
# Broadcasting binary operators

def emit_binary(lo: Lowering, op: str, a: str, b: str, out: str) -> None:
    out_shape = lo.value(out).shape
    sa = broadcast_strides(lo.value(a).shape, out_shape)
    sb = broadcast_strides(lo.value(b).shape, out_shape)
    dims, (sa, sb) = merge_broadcast_axes(out_shape, [sa, sb])
    pad = MAX_RANK - len(dims)
    lo.call("mlcc_f32_binary", [a, b, out], [out], params_type="mlcc_binary_params",
            params={"op": Enum(f"MLCC_BINARY_{op}"), "rank": len(dims),
                    "shape": dims + [1] * pad, "a_strides": sa + [0] * pad,
                    "b_strides": sb + [0] * pad})


# Binary ops that also have an integer kernel (mlcc_int_binary), by their float name.
INT_BINARY_OPS = {"ADD", "SUB", "MUL", "DIV", "MAX", "MIN", "POW", "MOD", "FMOD"}


def emit_int_binary(lo: Lowering, op: str, a: str, b: str, out: str) -> None:
    out_shape = lo.value(out).shape
    sa = broadcast_strides(lo.value(a).shape, out_shape)
    sb = broadcast_strides(lo.value(b).shape, out_shape)
    dims, (sa, sb) = merge_broadcast_axes(out_shape, [sa, sb])
    pad = MAX_RANK - len(dims)
    lo.call("mlcc_int_binary", [a, b, out], [out], params_type="mlcc_int_binary_params",
            params={"op": Enum(f"MLCC_INT_{op}"), "dtype": Enum(C_DTYPES[lo.value(out).dtype]),
                    "rank": len(dims), "shape": dims + [1] * pad,
                    "a_strides": sa + [0] * pad, "b_strides": sb + [0] * pad})


def emit_arith(lo: Lowering, op: str, a: str, b: str, out: str) -> None:
    """The float or the integer kernel, by the output's type."""
    if lo.value(out).dtype == "float32":
        emit_binary(lo, op, a, b, out)
    else:
        emit_int_binary(lo, op, a, b, out)


class _Binary(OpDef):
    attributes = {"broadcast": None, "axis": None}   # opset < 7 legacy broadcasting
    binary_op = "ADD"

    def dtypes(self) -> list[str]:
        return ["float32"] + (INT_DTYPES if self.binary_op in INT_BINARY_OPS else [])

    def check(self, node):
        problems = super().check(node)
        if node.attr("axis") is not None and node.version < 7:
            problems.append("legacy broadcast with an axis attribute is not supported")
        return problems

    def infer(self, node, ins, g):
        require_dtype(node, ins, self.dtypes())
        return [(ins[0].dtype, broadcast_shapes(*(v.shape for v in ins)))]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_arith(lo, self.binary_op, node.inputs[0], node.inputs[1], node.outputs[0])

    def flops(self, node, g):
        return g.values[node.outputs[0]].numel


for _name, _op in [("Add", "ADD"), ("Sub", "SUB"), ("Mul", "MUL"), ("Div", "DIV"),
                   ("PRelu", "PRELU")]:
    register(_name)(type(_name, (_Binary,), {"binary_op": _op}))


@register("Pow")
class Pow(_Binary):
    """Pow allows an exponent of another type. A float base with an integer exponent converts
    the exponent (at compile time when constant); an integer base with a float exponent is
    computed in float32 and truncated back; integer with integer multiplies."""
    binary_op = "POW"

    def infer(self, node, ins, g):
        base, exp = ins
        for v in (base, exp):
            require_dtype(node, [v], self.dtypes())
        return [(base.dtype, broadcast_shapes(base.shape, exp.shape))]

    def lower(self, node: Node, lo: Lowering) -> None:
        from .cast import emit_cast
        base, exp, out = node.inputs[0], node.inputs[1], node.outputs[0]
        bt, et = lo.value(base).dtype, lo.value(exp).dtype
        if bt == "float32" or et == "float32":
            if et != "float32":
                arr = lo.graph.const(exp)
                if arr is not None:
                    exp = lo.add_const(f"{node.name}.exponent", arr.astype(np.float32))
                else:
                    tmp = lo.temp(f"{exp}.f32", "float32", lo.value(exp).shape)
                    emit_cast(lo, exp, tmp, op="Pow")
                    exp = tmp
            if bt != "float32":
                fb = lo.temp(f"{base}.f32", "float32", lo.value(base).shape)
                emit_cast(lo, base, fb, op="Pow")
                fo = lo.temp(f"{out}.f32", "float32", lo.value(out).shape)
                emit_binary(lo, "POW", fb, exp, fo)
                emit_cast(lo, fo, out, op="Pow")
                return
            emit_binary(lo, "POW", base, exp, out)
            return
        if et != bt:
            tmp = lo.temp(f"{exp}.{bt}", bt, lo.value(exp).shape)
            emit_cast(lo, exp, tmp, op="Pow")
            exp = tmp
        emit_int_binary(lo, "POW", base, exp, out)


@register("Mod", since=10)
class Mod(_Binary):
    """fmod=0: the result takes the divisor's sign (Python's %); fmod=1: the dividend's
    (C's fmod and %)."""
    attributes = {"fmod": lambda v: v in (0, 1)}
    binary_op = "MOD"

    def lower(self, node: Node, lo: Lowering) -> None:
        op = "FMOD" if node.attr("fmod", 0) else "MOD"
        emit_arith(lo, op, node.inputs[0], node.inputs[1], node.outputs[0])


class _Variadic(_Binary):
    """Sum, Max, Min, Mean: a chain of binary kernels, the first writing the output."""
    attributes = {}
    scale_mean = False

    def infer(self, node, ins, g):
        if not ins:
            raise ModelError(f"{node.op_type} needs at least one input")
        return super().infer(node, ins, g)

    def lower(self, node: Node, lo: Lowering) -> None:
        ins, out = node.inputs, node.outputs[0]
        if len(ins) == 1:
            emit_plain_copy(lo, ins[0], out, op=node.op_type)
            return
        acc = ins[0]
        for i, name in enumerate(ins[1:]):
            last = i == len(ins) - 2
            # Partial results take the full output shape only when broadcasting demands it.
            dst = out if last else lo.temp(f"{out}.partial{i}", lo.value(out).dtype,
                                           broadcast_shapes(lo.value(acc).shape,
                                                            lo.value(name).shape))
            emit_arith(lo, self.binary_op, acc, name, dst)
            acc = dst
        if self.scale_mean:
            scale = lo.add_const(f"{node.name}.inv_count",
                                 np.array(1.0 / len(ins), dtype=np.float32))
            emit_binary(lo, "MUL", out, scale, out)


for _name, _op, _mean in [("Sum", "ADD", False), ("Max", "MAX", False), ("Min", "MIN", False)]:
    register(_name)(type(_name, (_Variadic,), {"binary_op": _op, "scale_mean": _mean}))


@register("Mean")
class Mean(_Variadic):
    binary_op = "ADD"
    scale_mean = True

    def dtypes(self):
        return ["float32"]
