#!/usr/bin/env bash
# tools/ring_bench.sh BINDIR LOGDIR [GPUS] - phase 8's ring across the GPUs of one machine: the per-GPU efficiency,
# single / (GPUs x ring), at 2, 4 and 8 GPUs (those of them the machine has, or the counts GPUS lists, e.g. "2 4") and
# 8K and 32K tokens per GPU; bf16, D = 128, B = 1, H = 16; non-causal (the contiguous ring) and causal (contiguous
# and zigzag); forward and backward. Then one traced run on the most GPUs (8K tokens per GPU, causal, zigzag, with
# the backward) for the timeline of compute and transfers.
# Writes LOGDIR/ring-bench.log (tools/plot_ring_efficiency.py draws it) and LOGDIR/ring-timeline.csv
# (tools/plot_ring_timeline.py draws it).
#
# Every row is --time-only (no float64 oracle: at 8 x 32K tokens it would take hours; `make test-phase8` checks the
# same code on smaller shapes, over NCCL where the machine has the GPUs): the ring rows leave their outputs on the
# ranks. The forward runs the tiles of phase 5 step 3's fastest forward (128 x 64), the backward the 64 x 64 tiles
# its kernels have; medians of 5 runs after 1. The log's first line names the commit: FA_COMMIT=... when the binaries
# were built from another checkout than the one the script runs in.
set -uo pipefail
usage="usage: tools/ring_bench.sh BINDIR LOGDIR [GPUS]"
BIN=${1:?$usage}
LOGDIR=${2:?$usage}
[ -x "$BIN/phase8_ring" ] || {
    echo "tools/ring_bench.sh: $BIN/phase8_ring: no such program (build phase 8 with CUDA and NCCL first)" >&2; exit 2
}
HAVE=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
[ "$HAVE" -ge 2 ] || {
    echo "tools/ring_bench.sh: this machine has $HAVE GPU(s); the ring needs 2 or more" >&2; exit 2
}
GPUS=${3:-}
if [ -z "$GPUS" ]; then
    for n in 2 4 8; do [ "$n" -le "$HAVE" ] && GPUS="$GPUS $n"; done
fi
for n in $GPUS; do
    case "$n" in
        '' | *[!0-9]*) echo "tools/ring_bench.sh: GPUS lists GPU counts, not '$n'" >&2; exit 2 ;;
    esac
    [ "$n" -ge 2 ] && [ "$n" -le "$HAVE" ] || {
        echo "tools/ring_bench.sh: GPUS: $n GPUs asked for, this machine has $HAVE" >&2; exit 2
    }
done
mkdir -p "$LOGDIR"
cd "$(dirname "$0")/.."
LOG="$LOGDIR/ring-bench.log"
{
    commit=${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
    echo "# tools/ring_bench.sh, $(date -u +%Y-%m-%dT%H:%MZ), commit $commit"
    nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
    echo "# links between the GPUs (nvidia-smi topo -m):"
    nvidia-smi topo -m 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^/#   /'
    run() {   # run N TOKENS_PER_GPU ARGS...: one configuration; its command, its timing rows and its notes
        local n=$1 tokens=$2
        shift 2
        echo "\$ phase8_ring --impl cuda --dtype bf16 --ranks $n --B 1 --H 16 --S $((n * tokens)) --D 128 $*"
        "$BIN/phase8_ring" --impl cuda --dtype bf16 --ranks "$n" --B 1 --H 16 --S $((n * tokens)) --D 128 "$@" \
            --time-only --warmup 1 --iters 5 2>&1 | grep -E "cuda  |efficiency|FAIL|error|skipped"
    }
    for n in $GPUS; do for tokens in 8192 32768; do
        run "$n" $tokens --block-m 128 --block-n 64
        run "$n" $tokens --block-m 128 --block-n 64 --causal --zigzag
        run "$n" $tokens --block-m 64 --block-n 64 --backward
        run "$n" $tokens --block-m 64 --block-n 64 --causal --zigzag --backward
    done; done
} > "$LOG"
most=${GPUS##* }
"$BIN/phase8_ring" --impl cuda --dtype bf16 --ranks "$most" --B 1 --H 16 --S $((most * 8192)) --D 128 --causal \
    --zigzag --backward --block-m 64 --block-n 64 --time-only --warmup 1 --iters 1 \
    --timeline "$LOGDIR/ring-timeline.csv" > "$LOGDIR/ring-timeline.log" 2>&1 || {
    echo "tools/ring_bench.sh: the traced run failed (see $LOGDIR/ring-timeline.log)" >&2; exit 1
}
echo "wrote $LOG and $LOGDIR/ring-timeline.csv"
