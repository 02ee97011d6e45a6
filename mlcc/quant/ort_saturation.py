"""onnxruntime's uint8 x int8 products saturate on x86 CPUs without VNNI; the reference model
that avoids it, for `mlcc verify` and the tests.

On AVX2 (a Zen 3, a Haswell to Alder Lake without AVX-VNNI in onnxruntime's build), MLAS
multiplies uint8 activations by int8 weights with vpmaddubsw, which adds each pair of
products into an int16 and saturates it: 255 * 127 * 2 = 64770 becomes 32767. onnxruntime
documents this (its `reduce_range` option quantizes weights to 7 bits to stay clear of it).
mlcc's integer kernels sum every product exactly, so on such a CPU they disagree with
onnxruntime wherever a pair of codes is large, by up to hundreds of codes: onnxruntime is
the one that is wrong there.

uint8 x uint8 products take another MLAS path (operands widened to int16, vpmaddwd) that is
exact. A weight w with zero point z, both int8, has the same real value as the uint8 weight
w + 128 with zero point z + 128, so `unsaturated` rewrites the int8 weight initializers of
the integer products (and of the DequantizeLinear nodes that onnxruntime fuses into them)
that way: the same model, computed exactly by onnxruntime. `reference_model` applies it only
where this onnxruntime saturates (`saturates`, a 1 x 2 product tried once per process).
"""
from __future__ import annotations

import functools

import numpy as np

# op type -> ((weight input, its zero point input), ...): the int8 operands an integer product
# multiplies by the activations' uint8 codes (the zero point: -1 where absent means 0)
WEIGHT_INPUTS = {
    "MatMulInteger": ((1, 3),),
    "ConvInteger": ((1, 3),),
    "QLinearConv": ((3, 5),),
    "QLinearMatMul": ((3, 5),),
    "DequantizeLinear": ((0, 2),),
    # com.microsoft
    "QGemm": ((3, 5),),
    "MatMulIntegerToFloat": ((1, 5),),
    "DynamicQuantizeMatMul": ((1, 3),),
    "DynamicQuantizeLSTM": ((1, 9), (2, 11)),
}
# the activation operand of the products above: a product whose activations are int8 codes
# (s8 x s8) takes another MLAS path and is left alone; DequantizeLinear has none
ACTIVATION_INPUT = {"MatMulInteger": 0, "ConvInteger": 0, "QLinearConv": 0,
                    "QLinearMatMul": 0, "QGemm": 0, "MatMulIntegerToFloat": 0}


@functools.lru_cache(maxsize=1)
def saturates() -> bool:
    """Whether this onnxruntime's MatMulInteger of uint8 by int8 saturates pairs of products
    (255 * 127 + 255 * 127 does not fit an int16) on this CPU."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    b = np.full((2, 1), 127, np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])],
        [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"a": np.full((1, 2), 255, np.uint8)})
    return int(y.reshape(-1)[0]) != 255 * 127 * 2


def unsaturated(model):
    """A copy of `model` (an onnx.ModelProto) whose int8 weight initializers of integer
    products and DequantizeLinear nodes are uint8 with the zero point moved by 128: the same
    real values, on onnxruntime's exact uint8 x uint8 path. Nodes of other graphs (If and Loop
    bodies) are left as they are; the model itself when nothing changes."""
    import onnx
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    dtypes = {v.name: v.type.tensor_type.elem_type
              for v in [*graph.input, *graph.value_info]}
    for t in graph.initializer:
        dtypes[t.name] = t.data_type
    shifted: dict[str, str] = {}       # int8 initializer -> its uint8 copy
    new_inits = []
    edits = []                         # (node index, input index, new name)

    def shifted_copy(name: str, like: str | None = None) -> str:
        """The uint8 initializer of int8 `name` + 128 (of zeros shaped as `like` when name is
        empty: an absent zero point)."""
        key = name or f"zero:{like}"
        if key not in shifted:
            if name:
                values = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
            else:
                values = np.full(numpy_helper.to_array(inits[like]).shape, 128, np.int16)
            base = name or f"{like}_zero_point"
            new = f"{base}__uint8"
            while new in inits or new in dtypes:
                new += "_"
            new_inits.append(numpy_helper.from_array(values.astype(np.uint8), new))
            shifted[key] = new
        return shifted[key]

    for i, node in enumerate(graph.node):
        slots = WEIGHT_INPUTS.get(node.op_type)
        if not slots:
            continue
        act = ACTIVATION_INPUT.get(node.op_type)
        if act is not None and len(node.input) > act and \
                dtypes.get(node.input[act]) == TensorProto.INT8:
            continue
        for w_at, zp_at in slots:
            w = node.input[w_at] if len(node.input) > w_at else ""
            if w not in inits or inits[w].data_type != TensorProto.INT8:
                continue
            zp = node.input[zp_at] if len(node.input) > zp_at else ""
            if zp and (zp not in inits or inits[zp].data_type != TensorProto.INT8):
                continue
            if not zp:
                # an absent zero point is 0, per tensor (MatMulInteger, DynamicQuantizeLSTM's
                # are required); DequantizeLinear's is shaped as its scale
                like = node.input[1] if node.op_type == "DequantizeLinear" else None
                if like is not None and like not in inits:
                    continue
                zp_new = shifted_copy("", like) if like else _scalar_zero(new_inits, shifted)
            else:
                zp_new = shifted_copy(zp)
            edits.append((i, w_at, shifted_copy(w)))
            edits.append((i, zp_at, zp_new))
    if not edits:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, at, name in edits:
        node = out.graph.node[i]
        while len(node.input) <= at:
            node.input.append("")
        node.input[at] = name
    out.graph.initializer.extend(new_inits)
    used = _names_used(out.graph)
    kept = [t for t in out.graph.initializer if t.name in used or t.name not in shifted]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    return out


def _names_used(graph) -> set[str]:
    """Every name a node of `graph` or of its subgraphs reads, and the graph's outputs."""
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g, *attr.graphs] if attr.HasField("g") else attr.graphs:
                used |= _names_used(sub)
    return used


def _scalar_zero(new_inits: list, shifted: dict) -> str:
    from onnx import numpy_helper
    if "zero:" not in shifted:
        new_inits.append(numpy_helper.from_array(np.array(128, np.uint8), "zero_point__uint8"))
        shifted["zero:"] = "zero_point__uint8"
    return shifted["zero:"]


def reference_model(model):
    """The model onnxruntime should run as mlcc's reference: `unsaturated(model)` where this
    onnxruntime saturates its uint8 x int8 products, else the model itself."""
    return unsaturated(model) if saturates() else model
