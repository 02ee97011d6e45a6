"""Cast and CastLike between every run-time type (common.C_DTYPES) and the storage-only types
(common.STORAGE_DTYPES: bfloat16, float8, float8 e8m0, float4 e2m1, int4, uint4, int2, uint2),
on one kernel, mlcc_cast (runtime_c/kernels/cast.h states the conversion rules). `saturate`
concerns float8 targets and float8 e8m0, `round_mode` float8 e8m0. Strings are refused.
BitCast (opset 26) reinterprets the bits between types of the same width."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ..errors import ModelError, UnsupportedError
from ..ir import PACKED_BITS, Enum, Lowering, Node
from .common import IO_DTYPES, elementwise_dynamic, emit_plain_copy, require_dtype
from .registry import OpDef, register

RUNTIME_DTYPES = list(IO_DTYPES)
ROUND_MODES = {"up": "MLCC_ROUND_UP", "down": "MLCC_ROUND_DOWN", "nearest": "MLCC_ROUND_NEAREST"}


def onnx_type_to_dtype(to: int) -> str:
    """The numpy dtype name of a TensorProto element type, refusing types without a kernel."""
    try:
        name = TensorProto.DataType.Name(int(to))
    except ValueError:
        raise ModelError(f"unknown element type {to}") from None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(to))).name
    except Exception:
        dtype = None
    if dtype not in RUNTIME_DTYPES:
        kind = (" (strings have no run-time representation in mlcc's static C runtime)"
                if name == "STRING" else "")
        raise UnsupportedError(f"casting to {name} is not supported{kind}; supported targets: "
                               f"{', '.join(RUNTIME_DTYPES)}")
    return dtype


def target_dtype(node: Node, x) -> str:
    """The dtype of Cast's or BitCast's `to`, for input value x (of a run-time type)."""
    require_dtype(node, [x], RUNTIME_DTYPES)
    if node.attr("to") is None:
        raise ModelError(f"{node.op_type} needs a 'to' attribute")
    return onnx_type_to_dtype(node.attr("to"))


def round_mode(node: Node) -> str:
    mode = node.attr("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ROUND_MODES:
        raise ModelError(f"round_mode must be one of {', '.join(ROUND_MODES)}, not {mode!r}")
    return mode


def emit_cast(lo: Lowering, src: str, dst: str, op: str = "Cast", saturate: int = 1,
              mode: str = "up") -> None:
    a, b = lo.value(src), lo.value(dst)
    if a.dtype == b.dtype:
        emit_plain_copy(lo, src, dst, op=op)
        return
    lo.call("mlcc_cast", [src, dst], [dst], params_type="mlcc_cast_params",
            params={"n": a.numel, "from": Enum(IO_DTYPES[a.dtype]),
                    "to": Enum(IO_DTYPES[b.dtype]), "saturate": 1 if saturate else 0,
                    "round_mode": Enum(ROUND_MODES[mode])},
            op=op)


@register("Cast", since=6)
class Cast(OpDef):
    attributes = {"to": None, "saturate": None, "round_mode": None}

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        to = target_dtype(node, ins[0])
        round_mode(node)
        return [(to, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_cast(lo, node.inputs[0], node.outputs[0], op=node.op_type,
                  saturate=node.attr("saturate", 1), mode=round_mode(node))


@register("CastLike", since=15)
class CastLike(OpDef):
    attributes = {"saturate": None, "round_mode": None}

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins[:1], g)

    def infer(self, node, ins, g):
        x, like = ins[0], ins[1]
        require_dtype(node, [x], RUNTIME_DTYPES)
        if like.dtype not in RUNTIME_DTYPES:
            raise UnsupportedError(f"casting to {like.dtype} is not supported; supported "
                                   f"targets: {', '.join(RUNTIME_DTYPES)}")
        round_mode(node)
        return [(like.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_cast(lo, node.inputs[0], node.outputs[0], op=node.op_type,
                  saturate=node.attr("saturate", 1), mode=round_mode(node))


def _bits(dtype: str) -> int:
    return PACKED_BITS.get(dtype) or np.dtype(dtype).itemsize * 8


@register("BitCast", since=26)
class BitCast(OpDef):
    """The same bits as another type of the same width (every run-time and storage type:
    common.IO_DTYPES; strings and complex numbers have none): a view of the input's memory,
    or a copy where the input is a graph input (its C pointer has the input's type) or either
    is a graph output."""
    attributes = {"to": None}

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        x = ins[0]
        to = target_dtype(node, x)
        if _bits(to) != _bits(x.dtype):
            raise ModelError(f"BitCast from {x.dtype} ({_bits(x.dtype)} bits) to {to} "
                             f"({_bits(to)} bits): the widths must be equal")
        return [(to, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        src, dst = node.inputs[0], node.outputs[0]
        g = lo.graph
        if lo.program.root(src) in g.inputs or src in g.outputs or dst in g.outputs:
            emit_plain_copy(lo, src, dst, op=node.op_type)
        else:
            lo.alias(dst, src)
