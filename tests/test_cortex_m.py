"""The microcontroller targets cortex-m4, cortex-m7 and cortex-m55: libmodel.a and a bare-metal
firmware built by arm-none-eabi-gcc, run in qemu-system-arm (mps2-an386, mps2-an500,
mps3-an547) through semihosting, compared with onnxruntime (float) and with the x86 build
(int8: the same integer arithmetic, so the same bits).

Skipped when arm-none-eabi-gcc, newlib or qemu-system-arm is missing (`make test` installs
them on Debian). ASan does not apply (no operating system); the library is checked to need no
heap and no stdio instead. qemu-system-arm boots each firmware in about 0.3-1 s here; the whole
file takes about 2-3 minutes on the shared 2-core machine (mostly the int8 calibration, which
runs on the host, and the cross builds).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import mlcc
from mlcc import resources
from mlcc.api import QuantizeConfig
from mlcc.cli import main as cli_main
from mlcc.errors import DoesNotFit, MlccError, TargetError
from mlcc.runtime import FirmwareModel
from mlcc.targets import load_target, parse_target

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
CALIB = ROOT / "examples" / "digits" / "digits_calib.npz"
TEST = ROOT / "examples" / "digits" / "digits_test.npz"
TARGETS = ("cortex-m4", "cortex-m7", "cortex-m55")
M4 = load_target("cortex-m4")


MISSING = "; ".join(M4.missing_tools())     # the compiler, newlib, qemu-system-arm
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "cortex-m tools present")


def _samples(n: int) -> list[dict]:
    with np.load(TEST) as data:
        return [{"input": data["input"][i:i + 1]} for i in range(n)]


@pytest.fixture(scope="module")
def float_builds(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("float")
    return {t: mlcc.compile(DIGITS, tmp / t, target=t, name="digits") for t in TARGETS}


@pytest.fixture(scope="module")
def int8_builds(tmp_path_factory):
    """The digits CNN quantized by mlcc's PTQ once (16 calibration samples, written out as a
    QDQ model), then that QDQ model compiled with its own parameters for x86 and the three
    cores: the same integer program everywhere, one calibration instead of four."""
    tmp = tmp_path_factory.mktemp("int8")
    qdq = tmp / "digits_qdq.onnx"
    mlcc.compile(DIGITS, tmp / "calibrated", name="digits", build=False,
                 quantize=QuantizeConfig(calibration=CALIB, max_samples=16, export_qdq=qdq))
    return {t: mlcc.compile(qdq, tmp / t, target=t, name="digits",
                            quantize=QuantizeConfig(calibration=None))
            for t in ("x86", *TARGETS)}


# --------------------------------------------------------------------------------- targets

def test_targets_describe_the_cores_and_their_machines():
    for name, cpu, machine in (("cortex-m4", "-mcpu=cortex-m4", "mps2-an386"),
                               ("cortex-m7", "-mcpu=cortex-m7", "mps2-an500"),
                               ("cortex-m55", "-mcpu=cortex-m55", "mps3-an547")):
        t = load_target(name)
        assert t.output == "firmware" and t.library_name == "libmodel.a"
        assert cpu in t.toolchain.cflags and "-mfloat-abi=hard" in t.toolchain.cflags
        assert t.run[:3] == ("qemu-system-arm", "-machine", machine)
        assert t.pointer_bits == 32 and t.firmware.stack_bytes > 0


def test_firmware_key_goes_with_firmware_output():
    base = (ROOT / "targets" / "cortex-m4.yaml").read_text()
    with pytest.raises(TargetError, match="goes with `output: firmware`"):
        parse_target(base.replace("output: firmware", "output: shared"), "t.yaml")
    with pytest.raises(TargetError, match="firmware.flash"):
        parse_target(re.sub(r"  flash: .*\n", "", base), "t.yaml")
    with pytest.raises(TargetError, match="firmware.ram must be a word-aligned region"):
        parse_target(base.replace("origin: 0x20000000, kib: 4096",
                                  "origin: 0xFFFFF000, kib: 4096"), "t.yaml")
    with pytest.raises(TargetError, match="unknown key firmware.'heap'"):
        parse_target(base.replace("  stack_kib: 8", "  stack_kib: 8\n  heap: 1"), "t.yaml")


def test_targets_say_when_newlib_is_missing(tmp_path):
    """A compiler without its C library prints the bare file name for -print-file-name."""
    cc = tmp_path / "arm-none-eabi-gcc"
    cc.write_text("#!/bin/sh\necho libc.a\n")
    cc.chmod(0o755)
    base = (ROOT / "targets" / "cortex-m4.yaml").read_text()
    t = parse_target(base.replace("cc: arm-none-eabi-gcc", f"cc: {cc}"), "t.yaml")
    assert t.missing_tools() == [f"the C library of {cc} is not installed (apt-get install "
                                 f"gcc-arm-none-eabi libnewlib-arm-none-eabi)"]


def test_targets_command_lists_them_ready():
    out = CliRunner().invoke(cli_main, ["targets"]).output
    for name in TARGETS:
        assert re.search(rf"^{name} .* ready$", out, re.M), out


def test_runtime_and_firmware_compile_warning_free_for_the_cores():
    """Every kernel and the runtime core (int32_t is a long here), and the firmware files
    with -Wconversion, strict warnings, for the M4 (DSP, FPU) and the M55 (MVE)."""
    rt = resources.runtime_c()
    for target in (M4, load_target("cortex-m55")):
        flags = [f for f in target.toolchain.cflags if f.startswith(("-m", "-D"))]
        common = [target.toolchain.cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic",
                  "-Werror", *flags, *target.defines(), f"-I{rt / 'include'}",
                  f"-I{rt / 'kernels'}", "-fsyntax-only"]
        sources = sorted((rt / "kernels").glob("*.c")) + sorted((rt / "src").glob("*.c"))
        subprocess.run([*common, *map(str, sources)], check=True)
        subprocess.run([*common, "-Wconversion", "-DMLCC_MODEL=digits", "-DMLCC_FW_ARENA_SIZE=64",
                        "-DMLCC_FW_IO_SIZE=64", *map(str, sorted((rt / "firmware").glob("*.c")))],
                       check=True)


# --------------------------------------------------------------------------------- float

@pytest.mark.parametrize("target", TARGETS)
def test_float_cnn_matches_onnxruntime_in_qemu(float_builds, target):
    import onnxruntime as ort
    sess = ort.InferenceSession(str(DIGITS), providers=["CPUExecutionProvider"])
    model = mlcc.load(float_builds[target].folder)
    assert isinstance(model, FirmwareModel)
    for feeds in _samples(2):
        got = model.run(feeds)["logits"]
        ref = sess.run(None, feeds)[0]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))
        assert got.argmax() == ref.argmax()


def test_verify_command_on_a_cortex_m(tmp_path):
    res = CliRunner().invoke(cli_main, ["verify", str(DIGITS), "-t", "cortex-m7"])
    assert res.exit_code == 0, res.output
    assert "verified: outputs match onnxruntime" in res.output


def test_output_folder_holds_library_firmware_and_memory_report(float_builds):
    res = float_builds["cortex-m4"]
    folder, m = res.folder, res.manifest
    for name in ("libmodel.a", "model.h", "weights.c", "startup.c", "firmware.c", "firmware.ld",
                 "firmware.elf", "Makefile"):
        assert (folder / name).is_file(), name
    assert m["embedded_weights"] and m["harness"] == "firmware.elf"
    assert json.loads((folder / "manifest.json").read_text())["memory"] == m["memory"]
    ram, flash = m["memory"]["ram"], m["memory"]["flash"]
    assert ram["arena"] == m["arena_size"] and ram["stack"] == M4.firmware.stack_bytes
    assert flash["weights"] == m["weights_size"]       # weights.c's blob, in flash
    assert ram["total"] == ram["arena"] + ram["io"] + ram["statics"] + ram["stack"]
    assert flash["total"] == flash["code"] + flash["weights"] <= flash["size"]
    assert ram["size"] == M4.firmware.ram_bytes
    # the compile reports them
    out = CliRunner().invoke(cli_main, ["compile", str(DIGITS), "-t", "cortex-m55", "-o",
                                        str(folder.parent / "cli")]).output
    assert re.search(r"RAM \d+ bytes \(arena \d+, I/O buffers \d+, statics \d+, stack 8192\) of "
                     r"524288; flash \d+ bytes \(code \d+, weights \d+\) of 524288", out), out


def test_folder_makefile_rebuilds_the_same_firmware(float_builds, tmp_path):
    import shutil
    folder = tmp_path / "copy"
    shutil.copytree(float_builds["cortex-m4"].folder, folder)
    subprocess.run(["make", "clean"], cwd=folder, check=True, capture_output=True)
    subprocess.run(["make"], cwd=folder, check=True, capture_output=True, timeout=600)
    assert (folder / "firmware.elf").read_bytes() == \
        (float_builds["cortex-m4"].folder / "firmware.elf").read_bytes()


def test_library_needs_no_heap_and_no_stdio(float_builds, int8_builds):
    """The firmware links no allocator and no stdio: the library only calls libc's mem*
    functions, libm and the compiler's helpers."""
    nm = M4.toolchain.ar.replace("-ar", "-nm")
    for res in (float_builds["cortex-m4"], int8_builds["cortex-m4"]):
        out = subprocess.run([nm, "-u", str(res.folder / "libmodel.a")], capture_output=True,
                             text=True, check=True).stdout
        undefined = {l.split()[-1] for l in out.splitlines() if l.strip().startswith("U ")}
        external = {u for u in undefined if not u.startswith(("mlcc_", "digits_", "__aeabi_"))}
        assert external <= {"memcpy", "memset", "memmove", "memcmp", "expf", "erff", "powf",
                            "sqrtf", "tanhf", "logf", "floorf", "roundf", "nearbyintf",
                            "lrintf", "fabsf"}, external
        elf = subprocess.run([nm, str(res.folder / "firmware.elf")], capture_output=True,
                             text=True, check=True).stdout
        assert not re.search(r" T (malloc|_malloc_r|printf|fopen|_sbrk)$", elf, re.M)


