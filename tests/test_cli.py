"""The CLI contract: commands, options, outputs and exit codes, including every error path."""
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from mlcc.cli import main


def run(*args, cwd=None):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_compile_writes_the_output_folder(tiny_model_path, tmp_path):
    out = tmp_path / "out"
    r = run("compile", tiny_model_path, "--target", "x86", "-o", out, "--shape", "images=2,2,6,6")
    assert r.exit_code == 0, r.output
    for f in ["model.h", "model.c", "weights.bin", "Makefile", "manifest.json", "libmodel.so",
              "runtime/include/mlcc_runtime.h", "runtime/src/mlcc_runtime.c",
              "runtime/kernels/conv.c", "runtime/kernels/gemm.c"]:
        assert (out / f).is_file(), f
    # only the kernels this model needs
    assert not (out / "runtime/kernels/elementwise.c").exists()
    m = json.loads((out / "manifest.json").read_text())
    assert m["inputs"] == [{"name": "images", "dtype": "float32", "shape": [2, 2, 6, 6]}]
    assert m["outputs"][0]["shape"] == [2, 5]
    assert m["target"] == "x86" and m["source"]["sha256"] and m["mlcc_version"]
    assert m["arena_size"] > 0


def test_generated_makefile_rebuilds_the_library(tiny_static_path, tmp_path):
    """`make` rebuilds the library mlcc built, the same bytes (one object per source under
    obj/, in parallel with -j), and a compile into the folder removes the objects again."""
    out = tmp_path / "out"
    assert run("compile", tiny_static_path, "-o", out).exit_code == 0
    built = (out / "libmodel.so").read_bytes()
    objects = sorted(str(p.relative_to(out)) for p in (out / "obj").rglob("*.o"))
    assert "obj/model.o" in objects and "obj/runtime/kernels/conv.o" in objects
    subprocess.run(["make", "-s", "-C", str(out), "clean"], check=True)
    assert not (out / "obj").exists() and not (out / "libmodel.so").exists()
    subprocess.run(["make", "-s", "-j2", "-C", str(out)], check=True)
    assert (out / "libmodel.so").read_bytes() == built
    assert run("compile", tiny_static_path, "-o", out, "--no-build").exit_code == 0
    assert not (out / "obj").exists() or not any((out / "obj").rglob("*.o"))


