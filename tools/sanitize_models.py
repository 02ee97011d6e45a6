"""Real models through the C runtime under AddressSanitizer + UndefinedBehaviorSanitizer, under
valgrind memcheck, and with a counting malloc that proves run() never allocates.

    python tools/sanitize_models.py [--mode asan|valgrind|malloc|all] [MODEL ...]
    python tools/sanitize_models.py --list

MODEL is a name of tools/fetch_models.py (yolov8n, ppocr_det, ppocr_rec, ppocr_cls, the light_*
zoo models as light_NAME, and its PROJECT_MODELS: digits_cnn, digits_cnn_bn, digits_mlp,
mobilenetv2); default: every one. Each model is compiled with --no-build, and its model.c and
runtime sources are built with the program below as ONE static executable (no shared library):

  asan      gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all: the generic
            harness (runtime_c/harness) runs the model on seeded random inputs; its outputs
            must match onnxruntime within mlcc verify's tolerance, and any sanitizer report fails
  valgrind  gcc -O1 -g, the same harness under valgrind --leak-check=full: any invalid access,
            uninitialized use or leak fails (--error-exitcode)
  malloc    gcc -O1: a driver that replaces malloc/calloc/realloc/free/aligned_alloc/
            posix_memalign/memalign (forwarding to glibc's __libc_* functions) counts every
            call from the whole process, libc included, and fails if any happens during
            init() or run() (three runs)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

MALLOC_DRIVER = r"""
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include "mlcc_runtime.h"

#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)
#define FN(suffix) PASTE(MLCC_MODEL, suffix)
const mlcc_model_info *FN(_model_info)(void);
int FN(_init)(mlcc_context *, const void *, size_t, void *, size_t);
int FN(_run_v)(const mlcc_context *, const void *const *, void *const *);

