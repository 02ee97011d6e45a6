"""Float graph + calibrated ranges -> integer graph (the quantization rewrite).

Needs: an optimized float graph (mlcc.passes.run_pipeline: BatchNorm folded, activations fused
into their producers as attrs["_act"]) and a calibrated range for every run-time float value.
Guarantees: the same graph outputs (float32, same names); every Conv, Gemm and MatMul with
constant weights runs as an integer kernel (mlcc.QConv / mlcc.QFC) on uint8 activations; Add,
Concat, pooling and data movement run on uint8 where their inputs already are; everything
else runs in float. QuantizeLinear and DequantizeLinear are inserted exactly where a value
crosses between the two (chosen automatically, lazily: only where a reader needs the other form).

Scheme (mlcc/quant/scheme.py): activations per tensor uint8 asymmetric from the calibrated
range; weights symmetric int8 per output channel (or per tensor); bias int32. A producer whose
fused activation is Relu or Clip (or none) writes uint8 with the activation as the clamp, when
some reader takes uint8. Sigmoid, SiLU, HardSwish, HardSigmoid and Tanh were split out of
their producers before calibration (split_table_activations): the producer writes uint8 at
the pre-activation scale and the activation, and any element-wise op with a scalar constant
after it, runs as one 256-entry table on the codes (mlcc.QLut); where the producer stays
float the activation goes back into its float epilogue. Other activations: the producer
writes float32 through its float epilogue and the reader quantizes that.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, UnsupportedError
from ..ir import Graph, Node, Value
from ..passes.fuse_activations import fuse_activations
from .bias_correction import correction, shifted_bias
from .scheme import (TABLE_ACTS, QParams, act_clamp, activation_qparams, activation_table,
                     fit_bias, fixed_multipliers, float_multipliers, function_table,
                     quantize_bias, quantize_weights, table_window)

CLAMP_ACTS = ("NONE", "RELU", "CLIP")
MOVEMENT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Identity",
            "DepthToSpace", "Resize"}      # Resize: nearest only (_pool_ok)
# (Split, data movement with several outputs, has its own branch)
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
# standalone activations run as a table on uint8 codes (mlcc.QLut): op type -> its mlcc_act
# (kind, alpha, beta); split_table_activations writes them back from the mlcc_act kinds
TABLE_OPS = {"Sigmoid": lambda n: ("SIGMOID", 0.0, 0.0),
             "Swish": lambda n: ("SILU", float(n.attr("alpha", 1.0)), 0.0),
             "HardSwish": lambda n: ("HARD_SWISH", 0.0, 0.0),
             "HardSigmoid": lambda n: ("HARD_SIGMOID", float(n.attr("alpha", 0.2)),
                                       float(n.attr("beta", 0.5))),
             "Tanh": lambda n: ("TANH", 0.0, 0.0)}
TABLE_NODES = {"SIGMOID": ("Sigmoid", 13), "SILU": ("Swish", 24),
               "HARD_SWISH": ("HardSwish", 14), "HARD_SIGMOID": ("HardSigmoid", 6),
               "TANH": ("Tanh", 13)}
assert set(TABLE_NODES) == set(TABLE_ACTS)
# an element-wise op of a run-time value and a scalar constant is a table too (PP-LCNet's
# learnable affine blocks: Mul then Add after every activation)
SCALAR_OPS = {"Mul", "Add", "Sub", "Div"}


def _table_fn(g: Graph, n: Node):
    """fn(float32 array) of a node that runs as a table on its first run-time input, or None."""
    if n.domain != "" or len(n.outputs) != 1:
        return None
    if n.op_type in TABLE_OPS and len(n.inputs) == 1:
        kind, a, b = TABLE_OPS[n.op_type](n)
        return lambda v: TABLE_ACTS[kind](v.astype(np.float64), a, b)
    if n.op_type not in SCALAR_OPS or len(n.inputs) != 2:
        return None
    consts = [g.const(i) for i in n.inputs]
    k = 0 if consts[1] is not None else 1          # the run-time operand
    c = consts[1 - k]
    if c is None or consts[k] is not None or c.size != 1 or c.dtype != np.float32 or \
            g.values[n.outputs[0]].shape != g.values[n.inputs[k]].shape:
        return None
    c = np.float32(c.reshape(()))
    # float32 arithmetic, the operand order of the node (as the float kernel computes it)
    ops = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide}
    f = ops[n.op_type]
    return (lambda v: f(v, c)) if k == 0 else (lambda v: f(c, v))


def _table_input(g: Graph, n: Node) -> str:
    return next(i for i in n.inputs if g.const(i) is None)


# the op types whose readers may take uint8 (an element-wise op: if _table_fn allows it)
INTEGER_READERS = {"Conv", "Gemm", "MatMul", "Add", "Concat", "Split"} | MOVEMENT | POOLS


@dataclass
class QuantOptions:
    per_channel: bool = True
    requant: str = "float"            # "float" (onnxruntime's) or "fixed" (integer only)
    activations: str = "uint8"
    # node names (of the optimized graph) to run in float even where an integer kernel exists
    # (--min-sqnr's choice, mlcc/quant/sensitivity.py)
    keep_float: frozenset = frozenset()
    # --bias-correction: data input value -> its per-channel calibration mean; the float bias
    # of each integer Conv / Gemm / MatMul reading one gets (W - Wq) E[x] added
    # (mlcc/quant/bias_correction.py)
    input_means: dict = field(default_factory=dict)


@dataclass
class LayerPlan:
    node: str
    op: str
    integer: bool
    note: str = ""


@dataclass
class QuantResult:
    graph: Graph
    qparams: dict[str, QParams]                 # float value -> params of its uint8 form
    qnames: dict[str, str]                      # float value -> name of its uint8 form
    layers: list[LayerPlan] = field(default_factory=list)
    ranges: dict = field(default_factory=dict)  # float value -> observers.Range
    # ONNX node name -> (int8 weights [out channels, ...], float32 scales) of QConv / QFC
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # measurements that must not enter the (byte-identical) output folder, e.g. --min-sqnr's
    # latencies: {"ms_all_integer": float, "ms": float}
    timing: dict = field(default_factory=dict)
    # the float graph that was quantized, when it differs from the compiled one's source
    # (--equalize rescales its channels): the report compares against this one
    float_graph: Graph | None = None
    # --bias-correction: ONNX node name -> the (W - Wq) E[x] added to its float bias
    bias_shift: dict[str, np.ndarray] = field(default_factory=dict)


def _act(node: Node) -> tuple:
    return node.attrs.get("_act", ("NONE", 0.0, 0.0))


def _weight_matrix(g: Graph, n: Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(w [N, K] float32, bias [N] or None) of a Gemm/MatMul the integer kernel can run."""
    if n.op_type == "Gemm":
        b = g.const(n.inputs[1])
        if b is None or n.attr("transA", 0) or g.const(n.inputs[0]) is not None:
            return None
        w = (b if n.attr("transB", 0) else b.T) * np.float32(n.attr("alpha", 1.0))
        bias = None
        if n.input(2):
            c = g.const(n.input(2))
            if c is None or c.size != w.shape[0] or (c.ndim == 2 and c.shape[0] != 1):
                return None
            bias = c.reshape(-1) * np.float32(n.attr("beta", 1.0))
        return w.astype(np.float32), bias
    if n.op_type == "MatMul":
        b = g.const(n.inputs[1])
        x = g.values[n.inputs[0]]
        if b is None or b.ndim != 2 or x.is_const or len(x.shape) < 2:
            return None
        bias = None
        if n.input(2):                    # the bias fuse_matmul_bias moved into the MatMul
            bias = g.const(n.input(2))
            if bias is None or bias.size != b.shape[1]:
                return None
            bias = bias.reshape(-1).astype(np.float32)
        return np.ascontiguousarray(b.T, np.float32), bias
    return None


