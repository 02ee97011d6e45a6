"""The runtime is safe to embed: libFuzzer on the weight-blob loader, real models clean under
AddressSanitizer + UndefinedBehaviorSanitizer and valgrind memcheck, and no heap allocation in
init() or run() (a counting malloc). The drivers are tools/fuzz_runtime.py and
tools/sanitize_models.py; `make fuzz-runtime` and `make sanitize-models` run them longer and on
every model. clang (with libclang-rt-dev) and valgrind come from `make test`'s Debian packages;
without them these tests skip and say so."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sanitize_models

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _fuzzer_available() -> bool:
    if not shutil.which("clang"):
        return False
    probe = subprocess.run(["clang", "-fsanitize=fuzzer", "-x", "c", "-", "-o", "/dev/null"],
                           input="int LLVMFuzzerTestOneInput(const char *d, long n) "
                                 "{ (void)d; (void)n; return 0; }",
                           capture_output=True, text=True)
    return probe.returncode == 0


def test_weight_loader_survives_20_seconds_of_libfuzzer():
    if not _fuzzer_available():
        pytest.skip("clang with libFuzzer is missing: apt-get install clang libclang-rt-dev")
    proc = subprocess.run([sys.executable, str(TOOLS / "fuzz_runtime.py"), "--seconds", "20"],
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "stat::number_of_executed_units" in proc.stdout


@pytest.mark.parametrize("name", ["digits_cnn", pytest.param("ppocr_cls", marks=pytest.mark.slow),
                                  pytest.param("yolov8n", marks=pytest.mark.slow)])
def test_model_is_clean_under_asan_and_ubsan(name, tmp_path):
    print(sanitize_models.check(name, "asan", tmp_path))


@pytest.mark.slow
def test_model_is_clean_under_valgrind_memcheck(tmp_path):
    if not shutil.which("valgrind"):
        pytest.skip("valgrind is missing: apt-get install valgrind")
    print(sanitize_models.check("ppocr_cls", "valgrind", tmp_path))


@pytest.mark.parametrize("name", ["digits_cnn", pytest.param("yolov8n", marks=pytest.mark.slow)])
def test_no_heap_allocation_in_init_or_run(name, tmp_path):
    print(sanitize_models.check(name, "malloc", tmp_path))
