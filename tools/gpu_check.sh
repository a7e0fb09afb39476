#!/usr/bin/env bash
# tools/gpu_check.sh LOGDIR - the whole GPU check in one command, for a machine with an NVIDIA GPU.
#
#   1. configure for the GPU it finds (cmake/cuda_arch.cmake asks nvidia-smi) and build, with the compiler's
#      per-kernel resource report (registers, shared memory, spills) in LOGDIR/build.log;
#   2. run the whole test suite, GPU tests included (LOGDIR/ctest.log);
#   3. run the GPU tests again under compute-sanitizer: memcheck, racecheck, initcheck and synccheck
#      (LOGDIR/sanitize-*.log), leaving out the tests labelled "big";
#   4. run the benchmarks (make bench's sweep, and each phase at the shapes the docs quote: LOGDIR/headline.log);
#      on a machine with several GPUs also phase 8's ring across them (tools/ring_bench.sh: LOGDIR/ring-bench.log,
#      LOGDIR/ring-timeline.csv);
#   5. publish: the figures of the sweep (tools/plot_bench.py) and the logs the docs quote, copied into docs/figures/
#      (or FA_PUBLISH_DIR) under the GPU's model as prefix (h100-headline.log, h100-results.csv, h100-summary.md,
#      h100-machine.log, h100-*.png; the ring's logs as h100x4-ring-bench.log, h100x4-ring-timeline.csv on four
#      GPUs), ready to commit beside the chapters that quote them; then every generated table of the docs is
#      rewritten from them (python3 tools/check_docs.py --regenerate).
# Steps can be chosen with FA_GPU_CHECK_STEPS (default "build test memcheck racecheck initcheck synccheck headline ring
# bench publish");
# FA_GPU_TEST_ARGS narrows the test step (e.g. "-L gpu" when the CPU half already ran elsewhere),
# FA_SANITIZE_TEST_ARGS the sanitizer sweeps (default "-L gpu -LE big"; "-L gpu -L ^phase -LE big" still covers every
# kernel, through the phase tests, in less time), FA_HEADLINE_PHASES
# the phases headline.sh runs (e.g. "3 4"), FA_BENCH_ARGS extra arguments of tools/bench.py (e.g. "--gpu-only").
# Logs are written as each step goes, so a run cut short keeps its logs.
# The last lines printed are a summary; the exit status is non-zero when any step failed.
set -uo pipefail
LOGDIR=${1:?usage: tools/gpu_check.sh LOGDIR}
mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
cd "$(dirname "$0")/.."
BUILD=${FA_GPU_BUILD:-build-gpu}
STEPS=${FA_GPU_CHECK_STEPS:-build test memcheck racecheck initcheck synccheck headline ring bench publish}
JOBS=$(nproc)
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
summary=()
failed=0

want() { [[ " $STEPS " == *" $1 "* ]]; }
record() {   # record NAME STATUS DETAIL
    summary+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = ok ] || failed=1
}
ctest_counts() { grep -E "tests passed|tests failed" "$1" | tail -1; }

{ nvidia-smi; nvcc --version; cmake --version | head -1; } > "$LOGDIR/machine.log" 2>&1

if want build; then
    start=$SECONDS
    if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFA_CUDA_RESOURCE_REPORT=ON -DFA_GPU_TEST_LAUNCHER= \
            > "$LOGDIR/build.log" 2>&1 && cmake --build "$BUILD" -j "$JOBS" >> "$LOGDIR/build.log" 2>&1; then
        record build ok "$((SECONDS - start)) s, $(grep -c 'registers' "$LOGDIR/build.log") kernel resource lines"
    else
        record build FAIL "see build.log"; tail -30 "$LOGDIR/build.log"
    fi
fi

if want test; then
    (cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 ${FA_GPU_TEST_ARGS:-}) > "$LOGDIR/ctest.log" 2>&1
    rc=$?
    skipped=$(grep -c '(Skipped)' "$LOGDIR/ctest.log")
    record test $([ $rc -eq 0 ] && echo ok || echo FAIL) "$(ctest_counts "$LOGDIR/ctest.log"); $skipped skipped"
