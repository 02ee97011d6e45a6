"""Calibration data readers: an .npz file, a folder of .npy/.npz files, or a Python file.

Every reader yields one sample at a time (a dict input name -> array with the model's shape,
batch included), so that calibration memory does not grow with the number of samples. The set
is re-iterable (calibrators with a histogram make two passes). Wrong names, shapes or dtypes,
an empty set and NaN/Inf values are InputErrors naming the file, the sample and the input.
A model of a range of sizes (--shape x=1,3,48,32..1280) takes samples of any size in it, each
dimension of a range in its range and the same wherever it appears: a folder of one .npz (or
.npy) per sample, or a Python file, holds samples of different sizes (an .npz of stacked
samples, one size).
"""
from __future__ import annotations

import importlib.util
import math
import zipfile
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import InputError
from ..ir.symbolic import SymInt, is_one, is_symbolic

# input name -> (dtype, shape): ints, and SymInts where --shape gives a range
Spec = dict[str, tuple[str, tuple]]


def _mismatch(have: tuple[int, ...], want: tuple, sizes: dict, name: str) -> str | None:
    """None when an array of shape `have` is one sample of input `name` of shape `want`, else
    what is wrong ("" when the shapes simply differ). A dimension of a range (--shape
    x=1,3,48,32..1280: a SymInt of one dynamic dimension) takes any size in its range, a
    multiple of its step, the same wherever that dimension appears in the sample (`sizes`
    keeps it across the inputs): calibration samples may differ in size."""
    if len(have) != len(want):
        return ""
    for axis, (h, w) in enumerate(zip(have, want)):
        if not isinstance(w, SymInt):
            if h != w:
                return ""
            continue
        v = w.dims[0]
        if not v.lo <= h <= v.hi or h % v.step:
            span = f"{v.lo}..{v.hi}" + (f" (multiples of {v.step})" if v.step > 1 else "")
            return f": dimension {v.name!r} is {h}, outside the range {span} of --shape"
        seen, where = sizes.setdefault(v.name, (h, f"{name}[{axis}]"))
        if seen != h:
            return f": dimension {v.name!r} is {h} here but {seen} in {where}"
    return None


class _NpyStream:
    """One array of an .npz, read one sample (first-axis slice) at a time and in order, from
    the zip member's stream: memory holds one sample whatever the file's size, compressed
    (np.savez_compressed) or not. A Fortran-ordered array has no contiguous samples and is
    read whole when first indexed."""

    def __init__(self, zf: zipfile.ZipFile, member: str, path: Path):
        self._where = f"{path}: array {member!r}"
        self._zf, self._member = zf, member
        self._f = zf.open(member)
        fmt = np.lib.format
        version = fmt.read_magic(self._f)
        read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(
            version, lambda f: fmt._read_array_header(f, version))  # 3.0: utf-8 field names
        self.shape, self._fortran, self.dtype = read(self._f)
        if self.dtype.hasobject:
            raise InputError(f"{self._where} holds Python objects; calibration data must be "
                             f"numeric arrays")
        self.ndim = len(self.shape)
        self._sample_bytes = math.prod(self.shape[1:]) * self.dtype.itemsize
        self._next, self._whole = 0, None

    def __getitem__(self, i: int) -> np.ndarray:
        try:
            return self._read(i)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged member (bad CRC, bad deflate data)
            raise InputError(f"{self._where}: cannot read sample {i} ({exc})") from None

    def _read(self, i: int) -> np.ndarray:
        if self._fortran and self.ndim > 1:
            if self._whole is None:
                self._whole = np.lib.format.read_array(self._zf.open(self._member),
                                                       allow_pickle=False)
            return self._whole[i]
        if i != self._next:
            raise AssertionError("samples are read in order")
        self._next += 1
        data = self._f.read(self._sample_bytes)
        if len(data) != self._sample_bytes:
            raise InputError(f"{self._where} is truncated at sample {i}")
        return np.frombuffer(data, self.dtype).reshape(self.shape[1:])


