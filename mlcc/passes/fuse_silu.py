"""SiLU written as Mul(x, Sigmoid(x)) becomes one Swish node (alpha = 1).

Needs: static types; constants folded.
Guarantees: no Mul reads both a float32 value x and Sigmoid(x) when that Sigmoid's output has
no other reader and is not a graph output: the pair is one Swish(x) node, named after the Mul
and writing its output, which fuse_activations can then fold into the Conv, Gemm, MatMul or
ConvTranspose that produces x (YOLOv8 has one after every convolution). A Sigmoid whose output
is read elsewhere stays as it is.
"""
from __future__ import annotations

from ..ir import Graph, Node

SWISH_SINCE = 24    # the ONNX opset that defines Swish


def fuse_silu(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    outputs = set(g.outputs)
    removed = set()
    for i, mul in enumerate(g.nodes):
        if mul.op_type != "Mul" or mul.domain != "" or len(mul.inputs) != 2:
            continue
        for k in (0, 1):
            sig = producers.get(mul.inputs[k])
            x = mul.inputs[1 - k]
            if (sig is None or sig.op_type != "Sigmoid" or sig.domain != "" or id(sig) in removed
                    or sig.inputs[0] != x or g.values[x].dtype != "float32"):
                continue
            if sig.outputs[0] in outputs or len(consumers.get(sig.outputs[0], [])) != 1:
                continue
            g.nodes[i] = Node(mul.name, "Swish", [x], list(mul.outputs), {"alpha": 1.0},
                              version=SWISH_SINCE,
                              fused=sig.fused + [f"{sig.name}:Sigmoid"] + mul.fused)
            removed.add(id(sig))
            break
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
