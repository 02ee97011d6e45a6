"""Loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12 and later),
on one kernel (runtime_c/kernels/loss.h).

Both take scores [N, C] or [N, C, d1, ..., dk] (the class axis second) and integer targets
[N] or [N, d1, ..., dk]; an optional per-class weight [C], `ignore_index` and `reduction`
(none, sum, mean: the sum divided by the sum of the weights of the targets not ignored).
SoftmaxCrossEntropyLoss is LogSoftmax along the class axis (its optional second output, the
log probabilities) and then NegativeLogLikelihoodLoss, as its ONNX function body says: the
LogSoftmax lowers through its own OpDef. A target outside [0, C) that is not ignored is a
run-time status (MLCC_ERR_INDEX_OUT_OF_RANGE), never a read out of bounds.
"""
from __future__ import annotations

import math

from ..errors import ModelError
from ..ir import Enum, Lowering, Node
from .common import require_dtype
from .registry import OpDef, lookup, register

REDUCTIONS = {"none": "MLCC_LOSS_NONE", "sum": "MLCC_LOSS_SUM", "mean": "MLCC_LOSS_MEAN"}


def _reduction(node: Node) -> str:
    r = node.attr("reduction", "mean")
    return r.decode() if isinstance(r, bytes) else r


class _Loss(OpDef):
    attributes = {"ignore_index": None, "reduction": lambda r: (
        (r.decode() if isinstance(r, bytes) else r) in REDUCTIONS)}

    def infer(self, node, ins, g):
        x, target, weight = ins[0], ins[1], ins[2] if len(ins) > 2 else None
        require_dtype(node, [x, weight], ["float32"])
        if target.dtype not in ("int32", "int64"):
            raise ModelError(f"target {target.name!r} must be int32 or int64, not "
                             f"{target.dtype}")
        if len(x.shape) < 2:
            raise ModelError(f"input {list(x.shape)} must have a class axis (rank >= 2)")
        if tuple(target.shape) != (x.shape[0],) + tuple(x.shape[2:]):
            raise ModelError(f"target {list(target.shape)} does not match input "
                             f"{list(x.shape)} (expected [N, d1, ..., dk])")
        if weight is not None and tuple(weight.shape) != (x.shape[1],):
            raise ModelError(f"weight {list(weight.shape)} is not [{x.shape[1]}]")
        loss = tuple(target.shape) if _reduction(node) == "none" else ()
        return [("float32", loss)] + [("float32", tuple(x.shape))] * (len(node.outputs) - 1)

    def emit_nll(self, node: Node, lo: Lowering, log_prob: str) -> None:
        """The NegativeLogLikelihoodLoss kernel on `log_prob` (the node's scores or their
        LogSoftmax) into the node's first output."""
        x, target = lo.value(log_prob), lo.value(node.inputs[1])
        suffix = "i32" if target.dtype == "int32" else "i64"
        ignore = node.attr("ignore_index")
        lo.call(f"mlcc_f32_nll_loss__{suffix}",
                [log_prob, node.inputs[1], node.input(2), node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_nll_loss_params",
                params={"n": x.shape[0], "c": x.shape[1], "d": math.prod(x.shape[2:]),
                        "ignore_index": int(ignore) if ignore is not None else 0,
                        "has_ignore": int(ignore is not None),
                        "reduction": Enum(REDUCTIONS[_reduction(node)])},
                returns_status=True)

    def flops(self, node, g):
        return 2 * g.values[node.inputs[1]].numel


@register("NegativeLogLikelihoodLoss", since=12)
class NegativeLogLikelihoodLoss(_Loss):
    def lower(self, node: Node, lo: Lowering) -> None:
        self.emit_nll(node, lo, node.inputs[0])


@register("SoftmaxCrossEntropyLoss", since=12)
class SoftmaxCrossEntropyLoss(_Loss):
    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        log_prob = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
        if not log_prob:
            log_prob = lo.temp(f"{node.name}.log_prob", "float32", x.shape)
        # LogSoftmax along the class axis, lowered by its own definition
        softmax = Node(f"{node.name}/log_softmax", "LogSoftmax", [node.inputs[0]], [log_prob],
                       {"axis": 1}, version=13)
        lookup(softmax).lower(softmax, lo)
        self.emit_nll(node, lo, log_prob)

    def flops(self, node, g):
        return 4 * g.values[node.inputs[0]].numel + super().flops(node, g)