def test_run_and_outputs_npz(tiny_static_path, tmp_path):
    out = tmp_path / "out"
    assert run("compile", tiny_static_path, "-o", out).exit_code == 0
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "in.npz", images=x)
    r = run("run", out, "-i", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    assert "logits: float32 [1, 5]" in r.output
    got = np.load(tmp_path / "out.npz")["logits"]
    import onnxruntime as ort
    ref = ort.InferenceSession(str(tiny_static_path)).run(None, {"images": x})[0]
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_verify_passes(tiny_model_path):
    r = run("verify", tiny_model_path, "--shape", "images=3,2,6,6")
    assert r.exit_code == 0, r.output
    assert "verified" in r.output and "argmax same" in r.output


def test_verify_with_inputs_and_per_layer(tiny_static_path, tmp_path):
    np.savez(tmp_path / "in.npz", images=np.ones((1, 2, 6, 6), np.float32))
    r = run("verify", tiny_static_path, "-i", tmp_path / "in.npz", "--per-layer")
    assert r.exit_code == 0, r.output
    np.savez(tmp_path / "extra.npz", images=np.ones((1, 2, 6, 6), np.float32),
             imgaes=np.ones(2, np.float32))
    r = run("verify", tiny_static_path, "-i", tmp_path / "extra.npz")
    assert r.exit_code == 1 and "array(s) 'imgaes' are not inputs of the model" in r.output


def test_inspect_reports_flops_and_memory(tiny_static_path):
    r = run("inspect", tiny_static_path)
    assert r.exit_code == 0, r.output
    assert "Conv x1" in r.output and "GFLOPs" in r.output and "arena" in r.output


def test_inspect_lists_every_unsupported_node(tmp_path):
    from onnx import helper
    from util import make_model
    # (random generators: refused by design; NonZero and Unique were the examples until
    # they were implemented)
    nodes = [helper.make_node("Bernoulli", ["x"], ["b"], name="bernoulli1"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("RandomUniformLike", ["r"], ["u"], name="random1")]
    model = make_model(nodes, {"x": np.zeros((3, 3), np.float32)}, ["b", "u"])
    onnx.save(model, str(tmp_path / "m.onnx"))
    r = run("inspect", tmp_path / "m.onnx")
    assert r.exit_code == 3
    assert "bernoulli1" in r.output and "random1" in r.output and "Bernoulli" in r.output
    r = run("compile", tmp_path / "m.onnx", "-o", tmp_path / "o")
    assert r.exit_code == 3
    assert "'bernoulli1' (Bernoulli" in r.output and "'random1' (RandomUniformLike" in r.output


def test_targets_lists_builtin_targets():
    r = run("targets")
    assert r.exit_code == 0
    assert "x86 " in r.output and "x86-native" in r.output and "ready" in r.output


def test_a_reader_that_stops_early_is_not_an_error():
    """`mlcc targets | head -1`: the pipe closes before mlcc writes; mlcc exits 0 quietly."""
    proc = subprocess.Popen([sys.executable, "-m", "mlcc.cli", "targets"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                  # before the interpreter has even imported mlcc
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert err == b""


def test_dump_ir_shows_each_pass(tiny_static_path, tmp_path):
    r = run("compile", tiny_static_path, "-o", tmp_path / "o", "--dump-ir", "--no-build")
    assert r.exit_code == 0
    for p in ["import", "infer_and_fold", "fuse_activations", "eliminate_dead_code"]:
        assert f"after {p}" in r.output
    assert "fused[relu:Relu]" in r.output


def test_max_arena_names_the_peak_layers(tiny_static_path, tmp_path):
    r = run("compile", tiny_static_path, "-o", tmp_path / "o", "--max-arena", "16")
    assert r.exit_code != 0
    assert "--max-arena" in r.output and "conv" in r.output
    assert run("compile", tiny_static_path, "-o", tmp_path / "o2", "--max-arena", "1M"
               ).exit_code == 0


@pytest.mark.parametrize("args,message", [
    (["--shape", "images=1,2,6"], "rank"),
    (["--shape", "nope=1,2,6,6"], "not an input"),
    (["--shape", "images=1,3,6,6"], "fixed to 2"),
    (["--shape", "images"], "NAME=D1"),
    (["--shape", "images=1,2,6,6.5"], "integers"),   # names are expressions (P+1) now
    ([], "dimension 0 ('N') is dynamic"),
    (["--target", "nowhere"], "unknown target"),
    (["--max-arena", "lots"], "--max-arena"),
])
def test_compile_errors_are_one_line(tiny_model_path, tmp_path, args, message):
    r = run("compile", tiny_model_path, "-o", tmp_path / "o", *args)
    assert r.exit_code != 0
    assert message in r.output
    assert "Traceback" not in r.output
    assert r.output.strip().count("\n") == 0, r.output


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage" * 10, None])
def test_malformed_onnx_files(tmp_path, tiny_static_path, content):
    bad = tmp_path / "bad.onnx"
    data = tiny_static_path.read_bytes()
    bad.write_bytes(data[: len(data) // 3] if content is None else content)
    r = run("compile", bad, "-o", tmp_path / "o")
    assert r.exit_code == 1 and "mlcc: error:" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o" / "model.c").exists()


def test_missing_model_file(tmp_path):
    r = run("compile", tmp_path / "absent.onnx", "-o", tmp_path / "o")
    assert r.exit_code == 1 and "no such file" in r.output


def test_bad_target_yaml(tiny_static_path, tmp_path):
    cases = {
        "syntax.yaml": "name: [unclosed",
        "unknown.yaml": "name: t\narch: x86_64\ntoolchain: {cc: gcc}\nturbo: true\n",
        "type.yaml": "name: t\narch: x86_64\ntoolchain: {cc: gcc}\nthreads: many\n",
        "nocc.yaml": "name: t\narch: x86_64\ntoolchain: {cflags: [-O2]}\n",
        "missing.yaml": "name: t\ntoolchain: {cc: gcc}\n",
        "nocompiler.yaml": "name: t\narch: x86_64\ntoolchain: {cc: no-such-cc-42, package: foo}\n",
    }
    expect = {"syntax.yaml": "not valid YAML", "unknown.yaml": "unknown key 'turbo'",
              "type.yaml": "threads must be a int", "nocc.yaml": "toolchain.cc",
              "missing.yaml": "missing required key 'arch'",
              "nocompiler.yaml": "apt-get install foo"}
    for fname, text in cases.items():
        (tmp_path / fname).write_text(text)
        r = run("compile", tiny_static_path, "-o", tmp_path / "o", "--target", tmp_path / fname)
        assert r.exit_code == 1, (fname, r.output)
        assert expect[fname] in r.output, (fname, r.output)


def test_run_input_errors(tiny_static_path, tmp_path):
    out = tmp_path / "out"
    assert run("compile", tiny_static_path, "-o", out).exit_code == 0
    np.savez(tmp_path / "wrong_name.npz", x=np.zeros((1, 2, 6, 6), np.float32))
    np.savez(tmp_path / "wrong_shape.npz", images=np.zeros((1, 2, 6, 5), np.float32))
    np.savez(tmp_path / "wrong_dtype.npz", images=np.zeros((1, 2, 6, 6), np.int64))
    np.savez(tmp_path / "extra.npz", images=np.zeros((1, 2, 6, 6), np.float32),
             labels=np.zeros(3))
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    for name, msg in [("wrong_name", "missing 'images'"), ("wrong_shape", "must have shape"),
                      ("wrong_dtype", "must be float32"), ("garbage", "cannot read inputs"),
                      ("extra", "extra.npz: inputs do not match the model (unknown 'labels')")]:
        r = run("run", out, "-i", tmp_path / f"{name}.npz")
        assert r.exit_code == 1 and msg in r.output, (name, r.output)
    r = run("run", tmp_path / "nowhere", "-i", tmp_path / "wrong_name.npz")
    assert r.exit_code == 1 and "not an mlcc output folder" in r.output


def test_entry_point_runs_as_a_program(tiny_static_path, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mlcc.cli", "compile", str(tiny_static_path),
                           "-o", str(tmp_path / "o"), "--shape", "bad"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("mlcc: error:") and "Traceback" not in proc.stderr


def test_per_layer_names_the_first_diverging_node(tiny_static_path, monkeypatch):
    """A kernel that goes wrong (simulated by perturbing the ReLU-fused conv's output) is
    reported by node name, and the nodes after it are not blamed."""
    from mlcc.runtime.loader import CompiledModel

    real_run = CompiledModel.run

    def broken_run(self, feeds):
        out = real_run(self, feeds)
        for name in out:
            if name in ("r", "logits"):
                out[name] = out[name] + 1.0
        return out

    monkeypatch.setattr(CompiledModel, "run", broken_run)
    r = run("verify", tiny_static_path, "--per-layer")
    assert r.exit_code == 1
    assert "first diverging node: 'conv' (Conv+Relu) output 'r'" in r.output


@pytest.mark.parametrize("dims,target,code", [
    ([1 << 30, 3], "wasm", 3),      # 12 GiB tensors: more than a 32-bit size_t holds
    ([1 << 29, 2], "wasm", 3),      # a 4 GiB arena: one byte over 2^32 - 1
    ([1 << 26, 3], "wasm", 0),      # 768 MiB: fits
    ([1 << 30, 3], "x86", 0),       # 64-bit: fits
])
def test_arena_must_fit_the_targets_size_t(tmp_path, dims, target, code):
    """An arena or weight blob over what size_t holds on the target is refused at compile
    time, naming the pointer width, instead of a size constant that wraps in C."""
    from onnx import TensorProto, helper
    # A [1, 1] input expanded to `dims`: only the intermediates (the arena) are large.
    g = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"]),
                           helper.make_node("Sigmoid", ["y"], ["s"]),
                           helper.make_node("ReduceMax", ["s"], ["z"], keepdims=0)], "big",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [])],
                          [onnx.numpy_helper.from_array(np.array(dims, np.int64), "shape")])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "out"),
                                  "--target", target, "--no-build"])
    assert r.exit_code == code, r.output
    if code:
        assert "32-bit target wasm32" in r.output and "4294967295" in r.output, r.output


