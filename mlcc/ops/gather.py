"""Gather along one axis, for every dtype. Constant indices are checked at compile time and,
when they step evenly (one index, a range, a reversal), become a strided copy; other indices go
through mlcc_gather__i64/__i32, which checks each index at run time and fails the call with
MLCC_ERR_INDEX_OUT_OF_RANGE instead of reading out of bounds."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError
from ..ir import Lowering, Node
from .common import C_DTYPES, emit_copy, norm_axis, require_dtype
from .registry import OpDef, register

INDEX_KERNELS = {"int64": "mlcc_gather__i64", "int32": "mlcc_gather__i32"}


def _even_step(idx: np.ndarray) -> int | None:
    """The common difference of a 1-D index list, or None if it has none."""
    if idx.size == 1:
        return 0
    steps = np.diff(idx)
    return int(steps[0]) if np.all(steps == steps[0]) else None


@register("Gather")
class Gather(OpDef):
    attributes = {"axis": None}

    def infer(self, node, ins, g):
        data, indices = ins[0], ins[1]
        require_dtype(node, [data], list(C_DTYPES))
        if indices.dtype not in INDEX_KERNELS:
            raise ModelError(f"indices must be int32 or int64, not {indices.dtype}")
        if not data.shape:
            raise ModelError("Gather needs data of rank >= 1")
        axis = norm_axis(int(node.attr("axis", 0)), len(data.shape))
        const = g.const(node.inputs[1])
        if const is not None:
            dim = data.shape[axis]
            bad = const[(const < -dim) | (const >= dim)]
            if bad.size:
                raise ModelError(f"index {int(bad.reshape(-1)[0])} is out of range for axis "
                                 f"{axis} of size {dim}")
        return [(data.dtype, data.shape[:axis] + tuple(indices.shape) + data.shape[axis + 1:])]

    def lower(self, node: Node, lo: Lowering) -> None:
        data, indices, out = (lo.value(n) for n in (node.inputs[0], node.inputs[1],
                                                   node.outputs[0]))
        axis = norm_axis(int(node.attr("axis", 0)), len(data.shape))
        outer = math.prod(data.shape[:axis])
        dim = data.shape[axis]
        inner = math.prod(data.shape[axis + 1:])
        n = indices.numel
        if out.numel == 0:
            return
        if indices.is_const:
            idx = np.asarray(indices.const, dtype=np.int64).reshape(-1)
            idx = np.where(idx < 0, idx + dim, idx)
            step = _even_step(idx)
            if step is not None:
                emit_copy(lo, data.name, out.name, [outer, n, inner],
                          [dim * inner, step * inner, 1], [n * inner, inner, 1],
                          src_offset=int(idx[0]) * inner, op=node.op_type)
                return
            index_name = lo.add_const(f"{node.name}.indices", idx)
        else:
            index_name = indices.name
        kernel = INDEX_KERNELS[lo.value(index_name).dtype]
        lo.call(kernel, [data.name, index_name, out.name], [out.name],
                params_type="mlcc_gather_params",
                params={"outer": outer, "axis_dim": dim, "inner": inner, "n_indices": n,
                        "elem_size": np.dtype(data.dtype).itemsize},
                returns_status=True)
