"""The quantization rewrite's rules: one small function per family of operators, each turning
one float node into its uint8 form when it can (and saying whether it did).

An operator names the rules that may run it in its OpDef's `quant_rules` (mlcc/ops/...), tried
in that order; RULES maps those names to the functions below. A node no rule takes runs in
float (`float_rule`), with DequantizeLinear nodes inserted before it where its inputs exist
only as uint8. The rules share one `Rewrite`: the graph being written, the parameters and
uint8 names of the values quantized so far, and the helpers that insert Q/DQ nodes.

  integer_producer  Conv, Gemm, MatMul with constant weights -> mlcc.QConv / mlcc.QFC, or
                    at W8A16 (QuantOptions.w8a16) mlcc.QConv16 / mlcc.QFC16 on int16 inputs
  movement          data movement (Reshape, Transpose, Slice, nearest Resize, ...) on codes
  pool              MaxPool, AveragePool and their global forms -> mlcc.QMaxPool / QAvgPool
  table             a table activation, or x op scalar constant -> a 256-entry mlcc.QLut
  split             Split on codes, every part at the input's parameters
  channel_scale     x * s per channel (squeeze-excitation) -> mlcc.QChannelScale
  add               Add of two uint8 tensors -> mlcc.QAdd
  concat            Concat on codes, inputs requantized to the output's parameters
  recurrent         LSTM, GRU, RNN: input projections on the integer GEMM (recurrent.py)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError, UnsupportedError
from ..ir import Graph, Node, Value
from ..ir.symbolic import is_one, same_shape
from ..ops import lookup
from ..ops.activations import BY_KIND, activation_of, table_window
from .bias_correction import correction, shifted_bias
from .predicates import CLAMP_ACTS, fused_act, is_integer_producer, weight_matrix
from .scheme import (QParams, act_clamp, activation_qparams, fit_bias, fixed_multipliers,
                     float_multipliers, function_table, int16_scale, quantize_bias,
                     quantize_weights)

# the rules whose operators read uint8 inputs as they are (the table rule: see table_fn)
_CODE_READERS = {"integer_producer", "movement", "pool", "split", "add", "concat", "recurrent"}


@dataclass
class LayerPlan:
    node: str
    op: str
    integer: bool
    note: str = ""
    # "int8" | "w8a16" (int16 activations, int8 weights) | "float"; "" from `integer`
    precision: str = ""

    def __post_init__(self):
        if not self.precision:
            self.precision = "int8" if self.integer else "float"


def rules_of(n: Node) -> tuple[str, ...]:
    d = lookup(n)
    return d.quant_rules if d is not None else ()


def is_movement(n: Node) -> bool:
    return "movement" in rules_of(n)


def table_act(g: Graph, n: Node) -> tuple | None:
    """(kind, alpha, beta) if n is an activation the quantizer runs as a table."""
    act = activation_of(n, g) if "table" in rules_of(n) else None
    return act if act is not None and BY_KIND[act[0]].int8 == "table" else None


def table_fn(g: Graph, n: Node):
    """fn(float32 array) of a node that runs as a table on its first run-time input, or None:
    a table activation, or an element-wise op of a run-time value and a scalar constant
    (PP-LCNet's learnable affine blocks: Mul then Add after every activation)."""
    if len(n.outputs) != 1 or "table" not in rules_of(n):
        return None
    act = table_act(g, n)
    if act is not None and len(n.inputs) == 1:
        ref, (_, a, b) = BY_KIND[act[0]].ref, act
        return lambda v: ref(v.astype(np.float64), a, b)
    f = lookup(n).ufunc if act is None else None
    if f is None or len(n.inputs) != 2:
        return None
    consts = [g.const(i) for i in n.inputs]
    k = 0 if consts[1] is not None else 1          # the run-time operand
    c = consts[1 - k]
    if c is None or consts[k] is not None or c.size != 1 or c.dtype != np.float32 or \
            not same_shape(g.values[n.outputs[0]].shape, g.values[n.inputs[k]].shape):
        return None
    c = np.float32(c.reshape(()))
    # float32 arithmetic, the operand order of the node (as the float kernel computes it)
    return (lambda v: f(v, c)) if k == 0 else (lambda v: f(c, v))


def table_input(g: Graph, n: Node) -> str:
    return next(i for i in n.inputs if g.const(i) is None)


def pool_ok(g: Graph, n: Node) -> bool:
    """Whether a pooling or data-movement node can run on uint8 codes (Resize: nearest picks
    input elements, any other mode blends them)."""
    if n.op_type == "Resize":
        mode = n.attr("mode", "nearest")
        return (mode.decode() if isinstance(mode, bytes) else mode) == "nearest"
    if "pool" not in rules_of(n):
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


def channel_scale_operands(g: Graph, n: Node) -> tuple[str, str] | None:
    """(x, s) of a Mul that scales each channel of a run-time tensor x by a run-time float s
    of shape [1 or N, C, 1, ...] (squeeze-excitation's x * hardsigmoid(...)): QChannelScale
    runs it on x's uint8 codes."""
    if "channel_scale" not in rules_of(n) or len(n.inputs) != 2 or n.fused:
        return None
    for x, s in (n.inputs, n.inputs[::-1]):
        vx, vs = g.values.get(x), g.values.get(s)
        if vx is None or vs is None or vx.is_const or vs.is_const or x == s:
            continue
        if vx.dtype != "float32" or vs.dtype != "float32" or len(vx.shape) < 3 or \
                len(vs.shape) > len(vx.shape) or \
                not same_shape(g.values[n.outputs[0]].shape, vx.shape):
            continue
        sshape = [1] * (len(vx.shape) - len(vs.shape)) + list(vs.shape)
        if same_shape(sshape[1:2], vx.shape[1:2]) and (
                is_one(sshape[0]) or same_shape(sshape[:1], vx.shape[:1])) and \
                all(is_one(d) for d in sshape[2:]):
            return x, s
    return None


def given_weights(fixed_weights: dict, n: Node, shape) -> tuple[np.ndarray, np.ndarray] | None:
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


def _layer_op(n: Node) -> str:
    return "+".join([n.op_type] + [f.rsplit(':', 1)[-1] for f in n.fused])


class Rewrite:
    """One pass of the rewrite over a copy of a float graph: what the rules read and write.

    float_out: values to write in float even where a reader could take uint8 (their uint8
    form was only dequantized in the previous pass)."""

    def __init__(self, g: Graph, ranges: dict, opts, qdq, float_out: frozenset):
        if opts.activations != "uint8":
            raise UnsupportedError(f"{opts.activations} activations are not implemented yet "
                                   f"(uint8 is)")
        self.g = g = g.copy()
        self.ranges, self.opts, self.float_out = ranges, opts, float_out
        fixed = dict(qdq.activations) if qdq is not None else {}
        self.fixed_weights = qdq.weights if qdq is not None else {}
        self.consumers = g.consumers()
        self.qparams: dict[str, QParams] = dict(fixed)
        self.qnames: dict[str, str] = {}
        # float value -> (its int16 form, scale): the inputs of W8A16 layers
        self.q16: dict[str, tuple[str, float]] = {}
        self.float_missing: set[str] = set()
        self.nodes: list[Node] = []
        self.layers: list[LayerPlan] = []
        self.weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.bias_shift: dict[str, np.ndarray] = {}
        # uint8 value -> (its QLut node, the float function it tabulates, input params, input)
        self.luts: dict[str, tuple] = {}
        # Adds fused into the QChannelScale before them (x + x * s)
        self.absorbed: set[str] = set()
        # values read by one table activation only: their codes need to span its window only
        self.windows = {}
        for n in g.nodes:
            act = table_act(g, n)
            if act is not None and n.inputs[0] not in g.outputs and \
                    len(self.consumers.get(n.inputs[0], [])) == 1:
                self.windows[n.inputs[0]] = table_window(act)
        # values read by one Concat only: written straight at the Concat's scale, which spares
        # the Concat a requantization (and the value a second rounding)
        self.concat_of = {}
        for n in g.nodes:
            if "concat" in rules_of(n) and n.outputs[0] not in g.outputs:
                for i in n.inputs:
                    if i and i not in g.outputs and i not in fixed and \
                            len(self.consumers.get(i, [])) == 1 and n.inputs.count(i) == 1:
                        self.concat_of[i] = n.outputs[0]

    def has(self, v: str) -> bool:
        return v in self.qparams or v in self.ranges

    def kept(self, n: Node) -> bool:
        """In float by request (--min-sqnr) or because its uint8 output would be wasted."""
        return n.name in self.opts.keep_float or self.wasted(n)

    def wasted(self, n: Node) -> bool:
        return bool(n.outputs) and n.outputs[0] in self.float_out

    def first_input_q(self, n: Node) -> bool:
        """Whether the first run-time input of n exists as uint8."""
        ins = [i for i in n.inputs if i and not self.g.values[i].is_const]
        return bool(ins) and ins[0] in self.qnames

    def params_of(self, v: str) -> QParams:
        qparams, ranges, concat_of = self.qparams, self.ranges, self.concat_of
        if v not in qparams and v in concat_of and v in ranges and concat_of[v] in ranges:
            # its own range is read all the same: needed_ranges records what is read, and
            # the report shows the value's calibrated range
            ranges[v]   # noqa: B018
            qparams[v] = self.params_of(concat_of[v])
        if v not in qparams:
            if v not in ranges:
                raise InputError(f"no calibrated range for {v!r}: the calibration did not "
                                 f"observe it")
            r = ranges[v]
            lo, hi = self.windows.get(v, (-np.inf, np.inf))
            qparams[v] = activation_qparams(min(max(r.lo, lo), hi), max(min(r.hi, hi), lo))
        return qparams[v]

    def scalar_consts(self, v: str, qp: QParams) -> tuple[str, str]:
        s = self.g.add_const(f"{v}.scale", np.array(qp.scale, np.float32))
        z = self.g.add_const(f"{v}.zero_point", np.array(qp.zero_point, np.uint8))
        return s, z

    def new_value(self, base: str, dtype: str, shape) -> str:
        name = self.g.fresh_name(base)
        self.g.values[name] = Value(name, dtype, tuple(shape))
        return name

    def set_uint8(self, v: str, qname: str, qp: QParams | None = None) -> None:
        """v is now written as uint8 `qname` (its float form only on demand)."""
        if qp is not None:
            self.qparams[v] = qp
        self.qnames[v] = qname
        self.float_missing.add(v)

    def uint8_output(self, v: str) -> str:
        """A new uint8 value for float value v's codes, recorded as v's uint8 form."""
        q = self.new_value(f"{v}_quantized", "uint8", self.g.values[v].shape)
        self.set_uint8(v, q)
        return q

    def ensure_q(self, v: str) -> str:
        if v in self.qnames:
            return self.qnames[v]
        qp = self.params_of(v)
        out = self.new_value(f"{v}_quantized", "uint8", self.g.values[v].shape)
        s, z = self.scalar_consts(v, qp)
        self.nodes.append(Node(f"{v}/QuantizeLinear",
                               "QuantizeLinear", [v, s, z], [out], {}, "", 13))
        self.qnames[v] = out
        return out

    def ensure_q16(self, v: str) -> tuple[str, float]:
        """v's int16 form (symmetric, zero point 0, the observed range: 16 bits need no
        clipping) and its scale, quantized from the float form where first needed."""
        if v not in self.q16:
            if v not in self.ranges:
                raise InputError(f"no calibrated range for {v!r}: the calibration did not "
                                 f"observe it")
            scale = int16_scale(self.ranges[v])
            self.ensure_float(v)
            out = self.new_value(f"{v}_int16", "int16", self.g.values[v].shape)
            s = self.g.add_const(f"{v}.scale16", np.array(scale, np.float32))
            z = self.g.add_const(f"{v}.zero_point16", np.array(0, np.int16))
            self.nodes.append(Node(f"{v}/QuantizeLinear16", "QuantizeLinear", [v, s, z], [out],
                                   {}, "", 21))
            self.q16[v] = (out, scale)
        return self.q16[v]

    def ensure_float(self, v: str) -> None:
        if v in self.float_missing:
            qp = self.qparams[v]
            s, z = self.scalar_consts(v, qp)
            self.nodes.append(Node(f"{v}/DequantizeLinear", "DequantizeLinear",
                                   [self.qnames[v], s, z], [v], {}, "", 13))
            self.float_missing.discard(v)

    def wants_uint8(self, v: str) -> bool:
        g = self.g
        return v not in g.outputs and any(
            (_CODE_READERS.intersection(rules_of(c)) and pool_ok(g, c)) or
            table_fn(g, c) is not None or
            (self.opts.requant == "float" and
             (channel_scale_operands(g, c) or ("", ""))[0] == v)
            for c in self.consumers.get(v, []))

    def channel_consts(self, n: Node, sx: float, w_scale: np.ndarray, bias: np.ndarray | None,
                       out_q: QParams | None) -> list[str]:
        """bias, scale, fbias, mult, shift input names."""
        g = self.g
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
        if self.opts.requant == "fixed":
            real = np.float64(sx) * w_scale.astype(np.float64) / np.float64(out_q.scale)
            m0, sh = fixed_multipliers(real)
            names += [g.add_const(f"{n.name}.mult", m0), g.add_const(f"{n.name}.shift", sh)]
        else:
            names += ["", ""]
        return names


Rule = Callable[[Rewrite, Node], bool]
RULES: dict[str, Rule] = {}


def rule(name: str):
    def wrap(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn
    return wrap


def _int8_weights(rw: Rewrite, n: Node):
    """(float weights, int8 weights, their scales, float bias, the QDQ model's own weights or
    None) of an integer Conv / Gemm / MatMul: --adaround's rounding and bias correction
    applied."""
    g, opts, x = rw.g, rw.opts, n.inputs[0]
    if n.op_type == "Conv":
        w = g.const(n.inputs[1]).astype(np.float32)
        bias = g.const(n.input(2)) if n.input(2) else None
    else:
        w, bias = weight_matrix(g, n)
    wq, ws = quantize_weights(w, opts.per_channel)
    given = given_weights(rw.fixed_weights, n, w.shape)
    if given is not None:
        wq, ws = given
    else:
        if n.name in opts.rounded:          # --adaround's learned rounding, same scales
            wq = opts.rounded[n.name]
        mask = None if opts.bias_channels is None else opts.bias_channels.get(n.name)
        if x in opts.input_means and (opts.bias_channels is None or
                                      (mask is not None and mask.any())):
            shift = correction(n, w, wq, ws, opts.input_means[x])
            rw.bias_shift[n.name] = shift if mask is None else np.where(mask, shift, 0.0)
            bias = shifted_bias(bias, rw.bias_shift[n.name])
    return w, wq, ws, bias, given


def quantize_w8a16(rw: Rewrite, n: Node) -> bool:
    """A W8A16 layer (mlcc.QConv16 / mlcc.QFC16): its input as int16, its int8 weights,
    exact sums, the float epilogue (bias and any fused activation) writing float32; a
    QuantizeLinear after it (to the next W8A16 layer's int16 or an int8 layer's uint8) is
    fused into it afterwards (rewrite.fuse_output_quantize)."""
    g = rw.g
    x, out, act = n.inputs[0], n.outputs[0], fused_act(n)
    x16, sx = rw.ensure_q16(x)
    _, wq, ws, bias, _ = _int8_weights(rw, n)
    scale = (np.float32(sx) * ws).astype(np.float32)
    fbias = np.zeros(len(ws), np.float32) if bias is None else \
        np.asarray(bias, np.float32).reshape(-1)
    attrs = {k: v for k, v in n.attrs.items() if k != "_act"} if n.op_type == "Conv" else {}
    attrs.update(x_scale=sx, out=("float32", 0.0, 0), _act=act)
    rw.weights[n.name] = (wq, ws)
    ins = [x16, g.add_const(f"{n.name}.w_int8", wq), g.add_const(f"{n.name}.scale", scale),
           g.add_const(f"{n.name}.fbias", fbias)]
    rw.nodes.append(Node(n.name, "QConv16" if n.op_type == "Conv" else "QFC16", ins, [out],
                         attrs, "mlcc", 1, list(n.fused)))
    rw.layers.append(LayerPlan(n.name, _layer_op(n), True, "w8a16: int16 activations x int8 "
                               "weights", "w8a16"))
    return True


@rule("integer_producer")
def quantize_producer(rw: Rewrite, n: Node) -> bool:
    g, opts = rw.g, rw.opts
    if not is_integer_producer(g, n) or not rw.has(n.inputs[0]) or n.name in opts.keep_float:
        return False
    if n.name in opts.w8a16:
        return quantize_w8a16(rw, n)
    op = n.op_type
    x = n.inputs[0]
    xq = rw.ensure_q(x)
    qx = rw.params_of(x)
    out = n.outputs[0]
    act = fused_act(n)
    uint8_out = (act[0] in CLAMP_ACTS and rw.wants_uint8(out) and rw.has(out)
                 and out not in rw.float_out)
    out_q = rw.params_of(out) if uint8_out else None
    w, wq, ws, bias, given = _int8_weights(rw, n)
    if given is None and uint8_out:
        wq, ws = fit_bias(w, wq, ws, bias, qx.scale)
    if uint8_out:
        lo, hi = act_clamp(act, out_q)
        rq = ("uint8", opts.requant, out_q.zero_point, lo, hi)
        yname = rw.uint8_output(out)
    else:
        rq = ("float32", "float", 0, 0, 255)
        yname = out
    attrs = {k: v for k, v in n.attrs.items() if k != "_act"} if op == "Conv" else {}
    attrs.update(x_zero_point=qx.zero_point, x_scale=qx.scale,
                 y_scale=out_q.scale if out_q else 0.0, rq=rq)
    if not uint8_out:
        attrs["_act"] = act
    rw.weights[n.name] = (wq, ws)
    wname = g.add_const(f"{n.name}.w_int8", wq)
    ins = [xq, wname] + rw.channel_consts(n, qx.scale, ws, bias, out_q)
    rw.nodes.append(Node(n.name, "QConv" if op == "Conv" else "QFC", ins, [yname], attrs,
                         "mlcc", 1, list(n.fused)))
    rw.layers.append(LayerPlan(n.name, _layer_op(n), True,
                               "uint8 out" if uint8_out else "float out"))
    return True


def _moves_codes(rw: Rewrite, n: Node) -> bool:
    return rw.first_input_q(n) and not rw.kept(n) and \
        rw.g.values[n.inputs[0]].dtype == "float32" and pool_ok(rw.g, n)


@rule("movement")
def quantize_movement(rw: Rewrite, n: Node) -> bool:
    """The same node on the codes; the output keeps the input's parameters."""
    if not _moves_codes(rw, n):
        return False
    x, out = n.inputs[0], n.outputs[0]
    yname = rw.new_value(f"{out}_quantized", "uint8", rw.g.values[out].shape)
    rw.nodes.append(Node(n.name, n.op_type, [rw.qnames[x]] + n.inputs[1:], [yname],
                         dict(n.attrs), n.domain, n.version, list(n.fused)))
    rw.set_uint8(out, yname, rw.qparams[x])
    rw.layers.append(LayerPlan(n.name, n.op_type, True, "data movement on uint8"))
    return True


@rule("pool")
def quantize_pool(rw: Rewrite, n: Node) -> bool:
    if not _moves_codes(rw, n):
        return False
    x, out, op = n.inputs[0], n.outputs[0], n.op_type
    qp = rw.qparams[x]
    yname = rw.new_value(f"{out}_quantized", "uint8", rw.g.values[out].shape)
    is_global = op.startswith("Global")
    attrs = {} if is_global else {k: v for k, v in n.attrs.items() if k != "count_include_pad"}
    attrs.update({"zero_point": qp.zero_point, "scale": qp.scale, "global": int(is_global)})
    kind = "QMaxPool" if "Max" in op else "QAvgPool"
    rw.nodes.append(Node(n.name, kind, [rw.qnames[x]], [yname], attrs, "mlcc", 1,
                         list(n.fused)))
    rw.set_uint8(out, yname, qp)
    rw.layers.append(LayerPlan(n.name, op, True, "data movement on uint8"))
    return True


@rule("table")
def quantize_table(rw: Rewrite, n: Node) -> bool:
    g = rw.g
    fn = table_fn(g, n) if not rw.kept(n) else None
    if fn is None or table_input(g, n) not in rw.qnames or not rw.has(n.outputs[0]) or \
            g.values[table_input(g, n)].dtype != "float32":
        return False
    op = n.op_type
    x, out = table_input(g, n), n.outputs[0]
    qx, qy = rw.qparams[x], rw.params_of(out)
    src, label, fused = rw.qnames[x], op, list(n.fused)
    prev = rw.luts.get(x)
    if prev is not None and x not in g.outputs and len(rw.consumers.get(x, [])) == 1:
        # a table read only by this one: one table of the composed function, computed
        # in float (one rounding instead of two)
        pnode, pfn, pq, psrc = prev
        rw.nodes.remove(pnode)
        rw.qnames.pop(x)
        rw.float_missing.discard(x)
        fn = (lambda f, g_: (lambda v: f(np.asarray(g_(v), np.float32))))(fn, pfn)
        qx, src = pq, psrc
        label = f"{pnode.attr('act')}+{op}"
        fused = pnode.fused + [f"{pnode.name}:{pnode.attr('act')}"] + fused
    table = g.add_const(f"{n.name}.table", function_table(fn, qx, qy))
    yname = rw.uint8_output(out)
    lut = Node(n.name, "QLut", [src, table], [yname],
               {"x": (qx.scale, qx.zero_point), "y": (qy.scale, qy.zero_point),
                "act": label}, "mlcc", 1, fused)
    rw.nodes.append(lut)
    rw.luts[out] = (lut, fn, qx, src)
    rw.layers.append(LayerPlan(n.name, op, True, "table on uint8"))
    return True


@rule("split")
def quantize_split(rw: Rewrite, n: Node) -> bool:
    """Pure data movement: every part keeps the input's scale and zero point."""
    if not _moves_codes(rw, n):
        return False
    x = n.inputs[0]
    outs = []
    for o in n.outputs:
        if o:
            outs.append(rw.new_value(f"{o}_quantized", "uint8", rw.g.values[o].shape))
            rw.set_uint8(o, outs[-1], rw.qparams[x])
        else:
            outs.append("")
    rw.nodes.append(Node(n.name, n.op_type, [rw.qnames[x]] + n.inputs[1:], outs, dict(n.attrs),
                         n.domain, n.version, list(n.fused)))
    rw.layers.append(LayerPlan(n.name, n.op_type, True, "data movement on uint8"))
    return True


@rule("channel_scale")
def quantize_channel_scale(rw: Rewrite, n: Node) -> bool:
    """x * s, or x + x * s as x * (s + 1) (the Add fused: one pass, one rounding)."""
    g, opts = rw.g, rw.opts
    se = channel_scale_operands(g, n) if opts.requant == "float" and not rw.kept(n) else None
    if se is None or se[0] not in rw.qnames or g.values[se[0]].dtype != "float32":
        return False
    x, sv = se
    out, offset, add = n.outputs[0], 0.0, None
    readers = rw.consumers.get(out, [])
    if len(readers) == 1 and out not in g.outputs:
        c = readers[0]
        if "add" in rules_of(c) and not c.fused and \
                sorted(c.inputs) == sorted([x, out]) and \
                c.name not in opts.keep_float and c.outputs[0] not in rw.float_out and \
                same_shape(g.values[c.outputs[0]].shape, g.values[x].shape) and \
                rw.has(c.outputs[0]):
            out, offset, add = c.outputs[0], 1.0, c
    if out in rw.float_out or not rw.has(out):
        return False
    rw.ensure_float(sv)
    qx, qy = rw.qparams[x], rw.params_of(out)
    yname = rw.uint8_output(out)
    fused = list(n.fused) + ([f"{add.name}:Add"] if add is not None else [])
    rw.nodes.append(Node(n.name, "QChannelScale", [rw.qnames[x], sv], [yname],
                         {"x": (qx.scale, qx.zero_point), "y": (qy.scale, qy.zero_point),
                          "offset": offset}, "mlcc", 1, fused))
    rw.layers.append(LayerPlan(n.name, n.op_type, True, "channel scale on uint8"))
    if add is not None:
        rw.absorbed.add(add.name)
        rw.layers.append(LayerPlan(add.name, "Add", True,
                                   f"fused into {n.name}: x * (s + 1) on uint8"))
    return True


def _all_inputs_q(rw: Rewrite, n: Node) -> bool:
    ins = [i for i in n.inputs if i and not rw.g.values[i].is_const]
    return bool(ins) and all(i in rw.qnames for i in ins)


@rule("add")
def quantize_add(rw: Rewrite, n: Node) -> bool:
    g = rw.g
    runtime = [i for i in n.inputs if i and not g.values[i].is_const]
    if len(runtime) != 2 or not _all_inputs_q(rw, n) or rw.kept(n) or \
            not (same_shape(g.values[n.inputs[0]].shape, g.values[n.inputs[1]].shape) and
                 same_shape(g.values[n.inputs[1]].shape, g.values[n.outputs[0]].shape)) or \
            not rw.has(n.outputs[0]):
        return False
    a, b = n.inputs
    out = n.outputs[0]
    qa, qb, qy = rw.qparams[a], rw.qparams[b], rw.params_of(out)
    yname = rw.uint8_output(out)
    rw.nodes.append(Node(n.name, "QAdd", [rw.qnames[a], rw.qnames[b]], [yname],
                         {"a": (qa.scale, qa.zero_point), "b": (qb.scale, qb.zero_point),
                          "y": (qy.scale, qy.zero_point), "mode": rw.opts.requant,
                          "clamp": (0, 255)}, "mlcc", 1, list(n.fused)))
    rw.layers.append(LayerPlan(n.name, n.op_type, True, "requantizing add"))
    return True


@rule("concat")
def quantize_concat(rw: Rewrite, n: Node) -> bool:
    g = rw.g
    runtime = [i for i in n.inputs if i and not g.values[i].is_const]
    if not _all_inputs_q(rw, n) or rw.kept(n) or len(runtime) != len(n.inputs) or \
            not rw.has(n.outputs[0]):
        return False
    out = n.outputs[0]
    qy = rw.params_of(out)
    parts = []
    for i in n.inputs:
        qi = rw.qparams[i]
        if (qi.scale, qi.zero_point) == (qy.scale, qy.zero_point):
            parts.append(rw.qnames[i])
            continue
        r = rw.new_value(f"{i}_requantized", "uint8", g.values[i].shape)
        rw.nodes.append(Node(f"{n.name}/requantize_{i}", "QRequant", [rw.qnames[i]], [r],
                             {"x": (qi.scale, qi.zero_point), "y": (qy.scale, qy.zero_point),
                              "mode": rw.opts.requant}, "mlcc", 1))
        parts.append(r)
    yname = rw.uint8_output(out)
    rw.nodes.append(Node(n.name, "Concat", parts, [yname], dict(n.attrs), "", n.version,
                         list(n.fused)))
    rw.layers.append(LayerPlan(n.name, n.op_type, True, "concat on uint8"))
    return True


def float_rule(rw: Rewrite, n: Node) -> None:
    """No rule took n: it runs in float, on the float forms of its inputs."""
    for i in n.inputs:
        if i:
            rw.ensure_float(i)
    rw.nodes.append(n)
    why = ("float (its uint8 form would only be dequantized)" if rw.wasted(n)
           else "float (kept in float)" if n.name in rw.opts.keep_float
           else "float (no integer kernel)")
    rw.layers.append(LayerPlan(n.name, _layer_op(n), False, why))


def quantize_node(rw: Rewrite, n: Node) -> None:
    """The first of n's operator's rules that takes it, else float."""
    if not any(RULES[name](rw, n) for name in rules_of(n)):
        float_rule(rw, n)
