# The two commands of the README: `make run` and `make test`. Both install what is missing
# (scripts/install-deps.sh, Debian packages only), then build with CMake + Ninja.
BUILD      ?= build
ASAN_BUILD ?= build-asan
BUILD_TYPE ?= Release
CONFIG     ?= samples/fashion_mnist/mlp.toml
# The run directory of CONFIG: its trainer.output_dir (override with RUN_DIR=...).
RUN_DIR    ?= $(or $(shell sed -n 's/^output_dir *= *"\(.*\)".*/\1/p' $(CONFIG) 2>/dev/null | head -n 1),runs/default)
WICK       := $(BUILD)/bin/wick

.PHONY: all deps configure build run test test-sanitize bench bench-smoke format clean install

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD)

# Train CONFIG (the Fashion-MNIST MLP by default) and draw its curves; the last lines are
# the run's summary (accuracy, time, samples/s) and where its files are.
run: build
	$(WICK) describe $(CONFIG)
	$(WICK) fit $(CONFIG)
	@echo
	$(WICK) plot $(RUN_DIR)
	@echo "Run directory: $(RUN_DIR) (summary.json, metrics.jsonl, metrics.csv); curves: $(RUN_DIR)/curves.png"

test: build
	cd $(BUILD) && ctest --output-on-failure -j2 --timeout 600
	$(MAKE) test-sanitize

# The plugin loader and trainer core under AddressSanitizer and UBSan, with the
# purpose-built bad libraries (a separate, smaller build).
test-sanitize: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWICK_SANITIZE=ON \
	  -DWICK_BUILD_BENCH=OFF -DWICK_SANITIZE_SUBSET=ON
	cmake --build $(ASAN_BUILD)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0 \
	  ctest --output-on-failure -L sanitize --timeout 600

# The command, libwick, headers, built-in plugins and the CMake package (sdk/README.md).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	$(BUILD)/bin/wick_bench --out bench/results.json

bench-smoke: build
	$(BUILD)/bin/wick_bench --smoke --out $(BUILD)/bench-smoke.json

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
