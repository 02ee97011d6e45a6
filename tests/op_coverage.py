"""Which test executes each registered operator (issue 17): the facts behind
tests/test_conformance.py and the `lowered_witness` fixture of conftest.py.

Every operator of the registry (mlcc.ops.registered_operators()) must be executed by a test that
`make test` runs, and compared with a reference:

- an ONNX-domain operator (default or ai.onnx.ml: NODE_TEST_DOMAINS) by its ONNX backend node
  tests (tools/conformance.py), a few of
  which test_conformance.py runs per operator (node_test_picks), requiring one to pass with the
  operator in the compiled program (not folded away: for an operator that exists only
  at compile time, folding is what it does);
- an operator whose node tests mlcc refuses by design (weights or types it does not take), and
  every operator of mlcc's own domain (written by the compiler's passes: the quantizer, the
  attention fusion), by the pytest test named for it in WITNESSES. That test must make the
  compiler write the operator into the program it builds: the `lowered_witness` fixture records
  the nodes lowered during the test and fails it when the operator is not among them.

A new operator without either fails test_conformance.py's
test_every_registered_operator_is_executed_by_a_test with its name. docs/testing.md says more.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

# Node tests run per ONNX operator: this many, spread evenly over its tests in name order.
PER_OP = 2
# The domains whose operators have ONNX backend node tests (the index names a test's operator
# by op type alone: no op type is in both).
NODE_TEST_DOMAINS = ("", "ai.onnx.ml")

# (domain, op type) -> "file::test" (test id as pytest prints it, relative to tests/).
WITNESSES: dict[tuple[str, str], str] = {
    # ONNX integer operators with constant zero points and weights only (node tests: none)
    ("", "QLinearConv"):
        "test_quant.py::test_float_requant_is_bit_exact_with_onnxruntime_qlinearconv",
    ("", "QLinearMatMul"): "test_quant.py::test_qlinearmatmul_matches_onnxruntime",
    # its one dense node test (test_loop11) slices with the iteration number (a Slice of
    # run-time starts), so it folds once bound; Loop at run time is tested here
    ("", "Loop"): "test_ops_loop.py::test_constant_trip_count_with_scan_output_and_outer_value[7]",
    # folded once shapes are static (their node tests bind the inputs); at run time over a
    # dynamic size (docs/dynamic-shapes.md)
    ("", "Range"): "test_dynamic_ops.py::test_range_constant_of_shape_expand_slice_over_dynamic_sizes",
    ("", "ConstantOfShape"):
        "test_dynamic_ops.py::test_range_constant_of_shape_expand_slice_over_dynamic_sizes",
    # no ONNX node tests
    ("", "GlobalLpPool"): "test_ops_pool.py::test_global_lppool[shape0-2]",
    ("", "MaxRoiPool"): "test_ops_sampling.py::test_max_roi_pool[pooled0-1.0]",
    # node tests of float64 and bfloat16 only (and an ellipsis)
    ("", "Einsum"): "test_ops_einsum.py::test_einsum[bhqd,bhkd->bhqk]",
    # mlcc's integer kernels, written by the quantizer (mlcc/quant)
    ("mlcc", "QConv"): "test_quant.py::test_qdq_model_from_onnxruntime_runs_on_integer_kernels"
                       "_bit_exact",
    ("mlcc", "QFC"): "test_quant.py::test_qdq_model_from_onnxruntime_runs_on_integer_kernels"
                     "_bit_exact",
    ("mlcc", "QConv16"): "test_quant_w8a16.py::test_all_w8a16_is_float_with_int8_weights_up_to"
                         "_int16_rounding",
    ("mlcc", "QFC16"): "test_quant_w8a16.py::test_all_w8a16_is_float_with_int8_weights_up_to"
                       "_int16_rounding",
    ("mlcc", "QMaxPool"): "test_quant.py::test_qdq_model_from_onnxruntime_runs_on_integer"
                          "_kernels_bit_exact",
    ("mlcc", "QAdd"): "test_quant.py::test_operators_without_integer_kernels_run_in_float",
    ("mlcc", "QLut"): "test_quant.py::test_activations_run_as_tables_on_preactivation_codes",
    ("mlcc", "QRequant"): "test_quant.py::test_split_and_concat_stay_integer",
    ("mlcc", "QAvgPool"): "test_quant.py::test_squeeze_excitation_product_runs_on_uint8[True]",
    ("mlcc", "QChannelScale"):
        "test_quant.py::test_squeeze_excitation_product_runs_on_uint8[True]",
    # onnxruntime's quantized com.microsoft operators (mlcc/ops/contrib_quant.py)
    ("com.microsoft", "DynamicQuantizeMatMul"):
        "test_contrib_quant.py::test_dynamic_quantize_matmul_bit_exact[s8_column]",
    ("com.microsoft", "MatMulIntegerToFloat"):
        "test_contrib_quant.py::test_matmul_integer_to_float_bit_exact[u8_tensor-True]",
    ("com.microsoft", "MatMulNBits"): "test_contrib_quant.py::test_matmul_nbits[4-32-29-True]",
    ("com.microsoft", "QGemm"): "test_contrib_quant.py::test_qgemm_bit_exact[u8_out]",
    ("com.microsoft", "QLinearAdd"):
        "test_contrib_quant.py::test_qlinear_add_mul_within_one_code[QLinearAdd-channel]",
    ("com.microsoft", "QLinearMul"):
        "test_contrib_quant.py::test_qlinear_add_mul_within_one_code[QLinearMul-same]",
    ("com.microsoft", "QLinearSigmoid"):
        "test_contrib_quant.py::test_qlinear_tables[QLinearSigmoid-attrs0-1-uint8]",
    ("com.microsoft", "QLinearLeakyRelu"):
        "test_contrib_quant.py::test_qlinear_tables[QLinearLeakyRelu-attrs1-0-int8]",
    ("com.microsoft", "QLinearConcat"):
        "test_contrib_quant.py::test_qlinear_concat_bit_exact[uint8-1]",
    ("com.microsoft", "DynamicQuantizeLSTM"):
        "test_contrib_quant.py::test_dynamic_quantize_lstm[s8_forward]",
    ("com.microsoft", "QLinearAveragePool"):
        "test_contrib_quant.py::test_qlinear_average_pool_within_one_code[pads_include]",
    ("com.microsoft", "QLinearGlobalAveragePool"):
        "test_contrib_quant.py::test_qlinear_global_average_pool_bit_exact[shape0]",
    # written by the TFLite importer (mlcc/frontend/tflite_import.py)
    ("mlcc", "QRecenter"): "test_tflite.py::test_small_models_bit_exact[cnn_float_io]",
    ("mlcc", "TFLQuantize"): "test_tflite.py::test_small_models_bit_exact[cnn_float_io]",
    ("mlcc", "TFLDequantize"): "test_tflite.py::test_small_models_bit_exact[cnn_float_io]",
    ("mlcc", "QSoftmax"): "test_tflite.py::test_small_models_bit_exact[cnn_float_io]",
    ("mlcc", "QSub"): "test_tflite.py::test_small_models_bit_exact[binary_ops]",
    ("mlcc", "QMul"): "test_tflite.py::test_small_models_bit_exact[binary_ops]",
    ("mlcc", "QMean"): "test_tflite.py::test_small_models_bit_exact[mean]",
    # onnxruntime's contrib operators (mlcc/ops/contrib.py): no ONNX node tests
    ("com.microsoft", "Attention"): "test_contrib_ops.py::test_attention_without_bias",
    ("com.microsoft", "BiasAdd"): "test_contrib_ops.py::test_bias_add",
    ("com.microsoft", "BiasGelu"): "test_contrib_ops.py::test_gelu_family[BiasGelu]",
    ("com.microsoft", "EmbedLayerNormalization"):
        "test_contrib_ops.py::test_embed_layer_norm[bert]",
    ("com.microsoft", "FastGelu"): "test_contrib_ops.py::test_gelu_family[FastGelu]",
    ("com.microsoft", "FusedMatMul"): "test_contrib_ops.py::test_fused_matmul[transA]",
    ("com.microsoft", "Gelu"): "test_contrib_ops.py::test_gelu_family[Gelu]",
    ("com.microsoft", "MultiHeadAttention"):
        "test_contrib_ops.py::test_multi_head_attention[lengths-bias]",
    ("com.microsoft", "QuickGelu"): "test_contrib_ops.py::test_gelu_family[QuickGelu]",
    ("com.microsoft", "SkipLayerNormalization"):
        "test_contrib_ops.py::test_skip_layer_norm_sum_output",
    ("com.microsoft", "SkipSimplifiedLayerNormalization"):
        "test_contrib_ops.py::test_skip_simplified_layer_norm[bias]",
    # ai.onnx.ml operators (mlcc/ops/ml_trees.py, ml.py) whose node tests mlcc refuses (string
    # keys: LabelEncoder) or that have none
    ("ai.onnx.ml", "TreeEnsembleRegressor"):
        "test_ops_ml.py::test_tree_regressor[50-8-7-13-1-SUM]",
    ("ai.onnx.ml", "TreeEnsembleClassifier"):
        "test_ops_ml.py::test_tree_classifier[50-8-7-13-labels1-SOFTMAX-True]",
    ("ai.onnx.ml", "LinearRegressor"): "test_ops_ml.py::test_linear_regressor[13-7-3-SOFTMAX]",
    ("ai.onnx.ml", "LinearClassifier"):
        "test_ops_ml.py::test_linear_classifier[13-7-labels1-SOFTMAX]",
    ("ai.onnx.ml", "Scaler"): "test_ops_ml.py::test_scaler_imputer_binarizer[shape1-True]",
    ("ai.onnx.ml", "Imputer"): "test_ops_ml.py::test_scaler_imputer_binarizer[shape1-True]",
    ("ai.onnx.ml", "Normalizer"): "test_ops_ml.py::test_normalizer[shape1-L2]",
    ("ai.onnx.ml", "OneHotEncoder"): "test_ops_ml.py::test_one_hot_encoder[shape1-1]",
    ("ai.onnx.ml", "LabelEncoder"): "test_ops_ml.py::test_label_encoder[i2f]",
    ("ai.onnx.ml", "SVMRegressor"): "test_ops_ml.py::test_svm_regressor[RBF-params0-11-0]",
    ("ai.onnx.ml", "FeatureVectorizer"):
        "test_ops_ml.py::test_feature_vectorizer[shapes1-dims1]",
    ("ai.onnx.ml", "SVMClassifier"):
        "test_ops_ml.py::test_svm_classifier[RBF-3-per_class0-NONE]",
    # the attention fusion (mlcc/passes/fuse_attention.py)
    ("mlcc", "Attention"): "test_fusions_transformer.py::test_attention_is_one_kernel[x86]",
    # a shape computation over a data-dependent count, computed at run time (ops/selection.py)
    ("mlcc", "Sizes"): "test_dynamic_chains.py::test_topk_k_from_the_count",
}


def registered() -> list[tuple[str, str]]:
    from mlcc.ops import registered_operators
    return registered_operators()


def runs_at_compile_time_only(domain: str, op: str) -> bool:
    """An operator none of whose definitions lowers to C: it exists only to be folded."""
    from mlcc.ops.registry import OpDef, definitions
    return all(type(d).lower is OpDef.lower for d in definitions(domain, op))


def node_tests(index: list[dict], op: str) -> list[dict]:
    """The node tests of op that run op itself (not its function body, "_expanded"), by name."""
    return sorted((e for e in index if e["op"] == op and "_expanded" not in e["name"]),
                  key=lambda e: e["name"])


def node_test_picks(index: list[dict], op: str) -> tuple[list[dict], list[dict]]:
    """PER_OP of op's node tests spread evenly over them, and the others (tried in name order
    when none of the picks passes)."""
    tests = node_tests(index, op)
    picks = tests[::max(1, math.ceil(len(tests) / PER_OP))][:PER_OP]
    return picks, [e for e in tests if e not in picks]


def witness_key(item) -> str:
    """A pytest item's id relative to tests/ ("test_x.py::test_y[param]")."""
    return f"{Path(str(item.path)).name}::{item.name}"


