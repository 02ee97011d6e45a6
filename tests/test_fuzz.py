"""A bounded fuzz run of the compiler's input (tools/fuzz_compiler.py): the corpus, the
structured malformations, the calibration-data cases and 30 s of seeded random mutations of
ONNX, target and calibration files, in a
subprocess under a 3 GB address-space limit. Every case must end in exit code 0, 1 or 3 with a
clear message, in bounded time, writing nothing outside its output folder. `make fuzz` runs
longer with other seeds."""
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def test_compiler_input_fuzz_finds_no_crash():
    proc = subprocess.run([sys.executable, str(TOOLS / "fuzz_compiler.py"), "--seconds", "30",
                           "--seed", "0"], capture_output=True, text=True, timeout=600)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " cases (" in proc.stdout
