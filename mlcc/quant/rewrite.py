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

from ..ir import Graph, Node, Value
from ..ops.activations import BY_KIND, fused_act, onnx_node_of
from ..passes.fuse_activations import fuse_activations
from .predicates import is_integer_producer
from .rules import LayerPlan, Rewrite, is_movement, quantize_node, table_act

__all__ = ["LayerPlan", "QuantOptions", "QuantResult", "conv_transpose_as_conv",
           "needed_ranges", "quantize_graph", "split_table_activations"]


@dataclass
class QuantOptions:
    per_channel: bool = True
    requant: str = "float"            # "float" (onnxruntime's) or "fixed" (integer only)
    activations: str = "uint8"
    # node names (of the optimized graph) to run in float even where an integer kernel exists
    # (--min-sqnr's choice, mlcc/quant/sensitivity.py)
    keep_float: frozenset = frozenset()
    # node names to run as W8A16 (int16 activations, int8 weights: mlcc.QConv16 / QFC16);
    # --w8a16, or the mix's choice before float
    w8a16: frozenset = frozenset()
    # --bias-correction: data input value -> its per-channel calibration mean; the float bias
    # of each integer Conv / Gemm / MatMul reading one gets (W - Wq) E[x] added
    # (mlcc/quant/bias_correction.py)
    input_means: dict = field(default_factory=dict)
    # --adaround (mlcc/quant/adaround.py): node name -> its int8 weights with learned
    # rounding (the rewrite's layout and scales)
    rounded: dict = field(default_factory=dict)
    # --bias-correction auto: node name -> the output channels whose shift is applied (None:
    # every channel of every layer reading a value of input_means)
    bias_channels: dict | None = None


@dataclass
class QuantResult:
    graph: Graph
    qparams: dict[str, QParams]                 # float value -> params of its uint8 form
    qnames: dict[str, str]                      # float value -> name of its uint8 form
    # float value -> (name, scale) of its int16 form (the inputs of W8A16 layers)
    q16: dict[str, tuple[str, float]] = field(default_factory=dict)
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
    res.graph = fuse_output_quantize(_fold_float_acts(fuse_activations(res.graph)))
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
        if not _writes_float(n) or fused_act(n)[0] != "NONE" or n.outputs[0] in g.outputs:
            continue
        readers = consumers.get(n.outputs[0], [])
        act = table_act(g, readers[0]) if len(readers) == 1 else None
        if act is None:
            continue
        a = readers[0]
        n.attrs["_act"] = act
        del g.values[n.outputs[0]]
        n.outputs = [a.outputs[0]]
        n.fused = n.fused + a.fused + [f"{a.name}:{a.op_type}"]
        folded.add(id(a))
    g.nodes = [n for n in g.nodes if id(n) not in folded]
    return g


def _writes_float(n: Node) -> bool:
    """An integer Conv / Gemm / MatMul (int8 or W8A16) with a float32 epilogue."""
    if n.domain != "mlcc":
        return False
    if n.op_type in ("QConv", "QFC"):
        return n.attr("rq")[0] == "float32"
    return n.op_type in ("QConv16", "QFC16") and n.attr("out")[0] == "float32"


def fuse_output_quantize(g: Graph) -> Graph:
    """A W8A16 layer whose float output is read only by QuantizeLinear nodes of one int16
    (zero point 0) or uint8 form writes that form itself: its epilogue quantizes as
    QuantizeLinear does (runtime_c/kernels/qconv16.h), one pass fewer and no float tensor."""
    g = g.copy()
    consumers = g.consumers()
    gone: set[int] = set()
    for n in g.nodes:
        if n.op_type not in ("QConv16", "QFC16") or not _writes_float(n) or \
                n.outputs[0] in g.outputs:
            continue
        readers = consumers.get(n.outputs[0], [])
        forms = set()
        for r in readers:
            if r.op_type != "QuantizeLinear" or r.domain != "" or r.inputs[0] != n.outputs[0] \
                    or len(r.inputs) < 3 or g.const(r.inputs[1]) is None or \
                    g.const(r.inputs[2]) is None or r.attrs:
                break
            z = g.const(r.inputs[2])
            if z.dtype not in (np.int16, np.uint8) or g.const(r.inputs[1]).size != 1 or \
                    z.size != 1 or (z.dtype == np.int16 and int(z.reshape(())) != 0):
                break
            forms.add((z.dtype.name, float(np.float32(g.const(r.inputs[1]).reshape(()))),
                       int(z.reshape(()))))
        else:
            if len(forms) != 1:
                continue
            kind, scale, zp = forms.pop()
            q = readers[0].outputs[0]
            for r in readers[1:]:           # the same form twice: one value
                g.replace_uses(r.outputs[0], q)
            del g.values[n.outputs[0]]
            n.outputs = [q]
            n.attrs["out"] = (kind, scale, zp)
            gone.update(id(r) for r in readers)
    g.nodes = [n for n in g.nodes if id(n) not in gone]
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
        act = fused_act(n)
        if BY_KIND[act[0]].int8 != "table" or not is_integer_producer(g, n):
            nodes.append(n)
            continue
        out = n.outputs[0]
        pre = g.fresh_name(f"{out}.preact")
        g.values[pre] = Value(pre, "float32", g.values[out].shape)
        op, version, attrs = onnx_node_of(act)
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
                (is_movement(c) and c.inputs[0] == q and
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
                (is_movement(n) and by_q.get(n.inputs[0]) in out):
            out.add(by_q[q])
    return out


def _quantize_once(g: Graph, ranges: dict, opts: QuantOptions | None, qdq,
                   float_out: frozenset) -> QuantResult:
    """One pass of the rewrite: each node through the rules its operator names
    (mlcc/quant/rules.py), in graph order."""
    rw = Rewrite(g, ranges, opts or QuantOptions(), qdq, float_out)
    for n in rw.g.nodes:
        if n.name not in rw.absorbed:
            quantize_node(rw, n)
    for o in rw.g.outputs:
        rw.ensure_float(o)
    rw.g.nodes = rw.nodes
    return QuantResult(rw.g, rw.qparams, rw.qnames, rw.q16, rw.layers, weights=rw.weights,
                       bias_shift=rw.bias_shift)


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