# ------------------------------------------------------------------ the pytest side (conftest)

_WITNESS_OF: dict[str, list[tuple[str, str]]] = {}
for _key, _test in WITNESSES.items():
    _WITNESS_OF.setdefault(_test, []).append(_key)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"_mlcc_report_{report.when}", report)


@pytest.fixture(autouse=True)
def lowered_witness(request, monkeypatch):
    """For a test named in WITNESSES: records the (domain, op type) of every node the compiler
    lowers while it runs, and fails it if it passed without lowering the operators it stands
    for. With MLCC_LOWERED_LOG=FILE, every test appends "test id<TAB>ops it lowered" to FILE
    (to find a witness for an operator)."""
    key = witness_key(request.node)
    wanted = _WITNESS_OF.get(key)
    log = os.environ.get("MLCC_LOWERED_LOG")
    if not wanted and not log:
        yield
        return
    import mlcc.codegen.lower as lower_module
    seen: set[tuple[str, str]] = set()
    real = lower_module.lookup

    def recording_lookup(node):
        seen.add((node.domain, node.op_type))
        return real(node)

    monkeypatch.setattr(lower_module, "lookup", recording_lookup)
    yield
    names = sorted(f"{d}.{o}" if d else o for d, o in seen)
    report = getattr(request.node, "_mlcc_report_call", None)
    if log and seen:
        with open(log, "a") as f:
            f.write(f"{key}\t{'passed' if report and report.passed else 'not passed'}\t"
                    f"{' '.join(names)}\n")
    if not wanted or report is None or not report.passed:
        return
    missing = [f"{d}.{op}" if d else op for d, op in wanted if (d, op) not in seen]
    if missing:
        pytest.fail(f"{key} is the witness of {', '.join(missing)} in tests/op_coverage.py "
                    f"WITNESSES but the compiler wrote no such node while it ran (it lowered: "
                    f"{', '.join(names) or 'nothing'})")