def test_pointer_bits_from_arch_and_file():
    from mlcc.targets.target import load_target, parse_target
    assert load_target("wasm").pointer_bits == 32
    assert load_target("x86").pointer_bits == 64 and load_target("arm").pointer_bits == 64
    text = "name: m\narch: armv7\ntoolchain: {cc: gcc}\n"
    assert parse_target(text).pointer_bits == 32
    assert parse_target(text + "pointer_bits: 64\n").pointer_bits == 64


def _fake_compiler(tmp_path, macros):
    """A `cc` that predefines exactly `macros` when asked with -dM -E, as gcc does."""
    cc = tmp_path / "fakecc"
    lines = "".join(f"echo '#define {m} 1'\n" for m in macros)
    cc.write_text("#!/bin/sh\n" + lines)
    cc.chmod(0o755)
    return str(cc)


@pytest.mark.parametrize("macros, simd, bits", [
    (["__AVX512F__", "__AVX2__", "__FMA__", "__SSE2__"], "avx512", 512),
    (["__AVX2__", "__FMA__", "__SSE2__"], "avx2", 256),       # a Zen 3, a Haswell
    (["__AVX2__", "__SSE2__"], "sse2", 128),                  # AVX2 without FMA: not 256
    (["__SSE2__"], "sse2", 128),
])
def test_native_simd_is_what_the_compiler_builds_for(tmp_path, macros, simd, bits):
    """`simd: native` takes the widest vectors that the target's compiler and flags enable
    here, not a width written for another CPU (512-bit vectors on AVX2 spilled the GEMM tiles:
    8x slower); the file's vector_bits caps it."""
    from mlcc.targets.target import parse_target
    base = f"name: m\narch: x86_64\ntoolchain: {{cc: {_fake_compiler(tmp_path, macros)}}}\n"
    t = parse_target(base + "simd: native\n")
    assert (t.simd, t.vector_bits, t.native) == (simd, bits, True)
    assert t.lowering_options()["channel_tiles"] == (bits >= 512)
    assert t.defines()[0] == f"-DMLCC_VECTOR_BYTES={bits // 8}"
    capped = parse_target(base + "simd: native\nvector_bits: 256\n")
    assert capped.vector_bits == min(bits, 256)
    gone = parse_target("name: m\narch: x86_64\ntoolchain: {cc: /nonexistent/cc}\n"
                        "simd: native\n")
    assert (gone.simd, gone.vector_bits) == ("sse2", 128)     # the build then says cc is missing


