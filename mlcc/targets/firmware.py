"""The bare-metal side of the `output: firmware` targets (cortex-m4, cortex-m7, cortex-m55).

The output folder holds, besides the generated model (model.h, model.c, weights.c: the weights
as a const array, which the linker puts in flash) and its runtime sources:

- libmodel.a: all of them compiled for the core, what a firmware project links;
- startup.c (runtime_c/firmware/mlcc_startup.c): vector table and reset handler;
- firmware.c (runtime_c/firmware/mlcc_firmware.c): the test harness as a firmware main, inputs
  and outputs through semihosting;
- firmware.ld: the linker script, written here from the target's memory map (`firmware:`);
- firmware.elf (and firmware.map), linked from those three and libmodel.a.

firmware.ld gives each kind of memory its own output section, so that the sizes of the linked
ELF say what is what: `.mlcc_weights` (weights.c's constants) and `.text` (code, other
constants, the initial values of .data) in flash; `.mlcc_arena` (the model's arena),
`.mlcc_io` (the harness's input and output buffers), `.data` + `.bss` (statics) and `.stack` in
RAM. `memory_report` reads them from the ELF's section headers (no binutils needed).
`mlcc run/verify/bench` run firmware.elf with the target's `run` command (qemu-system-arm
-machine ...) and semihosting on (FirmwareModel in mlcc/runtime/runner.py).
"""
from __future__ import annotations

import shlex
import struct
from pathlib import Path

from .. import resources
from ..errors import MlccError
from .objects import MAKEFILE_OBJECT_RULE, MAKEFILE_OBJECTS, OBJ_DIR, object_path
from .target import Firmware, Target

FIRMWARE_ELF = "firmware.elf"
FIRMWARE_MAP = "firmware.map"
LINKER_SCRIPT = "firmware.ld"
STARTUP_C = "startup.c"
FIRMWARE_C = "firmware.c"
IO_ALIGN = 16            # the harness places each input and output at a multiple of this

# Output sections of firmware.ld -> (memory, what the report calls them)
SECTIONS = {".vectors": ("flash", "code"), ".text": ("flash", "code"),
            ".ARM.exidx": ("flash", "code"), ".mlcc_weights": ("flash", "weights"),
            ".mlcc_arena": ("ram", "arena"), ".mlcc_io": ("ram", "io"),
            ".data": ("ram", "statics"), ".bss": ("ram", "statics"),
            ".stack": ("ram", "stack")}


def firmware_files(target: Target) -> dict[str, bytes]:
    """startup.c, firmware.c and firmware.ld for a model folder."""
    src = resources.runtime_c() / "firmware"
    return {STARTUP_C: (src / "mlcc_startup.c").read_bytes(),
            FIRMWARE_C: (src / "mlcc_firmware.c").read_bytes(),
            LINKER_SCRIPT: linker_script(target).encode()}


def linker_script(target: Target) -> str:
    fw = target.firmware
    return f"""\
/* firmware.ld: the linker script of firmware.elf, written by mlcc for target {target.name}
 * from its memory map (the target file's `firmware:`). For your own board, use your vendor's
 * script; weights.c's constants only need to go to flash (const data, .rodata). */
MEMORY
{{
  FLASH (rx)  : ORIGIN = {fw.flash_origin:#010x}, LENGTH = {fw.flash_bytes}
  RAM   (rwx) : ORIGIN = {fw.ram_origin:#010x}, LENGTH = {fw.ram_bytes}
}}
ENTRY(Reset_Handler)
STACK_SIZE = {fw.stack_bytes};

SECTIONS
{{
  .vectors : {{ KEEP(*(.vectors)) }} > FLASH
  .mlcc_weights : ALIGN(64) {{ *libmodel.a:weights.o(.rodata .rodata.*) }} > FLASH
  .text : ALIGN(4) {{ *(.text .text.*) *(.rodata .rodata.*) . = ALIGN(4); }} > FLASH
  .ARM.exidx : {{ *(.ARM.exidx .ARM.exidx.* .gnu.linkonce.armexidx.*) }} > FLASH
  .data : ALIGN(8)
  {{
    __data_start__ = .;
    *(.data .data.*)
    . = ALIGN(4);
    __data_end__ = .;
  }} > RAM AT > FLASH
  __data_load__ = LOADADDR(.data);
  .mlcc_arena (NOLOAD) : ALIGN(64) {{ *(.bss.mlcc_arena) }} > RAM
  .mlcc_io (NOLOAD) : ALIGN(64) {{ *(.bss.mlcc_io) }} > RAM
  .bss (NOLOAD) : ALIGN(4)
  {{
    __bss_start__ = .;
    *(.bss .bss.* COMMON)
    . = ALIGN(4);
    __bss_end__ = .;
  }} > RAM
  .stack (NOLOAD) : ALIGN(8)
  {{
    . += STACK_SIZE;
    __stack_top__ = .;
  }} > RAM
}}
"""


