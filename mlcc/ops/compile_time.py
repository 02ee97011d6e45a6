"""Operators whose output shape is their input's value (ConstantOfShape, Range). With constant
inputs infer_and_fold folds them (ONNX reference); an input computed at run time would make the
output shape depend on the data, so it is refused by name (the message tells the user which
graph input to bind as a constant).

Over bounded dynamic sizes (ir.symbolic) the input may be a shape computed from the dynamic
dimensions (passes/fold_symbolic.py): the output's size is then symbolic and the node runs at
run time, as a broadcast copy of its value (ConstantOfShape) or the mlcc_*_range kernel (Range,
with a constant delta: YOLOv8's anchor grid over the feature map's width, a decoding step's
position from the length of its KV cache)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Lowering, Node
from ..ir.symbolic import SymInt, as_dim, smax
from .common import const_input
from .registry import OpDef, register


def _symbolic(arr) -> bool:
    return isinstance(arr, np.ndarray) and arr.dtype == object


class _CompileTime(OpDef):
    value_inputs: tuple[tuple[int, str], ...] = ()

    def _inputs(self, node, g) -> list:
        """The constant inputs (raises for a run-time value); only a symbolic one reaches
        infer (a constant one folds)."""
        arrays = [const_input(g, node, index, what) for index, what in self.value_inputs]
        if not any(_symbolic(a) for a in arrays):
            raise ModelError(f"{node.op_type} with constant inputs should have been folded")
        return arrays

    def infer(self, node, ins, g):
        """Operators that do not run over dynamic sizes (the audio windows, MelWeightMatrix):
        a run-time input is refused by name (_inputs), a size over dynamic dimensions too."""
        self._inputs(node, g)
        raise UnsupportedError(f"{node.op_type} of a size that depends on the dynamic "
                               f"dimensions is not supported; compile fixed sizes")


@register("ConstantOfShape", since=9)
class ConstantOfShape(_CompileTime):
    attributes = {"value": None}
    counted_shapes = "fill"
    value_inputs = ((0, "shape"),)

    def _value(self, node) -> np.ndarray:
        value = node.attr("value")
        return np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]

    def infer(self, node, ins, g):
        shape = tuple(as_dim(d) for d in self._inputs(node, g)[0].reshape(-1))
        if any(d < 0 for d in shape):
            raise ModelError(f"negative dimension in shape {list(shape)}")
        return [(self._value(node).dtype.name, shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        from .movement import emit_copy_nd
        y = lo.value(node.outputs[0])
        value = lo.add_const(f"{node.name}.value", self._value(node))
        emit_copy_nd(lo, value, y.name, y.shape, [0] * len(y.shape),
                     [math.prod(y.shape[k + 1:]) for k in range(len(y.shape))],
                     op=node.op_type)


RANGE_KERNELS = {"float32": "mlcc_f32_range", "int64": "mlcc_i64_range",
                 "int32": "mlcc_i32_range"}


@register("Range", since=11)
class Range(_CompileTime):
    attributes = {}
    value_inputs = ((0, "start"), (1, "limit"), (2, "delta"))

    def _plan(self, node, g):
        """(start, delta, count): start and delta integers (in the start's type), the count
        ceil((limit - start) / delta) over the dynamic sizes."""
        start, limit, delta = (a.reshape(-1)[0] if a.size == 1 else None
                               for a in self._inputs(node, g))
        if start is None or limit is None or delta is None:
            raise ModelError("Range takes scalars")
        symbolic = next(x for x in (start, limit, delta) if isinstance(x, SymInt))
        if isinstance(delta, SymInt) or float(delta) != int(delta) or int(delta) < 1 or \
                not isinstance(start, SymInt) and float(start) != int(start):
            raise symbolic.undecided("a Range whose start or step is not an integer (or whose "
                                     "step is not a positive constant)")
        # a start over the sizes (a decoding step's position P: passes/fold_symbolic.py's
        # materialize) is a C expression of the kernel's parameters
        start, delta = start if isinstance(start, SymInt) else int(start), int(delta)
        if (limit - start if isinstance(limit - start, int) else (limit - start).lo) < 0:
            raise symbolic.undecided("a Range that may be empty")
        return start, delta, smax((limit - start + delta - 1) // delta, 0)

    def infer(self, node, ins, g):
        count = self._plan(node, g)[2]       # (first: a run-time input is refused by name)
        dtype = ins[0].dtype
        if dtype not in RANGE_KERNELS:
            raise UnsupportedError(f"Range of {dtype} over a dynamic size is not supported "
                                   f"({', '.join(RANGE_KERNELS)} are)")
        return [(dtype, (count,))]

    def lower(self, node: Node, lo: Lowering) -> None:
        start, delta, count = self._plan(node, lo.graph)
        y = lo.value(node.outputs[0])
        lo.call(RANGE_KERNELS[y.dtype], [y.name], [y.name], params_type="mlcc_range_params",
                params={"count": count, "start": start, "delta": delta}, op=node.op_type)



def size_values(lo: Lowering, name: str) -> str:
    """A run-time tensor holding the values of constant `name`, a shape over the dynamic sizes
    (passes/fold_symbolic.py) that a kernel reads as data: the position of a decoding step's
    token is P, the length of its KV cache. One mlcc_*_range call, for a value or an
    increasing progression of an integer step; anything else is refused naming the dimension
    (codegen/lower.py calls this for every such argument of a node's calls)."""
    v = lo.value(name)
    flat = list(v.const.reshape(-1))
    step = flat[1] - flat[0] if len(flat) > 1 else 1
    exact = isinstance(step, int) and step >= 1 and all(
        isinstance(x - flat[0] - i * step, int) and x - flat[0] - i * step == 0
        for i, x in enumerate(flat))
    if v.dtype not in RANGE_KERNELS or not exact:
        symbol = next(x for x in flat if isinstance(x, SymInt))
        raise symbol.undecided(f"the value of {name!r} (a shape) read as data at run time "
                               f"(mlcc computes one that is a value or an increasing "
                               f"progression, of {', '.join(RANGE_KERNELS)})")
    out = lo.temp(f"{name}.values", v.dtype, v.shape)
    lo.call(RANGE_KERNELS[v.dtype], [out], [out], params_type="mlcc_range_params",
            params={"count": len(flat), "start": flat[0], "delta": step}, op="sizes")
    return out