def _is_integer_producer(g: Graph, n: Node) -> bool:
    if n.domain != "" or g.values[n.inputs[0]].dtype != "float32":
        return False
    if n.op_type == "Conv":
        w = g.const(n.inputs[1])
        return (w is not None and w.ndim in (3, 4) and not g.values[n.inputs[0]].is_const
                and (not n.input(2) or g.const(n.input(2)) is not None))
    return _weight_matrix(g, n) is not None


def _channel_scale_operands(g: Graph, n: Node) -> tuple[str, str] | None:
    """(x, s) of a Mul that scales each channel of a run-time tensor x by a run-time float s
    of shape [1 or N, C, 1, ...] (squeeze-excitation's x * hardsigmoid(...)): QChannelScale
    runs it on x's uint8 codes."""
    if n.domain != "" or n.op_type != "Mul" or len(n.inputs) != 2 or n.fused:
        return None
    for x, s in (n.inputs, n.inputs[::-1]):
        vx, vs = g.values.get(x), g.values.get(s)
        if vx is None or vs is None or vx.is_const or vs.is_const or x == s:
            continue
        if vx.dtype != "float32" or vs.dtype != "float32" or len(vx.shape) < 3 or \
                len(vs.shape) > len(vx.shape) or tuple(g.values[n.outputs[0]].shape) != \
                tuple(vx.shape):
            continue
        sshape = [1] * (len(vx.shape) - len(vs.shape)) + list(vs.shape)
        if sshape[1] == vx.shape[1] and sshape[0] in (1, vx.shape[0]) and \
                all(d == 1 for d in sshape[2:]):
            return x, s
    return None


