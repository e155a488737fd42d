# The two commands of the README: `make run` and `make test`. Both install what is missing
# (scripts/install-deps.sh: Debian's packages, and LibTorch 2.x from PyPI's torch wheel), then
# build with CMake + Ninja.
#
# Two LibTorch builds: LIBTORCH=wheel (PyPI's torch==2.11.0, CUDA 13.0, in .deps/) and
# LIBTORCH=debian (Debian's libtorch-dev 1.13, CPU). The default, chosen by measurement
# (README: Choosing a LibTorch), is built into build/; make test also builds and tests the
# other one in build-OTHER/.
LIBTORCH   ?= wheel
OTHER      := $(if $(filter wheel,$(LIBTORCH)),debian,wheel)
BUILD      ?= build
OTHER_BUILD ?= build-$(OTHER)
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
BUILD_TYPE ?= Release
CONFIG     ?= samples/fashion_mnist/mlp.toml
# The run directory of CONFIG: its trainer.output_dir (override with RUN_DIR=...).
RUN_DIR    ?= $(or $(shell sed -n 's/^output_dir *= *"\(.*\)".*/\1/p' $(CONFIG) 2>/dev/null | head -n 1),runs/default)
WICK       := $(BUILD)/bin/wick
# -DWICK_TORCH=... for a LibTorch build (none for Debian's: CMake finds it in /usr).
torch_flag = $(if $(filter wheel,$(1)),-DWICK_TORCH=$(shell scripts/install-libtorch.sh --print),)

.PHONY: all deps configure build build-other run test test-other test-sanitize fuzz-build fuzz \
        test-fuzz bench bench-peers bench-smoke gpu-check format clean install

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(call torch_flag,$(LIBTORCH))

# The benchmarks (make bench, and their smoke test) run on the default build only: building
# them twice would cost make test ~2.5 minutes for no new check.
# The other build checks that wick builds and passes against that LibTorch, not its speed, and
# with the other compiler: clang (Debian's clang 14; the default build is GCC's), at -O1
# (with Release's NDEBUG); a torch source compiles in about half GCC's time. It also compiles
# each SDK header alone (WICK_HEADER_ALONE: a property of the headers, not of the LibTorch,
# checked once), and leaves the out-of-tree build of the built-in plugin folders to the default
# build (WICK_TEST_PLUGIN_FOLDERS, likewise). Its ctest, and the sanitizer tree's, run each test
# program's cases in forks of it (WICK_TEST_EACH_FORKED: LibTorch's start paid once a program).
$(OTHER_BUILD)/build.ninja:
	cmake -S . -B $(OTHER_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
	  -DWICK_BUILD_BENCH=OFF -DWICK_HEADER_ALONE=ON -DWICK_TEST_PLUGIN_FOLDERS=OFF \
	  -DWICK_TEST_EACH_FORKED=ON $(call torch_flag,$(OTHER))

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD)

# The same tree against the other LibTorch.
build-other: deps $(OTHER_BUILD)/build.ninja
	cmake --build $(OTHER_BUILD)

# Train CONFIG (the Fashion-MNIST MLP by default) and draw its curves; the last lines are
# the run's summary (accuracy, time, samples/s) and where its files are.
run: build
	$(WICK) describe $(CONFIG)
	$(WICK) fit $(CONFIG)
	@echo
	$(WICK) plot $(RUN_DIR)
	@echo "Run directory: $(RUN_DIR) (summary.json, metrics.jsonl, metrics.csv); curves: $(RUN_DIR)/curves.png"

# The include check first: a second, and it names what another compiler would refuse.
test: build
	python3 scripts/check-includes.py
	cd $(BUILD) && ctest --output-on-failure -j2 --timeout 600
	$(MAKE) test-other
	$(MAKE) test-sanitize
	$(MAKE) test-fuzz

# Every test again, against the other LibTorch. Where that is Debian's, the sanitize-labelled
# ones are left to test-sanitize, which runs them against the same LibTorch (built with the
# sanitizers) in make test.
OTHER_CTEST_ARGS := $(if $(filter debian,$(OTHER)),-LE sanitize,)
test-other: build-other
	cd $(OTHER_BUILD) && ctest --output-on-failure -j2 --timeout 600 $(OTHER_CTEST_ARGS)

# The plugin loader and trainer core under AddressSanitizer and UBSan, with the
# purpose-built bad libraries (a separate, smaller build, with clang: its precompiled header
# holds the instantiations of LibTorch's templates, which GCC redoes in every source, so a
# torch source compiles in about half GCC's time). No sanitizer check is switched off: leak
# and ODR checks pass with LibTorch as it is (uninstrumented).
test-sanitize: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWICK_SANITIZE=ON \
	  -DCMAKE_CXX_COMPILER=clang++ -DWICK_BUILD_BENCH=OFF -DWICK_SANITIZE_SUBSET=ON \
	  -DWICK_TEST_EACH_FORKED=ON
	cmake --build $(ASAN_BUILD)
	cd $(ASAN_BUILD) && UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -L sanitize -j2 --timeout 600

# The libFuzzer targets (fuzz/README.md): the config parser and schema, and the checkpoint
# manifest reader, under ASan and UBSan. A separate clang build of the few torch-free sources
# they need (about a minute). Crashes go to $(FUZZ_BUILD)/crashes/NAME/, what a run learns
# to $(FUZZ_BUILD)/corpus/NAME/ (the seeds in fuzz/corpus/ are only read).
FUZZ_SECONDS       ?= 300
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_TARGETS       ?= config manifest
fuzz-build: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWICK_FUZZ=ON \
	  -DCMAKE_CXX_COMPILER=clang++ -DWICK_FUZZ_SMOKE_SECONDS=$(FUZZ_SMOKE_SECONDS)
	cmake --build $(FUZZ_BUILD)

# The long run: FUZZ_SECONDS per target, one after the other.
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/bin/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -dict=fuzz/$$t.dict -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t/ \
	    $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t || exit 1; \
	done

# The bounded run of `make test`: FUZZ_SMOKE_SECONDS per target, both at once (ctest -L fuzz).
test-fuzz: fuzz-build
	cd $(FUZZ_BUILD) && ctest --output-on-failure -j2 -L fuzz --timeout 300

# The command, libwick, headers, built-in plugins and the CMake package (sdk/README.md).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	$(BUILD)/bin/wick_bench --out bench/results.json

# The peers section alone (bench/README.md), wick built against LibTorch 2.x (the wheel, the
# peers' torch release): installs the Python peers' environment first (once); the other
# sections of bench/results.json stay as the last full run measured them.
WHEEL_BUILD := $(if $(filter wheel,$(LIBTORCH)),$(BUILD),$(OTHER_BUILD))
bench-peers: $(if $(filter wheel,$(LIBTORCH)),build,build-other)
	scripts/install-peers.sh
	$(WHEEL_BUILD)/bin/wick_bench --only peers --out bench/results.json

bench-smoke: build
	$(BUILD)/bin/wick_bench --smoke --out $(BUILD)/bench-smoke.json

# On a machine with an NVIDIA GPU: build against its python3's CUDA torch, run every test and
# the GPU bench (scripts/gpu-check.sh); without a GPU it builds and says what it would run.
gpu-check:
	scripts/gpu-check.sh

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD) $(OTHER_BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
