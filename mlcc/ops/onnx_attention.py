"""ONNX Attention (opsets 23, 24 and 25): scaled dot-product attention, lowered onto the fused
attention kernel of mlcc.Attention (mlcc_f32_attention, ops/attention.py) in every case.

    Y = softmax(cap(scale * Q K^T) + bias) V      per query head, cap(x) = softcap tanh(x / softcap)

- Q, K, V are 4-D [batch, heads, seq, head] or 3-D [batch, seq, heads * head] (q_num_heads,
  kv_num_heads): the kernel reads either layout through element strides, and writes Y in it.
- Grouped-query attention (q_num_heads a multiple of kv_num_heads): query head h reads key and
  value head h // group (the kernel's `group`), without repeating K and V.
- past_key / past_value: present = Concat(past, K) on the sequence axis (two strided copies into
  present_key, a temporary when that output is not read); the kernel then reads present.
- The bias (the kernel's float mask, read through broadcast strides) is composed as the ONNX
  reference does: a float attn_mask is added, a bool one is 0 where True and -inf where False,
  a mask shorter than the total sequence is padded with -inf; is_causal and the window sizes
  (opset 25) allow key j to query i iff it lies within the bounds around p = offset + i, where
  offset is past_sequence_length, or nonpad_kv_seqlen[b] - q_sequence_length (opset 24+, an
  external cache, which also masks keys j >= nonpad_kv_seqlen[b]), or 0. Without
  nonpad_kv_seqlen those bounds are a constant [Sq, T] bias; with it, a few comparisons of
  constants with the per-batch lengths at run time (`_bounds`).
- A query row that may attend no key gives a zero row (the kernel's fully-masked-row rule).
- qk_matmul_output (modes 0-3) is computed beside, through the batched MatMul, Tanh, Add and
  Softmax kernels (a debug output): as the ONNX reference, mode 0 is after the softcap too.
Refused by name: float16 / bfloat16 / float64 tensors (mlcc computes attention in float32),
softmax_precision other than FLOAT, dynamic sizes, empty sequences.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from .common import broadcast_shapes, contiguous_strides, emit_copy, require_dtype
from .contrib import lower_parts, part
from .registry import OpDef, register

FLOAT = 1                      # onnx.TensorProto.FLOAT: the only softmax_precision mlcc has
NEG_INF = np.float32(-np.inf)


def _bounds(sq: int, t: int, causal: bool, left: int, right: int, padding: bool
            ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(lo, hi), int64 [sq, t] or None: with n = offset + sq (the valid keys up to the query
    block's end), query i may attend key j iff lo[i, j] < n and n < hi[i, j], which is the
    reference's j <= p (causal), j - p <= right, p - j <= left and j < nonpad (padding) for
    p = n - sq + i."""
    i = np.arange(sq, dtype=np.int64).reshape(sq, 1)
    j = np.arange(t, dtype=np.int64).reshape(1, t)
    lows = []
    if padding:
        lows.append(j + 0 * i)
    if causal:
        lows.append(j - i + sq - 1)
    if right >= 0:
        lows.append(j - i + sq - right - 1)
    lo = np.maximum.reduce(lows) if lows else None
    hi = j - i + sq + left + 1 if left >= 0 else None
    return lo, hi


