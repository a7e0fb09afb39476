# Thin wrapper around CMake so that a fresh clone needs only `make` and `make test`.
#   make              configure, build, and run the class demo (every phase, CPU and GPU)
#   make test         build and run every test (GPU tests report "skipped" on a machine without a GPU)
#   make test-phase3  one phase's tests, big ones left out (also test-common, test-phase1..6, test-hardening,
#                     test-tools, test-docs, test-lineage, test-gpu)
#   make test-big     the big tests make test leaves out (the 2^31-element runs and the largest shapes)
#   make bench        the benchmark sweep (tools/), results in build/bench/
#   make plots        figures from build/bench/results.csv
#   make sanitize     the CPU tests again under AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/)
#   make python       the PyTorch binding's library (build-python/, python/README.md); make test-python its tests
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build configure demo test bench plots sanitize python test-python clean help

all: demo

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	cmake --build $(BUILD) --target demo

# `make test` leaves out the tests labelled big (2^31- and 2^32-element runs, and the largest shapes of each phase):
# `make test-big` runs those, and CI runs both.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE big

test-%: build
	cmake --build $(BUILD) --target $@

bench plots: build
	cmake --build $(BUILD) --target $@

# The CPU tests under ASan + UBSan (docs/robustness.md). Left out: gpu (no CUDA in this build), tools and docs (no C
# code of theirs to check), hugemem (the 2^31-element runs need more memory than the machine has once ASan adds its
# shadow) and big (the largest shapes: the same code as the smaller shapes of every phase, which run here, but
# several times longer under ASan).
# detect_leaks: LeakSanitizer on (the default, said out loud); libgomp's threads report nothing, so no suppressions.
# allocator_may_return_null: an impossible request returns NULL, as glibc does, so the suite's own one-line
# refusal (exit 2) is what gets tested, not an ASan abort. UBSan aborts on the first finding
# (-fno-sanitize-recover=all) and prints where it came from.
SANITIZE_ENV = ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:abort_on_error=0 \
               UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

sanitize:
	cmake -S . -B build-asan -DFA_SANITIZE=ON -DFA_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS) -LE "gpu|tools|docs|hugemem|big"

# The PyTorch binding (python/README.md): its shared library in build-python/lib/, and its pytest suite, run by the
# Python that CMake finds (an activated virtual environment's, or -DFA_TORCH_PYTHON=... in CMAKE_FLAGS); skipped
# where that Python has no PyTorch.
python:
	cmake -S . -B build-python -DFA_PYTHON=ON $(CMAKE_FLAGS)
	cmake --build build-python --target flash_steps_c -j $(JOBS)

test-python: python
	cd build-python && ctest --output-on-failure -L python

clean:
	rm -rf $(BUILD) build-asan build-python

help:
	@echo "make              configure, build, and run the class demo (every phase, CPU and GPU)"
	@echo "make build        configure and build only (into $(BUILD)/, binaries in $(BUILD)/bin/)"
	@echo "make test         build and run every test but the big ones (GPU tests skip without a GPU)"
	@echo "make test-big     the big tests alone (2^31-element runs: most of a 24 GiB machine's memory)"
	@echo "make test-LABEL   one label's tests, big ones left out; LABEL is common, phase1 ... phase8,"
	@echo "                  hardening, tools, docs, lineage or gpu (e.g. make test-phase3)"
	@echo "make sanitize     the CPU tests under AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/)"
	@echo "make bench        the benchmark sweep (tools/), results in $(BUILD)/bench/"
	@echo "make plots        figures from $(BUILD)/bench/results.csv"
	@echo "make demo         the class demo alone"
	@echo "make python       the optional PyTorch binding's library (python/README.md)"
	@echo "make test-python  its pytest suite (needs PyTorch)"
	@echo "make clean        remove $(BUILD)/, build-asan/ and build-python/"
	@echo "make help         this list"
