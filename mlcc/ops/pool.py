"""Pooling: MaxPool and AveragePool (1-D, 2-D and 3-D windows, NC + spatial) on one direct
kernel each for float 1-D and 2-D, and a general one (pool.h, mlcc_*_pool_nd) for 3-D windows,
MaxPool's Indices output and int8/uint8 MaxPool; GlobalAveragePool and GlobalMaxPool as
reductions over the spatial axes; LpPool and GlobalLpPool on one direct kernel
(mlcc_f32_lppool_nd, the general form's loops with |x|^p terms).

Output sizes and pads come from conv.window_geometry, whose ceil_mode rule (a window that
would start in the right padding is dropped) matches onnxruntime and the ONNX spec. The compiler
precomputes what the kernels would otherwise recompute per window: where each kernel column
reads in a row (a tap table; for strides > 1 the kernel splits input rows into stride phases so
that every tap reads contiguous inputs), and for AveragePool the divisors, which are a product
of a row count and a column count (out_h + out_w reciprocals).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from ..ir.symbolic import as_dim, is_symbolic, smax, upper
from .common import require_dtype
from .conv import AUTO_PAD, _spatial2d, window2d, window_geometry
from .reduce import KINDS, emit_reduce
from .registry import OpDef, register


MAXPOOL_SMALL_W = 32   # MLCC_MAXPOOL_SMALL_W (pool.h)
POOL_SLICES = 4        # MLCC_POOL_SLICES (pool.h): threads that share a 2-D pooling
POOL_MAX_TAPS = 64     # MLCC_POOL_MAX_TAPS (pool.h): kernel columns whose taps it computes


def runtime_taps(params: dict) -> bool:
    """Whether the 2-D kernel computes its tap table at each call (pool.h, tap_offsets NULL):
    a stride over a dynamic width, whose stride phases are as wide as the width makes them."""
    return params["stride_w"] > 1 and is_symbolic(params["phase_width"])


def fits_2d(params: dict) -> bool:
    """Whether the 2-D kernel takes this pooling (else the N-D one)."""
    return not runtime_taps(params) or params["kernel_w"] <= POOL_MAX_TAPS


def maxpool_small(params: dict) -> bool | None:
    """Whether mlcc_f32_maxpool2d pools over a padded copy of each plane (pool.h
    mlcc_maxpool_small): stride 1, dilation 1, output rows of at most MAXPOOL_SMALL_W."""
    if not (params["stride_h"] == params["stride_w"] == 1
            and params["dilation_h"] == params["dilation_w"] == 1):
        return False
    if is_symbolic(params["out_w"]):     # a dynamic width: known at run time only
        return None if params["out_w"].lo <= MAXPOOL_SMALL_W else False
    return params["out_w"] <= MAXPOOL_SMALL_W


def _dead_or_absent(lo: Lowering, node: Node, index: int) -> bool:
    """True if optional output `index` is absent or nothing reads it (dead code removed it)."""
    name = node.outputs[index] if index < len(node.outputs) else ""
    return not name or name not in lo.graph.values


class _Pool(OpDef):
    attributes = {"auto_pad": lambda v: v in AUTO_PAD, "ceil_mode": lambda v: v in (0, 1),
                  "dilations": None, "kernel_shape": None, "pads": None, "strides": None}

    def _geometry(self, node: Node, x: Value) -> dict:
        if len(x.shape) < 3:
            raise ModelError(f"input {list(x.shape)} has no spatial axes")
        if len(x.shape) > 5:
            raise UnsupportedError(f"{len(x.shape) - 2}-D pooling is not supported "
                                   f"(1-D, 2-D and 3-D are)")
        kernel = node.attr("kernel_shape")
        if kernel is None:
            raise ModelError("kernel_shape is required")
        kernel = [int(k) for k in kernel]
        spatial = list(x.shape[2:])
        if len(kernel) != len(spatial):
            raise ModelError(f"kernel_shape {kernel} does not match input {list(x.shape)}")
        auto_pad = node.attr("auto_pad", "NOTSET")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # Where onnxruntime and the ONNX spec disagree, refuse rather than pick one:
            # onnxruntime pads pools by the undilated kernel, and with a kernel shorter than
            # the stride the padding would be negative (onnxruntime then shifts the windows of
            # AveragePool and rejects MaxPool).
            dilations = list(node.attr("dilations", [1] * len(kernel)))
            strides = list(node.attr("strides", [1] * len(kernel)))
            if any(d != 1 for d in dilations):
                raise UnsupportedError(f"auto_pad={auto_pad} with dilations {dilations} is not "
                                       f"supported")
            for i, k, s in zip(spatial, kernel, strides):
                if (-(-i // s) - 1) * s + k - i < 0:
                    raise UnsupportedError(f"auto_pad={auto_pad} would need negative padding "
                                           f"(kernel {kernel}, strides {strides}, input "
                                           f"{spatial}); not supported")
        geo = window_geometry(node, spatial, kernel, ceil_mode=bool(node.attr("ceil_mode", 0)))
        geo["kernel"] = kernel
        return geo

    dtypes = ["float32"]

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins[:1], self.dtypes)
        geo = self._geometry(node, x)
        return [(x.dtype, (*x.shape[:2], *geo["out"]))]

    def _nd_params(self, node: Node, x: Value) -> tuple[dict, dict]:
        """Parameters of the general kernel: the spatial axes right-aligned into three."""
        geo = self._geometry(node, x)
        lead = 3 - len(geo["out"])

        def three(values, fill):
            return [fill] * lead + [as_dim(v) for v in values]
        return geo, {"planes": x.shape[0] * x.shape[1], "in": three(x.shape[2:], 1),
                     "out": three(geo["out"], 1), "kernel": three(geo["kernel"], 1),
                     "stride": three(geo["strides"], 1), "dilation": three(geo["dilations"], 1),
                     "pad": three(geo["begin"], 0),
                     "storage_order": int(node.attr("storage_order", 0))}

    def _params(self, node: Node, x: Value) -> tuple[dict, dict]:
        geo = self._geometry(node, x)
        kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, pt, pl = window2d(geo, x.shape[2:])
        return geo, {"planes": x.shape[0] * x.shape[1], "in_h": ih, "in_w": iw, "out_h": oh,
                     "out_w": ow, "kernel_h": kh, "kernel_w": kw, "stride_h": sh,
                     "stride_w": sw, "dilation_h": dh, "dilation_w": dw, "pad_top": pt,
                     "pad_left": pl, "phase_width": -(-iw // sw)}

    def _emit(self, node: Node, lo: Lowering, kernel: str, params: dict,
              extra: list[str]) -> None:
        """The call, with its tap table: where kernel column kw of output column ow reads in a
        row (of x for stride 1, of the stride phases in scratch otherwise; see pool.h)."""
        sw, width = params["stride_w"], params["phase_width"]
        t = np.arange(params["kernel_w"]) * params["dilation_w"] - params["pad_left"]
        if runtime_taps(params):
            tab = ""       # the kernel computes them at the actual width
        else:
            taps = t if sw == 1 else (t % sw) * width + t // sw
            tab = lo.add_const(f"{node.name}.tap_offsets", taps.astype(np.int64))
        scratch = 0 if sw == 1 else params["in_h"] * sw * width * 4
        if kernel == "mlcc_f32_maxpool2d" and maxpool_small(params) is not False:
            pitch = params["out_w"] + params["kernel_w"] - 1
            small = 4 * ((params["out_h"] + params["kernel_h"] - 1) * pitch +
                         params["out_h"] * pitch + params["kernel_w"])
            # a dynamic width: the kernel decides at run time (pool.h), room for either way
            scratch = small if maxpool_small(params) else smax(upper(small), upper(scratch))
        # one plane's scratch per thread (at the largest sizes of a dynamic build), one slice
        # in builds without threads
        slice_floats = upper(scratch) // 4
        slices = POOL_SLICES if lo.options.get("threads", True) else 1
        lo.call(kernel, [node.inputs[0], tab, *extra, node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_pool2d_params",
                params={**params, "scratch_slice": slice_floats},
                scratch_bytes=slices * 4 * slice_floats, pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        return g.values[node.outputs[0]].numel * math.prod(node.attr("kernel_shape", [1]))


@register("MaxPool")
class MaxPool(_Pool):
    quant_rules = ("pool",)
    attributes = {**_Pool.attributes, "storage_order": lambda v: v in (0, 1)}
    dtypes = ["float32", "int8", "uint8"]

    def infer(self, node, ins, g):
        types = super().infer(node, ins, g)
        if len(node.outputs) > 1:
            types.append(("int64", types[0][1]))
        return types

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        indices = "" if _dead_or_absent(lo, node, 1) else node.outputs[1]
        if len(x.shape) <= 4 and x.dtype == "float32" and not indices:
            _, params = self._params(node, x)
            if fits_2d(params):
                self._emit(node, lo, "mlcc_f32_maxpool2d", params, [])
                return
        _, params = self._nd_params(node, x)
        kernel = {"float32": "mlcc_f32_maxpool_nd", "uint8": "mlcc_u8_maxpool_nd",
                  "int8": "mlcc_s8_maxpool_nd"}[x.dtype]
        lo.call(kernel, [node.inputs[0], node.outputs[0], indices],
                [node.outputs[0]] + ([indices] if indices else []),
                params_type="mlcc_poolnd_params", params=params)


def tap_counts(out: int, kernel: int, stride: int, dilation: int, begin: int, lo: int,
               hi: int) -> np.ndarray:
    """For each output position, how many of its taps o * stride + k * dilation - begin fall
    inside [lo, hi)."""
    taps = (np.arange(out)[:, None] * stride + np.arange(kernel)[None, :] * dilation - begin)
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


@register("AveragePool")
class AveragePool(_Pool):
    quant_rules = ("pool",)
    attributes = {**_Pool.attributes, "count_include_pad": lambda v: v in (0, 1)}

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        if len(x.shape) == 5 or is_symbolic(x.shape[2:-1]):
            # (a dynamic height: the 2-D kernel finds its column divisors after out_h row ones,
            # where the table at the largest height does not have them; _inv_count refuses it)
            self._lower_nd(node, lo, x)
            return
        geo, params = self._params(node, x)
        if not fits_2d(params):
            self._lower_nd(node, lo, x)
            return
        inv = self._inv_count(node, lo, x, geo, lead=4 - len(x.shape))    # 1-D: rows of 1
        self._emit(node, lo, "mlcc_f32_avgpool2d", params, [inv])

    def _inv_count(self, node: Node, lo: Lowering, x: Value, geo: dict, lead: int = 0) -> str:
        """1 / (the taps counted) of each output position, one table per spatial axis (after
        `lead` tables [1] for the leading axes of size 1 the N-D kernel adds)."""
        include_pad = bool(node.attr("count_include_pad", 0))
        tables = [np.ones(1)] * lead
        axes = list(zip(x.shape[2:], geo["out"], geo["kernel"], geo["strides"],
                        geo["dilations"], geo["begin"], geo["end"]))
        for axis, (size, out, k, s, d, b, e) in enumerate(axes):
            if is_symbolic(out):
                # a dynamic axis: its table at the largest size holds for every smaller one
                # when the right edge never cuts a window (no end padding, floor mode), and
                # when it is the last table (the kernel finds the others by the sizes)
                if e or node.attr("ceil_mode", 0) or axis != len(axes) - 1:
                    raise out.undecided("an AveragePool's divisors over a dynamic axis with "
                                        "end padding, ceil_mode or a dynamic axis after it")
                out, size = upper(out), upper(size)
            # count_include_pad counts the taps inside the padded input, not the whole kernel:
            # with ceil_mode the last window may reach past the right padding (as onnxruntime).
            counts = tap_counts(out, k, s, d, b, -b if include_pad else 0,
                                size + e if include_pad else size)
            tables.append(np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0))
        return lo.add_const(f"{node.name}.inv_count", np.concatenate(tables).astype(np.float32))

    def _lower_nd(self, node: Node, lo: Lowering, x: Value) -> None:
        geo, params = self._nd_params(node, x)
        inv = self._inv_count(node, lo, x, geo, lead=5 - len(x.shape))
        lo.call("mlcc_f32_avgpool_nd", [node.inputs[0], inv, node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_poolnd_params", params=params)


class _GlobalPool(OpDef):
    attributes = {}
    kind = "ReduceMean"

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins[:1], ["float32"])
        if len(x.shape) < 2:
            raise ModelError(f"input {list(x.shape)} has no channel axis")
        return [("float32", (*x.shape[:2], *[1] * (len(x.shape) - 2)))]

    def lower(self, node: Node, lo: Lowering) -> None:
        rank = len(lo.value(node.inputs[0]).shape)
        emit_reduce(lo, KINDS[self.kind], node.inputs[0], node.outputs[0], set(range(2, rank)),
                    op=node.op_type)

    def flops(self, node, g):
        return g.values[node.inputs[0]].numel


@register("GlobalAveragePool")
class GlobalAveragePool(_GlobalPool):
    quant_rules = ("pool",)
    kind = "ReduceMean"


@register("GlobalMaxPool")
class GlobalMaxPool(_GlobalPool):
    quant_rules = ("pool",)
    kind = "ReduceMax"


def _lp(node: Node) -> float:
    p = node.attr("p", 2)
    if p is None or float(p) <= 0:
        raise ModelError(f"p = {p} must be positive")
    return float(p)


@register("LpPool")
class LpPool(_Pool):
    """(sum |x|^p)^(1/p) over each window; padding adds nothing."""
    attributes = {**_Pool.attributes, "p": lambda v: float(v) > 0}

    def lower(self, node: Node, lo: Lowering) -> None:
        _, params = self._nd_params(node, lo.value(node.inputs[0]))
        lo.call("mlcc_f32_lppool_nd", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_lppool_params", params={"pool": params, "p": _lp(node)})

    def flops(self, node: Node, g: Graph) -> int:
        return 3 * super().flops(node, g)


@register("GlobalLpPool")
class GlobalLpPool(_GlobalPool):
    """One window over the spatial axes, flattened to one (any spatial rank)."""
    attributes = {"p": lambda v: float(v) > 0}

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        n = math.prod(x.shape[2:])
        params = {"planes": x.shape[0] * x.shape[1], "in": [1, 1, n], "out": [1, 1, 1],
                  "kernel": [1, 1, n], "stride": [1, 1, 1], "dilation": [1, 1, 1],
                  "pad": [0, 0, 0], "storage_order": 0}
        lo.call("mlcc_f32_lppool_nd", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_lppool_params", params={"pool": params, "p": _lp(node)})

    def flops(self, node, g):
        return 3 * g.values[node.inputs[0]].numel
