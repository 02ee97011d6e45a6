"""Frontend (loading, external data, functions, opsets, shapes) and graph passes."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import ModelError, UnsupportedError
from mlcc.frontend import import_model
from mlcc.passes import run_pipeline
from util import check_model, make_model, rand


def _save(model, path):
    onnx.save(model, str(path))
    return path


def test_external_data_inside_the_model_folder(tmp_path):
    w = rand(64, 32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": rand(3, 64)},
                       ["y"], initializers={"w": w})
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    x = rand(3, 64, seed=3)
    np.testing.assert_allclose(mlcc.load(tmp_path / "out").run({"x": x})["y"], x @ w, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../x.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": rand(3)}, ["y"],
                       initializers={"w": rand(4)})
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    (tmp_path / "m").mkdir()
    onnx.save(model, str(tmp_path / "m" / "m.onnx"))
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    with pytest.raises(ModelError, match="leaves the model's folder"):
        import_model(tmp_path / "m" / "m.onnx")


def test_local_functions_are_inlined(tmp_path):
    fn = helper.make_function("custom", "Swish", ["a"], ["b"],
                              [helper.make_node("Sigmoid", ["a"], ["s"]),
                               helper.make_node("Mul", ["a", "s"], ["b"])],
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Swish", ["x"], ["y"], domain="custom")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])
    model.ir_version = 9
    x = rand(2, 7)
    check_model(model, {"x": x}, tmp_path)


def test_shape_subgraphs_fold_away(tmp_path):
    """x -> Shape -> Gather -> Concat -> Reshape: vanishes once shapes are static."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64)}
    model = make_model(nodes, {"x": rand(3, 4, 5)}, ["y"], initializers=inits,
                       input_shapes={"x": ["N", 4, 5]})
    path = _save(model, tmp_path / "m.onnx")
    g = run_pipeline(import_model(path, {"x": (3, 4, 5)}))
    assert [n.op_type for n in g.nodes] == ["Reshape", "Relu"]
    from mlcc.codegen.lower import lower_graph
    prog, _ = lower_graph(g)
    assert [c.kernel for c in prog.calls] == ["mlcc_f32_unary"]   # the reshape is a view
    assert g.values["y"].shape == (3, 20)
    check_model(model, {"x": rand(3, 4, 5)}, tmp_path, shapes={"x": (3, 4, 5)})


def test_constant_nodes_dead_code_and_noops(tmp_path):
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                 np.full((2, 3), 2.0, np.float32))),
             helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("Dropout", ["i"], ["d"]),
             helper.make_node("Mul", ["d", "c"], ["y"]),
             helper.make_node("Exp", ["x"], ["unused"])]
    model = make_model(nodes, {"x": rand(2, 3)}, ["y"])
    g = run_pipeline(import_model(_save(model, tmp_path / "m.onnx")))
    assert [n.op_type for n in g.nodes] == ["Mul"]
    assert g.nodes[0].inputs[0] == "x"
    check_model(model, {"x": rand(2, 3)}, tmp_path)


def test_identity_from_input_to_output_still_copies(tmp_path):
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], {"x": rand(4, 3)}, ["y"])
    check_model(model, {"x": rand(4, 3)}, tmp_path)


