"""The files mlcc needs at run time besides its Python code, found in one place.

They live at the top of the repository, where people read and edit them:

- runtime_c/: the C runtime, the kernels and the test harness copied into every model folder;
- targets/: the built-in target descriptions (NAME.yaml);
- runtime_js/: the JavaScript wrapper and node harness of the wasm target.

A wheel (or `pip install .`) carries a copy of each as mlcc/_data/NAME (setup.py's build_py
step copies them; MANIFEST.in puts them in the sdist), read here through importlib.resources.
An editable install or a checkout on sys.path has no mlcc/_data: its folders are the
repository's own, next to the mlcc package. Nothing else in mlcc computes where they are.

mlcc is always installed as files on disk (it has a C extension module, and pip unpacks
wheels), so each folder is a real directory: the C compiler reads kernels from it with -I.

This module imports nothing from mlcc: setup.py loads it on its own to learn what to copy.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGE = "mlcc"
DATA = "_data"                                   # mlcc/_data/NAME in an installed package
FOLDERS = ("runtime_c", "targets", "runtime_js")


def folder(name: str) -> Path:
    """The directory of one of FOLDERS: the installed copy, else the checkout's."""
    if name not in FOLDERS:
        raise KeyError(f"{name!r} is not one of mlcc's data folders {', '.join(FOLDERS)}")
    package = files(PACKAGE)
    if not isinstance(package, Path):
        raise RuntimeError(f"mlcc is imported from {package}, not from files on disk: "
                           "install it with pip")
    installed = package / DATA / name
    # resolve(): a strict editable install imports mlcc from a tree of links to the checkout
    checkout = (package / "__init__.py").resolve().parent.parent / name
    for where in (installed, checkout):
        if where.is_dir():
            return where
    raise RuntimeError(f"mlcc's {name}/ folder is missing: neither {installed} (an installed "
                       f"mlcc) nor {checkout} (a checkout) exists; reinstall mlcc")


def import_root() -> Path:
    """The folder that holds the mlcc package: put on a child process's PYTHONPATH, it imports
    this same mlcc (a checkout used without install as well as an installed one)."""
    return Path(str(files(PACKAGE))).resolve().parent


def runtime_c() -> Path:
    return folder("runtime_c")


def targets() -> Path:
    return folder("targets")


def runtime_js() -> Path:
    return folder("runtime_js")
