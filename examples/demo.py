"""`make demo`: compile the digits CNN, run it from C and from Python, compare with onnxruntime."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

import mlcc

HERE = Path(__file__).parent / "digits"
BUILD = Path("build")


def main() -> int:
    out = BUILD / "digits"
    res = mlcc.compile(HERE / "digits_cnn.onnx", out, target="x86", name="digits")
    print(f"compiled {HERE / 'digits_cnn.onnx'} -> {out}/ (arena {res.manifest['arena_size']} "
          f"bytes, weights {res.manifest['weights_size']} bytes)")
    data = np.load(HERE / "digits_sample.npz")
    images, labels = data["input"], data["label"]

    # From Python, through cffi.
    model = mlcc.load(out)
    ours = np.array([model.run({"input": img[None]})["logits"][0] for img in images])
    sess = ort.InferenceSession(str(HERE / "digits_cnn.onnx"), providers=["CPUExecutionProvider"])
    ref = np.array([sess.run(None, {"input": img[None]})[0][0] for img in images])
    print(f"python: predictions {ours.argmax(1).tolist()}")
    print(f"        labels      {labels.tolist()}")
    print(f"        max abs difference from onnxruntime: {np.abs(ours - ref).max():.2e}")

    # From C: build examples/digits/main.c against the library and run it on the same pixels.
    pixels = BUILD / "digits_sample.f32"
    images.astype(np.float32).tofile(pixels)
    exe = BUILD / "digits_demo"
    subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Wextra", f"-I{out}",
                    f"-I{out}/runtime/include", str(HERE / "main.c"), f"-L{out}", "-lmodel",
                    f"-Wl,-rpath,{out.resolve()}", "-o", str(exe)], check=True)
    c_out = subprocess.run([str(exe), str(out / "weights.bin"), str(pixels)], check=True,
                           capture_output=True, text=True).stdout.split()
    print(f"C:      predictions {[int(x) for x in c_out]}")
    ok = [int(x) for x in c_out] == ours.argmax(1).tolist() and np.abs(ours - ref).max() < 1e-4
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
