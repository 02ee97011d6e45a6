"""Operators that TensorFlow Lite models need beyond mlcc's own integer program, in the "mlcc"
domain: the TFLite importer (mlcc/frontend/tflite_import.py) writes them; an ONNX model may not
use them. TFLite's int8 tensors are held as uint8 codes (value + 128) so that the integer
kernels of mlcc/ops/quant.py run them; these are where TFLite's arithmetic differs (qelem.h).

- mlcc.QRecenter: int8 <-> uint8 codes (a model's int8 inputs and outputs).
- mlcc.TFLQuantize: float32 -> codes, TFLite's QUANTIZE (attributes scale, zero_point: of the
  codes). mlcc.TFLDequantize: codes -> float32, TFLite's DEQUANTIZE.
- mlcc.QSoftmax: TFLite's int8 softmax over the last axis; inputs x and the two int32 tables
  of mlcc/frontend/tflite_arith.py's softmax_tables.
- mlcc.QMean: TFLite's int8 MEAN over the middle axis of [outer, reduce, inner] (attributes
  outer, reduce, inner, x, y: (scale, zero point), mult, shift).
- mlcc.QSub: TFLite's int8 SUB (mlcc.QAdd's attributes, fixed mode only); mlcc.QMul: TFLite's
  int8 MUL (attributes a, b, y: (scale, zero point); mult, shift; clamp).
"""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Enum, Lowering, Node
from .common import act_params
from .quant import QAdd
from .registry import OpDef, register

MLCC = "mlcc"


@register("QRecenter", domain=MLCC)
class QRecenter(OpDef):
    attributes = {}

    def infer(self, node, ins, g):
        kinds = {"int8": "uint8", "uint8": "int8"}
        if ins[0].dtype not in kinds:
            raise UnsupportedError(f"QRecenter reads int8 or uint8, not {ins[0].dtype}")
        return [(kinds[ins[0].dtype], ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        kernel = "mlcc_s8_to_u8" if x.dtype == "int8" else "mlcc_u8_to_s8"
        lo.call(kernel, [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_recenter_params", params={"count": x.numel},
                op="int8 <-> uint8 codes")


class _TFLConvert(OpDef):
    attributes = {"scale": None, "zero_point": None}
    kernel, params_of, src, dst, what = "", "", "", "", ""

    def infer(self, node, ins, g):
        if ins[0].dtype != self.src:
            raise UnsupportedError(f"{self.op_type} reads {self.src}, not {ins[0].dtype}")
        return [(self.dst, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        scale, zp = float(node.attr("scale")), int(node.attr("zero_point"))
        lo.call(self.kernel, [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_quantize_params",
                params={"count": lo.value(node.inputs[0]).numel, "scale": scale,
                        "zero_point": zp},
                op=f"{self.what} (TFLite) scale={scale:.6g} int8 zp={zp - 128}")


@register("TFLQuantize", domain=MLCC)
class TFLQuantize(_TFLConvert):
    kernel, src, dst, what = "mlcc_f32_quantize__tflite", "float32", "uint8", "QUANTIZE"


@register("TFLDequantize", domain=MLCC)
class TFLDequantize(_TFLConvert):
    kernel, src, dst, what = "mlcc_u8_dequantize__tflite", "uint8", "float32", "DEQUANTIZE"


@register("QSoftmax", domain=MLCC)
class QSoftmax(OpDef):
    attributes = {"beta": None, "x_scale": None}

    def infer(self, node, ins, g):
        if ins[0].dtype != "uint8" or ins[1].dtype != "int32" or ins[1].shape != (256,):
            raise UnsupportedError("QSoftmax reads uint8 codes and two [256] int32 tables")
        return [("uint8", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        depth = x.shape[-1] if x.shape else 1
        lo.call("mlcc_u8_softmax", [node.inputs[0], node.inputs[1], node.inputs[2],
                                    node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_qsoftmax_params",
                params={"rows": x.numel // max(depth, 1), "depth": depth},
                op=f"SOFTMAX (TFLite int8) beta={node.attr('beta'):.6g} "
                   f"x_scale={node.attr('x_scale'):.6g}")


@register("QSub", domain=MLCC)
class QSub(QAdd):
    kernel, what = "mlcc_u8_sub", "SUB (TFLite)"

    def check(self, node):
        problems = super().check(node)
        if node.attr("mode") != "fixed":
            problems.append("QSub runs TFLite's fixed-point arithmetic only (mode 'fixed')")
        return problems


@register("QMul", domain=MLCC)
class QMul(OpDef):
    attributes = {"a": None, "b": None, "y": None, "mult": None, "shift": None, "clamp": None}

    def infer(self, node, ins, g):
        if ins[0].dtype != "uint8" or ins[1].dtype != "uint8" or ins[0].shape != ins[1].shape:
            raise UnsupportedError("QMul multiplies two uint8 tensors of one shape")
        return [("uint8", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        (sa, za), (sb, zb), (sy, zy) = node.attr("a"), node.attr("b"), node.attr("y")
        qmin, qmax = node.attr("clamp")
        out = node.outputs[0]
        lo.call("mlcc_u8_mul", [node.inputs[0], node.inputs[1], out], [out],
                params_type="mlcc_qmul_params",
                params={"count": lo.value(out).numel, "a_zero_point": int(za),
                        "b_zero_point": int(zb), "mult_f": 0.0, "mult": int(node.attr("mult")),
                        "shift": int(node.attr("shift")),
                        "rq": {"out_kind": Enum("MLCC_QOUT_U8"),
                               "mode": Enum("MLCC_REQUANT_FIXED"), "zero_point": int(zy),
                               "qmin": int(qmin), "qmax": int(qmax),
                               "act": act_params(Node("", "", [], []))}},
                op=f"MUL (TFLite) int8 a=({sa:.6g},{za}) b=({sb:.6g},{zb}) "
                   f"y=({sy:.6g},{zy})")


@register("QMean", domain=MLCC)
class QMean(OpDef):
    attributes = {"outer": None, "reduce": None, "inner": None, "x": None, "y": None,
                  "mult": None, "shift": None, "shape": None}

    def infer(self, node, ins, g):
        n = node.attr("outer") * node.attr("reduce") * node.attr("inner")
        if ins[0].dtype != "uint8" or ins[0].numel != n:
            raise UnsupportedError("QMean reduces uint8 codes of outer x reduce x inner")
        return [("uint8", tuple(node.attr("shape")))]

    def lower(self, node: Node, lo: Lowering) -> None:
        (sx, zx), (sy, zy) = node.attr("x"), node.attr("y")
        out = node.outputs[0]
        lo.call("mlcc_u8_mean", [node.inputs[0], out], [out],
                params_type="mlcc_qmean_params",
                params={"outer": node.attr("outer"), "reduce": node.attr("reduce"),
                        "inner": node.attr("inner"), "x_zero_point": int(zx),
                        "y_zero_point": int(zy), "mult": int(node.attr("mult")),
                        "shift": int(node.attr("shift"))},
                op=f"MEAN (TFLite) int8 over {node.attr('reduce')} x=({sx:.6g},{zx}) "
                   f"y=({sy:.6g},{zy})")