def quantize_graph(g: Graph, ranges: dict, opts: QuantOptions | None = None,
                   qdq=None) -> QuantResult:
    """qdq (a qdq.QDQParams): fixed activation parameters and int8 weights of an imported QDQ
    model; a value with neither those nor a calibrated range keeps its readers in float.

    A producer writes uint8 only where an integer kernel reads it: a first rewrite decides by
    the readers' op types, then every value whose uint8 form is only dequantized (directly or
    through data movement: a projection reshaped into a float attention, a MatMul feeding an
    Add that stays float) is written in float instead, which saves its quantization error and
    the Q/DQ crossing; repeated until nothing changes."""
    float_out: frozenset = frozenset()
    while True:
        res = _quantize_once(g, ranges, opts, qdq, float_out)
        wasted = _only_dequantized(res) - float_out
        if not wasted:
            break
        float_out = float_out | wasted
    # an activation split_table_activations took out of a producer that stayed float goes
    # back into its epilogue
    res.graph = _fold_float_acts(fuse_activations(res.graph))
    kept = {n.name for n in res.graph.nodes}
    res.layers = [layer for layer in res.layers if layer.integer or layer.node in kept]
    return res


def _fold_float_acts(g: Graph) -> Graph:
    """A table activation left in float after a QConv / QFC that writes float32 goes back
    into that kernel's float epilogue (as before split_table_activations)."""
    g = g.copy()
    consumers = g.consumers()
    folded: set[int] = set()
    for n in g.nodes:
        if n.domain != "mlcc" or n.op_type not in ("QConv", "QFC") or \
                n.attr("rq")[0] != "float32" or _act(n)[0] != "NONE" or n.outputs[0] in g.outputs:
            continue
        readers = consumers.get(n.outputs[0], [])
        if len(readers) != 1 or readers[0].domain != "" or readers[0].op_type not in TABLE_OPS:
            continue
        a = readers[0]
        n.attrs["_act"] = TABLE_OPS[a.op_type](a)
        del g.values[n.outputs[0]]
        n.outputs = [a.outputs[0]]
        n.fused = n.fused + a.fused + [f"{a.name}:{a.op_type}"]
        folded.add(id(a))
    g.nodes = [n for n in g.nodes if id(n) not in folded]
    return g


def conv_transpose_as_conv(g: Graph) -> Graph:
    """A 2-D ConvTranspose whose stride equals its square kernel (no padding, dilation, group
    or output padding: PP-OCR det's upsampling heads, U-Net style decoders) becomes a 1x1 Conv
    to out_channels * k * k channels followed by DepthToSpace (CRD, blocksize k): the
    kernel's windows do not overlap, so each input pixel's k x k output block is one matrix
    product. The Conv then runs as an integer kernel and the DepthToSpace moves uint8 codes.
    Conv weight row (m * k + i) * k + j is W[:, m, i, j]; the bias is repeated k * k times;
    a fused activation stays on the Conv (element-wise, so it commutes with the move). The
    function is unchanged up to float rounding order (each output is the same sum of Cin
    products)."""
    g = g.copy()
    nodes: list[Node] = []
    for n in g.nodes:
        w = g.const(n.input(1)) if n.op_type == "ConvTranspose" and n.domain == "" else None
        b = g.const(n.input(2)) if n.input(2) else None
        x = g.values[n.inputs[0]] if w is not None else None
        k = w.shape[2] if w is not None and w.ndim == 4 else 0
        y = g.values[n.outputs[0]] if k else None
        if not k or w.dtype != np.float32 or len(x.shape) != 4 or w.shape[3] != k or \
                int(n.attr("group", 1)) != 1 or n.attr("auto_pad", "NOTSET") != "NOTSET" or \
                list(n.attr("strides", [1, 1])) != [k, k] or \
                any(int(v) != 1 for v in n.attr("dilations", [1, 1])) or \
                any(int(v) != 0 for v in n.attr("pads", [0] * 4)) or \
                any(int(v) != 0 for v in n.attr("output_padding", [0, 0])) or \
                (n.input(2) and b is None) or \
                y.shape != (x.shape[0], w.shape[1], x.shape[2] * k, x.shape[3] * k):
            nodes.append(n)
            continue
        cin, m = w.shape[:2]
        wc = np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(m * k * k, cin, 1, 1))
        ins = [n.inputs[0], g.add_const(f"{n.name}.W_conv", wc)]
        if b is not None:
            ins.append(g.add_const(f"{n.name}.B_conv", np.repeat(b.astype(np.float32), k * k)))
        mid = g.fresh_name(f"{n.outputs[0]}.blocks")
        g.values[mid] = Value(mid, "float32", (x.shape[0], m * k * k, x.shape[2], x.shape[3]))
        attrs = {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                 "dilations": [1, 1], "group": 1}
        if "_act" in n.attrs:
            attrs["_act"] = n.attrs["_act"]
        nodes += [Node(n.name, "Conv", ins, [mid], attrs, "", 11, list(n.fused)),
                  Node(f"{n.name}/DepthToSpace", "DepthToSpace", [mid], [n.outputs[0]],
                       {"blocksize": k, "mode": "CRD"}, "", 13)]
    g.nodes = nodes
    return g


