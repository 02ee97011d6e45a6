"""RotaryEmbedding (opset 23): one kernel (rotary.h) over X in either layout, [batch, heads,
seq, head_size] or [batch, seq, num_heads * head_size], with or without position ids."""
from __future__ import annotations

from ..errors import ModelError
from ..ir import Lowering, Node, Value
from .common import require_dtype
from .registry import OpDef, register


@register("RotaryEmbedding", since=23)
class RotaryEmbedding(OpDef):
    attributes = {"interleaved": lambda v: v in (0, 1), "num_heads": None,
                  "rotary_embedding_dim": None}

    def _dims(self, node: Node, x: Value) -> dict:
        """batch, seq, heads, head_size, rot_dim and the element strides of X."""
        if len(x.shape) == 4:
            b, h, s, d = x.shape
            strides = (h * s * d, d, s * d)
        elif len(x.shape) == 3:
            b, s, hidden = x.shape
            h = int(node.attr("num_heads", 0))
            if h <= 0 or hidden % h:
                raise ModelError(f"a 3-D input {list(x.shape)} needs num_heads dividing "
                                 f"{hidden}")
            d = hidden // h
            strides = (s * hidden, hidden, d)
        else:
            raise ModelError(f"input {list(x.shape)} must be 3-D or 4-D")
        rot = int(node.attr("rotary_embedding_dim", 0)) or d
        if rot > d or rot % 2:
            raise ModelError(f"rotary_embedding_dim {rot} must be even and at most the head "
                             f"size {d}")
        return {"batch": b, "seq": s, "heads": h, "head_size": d, "rot_dim": rot,
                "stride_b": strides[0], "stride_s": strides[1], "stride_h": strides[2]}

    def infer(self, node, ins, g):
        x, cos, sin = ins[:3]
        require_dtype(node, [x, cos, sin], ["float32"])
        dims = self._dims(node, x)
        half = dims["rot_dim"] // 2
        pos = ins[3] if len(ins) > 3 else None
        if pos is not None:
            require_dtype(node, [pos], ["int64"])
            if tuple(pos.shape) != (dims["batch"], dims["seq"]):
                raise ModelError(f"position_ids {list(pos.shape)} is not [batch, seq]")
            want = "[max_position, rotary_embedding_dim / 2]"
            ok = len(cos.shape) == 2 and cos.shape[1] == half
        else:
            want = "[batch, seq, rotary_embedding_dim / 2]"
            ok = tuple(cos.shape) == (dims["batch"], dims["seq"], half)
        if not ok or tuple(sin.shape) != tuple(cos.shape):
            raise ModelError(f"cos_cache {list(cos.shape)} and sin_cache {list(sin.shape)} "
                             f"must be {want}")
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        dims = self._dims(node, x)
        pos = node.input(3)
        lo.call("mlcc_f32_rotary_embedding",
                [node.inputs[0], node.inputs[1], node.inputs[2], pos or "", node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_rotary_params", returns_status=True,
                params={**dims, "interleaved": int(node.attr("interleaved", 0)),
                        "max_pos": lo.value(node.inputs[1]).shape[0] if pos else 0})

    def flops(self, node, g):
        return 3 * g.values[node.inputs[0]].numel
