"""Fuzzing of the compiler's input: ONNX files, target YAML files and calibration data.

    python tools/fuzz_compiler.py [--seconds 60] [--seed 0] [--corpus tests/corpus]
                                  [--save-failures] [--memory-mb 3072]

Every case goes through `mlcc compile CASE -o OUT --no-build` (the click command, in this
process) and must end in exit code 0, 1 (bad input) or 3 (unsupported), with a one-line
`mlcc: error: ...` message on failure, no traceback, within CASE_SECONDS, and with nothing
written outside the case's own folder (the working directory is an empty folder that must
stay empty). Exit code 70 (internal error), any other exit code, a timeout or a MemoryError
(the process runs under an address-space limit) is a failure.

The cases, in order:
  1. the corpus (tests/corpus/*.onnx and *.yaml: every case that once failed, kept);
  2. structured malformations of small valid models: truncation at many offsets, wrong
     initializer sizes, cycles, undefined inputs, huge and negative dimensions, zero-size
     tensors, unknown opset domains, external data pointing outside the model folder,
     a 2^31-element dimension product, bad attributes, duplicate names...;
  3. calibration data for `--quantize int8 --calibration` (the small CNN): .npz files
     truncated, flipped, with wrong names, dtypes or shapes, NaN/Inf, no samples, huge
     arrays, pickled object arrays whose unpickling would create a file; folders of .npy/.npz
     (empty, mixed, unreadable); .py generators that raise, exit, or yield garbage;
  4. seeded random mutations (byte flips, truncation, splices, protobuf field edits) of the
     valid models, of targets/x86.yaml and of a calibration .npz, until the time budget is
     spent.
Prints a summary; exits 1 if any case failed (each is written to the corpus with
--save-failures).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
CASE_SECONDS = 30
OK_CODES = {0, 1, 3}


# ------------------------------------------------------------------------------ seed models

def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "fuzz", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def seed_models() -> dict[str, onnx.ModelProto]:
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    cnn = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                          strides=[2, 2]),
         helper.make_node("Flatten", ["p"], ["fl"], name="flatten"),
         helper.make_node("Gemm", ["fl", "fw", "fb"], ["y"], name="fc", transB=1)],
        [helper.make_tensor_value_info("x", f, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", f, [1, 3])],
        [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
         numpy_helper.from_array(rng.standard_normal((3, 36)).astype(np.float32), "fw"),
         numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "fb")])
    shapes = _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i0"], ["d0"], name="gather", axis=0),
         helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"], name="unsq"),
         helper.make_node("Concat", ["d0u", "m1"], ["tgt"], name="concat", axis=0),
         helper.make_node("Reshape", ["x", "tgt"], ["r"], name="reshape"),
         helper.make_node("MatMul", ["r", "mw"], ["mm"], name="matmul"),
         helper.make_node("Softmax", ["mm"], ["sm"], name="softmax", axis=-1),
         helper.make_node("Equal", ["ids", "zero"], ["eq"], name="equal"),
         helper.make_node("Neg", ["sm"], ["sm2"], name="neg"),
         helper.make_node("Where", ["eq", "sm", "sm2"], ["y"], name="where")],
        [helper.make_tensor_value_info("x", f, [2, 4, 5]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 7])],
        [helper.make_tensor_value_info("y", f, [2, 4, 7])],
        [numpy_helper.from_array(np.array(0, np.int64), "i0"),
         numpy_helper.from_array(np.array([0], np.int64), "ax"),
         numpy_helper.from_array(np.array([-1], np.int64), "m1"),
         numpy_helper.from_array(rng.standard_normal((20, 7)).astype(np.float32), "mw"),
         numpy_helper.from_array(np.array(0, np.int64), "zero")])
    for m in (cnn, shapes):
        onnx.checker.check_model(m)
    return {"cnn": cnn, "shapes": shapes}


# ------------------------------------------------------------------------ structured cases

def structured_cases(seeds: dict[str, onnx.ModelProto]):
    """(name, files) pairs; files maps a relative path to bytes; 'model.onnx' is compiled,
    'target.yaml' (when present) is passed as --target."""
    cnn, shapes = seeds["cnn"], seeds["shapes"]
    good = cnn.SerializeToString()

    def edit(base, fn):
        m = onnx.ModelProto()
        m.CopyFrom(base)
        fn(m)
        return m.SerializeToString()

    yield "empty", {"model.onnx": b""}
    yield "not-protobuf", {"model.onnx": b"\xff" * 64}
    yield "text", {"model.onnx": b"this is not an onnx model\n"}
    for cut in sorted({1, 2, 7, 16, 64, len(good) // 3, len(good) // 2, len(good) - 9,
                       len(good) - 1}):
        yield f"truncated-{cut}", {"model.onnx": good[:cut]}

    def wrong_size(m):
        m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:-8]
    yield "initializer-too-short", {"model.onnx": edit(cnn, wrong_size)}

    def too_long(m):
        m.graph.initializer[0].raw_data += b"\0" * 12
    yield "initializer-too-long", {"model.onnx": edit(cnn, too_long)}

    def dims_lie(m):
        m.graph.initializer[2].dims[:] = [36, 3]
    yield "initializer-dims-swapped", {"model.onnx": edit(cnn, dims_lie)}

    def cycle(m):
        m.graph.node[0].input[0] = "fl"
    yield "cycle", {"model.onnx": edit(cnn, cycle)}

    def self_loop(m):
        m.graph.node[1].input[0] = "r"
    yield "self-loop", {"model.onnx": edit(cnn, self_loop)}

    def missing_input(m):
        m.graph.node[1].input[0] = "nowhere"
    yield "undefined-input", {"model.onnx": edit(cnn, missing_input)}

    def no_output(m):
        del m.graph.output[:]
    yield "no-graph-output", {"model.onnx": edit(cnn, no_output)}

    def output_undefined(m):
        m.graph.output[0].name = "ghost"
    yield "undefined-graph-output", {"model.onnx": edit(cnn, output_undefined)}

    def dup_output(m):
        m.graph.node[1].output[0] = "c"
    yield "duplicate-node-output", {"model.onnx": edit(cnn, dup_output)}

    for label, dims in (("huge-dim", [1, 2, 1 << 40, 6]), ("negative-dim", [1, 2, -6, 6]),
                        ("zero-dim", [0, 2, 6, 6]), ("zero-spatial", [1, 2, 0, 0]),
                        ("rank-9", [1] * 9), ("scalar", []),
                        ("two-gigs", [1, 2, 32768, 32768]), ("int64-max", [1, 2, 2**63 - 1, 6])):
        def set_dims(m, dims=dims):
            t = m.graph.input[0].type.tensor_type
            del t.shape.dim[:]
            for d in dims:
                t.shape.dim.add().dim_value = d
        yield label, {"model.onnx": edit(cnn, set_dims)}

    def zero_weights(m):
        m.graph.initializer[0].CopyFrom(numpy_helper.from_array(
            np.zeros((0, 2, 3, 3), np.float32), "w"))
    yield "zero-size-weight", {"model.onnx": edit(cnn, zero_weights)}

    def unknown_domain(m):
        m.opset_import.add(domain="com.example.unknown", version=1)
        m.graph.node[1].domain = "com.example.unknown"
    yield "unknown-domain", {"model.onnx": edit(cnn, unknown_domain)}

    def only_unknown(m):
        del m.opset_import[:]
        m.opset_import.add(domain="com.example", version=3)
    yield "only-unknown-opset", {"model.onnx": edit(cnn, only_unknown)}

    def future_opset(m):
        m.opset_import[0].version = 99
    yield "opset-99", {"model.onnx": edit(cnn, future_opset)}

    def unknown_op(m):
        m.graph.node[1].op_type = "TotallyNewOp"
    yield "unknown-op", {"model.onnx": edit(cnn, unknown_op)}

    def bad_attr(m):
        m.graph.node[0].attribute.append(helper.make_attribute("pads", [1, 1]))
    yield "duplicate-attribute", {"model.onnx": edit(cnn, bad_attr)}

    def neg_pads(m):
        for a in m.graph.node[0].attribute:
            if a.name == "pads":
                a.ints[:] = [-5, -5, -5, -5]
    yield "negative-pads", {"model.onnx": edit(cnn, neg_pads)}

    def huge_kernel(m):
        m.graph.node[2].attribute[0].ints[:] = [1 << 40, 1 << 40]
    yield "huge-pool-kernel", {"model.onnx": edit(cnn, huge_kernel)}

    def zero_stride(m):
        m.graph.node[2].attribute[1].ints[:] = [0, 0]
    yield "zero-stride", {"model.onnx": edit(cnn, zero_stride)}

    def wrong_elem(m):
        m.graph.input[0].type.tensor_type.elem_type = 999
    yield "unknown-elem-type", {"model.onnx": edit(cnn, wrong_elem)}

    def string_input(m):
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    yield "string-input", {"model.onnx": edit(cnn, string_input)}

    def ir_version(m):
        m.ir_version = 1 << 40
    yield "ir-version-huge", {"model.onnx": edit(cnn, ir_version)}

    for label, loc in (("external-parent", "../outside.bin"), ("external-absolute", "/etc/passwd"),
                       ("external-missing", "missing.bin"), ("external-dir", "."),
                       ("external-deep-parent", "sub/../../x.bin")):
        def external(m, loc=loc):
            t = m.graph.initializer[0]
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            del t.external_data[:]
            t.external_data.add(key="location", value=loc)
        yield label, {"model.onnx": edit(cnn, external)}

    def external_range(m):
        t = m.graph.initializer[0]
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="w.bin")
        t.external_data.add(key="offset", value="100000")
        t.external_data.add(key="length", value="288")
    yield "external-out-of-range", {"model.onnx": edit(cnn, external_range), "w.bin": b"\0" * 64}

    def external_short(m):
        t = m.graph.initializer[0]
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="w.bin")
        t.external_data.add(key="offset", value="-4")
    yield "external-negative-offset", {"model.onnx": edit(cnn, external_short),
                                       "w.bin": b"\0" * 288}

    def reshape_bad(m):
        m.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array([-7], np.int64), "m1"))
    yield "reshape-impossible", {"model.onnx": edit(shapes, reshape_bad)}

    def gather_oob(m):
        m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(9, np.int64), "i0"))
    yield "gather-constant-out-of-range", {"model.onnx": edit(shapes, gather_oob)}

    def expand_huge(m):
        n = m.graph.node.add()
        n.CopyFrom(helper.make_node("Expand", ["y", "big"], ["y2"], name="expand"))
        m.graph.initializer.append(numpy_helper.from_array(
            np.array([1 << 20, 1 << 20, 1, 7], np.int64), "big"))
        m.graph.output[0].name = "y2"
    yield "expand-to-8-tera", {"model.onnx": edit(shapes, expand_huge)}

    def dynamic(m):
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    yield "dynamic-unbound", {"model.onnx": edit(shapes, dynamic)}

    # One elementwise chain whose input shape is all there is: huge products reach codegen.
    for label, dims in (("2GB-product", [1 << 31]), ("8GB-product", [1 << 16, 1 << 15]),
                        ("4TB-product", [1 << 20, 1 << 20]), ("2^64-byte-product", [1 << 62]),
                        ("product-overflows-int64", [1 << 40, 1 << 40]),
                        ("zero-size", [3, 0, 5])):
        relu = _model([helper.make_node("Relu", ["x"], ["y"]),
                       helper.make_node("Sigmoid", ["y"], ["z"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                      [helper.make_tensor_value_info("z", TensorProto.FLOAT, dims)])
        yield label, {"model.onnx": relu.SerializeToString()}

    # Target files: the valid model with a broken --target.
    x86 = (ROOT / "targets" / "x86.yaml").read_text()
    for label, text in (
            ("yaml-empty", ""), ("yaml-list", "- 1\n- 2\n"), ("yaml-tabs", "name:\t\tx\n\t- a"),
            ("yaml-unknown-key", x86 + "\nwarp_drive: true\n"),
            ("yaml-bad-type", x86.replace("vector_bits: 128", "vector_bits: lots")),
            ("yaml-negative", x86.replace("vector_bits: 128", "vector_bits: -128")),
            ("yaml-huge", x86.replace("alignment: 64", "alignment: 99999999999999999999")),
            ("yaml-zero-align", x86.replace("alignment: 64", "alignment: 0")),
            ("yaml-odd-align", x86.replace("alignment: 64", "alignment: 48")),
            ("yaml-no-cc", x86.replace("cc: gcc", "cc: /nonexistent/cc")),
            ("yaml-cc-list", x86.replace("cc: gcc", "cc: [gcc, -v]")),
            ("yaml-flags-string", x86.replace("cflags: [-O3, -std=c99, -fPIC, -fvisibility=hidden]",
                                              "cflags: -O3")),
            ("yaml-anchor-bomb", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a]\n"
                                 "c: &c [*b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c]\n"
                                 "e: [*d, *d, *d, *d, *d, *d, *d, *d]\n"),
            ("yaml-python-tag", "!!python/object/apply:os.system ['touch PWNED']\n"),
            ("yaml-binary", "\x00\x01\x02"),
            ("yaml-deep", "a: " + "[" * 5000 + "]" * 5000 + "\n")):
        yield label, {"model.onnx": good, "target.yaml": text.encode("utf-8", "replace")}


# ---------------------------------------------------------------------- calibration cases

def _npz(**arrays) -> bytes:
    import io
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy(arr: np.ndarray) -> bytes:
    import io
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _pickle_bomb_npy() -> bytes:
    """An .npy of dtype object whose pickle, if loaded, would create ./PWNED."""
    import pickle

    class Bomb:
        def __reduce__(self):
            return (os.system, ("touch PWNED",))
    payload = pickle.dumps(np.array([Bomb()], dtype=object), protocol=2)
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header = header + " " * (63 - (len(header) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + payload


def _zip(members: dict[str, bytes]) -> bytes:
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in members.items():
            z.writestr(k, v)
    return buf.getvalue()


def _huge_npy_header(shape, descr="<f4") -> bytes:
    """An .npy header promising a huge array, followed by a few bytes."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    header = header + " " * (63 - (len(header) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + \
        b"\0" * 64


