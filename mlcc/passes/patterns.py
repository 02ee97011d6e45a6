"""Matching shared by the folding passes (not a pass itself)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..ir import Graph, Node


def constant_operands(g: Graph, node: Node, producers: dict, consumers: dict, outputs: set,
                      producer_types: set[str], commutative: bool
                      ) -> Iterator[tuple[str, Node, np.ndarray]]:
    """For a binary node y (op) d with d a float32 constant and y the only use of the single
    output of an unfused producer of one of producer_types, yields (y, producer, d).
    Non-commutative ops (Sub, Div) only match y on the left."""
    if node.domain != "" or len(node.inputs) != 2:
        return
    for k in ((0, 1) if commutative else (0,)):
        y, d_name = node.inputs[k], node.inputs[1 - k]
        prod, d = producers.get(y), g.const(d_name)
        if prod is None or d is None or d.dtype != np.float32:
            continue
        if prod.op_type not in producer_types or prod.domain != "" or prod.attrs.get("_act"):
            continue
        if y in outputs or len(consumers.get(y, [])) != 1 or len(prod.outputs) != 1:
            continue
        yield y, prod, d
