"""Peak memory of one inference: mlcc's static need (arena + weights, known at compile time)
next to the peak resident memory each engine adds to a fresh Python process.

    python examples/minilm/memory.py MODEL.onnx COMPILED_FOLDER

Each engine runs in its own subprocess: its peak RSS (ru_maxrss) after imports is subtracted
from the peak after creating the session (or loading the library) and running once, so the
interpreter, numpy and the engine's code are not counted. Inputs are zeros of the right types
(an all-zero attention mask is valid input for MiniLM; memory does not depend on the values).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, resource, sys
import numpy as np
engine, model, folder = sys.argv[1:4]
def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if engine == "onnxruntime":
    import onnxruntime as ort
    base = peak()
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    types = {"tensor(int64)": np.int64, "tensor(float)": np.float32, "tensor(int32)": np.int32}
    feeds = {i.name: np.zeros(i.shape, types[i.type]) for i in sess.get_inputs()}
    sess.run(None, feeds)
else:
    import mlcc
    info = json.load(open(folder + "/manifest.json"))
    base = peak()
    m = mlcc.load(folder)
    feeds = {i["name"]: np.zeros(i["shape"], i["dtype"]) for i in info["inputs"]}
    m.run(feeds)
print(json.dumps({"added": peak() - base}))
"""


def measure(engine: str, model: str, folder: str) -> int:
    out = subprocess.run([sys.executable, "-c", _CHILD, engine, model, folder],
                         capture_output=True, text=True, check=True).stdout
    return int(json.loads(out.strip().splitlines()[-1])["added"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 1
    model, folder = argv
    info = json.loads((Path(folder) / "manifest.json").read_text())
    mib = 1 << 20
    print(f"mlcc static: arena {info['arena_size'] / mib:.1f} MiB + weights "
          f"{info['weights_size'] / mib:.1f} MiB = "
          f"{(info['arena_size'] + info['weights_size']) / mib:.1f} MiB")
    for engine in ("mlcc", "onnxruntime"):
        print(f"{engine:12} peak RSS added by loading and one run: "
              f"{measure(engine, model, folder) / mib:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
