"""ONNX Attention (opsets 23-25) against the ONNX reference implementation (which the node
tests were made with) on odd shapes: prime sequence lengths, 3-D and 4-D layouts, GQA ratios
1, 2 and 3 and MQA, value heads of another size, causal masks with a past cache (bottom-right),
float and bool masks broadcast and shorter than the keys, softcap, fully-masked rows (zeros),
qk_matmul_output in every mode, nonpad_kv_seqlen (opset 24) with negative offsets, and the
sliding windows of opset 25; and the refusals."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from util import assert_refused, check_model, make_model, rand

INPUTS = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
OUTPUTS = ["Y", "present_key", "present_value", "qk_matmul_output"]


def attention_model(feeds: dict, n_outputs: int = 1, opset: int = 23, **attrs):
    names = [n if n in feeds else "" for n in INPUTS]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Attention", names, OUTPUTS[:n_outputs], name="attention_node",
                            **attrs)
    return make_model([node], feeds, OUTPUTS[:n_outputs], opset=opset)


def check(tmp_path, feeds, n_outputs=1, opset=23, target="x86", **attrs):
    model = attention_model(feeds, n_outputs, opset, **attrs)
    return check_model(model, feeds, tmp_path, target=target, reference="onnx")


def qkv(b, qh, kvh, sq, skv, d, dv=None, layout=4, past=0):
    dv = dv or d
    if layout == 4:
        feeds = {"Q": rand(b, qh, sq, d), "K": rand(b, kvh, skv, d, seed=1),
                 "V": rand(b, kvh, skv, dv, seed=2)}
    else:
        feeds = {"Q": rand(b, sq, qh * d), "K": rand(b, skv, kvh * d, seed=1),
                 "V": rand(b, skv, kvh * dv, seed=2)}
    if past:
        feeds["past_key"] = rand(b, kvh, past, d, seed=3)
        feeds["past_value"] = rand(b, kvh, past, dv, seed=4)
    return feeds


def heads(layout, qh, kvh):
    return {"q_num_heads": qh, "kv_num_heads": kvh} if layout == 3 else {}


@pytest.mark.parametrize("layout", [3, 4])
@pytest.mark.parametrize("qh,kvh", [(3, 3), (6, 3), (6, 2), (5, 1)])
@pytest.mark.parametrize("causal", [0, 1])
def test_heads_layouts_and_causal(tmp_path, layout, qh, kvh, causal):
    """GQA ratios 1, 2, 3 and MQA, self attention (13 x 13) and cross (7 x 11)."""
    sq, skv = (13, 13) if causal else (7, 11)
    check(tmp_path, qkv(2, qh, kvh, sq, skv, 5, layout=layout), is_causal=causal,
          **heads(layout, qh, kvh))


@pytest.mark.parametrize("layout", [3, 4])
def test_value_heads_of_another_size_and_scale(tmp_path, layout):
    check(tmp_path, qkv(1, 4, 2, 5, 9, 6, dv=3, layout=layout), scale=0.37,
          **heads(layout, 4, 2))


@pytest.mark.parametrize("layout", [3, 4])
@pytest.mark.parametrize("qh,kvh,sq", [(3, 3, 3), (6, 2, 1), (4, 2, 5)])
def test_causal_with_past_and_present(tmp_path, layout, qh, kvh, sq):
    """The causal mask aligned bottom-right (query i sees past + i keys); present read."""
    feeds = qkv(2, qh, kvh, sq, sq, 4, dv=7, layout=layout, past=6)
    check(tmp_path, feeds, n_outputs=3, is_causal=1, **heads(layout, qh, kvh))


@pytest.mark.parametrize("shape,dtype", [
    ((7, 11), "float32"),                # [Sq, T]
    ((2, 1, 7, 11), "float32"),          # per batch
    ((3, 7, 11), "bool"),                # per head (rank 3: heads, q, kv)
    ((2, 3, 1, 11), "bool"),             # per batch and head, every query
    ((7, 8), "float32"),                 # shorter than T: the rest masked
    ((2, 1, 7, 6), "bool"),
])
@pytest.mark.parametrize("causal", [0, 1])
def test_masks(tmp_path, shape, dtype, causal):
    feeds = qkv(2, 3, 3, 7, 11, 4)
    if dtype == "bool":
        mask = np.random.default_rng(5).random(shape) > 0.3
        mask[..., 0] = True
    else:
        mask = rand(*shape, seed=5)
    feeds["attn_mask"] = mask
    if causal and shape[-2] == 1:
        # the reference aligns the causal mask on the mask's query axis; onnxruntime
        # refuses such a mask: refused
        node = helper.make_node("Attention", list(feeds), ["Y"], name="attention_node",
                                is_causal=1)
        assert_refused(tmp_path, node, feeds, 23, "the same for every query")
        return
    check(tmp_path, feeds, is_causal=causal)


def test_softcap_with_mask_and_gqa(tmp_path):
    feeds = qkv(1, 6, 2, 7, 7, 8, layout=3)
    feeds["Q"] *= 4
    feeds["attn_mask"] = rand(7, 7, seed=5)
    check(tmp_path, feeds, softcap=2.5, is_causal=1, q_num_heads=6, kv_num_heads=2)


def test_fully_masked_rows_are_zero(tmp_path):
    feeds = qkv(2, 2, 1, 5, 7, 3)
    mask = np.random.default_rng(5).random((2, 1, 5, 7)) > 0.4
    mask[0, 0, 2] = False
    mask[1, 0, 4] = False
    feeds["attn_mask"] = mask
    got = check(tmp_path, feeds)
    assert not got["Y"][0, :, 2].any() and not got["Y"][1, :, 4].any()
    assert np.isfinite(got["Y"]).all()


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("mask", ["none", "const", "bool"])
def test_qk_matmul_output(tmp_path, mode, mask):
    feeds = qkv(2, 6, 3, 5, 7, 4, past=2)
    if mask == "bool":
        m = np.random.default_rng(5).random((2, 1, 5, 9)) > 0.3
        m[0, 0, 1] = False              # a fully-masked row: zeros in Y and in mode 3
        feeds["attn_mask"] = m
    attrs = {"is_causal": 1} if mask == "const" else {}
    check(tmp_path, feeds, n_outputs=4, qk_matmul_output_mode=mode, softcap=1.5, **attrs)


@pytest.mark.parametrize("nonpad", [[11, 4], [2, 9], [11, 11]])
@pytest.mark.parametrize("causal", [0, 1])
def test_nonpad_kv_seqlen(tmp_path, nonpad, causal):
    """Opset 24's external cache: keys past nonpad_kv_seqlen[b] masked, the causal frontier
    at nonpad - Sq (negative: leading rows fully masked, zero)."""
    feeds = qkv(2, 4, 2, 3, 11, 5)
    feeds["nonpad_kv_seqlen"] = np.array(nonpad, np.int64)
    feeds["attn_mask"] = rand(3, 11, seed=5)
    check(tmp_path, feeds, opset=24, is_causal=causal)


@pytest.mark.parametrize("left,right,causal", [(2, 1, 0), (3, -1, 1), (-1, 0, 0), (0, 2, 0)])
@pytest.mark.parametrize("cache", ["none", "past", "nonpad"])
def test_sliding_windows(tmp_path, left, right, causal, cache):
    feeds = qkv(2, 2, 1, 5, 5 if cache != "nonpad" else 9, 3, past=4 if cache == "past" else 0)
    if cache == "nonpad":
        feeds["nonpad_kv_seqlen"] = np.array([9, 6], np.int64)
    check(tmp_path, feeds, opset=25, left_window_size=left, right_window_size=right,
          is_causal=causal)


@pytest.mark.parametrize("feeds_attrs,message", [
    (({}, {"softmax_precision": 11}), "softmax_precision=11"),
    (({}, {"qk_matmul_output_mode": 4}), "qk_matmul_output_mode=4"),
    (({"layout": 3}, {}), "q_num_heads and kv_num_heads"),
])
def test_refusals(tmp_path, feeds_attrs, message):
    shape, attrs = feeds_attrs
    feeds = qkv(1, 2, 2, 3, 3, 4, layout=shape.get("layout", 4))
    node = helper.make_node("Attention", list(feeds), ["Y"], name="attention_node", **attrs)
    assert_refused(tmp_path, node, feeds, 23, message,
                   out_type=helper.np_dtype_to_tensor_dtype(feeds["Q"].dtype))


def test_float16_attention_computes_in_float32(tmp_path):
    """float16 inputs run through the float32 kernel between casts (passes/float32_compute.py):
    within float16's rounding of the reference evaluated on the same float16 inputs."""
    import onnx
    import mlcc
    from util import reference_outputs
    feeds = {k: v.astype(np.float16) for k, v in qkv(1, 2, 2, 5, 7, 4).items()}
    node = helper.make_node("Attention", list(feeds), ["Y"], name="attention_node",
                            is_causal=1)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info(k, TensorProto.FLOAT16, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, [1, 2, 5, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "m.onnx"))
    res = mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    got = mlcc.load(res.folder).run(feeds)["Y"]
    ref = reference_outputs(model, feeds)["Y"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), atol=2e-3,
                               rtol=2e-3)
