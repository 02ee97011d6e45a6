"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime: ranks 2 to 5 on
prime sizes, every reduction, with and without weights, ignore_index (also negative, and on
a target outside [0, C)), int32 and int64 targets, the log_prob output; a target out of range
at run time is a status, and an unknown reduction is refused by name."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import RuntimeStatusError, UnsupportedError
from util import check_model, compile_and_run, make_model, rand


def _targets(shape, classes, seed, ignore=None, dtype=np.int64):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, classes, shape)
    if ignore is not None:
        t[rng.random(shape) < 0.3] = ignore
    return t.astype(dtype)


def _loss_model(op, x, t, configs, weight=None, log_prob=False):
    """One node per (reduction, ignore_index, weighted) config, all on the same inputs."""
    nodes, outputs = [], []
    for k, (reduction, ignore, weighted) in enumerate(configs):
        attrs = {"reduction": reduction}
        if ignore is not None:
            attrs["ignore_index"] = ignore
        outs = [f"loss{k}"] + ([f"log_prob{k}"] if log_prob else [])
        nodes.append(helper.make_node(op, ["x", "t"] + (["w"] if weighted else []), outs,
                                      name=f"{op}_{k}", **attrs))
        outputs += outs
    feeds = {"x": x, "t": t}
    if weight is not None:
        feeds["w"] = weight
    return make_model(nodes, feeds, outputs, opset=13), feeds


CONFIGS = [(r, ii, w) for r in ("none", "sum", "mean") for ii, w in
           ((None, False), (None, True), ("ii", True), ("ii", False))]


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("shape,ignore", [((7, 5), 2), ((3, 11, 13), -1), ((2, 3, 5, 7), 0),
                                          ((2, 5, 3, 2, 3), 7)])
def test_loss(tmp_path, op, shape, ignore):
    """Every reduction, weighted or not, with and without ignore_index (a class, -1, or 7:
    outside the classes); the log_prob output of SoftmaxCrossEntropyLoss."""
    x = rand(*shape, seed=3)
    if op == "NegativeLogLikelihoodLoss":
        x = np.log(np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)).astype(np.float32)
    t = _targets((shape[0],) + shape[2:], shape[1], 5, ignore,
                 np.int32 if len(shape) == 4 else np.int64)
    # a target outside the classes is valid only where it is ignored
    configs = [(r, ignore if ii else None, w) for r, ii, w in CONFIGS
               if ii or 0 <= ignore < shape[1]]
    model, feeds = _loss_model(op, x, t, configs, weight=rand(shape[1], seed=7, low=0.1,
                                                              high=2.0),
                               log_prob=op == "SoftmaxCrossEntropyLoss")
    check_model(model, feeds, tmp_path)


def test_loss_target_out_of_range_is_a_status(tmp_path):
    x = rand(4, 3)
    t = np.array([0, 2, 3, 1], np.int64)      # 3 is no class of 3, and not ignored
    model, feeds = _loss_model("SoftmaxCrossEntropyLoss", x, t, [("mean", 1, False)])
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, feeds, tmp_path)


def test_loss_refuses_unknown_reduction(tmp_path):
    x, t = rand(4, 3), np.array([0, 2, 1, 1], np.int64)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], name="nll_node",
                            reduction="max")
    model = make_model([node], {"x": x, "t": t}, [], opset=13)
    model.graph.output.extend([helper.make_tensor_value_info("y", 1, [])])
    with pytest.raises(UnsupportedError, match="nll_node.*reduction='max'"):
        compile_and_run(model, {"x": x, "t": t}, tmp_path)