def test_batchnorm_folds_into_conv(tmp_path):
    c = 4
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["t", "g", "b", "m", "v"], ["y"], name="bn",
                              epsilon=1e-3)]
    inits = {"w": rand(c, 3, 3, 3), "g": rand(c, seed=1), "b": rand(c, seed=2),
             "m": rand(c, seed=3), "v": rand(c, seed=4, low=0.5, high=2.0)}
    model = make_model(nodes, {"x": rand(1, 3, 9, 9)}, ["y"], initializers=inits)
    g = run_pipeline(import_model(_save(model, tmp_path / "m.onnx")))
    assert [n.op_type for n in g.nodes] == ["Conv"] and g.nodes[0].fused == ["bn:BatchNormalization"]
    check_model(model, {"x": rand(1, 3, 9, 9)}, tmp_path)


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_old_opsets(tmp_path, opset):
    """Clip bounds as attributes (opset < 11) or inputs, Squeeze axes as attribute or input."""
    if opset < 11:
        clip = helper.make_node("Clip", ["x"], ["c"], min=-0.5, max=0.7)
        inits = {}
    else:
        clip = helper.make_node("Clip", ["x", "lo", "hi"], ["c"])
        inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    if opset < 13:
        sq = helper.make_node("Squeeze", ["c"], ["y"], axes=[1])
    else:
        sq = helper.make_node("Squeeze", ["c", "axes"], ["y"])
        inits["axes"] = np.array([1], np.int64)
    model = make_model([clip, sq], {"x": rand(3, 1, 5)}, ["y"], initializers=inits, opset=opset)
    check_model(model, {"x": rand(3, 1, 5)}, tmp_path)


