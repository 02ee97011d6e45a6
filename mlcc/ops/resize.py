"""Resize (opsets 10-19) and Upsample (7, 9): nearest, linear and cubic on the two innermost axes.

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

Cubic, antialias, exclude_outside, tf_crop_and_resize and align_corners on a fractional output
length (scale x size) take the general path: per output row and column, a fixed number of source
indices ("taps") and weights, computed in float64 as onnx/reference/ops/op_resize.py does
(onnxruntime agrees with it on these up to float32 rounding, except align_corners with a fractional
length, where onnxruntime divides by the integer length; mlcc follows the reference and the backend test there; and pytorch_half_pixel
onto one output pixel, where mlcc takes coordinate 0 as the spec text and onnxruntime do).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from ..ir.symbolic import SymInt, as_dim, dim_vars, evaluate, is_symbolic
from .common import C_DTYPES, const_input, norm_axis, require_dtype
from .registry import OpDef, register

COORD_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
               "tf_half_pixel_for_nn", "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TIE_EPSILON = 1e-6
F32 = np.float32


# Over sizes known only at run time (bounded dynamic shapes) the kernels compute the tables
# themselves (mlcc_*resize*__computed), for these modes.
COMPUTED_COORDS = {"asymmetric": "MLCC_RESIZE_ASYMMETRIC", "half_pixel": "MLCC_RESIZE_HALF_PIXEL",
                   "pytorch_half_pixel": "MLCC_RESIZE_PYTORCH_HALF_PIXEL",
                   "tf_half_pixel_for_nn": "MLCC_RESIZE_TF_HALF_PIXEL_FOR_NN",
                   "align_corners": "MLCC_RESIZE_ALIGN_CORNERS"}
COMPUTED_ROUNDING = {"round_prefer_floor": "MLCC_RESIZE_ROUND_PREFER_FLOOR",
                     "round_prefer_ceil": "MLCC_RESIZE_ROUND_PREFER_CEIL",
                     "floor": "MLCC_RESIZE_FLOOR", "ceil": "MLCC_RESIZE_CEIL",
                     "simple": "MLCC_RESIZE_SIMPLE"}
# the coordinate modes mlcc_f32_resize_taps__computed computes (cubic, antialias,
# tf_crop_and_resize: the taps path)
TAPS_COMPUTED = {**{k: v for k, v in COMPUTED_COORDS.items() if k != "tf_half_pixel_for_nn"},
                 "half_pixel_symmetric": "MLCC_RESIZE_HALF_PIXEL_SYMMETRIC",
                 "tf_crop_and_resize": "MLCC_RESIZE_TF_CROP_AND_RESIZE"}
MAX_CHECKED_SIZES = 1 << 22
RESIZE_SLICES = 4      # MLCC_RESIZE_SLICES (resize.h): threads that share a linear resize


def scaled_size(scale: np.float32, d):
    """The output size floor(float32(scale) x float32(d)), as onnxruntime computes it. Over a
    dynamic size d: (p d) // q for the float32 scale p / q, where that equals the float32
    product at every value of d's range (checked here; refused where it does not)."""
    if not isinstance(d, SymInt):
        return int(math.floor(F32(scale * F32(d))))
    frac = Fraction(float(scale))
    p, q = frac.numerator, frac.denominator
    values = np.arange(d.lo, d.hi + 1, dtype=np.int64)
    if q > 1 << 16 or p > 1 << 30 or values.size > MAX_CHECKED_SIZES or np.any(
            np.floor(F32(scale) * values.astype(F32)).astype(np.int64) != (p * values) // q):
        raise d.undecided(f"the output size of a resize by a scale of {F32(scale)!s}")
    return (d * p) // q


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


def _cubic_coeffs(ratio: np.ndarray, a: float) -> np.ndarray:
    r = ratio[:, None]
    d = np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1)       # distances of the four taps
    return _cubic_kernel(d, a)


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def antialias_start(mode: str, scale: float) -> int:
    """The first tap (relative to the coordinate's base) of an antialiased downscale: the
    linear or cubic filter stretched by 1 / scale reaches this far; the taps run from it to
    1 - it (resize.c antialias_start)."""
    return int(np.floor((-1 if mode == "linear" else -2) / scale) + 1)


