"""The cost of W8A16 layers (int16 activations x int8 weights) against int8 and float, per
multiply-accumulate: three convolutions like PP-OCR det's, built as float, all-int8 and
all-W8A16 (`--pure-int8`), timed in interleaved rounds on one thread (process CPU time and
wall time, medians). docs/quantization.md (W8A16) has the numbers.

    python bench/bench_w8a16_cost.py                 # 96->24 3x3, 24->96 1x1, 96->96 3x3 /2
    python bench/bench_w8a16_cost.py --kind 1x1      # the same with 1x1 kernels
    python bench/bench_w8a16_cost.py --kind dw       # depthwise 3x3, 5x5, 3x3 /2 (96 ch)
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc import api


def model(folder: Path, size: int, k: int, depthwise: bool = False) -> int:
    """folder/m.onnx and folder/c.npz (4 calibration samples); returns the MACs. depthwise:
    96-channel depthwise 3x3, 5x5 and 3x3 stride 2 instead (MobileNetV3 / PP-OCR det's)."""
    rng = np.random.default_rng(0)
    pad = [k // 2] * 4
    ws = {"w1": rng.normal(0, 0.1, (24, 96, k, k)), "w2": rng.normal(0, 0.1, (96, 24, 1, 1)),
          "w3": rng.normal(0, 0.05, (96, 96, k, k))}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=pad),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "w3"], ["y"], pads=pad, strides=[2, 2])]
    if depthwise:
        ws = {"w1": rng.normal(0, 0.3, (96, 1, 3, 3)), "w2": rng.normal(0, 0.2, (96, 1, 5, 5)),
              "w3": rng.normal(0, 0.3, (96, 1, 3, 3))}
        nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4, group=96),
                 helper.make_node("Relu", ["a"], ["ar"]),
                 helper.make_node("Conv", ["ar", "w2"], ["b"], pads=[2] * 4, group=96),
                 helper.make_node("Relu", ["b"], ["br"]),
                 helper.make_node("Conv", ["br", "w3"], ["y"], pads=[1] * 4, strides=[2, 2],
                                  group=96)]
        k = 3
    half = (size + 2 * (k // 2) - k) // 2 + 1
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 96, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96, half, half])],
        [numpy_helper.from_array(v.astype(np.float32), n) for n, v in ws.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(folder / "m.onnx"))
    np.savez(folder / "c.npz",
             x=rng.normal(0, 1, (4, 1, 96, size, size)).astype(np.float32))
    if depthwise:
        return size * size * 96 * (9 + 25) + half * half * 96 * 9
    return size * size * 24 * 96 * k * k + size * size * 96 * 24 + half * half * 96 * 96 * k * k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("3x3", "1x1", "dw"), default="3x3")
    ap.add_argument("--size", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlcc-w8a16-") as tmp:
        folder = Path(tmp)
        macs = model(folder, args.size, 1 if args.kind == "1x1" else 3, args.kind == "dw")
        calib = folder / "c.npz"
        configs = {"float": None, "int8": api.QuantizeConfig(calib, auto_mix=False),
                   "w8a16": api.QuantizeConfig(calib, auto_mix=False, w8a16=("op:Conv",))}
        libs = {}
        for name, q in configs.items():
            mlcc.compile(folder / "m.onnx", folder / name, target="x86-native", quantize=q)
            libs[name] = mlcc.load(folder / name)
        x = {"x": np.random.default_rng(1).normal(0, 1, (1, 96, args.size, args.size))
             .astype(np.float32)}
        cpu: dict[str, list[float]] = {n: [] for n in libs}
        wall: dict[str, list[float]] = {n: [] for n in libs}
        for lib in libs.values():
            lib.run(x)
        for _ in range(args.rounds):
            for name, lib in libs.items():
                c0, w0 = time.process_time(), time.perf_counter()
                lib.run(x)
                cpu[name].append(time.process_time() - c0)
                wall[name].append(time.perf_counter() - w0)
    print(f"{args.kind}, {macs / 1e6:.1f} M MACs, 1 thread, load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    f_cpu, f_wall = np.median(cpu["float"]), np.median(wall["float"])
    for name in libs:
        c, w = np.median(cpu[name]), np.median(wall[name])
        print(f"{name:6s} CPU {c * 1e3:.2f} ms ({c / f_cpu:.2f} of float), wall "
              f"{w * 1e3:.2f} ms ({w / f_wall:.2f})")


if __name__ == "__main__":
    main()