fi

# The same GPU test binaries, now launched through compute-sanitizer (only the test files change).
for tool in memcheck racecheck initcheck synccheck; do
    want $tool || continue
    log="$LOGDIR/sanitize-$tool.log"
    extra=""
    [ $tool = memcheck ] && extra=";--leak-check;full"
    cmake -S . -B "$BUILD" "-DFA_GPU_TEST_LAUNCHER=$SANITIZER;--tool;$tool;--error-exitcode;1$extra" > /dev/null 2>&1
    (cd "$BUILD" && ctest --output-on-failure ${FA_SANITIZE_TEST_ARGS:--L gpu -LE big} -j 8 --timeout 900) > "$log" 2>&1
    rc=$?
    errors=$(grep -hE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$log" | head -3 | tr '\n' ' ')
    record $tool $([ $rc -eq 0 ] && echo ok || echo FAIL) "$(ctest_counts "$log") ${errors}"
done
cmake -S . -B "$BUILD" -DFA_GPU_TEST_LAUNCHER= > /dev/null 2>&1

if want headline && [ -x tools/headline.sh ]; then
    tools/headline.sh "$BUILD/bin" > "$LOGDIR/headline.log" 2>&1
    record headline $([ $? -eq 0 ] && echo ok || echo FAIL) "see headline.log"
fi

gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
if want ring; then
    if [ "$gpus" -ge 2 ]; then
        tools/ring_bench.sh "$BUILD/bin" "$LOGDIR" > "$LOGDIR/ring-stdout.log" 2>&1
        record ring $([ $? -eq 0 ] && echo ok || echo FAIL) "see ring-bench.log, ring-timeline.csv"
    else
        record ring ok "not run: the ring needs 2 GPUs, this machine has $gpus"
    fi
fi

if want bench && [ -f tools/bench.py ]; then
    python3 tools/bench.py --build "$BUILD" --out "$LOGDIR" ${FA_BENCH_ARGS:-} > "$LOGDIR/bench-stdout.log" 2>&1
    record bench $([ $? -eq 0 ] && echo ok || echo FAIL) "see bench.log, results.csv, summary.md, bench-stdout.log"
fi

# The GPU's model, lower case ("NVIDIA H100 80GB HBM3" -> h100): the prefix of everything published.
gpu_model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oE '\b[A-Z]{1,2}[0-9]{2,4}\b' |
            head -1 | tr 'A-Z' 'a-z')
if want publish; then
    prefix=${gpu_model:-gpu}-
    figures=${FA_PUBLISH_DIR:-docs/figures}
    mkdir -p "$figures"
    if [ -f "$LOGDIR/results.csv" ] && python3 tools/plot_bench.py "$LOGDIR/results.csv" --outdir "$figures" \
            --prefix "$prefix" > "$LOGDIR/plots.log" 2>&1; then
        for log in headline.log results.csv summary.md machine.log; do
            [ -f "$LOGDIR/$log" ] && cp "$LOGDIR/$log" "$figures/$prefix$log"
        done
        # The docs' GPU tables: every generated block rewritten from the logs just published (into docs/figures/).
        for log in ring-bench.log ring-timeline.csv; do
            [ -f "$LOGDIR/$log" ] && cp "$LOGDIR/$log" "$figures/${gpu_model:-gpu}x$gpus-$log"
        done
        [ "$figures" = docs/figures ] && python3 tools/check_docs.py --regenerate > "$LOGDIR/regenerate.log" 2>&1
        record publish ok "$(ls "$figures/$prefix"* | tr '\n' ' ')"
    else
        record publish FAIL "see plots.log (no results.csv without the bench step)"
    fi
fi

echo
echo "== gpu_check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)) =="
printf '%s\n' "${summary[@]}"
exit $failed
