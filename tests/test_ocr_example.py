"""examples/ocr: its detector post-processing and line inputs on made-up maps, then the whole
example on a small rendered page (PP-OCR det at the page size, PP-OCR rec compiled once for
widths 32..1280), mlcc against onnxruntime line by line."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "ocr"))

import ocr  # noqa: E402


def test_components_are_4_connected_and_joined_across_rows():
    mask = np.zeros((6, 9), bool)
    mask[0, 0] = mask[1, 1] = True           # diagonal neighbours: two components
    mask[1:5, 4] = mask[1:5, 7] = True       # a U: two columns joined by the bottom row
    mask[4, 4:8] = True
    comps = sorted((sorted(zip(r.tolist(), c.tolist())) for r, c in ocr.components(mask)))
    assert comps[0] == [(0, 0)] and comps[1] == [(1, 1)]
    assert len(comps) == 3 and len(comps[2]) == 4 + 4 + 2


def test_text_boxes_threshold_score_and_unclip():
    prob = np.zeros((40, 60), np.float32)
    prob[10:14, 5:25] = 0.9                  # a line: kept, grown by 4 * 20 * 1.5 / 48 = 2.5
    prob[30:34, 30:50] = 0.5                 # above THRESH, mean under BOX_THRESH: dropped
    prob[2:4, 50:52] = 0.9                   # 2 pixels high: under MIN_SIZE, dropped
    prob[20:24, 0:10] = 0.95                 # at the left edge: clipped at 0
    assert ocr.text_boxes(prob) == [(2, 7, 28, 17), (0, 17, 13, 27)]


def test_rec_input_keeps_each_line_at_its_own_width():
    assert ocr.rec_input(np.full((20, 100), 255, np.uint8)).shape == (1, 3, 48, 240)
    narrow = ocr.rec_input(np.zeros((40, 10), np.uint8))       # 12 wide: padded to 32
    assert narrow.shape == (1, 3, 48, 32) and np.all(narrow[..., 12:] == 0)
    assert np.all(narrow[..., :12] == -1)
    assert ocr.rec_input(np.zeros((10, 1000), np.uint8)).shape == (1, 3, 48, 1280)


@pytest.mark.slow
def test_ocr_example_on_a_small_page(tmp_path, capsys):
    import fetch_models as fm
    try:
        fm.fetch("ppocr_det"), fm.fetch("ppocr_rec")
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download the PP-OCR models: {exc}")
    status = ocr.main(["--out", str(tmp_path), "--lines", "3", "--size", "352x192",
                       "--seed", "1"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "the same boxes" in out
    assert "3 of 3 lines read the same by mlcc and onnxruntime" in out, out


@pytest.mark.parametrize("args,message", [
    (["--size", "640"], "expected WIDTHxHEIGHT"),
    (["--size", "100x64"], "multiples of 32"),
    (["--page", "/nonexistent/page.png"], "no such file")])
def test_bad_arguments_are_one_line_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        ocr.main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err
