"""Invariants of a graph between passes: every name defined once, before use, with a type."""
from __future__ import annotations

from .graph import Graph


def check_graph(g: Graph, *, static: bool = False) -> list[str]:
    """Returns the broken invariants (empty when the graph is well formed).

    With static=True every value must also have a dtype and a fully static shape."""
    problems: list[str] = []
    defined = set(g.inputs) | {k for k, v in g.values.items() if v.is_const}
    for n in g.nodes:
        for i in n.inputs:
            if i and i not in defined:
                problems.append(f"node {n.name!r} reads {i!r} before it is defined")
        for o in n.outputs:
            if not o:
                continue
            if o in defined:
                problems.append(f"{o!r} is defined twice (again by node {n.name!r})")
            defined.add(o)
            if o not in g.values:
                problems.append(f"{o!r} (output of {n.name!r}) has no value entry")
    for o in g.outputs:
        if o not in defined:
            problems.append(f"graph output {o!r} is never defined")
    if static:
        for name in defined:
            v = g.values.get(name)
            if v is not None and (v.dtype is None or not v.is_static):
                problems.append(f"{name!r} has no static type")
    return problems
