"""Compiling a model folder's C sources one translation unit at a time.

Every target compiles each .c file of a model folder (model.c, weights.c, the runtime's and the
kernels' sources) to its own object under obj/, then links them (a shared library, model.wasm)
or archives them (libmodel.a of the firmware targets). The folder's Makefile has the same rules,
so `make -j` compiles the sources in parallel and rebuilds only what changed.

MLCC_CC_LAUNCHER (a command, e.g. `ccache`) prefixes these compile commands when mlcc builds:
a compiler cache then reuses the runtime's and the kernels' objects, which are the same bytes in
every folder of a target, from one model to the next. It is for the test suite
(tests/conftest.py sets it when ccache is installed, docs/testing.md); unset, mlcc builds as
it always did, and the Makefile never has it.

Within one process, mlcc also remembers the objects it compiled (`ObjectCache`, `CACHE`): an
int8 compile builds the float model for calibration, the fake-quant program, the chosen
program and the report's programs, whose runtime and kernel sources are mostly the same bytes
compiled with the same command. An object is reused when the command, the compiler and the
bytes of the source and of every header it includes with quotes (found as the compiler finds
them: the source's own folder, then the -I folders) are the same; it is then the same bytes
the compiler would write. Commands whose flags write other files beside the object (-M...,
--coverage, -fstack-usage, ...) or read files the key does not follow (-include, -isystem,
@file, ...) are always compiled.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import threading
from collections import OrderedDict
from pathlib import Path

from .target import Target

OBJ_DIR = "obj"
LAUNCHER_ENV = "MLCC_CC_LAUNCHER"


def object_path(source: str) -> str:
    return f"{OBJ_DIR}/{source[:-2]}.o"


def object_command(target: Target, source: str) -> list[str]:
    tc = target.toolchain
    return [tc.cc, *tc.cflags, *target.defines(), "-Iruntime/include", "-Iruntime/kernels",
            "-I.", "-c", source, "-o", object_path(source)]


def launcher() -> list[str]:
    """The words of MLCC_CC_LAUNCHER ([] when unset or empty)."""
    return shlex.split(os.environ.get(LAUNCHER_ENV, ""))


# The Makefile's objects, from its SOURCES, and the rule that compiles one of them as
# object_command does (CFLAGS and CPPFLAGS hold its flags).
MAKEFILE_OBJECTS = f"OBJECTS = $(SOURCES:%.c={OBJ_DIR}/%.o)"
MAKEFILE_OBJECT_RULE = [f"{OBJ_DIR}/%.o: %.c $(wildcard *.h runtime/*/*.h)",
                        "\t@mkdir -p $(dir $@)",
                        "\t$(CC) $(CFLAGS) $(CPPFLAGS) -c $< -o $@"]


_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
# flags after which the compiler writes more than the object (or writes where it runs), or
# reads files the key does not follow (forced includes, other include paths, response files)
_UNCACHED = ("-M", "-save-temps", "-fprofile", "--coverage", "-ftest-coverage",
             "-fstack-usage", "-fdump", "-fcallgraph-info", "-gsplit-dwarf", "-ftime-report",
             "-fopt-info", "-fsave-optimization-record", "-include", "-imacros", "-iquote",
             "-isystem", "-idirafter", "-iprefix", "-I-", "@")
# the compiler's environment variables that add include paths
_INCLUDE_ENV = ("CPATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH")
CACHE_BYTES = 256 << 20        # objects kept per process (a model's kernels: a few MB)


def _includes(folder: Path, source: str, dirs: list[str]) -> list[tuple[str, bytes | None]]:
    """Every file `source` includes with quotes, transitively, as (path relative to the
    folder, bytes; None where no candidate exists: an include under an #if not taken), each
    resolved as the compiler does: the including file's folder first, then `dirs` (-I)."""
    seen: dict[str, bytes | None] = {}
    todo = [source]
    while todo:
        rel = todo.pop()
        data = (folder / rel).read_bytes()
        seen[rel] = data
        here = os.path.dirname(rel)
        for name in _QUOTED_INCLUDE.findall(data):
            name = name.decode("utf-8", "surrogateescape")
            found = None
            for d in (here, *dirs):
                cand = os.path.normpath(os.path.join(d, name))
                if (folder / cand).is_file():
                    found = cand
                    break
            if found is None:
                seen.setdefault(f"?{name}", None)
            elif found not in seen:
                seen[found] = b""          # claimed: read when popped
                todo.append(found)
    return sorted(seen.items())


def _compiler_id(cc: str) -> str:
    path = shutil.which(cc)
    if path is None:
        return cc
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def object_key(target: Target, folder: Path, source: str, command: list[str]) -> str | None:
    """What the object of `source` compiled by `command` in `folder` depends on, hashed; None
    when the command writes other files too or reads files the key does not follow (not
    cached)."""
    if any(w.startswith(_UNCACHED) for w in command):
        return None
    h = hashlib.sha256()
    for word in (_compiler_id(target.toolchain.cc), *command,
                 *(f"{k}={v}" for k, v in target.toolchain.env),
                 *(f"{k}={os.environ.get(k, '')}" for k in _INCLUDE_ENV)):
        h.update(word.encode("utf-8", "surrogateescape") + b"\0")
    if any(w.startswith("-g") and w != "-g0" for w in command):
        h.update(str(folder.resolve()).encode() + b"\0")   # debug info names the folder
    dirs = [w[2:] for w in command if w.startswith("-I") and len(w) > 2]
    for rel, data in _includes(folder, source, dirs):
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        h.update(b"-" if data is None else hashlib.sha256(data).digest())
    return h.hexdigest()


class ObjectCache:
    """Objects by object_key, the most recently used kept up to `limit` bytes in all."""

    def __init__(self, limit: int = CACHE_BYTES):
        self.limit = limit
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> bytes | None:
        with self._lock:
            data = self._objects.get(key)
            if data is None:
                self.misses += 1
                return None
            self._objects.move_to_end(key)
            self.hits += 1
            return data

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            if key in self._objects or len(data) > self.limit:
                return
            self._objects[key] = data
            self._size += len(data)
            while self._size > self.limit:
                _, old = self._objects.popitem(last=False)
                self._size -= len(old)


CACHE = ObjectCache()