def user_module(path: Path, where: str):
    """Runs a user's Python file (calibration data, a --metric) as a module; a file that
    cannot load or fails to run is an InputError starting with `where`."""
    spec = importlib.util.spec_from_file_location(f"mlcc_user_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise InputError(f"{where}: cannot load as a Python module")
    module = importlib.util.module_from_spec(spec)
    # SystemExit too: a user file that calls sys.exit() must not end mlcc (with status 0 and
    # no output, or any status without a message).
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code failed
        raise InputError(f"{where}: failed to run ({type(exc).__name__}: {exc})") from None
    return module


class CalibrationSet:
    """A re-iterable source of input dicts, checked against the model's inputs."""

    def __init__(self, source: str | Path, spec: Spec, limit: int | None = None):
        self.source = str(source)
        self.spec = spec
        self.limit = limit
        path = Path(source)
        if not path.exists():
            raise InputError(f"calibration data {source} does not exist")
        if path.is_dir():
            self._open: Callable[[], Iterator] = lambda: self._folder(path)
        elif path.suffix == ".npz":
            self._open = lambda: self._npz(path)
        elif path.suffix == ".py":
            self._open = lambda: self._python(path)
        else:
            raise InputError(f"calibration data {source}: expected an .npz file, a folder of "
                             f".npy/.npz files or a .py file defining a generator of input "
                             f"dicts")
        self.count = None                        # known after one full pass

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        n = 0
        for where, sample in self._open():
            if self.limit is not None and n >= self.limit:
                break
            yield self._check(where, sample)
            n += 1
        if n == 0:
            raise InputError(f"calibration data {self.source} is empty: it has no samples")
        self.count = n

    def known_count(self) -> int | None:
        """The number of samples, where it is known without reading them: after one full
        pass, or from the header of an .npz's first array (a folder or a Python file: None
        until then). For progress bars only: the samples themselves are checked as read."""
        if self.count is not None or Path(self.source).suffix != ".npz" or not self.spec:
            return self.count
        try:
            with zipfile.ZipFile(self.source) as zf:
                first = _NpyStream(zf, next(iter(self.spec)) + ".npy", Path(self.source))
                n = int(first.shape[0]) if first.ndim else None
        except Exception:  # noqa: BLE001 - unreadable here: the first pass reports it
            return None
        return n if n is None or self.limit is None else min(n, self.limit)

    def check_first(self) -> None:
        """Reads and checks the first sample (an empty set is an error): bad data is reported
        before any expensive work."""
        for _ in self:
            return

    # ------------------------------------------------------------------ checks
    def _check(self, where: str, sample) -> dict[str, np.ndarray]:
        if not isinstance(sample, dict):
            raise InputError(f"{where}: a calibration sample must be a dict of input name -> "
                             f"array, got {type(sample).__name__}")
        names = list(self.spec)
        missing = [n for n in names if n not in sample]
        extra = sorted(set(sample) - set(names))
        if missing or extra:
            parts = ([f"missing input(s) {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"unknown name(s) {', '.join(map(repr, extra))}"] if extra else [])
            raise InputError(f"{where}: {'; '.join(parts)} (the model takes "
                             f"{', '.join(names)})")
        out = {}
        sizes: dict[str, tuple[int, str]] = {}     # dynamic dimension -> (size, where)
        for name, (dtype, shape) in self.spec.items():
            try:
                arr = np.asarray(sample[name])
            except Exception as exc:  # noqa: BLE001 - ragged lists and the like are the user's
                raise InputError(f"{where}: input {name!r} is not an array ({exc})") from None
            want = np.dtype(dtype)
            if arr.dtype.kind != want.kind or (want.kind == "f" and arr.dtype.itemsize > 8):
                raise InputError(f"{where}: input {name!r} must be {want.name}, got "
                                 f"{arr.dtype.name}")
            have = tuple(arr.shape)
            # A sample may leave out the batch axis of size 1.
            if len(have) + 1 == len(shape) and is_one(shape[0]):
                have = (1,) + have
            why = _mismatch(have, shape, sizes, name)
            if why is not None:
                raise InputError(f"{where}: input {name!r} must have shape {list(shape)} "
                                 f"(one sample), got {list(arr.shape)}{why}")
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
                raise InputError(f"{where}: input {name!r} has {bad} NaN or Inf value(s)")
            # (np.ascontiguousarray makes a scalar 1-D: a Loop's trip count stays a scalar)
            out[name] = np.ascontiguousarray(arr, dtype=want).reshape(have)
        return out

    # ------------------------------------------------------------------ readers
    def _sample_axis(self, path: str, arrays: dict[str, np.ndarray]) -> Iterator:
        """Arrays whose first axis counts samples (an .npz of the calibration set)."""
        counts = {}
        for name, arr in arrays.items():
            if name not in self.spec:
                continue
            shape = self.spec[name][1]
            if arr.ndim == len(shape) and shape and is_one(shape[0]):
                counts[name] = arr.shape[0]          # [samples, ...] with the batch axis
            elif arr.ndim == len(shape) + 1:
                counts[name] = arr.shape[0]          # [samples, 1, ...]
            else:
                raise InputError(f"{path}: array {name!r} has shape {list(arr.shape)}; expected "
                                 f"[samples, {', '.join(map(str, shape[1:] if shape and is_one(shape[0]) else shape))}]"
                                 f" (first axis = samples)")
        if len(set(counts.values())) > 1:
            raise InputError(f"{path}: arrays have different sample counts "
                             f"({', '.join(f'{k}: {v}' for k, v in counts.items())})")
        n = next(iter(counts.values()), 0)
        for i in range(n):
            sample = {k: (arrays[k][i] if k in counts else arrays[k]) for k in arrays}
            for k, shape in ((k, self.spec[k][1]) for k in counts):
                if not is_symbolic(shape) and sample[k].size == math.prod(shape):
                    sample[k] = sample[k].reshape(shape)
            yield f"{path} sample {i}", sample

    def _npz(self, path: Path) -> Iterator:
        try:
            zf = zipfile.ZipFile(path)
            arrays = {m[:-4] if m.endswith(".npy") else m: _NpyStream(zf, m, path)
                      for m in zf.namelist()}
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's
            raise InputError(f"{path}: cannot read calibration data ({exc})") from None
        with zf:
            missing = [n for n in self.spec if n not in arrays]
            if missing:
                raise InputError(f"{path}: has no array for input(s) "
                                 f"{', '.join(map(repr, missing))} (it has "
                                 f"{', '.join(map(repr, arrays)) or 'none'}; the model takes "
                                 f"{', '.join(self.spec)})")
            yield from self._sample_axis(str(path), arrays)

    def _folder(self, folder: Path) -> Iterator:
        files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
        if not files:
            raise InputError(f"calibration folder {folder} has no .npy or .npz files")
        for p in files:
            try:
                if p.suffix == ".npy":
                    if len(self.spec) != 1:
                        raise InputError(f"{p}: an .npy file holds one array, but the model has "
                                         f"{len(self.spec)} inputs: use .npz files")
                    arr = np.load(p, allow_pickle=False)
                    sample = {next(iter(self.spec)): arr}
                else:
                    with np.load(p, allow_pickle=False) as data:
                        sample = {k: data[k] for k in data.files}
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise InputError(f"{p}: cannot read calibration data ({exc})") from None
            name0, (_, shape0) = next(iter(self.spec.items()))
            first = sample.get(name0)
            if first is not None and first.ndim == len(shape0) and shape0 and is_one(shape0[0]) \
                    and first.shape[0] > 1:
                yield from self._sample_axis(str(p), sample)    # a file with several samples
            else:
                yield str(p), sample

    def _python(self, path: Path) -> Iterator:
        module = user_module(path, str(path))
        fn = getattr(module, "calibration_data", None) or getattr(module, "samples", None)
        if not callable(fn):
            raise InputError(f"{path}: define a function calibration_data() that yields dicts "
                             f"of input name -> array")
        try:
            it = iter(fn())
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            raise InputError(f"{path}: calibration_data() failed ({type(exc).__name__}: "
                             f"{exc})") from None
        i = 0
        while True:
            try:
                sample = next(it)
            except StopIteration:
                return
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                raise InputError(f"{path}: calibration_data() failed at sample {i} "
                                 f"({type(exc).__name__}: {exc})") from None
            yield f"{path} sample {i}", sample
            i += 1
