"""Helpers shared by operator definitions: axes, broadcasting, constant inputs, copies."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import PACKED_BITS, Graph, Lowering, Node, Value
from ..ir.symbolic import as_dim, is_one
from .activations import act_struct, fused_act
from .refusals import STRINGS, refusal
from .registry import refuse_dynamic

MAX_RANK = 8                       # MLCC_MAX_RANK in mlcc_runtime.h

# Integer types with arithmetic kernels (runtime_c/kernels/int_arith.c).
INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
C_DTYPES = {"float32": "MLCC_FLOAT32", "uint8": "MLCC_UINT8", "int8": "MLCC_INT8",
            "int16": "MLCC_INT16", "uint16": "MLCC_UINT16", "uint32": "MLCC_UINT32",
            "uint64": "MLCC_UINT64", "float16": "MLCC_FLOAT16", "float64": "MLCC_FLOAT64",
            "int32": "MLCC_INT32", "int64": "MLCC_INT64", "bool": "MLCC_BOOL"}
# Storage-only types: graph inputs and outputs and Cast (runtime_c/kernels/cast.c) take them,
# nothing computes on them (int4, uint4, float4 e2m1, int2, uint2 are packed, ir.PACKED_BITS).
STORAGE_DTYPES = {"bfloat16": "MLCC_BFLOAT16", "float8_e4m3fn": "MLCC_FLOAT8E4M3FN",
                  "float8_e4m3fnuz": "MLCC_FLOAT8E4M3FNUZ", "float8_e5m2": "MLCC_FLOAT8E5M2",
                  "float8_e5m2fnuz": "MLCC_FLOAT8E5M2FNUZ", "float8_e8m0fnu": "MLCC_FLOAT8E8M0",
                  "float4_e2m1fn": "MLCC_FLOAT4E2M1", "int4": "MLCC_INT4", "uint4": "MLCC_UINT4",
                  "int2": "MLCC_INT2", "uint2": "MLCC_UINT2"}
IO_DTYPES = {**C_DTYPES, **STORAGE_DTYPES}


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Numpy-style (multidirectional) broadcasting of static shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ModelError(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not "
                             f"broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides that read a `shape` tensor as if it had `out_shape` (0 on broadcast axes)."""
    rank = len(out_shape)
    padded = [1] * (rank - len(shape)) + list(shape)
    strides, step = [0] * rank, 1
    for axis in range(rank - 1, -1, -1):
        # a dynamic size is the output's size on its axis (broadcast_shapes): not broadcast
        strides[axis] = step if not is_one(padded[axis]) else 0
        step *= padded[axis]
    return strides


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [0] * len(shape), 1
    for axis in range(len(shape) - 1, -1, -1):
        strides[axis] = step
        step *= shape[axis]
    return strides


def const_input(g: Graph, node: Node, index: int, what: str) -> np.ndarray | None:
    """Input `index` as a constant array, None if absent; refuses a run-time value."""
    name = node.input(index)
    if not name:
        return None
    arr = g.const(name)
    if arr is None:
        sources = [name] if name in g.inputs else g.inputs_upstream(name)
        where = ("it is a graph input" if name in g.inputs else
                 f"it is computed at run time{' from graph input ' if sources else ''}"
                 f"{', '.join(map(repr, sources))}")
        if sources:
            where += f": give its value at compile time with --bind {sources[0]}=..."
        raise UnsupportedError(f"{what} (input {index}, {name!r}) must be a constant once "
                               f"shapes are static; {where}")
    return arr


def ints_attr_or_input(g: Graph, node: Node, attr: str, index: int,
                       input_since: int, symbolic: bool = False) -> list[int] | None:
    """An int list given as attribute before opset `input_since` and as input from then on;
    symbolic: an input computed from dynamic sizes keeps its SymInts (ir.symbolic)."""
    if node.version < input_since:
        v = node.attr(attr)
        return None if v is None else [int(x) for x in v]
    arr = const_input(g, node, index, attr)
    convert = as_dim if symbolic else int
    return None if arr is None else [convert(x) for x in np.asarray(arr).reshape(-1)]