def test_opset_older_than_7_is_upgraded(tmp_path):
    """onnx's version converter lifts opset < 7 models (the backend tests of Not are opset 1)."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": rand(3)}, ["y"], opset=6)
    g = import_model(_save(model, tmp_path / "m.onnx"))
    assert g.opset == 7
    check_model(model, {"x": rand(3)}, tmp_path)


def test_unsupported_attribute_is_refused_with_node_name(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="my_conv", pads=[0, 0, 0, 0])
    model = make_model([node], {"x": rand(1, 1, 5, 5)}, ["y"],
                       initializers={"w": rand(1, 1, 3, 3)})
    model.graph.node[0].attribute.append(helper.make_attribute("auto_pad", "WEIRD"))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises((UnsupportedError, ModelError), match="my_conv"):
        mlcc.compile(path, tmp_path / "o")


def test_dims_bound_by_shape_option_propagate(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": rand(2, 3)}, ["y"],
                       input_shapes={"x": ["batch", "seq"]})
    g = run_pipeline(import_model(_save(model, tmp_path / "m.onnx"), {"x": (5, 7)}))
    assert g.values["y"].shape == (5, 7)
    with pytest.raises(ModelError, match=r"dimension 0 \('batch'\) is dynamic"):
        import_model(tmp_path / "m.onnx")


def _loop_model(trip_as_input: bool, with_cond: bool):
    """acc, stack = Loop(M=4, cond, acc0): body acc += x (outer scope) * i; a scan output of
    shape (2, 3) per iteration; with a cond, the body stops after iteration 2."""
    i, c, acc = "i", "c", "acc"
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5
    body = helper.make_graph(
        [helper.make_node("Cast", [i], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", [acc, "xi"], ["acc_out"]),
         helper.make_node("Less", [i, "two"], ["c_out"]) if with_cond else
         helper.make_node("Identity", [c], ["c_out"]),
         helper.make_node("Identity", ["xi"], ["scan"])],
        "body", [helper.make_tensor_value_info(i, TensorProto.INT64, []),
                 helper.make_tensor_value_info(c, TensorProto.BOOL, []),
                 helper.make_tensor_value_info(acc, TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [None, 2, 3])],
        [numpy_helper.from_array(np.array(2, np.int64), "two")])
    inits = [numpy_helper.from_array(x, "x"), numpy_helper.from_array(np.zeros((2, 3), np.float32),
                                                                      "acc0"),
             numpy_helper.from_array(np.array(True), "cond")]
    inputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    if trip_as_input:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(4, np.int64), "m"))
    nodes = [helper.make_node("Loop", ["m", "cond" if with_cond else "", "acc0"],
                              ["acc_final", "stack"], body=body),
             helper.make_node("Add", ["acc_final", "y"], ["out"])]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("stack", TensorProto.FLOAT,
                                                             [None, 2, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), x


@pytest.mark.parametrize("with_cond", [False, True])
def test_loop_with_constant_inputs_folds(tmp_path, with_cond):
    """The folded Loop follows the ONNX semantics: scan outputs stacked on a new first axis
    (onnx.reference's own Loop would give (8, 3) here), the cond output ignored without a
    cond input, and outer-scope values read from the enclosing graph."""
    model, x = _loop_model(trip_as_input=False, with_cond=with_cond)
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    y = rand(2, 3)
    got = mlcc.load(tmp_path / "out").run({"y": y})
    steps = 3 if with_cond else 4
    np.testing.assert_allclose(got["out"], y + x * sum(range(steps)), rtol=1e-6)
    np.testing.assert_array_equal(got["stack"], np.stack([x * k for k in range(steps)]))


def test_loop_with_run_time_trip_count_names_the_input(tmp_path):
    model, _ = _loop_model(trip_as_input=True, with_cond=False)
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match=r"Loop's trip count \(input 0, 'm'\) must be a "
                                               r"constant once shapes are static"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")


def test_loop_computed_from_a_graph_input_names_it(tmp_path):
    model, _ = _loop_model(trip_as_input=True, with_cond=False)
    model.graph.node.insert(0, helper.make_node("Add", ["m", "m"], ["m2"]))
    model.graph.node[1].input[0] = "m2"
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match=r"Loop's trip count 'm2' is computed at run "
                                               r"time from graph input 'm': graph input 'm' "
                                               r"must be a constant"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")


def test_endless_loop_is_refused_in_bounded_time(tmp_path):
    model, _ = _loop_model(trip_as_input=False, with_cond=False)
    model.graph.node[0].input[0] = ""           # no trip count, no cond: runs until a limit
    onnx.save(model, str(tmp_path / "m.onnx"))
    import sys
    f = sys.modules["mlcc.passes.control_flow"]
    old, f.MAX_LOOP_ITERATIONS = f.MAX_LOOP_ITERATIONS, 50
    try:
        with pytest.raises(UnsupportedError, match="more than 50 iterations"):
            mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    finally:
        f.MAX_LOOP_ITERATIONS = old


def test_sequence_and_string_inputs_refused_with_the_reason(tmp_path):
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    out = helper.make_tensor_sequence_value_info("t", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["s"], ["t"])],
                                                "g", [seq], [out]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "s.onnx"))
    with pytest.raises(UnsupportedError, match="'s' is a sequence: mlcc compiles dense tensors"):
        mlcc.compile(tmp_path / "s.onnx", tmp_path / "out", target="x86")
    strings = [helper.make_tensor_value_info(n, TensorProto.STRING, [2]) for n in "ab"]
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Equal", ["a", "b"], ["y"])], "g", strings,
        [helper.make_tensor_value_info("y", TensorProto.BOOL, [2])]),
        opset_imports=[helper.make_opsetid("", 19)])
    onnx.save(model, str(tmp_path / "e.onnx"))
    with pytest.raises(UnsupportedError, match="Equal.*string tensors are not supported.*"
                                               "variable length"):
        mlcc.compile(tmp_path / "e.onnx", tmp_path / "out2", target="x86")


def test_folding_ieee_edge_values_is_quiet_and_matches(tmp_path):
    """T5's relative-position buckets fold log(0) = -inf and cast it, then mask it with a
    Where: folded as it runs (the result matches onnxruntime), without numpy's warnings."""
    import warnings
    rel = np.array([[0, 1, 2], [3, 0, 7], [12, 5, 0]], np.float32)
    model = make_model(
        [helper.make_node("Log", ["rel"], ["lg"]),
         helper.make_node("Mul", ["lg", "k"], ["scaled"]),
         helper.make_node("Cast", ["scaled"], ["bucket"], to=TensorProto.INT64),
         helper.make_node("Less", ["rel", "small"], ["is_small"]),
         helper.make_node("Cast", ["rel"], ["rel_i"], to=TensorProto.INT64),
         helper.make_node("Where", ["is_small", "rel_i", "bucket"], ["b"]),
         helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "bf"], ["y"])],
        {"x": rand(3, 3)}, ["y"],
        initializers={"rel": rel, "k": np.float32(2.5), "small": np.float32(4)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        check_model(model, {"x": rand(3, 3)}, tmp_path)
