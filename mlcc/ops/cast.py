"""Cast and CastLike between the run-time types (float32, int64, int32, int8, uint8, bool), on
one kernel, mlcc_cast. Other types (float16, double, float8, strings) are refused; `saturate`
only concerns float8 targets, so it is accepted and has no effect."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from .common import C_DTYPES, emit_plain_copy, require_dtype
from .registry import OpDef, register

RUNTIME_DTYPES = list(C_DTYPES)


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
        kind = " (float8 types are not supported)" if name.startswith("FLOAT8") else ""
        raise UnsupportedError(f"casting to {name} is not supported{kind}; supported targets: "
                               f"{', '.join(RUNTIME_DTYPES)}")
    return dtype


def emit_cast(lo: Lowering, src: str, dst: str, op: str = "Cast") -> None:
    a, b = lo.value(src), lo.value(dst)
    if a.dtype == b.dtype:
        emit_plain_copy(lo, src, dst, op=op)
        return
    lo.call("mlcc_cast", [src, dst], [dst], params_type="mlcc_cast_params",
            params={"n": a.numel, "from": Enum(C_DTYPES[a.dtype]), "to": Enum(C_DTYPES[b.dtype])},
            op=op)


@register("Cast", since=6)
class Cast(OpDef):
    attributes = {"to": None, "saturate": None}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], RUNTIME_DTYPES)
        if node.attr("to") is None:
            raise ModelError("Cast needs a 'to' attribute")
        return [(onnx_type_to_dtype(node.attr("to")), x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_cast(lo, node.inputs[0], node.outputs[0], op=node.op_type)


@register("CastLike", since=15)
class CastLike(OpDef):
    attributes = {"saturate": None}

    def infer(self, node, ins, g):
        x, like = ins[0], ins[1]
        require_dtype(node, [x], RUNTIME_DTYPES)
        if like.dtype not in RUNTIME_DTYPES:
            raise UnsupportedError(f"casting to {like.dtype} is not supported; supported "
                                   f"targets: {', '.join(RUNTIME_DTYPES)}")
        return [(like.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_cast(lo, node.inputs[0], node.outputs[0], op=node.op_type)
