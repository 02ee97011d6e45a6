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

The firmware targets (cortex-m*) too (FirmwareModel): their `harness` is firmware.elf, booted
by the run prefix (qemu-system-arm -machine ...) with semihosting on; its arguments (the
input and output files, relative to the temporary folder QEMU runs in) are the semihosting
command line, and the weights are in the firmware itself.
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
from .loader import ModelBase, check_cpu_features

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
        if not self.command:        # the harness runs on this CPU
            check_cpu_features(self.folder, self.manifest)
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
            proc = self._execute(self._command(in_paths, out_paths, sizes), tmp_dir)
            self.last_stderr = proc.stderr
            shapes = self._shapes(proc.stdout)
            return {t["name"]: self._read_output(
                        path, t, shapes[j] if j in shapes else
                        self.shape_at(t, sizes) if sizes else t["shape"])
                    for j, (path, t) in enumerate(zip(out_paths, self.outputs))}

    def _shapes(self, stdout: str) -> dict[int, list[int]]:
        """The actual shapes of the outputs of a data-dependent size, from the harness's
        "output_shape I D0,D1,..." lines (its files then hold only those elements)."""
        shapes: dict[int, list[int]] = {}
        for line in stdout.splitlines():
            words = line.split()
            if len(words) == 3 and words[0] == "output_shape":
                shapes[int(words[1])] = [int(d) for d in words[2].split(",") if d]
        missing = [j for j in self.dynamic_outputs() if j not in shapes]
        if missing:
            raise MlccError(f"the harness reported no shape for output "
                            f"{self.outputs[missing[0]]['name']!r}, whose size depends on the "
                            f"data (a harness built without -DMLCC_OUTPUT_SHAPES?)")
        for j in self.dynamic_outputs():
            t, dims = self.outputs[j], shapes[j]
            axis = t["dynamic_axis"]
            if len(dims) != len(t["shape"]) or not 0 <= dims[axis] <= t["shape"][axis] or any(
                    d != e for a, (d, e) in enumerate(zip(dims, t["shape"])) if a != axis):
                raise MlccError(f"the harness reported shape {dims} for output {t['name']!r}, "
                                f"which does not fit its maximum {t['shape']}")
        return {j: shapes[j] for j in self.dynamic_outputs()}

    def _command(self, in_paths: list[Path], out_paths: list[Path],
                 sizes: list[int] | None = None) -> list[str]:
        dims = ["--dims", ",".join(map(str, sizes))] if sizes else []
        return [*self.command, str(self.harness.resolve()), *dims, str(self.weights.resolve()),
                *map(str, in_paths), *map(str, out_paths)]

    def _execute(self, cmd: list[str], cwd: Path | None = None
                 ) -> subprocess.CompletedProcess:
        """Runs cmd; the finished process (stdout: the harness's output shapes; stderr: an
        emulator plugin's counts), or an error naming what failed."""
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout,
                                  cwd=cwd)
        except FileNotFoundError:
            raise TargetError(f"cannot run {cmd[0]}: not found") from None
        except subprocess.TimeoutExpired:
            raise MlccError(f"the model did not finish within {self.timeout:g} s: "
                            f"{shlex.join(cmd)}") from None
        if proc.returncode == 0:
            return proc
        lines = [l.strip() for l in proc.stderr.splitlines() if l.strip()]
        status = next((l for l in lines if l.startswith("harness: ") and " failed: " in l), "")
        if proc.returncode == EXIT_STATUS and status:
            stage, message = status[len("harness: "):].split(" failed: ", 1)
            prefix = f"{self.folder}: init failed" if stage == "init" else "run failed"
            raise RuntimeStatusError(f"{prefix}: {message}")
        # an emulator's own fatal error (qemu-system-arm: "Lockup: ...") says most
        last = next((l for l in lines if l.startswith("qemu: fatal: ")), lines[-1] if lines
                    else "")
        raise MlccError(f"running the model on target {self.manifest.get('target', '?')} "
                        f"failed (exit status {proc.returncode})"
                        + (f": {last}" if last else ""),
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


FIRMWARE_TIMEOUT_S = 600


class FirmwareModel(HarnessModel):
    """A model compiled for a microcontroller (output: firmware): firmware.elf, booted by the
    target's run prefix (qemu-system-arm -machine ...) with semihosting, one boot per run.

    `extra_args` go before the firmware's own (e.g. ["--runs", "2"]); `qemu_options` before
    its semihosting options (e.g. an instruction-counting plugin)."""

    def __init__(self, folder: str | Path, *, run: list[str] | None = None,
                 timeout: float = FIRMWARE_TIMEOUT_S):
        super().__init__(folder, run=run, timeout=timeout)
        self.extra_args: list[str] = []
        self.qemu_options: list[str] = []

    def _command(self, in_paths: list[Path], out_paths: list[Path],
                 sizes: list[int] | None = None) -> list[str]:
        # (sizes: none, a firmware target refuses a range of sizes at compile time)
        # QEMU runs in the temporary folder: the firmware gets short relative names
        args = [*self.extra_args, *(p.name for p in in_paths), *(p.name for p in out_paths)]
        config = ",".join(["enable=on", "target=native", "arg=firmware",
                           *(f"arg={a}" for a in args)])
        return [*self.command, *self.qemu_options, "-semihosting-config", config,
                "-kernel", str(self.harness.resolve())]