# --------------------------------------------------------------------------------- int8

@pytest.mark.parametrize("target", TARGETS)
def test_int8_cnn_is_bit_identical_to_the_x86_build(int8_builds, target):
    ref = mlcc.load(int8_builds["x86"].folder)
    model = mlcc.load(int8_builds[target].folder)
    assert int8_builds[target].manifest["quantization"]["integer_layers"] >= 4
    for feeds in _samples(3):
        np.testing.assert_array_equal(model.run(feeds)["logits"], ref.run(feeds)["logits"])


def _odd_int8_model(tmp_path: Path, layers: list, x_shape: tuple, outputs: dict,
                    seed: int = 3) -> Path:
    """A float model of the given (node, initializers) layers, quantized by mlcc's PTQ and
    written out as a QDQ model (its own parameters: the same integer program on every
    target)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    for node, arrays in layers:
        nodes.append(node)
        inits += [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    graph = helper.make_graph(
        nodes, "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
        inits)
    src, qdq, calib = tmp_path / "odd.onnx", tmp_path / "odd_qdq.onnx", tmp_path / "calib.npz"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    np.savez(calib, x=rng.standard_normal((8, *x_shape)).astype(np.float32))
    mlcc.compile(src, tmp_path / "cal", build=False,
                 quantize=QuantizeConfig(calibration=calib, export_qdq=qdq))
    return qdq


def _disassembly(folder: Path, arch: str | None = None) -> str:
    """objdump -d of the firmware (arch: -m for instructions it does not decode by default,
    the M55's MVE: armv8.1-m.main)."""
    return subprocess.run([M4.toolchain.ar.replace("-ar", "-objdump"), "-d",
                           *(["-m", arch] if arch else []), str(folder / "firmware.elf")],
                          capture_output=True, text=True, check=True).stdout


def _same_bits_as_x86(tmp_path: Path, qdq: Path, target: str, x_shape: tuple,
                      requant: str | None = None) -> Path:
    own = QuantizeConfig(calibration=None, requant=requant)
    ref = mlcc.load(mlcc.compile(qdq, tmp_path / f"x86-{requant}", quantize=own).folder)
    res = mlcc.compile(qdq, tmp_path / f"{target}-{requant}", target=target, quantize=own)
    assert res.manifest["quantization"]["integer_layers"] >= 2
    model = mlcc.load(res.folder)
    for seed in range(3):
        x = {"x": np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)}
        got, want = model.run(x), ref.run(x)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    return res.folder


