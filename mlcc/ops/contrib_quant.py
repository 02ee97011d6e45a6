"""Quantized operators of onnxruntime's com.microsoft domain, the ones its quantization tools
write (docs/quantization.md, "Contrib operators of onnxruntime"). Each lowers onto kernels
that exist for other operators:

- MatMulIntegerToFloat, DynamicQuantizeMatMul (quantize_dynamic's MatMuls after onnxruntime's
  graph optimizer fused them): the MatMulInteger lowering (u8 x s8 product, zero points at
  run time), then mlcc_i32_rescale (x a_scale * b_scale + bias); DynamicQuantizeMatMul first
  runs DynamicQuantizeLinear's kernel.
- MatMulNBits (2/4/8-bit block-quantized weights): the weights are dequantized at compile
  time and the node runs as a float MatMul with bias (onnxruntime's float32 dequantization,
  then the same product).
- DynamicQuantizeLSTM (int8 or uint8 W and R): mlcc_f32_dynamic_quantize_lstm
  (runtime_c/kernels/qrecurrent.h), X and h quantized at run time as onnxruntime does, integer
  products on mlcc_u8_fc, the float LSTM's gates in onnxruntime's arithmetic.
- QLinearAdd (mlcc_u8_add), QLinearMul (mlcc_u8_mul), QLinearSigmoid, QLinearLeakyRelu and the
  requantized inputs of QLinearConcat (256-entry tables, mlcc_u8_lut, built with onnxruntime's
  own table arithmetic), QLinearGlobalAveragePool and QLinearAveragePool (the integer
  depthwise convolution with all-one weights: exact sums, onnxruntime's requantization),
  QGemm (mlcc.QFC).

Scales and zero points must be constants (they are, in every model onnxruntime's tools
write), except the run-time scale and zero point DynamicQuantizeLinear computes.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Graph, Lowering, Node
from .common import act_params, broadcast_shapes, broadcast_strides, const_input, \
    contiguous_strides, emit_copy, require_dtype
from .gemm import MatMul
from .conv import AUTO_PAD, window_geometry
from .movement import Concat
from .quant import MLCC, QAdd, QConv, QFC, QLut, DynamicQuantizeLinear, MatMulInteger, \
    pack_fc_weights
from .recurrent import LSTM, activations, num_directions, recurrent_params, scratch_floats
from .registry import OpDef, register

MS = "com.microsoft"
CODE_DTYPES = ("uint8", "int8")


class _MsOp(OpDef):
    """A com.microsoft operator: its required inputs (positions) and how many it takes at
    most (the schemas of onnxruntime's docs/ContribOperators.md), checked with the
    attributes."""
    required: tuple[int, ...] = (0,)
    max_inputs = 1

    def check(self, node: Node) -> list[str]:
        problems = super().check(node)
        missing = [i for i in self.required if not node.input(i)]
        if missing or len(node.inputs) > self.max_inputs:
            problems.insert(0, f"takes at most {self.max_inputs} inputs, with inputs "
                               f"{', '.join(map(str, self.required))} present (got "
                               f"{len(node.inputs)}, missing {missing or 'none'})")
        return problems


# ------------------------------------------------------------------ scales and zero points

def _scale(g: Graph, node: Node, index: int, what: str) -> float:
    arr = const_input(g, node, index, what)
    if arr is None:
        raise ModelError(f"{what} (input {index}) is required")
    arr = np.asarray(arr)
    if arr.size != 1 or arr.dtype != np.float32:
        raise UnsupportedError(f"{what} must be one float32 value (per tensor), not "
                               f"{arr.dtype} {list(arr.shape)}")
    s = arr.reshape(()).item()
    if not (np.isfinite(s) and s > 0):
        raise ModelError(f"{what} {s} must be positive and finite")
    return float(np.float32(s))


def _zero_point(g: Graph, node: Node, index: int, what: str, dtype: str) -> int:
    arr = const_input(g, node, index, what)
    if arr is None:
        return 0
    arr = np.asarray(arr)
    if arr.size != 1 or arr.dtype != np.dtype(dtype):
        raise UnsupportedError(f"{what} must be one {dtype} value (per tensor), not "
                               f"{arr.dtype} {list(arr.shape)}")
    return int(arr.reshape(()).item())


def _codes(node: Node, values, allowed=CODE_DTYPES) -> str:
    """The common type of the quantized tensors: one of `allowed`, else refused."""
    dtypes = {v.dtype for v in values if v is not None}
    if len(dtypes) != 1 or not dtypes <= set(allowed):
        raise UnsupportedError(f"{'/'.join(sorted(dtypes))} quantized tensors are not "
                               f"supported here ({' or '.join(allowed)} are)")
    return dtypes.pop()


def lookup_table(fn, x_scale: float, x_zp: int, y_scale: float, y_zp: int,
                 dtype: str) -> np.ndarray:
    """onnxruntime's QlinearBuildLookupTable: for each byte of the input type, the real value
    x_scale * (code - x_zp) in float32, fn of it in float32, then QuantizeLinear (divide by
    y_scale, clamp to the type's range less the zero point, round half to even, add the zero
    point). Returned as the 256 output bytes, indexed by the input byte (int8 tensors too:
    mlcc_u8_lut reads and writes bytes)."""
    info = np.iinfo(dtype)
    codes = np.arange(256, dtype=np.uint8).view(dtype).astype(np.int32)
    real = np.float32(x_scale) * (codes - x_zp).astype(np.float32)
    out = np.asarray(fn(real), np.float32) / np.float32(y_scale)
    out = np.clip(out, np.float32(info.min - y_zp), np.float32(info.max - y_zp))
    q = np.rint(out).astype(np.int32) + y_zp
    return q.astype(dtype).view(np.uint8)


def _emit_table(node: Node, lo: Lowering, x: str, table: np.ndarray, out: str,
                what: str, xq: tuple, yq: tuple) -> None:
    name = lo.add_const(f"{node.name}.table", table)
    QLut().lower(Node(node.name, "QLut", [x, name], [out], {"x": xq, "y": yq, "act": what},
                      MLCC, 1), lo)


class _QLinearTable(_MsOp):
    """Y = quantize(fn(dequantize(X))) as a table: X, X_scale, X_zero_point, Y_scale,
    Y_zero_point (onnxruntime computes the same table, QlinearLookupBase)."""
    required, max_inputs = (0, 1, 3), 5
    attributes: dict = {}

    def fn(self, node: Node):
        raise NotImplementedError

    def infer(self, node, ins, g):
        dtype = _codes(node, [ins[0]])
        return [(dtype, ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        dtype = lo.value(node.inputs[0]).dtype
        xs, ys = _scale(g, node, 1, "X_scale"), _scale(g, node, 3, "Y_scale")
        xz = _zero_point(g, node, 2, "X_zero_point", dtype)
        yz = _zero_point(g, node, 4, "Y_zero_point", dtype)
        table = lookup_table(self.fn(node), xs, xz, ys, yz, dtype)
        _emit_table(node, lo, node.inputs[0], table, node.outputs[0], node.op_type,
                    (xs, xz), (ys, yz))


@register("QLinearSigmoid", domain=MS)
class QLinearSigmoid(_QLinearTable):
    def fn(self, node):
        # exact in float64, rounded to float32; onnxruntime's MlasComputeLogistic is a
        # polynomial within a few float32 ulps of it, so a table entry can differ by one code
        # where the real output lies that close to a rounding boundary
        return lambda v: (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)


@register("QLinearLeakyRelu", domain=MS)
class QLinearLeakyRelu(_QLinearTable):
    attributes = {"alpha": None}

    def fn(self, node):
        alpha = np.float32(node.attr("alpha", 0.01))
        return lambda v: np.where(v >= 0, v, v * alpha).astype(np.float32)


# ------------------------------------------------------------------ binary element-wise

class _QLinearBinary(_MsOp):
    """C = quantize(op(dequantize(A), dequantize(B))) with numpy broadcasting: A, A_scale,
    A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point; uint8."""
    required, max_inputs = (0, 1, 3, 4, 6), 8
    attributes: dict = {}

    def infer(self, node, ins, g):
        _codes(node, [ins[0], ins[3]], ("uint8",))
        return [("uint8", broadcast_shapes(ins[0].shape, ins[3].shape))]

    def operands(self, node: Node, lo: Lowering):
        g = lo.graph
        qa = (_scale(g, node, 1, "A_scale"), _zero_point(g, node, 2, "A_zero_point", "uint8"))
        qb = (_scale(g, node, 4, "B_scale"), _zero_point(g, node, 5, "B_zero_point", "uint8"))
        qc = (_scale(g, node, 6, "C_scale"), _zero_point(g, node, 7, "C_zero_point", "uint8"))
        shape = lo.value(node.outputs[0]).shape
        names = [_broadcast(node, lo, node.inputs[i], shape) for i in (0, 3)]
        return names, qa, qb, qc


def _broadcast(node: Node, lo: Lowering, name: str, shape) -> str:
    """name as a tensor of `shape`: itself, or a broadcast copy (the kernels take equal
    shapes)."""
    v = lo.value(name)
    if tuple(v.shape) == tuple(shape):
        return name
    tmp = lo.temp(f"{node.name}.{name}.bcast", v.dtype, tuple(shape))
    emit_copy(lo, name, tmp, shape, broadcast_strides(v.shape, shape),
              contiguous_strides(shape), op=f"{node.op_type} broadcast")
    return tmp


@register("QLinearAdd", domain=MS)
class QLinearAdd(_QLinearBinary):
    def lower(self, node: Node, lo: Lowering) -> None:
        (a, b), qa, qb, qc = self.operands(node, lo)
        QAdd().lower(Node(node.name, "QAdd", [a, b], [node.outputs[0]],
                          {"a": qa, "b": qb, "y": qc, "mode": "float", "clamp": (0, 255)},
                          MLCC, 1), lo)


@register("QLinearMul", domain=MS)
class QLinearMul(_QLinearBinary):
    def lower(self, node: Node, lo: Lowering) -> None:
        (a, b), (sa, za), (sb, zb), (sc, zc) = self.operands(node, lo)
        out = node.outputs[0]
        lo.call("mlcc_u8_mul", [a, b, out], [out], params_type="mlcc_qmul_params",
                params={"count": lo.value(out).numel, "a_zero_point": za, "b_zero_point": zb,
                        "mult_f": float(np.float64(sa) * np.float64(sb) / np.float64(sc)),
                        "mult": 0, "shift": 0, "rq": _u8_requant(zc)},
                op=f"QLinearMul a=({sa:.6g},{za}) b=({sb:.6g},{zb}) y=({sc:.6g},{zc})")


def _u8_requant(zero_point: int) -> dict:
    return {"out_kind": Enum("MLCC_QOUT_U8"), "mode": Enum("MLCC_REQUANT_FLOAT"),
            "zero_point": int(zero_point), "qmin": 0, "qmax": 255,
            "act": act_params(Node("", "", [], []))}


# ------------------------------------------------------------------ Concat, pooling

@register("QLinearConcat", domain=MS)
class QLinearConcat(_MsOp):
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input; an input at another
    scale or zero point goes through onnxruntime's requantization table first."""
    required, max_inputs = (0, 1, 2), 10**6
    attributes = {"axis": None}

    def infer(self, node, ins, g):
        xs = ins[2::3]
        _codes(node, xs)
        if len(ins) < 5 or (len(ins) - 2) % 3:
            raise ModelError(f"QLinearConcat takes Y_scale, Y_zero_point and triples "
                             f"(X, X_scale, X_zero_point), not {len(ins)} inputs")
        return Concat().infer(self._concat(node), xs, g)

    @staticmethod
    def _concat(node: Node, inputs=None, outputs=None) -> Node:
        return Node(node.name, "Concat", list(inputs if inputs is not None else node.inputs[2::3]),
                    list(outputs or node.outputs), {"axis": node.attr("axis")}, "", 13)

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        dtype = lo.value(node.outputs[0]).dtype
        ys, yz = _scale(g, node, 0, "Y_scale"), _zero_point(g, node, 1, "Y_zero_point", dtype)
        parts = []
        for i in range(2, len(node.inputs), 3):
            x = node.inputs[i]
            xs = _scale(g, node, i + 1, f"X_scale of input {x!r}")
            xz = _zero_point(g, node, i + 2, f"X_zero_point of input {x!r}", dtype)
            if (xs, xz) != (ys, yz):
                v = lo.value(x)
                tmp = lo.temp(f"{node.name}.{x}.requant", dtype, v.shape)
                table = lookup_table(lambda r: r, xs, xz, ys, yz, dtype)
                _emit_table(node, lo, x, table, tmp, "Requantize", (xs, xz), (ys, yz))
                x = tmp
            parts.append(x)
        Concat().lower(self._concat(node, parts), lo)


def _window_sums(node: Node, lo: Lowering, kernel: list[int], attrs: dict, count: int) -> None:
    """Y = requantize(sum over each window of (x - x_zero_point)) with the multiplier
    x_scale / (y_scale * count) in float32: the integer depthwise convolution with weights 1
    (its padding takes the zero point, so padded taps add 0)."""
    g = lo.graph
    c = lo.value(node.inputs[0]).shape[1]
    xs, ys = _scale(g, node, 1, "x_scale"), _scale(g, node, 3, "y_scale")
    xz = _zero_point(g, node, 2, "x_zero_point", "uint8")
    yz = _zero_point(g, node, 4, "y_zero_point", "uint8")
    scale = np.float32(xs) / (np.float32(ys) * np.float32(count))
    w = lo.add_const(f"{node.name}.ones", np.ones((c, 1, *kernel), np.int8))
    bias = lo.add_const(f"{node.name}.bias", np.zeros(c, np.int32))
    sname = lo.add_const(f"{node.name}.scale", np.full(c, scale, np.float32))
    QConv().lower(Node(node.name, "QConv", [node.inputs[0], w, bias, sname, "", "", ""],
                       [node.outputs[0]],
                       {**attrs, "kernel_shape": kernel, "group": c, "x_zero_point": xz,
                        "x_scale": xs, "y_scale": ys, "rq": ("uint8", "float", yz, 0, 255)},
                       MLCC, 1), lo)


def _nchw_codes(node: Node, x) -> None:
    _codes(node, [x], ("uint8",))
    if len(x.shape) not in (3, 4):
        raise UnsupportedError(f"a rank-{len(x.shape)} input is not supported (rank 3 or 4, "
                               f"NCHW, is)")


@register("QLinearGlobalAveragePool", domain=MS)
class QLinearGlobalAveragePool(_MsOp):
    """Per plane: sum(x - x_zero_point) exactly, times x_scale / (y_scale * plane size) in
    float32, rounded half to even, + y_zero_point (onnxruntime's MlasRequantizeOutput)."""
    required, max_inputs = (0, 1, 2, 3, 4), 5
    attributes = {"channels_last": lambda v: v == 0}

    def infer(self, node, ins, g):
        x = ins[0]
        _nchw_codes(node, x)
        return [("uint8", tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2))]

    def lower(self, node: Node, lo: Lowering) -> None:
        spatial = list(lo.value(node.inputs[0]).shape[2:])
        size = math.prod(spatial)
        if size >= 1 << 24:
            raise UnsupportedError(f"a plane of {size} values is too large (onnxruntime "
                                   f"refuses 2^24 and more)")
        _window_sums(node, lo, spatial, {}, size)


