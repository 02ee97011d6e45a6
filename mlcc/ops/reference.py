"""onnx.reference (the ONNX reference implementation) with the operators it gets wrong
replaced. Whatever mlcc evaluates with it (constant folding, Loops run at compile time,
`mlcc verify`'s float64 look) builds its evaluator here."""
from __future__ import annotations

import functools

import numpy as np


def evaluator(model):
    """A ReferenceEvaluator of the onnx.ModelProto with the fixed operators."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model, new_ops=_fixed_ops())


@functools.cache
def _fixed_ops() -> list:
    from onnx.reference.op_run import OpRun

    class GlobalMaxPool(OpRun):
        """The maximum over every axis after the first two. onnx 1.23's takes axes
        (ndim - 2, ndim - 1), which are the channels and the length of a 3-D input (magika's
        Conv1d features: [1, 256, 512] gave [1, 1] and the Squeeze after it failed)."""
        op_domain = ""

        def _run(self, x):
            return (np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)

    class GatherElements(OpRun):
        """np.take_along_axis with negative indices counted from the end. onnx 1.23's goes
        through np.choose, which takes at most 64 choices (numpy 2): an axis longer than that
        failed, or on 2-D inputs returned one element per row (BERT's token type ids as the
        dynamo exporter writes them: a [1, 512] buffer gathered by 16 positions)."""
        op_domain = ""

        def _run(self, data, indices, axis=0):
            axis = axis % data.ndim if data.ndim else 0
            size = data.shape[axis]
            if indices.size and (indices.min() < -size or indices.max() >= size):
                raise ValueError(f"GatherElements index out of range [-{size}, {size})")
            index = np.where(indices < 0, indices + size, indices)
            return (np.take_along_axis(data, index.astype(np.int64), axis=axis),)

    return [GlobalMaxPool, GatherElements]
