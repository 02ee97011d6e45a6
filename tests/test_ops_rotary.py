"""RotaryEmbedding (opset 23) against onnxruntime (onnx.reference where onnxruntime lacks
it): both layouts, interleaved or halves, a partial rotary dimension, with and without
position ids, and an out-of-range position id as a status."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import RuntimeStatusError
from util import check_model, compile_and_run, make_model, rand


def _case(shape, half, with_pos, max_pos=11, **attrs):
    b, s = shape[0], shape[2] if len(shape) == 4 else shape[1]
    inputs = {"x": rand(*shape)}
    if with_pos:
        cache = (max_pos, half)
        pos = np.random.default_rng(3).integers(0, max_pos, (b, s)).astype(np.int64)
    else:
        cache = (b, s, half)
    inputs["cos"] = np.cos(rand(*cache, seed=1)).astype(np.float32)
    inputs["sin"] = np.sin(rand(*cache, seed=1)).astype(np.float32)
    if with_pos:
        inputs["pos"] = pos
    node = helper.make_node("RotaryEmbedding", list(inputs), ["y"], name="rotary_node", **attrs)
    return make_model([node], inputs, ["y"], opset=23), inputs


@pytest.mark.parametrize("shape,attrs,half", [
    ((2, 3, 5, 8), {}, 4),
    ((1, 3, 7, 6), {"interleaved": 1}, 3),
    ((2, 2, 5, 10), {"rotary_embedding_dim": 4}, 2),
    ((2, 5, 12), {"num_heads": 3}, 2),
    ((1, 7, 14), {"num_heads": 7, "interleaved": 1}, 1),
    ((2, 3, 18), {"num_heads": 2, "rotary_embedding_dim": 6, "interleaved": 1}, 3),
])
@pytest.mark.parametrize("with_pos", [False, True])
def test_rotary_embedding(tmp_path, shape, attrs, half, with_pos):
    model, inputs = _case(shape, half, with_pos, **attrs)
    check_model(model, inputs, tmp_path)


def test_rotary_embedding_position_out_of_range_is_a_status(tmp_path):
    model, inputs = _case((1, 2, 3, 4), 2, True)
    inputs["pos"][0, 1] = 11
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, inputs, tmp_path)