def split_table_activations(g: Graph) -> Graph:
    """Sigmoid, SiLU, HardSwish, HardSigmoid and Tanh fused into a Conv / Gemm / MatMul the
    integer kernels can run become their own node again, reading the producer's pre-activation
    output (a new value, `<output>.preact`): calibration then observes that value's range,
    and the rewrite runs the producer as an integer kernel writing uint8 at the pre-activation
    scale and the activation as a table on the codes (mlcc.QLut). The function is unchanged;
    where the producer stays float, quantize_graph fuses the activation back."""
    g = g.copy()
    nodes: list[Node] = []
    for n in g.nodes:
        act = _act(n)
        if act[0] not in TABLE_NODES or not _is_integer_producer(g, n):
            nodes.append(n)
            continue
        out = n.outputs[0]
        pre = g.fresh_name(f"{out}.preact")
        g.values[pre] = Value(pre, "float32", g.values[out].shape)
        op, version = TABLE_NODES[act[0]]
        attrs = {"SILU": {"alpha": act[1]},
                 "HARD_SIGMOID": {"alpha": act[1], "beta": act[2]}}.get(act[0], {})
        prod = Node(n.name, n.op_type, list(n.inputs), [pre] + list(n.outputs[1:]),
                    {k: v for k, v in n.attrs.items() if k != "_act"}, n.domain, n.version,
                    list(n.fused))
        nodes += [prod, Node(f"{n.name}/{op}", op, [pre], [out], attrs, "", version)]
    g.nodes = nodes
    return g


def _only_dequantized(res: QuantResult) -> set[str]:
    """Float values written as uint8 by a QConv / QFC (or moved after one) that no integer
    kernel reads."""
    g = res.graph
    consumers = g.consumers()
    by_q = {q: v for v, q in res.qnames.items()}
    memo: dict[str, bool] = {}

    def wasted(q: str) -> bool:
        if q not in memo:
            memo[q] = False             # cycles cannot happen in a DAG; guards recursion
            readers = consumers.get(q, [])
            memo[q] = q not in g.outputs and bool(readers) and all(
                c.op_type == "DequantizeLinear" or
                (c.op_type in MOVEMENT and c.domain == "" and c.inputs[0] == q and
                 all(wasted(o) for o in c.outputs if o))
                for c in readers)
        return memo[q]
    # only the uint8 outputs of QConv / QFC (and the data movement after them) change: an
    # integer Add or Concat read only in float stays integer (its inputs are uint8 anyway)
    out: set[str] = set()
    for n in g.nodes:
        q = n.outputs[0] if n.outputs else ""
        if q not in by_q or g.values[q].dtype != "uint8" or not wasted(q):
            continue
        if (n.domain == "mlcc" and n.op_type in ("QConv", "QFC", "QLut")) or \
                (n.op_type in MOVEMENT and by_q.get(n.inputs[0]) in out):
            out.add(by_q[q])
    return out