class _Dims:
    """The sizes and layouts of one Attention node."""

    def __init__(self, node: Node, g: Graph):
        q, k, v = (g.values[node.inputs[i]] for i in range(3))
        shapes = [q.shape, k.shape, v.shape]
        if any(not isinstance(d, (int, np.integer)) for s in shapes for d in s):
            raise UnsupportedError(f"supports static sizes only, and Q, K, V have shapes "
                                   f"{[list(s) for s in shapes]} (give a fixed --shape)")
        rank = len(q.shape)
        if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
            raise ModelError(f"Q, K and V {[list(s) for s in shapes]} must all be 3-D or all "
                             f"4-D")
        self.rank = rank
        qh_attr, kvh_attr = node.attrs.get("q_num_heads"), node.attrs.get("kv_num_heads")
        if rank == 3:
            if not qh_attr or not kvh_attr:
                raise ModelError("3-D Q, K and V need the attributes q_num_heads and "
                                 "kv_num_heads")
            self.qh, self.kvh = int(qh_attr), int(kvh_attr)
            (self.b, self.sq, qhid), (_, self.skv, khid), (_, vs, vhid) = shapes
            if qhid % self.qh or khid % self.kvh or vhid % self.kvh:
                raise ModelError(f"hidden sizes {qhid}, {khid}, {vhid} are not multiples of "
                                 f"q_num_heads {self.qh} and kv_num_heads {self.kvh}")
            self.d, kd, self.dv = qhid // self.qh, khid // self.kvh, vhid // self.kvh
            kb, vb = k.shape[0], v.shape[0]
        else:
            if node.version >= 25 and (qh_attr is not None or kvh_attr is not None):
                raise ModelError("q_num_heads and kv_num_heads must not be given with 4-D "
                                 "inputs")
            (self.b, self.qh, self.sq, self.d), (kb, self.kvh, self.skv, kd) = shapes[:2]
            vb, vkh, vs, self.dv = shapes[2]
            for what, attr, have in (("q_num_heads", qh_attr, self.qh),
                                     ("kv_num_heads", kvh_attr, self.kvh)):
                if attr is not None and int(attr) != have:
                    raise ModelError(f"{what}={attr} does not match the inputs' {have}")
            if vkh != self.kvh:
                raise ModelError(f"V has {vkh} heads, K {self.kvh}")
        if kb != self.b or vb != self.b or vs != self.skv or kd != self.d:
            raise ModelError(f"K {list(k.shape)} and V {list(v.shape)} do not go with Q "
                             f"{list(q.shape)}")
        if self.kvh < 1 or self.qh % self.kvh:
            raise ModelError(f"q_num_heads {self.qh} is not a multiple of kv_num_heads "
                             f"{self.kvh}")
        self.group = self.qh // self.kvh
        self.past = 0
        if node.input(4):
            pk, pv = g.values[node.input(4)], g.values[node.input(5)] if node.input(5) else None
            if pv is None:
                raise ModelError("past_key and past_value must be given together")
            self.past = pk.shape[2] if len(pk.shape) == 4 else -1
            if tuple(pk.shape) != (self.b, self.kvh, self.past, self.d) or \
                    tuple(pv.shape) != (self.b, self.kvh, self.past, self.dv):
                raise ModelError(f"past_key {list(pk.shape)} and past_value "
                                 f"{list(pv.shape)} are not [batch, kv_num_heads, "
                                 f"past_sequence_length, head_size]")
        elif node.input(5):
            raise ModelError("past_key and past_value must be given together")
        self.t = self.past + self.skv                 # total_sequence_length
        if min(self.b, self.sq, self.t, self.d, self.dv) == 0:
            raise UnsupportedError("empty batches, sequences or heads are not supported")

    def strides(self, heads: int, seq: int, size: int) -> list[int]:
        """Element strides [b, h, s, c] of a Q/K/V/Y tensor of this node's layout."""
        if self.rank == 3:
            return [seq * heads * size, size, heads * size, 1]
        return [heads * seq * size, seq * size, size, 1]

    def shape(self, heads: int, seq: int, size: int) -> tuple[int, ...]:
        if self.rank == 3:
            return (self.b, seq, heads * size)
        return (self.b, heads, seq, size)


def _read(node: Node, g: Graph, i: int) -> str:
    """Output i's name if the graph reads it (or it is a graph output), else ""."""
    o = node.outputs[i] if i < len(node.outputs) else ""
    return o if o and (o in g.consumers() or o in g.outputs) else ""


