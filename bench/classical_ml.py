"""Tree ensembles and SVMs against onnxruntime (docs/classical-ml.md, "Speed"): a random
forest, a gradient-boosted classifier and RBF SVMs (SVC, SVR) trained here with scikit-learn
on synthetic data, converted by skl2onnx, timed by `mlcc bench` at each batch size. Needs the
`ml` extra (make setup)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def models(folder: Path) -> dict[str, Path]:
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
    from sklearn.svm import SVC, SVR
    from skl2onnx import to_onnx

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 20)).astype(np.float32)
    y = (x[:, 0] * 2 + np.sin(x[:, 1] * 3) + x[:, 2] * x[:, 3]).astype(np.float32)
    forest = RandomForestRegressor(n_estimators=100, max_depth=10, random_state=0).fit(x, y)
    boosted = GradientBoostingClassifier(n_estimators=100, max_depth=6, random_state=0).fit(
        x, (y > np.median(y)).astype(np.int64))
    # RBF SVMs on the first 2,000 rows: about 1,300 (SVC) and 1,900 (SVR) support vectors
    svc = SVC(kernel="rbf").fit(x[:2000], (x[:2000, 0] + np.sin(3 * x[:2000, 1]) > 0))
    svr = SVR(kernel="rbf").fit(x[:2000], y[:2000])
    opset = {"": 17, "ai.onnx.ml": 3}
    out = {"forest": to_onnx(forest, x[:1], target_opset=opset),
           "boosted": to_onnx(boosted, x[:1], target_opset=opset,
                              options={id(boosted): {"zipmap": False}}),
           "svc": to_onnx(svc, x[:1], target_opset=opset, options={id(svc): {"zipmap": False}}),
           "svr": to_onnx(svr, x[:1], target_opset=opset)}
    paths = {}
    for name, proto in out.items():
        paths[name] = folder / f"{name}.onnx"
        paths[name].write_bytes(proto.SerializeToString())
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", default="1,1000")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlcc-trees-") as tmp:
        for name, path in models(Path(tmp)).items():
            for batch in args.batches.split(","):
                proc = subprocess.run(
                    [sys.executable, "-m", "mlcc.cli", "bench", str(path), "--shape",
                     f"X={batch},20", "--runs", str(args.runs)],
                    capture_output=True, text=True)
                ratio = [l for l in proc.stdout.splitlines() if l.startswith("ratio")]
                print(f"{name} batch {batch}: "
                      f"{ratio[0] if ratio else proc.stderr.strip() or proc.stdout.strip()}")


if __name__ == "__main__":
    main()
