"""W8A16 operators the int8 quantizer writes for the layers it keeps at higher precision
(mlcc/quant/rules.py, docs/quantization.md "W8A16"), in the "mlcc" domain:

- mlcc.QConv16: Conv (plain, grouped, depthwise, strided, padded, dilated) on int16
  activations (symmetric, zero point 0) and int8 weights (per output channel), exact integer
  sums, then the float epilogue act(acc * x_scale * w_scale[c] + bias[c]), written as float32,
  or quantized (QuantizeLinear's arithmetic) to int16 or uint8 for the consumer.
- mlcc.QFC16: Gemm / MatMul with a constant weight, the same epilogue.

Inputs: x (int16), w (int8 [M, C/g, kh, kw] or [N, K]), scale (float32 [M]: x_scale *
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


def _scratch(lo: Lowering, groups: int, mg: int, k: int, cols: int) -> tuple[int, int]:
    """(chunk_cols, scratch bytes) of qconv16.h: chunks of output positions whose packed
    columns fill the target's chunk_bytes (at least one 32-column tile), one slice per thread
    (MLCC_S16_WEIGHT_BYTES + slices * MLCC_S16_SLICE_BYTES)."""
    k2 = (k + 1) // 2
    tiles = -(-cols // TILE_COLS)
    per_tile = k2 * TILE_COLS * 4
    chunk = TILE_COLS * min(max(lo.options.get("chunk_bytes", 262144) // per_tile, 1), tiles)
    slices = DW_SLICES if lo.options.get("threads", True) else 1
    weights = -(-groups * (-(-mg // 4) * 4) * k2 * 4 // 64) * 64
    return chunk, weights + slices * (-(-k2 * chunk * 4 // 64) * 64)


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
        chunk, scratch = _scratch(lo, group, m // group, c // group * kh * kw,
                                  params["out_h"] * params["out_w"])
        params.update({"chunk_cols": chunk, "ep": _epilogue(node)})
        out = node.outputs[0]
        lo.call("mlcc_s16_conv2d", [node.inputs[0], node.inputs[1], node.inputs[2],
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
        chunk, scratch = _scratch(lo, 1, nout, k, rows)
        out = node.outputs[0]
        lo.call("mlcc_s16_fc", [node.inputs[0], node.inputs[1], node.inputs[2], node.input(3),
                                out], [out],
                params_type="mlcc_s16_fc_params", pool=True, scratch_bytes=scratch,
                params={"m": rows, "n": nout, "k": k, "chunk_cols": chunk,
                        "ep": _epilogue(node)},
                op=_banner(node, "Gemm"))

    def flops(self, node: Node, g: Graph) -> int:
        w = g.values[node.inputs[1]]
        return 2 * g.values[node.outputs[0]].numel * w.shape[1]