def calibration_files(rnd: random.Random | None = None) -> dict[str, bytes]:
    """A valid calibration set for the CNN seed (input x: [1, 2, 6, 6]), 4 samples."""
    x = np.random.default_rng(0).standard_normal((4, 1, 2, 6, 6)).astype(np.float32)
    return {"calib.npz": _npz(x=x)}


def calibration_cases(seeds: dict[str, onnx.ModelProto]):
    good = seeds["cnn"].SerializeToString()
    x = np.random.default_rng(0).standard_normal((4, 1, 2, 6, 6)).astype(np.float32)
    valid = _npz(x=x)

    def case(label, files):
        return f"calib-{label}", {"model.onnx": good, **files}

    yield case("valid", {"calib.npz": valid})
    for frac in (0, 0.1, 0.5, 0.9, 0.99):
        yield case(f"truncated-{frac}", {"calib.npz": valid[:int(len(valid) * frac)]})
    rnd = random.Random(7)
    for k in range(4):
        b = bytearray(valid)
        for _ in range(4):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        yield case(f"flipped-{k}", {"calib.npz": bytes(b)})
    nan = x.copy()
    nan[2, 0, 1, 3, 3] = np.nan
    inf = x.copy()
    inf[0, 0, 0, 0, 0] = -np.inf
    for label, arrays in (
            ("wrong-name", {"input": x}), ("float64", {"x": x.astype(np.float64)}),
            ("int32", {"x": x.astype(np.int32)}), ("bool", {"x": x > 0}),
            ("complex", {"x": x.astype(np.complex64)}), ("strings", {"x": np.array(["a", "b"])}),
            ("bytes", {"x": np.array([b"ab"])}),
            ("structured", {"x": np.zeros(4, dtype=[("a", "f4"), ("b", "i4")])}),
            ("scalar", {"x": np.float32(1)}), ("wrong-shape", {"x": x[:, :, :, :5]}),
            ("no-batch", {"x": x[:, 0]}), ("rank-1", {"x": x.reshape(-1)}),
            ("nan", {"x": nan}), ("inf", {"x": inf}),
            ("empty", {"x": x[:0]}), ("no-arrays", {}),
            ("zero-size-axis", {"x": np.zeros((4, 1, 2, 0, 6), np.float32)}),
            ("many-samples", {"x": np.zeros((5000, 1, 2, 6, 6), np.float32)})):
        yield case(label, {"calib.npz": _npz(**arrays)})
    # Arrays that must never be unpickled (allow_pickle=False), as npz members and .npy files.
    bomb = _pickle_bomb_npy()
    yield case("pickle-npz", {"calib.npz": _zip({"x.npy": bomb})})
    yield case("pickle-npy", {"calib/0.npy": bomb})
    yield case("object-npz", {"calib.npz": _zip({"x.npy": _npy(np.array([x[0]], dtype=object))})})
    # Headers that promise huge arrays: refused without allocating them.
    for label, shape in (("huge-4TB", (1 << 40, 1, 2, 6, 6)), ("huge-2^62", (1 << 62,)),
                         ("huge-negative", (-1, 1, 2, 6, 6)),
                         ("huge-dims", (1 << 31, 1 << 31, 1 << 31))):
        yield case(f"{label}-npz", {"calib.npz": _zip({"x.npy": _huge_npy_header(shape)})})
        yield case(f"{label}-npy", {"calib/0.npy": _huge_npy_header(shape)})
    yield case("bad-descr-npz", {"calib.npz": _zip({"x.npy": _huge_npy_header((4,), "<zz")})})
    yield case("not-a-zip", {"calib.npz": b"PK\x03\x04 not really"})
    yield case("zip-directory", {"calib.npz": _zip({"x.npy/": b""})})
    # Folders.
    yield case("folder-empty", {"calib/README": b"nothing here"})
    yield case("folder-npy", {f"calib/{i}.npy": _npy(x[i]) for i in range(3)})
    yield case("folder-mixed", {"calib/0.npy": _npy(x[0]), "calib/1.npz": _npz(x=x[1]),
                                "calib/2.npz": _npz(z=x[2])})
    yield case("folder-bad-file", {"calib/0.npy": _npy(x[0]), "calib/1.npy": b"garbage"})
    yield case("folder-npy-dir", {"calib/0.npy/inner": b""})
    yield case("folder-nan", {"calib/0.npy": _npy(nan[2])})
    yield case("wrong-suffix", {"calib.txt": b"1 2 3"})
    # Python generators.
    for label, code in (
            ("py-valid", "import numpy as np\ndef calibration_data():\n"
                         "    for i in range(3):\n"
                         "        yield {'x': np.full((1, 2, 6, 6), i, np.float32)}\n"),
            ("py-syntax", "def calibration_data(:\n"),
            ("py-raises-at-import", "raise RuntimeError('boom')\n"),
            ("py-exit-at-import", "import sys\nsys.exit(0)\n"),
            ("py-exit-3", "import sys\ndef calibration_data():\n    sys.exit(3)\n"),
            ("py-no-function", "x = 1\n"), ("py-not-callable", "calibration_data = 3\n"),
            ("py-raises", "def calibration_data():\n    raise ValueError('no data')\n"),
            ("py-raises-later", "import numpy as np\ndef calibration_data():\n"
                                "    yield {'x': np.zeros((1, 2, 6, 6), np.float32)}\n"
                                "    raise OSError('disk gone')\n"),
            ("py-returns-none", "def calibration_data():\n    return None\n"),
            ("py-returns-int", "def calibration_data():\n    return 5\n"),
            ("py-yields-none", "def calibration_data():\n    yield None\n"),
            ("py-yields-list", "import numpy as np\ndef calibration_data():\n"
                               "    yield [np.zeros((1, 2, 6, 6), np.float32)]\n"),
            ("py-yields-strings", "def calibration_data():\n    yield {'x': 'abc'}\n"),
            ("py-yields-objects", "def calibration_data():\n    yield {'x': object()}\n"),
            ("py-yields-ragged", "def calibration_data():\n    yield {'x': [[1.0], [1.0, 2.0]]}\n"),
            ("py-yields-huge-int", "def calibration_data():\n    yield {'x': 10 ** 400}\n"),
            ("py-yields-nan", "import numpy as np\ndef calibration_data():\n"
                              "    yield {'x': np.full((1, 2, 6, 6), np.nan, np.float32)}\n"),
            ("py-yields-nonstr-key", "import numpy as np\ndef calibration_data():\n"
                                     "    yield {0: np.zeros((1, 2, 6, 6), np.float32)}\n"),
            ("py-empty", "def calibration_data():\n    return iter(())\n"),
            ("py-bad-bytes", "\xff\xfe\x00garbage")):
        yield case(label, {"calib.py": code.encode("latin-1")})


