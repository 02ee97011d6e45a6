"""onnxruntime's contrib operators (domain com.microsoft) that its transformer optimizer
(onnxruntime.transformers.optimizer) writes for BERT-like models.

None has a kernel of its own: each lowers onto the kernels of the ONNX operators it is made of
(the GEMM, the broadcasting binary kernel, LayerNormalization, the GELU codes, mlcc.Attention),
by building those operators' nodes (`parts`) and lowering them through their own OpDefs, so
that what an operator computes is said once, here, and how it runs stays in the operators it
reuses. `passes.expand_contrib` puts the same parts into the graph where a fusion can then use
them (a bias and GELU into the MatMul before them, a FusedMatMul's scores into an attention).
Every attribute, input and output mask format these definitions do not handle (past state,
rotary embeddings, unidirectional masks, left-padding mask indices, ...) is refused at compile
time with its name (docs/conformance.md lists them).
Specification: onnxruntime's docs/ContribOperators.md.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from .common import broadcast_shapes, require_dtype
from .elementwise import Gelu as _OnnxGelu, _Unary
from .registry import OpDef, lookup, register

DOMAIN = "com.microsoft"
# opset versions the parts are written at (any version their OpDefs cover)
_VERSIONS = {"Add": 14, "Mul": 14, "MatMul": 13, "Transpose": 13, "Reshape": 14, "Gather": 13,
             "ReduceSum": 13, "Gelu": 20, "LayerNormalization": 17, "RMSNormalization": 23,
             "Less": 13, "Greater": 13, "Where": 16, "Concat": 13, "And": 7, "Div": 14,
             "Tanh": 13, "Softmax": 13, "ReduceMax": 13, "Equal": 13,
             "Swish": 24, "Conv": 22}


def part(name: str, op: str, inputs: list[str], outputs: list[str], **attrs) -> Node:
    """A node of the default domain (or mlcc's Attention) that a contrib operator is made of."""
    if op == "Attention":
        return Node(name, op, inputs, outputs, attrs, domain="mlcc", version=1)
    return Node(name, op, inputs, outputs, attrs, version=_VERSIONS[op])


def lower_parts(lo: Lowering, parts: list[Node], temps: dict[str, tuple[str, tuple]]) -> None:
    """Lowers `parts` through their own OpDefs, with `temps` (name -> (dtype, shape)) as
    run-time tensors private to this lowering."""
    for name, (dtype, shape) in temps.items():
        lo.graph.values[name] = Value(name, dtype, tuple(int(d) for d in shape))
    for p in parts:
        lookup(p).lower(p, lo)


class Composite(OpDef):
    """A contrib operator that is a few ONNX operators: `parts(node, g)` gives them and their
    intermediate values; `lower` lowers them; passes.expand_contrib may put them in the graph."""

    def parts(self, node: Node, g: Graph) -> tuple[list[Node], dict[str, tuple[str, tuple]]]:
        raise NotImplementedError

    def lower(self, node: Node, lo: Lowering) -> None:
        parts, temps = self.parts(node, lo.graph)
        lower_parts(lo, parts, temps)

    def expands_for_fusion(self, node: Node, g: Graph) -> bool:
        """Whether passes.expand_contrib should replace the node by its parts (a fusion can use
        them); otherwise it lowers as one operator."""
        return False


def _temp(g: Graph, node: Node, what: str) -> str:
    """A fresh value name for an intermediate of the node's parts (typed by lower_parts or
    passes.expand_contrib from the parts' temps)."""
    name = g.fresh_name(f"{node.name}.{what}")
    g.values[name] = Value(name)
    return name


def _from_matmul(node: Node, g: Graph) -> bool:
    """The node's first input is a plain MatMul's output that only this node reads: a bias
    and an activation then fuse into that MatMul once the node is its parts."""
    prod = g.producers().get(node.inputs[0])
    return (prod is not None and prod.op_type in ("MatMul", "Gemm") and prod.domain == ""
            and not prod.attrs.get("_act") and len(g.consumers().get(node.inputs[0], [])) == 1
            and node.inputs[0] not in g.outputs)


# ------------------------------------------------------------------------- GELU and friends

@register("Gelu", domain=DOMAIN)
class Gelu(_OnnxGelu):
    """GELU with erf (ONNX Gelu with approximate="none"); fuses into a producer's epilogue."""
    attributes = {}


@register("QuickGelu", domain=DOMAIN)
class QuickGelu(_Unary):
    """y = x * sigmoid(alpha * x): the SiLU activation with alpha (default 1.702)."""
    attributes = {"alpha": None}

    def activation(self, node, g):
        return ("SILU", float(node.attr("alpha", 1.702)), 0.0)


class _BiasAct(Composite):
    """y = f(x + bias) for a GELU f: an Add of a [..., C] bias (BiasGelu's B, FastGelu's
    optional bias), then the GELU."""
    approximate = "none"
    bias_required = True

    def infer(self, node, ins, g):
        present = [v for v in ins if v is not None]
        require_dtype(node, present, ["float32"])
        if len(present) > 1:
            bias = present[1]
            if len(bias.shape) != 1 or bias.shape[0] != ins[0].shape[-1]:
                raise ModelError(f"bias {list(bias.shape)} is not [{ins[0].shape[-1]}]")
        elif self.bias_required:
            raise ModelError("input B (the bias) is missing")
        return [("float32", ins[0].shape)]

    def parts(self, node, g):
        x, out = node.inputs[0], node.outputs[0]
        if not node.input(1):
            return [part(node.name, "Gelu", [x], [out], approximate=self.approximate)], {}
        summed = _temp(g, node, "biased")
        return ([part(f"{node.name}/bias", "Add", [x, node.inputs[1]], [summed]),
                 part(f"{node.name}/gelu", "Gelu", [summed], [out],
                      approximate=self.approximate)],
                {summed: ("float32", g.values[x].shape)})

    def expands_for_fusion(self, node, g):
        return bool(node.input(1)) and _from_matmul(node, g)

    def activation(self, node, g):
        """Without a bias, the GELU alone: a producer's epilogue applies it."""
        if node.input(1):
            return None
        return ("GELU_TANH" if self.approximate == "tanh" else "GELU", 0.0, 0.0)

    def flops(self, node, g):
        return 9 * g.values[node.outputs[0]].numel


@register("BiasGelu", domain=DOMAIN)
class BiasGelu(_BiasAct):
    """C = Gelu(A + B), GELU with erf."""


@register("FastGelu", domain=DOMAIN)
class FastGelu(_BiasAct):
    """Y = Gelu(X + bias) with the tanh approximation; the bias is optional."""
    approximate = "tanh"
    bias_required = False


@register("BiasAdd", domain=DOMAIN)
class BiasAdd(Composite):
    """Y = X + bias + skip, X and skip [N, S, C], bias [C]."""
    attributes = {}

    def infer(self, node, ins, g):
        require_dtype(node, ins, ["float32"])
        x, bias, skip = ins
        if len(x.shape) != 3 or tuple(skip.shape) != tuple(x.shape) or \
                tuple(bias.shape) != (x.shape[-1],):
            raise ModelError(f"BiasAdd needs X and skip [N, S, C] and bias [C], got "
                             f"{list(x.shape)}, {list(skip.shape)}, {list(bias.shape)}")
        return [("float32", x.shape)]

    def parts(self, node, g):
        x, bias, skip = node.inputs
        summed = _temp(g, node, "biased")
        return ([part(f"{node.name}/bias", "Add", [x, bias], [summed]),
                 part(f"{node.name}/skip", "Add", [summed, skip], [node.outputs[0]])],
                {summed: ("float32", g.values[x].shape)})

    def expands_for_fusion(self, node, g):
        return _from_matmul(node, g)

    def flops(self, node, g):
        return 2 * g.values[node.outputs[0]].numel


# ------------------------------------------------------------------------------- SkipLayerNorm

@register("SkipLayerNormalization", domain=DOMAIN)
class SkipLayerNormalization(Composite):
    """output = LayerNorm(input + skip [+ bias]) * gamma [+ beta] over the last axis; the
    fourth output is the sum itself. The mean and inverse standard deviation outputs are
    refused when read."""
    attributes = {"epsilon": None}
    beta_input: int | None = 3
    bias_input = 4
    norm = "LayerNormalization"

    def _optional(self, node: Node, index: int | None) -> str:
        return node.input(index) if index is not None else ""

    def infer(self, node, ins, g):
        x, skip, gamma = ins[:3]
        require_dtype(node, [v for v in ins if v is not None], ["float32"])
        if len(x.shape) not in (2, 3):
            raise ModelError(f"input {list(x.shape)} must be [batch, sequence, hidden] or "
                             f"[tokens, hidden]")
        hidden = x.shape[-1]
        if broadcast_shapes(x.shape, skip.shape) != tuple(x.shape):
            raise ModelError(f"skip {list(skip.shape)} does not broadcast to input "
                             f"{list(x.shape)}")
        for index, what in ((2, "gamma"), (self.beta_input, "beta"), (self.bias_input, "bias")):
            name = self._optional(node, index)
            if name and tuple(g.values[name].shape) != (hidden,):
                raise ModelError(f"{what} {list(g.values[name].shape)} is not [{hidden}]")
        _only_first_output(node, g, {1: "mean", 2: "inv_std_var"})
        return [("float32", x.shape)] * len(node.outputs)

    def parts(self, node, g):
        x, skip, gamma = node.inputs[:3]
        beta, bias = self._optional(node, self.beta_input), node.input(self.bias_input)
        shape = g.values[x].shape
        temps, parts = {}, []
        if bias:        # first, so that it fuses into a MatMul before (passes.expand_contrib)
            biased = _temp(g, node, "biased")
            temps[biased] = ("float32", shape)
            parts.append(part(f"{node.name}/bias", "Add", [x, bias], [biased]))
            x = biased
        summed = node.outputs[3] if len(node.outputs) > 3 and node.outputs[3] else ""
        if not summed:
            summed = _temp(g, node, "sum")
            temps[summed] = ("float32", shape)
        parts.append(part(f"{node.name}/skip", "Add", [x, skip], [summed]))
        parts.append(part(f"{node.name}/norm", self.norm,
                          [summed, gamma] + ([beta] if beta else []), [node.outputs[0]],
                          axis=-1, epsilon=float(node.attr("epsilon", 1e-12))))
        return parts, temps

    def expands_for_fusion(self, node, g):
        return bool(node.input(self.bias_input)) and _from_matmul(node, g)

    def flops(self, node, g):
        return 10 * g.values[node.inputs[0]].numel


@register("SkipSimplifiedLayerNormalization", domain=DOMAIN)
class SkipSimplifiedLayerNormalization(SkipLayerNormalization):
    """output = RMSNorm(input + skip [+ bias]) * gamma (T5, LLaMA): no beta, the bias is the
    fourth input."""
    beta_input = None
    bias_input = 3
    norm = "RMSNormalization"


# -------------------------------------------------------------------------------- FusedMatMul

@register("FusedMatMul", domain=DOMAIN)
class FusedMatMul(Composite):
    """Y = alpha * op(A) x op(B), op a transpose of the last two axes when transA / transB;
    the batch transposes (transBatchA, transBatchB) are refused."""
    attributes = {"alpha": None, "transA": None, "transB": None,
                  "transBatchA": lambda v: int(v) == 0, "transBatchB": lambda v: int(v) == 0}

    @staticmethod
    def _op_shape(v: Value, trans: bool) -> tuple[int, ...]:
        s = tuple(v.shape)
        if trans and len(s) < 2:
            raise ModelError(f"a transposed operand needs rank >= 2, got {list(s)}")
        return s[:-2] + (s[-1], s[-2]) if trans else s

    def infer(self, node, ins, g):
        from .gemm import MatMul
        require_dtype(node, ins, ["float32"])
        a = self._op_shape(ins[0], bool(node.attr("transA", 0)))
        b = self._op_shape(ins[1], bool(node.attr("transB", 0)))
        return [("float32", MatMul._shapes(a, b)[-1])]

    def parts(self, node, g):
        parts, temps, operands = [], {}, []
        for i, flag in ((0, "transA"), (1, "transB")):
            name, v = node.inputs[i], g.values[node.inputs[i]]
            if node.attr(flag, 0):
                perm = list(range(len(v.shape)))
                perm[-2:] = perm[-1], perm[-2]
                shape = self._op_shape(v, True)
                if v.const is not None:
                    name = g.add_const(f"{node.name}.{flag}",
                                       np.ascontiguousarray(np.transpose(v.const, perm)))
                else:
                    t = _temp(g, node, flag)
                    parts.append(part(f"{node.name}/{flag}", "Transpose", [name], [t],
                                      perm=perm))
                    temps[t] = ("float32", shape)
                    name = t
            operands.append(name)
        alpha = float(node.attr("alpha", 1.0))
        out = node.outputs[0]
        shape = g.values[out].shape if g.values[out].shape is not None else None
        if alpha == 1.0:
            parts.append(part(f"{node.name}/matmul", "MatMul", operands, [out]))
            return parts, temps
        product = _temp(g, node, "product")
        temps[product] = ("float32", shape)
        scale = g.add_const(f"{node.name}.alpha", np.array(alpha, np.float32))
        parts += [part(f"{node.name}/matmul", "MatMul", operands, [product]),
                  part(f"{node.name}/alpha", "Mul", [product, scale], [out])]
        return parts, temps

    def expands_for_fusion(self, node, g):
        """The scores of an attention (read by a Softmax, maybe through a mask's Add):
        passes.fuse_attention then absorbs the transposes and the scale."""
        readers = g.consumers().get(node.outputs[0], [])
        if len(readers) != 1 or node.outputs[0] in g.outputs:
            return False
        r = readers[0]
        if r.op_type == "Add" and len(g.consumers().get(r.outputs[0], [])) == 1:
            r = g.consumers()[r.outputs[0]][0]
        return r.op_type == "Softmax" and r.domain == ""

    def flops(self, node, g):
        a = g.values[node.inputs[0]]
        k = a.shape[-2] if node.attr("transA", 0) else a.shape[-1]
        return 2 * g.values[node.outputs[0]].numel * k


# ---------------------------------------------------------------------------------- Attention

def check_mask(v: Value, batch: int, sq: int, sk: int) -> tuple[int, ...]:
    """The shape of a supported int32 mask (see mask_parts), or an error naming the format."""
    if v.dtype != "int32":
        raise ModelError(f"the mask must be int32, not {v.dtype}")
    shape = tuple(v.shape)
    if shape not in ((batch,), (batch, sk), (batch, sq, sk)):
        raise UnsupportedError(
            f"mask {list(shape)} is not supported (supported: [batch] sequence lengths of "
            f"right-padded inputs, [batch, {sk}] and [batch, {sq}, {sk}] raw masks; not "
            f"[2 * batch] left padding, [3 * batch + 2] or 4-D masks)")
    return shape


def mask_parts(node: Node, g: Graph, mask: str, batch: int, sq: int, sk: int,
               filter_value: float) -> tuple[list[Node], dict, str, list[int]]:
    """The float mask an mlcc.Attention adds to the scores, from an int32 mask input:
    [batch] (the sequence lengths of right-padded inputs: key j of batch b is masked when
    j >= mask[b]), [batch, sk] or [batch, sq, sk] (raw: 0 masks). Returns (parts, temps,
    the float mask's name, its strides over [batch, heads, sq, sk])."""
    shape = check_mask(g.values[mask], batch, sq, sk)
    zero = g.add_const(f"{node.name}.mask_zero", np.array(0.0, np.float32))
    fill = g.add_const(f"{node.name}.mask_filter", np.array(filter_value, np.float32))
    keep = _temp(g, node, "mask_keep")
    fmask = _temp(g, node, "mask")
    if shape == (batch,):
        positions = g.add_const(f"{node.name}.key_positions",
                                np.arange(sk, dtype=np.int32).reshape(1, sk))
        column_shape = g.add_const(f"{node.name}.mask_column", np.array([batch, 1], np.int64))
        column = _temp(g, node, "mask_lengths")         # [batch] viewed as [batch, 1]
        parts = [part(f"{node.name}/mask_lengths", "Reshape", [mask, column_shape], [column]),
                 part(f"{node.name}/mask_keep", "Less", [positions, column], [keep])]
        temps = {column: ("int32", (batch, 1))}
        out_shape, strides = (batch, sk), [sk, 0, 0, 1]
    else:                       # raw: 0 masks
        zero_i = g.add_const(f"{node.name}.mask_zero_i", np.array(0, np.int32))
        parts = [part(f"{node.name}/mask_keep", "Greater", [mask, zero_i], [keep])]
        temps, out_shape = {}, shape
        strides = [sk, 0, 0, 1] if len(shape) == 2 else [sq * sk, 0, sk, 1]
    temps[keep] = ("bool", out_shape)
    temps[fmask] = ("float32", out_shape)
    parts.append(part(f"{node.name}/mask", "Where", [keep, zero, fill], [fmask]))
    return parts, temps, fmask, strides


def _no_inputs(node: Node, names: dict[int, str]) -> None:
    for i, what in names.items():
        if node.input(i):
            raise UnsupportedError(f"input {what} ({node.input(i)!r}) is not supported")


def _only_first_output(node: Node, g: Graph, names: dict[int, str]) -> None:
    readers = g.consumers()
    for i, what in names.items():
        o = node.outputs[i] if i < len(node.outputs) else ""
        if o and (o in readers or o in g.outputs):
            raise UnsupportedError(f"output {what} ({o!r}) is not supported")


_ATTENTION_ATTRS = {"num_heads": lambda v: int(v) >= 1, "mask_filter_value": None,
                    "scale": None, "unidirectional": lambda v: int(v) == 0,
                    "do_rotary": lambda v: int(v) == 0,
                    "past_present_share_buffer": lambda v: int(v) == 0}


def _num_heads(node: Node) -> int:
    if "num_heads" not in node.attrs:
        raise ModelError("attribute num_heads is missing")
    return int(node.attr("num_heads"))


class _Attention(Composite):
    """What Attention and MultiHeadAttention share: their bias (input 2 or 3: a constant
    [3 * hidden]) and mask (the input after it) and the attention itself."""
    bias_input = 2

    def _check(self, node: Node, ins: list, g: Graph, batch: int, sq: int, sk: int,
               hidden: int) -> list:
        bias, mask = node.input(self.bias_input), node.input(self.bias_input + 1)
        if bias:
            if g.const(bias) is None:
                raise UnsupportedError(f"bias ({bias!r}) must be a constant")
            if tuple(g.values[bias].shape) != (3 * hidden,):
                raise ModelError(f"bias {list(g.values[bias].shape)} is not [{3 * hidden}]")
        if mask:
            check_mask(g.values[mask], batch, sq, sk)
        return [("float32", (batch, sq, hidden))] + \
            [("float32", (0,))] * (len(node.outputs) - 1)

    def _attend(self, node: Node, g: Graph, parts: list, temps: dict, qkv: list[str],
                dims: tuple[int, int, int, int, int]):
        """parts + the float mask and the mlcc.Attention over Q, K, V `qkv`."""
        batch, heads, sq, sk, d = dims
        mask, mstrides = "", [0, 0, 0, 0]
        if node.input(self.bias_input + 1):
            mparts, mtemps, mask, mstrides = mask_parts(
                node, g, node.input(self.bias_input + 1), batch, sq, sk,
                float(node.attr("mask_filter_value", -10000.0)))
            parts += mparts
            temps.update(mtemps)
        scale = float(node.attr("scale", 0.0)) or 1.0 / math.sqrt(d)
        h = heads * d       # Q, K, V and the output: [batch, seq, heads * d], heads side by side

        def strides(seq: int) -> list[int]:
            return [seq * h, d, h, 1]

        parts.append(part(f"{node.name}/attention", "Attention", qkv + [mask],
                          [node.outputs[0]], dims=list(dims), q_strides=strides(sq),
                          k_strides=strides(sk), v_strides=strides(sk),
                          mask_strides=mstrides, out_strides=strides(sq),
                          out_shape=[batch, sq, h], scale=scale))
        return parts, temps


@register("Attention", domain=DOMAIN)
class Attention(_Attention):
    """BERT self-attention: Q, K, V = input x weights + bias (merged [hidden_in, 3 * hidden]),
    softmax(scale * Q K^T + mask) V per head, heads merged. Weights and bias must be
    constants (they are split into the three projections at compile time). Refused: past
    state and present output, attention_bias (relative position bias),
    past_sequence_length, unidirectional=1, do_rotary, qkv_hidden_sizes with different
    sizes, and the left-padding and 4-D mask formats."""
    attributes = {**_ATTENTION_ATTRS, "qkv_hidden_sizes": lambda v: len(set(v)) == 1}

    def _sizes(self, node: Node, g: Graph) -> tuple[int, int, int, int, int, int]:
        x = g.values[node.inputs[0]]
        w = g.values[node.inputs[1]]
        if len(x.shape) != 3 or len(w.shape) != 2 or w.shape[0] != x.shape[2] or \
                w.shape[1] % 3:
            raise ModelError(f"input {list(x.shape)} and weights {list(w.shape)} are not "
                             f"[batch, sequence, hidden_in] and [hidden_in, 3 * hidden]")
        heads = _num_heads(node)
        hidden = w.shape[1] // 3
        if hidden % heads:
            raise ModelError(f"hidden size {hidden} is not a multiple of num_heads {heads}")
        return x.shape[0], x.shape[1], x.shape[2], hidden, heads, hidden // heads

    def infer(self, node, ins, g):
        _no_inputs(node, {4: "past", 5: "attention_bias", 6: "past_sequence_length"})
        _only_first_output(node, g, {1: "present"})
        require_dtype(node, [v for v in ins[:3] if v is not None], ["float32"])
        _num_heads(node)
        batch, seq, _, hidden, _, _ = self._sizes(node, g)
        if g.const(node.inputs[1]) is None:
            raise UnsupportedError(f"weights ({node.inputs[1]!r}) must be a constant")
        return self._check(node, ins, g, batch, seq, seq, hidden)

    def parts(self, node, g):
        batch, seq, _, hidden, heads, d = self._sizes(node, g)
        w = g.const(node.inputs[1])
        bias = g.const(node.input(2)) if node.input(2) else np.zeros(3 * hidden, np.float32)
        parts, temps, qkv = [], {}, []
        for j, what in enumerate("qkv"):
            wj = g.add_const(f"{node.name}.{what}_weight",
                             np.ascontiguousarray(w[:, j * hidden:(j + 1) * hidden]))
            bj = g.add_const(f"{node.name}.{what}_bias",
                             np.ascontiguousarray(bias[j * hidden:(j + 1) * hidden]))
            t = _temp(g, node, what)
            temps[t] = ("float32", (batch, seq, hidden))
            parts.append(part(f"{node.name}/{what}", "MatMul", [node.inputs[0], wj, bj], [t]))
            qkv.append(t)
        return self._attend(node, g, parts, temps, qkv, (batch, heads, seq, seq, d))

    def flops(self, node, g):
        batch, seq, hin, hidden, heads, d = self._sizes(node, g)
        return 2 * batch * seq * hin * 3 * hidden + batch * heads * seq * seq * (4 * d + 5)


@register("MultiHeadAttention", domain=DOMAIN)
class MultiHeadAttention(_Attention):
    """softmax(scale * Q K^T + mask) V per head over projected query [batch, sq, hidden],
    key and value [batch, sk, hidden] (cross attention when sk differs), with an optional
    constant bias [3 * hidden] added to them first. Refused: packed QKV or KV (no key, 5-D
    inputs), 4-D key and value (BNSH), value heads of another size, attention_bias, past
    state and cache_indirection, the present and qk outputs, unidirectional=1, and the
    left-padding and 4-D mask formats."""
    attributes = {k: _ATTENTION_ATTRS[k] for k in ("num_heads", "mask_filter_value", "scale",
                                                    "unidirectional")}
    bias_input = 3

    def _sizes(self, node: Node, g: Graph) -> tuple[int, int, int, int, int]:
        if not node.input(1) or not node.input(2):
            raise UnsupportedError("packed QKV or KV inputs (no separate key and value) are "
                                   "not supported")
        q, k, v = (g.values[node.inputs[i]] for i in range(3))
        if any(len(x.shape) != 3 for x in (q, k, v)):
            raise UnsupportedError(f"query, key and value {list(q.shape)}, {list(k.shape)}, "
                                   f"{list(v.shape)} must all be [batch, sequence, hidden] "
                                   f"(packed and BNSH layouts are not supported)")
        heads = _num_heads(node)
        batch, sq, hidden = q.shape
        if k.shape[0] != batch or v.shape[0] != batch or k.shape[2] != hidden or \
                v.shape[1] != k.shape[1]:
            raise ModelError(f"key {list(k.shape)} and value {list(v.shape)} do not go with "
                             f"query {list(q.shape)}")
        if v.shape[2] != hidden:
            raise UnsupportedError(f"value hidden size {v.shape[2]} differs from the query's "
                                   f"{hidden}; not supported")
        if hidden % heads:
            raise ModelError(f"hidden size {hidden} is not a multiple of num_heads {heads}")
        return batch, sq, k.shape[1], hidden, heads

    def infer(self, node, ins, g):
        _no_inputs(node, {5: "attention_bias", 6: "past_key", 7: "past_value",
                          8: "past_sequence_length", 9: "cache_indirection"})
        _only_first_output(node, g, {1: "present_key", 2: "present_value", 3: "qk"})
        _num_heads(node)
        batch, sq, sk, hidden, _ = self._sizes(node, g)
        require_dtype(node, [v for v in ins[:4] if v is not None], ["float32"])
        return self._check(node, ins, g, batch, sq, sk, hidden)

    def parts(self, node, g):
        batch, sq, sk, hidden, heads = self._sizes(node, g)
        parts, temps, qkv = [], {}, list(node.inputs[:3])
        if node.input(3):
            bias = g.const(node.input(3))
            for j, what in enumerate("qkv"):
                bj = g.add_const(f"{node.name}.{what}_bias",
                                 np.ascontiguousarray(bias[j * hidden:(j + 1) * hidden]))
                t = _temp(g, node, what)
                temps[t] = ("float32", g.values[qkv[j]].shape)
                parts.append(part(f"{node.name}/{what}_bias", "Add", [qkv[j], bj], [t]))
                qkv[j] = t
        return self._attend(node, g, parts, temps, qkv,
                            (batch, heads, sq, sk, hidden // heads))

    def flops(self, node, g):
        batch, sq, sk, hidden, heads = self._sizes(node, g)
        return batch * heads * sq * sk * (4 * (hidden // heads) + 5)


# ------------------------------------------------------------------- EmbedLayerNormalization

@register("EmbedLayerNormalization", domain=DOMAIN)
class EmbedLayerNormalization(Composite):
    """BERT's embeddings: LayerNorm(word[input_ids] + position[position_ids, or 0..S-1]
    [+ segment[segment_ids]]) * gamma + beta; the mask index output is the sum of each
    row of the int32 mask (the sequence lengths Attention reads), the third output the sum
    before the LayerNorm. Token ids out of the vocabulary are a run-time status (Gather's
    range check). Refused: mask_index_type other than 1, a read mask index without a
    mask."""
    attributes = {"epsilon": None, "mask_index_type": lambda v: int(v) == 1}
    _INPUTS = ("input_ids", "segment_ids", "word_embedding", "position_embedding",
               "segment_embedding", "gamma", "beta", "mask", "position_ids")

    def _named(self, node: Node) -> dict[str, str]:
        return {k: node.input(i) for i, k in enumerate(self._INPUTS)}

    def infer(self, node, ins, g):
        n = self._named(node)
        v = {k: g.values[name] if name else None for k, name in n.items()}
        for k in ("input_ids", "word_embedding", "position_embedding", "gamma"):
            if v[k] is None:
                raise ModelError(f"input {k} is missing")
        if (v["segment_ids"] is None) != (v["segment_embedding"] is None):
            raise ModelError("segment_ids and segment_embedding go together")
        ids = v["input_ids"]
        for k in ("input_ids", "segment_ids", "mask", "position_ids"):
            if v[k] is not None and v[k].dtype != "int32":
                raise ModelError(f"{k} must be int32, not {v[k].dtype}")
        if len(ids.shape) != 2:
            raise ModelError(f"input_ids {list(ids.shape)} is not [batch, sequence]")
        batch, seq = ids.shape
        hidden = v["word_embedding"].shape[-1]
        require_dtype(node, [v[k] for k in ("word_embedding", "position_embedding",
                                            "segment_embedding", "gamma", "beta")
                             if v[k] is not None], ["float32"])
        for k in ("word_embedding", "position_embedding", "segment_embedding"):
            if v[k] is not None and (len(v[k].shape) != 2 or v[k].shape[1] != hidden):
                raise ModelError(f"{k} {list(v[k].shape)} is not [rows, {hidden}]")
        for k in ("segment_ids", "mask"):
            if v[k] is not None and tuple(v[k].shape) != (batch, seq):
                raise ModelError(f"{k} {list(v[k].shape)} is not [{batch}, {seq}]")
        if v["position_ids"] is not None and tuple(v["position_ids"].shape) not in (
                (batch, seq), (1, seq)):
            raise ModelError(f"position_ids {list(v['position_ids'].shape)} is not "
                             f"[{batch}, {seq}] or [1, {seq}]")
        if v["position_ids"] is None and v["position_embedding"].shape[0] < seq:
            raise ModelError(f"position_embedding has {v['position_embedding'].shape[0]} rows "
                             f"for {seq} positions")
        for k in ("gamma", "beta"):
            if v[k] is not None and tuple(v[k].shape) != (hidden,):
                raise ModelError(f"{k} {list(v[k].shape)} is not [{hidden}]")
        if v["mask"] is None:
            _only_first_output(node, g, {1: "mask_index (there is no mask)"})
        outs = [("float32", (batch, seq, hidden)), ("int32", (batch,)),
                ("float32", (batch, seq, hidden))]
        return outs[:len(node.outputs)]

    def parts(self, node, g):
        n = self._named(node)
        batch, seq = g.values[n["input_ids"]].shape
        hidden = g.values[n["word_embedding"]].shape[-1]
        parts, temps = [], {}

        def tmp(what, dtype="float32", shape=(batch, seq, hidden)):
            t = _temp(g, node, what)
            temps[t] = (dtype, shape)
            return t

        word = tmp("word")
        parts.append(part(f"{node.name}/word", "Gather", [n["word_embedding"], n["input_ids"]],
                          [word], axis=0))
        if n["position_ids"]:
            pos = tmp("position", shape=(g.values[n["position_ids"]].shape + (hidden,)))
            parts.append(part(f"{node.name}/position", "Gather",
                              [n["position_embedding"], n["position_ids"]], [pos], axis=0))
        else:
            table = g.const(n["position_embedding"])
            if table is not None:
                pos = g.add_const(f"{node.name}.positions", np.ascontiguousarray(table[:seq]))
            else:
                ids = g.add_const(f"{node.name}.position_ids", np.arange(seq, dtype=np.int32))
                pos = tmp("position", shape=(seq, hidden))
                parts.append(part(f"{node.name}/position", "Gather",
                                  [n["position_embedding"], ids], [pos], axis=0))
        summed = tmp("word_position")
        parts.append(part(f"{node.name}/add_position", "Add", [word, pos], [summed]))
        if n["segment_ids"]:
            seg = tmp("segment")
            parts.append(part(f"{node.name}/segment", "Gather",
                              [n["segment_embedding"], n["segment_ids"]], [seg], axis=0))
            total = tmp("embedding")
            parts.append(part(f"{node.name}/add_segment", "Add", [summed, seg], [total]))
            summed = total
        out_sum = node.outputs[2] if len(node.outputs) > 2 and node.outputs[2] else ""
        if out_sum:
            temps.pop(summed, None)
            g.values.pop(summed, None)
            parts[-1].outputs = [out_sum]
            summed = out_sum
        parts.append(part(f"{node.name}/norm", "LayerNormalization",
                          [summed, n["gamma"]] + ([n["beta"]] if n["beta"] else []),
                          [node.outputs[0]], axis=-1,
                          epsilon=float(node.attr("epsilon", 1e-12))))
        mask_index = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
        if mask_index and n["mask"]:
            axes = g.add_const(f"{node.name}.mask_axes", np.array([1], np.int64))
            parts.append(part(f"{node.name}/mask_index", "ReduceSum", [n["mask"], axes],
                              [mask_index], keepdims=0))
        return parts, temps

    def flops(self, node, g):
        return 10 * g.values[node.outputs[0]].numel