@register("QLinearAveragePool", domain=MS)
class QLinearAveragePool(_MsOp):
    """The window sums of the codes less the zero point, exact, requantized with
    x_scale / (y_scale * kernel size): count_include_pad=1 (padding counts as real 0), or
    count_include_pad=0 where no window reaches padding. onnxruntime sums the dequantized
    values in float32 instead, so a result that lies next to a half step can round the other
    way: within one code."""
    required, max_inputs = (0, 1, 3), 5
    attributes = {"kernel_shape": None, "strides": None, "pads": None,
                  "auto_pad": lambda v: v in AUTO_PAD, "count_include_pad": lambda v: v in (0, 1),
                  "ceil_mode": lambda v: v == 0, "channels_last": lambda v: v == 0}

    def infer(self, node, ins, g):
        x = ins[0]
        _nchw_codes(node, x)
        kernel = node.attr("kernel_shape")
        if kernel is None or len(kernel) != len(x.shape) - 2:
            raise ModelError(f"kernel_shape {kernel} does not match input {list(x.shape)}")
        geo = window_geometry(node, list(x.shape[2:]), [int(k) for k in kernel])
        if not node.attr("count_include_pad", 0) and any(geo["begin"] + geo["end"]):
            raise UnsupportedError("count_include_pad=0 with padding is not supported (windows "
                                   "of different sizes)")
        return [("uint8", tuple(x.shape[:2]) + tuple(geo["out"]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        kernel = [int(k) for k in node.attr("kernel_shape")]
        attrs = {k: node.attrs[k] for k in ("strides", "pads", "auto_pad") if k in node.attrs}
        _window_sums(node, lo, kernel, attrs, math.prod(kernel))


# ------------------------------------------------------------------ matrix products

@register("QGemm", domain=MS)
class QGemm(_MsOp):
    """Y = alpha * (A - a_zp)(B - b_zp) + C on the integer GEMM (mlcc.QFC): requantized to
    uint8 with y_scale, or float32 without. A uint8 with a constant zero point; B a constant
    int8 (zero point 0) or uint8 (zero point 128) matrix; C int32 per column or scalar."""
    required, max_inputs = (0, 1, 2, 3, 4, 5), 9
    attributes = {"alpha": None, "transA": lambda v: v == 0, "transB": None}

    def infer(self, node, ins, g):
        a, b = ins[0], ins[3]
        _codes(node, [a], ("uint8",))
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise ModelError(f"A {list(a.shape)} and B {list(b.shape)} must be matrices")
        n = b.shape[0] if node.attr("transB", 0) else b.shape[1]
        k = b.shape[1] if node.attr("transB", 0) else b.shape[0]
        if a.shape[1] != k:
            raise ModelError(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
        out = "uint8" if node.input(7) else "float32"
        if node.input(8) and ins[8].dtype != "uint8":
            raise UnsupportedError(f"{ins[8].dtype} output is not supported (uint8 is)")
        return [(out, (a.shape[0], n))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        a_s = _scale(g, node, 1, "a_scale")
        a_z = _zero_point(g, node, 2, "a_zero_point", "uint8")
        b = const_input(g, node, 3, "B")
        if b.dtype not in (np.int8, np.uint8):
            raise UnsupportedError(f"{b.dtype} B is not supported (int8 or uint8 is)")
        w = np.asarray(b) if node.attr("transB", 0) else np.asarray(b).T     # [N, K]
        n = w.shape[0]
        b_s = np.asarray(const_input(g, node, 4, "b_scale"), np.float32).reshape(-1)
        b_z = const_input(g, node, 5, "b_zero_point")
        b_z = np.zeros(1, np.int32) if b_z is None else np.asarray(b_z).astype(np.int32)
        b_z = b_z.reshape(-1)
        if b_s.size not in (1, n) or b_z.size not in (1, n):
            raise UnsupportedError("b_scale and b_zero_point must be per tensor or per column")
        shift = 128 if w.dtype == np.uint8 else 0
        if np.any(b_z != shift):
            raise UnsupportedError(f"a {w.dtype} B with zero point other than {shift} is not "
                                   f"supported")
        wq = (w.astype(np.int16) - shift).astype(np.int8)
        c = np.zeros(n, np.int32)
        if node.input(6):
            cc = np.asarray(const_input(g, node, 6, "C"))
            if cc.dtype != np.int32 or cc.size not in (1, n) or (cc.ndim == 2 and cc.shape[0] != 1):
                raise UnsupportedError(f"C {cc.dtype} {list(cc.shape)} is not supported "
                                       f"(int32, per column or one value)")
            c = np.broadcast_to(cc.reshape(-1), (n,)).astype(np.int32)
        mult = (np.float32(node.attr("alpha", 1.0)) * np.float32(a_s)) * \
            np.broadcast_to(b_s, (n,)).astype(np.float32)
        if node.input(7):
            y_s = _scale(g, node, 7, "y_scale")
            y_z = _zero_point(g, node, 8, "y_zero_point", "uint8")
            mult, rq, fbias = mult / np.float32(y_s), ("uint8", "float", y_z, 0, 255), ""
        else:
            y_s, rq = 0.0, ("float32", "float", 0, 0, 0)
            fbias = lo.add_const(f"{node.name}.fbias", np.zeros(n, np.float32))
        q = Node(node.name, "QFC", [node.inputs[0], lo.add_const(f"{node.name}.w", wq),
                                    lo.add_const(f"{node.name}.bias", c),
                                    lo.add_const(f"{node.name}.scale", mult.astype(np.float32)),
                                    fbias, "", ""], list(node.outputs),
                 {"x_zero_point": a_z, "x_scale": a_s, "y_scale": y_s, "rq": rq}, MLCC, 1)
        QFC().lower(q, lo)

    def flops(self, node: Node, g: Graph) -> int:
        return 2 * g.values[node.outputs[0]].numel * g.values[node.inputs[0]].shape[1]


def _integer_matmul_to_float(node: Node, lo: Lowering, a: str, a_scale: str, a_zp: str,
                             b: str, b_scale: int, b_zp: str, bias: str) -> None:
    """Y = (A - a_zp)(B - b_zp) * (a_scale * b_scale) + bias: MatMulInteger's lowering into
    an int32 temporary, then mlcc_i32_rescale."""
    g = lo.graph
    out = node.outputs[0]
    y = lo.value(out)
    n = y.shape[-1]
    acc = lo.temp(f"{node.name}.acc", "int32", y.shape)
    MatMulInteger().lower(Node(node.name, "MatMulInteger", [a, b, a_zp, b_zp], [acc], {},
                               "", 10), lo)
    bs = np.asarray(const_input(g, node, b_scale, "b_scale"), np.float32)
    if bs.size not in (1, n) or (bs.size > 1 and bs.ndim != 1):
        raise UnsupportedError(f"b_scale {list(bs.shape)} must be per tensor or per column")
    if math.prod(lo.value(a_scale).shape) != 1:
        raise UnsupportedError("a_scale must be one value (per tensor)")
    if bias and tuple(lo.value(bias).shape) != (n,):
        raise UnsupportedError(f"bias {list(lo.value(bias).shape)} is not [{n}]")
    bname = lo.add_const(f"{node.name}.b_scale", bs.reshape(-1))
    lo.call("mlcc_i32_rescale", [acc, a_scale, bname, bias, out], [out],
            params_type="mlcc_rescale_params",
            params={"m": y.numel // n, "n": n, "per_column": int(bs.size > 1),
                    "act": act_params(node)},
            op=f"{node.op_type} to float")


def _check_integer_matmul(node: Node, a, b, g: Graph) -> tuple:
    if len(b.shape) != 2:
        raise UnsupportedError(f"B {list(b.shape)} must be a constant matrix")
    if b.dtype not in CODE_DTYPES:
        raise UnsupportedError(f"{b.dtype} B is not supported (int8 or uint8 is)")
    if not a.shape or a.shape[-1] != b.shape[0]:
        raise ModelError(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
    return ("float32", tuple(a.shape[:-1]) + (b.shape[1],))


@register("MatMulIntegerToFloat", domain=MS)
class MatMulIntegerToFloat(_MsOp):
    """A (uint8), B, a_scale, b_scale, a_zero_point, b_zero_point, bias."""
    required, max_inputs = (0, 1, 2, 3), 7
    attributes = {"_act": None}
    fuses_activation = True

    def infer(self, node, ins, g):
        _codes(node, [ins[0]], ("uint8",))
        require_dtype(node, [ins[2], ins[3]], ["float32"])
        return [_check_integer_matmul(node, ins[0], ins[1], g)]

    def lower(self, node: Node, lo: Lowering) -> None:
        _integer_matmul_to_float(node, lo, node.inputs[0], node.inputs[2], node.input(4),
                                 node.inputs[1], 3, node.input(5), node.input(6))

    def flops(self, node: Node, g: Graph) -> int:
        return 2 * g.values[node.outputs[0]].numel * g.values[node.inputs[1]].shape[0]


@register("DynamicQuantizeMatMul", domain=MS)
class DynamicQuantizeMatMul(_MsOp):
    """A (float32, quantized at run time as DynamicQuantizeLinear does), B, b_scale,
    b_zero_point, bias."""
    required, max_inputs = (0, 1, 2), 5
    attributes = {"_act": None}
    fuses_activation = True

    def infer(self, node, ins, g):
        require_dtype(node, [ins[0], ins[2]], ["float32"])
        return [_check_integer_matmul(node, ins[0], ins[1], g)]

    def lower(self, node: Node, lo: Lowering) -> None:
        a = lo.value(node.inputs[0])
        xq = lo.temp(f"{node.name}.a_quantized", "uint8", a.shape)
        xs = lo.temp(f"{node.name}.a_scale", "float32", ())
        xz = lo.temp(f"{node.name}.a_zero_point", "uint8", ())
        DynamicQuantizeLinear().lower(Node(node.name, "DynamicQuantizeLinear",
                                           [node.inputs[0]], [xq, xs, xz], {}, "", 11), lo)
        _integer_matmul_to_float(node, lo, xq, xs, xz, node.inputs[1], 2, node.input(3),
                                 node.input(4))

    def flops(self, node: Node, g: Graph) -> int:
        return 2 * g.values[node.outputs[0]].numel * g.values[node.inputs[1]].shape[0]


# ------------------------------------------------------------------ block-quantized weights

def nbits_dequantize(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
                     k: int, n: int, bits: int, block: int) -> np.ndarray:
    """MatMulNBits' weight as float32 [K, N]: B [N, blocks, block * bits / 8] bytes, values
    packed from the low bits up; scales [N * blocks]; zero points packed the same way, each
    row of N padded to whole bytes (absent: 2^(bits - 1)); w = (q - zp) * scale in float32."""
    per_byte = 8 // bits
    blocks = -(-k // block)
    mask = (1 << bits) - 1

    def unpack(raw: np.ndarray, count: int) -> np.ndarray:
        raw = raw.astype(np.int32)
        vals = np.stack([(raw >> (bits * t)) & mask for t in range(per_byte)], axis=-1)
        return vals.reshape(raw.shape[0], -1)[:, :count]

    q = unpack(np.asarray(b).reshape(n, -1), blocks * block)              # [N, blocks*block]
    if zero_points is None:
        zp = np.full((n, blocks), 1 << (bits - 1), np.int32)
    else:
        zp = unpack(np.asarray(zero_points).reshape(n, -1), blocks)
    s = np.asarray(scales, np.float32).reshape(n, blocks)
    diff = (q.reshape(n, blocks, block) - zp[:, :, None]).astype(np.float32)
    w = (diff * s[:, :, None]).astype(np.float32).reshape(n, blocks * block)[:, :k]
    return np.ascontiguousarray(w.T)


@register("MatMulNBits", domain=MS)
class MatMulNBits(_MsOp):
    """Y = A @ dequantize(B) + bias with B block-quantized along K (2, 4 or 8 bits, a float32
    scale and an optional packed uint8 zero point per block): dequantized at compile time,
    then a float MatMul. accuracy_level is accepted and ignored: mlcc computes in float32 (the
    levels' reference; onnxruntime's level 4 quantizes A to int8 per block, an extra error)."""
    required, max_inputs = (0, 1, 2), 6
    attributes = {"K": None, "N": None, "bits": lambda v: v in (2, 4, 8),
                  "block_size": lambda v: v >= 16 and v & (v - 1) == 0,
                  "accuracy_level": lambda v: 0 <= v <= 4,
                  "weight_prepacked": lambda v: v == 0}

    def _dims(self, node: Node) -> tuple[int, int, int, int]:
        k, n = node.attr("K"), node.attr("N")
        if k is None or n is None or node.attr("block_size") is None:
            raise ModelError("attributes K, N and block_size are required")
        return int(k), int(n), int(node.attr("bits", 4)), int(node.attr("block_size"))

    def infer(self, node, ins, g):
        require_dtype(node, [ins[0], ins[2]], ["float32"])
        k, n, _, _ = self._dims(node)
        if ins[0].shape[-1:] != (k,):
            raise ModelError(f"A {list(ins[0].shape)} does not end with K={k}")
        if len(ins) > 4 and ins[4] is not None:
            raise UnsupportedError("input g_idx (act-order) is not supported")
        if len(ins) > 3 and ins[3] is not None and ins[3].dtype != "uint8":
            raise UnsupportedError(f"{ins[3].dtype} zero points are not supported (packed "
                                   f"uint8 ones are)")
        return [("float32", tuple(ins[0].shape[:-1]) + (n,))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        k, n, bits, block = self._dims(node)
        b = const_input(g, node, 1, "B")
        scales = const_input(g, node, 2, "scales")
        zp = const_input(g, node, 3, "zero_points")
        blocks = -(-k // block)
        if b.size != n * blocks * block * bits // 8 or scales.size != n * blocks:
            raise ModelError(f"B {list(b.shape)} or scales {list(scales.shape)} do not match "
                             f"K={k}, N={n}, bits={bits}, block_size={block}")
        if zp is not None and zp.size != n * -(-blocks * bits // 8):
            raise ModelError(f"zero_points {list(zp.shape)} do not match N={n} and {blocks} "
                             f"blocks of {bits} bits")
        w = lo.add_const(f"{node.name}.weight", nbits_dequantize(b, scales, zp, k, n, bits,
                                                                 block))
        MatMul().lower(Node(node.name, "MatMul", [node.inputs[0], w, node.input(5)],
                            list(node.outputs), {}, "", 13), lo)

    def flops(self, node: Node, g: Graph) -> int:
        return 2 * g.values[node.outputs[0]].numel * int(node.attr("K"))


# ------------------------------------------------------------------ recurrent

def _gate_codes(g: Graph, node: Node, index: int, what: str) -> tuple:
    """DynamicQuantizeLSTM's W or R ([nd, rows, 4 * hidden] int8 or uint8, scale and zero
    point per direction or per direction and column) as onnxruntime reads them: (the int8
    codes c = w - 128 (uint8) or w (int8) [nd, rows, cols], per direction the offset such
    that w - zero point = c + offset, the column sums of w - zero point [nd * cols] int32, the
    scale of every column [nd * cols] float32). onnxruntime takes one zero point per direction,
    the first of its row (it refuses uint8 ones that vary along it, int8 ones not 0)."""
    q = np.asarray(const_input(g, node, index, what))
    if q.dtype not in (np.int8, np.uint8) or q.ndim != 3:
        raise UnsupportedError(f"{what} must be a constant 3-D int8 or uint8 tensor")
    nd, _, cols = q.shape
    at = 8 if index == 1 else 10              # W_scale, W_zero_point, R_scale, R_zero_point
    scale = np.asarray(const_input(g, node, at, f"{what}_scale"), np.float32)
    zp = np.asarray(const_input(g, node, at + 1, f"{what}_zero_point"))
    if zp.dtype != q.dtype:
        raise ModelError(f"{what}_zero_point is {zp.dtype}, {what} is {q.dtype}")
    if scale.size not in (nd, nd * cols) or zp.size not in (nd, nd * cols):
        raise UnsupportedError(f"{what}_scale {list(scale.shape)} and zero point "
                               f"{list(zp.shape)} must be per direction or per column")
    if not np.all(np.isfinite(scale)):
        raise ModelError(f"{what}_scale holds a value that is not finite")
    zrows = zp.reshape(nd, -1).astype(np.int32)
    if np.any(zrows != zrows[:, :1]):
        raise UnsupportedError(f"{what}_zero_point varies within a direction (onnxruntime "
                               f"takes one per direction)")
    if nd == 2 and scale.size != zp.size and zrows[0, 0] != zrows[1, 0]:
        raise UnsupportedError(f"{what}_scale and {what}_zero_point of different shapes with "
                               f"a zero point per direction (onnxruntime reads the second "
                               f"direction's at the scale's stride)")
    shift = 128 if q.dtype == np.uint8 else 0
    codes = (q.astype(np.int32) - shift).astype(np.int8)
    offset = [shift - int(z) for z in zrows[:, 0]]
    centered = q.astype(np.int64) - zrows[:, :1, None]
    colsum = centered.sum(axis=1).astype(np.int32).reshape(-1)
    scales = np.broadcast_to(scale.reshape(nd, -1), (nd, cols)).astype(np.float32).reshape(-1)
    return codes, offset, colsum, scales


def dq_lstm_scratch_bytes(seq: int, batch: int, inp: int, hidden: int, nd: int) -> int:
    """mlcc_f32_dynamic_quantize_lstm's scratch (qrecurrent.c), each part rounded up to 64
    bytes: the projections (float), X's codes and their padded rows, the int32 column starts,
    the LSTM state of every direction (recurrent.c), then per direction h's codes, their
    padded rows, the column starts and the int32 product."""
    def r64(v: int) -> int:
        return -(-v // 64) * 64
    n = nd * 4 * hidden
    rows = seq * batch
    state = 4 * scratch_floats("LSTM", seq, batch, hidden, nd, projected=True)
    step = (r64(batch * hidden) + r64(batch * 4 * -(-hidden // 4)) + r64(16 * hidden) +
            r64(16 * batch * hidden))
    return (r64(4 * rows * n) + r64(rows * inp) + r64(rows * 4 * -(-inp // 4)) + r64(4 * n) +
            r64(state) + nd * step)


@register("DynamicQuantizeLSTM", domain=MS)
class DynamicQuantizeLSTM(_MsOp):
    """An LSTM with int8 or uint8 W and R (quantize_dynamic writes it), computed as
    onnxruntime's CPU kernel does (mlcc_f32_dynamic_quantize_lstm, qrecurrent.h): X and, at
    every step, h quantized to uint8 at run time, integer products with W and R, float gates.
    onnxruntime splits a batch of 2 or more over its threads (more than 4 sequences, or a
    hidden size up to 256) and then quantizes h per part: mlcc follows its one-thread
    results."""
    required, max_inputs = (0, 1, 2, 8, 9, 10, 11), 12
    attributes = {k: v for k, v in LSTM.attributes.items() if k not in ("layout", "_projected")}

    def _dims(self, node: Node, g: Graph) -> tuple[int, int, int, int, int]:
        seq, batch, inp = g.values[node.inputs[0]].shape
        nd, hidden = g.values[node.inputs[2]].shape[:2]
        return seq, batch, inp, hidden, nd

    def infer(self, node, ins, g):
        x, w, r = ins[0], ins[1], ins[2]
        require_dtype(node, [x], ["float32"])
        if len(x.shape) != 3 or len(w.shape) != 3 or len(r.shape) != 3:
            raise ModelError(f"X {list(x.shape)}, W {list(w.shape)} and R {list(r.shape)} "
                             f"must be 3-D")
        for i, what in ((1, "W"), (2, "R"), (3, "B"), (7, "P")):
            if i < len(ins) and ins[i] is not None and not ins[i].is_const:
                raise UnsupportedError(f"{what} {node.inputs[i]!r} must be a constant "
                                       f"(weights computed at run time are not supported)")
        seq, batch, inp = x.shape
        nd, hidden = r.shape[0], r.shape[1]
        want_nd = num_directions(node)
        hs = node.attr("hidden_size")
        if nd != want_nd or (hs is not None and int(hs) != hidden):
            raise ModelError(f"R {list(r.shape)} does not match direction and hidden_size")
        shapes = {1: (nd, inp, 4 * hidden), 2: (nd, hidden, 4 * hidden),
                  3: (nd, 8 * hidden), 4: (batch,), 5: (nd, batch, hidden),
                  6: (nd, batch, hidden), 7: (nd, 3 * hidden)}
        for i, v in enumerate(ins[1:8], 1):
            if v is not None and tuple(v.shape) != shapes[i]:
                raise ModelError(f"input {i} has shape {list(v.shape)}, expected "
                                 f"{list(shapes[i])}")
        if len(ins) > 4 and ins[4] is not None and ins[4].dtype != "int32":
            raise ModelError("sequence_lens must be int32")
        require_dtype(node, [v for i, v in enumerate(ins[:8]) if v is not None and
                             i not in (1, 2, 4)], ["float32"])
        activations(node, "LSTM", nd)   # refuses what the kernel cannot compute
        y, yh = (seq, nd, batch, hidden), (nd, batch, hidden)
        return [("float32", y), ("float32", yh), ("float32", yh)][:len(node.outputs)]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        seq, batch, inp, hidden, nd = self._dims(node, g)
        wc, w_off, w_sum, w_scale = _gate_codes(g, node, 1, "W")
        rc, r_off, r_sum, r_scale = _gate_codes(g, node, 2, "R")
        gh = 4 * hidden
        # W of both directions as one [nd * 4H, input] matrix; R per direction [4H, hidden]
        w_packed = pack_fc_weights(wc.transpose(0, 2, 1).reshape(nd * gh, inp))
        r_packed = np.concatenate([pack_fc_weights(np.ascontiguousarray(rc[d].T)).reshape(-1)
                                   for d in range(nd)])
        b = g.const(node.input(3))
        bias = ""
        if b is not None:
            b = np.asarray(b, np.float32)
            bias = lo.add_const(f"{node.name}.bias", np.ascontiguousarray(b[:, :gh] + b[:, gh:]))
        outs = [node.outputs[i] if i < len(node.outputs) else "" for i in range(3)]
        args = [node.inputs[0], lo.add_const(f"{node.name}.w_packed", w_packed),
                lo.add_const(f"{node.name}.r_packed", r_packed),
                lo.add_const(f"{node.name}.colsum", np.concatenate([w_sum, r_sum])),
                lo.add_const(f"{node.name}.scale", np.concatenate([w_scale, r_scale])),
                bias, node.input(7), node.input(4), node.input(5), node.input(6), *outs]
        lo.call("mlcc_f32_dynamic_quantize_lstm", args, [o for o in outs if o],
                params_type="mlcc_dynamic_quantize_lstm_params", params={
                    "r": recurrent_params("LSTM", node, seq, batch, inp, hidden, nd, 0),
                    "w_offset": (w_off + [0])[:2], "r_offset": (r_off + [0])[:2]},
                scratch_bytes=dq_lstm_scratch_bytes(seq, batch, inp, hidden, nd),
                returns_status=True, pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        seq, batch, inp, hidden, nd = self._dims(node, g)
        return nd * seq * batch * (2 * 4 * hidden * (inp + hidden) + 32 * hidden)
