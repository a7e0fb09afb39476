#!/usr/bin/env bash
# tools/hopper_bench.sh BINDIR LOGDIR [PARTS] - phase 7's ablation on a Hopper GPU: every forward step of phase 7
# beside phase 5 step 3, the backward steps (6 and 6a to 6j) beside phase 5 step 4, and PyTorch's FlashAttention-2 and
# cuDNN backends (forward and backward), in one run on one GPU; then Nsight Compute on one launch of each forward
# step's kernel and of each one-pass backward kernel. Writes LOGDIR/hopper-bench.log (the timing rows; chapter 09's
# tables are read off it) and LOGDIR/hopper-ncu-summary.txt (the profiler's lines the chapter quotes).
# PARTS: time (the timing rows only), profile (the profiler only) or all (the default). The two halves take several
# minutes each; run them as two commands where one command may not run that long.
#
# Shapes: B=4 H=16 S=4096 and B=1 H=16 S=16384; D=64 and 128; causal and not; bf16 and fp16. Tiles: 128x64 (phase 5
# step 3 has no larger one; phase 7's steps at 128x64 too), 128x128 (phase 7 only) and, at D=64, 192x128 (steps 4c
# to 4j, three consumer warpgroups). Medians of 10 runs after 2.
set -uo pipefail
BIN=${1:?usage: tools/hopper_bench.sh BINDIR LOGDIR [time|profile|all]}
LOGDIR=${2:?usage: tools/hopper_bench.sh BINDIR LOGDIR [time|profile|all]}
PARTS=${3:-all}
case "$PARTS" in
    time | profile | all) ;;
    *) echo "tools/hopper_bench.sh: the third argument is time, profile or all, not '$PARTS'" >&2; exit 2 ;;
esac
[ -x "$BIN/phase7_hopper" ] || {
    echo "tools/hopper_bench.sh: $BIN/phase7_hopper: no such program (build phase 7 for a Hopper GPU first)" >&2; exit 2
}
mkdir -p "$LOGDIR"
cd "$(dirname "$0")/.."
LOG="$LOGDIR/hopper-bench.log"
if [ "$PARTS" != profile ]; then {
    echo "# tools/hopper_bench.sh, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
    run() {   # run DTYPE B H S D CAUSAL BLOCK_M BLOCK_N
        echo "\$ phase7_hopper --impl cuda --dtype $1 --B $2 --H $3 --S $4 --D $5 $6 --block-m $7 --block-n $8"
        "$BIN/phase7_hopper" --impl cuda --dtype $1 --B $2 --H $3 --S $4 --D $5 $6 --block-m $7 --block-n $8 \
            --check-heads 1 --warmup 2 --iters 10 2>&1 | grep -E "cuda  |cuda d[QKV] |FAIL|error"
    }
    step4() {   # step4 DTYPE B H S D CAUSAL: 192-row tiles (D = 64; --step 4 runs 4c to 4j, 4 to 4b are left out)
        echo "\$ phase7_hopper --impl cuda --step 4 --dtype $1 --B $2 --H $3 --S $4 --D $5 $6 --block-m 192" \
             "--block-n 128"
        "$BIN/phase7_hopper" --impl cuda --step 4 --dtype $1 --B $2 --H $3 --S $4 --D $5 $6 --block-m 192 \
            --block-n 128 --check-heads 1 --warmup 2 --iters 10 2>&1 | grep -E "cuda  |cuda d[QKV] |FAIL|error"
    }
    for dtype in bf16 fp16; do for D in 64 128; do for causal in "" --causal; do
        run $dtype 4 16 4096 $D "$causal" 128 64
        run $dtype 4 16 4096 $D "$causal" 128 128
        [ $D = 64 ] && step4 $dtype 4 16 4096 $D "$causal"
    done; done; done
    # The longer shape: the oracle's float64 head costs more than every GPU row together, so only D = 128 (every
    # step) and D = 64 with 192-row tiles (steps 4c to 4j).
    for dtype in bf16 fp16; do for causal in "" --causal; do
        run $dtype 1 16 16384 128 "$causal" 128 128
        step4 $dtype 1 16 16384 64 "$causal"
    done; done
    # The backward (steps 6 to 6j and phase 5 step 4, both dQ variants, 6a to 6j atomic only; each at the only tiles
    # its kernels have: 64 x 64, 6c to 6h 64 x 128, 6i and 6j 128 x 128 at D = 64, 6j 80 x 128 at D = 128), and at
    # the longer shape.
    backward() {   # backward DTYPE B H S D CAUSAL
        echo "\$ phase7_hopper --impl cuda --step 6 --dq both --dtype $1 --B $2 --H $3 --S $4 --D $5 $6"
        "$BIN/phase7_hopper" --impl cuda --step 6 --dq both --dtype $1 --B $2 --H $3 --S $4 --D $5 $6 \
            --check-heads 1 --warmup 2 --iters 10 2>&1 | grep -E "cuda  |cuda d[QKV] |FAIL|error"
    }
    for dtype in bf16 fp16; do for D in 64 128; do for causal in "" --causal; do
        backward $dtype 4 16 4096 $D "$causal"
    done; done; done
    for dtype in bf16 fp16; do for D in 64 128; do for causal in "" --causal; do
        backward $dtype 1 16 16384 $D "$causal"
    done; done; done
    echo "\$ python3 tools/pytorch_compare.py --backends flash cudnn --dtypes bf16 fp16 --passes forward backward ..."
    for shape in "4 16 4096" "1 16 16384"; do
        set -- $shape
        python3 tools/pytorch_compare.py --csv "$LOGDIR/hopper-pytorch.csv" --B $1 --H $2 --S $3 --D 64 128 \
            --dtypes bf16 fp16 --backends flash cudnn --passes forward backward --iters 10 --warmup 2 > /dev/null 2>&1
    done
    cut -d, -f2,6-11,17,19 "$LOGDIR/hopper-pytorch.csv" | sed 's/^/  pytorch: /'
} > "$LOG" 2>&1; fi

