"""Golden generated C: a refactor that changes what mlcc writes shows up as a diff here.
Regenerate deliberately with MLCC_UPDATE_GOLDEN=1 and review the diff in the commit."""
import os
import re
from pathlib import Path

import onnx
import pytest

import mlcc
from conftest import tiny_cnn

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("fname", ["model.h", "model.c", "Makefile"])
def test_generated_sources_match_golden(tmp_path, fname):
    onnx.save(tiny_cnn(batch=2), str(tmp_path / "tiny.onnx"))
    mlcc.compile(tmp_path / "tiny.onnx", tmp_path / "out", name="tiny", build=False)
    # The source hash depends on the onnx package's serializer, not on mlcc: mask it.
    text = re.sub(r"sha256 [0-9a-f]{16}", "sha256 <source>",
                  (tmp_path / "out" / fname).read_text())
    golden = GOLDEN / f"tiny_{fname}"
    if os.environ.get("MLCC_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"no golden file {golden}: run with MLCC_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"{fname} differs from {golden} (MLCC_UPDATE_GOLDEN=1 " \
                                       f"regenerates it; review the diff)"
