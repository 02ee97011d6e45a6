"""Building a generated model folder with the target's toolchain.

The same command line goes into the folder's Makefile, so a user can rebuild the library with
`make` (or another compiler: `make CC=clang`) and get what mlcc built.
"""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from ..errors import BuildError, TargetError
from .target import Target

BUILD_TIMEOUT_S = 1800


def library_command(target: Target, sources: list[str], out: str) -> list[str]:
    tc = target.toolchain
    return ([tc.cc, *tc.cflags, *target.defines(), "-Iruntime/include", "-Iruntime/kernels",
             "-I.", "-o", out, *sources, *tc.ldflags])


def makefile(target: Target, sources: list[str]) -> str:
    tc = target.toolchain
    lib = target.library_name
    return "\n".join([
        f"# Rebuilds {lib} from the generated sources (written by mlcc for target "
        f"{target.name}).",
        "# Override the toolchain as usual, e.g. make CC=clang.",
        f"CC = {tc.cc}",
        f"CFLAGS = {' '.join(shlex.quote(f) for f in tc.cflags)}",
        f"CPPFLAGS = {' '.join(target.defines())} -Iruntime/include -Iruntime/kernels -I.",
        f"LDFLAGS = {' '.join(shlex.quote(f) for f in tc.ldflags)}",
        f"SOURCES = {' '.join(sources)}",
        "",
        f"{lib}: $(SOURCES) $(wildcard *.h runtime/include/*.h runtime/kernels/*.h)",
        f"\t$(CC) $(CFLAGS) $(CPPFLAGS) -o $@ $(SOURCES) $(LDFLAGS)",
        "",
        "clean:",
        f"\trm -f {lib}",
        "",
        ".PHONY: clean",
        ""])


def build_library(target: Target, folder: Path, sources: list[str]) -> Path:
    if not target.compiler_found():
        hint = f" (install it: apt-get install {target.toolchain.package})" \
            if target.toolchain.package else ""
        raise TargetError(f"target {target.name}: compiler {target.toolchain.cc!r} not found"
                          f"{hint}")
    cmd = library_command(target, sources, target.library_name)
    try:
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{target.toolchain.cc} did not finish within {BUILD_TIMEOUT_S} s"
                         ) from None
    if proc.returncode != 0:
        first = next((l for l in proc.stderr.splitlines() if "error" in l), "").strip()
        raise BuildError(f"{target.toolchain.cc} failed on the generated code"
                         f"{': ' + first if first else ''} (this is an mlcc bug; please "
                         f"report it with --verbose output)",
                         detail=f"$ {shlex.join(cmd)}\n{proc.stderr}")
    return folder / target.library_name