@pytest.mark.parametrize("requant", ["float", "fixed"])
def test_int8_smlad_kernels_match_the_portable_ones_on_odd_shapes(tmp_path, requant):
    """Conv 3 -> 5 channels 3x3 on 7x9 (K = 27, not a multiple of 4; 5 rows: a last odd row;
    63 columns: a last odd column), a pointwise Conv 5 -> 75 and a Conv 75 -> 3 3x3 stride 2
    (K = 675: more than the 16-bit column panel holds, the GEMM that extracts both operands),
    then Gemm 315 -> 7 and 60 -> 7, and depthwise 3x3 at strides 1 (rows of 9: two outputs at
    a time and a last one) and 2: the M4's SMLAD int8 kernels (qgemm.c, qconv.c) give the
    bits of the portable ones that the x86 target runs, with either requantization."""
    from onnx import helper
    rng = np.random.default_rng(3)
    layers = [(helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
               {"w": rng.standard_normal((5, 3, 3, 3)).astype(np.float32),
                "b": rng.standard_normal(5).astype(np.float32)}),
              (helper.make_node("Relu", ["c"], ["r"]), {}),
              (helper.make_node("Reshape", ["r", "shape"], ["f"]),
               {"shape": np.array([1, -1], np.int64)}),
              (helper.make_node("MatMul", ["f", "g"], ["y"]),
               {"g": rng.standard_normal((315, 7)).astype(np.float32)}),
              (helper.make_node("Conv", ["r", "p"], ["c2"]),
               {"p": rng.standard_normal((75, 5, 1, 1)).astype(np.float32)}),
              (helper.make_node("Conv", ["c2", "q"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
               {"q": (rng.standard_normal((3, 75, 3, 3)) * 0.2).astype(np.float32)}),
              (helper.make_node("Reshape", ["c3", "shape"], ["f3"]), {}),
              (helper.make_node("MatMul", ["f3", "h"], ["z"]),
               {"h": rng.standard_normal((60, 7)).astype(np.float32)}),
              (helper.make_node("Conv", ["r", "d1", "e1"], ["u"], pads=[1, 1, 1, 1], group=5),
               {"d1": rng.standard_normal((5, 1, 3, 3)).astype(np.float32),
                "e1": rng.standard_normal(5).astype(np.float32)}),
              (helper.make_node("Conv", ["u", "d2"], ["v"], pads=[1, 1, 1, 1], strides=[2, 2],
                                group=5),
               {"d2": rng.standard_normal((5, 1, 3, 3)).astype(np.float32)})]
    qdq = _odd_int8_model(tmp_path, layers, (1, 3, 7, 9),
                          {"y": (1, 7), "z": (1, 7), "u": (1, 5, 7, 9), "v": (1, 5, 4, 5)})
    folder = _same_bits_as_x86(tmp_path, qdq, "cortex-m4", (1, 3, 7, 9), requant)
    dis = _disassembly(folder)
    assert "smlad" in dis and "sxtb16" in dis


@pytest.mark.parametrize("requant", ["float", "fixed"])
def test_int8_helium_kernels_match_the_portable_ones_on_odd_shapes(tmp_path, requant):
    """The M55's Helium (MVE) int8 kernels (runtime_c/kernels/qmve.h) against the portable
    ones of the x86 build, bit for bit, with either requantization: a Conv 3 -> 61 (61 rows:
    a second block of 32 with a tail; 9 x 21 = 189 columns: a last block of 1; K = 27: a
    k tail of 11), depthwise 3x3 stride 2, 3x3 dilation 2, 3x3 stride 3 (a gather of stride
    3; rows of 11 and 4 outputs: predicated tails), depthwise rows of 7 outputs two at a time
    (9 and 3 rows: a last one alone; stride 3, and a 3x5 kernel of strides 2, 1), Conv 61 -> 5
    (K = 549: two transposed blocks of k), and a fully connected 275 -> 7 (K not a multiple of
    4, 7 columns); depthwise 3x3 at stride 1 two rows a pass with shared loads, on rows of 21
    (chunks of 8, 8 and 5) and of 7, 9 and 3 rows (a last one alone)."""
    from onnx import helper
    rng = np.random.default_rng(5)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    layers = [(helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
               {"w1": w(61, 3, 3, 3), "b1": w(61)}),
              (helper.make_node("Relu", ["c1"], ["r1"]), {}),
              (helper.make_node("Conv", ["r1", "d1", "e1"], ["dw1"], pads=[1, 1, 1, 1],
                                strides=[2, 2], group=61), {"d1": w(61, 1, 3, 3), "e1": w(61)}),
              (helper.make_node("Conv", ["dw1", "d2"], ["dw2"], pads=[2, 2, 2, 2],
                                dilations=[2, 2], group=61), {"d2": w(61, 1, 3, 3)}),
              (helper.make_node("Relu", ["dw2"], ["r2"]), {}),
              (helper.make_node("Conv", ["r2", "d3", "e3"], ["z"], pads=[1, 1, 1, 1],
                                strides=[3, 3], group=61), {"d3": w(61, 1, 3, 3), "e3": w(61)}),
              (helper.make_node("Conv", ["r1", "d4", "e4"], ["u"], pads=[1, 1, 1, 1],
                                strides=[1, 3], group=61), {"d4": w(61, 1, 3, 3), "e4": w(61)}),
              (helper.make_node("Conv", ["dw1", "d5"], ["v"], pads=[1, 0, 1, 0],
                                strides=[2, 1], group=61), {"d5": w(61, 1, 3, 5)}),
              (helper.make_node("Conv", ["r1", "d6", "e6"], ["s"], pads=[1, 1, 1, 1], group=61),
               {"d6": w(61, 1, 3, 3), "e6": w(61)}),
              (helper.make_node("Conv", ["v", "d7"], ["t"], pads=[1, 1, 1, 1], group=61),
               {"d7": w(61, 1, 3, 3)}),
              (helper.make_node("Conv", ["r2", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
               {"w2": w(5, 61, 3, 3) * 0.2, "b2": w(5)}),
              (helper.make_node("Reshape", ["c2", "shape"], ["f"]),
               {"shape": np.array([1, -1], np.int64)}),
              (helper.make_node("MatMul", ["f", "g"], ["y"]), {"g": w(275, 7) * 0.2})]
    shape = (1, 3, 9, 21)
    qdq = _odd_int8_model(tmp_path, layers, shape, {"y": (1, 7), "z": (1, 61, 2, 4),
                                                    "u": (1, 61, 9, 7), "v": (1, 61, 3, 7),
                                                    "s": (1, 61, 9, 21), "t": (1, 61, 3, 7)})
    folder = _same_bits_as_x86(tmp_path, qdq, "cortex-m55", shape, requant)
    dis = _disassembly(folder, "armv8.1-m.main")
    # VMLADAVA, which objdump prints as its alias vmlava
    assert re.search(r"\bvmla(da)?va\.s8", dis) and re.search(r"\bvmla(da)?va\.u8", dis)
    assert "vst43.32" in dis and "smlad" not in dis
    if requant == "fixed":
        assert "vqrdmulh" in dis


# --------------------------------------------------------------------------------- fit

def _target_with(tmp_path: Path, **kib) -> str:
    text = (ROOT / "targets" / "cortex-m4.yaml").read_text()
    if "ram" in kib:
        text = text.replace("origin: 0x20000000, kib: 4096",
                            f"origin: 0x20000000, kib: {kib['ram']}")
    if "flash" in kib:
        text = text.replace("origin: 0x00000000, kib: 4096",
                            f"origin: 0x00000000, kib: {kib['flash']}")
    path = tmp_path / "small.yaml"
    path.write_text(text.replace("name: cortex-m4", "name: small"))
    return str(path)


def test_model_larger_than_the_ram_is_refused_naming_the_peak_layers(tmp_path):
    res = CliRunner().invoke(cli_main, ["compile", str(DIGITS), "-t",
                                        _target_with(tmp_path, ram=64), "-o",
                                        str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert "does not fit target small" in res.output and "64 KiB" not in res.output
    assert "more than the 65536 bytes of RAM" in res.output
    assert re.search(r"peak layers: /c\d/Conv, /Relu(_\d)? \(Conv\+Relu\): \d+ bytes live",
                     res.output)
    assert "Traceback" not in res.output


def test_model_larger_than_the_flash_is_refused(tmp_path):
    with pytest.raises(DoesNotFit, match=r"flash: the weights \(\d+ bytes\) are more than the "
                                         r"262144 bytes of flash"):
        mlcc.compile(DIGITS, tmp_path / "out", target=_target_with(tmp_path, flash=256))


def test_linker_overflow_is_reported_as_not_fitting(float_builds, tmp_path):
    """Arena, buffers and stack fit, the statics do not: the linker finds it."""
    ram = float_builds["cortex-m4"].manifest["memory"]["ram"]
    kib = -(-(ram["arena"] + ram["io"] + ram["stack"]) // 1024)
    assert kib * 1024 < ram["total"]
    with pytest.raises(DoesNotFit, match=r"does not fit the memory of target small: .*RAM.*"
                                         r"peak layers: "):
        mlcc.compile(DIGITS, tmp_path / "out", target=_target_with(tmp_path, ram=kib))


def test_max_arena_works_on_cortex_m(tmp_path):
    res = CliRunner().invoke(cli_main, ["compile", str(DIGITS), "-t", "cortex-m4",
                                        "--max-arena", "16K", "-o", str(tmp_path / "out")])
    assert res.exit_code == 1 and "more than --max-arena 16384; peak layers:" in res.output


# --------------------------------------------------------------------------------- runner

def test_firmware_reports_usage_errors_with_a_clear_message(float_builds):
    model = FirmwareModel(float_builds["cortex-m4"].folder)
    model.extra_args = ["--runs", "0"]
    with pytest.raises(MlccError, match="--runs needs a count from 1 to 1000000"):
        model.run(_samples(1)[0])


def test_firmware_that_locks_up_is_reported(float_builds):
    """The M4 image on a machine that boots from elsewhere (mps2-an505's Cortex-M33 reads its
    vector table at 0x10000000): the core locks up, QEMU stops with a fatal error."""
    model = FirmwareModel(float_builds["cortex-m4"].folder, timeout=60,
                          run=["qemu-system-arm", "-machine", "mps2-an505", "-nographic"])
    with pytest.raises(MlccError, match="failed .*: qemu: fatal: Lockup"):
        model.run(_samples(1)[0])


def test_firmware_that_never_exits_times_out(float_builds):
    model = FirmwareModel(float_builds["cortex-m4"].folder, timeout=2,
                          run=[sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(MlccError, match="did not finish within 2 s"):
        model.run(_samples(1)[0])


# --------------------------------------------------------------------------------- bench

def test_bench_counts_instructions_per_inference_and_per_layer(tmp_path):
    res = mlcc.bench(DIGITS, target="cortex-m4", output_dir=tmp_path / "b")
    assert res.insns > 100_000
    assert len(res.layers) == 6 and all(layer.insns > 0 for layer in res.layers)
    # the layers add up to the inference, up to the marks' own instructions
    assert abs(sum(layer.insns for layer in res.layers) - res.insns) < 100
    assert res.check.startswith("outputs match onnxruntime")
    text = res.report()
    assert f"instructions per inference: {res.insns:,}" in text
    assert "/c2/Conv, /Relu_1 (Conv+Relu, mlcc_f32_conv2d" in text


@pytest.mark.parametrize("model", ["tiny_vww", "tiny_ic", "tiny_ad"])
def test_mlperf_tiny_on_the_m55_is_tflm_bit_for_bit(model):
    """MLPerf Tiny's int8 models on the M55's Helium kernels (qmve.h), fixed requantization:
    identical to TensorFlow Lite Micro (keyword spotting: tests/test_cross_targets.py)."""
    pytest.importorskip("tflite_micro")
    import test_tflite as tt
    tt._verify(tt._tiny(model), seeds=(0,), target="cortex-m55")
