#!/usr/bin/env bash
# tools/profile.sh BINDIR LOGDIR - what limits each GPU step of phase 5: Nsight Compute (ncu) on one launch of every
# step's kernel, and for comparison of PyTorch's FlashAttention-2 kernels and its float32 memory-efficient forward
# (step 1's comparison), at the headline shape (B=4 H=16 S=4096, bf16 (float32 for PyTorch's float32 kernel),
# non-causal), D=64 and D=128: the forward steps 1, 2, 3a to 3j (chapter 06), the backward steps' kernels, dK/dV and
# dQ (steps 4 to 4d), and the atomic variant's dK/dV kernel (chapter 07); with the pass "naive", phase 1's three
# float32 kernels at the same shape (chapter 01: what bounds them, since it is not HBM traffic). One text report per
# kernel and D in LOGDIR (ncu-<kernel>-d<D>.txt), and LOGDIR/ncu-summary.txt: the lines the chapters quote, side by
# side.
#
# What is read, and why (docs/06-tensor-cores.md explains each):
#   SpeedOfLight, ComputeWorkloadAnalysis  how busy the SMs and memory are, as a share of their peak
#   Occupancy, LaunchStats                 warps per SM, and what limits them (registers, shared memory)
#   WarpStateStats, SchedulerStats         why a warp did not issue (waiting on shared memory, on a barrier, ...)
#   MemoryWorkloadAnalysis_Tables          shared-memory bank conflicts
#   the metrics below                      the tensor pipe's share of cycles, the instructions on each pipe
# FA_PROFILE_D picks head dims (default "64 128"), FA_PROFILE_STEPS the forward steps (default "1 2 3a 3b 3 3c 3d 3e
# 3f 3g 3h 3i 3i128 3j 3j128", 3i128 and 3j128 at 128 x 128 tiles), FA_PROFILE_BACKWARD the backward steps (default
# "4 4b 4c 4d atomic flash"), FA_PROFILE_PASSES the passes (default "forward backward"; "naive" too on request, e.g.
# FA_PROFILE_PASSES=naive FA_PROFILE_D=64); needs ncu on the PATH (or /usr/local/cuda/bin/ncu).
set -uo pipefail
BIN=${1:?usage: tools/profile.sh BINDIR LOGDIR}
LOGDIR=${2:?usage: tools/profile.sh BINDIR LOGDIR}
mkdir -p "$LOGDIR"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
HEAD_DIMS=${FA_PROFILE_D:-64 128}
PASSES=${FA_PROFILE_PASSES:-forward backward}
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
--section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables"
METRICS="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_tensor_op_hmma.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_xu.sum,\
sm__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,\
gpu__time_duration.sum"
status=0

profile() {   # profile NAME KERNEL_REGEX COMMAND...: one launch of the first kernel whose name matches
    local name=$1 regex=$2; shift 2
    local out="$LOGDIR/ncu-$name.txt"
    echo "\$ ncu -k regex:$regex --launch-count 1 $SECTIONS --metrics ... $*" > "$out"
    "$NCU" --clock-control none -k "regex:$regex" --launch-count 1 $SECTIONS --metrics "$METRICS" "$@" \
        >> "$out" 2>&1 || status=1
    echo "== $name" >> "$LOGDIR/ncu-summary.txt"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers \
Per Thread|Block Limit (Registers|Shared Mem)|Issued Ipc Active|No Eligible|Warp Cycles Per Issued|pipe_tensor_op_hmma_cycles|\
inst_executed_pipe|smsp__inst_executed.sum|bank_conflicts|wavefronts_mem_shared|Stall|stall" "$out" \
        | sed 's/  */ /g' >> "$LOGDIR/ncu-summary.txt"
}