def _quantize_once(g: Graph, ranges: dict, opts: QuantOptions | None, qdq,
                   float_out: frozenset) -> QuantResult:
    opts = opts or QuantOptions()
    fixed = dict(qdq.activations) if qdq is not None else {}
    fixed_weights = qdq.weights if qdq is not None else {}
    if opts.activations != "uint8":
        raise UnsupportedError(f"{opts.activations} activations are not implemented yet "
                               f"(uint8 is)")
    g = g.copy()
    consumers = g.consumers()
    qparams: dict[str, QParams] = dict(fixed)

    def has(v: str) -> bool:
        return v in qparams or v in ranges
    qnames: dict[str, str] = {}
    float_missing: set[str] = set()
    nodes: list[Node] = []
    layers: list[LayerPlan] = []
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    bias_shift: dict[str, np.ndarray] = {}
    # uint8 value -> (its QLut node, the float function it tabulates, input params, input)
    luts: dict[str, tuple] = {}
    # Adds fused into the QChannelScale before them (x + x * s)
    absorbed: set[str] = set()

    # values read by one table activation only: their codes need to span its window only
    windows = {n.inputs[0]: table_window(TABLE_OPS[n.op_type](n)) for n in g.nodes
               if n.domain == "" and n.op_type in TABLE_OPS and n.inputs[0] not in g.outputs
               and len(consumers.get(n.inputs[0], [])) == 1}

    # values read by one Concat only: written straight at the Concat's scale, which spares
    # the Concat a requantization (and the value a second rounding)
    concat_of = {}
    for n in g.nodes:
        if n.domain == "" and n.op_type == "Concat" and n.outputs[0] not in g.outputs:
            for i in n.inputs:
                if i and i not in g.outputs and i not in fixed and \
                        len(consumers.get(i, [])) == 1 and n.inputs.count(i) == 1:
                    concat_of[i] = n.outputs[0]

    def params_of(v: str) -> QParams:
        if v not in qparams and v in concat_of and v in ranges and concat_of[v] in ranges:
            # its own range is read all the same: needed_ranges records what is read, and
            # the report shows the value's calibrated range
            ranges[v]   # noqa: B018
            qparams[v] = params_of(concat_of[v])
        if v not in qparams:
            if v not in ranges:
                raise InputError(f"no calibrated range for {v!r}: the calibration did not "
                                 f"observe it")
            r = ranges[v]
            lo, hi = windows.get(v, (-np.inf, np.inf))
            qparams[v] = activation_qparams(min(max(r.lo, lo), hi), max(min(r.hi, hi), lo))
        return qparams[v]

    def scalar_consts(v: str, qp: QParams) -> tuple[str, str]:
        s = g.add_const(f"{v}.scale", np.array(qp.scale, np.float32))
        z = g.add_const(f"{v}.zero_point", np.array(qp.zero_point, np.uint8))
        return s, z

    def new_value(base: str, dtype: str, shape) -> str:
        name = g.fresh_name(base)
        g.values[name] = Value(name, dtype, tuple(shape))
        return name

    def ensure_q(v: str) -> str:
        if v in qnames:
            return qnames[v]
        qp = params_of(v)
        out = new_value(f"{v}_quantized", "uint8", g.values[v].shape)
        s, z = scalar_consts(v, qp)
        nodes.append(Node(f"{v}/QuantizeLinear",
                          "QuantizeLinear", [v, s, z], [out], {}, "", 13))
        qnames[v] = out
        return out

    def ensure_float(v: str) -> None:
        if v in float_missing:
            qp = qparams[v]
            s, z = scalar_consts(v, qp)
            nodes.append(Node(f"{v}/DequantizeLinear", "DequantizeLinear", [qnames[v], s, z],
                              [v], {}, "", 13))
            float_missing.discard(v)

    def wants_uint8(v: str) -> bool:
        return v not in g.outputs and any(
            c.domain == "" and ((c.op_type in INTEGER_READERS and _pool_ok(g, c)) or
                                _table_fn(g, c) is not None or
                                (opts.requant == "float" and
                                 (_channel_scale_operands(g, c) or ("", ""))[0] == v))
            for c in consumers.get(v, []))

    def channel_consts(n: Node, sx: float, w_scale: np.ndarray, bias: np.ndarray | None,
                       out_q: QParams | None) -> list[str]:
        """bias, scale, fbias, mult, shift input names."""
        m = len(w_scale)
        if out_q is None:       # float output: acc * (sx * sw) + float bias
            scale = (np.float32(sx) * w_scale).astype(np.float32)
            fb = np.zeros(m, np.float32) if bias is None else bias.astype(np.float32)
            return [g.add_const(f"{n.name}.bias_q", np.zeros(m, np.int32)),
                    g.add_const(f"{n.name}.scale", scale),
                    g.add_const(f"{n.name}.fbias", fb), "", ""]
        bq = quantize_bias(bias, sx, w_scale)
        scale = float_multipliers(sx, w_scale, out_q.scale)
        names = [g.add_const(f"{n.name}.bias_q", bq), g.add_const(f"{n.name}.scale", scale), ""]
        if opts.requant == "fixed":
            real = np.float64(sx) * w_scale.astype(np.float64) / np.float64(out_q.scale)
            m0, sh = fixed_multipliers(real)
            names += [g.add_const(f"{n.name}.mult", m0), g.add_const(f"{n.name}.shift", sh)]
        else:
            names += ["", ""]
        return names

    for n in g.nodes:
        if n.name in absorbed:
            continue
        op = n.op_type
        kept = n.name in opts.keep_float
        if _is_integer_producer(g, n) and has(n.inputs[0]) and not kept:
            x = n.inputs[0]
            xq = ensure_q(x)
            qx = params_of(x)
            out = n.outputs[0]
            act = _act(n)
            uint8_out = (act[0] in CLAMP_ACTS and wants_uint8(out) and has(out)
                         and out not in float_out)
            out_q = params_of(out) if uint8_out else None
            if op == "Conv":
                w = g.const(n.inputs[1]).astype(np.float32)
                bias = g.const(n.input(2)) if n.input(2) else None
            else:
                w, bias = _weight_matrix(g, n)
            wq, ws = quantize_weights(w, opts.per_channel)
            given = _given_weights(fixed_weights, n, w.shape)
            if given is not None:
                wq, ws = given
            else:
                if x in opts.input_means:
                    bias_shift[n.name] = correction(n, w, wq, ws, opts.input_means[x])
                    bias = shifted_bias(bias, bias_shift[n.name])
                if uint8_out:
                    wq, ws = fit_bias(w, wq, ws, bias, qx.scale)
            if uint8_out:
                lo, hi = act_clamp(act, out_q)
                rq = ("uint8", opts.requant, out_q.zero_point, lo, hi)
                yname = new_value(f"{out}_quantized", "uint8", g.values[out].shape)
                qnames[out] = yname
                float_missing.add(out)
            else:
                rq = ("float32", "float", 0, 0, 255)
                yname = out
            attrs = {k: v for k, v in n.attrs.items() if k != "_act"} if op == "Conv" else {}
            attrs.update(x_zero_point=qx.zero_point, x_scale=qx.scale,
                         y_scale=out_q.scale if out_q else 0.0, rq=rq)
            if not uint8_out:
                attrs["_act"] = act
            weights[n.name] = (wq, ws)
            wname = g.add_const(f"{n.name}.w_int8", wq)
            ins = [xq, wname] + channel_consts(n, qx.scale, ws, bias, out_q)
            q = Node(n.name, "QConv" if op == "Conv" else "QFC", ins, [yname], attrs, "mlcc", 1,
                     list(n.fused))
            nodes.append(q)
            layers.append(LayerPlan(n.name, "+".join([op] + [f.rsplit(':', 1)[-1]
                                                             for f in n.fused]), True,
                                    "uint8 out" if uint8_out else "float out"))
            continue
        ins_q = [i in qnames for i in n.inputs if i and not g.values[i].is_const]
        wasted_out = bool(n.outputs) and n.outputs[0] in float_out
        kept = kept or wasted_out
        if n.domain == "" and op in MOVEMENT | POOLS and ins_q and ins_q[0] and not kept and \
                g.values[n.inputs[0]].dtype == "float32" and _pool_ok(g, n):
            x = n.inputs[0]
            qp = qparams[x]
            out = n.outputs[0]
            yname = new_value(f"{out}_quantized", "uint8", g.values[out].shape)
            if op in POOLS:
                is_global = op.startswith("Global")
                attrs = {} if is_global else {k: v for k, v in n.attrs.items()
                                              if k != "count_include_pad"}
                attrs.update({"zero_point": qp.zero_point, "scale": qp.scale,
                              "global": int(is_global)})
                kind = "QMaxPool" if "Max" in op else "QAvgPool"
                nodes.append(Node(n.name, kind, [qnames[x]], [yname], attrs, "mlcc", 1,
                                  list(n.fused)))
            else:
                nodes.append(Node(n.name, op, [qnames[x]] + n.inputs[1:], [yname],
                                  dict(n.attrs), n.domain, n.version, list(n.fused)))
            qparams[out] = qp
            qnames[out] = yname
            float_missing.add(out)
            layers.append(LayerPlan(n.name, op, True, "data movement on uint8"))
            continue
        fn = _table_fn(g, n) if not kept else None
        if fn is not None and _table_input(g, n) in qnames and has(n.outputs[0]) and \
                g.values[_table_input(g, n)].dtype == "float32":
            x, out = _table_input(g, n), n.outputs[0]
            qx, qy = qparams[x], params_of(out)
            src, label, fused = qnames[x], op, list(n.fused)
            prev = luts.get(x)
            if prev is not None and x not in g.outputs and len(consumers.get(x, [])) == 1:
                # a table read only by this one: one table of the composed function, computed
                # in float (one rounding instead of two)
                pnode, pfn, pq, psrc = prev
                nodes.remove(pnode)
                qnames.pop(x)
                float_missing.discard(x)
                fn = (lambda f, g_: (lambda v: f(np.asarray(g_(v), np.float32))))(fn, pfn)
                qx, src = pq, psrc
                label = f"{pnode.attr('act')}+{op}"
                fused = pnode.fused + [f"{pnode.name}:{pnode.attr('act')}"] + fused
            table = g.add_const(f"{n.name}.table", function_table(fn, qx, qy))
            yname = new_value(f"{out}_quantized", "uint8", g.values[out].shape)
            lut = Node(n.name, "QLut", [src, table], [yname],
                       {"x": (qx.scale, qx.zero_point), "y": (qy.scale, qy.zero_point),
                        "act": label}, "mlcc", 1, fused)
            nodes.append(lut)
            luts[out] = (lut, fn, qx, src)
            qnames[out] = yname
            float_missing.add(out)
            layers.append(LayerPlan(n.name, op, True, "table on uint8"))
            continue
        if n.domain == "" and op == "Split" and ins_q and ins_q[0] and not kept and \
                g.values[n.inputs[0]].dtype == "float32":
            # pure data movement: every part keeps the input's scale and zero point
            x = n.inputs[0]
            outs = []
            for o in n.outputs:
                if o:
                    outs.append(new_value(f"{o}_quantized", "uint8", g.values[o].shape))
                    qparams[o], qnames[o] = qparams[x], outs[-1]
                    float_missing.add(o)
                else:
                    outs.append("")
            nodes.append(Node(n.name, op, [qnames[x]] + n.inputs[1:], outs, dict(n.attrs),
                              n.domain, n.version, list(n.fused)))
            layers.append(LayerPlan(n.name, op, True, "data movement on uint8"))
            continue
        se = _channel_scale_operands(g, n) if opts.requant == "float" and not kept else None
        if se is not None and se[0] in qnames and g.values[se[0]].dtype == "float32":
            # x * s, or x + x * s as x * (s + 1) (the Add fused: one pass, one rounding)
            x, sv = se
            out, offset, add = n.outputs[0], 0.0, None
            readers = consumers.get(out, [])
            if len(readers) == 1 and out not in g.outputs:
                c = readers[0]
                if c.domain == "" and c.op_type == "Add" and not c.fused and \
                        sorted(c.inputs) == sorted([x, out]) and \
                        c.name not in opts.keep_float and c.outputs[0] not in float_out and \
                        tuple(g.values[c.outputs[0]].shape) == tuple(g.values[x].shape) and \
                        has(c.outputs[0]):
                    out, offset, add = c.outputs[0], 1.0, c
            if out not in float_out and has(out):
                ensure_float(sv)
                qx, qy = qparams[x], params_of(out)
                yname = new_value(f"{out}_quantized", "uint8", g.values[out].shape)
                fused = list(n.fused) + ([f"{add.name}:Add"] if add is not None else [])
                nodes.append(Node(n.name, "QChannelScale", [qnames[x], sv], [yname],
                                  {"x": (qx.scale, qx.zero_point), "y": (qy.scale, qy.zero_point),
                                   "offset": offset}, "mlcc", 1, fused))
                qnames[out] = yname
                float_missing.add(out)
                layers.append(LayerPlan(n.name, op, True, "channel scale on uint8"))
                if add is not None:
                    absorbed.add(add.name)
                    layers.append(LayerPlan(add.name, "Add", True,
                                            f"fused into {n.name}: x * (s + 1) on uint8"))
                continue
        if n.domain == "" and op == "Add" and len(ins_q) == 2 and all(ins_q) and not kept and \
                g.values[n.inputs[0]].shape == g.values[n.inputs[1]].shape == \
                g.values[n.outputs[0]].shape and has(n.outputs[0]):
            a, b = n.inputs
            out = n.outputs[0]
            qa, qb, qy = qparams[a], qparams[b], params_of(out)
            yname = new_value(f"{out}_quantized", "uint8", g.values[out].shape)
            nodes.append(Node(n.name, "QAdd", [qnames[a], qnames[b]], [yname],
                              {"a": (qa.scale, qa.zero_point), "b": (qb.scale, qb.zero_point),
                               "y": (qy.scale, qy.zero_point), "mode": opts.requant,
                               "clamp": (0, 255)}, "mlcc", 1, list(n.fused)))
            qnames[out] = yname
            float_missing.add(out)
            layers.append(LayerPlan(n.name, op, True, "requantizing add"))
            continue
        if n.domain == "" and op == "Concat" and ins_q and all(ins_q) and not kept and \
                len(ins_q) == len(n.inputs) and has(n.outputs[0]):
            out = n.outputs[0]
            qy = params_of(out)
            parts = []
            for i in n.inputs:
                qi = qparams[i]
                if (qi.scale, qi.zero_point) == (qy.scale, qy.zero_point):
                    parts.append(qnames[i])
                    continue
                r = new_value(f"{i}_requantized", "uint8", g.values[i].shape)
                nodes.append(Node(f"{n.name}/requantize_{i}", "QRequant", [qnames[i]], [r],
                                  {"x": (qi.scale, qi.zero_point), "y": (qy.scale, qy.zero_point),
                                   "mode": opts.requant}, "mlcc", 1))
                parts.append(r)
            yname = new_value(f"{out}_quantized", "uint8", g.values[out].shape)
            nodes.append(Node(n.name, "Concat", parts, [yname], dict(n.attrs), "", n.version,
                              list(n.fused)))
            qnames[out] = yname
            float_missing.add(out)
            layers.append(LayerPlan(n.name, op, True, "concat on uint8"))
            continue
        for i in n.inputs:
            if i:
                ensure_float(i)
        nodes.append(n)
        layers.append(LayerPlan(n.name, "+".join([op] + [f.rsplit(':', 1)[-1] for f in n.fused]),
                                False, "float (its uint8 form would only be dequantized)"
                                if wasted_out else "float (kept in float)" if kept
                                else "float (no integer kernel)"))
    for o in g.outputs:
        ensure_float(o)
    g.nodes = nodes
    return QuantResult(g, qparams, qnames, layers, weights=weights, bias_shift=bias_shift)


