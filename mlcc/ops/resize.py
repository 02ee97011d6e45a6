"""Resize (opsets 10-19) and Upsample (7, 9): nearest and linear on the two innermost axes.

Everything that depends on the coordinate mode is computed here, per output row and column:
source indices for nearest, two source indices and two weights for linear. The kernels
(runtime_c/kernels/resize.c) only gather and blend, so every mode costs the same at run time.

The tables follow onnx/reference/ops/op_resize.py (separable per axis, neighbours clamped to the
edge, identity on axes that keep their size at scale 1), with the arithmetic done as onnxruntime
does it, because that is what exported models are checked against: coordinates in float32,
output sizes floor(float32(scale) * size), `length_resized` the integer output size (align_corners,
pytorch_half_pixel), round_prefer_* ties detected within 1e-6, and Resize-10/Upsample using
asymmetric coordinates with floor (ceil when downsampling) for nearest. The ONNX reference computes
in float64 and can pick the neighbouring pixel where a coordinate lands within rounding of a tie.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Lowering, Node
from .common import C_DTYPES, const_input, norm_axis, require_dtype
from .registry import OpDef, register

COORD_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
               "tf_half_pixel_for_nn", "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TIE_EPSILON = 1e-6
F32 = np.float32


def source_coords(mode: str, out_size: int, in_size: int, scale: np.float32) -> np.ndarray:
    """x_original per output index along one axis, in float32 as onnxruntime computes it."""
    x = np.arange(out_size, dtype=F32)
    half, one = F32(0.5), F32(1)
    length_in, length_out = F32(in_size), F32(out_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "asymmetric":
            return x / scale
        if mode == "half_pixel":
            return (x + half) / scale - half
        if mode == "pytorch_half_pixel":
            return (x + half) / scale - half if out_size > 1 else np.zeros(out_size, F32)
        if mode == "tf_half_pixel_for_nn":
            return (x + half) / scale
        if mode == "align_corners":
            if out_size == 1:
                return np.zeros(out_size, F32)
            return x * (length_in - one) / (length_out - one)
        if mode == "half_pixel_symmetric":
            output_width = F32(scale * length_in)
            adjustment = F32(length_out / output_width)
            offset = F32(F32(length_in / F32(2)) * (one - adjustment))
            orig = np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(scale) - 0.5
            return orig.astype(F32)
    raise UnsupportedError(f"coordinate_transformation_mode={mode!r} is not supported")


def nearest_table(coord_mode: str, nearest_mode: str, out_size: int, in_size: int,
                  scale: np.float32) -> np.ndarray:
    """The source index of each output index (nearest_mode "simple": Resize-10/Upsample)."""
    if scale == F32(1) and out_size == in_size:
        return np.arange(out_size, dtype=np.int64)
    x = source_coords(coord_mode, out_size, in_size, scale).astype(np.float64)
    fl = np.floor(x)
    tie = np.abs(x - fl - 0.5) <= TIE_EPSILON
    round_half_away = np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))
    if nearest_mode == "round_prefer_floor":
        idx = np.where(tie, fl, round_half_away)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.where(tie, fl + 1, round_half_away)
    elif nearest_mode == "floor":
        idx = fl
    elif nearest_mode == "ceil":
        idx = np.ceil(x)
    elif nearest_mode == "simple":
        idx = np.ceil(x) if scale < 1 else np.trunc(x)
    else:
        raise UnsupportedError(f"nearest_mode={nearest_mode!r} is not supported")
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


def linear_table(coord_mode: str, out_size: int, in_size: int,
                 scale: np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per output index: the two source indices and their weights."""
    if scale == F32(1) and out_size == in_size:
        idx = np.arange(out_size, dtype=np.int64)
        return idx, idx, np.ones(out_size, F32), np.zeros(out_size, F32)
    x = source_coords(coord_mode, out_size, in_size, scale)
    x = np.clip(x, F32(0), F32(in_size - 1))
    i0 = np.minimum(x.astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    w1 = np.abs(x - i0.astype(F32)).astype(F32)     # weight of i1
    w0 = np.abs(x - i1.astype(F32)).astype(F32)     # weight of i0
    same = i0 == i1
    w0 = np.where(same, F32(0.5), w0).astype(F32)
    w1 = np.where(same, F32(0.5), w1).astype(F32)
    return i0, i1, w0, w1


class _ResizeBase(OpDef):
    """Shared by Resize and Upsample: subclasses say where scales/sizes come from."""

    def _mode(self, node: Node) -> str:
        return node.attr("mode", "nearest")

    def _coord_mode(self, node: Node) -> str:
        return "asymmetric"

    def _nearest_mode(self, node: Node) -> str:
        return "simple"

    def _scales_sizes(self, node: Node, rank: int, g) -> tuple[list | None, list | None]:
        raise NotImplementedError

    def _plan(self, node: Node, shape, g) -> tuple[list[int], list[np.float32]]:
        """Output shape and per-axis float32 scales; refuses what the kernels do not cover."""
        rank = len(shape)
        scales, sizes = self._scales_sizes(node, rank, g)
        if sizes is not None:
            if len(sizes) != rank:
                raise ModelError(f"sizes {sizes} do not match rank {rank}")
            out = [int(s) for s in sizes]
            scl = [F32(o) / F32(i) if i else F32(1) for o, i in zip(out, shape)]
        elif scales is not None:
            if len(scales) != rank:
                raise ModelError(f"scales {scales} do not match rank {rank}")
            scl = [F32(s) for s in scales]
            if any(not s > 0 for s in scl):
                raise ModelError(f"scales {scales} must be positive")
            out = [int(math.floor(F32(s * F32(d)))) for s, d in zip(scl, shape)]
            if self._coord_mode(node) == "align_corners" and any(
                    F32(s * F32(d)) != o for s, d, o in zip(scl, shape, out)):
                # The ONNX reference divides by the fractional output length (scale x size),
                # onnxruntime by the integer one: the engines disagree, so mlcc refuses.
                raise UnsupportedError(f"align_corners with scales {scales} whose output "
                                       f"lengths are fractional is not supported (onnxruntime "
                                       f"and the ONNX reference disagree there); give sizes")
        else:
            raise ModelError("Resize needs scales or sizes")
        if rank < 2:
            raise UnsupportedError(f"resizing a rank-{rank} tensor is not supported (the "
                                   f"two innermost axes of a rank >= 2 tensor are)")
        moved = [i for i in range(rank - 2) if out[i] != shape[i] or scl[i] != F32(1)]
        if moved:
            raise UnsupportedError(f"resizing axis {moved[0]} is not supported: only the two "
                                   f"innermost (H and W) axes can be resized")
        if any(o < 1 for o in out):
            raise ModelError(f"output shape {out} has an empty axis")
        return out, scl

    def infer(self, node, ins, g):
        x = ins[0]
        mode = self._mode(node)
        if mode not in ("nearest", "linear", "bilinear"):
            raise UnsupportedError(f"mode={mode!r} is not supported (nearest and linear are)")
        if mode == "nearest":
            require_dtype(node, [x], list(C_DTYPES))
        else:
            require_dtype(node, [x], ["float32"])
        out, _ = self._plan(node, x.shape, g)
        return [(x.dtype, tuple(out))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        out, scl = self._plan(node, x.shape, lo.graph)
        ih, iw = x.shape[-2:]
        oh, ow = out[-2:]
        params = {"planes": math.prod(x.shape[:-2]), "in_h": ih, "in_w": iw, "out_h": oh,
                  "out_w": ow, "elem_size": np.dtype(x.dtype).itemsize}
        coord = self._coord_mode(node)
        if self._mode(node) == "nearest":
            nm = self._nearest_mode(node)
            table = np.concatenate([nearest_table(coord, nm, oh, ih, scl[-2]),
                                    nearest_table(coord, nm, ow, iw, scl[-1])])
            name = lo.add_const(f"{node.name}.index", table.astype(np.int32))
            lo.call("mlcc_resize_nearest", [x.name, name, y.name], [y.name],
                    params_type="mlcc_resize_params", params=params, op=f"{node.op_type}(nearest)")
            return
        r0, r1, wr0, wr1 = linear_table(coord, oh, ih, scl[-2])
        c0, c1, wc0, wc1 = linear_table(coord, ow, iw, scl[-1])
        index = lo.add_const(f"{node.name}.index",
                             np.concatenate([r0, r1, c0, c1]).astype(np.int32))
        weights = lo.add_const(f"{node.name}.weights",
                               np.concatenate([wr0, wr1, wc0, wc1]).astype(np.float32))
        lo.call("mlcc_f32_resize_linear", [x.name, index, weights, y.name], [y.name],
                params_type="mlcc_resize_params", params=params, scratch_bytes=2 * ow * 4,
                op=f"{node.op_type}(linear)")

    def flops(self, node, g):
        y = g.values[node.outputs[0]]
        return 3 * y.numel if self._mode(node) != "nearest" else 0


@register("Resize", since=10)
class Resize(_ResizeBase):
    attributes = {
        "mode": None,                    # checked in infer, with a clearer message
        "coordinate_transformation_mode": lambda v: v in COORD_MODES,
        "nearest_mode": lambda v: v in NEAREST_MODES,
        "cubic_coeff_a": None,           # cubic only
        "exclude_outside": None,         # linear and nearest neighbours are clamped anyway
        "extrapolation_value": None,     # tf_crop_and_resize only
        "antialias": lambda v: int(v) == 0,
        "axes": None,
        "keep_aspect_ratio_policy": lambda v: v == "stretch",
    }

    def _coord_mode(self, node):
        if node.version < 11:
            return "asymmetric"
        return node.attr("coordinate_transformation_mode", "half_pixel")

    def _nearest_mode(self, node):
        if node.version < 11:
            return "simple"
        return node.attr("nearest_mode", "round_prefer_floor")

    def _scales_sizes(self, node, rank, g):
        if node.version < 11:
            return [float(s) for s in const_input(g, node, 1, "scales").reshape(-1)], None
        scales = const_input(g, node, 2, "scales")
        sizes = const_input(g, node, 3, "sizes")
        scales = None if scales is None or scales.size == 0 else \
            [float(s) for s in scales.reshape(-1)]
        sizes = None if sizes is None or sizes.size == 0 else [int(s) for s in sizes.reshape(-1)]
        if scales is not None and sizes is not None:
            raise ModelError("Resize takes scales or sizes, not both")
        axes = node.attr("axes") if node.version >= 18 else None
        if axes is not None:
            axes = [norm_axis(int(a), rank, "axes") for a in axes]
            given = scales if scales is not None else sizes
            if given is None or len(given) != len(axes) or len(set(axes)) != len(axes):
                raise ModelError(f"axes {axes} do not match scales/sizes")
            full = [1.0] * rank if scales is not None else list(g.values[node.inputs[0]].shape)
            for a, v in zip(axes, given):
                full[a] = v
            if scales is not None:
                scales = full
            else:
                sizes = full
        return scales, sizes


@register("Upsample", since=7, until=9)
class Upsample(_ResizeBase):
    attributes = {"mode": None, "scales": None}   # scales: the opset 7 attribute

    def _scales_sizes(self, node, rank, g):
        if node.version < 9:
            scales = node.attr("scales")
            if scales is None:
                raise ModelError("Upsample needs scales")
        else:
            scales = const_input(g, node, 1, "scales").reshape(-1)
        scales = [float(s) for s in scales]
        if any(s < 1 for s in scales):
            raise ModelError(f"Upsample scales {scales} must be >= 1")
        return scales, None
