"""TensorFlow Lite flatbuffers (int8 models, as microcontroller models are) into mlcc's IR.

The result is already the integer program: TFLite's int8 tensors become uint8 codes (value +
128, zero point + 128: `x - zero_point` is unchanged, so mlcc's uint8 kernels run them) and
each operator becomes the mlcc-domain node that computes what TensorFlow Lite Micro's reference
kernel computes, bit for bit: CONV_2D / DEPTHWISE_CONV_2D -> mlcc.QConv and FULLY_CONNECTED ->
mlcc.QFC with the "fixed" requantization and TFLite's per-channel (multiplier, shift) as
constants; ADD -> mlcc.QAdd (fixed, TFLite's multipliers); AVERAGE_POOL_2D -> mlcc.QAvgPool
with TFLite's rounding; MAX_POOL_2D -> mlcc.QMaxPool; SOFTMAX -> mlcc.QSoftmax; element-wise
int8 operators (RELU, RELU6, QUANTIZE int8 -> int8, a fused activation a kernel cannot clamp)
-> mlcc.QLut with a table computed by tflite_arith.py; QUANTIZE / DEQUANTIZE of float ->
mlcc.TFLQuantize / TFLDequantize; int8 model inputs and outputs -> mlcc.QRecenter.

Layout: TFLite is NHWC, mlcc's convolution and pooling kernels are NCHW. Every 4-D tensor is
converted where an operator needs the other layout (a Transpose node, made once per tensor
and layout): NCHW for CONV_2D, DEPTHWISE_CONV_2D and the pools, NHWC ("natural") for RESHAPE,
FULLY_CONNECTED, SOFTMAX and the model's outputs; element-wise operators keep the layout they
are given. So a chain of convolutions stays NCHW, and the inputs and outputs keep the shapes
TFLite gives them. SHAPE, STRIDED_SLICE and PACK of constants fold here.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Node, Value
from . import tflite_arith as ta

TFLITE_MAGIC = b"TFL3"
_DTYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}
_ACTS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]
MLCC = "mlcc"
ONNX_OPSET = 13          # the ONNX nodes written here (Transpose, Reshape) follow opset 13


def is_tflite(path) -> bool:
    """A TFLite flatbuffer (file identifier "TFL3" at bytes 4-8), or a .tflite file name."""
    p = Path(path)
    if p.suffix.lower() == ".tflite":
        return True
    try:
        with open(p, "rb") as f:
            return f.read(8)[4:8] == TFLITE_MAGIC
    except OSError:
        return False


def read_tflite(path) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) < 8 or data[4:8] != TFLITE_MAGIC:
        raise ModelError(f"{path} is not a TensorFlow Lite flatbuffer (no 'TFL3' identifier)")
    return data


def _op_names() -> dict[int, str]:
    from tflite.BuiltinOperator import BuiltinOperator
    return {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}


class _Tensor:
    def __init__(self, model, sg, index: int, data: bytes):
        t = sg.Tensors(index)
        self.index = index
        self.name = (t.Name() or b"").decode("utf-8", "replace") or f"tensor_{index}"
        self.shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        self.type = t.Type()
        self.dtype = _DTYPES.get(self.type)
        q = t.Quantization()
        self.scales = (np.asarray(q.ScaleAsNumpy(), np.float32)
                       if q is not None and q.ScaleLength() else None)
        self.zero_points = (np.asarray(q.ZeroPointAsNumpy(), np.int64)
                            if q is not None and q.ZeroPointLength() else None)
        self.qdim = q.QuantizedDimension() if q is not None else 0
        self.data = None
        buf = model.Buffers(t.Buffer()) if t.Buffer() < model.BuffersLength() else None
        if buf is not None and self.dtype is not None:
            raw = None
            if buf.DataLength():
                raw = buf.DataAsNumpy().tobytes()
            elif buf.Offset() > 1:
                raw = data[buf.Offset():buf.Offset() + buf.Size()]
            if raw is not None:
                arr = np.frombuffer(raw, dtype=np.dtype(self.dtype))
                if arr.size != int(np.prod(self.shape, dtype=np.int64)):
                    raise ModelError(f"tensor {index} ({self.name!r}): its buffer holds "
                                     f"{arr.size} values for shape {list(self.shape)}")
                self.data = arr.reshape(self.shape)

    @property
    def quantized(self) -> bool:
        return self.scales is not None and self.zero_points is not None

    def qparams(self) -> tuple[float, int]:
        """(scale, int8 zero point) of a per-tensor quantized tensor."""
        if not self.quantized:
            raise UnsupportedError(f"tensor {self.index} ({self.name!r}) has no quantization "
                                   f"parameters")
        if self.scales.size != 1:
            raise UnsupportedError(f"tensor {self.index} ({self.name!r}) is quantized per "
                                   f"channel where TFLite wants one scale")
        self.check_scales()
        return float(self.scales[0]), int(self.zero_points[0])

    def check_scales(self) -> None:
        if not np.all(np.isfinite(self.scales) & (self.scales > 0)):
            raise ModelError(f"tensor {self.index} ({self.name!r}): quantization scale(s) "
                             f"{self.scales[:4].tolist()} not positive and finite")


def _options(op, cls):
    table = op.BuiltinOptions()
    if table is None:
        return None
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    return opts


def _same_padding(size: int, k: int, stride: int, dilation: int, same: bool
                  ) -> tuple[int, int, int]:
    """(out, pad_before, pad_after) of TFLite's SAME / VALID padding."""
    eff = (k - 1) * dilation + 1
    if same:
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2, total - total // 2
    out = (size - eff) // stride + 1
    if out < 1:
        raise ModelError(f"a window of {eff} does not fit an input of {size} (VALID padding)")
    return out, 0, 0