def _given_weights(fixed_weights: dict, n: Node, shape) -> tuple[np.ndarray, np.ndarray] | None:
    """The model's own int8 weights and per-channel scales (QDQ import), in the layout the
    rewrite uses ([out channels, ...]); None where they do not map onto it exactly."""
    name = n.inputs[1]
    if name not in fixed_weights:
        return None
    q, scale, axis = fixed_weights[name]
    if q.dtype != np.int8:
        return None
    if n.op_type == "Conv":
        if q.shape != tuple(shape) or (scale.size != 1 and axis not in (0, -q.ndim)):
            return None
        return q, np.broadcast_to(scale, (q.shape[0],)).astype(np.float32).copy()
    if n.op_type == "MatMul" and q.ndim == 2 and (scale.size == 1 or axis in (1, -1)):
        return np.ascontiguousarray(q.T), np.broadcast_to(scale, (q.shape[1],)).astype(
            np.float32).copy()
    if n.op_type == "Gemm" and q.ndim == 2 and float(n.attr("alpha", 1.0)) == 1.0:
        if n.attr("transB", 0) and (scale.size == 1 or axis == 0):
            return q, np.broadcast_to(scale, (q.shape[0],)).astype(np.float32).copy()
        if not n.attr("transB", 0) and (scale.size == 1 or axis in (1, -1)):
            return np.ascontiguousarray(q.T), np.broadcast_to(scale, (q.shape[1],)).astype(
                np.float32).copy()
    return None


