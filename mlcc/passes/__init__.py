"""Graph passes: each a pure function Graph -> Graph; the pipeline is a list."""
from __future__ import annotations

from typing import Callable

from ..ir import Graph, format_graph
from .dead_code import eliminate_dead_code
from .fold_batchnorm import fold_batchnorm
from .fold_bias_add import fold_bias_add
from .fold_scale_mul import fold_scale_mul
from .expand_contrib import expand_contrib
from .fuse_activations import fuse_activations
from .fuse_attention import fuse_attention
from .fuse_gelu import fuse_gelu
from .fuse_hardswish import fuse_hardswish
from .fuse_integer_matmul import fuse_integer_matmul
from .fuse_layernorm import fuse_layernorm
from .fuse_matmul_bias import fuse_matmul_bias
from .fuse_residual_add import fuse_residual_add
from .fuse_silu import fuse_silu
from .infer_and_fold import infer_and_fold
from .remove_noops import remove_noops

Pass = Callable[[Graph], Graph]


def optimize_bodies(g: Graph) -> Graph:
    """Runs the passes after infer_and_fold on the body of every Loop and Scan prepared to run
    at run time (passes/control_flow.py gave it static types and the "_outer" attribute): the
    body is a graph of its own, so no fusion crosses the loop's edge. Nested ones are reached
    by recursion."""
    if not any("_outer" in n.attrs for n in g.nodes):
        return g
    g = g.copy()
    for n in g.nodes:
        if "_outer" in n.attrs:
            n.attrs["body"] = run_pipeline(n.attrs["body"], PIPELINE[1:])
    return g


PIPELINE: list[Pass] = [
    infer_and_fold,
    eliminate_dead_code,
    remove_noops,
    fuse_integer_matmul,
    expand_contrib,
    fuse_layernorm,
    fold_scale_mul,
    fold_bias_add,
    fuse_matmul_bias,
    fuse_attention,
    fold_batchnorm,
    fuse_silu,
    fuse_hardswish,
    fuse_gelu,
    fuse_residual_add,
    fuse_activations,
    eliminate_dead_code,
    optimize_bodies,
]

# The int8 rewrite (mlcc.quant) quantizes Conv nodes whole: a QConv has no residual input.
INT8_PIPELINE: list[Pass] = [p for p in PIPELINE if p is not fuse_residual_add]


def run_pipeline(g: Graph, passes: list[Pass] | None = None,
                 dump: Callable[[str], None] | None = None) -> Graph:
    """Runs the passes in order; `dump` receives the printed graph after each one."""
    if dump is not None:
        dump(format_graph(g, "import"))
    for p in PIPELINE if passes is None else passes:
        g = p(g)
        if dump is not None:
            dump(format_graph(g, p.__name__))
    return g


__all__ = ["PIPELINE", "INT8_PIPELINE", "run_pipeline", "optimize_bodies", "infer_and_fold", "eliminate_dead_code", "remove_noops",
           "expand_contrib",
           "fold_scale_mul", "fold_bias_add", "fold_batchnorm", "fuse_silu", "fuse_hardswish",
           "fuse_gelu", "fuse_matmul_bias", "fuse_attention", "fuse_layernorm",
           "fuse_residual_add", "fuse_activations", "fuse_integer_matmul"]
