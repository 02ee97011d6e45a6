"""ArgMax/ArgMin, CumSum, CumProd, GatherElements, ReverseSequence
(runtime_c/kernels/indexing.c) and Trilu (a Where with a constant mask)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError
from ..ir import Enum, Lowering, Node
from .common import (C_DTYPES, MAX_RANK, check_elements_indices, const_input,
                     contiguous_strides, norm_axis, require_dtype)
from .registry import OpDef, register


def _split(shape, axis):
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


# ArgMax's and ArgMin's input types with a kernel (float16 is computed in float32:
# passes/float32_compute.py; the order of its values is the same)
ARG_DTYPES = ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64")


class _ArgReduce(OpDef):
    attributes = {"axis": None, "keepdims": lambda v: v in (0, 1),
                  "select_last_index": lambda v: v in (0, 1)}
    is_min = 0

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], list(ARG_DTYPES))
        if not x.shape:
            raise ModelError(f"{node.op_type} needs a tensor of rank >= 1")
        axis = norm_axis(int(node.attr("axis", 0)), len(x.shape))
        if x.shape[axis] == 0:
            raise ModelError(f"{node.op_type} over an empty axis")
        shape = list(x.shape)
        if node.attr("keepdims", 1):
            shape[axis] = 1
        else:
            del shape[axis]
        return [("int64", tuple(shape))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axis = norm_axis(int(node.attr("axis", 0)), len(x.shape))
        outer, dim, inner = _split(x.shape, axis)
        lo.call("mlcc_arg_reduce", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_arg_reduce_params",
                params={"outer": outer, "dim": dim, "inner": inner,
                        "dtype": Enum(C_DTYPES[x.dtype]), "is_min": self.is_min,
                        "select_last": int(node.attr("select_last_index", 0))})

    def flops(self, node, g):
        return g.values[node.inputs[0]].numel


@register("ArgMax")
class ArgMax(_ArgReduce):
    is_min = 0


@register("ArgMin")
class ArgMin(_ArgReduce):
    is_min = 1


@register("CumSum", since=11)
class CumSum(OpDef):
    attributes = {"exclusive": lambda v: v in (0, 1), "reverse": lambda v: v in (0, 1)}
    kernel = "mlcc_cumsum"

    def _axis(self, node, g, rank):
        a = const_input(g, node, 1, "axis")
        if a is None or np.asarray(a).size != 1:
            raise ModelError(f"{node.op_type} needs one axis")
        return norm_axis(int(np.asarray(a).reshape(-1)[0]), rank)

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ["float32", "float64", "int32", "int64", "uint32", "uint64"])
        if not x.shape:
            raise ModelError(f"{node.op_type} needs a tensor of rank >= 1")
        self._axis(node, g, len(x.shape))
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        outer, dim, inner = _split(x.shape, self._axis(node, lo.graph, len(x.shape)))
        lo.call(self.kernel, [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type=f"{self.kernel}_params",
                params={"outer": outer, "dim": dim, "inner": inner,
                        "dtype": Enum(C_DTYPES[x.dtype]),
                        "exclusive": int(node.attr("exclusive", 0)),
                        "reverse": int(node.attr("reverse", 0))})

    def flops(self, node, g):
        return g.values[node.inputs[0]].numel


@register("CumProd", since=26)
class CumProd(CumSum):
    kernel = "mlcc_cumprod"


@register("ReverseSequence", since=10)
class ReverseSequence(OpDef):
    """sequence_lens is read at run time; a length outside [0, time] makes the call return
    MLCC_ERR_INDEX_OUT_OF_RANGE (constant ones are checked at compile time)."""
    attributes = {"batch_axis": lambda v: v in (0, 1), "time_axis": lambda v: v in (0, 1)}

    def infer(self, node, ins, g):
        x, lens = ins
        require_dtype(node, [x], list(C_DTYPES))
        b, t = int(node.attr("batch_axis", 1)), int(node.attr("time_axis", 0))
        if b == t:
            raise ModelError("batch_axis and time_axis must differ")
        if len(x.shape) < 2:
            raise ModelError("ReverseSequence needs a tensor of rank >= 2")
        if lens.dtype != "int64" or tuple(lens.shape) != (x.shape[b],):
            raise ModelError(f"sequence_lens must be int64 of shape [{x.shape[b]}]")
        const = g.const(node.inputs[1])
        if const is not None and const.size and (const.min() < 0 or const.max() > x.shape[t]):
            raise ModelError(f"a sequence length is outside [0, {x.shape[t]}]")
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        if x.numel == 0:
            return
        t = int(node.attr("time_axis", 0))
        inner = math.prod(x.shape[2:])
        batch, time = (x.shape[1], x.shape[0]) if t == 0 else (x.shape[0], x.shape[1])
        strides = (inner, batch * inner) if t == 0 else (time * inner, inner)
        lo.call("mlcc_reverse_sequence", [x.name, node.inputs[1], node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_reverse_sequence_params",
                params={"batch": batch, "time": time, "inner": inner,
                        "batch_stride": strides[0], "time_stride": strides[1],
                        "elem_size": np.dtype(x.dtype).itemsize},
                returns_status=True)


@register("GatherElements", since=11)
class GatherElements(OpDef):
    """Indices computed at run time are checked by the kernel (MLCC_ERR_INDEX_OUT_OF_RANGE);
    constant ones at compile time."""
    attributes = {"axis": None}

    def infer(self, node, ins, g):
        data, idx = ins
        require_dtype(node, [data], list(C_DTYPES))
        check_elements_indices(g, node, data, idx)
        return [(data.dtype, idx.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        data, idx, out = (lo.value(n) for n in (node.inputs[0], node.inputs[1],
                                               node.outputs[0]))
        if out.numel == 0:
            return
        axis = norm_axis(int(node.attr("axis", 0)), len(data.shape))
        pad = MAX_RANK - len(out.shape)
        kernel = "mlcc_gather_elements__i64" if idx.dtype == "int64" else \
            "mlcc_gather_elements__i32"
        lo.call(kernel, [data.name, idx.name, out.name], [out.name],
                params_type="mlcc_gather_elements_params",
                params={"rank": len(out.shape), "axis": axis,
                        "elem_size": np.dtype(data.dtype).itemsize,
                        "axis_dim": data.shape[axis], "shape": list(out.shape) + [1] * pad,
                        "data_strides": contiguous_strides(data.shape) + [0] * pad},
                returns_status=True)


@register("Trilu", since=14)
class Trilu(OpDef):
    """Keeps the upper (upper=1) or lower triangle, shifted by k (a constant): a Where with a
    constant [rows, cols] mask broadcast over the batch."""
    attributes = {"upper": lambda v: v in (0, 1)}

    def _mask(self, node, g, shape):
        k = const_input(g, node, 1, "k")
        k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        r, c = shape[-2], shape[-1]
        i, j = np.arange(r)[:, None], np.arange(c)[None, :]
        return (j - i >= k) if node.attr("upper", 1) else (j - i <= k)

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], list(C_DTYPES))
        if len(x.shape) < 2:
            raise ModelError("Trilu needs a tensor of rank >= 2")
        self._mask(node, g, x.shape)
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        from .logical import emit_where
        x = lo.value(node.inputs[0])
        mask = lo.add_const(f"{node.name}.mask", self._mask(node, lo.graph, x.shape))
        zero = lo.add_const(f"{node.name}.zero", np.zeros((), dtype=x.dtype))
        emit_where(lo, mask, node.inputs[0], zero, node.outputs[0])
