"""GatherND, ScatterND, ScatterElements, MaxUnpool, OneHot (runtime_c/kernels/scatter.c) and
EyeLike (a constant once shapes are static). Indices computed at run time are checked by the kernels
before anything is written (MLCC_ERR_INDEX_OUT_OF_RANGE); constant ones at compile time."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import PACKED_BITS, Enum, Lowering, Node
from .common import (C_DTYPES, IO_DTYPES, MAX_RANK, check_elements_indices, const_input,
                     contiguous_strides, emit_copy, emit_plain_copy, norm_axis, require_dtype)
from .registry import OpDef, refuse_dynamic, register

REDUCTIONS = {"none": "MLCC_SCATTER_NONE", "add": "MLCC_SCATTER_ADD",
              "mul": "MLCC_SCATTER_MUL", "max": "MLCC_SCATTER_MAX", "min": "MLCC_SCATTER_MIN"}
# The types the scatter reductions compute on (any type is moved by reduction none).
REDUCE_DTYPES = [d for d in C_DTYPES if d not in ("bool", "float16")]


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _check_const_nd(g, name: str, dims) -> None:
    """Constant N-D indices (last axis: the coordinates into dims) checked at compile time."""
    const = g.const(name)
    if const is None or not const.size:
        return
    tuples = np.asarray(const, dtype=np.int64).reshape(-1, len(dims))
    lim = np.asarray(dims, dtype=np.int64)
    if np.any((tuples < -lim) | (tuples >= lim)):
        raise ModelError(f"an index of {name!r} is out of range for dimensions {list(dims)}")


def _nd_params(data_shape, k: int, batch_dims: int, n: int, elem_size: int, dtype: str,
               reduction: str = "none") -> dict:
    inner = data_shape[batch_dims:]
    pad = MAX_RANK - k
    return {"batch": math.prod(data_shape[:batch_dims]), "n": n, "k": k,
            "slice": math.prod(inner[k:]), "batch_stride": math.prod(inner),
            "elem_size": elem_size, "dtype": Enum(C_DTYPES[dtype]),
            "reduction": Enum(REDUCTIONS[reduction]),
            "dims": list(inner[:k]) + [1] * pad,
            "strides": contiguous_strides(inner)[:k] + [0] * pad}


@register("GatherND", since=11)
class GatherND(OpDef):
    attributes = {"batch_dims": lambda v: v >= 0}

    def infer(self, node, ins, g):
        data, idx = ins
        require_dtype(node, [data], list(C_DTYPES))
        if idx.dtype != "int64":
            raise ModelError(f"GatherND indices must be int64, not {idx.dtype}")
        b = int(node.attr("batch_dims", 0))
        if not idx.shape or len(idx.shape) <= b or len(data.shape) <= b:
            raise ModelError(f"indices {list(idx.shape)} and data {list(data.shape)} need rank "
                             f"> batch_dims {b}")
        k = idx.shape[-1]
        if k > len(data.shape) - b or k > MAX_RANK:
            raise ModelError(f"index tuples of {k} do not fit data {list(data.shape)} after "
                             f"{b} batch dimensions")
        if tuple(idx.shape[:b]) != tuple(data.shape[:b]):
            raise ModelError(f"the batch dimensions of indices {list(idx.shape)} and data "
                             f"{list(data.shape)} differ")
        _check_const_nd(g, node.inputs[1], data.shape[b:b + k])
        return [(data.dtype, tuple(idx.shape[:-1]) + tuple(data.shape[b + k:]))]

    def dynamic(self, node, ins, g):
        """Indices with a data-dependent axis among their tuples (not a batch axis, not the
        tuples' own axis): that axis of the output, the kernel reading the count. Data with
        one among the sliced trailing axes: carried to the output's matching axis."""
        data, idx = ins
        b, k = int(node.attr("batch_dims", 0)), idx.shape[-1]
        if idx.dyn is not None and data.dyn is None and b <= idx.dyn[0] < len(idx.shape) - 1:
            return [idx.dyn]
        if data.dyn is not None and idx.dyn is None and data.dyn[0] >= b + k:
            return [(data.dyn[0] - b - k + len(idx.shape) - 1, data.dyn[1])]
        refuse_dynamic(node, [data, idx], "reads it only along an axis of the index tuples "
                                          "(not a batch axis, nor their last) or a sliced "
                                          "axis of the data")
        return [None]

    def lower(self, node: Node, lo: Lowering) -> None:
        data, idx, out = (lo.value(n) for n in (node.inputs[0], node.inputs[1],
                                               node.outputs[0]))
        if out.numel == 0:
            return
        b = int(node.attr("batch_dims", 0))
        n = math.prod(idx.shape[b:-1])
        params = _nd_params(data.shape, idx.shape[-1], b, n, np.dtype(data.dtype).itemsize,
                            data.dtype)
        if idx.dyn is not None:     # only the tuples before the run-time count
            a = idx.dyn[0]
            lo.call("mlcc_gather_nd__counted", [data.name, idx.name, lo.count_of(idx.name),
                                                out.name], [out.name],
                    params_type="mlcc_gather_nd_counted_params",
                    params={"nd": params, "idx_max": idx.shape[a],
                            "idx_inner": math.prod(idx.shape[a + 1:-1])},
                    returns_status=True)
            return
        lo.call("mlcc_gather_nd", [data.name, idx.name, out.name], [out.name],
                params_type="mlcc_nd_index_params", params=params, returns_status=True)


class _Scatter(OpDef):
    def check(self, node):
        problems = super().check(node)
        red = _str(node.attr("reduction", "none"))
        if red in ("max", "min") and node.version < 18:
            problems.append(f"reduction {red!r} needs opset 18")
        return problems

    def _common(self, node, ins):
        data, idx, upd = ins
        dtype = require_dtype(node, [data, upd], list(C_DTYPES))
        if _str(node.attr("reduction", "none")) != "none" and dtype not in REDUCE_DTYPES:
            raise UnsupportedError(f"reduction {node.attr('reduction')!r} on {dtype} tensors "
                                   f"is not supported (supported: {', '.join(REDUCE_DTYPES)})")
        return data, idx, upd

    def lower(self, node: Node, lo: Lowering) -> None:
        """The output starts as a copy of data; the kernel then updates it in place."""
        out, idx = lo.value(node.outputs[0]), lo.value(node.inputs[1])
        if out.numel == 0:
            return
        emit_plain_copy(lo, node.inputs[0], out.name, op=node.op_type)
        if idx.numel:
            self._scatter(node, lo, out, idx, _str(node.attr("reduction", "none")))

    def _scatter(self, node, lo, out, idx, reduction: str) -> None:
        raise NotImplementedError


_REDUCTION_ATTR = {"reduction": lambda v: _str(v) in REDUCTIONS}


@register("ScatterND", since=11)
class ScatterND(_Scatter):
    """Updates in index order (duplicate indices: the last wins, or all are combined)."""
    attributes = _REDUCTION_ATTR

    def infer(self, node, ins, g):
        data, idx, upd = self._common(node, ins)
        if idx.dtype != "int64" or not idx.shape:
            raise ModelError("ScatterND indices must be int64 of rank >= 1")
        k = idx.shape[-1]
        if k > len(data.shape) or k > MAX_RANK:
            raise ModelError(f"index tuples of {k} do not fit data {list(data.shape)}")
        want = tuple(idx.shape[:-1]) + tuple(data.shape[k:])
        if tuple(upd.shape) != want:
            raise ModelError(f"updates {list(upd.shape)} should be {list(want)}")
        _check_const_nd(g, node.inputs[1], data.shape[:k])
        return [(data.dtype, data.shape)]

    def _scatter(self, node, lo, out, idx, reduction: str) -> None:
        lo.call("mlcc_scatter_nd", [idx.name, node.inputs[2], out.name], [out.name],
                params_type="mlcc_nd_index_params",
                params=_nd_params(out.shape, idx.shape[-1], 0, math.prod(idx.shape[:-1]),
                                  np.dtype(out.dtype).itemsize, out.dtype, reduction),
                returns_status=True)


@register("ScatterElements", since=11)
class ScatterElements(_Scatter):
    attributes = {"axis": None, **_REDUCTION_ATTR}

    def infer(self, node, ins, g):
        data, idx, upd = self._common(node, ins)
        if tuple(idx.shape) != tuple(upd.shape):
            raise ModelError(f"indices {list(idx.shape)} and updates {list(upd.shape)} must "
                             f"have one shape")
        check_elements_indices(g, node, data, idx)
        return [(data.dtype, data.shape)]

    def _scatter(self, node, lo, out, idx, reduction: str) -> None:
        axis = norm_axis(int(node.attr("axis", 0)), len(out.shape))
        scatter_elements_call(lo, idx, node.inputs[2], out, axis, idx.shape, out.shape,
                              reduction)


def scatter_elements_call(lo: Lowering, idx, updates: str, out, axis: int, shape, out_shape,
                          reduction: str = "none") -> None:
    """out[... idx[i] (on axis) ...] = updates[i] for every index i of `shape` (indices and
    updates), out viewed as out_shape; the indices are range-checked before any write."""
    pad = MAX_RANK - len(out_shape)
    kernel = "mlcc_scatter_elements__i64" if idx.dtype == "int64" else \
        "mlcc_scatter_elements__i32"
    lo.call(kernel, [idx.name, updates, out.name], [out.name],
            params_type="mlcc_scatter_elements_params",
            params={"rank": len(out_shape), "axis": axis,
                    "elem_size": np.dtype(out.dtype).itemsize,
                    "dtype": Enum(C_DTYPES[out.dtype]),
                    "reduction": Enum(REDUCTIONS[reduction]),
                    "axis_dim": out_shape[axis], "shape": list(shape) + [1] * pad,
                    "y_strides": contiguous_strides(out_shape) + [0] * pad},
            returns_status=True)


@register("MaxUnpool", since=9)
class MaxUnpool(OpDef):
    """MaxPool's inverse: zeros of the unpooled shape, (in_i - 1) * stride_i + kernel_i -
    pads, with X's values written at the flat indices I (MaxPool's Indices: over the whole
    tensor, batch and channels included). Run-time indices are range-checked before anything
    is written (MLCC_ERR_INDEX_OUT_OF_RANGE); of equal indices the last in X's order wins, as
    in the ONNX reference. An output_shape other than the unpooled shape is refused: the ONNX
    reference (and its node test) writes the unpooled tensor into the corner of the larger
    output, onnxruntime reads the indices in the larger output's layout."""
    attributes = {"kernel_shape": None, "pads": None, "strides": None}

    def _unpooled(self, node: Node, x) -> tuple[int, ...]:
        k = [int(v) for v in node.attr("kernel_shape") or []]
        n = len(k)
        if not k or len(x.shape) != n + 2:
            raise ModelError(f"kernel_shape {k} does not fit X {list(x.shape)}")
        strides = [int(v) for v in node.attr("strides", [1] * n)]
        pads = [int(v) for v in node.attr("pads", [0] * 2 * n)]
        if len(strides) != n or len(pads) != 2 * n:
            raise ModelError(f"strides {strides} and pads {pads} do not fit kernel_shape {k}")
        shape = tuple(x.shape[:2]) + tuple((x.shape[2 + i] - 1) * strides[i] + k[i] - pads[i]
                                           - pads[n + i] for i in range(n))
        if any(d < 1 for d in shape):
            raise ModelError(f"the unpooled shape {list(shape)} is empty or negative")
        return shape

    def infer(self, node, ins, g):
        x, idx = ins[0], ins[1]
        require_dtype(node, [x], list(C_DTYPES))
        if idx.dtype != "int64" or tuple(idx.shape) != tuple(x.shape):
            raise ModelError(f"I must be int64 of X's shape {list(x.shape)}, not {idx.dtype} "
                             f"{list(idx.shape)}")
        shape = self._unpooled(node, x)
        wanted = const_input(g, node, 2, "output_shape")
        if wanted is not None and tuple(int(v) for v in np.asarray(wanted)) != shape:
            raise UnsupportedError(
                f"output_shape {np.asarray(wanted).tolist()} other than the unpooled shape "
                f"{list(shape)} is not supported: the ONNX reference writes the unpooled "
                f"tensor into its corner, onnxruntime reads the indices in its layout")
        total = math.prod(shape)
        const = g.const(idx.name)
        if const is not None and np.any((const < -total) | (const >= total)):
            raise ModelError(f"an index of {idx.name!r} is outside the {total} elements of "
                             f"the output")
        return [(x.dtype, shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, idx, out = (lo.value(n) for n in (node.inputs[0], node.inputs[1],
                                             node.outputs[0]))
        zero = lo.add_const(f"{node.name}.zero", np.zeros(1, out.dtype))
        emit_copy(lo, zero, out.name, [out.numel], [0], [1], op="MaxUnpool")
        if x.numel:
            scatter_elements_call(lo, idx, x.name, out, 0, [x.numel], [out.numel])


@register("TensorScatter", since=24)
class TensorScatter(OpDef):
    """A KV-cache update: present = past_cache with `update`'s rows written along the sequence
    axis at write_indices[batch] (0 without it; modulo max_sequence_length in circular mode):
    a copy of the cache, then mlcc_tensor_scatter. Linear writes past the cache's end are a
    run-time status (MLCC_ERR_INDEX_OUT_OF_RANGE); constant indices are checked here."""
    attributes = {"mode": lambda v: _str(v) in ("linear", "circular"), "axis": None}

    def _axis(self, node: Node, rank: int) -> int:
        axis = norm_axis(int(node.attr("axis", -2)), rank)
        if axis == 0:
            raise ModelError("axis must not be 0 (the batch axis)")
        return axis

    def infer(self, node, ins, g):
        past, upd = ins[:2]
        require_dtype(node, [past, upd], [d for d in IO_DTYPES if d not in PACKED_BITS])
        axis = self._axis(node, len(past.shape))
        if len(upd.shape) != len(past.shape) or upd.shape[axis] > past.shape[axis] or any(
                a != b for i, (a, b) in enumerate(zip(past.shape, upd.shape)) if i != axis):
            raise ModelError(f"update {list(upd.shape)} does not fit past_cache "
                             f"{list(past.shape)} along axis {axis}")
        idx = ins[2] if len(ins) > 2 else None
        if idx is not None:
            if idx.dtype != "int64" or tuple(idx.shape) != (past.shape[0],):
                raise ModelError(f"write_indices must be int64 [{past.shape[0]}], not "
                                 f"{idx.dtype} {list(idx.shape)}")
            const = g.const(idx.name)
            if const is not None and _str(node.attr("mode", "linear")) == "linear" and (
                    np.any(const < 0) or np.any(const + upd.shape[axis] > past.shape[axis])):
                raise ModelError(f"write_indices {const.tolist()} + {upd.shape[axis]} rows do "
                                 f"not fit the cache's {past.shape[axis]}")
        return [(past.dtype, past.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        past, upd, out = (lo.value(n) for n in (node.inputs[0], node.inputs[1],
                                               node.outputs[0]))
        if out.numel == 0:
            return
        axis = self._axis(node, len(past.shape))
        emit_plain_copy(lo, past.name, out.name, op=node.op_type)
        if upd.numel == 0:
            return
        lo.call("mlcc_tensor_scatter", [node.input(2), upd.name, out.name], [out.name],
                params_type="mlcc_tensor_scatter_params", params={
                    "batch": past.shape[0], "outer": math.prod(past.shape[:axis]),
                    "max_seq": past.shape[axis], "seq": upd.shape[axis],
                    "inner": math.prod(past.shape[axis + 1:]),
                    "elem_size": np.dtype(past.dtype).itemsize,
                    "circular": int(_str(node.attr("mode", "linear")) == "circular")},
                returns_status=True)


@register("Scatter", since=9, until=10)
class Scatter(ScatterElements):
    """Opsets 9 and 10's name of ScatterElements (without reduction), deprecated in 11."""
    attributes = {"axis": None}


@register("OneHot", since=9)
class OneHot(OpDef):
    """depth and values must be constant once shapes are static (depth fixes the output
    shape); indices may be any integer type, float32 or float64 (truncated toward zero)."""
    attributes = {"axis": None}
    INDEX_DTYPES = [d for d in C_DTYPES if d not in ("bool", "float16")]

    def _depth(self, node, g) -> int:
        depth = const_input(g, node, 1, "depth")
        if depth is None or np.asarray(depth).size != 1:
            raise ModelError("OneHot needs a scalar depth")
        d = int(np.asarray(depth).reshape(-1)[0])
        if d < 1:
            raise ModelError(f"OneHot depth {d} must be positive")
        return d

    def infer(self, node, ins, g):
        idx, _, values = ins
        require_dtype(node, [idx], self.INDEX_DTYPES)
        require_dtype(node, [values], list(C_DTYPES))
        if const_input(g, node, 2, "values") is None or values.numel != 2:
            raise ModelError("OneHot values must hold two elements, [off, on]")
        depth = self._depth(node, g)
        axis = norm_axis(int(node.attr("axis", -1)), len(idx.shape) + 1)
        return [(values.dtype, tuple(idx.shape[:axis]) + (depth,) + tuple(idx.shape[axis:]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        idx, out = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        if out.numel == 0:
            return
        axis = norm_axis(int(node.attr("axis", -1)), len(idx.shape) + 1)
        lo.call("mlcc_one_hot", [idx.name, node.inputs[2], out.name], [out.name],
                params_type="mlcc_one_hot_params",
                params={"outer": math.prod(idx.shape[:axis]), "depth": out.shape[axis],
                        "inner": math.prod(idx.shape[axis:]),
                        "index_dtype": Enum(C_DTYPES[idx.dtype]),
                        "elem_size": np.dtype(out.dtype).itemsize})


@register("EyeLike", since=9)
class EyeLike(OpDef):
    """Ones on the k-th diagonal of a 2-D tensor of the input's shape: a constant once shapes
    are static, copied into the output."""
    attributes = {"k": None, "dtype": None}

    def _dtype(self, node, x) -> str:
        from .cast import onnx_type_to_dtype
        attr = node.attr("dtype")
        dtype = x.dtype if attr is None else onnx_type_to_dtype(int(attr))
        if dtype not in C_DTYPES:
            raise UnsupportedError(f"EyeLike of {dtype} is not supported")
        return dtype

    def infer(self, node, ins, g):
        x = ins[0]
        if len(x.shape) != 2:
            raise ModelError(f"EyeLike needs a 2-D input, not {list(x.shape)}")
        return [(self._dtype(node, x), x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        out = lo.value(node.outputs[0])
        if out.numel == 0:
            return
        eye = np.eye(out.shape[0], out.shape[1], k=int(node.attr("k", 0)), dtype=out.dtype)
        emit_plain_copy(lo, lo.add_const(f"{node.name}.eye", eye), out.name, op="EyeLike")
