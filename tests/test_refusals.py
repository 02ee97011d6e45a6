"""Issue 19: every operator of onnx.defs (domain ai.onnx, at the installed onnx version) is
registered, handled by the compiler itself, or refused with a message naming its category
(mlcc/ops/refusals.py; docs/conformance.md "Refusal categories")."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, defs, helper

import mlcc
from mlcc.errors import UnsupportedError
from mlcc.ops import registered_operators
from mlcc.ops.refusals import (BUILT_IN, CATEGORIES, IMAGES, RANDOM, REFUSED,
                               SEQUENCES, STRINGS, category_of, refusal)

DEFAULT_DOMAIN = sorted({s.name for s in defs.get_all_schemas_with_history()
                         if s.domain in ("", "ai.onnx")})


def test_every_default_domain_operator_is_compiled_or_has_a_category():
    registered = {op for domain, op in registered_operators() if domain == ""}
    unaccounted = [op for op in DEFAULT_DOMAIN
                   if op not in registered and op not in BUILT_IN and op not in REFUSED]
    assert not unaccounted, (
        f"onnx {onnx.__version__} has default-domain operators mlcc neither compiles nor "
        f"refuses by category: {unaccounted}; implement them (docs/adding-an-operator.md) or "
        f"give each a category in mlcc/ops/refusals.py REFUSED")
    twice = sorted((registered & set(REFUSED)) | (registered & set(BUILT_IN))
                   | (set(BUILT_IN) & set(REFUSED)))
    assert not twice, f"in more than one of registry, BUILT_IN and REFUSED: {twice}"
    stale = sorted((set(REFUSED) | set(BUILT_IN)) - set(DEFAULT_DOMAIN))
    assert not stale, f"not operators of onnx {onnx.__version__}: {stale}"
    assert set(REFUSED.values()) == set(CATEGORIES), "a category without operators"


def _model(tmp_path, nodes, inputs, outputs, opset=22):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def _refusal(tmp_path, *model_args, **kw) -> str:
    with pytest.raises(UnsupportedError) as info:
        mlcc.compile(_model(tmp_path, *model_args, **kw), tmp_path / "out", target="x86")
    return info.value.message


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# one refused operator per category, and refusals of supported operators on such values
CASES = {
    "RandomNormalLike": (RANDOM, [helper.make_node("RandomNormalLike", ["x"], ["y"],
                                                   name="rnd")], [f32("x", [3])],
                         [f32("y", [3])]),
    "StringConcat": (STRINGS, [helper.make_node("StringConcat", ["a", "b"], ["y"], name="cat")],
                     [helper.make_tensor_value_info(n, TensorProto.STRING, [2]) for n in "ab"],
                     [helper.make_tensor_value_info("y", TensorProto.STRING, [2])]),
    "Equal on strings": (STRINGS, [helper.make_node("Equal", ["a", "b"], ["y"], name="eq")],
                         [helper.make_tensor_value_info(n, TensorProto.STRING, [2])
                          for n in "ab"],
                         [helper.make_tensor_value_info("y", TensorProto.BOOL, [2])]),
    "SequenceConstruct": (SEQUENCES, [
        helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="seq"),
        helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")],
        [f32("x", [3]), helper.make_tensor_value_info("i", TensorProto.INT64, [])],
        [f32("y", [3])]),
    "ImageDecoder": (IMAGES, [helper.make_node("ImageDecoder", ["b"], ["y"], name="dec")],
                     [helper.make_tensor_value_info("b", TensorProto.UINT8, [100])],
                     [helper.make_tensor_value_info("y", TensorProto.UINT8, [4, 4, 3])]),
    "TfIdfVectorizer of strings": (STRINGS, [helper.make_node(
        "TfIdfVectorizer", ["x"], ["y"], name="tfidf", mode="TF", min_gram_length=1,
        max_gram_length=1, max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1],
        pool_strings=["a", "b"])], [helper.make_tensor_value_info("x", TensorProto.STRING, [6])],
        [f32("y", [2])]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refusal_names_the_node_and_its_category(tmp_path, case):
    category, nodes, inputs, outputs = CASES[case]
    message = _refusal(tmp_path, nodes, inputs, outputs)
    assert category_of(message) == category, message
    assert refusal(category) in message
    assert f"node {nodes[0].name!r} ({nodes[0].op_type}-" in message, message


def test_dropout_in_training_mode_is_a_random_generator(tmp_path):
    ratio = helper.make_tensor("r", TensorProto.FLOAT, [], [0.5])
    mode = helper.make_tensor("t", TensorProto.BOOL, [], [True])
    graph = helper.make_graph([helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")],
                              "g", [f32("x", [4])], [f32("y", [4])], [ratio, mode])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]), str(path))
    with pytest.raises(UnsupportedError) as info:
        mlcc.compile(path, tmp_path / "out", target="x86")
    assert category_of(info.value.message) == RANDOM, info.value.message


def test_sequence_input_names_its_category(tmp_path):
    """The frontend writes this refusal's words itself (it imports no ops): they must be
    refusal()'s."""
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [3])
    message = _refusal(tmp_path, [helper.make_node("SequenceLength", ["s"], ["n"])], [seq],
                       [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    assert refusal(SEQUENCES) in message, message


def test_random_operators_never_fold(tmp_path):
    """A random generator with constant inputs is refused, not evaluated once at compile time
    (passes/infer_and_fold.py NONDETERMINISTIC is the random-generator category)."""
    message = _refusal(tmp_path, [helper.make_node("RandomUniform", [], ["y"], name="u",
                                                   shape=[3], seed=1.0)], [], [f32("y", [3])])
    assert category_of(message) == RANDOM, message


def test_refusal_of_an_unknown_category_is_an_error():
    with pytest.raises(KeyError):
        refusal("spreadsheets")
    assert category_of("operator Foo is not supported") is None
