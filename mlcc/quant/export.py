"""--export-qdq: the calibrated quantization written back into the original ONNX model in QDQ
form, so that onnxruntime or other tools can run and inspect the same quantization.

Every value the integer program holds as uint8 and that exists in the ONNX model gets a
QuantizeLinear -> DequantizeLinear pair with its scale and zero point after its producer (its
readers read the DequantizeLinear). The weights of each quantized Conv / Gemm / MatMul become
int8 initializers with per-channel scales behind a DequantizeLinear, where the model's
initializer is the weight mlcc quantized (within half a step); weights that mlcc's passes
changed first (BatchNormalization folded into them, a scale folded in) stay float, and the
returned notes say which.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError, UnsupportedError
from .rewrite import QuantResult


def export_qdq(model_path: str | Path, out_path: str | Path, qres: QuantResult) -> list[str]:
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(model_path))
    g = m.graph
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise UnsupportedError(f"--export-qdq needs opset 13 or newer (per-channel "
                               f"DequantizeLinear); the model has opset {opset}")
    notes: list[str] = []
    inits = {t.name: t for t in g.initializer}
    new_inits = []
    producers = {o: n for n in g.node for o in n.output}
    graph_inputs = {i.name for i in g.input}
    acts = {v: qres.qparams[v] for v in qres.qnames
            if v in qres.qparams and (v in producers or v in graph_inputs)}

    def const(name, arr):
        new_inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    pairs: dict[str, list] = {}
    rename: dict[str, str] = {}
    for v, qp in acts.items():
        s = const(f"{v}_scale", np.array(qp.scale, np.float32))
        z = const(f"{v}_zero_point", np.array(qp.zero_point, np.uint8))
        q = helper.make_node("QuantizeLinear", [v, s, z], [f"{v}_quantized"],
                             name=f"{v}_QuantizeLinear")
        dq = helper.make_node("DequantizeLinear", [f"{v}_quantized", s, z],
                              [f"{v}_dequantized"], name=f"{v}_DequantizeLinear")
        pairs[v] = [q, dq]
        rename[v] = f"{v}_dequantized"

    # weights
    by_name = {n.name: n for n in g.node}
    wrename: dict[tuple[str, int], str] = {}
    for node_name, (wq, ws) in qres.weights.items():
        n = by_name.get(node_name)
        if n is None or len(n.input) < 2 or n.input[1] not in inits:
            notes.append(f"{node_name}: weights stay float (not an initializer of that node)")
            continue
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        if n.op_type == "Conv":
            q, axis = wq, 0
        elif n.op_type == "Gemm":
            trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
            q, axis = (wq, 0) if trans_b else (wq.T, 1)
        else:
            q, axis = wq.T, 1
        if q.shape != w.shape:
            notes.append(f"{node_name}: weights stay float (shape changed by mlcc's passes)")
            continue
        shape = [1] * q.ndim
        shape[axis] = -1
        back = q.astype(np.float32) * ws.reshape(shape)
        if not np.all(np.abs(back - w) <= ws.reshape(shape) * 0.5 + 1e-7):
            notes.append(f"{node_name}: weights stay float (mlcc quantized them after folding "
                         f"other operators into them)")
            continue
        base = f"{n.input[1]}_{node_name}"
        qn = const(f"{base}_int8", np.ascontiguousarray(q, np.int8))
        sn = const(f"{base}_scale", ws.astype(np.float32))
        zn = const(f"{base}_zero_point", np.zeros(ws.shape, np.int8))
        dq = helper.make_node("DequantizeLinear", [qn, sn, zn], [f"{base}_dequantized"],
                              name=f"{base}_DequantizeLinear", axis=axis)
        pairs.setdefault(f"__weight__{node_name}", []).append(dq)
        wrename[(node_name, 1)] = f"{base}_dequantized"

    nodes = []
    for v in g.input:
        nodes += pairs.get(v.name, [])
    for n in g.node:
        nodes += pairs.get(f"__weight__{n.name}", [])
        for i, name in enumerate(n.input):
            if (n.name, i) in wrename:
                n.input[i] = wrename[(n.name, i)]
            elif name in rename:
                n.input[i] = rename[name]
        nodes.append(n)
        for o in n.output:
            nodes += pairs.get(o, [])
    g.ClearField("node")
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    # float weights now replaced by their int8 forms are no longer read: drop them
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    g.ClearField("initializer")
    g.initializer.extend(keep)
    try:
        onnx.save(m, str(out_path))
    except OSError as exc:
        raise InputError(f"cannot write {out_path}: {exc}") from None
    return notes
