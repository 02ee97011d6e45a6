"""Compile-time binding of graph inputs (--bind NAME=V1,V2,... or NAME=FILE.npy).

A bound input stops being an input of the compiled model: it becomes a constant, as if the
model held it as an initializer, so that everything computed from it folds at compile time
(a Reshape's shape, an If's condition, a sample rate). Values are checked against the input's
declared type and shape here, before anything is written.
"""
from __future__ import annotations

import hashlib
import math
import ml_dtypes
import numpy as np

from ..errors import InputError
from ..ir import Graph

# A bound value with at most this many elements is written into manifest.json; a larger one
# by its sha256 (of the little-endian bytes in C order).
MANIFEST_VALUES = 64


def parse_bind_option(text: str) -> tuple[str, object]:
    """'sr=16000' -> ('sr', [16000]); 'x=1,2.5' -> ('x', [1, 2.5]); 'w=w.npy' -> ('w', the
    array in w.npy). Text values stay Python numbers until bind_inputs converts them to the
    input's type."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise InputError(f"--bind {text!r}: expected NAME=V1,V2,... or NAME=FILE.npy "
                         f"(e.g. sr=16000)")
    rest = rest.strip()
    if rest.lower().endswith(".npy"):
        try:
            return name, np.load(rest, allow_pickle=False)
        except Exception as exc:    # numpy raises several types for a bad file
            raise InputError(f"--bind {name}: cannot read {rest} ({exc})") from None
    values: list = []
    for token in (t.strip() for t in rest.split(",")) if rest else ():
        values.append(_number(name, token))
    return name, values


def _number(name: str, token: str):
    low = token.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        raise InputError(f"--bind {name}: {token!r} is not a number") from None


def bind_inputs(g: Graph, bind: dict[str, object] | None,
                shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """Makes every input named in `bind` a constant holding its value (an ndarray of the
    input's exact type, or Python numbers converted to it without loss of kind); the value is
    reshaped to the input's declared shape (--shape, if given, overrides it). Returns a copy."""
    if not bind:
        return g
    unknown = [n for n in bind if n not in g.inputs]
    if unknown:
        name = unknown[0]
        what = ("is an initializer (already a constant)" if g.const(name) is not None
                else "is not an input of the model")
        raise InputError(f"--bind {name}: {name!r} {what}; the model's inputs are: "
                         f"{', '.join(g.inputs) or '(none)'}")
    g = g.copy()
    for name, value in bind.items():
        v = g.values[name]
        shape = (shapes or {}).get(name, v.shape)
        arr = _coerce(name, value, v.dtype)
        arr = _reshape(name, arr, shape)
        v.dtype, v.shape, v.const = arr.dtype.name, tuple(int(d) for d in arr.shape), arr
    g.inputs = [n for n in g.inputs if n not in bind]
    return g


def _coerce(name: str, value, dtype: str) -> np.ndarray:
    want = np.dtype(dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype != want:
            raise InputError(f"--bind {name}: the value is {arr.dtype.name}, but input "
                             f"{name!r} is {want.name}")
        return np.array(arr, order="C")   # (np.ascontiguousarray makes a scalar 1-D)
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise InputError(f"--bind {name}: not an array of numbers ({exc})") from None
    kind = arr.dtype.kind
    if arr.size == 0:            # [] or "x=": no values, of whichever type the input has
        return np.zeros(arr.shape, want)
    if kind not in "biuf":
        raise InputError(f"--bind {name}: the value ({arr.dtype.name}) is not numbers")
    if want.kind == "b":
        if kind == "f" or not np.isin(arr, (0, 1)).all():
            raise InputError(f"--bind {name}: input {name!r} is bool; give 0/1 or "
                             f"true/false")
        return arr.astype(want)
    # int4, uint4, int2, uint2 (ml_dtypes) are kind "V", as are its float types
    integer = want.kind in "iu" or (want.kind == "V" and want.name.lstrip("u").startswith("int"))
    if integer:
        if kind == "f":
            raise InputError(f"--bind {name}: input {name!r} is {want.name}; "
                             f"{arr.reshape(-1)[0]} is not an integer")
        info = ml_dtypes.iinfo(want) if want.kind == "V" else np.iinfo(want)
        ints = arr.astype(object)
        out_of_range = [x for x in ints.reshape(-1) if not info.min <= int(x) <= info.max]
        if out_of_range:
            raise InputError(f"--bind {name}: {out_of_range[0]} is out of the range of "
                             f"{want.name} (input {name!r})")
        return arr.astype(want)
    if want.kind == "f" or want.kind == "V":     # float16/32/64, bfloat16, float8 (ml_dtypes)
        return arr.astype(np.float64).astype(want)
    raise InputError(f"--bind {name}: input {name!r} has type {want.name}, which --bind "
                     f"cannot give as text (save the value as a .npy file)")


def _reshape(name: str, arr: np.ndarray, shape) -> np.ndarray:
    """The value in the input's shape: a flat list (or a scalar) is reshaped if its count is
    right, with one dynamic dimension taken from the count (as -1 in a reshape); an array of
    the input's rank must match its static dimensions."""
    if shape is None:
        return arr
    dims = list(shape)
    unknown = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    label = "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in dims) + "]"
    if arr.ndim == len(dims) and all(not isinstance(d, int) or d == s
                                     for d, s in zip(dims, arr.shape)):
        return arr
    if arr.ndim > 1:
        raise InputError(f"--bind {name}: the value has shape {list(arr.shape)}, but input "
                         f"{name!r} has shape {label}")
    if len(unknown) > 1:
        raise InputError(f"--bind {name}: input {name!r} has shape {label} with several "
                         f"dynamic dimensions; give the value as a .npy file of the full "
                         f"shape, or fix the dimensions with --shape {name}=D1,D2,...")
    known = math.prod(d for d in dims if isinstance(d, int))
    if unknown and known and arr.size % known == 0:
        dims[unknown[0]] = arr.size // known
    elif unknown or arr.size != known:
        raise InputError(f"--bind {name}: {arr.size} value{'s' if arr.size != 1 else ''} "
                         f"given, but input {name!r} has shape {label}"
                         + ("" if unknown else f" ({known} values)"))
    return np.array(arr.reshape(dims), order="C")


def bound_record(g: Graph, names) -> list[dict]:
    """What manifest.json says about the bound inputs: name, dtype, shape, and the values (up
    to MANIFEST_VALUES elements) or the sha256 of their bytes."""
    rows = []
    for name in names:
        v = g.values[name]
        arr = np.ascontiguousarray(v.const)
        row = {"name": name, "dtype": v.dtype, "shape": list(v.shape)}
        if arr.size <= MANIFEST_VALUES and arr.dtype.kind in "biuf":
            row["values"] = [x.item() if not isinstance(x.item(), float) or math.isfinite(
                x.item()) else repr(x.item()) for x in arr.reshape(-1)]
        else:
            row["sha256"] = hashlib.sha256(arr.astype(arr.dtype.newbyteorder("<"))
                                           .tobytes()).hexdigest()
        rows.append(row)
    return rows
