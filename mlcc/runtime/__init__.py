"""Running compiled models from Python (cffi) and, for cross targets, through a runner."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .arrays import save_arrays
from .loader import CompiledModel, ModelBase, aligned_empty, read_manifest
from .runner import FirmwareModel, HarnessModel

__all__ = ["CompiledModel", "FirmwareModel", "HarnessModel", "ModelBase", "aligned_empty", "load",
           "save_arrays"]


def load(folder: str | Path, *, run: list[str] | None = None, threads: int = 1) -> ModelBase:
    """A host model in this process; a cross-target model (its manifest names a harness and
    a run command) through that command, or through `run` if given (single-threaded)."""
    manifest = read_manifest(Path(folder))
    if run is not None or manifest.get("harness"):
        if threads != 1:
            raise InputError("threads applies to models loaded into this process; the test "
                             "harness of a cross target runs single-threaded")
        if manifest.get("output") == "firmware":
            return FirmwareModel(folder, run=run)
        return HarnessModel(folder, run=run)
    return CompiledModel(folder, threads=threads)
