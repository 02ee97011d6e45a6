"""`make icount-arm`: instructions per inference of the arm build against the portable build.

    python bench/icount_arm.py                          # the default model set
    python bench/icount_arm.py digits_cnn mobilenetv2   # some of them
    python bench/icount_arm.py --dotprod                # adds the arm-dotprod build (fmla)
    python bench/icount_arm.py --list

No speed can be measured under qemu-aarch64, so this counts instructions instead: a repeatable
cost measure (the counts are identical run to run, and the script checks that). Each model is
compiled twice, for `arm` (the kernels' vector code, which GCC compiles to NEON) and for
`arm-portable` (the same with `simd: none`: the kernels' portable scalar loops, everything else
equal). Each build's harness runs under qemu-aarch64 with the counting plugin of
runtime_c/qemu-icount (built here with the host gcc): once with `--runs 1`, once with `--runs 2`.
The difference is exactly one inference, without process start-up, file reading and init.
`--runs 1` is run a second time to check that the count repeats.

Models are those of bench/bench_models.py (tools/fetch_models.py). Progress goes
to stderr, the Markdown table to stdout (and --output FILE). Needs qemu-aarch64 (qemu-user),
aarch64-linux-gnu-gcc with its C library, and gcc; `make target-tools` installs them on Debian.
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from mlcc.benchmark import ICOUNT_LINE, build_icount_plugin  # noqa: E402
from mlcc.errors import MlccError  # noqa: E402

# The set of issue 4: small, medium and large models; others from bench_models.py on request.
DEFAULT_MODELS = ["digits_mlp", "digits_cnn", "mobilenetv2", "ppocr_rec", "yolov8n"]
VECTOR_TARGET, PORTABLE_TARGET = "arm", "arm-portable"
FUSED_TARGET = "arm-dotprod"      # --dotprod: ARMv8.2-A, multiplies and adds fused into fmla
QEMU_TIMEOUT_S = 3600
_LINE = ICOUNT_LINE


class IcountError(Exception):
    """A tool is missing or a run failed: the message says which."""


@dataclass(frozen=True)
class Counts:
    """Executed guest instructions: all of them, and the aarch64 classes the plugin decodes."""
    insns: int
    simd: int         # Advanced SIMD vector data processing (fmul v.4s, fadd v.4s, fmla, dup...)
    fp: int           # scalar floating point and Advanced SIMD scalar data processing
    simd_mem: int     # loads and stores of SIMD&FP registers (ldr q, ldp q, ldr s, st1...)

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(self.insns - other.insns, self.simd - other.simd, self.fp - other.fp,
                      self.simd_mem - other.simd_mem)

    @property
    def simd_share(self) -> float:
        return self.simd / self.insns if self.insns else 0.0


def build_plugin(out_dir: Path, cc: str = "gcc") -> Path:
    """Compiles runtime_c/qemu-icount/icount.c into out_dir/icount.so with the host compiler
    (as `mlcc bench` does for the cortex-m targets)."""
    try:
        return build_icount_plugin(out_dir, cc)
    except MlccError as exc:
        raise IcountError(f"{exc.message}\n{exc.detail}".strip()) from None


def write_inputs(folder: Path, dest: Path, seed: int = 0) -> list[Path]:
    """Random inputs for a compiled folder, as the harness's raw little-endian files."""
    import mlcc
    manifest = mlcc.load(folder).manifest
    rng = np.random.default_rng(seed)
    paths = []
    for i, t in enumerate(manifest["inputs"]):
        dtype = np.dtype(t["dtype"])
        if dtype.kind == "f":
            arr = rng.standard_normal(t["shape"]).astype(dtype)
        else:
            arr = rng.integers(0, 2, t["shape"]).astype(dtype)
        path = dest / f"in_{i}.bin"
        path.write_bytes(arr.astype(dtype.newbyteorder("<")).tobytes())
        paths.append(path)
    return paths


def count(folder: Path, plugin: Path, inputs: list[Path], runs: int, work: Path) -> Counts:
    """Instructions of one harness process: start-up, init and `runs` inferences."""
    import mlcc
    manifest = mlcc.load(folder).manifest
    log = work / f"icount-{runs}.log"
    outs = [work / f"out_{i}.bin" for i in range(len(manifest["outputs"]))]
    cmd = [*manifest["run"], "-plugin", str(plugin), "-d", "plugin", "-D", str(log),
           str(folder / manifest["harness"]), "--runs", str(runs), str(folder / "weights.bin"),
           *map(str, inputs), *map(str, outs)]
    log.unlink(missing_ok=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=QEMU_TIMEOUT_S)
    except FileNotFoundError:
        raise IcountError(f"{cmd[0]} is not installed (apt-get install qemu-user)") from None
    if proc.returncode != 0:
        raise IcountError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr}")
    text = log.read_text() if log.is_file() else ""
    found = _LINE.findall(text)
    if len(found) != 1:
        raise IcountError(f"the plugin wrote no count (log: {text.strip()!r})")
    insns, simd, fp, simd_mem, target = found[0]
    if target != "aarch64":
        raise IcountError(f"the plugin ran in a qemu for {target}, not aarch64")
    return Counts(int(insns), int(simd), int(fp), int(simd_mem))