def tap_count(mode: str, antialias: bool, scale: float) -> int:
    """Taps per output of taps_table at this scale."""
    if antialias and scale < 1:
        return 2 - 2 * antialias_start(mode, scale)
    return 2 if mode == "linear" else 4


def taps_table(mode: str, coord_mode: str, out_size: int, in_size: int, scale: float, *,
               cubic_a: float = -0.75, antialias: bool = False, exclude_outside: bool = False,
               roi: tuple[float, float] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output index along one axis: `taps` source indices (clamped to the edge), their
    float64 weights, and whether the coordinate falls outside the input (tf_crop_and_resize,
    where the output is the extrapolation value). As the ONNX reference computes it: the
    output width in the coordinate formulas is scale x in_size, which may be fractional."""
    y = np.arange(out_size, dtype=np.float64)
    width = scale * in_size
    outside = np.zeros(out_size, bool)
    if coord_mode == "align_corners":
        x = np.zeros(out_size) if width == 1 else y * (in_size - 1) / (width - 1)
    elif coord_mode == "asymmetric":
        x = y / scale
    elif coord_mode == "tf_crop_and_resize":
        r0, r1 = roi
        x = np.full(out_size, (r1 - r0) * (in_size - 1) / 2) if width == 1 else \
            y * (r1 - r0) * (in_size - 1) / (width - 1)
        x = x + r0 * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif coord_mode == "pytorch_half_pixel":
        # 0 for one output pixel, as the spec says and onnxruntime does (the reference: -0.5)
        x = np.zeros(out_size) if out_size == 1 else (y + 0.5) / scale - 0.5
    elif coord_mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord_mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise UnsupportedError(f"coordinate_transformation_mode={coord_mode!r} is not "
                               f"supported with mode={mode!r}")
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)            # in (0, 1]: prefer the left pixel
    base = np.where(x == base, base - 1, base)            # ... so the taps sit around x - ratio
    if antialias and scale < 1:
        # The filter stretched by 1/scale: more source pixels per output pixel.
        start = antialias_start(mode, scale)
        k = np.arange(start, 2 - start)
        if mode == "linear":
            w = np.clip(1 - np.abs((k[None, :] - ratio[:, None]) * scale), 0, 1)
        else:
            w = _cubic_kernel((k[None, :] - ratio[:, None]) * scale, cubic_a)
        w = w / w.sum(axis=1, keepdims=True)
        first = start
    elif mode == "linear":
        w = np.stack([1 - ratio, ratio], axis=1)
        first = 0
    else:
        w = _cubic_coeffs(ratio, cubic_a)
        first = -1
    taps = w.shape[1]
    idx = base[:, None].astype(np.int64) + first + np.arange(taps)[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_size), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_size - 1), w, outside


class _ResizeBase(OpDef):
    """Shared by Resize and Upsample: subclasses say where scales/sizes come from."""

    def _mode(self, node: Node) -> str:
        return node.attr("mode", "nearest")

    def _coord_mode(self, node: Node) -> str:
        return "asymmetric"

    def _nearest_mode(self, node: Node) -> str:
        return "simple"

    def _scales_sizes(self, node: Node, rank: int, g
                      ) -> tuple[list | None, list | None, list[int] | None]:
        """Scales or sizes over all axes, and the axes attribute (normalized) if given."""
        raise NotImplementedError

    def _policy(self, node: Node) -> str:
        return "stretch"

    def _general(self, node: Node) -> bool:
        """Whether the float64 taps path (cubic, antialias, ...) computes this node."""
        return False

    def _plan(self, node: Node, shape, g) -> tuple[list[int], list[np.float32], list[float]]:
        """Output shape, per-axis float32 scales (the nearest and linear tables, as
        onnxruntime) and float64 scales (the taps path, as the ONNX reference); refuses what
        the kernels do not cover."""
        rank = len(shape)
        scales, sizes, axes = self._scales_sizes(node, rank, g)
        if sizes is not None:
            if len(sizes) != rank:
                raise ModelError(f"sizes {sizes} do not match rank {rank}")
            out = [as_dim(s) for s in sizes]
            if any(o < 1 for o in out):
                raise ModelError(f"sizes {sizes} must be positive")
            policy = self._policy(node)
            if is_symbolic(out) or is_symbolic(shape):
                if policy != "stretch":
                    raise SymInt.var(dim_vars([out, shape])[0]).undecided(
                        f"keep_aspect_ratio_policy={policy!r}")
                # the scales of a dynamic size are out / in at run time (None here); a static
                # pair keeps its float32 scale
                pairs = [None if is_symbolic((o, i)) else (o, i) for o, i in zip(out, shape)]
                scl = [p and (F32(p[0]) / F32(p[1]) if p[1] else F32(1)) for p in pairs]
                scl64 = [p and (p[0] / p[1] if p[1] else 1.0) for p in pairs]
            else:
                scl64 = [o / i if i else 1.0 for o, i in zip(out, shape)]
                if policy != "stretch":
                    axes = list(range(rank)) if axes is None else axes
                    pick = min if policy == "not_larger" else max
                    s = pick(scl64[a] for a in axes)
                    scl64 = [s if a in axes else 1.0 for a in range(rank)]
                    out = [int(s * d + 0.5) if a in axes else d for a, d in enumerate(shape)]
                scl = [F32(s) for s in scl64] if policy != "stretch" else \
                    [F32(o) / F32(i) if i else F32(1) for o, i in zip(out, shape)]
        elif scales is not None:
            if len(scales) != rank:
                raise ModelError(f"scales {scales} do not match rank {rank}")
            scl = [F32(s) for s in scales]
            if any(not s > 0 for s in scl):
                raise ModelError(f"scales {scales} must be positive")
            scl64 = [float(s) for s in scl]
            out = [scaled_size(s, d) for s, d in zip(scl, shape)]
        else:
            raise ModelError("Resize needs scales or sizes")
        if rank < 2:
            raise UnsupportedError(f"resizing a rank-{rank} tensor is not supported (the "
                                   f"two innermost axes of a rank >= 2 tensor are)")
        moved = [i for i in range(rank - 2) if out[i] != shape[i] or
                 (scl[i] is not None and scl[i] != F32(1))]
        if moved:
            raise UnsupportedError(f"resizing axis {moved[0]} is not supported: only the two "
                                   f"innermost (H and W) axes can be resized")
        if any(o < 1 for o in out):
            raise ModelError(f"output shape {out} has an empty axis")
        return out, scl, scl64

    def infer(self, node, ins, g):
        x = ins[0]
        mode = self._mode(node)
        if mode not in ("nearest", "linear", "bilinear", "cubic"):
            raise UnsupportedError(f"mode={mode!r} is not supported (nearest, linear and "
                                   f"cubic are)")
        if mode == "nearest":
            require_dtype(node, [x], list(C_DTYPES))
        else:
            require_dtype(node, [x], ["float32"])
        out, _, _ = self._plan(node, x.shape, g)
        if self._coord_mode(node) == "tf_crop_and_resize":
            if mode == "nearest":
                raise UnsupportedError("tf_crop_and_resize with mode='nearest' is not "
                                       "supported (linear and cubic are)")
            if self._scales_sizes(node, len(x.shape), g)[1] is None:
                raise UnsupportedError("tf_crop_and_resize with scales is not supported (the "
                                       "ONNX reference ignores the roi in the output size); "
                                       "give sizes")
            for axis in range(len(x.shape) - 2):
                if self._roi(node, g, len(x.shape), axis) != (0.0, 1.0):
                    raise UnsupportedError(f"a roi that crops axis {axis} is not supported: "
                                           f"only the two innermost axes can be resized")
        return [(x.dtype, tuple(out))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        out, scl, scl64 = self._plan(node, x.shape, lo.graph)
        ih, iw = x.shape[-2:]
        oh, ow = out[-2:]
        params = {"planes": math.prod(x.shape[:-2]), "in_h": ih, "in_w": iw, "out_h": oh,
                  "out_w": ow, "elem_size": np.dtype(x.dtype).itemsize}
        coord = self._coord_mode(node)
        if is_symbolic((ih, iw, oh, ow)):
            self._lower_computed(node, lo, x, y, params, scl)
            return
        if self._mode(node) == "nearest":
            nm = self._nearest_mode(node)
            table = np.concatenate([nearest_table(coord, nm, oh, ih, scl[-2]),
                                    nearest_table(coord, nm, ow, iw, scl[-1])])
            name = lo.add_const(f"{node.name}.index", table.astype(np.int32))
            lo.call("mlcc_resize_nearest", [x.name, name, y.name], [y.name],
                    params_type="mlcc_resize_params", params=params, op=f"{node.op_type}(nearest)",
                    pool=True)
            return
        if self._mode(node) == "cubic" or self._general(node) or (
                coord == "align_corners" and any(F32(s * F32(d)) != o for s, d, o in
                                                  zip(scl[-2:], x.shape[-2:], out[-2:]))):
            self._lower_taps(node, lo, x, y, out, scl64)
            return
        r0, r1, wr0, wr1 = linear_table(coord, oh, ih, scl[-2])
        c0, c1, wc0, wc1 = linear_table(coord, ow, iw, scl[-1])
        index = lo.add_const(f"{node.name}.index",
                             np.concatenate([r0, r1, c0, c1]).astype(np.int32))
        weights = lo.add_const(f"{node.name}.weights",
                               np.concatenate([wr0, wr1, wc0, wc1]).astype(np.float32))
        lo.call("mlcc_f32_resize_linear", [x.name, index, weights, y.name], [y.name],
                params_type="mlcc_resize_params", params=params,
                scratch_bytes=self._slices(lo) * 2 * ow * 4, pool=True,
                op=f"{node.op_type}(linear)")

    def _lower_computed(self, node: Node, lo: Lowering, x, y, params: dict, scl) -> None:
        """Sizes known only at run time: the kernel computes the tables at each call (nearest
        and linear, the coordinate modes of COMPUTED_COORDS)."""
        mode, coord = self._mode(node), self._coord_mode(node)
        size = SymInt.var(dim_vars(params)[0])
        if (mode == "cubic" or self._general(node)) and coord in TAPS_COMPUTED:
            self._lower_taps_computed(node, lo, x, y, params, scl)
            return
        if mode not in ("nearest", "linear", "bilinear") or self._general(node) or \
                coord not in COMPUTED_COORDS:
            raise size.undecided(f"a resize with mode={mode!r}, "
                                 f"coordinate_transformation_mode={coord!r}"
                                 f"{' (antialias)' if node.attr('antialias', 0) else ''}")
        if coord == "align_corners" and mode != "nearest" and any(
                s is None or (float(s) != int(s) if isinstance(d, SymInt) else
                              F32(s * F32(d)) != o)
                for s, d, o in zip(scl[-2:], (params["in_h"], params["in_w"]),
                                   (params["out_h"], params["out_w"]))):
            # a fractional output length takes the float64 taps path for static sizes
            raise size.undecided("a linear align_corners resize by a scale that is not an "
                                 "integer")
        oh, ow = params["out_h"], params["out_w"]
        computed = {"base": params, "coord": Enum(COMPUTED_COORDS[coord]),
                    "rounding": Enum(COMPUTED_ROUNDING[self._nearest_mode(node)]),
                    "scale_h": float(scl[-2]) if scl[-2] is not None else 0.0,
                    "scale_w": float(scl[-1]) if scl[-1] is not None else 0.0}
        if mode == "nearest":
            lo.call("mlcc_resize_nearest__computed", [x.name, y.name], [y.name],
                    params_type="mlcc_resize_computed_params", params=computed,
                    scratch_bytes=(oh + ow) * 4, op=f"{node.op_type}(nearest)")
            return
        lo.call("mlcc_f32_resize_linear__computed", [x.name, y.name], [y.name],
                params_type="mlcc_resize_computed_params", params=computed,
                scratch_bytes=(4 * (oh + ow) + 2 * ow) * 4, op=f"{node.op_type}(linear)")

    def _lower_taps_computed(self, node: Node, lo: Lowering, x, y, params: dict, scl) -> None:
        """Cubic, antialias and tf_crop_and_resize over sizes known only at run time: the taps
        and their weights computed at each call, in double as taps_table does
        (mlcc_f32_resize_taps__computed). An antialiased downscale by a scale of sizes takes
        as many taps as the smallest scale of the range needs (the scratch's room)."""
        g, rank = lo.graph, len(x.shape)
        mode = "cubic" if self._mode(node) == "cubic" else "linear"
        antialias = bool(node.attr("antialias", 0))
        by_scales = self._scales_sizes(node, rank, g)[1] is None    # a constant scale per axis
        ih, oh, ow = params["in_h"], params["out_h"], params["out_w"]
        taps, rois = [], []
        for axis, (o, i) in ((rank - 2, (oh, params["in_h"])), (rank - 1, (ow, params["in_w"]))):
            taps.append(tap_count(mode, antialias, float(scl[axis])) if by_scales else
                        self._most_taps(mode, antialias, o, i))
            roi = self._roi(node, g, rank, axis) or (0.0, 1.0)
            if any(float(F32(r)) != r for r in roi):
                raise SymInt.var(dim_vars(params)[0]).undecided(
                    f"a tf_crop_and_resize roi {list(roi)} that float32 does not hold")
            rois += roi
        base = {"planes": params["planes"], "in_h": ih, "in_w": params["in_w"], "out_h": oh,
                "out_w": ow, "taps_h": taps[0], "taps_w": taps[1],
                "extrapolation_value": float(F32(node.attr("extrapolation_value", 0.0)))}
        lo.call("mlcc_f32_resize_taps__computed", [x.name, y.name], [y.name],
                params_type="mlcc_resize_taps_computed_params", params={
                    "base": base, "coord": Enum(TAPS_COMPUTED[self._coord_mode(node)]),
                    "cubic": int(mode == "cubic"), "antialias": int(antialias),
                    "exclude_outside": int(node.attr("exclude_outside", 0)),
                    "scale_h": float(scl[-2]) if by_scales else 0.0,
                    "scale_w": float(scl[-1]) if by_scales else 0.0,
                    "cubic_a": float(node.attr("cubic_coeff_a", -0.75)),
                    "roi_h0": rois[0], "roi_h1": rois[1], "roi_w0": rois[2], "roi_w1": rois[3]},
                scratch_bytes=(2 * (taps[0] * oh + taps[1] * ow) + ih * ow) * 4,
                op=f"{node.op_type}({self._mode(node)})")

    @staticmethod
    def _most_taps(mode: str, antialias: bool, out, size) -> int:
        """The most taps per output of an axis resized from `size` to `out` (a scale out / size
        at run time) over the range: its sizes tried one by one where they hang on one
        dimension (refused over several)."""
        if not antialias or not is_symbolic((out, size)):
            return tap_count(mode, antialias, out / size if antialias else 1.0)
        dims = dim_vars([out, size])
        values = range(dims[0].lo, dims[0].hi + 1, dims[0].step)
        if len(dims) > 1 or len(values) > MAX_CHECKED_SIZES:
            raise SymInt.var(dims[0]).undecided(
                "the number of taps of an antialiased resize by a scale of sizes" +
                (" over several dimensions" if len(dims) > 1 else ""))
        return max(tap_count(mode, True, evaluate(out, {dims[0].name: v}) /
                             evaluate(size, {dims[0].name: v})) for v in values)

    def _lower_taps(self, node: Node, lo: Lowering, x, y, out, scl64) -> None:
        """Cubic, antialias, exclude_outside, tf_crop_and_resize, fractional align_corners:
        per output row and column, `taps` source indices and weights (float64 tables stored
        as float32); -1 as the first index of a row or column marks an extrapolated one."""
        ih, iw = x.shape[-2:]
        oh, ow = out[-2:]
        mode = "cubic" if self._mode(node) == "cubic" else "linear"
        rank = len(x.shape)
        tables = []
        for axis, (o, i) in ((rank - 2, (oh, ih)), (rank - 1, (ow, iw))):
            idx, w, outside = taps_table(
                mode, self._coord_mode(node), o, i, scl64[axis],
                cubic_a=float(node.attr("cubic_coeff_a", -0.75)),
                antialias=bool(node.attr("antialias", 0)),
                exclude_outside=bool(node.attr("exclude_outside", 0)),
                roi=self._roi(node, lo.graph, rank, axis))
            idx = idx.copy()
            idx[outside, 0] = -1
            tables.append((idx, w))
        (hi, hw), (wi, ww) = tables
        index = lo.add_const(f"{node.name}.index",
                             np.concatenate([hi.reshape(-1), wi.reshape(-1)]).astype(np.int32))
        weights = lo.add_const(f"{node.name}.weights",
                               np.concatenate([hw.reshape(-1), ww.reshape(-1)]).astype(F32))
        params = {"planes": math.prod(x.shape[:-2]), "in_h": ih, "in_w": iw, "out_h": oh,
                  "out_w": ow, "taps_h": hi.shape[1], "taps_w": wi.shape[1],
                  "extrapolation_value": float(F32(node.attr("extrapolation_value", 0.0)))}
        lo.call("mlcc_f32_resize_taps", [x.name, index, weights, y.name], [y.name],
                params_type="mlcc_resize_taps_params", params=params,
                scratch_bytes=self._slices(lo) * ih * ow * 4, pool=True,
                op=f"{node.op_type}({self._mode(node)})")

    @staticmethod
    def _slices(lo: Lowering) -> int:
        """Scratch slices of a resize with a pool: one per thread that may share it."""
        return RESIZE_SLICES if lo.options.get("threads", True) else 1

    def _roi(self, node: Node, g, rank: int, axis: int) -> tuple[float, float] | None:
        return None

    def flops(self, node, g):
        y = g.values[node.outputs[0]]
        return 3 * y.numel if self._mode(node) != "nearest" else 0


@register("Resize", since=10)
class Resize(_ResizeBase):
    quant_rules = ("movement",)     # nearest only
    attributes = {
        "mode": None,                    # checked in infer, with a clearer message
        "coordinate_transformation_mode": lambda v: v in COORD_MODES + ("tf_crop_and_resize",),
        "nearest_mode": lambda v: v in NEAREST_MODES,
        "cubic_coeff_a": None,           # cubic only
        "exclude_outside": lambda v: int(v) in (0, 1),
        "extrapolation_value": None,     # tf_crop_and_resize only
        "antialias": lambda v: int(v) in (0, 1),
        "axes": None,
        "keep_aspect_ratio_policy": lambda v: v in ("stretch", "not_larger", "not_smaller"),
    }

    def _policy(self, node):
        return node.attr("keep_aspect_ratio_policy", "stretch") if node.version >= 18 \
            else "stretch"

    def _general(self, node):
        # exclude_outside changes nothing where the taps never leave the input (linear
        # without antialias: clamped), so only the modes that reach outside take the path.
        mode = self._mode(node)
        return (self._coord_mode(node) == "tf_crop_and_resize"
                or (mode != "nearest" and bool(node.attr("antialias", 0)))
                or (mode == "cubic"))

    def _roi(self, node, g, rank, axis):
        if self._coord_mode(node) != "tf_crop_and_resize":
            return None
        roi = const_input(g, node, 1, "roi")
        if roi is None or roi.size == 0:
            raise ModelError("tf_crop_and_resize needs a roi")
        roi = [float(v) for v in roi.reshape(-1)]
        axes = node.attr("axes") if node.version >= 18 else None
        if axes is not None:
            axes = [norm_axis(int(a), rank, "axes") for a in axes]
            if len(roi) != 2 * len(axes):
                raise ModelError(f"roi {roi} does not match axes {axes}")
            full = [0.0] * rank + [1.0] * rank
            for k, a in enumerate(axes):
                full[a], full[rank + a] = roi[k], roi[len(axes) + k]
            roi = full
        if len(roi) != 2 * rank:
            raise ModelError(f"roi {roi} does not match rank {rank}")
        return roi[axis], roi[rank + axis]

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
            return [float(s) for s in const_input(g, node, 1, "scales").reshape(-1)], None, None
        scales = const_input(g, node, 2, "scales")
        sizes = const_input(g, node, 3, "sizes")
        scales = None if scales is None or scales.size == 0 else \
            [float(s) for s in scales.reshape(-1)]
        sizes = None if sizes is None or sizes.size == 0 else \
            [as_dim(s) for s in sizes.reshape(-1)]
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
        return scales, sizes, axes


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
        return scales, None, None
