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
some reader takes uint8; with another activation (SiLU, HardSwish, Sigmoid, ...) it writes
float32 through its float epilogue and the reader quantizes that.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, UnsupportedError
from ..ir import Graph, Node, Value
from .scheme import (QParams, act_clamp, activation_qparams, fixed_multipliers,
                     float_multipliers, quantize_bias, quantize_weights)

CLAMP_ACTS = ("NONE", "RELU", "CLIP")
MOVEMENT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Identity"}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
CONSUMERS = {"Conv", "Gemm", "MatMul", "Add", "Concat"} | MOVEMENT | POOLS


@dataclass
class QuantOptions:
    per_channel: bool = True
    requant: str = "float"            # "float" (onnxruntime's) or "fixed" (integer only)
    activations: str = "uint8"
    # node names (of the optimized graph) to run in float even where an integer kernel exists
    # (--min-sqnr's choice, mlcc/quant/sensitivity.py)
    keep_float: frozenset = frozenset()


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
            return res
        float_out = float_out | wasted


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
        if (n.domain == "mlcc" and n.op_type in ("QConv", "QFC")) or \
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

    def params_of(v: str) -> QParams:
        if v not in qparams:
            if v not in ranges:
                raise InputError(f"no calibrated range for {v!r}: the calibration did not "
                                 f"observe it")
            r = ranges[v]
            qparams[v] = activation_qparams(r.lo, r.hi)
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
        return v not in g.outputs and any(c.op_type in CONSUMERS and c.domain == ""
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
    return QuantResult(g, qparams, qnames, layers, weights=weights)


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
