# Thin wrapper around CMake so that a fresh clone needs only `make` and `make test`.
#   make              configure, build, and run the class demo (every phase, CPU and GPU)
#   make test         build and run every test (GPU tests report "skipped" on a machine without a GPU)
#   make test-phase3  one phase's tests (also test-common, test-phase1..4, test-tools, test-docs, test-gpu)
#   make bench        the benchmark sweep (tools/), results in build/bench/
#   make plots        figures from build/bench/results.csv
#   make sanitize     the CPU tests again under AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build configure demo test bench plots sanitize clean

all: demo

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	cmake --build $(BUILD) --target demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-%: build
	cmake --build $(BUILD) --target $@

bench plots: build
	cmake --build $(BUILD) --target $@

sanitize:
	cmake -S . -B build-asan -DFA_SANITIZE=ON -DFA_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -LE "gpu|tools|docs"

clean:
	rm -rf $(BUILD) build-asan
