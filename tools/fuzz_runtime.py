"""libFuzzer on the runtime's weight-blob loader: init (magic, version, header size, blob size,
model id, alignment, checksum) and, whenever init accepts a blob, one run.

    python tools/fuzz_runtime.py [--seconds 20] [--keep DIR]

Compiles a small CNN (tools/fuzz_compiler.py's seed model: Conv, Relu, MaxPool, Flatten, Gemm)
with --no-build, builds its model.c and runtime sources with a fuzz target under
`clang -fsanitize=fuzzer,address,undefined` (Debian: clang and libclang-rt-dev), seeds the
corpus with the valid weights.bin and damaged copies of it, and runs libFuzzer for the given
time. Each input is copied into a 64-byte-aligned heap buffer whose bytes past the input are
poisoned (misaligned blobs are tested in test_runtime.py). A blob init accepts must run. Any
sanitizer report or crash fails (exit code != 0); the crashing input is left in the working
folder.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

FUZZ_TARGET = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sanitizer/asan_interface.h>
#include "model.h"

static unsigned char arena[FUZZ_ARENA_SIZE + 64] __attribute__((aligned(64)));
static float x[FUZZ_INPUT_X_SIZE], y[FUZZ_OUTPUT_Y_SIZE];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An aligned heap copy whose bytes past the blob are poisoned: ASan sees any read past
     * the blob's end. */
    const size_t cap = ((size + 1) + 63) / 64 * 64 + 64;
    unsigned char *blob = aligned_alloc(64, cap);
    mlcc_context ctx;
    int status;
    const size_t off = 0;   /* misalignment is tested in test_runtime.py */
    if (blob == NULL) return 0;
    memcpy(blob + off, data, size);
    ASAN_POISON_MEMORY_REGION(blob + off + size, cap - off - size);
    status = fuzz_init(&ctx, blob + off, size, arena, sizeof arena);
    if (getenv("MLCC_FUZZ_VERBOSE")) fprintf(stderr, "init: %d (%s)\n", status, mlcc_status_string(status));
    if (status == MLCC_OK) {
        memset(x, 0, sizeof x);
        status = fuzz_run(&ctx, x, y);
        if (status != MLCC_OK) abort();   /* a blob init accepted must run */
    } else if (mlcc_status_string(status) == NULL || ctx.model != NULL) {
        abort();                          /* a failed init leaves the context unusable */
    }
    ASAN_UNPOISON_MEMORY_REGION(blob, cap);
    free(blob);
    return 0;
}
"""


def build(work: Path) -> Path:
    import onnx
    sys.path.insert(0, str(HERE))
    import fuzz_compiler
    import mlcc

    model = fuzz_compiler.seed_models()["cnn"]
    onnx.save(model, str(work / "fuzz.onnx"))
    out = work / "model"
    mlcc.compile(work / "fuzz.onnx", out, name="fuzz", build=False)
    (work / "fuzz_target.c").write_text(FUZZ_TARGET)
    sources = [str(p) for p in sorted(out.rglob("*.c")) if "harness" not in p.name]
    includes = sorted({str(p.parent) for p in out.rglob("*.h")})
    exe = work / "fuzz_weights"
    cmd = ["clang", "-g", "-O1", "-std=c11", "-fsanitize=fuzzer,address,undefined",
           "-fno-sanitize-recover=all", *[f"-I{i}" for i in includes],
           str(work / "fuzz_target.c"), *sources, "-lm", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"cannot build the fuzz target (clang with libFuzzer: apt-get install "
                         f"clang libclang-rt-dev):\n{proc.stderr[-3000:]}")
    seeds = work / "corpus"
    seeds.mkdir()
    blob = (out / "weights.bin").read_bytes()
    variants = {"valid": blob, "truncated": blob[:len(blob) // 2], "header": blob[:64],
                "short": blob[:7], "empty": b"", "flipped": blob[:100] + bytes([blob[100] ^ 1])
                + blob[101:], "padded": blob + b"\0" * 64}
    for name, data in variants.items():
        (seeds / name).write_bytes(data)
    return exe


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="mlcc-fuzz-runtime-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        exe = build(work)
        proc = subprocess.run([str(exe), f"-max_total_time={args.seconds}", "-max_len=8192",
                               "-print_final_stats=1", str(work / "corpus")], cwd=work,
                              capture_output=True, text=True)
        stats = [l for l in proc.stderr.splitlines() if l.startswith("stat::number_of_executed")
                 or "DONE" in l or "ERROR" in l or "SUMMARY" in l]
        print("\n".join(stats))
        if proc.returncode != 0:
            print(proc.stderr[-5000:])
            print(f"crashing input kept in {work}")
            args.keep = work
        return proc.returncode
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
