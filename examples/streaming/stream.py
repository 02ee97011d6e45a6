"""Streaming with mlcc: two small recurrent models (models.py: a VAD with an LSTM inside an If
on the sample rate, and a GRU keyword spotter) compiled with mlcc, run chunk by chunk with
the state carried between calls, from Python and from C (stream.c, the state updated in
place), and compared chunk by chunk with onnxruntime run the same way.

    python examples/streaming/stream.py [--out build/streaming] [--chunks 24] [--time]

`make streaming` runs it. With --time it also measures one call on a chunk: mlcc from
Python (run()), onnxruntime's session.run, alternated, and the C program's call.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402

import mlcc  # noqa: E402

SR = 16000
BIND = {"vad": {"sr": SR}, "kws": {}}


def build(out: Path) -> dict[str, Path]:
    """The two ONNX models, written into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, make in (("vad", models.vad_model), ("kws", models.kws_model)):
        paths[name] = out / f"{name}.onnx"
        onnx.save(make(), str(paths[name]))
    return paths


def compile_model(name: str, path: Path, out: Path) -> Path:
    folder = out / name
    mlcc.compile(path, folder, target="x86", name=name, bind=BIND.get(name, {}))
    return folder


def _session(path: Path):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def stream(run, model: onnx.ModelProto, chunks: list[dict]) -> list[dict[str, np.ndarray]]:
    """Runs `run(feeds) -> outputs` on every chunk, each state input fed the previous call's
    NAME_next output (zeros at first)."""
    state = models.initial_state(model)
    results = []
    for chunk in chunks:
        outs = run({**chunk, **state})
        state = {k: outs[f"{k}_next"] for k in state}
        results.append(outs)
    return results


def reference(name: str, path: Path, chunks: list[dict]) -> list[dict[str, np.ndarray]]:
    sess = _session(path)
    names = [o.name for o in sess.get_outputs()]
    extra = {k: np.array(v, np.int64) for k, v in BIND.get(name, {}).items()}
    return stream(lambda feeds: dict(zip(names, sess.run(names, {**feeds, **extra}))),
                  onnx.load(str(path)), chunks)


def run_python(folder: Path, path: Path, chunks: list[dict]) -> list[dict[str, np.ndarray]]:
    return stream(mlcc.load(folder).run, onnx.load(str(path)), chunks)


def build_c(name: str, folder: Path) -> Path:
    """stream.c built against the compiled model in `folder`."""
    exe = folder / f"{name}_stream"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Wextra", f"-DMODEL={name}",
                    f"-I{folder}", f"-I{folder / 'runtime' / 'include'}", str(HERE / "stream.c"),
                    f"-L{folder}", "-lmodel", f"-Wl,-rpath,{folder.resolve()}", "-o", str(exe)],
                   check=True)
    return exe


def run_c(name: str, folder: Path, chunks: list[dict], calls: int = 0
          ) -> tuple[list[dict[str, np.ndarray]], str]:
    """The C program's outputs per chunk, and what it printed (its timing with `calls`)."""
    manifest = mlcc.load(folder)
    ins = [t for t in manifest.inputs
           if not any(o["name"] == f"{t['name']}_next" for o in manifest.outputs)]
    (folder / "chunks.bin").write_bytes(b"".join(
        np.ascontiguousarray(c[t["name"]], t["dtype"]).tobytes() for c in chunks for t in ins))
    exe = build_c(name, folder)
    args = [str(exe), str(folder / "weights.bin"), str(folder / "chunks.bin"),
            str(folder / "outputs.bin")] + ([str(calls)] if calls else [])
    printed = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    raw = np.frombuffer((folder / "outputs.bin").read_bytes(), np.uint8)
    results, at = [], 0
    for _ in chunks:
        outs = {}
        for t in manifest.outputs:
            n = int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize
            outs[t["name"]] = raw[at:at + n].view(t["dtype"]).reshape(t["shape"])
            at += n
        results.append(outs)
    return results, printed


def max_error(got: list[dict], ref: list[dict]) -> float:
    return max(float(np.max(np.abs(g[k] - r[k]))) for g, r in zip(got, ref) for k in r)


def time_calls(name: str, path: Path, folder: Path, chunk: dict, rounds: int = 5,
               calls: int = 2000) -> dict[str, float]:
    """Microseconds per call, best round, mlcc run() and onnxruntime session.run alternated
    (same chunk, zero state)."""
    model = onnx.load(str(path))
    feeds = {**chunk, **models.initial_state(model)}
    lib = mlcc.load(folder)
    sess = _session(path)
    names = [o.name for o in sess.get_outputs()]
    ort_feeds = {**feeds, **{k: np.array(v, np.int64) for k, v in BIND.get(name, {}).items()}}
    best = {"mlcc run()": 1e30, "onnxruntime run": 1e30}
    for _ in range(rounds):
        for key, fn in (("mlcc run()", lambda: lib.run(feeds)),
                        ("onnxruntime run", lambda: sess.run(names, ort_feeds))):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[key] = min(best[key], (time.perf_counter() - t0) / calls * 1e6)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("build/streaming"))
    ap.add_argument("--chunks", type=int, default=24)
    ap.add_argument("--time", action="store_true", help="measure one call (mlcc vs ORT)")
    args = ap.parse_args(argv)
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("a C compiler (cc) is needed for the C half of the example")
        return 1
    paths = build(args.out)
    worst = 0.0
    for name, path in paths.items():
        folder = compile_model(name, path, args.out)
        chunks = models.chunks(name, args.chunks)
        ref = reference(name, path, chunks)
        py = run_python(folder, path, chunks)
        c, _ = run_c(name, folder, chunks)
        e_py, e_c = max_error(py, ref), max_error(c, ref)
        worst = max(worst, e_py, e_c)
        first = next(iter(ref[0]))
        trace = " ".join(f"{float(np.max(r[first])):.2f}" for r in ref[:: max(1, len(ref) // 8)])
        print(f"{name}: {len(chunks)} chunks, state carried; max |mlcc - onnxruntime|: "
              f"Python {e_py:.2e}, C (state in place) {e_c:.2e}; {first} over time: {trace}")
        if args.time:
            t = time_calls(name, path, folder, chunks[0])
            _, printed = run_c(name, folder, chunks[:1], calls=20000)
            print(f"  one call: mlcc run() {t['mlcc run()']:.1f} us, onnxruntime "
                  f"session.run {t['onnxruntime run']:.1f} us (alternated, best of 5); "
                  f"C {printed.split(': ', 1)[1].strip()}")
    ok = worst <= 1e-4
    print("streaming: outputs match onnxruntime chunk by chunk" if ok else
          f"streaming: MISMATCH (max error {worst:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