# The profiler: one launch of each step at B=4 H=16 S=4096 bf16: D=128 with 128x128 tiles (steps 1-5, 4a, 4b, 4d,
# 4e to 4j), D=64 for step 4b (128x128) beside steps 4c to 4j (192x128, tiles only they have), and steps 6a to 6j's
# backward; and steps 4g and 4h causal at both D, whose queues differ only there (the L2's hit rate and the bytes
# read from DRAM show the difference).
if [ "$PARTS" != time ]; then   # the profiler half
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SUMMARY="$LOGDIR/hopper-ncu-summary.txt"
METRICS="smsp__inst_executed.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum"
: > "$SUMMARY"
profile() {   # profile OUT TITLE KERNEL_REGEX PHASE7_ARGS...: one launch of the kernel, and its lines in the summary
    local out=$1 title=$2 regex=$3; shift 3
    "$NCU" --clock-control none -k "regex:$regex" --launch-count 1 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats --metrics "$METRICS" \
        "$BIN/phase7_hopper" --impl cuda --dtype bf16 --B 4 --H 16 --S 4096 "$@" --check-heads 1 --warmup 0 \
        --iters 1 > "$out" 2>&1
    echo "== $title" >> "$SUMMARY"
    grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per Thread|\
Achieved Occupancy|Issued Ipc Active|No Eligible|Warp Cycles Per Issued|smsp__inst_executed.sum|lts__t_sector_hit_rate|\
dram__bytes_read|Stall|stall" "$out" \
        | sed 's/  */ /g' >> "$SUMMARY"
}
# name kernel step D BLOCK_M BLOCK_N [--causal]
for profile in "1 wgmma 1 128 128 128" "2 tma 2 128 128 128" "3 warp_specialized 3 128 128 128" \
               "4 pingpong 4 128 128 128" "4a wide_wgmma 4 128 128 128" "4b exp2_ftz 4 128 128 128" \
               "4d split_barriers 4 128 128 128" "4e overlap_in_turn 4 128 128 128" "5 overlap 5 128 128 128" \
               "4b-d64 exp2_ftz 4 64 128 128" "4c-d64 three_consumers 4 64 192 128" \
               "4d-d64 split_barriers 4 64 192 128" "4e-d64 overlap_in_turn 4 64 192 128" \
               "4f persistent 4 128 128 128" "4f-d64 persistent 4 64 192 128" \
               "4g stages_once 4 128 128 128" "4g-d64 stages_once 4 64 192 128" \
               "4h l2_head_groups 4 128 128 128" "4h-d64 l2_head_groups 4 64 192 128" \
               "4i descriptors_once 4 128 128 128" "4i-d64 descriptors_once 4 64 192 128" \
               "4j two_rows_together 4 128 128 128" "4j-d64 two_rows_together 4 64 192 128" \
               "4g-causal stages_once 4 128 128 128 --causal" "4g-d64-causal stages_once 4 64 192 128 --causal" \
               "4h-causal l2_head_groups 4 128 128 128 --causal" \
               "4h-d64-causal l2_head_groups 4 64 192 128 --causal"; do
    set -- $profile
    profile "$LOGDIR/hopper-ncu-step$1.txt" "step $1 ($2, D=$4, $5x$6${7:+, causal})" "flash_forward_${2}_kernel" \
        --step $3 --D $4 --block-m $5 --block-n $6 ${7:-}
