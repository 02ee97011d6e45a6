"""What pyproject.toml cannot say: the optional C helper mlcc.runtime._fastcall, and the copy of
the repository's runtime_c/, targets/ and runtime_js/ into the built package as mlcc/_data/
(mlcc/resources.py, which names them, reads them there).

optional=True: where there is no C compiler or no Python headers, the install warns and goes
on without it, and mlcc.load calls the library through cffi's ABI mode (mlcc/runtime/loader.py).
"""
import importlib.util
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _resources():
    """mlcc/resources.py on its own (importing mlcc would need its dependencies)."""
    spec = importlib.util.spec_from_file_location("_mlcc_resources", HERE / "mlcc" / "resources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithData(build_py):
    """build_py, then a fresh copy of each data folder under the built package. An editable
    install copies nothing: mlcc/resources.py reads the checkout's folders."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        res = _resources()
        dest = Path(self.build_lib) / res.PACKAGE / res.DATA
        shutil.rmtree(dest, ignore_errors=True)    # no files left over from an earlier build
        for name in res.FOLDERS:
            shutil.copytree(HERE / name, dest / name)


setup(ext_modules=[Extension("mlcc.runtime._fastcall", ["mlcc/runtime/_fastcall.c"],
                             optional=True)],
      cmdclass={"build_py": BuildPyWithData})
