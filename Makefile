# mlcc: the two commands a new machine needs are `make demo` and `make test`.
# Each installs what it needs itself (a virtual environment in .venv with the Python packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Test processes (pytest-xdist), one per CPU up to 4; a test file stays in one process, so its
# module fixtures (kernel builds, compiled models) are built once. TEST_JOBS=0: no workers.
# --durations: the slowest tests in every log, to keep CI within its time budget.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
PARALLEL := -n $(TEST_JOBS) --dist loadfile -rs --durations=30

# Debian packages for the arm targets (cross compiler, its C library, qemu-aarch64), the wasm
# target (emcc, node; wabt's wasm-objdump to check the SIMD128 code; chromium for the web-digits
# page test) and the cortex-m targets (bare-metal compiler, newlib, qemu-system-arm). `make
# test` installs the missing ones (as root, or through sudo); without them the tests that need
# them are skipped.
ARM_PACKAGES := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
WASM_PACKAGES := emscripten nodejs wabt chromium
CORTEXM_PACKAGES := gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
TARGET_PACKAGES := $(ARM_PACKAGES) $(WASM_PACKAGES) $(CORTEXM_PACKAGES)
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo)

.PHONY: setup demo test test-fast test-targets target-tools bench bench-ocr bench-wasm icount-arm \
	web-digits streaming ocr-example conformance fuzz fuzz-runtime sanitize-models sanitize-kernels \
	safety-tools clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py mlcc/runtime/_fastcall.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test,ml]'
	@command -v gcc >/dev/null || { echo "gcc is needed: apt-get install gcc"; exit 1; }
	touch $@

# Compile the example digits CNN, run it from Python and from C, compare with onnxruntime.
demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The whole test suite, real models included (downloaded once into ~/.cache/mlcc-models).
test: $(STAMP) target-tools safety-tools
	$(BIN)/python -m pytest -q $(PARALLEL) $(PYTEST_ARGS) tests

# Every model of tests/test_models.py compiled for arm and verified under qemu-aarch64, then
# for wasm and verified in node (slow: the CI runs subsets in tests/test_targets_arm.py and
# tests/test_targets_wasm.py as part of `make test`).
test-targets: $(STAMP) target-tools
	MLCC_TEST_TARGET=arm $(BIN)/python -m pytest -q -n $(TEST_JOBS) $(PYTEST_ARGS) tests/test_models.py
	MLCC_TEST_TARGET=wasm $(BIN)/python -m pytest -q -n $(TEST_JOBS) $(PYTEST_ARGS) tests/test_models.py

