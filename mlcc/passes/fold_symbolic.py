"""Folding of shape arithmetic over dynamic sizes (--shape x=LO..HI).

A Shape of a tensor with a dynamic dimension (or a data-dependent size: its count is a SymInt
too, ir.symbolic.count_var) folds to an int64 constant held as a numpy object array of ints and
SymInts (ir.symbolic); the usual shape chains (Shape -> Gather / Slice -> Unsqueeze -> Concat
-> Reshape, with integer Add / Sub / Mul / Div, Neg, Min / Max, the reductions ReduceMin /
ReduceMax / ReduceSum / ReduceProd and the Equal / Where of torch's expand on the way) fold
over such arrays here, since the ONNX reference cannot evaluate them. Any other operator
reading one is left to run: the node reads the sizes as data, which its lowering computes at
run time (the position of a decoding step's token, `P`, from a KV cache of P entries:
ops/compile_time.py's size_values; a data-dependent count: mlcc.Sizes), or refuses naming the
dimension.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Node
from ..ir.symbolic import SymInt, dim_vars, smax, smin


def is_symbolic_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == object


def shape_array(shape) -> np.ndarray:
    arr = np.empty(len(shape), dtype=object)
    arr[:] = [d if isinstance(d, SymInt) else int(d) for d in shape]
    return arr


def _ints(a) -> list[int]:
    if is_symbolic_array(a):
        raise SymInt.var(dim_vars(list(a.reshape(-1)))[0]).undecided("an index")
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _slice(node: Node, arrays: list) -> np.ndarray:
    data = arrays[0]
    if node.version < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts, ends = _ints(arrays[1]), _ints(arrays[2])
        axes = _ints(arrays[3]) if len(arrays) > 3 and arrays[3] is not None else None
        steps = _ints(arrays[4]) if len(arrays) > 4 and arrays[4] is not None else None
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = a + data.ndim if a < 0 else a
        n = data.shape[a]
        clamp = (lambda v: max(-1, min(n - 1, v))) if st < 0 else (lambda v: max(0, min(n, v)))
        s = clamp(s + n if s < 0 else s)
        e = clamp(e + n if e < 0 else e)
        index[a] = slice(s, None if e < 0 else e, st)
    return data[tuple(index)]


def _binary(fn):
    def run(node, arrays):
        a, b = np.asarray(arrays[0], dtype=object), np.asarray(arrays[1], dtype=object)
        return np.frompyfunc(fn, 2, 1)(a, b)
    return run


def _div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return int(np.trunc(a / b)) if b else 0
    return a // b          # SymInt: refused unless both are non-negative (then it is floor)


def _axes(node, arrays, index):
    if node.version >= 13 and len(arrays) > index and arrays[index] is not None:
        return _ints(arrays[index])
    return list(node.attr("axes", []))


def _unsqueeze(node, arrays):
    out = arrays[0]
    rank = out.ndim + len(_axes(node, arrays, 1))
    for a in sorted(a + rank if a < 0 else a for a in _axes(node, arrays, 1)):
        out = np.expand_dims(out, a)
    return out


def _squeeze(node, arrays):
    axes = _axes(node, arrays, 1)
    if not axes:
        return np.squeeze(arrays[0])
    return np.squeeze(arrays[0], axis=tuple(a + arrays[0].ndim if a < 0 else a for a in axes))


FLOAT_CASTS = {1: "float32", 11: "float64"}
# what reads a float-typed shape: its values are exact integers that only move (as far as a
# Range, ops/compile_time.py); arithmetic on them would be integer arithmetic here
FLOAT_FOLDS = ("Identity", "Concat", "Gather", "Slice", "Unsqueeze", "Squeeze", "Reshape")


def _cast(node, arrays):
    if int(node.attr("to")) not in (6, 7, *FLOAT_CASTS):       # int32, int64, float, double
        raise SymInt.var(dim_vars(list(arrays[0].reshape(-1)))[0]).undecided(
            "a cast of a dynamic size to a type other than an integer, float or double")
    return arrays[0]


def symbolic_dtype(g: Graph, node: Node) -> str:
    """The type of a folded shape array: a float after a Cast to float (or moved from one), else
    int64."""
    if node.op_type == "Cast":
        return FLOAT_CASTS.get(int(node.attr("to")), "int64")
    floats = [g.values[i].dtype for i in node.inputs[:1] if i and
              g.values[i].dtype in FLOAT_CASTS.values() and is_symbolic_array(g.const(i))]
    return floats[0] if floats and node.op_type in FLOAT_FOLDS else "int64"


def _gather(node, arrays):
    axis = int(node.attr("axis", 0))
    idx = np.asarray(_ints(arrays[1]), np.int64).reshape(np.shape(arrays[1]))
    n = arrays[0].shape[axis]
    return np.take(arrays[0], np.where(idx < 0, idx + n, idx), axis=axis)


def _variadic(fn):
    """Min, Max of any number of inputs, with broadcasting."""
    ufunc = np.frompyfunc(fn, 2, 1)

    def run(node, arrays):
        return functools.reduce(lambda a, b: ufunc(np.asarray(a, dtype=object),
                                                   np.asarray(b, dtype=object)), arrays)
    return run


def _reduce(fn):
    """ReduceMin, ReduceMax, ReduceSum, ReduceProd (axes an attribute or, from opset 18 (13
    for ReduceSum), an input; keepdims; noop_with_empty_axes)."""
    ufunc = np.frompyfunc(fn, 2, 1)

    def run(node, arrays):
        data = np.asarray(arrays[0], dtype=object)
        axes = _axes(node, arrays, 1) if node.op_type == "ReduceSum" or node.version >= 18 \
            else list(node.attr("axes", []))
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return data
            axes = list(range(data.ndim))
        axes = sorted({a + data.ndim if a < 0 else a for a in axes}, reverse=True)
        for a in axes:
            data = ufunc.reduce(data, axis=a)
            if node.attr("keepdims", 1):
                data = np.expand_dims(data, a)
        return data
    return run


FOLDS = {
    "Identity": lambda node, a: a[0],
    "Concat": lambda node, a: np.concatenate([np.asarray(x, dtype=object) for x in a],
                                             axis=int(node.attr("axis"))),
    "Gather": _gather,
    "Slice": _slice,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Cast": _cast,
    "Reshape": lambda node, a: a[0].reshape(_ints(a[1])),
    "Add": _binary(lambda x, y: x + y),
    "Sub": _binary(lambda x, y: x - y),
    "Mul": _binary(lambda x, y: x * y),
    "Div": _binary(_div),
    "Min": _variadic(smin),
    "Max": _variadic(smax),
    "ReduceMin": _reduce(smin),
    "ReduceMax": _reduce(smax),
    "ReduceSum": _reduce(lambda x, y: x + y),
    "ReduceProd": _reduce(lambda x, y: x * y),
    # the -1 test of torch's expand (Where(Equal(shape, -1), ones, shape)) and size clamps:
    # decided by the intervals (SymInt comparisons), else refused naming the dimension
    "Equal": _binary(lambda x, y: bool(x == y)),
    "Where": lambda node, a: np.where(np.asarray(a[0]).astype(bool), np.asarray(a[1], object),
                                      np.asarray(a[2], object)),
    "Neg": lambda node, a: -np.asarray(a[0], dtype=object),
}
BOOL_FOLDS = ("Equal",)


def fold_symbolic(g: Graph, node: Node, arrays: list) -> list[np.ndarray]:
    """Outputs of a node with a symbolic-array input (every input constant)."""
    fold = FOLDS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    floats = [i for i, a in zip(node.inputs, arrays) if is_symbolic_array(a) and
              g.values[i].dtype in FLOAT_CASTS.values()]
    if floats and node.op_type not in FLOAT_FOLDS:
        fold = None         # float arithmetic on a size: not folded here
    if fold is None:
        dims = dim_vars([list(a.reshape(-1)) for a in arrays if is_symbolic_array(a)])
        raise SymInt.var(dims[0]).undecided(f"a {node.op_type} of a shape")
    try:
        out = fold(node, arrays)
    except (ValueError, IndexError) as exc:
        raise ModelError(f"folding a shape computation failed: {exc}") from None
    out = np.asarray(out, dtype=object)
    if node.op_type in BOOL_FOLDS:
        return [out.astype(bool)]
    if not any(isinstance(x, SymInt) for x in out.reshape(-1)):
        out = out.astype(symbolic_dtype(g, node))
    return [out]


def foldable(g: Graph, node: Node, arrays: list) -> bool:
    """Whether fold_symbolic computes this node (else it runs, reading the sizes as data)."""
    floats = [i for i, a in zip(node.inputs, arrays) if is_symbolic_array(a) and
              g.values[i].dtype in FLOAT_CASTS.values()]
    if node.op_type == "Gather" and is_symbolic_array(arrays[1]):
        return False       # an index over the sizes: a row of a table, read at run time
    return (node.domain in ("", "ai.onnx") and node.op_type in FOLDS
            and not (floats and node.op_type not in FLOAT_FOLDS))

