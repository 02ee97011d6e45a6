"""Peak memory of one inference: mlcc's static need (arena + weights, known at compile time)
next to the peak resident memory each engine adds to a fresh Python process.

    python examples/minilm/memory.py MODEL.onnx COMPILED_FOLDER

Each engine runs in its own subprocess (mlcc.benchmark.measure_memory, which `make bench`'s
memory table uses too): its peak RSS (ru_maxrss) after imports is subtracted from the peak
after creating the session (or loading the library) and running once, so the interpreter,
numpy and the engine's code are not counted. Inputs are zeros of the compiled shapes (an
all-zero attention mask is valid input for MiniLM; memory does not depend on the values).
"""
from __future__ import annotations

import sys

from mlcc.benchmark import format_bytes, measure_memory


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 1
    m = measure_memory(*argv)
    print(f"mlcc static: arena {format_bytes(m.arena_size)} + weights "
          f"{format_bytes(m.weights_size)} = {format_bytes(m.arena_size + m.weights_size)}")
    print(f"{'mlcc':12} peak RSS added by loading and one run: {format_bytes(m.mlcc_added)}")
    print(f"{'onnxruntime':12} peak RSS added by loading and one run: "
          f"{format_bytes(m.onnxruntime_added)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
