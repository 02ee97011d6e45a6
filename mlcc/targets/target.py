"""Target descriptions: targets/*.yaml (or a user's file) -> a validated, frozen Target.

One schema serves every target, native or cross: the C compiler and its flags, the SIMD level
and vector width the kernels are built for, the memory alignment, the cache sizes that blocking
uses, and how to run a binary built for the target (empty for the host, an emulator such as
qemu-aarch64, or node for wasm; a user with a board replaces it, e.g. with an ssh command).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from .. import resources
from ..errors import TargetError
from ..machine import missing_x86_features
from . import host

SIMD_LEVELS = ("auto", "none", "sse2", "avx2", "avx512", "neon", "simd128", "native")
# shared: a shared library (libmodel.so); wasm: a standalone WebAssembly module (model.wasm)
# with the JavaScript wrapper of mlcc/targets/wasm.py; firmware: a static library (libmodel.a)
# and a bare-metal firmware.elf around it for a microcontroller (mlcc/targets/firmware.py).
OUTPUT_KINDS = ("shared", "wasm", "firmware")


@dataclass(frozen=True)
class Toolchain:
    cc: str
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    ar: str = "ar"
    package: str = ""             # the Debian package that provides cc, for hints
    env: tuple[tuple[str, str], ...] = ()   # environment variables the compiler needs


@dataclass(frozen=True)
class Firmware:
    """The memory map of a bare-metal target (`firmware:` in its file): where code and
    constants go (flash) and where the arena, statics and stack go (RAM), in bytes."""
    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    stack_bytes: int


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    arch: str
    toolchain: Toolchain
    simd: str = "auto"
    vector_bits: int = 128
    alignment: int = 64
    threads: int = 1
    output: str = "shared"
    cache_kib: dict = field(default_factory=dict)   # l1d, l2, l3
    cpu: dict = field(default_factory=dict)         # ghz, fma_units: for peak FLOP/s estimates
    run: tuple[str, ...] = ()     # command prefix that runs a target binary; () on the host
    run_package: str = ""         # the Debian package that provides run[0], for hints
    # int8 quantization: activation type the target's integer dot products want (uint8 for
    # x86 u8 x s8 VNNI/vpmaddubsw), and how accumulators are requantized: "float" (a float32
    # multiplier, onnxruntime's arithmetic) or "fixed" (integer-only Q31 multiplier + shift)
    int8_activations: str = "uint8"
    int8_requant: str = "float"
    path: str = ""
    pointer_bits: int = 64        # the width of size_t and pointers (wasm32: 32)
    # The packed GEMM's register tile (rows of C, vectors of columns), when the target picks
    # its own: () keeps the kernels' default (runtime_c/kernels/gemm.h)
    gemm_tile: tuple[int, ...] = ()
    # 3x3 stride-1 convolutions by Winograd F(4x4, 3x3) or F(2x2, 3x3), per layer: 4x or 2.25x
    # fewer multiplications, rounded differently from the direct convolution
    # (runtime_c/kernels/winograd.h, mlcc/ops/winograd.py)
    winograd: bool = False
    # Strided KxK convolutions (depth 64+) by the implicit GEMM (conv.h) rather than gathered
    # im2col panels through the packed GEMM; wasm turns it off (the gathered path was
    # 0.72-0.88x per layer in node: docs/performance-log.md, wasm)
    # (None: the default of the vector width, strided_by_implicit)
    implicit_strided: bool | None = None
    firmware: Firmware | None = None     # output: firmware only
    # simd and/or cache_kib were `native` in the file: read off the compiling machine
    native: bool = False

    @property
    def library_name(self) -> str:
        return {"wasm": "model.wasm", "firmware": "libmodel.a"}.get(self.output, "libmodel.so")

    @property
    def machine_summary(self) -> str:
        """What the kernels are built for: the vectors, and for a native target the caches
        it read off this machine (`mlcc targets`, the manifest)."""
        caches = ", ".join(f"{k} {v} KiB" for k, v in sorted(self.cache_kib.items()))
        return f"{self.simd}, {self.vector_bits}-bit vectors" + (f", {caches}" if caches else "")

    @property
    def is_host(self) -> bool:
        """Whether Python loads what this target builds into its own process (a wasm module
        never). An x86 library that needs instructions this CPU lacks is still one, which the
        loader refuses to load here (missing_cpu_features)."""
        return not self.run and self.output == "shared"

    def cpu_features(self) -> list[str]:
        """The x86 CPU features (cpuinfo names: avx2, avx512f...) that this target's code may
        use, from what its compiler flags enable; [] on other architectures."""
        if self.arch != "x86_64" or self.output != "shared":
            return []
        return host.x86_features(self.toolchain.cc, self.toolchain.cflags)

    def missing_cpu_features(self) -> list[str]:
        """Those of cpu_features() that this machine's CPU does not have (an x86-avx512 build
        on a Zen 3): its library would stop at an illegal instruction here."""
        return missing_x86_features(self.cpu_features())

    def compiler_found(self) -> bool:
        return shutil.which(self.toolchain.cc) is not None

    def runner_found(self) -> bool:
        """Whether the program that runs target binaries (run[0]) is installed; True on the
        host, which needs none."""
        return not self.run or shutil.which(self.run[0]) is not None

    def missing_tools(self) -> list[str]:
        """One line per program this target needs that is not installed, with the Debian
        package to install where the target file names it."""
        missing = []
        for found, program, package in ((self.compiler_found(), self.toolchain.cc,
                                         self.toolchain.package),
                                        (self.runner_found(), self.run[0] if self.run else "",
                                         self.run_package)):
            if not found:
                missing.append(f"{program} is not installed"
                               + (f" (apt-get install {package})" if package else ""))
        if self.output == "firmware" and self.compiler_found() and not self._libc_found():
            missing.append(f"the C library of {self.toolchain.cc} is not installed"
                           + (f" (apt-get install {self.toolchain.package})"
                              if self.toolchain.package else ""))
        return missing

    def _libc_found(self) -> bool:
        """Whether a bare-metal compiler finds its C library (newlib) for the target's flags:
        gcc prints the path of libc.a only where it exists."""
        try:
            out = subprocess.run([self.toolchain.cc, *self.toolchain.cflags,
                                  "-print-file-name=libc.a"], capture_output=True, text=True,
                                 timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return False
        return Path(out).is_absolute()

    def defines(self) -> list[str]:
        """Macros that tell the runtime kernels what the target offers: the vector width, or
        with `simd: none` that the kernels use their portable scalar loops."""
        if self.simd == "none":
            return ["-DMLCC_NO_VECTORS"]
        return [f"-DMLCC_VECTOR_BYTES={max(self.vector_bits // 8, 4)}", *self.tile_defines()]

    def lowering_options(self) -> dict:
        """The target's choices that change how operators lower (ir.Lowering.options)."""
        # channel_tiles: mlcc_f32_conv2d__implicit_t's tiles of 32 channels by 8 positions were
        # written and measured for 512-bit vectors (two vectors of 16 per position); with
        # 128-bit ones they would hold 16 accumulators in 16 registers and spill
        return {"winograd": self.winograd, "threads": self.has_threads(),
                "channel_tiles": self.simd != "none" and self.vector_bits >= 512,
                "implicit_strided": self.strided_by_implicit(),
                "gemm_nr": self.gemm_nr(), "vector_lanes": self.vector_lanes(),
                "b_panel": self.gemm_b_panel(),
                "chunk_bytes": self.chunk_bytes(),
                "int8_direct": self.arch == "x86_64" and self.simd in ("auto", "avx512")}

    def strided_by_implicit(self) -> bool:
        """Whether strided KxK convolutions (depth 64+) take the implicit GEMM: the file's
        `implicit_strided`, else yes except on x86 with 256-bit vectors. On a Zen 3 (AVX2;
        `--tune`'s per-layer times and whole-model A/Bs, 2026-11-28) the gathered panels were
        1.12-1.30x faster on ResNet-18's 3x3 stride-2 layers and its 7x7 stem: ResNet-18 0.944, YOLOv8n 0.953, ResNet-50 0.99-1.04 (noise) as whole models;
        on 512-bit vectors the implicit GEMM was measured the faster."""
        if self.implicit_strided is not None:
            return self.implicit_strided
        return not (self.arch == "x86_64" and self.simd != "none" and self.vector_bits == 256)

    def chunk_bytes(self) -> int:
        """The bytes of packed columns the integer convolution works on at a time (its
        scratch: one chunk of output rows per thread, mlcc_u8_conv2d): what stays in the L2
        cache up to 256 KiB (the size measured on x86 hosts, also without `cache_kib`); without
        an L2, a quarter of the L1 data cache (Cortex-M7); without a data cache (Cortex-M4:
        its SRAM is as fast as a cache would be), 0: one output row at a time."""
        if not self.cache_kib:
            return 262144
        if self.cache_kib.get("l2"):
            return min(1024 * int(self.cache_kib["l2"]), 262144)
        return 1024 * int(self.cache_kib.get("l1d", 0)) // 4

    def has_threads(self) -> bool:
        """Whether the runtime is built with its thread pool (not with -DMLCC_NO_THREADS, as
        wasm is): kernels that keep scratch per thread need one slice only without it."""
        return "-DMLCC_NO_THREADS" not in self.toolchain.cflags

    def vector_lanes(self) -> int:
        """floats per vector of the kernels' vector code (1 with `simd: none`)."""
        return 1 if self.simd == "none" else max(self.vector_bits // 32, 1)

    def gemm_nr(self) -> int:
        """Columns of the packed GEMM's B panels, MLCC_GEMM_NR (gemm.h): vectors per tile row
        (`gemm_tile`, else 2 on vectors of 256 bits or more and on aarch64, 1 elsewhere) x
        floats per vector; 8 with `simd: none`."""
        if self.simd == "none":
            return 8
        nv = self.gemm_tile[1] if self.gemm_tile else (
            2 if self.vector_bits >= 256 or self.arch == "aarch64" else 1)
        return nv * self.vector_lanes()

    def gemm_b_panel(self) -> int:
        """Columns of the panels constant B operands are stored in (MatMul, Gemm, recurrent
        weights), MLCC_GEMM_B_PANEL (gemm.h): 16 on 256-bit vectors, else 32."""
        return 16 if self.simd != "none" and self.vector_bits == 256 else 32

    def tile_defines(self) -> list[str]:
        """The macros of the target's own packed-GEMM register tile (`gemm_tile`), if any."""
        if not self.gemm_tile:
            return []
        return [f"-DMLCC_GEMM_TILE_ROWS={self.gemm_tile[0]}", f"-DMLCC_GEMM_NV={self.gemm_tile[1]}"]


_SCHEMA = {
    "name": str, "description": str, "arch": str, "toolchain": dict, "simd": str,
    "vector_bits": int, "alignment": int, "threads": int, "output": str,
    "cache_kib": (dict, str),
    "cpu": dict, "run": list, "run_package": str, "int8": dict, "pointer_bits": int,
    "gemm_tile": dict, "winograd": bool, "implicit_strided": bool, "firmware": dict,
}
_FIRMWARE = {"flash": dict, "ram": dict, "stack_kib": int}
_REGION = {"origin": int, "kib": int}
_GEMM_TILE = {"rows": int, "vectors": int}
# rows divide the packed A panel's 8 rows (MLCC_GEMM_MR), or are 6 (tiles that straddle two
# panels; the kernels reading one panel per tile take 4); vectors keep the B panel's width a
# divisor of the convolution's 64-column blocks
GEMM_TILE_ROWS = (1, 2, 4, 6, 8)
GEMM_TILE_VECTORS = (1, 2, 4)
# Architectures whose pointers and size_t have 32 bits, when the file does not say
# (`pointer_bits`): the arena and the weights must fit in what size_t holds there.
ARCH_32 = ("wasm32", "i386", "i486", "i586", "i686", "arm", "armv6", "armv7", "armv7a",
           "armv7m", "armv7em", "armhf", "armel", "thumbv6m", "thumbv7m", "thumbv7em",
           "thumbv8m.base", "thumbv8m.main", "thumbv8.1m.main",
           "riscv32", "mips", "mipsel", "xtensa", "powerpc")


def arch_pointer_bits(arch: str) -> int:
    return 32 if arch.lower() in ARCH_32 else 64
_INT8 = {"activations": str, "requant": str}
INT8_ACTIVATIONS = ("uint8",)
INT8_REQUANT = ("float", "fixed")
_TOOLCHAIN = {"cc": str, "cflags": list, "ldflags": list, "ar": str, "package": str,
              "env": dict}
_REQUIRED = ("name", "arch", "toolchain")


def _check_keys(data: dict, schema: dict, where: str, path: str) -> None:
    for key, value in data.items():
        if key not in schema:
            raise TargetError(f"{path}: unknown key {where}{key!r} (known: "
                              f"{', '.join(sorted(schema))})")
        want = schema[key]
        if want is int and isinstance(value, bool) or not isinstance(value, want):
            names = " or ".join(w.__name__ for w in (want if isinstance(want, tuple) else
                                                     (want,)))
            raise TargetError(f"{path}: {where}{key} must be a {names}, got "
                              f"{type(value).__name__} {value!r}")


def parse_target(text: str, path: str = "<target>") -> Target:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        what = str(getattr(exc, "problem", None) or exc).strip().splitlines()
        raise TargetError(f"{path}: not valid YAML{where}: "
                          f"{what[0] if what else type(exc).__name__}") from None
    except RecursionError:   # PyYAML's composer recurses once per nesting level
        raise TargetError(f"{path}: not valid YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise TargetError(f"{path}: a target file must be a YAML mapping")
    _check_keys(data, _SCHEMA, "", path)
    for key in _REQUIRED:
        if key not in data:
            raise TargetError(f"{path}: missing required key {key!r}")
    tc = data["toolchain"]
    _check_keys(tc, _TOOLCHAIN, "toolchain.", path)
    if "cc" not in tc or not tc["cc"].strip():
        raise TargetError(f"{path}: toolchain.cc (the C compiler) is required")
    for key in ("cflags", "ldflags"):
        if not all(isinstance(f, str) for f in tc.get(key, [])):
            raise TargetError(f"{path}: toolchain.{key} must be a list of strings")
    env = tc.get("env", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TargetError(f"{path}: toolchain.env must map variable names to strings")
    simd = data.get("simd", "auto")
    if simd not in SIMD_LEVELS:
        raise TargetError(f"{path}: simd must be one of {', '.join(SIMD_LEVELS)}, not {simd!r}")
    vb = data.get("vector_bits", 512 if simd == "native" else 128)
    if vb not in (32, 64, 128, 256, 512):
        raise TargetError(f"{path}: vector_bits must be 32, 64, 128, 256 or 512, not {vb}")
    align = data.get("alignment", 64)
    if align < 16 or align & (align - 1) or align > 4096:
        raise TargetError(f"{path}: alignment must be a power of two from 16 to 4096")
    threads = data.get("threads", 1)
    if threads < 1:
        raise TargetError(f"{path}: threads must be at least 1")
    output = data.get("output", "shared")
    if output not in OUTPUT_KINDS:
        raise TargetError(f"{path}: output must be one of {', '.join(OUTPUT_KINDS)}")
    cache = data.get("cache_kib", {})
    if isinstance(cache, str) and cache != "native":
        raise TargetError(f"{path}: cache_kib must be a mapping ({{l1d: KIB, l2: KIB, l3: "
                          f"KIB}}) or native, not {cache!r}")
    if "native" in (simd, cache) and (data.get("run") or output != "shared"):
        raise TargetError(f"{path}: simd: native and cache_kib: native describe the machine "
                          f"that compiles, so they go with a host target only (no run "
                          f"command, output: shared)")
    for key in ("cache_kib", "cpu"):
        values = data.get(key, {})
        for k, v in (values.items() if isinstance(values, dict) else ()):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise TargetError(f"{path}: {key}.{k} must be a non-negative number")
    run = data.get("run", [])
    if not all(isinstance(r, str) and r for r in run):
        raise TargetError(f"{path}: run must be a list of non-empty strings (a command "
                          f"prefix)")
    int8 = data.get("int8", {})
    _check_keys(int8, _INT8, "int8.", path)
    if int8.get("activations", "uint8") not in INT8_ACTIVATIONS:
        raise TargetError(f"{path}: int8.activations must be one of "
                          f"{', '.join(INT8_ACTIVATIONS)}, not {int8['activations']!r}")
    if int8.get("requant", "float") not in INT8_REQUANT:
        raise TargetError(f"{path}: int8.requant must be one of {', '.join(INT8_REQUANT)}, "
                          f"not {int8['requant']!r}")
    tile = data.get("gemm_tile")
    if tile is not None:
        _check_keys(tile, _GEMM_TILE, "gemm_tile.", path)
        if set(tile) != set(_GEMM_TILE):
            raise TargetError(f"{path}: gemm_tile needs both rows and vectors")
        if tile["rows"] not in GEMM_TILE_ROWS or tile["vectors"] not in GEMM_TILE_VECTORS:
            raise TargetError(f"{path}: gemm_tile.rows must be one of {GEMM_TILE_ROWS} and "
                              f"gemm_tile.vectors one of {GEMM_TILE_VECTORS}")
    firmware = _parse_firmware(data, output, path)
    pointer_bits = data.get("pointer_bits", arch_pointer_bits(data["arch"]))
    if pointer_bits not in (32, 64):
        raise TargetError(f"{path}: pointer_bits must be 32 or 64, not {pointer_bits}")
    target = Target(
        pointer_bits=pointer_bits,
        name=data["name"], description=data.get("description", ""), arch=data["arch"],
        toolchain=Toolchain(tc["cc"], tuple(tc.get("cflags", [])), tuple(tc.get("ldflags", [])),
                            tc.get("ar", "ar"), tc.get("package", ""),
                            tuple(sorted(env.items()))),
        simd=simd, vector_bits=vb, alignment=align, threads=threads, output=output,
        cache_kib=dict(cache) if isinstance(cache, dict) else {}, cpu=dict(data.get("cpu", {})),
        run=tuple(run), run_package=data.get("run_package", ""),
        int8_activations=int8.get("activations", "uint8"),
        int8_requant=int8.get("requant", "float"), path=path,
        gemm_tile=(tile["rows"], tile["vectors"]) if tile is not None else (),
        winograd=data.get("winograd", False),
        implicit_strided=data.get("implicit_strided"), firmware=firmware)
    return resolve_native(target, native_caches=cache == "native")


def resolve_native(target: Target, native_caches: bool = False) -> Target:
    """The target with `simd: native` replaced by what its compiler builds for on this machine
    (its vectors at most the file's vector_bits) and, with `cache_kib: native`, this machine's
    caches (mlcc/targets/host.py). A compiler that cannot be asked leaves the portable
    baseline of the architecture: SSE2 or NEON (128 bits), else scalar code."""
    if target.simd != "native" and not native_caches:
        return target
    changes: dict = {}
    if target.simd == "native":
        found = host.compiler_vectors(target.toolchain.cc, target.toolchain.cflags)
        if found is None:
            found = {"x86_64": ("sse2", 128), "aarch64": ("neon", 128)}.get(target.arch,
                                                                              ("none", 32))
        level, bits = found
        if bits > target.vector_bits:     # the file caps the width: 256 on a Zen 4, say
            level, bits = {256: ("avx2", 256), 128: ("auto", 128)}.get(
                target.vector_bits, ("auto", target.vector_bits))
        changes.update(simd=level, vector_bits=bits)
    if native_caches:
        changes["cache_kib"] = host.host_caches()
    return replace(target, native=True, **changes)


def _parse_firmware(data: dict, output: str, path: str) -> Firmware | None:
    """`firmware:` is required with `output: firmware` and refused without it."""
    fw = data.get("firmware")
    if (fw is None) != (output != "firmware"):
        raise TargetError(f"{path}: `firmware:` (the memory map) goes with `output: firmware`"
                          f", and only with it")
    if fw is None:
        return None
    _check_keys(fw, _FIRMWARE, "firmware.", path)
    regions = {}
    for key in ("flash", "ram"):
        if key not in fw:
            raise TargetError(f"{path}: firmware.{key} ({{origin: ADDRESS, kib: SIZE}}) is "
                              f"required")
        _check_keys(fw[key], _REGION, f"firmware.{key}.", path)
        if set(fw[key]) != set(_REGION):
            raise TargetError(f"{path}: firmware.{key} needs both origin and kib")
        origin, kib = fw[key]["origin"], fw[key]["kib"]
        if not 0 <= origin < 2 ** 32 or origin % 4 or not 0 < kib * 1024 <= 2 ** 32 - origin:
            raise TargetError(f"{path}: firmware.{key} must be a word-aligned region of the "
                              f"32-bit address space (origin {origin:#x}, {kib} KiB)")
        regions[key] = (origin, kib * 1024)
    stack = fw.get("stack_kib", 8)
    if not 0 < stack * 1024 < regions["ram"][1]:
        raise TargetError(f"{path}: firmware.stack_kib must be positive and less than the RAM")
    return Firmware(regions["flash"][0], regions["flash"][1], regions["ram"][0],
                    regions["ram"][1], stack * 1024)


def builtin_targets() -> list[str]:
    return sorted(p.stem for p in resources.targets().glob("*.yaml"))


def load_target(spec: str) -> Target:
    """A built-in name (targets/NAME.yaml) or the path of a YAML file."""
    path = Path(spec)
    if spec in builtin_targets():
        path = resources.targets() / f"{spec}.yaml"
    elif not (path.suffix in (".yaml", ".yml") or path.exists()):
        raise TargetError(f"unknown target {spec!r}: built-in targets are "
                          f"{', '.join(builtin_targets())}, or give a path to a YAML file")
    if not path.is_file():
        raise TargetError(f"target file {spec} does not exist")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetError(f"cannot read target file {spec}: {exc}") from None
    return parse_target(text, str(path))