def check_elements_indices(g: Graph, node: Node, data: Value, idx: Value) -> int:
    """GatherElements' and ScatterElements' indices against data: int32/int64, the same rank
    (>= 1), no larger off the axis, constant ones within the axis. Returns the axis."""
    if idx.dtype not in ("int64", "int32"):
        raise ModelError(f"indices must be int32 or int64, not {idx.dtype}")
    if len(idx.shape) != len(data.shape) or not data.shape:
        raise ModelError(f"indices {list(idx.shape)} and data {list(data.shape)} must have "
                         f"the same rank (>= 1)")
    axis = norm_axis(int(node.attr("axis", 0)), len(data.shape))
    for a, (i, d) in enumerate(zip(idx.shape, data.shape)):
        if a != axis and i > d:
            raise ModelError(f"indices {list(idx.shape)} exceed data {list(data.shape)} "
                             f"on axis {a}")
    const = g.const(node.inputs[1])
    dim = data.shape[axis]
    if const is not None and const.size and (const.min() < -dim or const.max() >= dim):
        raise ModelError(f"an index is out of range for axis {axis} of size {dim}")
    return axis


def require_dtype(node: Node, values: Sequence[Value | None], allowed: Sequence[str]) -> str:
    """The common dtype of the present inputs; refuses types without a run-time kernel."""
    dtypes = {v.dtype for v in values if v is not None}
    if len(dtypes) > 1:
        raise UnsupportedError(f"inputs of mixed types ({', '.join(sorted(dtypes))}) are not "
                               f"supported")
    dtype = dtypes.pop() if dtypes else "float32"
    if dtype == "object":           # numpy's name for ONNX strings
        raise UnsupportedError(f"string tensors are not supported (strings have variable "
                               f"length): {refusal(STRINGS)}")
    if dtype not in allowed:
        raise UnsupportedError(f"{dtype} tensors at run time are not supported "
                               f"(supported: {', '.join(allowed)})")
    return dtype


def act_params(node: Node) -> dict:
    """The mlcc_act struct for an activation fused by passes.fuse_activations (or none)."""
    return act_struct(fused_act(node))


