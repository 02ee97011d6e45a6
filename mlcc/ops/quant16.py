"""W8A16 operators the int8 quantizer writes for the layers it keeps at higher precision
(mlcc/quant/rules.py, docs/quantization.md "W8A16"), in the "mlcc" domain:

- mlcc.QConv16: Conv (plain, grouped, depthwise, strided, padded, dilated) on int16
  activations (symmetric, zero point 0) and int8 weights (per output channel), exact integer
  sums, then the float epilogue act(acc * x_scale * w_scale[c] + bias[c]), written as float32,
  or quantized (QuantizeLinear's arithmetic) to int16 or uint8 for the consumer.
- mlcc.QFC16: Gemm / MatMul with a constant weight, the same epilogue.

Inputs: x (int16), w (int8 [M, C/g, kh, kw] or [N, K]; lowered as pack_weights16's int16
pairs for the __packed kernels, depthwise layers as they are), scale (float32 [M]: x_scale *
w_scale[c]), fbias (float32 [M] or ""). Attributes: the Conv geometry, x_scale (for the
banner), out = (kind "float32" | "int16" | "uint8", y_scale, zero point) and _act (the fused
activation, any kind). Kernels: runtime_c/kernels/qconv16.h.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedError
from ..ir import Enum, Graph, Lowering, Node
from ..ir.symbolic import is_symbolic
from .common import act_params
from .conv import AUTO_PAD
from .conv_kernels import DW_SLICES
from .quant import MLCC, _const, conv_window_params
from .registry import OpDef, register

OUT_KINDS = {"float32": "F32", "int16": "S16", "uint8": "U8"}
TILE_COLS = 32          # qconv16.c's S16_NR: chunks are multiples of it


def _epilogue(node: Node) -> dict:
    kind, y_scale, zp = node.attr("out")
    return {"out_kind": Enum(f"MLCC_S16_OUT_{OUT_KINDS[kind]}"), "y_scale": float(y_scale),
            "zero_point": int(zp), "act": act_params(node)}


def _banner(node: Node, what: str) -> str:
    kind, y_scale, zp = node.attr("out")
    fused = [f.rsplit(":", 1)[-1] for f in node.fused]
    text = "+".join([what] + fused) + f" w8a16 x_scale={node.attr('x_scale'):.6g}"
    return text + (f" -> {kind} y_scale={y_scale:.6g} y_zp={zp}" if kind != "float32"
                   else " -> float32")


ROW_TILE = 8            # qconv16.h's MLCC_S16_MR: channels per tile, rows padded to it


def _scratch(lo: Lowering, groups: int, mg: int, k: int, cols: int,
             packed: bool = False) -> tuple[int, int]:
    """(chunk_cols, scratch bytes) of qconv16.h: chunks of output positions whose packed
    columns fill the target's chunk_bytes (at least one 32-column tile), one slice per thread
    (MLCC_S16_WEIGHT_BYTES + slices * MLCC_S16_SLICE_BYTES; packed: the weights come
    packed, pack_weights16, and take no scratch)."""
    k2 = (k + 1) // 2
    tiles = -(-cols // TILE_COLS)
    per_tile = k2 * TILE_COLS * 4
    chunk = TILE_COLS * min(max(lo.options.get("chunk_bytes", 262144) // per_tile, 1), tiles)
    slices = DW_SLICES if lo.options.get("threads", True) else 1
    weights = 0 if packed else -(-groups * (-(-mg // ROW_TILE) * ROW_TILE) * k2 * 4 // 64) * 64
    return chunk, weights + slices * (-(-k2 * chunk * 4 // 64) * 64)


def pack_weights16(wq: np.ndarray, groups: int, tap_major: bool = False) -> np.ndarray:
    """int8 weights [M, C/g, taps...] or [N, K] as the int16 pairs of qconv16.h's __packed
    entries: [groups][rows / 8][k2][8][2], rows padded to 8 and K to even with zeros; K in
    (channel, tap) order, or (tap_major: the direct path's, p->direct) (tap, channel) with the
    channels padded to even."""
    m = wq.shape[0]
    mg = m // groups
    if tap_major:
        cg = wq.shape[1]
        taps = int(np.prod(wq.shape[2:]))
        flat = np.zeros((m, taps, cg + cg % 2), wq.dtype)
        flat[:, :, :cg] = wq.reshape(m, cg, taps).transpose(0, 2, 1)
        flat = flat.reshape(m, -1)
    else:
        flat = wq.reshape(m, -1)
    k = flat.shape[1]
    k2, rows = (k + 1) // 2, -(-mg // ROW_TILE) * ROW_TILE
    out = np.zeros((groups, rows, 2 * k2), np.int16)
    out[:, :mg, :k] = flat.reshape(groups, mg, k)
    return np.ascontiguousarray(
        out.reshape(groups, rows // ROW_TILE, ROW_TILE, k2, 2).transpose(0, 1, 3, 2, 4))


def direct_bytes(p: dict) -> int:
    """qconv16.h's MLCC_S16_DIRECT_BYTES: the direct path's planes of channel pairs."""
    rows = (p["out_h"] - 1) * p["stride_h"] + (p["kernel_h"] - 1) * p["dilation_h"] + 1
    cols = -(-((p["out_w"] - 1) * p["stride_w"] + (p["kernel_w"] - 1) * p["dilation_w"] + 1)
             // p["stride_w"])
    return (p["in_channels"] + 1) // 2 * rows * p["stride_w"] * cols * 4


def _depthwise(params: dict) -> bool:
    """qconv16.c's is_depthwise: such layers take the int8 weights and no scratch."""
    return (params["groups"] > 1 and params["groups"] == params["in_channels"]
            == params["out_channels"] and params["kernel_h"] * params["kernel_w"] <= 512)


def _refuse_ranges(node: Node, shapes) -> None:
    if is_symbolic(shapes):
        raise UnsupportedError(f"{node.name}: W8A16 layers over a range of sizes are not "
                               f"supported (int8 or float are)")


@register("QConv16", domain=MLCC)
class QConv16(OpDef):
    attributes = {"auto_pad": lambda v: v in AUTO_PAD, "dilations": None, "group": None,
                  "kernel_shape": None, "pads": None, "strides": None, "x_scale": None,
                  "out": None, "_act": None}

    def infer(self, node, ins, g):
        return [(g.values[node.outputs[0]].dtype, g.values[node.outputs[0]].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, w = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        if len(x.shape) not in (3, 4):
            raise UnsupportedError("only 1-D and 2-D convolutions run as W8A16")
        _refuse_ranges(node, x.shape)
        params = conv_window_params(node, x.shape, w.shape,
                                    "only 1-D and 2-D convolutions run as W8A16")
        group, c, m = params["groups"], params["in_channels"], params["out_channels"]
        kh, kw = params["kernel_h"], params["kernel_w"]
        out = node.outputs[0]
        if _depthwise(params):
            params.update({"chunk_cols": TILE_COLS, "ep": _epilogue(node)})
            lo.call("mlcc_s16_conv2d", [node.inputs[0], node.inputs[1], node.inputs[2],
                                        node.input(3), out], [out],
                    params_type="mlcc_s16_conv2d_params", params=params, pool=True,
                    scratch_bytes=0, op=_banner(node, "Conv"))
            return
        # the direct product (no im2col) where x86 kernels may take it: windows of more than
        # one tap, one group; its K order (tap, channel pair) is packed by the others
        direct = bool(lo.options.get("int8_direct")) and group == 1 and (
            kh * kw > 1 or params["stride_h"] == params["stride_w"] == 1)
        k = kh * kw * 2 * (-(-c // 2)) if direct else c // group * kh * kw
        chunk, scratch = _scratch(lo, group, m // group, k, params["out_h"] * params["out_w"],
                                  packed=True)
        params.update({"chunk_cols": chunk, "direct": int(direct), "ep": _epilogue(node)})
        if direct:
            scratch = max(scratch, -(-direct_bytes(params) // 64) * 64)
        wname = lo.add_const(f"{node.name}.w16", pack_weights16(
            _const(lo, node.inputs[1]).astype(np.int8), group, tap_major=direct))
        lo.call("mlcc_s16_conv2d__packed", [node.inputs[0], wname, node.inputs[2],
                                            node.input(3), out], [out],
                params_type="mlcc_s16_conv2d_params", params=params, pool=True,
                scratch_bytes=scratch, op=_banner(node, "Conv"))

    def flops(self, node: Node, g: Graph) -> int:
        w, y = g.values[node.inputs[1]], g.values[node.outputs[0]]
        return 2 * y.numel * math.prod(w.shape[1:])


@register("QFC16", domain=MLCC)
class QFC16(OpDef):
    """y[..., n] = epilogue(sum_k x[..., k] w[n][k]): all leading axes of x are rows."""
    attributes = {"x_scale": None, "out": None, "_act": None}

    def infer(self, node, ins, g):
        return [(g.values[node.outputs[0]].dtype, g.values[node.outputs[0]].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        _refuse_ranges(node, x.shape)
        wq = _const(lo, node.inputs[1]).astype(np.int8)
        nout, k = wq.shape
        rows = x.numel // k
        chunk, scratch = _scratch(lo, 1, nout, k, rows, packed=True)
        out = node.outputs[0]
        wname = lo.add_const(f"{node.name}.w16", pack_weights16(wq, 1))
        lo.call("mlcc_s16_fc__packed", [node.inputs[0], wname, node.inputs[2], node.input(3),
                                        out], [out],
                params_type="mlcc_s16_fc_params", pool=True, scratch_bytes=scratch,
                params={"m": rows, "n": nout, "k": k, "chunk_cols": chunk,
                        "ep": _epilogue(node)},
                op=_banner(node, "Gemm"))

    def flops(self, node: Node, g: Graph) -> int:
        w = g.values[node.inputs[1]]
        return 2 * g.values[node.outputs[0]].numel * w.shape[1]
