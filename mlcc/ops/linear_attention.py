"""The recurrent layers of linear-attention and state-space LLMs (opset 27), float32:
- CausalConvWithState: a causal depthwise 1-D convolution over [past_state (zeros without
  it), input] with an optional bias and SiLU, lowered onto the Concat and convolution kernels
  (SiLU in the convolution's epilogue; contrib.lower_parts lowers those parts through their
  own OpDefs); present_state is the last k - 1 positions (a strided copy).
- LinearAttention: the recurrence of linear, gated, delta and gated-delta linear attention
  over the steps in order, grouped-query heads sharing their key/value head's state (one
  kernel, mlcc_f32_linear_attention; `chunk_size` is only a hint)."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Lowering, Node
from .common import contiguous_strides, emit_copy, require_dtype
from .contrib import lower_parts, part
from .registry import OpDef, register


@register("CausalConvWithState", since=27)
class CausalConvWithState(OpDef):
    attributes = {"activation": lambda v: (v.decode() if isinstance(v, bytes) else v)
                  in ("none", "silu", "swish")}

    def infer(self, node, ins, g):
        x, w = ins[:2]
        require_dtype(node, [v for v in ins if v is not None], ["float32"])
        if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[:2] != (x.shape[1], 1) or \
                w.shape[2] < 1:
            raise ModelError(f"input {list(x.shape)} and weight {list(w.shape)} are not "
                             f"[batch, channels, length] and [channels, 1, k]")
        b, c, _ = x.shape
        k = w.shape[2]
        bias = ins[2] if len(ins) > 2 else None
        if bias is not None and tuple(bias.shape) != (c,):
            raise ModelError(f"bias {list(bias.shape)} is not [{c}]")
        past = ins[3] if len(ins) > 3 else None
        if past is not None and tuple(past.shape) != (b, c, k - 1):
            raise ModelError(f"past_state {list(past.shape)} is not [{b}, {c}, {k - 1}]")
        return [("float32", x.shape), ("float32", (b, c, k - 1))][:len(node.outputs)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, w = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        b, c, n = x.shape
        k = w.shape[2]
        padded = node.inputs[0]
        if k > 1:
            past = node.input(3) or lo.add_const(f"{node.name}.zero_state",
                                                 np.zeros((b, c, k - 1), np.float32))
            padded = lo.temp(f"{node.name}.padded", "float32", (b, c, n + k - 1))
            lower_parts(lo, [part(f"{node.name}/concat", "Concat", [past, node.inputs[0]],
                                  [padded], axis=2)], {})
        act = node.attr("activation", "none")
        act = act.decode() if isinstance(act, bytes) else act
        conv = part(f"{node.name}/conv", "Conv", [padded, node.inputs[1], node.input(2)],
                    [node.outputs[0]], group=c, kernel_shape=[k], pads=[0, 0], strides=[1])
        if act != "none":
            conv.attrs["_act"] = ("SILU", 1.0, 0.0)
        lower_parts(lo, [conv], {})
        state = node.outputs[1] if len(node.outputs) > 1 else ""
        if state and k > 1:
            emit_copy(lo, padded, state, (b, c, k - 1), [c * (n + k - 1), n + k - 1, 1],
                      contiguous_strides((b, c, k - 1)), src_offset=n,
                      op="CausalConvWithState:state")

    def flops(self, node: Node, g: Graph) -> int:
        x, w = g.values[node.inputs[0]], g.values[node.inputs[1]]
        return 2 * x.numel * w.shape[2]


_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
          "gated_delta": (True, True)}       # update_rule: (decay, beta)


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


@register("LinearAttention", since=27)
class LinearAttention(OpDef):
    attributes = {"update_rule": lambda v: _str(v) in _RULES, "q_num_heads": None,
                  "kv_num_heads": None, "scale": None, "chunk_size": None}

    def _dims(self, node: Node, g: Graph) -> dict:
        q, k, v = (g.values[node.inputs[i]] for i in range(3))
        qh, kvh = int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0))
        if qh <= 0 or kvh <= 0 or qh % kvh:
            raise ModelError(f"q_num_heads {qh} must be a positive multiple of kv_num_heads "
                             f"{kvh}")
        if any(len(x.shape) != 3 for x in (q, k, v)):
            raise ModelError(f"query, key and value {list(q.shape)}, {list(k.shape)}, "
                             f"{list(v.shape)} must be [batch, steps, heads * size]")
        b, t, qhid = q.shape
        if qhid % qh or k.shape[2] % kvh or v.shape[2] % kvh or k.shape[:2] != (b, t) or \
                v.shape[:2] != (b, t) or k.shape[2] // kvh != qhid // qh:
            raise ModelError(f"query {list(q.shape)}, key {list(k.shape)} and value "
                             f"{list(v.shape)} do not fit q_num_heads {qh} and kv_num_heads "
                             f"{kvh}")
        dk, dv = qhid // qh, v.shape[2] // kvh
        rule = _str(node.attr("update_rule", "gated_delta"))
        gating, delta = _RULES[rule]
        dims = {"batch": b, "t": t, "qh": qh, "kvh": kvh, "dk": dk, "dv": dv, "decay_dk": 0,
                "beta_heads": kvh}
        for i, what, wanted in ((4, "decay", gating), (5, "beta", delta)):
            if bool(node.input(i)) != wanted:
                raise ModelError(f"update_rule {rule!r} {'needs' if wanted else 'forbids'} "
                                 f"the {what} input")
        if node.input(4):
            shape = tuple(g.values[node.input(4)].shape)
            if shape not in ((b, t, kvh), (b, t, kvh * dk)):
                raise ModelError(f"decay {list(shape)} is not [{b}, {t}, {kvh}] or "
                                 f"[{b}, {t}, {kvh * dk}]")
            dims["decay_dk"] = int(shape[2] == kvh * dk and dk != 1)
        if node.input(5):
            shape = tuple(g.values[node.input(5)].shape)
            if shape not in ((b, t, kvh), (b, t, 1)):
                raise ModelError(f"beta {list(shape)} is not [{b}, {t}, {kvh}] or "
                                 f"[{b}, {t}, 1]")
            dims["beta_heads"] = shape[2]
        if node.input(3) and tuple(g.values[node.input(3)].shape) != (b, kvh, dk, dv):
            raise ModelError(f"past_state {list(g.values[node.input(3)].shape)} is not "
                             f"[{b}, {kvh}, {dk}, {dv}]")
        return dims

    def infer(self, node, ins, g):
        require_dtype(node, [v for v in ins if v is not None], ["float32"])
        d = self._dims(node, g)
        return [("float32", (d["batch"], d["t"], d["qh"] * d["dv"])),
                ("float32", (d["batch"], d["kvh"], d["dk"], d["dv"]))][:len(node.outputs)]

    def lower(self, node: Node, lo: Lowering) -> None:
        d = self._dims(node, lo.graph)
        state = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else \
            lo.temp(f"{node.name}.state", "float32", (d["batch"], d["kvh"], d["dk"], d["dv"]))
        scale = float(node.attr("scale", 0.0) or 0.0) or 1.0 / float(np.sqrt(d["dk"]))
        lo.call("mlcc_f32_linear_attention",
                [node.inputs[0], node.inputs[1], node.inputs[2], node.input(3), node.input(4),
                 node.input(5), node.outputs[0], state], [node.outputs[0], state],
                params_type="mlcc_linear_attention_params", params={**d, "scale": scale},
                scratch_bytes=4 * d["dv"])

    def flops(self, node: Node, g: Graph) -> int:
        d = self._dims(node, g)
        return 2 * d["batch"] * d["t"] * d["dk"] * d["dv"] * (2 * d["kvh"] + d["qh"])
