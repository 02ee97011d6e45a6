"""BERT-like ONNX models through onnxruntime's transformer optimizer, as a user would run it
(`onnxruntime.transformers.optimizer.optimize_model(..., model_type="bert")`), to get models
with the com.microsoft operators it writes (Attention, SkipLayerNormalization, BiasGelu,
FastGelu, Gelu, FusedMatMul, ...) for tests/test_contrib_ops.py, and to time them against the
original with bench/ab_models.py.

    python tools/transformer_optimizer.py MODEL.onnx OUT.onnx --level 2 [--gelu-approximation]

Levels, as optimize_model's opt_level: 0 the optimizer's fusions alone; 1 and 2 onnxruntime's
basic and extended graph optimizations first (with the optimizers optimize_model disables at
that level), then the fusions; "2-all" extended with none of them disabled (it writes
FusedMatMul into the attention scores, which then stay unfused). optimize_model itself imports
torch for levels 1 and 2 only to read its version; onnxruntime's session writes the same
optimized model without it, so this runs the two steps itself.

`torch_mask` rewrites examples/minilm/minilm.py's attention mask Unsqueeze(mask, [1, 2]) as
torch exports it (two Unsqueezes), the pattern onnxruntime's Attention fusion matches.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LEVELS = ("0", "1", "2", "2-all")
# what optimize_model disables in onnxruntime's own pass at each level (onnxruntime 1.2x)
_DISABLED = {"1": ["ConstantSharing"],
             "2": ["ConstantSharing", "MatMulScaleFusion", "MatMulAddFusion",
                   "MatmulTransposeFusion", "GemmActivationFusion", "BiasSoftmaxFusion"],
             "2-all": ["ConstantSharing"]}


def torch_mask(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every Unsqueeze of a graph input over axes [1, 2] written as two
    Unsqueezes (axes 1, then 2), as torch's exporter writes mask[:, None, None, :]."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    inputs = {i.name for i in g.input}
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    nodes = []
    for n in g.node:
        axes = consts.get(n.input[1]) if n.op_type == "Unsqueeze" and len(n.input) > 1 else None
        if axes is None or n.input[0] not in inputs or axes.tolist() != [1, 2]:
            nodes.append(n)
            continue
        mid = f"{n.output[0]}.axis1"
        for axis in (1, 2):
            g.initializer.append(numpy_helper.from_array(np.array([axis], np.int64),
                                                         f"{n.output[0]}.axes{axis}"))
        nodes += [helper.make_node("Unsqueeze", [n.input[0], f"{n.output[0]}.axes1"], [mid],
                                   name=f"{n.name}_1"),
                  helper.make_node("Unsqueeze", [mid, f"{n.output[0]}.axes2"], [n.output[0]],
                                   name=f"{n.name}_2")]
    del g.node[:]
    g.node.extend(nodes)
    return model


def optimize(src: Path, dst: Path, *, level: str = "0", gelu_approximation: bool = False,
             num_heads: int = 12, hidden_size: int = 384) -> Path:
    """Writes `src` optimized by onnxruntime's transformer optimizer (model_type "bert") to
    `dst` and returns it."""
    import onnxruntime as ort
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    if level not in LEVELS:
        raise ValueError(f"level {level!r} is not one of {', '.join(LEVELS)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(src)
        if level != "0":
            opts = ort.SessionOptions()
            opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                                             if level == "1" else
                                             ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
            path = opts.optimized_model_filepath = str(Path(tmp) / "ort.onnx")
            ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=_DISABLED[level])
        options = FusionOptions("bert")
        options.enable_gelu_approximation = gelu_approximation
        m = optimize_model(path, model_type="bert", num_heads=num_heads,
                           hidden_size=hidden_size, opt_level=0,
                           optimization_options=options)
        m.save_model_to_file(str(dst))
    return Path(dst)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--level", choices=LEVELS, default="0")
    ap.add_argument("--gelu-approximation", action="store_true")
    ap.add_argument("--torch-mask", action="store_true",
                    help="write the mask's Unsqueeze(axes=[1, 2]) as torch does first")
    ap.add_argument("--num-heads", type=int, default=12)
    ap.add_argument("--hidden-size", type=int, default=384)
    a = ap.parse_args(argv)
    src = a.model
    with tempfile.TemporaryDirectory() as tmp:
        if a.torch_mask:
            src = Path(tmp) / "torch_mask.onnx"
            onnx.save(torch_mask(onnx.load(str(a.model))), str(src))
        optimize(src, a.out, level=a.level, gelu_approximation=a.gelu_approximation,
                 num_heads=a.num_heads, hidden_size=a.hidden_size)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
