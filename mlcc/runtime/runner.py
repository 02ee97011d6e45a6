"""Running a model compiled for another machine: its test harness through a command prefix.

A folder compiled for a cross target (arm under qemu-aarch64, or a board reached by ssh) holds
`harness`, an executable for the target linked against the model's library (source:
harness.c). `run(feeds)` writes each input as a raw file, runs

    <run prefix...> <folder>/harness <folder>/weights.bin IN_0 ... OUT_0 ...

and reads the raw output files back: the same API as the in-process CompiledModel. The files
go into a temporary folder inside the model folder (when it is writable), so a board that
mounts the model folder at the same path (sshfs, NFS) sees them at the paths it is given.

Each run is one process: the harness loads and checks the weights, runs once and exits. A
damaged weight blob is therefore reported by run(), not by load().

The wasm target uses the same contract: its `harness` is harness.mjs, a node script over the
model's JavaScript API (mlcc/targets/wasm.py), and its run prefix is `node`.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..errors import MlccError, RuntimeStatusError, TargetError
from ..dtypes import PACKED_BITS, storage_bytes, unpack_elements
from .loader import ModelBase

RUN_TIMEOUT_S = 3600
EXIT_STATUS = 2          # the harness's exit code for a model status (see mlcc_harness.c)


class HarnessModel(ModelBase):
    """A compiled model run by its harness in another process (an emulator, a board)."""

    def __init__(self, folder: str | Path, *, run: list[str] | None = None,
                 timeout: float = RUN_TIMEOUT_S):
        super().__init__(folder)
        self.command = list(run if run is not None else self.manifest.get("run", []))
        self.timeout = timeout
        self.harness = self.folder / self.manifest.get("harness", "harness")
        self.weights = self.folder / "weights.bin"
        if not self.harness.is_file():
            raise MlccError(f"{self.harness}: the test harness is missing (compile for a target "
                            f"with a `run` command, or build it with `make harness`)")
        if not self.weights.is_file():
            raise MlccError(f"{self.weights}: the weight blob is missing")
        if self.command and shutil.which(self.command[0]) is None:
            package = self.manifest.get("run_package", "") if run is None else ""
            raise TargetError(f"{self.command[0]} is not installed, so models built for "
                              f"target {self.manifest.get('target', '?')} cannot run here"
                              + (f" (apt-get install {package})" if package else ""))

    def _tempdir(self) -> tempfile.TemporaryDirectory:
        if os.access(self.folder, os.W_OK):
            return tempfile.TemporaryDirectory(prefix=".run-", dir=self.folder)
        return tempfile.TemporaryDirectory(prefix="mlcc-run-")

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        sizes = self.dims_of(feeds) if self.dims else None     # (a range model: --dims)
        arrays = self._check_inputs(feeds, sizes)
        with self._tempdir() as tmp:
            tmp_dir = Path(tmp).resolve()
            in_paths = [tmp_dir / f"in_{i}.bin" for i in range(len(arrays))]
            out_paths = [tmp_dir / f"out_{i}.bin" for i in range(len(self.outputs))]
            for path, arr in zip(in_paths, arrays):
                # Raw little-endian elements, as the harness reads them on every target.
                path.write_bytes(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
            dims = ["--dims", ",".join(map(str, sizes))] if sizes else []
            cmd = [*self.command, str(self.harness.resolve()), *dims,
                   str(self.weights.resolve()), *map(str, in_paths), *map(str, out_paths)]
            self._execute(cmd)
            return {t["name"]: self._read_output(
                        path, t, self.shape_at(t, sizes) if sizes else t["shape"])
                    for path, t in zip(out_paths, self.outputs)}

    def _execute(self, cmd: list[str]) -> None:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
        except FileNotFoundError:
            raise TargetError(f"cannot run {cmd[0]}: not found") from None
        except subprocess.TimeoutExpired:
            raise MlccError(f"the model did not finish within {self.timeout:g} s: "
                            f"{shlex.join(cmd)}") from None
        if proc.returncode == 0:
            return
        lines = [l.strip() for l in proc.stderr.splitlines() if l.strip()]
        status = next((l for l in lines if l.startswith("harness: ") and " failed: " in l), "")
        if proc.returncode == EXIT_STATUS and status:
            stage, message = status[len("harness: "):].split(" failed: ", 1)
            prefix = f"{self.folder}: init failed" if stage == "init" else "run failed"
            raise RuntimeStatusError(f"{prefix}: {message}")
        raise MlccError(f"running the model on target {self.manifest.get('target', '?')} "
                        f"failed (exit status {proc.returncode})"
                        + (f": {lines[-1]}" if lines else ""),
                        detail=f"$ {shlex.join(cmd)}\n{proc.stderr}")

    @staticmethod
    def _read_output(path: Path, t: dict, shape: list[int]) -> np.ndarray:
        dtype = np.dtype(t["dtype"]).newbyteorder("<")
        count = int(np.prod(shape, dtype=np.int64))
        data = path.read_bytes() if path.is_file() else b""
        if len(data) != storage_bytes(t["dtype"], count):
            raise MlccError(f"the harness wrote {len(data)} bytes for output {t['name']!r}, "
                            f"expected {storage_bytes(t['dtype'], count)}")
        if t["dtype"] in PACKED_BITS:
            return unpack_elements(np.frombuffer(data, np.uint8), t["dtype"], shape)
        return np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="), copy=True
                                                        ).reshape(shape)
