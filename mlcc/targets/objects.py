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
"""
from __future__ import annotations

import os
import shlex

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
