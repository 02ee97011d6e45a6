"""Operators whose output size depends on the data (NonZero, NonMaxSuppression, Compress,
Unique, TopK with a k given at run time) and TopK itself (runtime_c/kernels/selection.c).

An output whose size the data decides gets a static maximum here (from the shapes and the
constant inputs, or lower with the `_max_output` attribute that `--max-output NAME=N` sets);
its Value.dyn names the axis, its kernel writes the actual size into a count tensor
(Lowering.count), and NAME_output_shape, the Python and JavaScript bindings report or trim it
(docs/dynamic-outputs.md). A count above the maximum at run time is the status
MLCC_ERR_OUTPUT_TOO_LARGE, never a write past the buffer."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from ..ir.symbolic import SymInt, as_dim, dim_vars, smax
from .common import C_DTYPES, IO_DTYPES, norm_axis, require_dtype
from .registry import OpDef, refuse_dynamic, register

# the element types the comparisons of selection.c handle (cmp_elem)
ORDERED_DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                  "uint32", "uint64"]
MAX_SIZES = 8           # values of one mlcc.Sizes (mlcc_sizes_params in selection.h)
MAX_OUTPUT = "_max_output"          # the attribute --max-output sets on the producing node


def _positive(v) -> bool:
    return isinstance(v, int) and v >= 0


def max_size(node: Node, natural: int) -> int:
    """The planned maximum of a data-dependent size: `natural` (what the shapes allow), or
    less if --max-output asked for it."""
    wanted = node.attr(MAX_OUTPUT)
    return natural if wanted is None else min(int(wanted), natural)


def dtype_enum(dtype: str) -> Enum:
    return Enum(IO_DTYPES[dtype])


def axis_layout(node: Node, shape) -> tuple[int, int, int, int]:
    """(outer, dim, inner, output axis) of an input viewed around the node's optional `axis`
    attribute (Compress, Unique); without one, the input flattened."""
    if node.attr("axis") is None:
        return 1, math.prod(shape), 1, 0
    axis = norm_axis(int(node.attr("axis")), len(shape))
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]), axis


def _key(node: Node) -> str:
    return next(o for o in node.outputs if o)


@register("TopK")
class TopK(OpDef):
    """k largest or smallest along an axis, best first, ties to the lower index. With sorted=0
    the order is unspecified by ONNX; mlcc returns the sorted order then too. k is an
    attribute (opset 1), a constant input, or an input known only at run time: then the
    outputs are planned for k = the axis length and their size along the axis is k."""
    attributes = {"axis": None, "k": None, "largest": lambda v: v in (0, 1),
                  "sorted": lambda v: v in (0, 1), MAX_OUTPUT: _positive}

    def _k(self, node, g):
        """k, or None when it is known only at run time."""
        if node.version < 10:
            if node.attr("k") is None:
                raise ModelError("TopK-1 needs its k attribute")
            return int(node.attr("k"))
        k = g.const(node.inputs[1])
        # (a k computed from dynamic sizes stays symbolic: ir.symbolic)
        return None if k is None else as_dim(np.asarray(k).reshape(-1)[0])

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ORDERED_DTYPES)
        if not x.shape:
            raise ModelError("TopK needs an input of rank >= 1")
        if node.version >= 10 and (len(ins) < 2 or ins[1] is None or ins[1].dtype != "int64"
                                   or ins[1].numel != 1):
            raise ModelError("K must be an int64 tensor of one element")
        axis = norm_axis(int(node.attr("axis", -1)), len(x.shape))
        k = self._k(node, g)
        if k is None:
            k = max_size(node, x.shape[axis])
        elif not 0 <= k <= x.shape[axis]:
            raise ModelError(f"k = {k} is outside [0, {x.shape[axis]}] (axis {axis})")
        shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
        return [(x.dtype, shape), ("int64", shape)]

    def dynamic(self, node, ins, g):
        """A run-time k: the outputs' size along the axis is k. An input whose size along
        the axis depends on the data: only its valid elements compete (k above their count
        is a status at run time, as onnxruntime refuses it). One with such a size along
        another axis: the outputs carry it, for a constant k."""
        x = ins[0]
        refuse_dynamic(node, ins[1:])
        axis = norm_axis(int(node.attr("axis", -1)), len(x.shape))
        constant_k = self._k(node, g) is not None
        if x.dyn is not None and x.dyn[0] != axis:
            if not constant_k:
                refuse_dynamic(node, [x], "with a k known only at run time cannot consume it "
                                          "(its outputs would have two data-dependent axes)")
            return [x.dyn] * 2
        return [None, None] if constant_k else [(axis, _key(node))] * 2

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axis = norm_axis(int(node.attr("axis", -1)), len(x.shape))
        values, indices = node.outputs[0], node.outputs[1]
        k_max = lo.value(values).shape[axis]
        dynamic = self._k(node, lo.graph) is None
        counted = x.dyn is not None and x.dyn[0] == axis    # only the valid elements compete
        lo.call("mlcc_topk__counted" if counted else "mlcc_topk",
                [x.name] + ([lo.count_of(x.name)] if counted else [])
                + [node.inputs[1] if dynamic else "", values, indices,
                   lo.count(_key(node)) if dynamic else ""],
                [values, indices] + ([lo.count_of(values)] if dynamic else []),
                params_type="mlcc_topk_params",
                params={"outer": math.prod(x.shape[:axis]), "n": x.shape[axis],
                        "inner": math.prod(x.shape[axis + 1:]), "k_max": k_max,
                        "dtype": dtype_enum(x.dtype),
                        "largest": int(node.attr("largest", 1))},
                scratch_bytes=8 * smax(k_max, 1), returns_status=True)


@register("NonZero", since=9)
class NonZero(OpDef):
    """The coordinates of the non-zero elements, [rank, count], planned for count = the
    input's size."""
    attributes = {MAX_OUTPUT: _positive}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], list(C_DTYPES) + ["bfloat16"])
        if not x.shape:
            raise UnsupportedError("NonZero of a scalar is not supported")
        return [("int64", (len(x.shape), max_size(node, x.numel)))]

    def dynamic(self, node, ins, g):
        refuse_dynamic(node, ins)
        return [(1, _key(node))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, out = lo.value(node.inputs[0]), node.outputs[0]
        dims = list(x.shape)
        lo.call("mlcc_nonzero", [x.name, out, lo.count(_key(node))], [out, lo.count_of(out)],
                params_type="mlcc_nonzero_params",
                params={"numel": x.numel, "max": lo.value(out).shape[1], "rank": len(dims),
                        "dtype": dtype_enum(x.dtype),
                        "dims": dims + [1] * (8 - len(dims))},
                returns_status=True)


@register("Compress", since=9)
class Compress(OpDef):
    """The slices along `axis` (of the flattened input without one) whose condition is true.
    A constant condition gives a static size; one known at run time a size planned for all
    slices (the condition's length, if shorter)."""
    attributes = {"axis": None, MAX_OUTPUT: _positive}

    def infer(self, node, ins, g):
        x, cond = ins[0], ins[1]
        require_dtype(node, [x], list(C_DTYPES) + ["bfloat16"])     # a copy: any size
        if cond.dtype != "bool" or len(cond.shape) != 1:
            raise ModelError(f"the condition must be a 1-D bool tensor, not {cond.dtype} "
                             f"{list(cond.shape)}")
        _, dim, _, axis = axis_layout(node, x.shape)
        const = g.const(node.inputs[1])
        if const is not None:
            size = int(np.count_nonzero(np.asarray(const)[:dim]))
        else:
            size = max_size(node, min(dim, cond.shape[0]))
        if node.attr("axis") is None:
            return [(x.dtype, (size,))]
        return [(x.dtype, x.shape[:axis] + (size,) + x.shape[axis + 1:])]

    def dynamic(self, node, ins, g):
        refuse_dynamic(node, ins)
        if g.const(node.inputs[1]) is not None:
            return [None]
        return [(axis_layout(node, ins[0].shape)[3], _key(node))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, out = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        outer, dim, inner, axis = axis_layout(node, x.shape)
        count = (lo.count(_key(node)) if out.dyn is not None else
                 lo.temp(f"{node.name}.count", "int64", ()))
        lo.call("mlcc_compress", [x.name, node.inputs[1], out.name, count], [out.name, count],
                params_type="mlcc_compress_params",
                params={"outer": outer, "dim": dim, "inner": inner,
                        "n_cond": lo.value(node.inputs[1]).shape[0], "max": out.shape[axis],
                        "elem_size": np.dtype(x.dtype).itemsize},
                returns_status=True)


@register("Unique", since=11)
class Unique(OpDef):
    """The distinct elements (or slices along `axis`), sorted or in order of first
    occurrence, their first indices, the inverse indices and the counts; planned for every
    element (slice) distinct."""
    attributes = {"axis": None, "sorted": lambda v: v in (0, 1), MAX_OUTPUT: _positive}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ORDERED_DTYPES + ["bool", "bfloat16"])
        _, dim, _, axis = axis_layout(node, x.shape)
        size = max_size(node, dim)
        y = (size,) if node.attr("axis") is None else \
            x.shape[:axis] + (size,) + x.shape[axis + 1:]
        return [(x.dtype, y), ("int64", (size,)), ("int64", (dim,)), ("int64", (size,))]

    def dynamic(self, node, ins, g):
        refuse_dynamic(node, ins)
        key, axis = _key(node), axis_layout(node, ins[0].shape)[3]
        return [(axis, key), (0, key), None, (0, key)][:len(node.outputs)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        outer, dim, inner, axis = axis_layout(node, x.shape)
        outs = [node.outputs[i] if i < len(node.outputs) else "" for i in range(4)]
        count = lo.count(_key(node))
        lo.call("mlcc_unique", [x.name] + outs + [count], [o for o in outs if o] + [count],
                params_type="mlcc_unique_params",
                params={"outer": outer, "dim": dim, "inner": inner,
                        "max": lo.value(outs[0]).shape[axis], "dtype": dtype_enum(x.dtype),
                        "sorted": int(node.attr("sorted", 1))},
                scratch_bytes=24 * max(dim, 1), returns_status=True)


@register("NonMaxSuppression", since=10)
class NonMaxSuppression(OpDef):
    """Greedy per-class NMS, as onnxruntime orders its output: (batch, class, box) rows by
    batch, class, then descending score. Planned for batches x classes x
    min(max_output_boxes_per_class, boxes) rows (every box when that input is known only at
    run time); the thresholds may be constants or run-time inputs."""
    attributes = {"center_point_box": lambda v: v in (0, 1), MAX_OUTPUT: _positive}

    def infer(self, node, ins, g):
        boxes, scores = ins[0], ins[1]
        require_dtype(node, [boxes, scores], ["float32"])
        if len(boxes.shape) != 3 or boxes.shape[2] != 4 or len(scores.shape) != 3 or \
                scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise ModelError(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} must "
                             f"be [batches, boxes, 4] and [batches, classes, boxes]")
        if boxes.shape[1] >= 2**31:
            raise UnsupportedError(f"{boxes.shape[1]} boxes: at most 2^31 - 1 are supported")
        for i, what, dtype in ((2, "max_output_boxes_per_class", "int64"),
                               (3, "iou_threshold", "float32"),
                               (4, "score_threshold", "float32")):
            v = ins[i] if i < len(ins) else None
            if v is not None and (v.dtype != dtype or v.numel != 1):
                raise ModelError(f"{what} must be a {dtype} tensor of one element")
        iou = g.const(node.input(3))
        if iou is not None and not 0.0 <= float(np.asarray(iou).reshape(-1)[0]) <= 1.0:
            raise ModelError(f"iou_threshold {float(np.asarray(iou).reshape(-1)[0])} is "
                             f"outside [0, 1]")
        n = boxes.shape[1]
        if not node.input(2):
            per_class = 0
        else:
            const = g.const(node.input(2))
            per_class = n if const is None else \
                min(max(int(np.asarray(const).reshape(-1)[0]), 0), n)
        rows = max_size(node, boxes.shape[0] * scores.shape[1] * per_class)
        return [("int64", (rows, 3))]

    def dynamic(self, node, ins, g):
        """Boxes whose number depends on the data (boxes' axis 1 and scores' axis 2, one
        count): only the valid ones are candidates."""
        boxes, scores = ins[0], ins[1]
        if boxes.dyn is not None and boxes.dyn[0] == 1 and scores.dyn == (2, boxes.dyn[1]):
            refuse_dynamic(node, ins[2:])
        else:
            refuse_dynamic(node, ins, "reads it only as the number of boxes (axis 1 of the "
                                      "boxes, 2 of the scores, one count)")
        return [(0, _key(node))]

    def lower(self, node: Node, lo: Lowering) -> None:
        boxes, scores = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        out = node.outputs[0]
        counted = [lo.count_of(boxes.name)] if boxes.dyn is not None else []
        lo.call("mlcc_f32_nms__counted" if counted else "mlcc_f32_nms",
                [boxes.name, scores.name] + counted + [node.input(2), node.input(3),
                                                       node.input(4), out, lo.count(_key(node))],
                [out, lo.count_of(out)], params_type="mlcc_nms_params",
                params={"batches": boxes.shape[0], "classes": scores.shape[1],
                        "n": boxes.shape[1], "max": lo.value(out).shape[0],
                        "center_point_box": int(node.attr("center_point_box", 0))},
                # the candidates' heap (int32) and the kept boxes' extents and areas (5
                # floats), per box (selection.h)
                scratch_bytes=24 * max(boxes.shape[1], 1), returns_status=True)


@register("Sizes", domain="mlcc")
class Sizes(OpDef):
    """int64 values computed at run time from data-dependent counts: a shape computation over
    such a count (a Shape or Size of a NonZero's output, folded with ir.symbolic.count_var)
    that a kernel reads, or that is a graph output; passes/infer_and_fold.py inserts it.
    Attribute `values`: the folded object array (ints and SymInts over counts); inputs: the
    values whose counts it reads, so that their nodes run first."""
    attributes = {"values": None}

    def infer(self, node, ins, g):
        values = node.attrs.get("values")
        if not isinstance(values, np.ndarray) or values.dtype != object:
            raise ModelError("mlcc.Sizes is made by mlcc (passes/infer_and_fold.py); a model "
                             "file may not use it")
        if values.size > MAX_SIZES:
            raise UnsupportedError(f"{values.size} sizes computed from a data-dependent count "
                                   f"at run time; mlcc computes at most {MAX_SIZES}")
        return [("int64", values.shape)]

    def dynamic(self, node, ins, g):
        return [None]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_sizes(lo, node.outputs[0], list(node.attrs["values"].flat))


def emit_sizes(lo: Lowering, out: str, values: list) -> None:
    """out[i] = values[i] (ints, SymInts over counts: ir.symbolic.count_var) at run time."""
    values = [v if isinstance(v, SymInt) else int(v) for v in values]
    keys = {d.count for d in dim_vars(values)}
    missing = sorted(k for k in keys if k not in lo.program.counts)
    if missing:       # (the inputs order the nodes; a branch not run would leave it unset)
        raise UnsupportedError(f"the count of {missing[0]!r} is read before its node runs")
    lo.call("mlcc_i64_sizes", [out], [out], params_type="mlcc_sizes_params",
            params={"n": len(values), "values": values + [0] * (MAX_SIZES - len(values))})
