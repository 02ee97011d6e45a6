"""What the compiling machine offers, for targets that say `simd: native` (x86-native).

`-march=native` builds for whatever CPU compiles, but the kernels' vector width (and with it
the GEMM tile, the register blocking, Winograd's panels) is chosen by the target description.
A file that states 512-bit vectors is wrong on a CPU without AVX-512: gcc then splits every
vector in two and the tiles meant for 32 registers spill out of 16 (MobileNetV2 ran 8x slower
on a Zen 3 that way). So a native target asks the compiler, with the target's own flags, which
vector instructions it will use, and the operating system how large the caches are.
"""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

# (macro the compiler defines, simd level, vector bits), widest first: the first one defined
# wins. AVX2 counts only with FMA, which every kernel's multiply-add assumes at 256 bits.
_VECTOR_LEVELS = (
    (("__AVX512F__",), "avx512", 512),
    (("__AVX2__", "__FMA__"), "avx2", 256),
    (("__SSE2__",), "sse2", 128),
    (("__ARM_NEON",), "neon", 128),
    (("__wasm_simd128__",), "simd128", 128),
)


# x86 instruction sets that the kernels' code may use: (macro gcc predefines when its flags
# enable the set, the name Linux's /proc/cpuinfo gives the CPU's support)
X86_FEATURES = (
    ("__AVX__", "avx"), ("__AVX2__", "avx2"), ("__FMA__", "fma"), ("__F16C__", "f16c"),
    ("__AVXVNNI__", "avx_vnni"), ("__AVX512F__", "avx512f"), ("__AVX512BW__", "avx512bw"),
    ("__AVX512DQ__", "avx512dq"), ("__AVX512VL__", "avx512vl"),
    ("__AVX512VNNI__", "avx512_vnni"), ("__AVX512VBMI__", "avx512vbmi"),
    ("__AVX512BF16__", "avx512_bf16"), ("__AVX512FP16__", "avx512_fp16"),
)


@functools.lru_cache(maxsize=None)
def compiler_macros(cc: str, cflags: tuple[str, ...]) -> frozenset[str] | None:
    """The macros `cc cflags` predefines (gcc and clang: -dM -E); None when the compiler
    cannot be asked (not installed: the build then says so)."""
    try:
        out = subprocess.run([cc, *cflags, "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return frozenset(line.split()[1] for line in out.stdout.splitlines()
                     if line.startswith("#define ") and len(line.split()) >= 2)


def x86_features(cc: str, cflags: tuple[str, ...]) -> list[str]:
    """The CPU features (cpuinfo names) that code built by `cc cflags` may need: a library
    built with them does not load on a CPU that lacks one (it would stop at an illegal
    instruction); [] when the compiler cannot be asked."""
    defined = compiler_macros(cc, cflags) or frozenset()
    return [flag for macro, flag in X86_FEATURES if macro in defined]


def compiler_vectors(cc: str, cflags: tuple[str, ...]) -> tuple[str, int] | None:
    """(simd level, vector bits) that `cc cflags` compiles for on this machine, from the
    macros it predefines; None when the compiler cannot be asked or names none of them."""
    defined = compiler_macros(cc, cflags)
    if defined is None:
        return None
    for macros, level, bits in _VECTOR_LEVELS:
        if all(m in defined for m in macros):
            return level, bits
    return None


def _sysfs_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    """{l1d, l2, l3} in KiB of the first CPU, from Linux's sysfs; what it lacks is left out."""
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size[:-1].isdigit():
            continue
        kib = int(size[:-1]) * {"K": 1, "M": 1024}.get(size[-1], 0)
        key = {"1": "l1d", "2": "l2", "3": "l3"}.get(level)
        if key and kib:
            sizes[key] = kib
    return sizes


@functools.lru_cache(maxsize=None)
def host_caches() -> dict[str, int]:
    """The data caches of the machine, in KiB per core's view ({} where the OS does not say)."""
    return _sysfs_caches()
