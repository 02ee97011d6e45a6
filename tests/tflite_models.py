"""Small int8 TensorFlow Lite models written here, without TensorFlow: the flatbuffer is built
with the object API of the TFLite schema that the tflite-micro package ships
(schema_py_generated), so that tests cover odd shapes (prime channel counts and sizes, stride 2,
SAME and VALID padding, dilation, per-tensor and per-channel filters, fused activations) and
compare with TensorFlow Lite Micro. Weights and quantization parameters are seeded random
values: what matters is the integer arithmetic, not what the models compute."""
from __future__ import annotations

import math

import flatbuffers
import numpy as np

INT8, INT32, FLOAT32 = 9, 2, 0
SAME, VALID = 0, 1
ACT = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}


def schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as s
    return s


class Builder:
    """Tensors and operators of one subgraph; bytes() writes the .tflite file."""

    def __init__(self, seed: int = 0):
        self.s = schema()
        self.rng = np.random.default_rng(seed)
        self.tensors, self.ops, self.codes = [], [], []
        self.buffers = [self.s.BufferT()]         # buffer 0: the empty one
        self.spread: dict[int, float] = {}        # tensor -> typical |code - zp| (estimate)

    def tensor(self, name, shape, dtype=INT8, scale=None, zp=None, data=None, qdim=0) -> int:
        t = self.s.TensorT()
        t.name, t.shape, t.type = name, list(shape), dtype
        if scale is not None:
            q = self.s.QuantizationParametersT()
            q.scale = [float(v) for v in np.atleast_1d(scale)]
            q.zeroPoint = [int(v) for v in np.atleast_1d(zp if zp is not None else 0)]
            q.quantizedDimension = qdim
            t.quantization = q
        if data is not None:
            b = self.s.BufferT()
            b.data = list(np.ascontiguousarray(data).tobytes())
            self.buffers.append(b)
            t.buffer = len(self.buffers) - 1
        self.tensors.append(t)
        return len(self.tensors) - 1

    def act(self, name, shape, scale, zp) -> int:
        return self.tensor(name, shape, INT8, scale, zp)

    def op(self, kind: str, inputs, outputs, options_type: str | None = None, **options):
        code = getattr(self.s.BuiltinOperator, kind)
        if code not in self.codes:
            self.codes.append(code)
        o = self.s.OperatorT()
        o.opcodeIndex = self.codes.index(code)
        o.inputs, o.outputs = list(inputs), list(outputs)
        if options_type:
            opts = getattr(self.s, options_type + "T")()
            for k, v in options.items():
                setattr(opts, k, v)
            o.builtinOptionsType = getattr(self.s.BuiltinOptions, options_type)
            o.builtinOptions = opts
        self.ops.append(o)

    def bytes(self, inputs, outputs) -> bytes:
        s = self.s
        sg = s.SubGraphT()
        sg.tensors, sg.operators = self.tensors, self.ops
        sg.inputs, sg.outputs = list(inputs), list(outputs)
        m = s.ModelT()
        m.version = 3
        m.subgraphs = [sg]
        m.buffers = self.buffers
        codes = []
        for c in self.codes:
            oc = s.OperatorCodeT()
            oc.builtinCode = c
            oc.deprecatedBuiltinCode = min(c, 127)
            oc.version = 1
            codes.append(oc)
        m.operatorCodes = codes
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    # ------------------------------------------------------------ layers with random weights

    def conv(self, x: int, xq, cout: int, k, stride=1, padding=SAME, dilation=1, act="NONE",
             per_channel=True, depthwise=False, multiplier=1, name="conv", out_scale=None
             ) -> tuple[int, tuple]:
        """A CONV_2D (or DEPTHWISE_CONV_2D) with random int8 weights and int32 bias; the output
        scale keeps the typical accumulator within about 40 steps. Returns (tensor, (s, zp))."""
        shape = self.tensors[x].shape
        n, h, w, c = shape
        kh, kw = (k, k) if isinstance(k, int) else k
        if depthwise:
            cout = c * multiplier
            wshape, depth = (1, kh, kw, cout), kh * kw
        else:
            wshape, depth = (cout, kh, kw, c), kh * kw * c
        wq = self.rng.integers(-127, 128, wshape).astype(np.int8)
        ws = (self.rng.uniform(0.004, 0.03, cout) if per_channel
              else np.full(1, self.rng.uniform(0.004, 0.03))).astype(np.float32)
        sx = xq[0]
        if act == "RELU6":      # real outputs of about +-3, so that 6 clamps only the tail
            ws = (ws * 3.0 / (sx * float(np.mean(ws)) * math.sqrt(depth) *
                              self.spread.get(x, 74) * 73)).astype(np.float32)
        bias = self.rng.integers(-3000, 3000, cout).astype(np.int32)
        bs = (np.float32(sx) * np.broadcast_to(ws, (cout,))).astype(np.float32)
        sy = float(np.float32(sx * float(np.mean(ws)) * math.sqrt(depth) * self.spread.get(x, 74)
                              * 73 / 40))
        zy = int(self.rng.integers(-20, 20)) if act == "NONE" else -128
        if out_scale is not None:       # the spread then follows from the accumulators
            sy = float(np.float32(out_scale))
        eff = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
        if padding == SAME:
            oh, ow = -(-h // stride), -(-w // stride)
        else:
            oh, ow = (h - eff[0]) // stride + 1, (w - eff[1]) // stride + 1
        wt = self.tensor(f"{name}/filter", wshape, INT8, ws, np.zeros(ws.size, np.int64), wq,
                         qdim=3 if depthwise else 0)
        bt = self.tensor(f"{name}/bias", (cout,), INT32, bs, np.zeros(cout, np.int64), bias)
        y = self.act(name, (n, oh, ow, cout), sy, zy)
        self.spread[y] = 40 if act == "NONE" else 28
        common = dict(padding=padding, strideW=stride, strideH=stride,
                      fusedActivationFunction=ACT[act], dilationWFactor=dilation,
                      dilationHFactor=dilation)
        if depthwise:
            self.op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], "DepthwiseConv2DOptions",
                    depthMultiplier=multiplier, **common)
        else:
            self.op("CONV_2D", [x, wt, bt], [y], "Conv2DOptions", **common)
        return y, (sy, zy)

    def fc(self, x: int, xq, nout: int, act="NONE", name="fc", per_channel=False):
        k = int(np.prod(self.tensors[x].shape[1:]))
        rows = int(np.prod(self.tensors[x].shape)) // k
        wq = self.rng.integers(-127, 128, (nout, k)).astype(np.int8)
        ws = (self.rng.uniform(0.004, 0.03, nout) if per_channel
              else np.full(1, self.rng.uniform(0.004, 0.03))).astype(np.float32)
        bias = self.rng.integers(-3000, 3000, nout).astype(np.int32)
        bs = (np.float32(xq[0]) * np.broadcast_to(ws, (nout,))).astype(np.float32)
        sy = float(np.float32(xq[0] * float(np.mean(ws)) * math.sqrt(k) * self.spread.get(x, 74)
                              * 73 / 40))
        zy = int(self.rng.integers(-20, 20)) if act == "NONE" else -128
        wt = self.tensor(f"{name}/weights", (nout, k), INT8, ws, np.zeros(ws.size, np.int64), wq)
        bt = self.tensor(f"{name}/bias", (nout,), INT32, bs, np.zeros(nout, np.int64), bias)
        y = self.act(name, (rows, nout), sy, zy)
        self.spread[y] = 40 if act == "NONE" else 28
        self.op("FULLY_CONNECTED", [x, wt, bt], [y], "FullyConnectedOptions",
                fusedActivationFunction=ACT[act])
        return y, (sy, zy)

    def pool(self, kind: str, x: int, xq, k: int, stride: int, padding=SAME, act="NONE",
             name="pool"):
        n, h, w, c = self.tensors[x].shape
        if padding == SAME:
            oh, ow = -(-h // stride), -(-w // stride)
        else:
            oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
        y = self.act(name, (n, oh, ow, c), *xq)
        self.spread[y] = self.spread.get(x, 74) * (0.6 if kind == "AVERAGE_POOL_2D" else 1.0)
        self.op(kind, [x], [y], "Pool2DOptions", padding=padding, strideW=stride,
                strideH=stride, filterWidth=k, filterHeight=k, fusedActivationFunction=ACT[act])
        return y, xq

    def softmax(self, x: int, beta: float = 1.0, name="softmax"):
        y = self.act(name, self.tensors[x].shape, 1.0 / 256, -128)
        self.op("SOFTMAX", [x], [y], "SoftmaxOptions", beta=beta)
        return y, (1.0 / 256, -128)

    def reshape(self, x: int, shape, name="reshape"):
        xt = self.tensors[x]
        q = xt.quantization
        shp = self.tensor(f"{name}/shape", (len(shape),), INT32, data=np.asarray(shape, np.int32))
        y = self.tensor(name, shape, xt.type, q.scale if q else None, q.zeroPoint if q else None)
        self.spread[y] = self.spread.get(x, 74)
        self.op("RESHAPE", [x, shp], [y], "ReshapeOptions", newShape=list(shape))
        return y


def cnn(seed: int = 0, per_channel: bool = True, float_io: bool = False,
        size=(11, 13), channels: int = 3) -> bytes:
    """CONV_2D 3x3/2 SAME (7 channels, RELU6) -> DEPTHWISE 3x3/1 VALID (RELU) -> a 1x1 CONV_2D
    branch ADDed to a dilated 3x3 one -> AVERAGE_POOL 2x2/2 SAME -> MAX_POOL 3x3/1 SAME (RELU)
    -> RESHAPE -> FULLY_CONNECTED (11, RELU) -> FULLY_CONNECTED (5) -> SOFTMAX; int8 or float
    inputs and outputs (QUANTIZE / DEQUANTIZE)."""
    b = Builder(seed)
    shape = (1, *size, channels)
    xq = (0.05, int(b.rng.integers(-10, 10)))
    if float_io:
        xf = b.tensor("input", shape, FLOAT32)
        x = b.act("input_int8", shape, *xq)
        b.op("QUANTIZE", [xf], [x])
        first = xf
    else:
        x = first = b.act("input", shape, *xq)
    conv1, q = b.conv(x, xq, 7, 3, stride=2, act="RELU6", per_channel=per_channel,
                      name="conv1")
    y, q = b.conv(conv1, q, 0, 3, padding=VALID, act="RELU", per_channel=per_channel,
                  depthwise=True, name="dw1")
    a, qa = b.conv(y, q, 13, 1, per_channel=per_channel, name="branch_a")
    c, qc = b.conv(y, q, 13, 3, dilation=2, per_channel=not per_channel, name="branch_b")
    s = float(np.float32(max(qa[0], qc[0]) * 1.3))
    z = b.act("add", b.tensors[a].shape, s, -6)
    b.spread[z] = 40
    b.op("ADD", [a, c], [z], "AddOptions", fusedActivationFunction=0)
    pooled, q = b.pool("AVERAGE_POOL_2D", z, (s, -6), 2, 2, name="avg")
    y, q = b.pool("MAX_POOL_2D", pooled, q, 3, 1, act="RELU", name="max")
    n = int(np.prod(b.tensors[y].shape[1:]))
    y = b.reshape(y, (1, n))
    y, q = b.fc(y, q, 11, act="RELU", name="fc1")
    logits, q = b.fc(y, q, 5, name="fc2", per_channel=per_channel)
    # beta such that the logits' typical spread (40 steps) is about 3: no saturated softmax
    y, q = b.softmax(logits, beta=float(np.float32(3.0 / (40 * q[0]))))
    if float_io:
        out = b.tensor("output", b.tensors[y].shape, FLOAT32)
        b.op("DEQUANTIZE", [y], [out])
        y = out
    # intermediate tensors as outputs too: every layer's arithmetic is compared
    return b.bytes([first], [y, conv1, pooled, logits])


def depthwise_multiplier(seed: int = 1) -> bytes:
    """DEPTHWISE_CONV_2D with depth multiplier 2 on 5 channels (10 out), stride 2 VALID,
    per-channel; then RELU and RELU6 operators and a QUANTIZE int8 -> int8 (a rescale)."""
    b = Builder(seed)
    xq = (0.02, -7)
    x = b.act("input", (1, 9, 10, 5), *xq)
    y, q = b.conv(x, xq, 0, (3, 2), stride=2, padding=VALID, depthwise=True, multiplier=2,
                  name="dw")
    r = b.act("relu", b.tensors[y].shape, q[0] * 0.7, -100)
    b.op("RELU", [y], [r])
    r6 = b.act("relu6", b.tensors[y].shape, q[0] * 0.7, -100)
    b.op("RELU6", [r], [r6])
    rq = b.act("requant", b.tensors[y].shape, q[0] * 1.9, 11)
    b.op("QUANTIZE", [r6], [rq])
    return b.bytes([x], [rq])


def depthwise_kernels(seed: int = 2) -> bytes:
    """DEPTHWISE_CONV_2D of several kernel shapes and strides on 7 channels, 13 x 11: 3x3/1
    SAME (RELU), 5x5/2 SAME, (3, 2)/1 VALID, (2, 5)/1 SAME, 3x3/3 VALID, (3, 1)/1 SAME, 3x3
    dilated 2 (the tap-pair paths of the Cortex-M kernel and the portable loop); every layer
    an output."""
    b = Builder(seed)
    xq = (0.03, 5)
    x = b.act("input", (1, 13, 11, 7), *xq)
    outs = []
    for i, (k, stride, pad, dil, act) in enumerate([
            (3, 1, SAME, 1, "RELU"), (5, 2, SAME, 1, "NONE"), ((3, 2), 1, VALID, 1, "NONE"),
            ((2, 5), 1, SAME, 1, "NONE"), (3, 3, VALID, 1, "NONE"), ((3, 1), 1, SAME, 1, "NONE"),
            (3, 1, SAME, 2, "NONE")]):
        y, _ = b.conv(x, xq, 0, k, stride=stride, padding=pad, dilation=dil, act=act,
                      depthwise=True, name=f"dw{i}")
        outs.append(y)
    return b.bytes([x], outs)


def unsupported_ops() -> bytes:
    """Two operators mlcc does not read (SQUARED_DIFFERENCE and L2_NORMALIZATION)."""
    b = Builder(2)
    x = b.act("input", (1, 4), 0.1, 0)
    y = b.act("sqdiff", (1, 4), 0.1, 0)
    b.op("SQUARED_DIFFERENCE", [x, x], [y])
    z = b.act("l2norm", (1, 4), 1 / 128, 0)
    b.op("L2_NORMALIZATION", [y], [z])
    return b.bytes([x], [z])


def float_model() -> bytes:
    """A float32 FULLY_CONNECTED."""
    b = Builder(3)
    x = b.tensor("input", (1, 4), FLOAT32)
    w = b.tensor("w", (3, 4), FLOAT32, data=np.ones((3, 4), np.float32))
    y = b.tensor("y", (1, 3), FLOAT32)
    b.op("FULLY_CONNECTED", [x, w], [y], "FullyConnectedOptions")
    return b.bytes([x], [y])


def tables_and_movement(seed: int = 4) -> bytes:
    """PAD (asymmetric) -> CONV_2D 3x3 VALID (output scale chosen so that its codes span about
    +-10) -> LOGISTIC and TANH; a second CONV_2D -> LOGISTIC; CONCATENATION of the two
    LOGISTICs on the channel axis; TRANSPOSE of the TANH; RESHAPE + SQUEEZE."""
    b = Builder(seed)
    xq = (0.04, 5)
    x = b.act("input", (1, 7, 5, 3), *xq)
    pads = b.tensor("pad/paddings", (4, 2), INT32,
                    data=np.array([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32))
    p = b.act("pad", (1, 10, 6, 3), *xq)
    b.op("PAD", [x, pads], [p])
    c1, q1 = b.conv(p, xq, 5, 3, padding=VALID, name="conv_a", out_scale=0.09)
    c2, q2 = b.conv(p, xq, 3, 3, padding=VALID, name="conv_b", out_scale=0.05)
    shape1, shape2 = b.tensors[c1].shape, b.tensors[c2].shape
    lg1 = b.act("logistic_a", shape1, 1 / 256, -128)
    b.op("LOGISTIC", [c1], [lg1])
    lg2 = b.act("logistic_b", shape2, 1 / 256, -128)
    b.op("LOGISTIC", [c2], [lg2])
    th = b.act("tanh", shape1, 1 / 128, 0)
    b.op("TANH", [c1], [th])
    cat = b.act("concat", (*shape1[:3], shape1[3] + shape2[3]), 1 / 256, -128)
    b.op("CONCATENATION", [lg1, lg2], [cat], "ConcatenationOptions", axis=-1)
    perm = b.tensor("transpose/perm", (4,), INT32, data=np.array([0, 3, 1, 2], np.int32))
    tr = b.act("transpose", (1, shape1[3], shape1[1], shape1[2]), 1 / 128, 0)
    b.op("TRANSPOSE", [th, perm], [tr])
    n = int(np.prod(shape2))
    r = b.reshape(lg2, (1, n, 1), name="flat")
    sq = b.act("squeeze", (1, n), 1 / 256, -128)
    b.op("SQUEEZE", [r], [sq], "SqueezeOptions", squeezeDims=[2])
    return b.bytes([x], [cat, tr, sq])


def element_wise(kind: str, in_q, out_q) -> bytes:
    """One int8 element-wise operator on a [1, 256] input (tests feed every code once)."""
    b = Builder(6)
    x = b.act("input", (1, 256), *in_q)
    y = b.act(kind.lower(), (1, 256), *out_q)
    b.op(kind, [x], [y])
    return b.bytes([x], [y])


def softmax_rows(in_q, beta: float, depth: int) -> bytes:
    """SOFTMAX over rows of `depth` int8 values."""
    b = Builder(8)
    x = b.act("input", (7, depth), *in_q)
    y, _ = b.softmax(x, beta=beta)
    return b.bytes([x], [y])


def binary_ops(seed: int = 10) -> bytes:
    """Two int8 inputs of one shape: MUL (RELU), SUB of the product and an input, ADD of a
    constant single value, MUL by a constant, SUB from a constant (the last three tables)."""
    b = Builder(seed)
    shape = (1, 5, 7, 3)
    x = b.act("a", shape, 0.05, -7)
    y = b.act("b", shape, 0.031, 20)
    m = b.act("mul", shape, 0.05 * 0.031 * 60, -128)
    b.op("MUL", [x, y], [m], "MulOptions", fusedActivationFunction=ACT["RELU"])
    s = b.act("sub", shape, 0.061, 9)
    b.op("SUB", [m, x], [s], "SubOptions", fusedActivationFunction=0)
    c1 = b.tensor("c1", (1,), INT8, 0.02, 3, data=np.array([77], np.int8))
    a = b.act("add_const", shape, 0.07, -2)
    b.op("ADD", [s, c1], [a], "AddOptions", fusedActivationFunction=0)
    c2 = b.tensor("c2", (1,), INT8, 0.013, -4, data=np.array([-90], np.int8))
    m2 = b.act("mul_const", shape, 0.04, 5)
    b.op("MUL", [c2, a], [m2], "MulOptions", fusedActivationFunction=0)
    s2 = b.act("sub_const", shape, 0.05, 0)
    b.op("SUB", [c1, m2], [s2], "SubOptions", fusedActivationFunction=ACT["RELU6"])
    return b.bytes([x, y], [m, s, a, m2, s2])


def mean_model(seed: int = 12) -> bytes:
    """MEAN over H and W of a convolution's output (keep_dims, held in NCHW), over the
    channels of the input (dims dropped) and over H (negative axis)."""
    b = Builder(seed)
    xq = (0.03, -9)
    x = b.act("input", (1, 6, 5, 7), *xq)
    c, q = b.conv(x, xq, 11, 3, name="conv")
    axes_hw = b.tensor("axes_hw", (2,), INT32, data=np.array([1, 2], np.int32))
    m1 = b.act("mean_hw", (1, 1, 1, 11), q[0] * 0.37, 4)
    b.op("MEAN", [c, axes_hw], [m1], "ReducerOptions", keepDims=True)
    axes_c = b.tensor("axes_c", (1,), INT32, data=np.array([3], np.int32))
    m2 = b.act("mean_c", (1, 6, 5), 0.011, -3)
    b.op("MEAN", [x, axes_c], [m2], "ReducerOptions", keepDims=False)
    axes_h = b.tensor("axes_h", (1,), INT32, data=np.array([-3], np.int32))
    m3 = b.act("mean_h", (1, 5, 7), 0.03, -9)
    b.op("MEAN", [x, axes_h], [m3], "ReducerOptions", keepDims=False)
    return b.bytes([x], [m1, m2, m3])


def strided_slice_model(seed: int = 13) -> bytes:
    """STRIDED_SLICE at run time: stride 2, a negative stride from the end, begin and end
    masks, a shrunk axis."""
    b = Builder(seed)
    xq = (0.03, 2)
    x = b.act("input", (1, 9, 8, 5), *xq)
    begin, end, strides = [0, 1, -1, 3], [1, 8, 0, 0], [1, 2, -2, 1]
    ref = np.zeros((1, 9, 8, 5))[0, 1:8:2, -1:0:-2, 3:]     # shrink axis 0, end mask axis 3
    y = b.act("slice", ref.shape, *xq)
    consts = [b.tensor(f"slice/{n}", (4,), INT32, data=np.array(v, np.int32))
              for n, v in (("begin", begin), ("end", end), ("strides", strides))]
    b.op("STRIDED_SLICE", [x, *consts], [y], "StridedSliceOptions", beginMask=0,
         endMask=0b1000, shrinkAxisMask=0b0001)
    return b.bytes([x], [y])


def broadcast_ops(seed: int = 14) -> bytes:
    """Squeeze-excitation style MUL of a convolution's output [1, 6, 5, 7] (held in NCHW) by a
    [1, 1, 1, 7] tensor; ADD of a per-channel constant [7]; SUB of a [6, 1, 1] input."""
    b = Builder(seed)
    xq = (0.04, 3)
    x = b.act("input", (1, 6, 5, 4), *xq)
    s_in = b.act("scale_input", (1, 1, 1, 7), 0.01, -128)
    c, q = b.conv(x, xq, 7, 3, name="conv")
    m = b.act("mul", (1, 6, 5, 7), q[0] * 0.8, 1)
    b.op("MUL", [c, s_in], [m], "MulOptions", fusedActivationFunction=0)
    k = b.tensor("bias_c", (7,), INT8, 0.05, -4,
                 data=b.rng.integers(-128, 128, 7).astype(np.int8))
    a = b.act("add", (1, 6, 5, 7), q[0], -2)
    b.op("ADD", [m, k], [a], "AddOptions", fusedActivationFunction=0)
    r = b.act("rows", (6, 1, 1), 0.02, 7)
    d = b.act("sub", (1, 6, 5, 7), q[0] * 1.1, 0)
    b.op("SUB", [a, r], [d], "SubOptions", fusedActivationFunction=0)
    return b.bytes([x, s_in, r], [m, a, d])
