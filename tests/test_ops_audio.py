"""DFT, STFT, the window operators and MelWeightMatrix against onnxruntime (onnx.reference
where onnxruntime refuses), at FFT lengths of every plan kind: 1, powers of two (radix 4 and 2),
mixed radix (3, 5), the generic butterfly (7), Bluestein (97 and other large primes)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import MlccError
from mlcc.ops.audio import fft_plan, radices
from util import (check_model, check_node, compile_and_run, make_model, rand,
                  reference_outputs, run_same_bits_on_threads)

SIZES = [1, 2, 3, 5, 7, 8, 12, 16, 30, 97, 256, 400, 512]


def test_plans_cover_each_kind():
    assert radices(512) == [2, 4, 4, 4, 4] and radices(30) == [5, 3, 2]
    assert radices(97) is None and radices(7 * 13) == [13, 7] and radices(1) == []
    params, plan = fft_plan(97)
    assert params["bluestein"] == 1 and params["fft_n"] == 256
    assert plan.dtype == np.float64
    assert np.array_equal(fft_plan(400)[1], fft_plan(400)[1])      # deterministic


@pytest.mark.parametrize("n", SIZES)
def test_dft_real_and_complex_at_every_size(n, tmp_path):
    check_node("DFT", {"x": rand(2, n, 1)}, tmp_path=tmp_path, opset=17, axis=1)
    check_node("DFT", {"x": rand(3, n, 2, seed=1)}, tmp_path=tmp_path, opset=17, axis=1)


@pytest.mark.parametrize("n", [1, 7, 97, 256])
def test_dft_inverse(n, tmp_path):
    check_node("DFT", {"x": rand(2, n, 2, seed=2)}, tmp_path=tmp_path, opset=17, inverse=1)


@pytest.mark.parametrize("n", [2, 5, 12, 97, 400])
def test_dft_onesided(n, tmp_path):
    check_node("DFT", {"x": rand(3, n, 1, seed=3)}, tmp_path=tmp_path, opset=17, onesided=1)


@pytest.mark.parametrize("length,dft_length", [(12, 16), (30, 7), (5, 97), (16, 16)])
def test_dft_length_pads_and_truncates(length, dft_length, tmp_path):
    check_node("DFT", {"x": rand(2, length, 2, seed=4)}, tmp_path=tmp_path, opset=17,
               initializers={"n": np.array(dft_length, np.int64)})


@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
def test_dft_opset20_axis_input_on_inner_axes(axis, tmp_path):
    x = rand(5, 3, 7, 2, seed=5)
    n = x.shape[axis % 4] + 1                      # padded by one
    check_node("DFT", {"x": x}, tmp_path=tmp_path, opset=20,
               initializers={"n": np.array(n, np.int64), "axis": np.array(axis, np.int64)})


def test_dft_opset17_axis_attribute_non_last(tmp_path):
    check_node("DFT", {"x": rand(4, 9, 3, 1, seed=6)}, tmp_path=tmp_path, opset=17, axis=1)
    check_node("DFT", {"x": rand(4, 9, 3, 2, seed=7)}, tmp_path=tmp_path, opset=17, axis=-2)


@pytest.mark.parametrize("shape,dft_length", [((2, 5, 2), None), ((3, 9, 2), None),
                                               ((2, 7, 2), 12), ((2, 7, 2), 13),
                                               ((1, 4, 2), 97), ((2, 30, 2), 11)])
@pytest.mark.parametrize("opset", [17, 20])
def test_dft_one_sided_inverse_is_irfft(shape, dft_length, opset, tmp_path):
    """inverse=1, onesided=1: numpy's irfft (default length 2 (n - 1), real output), against
    onnx.reference, and onnxruntime where the two agree."""
    from onnx.reference import ReferenceEvaluator
    inputs = ["x"] + (["n"] if dft_length else [])
    node = helper.make_node("DFT", inputs, ["y"], name="irfft", inverse=1, onesided=1,
                            **({"axis": 1} if opset == 17 else {}))
    x = rand(*shape, seed=dft_length or 0)
    inits = {"n": np.array(dft_length, np.int64)} if dft_length else {}
    model = make_model([node], {"x": x}, ["y"], initializers=inits, opset=opset)
    if dft_length and shape[1] > dft_length // 2 + 1:
        # more bins than n needs: onnx.reference (numpy) reads the first n // 2 + 1 of them,
        # as its node tests do; onnxruntime's answer differs (max error 0.86 on this case)
        got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    else:
        got = check_model(model, {"x": x}, tmp_path)["y"]
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.shape == ref.shape and got.shape[-1] == 1
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n,step,length", [(16, 4, 50), (400, 160, 1600), (97, 33, 300),
                                           (12, 12, 12), (7, 1, 10)])
def test_stft_with_hann_window(n, step, length, tmp_path):
    nodes = [helper.make_node("HannWindow", ["size"], ["w"], name="hann"),
             helper.make_node("STFT", ["x", "step", "w"], ["y"], name="stft")]
    model = make_model(nodes, {"x": rand(2, length, 1, seed=n)}, ["y"], initializers={
        "size": np.array(n, np.int64), "step": np.array(step, np.int64)})
    check_model(model, {"x": rand(2, length, 1, seed=n)}, tmp_path)


def test_stft_and_bluestein_dft_threads_same_bits(tmp_path):
    """Above the threading threshold the transforms (frames of each signal, rows) are split
    between threads, each on its own scratch slice: an STFT of 400-sample frames (radix 4
    and 5 stages) over two signals, and a Bluestein DFT of length 97 over 131 rows; 1, 2 and
    3 threads give the same bits, onnxruntime's values."""
    nodes = [helper.make_node("HannWindow", ["size"], ["w"], name="hann"),
             helper.make_node("STFT", ["x", "step", "w"], ["y"], name="stft"),
             helper.make_node("DFT", ["z", "n"], ["d"], name="dft", axis=1)]
    feeds = {"x": rand(2, 4000, 1, seed=12), "z": rand(131, 97, 1, seed=13)}
    model = make_model(nodes, feeds, ["y", "d"], initializers={
        "size": np.array(400, np.int64), "step": np.array(160, np.int64),
        "n": np.array(97, np.int64)})
    got = run_same_bits_on_threads(model, feeds, tmp_path)
    ref = reference_outputs(model, feeds)
    for name in ("y", "d"):
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4,
                                   atol=1e-4 * float(np.abs(ref[name]).max()), err_msg=name)


