"""The model with every float32 tensor made float64, for `mlcc verify`'s second look at float
outputs that differ from onnxruntime's (api._explain_precision): evaluated by onnx.reference,
it tells which engine's float32 rounding strayed. Ill-conditioned models need it: a LayerNorm
written out as E[x^2] - E[x]^2 (magika's) cancels, and the two engines' sums in different
orders then differ by more than the tolerance, with mlcc's the nearer to the float64 value."""
from __future__ import annotations

import copy

import numpy as np

# Operators whose float64 evaluation would not be the model: quantizers round at a scale that
# float64 moves (verify's rounding-tie look, quant/ties.py, handles those models).
_QUANTIZED = ("Quantize", "Integer", "QLinear")


def refusal(model) -> str:
    """Why the model has no float64 evaluation (onnx.ModelProto), or "" if it has one."""
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            return f"node {node.name or node.output[0]!r} is of domain {node.domain!r}"
        if any(word in node.op_type for word in _QUANTIZED):
            return f"node {node.name or node.output[0]!r} ({node.op_type}) quantizes"
    return ""


def to_float64(model):
    """A copy of the onnx.ModelProto computing in float64 where it computed in float32:
    initializers, constants, graph inputs, outputs and value types, Cast and the dtype of
    generators, in every subgraph. Other types (integers, float16) stay as they are."""
    from onnx import TensorProto

    out = copy.deepcopy(model)
    _graph(out.graph, TensorProto.FLOAT, TensorProto.DOUBLE)
    return out


def feeds_float64(feeds: dict) -> dict:
    """The feeds with float32 arrays made float64."""
    return {k: (np.asarray(v, np.float64) if np.asarray(v).dtype == np.float32 else v)
            for k, v in feeds.items()}


def _tensor(t, f32: int):
    from onnx import numpy_helper

    if t.data_type != f32:
        return t
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)


def _types(values, f32: int, f64: int) -> None:
    for v in values:
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == f32:
            v.type.tensor_type.elem_type = f64


def _graph(g, f32: int, f64: int) -> None:
    from onnx import AttributeProto, helper, numpy_helper

    for t in g.initializer:
        t.CopyFrom(_tensor(t, f32))
    for values in (g.input, g.output, g.value_info):
        _types(values, f32, f64)
    for node in g.node:
        for a in list(node.attribute):
            if a.type == AttributeProto.TENSOR:
                a.t.CopyFrom(_tensor(a.t, f32))
            elif a.type == AttributeProto.GRAPH:
                _graph(a.g, f32, f64)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _graph(sub, f32, f64)
            elif a.type == AttributeProto.INT and a.name in ("to", "dtype") and a.i == f32:
                a.i = f64      # Cast, and EyeLike / Random* generators
            elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                value = np.array(a.f if a.name == "value_float" else list(a.floats), np.float64)
                node.attribute.remove(a)
                node.attribute.append(helper.make_attribute("value",
                                                            numpy_helper.from_array(value)))
