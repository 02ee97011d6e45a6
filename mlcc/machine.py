"""What Linux says about this machine's CPU (/proc/cpuinfo): its model, for tuning caches and
benchmark tables, and its feature flags, for the targets' `native` level and the loader's
check that a library's instructions exist here. A leaf: no mlcc imports."""
from __future__ import annotations

import platform
from pathlib import Path


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def cpu_model() -> str:
    """The CPU's model name with family and model numbers (/proc/cpuinfo), else the platform's."""
    info = _cpuinfo()
    if not info:
        return platform.processor() or platform.machine()
    name = info.get("model name", platform.machine())
    if "cpu family" in info:
        name += f" (family {info['cpu family']}, model {info.get('model', '?')})"
    return name


def x86_cpu_flags() -> set[str] | None:
    """The feature flags of this x86-64 CPU (avx2, avx512f...), None on other machines or
    where Linux does not say."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    flags = _cpuinfo().get("flags")
    return set(flags.split()) if flags is not None else None


def missing_x86_features(needed) -> list[str]:
    """Those of `needed` (cpuinfo names) that this CPU lacks; [] where it cannot be told (not
    x86-64, or Linux does not say)."""
    have = x86_cpu_flags() if needed else None
    return [] if have is None else [f for f in needed if f not in have]