def simplify_copy(shape: Sequence[int], src_strides: Sequence[int],
                  dst_strides: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """Drops size-1 axes and merges axes that are contiguous in both source and destination."""
    dims = [(d, s, t) for d, s, t in zip(shape, src_strides, dst_strides) if not is_one(d)]
    merged: list[list[int]] = []
    for d, s, t in dims:
        if merged:
            pd, ps, pt = merged[-1]
            if ps == s * d and pt == t * d:
                merged[-1] = [pd * d, s, t]
                continue
        merged.append([d, s, t])
    if not merged:
        merged = [[1, 1, 1]]
    if len(merged) > MAX_RANK:
        raise UnsupportedError(f"a copy over {len(merged)} non-mergeable axes exceeds rank "
                               f"{MAX_RANK}")
    return [m[0] for m in merged], [m[1] for m in merged], [m[2] for m in merged]


def emit_copy(lo: Lowering, src: str, dst: str, shape: Sequence[int],
              src_strides: Sequence[int], dst_strides: Sequence[int], *,
              src_offset: int = 0, dst_offset: int = 0, op: str = "") -> None:
    """dst[dst_offset + sum i_k * dst_strides[k]] = src[src_offset + sum i_k * src_strides[k]]
    for every index i of `shape` (strides and offsets in elements; 0 strides broadcast)."""
    if lo.value(src).dtype in PACKED_BITS:
        raise UnsupportedError(f"{lo.value(src).dtype} tensors (several elements per byte) "
                               f"can only be cast or copied whole")
    itemsize = np.dtype(lo.value(src).dtype).itemsize
    dims, ss, ds = simplify_copy(shape, src_strides, dst_strides)
    pad = MAX_RANK - len(dims)
    lo.call("mlcc_copy_strided", [src, dst], [dst], params_type="mlcc_copy_params", params={
        "rank": len(dims), "elem_size": itemsize,
        "shape": dims + [1] * pad, "src_strides": ss + [0] * pad, "dst_strides": ds + [0] * pad,
        "src_offset": as_dim(src_offset), "dst_offset": as_dim(dst_offset)}, op=op, pool=True)


def emit_plain_copy(lo: Lowering, src: str, dst: str, op: str = "copy") -> None:
    v = lo.value(src)
    if v.dtype in PACKED_BITS:      # several elements per byte: copy the bytes
        pad = MAX_RANK - 1
        lo.call("mlcc_copy_strided", [src, dst], [dst], params_type="mlcc_copy_params", params={
            "rank": 1, "elem_size": 1, "shape": [v.nbytes] + [1] * pad,
            "src_strides": [1] + [0] * pad, "dst_strides": [1] + [0] * pad,
            "src_offset": 0, "dst_offset": 0}, op=op, pool=True)
        return
    emit_copy(lo, src, dst, [v.numel], [1], [1], op=op)


def merge_broadcast_axes(shape, stride_sets):
    """Drops size-1 axes and merges neighbours that are contiguous for the output and for
    every input, so that the kernel's innermost loop is as long as possible."""
    out_strides = contiguous_strides(shape)
    axes = [(d, [s[i] for s in stride_sets], out_strides[i]) for i, d in enumerate(shape)
            if not is_one(d)]
    merged: list = []
    for d, ss, o in axes:
        if merged:
            pd, pss, po = merged[-1]
            if po == o * d and all(ps == s * d for ps, s in zip(pss, ss)):
                merged[-1] = (pd * d, ss, o)
                continue
        merged.append((d, ss, o))
    if not merged:
        merged = [(1, [0] * len(stride_sets), 1)]
    if len(merged) > MAX_RANK:
        raise UnsupportedError(f"broadcasting over more than {MAX_RANK} axes")
    return [m[0] for m in merged], [[m[1][k] for m in merged] for k in range(len(stride_sets))]


def elementwise_dynamic(node: Node, ins: Sequence[Value | None], g: Graph
                        ) -> list[tuple[int, str] | None]:
    """Value.dyn of the outputs of an elementwise node (outputs of the broadcast shape): the
    data-dependent axis of its inputs, right-aligned to the output. Every other input must
    have size 1 there, or the same data-dependent count on the same axis."""
    rank = len(g.values[node.outputs[0]].shape)
    found = None
    for v in ins:
        if v is None or v.dyn is None:
            continue
        here = (v.dyn[0] + rank - len(v.shape), v.dyn[1])
        if found is not None and found != here:
            raise UnsupportedError(f"inputs {', '.join(repr(x.name) for x in ins if x)} have "
                                   f"different data-dependent sizes; mlcc cannot combine them")
        found = here
    if found is not None:
        for v in ins:
            axis = found[0] - (rank - len(v.shape)) if v is not None else -1
            if v is not None and v.dyn is None and axis >= 0 and v.shape[axis] != 1:
                raise UnsupportedError(
                    f"input {v.name!r} has {v.shape[axis]} elements along the axis whose "
                    f"size the data decides in another input (counted by {found[1]!r}); mlcc "
                    f"broadcasts only size-1 dimensions against such an axis")
    return [found] * len(node.outputs)


def view_dynamic(node: Node, x: Value, out: Value) -> list[tuple[int, str] | None]:
    """Value.dyn of a view's output (Reshape, Squeeze, ...: the same bytes, another shape):
    the data-dependent axis whole, with the same number of elements before it and after it
    (the axes around it may merge or split: [N, 2, 2] -> [N, 4]), so that the padding stays
    where it was (a view that merges or splits that axis is refused)."""
    if x.dyn is None:
        return [None]
    axis, key = x.dyn
    if tuple(x.shape) == tuple(out.shape):
        return [(axis, key)]
    before, size = math.prod(x.shape[:axis]), x.shape[axis]
    found = [a for a, d in enumerate(out.shape) if d == size and d != 1
             and math.prod(out.shape[:a]) == before]
    if size == 1 or not found:
        refuse_dynamic(node, [x], f"would reshape its axis {axis} from {list(x.shape)} to "
                                  f"{list(out.shape)}")
    return [(found[0], key)]
