"""mlcc.Attention: scaled dot-product attention as one kernel (mlcc_f32_attention).

Not an ONNX operator: only passes.fuse_attention creates it, from
MatMul(Q, K^T) -> [Div or Mul by a scale] -> [Add(mask)] -> Softmax(last axis) -> MatMul(., V).
The node reads Q, K, V (and the mask) through the element strides in its attributes, which
is how the Transposes around the heads of a BERT-style encoder disappear:
    inputs     q, k, v, mask ("" for none): storages, float32
    dims       [batch, heads, sq, sk, d]
    q_strides  [b, h, i, c] of Q[b][h][i][c];  k_strides of K[b][h][j][c] (K, not K^T);
    v_strides  of V[b][h][j][c];  mask_strides of mask[b][h][i][j];  out_strides of out[b][h][i][c]
    out_shape  the shape of the value it writes (the last MatMul's or an absorbed Transpose's)
    scale      multiplies the scores before the mask is added
    optional (ONNX Attention, ops/onnx_attention.py):
    dv         the value heads' size (default d)
    group      query heads per key/value head (default 1): K and V head h // group
    softcap    softcap * tanh(scores / softcap) before the mask (default 0: none)
A row whose mask is -inf at every key gives zeros (ONNX Attention's fully-masked rows).
"""
from __future__ import annotations

import math

from ..errors import ModelError
from ..ir import Graph, Lowering, Node
from ..ir.symbolic import as_dim
from .common import require_dtype
from .registry import OpDef, register

DOMAIN = "mlcc"
PAD = 16                       # MLCC_ATTENTION_PAD in attention.h
SLICES = 4                     # MLCC_ATTENTION_SLICES: threads of a pool that share one attention


def scratch_floats(sk: int, d: int) -> int:
    """The kernel's scratch: per thread (SLICES of them), K transposed ([d][sk] padded) and 4
    rows of scores."""
    skp = (sk + PAD - 1) // PAD * PAD
    return SLICES * (d + 4) * skp


@register("Attention", domain=DOMAIN)
class Attention(OpDef):
    attributes = {k: None for k in ("dims", "q_strides", "k_strides", "v_strides",
                                     "mask_strides", "out_strides", "out_shape", "scale",
                                     "dv", "group", "softcap")}

    def check(self, node: Node) -> list[str]:
        # Only reached for nodes read from a model file: the pass's nodes are made after the
        # checks of infer_and_fold, and their attributes are mlcc's own, not a model's.
        return ["mlcc.Attention is made by mlcc's fuse_attention pass; a model may not use it"]

    def infer(self, node, ins, g):
        require_dtype(node, [v for v in ins if v is not None], ["float32"])
        batch, heads, sq, _, d = node.attrs["dims"]
        dv = node.attrs.get("dv", d)
        shape = tuple(node.attrs["out_shape"])
        if batch * heads * sq * dv != math.prod(shape):
            raise ModelError(f"attention output {list(shape)} does not hold "
                             f"{batch}x{heads}x{sq}x{dv} values")
        return [("float32", shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        batch, heads, sq, sk, d = (as_dim(x) for x in node.attrs["dims"])
        lo.call("mlcc_f32_attention", list(node.inputs[:3]) + [node.input(3), node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_attention_params", params={
                    "batch": batch, "heads": heads, "sq": sq, "sk": sk, "d": d,
                    "dv": as_dim(node.attrs.get("dv", d)),
                    "group": int(node.attrs.get("group", 1)),
                    **{f"{w}_strides": [as_dim(s) for s in node.attrs[f"{w}_strides"]]
                       for w in ("q", "k", "v", "mask", "out")},
                    "scale": float(node.attrs["scale"]),
                    "softcap": float(node.attrs.get("softcap", 0.0))},
                scratch_bytes=4 * scratch_floats(sk, d), pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        batch, heads, sq, sk, d = (as_dim(x) for x in node.attrs["dims"])
        return batch * heads * sq * sk * (2 * d + 2 * as_dim(node.attrs.get("dv", d)) + 5)