class _Importer:
    def __init__(self, data: bytes, source: str):
        import tflite
        self.tfl = tflite
        self.source = source
        self.buf = data
        self.model = tflite.Model.GetRootAsModel(data, 0)
        if self.model.SubgraphsLength() < 1:
            raise ModelError(f"{source}: the model has no subgraph")
        self.sg = self.model.Subgraphs(0)
        self.tensors = [_Tensor(self.model, self.sg, i, data)
                        for i in range(self.sg.TensorsLength())]
        self.names = _op_names()
        self.graph = Graph("tflite", [], {}, [], [], ONNX_OPSET)
        self.values: dict[str, Value] = self.graph.values
        self.nodes: list[Node] = self.graph.nodes
        self.nat: dict[int, str] = {}      # tensor -> value in TFLite's (NHWC) layout
        self.cf: dict[int, str] = {}       # tensor -> value in NCHW
        self.consts: dict[int, np.ndarray] = {}
        self.output_ids = {int(self.sg.Outputs(k)) for k in range(self.sg.OutputsLength())}

    # ---------------------------------------------------------------- helpers

    def op_name(self, op) -> str:
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if self.names.get(builtin) == "CUSTOM":
            return f"CUSTOM:{(code.CustomCode() or b'').decode('utf-8', 'replace')}"
        return self.names.get(builtin, f"builtin {builtin}")

    def value(self, base: str, dtype: str, shape, const=None) -> str:
        name = self.graph.fresh_name(base)
        self.values[name] = Value(name, dtype, tuple(int(d) for d in shape), const)
        return name

    def const(self, base: str, arr: np.ndarray) -> str:
        arr = np.ascontiguousarray(arr)
        return self.value(base, arr.dtype.name, arr.shape, arr)

    def node(self, op_type: str, name: str, inputs, outputs, domain: str = "", **attrs) -> None:
        self.nodes.append(Node(self.fresh_node(name), op_type, list(inputs), list(outputs),
                               attrs, domain, 1 if domain else ONNX_OPSET))

    def fresh_node(self, name: str) -> str:
        used = {n.name for n in self.nodes}
        base, k = name, 1
        while name in used:
            name = f"{base}_{k}"
            k += 1
        return name

    def t(self, i: int) -> _Tensor:
        if i < 0 or i >= len(self.tensors):
            raise ModelError(f"tensor index {i} is out of range")
        return self.tensors[i]

    def get(self, i: int, layout: str = "nhwc") -> str:
        """The value of tensor i in `layout` ("nhwc": TFLite's own; "nchw" for 4-D)."""
        t = self.t(i)
        if i not in self.nat and i not in self.cf:
            if t.data is not None and t.dtype == "int8":
                self.nat[i] = self.const(t.name, (t.data.astype(np.int16) + 128
                                                  ).astype(np.uint8))
            elif t.data is not None:
                self.nat[i] = self.const(t.name, t.data)
            else:
                raise ModelError(f"tensor {i} ({t.name!r}) is read before it is written")
        have, want = (self.nat, self.cf) if layout == "nchw" else (self.cf, self.nat)
        if i in want:
            return want[i]
        src = have[i]
        v = self.values[src]
        if len(v.shape) != 4:
            return src
        perm = TO_NCHW if layout == "nchw" else TO_NHWC
        out = self.value(f"{t.name}.{layout}", v.dtype, [v.shape[p] for p in perm])
        self.node("Transpose", f"{t.name}.to_{layout}", [src], [out], perm=perm)
        want[i] = out
        return out

    def layout_of(self, i: int) -> str:
        return "nchw" if i in self.cf and i not in self.nat else "nhwc"

    def set_out(self, i: int, layout: str, dtype: str, shape=None) -> str:
        t = self.t(i)
        shape = t.shape if shape is None else shape
        if layout == "nchw":
            shape = [shape[p] for p in TO_NCHW]
        # a model output's name is kept for the int8 (or float) value the caller sees
        base = f"{t.name}.codes" if i in self.output_ids and dtype == "uint8" else t.name
        name = self.value(base, dtype, shape)
        (self.cf if layout == "nchw" else self.nat)[i] = name
        return name

    def codes_q(self, i: int) -> tuple[float, int]:
        """(scale, zero point of the uint8 codes) of an int8 tensor."""
        t = self.t(i)
        if t.dtype != "int8":
            raise UnsupportedError(f"tensor {i} ({t.name!r}) is {t.dtype}; this operator "
                                   f"takes int8")
        s, z = t.qparams()
        return s, z + 128

    def act_clamp(self, act: int, out: int) -> tuple[int, int]:
        """The clamp (uint8 codes) of a fused activation on output tensor `out`."""
        name = _ACTS.get(act)
        if name is None:
            raise UnsupportedError(f"fused activation {act} is not supported (NONE, RELU, "
                                   f"RELU_N1_TO_1, RELU6 are)")
        s, z = self.t(out).qparams()
        lo, hi = ta.activation_range(name, s, z)
        return lo + 128, hi + 128

    def lut(self, name: str, x: str, table: list[int], xq, yq, act: str, out: str) -> None:
        tab = self.const(f"{name}.table", (np.asarray(table, np.int16) + 128).astype(np.uint8))
        self.node("QLut", name, [x, tab], [out], MLCC, x=xq, y=yq, act=act)

    # ---------------------------------------------------------------- the graph

    def run(self, digest: str) -> Graph:
        ops = [self.sg.Operators(k) for k in range(self.sg.OperatorsLength())]
        self.check_supported(ops)
        inputs = []
        for k in range(self.sg.InputsLength()):
            i = self.sg.Inputs(k)
            t = self.t(i)
            if t.dtype not in ("int8", "float32"):
                raise UnsupportedError(f"input {t.name!r} is {t.dtype}: mlcc reads int8 and "
                                       f"float32 TFLite inputs")
            if any(d < 1 for d in t.shape):
                raise UnsupportedError(f"input {t.name!r} has a dynamic shape "
                                       f"{list(t.shape)}")
            name = self.value(t.name, t.dtype, t.shape)
            inputs.append(name)
            if t.dtype == "int8":
                codes = self.value(f"{t.name}.codes", "uint8", t.shape)
                self.node("QRecenter", f"{t.name}.to_codes", [name], [codes], MLCC)
                self.nat[i] = codes
            else:
                self.nat[i] = name
        for k, op in enumerate(ops):
            kind = self.op_name(op)
            try:
                getattr(self, f"op_{kind.lower()}")(op, k)
            except UnsupportedError as exc:
                raise UnsupportedError(f"operator {k} ({kind}, output "
                                       f"{self.out_name(op)!r}): {exc.message}") from None
        outputs = []
        for k in range(self.sg.OutputsLength()):
            i = self.sg.Outputs(k)
            t = self.t(i)
            src = self.get(i, "nhwc")
            if self.values[src].dtype == "uint8" and t.dtype == "int8":
                out = self.value(t.name, "int8", self.values[src].shape)
                self.node("QRecenter", f"{t.name}.to_int8", [src], [out], MLCC)
                outputs.append(out)
            else:
                outputs.append(src)
        self.graph.inputs, self.graph.outputs = inputs, outputs
        self.graph.source_sha256 = digest
        return self.graph

    def out_name(self, op) -> str:
        return self.t(op.Outputs(0)).name if op.OutputsLength() else "?"

    def check_supported(self, ops) -> None:
        """Every unsupported operator at once, and float models named as such."""
        bad = []
        for k, op in enumerate(ops):
            kind = self.op_name(op)
            if not hasattr(self, f"op_{kind.lower()}"):
                bad.append(f"operator {k} ({kind}, output {self.out_name(op)!r})")
        float_ops = [k for k, op in enumerate(ops)
                     if self.op_name(op) in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
                     and self.t(op.Inputs(0)).dtype == "float32"]
        if float_ops:
            raise UnsupportedError(
                f"{self.source} is a float TFLite model (operator {float_ops[0]}, "
                f"{self.op_name(ops[float_ops[0]])}, computes in float32): mlcc reads int8 "
                f"TFLite models (full-integer quantization); compile the float model from "
                f"ONNX instead")
        if bad:
            raise UnsupportedError(f"{len(bad)} unsupported TFLite operator(s): " +
                                   "; ".join(bad))

    # ---------------------------------------------------------------- operators

    def _inputs(self, op) -> list[int]:
        return [int(op.Inputs(j)) for j in range(op.InputsLength())]

    def _conv(self, op, k: int, depthwise: bool) -> None:
        tfl = self.tfl
        ins = self._inputs(op)
        x_i, w_i = ins[0], ins[1]
        b_i = ins[2] if len(ins) > 2 else -1
        y_i = op.Outputs(0)
        opts = _options(op, tfl.DepthwiseConv2DOptions if depthwise else tfl.Conv2DOptions)
        xt, wt, yt = self.t(x_i), self.t(w_i), self.t(y_i)
        if wt.data is None or wt.dtype != "int8":
            raise UnsupportedError("the filter must be a constant int8 tensor")
        if len(xt.shape) != 4:
            raise UnsupportedError(f"input of rank {len(xt.shape)} (4 is supported)")
        sx, zx = self.codes_q(x_i)
        sy, zy = self.codes_q(y_i)
        n, ih, iw, c = xt.shape
        if depthwise:
            _, kh, kw, m = wt.data.shape
            w = wt.data.reshape(kh, kw, m).transpose(2, 0, 1)[:, None]    # [M, 1, kh, kw]
            group = c
            if m % c:
                raise ModelError(f"depthwise filter of {m} channels for {c} input channels")
        else:
            m, kh, kw, cin = wt.data.shape
            w = wt.data.transpose(0, 3, 1, 2)                            # [M, C, kh, kw]
            if cin != c:
                raise UnsupportedError(f"filter of depth {cin} for {c} input channels "
                                       f"(grouped CONV_2D is not supported)")
            group = 1
        ws = wt.scales
        if ws is None or np.any(wt.zero_points != 0):
            raise UnsupportedError("the filter must be symmetric (zero points 0)")
        wt.check_scales()
        if ws.size not in (1, m):
            raise UnsupportedError(f"{ws.size} filter scales for {m} channels")
        ws = np.broadcast_to(ws, (m,))
        sh, sw = opts.StrideH(), opts.StrideW()
        dh, dw = opts.DilationHFactor(), opts.DilationWFactor()
        same = opts.Padding() == 0
        oh, pt, pb = _same_padding(ih, kh, sh, dh, same)
        ow, pl, pr = _same_padding(iw, kw, sw, dw, same)
        mult, shift = zip(*[ta.quantize_multiplier(float(sx) * float(s) / float(sy))
                            for s in ws])
        bias = (self.t(b_i).data if b_i >= 0 else None)
        if b_i >= 0 and bias is None:
            raise UnsupportedError("the bias must be a constant")
        bias = np.zeros(m, np.int32) if bias is None else bias.astype(np.int32)
        lo, hi = self.act_clamp(opts.FusedActivationFunction(), y_i)
        x = self.get(x_i, "nchw")
        out = self.set_out(y_i, "nchw", "uint8", (n, oh, ow, m))
        name = yt.name
        self.node("QConv", name,
                  [x, self.const(f"{name}.w", np.ascontiguousarray(w)),
                   self.const(f"{name}.bias", bias), "", "",
                   self.const(f"{name}.mult", np.asarray(mult, np.int32)),
                   self.const(f"{name}.shift", np.asarray(shift, np.int32))], [out], MLCC,
                  group=group, kernel_shape=[kh, kw], pads=[pt, pl, pb, pr],
                  strides=[sh, sw], dilations=[dh, dw], x_zero_point=zx, x_scale=sx,
                  y_scale=sy, rq=("uint8", "fixed", zy, lo, hi))

    def op_conv_2d(self, op, k):
        self._conv(op, k, False)

    def op_depthwise_conv_2d(self, op, k):
        self._conv(op, k, True)

    def op_fully_connected(self, op, k):
        opts = _options(op, self.tfl.FullyConnectedOptions)
        ins = self._inputs(op)
        x_i, w_i = ins[0], ins[1]
        b_i = ins[2] if len(ins) > 2 else -1
        y_i = op.Outputs(0)
        wt, yt = self.t(w_i), self.t(y_i)
        if opts is not None and opts.WeightsFormat() != 0:
            raise UnsupportedError("shuffled weights are not supported")
        if wt.data is None or wt.dtype != "int8" or wt.data.ndim != 2:
            raise UnsupportedError("the weights must be a constant int8 matrix")
        if wt.scales is None or np.any(wt.zero_points != 0):
            raise UnsupportedError("the weights must be symmetric (zero points 0)")
        wt.check_scales()
        sx, zx = self.codes_q(x_i)
        sy, zy = self.codes_q(y_i)
        nout = wt.data.shape[0]
        ws = np.broadcast_to(wt.scales, (nout,))
        mult, shift = zip(*[ta.quantize_multiplier(float(sx) * float(s) / float(sy))
                            for s in ws])
        bias = self.t(b_i).data if b_i >= 0 else None
        if b_i >= 0 and bias is None:
            raise UnsupportedError("the bias must be a constant")
        bias = np.zeros(nout, np.int32) if bias is None else bias.astype(np.int32)
        act = opts.FusedActivationFunction() if opts is not None else 0
        lo, hi = self.act_clamp(act, y_i)
        x = self.get(x_i, "nhwc")
        kdim = wt.data.shape[1]
        if self.values[x].numel % kdim:
            raise ModelError(f"input of {self.values[x].numel} values for weights of depth "
                             f"{kdim}")
        out = self.set_out(y_i, "nhwc", "uint8")
        if int(np.prod(yt.shape)) != self.values[x].numel // kdim * nout:
            raise ModelError(f"output shape {list(yt.shape)} does not hold the product")
        name = yt.name
        self.node("QFC", name,
                  [x, self.const(f"{name}.w", wt.data), self.const(f"{name}.bias", bias),
                   "", "", self.const(f"{name}.mult", np.asarray(mult, np.int32)),
                   self.const(f"{name}.shift", np.asarray(shift, np.int32))], [out], MLCC,
                  x_zero_point=zx, x_scale=sx, y_scale=sy, rq=("uint8", "fixed", zy, lo, hi))

    def _pool(self, op, k, avg: bool) -> None:
        opts = _options(op, self.tfl.Pool2DOptions)
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        xt, yt = self.t(x_i), self.t(y_i)
        if len(xt.shape) != 4:
            raise UnsupportedError(f"input of rank {len(xt.shape)} (4 is supported)")
        sx, zx = self.codes_q(x_i)
        sy, zy = self.codes_q(y_i)
        if (sx, zx) != (sy, zy):
            raise UnsupportedError("input and output quantization differ")
        n, ih, iw, c = xt.shape
        kh, kw = opts.FilterHeight(), opts.FilterWidth()
        sh, sw = opts.StrideH(), opts.StrideW()
        same = opts.Padding() == 0
        oh, pt, pb = _same_padding(ih, kh, sh, 1, same)
        ow, pl, pr = _same_padding(iw, kw, sw, 1, same)
        lo, hi = self.act_clamp(opts.FusedActivationFunction(), y_i)
        x = self.get(x_i, "nchw")
        common = dict(kernel_shape=[kh, kw], pads=[pt, pl, pb, pr], strides=[sh, sw],
                      zero_point=zx, scale=sx)
        if avg:
            out = self.set_out(y_i, "nchw", "uint8", (n, oh, ow, c))
            self.node("QAvgPool", yt.name, [x], [out], MLCC, tflite_clamp=(lo, hi), **common)
            return
        if (lo, hi) == (0, 255):
            out = self.set_out(y_i, "nchw", "uint8", (n, oh, ow, c))
            self.node("QMaxPool", yt.name, [x], [out], MLCC, **common)
            return
        pooled = self.value(f"{yt.name}.pooled", "uint8", (n, c, oh, ow))
        self.node("QMaxPool", yt.name, [x], [pooled], MLCC, **common)
        out = self.set_out(y_i, "nchw", "uint8", (n, oh, ow, c))
        self.lut(f"{yt.name}.act", pooled, ta.clamp_table(lo - 128, hi - 128), (sy, zy),
                 (sy, zy), "clamp", out)

    def op_average_pool_2d(self, op, k):
        self._pool(op, k, True)

    def op_max_pool_2d(self, op, k):
        self._pool(op, k, False)

    def op_add(self, op, k):
        self._binary(op, "ADD")

    def op_sub(self, op, k):
        self._binary(op, "SUB")

    def op_mul(self, op, k):
        self._binary(op, "MUL")

    def _binary(self, op, kind: str) -> None:
        """ADD (with a constant operand), SUB and MUL: tensors of one shape run the kernel; a
        constant single value makes the operator a table of the other operand."""
        opts = _options(op, {"ADD": self.tfl.AddOptions, "SUB": self.tfl.SubOptions,
                             "MUL": self.tfl.MulOptions}[kind])
        a_i, b_i, y_i = op.Inputs(0), op.Inputs(1), op.Outputs(0)
        at, bt, yt = self.t(a_i), self.t(b_i), self.t(y_i)
        (sa, za), (sb, zb), (sy, zy) = self.codes_q(a_i), self.codes_q(b_i), self.codes_q(y_i)
        lo, hi = self.act_clamp(opts.FusedActivationFunction() if opts else 0, y_i)
        if kind == "MUL":
            mult, shift = ta.quantize_multiplier(float(sa) * float(sb) / float(sy))
        elif kind == "ADD":
            twice = 2.0 * max(sa, sb)
            fixed = (*ta.quantize_multiplier(sa / twice), *ta.quantize_multiplier(sb / twice),
                     *ta.quantize_multiplier(twice / ((1 << 20) * sy)))
        else:       # TFLM's SUB computes these ratios in float32
            f = np.float32
            twice = f(2) * max(f(sa), f(sb))
            fixed = (*ta.quantize_multiplier(float(f(sa) / twice)),
                     *ta.quantize_multiplier(float(f(sb) / twice)),
                     *ta.quantize_multiplier(float(twice / (f(1 << 20) * f(sy)))))
        consts = [i for i in (a_i, b_i) if self.t(i).data is not None and self.t(i).data.size == 1]
        if at.shape != bt.shape and consts:
            c_i = consts[-1]
            x_i = b_i if c_i == a_i else a_i
            c = int(np.asarray(self.t(c_i).data).reshape(-1)[0])
            if kind == "MUL":
                xz, cz = (za, zb) if x_i == a_i else (zb, za)
                table = ta.mul_table(xz - 128, c, cz - 128, mult, shift, zy - 128, lo - 128,
                                     hi - 128)
            else:
                q = (za - 128, zb - 128, zy - 128, *fixed, lo - 128, hi - 128)
                table = [ta.add_sub_value(x, c, q, kind == "SUB") if x_i == a_i else
                         ta.add_sub_value(c, x, q, kind == "SUB") for x in range(-128, 128)]
            layout = self.layout_of(x_i)
            x = self.get(x_i, layout)
            out = self.set_out(y_i, layout, "uint8")
            self.lut(yt.name, x, table, self.codes_q(x_i), (sy, zy), kind, out)
            return
        try:
            shape = tuple(np.broadcast_shapes(at.shape, bt.shape))
        except ValueError:
            raise ModelError(f"{list(at.shape)} and {list(bt.shape)} do not broadcast") \
                from None
        if shape != tuple(yt.shape):
            raise ModelError(f"output shape {list(yt.shape)} is not the broadcast {list(shape)}")
        layout = "nchw" if len(shape) == 4 and (self.layout_of(a_i) == "nchw" or
                                                self.layout_of(b_i) == "nchw") else "nhwc"
        a, b = self._expanded(a_i, layout, shape), self._expanded(b_i, layout, shape)
        out = self.set_out(y_i, layout, "uint8")
        if kind == "MUL":
            self.node("QMul", yt.name, [a, b], [out], MLCC, a=(sa, za), b=(sb, zb),
                      y=(sy, zy), mult=mult, shift=shift, clamp=(lo, hi))
        else:
            self.node("QAdd" if kind == "ADD" else "QSub", yt.name, [a, b], [out], MLCC,
                      a=(sa, za), b=(sb, zb), y=(sy, zy), mode="fixed", clamp=(lo, hi),
                      multipliers=fixed)

    def op_mean(self, op, k):
        opts = _options(op, self.tfl.ReducerOptions)
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        (sx, zx), (sy, zy) = self.codes_q(x_i), self.codes_q(y_i)
        xt = self.t(x_i)
        rank = len(xt.shape)
        axes = sorted({int(a) + rank if int(a) < 0 else int(a)
                       for a in np.asarray(self.const_of(op.Inputs(1))).reshape(-1)})
        if not axes or any(a < 0 or a >= rank for a in axes):
            raise ModelError(f"MEAN axes {axes} for rank {rank}")
        del opts            # keep_dims: the output tensor's shape says it
        if axes == list(range(axes[0], axes[-1] + 1)):
            layout, dims, span = "nhwc", list(xt.shape), (axes[0], axes[-1] + 1)
        elif rank == 4 and axes == [1, 2]:        # H and W: contiguous in NCHW
            layout, dims, span = "nchw", [xt.shape[p] for p in TO_NCHW], (2, 4)
        else:
            raise UnsupportedError(f"MEAN over axes {axes} (contiguous axes, or H and W, "
                                   f"are supported)")
        outer = int(np.prod(dims[:span[0]], dtype=np.int64))
        count = int(np.prod(dims[span[0]:span[1]], dtype=np.int64))
        inner = int(np.prod(dims[span[1]:], dtype=np.int64))
        mult, shift = ta.mean_multiplier(sx, sy, count)
        x = self.get(x_i, layout)
        # the reduced axes are gone or 1: the remaining ones are in TFLite's order either way
        # (NCHW only when H and W are reduced)
        out = self.set_out(y_i, "nhwc", "uint8")
        self.node("QMean", self.t(y_i).name, [x], [out], MLCC, outer=outer, reduce=count,
                  inner=inner, x=(sx, zx), y=(sy, zy), mult=mult, shift=shift,
                  shape=list(self.t(y_i).shape))

    def _expanded(self, i: int, layout: str, shape: tuple) -> str:
        """Tensor i broadcast to `shape` (TFLite's order) in `layout`: an Expand of the codes
        (folded at compile time when i is a constant)."""
        t = self.t(i)
        if tuple(t.shape) == shape:
            return self.get(i, layout)
        full = (1,) * (len(shape) - len(t.shape)) + tuple(t.shape)
        x = self.get(i, "nhwc")
        dtype = self.values[x].dtype
        if full != tuple(t.shape):
            y = self.value(f"{t.name}.rank{len(shape)}", dtype, full)
            self.node("Reshape", y, [x, self.const(f"{y}.shape", np.asarray(full, np.int64))],
                      [y])
            x = y
        target = list(shape)
        if layout == "nchw":
            y = self.value(f"{t.name}.nchw", dtype, [full[p] for p in TO_NCHW])
            self.node("Transpose", y, [x], [y], perm=TO_NCHW)
            x, target = y, [shape[p] for p in TO_NCHW]
        y = self.value(f"{t.name}.broadcast", dtype, target)
        self.node("Expand", y, [x, self.const(f"{y}.shape", np.asarray(target, np.int64))], [y])
        return y

    def op_hard_swish(self, op, k):
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        (sx, zx), (sy, zy) = self.codes_q(x_i), self.codes_q(y_i)
        try:
            table = ta.hard_swish_table(sx, zx - 128, sy, zy - 128)
        except ValueError:
            raise UnsupportedError("an output scale below the input's / 128 (TFLM refuses "
                                   "it too)") from None
        layout = self.layout_of(x_i)
        x = self.get(x_i, layout)
        out = self.set_out(y_i, layout, "uint8")
        self.lut(self.t(y_i).name, x, table, (sx, zx), (sy, zy), "HARD_SWISH", out)

    def op_reshape(self, op, k):
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        yt = self.t(y_i)
        if x_i in self.consts or (self.t(x_i).data is not None and self.t(x_i).dtype != "int8"):
            return self.fold(y_i, np.reshape(self.const_of(x_i), yt.shape))
        x = self.get(x_i, "nhwc")
        if self.values[x].numel != int(np.prod(yt.shape, dtype=np.int64)):
            raise ModelError(f"RESHAPE of {self.values[x].numel} values to "
                             f"{list(yt.shape)}")
        out = self.set_out(y_i, "nhwc", self.values[x].dtype)
        self.node("Reshape", yt.name, [x, self.const(f"{yt.name}.shape",
                                                     np.asarray(yt.shape, np.int64))], [out])

    def op_softmax(self, op, k):
        opts = _options(op, self.tfl.SoftmaxOptions)
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        sx, _ = self.codes_q(x_i)
        sy, zy = self.codes_q(y_i)
        if zy != 0 or np.float32(sy) != np.float32(1.0 / 256):
            raise UnsupportedError("int8 softmax needs output scale 1/256 and zero point -128")
        beta = float(opts.Beta()) if opts is not None else 1.0
        exps, sums = ta.softmax_tables(beta, sx)
        x = self.get(x_i, "nhwc")
        out = self.set_out(y_i, "nhwc", "uint8")
        name = self.t(y_i).name
        self.node("QSoftmax", name, [x, self.const(f"{name}.exp", np.asarray(exps, np.int32)),
                                     self.const(f"{name}.exp_sum", np.asarray(sums, np.int32))],
                  [out], MLCC, beta=beta, x_scale=sx)

    def op_quantize(self, op, k):
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        xt, yt = self.t(x_i), self.t(y_i)
        sy, zy = self.codes_q(y_i)
        layout = self.layout_of(x_i)
        x = self.get(x_i, layout)
        out = self.set_out(y_i, layout, "uint8")
        if xt.dtype == "float32":
            self.node("TFLQuantize", yt.name, [x], [out], MLCC, scale=sy, zero_point=zy)
            return
        sx, zx = self.codes_q(x_i)
        mult, shift = ta.quantize_multiplier(float(sx) / float(sy))
        self.lut(yt.name, x, ta.requantize_table(zx - 128, zy - 128, mult, shift), (sx, zx),
                 (sy, zy), "requantize", out)

    def op_dequantize(self, op, k):
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        yt = self.t(y_i)
        if yt.dtype != "float32":
            raise UnsupportedError(f"DEQUANTIZE to {yt.dtype} (float32 is supported)")
        sx, zx = self.codes_q(x_i)
        layout = self.layout_of(x_i)
        x = self.get(x_i, layout)
        out = self.set_out(y_i, layout, "float32")
        self.node("TFLDequantize", yt.name, [x], [out], MLCC, scale=sx, zero_point=zx)

    def op_relu(self, op, k):
        self._relu(op, "RELU")

    def op_relu6(self, op, k):
        self._relu(op, "RELU6")

    def _relu(self, op, kind: str) -> None:
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        sx, zx = self.codes_q(x_i)
        sy, zy = self.codes_q(y_i)
        if kind == "RELU":
            mult, shift = ta.quantize_multiplier(float(np.float32(sx) / np.float32(sy)))
            table = ta.requantize_table(zx - 128, zy - 128, mult, shift, max(-128, zy - 128))
        else:       # TFLM's Relu6: a clamp on the input's codes, no requantization
            six = min(127, max(-128, round(6.0 / float(np.float32(sx))) + zx - 128))
            table = ta.clamp_table(zx - 128, six)
        layout = self.layout_of(x_i)
        x = self.get(x_i, layout)
        out = self.set_out(y_i, layout, "uint8")
        self.lut(self.t(y_i).name, x, table, (sx, zx), (sy, zy), kind, out)

    def op_logistic(self, op, k):
        self._table_op(op, "LOGISTIC", ta.logistic_table)

    def op_tanh(self, op, k):
        self._table_op(op, "TANH", ta.tanh_table)

    def op_squeeze(self, op, k):
        self.op_reshape(op, k)

    def op_transpose(self, op, k):
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        perm = [int(p) for p in np.asarray(self.const_of(op.Inputs(1))).reshape(-1)]
        x = self.get(x_i, "nhwc")
        rank = len(self.values[x].shape)
        perm = [p + rank if p < 0 else p for p in perm]
        if sorted(perm) != list(range(rank)):
            raise ModelError(f"TRANSPOSE permutation {perm} for rank {rank}")
        out = self.set_out(y_i, "nhwc", self.values[x].dtype)
        self.node("Transpose", self.t(y_i).name, [x], [out], perm=perm)

    def _same_q(self, ins: list[int], y_i: int) -> tuple[float, int]:
        """TFLM moves int8 data unchanged only between tensors of one quantization."""
        yq = self.codes_q(y_i)
        for i in ins:
            if np.float32(self.codes_q(i)[0]) != np.float32(yq[0]) or \
                    self.codes_q(i)[1] != yq[1]:
                raise UnsupportedError(f"input {self.t(i).name!r} is quantized differently "
                                       f"from the output")
        return yq

    def _axis_in(self, axis: int, rank: int, layout: str) -> int:
        axis = axis + rank if axis < 0 else axis
        return TO_NCHW.index(axis) if layout == "nchw" else axis

    def op_concatenation(self, op, k):
        opts = _options(op, self.tfl.ConcatenationOptions)
        ins, y_i = self._inputs(op), op.Outputs(0)
        if opts is not None and opts.FusedActivationFunction() != 0:
            raise UnsupportedError("a fused activation on CONCATENATION is not supported")
        self._same_q(ins, y_i)
        rank = len(self.t(y_i).shape)
        layout = "nchw" if rank == 4 and any(self.layout_of(i) == "nchw" for i in ins) \
            else "nhwc"
        xs = [self.get(i, layout) for i in ins]
        out = self.set_out(y_i, layout, "uint8")
        self.node("Concat", self.t(y_i).name, xs, [out],
                  axis=self._axis_in(opts.Axis() if opts else 0, rank, layout))

    def op_pad(self, op, k):
        ins, y_i = self._inputs(op), op.Outputs(0)
        x_i = ins[0]
        _, zy = self._same_q([x_i], y_i)
        pads = np.asarray(self.const_of(ins[1]), np.int64).reshape(-1, 2)
        if np.any(pads < 0):
            raise UnsupportedError("negative paddings are not supported")
        value = zy
        if len(ins) > 2 and ins[2] >= 0:          # PADV2's constant value (int8)
            value = int(np.asarray(self.const_of(ins[2])).reshape(-1)[0]) + 128
        layout = self.layout_of(x_i) if len(pads) == 4 else "nhwc"
        x = self.get(x_i, layout)
        if layout == "nchw":
            pads = pads[TO_NCHW]
        out = self.set_out(y_i, layout, "uint8")
        name = self.t(y_i).name
        self.node("Pad", name, [x, self.const(f"{name}.pads", np.concatenate(
            [pads[:, 0], pads[:, 1]]).astype(np.int64)),
            self.const(f"{name}.value", np.asarray(value, np.uint8))], [out], mode="constant")

    def op_padv2(self, op, k):
        self.op_pad(op, k)

    def _table_op(self, op, kind: str, make) -> None:
        """An int8 element-wise operator whose TFLM kernel ignores the output's scale (it
        assumes the converter's fixed one): a table of TFLM's integer formula."""
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        sx, zx = self.codes_q(x_i)
        yq = self.codes_q(y_i)
        if kind == "LOGISTIC" and yq[1] != 0:
            raise UnsupportedError("int8 LOGISTIC needs output zero point -128 (as TFLM does)")
        layout = self.layout_of(x_i)
        x = self.get(x_i, layout)
        out = self.set_out(y_i, layout, "uint8")
        self.lut(self.t(y_i).name, x, make(sx, zx - 128), (sx, zx), yq, kind, out)

    # ---------------------------------------------------------------- folded shape arithmetic

    def const_of(self, i: int) -> np.ndarray:
        if i in self.consts:
            return self.consts[i]
        t = self.t(i)
        if t.data is None:
            raise UnsupportedError(f"tensor {i} ({t.name!r}) must be a constant")
        return t.data

    def fold(self, i: int, arr: np.ndarray) -> None:
        self.consts[i] = arr
        self.t(i).data = arr
        self.nat[i] = self.const(self.t(i).name, arr)

    def op_shape(self, op, k):
        x_i, y_i = op.Inputs(0), op.Outputs(0)
        self.fold(y_i, np.asarray(self.t(x_i).shape, np.dtype(self.t(y_i).dtype or "int32")))

    def op_pack(self, op, k):
        opts = _options(op, self.tfl.PackOptions)
        parts = [self.const_of(i) for i in self._inputs(op)]
        self.fold(op.Outputs(0), np.stack(parts, axis=opts.Axis() if opts else 0))

    def op_strided_slice(self, op, k):
        """Folded on a constant; at run time a Slice (and a Reshape for shrunk axes) on the
        codes, which TFLM copies as they are."""
        opts = _options(op, self.tfl.StridedSliceOptions)
        ins = self._inputs(op)
        begin, end, strides = (np.asarray(self.const_of(i)).reshape(-1) for i in ins[1:4])
        if opts is not None and (opts.EllipsisMask() or opts.NewAxisMask()):
            raise UnsupportedError("ellipsis and new-axis masks are not supported")
        bm, em, sm = ((opts.BeginMask(), opts.EndMask(), opts.ShrinkAxisMask()) if opts
                      else (0, 0, 0))
        index = []
        for d in range(len(begin)):
            if sm >> d & 1:
                index.append(int(begin[d]))
                continue
            index.append(slice(None if bm >> d & 1 else int(begin[d]),
                               None if em >> d & 1 else int(end[d]), int(strides[d])))
        x_i, y_i = ins[0], op.Outputs(0)
        if x_i in self.consts or self.t(x_i).data is not None:
            return self.fold(y_i, np.asarray(self.const_of(x_i)[tuple(index)]))
        x = self.get(x_i, "nhwc")
        dims = self.values[x].shape
        if len(index) > len(dims):
            raise ModelError(f"STRIDED_SLICE of {len(index)} axes on rank {len(dims)}")
        starts, ends, steps = [], [], []
        for d, ix in enumerate(index):
            r = range(dims[d])[ix if isinstance(ix, slice) else slice(ix, ix + 1 or None)]
            if isinstance(ix, int) and len(r) != 1:
                raise ModelError(f"STRIDED_SLICE index {ix} outside axis {d} of {dims[d]}")
            starts.append(r.start)
            ends.append(r.stop if r.stop >= 0 else -(dims[d] + 1))
            steps.append(r.step)
        name = self.t(y_i).name
        shape = [len(range(dims[d])[ix if isinstance(ix, slice) else slice(ix, ix + 1)])
                 for d, ix in enumerate(index)] + list(dims[len(index):])
        sliced = self.value(f"{name}.slice", self.values[x].dtype, shape)
        arr = (lambda v, b: self.const(f"{name}.{b}", np.asarray(v, np.int64)))
        self.node("Slice", name, [x, arr(starts, "starts"), arr(ends, "ends"),
                                  arr(list(range(len(index))), "axes"), arr(steps, "steps")],
                  [sliced])
        out = self.set_out(y_i, "nhwc", self.values[x].dtype)
        if int(np.prod(shape)) != self.values[out].numel:
            raise ModelError(f"STRIDED_SLICE gives {shape}, the output is "
                             f"{list(self.t(y_i).shape)}")
        self.node("Reshape", f"{name}.shrink", [sliced, arr(self.t(y_i).shape, "shape")],
                  [out])


def import_tflite(path) -> Graph:
    """The TFLite file as an mlcc graph (static shapes, integer program)."""
    data = read_tflite(path)
    try:
        importer = _Importer(data, Path(path).name)
        return importer.run(hashlib.sha256(data).hexdigest())
    except (ModelError, UnsupportedError):
        raise
    except ImportError as exc:
        raise ModelError(f"reading .tflite files needs the 'tflite' package ({exc})") from None
    except Exception as exc:    # the flatbuffer accessors fail on a damaged or truncated file
        raise ModelError(f"{Path(path).name}: not a readable TFLite flatbuffer (truncated or "
                         f"damaged: {type(exc).__name__}: {exc})") from None
