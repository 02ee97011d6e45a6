"""Elementwise float operators: activations and math functions (one unary kernel) and
broadcasting arithmetic (one binary kernel)."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..ir import Enum, Lowering, Node
from .activations import ACTIVATIONS, NO_ACT, act_from_attrs, act_struct
from .common import (C_DTYPES, INT_DTYPES, MAX_RANK, broadcast_shapes, broadcast_strides,
                     elementwise_dynamic, emit_plain_copy, merge_broadcast_axes, require_dtype)
from .registry import OpDef, register

FLT_MAX = float(np.finfo(np.float32).max)


class _Unary(OpDef):
    """y = f(x) through mlcc_f32_unary: MLCC_UNARY_<unary_op>, or (unary_op "ACT") the
    activation this node's `activation` hook gives, through the epilogues' code."""
    attributes = {}
    unary_op = "ACT"

    def params_of(self, node: Node) -> tuple[float, float]:
        return 0.0, 0.0

    def unary_op_of(self, node: Node) -> str:
        return self.unary_op

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], ["float32"])
        return [(ins[0].dtype, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        op = self.unary_op_of(node)
        self._emit(node, lo, op, self.activation(node, lo.graph) if op == "ACT" else NO_ACT)

    def _emit(self, node: Node, lo: Lowering, op: str, act: tuple) -> None:
        x = lo.value(node.inputs[0])
        alpha, beta = self.params_of(node)
        lo.call("mlcc_f32_unary", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_unary_params",
                params={"n": x.numel, "plane": _plane(x.shape),
                        "op": Enum(f"MLCC_UNARY_{op}"), "alpha": float(alpha),
                        "beta": float(beta), "act": act_struct(act)},
                pool=True)

    def flops(self, node, g):
        return g.values[node.outputs[0]].numel


def _plane(shape) -> int:
    """Elements per plane of an element-wise kernel's thread split (mlcc_unary_params.plane):
    the product of the last two dimensions of a tensor of rank 3 or more (NCHW: H x W), where
    both are static; else 0."""
    if len(shape) < 3 or not all(isinstance(d, int) for d in shape[-2:]):
        return 0
    return shape[-2] * shape[-1]


class _Activation(_Unary):
    """An operator of mlcc/ops/activations.py's table: (kind, alpha, beta) from its
    attributes; the quantizer runs the table kinds on uint8 codes. (Swish, ONNX opset 24, is
    also what passes.fuse_silu writes for the Mul(x, Sigmoid(x)) of SiLU networks, so that it
    fuses into a producing convolution.)"""

    def activation(self, node, g):
        return act_from_attrs(self.op_type, node)


for _act in ACTIVATIONS:
    if _act.onnx and _act.onnx not in ("Clip", "Gelu"):     # those two read more (below)
        register(_act.onnx)(type(_act.onnx, (_Activation,), {
            "attributes": {name: None for name, _ in _act.params},
            "quant_rules": ("table",) if _act.int8 == "table" else ()}))

# The other unary operators: ONNX op type, MLCC_UNARY_<op> (runtime_c/kernels/elementwise.h's
# MLCC_UNARY_OPS lists the C side; tests/test_activations.py checks that the two agree).
# Operators with attributes are the classes below.
UNARY_OPS = [("Exp", "EXP"), ("Log", "LOG"), ("Sqrt", "SQRT"), ("Neg", "NEG"), ("Abs", "ABS"),
             ("Reciprocal", "RECIPROCAL"), ("Erf", "ERF"), ("Floor", "FLOOR"),
             ("Ceil", "CEIL"), ("Round", "ROUND"), ("Sin", "SIN"), ("Cos", "COS"),
             ("Softplus", "SOFTPLUS"), ("Softsign", "SOFTSIGN"), ("Sign", "SIGN"),
             ("Mish", "MISH"), ("Tan", "TAN"), ("Asin", "ASIN"), ("Acos", "ACOS"),
             ("Atan", "ATAN"), ("Sinh", "SINH"), ("Cosh", "COSH"), ("Asinh", "ASINH"),
             ("Acosh", "ACOSH"), ("Atanh", "ATANH")]


class _IntUnary(_Unary):
    """Neg and Abs, also of integer tensors (T5's relative positions at run time, over a KV
    cache): 0 - x, and max(x, 0 - x), through mlcc_int_binary (two's complement: the most
    negative value stays itself, as in onnxruntime). Neg is defined for signed types only."""
    int_dtypes = ("int8", "int16", "int32", "int64")

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], ["float32", *self.int_dtypes])
        return [(ins[0].dtype, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, out = lo.value(node.inputs[0]), node.outputs[0]
        if x.dtype == "float32":
            super().lower(node, lo)
            return
        if x.dtype.startswith("uint"):            # Abs of an unsigned value: itself
            emit_plain_copy(lo, x.name, out, op=node.op_type)
            return
        zero = lo.add_const(f"{node.name}.zero", np.zeros((), x.dtype))
        neg = out if self.unary_op == "NEG" else lo.temp(f"{node.name}.neg", x.dtype, x.shape)
        emit_int_binary(lo, "SUB", zero, x.name, neg)
        if self.unary_op == "ABS":
            emit_int_binary(lo, "MAX", x.name, neg, out)


for _name, _op in UNARY_OPS:
    register(_name)(type(_name, (_IntUnary if _name in ("Neg", "Abs") else _Unary,),
                         {"unary_op": _op, **({"int_dtypes": (*_IntUnary.int_dtypes,
                                                               "uint8", "uint16", "uint32",
                                                               "uint64")}
                                              if _name == "Abs" else {})}))


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


@register("Shrink", since=9)
class Shrink(_Unary):
    """y = x + bias below -lambd, x - bias above lambd, 0 between (float32)."""
    attributes = {"lambd": None, "bias": None}
    unary_op = "SHRINK"

    def params_of(self, node):
        return float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))


@register("ThresholdedRelu")
class ThresholdedRelu(_Unary):
    attributes = {"alpha": None}
    unary_op = "THRESHOLDED_RELU"

    def params_of(self, node):
        return float(node.attr("alpha", 1.0)), 0.0


@register("Gelu")
class Gelu(_Unary):
    """Runs alone through its own unary code (erff, tanhf); fuses as MLCC_ACT_GELU or, the
    tanh approximation, MLCC_ACT_GELU_TANH."""
    attributes = {"approximate": lambda v: v in ("none", "tanh")}

    def unary_op_of(self, node):
        return "GELU_TANH" if node.attr("approximate", "none") == "tanh" else "GELU"

    def activation(self, node, g):
        return ("GELU", 0.0, 0.0) if node.attr("approximate", "none") == "none" else \
            ("GELU_TANH", 0.0, 0.0)


@register("Clip")
class Clip(_Unary):
    """Float32 Clip with constant scalar bounds is an activation (it fuses into a producer);
    bounds computed at run time, and integer tensors, run as Max then Min with the bound
    tensors."""
    attributes = {"min": None, "max": None}

    def infer(self, node, ins, g):
        x = ins[0]
        if node.version < 11:
            require_dtype(node, [x], ["float32"])
        else:
            require_dtype(node, [v for v in ins if v is not None], ["float32"] + INT_DTYPES)
        return [(x.dtype, x.shape)]

    def activation(self, node, g):
        if g.values[node.inputs[0]].dtype != "float32":
            return None
        if node.version < 11:
            return ("CLIP", float(node.attr("min", -np.inf)), float(node.attr("max", np.inf)))
        bounds = []
        for i, absent in ((1, -np.inf), (2, np.inf)):
            arr = g.const(node.input(i)) if node.input(i) else None
            if node.input(i) and (arr is None or arr.size != 1):
                return None
            # onnxruntime accepts bounds of shape [1] as well as scalars
            bounds.append(float(arr.reshape(-1)[0]) if arr is not None else absent)
        return ("CLIP", bounds[0], bounds[1])

    def lower(self, node: Node, lo: Lowering) -> None:
        act = self.activation(node, lo.graph)
        if act is not None:
            # alone, an absent bound clamps to the float range, as onnxruntime's Clip does
            # (+-inf become +-FLT_MAX); fused into an epilogue it stays +-inf
            self._emit(node, lo, "ACT", ("CLIP", max(act[1], -FLT_MAX), min(act[2], FLT_MAX)))
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
                    "b_strides": sb + [0] * pad}, pool=True)


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
    ufunc = None

    def dtypes(self) -> list[str]:
        return ["float32"] + (INT_DTYPES if self.binary_op in INT_BINARY_OPS else [])

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

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


# op type, MLCC_BINARY_<op>, the numpy function (float32 arithmetic, as the kernel computes
# it: the quantizer tabulates x op constant with it), the quantizer's rules
for _name, _op, _ufunc, _rules in [
        ("Add", "ADD", np.add, ("table", "add")), ("Sub", "SUB", np.subtract, ("table",)),
        ("Mul", "MUL", np.multiply, ("table", "channel_scale")),
        ("Div", "DIV", np.divide, ("table",)), ("PRelu", "PRELU", None, ())]:
    register(_name)(type(_name, (_Binary,), {"binary_op": _op, "ufunc": _ufunc,
                                             "quant_rules": _rules}))


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
        two = lo.graph.const(exp)
        if (bt == "float32" and two is not None and two.size and np.all(two == 2)
                and lo.value(out).shape == lo.value(base).shape):
            # squares (a power spectrum's, a variance's) as x * x, one rounding, as
            # onnxruntime computes them; powf took 4.6 ns per element
            emit_binary(lo, "MUL", base, base, out)
            return
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


# ---------------------------------------------------------------------------------------------
# Bitwise operators: integer tensors only, through mlcc_int_binary

class _Bitwise(_Binary):
    attributes = {}

    def dtypes(self):
        return INT_DTYPES

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_int_binary(lo, self.binary_op, node.inputs[0], node.inputs[1], node.outputs[0])


for _name, _op in [("BitwiseAnd", "AND"), ("BitwiseOr", "OR"), ("BitwiseXor", "XOR")]:
    register(_name, since=18)(type(_name, (_Bitwise,), {"binary_op": _op}))


@register("BitwiseNot", since=18)
class BitwiseNot(_Bitwise):
    """x XOR all ones."""

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], INT_DTYPES)
        return [(ins[0].dtype, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        dtype = lo.value(node.inputs[0]).dtype
        ones = lo.add_const(f"{node.name}.ones", np.array(np.iinfo(dtype).max if
                                                          dtype.startswith("u") else -1,
                                                          dtype=dtype))
        emit_int_binary(lo, "XOR", node.inputs[0], ones, node.outputs[0])


@register("BitShift", since=11)
class BitShift(_Bitwise):
    """Unsigned types, and from opset 28 signed ones too. A shift by the type's width or more
    (or by a negative amount) gives 0, or -1 for a negative value shifted right; right shifts
    of signed values are arithmetic, left shifts keep the low bits (onnx.reference's rules)."""
    attributes = {"direction": lambda v: v in ("LEFT", "RIGHT")}

    def check(self, node):
        problems = super().check(node)
        if node.attr("direction") is None:
            problems.append("BitShift needs a direction (LEFT or RIGHT)")
        return problems

    def infer(self, node, ins, g):
        allowed = INT_DTYPES if node.version >= 28 else ["uint8", "uint16", "uint32", "uint64"]
        require_dtype(node, ins, allowed)
        return [(ins[0].dtype, broadcast_shapes(*(v.shape for v in ins)))]

    def lower(self, node: Node, lo: Lowering) -> None:
        op = "SHL" if node.attr("direction") == "LEFT" else "SHR"
        emit_int_binary(lo, op, node.inputs[0], node.inputs[1], node.outputs[0])
