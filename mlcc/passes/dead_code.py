"""Dead code elimination.

Needs: a graph after infer_and_fold (folded values are constants).
Guarantees: every remaining node computes at least one run-time value that a graph output
depends on (or the count of a data-dependent size one of them has); values and constants
nothing reads are dropped.
"""
from __future__ import annotations

from ..ir import Graph


def eliminate_dead_code(g: Graph) -> Graph:
    g = g.copy()
    live = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        computes = [o for o in node.outputs if o and not g.values[o].is_const]
        if any(o in live for o in computes):
            kept.append(node)
            live.update(i for i in node.inputs if i)
            live.update(o for o in node.outputs if o)   # it still writes its unread outputs
            # and the counts of its data-dependent sizes are read (docs/dynamic-outputs.md):
            # their nodes run too (a ConstantOfShape of a count does not read its node)
            live.update(g.values[n].dyn[1] for n in node.inputs + node.outputs
                        if n and g.values[n].dyn is not None)
    g.nodes = kept[::-1]
    live.update(g.inputs)
    g.values = {k: v for k, v in g.values.items() if k in live}
    return g
