"""A readable text form of the graph, for --dump-ir and for error messages."""
from __future__ import annotations

from .graph import Graph, Value


def format_type(v: Value | None) -> str:
    if v is None:
        return "?"
    dims = "?" if v.shape is None else "x".join(str(d) for d in v.shape) or "scalar"
    return f"{v.dtype or '?'}[{dims}]"


def format_graph(g: Graph, title: str = "") -> str:
    lines = [f"graph {g.name} (opset {g.opset}){' after ' + title if title else ''}"]
    for name in g.inputs:
        lines.append(f"  input  {name}: {format_type(g.values.get(name))}")
    consts = sum(1 for v in g.values.values() if v.is_const)
    lines.append(f"  {consts} constants")
    for n in g.nodes:
        ins = ", ".join(_arg(g, i) for i in n.inputs)
        outs = ", ".join(f"{o}: {format_type(g.values.get(o))}" for o in n.outputs)
        fused = f" fused[{', '.join(n.fused)}]" if n.fused else ""
        attrs = "".join(f" {k}={_short(v)}" for k, v in sorted(n.attrs.items()))
        lines.append(f"  {outs} = {n.op_type}({ins}){attrs}  # {n.name}{fused}")
    for name in g.outputs:
        lines.append(f"  output {name}: {format_type(g.values.get(name))}")
    return "\n".join(lines) + "\n"


def _arg(g: Graph, name: str) -> str:
    if not name:
        return "-"
    v = g.values.get(name)
    return f"const {name}" if v is not None and v.is_const else name


def _short(v) -> str:
    if isinstance(v, Graph):        # a subgraph attribute (If's branches, Loop's body)
        return f"<graph {v.name}: {len(v.nodes)} nodes>"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