@register("Attention", since=23)
class Attention(OpDef):
    attributes = {"scale": None, "is_causal": lambda v: v in (0, 1),
                  "q_num_heads": None, "kv_num_heads": None,
                  "softcap": None,
                  "softmax_precision": lambda v: v == FLOAT,
                  "qk_matmul_output_mode": lambda v: v in (0, 1, 2, 3),
                  "left_window_size": lambda v: v >= -1,
                  "right_window_size": lambda v: v >= -1}

    def infer(self, node, ins, g):
        require_dtype(node, [v for v in ins[:3] + ins[4:6] if v is not None], ["float32"])
        dims = _Dims(node, g)
        if len(ins) > 3 and ins[3] is not None:
            self._mask_shape(node, g, dims)
        if len(ins) > 6 and ins[6] is not None:
            require_dtype(node, [ins[6]], ["int64"])
            if tuple(ins[6].shape) != (dims.b,):
                raise ModelError(f"nonpad_kv_seqlen {list(ins[6].shape)} is not [{dims.b}]")
            if dims.past:
                raise ModelError("nonpad_kv_seqlen cannot be used with past_key and "
                                 "past_value")
        present_k = ("float32", (dims.b, dims.kvh, dims.t, dims.d))
        present_v = ("float32", (dims.b, dims.kvh, dims.t, dims.dv))
        qk = ("float32", (dims.b, dims.qh, dims.sq, dims.t))
        return [("float32", dims.shape(dims.qh, dims.sq, dims.dv)), present_k, present_v,
                qk][:len(node.outputs)]

    def _mask_shape(self, node: Node, g: Graph, dims: _Dims) -> tuple[int, ...]:
        m = g.values[node.input(3)]
        if m.dtype not in ("bool", "float32"):
            raise UnsupportedError(f"attn_mask of type {m.dtype} is not supported (bool or "
                                   f"float32)")
        shape = tuple(m.shape)
        full = (dims.b, dims.qh, dims.sq, dims.t)
        if not 1 <= len(shape) <= 4 or shape[-1] > dims.t or any(
                d not in (1, f) for d, f in zip(shape[:-1][::-1], full[:-1][::-1])):
            raise ModelError(f"attn_mask {list(shape)} does not broadcast to {list(full)} "
                             f"(its last axis at most total_sequence_length {dims.t})")
        if node.attr("is_causal", 0) and dims.sq > 1 and (len(shape) < 2 or shape[-2] == 1) \
                and node.attr("left_window_size", -1) < 0 \
                and node.attr("right_window_size", -1) < 0:
            raise UnsupportedError(
                f"is_causal=1 with an attn_mask {list(shape)} that is the same for every query "
                f"(its query axis 1, not {dims.sq}) is not supported: the ONNX reference then "
                f"aligns the causal mask on the mask's query axis (every query sees only key "
                f"0) and onnxruntime refuses the mask")
        return shape

    # ------------------------------------------------------------------------------ lowering

    def _bias(self, node: Node, g: Graph, dims: _Dims, parts: list, temps: dict
              ) -> tuple[str, tuple[int, ...]]:
        """The float bias added to the scores ("" for none) and its shape (rank <= 4,
        broadcast to [batch, q_num_heads, sq, t])."""
        causal = bool(node.attr("is_causal", 0))
        left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size",
                                                                             -1))
        nonpad = node.input(6) if len(node.inputs) > 6 else ""
        biases = []                    # (name, shape) to add up
        if node.input(3):
            mask, shape = node.input(3), self._mask_shape(node, g, dims)
            if g.values[mask].dtype == "bool":
                fmask = self._temp(g, node, "mask_bias")
                parts.append(part(f"{node.name}/mask_bias", "Where",
                                  [mask, self._const(g, node, "zero", np.float32(0)),
                                   self._const(g, node, "neg_inf", NEG_INF)], [fmask]))
                temps[fmask] = ("float32", shape)
                mask = fmask
            if shape[-1] < dims.t:     # the missing keys are masked
                fill = self._const(g, node, "mask_fill", np.full(
                    shape[:-1] + (dims.t - shape[-1],), NEG_INF, np.float32))
                padded = self._temp(g, node, "mask_padded")
                parts.append(part(f"{node.name}/mask_pad", "Concat", [mask, fill], [padded],
                                  axis=-1))
                shape = shape[:-1] + (dims.t,)
                temps[padded] = ("float32", shape)
                mask = padded
            biases.append((mask, shape))
        lo, hi = _bounds(dims.sq, dims.t, causal, left, right, padding=bool(nonpad))
        if nonpad and (lo is not None or hi is not None):
            n4 = self._temp(g, node, "nonpad4")
            temps[n4] = ("int64", (dims.b, 1, 1, 1))
            parts.append(part(f"{node.name}/nonpad4", "Reshape",
                              [nonpad, self._const(g, node, "shape4",
                                                   np.array([dims.b, 1, 1, 1], np.int64))],
                              [n4]))
            keeps = []
            for what, bound in (("lo", lo), ("hi", hi)):
                if bound is None:
                    continue
                keep = self._temp(g, node, f"keep_{what}")
                temps[keep] = ("bool", (dims.b, 1, dims.sq, dims.t))
                c = self._const(g, node, f"bound_{what}", bound)
                parts.append(part(f"{node.name}/keep_{what}", "Less",
                                  [c, n4] if what == "lo" else [n4, c], [keep]))
                keeps.append(keep)
            if len(keeps) == 2:
                both = self._temp(g, node, "keep")
                temps[both] = ("bool", (dims.b, 1, dims.sq, dims.t))
                parts.append(part(f"{node.name}/keep", "And", keeps, [both]))
                keeps = [both]
            sbias = self._temp(g, node, "bounds_bias")
            temps[sbias] = ("float32", (dims.b, 1, dims.sq, dims.t))
            parts.append(part(f"{node.name}/bounds_bias", "Where",
                              [keeps[0], self._const(g, node, "zero", np.float32(0)),
                               self._const(g, node, "neg_inf", NEG_INF)], [sbias]))
            biases.append((sbias, (dims.b, 1, dims.sq, dims.t)))
        elif lo is not None or hi is not None:
            n = dims.past + dims.sq
            keep = np.ones((dims.sq, dims.t), bool)
            if lo is not None:
                keep &= lo < n
            if hi is not None:
                keep &= n < hi
            biases.append((self._const(g, node, "bounds_bias",
                                       np.where(keep, np.float32(0), NEG_INF)),
                           (dims.sq, dims.t)))
        if not biases:
            return "", ()
        name, shape = biases[0]
        if len(biases) == 2:
            shape = broadcast_shapes(biases[0][1], biases[1][1])
            name = self._temp(g, node, "bias")
            temps[name] = ("float32", shape)
            parts.append(part(f"{node.name}/bias", "Add", [biases[0][0], biases[1][0]],
                              [name]))
        return name, tuple(shape)

    @staticmethod
    def _temp(g: Graph, node: Node, what: str) -> str:
        name = g.fresh_name(f"{node.name}.{what}")
        g.values[name] = Value(name)
        return name

    @staticmethod
    def _const(g: Graph, node: Node, what: str, data) -> str:
        return g.add_const(f"{node.name}.{what}", np.asarray(data))

    def _present(self, lo: Lowering, node: Node, dims: _Dims, which: int) -> str:
        """present_key (which 1) or present_value (2): [batch, kv_heads, t, size], past then
        K or V, in the output if it is read, else in a temporary; "" when there is no past and
        the output is not read (the kernel then reads K or V as they are)."""
        size = dims.d if which == 1 else dims.dv
        out = _read(node, lo.graph, which)
        if not out and not dims.past:
            return ""
        if not out:
            out = lo.temp(f"{node.name}.present_{'kv'[which - 1]}", "float32",
                          (dims.b, dims.kvh, dims.t, size))
        dst = contiguous_strides((dims.b, dims.kvh, dims.t, size))
        if dims.past:
            past = node.input(3 + which)
            emit_copy(lo, past, out, (dims.b, dims.kvh, dims.past, size),
                      contiguous_strides((dims.b, dims.kvh, dims.past, size)), dst,
                      op="Attention:past")
        emit_copy(lo, node.inputs[which], out, (dims.b, dims.kvh, dims.skv, size),
                  dims.strides(dims.kvh, dims.skv, size), dst, dst_offset=dims.past * size,
                  op="Attention:present")
        return out

    def _scale(self, node: Node, dims: _Dims) -> float:
        scale = node.attr("scale")
        return 1.0 / math.sqrt(dims.d) if scale is None else float(scale)

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        dims = _Dims(node, g)
        parts, temps = [], {}
        bias, bshape = self._bias(node, g, dims, parts, temps)
        lower_parts(lo, parts, temps)
        kv = []
        for which in (1, 2):
            present = self._present(lo, node, dims, which)
            size = dims.d if which == 1 else dims.dv
            kv.append((present, [dims.kvh * dims.t * size, dims.t * size, size, 1])
                      if present else
                      (node.inputs[which], dims.strides(dims.kvh, dims.skv, size)))
        qk = _read(node, g, 3)
        if qk:
            self._qk_output(lo, node, dims, kv[0], bias, bshape, qk)
        aligned = (1,) * (4 - len(bshape)) + tuple(bshape)
        mask_strides = [0 if d == 1 else s for d, s in zip(aligned, contiguous_strides(aligned))]
        fused = part(node.name, "Attention", [node.inputs[0], kv[0][0], kv[1][0], bias],
                     [node.outputs[0]], dims=[dims.b, dims.qh, dims.sq, dims.t, dims.d],
                     dv=dims.dv, group=dims.group,
                     q_strides=dims.strides(dims.qh, dims.sq, dims.d),
                     k_strides=kv[0][1], v_strides=kv[1][1],
                     mask_strides=mask_strides if bias else [0, 0, 0, 0],
                     out_strides=dims.strides(dims.qh, dims.sq, dims.dv),
                     out_shape=list(dims.shape(dims.qh, dims.sq, dims.dv)),
                     scale=self._scale(node, dims), softcap=float(node.attr("softcap", 0.0)))
        lower_parts(lo, [fused], {})

    def _qk_output(self, lo: Lowering, node: Node, dims: _Dims, k: tuple[str, list[int]],
                   bias: str, bshape: tuple[int, ...], out: str) -> None:
        """qk_matmul_output: scale * Q K^T through the batched GEMM (query heads grouped over
        their key/value head: [b, kv_heads, group, sq, d] x [b, kv_heads, 1, d, t]), then,
        by qk_matmul_output_mode, the softcap, the bias and the softmax."""
        g = lo.graph
        b, kvh, grp, sq, t, d = dims.b, dims.kvh, dims.group, dims.sq, dims.t, dims.d
        q5 = lo.temp(f"{node.name}.q5", "float32", (b, kvh, grp, sq, d))
        qs = dims.strides(dims.qh, sq, d)
        emit_copy(lo, node.inputs[0], q5, (b, kvh, grp, sq, d),
                  [qs[0], grp * qs[1], qs[1], qs[2], qs[3]],
                  contiguous_strides((b, kvh, grp, sq, d)), op="Attention:qk")
        kt = lo.temp(f"{node.name}.kt5", "float32", (b, kvh, 1, d, t))
        ks = k[1]
        emit_copy(lo, k[0], kt, (b, kvh, d, t), [ks[0], ks[1], ks[3], ks[2]],
                  contiguous_strides((b, kvh, d, t)), op="Attention:qk")
        s5 = lo.temp(f"{node.name}.qk5", "float32", (b, kvh, grp, sq, t))
        s4 = lo.temp(f"{node.name}.qk4", "float32", (b, dims.qh, sq, t))
        mode = int(node.attr("qk_matmul_output_mode", 0))
        softcap = float(node.attr("softcap", 0.0))
        steps = [("Mul", [self._const(g, node, "qk_scale", np.float32(self._scale(node, dims)))],
                  {})]
        if softcap > 0:
            c = self._const(g, node, "softcap", np.float32(softcap))
            steps += [("Div", [c], {}), ("Tanh", [], {}), ("Mul", [c], {})]
        if mode >= 2 and bias:
            steps.append(("Add", [bias], {}))
        if mode == 3:
            steps.append(("Softmax", [], {"axis": -1}))
        parts = [part(f"{node.name}/qk", "MatMul", [q5, kt], [s5])]
        lo.alias(s4, s5)
        temps, cur = {}, s4
        for n, (op, extra, attrs) in enumerate(steps):
            last = n == len(steps) - 1 and not (mode == 3 and bias)
            nxt = out if last else self._temp(g, node, f"qk{n}")
            if not last:
                temps[nxt] = ("float32", (b, dims.qh, sq, t))
            parts.append(part(f"{node.name}/qk{n}", op, [cur] + extra, [nxt], **attrs))
            cur = nxt
        if mode == 3 and bias:         # the fully-masked rows' zeros, decided on the bias
            bconst = g.const(bias)
            if bconst is not None:
                masked = self._const(g, node, "row_masked",
                                     np.isneginf(bconst.max(axis=-1, keepdims=True)))
            else:
                mx, masked = self._temp(g, node, "bias_max"), self._temp(g, node, "row_masked")
                temps[mx] = ("float32", tuple(bshape[:-1]) + (1,))
                temps[masked] = ("bool", tuple(bshape[:-1]) + (1,))
                parts += [part(f"{node.name}/bias_max", "ReduceMax", [bias], [mx], axes=[-1],
                               keepdims=1),
                          part(f"{node.name}/row_masked", "Equal",
                               [mx, self._const(g, node, "neg_inf", NEG_INF)], [masked])]
            parts.append(part(f"{node.name}/qk_guard", "Where",
                              [masked, self._const(g, node, "zero", np.float32(0)), cur],
                              [out]))
        lower_parts(lo, parts, temps)

    def flops(self, node, g):
        dims = _Dims(node, g)
        return dims.b * dims.qh * dims.sq * dims.t * (2 * dims.d + 2 * dims.dv + 5)
