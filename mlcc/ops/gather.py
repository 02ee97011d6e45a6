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
from .registry import OpDef, refuse_dynamic, register

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
        if const is not None and const.dtype != object:     # (sizes: checked at run time)
            dim = data.shape[axis]
            bad = const[(const < -dim) | (const >= dim)]
            if bad.size:
                raise ModelError(f"index {int(bad.reshape(-1)[0])} is out of range for axis "
                                 f"{axis} of size {dim}")
        return [(data.dtype, data.shape[:axis] + tuple(indices.shape) + data.shape[axis + 1:])]

    def dynamic(self, node, ins, g):
        data, indices = ins[0], ins[1]
        axis = norm_axis(int(node.attr("axis", 0)), len(data.shape))
        if data.dyn is not None and indices.dyn is None and data.dyn[0] != axis:
            a = data.dyn[0]
            return [(a if a < axis else a + len(indices.shape) - 1, data.dyn[1])]
        if data.dyn is None and indices.dyn is not None:
            return [(axis + indices.dyn[0], indices.dyn[1])]
        if data.dyn is not None and data.dyn[0] == axis:    # indices checked against the count
            return [None if indices.dyn is None else (axis + indices.dyn[0], indices.dyn[1])]
        refuse_dynamic(node, [data], "gathers along another axis with indices of a "
                                     "data-dependent size too")
        return [None]

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
        params = {"outer": outer, "axis_dim": dim, "inner": inner, "n_indices": n,
                  "elem_size": np.dtype(data.dtype).itemsize}
        if data.dyn is not None and data.dyn[0] == axis:
            self._counted_data(node, lo, data, indices, out, params)
            return
        if indices.is_const and indices.const.dtype != object:
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
        if indices.dyn is not None:     # only the indices before the run-time count
            a = indices.dyn[0]
            lo.call(kernel.replace("__", "__counted_"),
                    [data.name, index_name, lo.count_of(indices.name), out.name], [out.name],
                    params_type="mlcc_gather_counted_params",
                    params={"gather": params, "idx_max": indices.shape[a],
                            "idx_inner": math.prod(indices.shape[a + 1:])},
                    returns_status=True)
            return
        lo.call(kernel, [data.name, index_name, out.name], [out.name],
                params_type="mlcc_gather_params", params=params, returns_status=True)

    def _counted_data(self, node, lo, data, indices, out, params) -> None:
        """Data with a data-dependent size along the axis: the indices (constant ones too, never
        wrapped by the maximum) are checked against, and negative ones wrapped by, the run-time
        count (mlcc_gather__counted_data_i64); indices of a data-dependent size as above."""
        index_name = indices.name if not indices.is_const else lo.add_const(
            f"{node.name}.indices", np.asarray(indices.const, dtype=np.int64))
        a = indices.dyn[0] if indices.dyn is not None else None
        lo.call(INDEX_KERNELS[lo.value(index_name).dtype].replace("__", "__counted_data_"),
                [data.name, lo.count_of(data.name), index_name,
                 lo.count_of(indices.name) if a is not None else "", out.name], [out.name],
                params_type="mlcc_gather_counted_params",
                params={"gather": params, "idx_max": 1 if a is None else indices.shape[a],
                        "idx_inner": 1 if a is None else math.prod(indices.shape[a + 1:])},
                returns_status=True)
