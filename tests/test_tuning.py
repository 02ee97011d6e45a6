"""`mlcc compile --tune` (mlcc/tuning.py): every variant the tuner may pick computes the layer
right (against onnxruntime, on odd shapes where the rules would not pick it), choices are
cached per CPU and reused, a tuning.json rebuilds the same library, and misuse is a clear
error."""
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mlcc
from mlcc import tuning
from mlcc.ops.conv_kernels import (ConvLayer, ConvTarget, Window2d, choose_variant,
                                   layer_key, tuning_candidates)
from mlcc.targets import load_target
from util import reference_outputs


def _layer(cin, cout, groups, k, hw, s, d, p):
    kh, kw = k
    ih, iw = hw
    oh = (ih + 2 * p - (kh - 1) * d - 1) // s + 1
    ow = (iw + 2 * p - (kw - 1) * d - 1) // s + 1
    return ConvLayer(1, cin, cout, groups, Window2d(kh, kw, ih, iw, oh, ow, s, s, d, d, p, p))


# odd shapes: primes, strides, dilation, padding, groups, small and wide maps, 1x1 and KxK
LAYERS = [_layer(17, 40, 1, (3, 3), (13, 29), 1, 1, 1),
          _layer(64, 48, 1, (3, 3), (11, 11), 2, 1, 1),
          _layer(8, 37, 1, (1, 1), (19, 23), 1, 1, 0),
          _layer(48, 64, 1, (1, 1), (14, 14), 2, 1, 0),
          _layer(3, 16, 1, (5, 5), (31, 37), 2, 1, 2),
          _layer(32, 32, 2, (3, 3), (9, 10), 1, 2, 2),
          _layer(96, 32, 1, (3, 1), (7, 17), 1, 1, 0)]


@pytest.mark.parametrize("target", ["x86-native", "x86"])
def test_every_tuning_candidate_matches_onnxruntime(target, tmp_path):
    conv_target = ConvTarget.from_options(load_target(target).lowering_options())
    jobs = [(layer_key(l), l, [v.name for v in tuning_candidates(l, conv_target)])
            for l in LAYERS]
    assert sum(len(names) for _, _, names in jobs) > 2 * len(jobs)   # choices to make
    feeds = tuning._tuning_model(jobs, tmp_path / "t.onnx")
    choices = {f"node:tune_{i}_{j}": v for i, (_, _, names) in enumerate(jobs)
               for j, v in enumerate(names)}
    res = mlcc.compile(tmp_path / "t.onnx", tmp_path / "out", target=target,
                       conv_choices=choices)
    src = (Path(res.folder) / "model.c").read_text()
    for i, (_, _, names) in enumerate(jobs):
        for j, v in enumerate(names):   # each node runs the kernel it was given
            call = next(line for line in src.splitlines() if f"&p_tune_{i}_{j}," in line)
            kernel = {"winograd_4x4": "winograd_4x4", "winograd_2x2": "winograd_2x2",
                      "implicit_t_1x1": "implicit_t", "depthwise_vec": "depthwise_vec",
                      "packed_table": "packed_table"}.get(v, v)
            assert f"__{kernel}(" in call, (v, call)
            # its input written by the call just before it, warm in the caches as in a model
            lines = [line for line in src.splitlines() if line.startswith("    mlcc_")]
            at = next(k for k, line in enumerate(lines) if f"&p_tune_{i}_{j}," in line)
            assert f"&p_warm_{i}_{j}," in lines[at - 1], lines[at - 1]
    got = mlcc.load(res.folder).run(feeds)
    ref = reference_outputs(onnx.load(str(tmp_path / "t.onnx")), feeds)
    for name, want in ref.items():
        tol = 1e-4 * max(1.0, float(np.abs(want).max()))
        assert np.abs(got[name] - want).max() <= tol, name


def _model(path: Path) -> dict:
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((32, 24, 1, 1)).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 21, 19])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 21, 19])],
        [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return {"x": rng.standard_normal((1, 16, 21, 19)).astype(np.float32)}


def test_tune_caches_per_cpu_and_tuning_file_rebuilds(tmp_path, monkeypatch, capsys):
    from mlcc.cli import main
    monkeypatch.setenv("MLCC_TUNING_CACHE", str(tmp_path / "cache"))
    feeds = _model(tmp_path / "m.onnx")
    first = tuning.tune(tmp_path / "m.onnx", "x86-native")
    # the layers with two variants or more to time: both on AVX-512, the 3x3 alone on AVX2
    # (the 1x1's alternatives need 512-bit channel tiles)
    ct = ConvTarget.from_options(load_target("x86-native").lowering_options())
    tunable = sum(len({choose_variant(layer, ct).name,
                       *(v.name for v in tuning_candidates(layer, ct))}) >= 2
                  for layer in tuning.conv_layers(tmp_path / "m.onnx"))
    assert tunable >= 1 and first.measured == tunable == len(first.times_ms)
    assert len(first.choices) == 2 and set(first.times_ms) <= set(first.choices)
    for key, times in first.times_ms.items():
        assert first.choices[key] in times and len(times) >= 2
    again = tuning.tune(tmp_path / "m.onnx", "x86-native")
    assert again.measured == 0 and again.choices == first.choices   # from the cache

    with pytest.raises(SystemExit) as exit_:
        main(["compile", str(tmp_path / "m.onnx"), "--target", "x86-native", "--tune",
              "-o", str(tmp_path / "a")], standalone_mode=True)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "tuned 2 convolution layers" in out and "0 measured" in out
    tuned = json.loads((tmp_path / "a" / "tuning.json").read_text())
    assert tuned["choices"] == first.choices
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["conv_choices"] == first.choices
    with pytest.raises(SystemExit) as exit_:
        main(["compile", str(tmp_path / "m.onnx"), "--target", "x86-native", "--tuning",
              str(tmp_path / "a" / "tuning.json"), "-o", str(tmp_path / "b")])
    assert exit_.value.code == 0
    assert ((tmp_path / "a" / "model.c").read_text() == (tmp_path / "b" / "model.c").read_text())
    ref = reference_outputs(onnx.load(str(tmp_path / "m.onnx")), feeds)
    got = mlcc.load(tmp_path / "b").run(feeds)
    assert np.abs(got["y"] - ref["y"]).max() <= 1e-4 * max(1.0, float(np.abs(ref["y"]).max()))
    # times measured on other kernels (another version of mlcc, another register tile) are
    # stale: measured again
    monkeypatch.setattr(tuning, "kernels_digest", lambda defines: "other kernels")
    assert tuning.tune(tmp_path / "m.onnx", "x86-native").measured == tunable


@pytest.mark.parametrize("args,message", [
    (["--target", "wasm", "--tune"], "does not run here"),
    (["--tuning", "{missing}"], "--tuning"),
    (["--tuning", "{bad}"], "not a tuning file"),
    (["--tune", "--tuning", "{bad}"], "give one"),
])
def test_tuning_misuse_is_a_clear_error(tmp_path, monkeypatch, capsys, args, message):
    from mlcc.cli import main
    monkeypatch.setenv("MLCC_TUNING_CACHE", str(tmp_path / "cache"))
    _model(tmp_path / "m.onnx")
    (tmp_path / "bad.json").write_text(json.dumps({"format": 99, "choices": []}))
    args = [a.format(missing=tmp_path / "none.json", bad=tmp_path / "bad.json") for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o"), *args])
    assert exit_.value.code != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "cache")