class _Recorder(dict):
    """Ranges that exist for every value and remember which were asked for."""

    def __init__(self):
        super().__init__()
        self.asked: list[str] = []

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        from .observers import Range
        if key not in self.asked:
            self.asked.append(key)
        return Range(0.0, 1.0, 0.0, 1.0, 0.0)


def needed_ranges(g: Graph, opts: QuantOptions | None = None) -> list[str]:
    """The values whose calibrated ranges quantize_graph will use (what is worth observing):
    the rewrite's decisions depend on the graph only, not on the ranges' values."""
    rec = _Recorder()
    quantize_graph(g, rec, opts)
    return rec.asked


def _pool_ok(g: Graph, n: Node) -> bool:
    """Whether a pooling or data-movement node can run on uint8 codes (Resize: nearest picks
    input elements, any other mode blends them)."""
    if n.op_type == "Resize":
        mode = n.attr("mode", "nearest")
        return (mode.decode() if isinstance(mode, bytes) else mode) == "nearest"
    if n.op_type not in POOLS:
        return True
    x = g.values[n.inputs[0]]
    if len(x.shape) not in (3, 4):
        return False
    if n.op_type == "MaxPool" and (len(n.outputs) > 1 and n.outputs[1] in g.values):
        return False
    if n.op_type == "AveragePool" and n.attr("count_include_pad", 0) and \
            any(int(p) for p in n.attr("pads", [0])):
        return False
    if n.op_type in ("AveragePool", "MaxPool") and n.attr("auto_pad", "NOTSET") in \
            ("SAME_UPPER", "SAME_LOWER"):
        return False
    return True
