"""Data-movement operators: Transpose, Concat, Split, Slice, Expand, Tile, DepthToSpace and
SpaceToDepth. Each is one or more strided copies (mlcc_copy_strided), so every dtype the runtime
knows works: the kernel moves elements of any size and never looks at their values."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import PACKED_BITS, Lowering, Node
from ..ir.program import TENSOR_ALIGN
from ..ir.symbolic import SymInt, as_dim, count_var, dim_vars, is_symbolic, smax, smin
from .common import (C_DTYPES, broadcast_shapes, broadcast_strides, const_input,
                     contiguous_strides, emit_copy, ints_attr_or_input, norm_axis, require_dtype,
                     simplify_copy)
from .registry import OpDef, refuse_dynamic, register
from .selection import emit_sizes

ANY_DTYPE = list(C_DTYPES)
MAX_COPY_CALLS = 256     # beyond this many calls for one node, refuse rather than bloat the C


def emit_copy_nd(lo: Lowering, src: str, dst: str, shape: Sequence[int],
                 src_strides: Sequence[int], dst_strides: Sequence[int], *, src_offset: int = 0,
                 dst_offset: int = 0, op: str = "") -> None:
    """emit_copy for any number of axes: when more than MLCC_MAX_RANK axes remain after merging,
    the outermost ones are unrolled into several calls. Does nothing for an empty copy."""
    if any(d == 0 for d in shape):
        return
    calls = [(list(shape), src_offset, dst_offset)]
    while True:
        try:
            for s, _, _ in calls:
                simplify_copy(s, src_strides, dst_strides)
            break
        except UnsupportedError:
            k = next(i for i, d in enumerate(calls[0][0]) if d != 1)
            if len(calls) * calls[0][0][k] > MAX_COPY_CALLS:
                raise UnsupportedError(f"a copy over {len(shape)} axes that do not merge needs "
                                       f"more than {MAX_COPY_CALLS} kernel calls") from None
            calls = [(s[:k] + [1] + s[k + 1:], so + i * src_strides[k], do + i * dst_strides[k])
                     for s, so, do in calls for i in range(s[k])]
    for s, so, do in calls:
        emit_copy(lo, src, dst, s, src_strides, dst_strides, src_offset=so, dst_offset=do, op=op)


def _permuted_copy(lo: Lowering, src: str, dst: str, view_shape: Sequence[int],
                   perm: Sequence[int], op: str) -> None:
    """dst = transpose(reshape(src, view_shape), perm), dst contiguous."""
    strides = contiguous_strides(view_shape)
    out_shape = [view_shape[p] for p in perm]
    emit_copy_nd(lo, src, dst, out_shape, [strides[p] for p in perm],
                 contiguous_strides(out_shape), op=op)


# ---------------------------------------------------------------------------------- Transpose

@register("Transpose")
class Transpose(OpDef):
    quant_rules = ("movement",)
    attributes = {"perm": None}

    @staticmethod
    def _perm(node: Node, rank: int) -> list[int]:
        perm = node.attr("perm")
        if perm is None:
            return list(range(rank))[::-1]
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(rank)):
            raise ModelError(f"perm {perm} is not a permutation of {rank} axes")
        return perm

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        perm = self._perm(node, len(x.shape))
        return [(x.dtype, tuple(x.shape[p] for p in perm))]

    def dynamic(self, node, ins, g):
        x = ins[0]
        if x.dyn is None:
            return [None]
        return [(self._perm(node, len(x.shape)).index(x.dyn[0]), x.dyn[1])]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        _permuted_copy(lo, node.inputs[0], node.outputs[0], x.shape,
                       self._perm(node, len(x.shape)), node.op_type)


# ---------------------------------------------------------------------------------- Concat

@register("Concat")
class Concat(OpDef):
    quant_rules = ("concat",)
    attributes = {"axis": None}

    def _axis(self, node: Node, rank: int) -> int:
        axis = node.attr("axis")
        if axis is None:
            if node.version >= 4:
                raise ModelError("Concat needs an axis attribute")
            axis = 1
        if rank == 0:
            raise ModelError("Concat of scalars is not defined")
        return norm_axis(int(axis), rank)

    def infer(self, node, ins, g):
        present = [v for v in ins if v is not None]
        if not present:
            raise ModelError("Concat needs at least one input")
        dtype = require_dtype(node, present, ANY_DTYPE)
        rank = len(present[0].shape)
        axis = self._axis(node, rank)
        out = list(present[0].shape)
        out[axis] = 0
        for v in present:
            if len(v.shape) != rank or any(d != e for i, (d, e) in
                                           enumerate(zip(v.shape, present[0].shape))
                                           if i != axis):
                raise ModelError(f"inputs {' and '.join(str(list(p.shape)) for p in present)} "
                                 f"cannot be concatenated on axis {axis}")
            out[axis] += v.shape[axis]
        return [(dtype, tuple(out))]

    def dynamic(self, node, ins, g):
        present = [v for v in ins if v is not None]
        dyns = {v.dyn for v in present}
        if dyns == {None}:
            return [None]
        axis = self._axis(node, len(present[0].shape))
        if all(d is None or d[0] == axis for d in dyns):   # packed at run time: a count of its own
            return [(axis, self._same_count(node, g) or node.outputs[0])]
        if len(dyns) > 1:
            refuse_dynamic(node, present, "concatenates it with inputs of another "
                                          "data-dependent size")
        return [present[0].dyn]

    def lower(self, node: Node, lo: Lowering) -> None:
        out = node.outputs[0]
        out_shape = lo.value(out).shape
        axis = self._axis(node, len(out_shape))
        if lo.value(out).dyn is not None and lo.value(out).dyn[0] == axis:
            self._counted(node, lo, axis)
            return
        out_strides = contiguous_strides(out_shape)
        offset = 0
        sliced: set[str] = set()
        for name in node.inputs:
            if not name:
                continue
            shape = lo.value(name).shape
            start = offset * out_strides[axis]
            if _writes_into_slice(lo, node, name, axis, start, sliced):
                lo.slice_alias(name, out, start * np.dtype(lo.value(out).dtype).itemsize)
                sliced.add(name)
            else:
                emit_copy_nd(lo, name, out, shape, contiguous_strides(shape), out_strides,
                             dst_offset=start, op=node.op_type)
            offset += shape[axis]

    def _parts(self, node: Node, g) -> tuple:
        """What the count of a Concat along a data-dependent axis adds up: each input's count
        key, or its static length."""
        present = [g.values[i] for i in node.inputs if i]
        axis = self._axis(node, len(present[0].shape))
        return tuple(v.dyn[1] if v.dyn is not None else v.shape[axis] for v in present)

    def _same_count(self, node: Node, g) -> str | None:
        """The key of an earlier Concat along a data-dependent axis that adds up the same
        counts (torchvision concatenates every class's boxes, then their labels: one count),
        so that elementwise operators may combine the two."""
        parts = self._parts(node, g)
        for other in g.nodes:
            if other is node:
                return None
            out = g.values.get(other.outputs[0]) if other.outputs else None
            if other.op_type == "Concat" and other.domain in ("", "ai.onnx") and out \
                    is not None and out.dyn is not None and out.dyn[1] == other.outputs[0] \
                    and self._parts(other, g) == parts:
                return other.outputs[0]
        return None

    def _counted(self, node: Node, lo: Lowering, axis: int) -> None:
        """Along a data-dependent axis: the inputs' valid parts packed one after the other
        (mlcc_concat__counted), the output's count their total (of its own; the key of an
        earlier Concat of the same counts keeps that one's, this one's cursor is private)."""
        out = lo.value(node.outputs[0])
        key = out.dyn[1]
        count = lo.count(key) if key == out.name else lo.temp(f"{out.name}.cursor", "int64", ())
        first = True
        for name in node.inputs:
            if not name:
                continue
            v = lo.value(name)
            src = name if v.numel else ""
            lo.call("mlcc_concat__counted",
                    [src, lo.count_of(name) if v.dyn is not None else "", count, out.name],
                    [count, out.name], params_type="mlcc_concat_counted_params",
                    params={"outer": math.prod(out.shape[:axis]), "src_max": v.shape[axis],
                            "inner": math.prod(out.shape[axis + 1:]),
                            "dst_max": out.shape[axis],
                            "elem_size": np.dtype(out.dtype).itemsize, "first": int(first)},
                    returns_status=True)
            first = False


def _writes_into_slice(lo: Lowering, node: Node, name: str, axis: int, start: int,
                       sliced: set[str]) -> bool:
    """Whether Concat's input `name` can be computed straight into its part of the output,
    elements [start, start + its size) (no copy: Lowering.slice_alias): the part is one
    contiguous run (every axis before the concatenated one of size 1, as in a batch-1 NCHW
    channel Concat) starting on a TENSOR_ALIGN boundary of a static, arena-resident output;
    the input is a run-time tensor of the arena (not the caller's input or output, not a
    constant), owns its storage (not a view of another tensor), appears once in the Concat,
    and neither the Concat nor any call that wrote it runs under a run-time If or loop."""
    g, prog = lo.graph, lo.program
    out, v = node.outputs[0], lo.value(name)
    shape = lo.value(out).shape
    if (node.guard or is_symbolic(shape) or is_symbolic(v.shape) or v.dtype in PACKED_BITS
            or any(d != 1 for d in shape[:axis])
            or start * np.dtype(v.dtype).itemsize % TENSOR_ALIGN):
        return False
    if (v.is_const or name in g.inputs or name in g.outputs or out in g.outputs
            or name in prog.aliases or out in prog.aliases or name in sliced or name == out):
        return False
    return not any(c.guard for c in prog.calls if name in {prog.root(w) for w in c.writes if w})


# ---------------------------------------------------------------------------------- Split

@register("Split")
class Split(OpDef):
    quant_rules = ("split",)
    attributes = {"axis": None, "split": None, "num_outputs": None}

    def _sizes(self, node: Node, shape, g) -> tuple[int, list[int]]:
        axis = norm_axis(int(node.attr("axis", 0)), len(shape))
        dim = shape[axis]
        n = len(node.outputs)
        if node.version >= 13:
            split = ints_attr_or_input(g, node, "split", 1, 13)
        else:
            split = node.attr("split")
            if split is None and node.version < 2 and node.input(1):
                split = ints_attr_or_input(g, node, "split", 1, 1)
            split = None if split is None else [int(s) for s in split]
        num_outputs = node.attr("num_outputs")
        if split is not None:
            if num_outputs is not None:
                raise ModelError("Split takes either split or num_outputs, not both")
            if len(split) != n or sum(split) != dim or any(s < 0 for s in split):
                raise ModelError(f"split {split} does not divide axis {axis} ({dim}) into "
                                 f"{n} outputs")
            return axis, split
        if num_outputs is not None:
            if int(num_outputs) != n:
                raise ModelError(f"num_outputs={num_outputs} but the node has {n} outputs")
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if sizes[-1] < 0:
                raise ModelError(f"axis {axis} ({dim}) cannot be split into {n} outputs")
            return axis, sizes
        if dim % n:
            raise ModelError(f"axis {axis} ({dim}) does not split equally into {n} outputs")
        return axis, [dim // n] * n

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        axis, sizes = self._sizes(node, x.shape, g)
        return [(x.dtype, tuple(s if i == axis else d for i, d in enumerate(x.shape)))
                for s in sizes]

    def dynamic(self, node, ins, g):
        """Along another axis than a data-dependent one, every part carries its count."""
        x = ins[0]
        refuse_dynamic(node, ins[1:])
        if x.dyn is not None and x.dyn[0] == self._sizes(node, x.shape, g)[0]:
            refuse_dynamic(node, [x], "splits that axis")
        return [x.dyn] * len(node.outputs)

    def lower(self, node: Node, lo: Lowering) -> None:
        src = node.inputs[0]
        shape = lo.value(src).shape
        axis, sizes = self._sizes(node, shape, lo.graph)
        strides = contiguous_strides(shape)
        used = lo.graph.consumers()
        offset = 0
        for out, size in zip(node.outputs, sizes):
            # Exporters often split off parts nothing reads: those need no copy.
            if out and (out in used or out in lo.graph.outputs):
                out_shape = lo.value(out).shape
                emit_copy_nd(lo, src, out, out_shape, strides, contiguous_strides(out_shape),
                             src_offset=offset * strides[axis], op=node.op_type)
            offset += size


# ---------------------------------------------------------------------------------- Slice

def slice_ranges(shape, starts, ends, axes, steps) -> list[range]:
    """Per axis, the input indices a Slice keeps (ONNX clamping rules)."""
    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ "
                         f"in length")
    axes = [norm_axis(a, rank, "axes") for a in axes]
    if len(set(axes)) != len(axes):
        raise ModelError(f"repeated axes {axes}")
    ranges = [span(0, d, 1) for d in shape]
    for a, start, end, step in zip(axes, starts, ends, steps):
        dim = shape[a]
        if step == 0:
            raise ModelError("a slice step is 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = smin(smax(start, 0), dim), smin(smax(end, 0), dim)
        else:
            start, end = smin(smax(start, 0), dim - 1), smin(smax(end, -1), dim - 1)
        ranges[a] = span(start, end, step)
    return ranges


@dataclass(frozen=True)
class Span:
    """range(start, stop, step) of a dynamic size (ir.symbolic): len() must be an int."""
    start: object
    stop: object
    step: int

    @property
    def size(self):
        if self.step < 0:
            raise SymInt.var(dim_vars([self.start, self.stop])[0]).undecided(
                "a slice with a negative step")
        return smax((self.stop - self.start + self.step - 1) // self.step, 0) \
            if self.stop >= self.start else 0


def span(start, stop, step):
    if isinstance(start, int) and isinstance(stop, int):
        return range(start, stop, step)
    return Span(start, stop, step)


def span_len(r) -> int:
    return len(r) if isinstance(r, range) else r.size


@register("Slice")
class Slice(OpDef):
    quant_rules = ("movement",)
    attributes = {"starts": None, "ends": None, "axes": None}   # attributes before opset 10

    def _params(self, node: Node, g) -> tuple:
        """starts, ends, axes (None: all), steps (None: ones), as the model gives them."""
        if node.version < 10:
            starts, ends = node.attr("starts"), node.attr("ends")
            if starts is None or ends is None:
                raise ModelError("Slice needs starts and ends")
            axes, steps = node.attr("axes"), None
        else:
            starts = ints_attr_or_input(g, node, "starts", 1, 10, symbolic=True)
            ends = ints_attr_or_input(g, node, "ends", 2, 10, symbolic=True)
            axes = ints_attr_or_input(g, node, "axes", 3, 10)
            steps = ints_attr_or_input(g, node, "steps", 4, 10)
            if starts is None or ends is None:
                raise ModelError("Slice needs starts and ends")
        return ([as_dim(s) for s in starts], [as_dim(e) for e in ends],
                None if axes is None else [int(a) for a in axes],
                None if steps is None else [int(s) for s in steps])

    def _ranges(self, node: Node, shape, g) -> list[range]:
        return slice_ranges(shape, *self._params(node, g))

    def _counted_bounds(self, node: Node, x, g) -> tuple[int, int] | None:
        """(start, end) along x's data-dependent axis when the Slice cuts it, else None;
        refused unless both are non-negative constants and the step is 1 (a prefix of the
        valid part, from start: negative bounds would count from the run-time end)."""
        starts, ends, axes, steps = self._params(node, g)
        rank = len(x.shape)
        axes = list(range(len(starts))) if axes is None else [a % rank for a in axes]
        if x.dyn[0] not in axes:
            return None
        i = axes.index(x.dyn[0])
        s, e, st = starts[i], ends[i], 1 if steps is None else steps[i]
        if not (isinstance(s, int) and isinstance(e, int) and st == 1 and s >= 0 and e >= 0):
            refuse_dynamic(node, [x], "slices that axis (with bounds other than non-negative "
                                      "constants and a step of 1)")
        if range(x.shape[x.dyn[0]])[s:e] == range(x.shape[x.dyn[0]]):
            return None
        return s, e

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        return [(x.dtype, tuple(span_len(r) for r in self._ranges(node, x.shape, g)))]

    def dynamic(self, node, ins, g):
        x = ins[0]
        refuse_dynamic(node, ins[1:])
        if x.dyn is None:
            return [None]
        if self._counted_bounds(node, x, g) is not None:    # a count of its own
            return [(x.dyn[0], node.outputs[0])]
        return [x.dyn]

    def lower(self, node: Node, lo: Lowering) -> None:
        src = node.inputs[0]
        shape = lo.value(src).shape
        ranges = self._ranges(node, shape, lo.graph)
        out_shape = [span_len(r) for r in ranges]
        x, out = lo.value(src), lo.value(node.outputs[0])
        if out.dyn is not None and out.dyn[1] == out.name:
            # valid: the input's from start to min(its count, end), computed at run time
            start, end = self._counted_bounds(node, x, lo.graph)
            count = SymInt.var(count_var(x.dyn[1], shape[x.dyn[0]]))
            emit_sizes(lo, lo.count(out.name), [smax(smin(count, end) - start, 0)])
        if math.prod(out_shape) == 0:
            return
        strides = contiguous_strides(shape)
        emit_copy_nd(lo, src, node.outputs[0], out_shape,
                     [s * r.step for s, r in zip(strides, ranges)],
                     contiguous_strides(out_shape),
                     src_offset=sum(s * r.start for s, r in zip(strides, ranges)),
                     op=node.op_type)


# ---------------------------------------------------------------------------------- Expand

@register("Expand", since=8)
class Expand(OpDef):
    attributes = {}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        shape = [as_dim(d) for d in const_input(g, node, 1, "shape").reshape(-1)]
        if any(d < 0 for d in shape):
            raise ModelError(f"negative dimension in shape {shape}")
        return [(x.dtype, broadcast_shapes(x.shape, shape))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, out = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        emit_copy_nd(lo, x.name, out.name, out.shape, broadcast_strides(x.shape, out.shape),
                     contiguous_strides(out.shape), op=node.op_type)


# ---------------------------------------------------------------------------------- Tile

@register("Tile", since=6)
class Tile(OpDef):
    attributes = {}

    @staticmethod
    def _repeats(node: Node, rank: int, g) -> list[int]:
        reps = [int(r) for r in const_input(g, node, 1, "repeats").reshape(-1)]
        if len(reps) != rank or any(r < 0 for r in reps):
            raise ModelError(f"repeats {reps} must be {rank} non-negative integers")
        return reps

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        reps = self._repeats(node, len(x.shape), g)
        return [(x.dtype, tuple(d * r for d, r in zip(x.shape, reps)))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        reps = self._repeats(node, len(x.shape), lo.graph)
        # Output axis k, of size r*d, is the pair (repeat, index) of sizes (r, d): the output is
        # contiguous over [r0, d0, r1, d1, ...] and the input is read with stride 0 on each r.
        strides = contiguous_strides(x.shape)
        shape = [v for r, d in zip(reps, x.shape) for v in (r, d)]
        src = [v for s in strides for v in (0, s)]
        emit_copy_nd(lo, x.name, node.outputs[0], shape, src, contiguous_strides(shape),
                     op=node.op_type)


# ------------------------------------------------------------------- DepthToSpace, SpaceToDepth

def _blocksize(node: Node, x) -> int:
    b = node.attr("blocksize")
    if b is None or int(b) < 1:
        raise ModelError("blocksize must be a positive integer")
    if len(x.shape) != 4:
        raise ModelError(f"{node.op_type} needs a 4-D NCHW input, got {list(x.shape)}")
    return int(b)


@register("DepthToSpace")
class DepthToSpace(OpDef):
    quant_rules = ("movement",)
    attributes = {"blocksize": None, "mode": lambda v: v in ("DCR", "CRD")}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        b = _blocksize(node, x)
        n, c, h, w = x.shape
        if c % (b * b):
            raise ModelError(f"{c} channels do not divide by blocksize^2 = {b * b}")
        return [(x.dtype, (n, c // (b * b), h * b, w * b))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        b = _blocksize(node, x)
        n, c, h, w = x.shape
        if node.attr("mode", "DCR") == "DCR":
            view, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        else:
            view, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
        _permuted_copy(lo, x.name, node.outputs[0], view, perm, node.op_type)


@register("SpaceToDepth")
class SpaceToDepth(OpDef):
    """mode (opset 28): DCR (the default, and the only order before) or CRD."""
    attributes = {"blocksize": None, "mode": lambda v: v in ("DCR", "CRD")}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ANY_DTYPE)
        b = _blocksize(node, x)
        n, c, h, w = x.shape
        if h % b or w % b:
            raise ModelError(f"spatial size {h}x{w} does not divide by blocksize {b}")
        return [(x.dtype, (n, c * b * b, h // b, w // b))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        b = _blocksize(node, x)
        n, c, h, w = x.shape
        perm = (0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
        _permuted_copy(lo, x.name, node.outputs[0], (n, c, h // b, b, w // b, b), perm,
                       node.op_type)
