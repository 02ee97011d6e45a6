"""Quantized operators: ONNX QuantizeLinear / DequantizeLinear (the float boundaries) and the
integer operators mlcc's quantizer (mlcc/quant) writes, in the "mlcc" domain:

- mlcc.QConv: Conv (plain, grouped, depthwise) on uint8 activations and int8 weights, int32
  accumulation, requantized to uint8 (fused Relu/Clip as the clamp) or written as float32 with
  a float activation epilogue (for activations without an integer form).
- mlcc.QFC: Gemm / MatMul with a constant weight, the same epilogue.
- mlcc.QAdd: requantizing Add of two uint8 tensors; mlcc.QRequant: uint8 -> uint8 at another
  scale; mlcc.QMaxPool / mlcc.QAvgPool: pooling on codes; mlcc.QLut: an activation (Sigmoid,
  SiLU, HardSwish, ...) as a 256-entry table on codes.

Inputs of QConv / QFC: x (uint8), w (int8 [M, C/g, kh, kw] or [N, K]), bias (int32, the
quantized bias), scale (float32 per channel: x_s * w_s[c] / y_s, or x_s * w_s[c] for float
output), fbias (float32, float output only, else ""), mult and shift (int32, fixed-point
requantization only, else ""). Attributes: the Conv geometry, x_zero_point, and rq =
(out_kind, mode, zero_point, qmin, qmax) plus the scales for the banner.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from ..errors import ModelError, UnsupportedError
from ..ir import PACKED_BITS, Enum, Graph, Lowering, Node
from ..ir.symbolic import SymInt, is_symbolic, upper
from .cast import emit_cast, onnx_type_to_dtype
from .common import IO_DTYPES, act_params, const_input
from .elementwise import emit_binary
from .conv import AUTO_PAD, window2d, window_geometry
from .conv_kernels import DW_SLICES

# MLCC_MIN_PARALLEL_INT8_MACS (mlcc_kernel.h): integer convolutions from this many
# multiply-adds are split between a pool's threads
MIN_PARALLEL_INT8_MACS = 4 << 20
from .registry import OpDef, lookup, register

MLCC = "mlcc"


def _scalar(g: Graph, node: Node, index: int, what: str, default=None):
    name = node.input(index)
    if not name:
        if default is None:
            raise ModelError(f"{what} (input {index}) is required")
        return default
    arr = g.const(name)
    if arr is None:
        raise UnsupportedError(f"{what} ({name!r}) must be a constant")
    arr = np.asarray(arr)
    if arr.size != 1:
        raise UnsupportedError(f"per-axis {what} ({list(arr.shape)}) is not supported here "
                               f"(per-tensor only)")
    return arr.reshape(()).item(), arr.dtype


def qlinear_params(g: Graph, node: Node) -> tuple[float, int, str]:
    """(scale, zero point, quantized dtype) of a QuantizeLinear / DequantizeLinear node."""
    scale, _ = _scalar(g, node, 1, "scale")
    zp_name = node.input(2)
    if zp_name:
        zp, zdt = _scalar(g, node, 2, "zero point")
        qdtype = np.dtype(zdt).name
    else:
        zp, qdtype = 0, "uint8"
    if qdtype != "uint8":
        raise UnsupportedError(f"{qdtype} quantization is not supported at run time (uint8 "
                               f"activations are)")
    if not (np.isfinite(scale) and scale > 0):
        raise ModelError(f"scale {scale} must be positive and finite")
    return float(np.float32(scale)), int(zp), qdtype


@register("QuantizeLinear", since=10)
class QuantizeLinear(OpDef):
    """uint8 per tensor on mlcc_f32_quantize; any other type (int8, int16, uint16, int4, uint4,
    int2, uint2, float8, float4), per axis or per block: Div by the scale, then for integers
    Round (half to even), Add the zero point, Max and Min to the type's range and Cast, for
    the float types Cast (saturate as the attribute says), each by its own definition."""
    attributes = {"axis": None, "saturate": lambda v: v in (0, 1),
                  "block_size": lambda v: v >= 0, "output_dtype": None}

    def _qdtype(self, node, ins) -> str:
        if len(ins) > 2 and ins[2] is not None:
            return ins[2].dtype
        if node.attr("output_dtype", 0):
            return onnx_type_to_dtype(node.attr("output_dtype"))
        return "uint8"

    def _fast(self, node, ins, g) -> bool:
        return (self._qdtype(node, ins) == "uint8" and not node.attr("block_size", 0)
                and ins[1].numel == 1 and g.const(node.inputs[1]) is not None
                and (not node.input(2) or g.const(node.inputs[2]) is not None))

    def _int16(self, node, ins, g) -> bool:
        """int16 per tensor with zero point 0 (a W8A16 layer's input): mlcc_f32_quantize_int16."""
        zp = g.const(node.inputs[2]) if node.input(2) else None
        return (self._qdtype(node, ins) == "int16" and not node.attr("block_size", 0)
                and ins[1].numel == 1 and g.const(node.inputs[1]) is not None
                and zp is not None and zp.size == 1 and not np.any(zp))

    def _param(self, node, g, index: int, what: str):
        """Scale (1) or zero point (2): a constant broadcast to x, or the name of a run-time
        one-element value (per tensor, as DynamicQuantizeLinear's function body computes
        them); None when absent."""
        name = node.input(index)
        if not name:
            return None
        x = g.values[node.inputs[0]]
        if g.const(name) is None and g.values[name].numel == 1 and \
                not node.attr("block_size", 0):
            return name
        return broadcast_param(const_input(g, node, index, what), x.shape,
                               int(node.attr("axis", 1)), int(node.attr("block_size", 0)))

    def infer(self, node, ins, g):
        if ins[0].dtype != "float32" or ins[1].dtype != "float32":
            raise UnsupportedError(f"{ins[0].dtype} input and {ins[1].dtype} scale are not "
                                   f"supported (float32 are)")
        if self._fast(node, ins, g):
            qlinear_params(g, node)
        else:
            self._param(node, g, 1, "y_scale")
            self._param(node, g, 2, "y_zero_point")
        return [(self._qdtype(node, ins), ins[0].shape)]

    def _lower_general(self, node: Node, lo: Lowering) -> None:
        g, x, y = lo.graph, lo.value(node.inputs[0]), lo.value(node.outputs[0])
        temp = [node.inputs[0]]

        def step(op, version, *operands, **attrs):
            """temp[-1] op operands (constant arrays or run-time value names)."""
            out = lo.temp(f"{y.name}.{op.lower()}", "float32", x.shape)
            names = [temp[-1]] + [c if isinstance(c, str) else lo.add_const(
                f"{node.name}.{op.lower()}", np.asarray(c, np.float32)) for c in operands]
            part = Node(f"{node.name}/{op.lower()}", op, names, [out], attrs, version=version)
            lookup(part).lower(part, lo)
            temp.append(out)

        zp = self._param(node, g, 2, "y_zero_point")
        if isinstance(zp, str):             # a run-time zero point: in float32 first
            zf = lo.temp(f"{zp}.float", "float32", g.values[zp].shape)
            emit_cast(lo, zp, zf, op="QuantizeLinear")
            zp = zf
        step("Div", 14, self._param(node, g, 1, "y_scale"))
        if y.dtype.startswith("float"):       # float8 and float4: the Cast rounds, saturates
            attrs = {"saturate": int(node.attr("saturate", 1))}
            if y.dtype.startswith("float4") and zp is not None:
                step("Add", 14, zp)         # float4 adds its zero point (-0 + 0 is +0), float8
                                            # ignores it
        else:
            step("Round", 11)
            if zp is not None and (isinstance(zp, str) or np.any(zp)):
                step("Add", 14, zp)
            info = int_range(y.dtype)
            step("Max", 13, np.float32(info[0]))
            step("Min", 13, np.float32(info[1]))
            attrs = {}
        cast = Node(f"{node.name}/cast", "Cast", [temp[-1]], [y.name],
                    {"to": helper.np_dtype_to_tensor_dtype(np.dtype(y.dtype)),
                     **attrs}, version=19)
        lookup(cast).lower(cast, lo)

    def lower(self, node: Node, lo: Lowering) -> None:
        ins = [lo.value(i) if i else None for i in node.inputs]
        if self._int16(node, ins, lo.graph):
            scale = float(np.float32(lo.graph.const(node.inputs[1]).reshape(())))
            lo.call("mlcc_f32_quantize_int16", [node.inputs[0], node.outputs[0]],
                    [node.outputs[0]], params_type="mlcc_quantize_params",
                    params={"count": ins[0].numel, "scale": scale, "zero_point": 0},
                    op=f"QuantizeLinear int16 scale={scale:.6g}")
            return
        if not self._fast(node, ins, lo.graph):
            self._lower_general(node, lo)
            return
        scale, zp, _ = qlinear_params(lo.graph, node)
        x = lo.value(node.inputs[0])
        lo.call("mlcc_f32_quantize", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_quantize_params", pool=True,
                params={"count": x.numel, "scale": scale, "zero_point": zp},
                op=f"QuantizeLinear scale={scale:.6g} zp={zp}")


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer type (the packed ones included)."""
    bits = PACKED_BITS.get(dtype)
    if bits is None:
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype[0] == "i" else (0, (1 << bits) - 1)


def broadcast_param(arr: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point (per tensor, per axis, or per block of block_size along the axis,
    as ONNX's DequantizeLinear takes them) as a float32 array that broadcasts to `shape`."""
    arr = np.asarray(arr).astype(np.float32)
    if arr.size == 1 and not block_size:
        return arr.reshape(())
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape):
        raise ModelError(f"axis {axis} is out of range for rank {len(shape)}")
    if block_size:
        if arr.ndim != len(shape) or arr.shape[axis] != -(-shape[axis] // block_size):
            raise ModelError(f"blocked parameter {list(arr.shape)} does not fit input "
                             f"{list(shape)} with block_size {block_size} on axis {axis}")
        return np.repeat(arr, block_size, axis=axis).take(range(shape[axis]), axis=axis)
    if arr.ndim != 1 or arr.shape[0] != shape[axis]:
        raise ModelError(f"per-axis parameter {list(arr.shape)} does not fit input "
                         f"{list(shape)} on axis {axis}")
    view = [1] * len(shape)
    view[axis] = -1
    return arr.reshape(view)


@register("DequantizeLinear", since=10)
class DequantizeLinear(OpDef):
    """uint8 per tensor on mlcc_u8_dequantize; any other input type (int8, int16, int32,
    int4, uint4, float8, float4, ...), per axis or per block: (Cast(x) - zero point) * scale
    on the Cast and broadcasting kernels, the scale and zero point constants."""
    attributes = {"axis": None, "block_size": lambda v: v >= 0,
                  "output_dtype": lambda v: v in (0, 1)}

    def _fast(self, node, ins) -> bool:
        return (ins[0].dtype == "uint8" and not node.attr("block_size", 0)
                and ins[1].numel == 1 and (len(ins) < 3 or ins[2] is None
                                           or ins[2].dtype == "uint8"))

    def _params(self, node, g) -> tuple[np.ndarray, np.ndarray | None]:
        """The scale and (None when all 0 or not used) zero point, broadcast to x."""
        x = g.values[node.inputs[0]]
        axis, block = int(node.attr("axis", 1)), int(node.attr("block_size", 0))
        scale = broadcast_param(const_input(g, node, 1, "x_scale"), x.shape, axis, block)
        zp = const_input(g, node, 2, "x_zero_point") if node.input(2) else None
        if zp is None or x.dtype.startswith("float") or not np.any(zp.astype(np.float32)):
            return scale, None          # float8 and float4 take no zero point
        return scale, broadcast_param(zp, x.shape, axis, block)

    def infer(self, node, ins, g):
        if ins[1].dtype != "float32":
            raise UnsupportedError(f"{ins[1].dtype} scale is not supported (float32 is)")
        if self._fast(node, ins):
            qlinear_params(g, node)
        else:
            if ins[0].dtype not in IO_DTYPES:
                raise UnsupportedError(f"{ins[0].dtype} input is not supported at run time")
            self._params(node, g)
        return [("float32", ins[0].shape)]

    def fold(self, node, arrays):
        x, scale = arrays[0], np.asarray(arrays[1], np.float32)
        zp = np.asarray(arrays[2]) if len(arrays) > 2 and arrays[2] is not None else 0
        axis = node.attr("axis", 1)
        if scale.ndim == 1 and scale.size > 1:
            shape = [1] * x.ndim
            shape[axis] = -1
            scale = scale.reshape(shape)
            zp = np.asarray(zp).reshape(shape) if np.ndim(zp) else zp
        return [((x.astype(np.int32) - np.asarray(zp, np.int32)).astype(np.float32) * scale)
                .astype(np.float32)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        if not self._fast(node, [lo.value(i) if i else None for i in node.inputs]):
            scale, zp = self._params(node, lo.graph)
            y = node.outputs[0]
            xf = lo.temp(f"{y}.float", "float32", x.shape)
            emit_cast(lo, x.name, xf, op="DequantizeLinear")
            if zp is not None:
                centred = lo.temp(f"{y}.centred", "float32", x.shape)
                emit_binary(lo, "SUB", xf, lo.add_const(f"{node.name}.zero_point", zp), centred)
                xf = centred
            emit_binary(lo, "MUL", xf, lo.add_const(f"{node.name}.scale", scale), y)
            return
        scale, zp, _ = qlinear_params(lo.graph, node)
        lo.call("mlcc_u8_dequantize", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_quantize_params",
                params={"count": x.numel, "scale": scale, "zero_point": zp},
                op=f"DequantizeLinear scale={scale:.6g} zp={zp}")


@register("DynamicQuantizeLinear", since=11)
class DynamicQuantizeLinear(OpDef):
    """y, y_scale, y_zero_point from x at run time (uint8, onnxruntime's float32 arithmetic,
    qelem.h)."""
    attributes = {}

    def infer(self, node, ins, g):
        if ins[0].dtype != "float32":
            raise UnsupportedError(f"{ins[0].dtype} input is not supported (float32 is)")
        return [("uint8", ins[0].shape), ("float32", ()), ("uint8", ())]

    def fold(self, node, arrays):
        x = np.asarray(arrays[0], np.float32)
        seen = x[~np.isnan(x)]          # NaN elements are left out of the range (qelem.h)
        lo = np.float32(min(0.0, seen.min())) if seen.size else np.float32(0)
        hi = np.float32(max(0.0, seen.max())) if seen.size else np.float32(0)
        scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
        zp = np.float32(np.clip(np.float32(0) - lo / scale, 0, 255))
        q = np.clip(np.rint(np.float32(x / scale)) + np.rint(zp), 0, 255)
        return [np.nan_to_num(q, nan=0).astype(np.uint8), np.array(scale, np.float32),
                np.array(np.rint(zp), np.uint8)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        kinds = [("uint8", x.shape), ("float32", ()), ("uint8", ())]
        outs = list(node.outputs) + [""] * (3 - len(node.outputs))
        # an output the graph dropped (nobody reads it) still needs storage: the kernel writes it
        outs = [o or lo.temp(f"{node.name}.out{i}", *kinds[i]) for i, o in enumerate(outs)]
        lo.call("mlcc_f32_dynamic_quantize", [node.inputs[0], *outs], outs,
                params_type="mlcc_dynamic_quantize_params",
                params={"count": x.numel})


# ------------------------------------------------------------------ mlcc-domain integer ops

def requant_params(node: Node) -> dict:
    rq = node.attr("rq")
    out_kind, mode, zp, qmin, qmax = rq
    kind = {"float32": "F32", "int32": "S32"}.get(out_kind, "U8")
    return {"out_kind": Enum(f"MLCC_QOUT_{kind}"),
            "mode": Enum(f"MLCC_REQUANT_{mode.upper()}"), "zero_point": int(zp),
            "qmin": int(qmin), "qmax": int(qmax),
            "act": act_params(node) if out_kind == "float32" else act_params(Node("", "", [], []))}


def banner(node: Node, what: str) -> str:
    out_kind, mode, zp, qmin, qmax = node.attr("rq")
    fused = [f.rsplit(":", 1)[-1] for f in node.fused]
    text = "+".join([what] + fused)
    text += f" int8 x_scale={node.attr('x_scale'):.6g} x_zp={node.attr('x_zero_point')}"
    if out_kind == "uint8":
        text += (f" y_scale={node.attr('y_scale'):.6g} y_zp={zp} clamp=[{qmin},{qmax}] "
                 f"requant={mode}")
    else:
        text += f" -> {out_kind}"
    return text


def _packed_rows(w: np.ndarray) -> tuple[np.ndarray, int]:
    """[M, K...] int8 -> [M, 4 * k4] with zero padding; k4."""
    m = w.shape[0]
    flat = w.reshape(m, -1)
    k = flat.shape[1]
    k4 = -(-k // 4)
    out = np.zeros((m, 4 * k4), np.int8)
    out[:, :k] = flat
    return out, k4


def _const(lo: Lowering, name: str) -> np.ndarray:
    arr = lo.graph.const(name)
    if arr is None:
        raise UnsupportedError(f"{name!r} must be a constant")
    return np.asarray(arr)


def _channel_args(node: Node) -> list[str]:
    return [node.input(3), node.input(4), node.input(5), node.input(6)]


def dw_slices(lo: Lowering) -> int:
    """Scratch slices of mlcc_u8_conv2d__depthwise: one per thread that may share it (qconv.h),
    one alone in builds without threads."""
    return DW_SLICES if lo.options.get("threads", True) else 1


CHUNK_MIN_COLUMNS = 16


def _conv_scratch(lo: Lowering, p: dict, k4: int, hp: int, wp: int) -> tuple[int, int, int]:
    """(chunk_rows, direct, scratch bytes) of mlcc_u8_conv2d (qconv.h): chunks of the output
    rows whose packed columns fill the target's chunk_bytes (at least one row), one slice of
    scratch per thread; room for the direct VNNI path where x86 kernels may take it.
    Sizes of a range (SymInts) are taken at their largest: the kernel computes its slices
    from the actual sizes (MLCC_QCONV_SLICE_BYTES, _POOL_ROWS), each at most its value at the
    largest sizes with the same chunk_rows, and a chunk longer than the output is cut there;
    whether the window needs padding may change with the size, so room for it is kept."""
    dynamic = is_symbolic(p) or is_symbolic((hp, wp))
    p = {k: upper(v) if isinstance(v, SymInt) else v for k, v in p.items()}
    hp, wp = upper(hp), upper(wp)
    oh, ow, cg = p["out_h"], p["out_w"], p["in_channels"] // p["groups"]
    row_bytes = 4 * k4 * ow
    # at least CHUNK_MIN_COLUMNS outputs even where the budget is smaller: the product of
    # a few columns spends more on its per-call work and last odd column than on the sums
    # (KWS's 64 x 64 pointwise layers on the M4, rows of 5: 2.40 M instructions per layer
    # one row at a time, 1.70 M all at once)
    rows = min(max(lo.options.get("chunk_bytes", 262144) // row_bytes,
                   -(-CHUNK_MIN_COLUMNS // ow), 1), oh)

    no_padding = (not dynamic and p["pad_top"] == 0 and p["pad_left"] == 0
                  and hp <= p["in_h"] and wp <= p["in_w"])   # MLCC_QCONV_NO_PADDING: in place

    def slice_bytes(r: int) -> int:     # MLCC_QCONV_SLICE_BYTES
        window = (r - 1) * p["stride_h"] + (p["kernel_h"] - 1) * p["dilation_h"] + 1
        return -(-(row_bytes * r + (0 if no_padding else cg * window * wp)) // 64) * 64

    scratch = slice_bytes(rows)
    if lo.options.get("threads", True):     # a pool's threads: MLCC_QCONV_POOL_ROWS
        scratch = max(scratch, DW_SLICES * slice_bytes(min(rows, -(-oh // 4))))
    direct = 0
    taps = p["kernel_h"] * p["kernel_w"]
    if lo.options.get("int8_direct") and p["groups"] == 1 and p["stride_w"] == 1 and taps > 1:
        c4 = -(-p["in_channels"] // 4)
        need = 4 * c4 * hp * wp + p["out_channels"] * taps * 4 * c4    # qconv.c, direct path
        # taken where it needs no more memory than the whole output's columns would
        if need <= 4 * k4 * oh * ow + cg * hp * wp:
            direct, scratch = 1, max(scratch, need)
    return rows, direct, scratch


def conv_window_params(node: Node, x_shape, w_shape, refusal: str) -> dict:
    """The window fields every integer convolution's params struct shares (batch, channels,
    sizes, kernel, strides, dilations, pads, groups) of a 1-D or 2-D convolution; any other
    rank is refused with `refusal`."""
    if len(x_shape) not in (3, 4):
        raise UnsupportedError(refusal)
    kernel = list(w_shape[2:])
    geo = window_geometry(node, list(x_shape[2:]), kernel)
    geo["kernel"] = kernel
    kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, pt, pl = window2d(geo, x_shape[2:])
    return {"batch": x_shape[0], "in_channels": x_shape[1], "in_h": ih, "in_w": iw,
            "out_channels": w_shape[0], "out_h": oh, "out_w": ow, "kernel_h": kh,
            "kernel_w": kw, "stride_h": sh, "stride_w": sw, "dilation_h": dh,
            "dilation_w": dw, "pad_top": pt, "pad_left": pl,
            "groups": int(node.attr("group", 1))}


@register("QConv", domain=MLCC)
class QConv(OpDef):
    attributes = {"auto_pad": lambda v: v in AUTO_PAD, "dilations": None, "group": None,
                  "kernel_shape": None, "pads": None, "strides": None, "x_zero_point": None,
                  "x_scale": None, "y_scale": None, "rq": None, "_act": None}

    def infer(self, node, ins, g):
        return [(g.values[node.outputs[0]].dtype, g.values[node.outputs[0]].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, w = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        params = conv_window_params(node, x.shape, w.shape, "only 1-D and 2-D convolutions "
                                                            "are quantized")
        kh, kw, ih, iw = (params[k] for k in ("kernel_h", "kernel_w", "in_h", "in_w"))
        oh, ow, sh, sw = (params[k] for k in ("out_h", "out_w", "stride_h", "stride_w"))
        dh, dw, pt, pl = (params[k] for k in ("dilation_h", "dilation_w", "pad_top", "pad_left"))
        n, c, m, group = (params[k] for k in ("batch", "in_channels", "out_channels", "groups"))
        # the input rows and columns the window reaches (qconv.h's MLCC_QCONV_PADDED_H / _W)
        hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        params.update({"x_zero_point": int(node.attr("x_zero_point")),
                       "rq": requant_params(node)})
        wq = _const(lo, node.inputs[1]).astype(np.int8)
        bias = _const(lo, node.inputs[2]).astype(np.int64)
        out = node.outputs[0]
        label = banner(node, "Conv")
        if group == c == m and group > 1:
            wname = lo.add_const(f"{node.name}.w_dw", wq.reshape(m, kh * kw))
            lo.call("mlcc_u8_conv2d__depthwise",
                    [node.inputs[0], wname, node.inputs[2], *_channel_args(node), out], [out],
                    params_type="mlcc_qconv2d_params", params=params, pool=True,
                    scratch_bytes=dw_slices(lo) * (-(-2 * upper(hp) * upper(wp) // 64) * 64),
                    op=label)
            return
        packed, k4 = _packed_rows(wq)
        params["chunk_rows"], params["direct"], scratch = _conv_scratch(lo, params, k4, hp, wp)
        zx = int(node.attr("x_zero_point"))
        eff = bias - zx * wq.reshape(m, -1).astype(np.int64).sum(axis=1)
        if np.any(np.abs(eff) >= 2**31):
            raise UnsupportedError("the folded int32 bias overflows")
        wname = lo.add_const(f"{node.name}.w_packed", packed)
        bname = lo.add_const(f"{node.name}.bias_zp", eff.astype(np.int32))
        # y may take x's bytes where each output row is written after the input rows it
        # overwrites were read (qconv.c's im2col_lone), which is the lone caller's order: not
        # where a thread pool would split the layer (then it ran on the caller alone: 2.2 ms
        # of the 3.2 ms serial time of YOLOv8n int8 on 2 threads), only on targets without
        # one (the microcontrollers, whose arenas this was for) or below the split's size
        split = lo.options.get("threads", True) and not is_symbolic(params) and \
            n * m * oh * ow * c * kh * kw >= MIN_PARALLEL_INT8_MACS
        same = (not is_symbolic(params) and n == 1 and group == 1 and (oh, ow) == (ih, iw)
                and sh == sw == 1 and m <= c and params["rq"]["out_kind"].name == "MLCC_QOUT_U8"
                and not split)
        lo.call("mlcc_u8_conv2d", [node.inputs[0], wname, bname, *_channel_args(node), out],
                [out], params_type="mlcc_qconv2d_params", params=params, pool=True,
                scratch_bytes=scratch, op=label,
                in_place=[(out, node.inputs[0])] if same else [])

    def flops(self, node: Node, g: Graph) -> int:
        w, y = g.values[node.inputs[1]], g.values[node.outputs[0]]
        return 2 * y.numel * math.prod(w.shape[1:])


def pack_fc_weights(wq: np.ndarray) -> np.ndarray:
    """int8 weights [n, k] in mlcc_u8_fc's layout [ceil(k / 4)][n][4] (qgemm.h): the 4 k of a
    group adjacent for each column, k padded with zeros."""
    nout, k = wq.shape
    k4 = -(-k // 4)
    packed = np.zeros((k4 * 4, nout), np.int8)
    packed[:k] = wq.T
    return packed.reshape(k4, 4, nout).transpose(0, 2, 1).copy()


@register("QFC", domain=MLCC)
class QFC(OpDef):
    """y[..., n] = epilogue(sum_k x[..., k] w[n][k]): all leading axes of x are rows."""
    attributes = {"x_zero_point": None, "x_scale": None, "y_scale": None, "rq": None,
                  "_act": None}

    def infer(self, node, ins, g):
        return [(g.values[node.outputs[0]].dtype, g.values[node.outputs[0]].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        wq = _const(lo, node.inputs[1]).astype(np.int8)
        nout, k = wq.shape
        rows = x.numel // k
        k4 = -(-k // 4)
        packed = pack_fc_weights(wq)
        zx = int(node.attr("x_zero_point"))
        eff = _const(lo, node.inputs[2]).astype(np.int64) - zx * wq.astype(np.int64).sum(axis=1)
        wname = lo.add_const(f"{node.name}.w_packed", packed)
        bname = lo.add_const(f"{node.name}.bias_zp", eff.astype(np.int32))
        out = node.outputs[0]
        lo.call("mlcc_u8_fc", [node.inputs[0], wname, bname, *_channel_args(node), out], [out],
                params_type="mlcc_qfc_params", pool=True,
                params={"m": rows, "n": nout, "k": k, "rq": requant_params(node)},
                scratch_bytes=0 if k % 4 == 0 else rows * 4 * k4,
                op=banner(node, "Gemm"))

    def flops(self, node: Node, g: Graph) -> int:
        w = g.values[node.inputs[1]]
        return 2 * g.values[node.outputs[0]].numel * w.shape[1]


@register("QAdd", domain=MLCC)
class QAdd(OpDef):
    attributes = {"a": None, "b": None, "y": None, "mode": None, "clamp": None,
                  "multipliers": None}
    kernel, what = "mlcc_u8_add", "Add"

    def infer(self, node, ins, g):
        return [("uint8", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        (sa, za), (sb, zb), (sy, zy) = node.attr("a"), node.attr("b"), node.attr("y")
        mode = node.attr("mode")
        qmin, qmax = node.attr("clamp")
        # the TFLite importer gives TFLite's own multipliers (its QuantizeMultiplier rounds
        # ties away from zero)
        fixed = node.attr("multipliers") or add_fixed_multipliers(sa, sb, sy)
        out = node.outputs[0]
        lo.call(self.kernel, [node.inputs[0], node.inputs[1], out], [out],
                in_place=[(out, node.inputs[0]), (out, node.inputs[1])],   # element-wise
                params_type="mlcc_qadd_params", pool=True,
                params={"count": lo.value(out).numel, "a_zero_point": int(za),
                        "b_zero_point": int(zb),
                        # float32 multipliers: each product with a code is then exact in
                        # double, so the sum rounds once with or without FMA contraction
                        "a_mult_f": float(np.float32(sa / sy)),
                        "b_mult_f": float(np.float32(sb / sy)), "a_mult": fixed[0],
                        "a_shift": fixed[1], "b_mult": fixed[2], "b_shift": fixed[3],
                        "out_mult": fixed[4], "out_shift": fixed[5],
                        "rq": {"out_kind": Enum("MLCC_QOUT_U8"),
                               "mode": Enum(f"MLCC_REQUANT_{mode.upper()}"),
                               "zero_point": int(zy), "qmin": int(qmin), "qmax": int(qmax),
                               "act": act_params(Node("", "", [], []))}},
                op=f"{self.what} int8 a=({sa:.6g},{za}) b=({sb:.6g},{zb}) y=({sy:.6g},{zy}) "
                   f"requant={mode}")


def fixed_multiplier(m: float) -> tuple[int, int]:
    """m = m0 * 2^shift / 2^31, m0 in [2^30, 2^31) (gemmlowp QuantizeMultiplier)."""
    if m <= 0:
        return 0, 0
    mant, exp = math.frexp(m)
    m0 = int(round(mant * (1 << 31)))
    if m0 == 1 << 31:
        m0 //= 2
        exp += 1
    if exp < -31:
        return 0, 0
    return m0, exp


def add_fixed_multipliers(sa: float, sb: float, sy: float) -> tuple[int, ...]:
    """TFLite's integer Add: inputs to a common scale 2 * max(sa, sb) / 2^20, then out."""
    twice_max = 2.0 * max(sa, sb)
    a = fixed_multiplier(sa / twice_max)
    b = fixed_multiplier(sb / twice_max)
    o = fixed_multiplier(twice_max / ((1 << 20) * sy))
    return (*a, *b, *o)


@register("QRequant", domain=MLCC)
class QRequant(OpDef):
    attributes = {"x": None, "y": None, "mode": None}

    def infer(self, node, ins, g):
        return [("uint8", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        (sx, zx), (sy, zy) = node.attr("x"), node.attr("y")
        mf = float(np.float32(np.float32(sx) / np.float32(sy)))
        m0, sh = fixed_multiplier(float(sx) / float(sy))
        out = node.outputs[0]
        mode = node.attr("mode")
        lo.call("mlcc_u8_requantize", [node.inputs[0], out], [out],
                params_type="mlcc_qrequant_params", pool=True,
                params={"count": lo.value(out).numel, "x_zero_point": int(zx), "mult_f": mf,
                        "mult": m0, "shift": sh,
                        "rq": {"out_kind": Enum("MLCC_QOUT_U8"),
                               "mode": Enum(f"MLCC_REQUANT_{mode.upper()}"),
                               "zero_point": int(zy), "qmin": 0, "qmax": 255,
                               "act": act_params(Node("", "", [], []))}},
                op=f"Requantize ({sx:.6g},{zx}) -> ({sy:.6g},{zy}) requant={mode}")


@register("QChannelScale", domain=MLCC)
class QChannelScale(OpDef):
    """y = x * (s + offset) on uint8 codes, s a run-time float per channel (axis 1) of x:
    the squeeze-excitation product x * s (offset 0) or x + x * s (offset 1), which the
    quantizer fuses. Attributes x, y: (scale, zero point); offset."""
    attributes = {"x": None, "y": None, "offset": None}

    def infer(self, node, ins, g):
        x, s = ins[0], ins[1]
        if x.dtype != "uint8" or s.dtype != "float32" or len(x.shape) < 2:
            raise UnsupportedError("QChannelScale reads uint8 codes and a float32 scale")
        return [("uint8", x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        (sx, zx), (sy, zy) = node.attr("x"), node.attr("y")
        x, s = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        n, c = x.shape[0], x.shape[1]
        sshape = [1] * (len(x.shape) - len(s.shape)) + list(s.shape)
        if any(d != 1 for d in sshape[2:]) or sshape[1] != c or sshape[0] not in (1, n):
            raise UnsupportedError("QChannelScale's scale must be [N or 1, C, 1, ...]")
        out = node.outputs[0]
        mf = float(np.float32(np.float32(sx) / np.float32(sy)))
        lo.call("mlcc_u8_channel_scale", [node.inputs[0], node.inputs[1], out], [out],
                params_type="mlcc_qchannel_scale_params", pool=True,
                params={"batch": n, "channels": c, "plane": x.numel // max(n * c, 1),
                        "s_batch": c if sshape[0] == n and n > 1 else 0,
                        "x_zero_point": int(zx), "offset": float(node.attr("offset")),
                        "mult_f": mf,
                        "rq": {"out_kind": Enum("MLCC_QOUT_U8"),
                               "mode": Enum("MLCC_REQUANT_FLOAT"),
                               "zero_point": int(zy), "qmin": 0, "qmax": 255,
                               "act": act_params(Node("", "", [], []))}},
                op=f"ChannelScale x * (s + {node.attr('offset'):g}) int8 "
                   f"x=({sx:.6g},{zx}) y=({sy:.6g},{zy})")


@register("QLut", domain=MLCC)
class QLut(OpDef):
    """y = table[x]: an activation on uint8 codes; input 1 is the 256-entry uint8 table the
    quantizer computed (mlcc/quant/scheme.py's activation_table). Attributes x, y: (scale,
    zero point) and act: the activation's name, for the banner."""
    attributes = {"x": None, "y": None, "act": None}

    def infer(self, node, ins, g):
        if ins[0].dtype != "uint8" or ins[1].dtype != "uint8" or tuple(ins[1].shape) != (256,):
            raise UnsupportedError("QLut reads uint8 codes through a [256] uint8 table")
        return [("uint8", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        (sx, zx), (sy, zy) = node.attr("x"), node.attr("y")
        out = node.outputs[0]
        lo.call("mlcc_u8_lut", [node.inputs[0], node.inputs[1], out], [out],
                params_type="mlcc_lut_params", params={"count": lo.value(out).numel}, pool=True,
                op=f"{node.attr('act')} int8 table x=({sx:.6g},{zx}) y=({sy:.6g},{zy})")


class _QPool(OpDef):
    attributes = {"kernel_shape": None, "pads": None, "strides": None, "dilations": None,
                  "auto_pad": lambda v: v in AUTO_PAD, "ceil_mode": lambda v: v in (0, 1),
                  "zero_point": None, "global": None, "scale": None,
                  "tflite_clamp": None}
    kernel = ""

    def infer(self, node, ins, g):
        return [("uint8", g.values[node.outputs[0]].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        if node.attr("global"):
            spatial = list(x.shape[2:])
            ih, iw = ([1] + spatial)[-2:] if len(spatial) == 1 else spatial
            p = {"planes": x.shape[0] * x.shape[1], "in_h": ih, "in_w": iw, "out_h": 1,
                 "out_w": 1, "kernel_h": ih, "kernel_w": iw, "stride_h": 1, "stride_w": 1,
                 "dilation_h": 1, "dilation_w": 1, "pad_top": 0, "pad_left": 0}
        else:
            kernel = [int(k) for k in node.attr("kernel_shape")]
            geo = window_geometry(node, list(x.shape[2:]), kernel,
                                  ceil_mode=bool(node.attr("ceil_mode", 0)))
            geo["kernel"] = kernel
            kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, pt, pl = window2d(geo, x.shape[2:])
            p = {"planes": x.shape[0] * x.shape[1], "in_h": ih, "in_w": iw, "out_h": oh,
                 "out_w": ow, "kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw,
                 "dilation_h": dh, "dilation_w": dw, "pad_top": pt, "pad_left": pl}
        p["pad_value"] = int(node.attr("zero_point"))
        del y
        if node.attr("tflite_clamp") is not None:
            # a TFLite AVERAGE_POOL_2D: its own rounding and the fused activation's clamp
            if self.kernel != "mlcc_u8_avgpool2d":
                raise UnsupportedError(f"{self.op_type} has no TFLite form")
            qmin, qmax = node.attr("tflite_clamp")
            lo.call("mlcc_u8_avgpool2d__tflite", [node.inputs[0], node.outputs[0]],
                    [node.outputs[0]], params_type="mlcc_qavgpool_tflite_params",
                    params={"pool": p, "qmin": int(qmin), "qmax": int(qmax)},
                    op=f"AVERAGE_POOL_2D (TFLite int8) scale={node.attr('scale'):.6g} "
                       f"zp={node.attr('zero_point') - 128} clamp=[{qmin - 128},{qmax - 128}]")
            return
        lo.call(self.kernel, [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_qpool2d_params", params=p, pool=True,
                op=f"{self.op_type} int8 scale={node.attr('scale'):.6g} "
                   f"zp={node.attr('zero_point')}")


@register("QMaxPool", domain=MLCC)
class QMaxPool(_QPool):
    kernel = "mlcc_u8_maxpool2d"


@register("QAvgPool", domain=MLCC)
class QAvgPool(_QPool):
    kernel = "mlcc_u8_avgpool2d"


# ------------------------------------------------------------------ ONNX integer operators

def _qscalar(g: Graph, name: str, what: str):
    arr = g.const(name) if name else None
    if name and arr is None:
        raise UnsupportedError(f"{what} ({name!r}) must be a constant")
    return arr


def _onnx_requant(node: Node, lo: Lowering, x_scale: float, w_scale: np.ndarray,
                  y_scale: float, y_zp: int) -> tuple[list[str], dict]:
    """Per-channel constants and requant params for ONNX QLinear* nodes (float requant, the
    arithmetic onnxruntime uses)."""
    scale = ((np.float32(x_scale) * w_scale.astype(np.float32)) / np.float32(y_scale)
             ).astype(np.float32)
    names = [lo.add_const(f"{node.name}.scale", scale), "", "", ""]
    return names, {"out_kind": Enum("MLCC_QOUT_U8"), "mode": Enum("MLCC_REQUANT_FLOAT"),
                   "zero_point": int(y_zp), "qmin": 0, "qmax": 255,
                   "act": act_params(Node("", "", [], []))}


def _check_u8_s8(node: Node, g: Graph, x_zp, w, w_zp, y_zp) -> None:
    if x_zp is not None and np.asarray(x_zp).dtype != np.uint8 or \
            y_zp is not None and np.asarray(y_zp).dtype != np.uint8:
        raise UnsupportedError("only uint8 activations are supported")
    if w is None or w.dtype != np.int8:
        raise UnsupportedError("the weights must be a constant int8 tensor")
    if w_zp is not None and np.any(np.asarray(w_zp) != 0):
        raise UnsupportedError("weight zero points other than 0 are not supported")


@register("QLinearConv", since=10)
class QLinearConv(OpDef):
    attributes = {"auto_pad": lambda v: v in AUTO_PAD, "dilations": None, "group": None,
                  "kernel_shape": None, "pads": None, "strides": None}

    def infer(self, node, ins, g):
        x, w = ins[0], ins[3]
        if x.dtype != "uint8":
            raise UnsupportedError(f"{x.dtype} input is not supported (uint8 is)")
        kernel = list(w.shape[2:])
        geo = window_geometry(node, list(x.shape[2:]), kernel)
        return [("uint8", (x.shape[0], w.shape[0], *geo["out"]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        xs, xz = _qscalar(g, node.input(1), "x_scale"), _qscalar(g, node.input(2), "x_zero_point")
        w = _qscalar(g, node.input(3), "w")
        ws, wz = _qscalar(g, node.input(4), "w_scale"), _qscalar(g, node.input(5), "w_zero_point")
        ys, yz = _qscalar(g, node.input(6), "y_scale"), _qscalar(g, node.input(7), "y_zero_point")
        _check_u8_s8(node, g, xz, w, wz, yz)
        if np.size(xs) != 1 or np.size(ys) != 1:
            raise UnsupportedError("per-axis activation scales are not supported")
        m = w.shape[0]
        w_scale = np.broadcast_to(np.asarray(ws, np.float32).reshape(-1), (m,))
        bias = _qscalar(g, node.input(8), "B") if node.input(8) else np.zeros(m, np.int32)
        bname = lo.add_const(f"{node.name}.bias", np.asarray(bias, np.int32))
        names, rq = _onnx_requant(node, lo, float(np.asarray(xs).reshape(())), w_scale,
                                  float(np.asarray(ys).reshape(())),
                                  int(np.asarray(yz).reshape(())) if yz is not None else 0)
        # Rewrite as the mlcc.QConv lowering does (same kernels), through a synthetic node.
        zx = int(np.asarray(xz).reshape(())) if xz is not None else 0
        wname = lo.add_const(f"{node.name}.w", np.asarray(w, np.int8))
        q = Node(node.name, "QConv", [node.inputs[0], wname, bname, names[0], "", "", ""],
                 list(node.outputs), dict(node.attrs), MLCC, 1)
        q.attrs.update(x_zero_point=zx, x_scale=float(np.asarray(xs).reshape(())),
                       y_scale=float(np.asarray(ys).reshape(())),
                       rq=("uint8", "float", rq["zero_point"], 0, 255))
        QConv().lower(q, lo)


@register("QLinearMatMul", since=10)
class QLinearMatMul(OpDef):
    attributes = {}

    def infer(self, node, ins, g):
        a, b = ins[0], ins[3]
        if a.dtype != "uint8" or len(b.shape) != 2:
            raise UnsupportedError("uint8 A and a 2-D constant int8 B are supported")
        return [("uint8", tuple(a.shape[:-1]) + (b.shape[1],))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        xs, xz = _qscalar(g, node.input(1), "a_scale"), _qscalar(g, node.input(2), "a_zero_point")
        b = _qscalar(g, node.input(3), "b")
        bs, bz = _qscalar(g, node.input(4), "b_scale"), _qscalar(g, node.input(5), "b_zero_point")
        ys, yz = _qscalar(g, node.input(6), "y_scale"), _qscalar(g, node.input(7), "y_zero_point")
        _check_u8_s8(node, g, xz, b, bz, yz)
        if np.size(xs) != 1 or np.size(ys) != 1:
            raise UnsupportedError("per-axis activation scales are not supported")
        n = b.shape[1]
        w_scale = np.broadcast_to(np.asarray(bs, np.float32).reshape(-1), (n,))
        names, rq = _onnx_requant(node, lo, float(np.asarray(xs).reshape(())), w_scale,
                                  float(np.asarray(ys).reshape(())),
                                  int(np.asarray(yz).reshape(())) if yz is not None else 0)
        zx = int(np.asarray(xz).reshape(())) if xz is not None else 0
        wname = lo.add_const(f"{node.name}.w", np.ascontiguousarray(np.asarray(b, np.int8).T))
        bname = lo.add_const(f"{node.name}.bias", np.zeros(n, np.int32))
        q = Node(node.name, "QFC", [node.inputs[0], wname, bname, names[0], "", "", ""],
                 list(node.outputs), {}, MLCC, 1)
        q.attrs.update(x_zero_point=zx, x_scale=float(np.asarray(xs).reshape(())),
                       y_scale=float(np.asarray(ys).reshape(())),
                       rq=("uint8", "float", rq["zero_point"], 0, 255))
        QFC().lower(q, lo)


def _integer_operands(node: Node, g: Graph, w_index: int, zp_axis_size: int):
    """The constant weight of ConvInteger / MatMulInteger as int8 and its zero point as int32
    per output channel, with a uint8 weight moved to int8 (w - 128, the zero point with it):
    (w - zw) is unchanged. The activation must be uint8 with a per-tensor zero point, constant
    or computed at run time (DynamicQuantizeLinear's)."""
    w = _qscalar(g, node.input(w_index), "the weight")
    if w is None or w.dtype not in (np.int8, np.uint8):
        raise UnsupportedError("the weight must be a constant int8 or uint8 tensor")
    x_zp = node.input(w_index + 1)
    if x_zp:
        v = g.values[x_zp]
        if v.dtype != "uint8" or math.prod(v.shape) != 1:
            raise UnsupportedError("the zero point of x must be one uint8 value")
    wz = _qscalar(g, node.input(w_index + 2), "the weight zero point")
    wz = np.zeros(1, w.dtype) if wz is None else np.asarray(wz)
    if wz.dtype != w.dtype or wz.size not in (1, zp_axis_size):
        raise UnsupportedError("the weight zero point must be per tensor or per output "
                               "channel, of the weight's type")
    zw = np.broadcast_to(wz.astype(np.int32).reshape(-1), (zp_axis_size,))
    if w.dtype == np.uint8:
        return (w.astype(np.int16) - 128).astype(np.int8), zw - 128
    return w, zw.copy()


def _const_zero_point(g: Graph, name: str):
    """The x zero point when it is a constant (the kernels fold it), else None."""
    if not name:
        return 0
    arr = g.const(name)
    return None if arr is None else int(np.asarray(arr).reshape(()))


@register("ConvInteger", since=10)
class ConvInteger(OpDef):
    """y = conv(x - x_zero_point, w - w_zero_point) in int32, on the integer convolution
    kernels; x_zero_point may be computed at run time (mlcc_u8_conv_integer)."""
    attributes = QLinearConv.attributes

    def infer(self, node, ins, g):
        x, w = ins[0], ins[1]
        if x.dtype != "uint8":
            raise UnsupportedError(f"{x.dtype} input is not supported (uint8 is)")
        if len(x.shape) not in (3, 4):
            raise UnsupportedError("only 1-D and 2-D integer convolutions are supported")
        geo = window_geometry(node, list(x.shape[2:]), list(w.shape[2:]))
        return [("int32", (x.shape[0], w.shape[0], *geo["out"]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        m = lo.value(node.inputs[1]).shape[0]
        w, zw = _integer_operands(node, g, 1, m)
        zx = _const_zero_point(g, node.input(2))
        out = node.outputs[0]
        if zx is not None and not np.any(zw):
            QConv().lower(self._qconv(node, lo, w, zx, out), lo)
            return
        # A run-time x zero point: the same kernels, with the zero point set (and for the
        # im2col kernel, the bias -zx * sum(w) folded) by mlcc_u8_conv_integer at run time.
        self._conv_integer(node, lo, w, out)
        if not np.any(zw):
            return
        # The weight zero point: y -= zw[c] * window sums of (x - zx), a convolution with
        # all-one weights and one output channel per group.
        group = int(node.attr("group", 1))
        y = lo.value(out)
        xsum = lo.temp(f"{node.name}.xsum", "int32", (y.shape[0], group, *y.shape[2:]))
        self._conv_integer(node, lo, np.ones((group, *w.shape[1:]), np.int8), xsum)
        lo.call("mlcc_i32_conv_zero_point_correct",
                [xsum, lo.add_const(f"{node.name}.w_zp", zw.astype(np.int32)), out], [out],
                params_type="mlcc_conv_zero_point_params",
                params={"batch": y.shape[0], "channels": m, "groups": group,
                        "plane": math.prod(y.shape[2:])},
                op="ConvInteger weight zero point")

    @staticmethod
    def _qconv(node: Node, lo: Lowering, w: np.ndarray, zx: int, out: str) -> Node:
        m = w.shape[0]
        q = Node(node.name, "QConv", [node.inputs[0], lo.add_const(f"{node.name}.w", w),
                                      lo.add_const(f"{node.name}.bias", np.zeros(m, np.int32)),
                                      "", "", "", ""], [out], dict(node.attrs), MLCC, 1)
        q.attrs.update(x_zero_point=zx, x_scale=1.0, y_scale=0.0,
                       rq=("int32", "float", 0, 0, 0))
        return q

    def _conv_integer(self, node: Node, lo: Lowering, w: np.ndarray, out: str) -> None:
        """out = conv(x - x_zero_point, w), the zero point read at run time."""
        sub = _Capture(lo)
        QConv().lower(self._qconv(node, lo, w, 0, out), sub)
        (call,) = sub.calls
        m = w.shape[0]
        depthwise = call["kernel"] == "mlcc_u8_conv2d__depthwise"
        rowsum = "" if depthwise else lo.add_const(
            f"{node.name}.w_rowsum", w.reshape(m, -1).astype(np.int32).sum(axis=1)
            .astype(np.int32))
        lo.call("mlcc_u8_conv_integer",
                [node.inputs[0], node.input(2), call["args"][1], rowsum, out], [out],
                params_type="mlcc_conv_integer_params", pool=True,
                params={"conv": call["params"], "depthwise": int(depthwise)},
                scratch_bytes=-(-4 * m // 64) * 64 + call["scratch_bytes"],
                op=f"ConvInteger int8 x_zp at run time{' depthwise' if depthwise else ''}")

    def flops(self, node: Node, g: Graph) -> int:
        w, y = g.values[node.inputs[1]], g.values[node.outputs[0]]
        return 2 * y.numel * math.prod(w.shape[1:])


class _Capture:
    """A stand-in Lowering that records the kernel calls a lowering makes instead of emitting
    them (constants it adds go to the real graph)."""

    def __init__(self, lo: Lowering):
        self.graph, self.calls, self._lo, self.options = lo.graph, [], lo, lo.options

    def value(self, name):
        return self._lo.value(name)

    def add_const(self, base, data):
        return self._lo.add_const(base, data)

    def call(self, kernel, args, writes, **kw):
        self.calls.append({"kernel": kernel, "args": args, "writes": writes, **kw})


@register("MatMulInteger", since=10)
class MatMulInteger(OpDef):
    """y = (a - a_zero_point) @ (b - b_zero_point) in int32 with a constant 2-D b (int8 or
    uint8, zero point per tensor or per column) and a per-tensor a_zero_point, constant or
    computed at run time (mlcc_i32_zero_point_correct applies what the product leaves out)."""
    attributes = {}

    def infer(self, node, ins, g):
        a, b = ins[0], ins[1]
        if a.dtype != "uint8" or len(b.shape) != 2:
            raise UnsupportedError("uint8 A and a 2-D constant int8 or uint8 B are supported")
        return [("int32", tuple(a.shape[:-1]) + (b.shape[1],))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        k, n = lo.value(node.inputs[1]).shape
        b, zw = _integer_operands(node, g, 1, n)
        zx = _const_zero_point(g, node.input(2))
        exact = zx is not None and not np.any(zw)
        q = Node(node.name, "QFC", [node.inputs[0],
                                    lo.add_const(f"{node.name}.w", np.ascontiguousarray(b.T)),
                                    lo.add_const(f"{node.name}.bias", np.zeros(n, np.int32)),
                                    "", "", "", ""], list(node.outputs), {}, MLCC, 1)
        q.attrs.update(x_zero_point=zx if exact else 0, x_scale=1.0, y_scale=0.0,
                       rq=("int32", "float", 0, 0, 0))
        QFC().lower(q, lo)
        if exact:
            return
        out = node.outputs[0]
        colsum = lo.add_const(f"{node.name}.colsum", b.astype(np.int32).sum(axis=0)
                              .astype(np.int32))
        zname = lo.add_const(f"{node.name}.w_zp", zw.astype(np.int32)) if np.any(zw) else ""
        lo.call("mlcc_i32_zero_point_correct",
                [node.inputs[0], node.input(2), colsum, zname, out], [out],
                params_type="mlcc_zero_point_params",
                params={"m": lo.value(out).numel // n, "n": n, "k": k},
                op="MatMulInteger zero points")