# Installs the Debian packages of TARGET_PACKAGES that are missing (apt-get update first), and
# says which. Not an error where it cannot: on other systems, or without root or sudo.
target-tools:
	@missing=""; for p in $(TARGET_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || \
	    missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then \
	  echo "not a Debian system: install$$missing yourself for the target tests"; \
	  exit 0; fi; \
	if [ "$$(id -u)" != 0 ] && [ -z "$(SUDO)" ]; then \
	  echo "run as root (or install sudo) to install$$missing; the tests that need them" \
	    "will be skipped"; exit 0; fi; \
	echo "installing Debian packages for the arm, wasm and cortex-m targets:$$missing"; \
	$(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q --no-install-recommends $$missing || \
	  echo "could not install$$missing; the tests that need them will be skipped"

# The web-digits page (examples/web-digits): the digits CNN compiled for wasm, in build/web-digits.
web-digits: $(STAMP)
	$(BIN)/python examples/web-digits/build.py build/web-digits
	@echo "serve it: $(BIN)/python -m http.server -d build/web-digits -b 127.0.0.1 8000"

# The streaming example (examples/streaming): a VAD (LSTM inside an If) and a GRU keyword
# spotter run chunk by chunk from Python and C, the state carried, against onnxruntime.
streaming: $(STAMP)
	$(BIN)/python examples/streaming/stream.py --out build/streaming --time

# The OCR example (examples/ocr): PP-OCR det finds the lines of a rendered page, PP-OCR rec
# compiled once for widths 32..1280 reads each at its own width, against onnxruntime.
# OCR_ARGS: e.g. --lines 12 --size 800x640 --page scan.png (--help). Pillow: the [bench] extra.
OCR_ARGS ?=
ocr-example: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python examples/ocr/ocr.py --out build/ocr $(OCR_ARGS)

# Everything but the large real models.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow" $(PYTEST_ARGS) tests

# mlcc against onnxruntime on the benchmark models (issue 3), one Markdown table; not a test.
# BENCH_ARGS: e.g. --threads 2, or model names (python bench/bench_models.py --list).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python bench/bench_models.py $(BENCH_ARGS)

# The ONNX backend node tests through mlcc (x86): a table per operator, passed / bound /
# refused / failed; fails if any test gives a wrong answer or crashes. CONFORMANCE_ARGS: e.g.
# --ops model (the operator types of the real models), --filter resize, --verbose.
CONFORMANCE_ARGS ?=
conformance: $(STAMP)
	$(BIN)/python tools/conformance.py $(CONFORMANCE_ARGS)

# Fuzzing of the compiler's input (ONNX and target files; tools/fuzz_compiler.py): the corpus,
# the structured cases, then FUZZ_SECONDS of random mutations per seed. New failures are saved
# into tests/corpus. `make test` runs a 40-second version (tests/test_fuzz.py).
FUZZ_SECONDS ?= 300
fuzz: $(STAMP)
	for seed in 1 2; do \
	  $(BIN)/python tools/fuzz_compiler.py --seconds $(FUZZ_SECONDS) --seed $$seed \
	    --save-failures || exit 1; \
	done

# libFuzzer on the runtime's weight-blob loader (tools/fuzz_runtime.py; make test runs 20 s).
FUZZ_RUNTIME_SECONDS ?= 300
fuzz-runtime: $(STAMP) safety-tools
	$(BIN)/python tools/fuzz_runtime.py --seconds $(FUZZ_RUNTIME_SECONDS)

# Every model (real ones included) under ASan+UBSan, valgrind memcheck and a counting malloc
# (tools/sanitize_models.py; make test runs a few). SANITIZE_ARGS: e.g. --mode asan yolov8n.
SANITIZE_ARGS ?=
sanitize-models: $(STAMP) safety-tools
	$(BIN)/python tools/sanitize_models.py $(SANITIZE_ARGS)

# The kernel tests (test_kernels, test_kernels_threads, test_quant_kernels) with their kernels
# built under ASan and UBSan (MLCC_TEST_KERNEL_CFLAGS, tests/util.py): out-of-bounds scratch or
# buffer use that a passing comparison can hide. About 1-2 minutes here; not part of `make test`.
sanitize-kernels: $(STAMP)
	MLCC_TEST_KERNEL_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -g" \
	  LD_PRELOAD=$$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
	  $(BIN)/python -m pytest -q -s -p no:faulthandler $(PYTEST_ARGS) tests/test_kernels.py \
	  tests/test_kernels_threads.py tests/test_quant_kernels.py

# clang with libFuzzer (libclang-rt-dev) and valgrind, for the runtime safety tests: installed
# with apt-get when missing (as root or through sudo), else those tests skip.
safety-tools:
	@missing=""; \
	command -v valgrind >/dev/null || missing="$$missing valgrind"; \
	echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }' | \
	  clang -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null || \
	  missing="$$missing clang libclang-rt-dev"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null || { [ "$$(id -u)" != 0 ] && [ -z "$(SUDO)" ]; }; then \
	  echo "install$$missing for the runtime safety tests (they skip without them)"; exit 0; fi; \
	echo "installing Debian packages for the runtime safety tests:$$missing"; \
	$(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q --no-install-recommends $$missing || \
	  echo "could not install$$missing; the runtime safety tests will skip"

# Instructions per inference of the arm (NEON) build against the arm-portable build, counted
# under qemu-aarch64 by the TCG plugin of runtime_c/qemu-icount; one Markdown table, not a test.
# ICOUNT_ARGS: model names (python bench/icount_arm.py --list), --output FILE.
ICOUNT_ARGS ?=
icount-arm: $(STAMP) target-tools
	$(BIN)/python bench/icount_arm.py $(ICOUNT_ARGS)

# PP-OCR rec int8 against float on rendered text lines (exact match, issue 5), one Markdown
# table; not a test. Pillow (the [bench] extra) renders the lines with the DejaVu fonts.
# BENCH_OCR_ARGS: e.g. --lines 300 --variants mlcc-float,mlcc-percentile (--help).
BENCH_OCR_ARGS ?=
bench-ocr: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@test -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf || \
		{ $(SUDO) apt-get update && $(SUDO) apt-get install -y fonts-dejavu-core; }
	$(BIN)/python bench/eval_ocr_int8.py $(BENCH_OCR_ARGS)

# mlcc's wasm build against onnxruntime-web (npm, into ~/.cache/mlcc-npm) in node, one
# Markdown table; not a test. BENCH_WASM_ARGS: e.g. model names (--list).
BENCH_WASM_ARGS ?=
bench-wasm: $(STAMP) target-tools
	$(BIN)/python bench/bench_wasm.py $(BENCH_WASM_ARGS)

clean:
	rm -rf build .pytest_cache
