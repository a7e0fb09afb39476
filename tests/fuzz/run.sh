#!/usr/bin/env bash
# tests/fuzz/run.sh FUZZER SECONDS [WORKDIR] - a bounded libFuzzer run of the .npy reader.
#
#   FUZZER   the libFuzzer binary (build/bin/fuzz_npy, built by tests/hardening.cmake when clang is there)
#   SECONDS  how long to fuzz (.ci/run: 30; the ctest hardening_fuzz_npy: 20)
#   WORKDIR  scratch folder (default: a new temporary one); the corpus grows there, never in tests/fuzz/corpus
#
# Starts from the seed corpus and every saved crash (tests/fuzz/regressions), with the .npy dictionary. Exit status:
# 0 no crash; 1 the fuzzer found one (the input is printed in hex: save it in tests/fuzz/regressions/, fix
# common/fa_npy.c, and ctest's hardening_npy_replay replays it from then on); 77 the fuzzer is not built.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fuzzer=${1:?usage: tests/fuzz/run.sh FUZZER SECONDS [WORKDIR]}
seconds=${2:?usage: tests/fuzz/run.sh FUZZER SECONDS [WORKDIR]}
work=${3:-$(mktemp -d)}

if [ ! -x "$fuzzer" ]; then
    echo "SKIPPED: $fuzzer is not built (it needs clang with libFuzzer; see tests/hardening.cmake)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work/corpus" "$work/crashes"
cp "$here"/corpus/* "$here"/regressions/* "$work/corpus/"

# -max_len: real headers are under 200 bytes; 1 KiB leaves room for long headers and payloads.
# -timeout/-rss_limit_mb: a slow or memory-hungry input is a finding too.
"$fuzzer" -max_total_time="$seconds" -max_len=1024 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$here/npy.dict" -artifact_prefix="$work/crashes/" "$work/corpus" > "$work/fuzz.log" 2>&1
status=$?

runs=$(grep -E '^Done [0-9]+ runs' "$work/fuzz.log" | tail -1)
rate=$(grep -E 'stat::average_exec_per_sec' "$work/fuzz.log" | awk '{print $2}')
cov=$(grep -E '^#[0-9]+.*cov:' "$work/fuzz.log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
crashes=$(find "$work/crashes" -type f | wc -l)
if [ $status -eq 0 ] && [ "$crashes" -eq 0 ]; then
    echo "fuzz_npy: ${runs:-no summary} (${rate:-?} exec/s, $cov, corpus grew to $(ls "$work/corpus" | wc -l) inputs), no crash"
    exit 0
fi
echo "fuzz_npy FAILED (exit $status, $crashes crashing input(s)); the fuzzer's log ends with:"
grep -vE '^#[0-9]+' "$work/fuzz.log" | tail -40
for f in "$work"/crashes/*; do
    [ -f "$f" ] || continue
    echo "--- $f ($(stat -c %s "$f") bytes):"
    od -A d -t x1z "$f" | head -20
done
echo "Save each input above in tests/fuzz/regressions/ and fix common/fa_npy.c."
exit 1