def test_native_target_matches_this_machine():
    """x86-native describes the machine that compiles: its vectors are what gcc -march=native
    predefines here, its caches what Linux reports; the manifest and `mlcc targets` say so."""
    if platform.machine() != "x86_64":
        pytest.skip("x86-64 only")
    from mlcc.targets.target import load_target
    t = load_target("x86-native")
    out = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                         capture_output=True, text=True, check=True).stdout
    bits = 512 if "__AVX512F__" in out else 256 if "__AVX2__" in out and "__FMA__" in out \
        else 128
    assert t.native and t.vector_bits == bits
    if os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        assert t.cache_kib.get("l1d", 0) >= 16 and t.cache_kib.get("l2", 0) >= 128
    assert f"{bits}-bit vectors" in run("targets").output


def test_library_needing_missing_cpu_features_is_refused(tiny_model_path, tmp_path):
    """The manifest lists the x86 features the library's code may use (x86-avx2: avx2, fma);
    the loader refuses to load it on a CPU without one, which would stop at an illegal
    instruction: here a feature no CPU has, written into the manifest."""
    if platform.machine() != "x86_64":
        pytest.skip("x86-64 only")
    from mlcc.errors import InputError
    from mlcc.targets.target import load_target
    assert {"avx2", "fma"} <= set(load_target("x86-avx2").cpu_features())
    assert "avx512f" in load_target("x86-avx512").cpu_features()
    assert load_target("x86").cpu_features() == [] and load_target("arm").cpu_features() == []
    out = tmp_path / "o"
    r = run("compile", tiny_model_path, "-t", "x86-avx2", "-o", out, "--shape", "images=2,2,6,6")
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cpu_features"] == load_target("x86-avx2").cpu_features()
    manifest["cpu_features"].append("avx1024_imaginary")
    (out / "manifest.json").write_text(json.dumps(manifest))
    import mlcc
    with pytest.raises(InputError, match="avx1024_imaginary, which this CPU does not have"):
        mlcc.load(out)


def test_native_needs_a_host_target():
    from mlcc.targets.target import TargetError, parse_target
    base = "name: m\narch: aarch64\ntoolchain: {cc: gcc}\n"
    for extra in ("simd: native\nrun: [qemu-aarch64]\n", "cache_kib: native\noutput: wasm\n"):
        with pytest.raises(TargetError, match="host target only"):
            parse_target(base + extra)
    with pytest.raises(TargetError, match="mapping .* or native"):
        parse_target(base + "cache_kib: lots\n")


def test_host_caches_from_sysfs(tmp_path):
    from mlcc.targets.host import _sysfs_caches
    for i, (level, kind, size) in enumerate([("1", "Data", "32K"), ("1", "Instruction", "32K"),
                                             ("2", "Unified", "512K"), ("3", "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(value + "\n")
    assert _sysfs_caches(tmp_path) == {"l1d": 32, "l2": 512, "l3": 32768}
    assert _sysfs_caches(tmp_path / "missing") == {}


def test_gemm_tile_from_target_file():
    from mlcc.targets.target import TargetError, load_target, parse_target
    assert load_target("wasm").defines() == ["-DMLCC_VECTOR_BYTES=16", "-DMLCC_GEMM_TILE_ROWS=4",
                                             "-DMLCC_GEMM_NV=2"]
    assert load_target("x86").tile_defines() == [] and load_target("arm").tile_defines() == []
    base = "name: m\narch: x86_64\ntoolchain: {cc: gcc}\n"
    assert parse_target(base + "gemm_tile: {rows: 2, vectors: 4}\n").gemm_tile == (2, 4)
    for bad, msg in [("{rows: 3, vectors: 2}", "gemm_tile.rows must be one of"),
                     ("{rows: 4, vectors: 3}", "gemm_tile.vectors one of"),
                     ("{rows: 4}", "needs both rows and vectors"),
                     ("{rows: 4, vectors: 2, depth: 1}", "unknown key gemm_tile.'depth'"),
                     ("{rows: four, vectors: 2}", "gemm_tile.rows must be a int")]:
        with pytest.raises(TargetError, match=re.escape(msg)):
            parse_target(base + f"gemm_tile: {bad}\n")