def one_inference(folder: Path, plugin: Path, work: Path, check: bool = True,
                  seed: int = 0) -> Counts:
    """Instructions of exactly one inference: count(--runs 2) - count(--runs 1). With check,
    --runs 1 is counted twice and must give the same numbers."""
    work.mkdir(parents=True, exist_ok=True)
    inputs = write_inputs(folder, work, seed)
    once = count(folder, plugin, inputs, 1, work)
    if check:
        again = count(folder, plugin, inputs, 1, work)
        if again != once:
            raise IcountError(f"{folder}: the count changed from run to run: {once} then "
                              f"{again}")
    twice = count(folder, plugin, inputs, 2, work)
    return twice - once


def _fmt(n: int) -> str:
    return f"{n:,}"


def markdown_table(rows: list[tuple]) -> str:
    """rows: (model name, arm counts, arm-portable counts[, arm-dotprod counts])."""
    fused = any(len(r) > 3 for r in rows)
    head = ["model", "arm (NEON): instructions", "arm-portable: instructions",
            "portable / NEON"]
    if fused:
        head += ["arm-dotprod (NEON, fmla): instructions", "portable / dotprod"]
    head += ["SIMD share, NEON", "SIMD share, portable"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for name, vec, port, *rest in rows:
        cells = [name, _fmt(vec.insns), _fmt(port.insns), f"{port.insns / vec.insns:.2f}"]
        if fused:
            cells += [_fmt(rest[0].insns), f"{port.insns / rest[0].insns:.2f}"] if rest \
                else ["", ""]
        cells += [f"{vec.simd_share:.1%}", f"{port.simd_share:.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _qemu_version() -> str:
    try:
        return subprocess.run(["qemu-aarch64", "--version"], capture_output=True, text=True
                              ).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "qemu-aarch64"


def main(argv: list[str] | None = None) -> int:
    import bench_models as bm

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*",
                    help=f"models (default: {' '.join(DEFAULT_MODELS)}); any of "
                         f"{', '.join(bm.MODELS)}")
    ap.add_argument("--output", "-o", type=Path, help="also write the table to this file")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the second --runs 1 count that checks repeatability")
    ap.add_argument("--dotprod", action="store_true",
                    help=f"also count the {FUSED_TARGET} build (multiply-adds fused into fmla)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(bm.MODELS))
        return 0
    unknown = [n for n in args.names if n not in bm.MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(bm.MODELS)}")

    import mlcc
    from mlcc.targets import load_target
    targets = [VECTOR_TARGET, PORTABLE_TARGET] + ([FUSED_TARGET] if args.dotprod else [])
    missing = [m for t in targets for m in load_target(t).missing_tools()]
    if missing:
        print(f"icount_arm: {'; '.join(sorted(set(missing)))}", file=sys.stderr)
        return 1
    rows, skipped = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="mlcc-icount-") as tmp:
            tmp_dir = Path(tmp)
            plugin = build_plugin(tmp_dir / "plugin")
            for name in args.names or DEFAULT_MODELS:
                model = bm.available(name, tmp_dir)
                if model is None:
                    skipped.append(name)
                    continue
                path, shapes = model
                counts = []
                for target in targets:
                    folder = tmp_dir / name / target
                    print(f"{name}: compiling for {target} and counting ...", file=sys.stderr,
                          flush=True)
                    mlcc.compile(path, folder, target=target, shapes=shapes, name="model")
                    counts.append(one_inference(folder, plugin, tmp_dir / name / f"{target}.run",
                                                check=not args.no_check))
                    print(f"{name}: {target}: {counts[-1]}", file=sys.stderr, flush=True)
                rows.append((name, *counts))
    except IcountError as exc:
        print(f"icount_arm: {exc}", file=sys.stderr)
        return 1
    header = [
        f"`make icount-arm` on {datetime.date.today().isoformat()}: instructions executed by "
        f"one inference under {_qemu_version()}, counted by runtime_c/qemu-icount "
        f"({'repeatability checked' if not args.no_check else 'not re-checked'}); "
        f"{bm._cc_version(load_target(VECTOR_TARGET).toolchain.cc)}; mlcc {mlcc.__version__} "
        f"at {bm._git_rev()}.",
        "SIMD share: Advanced SIMD vector data-processing instructions among all executed "
        "(loads and stores of vector registers not included).",
        ""]
    return bm.print_report(header, markdown_table(rows), skipped, args.output)


if __name__ == "__main__":
    sys.exit(main())