def test_stft_two_sided_complex_frame_length_without_window(tmp_path):
    node = helper.make_node("STFT", ["x", "step", "", "fl"], ["y"], name="stft", onesided=0)
    feeds = {"x": rand(1, 40, 2, seed=9)}
    model = make_model([node], feeds, ["y"], initializers={
        "step": np.array(6, np.int64), "fl": np.array(15, np.int64)})
    check_model(model, feeds, tmp_path)


def test_stft_run_time_window(tmp_path):
    feeds = {"x": rand(3, 64, 1, seed=10), "w": rand(30, seed=11)}
    node = helper.make_node("STFT", ["x", "step", "w"], ["y"], name="stft")
    model = make_model([node], feeds, ["y"], initializers={"step": np.array(5, np.int64)})
    check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_fold_to_constants(op, periodic, tmp_path):
    # the window feeds a Mul at run time, so the folded constant is what is checked
    nodes = [helper.make_node(op, ["size"], ["w"], name="win", periodic=periodic,
                              output_datatype=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "w"], ["y"], name="mul")]
    feeds = {"x": rand(3, 13, seed=12)}
    model = make_model(nodes, feeds, ["y"], initializers={"size": np.array(13, np.int64)})
    check_model(model, feeds, tmp_path)


def test_window_with_run_time_size_is_refused(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("HannWindow", ["size"], ["w"], name="win")], "g",
        [helper.make_tensor_value_info("size", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(MlccError, match=r"'win' \(HannWindow.*size.*must be a constant.*--bind size="):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")


def log_mel_model(n_fft=400, hop=160, samples=1600, mels=40):
    """STFT -> |.|^2 -> MatMul with MelWeightMatrix -> Log: a speech front-end."""
    nodes = [
        helper.make_node("HannWindow", ["n_fft"], ["window"], name="hann"),
        helper.make_node("STFT", ["audio", "hop", "window"], ["spec"], name="stft"),
        helper.make_node("Mul", ["spec", "spec"], ["sq"], name="square"),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], name="power", keepdims=0),
        helper.make_node("MelWeightMatrix", ["mels", "n_fft", "rate", "lo", "hi"], ["melw"],
                         name="melw"),
        helper.make_node("MatMul", ["power", "melw"], ["mel"], name="mel"),
        helper.make_node("Add", ["mel", "eps"], ["mel_eps"], name="floor"),
        helper.make_node("Log", ["mel_eps"], ["logmel"], name="log"),
    ]
    feeds = {"audio": rand(1, samples, 1, seed=13)}
    inits = {"n_fft": np.array(n_fft, np.int64), "hop": np.array(hop, np.int64),
             "last": np.array([-1], np.int64), "mels": np.array(mels, np.int64),
             "rate": np.array(16000, np.int64), "lo": np.array(20.0, np.float32),
             "hi": np.array(8000.0, np.float32), "eps": np.array(1e-6, np.float32)}
    frames = 1 + (samples - n_fft) // hop
    graph = helper.make_graph(
        nodes, "log_mel", [helper.make_tensor_value_info("audio", TensorProto.FLOAT,
                                                         [1, samples, 1])],
        [helper.make_tensor_value_info("logmel", TensorProto.FLOAT, [1, frames, mels])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, feeds


def test_log_mel_front_end(tmp_path):
    model, feeds = log_mel_model()
    check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("mode", ["asan", "malloc"])
def test_fft_kernel_is_clean_under_asan_and_allocates_nothing(mode, tmp_path, monkeypatch):
    """Bluestein (97, inverse, padded from 5, inner axis), irfft (13 from 4 bins, the mirrored
    reads past the input skipped) and the log-mel program under
    AddressSanitizer + UBSan, and the counting malloc of tools/sanitize_models.py."""
    import onnx
    import sanitize_models
    node = helper.make_node("DFT", ["x", "n"], ["y"], name="dft", axis=1, inverse=1)
    models = {"dft97": make_model([node], {"x": rand(2, 5, 3, 2)}, ["y"],
                                  initializers={"n": np.array(97, np.int64)}),
              "irfft": make_model([helper.make_node("DFT", ["x", "n"], ["y"], name="irfft",
                                                    inverse=1, onesided=1)],
                                  {"x": rand(2, 4, 2)}, ["y"],
                                  initializers={"n": np.array(13, np.int64)}),
              "logmel": log_mel_model()[0]}
    paths = {}
    for name, model in models.items():
        paths[name] = tmp_path / f"{name}.onnx"
        onnx.save(model, str(paths[name]))
    monkeypatch.setattr(sanitize_models, "model_path", lambda name: (paths[name], {}))
    for name in models:
        (tmp_path / name).mkdir()
        print(sanitize_models.check(name, mode, tmp_path / name))
