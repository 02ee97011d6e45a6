"""Writing a run's arrays to .npz/.npy files that load back with their element types."""
from __future__ import annotations

import io
import zipfile

import numpy as np

from .. import dtypes  # noqa: F401  (ml_dtypes: bfloat16, float8, int4... known to numpy)


def save_arrays(path, arrays: dict[str, np.ndarray]) -> None:
    """Writes arrays as np.savez does (an .npz, one NAME.npy per array), or one array as an
    .npy when path ends in .npy, keeping the ml_dtypes types (bfloat16, float8, float4, int4,
    int2...): np.save writes their dtype as raw bytes ('<V2'), np.load then returns bytes. The
    header here names the type ('bfloat16'), which np.load turns into the type again wherever
    ml_dtypes is imported (onnx imports it; without it, np.load says the type is unknown).
    Other arrays are written exactly as np.save writes them."""
    def npy(arr: np.ndarray) -> bytes:
        arr = np.asarray(arr)
        buf = io.BytesIO()
        if arr.dtype.type.__module__ == "ml_dtypes":
            np.lib.format.write_array_header_1_0(buf, {"descr": arr.dtype.name,
                                                      "fortran_order": False,
                                                      "shape": arr.shape})
            buf.write(np.ascontiguousarray(arr).tobytes())
        else:
            np.save(buf, arr, allow_pickle=False)
        return buf.getvalue()

    path = str(path)
    if path.endswith(".npy"):
        if len(arrays) != 1:
            raise ValueError(f"{path}: an .npy file holds one array, not {len(arrays)}")
        with open(path, "wb") as f:
            f.write(npy(next(iter(arrays.values()))))
        return
    if not path.endswith(".npz"):
        path += ".npz"      # as np.savez names it
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, arr in arrays.items():
            z.writestr(f"{name}.npy", npy(arr))

