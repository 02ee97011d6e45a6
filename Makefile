# mlcc: the two commands a new machine needs are `make demo` and `make test`.
# Each installs what it needs itself (a virtual environment in .venv with the Python packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@command -v gcc >/dev/null || { echo "gcc is needed: apt-get install gcc"; exit 1; }
	touch $@

# Compile the example digits CNN, run it from Python and from C, compare with onnxruntime.
demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The whole test suite, real models included (downloaded once into ~/.cache/mlcc-models).
test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS) tests

# Everything but the large real models.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS) tests

# mlcc against onnxruntime on the benchmark models (issue 3), one Markdown table; not a test.
# BENCH_ARGS: e.g. --threads 2, or model names (python tests/bench_models.py --list).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python tests/bench_models.py $(BENCH_ARGS)

clean:
	rm -rf build .pytest_cache
