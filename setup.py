"""The optional C helper mlcc.runtime._fastcall (everything else is in pyproject.toml).

optional=True: where there is no C compiler or no Python headers, the install warns and goes
on without it, and mlcc.load calls the library through cffi's ABI mode (mlcc/runtime/loader.py).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("mlcc.runtime._fastcall", ["mlcc/runtime/_fastcall.c"],
                             optional=True)])
