#!/usr/bin/env bash
# tools/cpu_headline.sh BINDIR - every CPU run whose numbers the chapters quote, with the check block and timing table
# each prints (the header of each names the CPU, its vector instructions and the threads used). The chapters' CPU
# numbers are read off its output, committed as docs/figures/cpu-headline.log:
#
#   nice -n 10 tools/cpu_headline.sh build/bin > docs/figures/cpu-headline.log 2>&1
#
# Each command is printed before its output ("$ binary args"), as tools/headline.sh does for the GPU. A binary that is
# not built is left out. On a shared machine the times move with the load (docs/05-measuring.md): the log's first
# lines record `uptime` before the runs, and its last lines after them.
set -uo pipefail
BIN=${1:-build/bin}
status=0
run() {   # run BINARY ARGS...: prints the command, then its output
    local binary=$1; shift
    [ -x "$BIN/$binary" ] || return 0
    echo; echo "\$ $binary $*"
    "$BIN/$binary" "$@" 2>&1 || status=1
}
echo "\$ uptime"; uptime

# Chapter 01 and README: the class demo (CPU rows), and the causal mask on one core.
run phase1_naive --impl cpu --threads 2
run phase1_naive --impl cpu --threads 1 --B 1 --H 4 --S 2048
run phase1_naive --impl cpu --threads 1 --B 1 --H 4 --S 2048 --causal
# Chapter 05: the class demo's CPU row five times in a row, to show the spread on a machine shared with other jobs.
for i in 1 2 3 4 5; do run phase1_naive --impl cpu --threads 2 --check-heads 1; done
# Chapter 02: the online softmax against naive, one head of 4096.
run phase2_online_softmax --impl cpu --S 4096 --D 64 --iters 3
# Chapter 03: phase 3 step 3 at B=1 H=8 S=4096 (non-causal and causal).
run phase3_forward_4d --impl cpu --B 1 --H 8 --S 4096 --D 64 --step 3 --threads 2 --check-heads 1 --iters 3
run phase3_forward_4d --impl cpu --B 1 --H 8 --S 4096 --D 64 --step 3 --causal --threads 2 --check-heads 1 --iters 3
# Chapter 04: the backward against the forward on one core.
run phase4_backward --impl cpu --threads 1 --check-heads 1
run phase4_backward --impl cpu --threads 1 --check-heads 1 --H 8 --S 1024
# Chapter 06: phase 5 step 1 (register tiles) beside phase 3 step 3 and naive attention.
run phase5_tensor_cores --impl cpu --step 1 --B 1 --H 8 --S 4096 --D 64 --threads 2 --check-heads 1 --iters 3
# Chapter 07: phase 5 step 4 (the CPU twin of the tensor-core backward) beside phase 4's float32 backward.
for shape in "--D 64" "--D 128" "--D 64 --causal"; do
    run phase5_tensor_cores --impl cpu --step 4 --dtype fp16 --B 1 --H 4 --S 1024 $shape --threads 2
    run phase4_backward --impl cpu --B 1 --H 4 --S 1024 $shape --threads 2
done
# Chapter 08: the sliding window on one core, beside the causal run it prunes.
for window in "" "--window 1024,0"; do
    run phase6_extensions --impl cpu --threads 1 --iters 3 --warmup 1 --B 1 --H 1 --S 16384 --D 64 --causal \
        --block-m 64 --block-n 64 $window
done
echo; echo "\$ uptime"; uptime
exit $status
