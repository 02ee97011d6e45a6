"""Building a generated model folder with the target's toolchain.

Each source compiles to its own object under obj/ (mlcc/targets/objects.py), then the objects
link into the library. The same command lines go into the folder's Makefile, so a user can
rebuild the library with `make` (or another compiler: `make CC=clang`, in parallel: `make -j`)
and get what mlcc built.

Every folder also gets the generic test harness (harness.c, a copy of
runtime_c/harness/mlcc_harness.c: weights and inputs from raw files, outputs to raw files).
For targets that run binaries through a command prefix (an emulator, a board), mlcc builds it
as the executable `harness`, linked against the library: that is how Python runs a model it
cannot load into its own process. On the host, `make harness` builds it.

The wasm target builds model.wasm instead, a standalone module whose exports are the model's
API, mlcc_status_string and malloc/free (for the wrapper's one-time allocations); its harness
is harness.mjs, a node script over the JavaScript wrapper (mlcc/targets/wasm.py).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from .. import resources
from ..errors import BuildError, DoesNotFit, TargetError
from . import firmware as fw
from .objects import (CACHE, LAUNCHER_ENV, MAKEFILE_OBJECT_RULE, MAKEFILE_OBJECTS, OBJ_DIR,
                      launcher, object_command, object_key, object_path)
from .target import Target

BUILD_TIMEOUT_S = 1800
JOBS_ENV = "MLCC_BUILD_JOBS"     # compile commands run at once (default: the usable cores)
HARNESS_REL = "harness.c"
HARNESS_EXE = "harness"
_LIBC_HEADER = re.compile(r"\b(std\w*|math|string|limits|features)\.h: No such file")


def harness_files() -> dict[str, bytes]:
    """The harness source, as it is copied into every output folder."""
    return {HARNESS_REL: (resources.runtime_c() / "harness" / "mlcc_harness.c").read_bytes()}


def builds_harness(target: Target) -> bool:
    """Cross targets with a native executable format get the harness built at compile time."""
    return not target.is_host and target.output == "shared"


def wasm_exports(prefix: str, embedded: bool, output_shapes: bool = False,
                 dynamic: bool = False) -> list[str]:
    """The C functions model.wasm exports: what the JavaScript wrapper calls (output_shapes:
    the model has outputs of a data-dependent size, docs/dynamic-outputs.md; dynamic: a model
    of dynamic dimensions, docs/dynamic-shapes.md)."""
    names = [f"{prefix}_init", f"{prefix}_run_v", f"{prefix}_model_info",
             "mlcc_status_string", "malloc", "free"]
    if dynamic:
        names[2:2] = [f"{prefix}_run_dims", f"{prefix}_output_shape"]
    elif output_shapes:
        names.insert(2, f"{prefix}_output_shape")
    if embedded:
        names.insert(1, f"{prefix}_init_embedded")
    return names


def _export_flags(target: Target, exports: list[str]) -> list[str]:
    if target.output != "wasm":
        return []       # a shared library exports what MLCC_EXPORT marks
    return ["-sEXPORTED_FUNCTIONS=" + ",".join("_" + e for e in exports)]


def library_command(target: Target, sources: list[str], out: str,
                    exports: list[str] = ()) -> list[str]:
    """Links the objects of `sources` (object_command) into `out`."""
    tc = target.toolchain
    return ([tc.cc, *tc.cflags, "-o", out, *(object_path(s) for s in sources), *tc.ldflags,
             *_export_flags(target, list(exports))])


def _harness_defines(prefix: str, output_shapes: bool, dims: int = 0) -> list[str]:
    """The model's prefix, whether it has outputs of a data-dependent size (the harness then
    reports their shapes: mlcc_harness.c) and its number of dynamic dimensions (a model
    compiled for a range of sizes: its harness takes --dims)."""
    return ([f"-DMLCC_MODEL={prefix}"] + (["-DMLCC_OUTPUT_SHAPES"] if output_shapes else [])
            + ([f"-DMLCC_MODEL_DIMS={dims}"] if dims else []))


def harness_command(target: Target, prefix: str, output_shapes: bool = False,
                    dims: int = 0) -> list[str]:
    """Links the harness against the library; the rpath lets it find the library next to
    itself wherever the folder is copied (a board, a mounted share). dims: the number of
    dynamic dimensions of a model compiled for a range of sizes (its harness takes --dims)."""
    tc = target.toolchain
    return [tc.cc, *tc.cflags, "-Iruntime/include",
            *_harness_defines(prefix, output_shapes, dims),
            "-o", HARNESS_EXE, HARNESS_REL, "-L.", "-lmodel", "-Wl,-rpath,$ORIGIN"]


def makefile(target: Target, sources: list[str], prefix: str,
             exports: list[str] = (), output_shapes: bool = False, dims: int = 0) -> str:
    tc = target.toolchain
    lib = target.library_name
    if target.output == "wasm":
        return _wasm_makefile(target, sources, list(exports))
    default = [lib, HARNESS_EXE] if builds_harness(target) else [lib]
    return "\n".join([
        f"# Rebuilds {lib} from the generated sources (written by mlcc for target "
        f"{target.name}).",
        "# `make harness` builds the test harness (harness.c, generic) linked against it.",
        "# Override the toolchain as usual, e.g. make CC=clang.",
        f"CC = {tc.cc}",
        f"CFLAGS = {' '.join(shlex.quote(f) for f in tc.cflags)}",
        f"CPPFLAGS = {' '.join(target.defines())} -Iruntime/include -Iruntime/kernels -I.",
        f"LDFLAGS = {' '.join(shlex.quote(f) for f in tc.ldflags)}",
        f"SOURCES = {' '.join(sources)}",
        MAKEFILE_OBJECTS,
        f"MODEL = {prefix}",
        "",
        f"all: {' '.join(default)}",
        "",
        *MAKEFILE_OBJECT_RULE,
        "",
        f"{lib}: $(OBJECTS)",
        f"\t$(CC) $(CFLAGS) -o $@ $(OBJECTS) $(LDFLAGS)",
        "",
        f"{HARNESS_EXE}: {HARNESS_REL} {lib} runtime/include/mlcc_runtime.h",
        f"\t$(CC) $(CFLAGS) -Iruntime/include "
        f"{' '.join(_harness_defines('$(MODEL)', output_shapes, dims))} -o $@ {HARNESS_REL} "
        f"-L. -lmodel '-Wl,-rpath,$$ORIGIN'",
        "",
        "clean:",
        f"\trm -rf {OBJ_DIR} {lib} {HARNESS_EXE}",
        "",
        ".PHONY: all clean",
        ""])


def _wasm_makefile(target: Target, sources: list[str], exports: list[str]) -> str:
    tc = target.toolchain
    lib = target.library_name
    return "\n".join([
        f"# Rebuilds {lib} from the generated sources (written by mlcc for target "
        f"{target.name}).",
        "# model.mjs / model.cjs (the JavaScript wrapper) and harness.mjs need no build.",
        f"CC = {tc.cc}",
        f"CFLAGS = {' '.join(shlex.quote(f) for f in tc.cflags)}",
        f"CPPFLAGS = {' '.join(target.defines())} -Iruntime/include -Iruntime/kernels -I.",
        f"LDFLAGS = {' '.join(shlex.quote(f) for f in tc.ldflags)} "
        f"{' '.join(_export_flags(target, exports))}",
        f"SOURCES = {' '.join(sources)}",
        MAKEFILE_OBJECTS,
        *[f"export {k} ?= {v}" for k, v in tc.env],
        "",
        f"all: {lib}",
        "",
        *MAKEFILE_OBJECT_RULE,
        "",
        f"{lib}: $(OBJECTS)",
        f"\t$(CC) $(CFLAGS) -o $@ $(OBJECTS) $(LDFLAGS)",
        "",
        "clean:",
        f"\trm -rf {OBJ_DIR} {lib}",
        "",
        ".PHONY: all clean",
        ""])


def _install_hint(target: Target) -> str:
    package = target.toolchain.package
    return f" (install it: apt-get install {package})" if package else ""


def _run_toolchain(target: Target, folder: Path, cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S,
                              env={**os.environ, **dict(target.toolchain.env)})
    except FileNotFoundError:       # the compiler was found: the launcher is missing
        raise TargetError(f"{LAUNCHER_ENV}: {cmd[0]!r} not found") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{target.toolchain.cc} did not finish within {BUILD_TIMEOUT_S} s"
                         ) from None
    if proc.returncode == 0:
        return
    detail = f"$ {shlex.join(cmd)}\n{proc.stderr}"
    overflow = fw.overflow_message(proc.stderr)
    if overflow:
        raise DoesNotFit(f"the model does not fit the memory of target {target.name}: "
                         f"{overflow}", detail=detail)
    # A compiler without its C library (a cross gcc without libc6-dev-<arch>-cross) fails
    # to link: that is a missing package, not a bug.
    missing = next((l for l in proc.stderr.splitlines()
                    if "cannot find" in l or _LIBC_HEADER.search(l)), "")
    if missing:
        raise TargetError(f"target {target.name}: the toolchain is incomplete: "
                          f"{missing.strip()}{_install_hint(target)}", detail=detail)
    first = next((l for l in proc.stderr.splitlines() if "error" in l), "").strip()
    raise BuildError(f"{target.toolchain.cc} failed on {what}"
                     f"{': ' + first if first else ''} (this is an mlcc bug; please "
                     f"report it with --verbose output)", detail=detail)


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # not on Linux
        return max(1, os.cpu_count() or 1)


def build_jobs() -> int:
    """How many compile commands run at once: MLCC_BUILD_JOBS, else usable_cores()."""
    text = os.environ.get(JOBS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise TargetError(f"{JOBS_ENV}={text!r}: expected a number of jobs >= 1")
        return int(text)
    return usable_cores()


Progress = Callable[[int, int], None]     # (objects done, objects in all)


def compile_objects(target: Target, folder: Path, sources: list[str],
                    progress: Progress | None = None) -> None:
    """Compiles each source of `folder` to its object (object_command), through
    MLCC_CC_LAUNCHER when it is set, build_jobs() at a time, the largest sources first;
    objects this process compiled before from the same bytes with the same command are
    reused (objects.CACHE). A failure is reported for the first failing source in the
    order of `sources`, whatever the order the commands ended in."""
    if not target.compiler_found():
        raise TargetError(f"target {target.name}: compiler {target.toolchain.cc!r} not found"
                          f"{_install_hint(target)}")
    for source in sources:
        (folder / object_path(source)).parent.mkdir(parents=True, exist_ok=True)

    def one(source: str) -> None:
        command = object_command(target, source)
        key = object_key(target, folder, source, command)
        data = CACHE.get(key) if key is not None else None
        out = folder / object_path(source)
        if data is not None:
            out.write_bytes(data)
        else:
            _run_toolchain(target, folder, [*launcher(), *command], source)
            if key is not None:
                CACHE.put(key, out.read_bytes())

    order = sorted(sources, key=lambda s: -(folder / s).stat().st_size)
    jobs = min(build_jobs(), len(order)) or 1
    errors: dict[str, BaseException] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(one, s): s for s in order}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in source order
                errors[futures[future]] = exc
            if progress is not None:
                progress(done, len(order))
    for source in sources:
        if source in errors:
            raise errors[source]


def build_library(target: Target, folder: Path, sources: list[str],
                  exports: list[str] = (), progress: Progress | None = None) -> Path:
    """Builds the target's library (or model.wasm, exporting `exports`) in `folder`;
    progress(done, total) after each object."""
    compile_objects(target, folder, sources, progress)
    cmd = library_command(target, sources, target.library_name, exports)
    _run_toolchain(target, folder, cmd, "the generated code")
    return folder / target.library_name


def build_firmware(target: Target, folder: Path, sources: list[str],
                   defines: list[str], progress: Progress | None = None) -> Path:
    """Compiles the sources into libmodel.a and links firmware.elf around it (output:
    firmware); `defines` are the harness's (firmware.harness_defines)."""
    compile_objects(target, folder, sources, progress)
    (folder / target.library_name).unlink(missing_ok=True)
    _run_toolchain(target, folder, fw.archive_command(target, sources), "the static library")
    _run_toolchain(target, folder, fw.link_command(target, defines), "the firmware")
    return folder / fw.FIRMWARE_ELF


def build_harness(target: Target, folder: Path, prefix: str, output_shapes: bool = False,
                  dims: int = 0) -> Path:
    """Builds the harness executable in `folder`, next to the library it links against
    (dims: the number of dynamic dimensions of a model compiled for a range of sizes)."""
    _run_toolchain(target, folder, harness_command(target, prefix, output_shapes, dims),
                   "the test harness")
    return folder / HARNESS_EXE
