"""float16, bfloat16 and float64 computed in float32 (docs/conformance.md, "float16, bfloat16
and float64").

Called by infer_and_fold for a node whose OpDef refuses its types (most kernels are float32
only) when it reads one of the WIDE types: the node is replaced by the same node on float32
(each WIDE run-time input cast to float32, each WIDE constant converted at compile time), and
each of its outputs that the operator would give in a WIDE type is cast back to that type
(ONNX's own type inference of the original node says which). Operators that have kernels for
these types (Cast, data movement, comparisons of float64) keep them, except data movement
between rewritten nodes, which moves their float32 values instead (reads_float32).

Between two such nodes the value stays in float32: a node that reads a WIDE value made by
this rewrite reads its float32 source, so a float16 graph computes in float32 from its inputs
to its outputs (the Casts left unread are dead code) and rounds to float16 only there. That is
more precise than rounding every operator's result to float16, as onnxruntime does, so the two
differ by the rounding onnxruntime accumulates. Except before the operators of STEPWISE, whose
result jumps where the input crosses a step (Floor of 2.9998 or of 3.0, its float16
rounding): they read the value rounded to its type, as onnxruntime's do, and since float16 and
bfloat16 values are exact in float32 their results are then exact. float64 in float32 keeps
about 7 significant digits (a relative error of 6e-8 per value, far within the ONNX node
tests' rtol of 1e-3) and float32's range: a float64 constant beyond it is refused, and so is
any float64 input of a STEPWISE operator (computed in float32 its result could jump a step).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, defs, helper, numpy_helper, shape_inference

from ..errors import UnsupportedError
from ..ir import Graph, Node, Value

WIDE = ("float16", "bfloat16", "float64")
# Operators whose output changes by a step where the input crosses one (a rounding, a
# comparison, an index of the largest): they read float16 values rounded to float16.
STEPWISE = {"Floor", "Ceil", "Round", "Sign", "Mod", "ArgMax", "ArgMin", "TopK", "Hardmax",
            "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsInf", "NonZero",
            "Unique", "Cast", "CastLike", "BitShift", "OneHot", "Compress"}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def reads_float32(node: Node, ins: list[Value | None], f32_of: dict[str, str]) -> bool:
    """Whether to compute the node in float32 although it may have a kernel for its WIDE
    type (data movement: Reshape, Concat, ...): every WIDE run-time input it reads was
    computed in float32 here, so it moves those float32 values instead of their rounding."""
    wide = [(n, v) for n, v in zip(node.inputs, ins)
            if v is not None and v.dtype in WIDE and v.const is None]
    return (bool(wide) and node.op_type not in STEPWISE and not node.subgraphs()
            and all(n in f32_of for n, _ in wide))


def widen(g: Graph, node: Node, ins: list[Value | None], f32_of: dict[str, str]
          ) -> list[Node] | None:
    """The nodes that compute `node` in float32, or None when it reads no WIDE type (or has
    subgraphs). `f32_of` maps WIDE values to a float32 value of theirs made earlier (the
    output of a node computed in float32, before its rounding to the WIDE type; a cast of a
    run-time value; a converted constant); it is updated with this node's."""
    if node.subgraphs() or not any(v is not None and v.dtype in WIDE for v in ins):
        return None
    out_types = _onnx_output_types(node, ins)
    nodes: list[Node] = []
    inputs = []
    for k, (name, v) in enumerate(zip(node.inputs, ins)):
        if v is None or v.dtype not in WIDE:
            inputs.append(name)
            continue
        if v.dtype == "float64" and node.op_type in STEPWISE:
            raise UnsupportedError(
                f"float64 input {name!r}: mlcc computes float64 in float32, and there the "
                f"result of {node.op_type} can jump a step (a different result, not a less "
                f"precise one)")
        if v.const is not None:
            if name not in f32_of:
                f32_of[name] = _const_f32(g, name, v)
            inputs.append(f32_of[name])
        elif name in f32_of and node.op_type not in STEPWISE:
            inputs.append(f32_of[name])
        else:
            cast = g.fresh_name(f"{name}.float32")
            g.values[cast] = Value(cast)
            nodes.append(Node(f"{node.name}/to_float32_{k}", "Cast", [name], [cast],
                              {"to": TensorProto.FLOAT}, version=13))
            inputs.append(cast)
            f32_of.setdefault(name, cast)   # a graph input's, read by the nodes after it
    outputs, back = [], []
    for k, name in enumerate(node.outputs):
        wanted = out_types.get(name)
        if not name or wanted not in WIDE:
            outputs.append(name)
            continue
        inner = g.fresh_name(f"{name}.float32")
        g.values[inner] = Value(inner)
        outputs.append(inner)
        back.append(Node(f"{node.name}/to_{wanted}_{k}", "Cast", [inner], [name],
                         {"to": helper.np_dtype_to_tensor_dtype(np.dtype(wanted))},
                         version=13))
        f32_of[name] = inner
    body = Node(node.name, node.op_type, inputs, outputs, dict(node.attrs), node.domain,
                node.version, list(node.fused), node.guard)
    return nodes + [body] + back


def _const_f32(g: Graph, name: str, v: Value) -> str:
    arr = np.asarray(v.const)
    if v.dtype == "float64":
        finite = np.isfinite(arr)
        if np.any(np.abs(arr[finite]) > _FLOAT32_MAX):
            raise UnsupportedError(f"float64 constant {name!r} holds values beyond float32's "
                                   f"range (mlcc computes float64 in float32)")
    return g.add_const(f"{name}.float32", arr.astype(np.float32))


def _onnx_output_types(node: Node, ins: list[Value | None]) -> dict[str, str]:
    """The output types ONNX's type inference gives the node (numpy dtype names); those it
    cannot infer take the type of the node's first WIDE input."""
    first = next(v.dtype for v in ins if v is not None and v.dtype in WIDE)
    types = {o: first for o in node.outputs if o}
    try:
        schema = defs.get_schema(node.op_type, node.version, node.domain)
        attrs = {k: (numpy_helper.from_array(a) if isinstance(a, np.ndarray) else a)
                 for k, a in node.attrs.items() if not k.startswith("_")}
        proto = helper.make_node(node.op_type, [i or "" for i in node.inputs],
                                 list(node.outputs), domain=node.domain, **attrs)
        in_types = {i: helper.make_tensor_type_proto(
            helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)), None)
            for i, v in zip(node.inputs, ins) if i and v is not None}
        inferred = shape_inference.infer_node_outputs(schema, proto, in_types)
    except Exception:       # no schema, or ONNX cannot infer it: keep the first WIDE type
        return types
    for o, t in inferred.items():
        if t.HasField("tensor_type") and t.tensor_type.elem_type:
            types[o] = np.dtype(helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type)).name
    return types