: > "$LOGDIR/ncu-summary.txt"
for D in $HEAD_DIMS; do
    if [[ " $PASSES " == *" forward "* ]]; then
        # Steps 3a (swizzle), 3b (cp.async), 3c (two row blocks), 3d (exp2 ftz), 3e (copy loop), 3f (lazy
        # rescale), 3g (loop invariants), 3h (xor addresses), 3i (key offsets) and 3j (rows together) are rows of
        # --step 3, beside step 3 itself: the regex picks the kernel.
        # "3i128" and "3j128" are steps 3i and 3j at 128 x 128 tiles (with those tiles --step 3 runs them alone).
        for step in ${FA_PROFILE_STEPS:-1 2 3a 3b 3 3c 3d 3e 3f 3g 3h 3i 3i128 3j 3j128}; do
            kernel=$(case $step in 1) echo regtile;; 2) echo mma;; 3a) echo swizzle;; 3b) echo cp_async;;
                     3) echo pipeline;; 3c) echo two_row_blocks;; 3d) echo exp2_ftz;; 3e) echo copy_loop;;
                     3f) echo lazy_rescale;; 3g) echo loop_invariants;; 3h) echo xor_addresses;;
                     3i|3i128) echo key_offsets;; 3j|3j128) echo rows_together;; esac)
            tiles=$([ "${step#??}" = 128 ] && echo "--block-m 128 --block-n 128")
            profile "step$step-$kernel-d$D" "flash_forward_${kernel}_kernel" "$BIN/phase5_tensor_cores" --impl cuda \
                --dtype bf16 --step "${step:0:1}" $tiles --B 4 --H 16 --S 4096 --D $D --check-heads 1 --warmup 0 \
                --iters 1
        done
        # PyTorch's FlashAttention-2 forward (its kernel is named flash_fwd_kernel), on the same shape and dtype.
        profile "pytorch-flash-d$D" "flash_fwd" python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(4, 16, 4096, $D, device='cuda', dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()"
        # PyTorch's float32 memory-efficient forward, the kernel step 1 is timed against (named fmha_cutlassF_*):
        # which pipes its products run on, beside step 1's report.
        profile "pytorch-efficient-d$D" "fmha_cutlassF" python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(4, 16, 4096, $D, device='cuda', dtype=torch.float32) for _ in range(3))
with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()"
    fi
    if [[ " $PASSES " == *" naive "* ]]; then
        # Phase 1's kernels in the order they run: S = scale Q K^T, P = softmax(S), O = P V (float32).
        for kernel in scores softmax output; do
            profile "naive-$kernel-d$D" "${kernel}_kernel" "$BIN/phase1_naive" --impl cuda --B 4 --H 16 --S 4096 \
                --D $D --check-heads 1 --warmup 0 --iters 1
        done
    fi
    if [[ " $PASSES " == *" backward "* ]]; then
        # The backward steps' kernels, each from a --step 4 run (whose rows are steps 4 to 4d): step 4's two passes;
        # step 4b's (the forward's instruction cuts); step 4c's dQ pass (its dK/dV pass is 4b's) and step 4d's dK/dV
        # pass (its dQ pass is 4c's); the atomic variant's one kernel (dK, dV and each K/V tile's share of dQ, added
        # with atomicAdd); and, with "flash", PyTorch's FlashAttention-2 backward.
        for step in ${FA_PROFILE_BACKWARD:-4 4b 4c 4d atomic flash}; do
            kernels=$(case $step in 4) echo "dkdv:backward_dkdv dq:backward_dq";;
                      4b) echo "dkdv:backward_lean_dkdv dq:backward_lean_dq";; 4c) echo "dq:backward_held_dq";;
                      4d) echo "dkdv:backward_occupancy_dkdv";; atomic) echo "dkdv-atomic:backward_dkdv";; esac)
            for pair in $kernels; do
                mode=$([ "$step" = atomic ] && echo atomic || echo deterministic)
                profile "step${step/atomic/4}-${pair%%:*}-d$D" "${pair#*:}_kernel" "$BIN/phase5_tensor_cores" \
                    --impl cuda --dtype bf16 --step 4 --dq $mode --B 4 --H 16 --S 4096 --D $D --check-heads 1 \
                    --warmup 0 --iters 1
            done
            [ "$step" = flash ] || continue
            # PyTorch's FlashAttention-2 backward: its main kernel (dQ, dK and dV in one loop over the K/V tiles).
            profile "pytorch-flash-bwd-d$D" "flash_bwd_dq_dk_dv" python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(4, 16, 4096, $D, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v).backward(torch.randn_like(q))
torch.cuda.synchronize()"
        done
    fi
done
echo "wrote $LOGDIR/ncu-*.txt"
exit $status
