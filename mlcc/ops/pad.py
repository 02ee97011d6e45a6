"""Pad, modes constant, reflect, edge and wrap, for every dtype, with negative pads (cropping).

Every mode is separable: output index i on axis k reads input index map_k[i] (or the constant
when map_k[i] = -1). The maps are computed here with numpy's own np.pad on index ranges, which
is what the ONNX reference implementation runs, and stored as one int32 table; the kernel
(mlcc_pad) only follows them. Negative pads crop first, then the positive pads apply, as
onnxruntime does."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from ..ir.symbolic import SymInt, is_symbolic
from .common import (C_DTYPES, MAX_RANK, const_input, contiguous_strides, emit_plain_copy,
                     norm_axis, require_dtype)
from .registry import OpDef, lookup, register

MODES = ("constant", "reflect", "edge", "wrap")


def axis_map(dim: int, begin: int, end: int, mode: str) -> np.ndarray:
    """Source index of each output index along one axis (-1: the constant value)."""
    start, stop = max(0, -begin), dim - max(0, -end)
    if stop < start:
        raise ModelError(f"pads ({begin}, {end}) crop more than the {dim} elements of an axis")
    kept = np.arange(start, stop, dtype=np.int64)
    width = (max(begin, 0), max(end, 0))
    if mode == "constant":
        return np.pad(kept, width, mode="constant", constant_values=-1)
    if kept.size == 0 and width != (0, 0):
        raise ModelError(f"{mode} padding of an empty axis")
    return np.pad(kept, width, mode=mode)


@register("Pad", since=2)
class Pad(OpDef):
    attributes = {"mode": lambda v: v in MODES, "pads": None, "value": None}

    def _pads(self, node: Node, rank: int, g) -> list[tuple[int, int]]:
        if node.version < 11:
            pads = node.attr("pads")
            if pads is None:
                raise ModelError("Pad needs a pads attribute")
            pads, axes = [int(p) for p in pads], None
        else:
            pads = [int(p) for p in const_input(g, node, 1, "pads").reshape(-1)]
            axes = None
            if node.version >= 18 and node.input(3):
                axes = [norm_axis(int(a), rank, "axes")
                        for a in const_input(g, node, 3, "axes").reshape(-1)]
        axes = list(range(rank)) if axes is None else axes
        if len(set(axes)) != len(axes):
            raise ModelError(f"repeated axes {axes}")
        if len(pads) != 2 * len(axes):
            raise ModelError(f"{len(pads)} pads for {len(axes)} axes")
        out = [(0, 0)] * rank
        for i, a in enumerate(axes):
            out[a] = (pads[i], pads[len(axes) + i])
        return out

    def _value(self, node: Node, dtype: str, g) -> np.ndarray:
        if node.version < 11:
            v = node.attr("value", 0.0)
        else:
            arr = const_input(g, node, 2, "constant_value")
            v = 0 if arr is None or arr.size == 0 else arr.reshape(-1)[0]
        return np.array(v).astype(dtype)

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], list(C_DTYPES))
        if node.version >= 11 and len(ins) > 2 and ins[2] is not None and \
                ins[2].dtype != x.dtype:
            raise ModelError(f"constant_value is {ins[2].dtype}, data is {x.dtype}")
        mode = node.attr("mode", "constant")
        pads = self._pads(node, len(x.shape), g)
        if is_symbolic(x.shape):
            shape = tuple(self._computed_size(d, b, e, mode) for d, (b, e) in zip(x.shape, pads))
        else:
            shape = tuple(len(axis_map(d, b, e, mode)) for d, (b, e) in zip(x.shape, pads))
        if node.version >= 11 and node.input(2):
            const_input(g, node, 2, "constant_value")
        return [(x.dtype, shape)]

    @staticmethod
    def _computed_size(d, begin: int, end: int, mode: str):
        """The padded size of an axis for the run-time maps (mlcc_pad__computed), the kept
        part never empty where a mode other than constant pads."""
        if begin == end == 0 or not isinstance(d, SymInt):
            return d if begin == end == 0 else len(axis_map(d, begin, end, mode))
        kept = d - max(0, -begin) - max(0, -end)
        if kept < (0 if mode == "constant" else 1):     # decided by the range, else refused
            raise ModelError(f"pads ({begin}, {end}) crop more than an axis of {d} holds")
        return kept + max(begin, 0) + max(end, 0)

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        if not y.is_dynamic and y.numel == 0:     # (an empty dynamic size: the kernel's test)
            return
        if not x.shape:
            emit_plain_copy(lo, x.name, y.name, op=node.op_type)
            return
        mode = node.attr("mode", "constant")
        pads = self._pads(node, len(x.shape), lo.graph)
        # Neighbouring axes without padding merge into one (their maps are the identity).
        axes: list[list[int]] = []      # [in_dim, begin, end]
        for d, (b, e) in zip(x.shape, pads):
            if axes and b == e == 0 and axes[-1][1] == axes[-1][2] == 0:
                axes[-1][0] *= d
            else:
                axes.append([d, b, e])
        if len(axes) > MAX_RANK:
            raise UnsupportedError(f"padding {len(axes)} separate axes exceeds rank {MAX_RANK}")
        if is_symbolic(x.shape):
            self._lower_computed(node, lo, x, y, axes, mode)
            return
        maps = [axis_map(d, b, e, mode) for d, b, e in axes]
        in_dims = [d for d, _, _ in axes]
        offsets = np.cumsum([0] + [len(m) for m in maps[:-1]]).tolist()
        pad_to = MAX_RANK - len(axes)
        d, b, e = axes[-1]
        table = lo.add_const(f"{node.name}.maps", np.concatenate(maps).astype(np.int32))
        value = lo.add_const(f"{node.name}.value", self._value(node, x.dtype, lo.graph))
        lo.call("mlcc_pad", [x.name, table, value, y.name], [y.name],
                params_type="mlcc_pad_params", params={
                    "rank": len(axes), "elem_size": np.dtype(x.dtype).itemsize,
                    "out_shape": [len(m) for m in maps] + [1] * pad_to,
                    "in_strides": contiguous_strides(in_dims) + [0] * pad_to,
                    "map_offset": offsets + [0] * pad_to,
                    "run_begin": max(b, 0), "run_length": d - max(-b, 0) - max(-e, 0),
                    "run_src": max(-b, 0)}, op=f"Pad({mode})")

    def _lower_computed(self, node: Node, lo: Lowering, x, y, axes: list, mode: str) -> None:
        """Sizes known only at run time: the kernel computes the maps at each call."""
        sizes = [self._computed_size(d, b, e, mode) for d, b, e in axes]
        offsets, total = [], 0
        for n in sizes:
            offsets.append(total)
            total = total + n
        pad_to = MAX_RANK - len(axes)
        d, b, e = axes[-1]
        value = lo.add_const(f"{node.name}.value", self._value(node, x.dtype, lo.graph))
        base = {"rank": len(axes), "elem_size": np.dtype(x.dtype).itemsize,
                "out_shape": sizes + [1] * pad_to,
                "in_strides": contiguous_strides([a[0] for a in axes]) + [0] * pad_to,
                "map_offset": offsets + [0] * pad_to,
                "run_begin": max(b, 0), "run_length": d - max(-b, 0) - max(-e, 0),
                "run_src": max(-b, 0)}
        lo.call("mlcc_pad__computed", [x.name, value, y.name], [y.name],
                params_type="mlcc_pad_computed_params", params={
                    "base": base, "in_dim": [a[0] for a in axes] + [1] * pad_to,
                    "begin": [a[1] for a in axes] + [0] * pad_to,
                    "end": [a[2] for a in axes] + [0] * pad_to,
                    "mode": Enum(f"MLCC_PAD_{mode.upper()}")},
                scratch_bytes=total * 4, op=f"Pad({mode})")


@register("CenterCropPad", since=18)
class CenterCropPad(OpDef):
    """Crops or zero-pads each axis of `axes` to `shape`, centred (the odd element of a crop
    or a pad at the end): one Pad with negative pads where it crops."""
    attributes = {"axes": None}

    def _pads(self, node: Node, x, g) -> np.ndarray:
        rank = len(x.shape)
        shape = [int(s) for s in const_input(g, node, 1, "shape").reshape(-1)]
        axes = [norm_axis(int(a), rank, "axes") for a in node.attr("axes", range(rank))]
        if len(shape) != len(axes) or len(set(axes)) != len(axes) or min(shape, default=0) < 0:
            raise ModelError(f"shape {shape} does not fit axes {axes} of rank {rank}")
        pads = np.zeros(2 * rank, np.int64)
        for a, s in zip(axes, shape):
            diff = s - x.shape[a]
            pads[a] = (abs(diff) // 2) * (1 if diff > 0 else -1)
            pads[rank + a] = diff - pads[a]
        return pads

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], list(C_DTYPES))
        pads = self._pads(node, x, g)
        rank = len(x.shape)
        return [(x.dtype, tuple(int(d + pads[a] + pads[rank + a]) for a, d in
                                enumerate(x.shape)))]

    def lower(self, node: Node, lo: Lowering) -> None:
        pads = lo.add_const(f"{node.name}.pads",
                            self._pads(node, lo.value(node.inputs[0]), lo.graph))
        pad = Node(node.name, "Pad", [node.inputs[0], pads], list(node.outputs), version=18)
        lookup(pad).lower(pad, lo)