/* Every allocation of the process goes through these (glibc's own calls included). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static volatile long calls;
void *malloc(size_t n) { calls++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { calls++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { calls++; return __libc_realloc(p, n); }
void free(void *p) { if (p) calls++; __libc_free(p); }
void *memalign(size_t a, size_t n) { calls++; return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { calls++; return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    calls++;
    *out = __libc_memalign(a, n);
    return *out ? 0 : ENOMEM;
}

int main(int argc, char **argv) {
    const mlcc_model_info *info = FN(_model_info)();
    void *in[64], *out[64];
    unsigned char *blob, *arena;
    mlcc_context ctx;
    FILE *f;
    long before, during;
    int i, r, status;
    if (argc != 2 || info->num_inputs > 64 || info->num_outputs > 64) return 1;
    blob = __libc_memalign(64, info->weights_size);
    arena = __libc_memalign(info->arena_align, info->arena_size + 1);
    f = fopen(argv[1], "rb");
    if (!blob || !arena || !f || fread(blob, 1, info->weights_size, f) != info->weights_size)
        return 1;
    fclose(f);
    for (i = 0; i < info->num_inputs; i++) {
        in[i] = __libc_memalign(64, info->inputs[i].size_bytes + 1);
        memset(in[i], 0, info->inputs[i].size_bytes);
    }
    for (i = 0; i < info->num_outputs; i++)
        out[i] = __libc_memalign(64, info->outputs[i].size_bytes + 1);
    before = calls;
    status = FN(_init)(&ctx, blob, info->weights_size, arena, info->arena_size);
    for (r = 0; r < 3 && status == MLCC_OK; r++)
        status = FN(_run_v)(&ctx, (const void *const *)in, out);
    if (status != MLCC_OK) {
        printf("status %d\n", status);
        return 2;
    }
    during = calls - before;
    printf("allocations during init and 3 runs: %ld (the counter saw %ld before: fopen)\n",
           during, before);
    if (before == 0) return 4;   /* the counter is not wired in: the check would prove nothing */
    return during == 0 ? 0 : 3;
}
"""

HARNESS = ROOT / "runtime_c" / "harness" / "mlcc_harness.c"


def model_path(name: str) -> tuple[Path, dict]:
    import fetch_models as fm
    if name in fm.REAL_MODELS:
        return fm.fetch(name), dict(fm.REAL_MODELS[name].shapes)
    if name.startswith("light_"):
        return fm.randomized_light_model(name[len("light_"):]), {}
    if name in fm.PROJECT_MODELS:
        return fm.project_model(name), {}
    raise SystemExit(f"unknown model {name!r} (see --list)")


def all_names() -> list[str]:
    import fetch_models as fm
    names = list(fm.PROJECT_MODELS)
    names += list(fm.REAL_MODELS)
    names += [f"light_{n}" for n in fm.LIGHT_NAMES]
    return names


def _compile(name: str, work: Path) -> tuple[Path, str, dict]:
    import mlcc
    path, shapes = model_path(name)
    out = work / name
    res = mlcc.compile(path, out, name=name, shapes=shapes or None, build=False)
    return out, res.manifest.get("name", name), shapes


def _sources(out: Path) -> list[str]:
    return ["model.c"] + [str(p.relative_to(out)) for p in sorted((out / "runtime").rglob("*.c"))]


def _build(out: Path, prefix: str, main_c: Path, flags: list[str], exe: Path) -> None:
    cmd = ["gcc", "-std=gnu11", "-g", "-O1", *flags, f"-DMLCC_MODEL={prefix}", "-I.",
           "-Iruntime/include", "-Iruntime/kernels", str(main_c), *_sources(out), "-lm",
           "-o", str(exe)]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"build failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def _inputs(out: Path, path: Path, shapes: dict, work: Path) -> tuple[list[Path], dict]:
    info = json.loads((out / "manifest.json").read_text())
    rng = np.random.default_rng(0)
    files, feeds = [], {}
    for i, t in enumerate(info["inputs"]):
        a = rng.standard_normal(t["shape"]).astype(t["dtype"]) if t["dtype"].startswith(
            "float") else np.zeros(t["shape"], t["dtype"])
        feeds[t["name"]] = a
        f = work / f"in_{i}.bin"
        a.tofile(f)
        files.append(f)
    return files, feeds


def check(name: str, mode: str, work: Path) -> str:
    """Runs one model in one mode; returns a one-line result, raises on failure."""
    from mlcc.api import compare
    path, _ = model_path(name)
    out, prefix, shapes = _compile(name, work)
    manifest = json.loads((out / "manifest.json").read_text())
    prefix = manifest.get("name", prefix)
    start = time.monotonic()
    if mode == "malloc":
        driver = work / "malloc_driver.c"
        driver.write_text(MALLOC_DRIVER)
        exe = work / f"{name}-malloc"
        _build(out, prefix, driver, [], exe)
        proc = subprocess.run([str(exe), str(out / "weights.bin")], capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"{name}: {proc.stdout.strip()} {proc.stderr[-2000:]}")
        return f"{name}: {proc.stdout.strip()} ({time.monotonic() - start:.0f} s)"
    exe = work / f"{name}-{mode}"
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer"] if mode == "asan" else []
    _build(out, prefix, HARNESS, flags, exe)
    ins, feeds = _inputs(out, path, shapes, work)
    outs = [work / f"out_{i}.bin" for i in range(len(manifest["outputs"]))]
    cmd = [str(exe), str(out / "weights.bin"), *map(str, ins), *map(str, outs)]
    if mode == "valgrind":
        cmd = ["valgrind", "--error-exitcode=99", "--leak-check=full",
               "--errors-for-leak-kinds=definite,indirect,possible",
               "--show-leak-kinds=definite,indirect,possible", "-q", *cmd]
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "print_stacktrace=1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"{name} ({mode}): exit {proc.returncode}\n{proc.stderr[-4000:]}")
    import fetch_models as fm
    import onnx
    model = onnx.load(str(path))
    for i in range(len(model.graph.input) - 1, -1, -1):
        if model.graph.input[i].name not in feeds:
            del model.graph.input[i]
    ref = fm.onnxruntime_outputs(model, [o.name for o in model.graph.output], feeds)
    worst = 0.0
    for t, f in zip(manifest["outputs"], outs):
        got = np.fromfile(f, dtype=t["dtype"]).reshape(t["shape"])
        c = compare(t["name"], got, np.asarray(ref[t["name"]]))
        if not c.ok:
            raise AssertionError(f"{name} ({mode}): output {t['name']} differs from "
                                 f"onnxruntime by {c.max_abs_error} > {c.tolerance}")
        worst = max(worst, c.max_abs_error / c.tolerance if c.tolerance else 0.0)
    return (f"{name}: clean under {mode}, outputs match onnxruntime ({worst:.2f} of the "
            f"tolerance) ({time.monotonic() - start:.0f} s)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--mode", default="all", choices=["asan", "valgrind", "malloc", "all"])
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(all_names()))
        return 0
    modes = ["asan", "valgrind", "malloc"] if args.mode == "all" else [args.mode]
    failed = 0
    for name in args.models or all_names():
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix="mlcc-sanitize-") as tmp:
                try:
                    print(check(name, mode, Path(tmp)), flush=True)
                except (AssertionError, RuntimeError) as exc:
                    failed += 1
                    print(f"FAILED {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