done
# The backward: the one kernel (dK, dV and dQ) of steps 6a, 6b (64 x 64 tiles), 6c to 6h (64 x 128), 6i (128 x 128
# at D = 64, 64 x 128 at D = 128) and 6j (128 x 128 at D = 64, 80 x 128 at D = 128), at D = 128 and 64.
# name kernel tiles (the tiles at D = 128)
for D in 128 64; do
    for profile in "6a dkdv_dq 64x64" "6b dq_beside_dkdv 64x64" "6c two_warpgroups 64x128" \
                   "6d descriptors_once 64x128" "6e exp2_ftz 64x128" "6f overlap_products 64x128" \
                   "6g q_tiles_by_tma 64x128" "6h dq_per_warpgroup 64x128" "6i wide_q_tiles 64x128" \
                   "6j transposed_dq 80x128"; do
        set -- $profile
        tiles=$3   # at D = 64 steps 6i and 6j have Q tiles of 128 queries
        case "$1-$D" in 6i-64 | 6j-64) tiles=128x128 ;; esac
        profile "$LOGDIR/hopper-ncu-step$1-d$D.txt" "step $1-d$D (backward_$2, D=$D, $tiles)" "backward_$2_kernel" \
            --step 6 --dq atomic --D $D
    done
done
# The warp roles over time (the timeline build, when BINDIR has it: cmake --build BUILD --target phase7_timeline):
# step 3's per-warp clock stamps as CSV, drawn by tools/plot_timeline.py.
if [ -x "$BIN/phase7_timeline" ]; then
    {
        echo "\$ phase7_timeline --impl cuda --step 3 --dtype bf16 --B 4 --H 16 --S 4096 --D 128 --block-m 128 --block-n 128 --timeline hopper-timeline.csv"
        "$BIN/phase7_timeline" --impl cuda --step 3 --dtype bf16 --B 4 --H 16 --S 4096 --D 128 --block-m 128 \
            --block-n 128 --check-heads 1 --warmup 0 --iters 1 --timeline "$LOGDIR/hopper-timeline.csv"
        echo "\$ python3 tools/plot_timeline.py hopper-timeline.csv -o hopper-timeline.png"
        python3 tools/plot_timeline.py "$LOGDIR/hopper-timeline.csv" -o "$LOGDIR/hopper-timeline.png"
    } > "$LOGDIR/hopper-timeline.log" 2>&1
fi
fi   # the profiler half
if [ "$PARTS" != profile ]; then cat "$LOG"; fi
