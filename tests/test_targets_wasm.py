"""The wasm target: model.wasm built by emcc (SIMD128), its JavaScript wrapper (model.mjs,
model.cjs) and harness.mjs, run in node and compared with onnxruntime at the x86 tolerance.

Skipped when emcc (Debian's emscripten) or node (nodejs) is missing; `make test` installs them
on Debian. This file holds what CI runs on every change for wasm alone: the build, the
JavaScript API and its errors, embedded and external weights, and a few real models (the
operator cases shared with arm are in test_cross_targets.py); `make test-targets` runs every
model of test_models.py for wasm as well (MLCC_TEST_TARGET=wasm).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import fetch_models as fm
import mlcc
import test_models as tm
from mlcc import resources
from mlcc.cli import main as cli_main
from mlcc.errors import InputError, RuntimeStatusError, TargetError
from mlcc.targets import load_target, parse_target
from onnx import helper
from util import compile_and_run, make_model, reference_outputs

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
WASM = load_target("wasm")
MISSING = "; ".join(WASM.missing_tools())
needs_wasm = pytest.mark.skipif(bool(MISSING), reason=MISSING or "emcc and node present")
NODE_TIMEOUT_S = 120


def node(script: str, cwd: Path, *args: str, module: str = "mjs"
         ) -> subprocess.CompletedProcess:
    """Runs a JavaScript snippet in node from `cwd` (an ES module, or CommonJS)."""
    path = cwd / f"test_script.{module}"
    path.write_text(script)
    return subprocess.run(["node", str(path), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=NODE_TIMEOUT_S)


def _digits_input(seed: int = 0) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(seed).standard_normal((1, 1, 8, 8)).astype(np.float32)}


@pytest.fixture(scope="module")
def digits_wasm(tmp_path_factory) -> Path:
    if MISSING:
        pytest.skip(MISSING)
    out = tmp_path_factory.mktemp("wasm") / "digits"
    mlcc.compile(DIGITS, out, target="wasm", name="digits")
    return out


@pytest.fixture(scope="module")
def digits_embedded(tmp_path_factory) -> Path:
    if MISSING:
        pytest.skip(MISSING)
    out = tmp_path_factory.mktemp("wasm") / "digits_embedded"
    mlcc.compile(DIGITS, out, target="wasm", name="digits", embed_weights=True)
    return out


# --------------------------------------------------------------------------------- the folder

def test_compile_writes_module_wrappers_and_harness(digits_wasm):
    m = json.loads((digits_wasm / "manifest.json").read_text())
    assert m["target"] == "wasm" and m["library"] == "model.wasm"
    assert m["harness"] == "harness.mjs" and m["run"] == ["node"]
    assert m["run_package"] == "nodejs"
    assert {"model.wasm", "model.mjs", "model.cjs", "harness.mjs", "model.h",
            "weights.bin"} <= set(m["files"])
    assert "harness.c" not in m["files"] and not (digits_wasm / "libmodel.so").exists()
    assert (digits_wasm / "model.wasm").read_bytes()[:4] == b"\0asm"
    assert "-msimd128" in (digits_wasm / "Makefile").read_text()
    # A standalone module: no Emscripten glue, one import, the model's API as exports.
    r = node("""
        import { readFileSync } from "node:fs";
        const m = new WebAssembly.Module(readFileSync("model.wasm"));
        console.log(JSON.stringify({imports: WebAssembly.Module.imports(m).map(i => i.name),
                                    exports: WebAssembly.Module.exports(m).map(e => e.name)}));
        """, digits_wasm)
    assert r.returncode == 0, r.stderr
    io = json.loads(r.stdout)
    assert io["imports"] == ["emscripten_notify_memory_growth"]
    assert {"digits_init", "digits_run_v", "digits_model_info", "mlcc_status_string", "malloc",
            "memory"} <= set(io["exports"])
    assert "digits_init_embedded" not in io["exports"]


def test_folders_are_deterministic(digits_wasm, tmp_path):
    mlcc.compile(DIGITS, tmp_path / "b", target="wasm", name="digits")
    files = sorted(p.relative_to(digits_wasm) for p in digits_wasm.rglob("*")
                   if p.is_file() and not p.name.startswith("test_script"))
    assert Path("model.wasm") in files and Path("model.mjs") in files
    for rel in files:
        assert (digits_wasm / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


@needs_wasm
def test_kernels_compile_to_simd128(digits_wasm):
    """The vector-extension kernels become SIMD128 instructions (wasm-objdump from Debian's
    wabt reads the module)."""
    if shutil.which("wasm-objdump") is None:
        pytest.skip("wasm-objdump is not installed (apt-get install wabt)")
    dis = subprocess.run(["wasm-objdump", "-d", str(digits_wasm / "model.wasm")],
                         capture_output=True, text=True, check=True).stdout
    for instruction in ("f32x4.mul", "f32x4.add", "v128.load", "v128.store", "f32x4.max"):
        assert instruction in dis, instruction
    assert "f32x4.relaxed" not in dis      # no fused multiply-add: rounding as on x86


def test_module_size_budget(digits_wasm):
    """Code only (the weights are in weights.bin): the digits CNN's module stays small. The
    issue's goal is 1/20 of onnxruntime-web's 14.2 MB; this is a tripwire for accidental bloat
    (libc's printf, a kernel file pulled in whole). 62.8 KiB at 9f7bd57, 67.1 KiB after the
    one-row GEMM and Winograd's partial vectors, 101.8 KiB after the epilogues in registers, the
    shifted-copy implicit GEMM and its tile inlined per vector count (2026-11-26)."""
    assert (digits_wasm / "model.wasm").stat().st_size < 128 * 1024


@needs_wasm
def test_runtime_compiles_warning_free_with_emcc():
    rt = resources.runtime_c()
    cmd = [WASM.toolchain.cc, "-std=c99", "-O2", "-msimd128", "-Wall", "-Wextra", "-pedantic",
           "-Werror", *WASM.defines(), f"-I{rt / 'include'}", f"-I{rt / 'kernels'}",
           "-fsyntax-only", *map(str, sorted((rt / "kernels").glob("*.c"))
                                 + sorted((rt / "src").glob("*.c")))]
    subprocess.run(cmd, check=True, env={**os.environ, **dict(WASM.toolchain.env)},
                   timeout=300)


# --------------------------------------------------------------------------------- operators

# --------------------------------------------------------------------------------- JS API

def test_js_api_runs_and_checks_its_inputs(digits_wasm):
    x = _digits_input(7)["input"]
    x.astype("<f4").tofile(digits_wasm / "x.bin")
    r = node("""
        import { readFileSync } from "node:fs";
        import { createModel, MlccError } from "./model.mjs";
        const model = await createModel();
        const x = new Float32Array(new Uint8Array(readFileSync("x.bin")).buffer);
        const out = model.run({ input: x });
        const errors = [];
        for (const bad of [{}, { input: x, extra: x }, { input: new Float64Array(64) },
                           { input: new Float32Array(65) }, { input: Array.from(x) }, null]) {
          try { model.run(bad); errors.push("no error"); }
          catch (e) { errors.push(`${e instanceof MlccError} ${e.status} ${e.message}`); }
        }
        console.log(JSON.stringify({
          logits: Array.from(out.logits), type: out.logits.constructor.name,
          again: model.run({ input: x }).logits.every((v, i) => v === out.logits[i]),
          inputs: model.inputs, outputs: model.outputs, errors }));
        """, digits_wasm)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["type"] == "Float32Array" and res["again"]
    expected = mlcc.load(digits_wasm).run({"input": x})["logits"][0]
    np.testing.assert_array_equal(np.array(res["logits"], np.float32), expected)
    assert res["inputs"] == [{"dtype": "float32", "name": "input", "shape": [1, 1, 8, 8],
                              "size": 64}]
    assert res["outputs"][0]["name"] == "logits" and res["outputs"][0]["shape"] == [1, 10]
    e = res["errors"]
    assert e[0] == 'true 0 inputs do not match the model (missing "input"); it takes "input"'
    assert e[1] == 'true 0 inputs do not match the model (unknown "extra"); it takes "input"'
    assert e[2] == ('true 0 input "input" must be a Float32Array of 64 elements (float32 '
                    '[1, 1, 8, 8]), got a Float64Array of 64 elements')
    assert "got a Float32Array of 65 elements" in e[3] and "got an Array" in e[4]
    assert e[5].startswith("true 0 run takes an object {input name: typed array}")


def test_js_status_codes_become_errors_with_the_status_text(digits_wasm):
    blob = bytearray((digits_wasm / "weights.bin").read_bytes())
    blob[-1] ^= 1
    (digits_wasm / "corrupt.bin").write_bytes(bytes(blob))
    r = node("""
        import { createModel } from "./model.mjs";
        for (const weights of ["corrupt.bin", new Uint8Array(10), "missing.bin", 42]) {
          try { await createModel({ weights }); console.log("no error"); }
          catch (e) { console.log(`${e.name} ${e.status} ${e.message}`); }
        }
        try { await createModel({ weight: "weights.bin" }); }
        catch (e) { console.log(e.message); }
        """, digits_wasm)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == ("MlccError 8 mlcc: init failed: the weight blob is corrupted (checksum "
                        "mismatch) (status 8)")
    assert lines[1] == ("MlccError 5 mlcc: init failed: the weights are not an mlcc weight "
                        "blob (bad magic) (status 5)")
    assert lines[2].startswith("MlccError 0 cannot read the weights from missing.bin")
    assert lines[3] == ("MlccError 0 the weights must be a URL, a path, an ArrayBuffer or a "
                        "typed array, not number")
    assert lines[4] == "unknown option weight (createModel takes wasm and weights)"


def test_embedded_and_external_weights_give_the_same_outputs(digits_wasm, digits_embedded):
    """--embed-weights: createModel() needs no weights.bin (removed here); CommonJS too."""
    (digits_embedded / "weights.bin").rename(digits_embedded / "weights.moved")
    try:
        x = _digits_input(3)["input"]
        for folder in (digits_embedded, digits_wasm):
            x.astype("<f4").tofile(folder / "x.bin")
        script = """
            const { createModel } = require("./model.cjs");
            const x = new Float32Array(new Uint8Array(require("fs").readFileSync("x.bin")).buffer);
            createModel().then((m) => console.log(JSON.stringify(
              Array.from(m.run({ input: x }).logits))));
            """
        r = node(script, digits_embedded, module="cjs")
        assert r.returncode == 0, r.stderr
        embedded = np.array(json.loads(r.stdout), np.float32)
        r = node(script, digits_wasm, module="cjs")
        assert r.returncode == 0, r.stderr
        external = np.array(json.loads(r.stdout), np.float32)
    finally:
        (digits_embedded / "weights.moved").rename(digits_embedded / "weights.bin")
    np.testing.assert_array_equal(embedded, external)
    # Without embedded weights and without weights.bin: a clear error.
    folder = digits_wasm.parent / "no_weights"
    shutil.copytree(digits_wasm, folder)
    (folder / "weights.bin").unlink()
    r = node('import { createModel } from "./model.mjs";\n'
             'try { await createModel(); } catch (e) { console.log(e.message); }\n', folder)
    assert "cannot read weights.bin from" in r.stdout and "no such file" in r.stdout


def test_embedded_harness_and_wasm_option(digits_embedded):
    """harness.mjs with "-" uses the embedded weights; createModel({wasm}) takes bytes."""
    x = _digits_input(4)["input"]
    x.astype("<f4").tofile(digits_embedded / "in.bin")
    proc = subprocess.run(["node", "harness.mjs", "-", "in.bin", "out.bin"],
                          cwd=digits_embedded, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(digits_embedded / "out.bin", "<f4").reshape(1, 10)
    np.testing.assert_array_equal(got, mlcc.load(digits_embedded).run({"input": x})["logits"])
    r = node("""
        import { readFileSync } from "node:fs";
        import { createModel } from "./model.mjs";
        const wasm = new WebAssembly.Module(readFileSync("model.wasm"));
        const m = await createModel({ wasm });
        console.log(m.run({ input: new Float32Array(64) }).logits.length);
        try { await createModel({ wasm: new Uint8Array([1, 2, 3]) }); }
        catch (e) { console.log(e.message); }
        """, digits_embedded)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "10" and lines[1].startswith("model.wasm is not a valid WebAssembly")


# --------------------------------------------------------------------------------- the runner

def test_runner_checks_inputs_like_the_in_process_model(digits_wasm):
    m = mlcc.load(digits_wasm)
    assert type(m).__name__ == "HarnessModel"
    x = _digits_input()["input"]
    y = m.run({"input": x})["logits"]
    assert y.shape == (1, 10) and y.dtype == np.float32
    with pytest.raises(InputError, match="missing 'input'"):
        m.run({})
    with pytest.raises(InputError, match="shape"):
        m.run({"input": x[..., :4]})
    assert not [p for p in digits_wasm.iterdir() if p.name.startswith(".run-")]


@needs_wasm
def test_storage_types_through_the_js_wrapper_and_harness(tmp_path):
    """int4 (packed, an odd count) and bfloat16 inputs, int2 and float8 outputs: the JS
    wrapper's typed arrays and the node harness's byte sizes (both from one table)."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["xf"], ["y"], to=TensorProto.INT2),
             helper.make_node("Cast", ["b"], ["f8"], to=TensorProto.FLOAT8E4M3FN)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT4, [7]),
                     helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [5])],
        [helper.make_tensor_value_info("y", TensorProto.INT2, [7]),
         helper.make_tensor_value_info("f8", TensorProto.FLOAT8E4M3FN, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="wasm")
    feeds = {"x": np.array([0, 1, -2, 3, 7, -8, 5], np.float32).astype(np.dtype("int4")),
             "b": np.array([1.5, -2, 3e38, 0, 1e-3], np.float32).astype(np.dtype("bfloat16"))}
    got = mlcc.load(tmp_path / "out").run(feeds)
    for name, ref in zip(("y", "f8"), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_array_equal(got[name].view(np.uint8), ref.view(np.uint8))


def test_wasm_outputs_are_the_x86_targets_bit_for_bit(digits_wasm, tmp_path):
    """Same vector width (16 bytes), no fused multiply-adds on either: same sums, same order.
    Both compute 3x3 convolutions by Winograd (`winograd: true`), with the same tiles (on
    4-lane vectors every qualifying layer takes it: mlcc/ops/winograd.py, pays)."""
    x86 = tmp_path / "x86"
    mlcc.compile(DIGITS, x86, target="x86", name="digits")
    assert "mlcc_f32_conv2d__winograd_2x2" in (x86 / "model.c").read_text()
    x = _digits_input(5)
    np.testing.assert_array_equal(mlcc.load(digits_wasm).run(x)["logits"],
                                  mlcc.load(x86).run(x)["logits"])


# (channels, height, width, kernel, stride, pad, dilation, activation): wasm's own depthwise
# kernel (depthwise.c, dw_wasm_task: output rows written in place, the last step of a row running
# into the next one, never past the plane) on maps of 1 to 37 columns, stride 2, 5x5 (not 9
# taps) and dilated windows
DW_CASES = [(3, 14, 14, 3, 1, 1, 1, "Clip"), (2, 1, 1, 3, 1, 1, 1, None),
            (17, 7, 7, 3, 1, 1, 1, "Relu"), (5, 13, 11, 3, 2, 1, 1, "Clip"),
            (4, 29, 37, 3, 1, 0, 1, "Sigmoid"), (2, 9, 5, 5, 1, 2, 1, None),
            (3, 23, 19, 3, 2, 1, 2, "Relu"), (6, 2, 3, 3, 1, 1, 1, "LeakyRelu"),
            (2, 33, 33, 3, 1, 1, 1, None), (4, 17, 18, 3, 2, 1, 1, "Relu"), (3, 8, 9, 3, 2, 0, 1, None),
            # 3x3 pad 1 read in place (dw_ip_plane): rows of 6 (the least) to 67 outputs,
            # single or 4-vector row ends, the last middle step moved back, odd input widths at
            # stride 2 (the right padding read), one row; rows of 5 take the padded copy
            (2, 9, 6, 3, 1, 1, 1, "Clip"), (2, 1, 9, 3, 1, 1, 1, None), (3, 5, 31, 3, 1, 1, 1, "Relu"),
            (2, 11, 37, 3, 1, 1, 1, "LeakyRelu"), (2, 7, 67, 3, 1, 1, 1, "Clip"),
            (2, 13, 13, 3, 2, 1, 1, "Clip"), (3, 12, 12, 3, 2, 1, 1, None), (2, 5, 17, 3, 2, 1, 1, "Relu"),
            (2, 9, 67, 3, 2, 1, 1, "Clip"), (2, 8, 64, 3, 2, 1, 1, "Sigmoid"), (2, 3, 11, 3, 2, 1, 1, None),
            (2, 6, 5, 3, 1, 1, 1, "Clip"), (2, 7, 9, 3, 2, 1, 1, "Relu"),
            # the padded copy's 3x3 variants (dw_wasm_plane_*) for pad 0
            (2, 9, 20, 3, 1, 0, 1, "Clip"), (2, 9, 11, 3, 2, 0, 1, "Clip"), (2, 8, 19, 3, 1, 0, 1, "Relu"),
            (2, 6, 18, 3, 1, 0, 1, None)]
# (in channels, out channels, height, width, activation, residual): 1x1 convolutions through
# the packed GEMM's whole 4 x 8 tiles on wasm (gemm.c, packed_tile_whole) and its edge tiles:
# channel counts off the 4-row tile, maps off the 8-column panel, a depth over one k block (256);
# last panels of 1, 2 or 4 columns (gemm.c, narrow_panel: 4, 2 and 1 A panels at a time, rows
# off the 8-row panel, more than MLCC_GEMM_MC rows, both loop nests, no full panel at all); the
# row-major nest (depth <= 64) of each activation kind (gemm_rows_outer_*) and of the others
PW_CASES = [(16, 21, 11, 13, "Clip", False), (3, 8, 4, 8, "Relu", True),
            (300, 13, 5, 7, None, True), (24, 36, 9, 9, "Sigmoid", False),
            (7, 5, 3, 3, "Relu", False), (32, 40, 17, 16, "Clip", True),
            (300, 43, 7, 7, "Clip", True), (20, 37, 5, 2, "Relu", False),
            (70, 300, 3, 6, None, False), (64, 33, 1, 1, "Relu", True),
            (40, 19, 6, 7, None, False), (50, 27, 2, 6, "Relu", False),
            (300, 20, 4, 5, "Clip", True)]


# (in channels, out channels, height, width, stride, dilation, activation): 3x3 convolutions
# that x86 computes by the implicit GEMM and wasm by it (conv.c, implicit_tile: wasm's
# whole-tile epilogue) where the stride is 1 (below Winograd's 8 channels, dilated, a depth
# over one k block: the partial sums), by gathered panels where it is 2 (`implicit_strided:
# false` in targets/wasm.yaml): the same sums either way
IM_CASES = [(8, 13, 21, 19, 2, 1, "Relu"), (5, 6, 20, 23, 1, 1, "Clip"),
            (32, 9, 11, 17, 2, 1, None), (9, 16, 16, 16, 2, 1, "Sigmoid"),
            (32, 11, 13, 19, 1, 2, "Relu")]


def _act_node(act: str, x: str, y: str):
    if act == "Clip":
        return helper.make_node("Clip", [x, "clip_lo", "clip_hi"], [y])
    if act == "LeakyRelu":
        return helper.make_node("LeakyRelu", [x], [y], alpha=0.1)
    return helper.make_node(act, [x], [y])


@needs_wasm
def test_depthwise_and_pointwise_are_the_x86_targets_bit_for_bit(tmp_path):
    """wasm's own depthwise kernel and whole-tile GEMM epilogues (packed and implicit;
    f32x4.pmin/pmax for ReLU and Clip, the activation chosen once per call or tile) against
    the x86 target's kernels: the
    same sums in the same order, so the same bits, and onnxruntime within mlcc verify's
    tolerance."""
    rng = np.random.default_rng(11)
    feeds, weights, nodes, outs = {}, {"clip_lo": np.float32(-0.5), "clip_hi": np.float32(0.75)}, [], []
    for i, (c, h, w, k, s, pad, dil, act) in enumerate(DW_CASES):
        feeds[f"d{i}"] = rng.standard_normal((1, c, h, w)).astype(np.float32)
        weights[f"dW{i}"] = rng.standard_normal((c, 1, k, k)).astype(np.float32)
        weights[f"db{i}"] = rng.standard_normal(c).astype(np.float32)
        nodes.append(helper.make_node("Conv", [f"d{i}", f"dW{i}", f"db{i}"],
                                      [f"dc{i}" if act else f"dy{i}"], group=c, strides=[s, s],
                                      pads=[pad] * 4, dilations=[dil, dil]))
        if act:
            nodes.append(_act_node(act, f"dc{i}", f"dy{i}"))
        outs.append(f"dy{i}")
    for i, (cin, cout, h, w, act, res) in enumerate(PW_CASES):
        feeds[f"p{i}"] = rng.standard_normal((1, cin, h, w)).astype(np.float32)
        weights[f"pW{i}"] = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
        weights[f"pb{i}"] = rng.standard_normal(cout).astype(np.float32)
        y = f"pc{i}"
        nodes.append(helper.make_node("Conv", [f"p{i}", f"pW{i}", f"pb{i}"], [y]))
        if res:
            feeds[f"r{i}"] = rng.standard_normal((1, cout, h, w)).astype(np.float32)
            nodes.append(helper.make_node("Add", [y, f"r{i}"], [f"pa{i}"]))
            y = f"pa{i}"
        if act:
            nodes.append(_act_node(act, y, f"py{i}"))
        else:
            nodes.append(helper.make_node("Identity", [y], [f"py{i}"]))
        outs.append(f"py{i}")
    for i, (cin, cout, h, w, st, dil, act) in enumerate(IM_CASES):
        feeds[f"i{i}"] = rng.standard_normal((1, cin, h, w)).astype(np.float32)
        weights[f"iW{i}"] = (rng.standard_normal((cout, cin, 3, 3)) / cin).astype(np.float32)
        weights[f"ib{i}"] = rng.standard_normal(cout).astype(np.float32)
        nodes.append(helper.make_node("Conv", [f"i{i}", f"iW{i}", f"ib{i}"],
                                      [f"ic{i}" if act else f"iy{i}"], strides=[st, st],
                                      pads=[dil] * 4, dilations=[dil, dil]))
        if act:
            nodes.append(_act_node(act, f"ic{i}", f"iy{i}"))
        outs.append(f"iy{i}")
    model = make_model(nodes, feeds, outs, initializers=weights)
    got = compile_and_run(model, feeds, tmp_path / "wasm", target="wasm")
    src = next((tmp_path / "wasm").glob("*/out/model.c")).read_text()
    assert src.count("mlcc_f32_conv2d__depthwise_vec(") == len(DW_CASES)
    assert src.count("mlcc_f32_conv2d__implicit(") == sum(c[4] == 1 for c in IM_CASES)
    assert "mlcc_f32_conv2d_residual__packed(" in src
    x86 = compile_and_run(model, feeds, tmp_path / "x86", target="x86")
    src = next((tmp_path / "x86").glob("*/out/model.c")).read_text()
    assert src.count("mlcc_f32_conv2d__implicit(") == len(IM_CASES)
    ref = reference_outputs(model, feeds)
    for name in outs:
        np.testing.assert_array_equal(got[name], x86[name], err_msg=name)
        tol = 1e-4 * max(1.0, float(np.abs(ref[name]).max()))
        assert np.abs(got[name] - ref[name]).max() <= tol, name


def test_harness_errors(digits_wasm, tmp_path):
    def harness(*args):
        return subprocess.run(["node", str(digits_wasm / "harness.mjs"), *map(str, args)],
                              capture_output=True, text=True, cwd=tmp_path)
    (tmp_path / "short.bin").write_bytes(b"\0" * 255)
    proc = harness(digits_wasm / "weights.bin", "short.bin", "out.bin")
    assert proc.returncode == 1 and "exactly 256 bytes" in proc.stderr
    assert not (tmp_path / "out.bin").exists()
    proc = harness()
    assert proc.returncode == 1 and "usage: node harness.mjs WEIGHTS IN... OUT...  (1 input " \
        "file, then 1 output file" in proc.stderr
    blob = bytearray((digits_wasm / "weights.bin").read_bytes())
    blob[0] ^= 1
    (tmp_path / "magic.bin").write_bytes(bytes(blob))
    (tmp_path / "in.bin").write_bytes(b"\0" * 256)
    proc = harness("magic.bin", "in.bin", "out.bin")
    assert proc.returncode == 2 and "harness: init failed: " in proc.stderr
    assert "(status 5)" in proc.stderr
    assert harness("--info").stdout.splitlines()[1] == "input 0 input float32 [1,1,8,8] 256 bytes"


def test_damaged_weights_through_the_runner(digits_wasm, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(digits_wasm, folder)
    blob = bytearray((folder / "weights.bin").read_bytes())
    blob[-1] ^= 1
    (folder / "weights.bin").write_bytes(bytes(blob))
    with pytest.raises(RuntimeStatusError, match="init failed: .*corrupted"):
        mlcc.load(folder).run(_digits_input())


def test_cli_run_and_verify(digits_wasm, tmp_path):
    runner = CliRunner()
    np.savez(tmp_path / "in.npz", **_digits_input(2))
    r = runner.invoke(cli_main, ["run", str(digits_wasm), "-i", str(tmp_path / "in.npz"),
                                 "-o", str(tmp_path / "out.npz")])
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["logits"], mlcc.load(digits_wasm).run(
            _digits_input(2))["logits"])
    r = runner.invoke(cli_main, ["verify", str(DIGITS), "--target", "wasm"])
    assert r.exit_code == 0, r.output
    assert "verified: outputs match onnxruntime" in r.output


def test_missing_node_names_the_package(digits_wasm, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(digits_wasm, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"] = ["no-such-node-xyz"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TargetError, match="no-such-node-xyz is not installed.*"
                                          r"apt-get install nodejs"):
        mlcc.load(folder)


def test_targets_report_missing_emcc_and_node(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    r = CliRunner().invoke(cli_main, ["targets"])
    assert r.exit_code == 0
    line = next(l for l in r.output.splitlines() if l.startswith("wasm "))
    assert "emcc is not installed (apt-get install emscripten)" in line
    assert "node is not installed (apt-get install nodejs)" in line
    r = CliRunner().invoke(cli_main, ["compile", str(DIGITS), "-t", "wasm", "-o",
                                      str(tmp_path / "out")])
    assert r.exit_code == 1
    assert "compiler 'emcc' not found (install it: apt-get install emscripten)" in r.output


def test_target_schema_env_and_output(tmp_path):
    t = parse_target("name: w\narch: wasm32\noutput: wasm\n"
                     "toolchain: {cc: emcc, env: {NODE_PATH: /x}}\n")
    assert t.library_name == "model.wasm" and t.toolchain.env == (("NODE_PATH", "/x"),)
    with pytest.raises(TargetError, match="toolchain.env must map"):
        parse_target("name: w\narch: a\ntoolchain: {cc: emcc, env: {A: 1}}\n")
    with pytest.raises(TargetError, match="output must be one of shared, wasm"):
        parse_target("name: w\narch: a\noutput: exe\ntoolchain: {cc: emcc}\n")
    # strided convolutions: gathered panels on wasm, the implicit GEMM elsewhere (default)
    assert t.lowering_options()["implicit_strided"]
    assert not load_target("wasm").lowering_options()["implicit_strided"]
    with pytest.raises(TargetError, match="implicit_strided must be a bool"):
        parse_target("name: w\narch: a\ntoolchain: {cc: emcc}\nimplicit_strided: 0\n")


# --------------------------------------------------------------------------------- models

@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    return fm.build_small_models(tmp_path_factory.mktemp("small"))


@needs_wasm
@pytest.mark.parametrize("name", ["small_cnn", "small_unet"])
def test_small_model(small_models, name):
    path, shapes = small_models[name]
    tm.check(path, shapes, target="wasm")


@needs_wasm
@pytest.mark.parametrize("name", ["digits_cnn", "digits_mlp"])
def test_digits_model(name):
    """The trained digits networks of examples/digits."""
    path = fm.project_model(name)
    tm.check(path, tm.static_shapes(path), target="wasm")


@needs_wasm
def test_squeezenet_random_weights():
    tm.check(fm.randomized_light_model("squeezenet"), target="wasm")


@needs_wasm
@pytest.mark.slow
def test_yolov8n():
    """A real detector (SiLU epilogues: the vector exp in SIMD128), outputs only: the
    per-layer comparison of every model runs in `make test-targets`."""
    tm.check(tm._real("yolov8n"), fm.REAL_MODELS["yolov8n"].shapes, target="wasm",
             per_layer=True)