def mutate_calibration(rnd: random.Random) -> bytes:
    """A random byte mutation of a valid calibration .npz (a zip of .npy members)."""
    return mutate_bytes(calibration_files()["calib.npz"], rnd)


# --------------------------------------------------------------------------- random cases

def mutate_bytes(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    kind = rnd.randrange(5)
    if kind == 0 and b:                        # flip a few bits
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
    elif kind == 1 and b:                      # overwrite bytes with interesting values
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] = rnd.choice([0, 1, 0x7F, 0x80, 0xFF])
    elif kind == 2:                            # truncate
        b = b[:rnd.randrange(len(b) + 1)]
    elif kind == 3 and len(b) > 4:             # duplicate a slice
        i, j = sorted(rnd.randrange(len(b)) for _ in range(2))
        b[j:j] = b[i:j]
    elif b:                                    # delete a slice
        i = rnd.randrange(len(b))
        del b[i:i + rnd.randint(1, 16)]
    return bytes(b)


def mutate_model(m: onnx.ModelProto, rnd: random.Random) -> bytes:
    """A structure-aware edit: change a dimension, an attribute, a name or a type."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    g = m2.graph
    kind = rnd.randrange(6)
    interesting = [0, 1, -1, 2, 7, 1 << 31, -(1 << 31), 1 << 62, 3]
    if kind == 0 and g.input:
        t = g.input[rnd.randrange(len(g.input))].type.tensor_type
        if t.shape.dim:
            t.shape.dim[rnd.randrange(len(t.shape.dim))].dim_value = rnd.choice(interesting)
    elif kind == 1 and g.node:
        n = g.node[rnd.randrange(len(g.node))]
        ints = [a for a in n.attribute if a.ints or a.type == onnx.AttributeProto.INT]
        if ints:
            a = rnd.choice(ints)
            if a.ints:
                a.ints[rnd.randrange(len(a.ints))] = rnd.choice(interesting)
            else:
                a.i = rnd.choice(interesting)
    elif kind == 2 and g.node:
        n = g.node[rnd.randrange(len(g.node))]
        names = [i for nn in g.node for i in nn.output] + [i.name for i in g.input]
        if n.input:
            n.input[rnd.randrange(len(n.input))] = rnd.choice(names + ["", "zz"])
    elif kind == 3 and g.initializer:
        t = g.initializer[rnd.randrange(len(g.initializer))]
        t.data_type = rnd.choice([1, 2, 3, 6, 7, 9, 10, 11, 16, 8, 0, 40])
    elif kind == 4 and g.initializer:
        t = g.initializer[rnd.randrange(len(g.initializer))]
        if t.dims:
            t.dims[rnd.randrange(len(t.dims))] = rnd.choice(interesting)
    elif g.node:
        n = g.node[rnd.randrange(len(g.node))]
        n.op_type = rnd.choice(["Add", "Conv", "Gather", "Reshape", "Slice", "Loop", "If",
                                "Resize", "Softmax", "TopK", "Identity"])
    return m2.SerializeToString()


# ------------------------------------------------------------------------------ execution

class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_case(files: dict[str, bytes], work: Path) -> tuple[bool, str]:
    """Runs one case in a fresh folder; returns (ok, why)."""
    from click.testing import CliRunner
    from mlcc.cli import main as cli

    case = work / "case"
    shutil.rmtree(work, ignore_errors=True)
    case.mkdir(parents=True)
    cwd = work / "cwd"
    cwd.mkdir()
    for rel, data in files.items():
        (case / rel).parent.mkdir(parents=True, exist_ok=True)
        (case / rel).write_bytes(data)
    before = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    args = ["compile", str(case / "model.onnx"), "-o", str(case / "out"), "--no-build"]
    if "target.yaml" in files:
        args += ["--target", str(case / "target.yaml")]
    calib = sorted({rel.split("/")[0] for rel in files if rel.startswith("calib")})
    if calib:
        args += ["--quantize", "int8", "--calibration", str(case / calib[0])]
    old = os.getcwd()
    os.chdir(cwd)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    start = time.monotonic()
    try:
        result = CliRunner().invoke(cli, args, catch_exceptions=True)
    except _Timeout:
        return False, f"no answer within {CASE_SECONDS} s"
    except BaseException as exc:  # noqa: BLE001 - what escapes click (KeyboardInterrupt...)
        return False, f"escaped the command line: {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        os.chdir(old)
    elapsed = time.monotonic() - start
    out = result.output or ""
    if result.exit_code not in OK_CODES:
        exc = result.exception
        what = f"{type(exc).__name__}: {exc}" if exc is not None and not isinstance(
            exc, SystemExit) else out.strip()[-300:]
        return False, f"exit code {result.exit_code}: {what}"
    if "Traceback" in out:
        return False, "a traceback was printed"
    if result.exit_code != 0:
        # One error line; a list of unsupported nodes follows it indented.
        lines = [l for l in out.strip().splitlines() if l.strip()]
        if not lines or not lines[0].startswith("mlcc: error: ") or any(
                not l.startswith("  ") for l in lines[1:]):
            return False, f"not a clear error message: {out.strip()[:300]!r}"
    if result.exit_code == 0 and not (case / "out" / "model.h").is_file():
        return False, "exit code 0 without an output folder"
    after = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    stray = [p for p in after if p not in before and not p.startswith("case/out")]
    if stray:
        return False, f"wrote outside the output folder: {stray[:3]}"
    if any(work.parent.glob("PWNED")) or (cwd / "PWNED").exists():
        return False, "the target file ran a command"
    return True, f"exit {result.exit_code} in {elapsed:.2f} s"


def corpus_cases(corpus: Path):
    for f in sorted(corpus.glob("*.onnx")) if corpus.is_dir() else []:
        files = {"model.onnx": f.read_bytes()}
        yaml = f.with_suffix(".yaml")
        if yaml.is_file():
            files["target.yaml"] = yaml.read_bytes()
        for suffix in (".npz", ".py"):     # calibration data: calib.npz / calib.py
            calib = f.with_suffix(suffix)
            if calib.is_file():
                files[f"calib{suffix}"] = calib.read_bytes()
        yield f"corpus/{f.name}", files


def save_failure(corpus: Path, name: str, files: dict[str, bytes]) -> str:
    corpus.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(b"".join(files[k] for k in sorted(files))).hexdigest()[:12]
    stem = f"{name.replace('/', '_')}-{digest}"
    (corpus / f"{stem}.onnx").write_bytes(files["model.onnx"])
    if "target.yaml" in files:
        (corpus / f"{stem}.yaml").write_bytes(files["target.yaml"])
    for suffix in (".npz", ".py"):
        if f"calib{suffix}" in files:
            (corpus / f"{stem}{suffix}").write_bytes(files[f"calib{suffix}"])
    return stem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="time budget for the random mutations (after the fixed cases)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--save-failures", action="store_true")
    ap.add_argument("--memory-mb", type=int, default=3072,
                    help="address-space limit of this process (0: none)")
    ap.add_argument("--report", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.memory_mb:
        limit = args.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import mlcc.cli  # noqa: F401  (imported before the clock starts)

    seeds = seed_models()
    x86 = (ROOT / "targets" / "x86.yaml").read_bytes()
    rnd = random.Random(args.seed)
    results = []
    failures = []
    with tempfile.TemporaryDirectory(prefix="mlcc-fuzz-") as tmp:
        work = Path(tmp) / "w"

        def one(name, files):
            try:
                ok, why = run_case(files, work)
            except MemoryError:
                ok, why = False, "MemoryError: the compiler exceeded the memory limit"
            results.append({"case": name, "ok": ok, "why": why})
            if not ok:
                failures.append((name, why))
                if args.save_failures:
                    save_failure(args.corpus, name, files)

        for name, files in corpus_cases(args.corpus):
            one(name, files)
        for name, files in structured_cases(seeds):
            one(name, files)
        for name, files in calibration_cases(seeds):
            one(name, files)
        fixed = len(results)
        deadline = time.monotonic() + args.seconds
        i = 0
        while time.monotonic() < deadline:
            which = rnd.choice(sorted(seeds))
            r = rnd.random()
            if r < 0.45:
                files = {"model.onnx": mutate_bytes(seeds[which].SerializeToString(), rnd)}
                name = f"random-bytes-{which}-{args.seed}-{i}"
            elif r < 0.85:
                files = {"model.onnx": mutate_model(seeds[which], rnd)}
                name = f"random-edit-{which}-{args.seed}-{i}"
            elif r < 0.9:
                files = {"model.onnx": seeds["cnn"].SerializeToString(),
                         "calib.npz": mutate_calibration(rnd)}
                name = f"random-calib-{args.seed}-{i}"
            else:
                files = {"model.onnx": seeds["cnn"].SerializeToString(),
                         "target.yaml": mutate_bytes(x86, rnd)}
                name = f"random-yaml-{args.seed}-{i}"
            one(name, files)
            i += 1
    codes = {}
    for r in results:
        key = r["why"].split(" in ")[0] if r["ok"] else "FAILED"
        codes[key] = codes.get(key, 0) + 1
    print(f"{len(results)} cases ({fixed} fixed, {len(results) - fixed} random, seed "
          f"{args.seed}): " + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())))
    for name, why in failures:
        print(f"FAILED {name}: {why}")
    if args.report:
        args.report.write_text(json.dumps(results, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