def io_size(sizes: list[int]) -> int:
    """Bytes of the harness's input/output buffer for tensors of these sizes (as
    mlcc_firmware.c places them)."""
    return max(sum((s + IO_ALIGN - 1) // IO_ALIGN * IO_ALIGN for s in sizes), 1)


def harness_defines(prefix: str, arena_size: int, io_bytes: int) -> list[str]:
    return [f"-DMLCC_MODEL={prefix}", f"-DMLCC_FW_ARENA_SIZE={max(arena_size, 1)}",
            f"-DMLCC_FW_IO_SIZE={io_bytes}"]


def archive_command(target: Target, sources: list[str]) -> list[str]:
    return [target.toolchain.ar, "rcsD", target.library_name,
            *(object_path(s) for s in sources)]


def link_command(target: Target, defines: list[str]) -> list[str]:
    tc = target.toolchain
    return [tc.cc, *tc.cflags, "-Iruntime/include", *defines, "-T", LINKER_SCRIPT,
            f"-Wl,-Map={FIRMWARE_MAP}", "-o", FIRMWARE_ELF, STARTUP_C, FIRMWARE_C,
            target.library_name, *tc.ldflags]


def makefile(target: Target, sources: list[str], defines: list[str]) -> str:
    tc = target.toolchain
    lib = target.library_name
    return "\n".join([
        f"# Rebuilds {lib} (the model for your firmware project) and {FIRMWARE_ELF} (the test",
        f"# firmware that mlcc runs under QEMU) for target {target.name}; written by mlcc.",
        f"CC = {tc.cc}",
        f"AR = {tc.ar}",
        f"CFLAGS = {' '.join(shlex.quote(f) for f in tc.cflags)}",
        f"CPPFLAGS = {' '.join(target.defines())} -Iruntime/include -Iruntime/kernels -I.",
        f"LDFLAGS = {' '.join(shlex.quote(f) for f in tc.ldflags)}",
        f"HARNESS_DEFINES = {' '.join(defines)}",
        f"SOURCES = {' '.join(sources)}",
        MAKEFILE_OBJECTS,
        "",
        f"all: {lib} {FIRMWARE_ELF}",
        "",
        *MAKEFILE_OBJECT_RULE,
        "",
        f"{lib}: $(OBJECTS)",
        "\trm -f $@",
        "\t$(AR) rcsD $@ $(OBJECTS)",
        "",
        f"{FIRMWARE_ELF}: {STARTUP_C} {FIRMWARE_C} {LINKER_SCRIPT} {lib}",
        f"\t$(CC) $(CFLAGS) -Iruntime/include $(HARNESS_DEFINES) -T {LINKER_SCRIPT} "
        f"-Wl,-Map={FIRMWARE_MAP} -o $@ {STARTUP_C} {FIRMWARE_C} {lib} $(LDFLAGS)",
        "",
        "clean:",
        f"\trm -rf {OBJ_DIR} {lib} {FIRMWARE_ELF} {FIRMWARE_MAP}",
        "",
        ".PHONY: all clean",
        ""])


def fit_problems(fw: Firmware, arena: int, io_bytes: int, weights: int) -> list[str]:
    """What cannot fit the declared memory before anything is built ([] when it may fit; the
    link then checks the rest)."""
    problems = []
    ram = arena + io_bytes + fw.stack_bytes
    if ram > fw.ram_bytes:
        problems.append(f"RAM: the arena ({arena} bytes) + input/output buffers ({io_bytes}) + "
                        f"stack ({fw.stack_bytes}) = {ram} bytes, more than the "
                        f"{fw.ram_bytes} bytes of RAM")
    if weights > fw.flash_bytes:
        problems.append(f"flash: the weights ({weights} bytes) are more than the "
                        f"{fw.flash_bytes} bytes of flash")
    return problems


def memory_report(elf: Path, fw: Firmware) -> dict:
    """RAM and flash of a linked firmware.elf, by kind, from its section headers."""
    sizes = section_sizes(elf)
    report = {"flash": {"code": 0, "weights": 0}, "ram": {"arena": 0, "io": 0, "statics": 0,
                                                          "stack": 0}}
    for name, size in sizes.items():
        if name in SECTIONS:
            memory, kind = SECTIONS[name]
            report[memory][kind] += size
    report["flash"]["code"] += sizes.get(".data", 0)      # its initial values, copied at reset
    for memory, total in (("flash", fw.flash_bytes), ("ram", fw.ram_bytes)):
        report[memory]["total"] = sum(report[memory].values())
        report[memory]["size"] = total
    return report


def _elf_sections(elf: Path) -> tuple[bytes, list[tuple]]:
    """The bytes of a 32-bit little-endian ELF file and its section headers (name offset,
    type, flags, address, offset, size, link, info, alignment, entry size)."""
    data = elf.read_bytes()
    if data[:6] != b"\x7fELF\x01\x01":
        raise MlccError(f"{elf}: not a 32-bit little-endian ELF file")
    try:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
        return data, [struct.unpack_from("<IIIIIIIIII", data, shoff + i * shentsize)
                      for i in range(shnum)]
    except struct.error:
        raise MlccError(f"{elf}: cannot read its section headers") from None


def _c_string(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def section_sizes(elf: Path) -> dict[str, int]:
    """{section name: size} of the allocated sections of a 32-bit little-endian ELF file."""
    data, headers = _elf_sections(elf)
    try:
        strtab = headers[struct.unpack_from("<H", data, 0x32)[0]][4]
        return {_c_string(data, strtab + h[0]): h[5] for h in headers if h[2] & 0x2}  # ALLOC
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        raise MlccError(f"{elf}: cannot read its section names") from None


LAYER_MARK = "mlcc_layer_mark"      # defined by mlcc_firmware.c


def instrument_layers(model_c: str, prefix: str, calls: int) -> str:
    """model.c with a call of mlcc_layer_mark() before the first kernel call of
    <prefix>_run and after each (the per-layer counting build of `mlcc bench`). In the
    generated C every kernel call of the run function is a statement that starts with
    "    mlcc_" and ends its last line with ");" (docs/generated-c.md)."""
    lines = model_c.splitlines()
    head = next((i for i, l in enumerate(lines) if l.startswith(f"int {prefix}_run(")), None)
    if head is None:
        raise MlccError(f"model.c has no function {prefix}_run")
    out, found, in_call, first = lines[:head + 1], 0, False, True
    for i in range(head + 1, len(lines)):
        line = lines[i]
        if line == "}":
            out += lines[i:]
            break
        if line.startswith("    mlcc_"):
            in_call = True
            if first:
                out.append(f"    {LAYER_MARK}();")
                first = False
        out.append(line)
        if in_call and line.endswith(");"):
            out.append(f"    {LAYER_MARK}();")
            in_call, found = False, found + 1
    if found != calls:
        raise MlccError(f"found {found} kernel calls in {prefix}_run of model.c, not {calls}: "
                        f"cannot count per layer")
    return "\n".join([f"void {LAYER_MARK}(void);", *out]) + "\n"


def symbol_address(elf: Path, name: str) -> int:
    """The address of a function in a 32-bit little-endian ELF file (Thumb bit cleared)."""
    data, headers = _elf_sections(elf)
    try:
        for _n, kind, _f, _a, off, size, link, _i, _al, entsize in headers:
            if kind == 2:                 # SHT_SYMTAB
                for k in range(size // entsize):
                    st_name, value = struct.unpack_from("<II", data, off + k * entsize)
                    if _c_string(data, headers[link][4] + st_name) == name:
                        return value & ~1
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        pass
    raise MlccError(f"{elf}: no symbol {name}")


def overflow_message(stderr: str) -> str:
    """The linker's account of a memory region that overflowed, or "" if it is not that."""
    lines = [l.strip() for l in stderr.splitlines() if "overflowed by" in l
             or "will not fit in region" in l]
    return lines[-1].split(": ", 1)[-1] if lines else ""
