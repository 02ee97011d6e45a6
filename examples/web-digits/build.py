"""Builds the web-digits page: compiles examples/digits/digits_cnn.onnx for the wasm target into
OUT/model/ and copies the page next to it. Serve OUT with any static web server, e.g.

    python examples/web-digits/build.py build/web-digits
    python -m http.server -d build/web-digits -b 127.0.0.1 8000    # then open the address

(a page loaded from file:// cannot fetch model.wasm: browsers refuse it).
"""
import shutil
import sys
from pathlib import Path

import mlcc

HERE = Path(__file__).resolve().parent
MODEL = HERE.parent / "digits" / "digits_cnn.onnx"
PAGE = ("index.html", "digits.js")


def build(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    res = mlcc.compile(MODEL, out / "model", target="wasm", name="digits")
    for name in PAGE:
        shutil.copyfile(HERE / name, out / name)
    size = (out / "model" / "model.wasm").stat().st_size
    print(f"built {out}/ (model.wasm {size} bytes, weights.bin "
          f"{res.manifest['weights_size']} bytes)")
    return out


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else "build/web-digits"))
