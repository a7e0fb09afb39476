#!/usr/bin/env bash
# tools/headline.sh BINDIR - every phase at the shapes the docs quote (B=4 H=16 S=4096 on the GPU), with the check
# block and timing table each prints. Phases that are not built are left out. tools/gpu_check.sh runs it into
# headline.log.
# FA_HEADLINE_PHASES picks phases (default "1 2 3 4 5 6 pytorch"; "pytorch" is PyTorch's
# scaled_dot_product_attention at the same shapes, through tools/pytorch_compare.py, where python3 has PyTorch and
# sees the GPU). Phase 6 runs the binaries of phases 3 and 4 too, where it compares with them: phase 3 step 3 on the
# batch its varlen run packs, and phase 4's backward beside the features' backward passes.
set -uo pipefail
BIN=${1:-build/bin}
PHASES=${FA_HEADLINE_PHASES:-1 2 3 4 5 6 pytorch}
status=0
run_for() {   # run_for PHASE BINARY ARGS...: when PHASE is picked, prints the command, then its output
    local phase=$1 binary=$2; shift 2
    [ -x "$BIN/$binary" ] || return 0
    [[ " $PHASES " == *" $phase "* ]] || return 0
    echo; echo "\$ $binary $*"
    "$BIN/$binary" "$@" 2>&1 || status=1
}
run() { run_for "${1:5:1}" "$@"; }   # run BINARY ARGS...: the phase is the binary's (phase4_backward: 4)

run phase1_naive                                    # the class demo's shape, CPU and GPU
for D in 64 128; do
    for causal in "" "--causal"; do
        run phase1_naive --impl cuda --B 4 --H 16 --S 4096 --D $D $causal --check-heads 2 --iters 10
    done
done

for N in 4096 16384; do
    run phase2_online_softmax --S $N --D 64 --check-heads 1 --iters 5
done

for D in 64 128; do
    for causal in "" "--causal"; do
        run phase3_forward_4d --impl cuda --step 3 --B 4 --H 16 --S 4096 --D $D $causal --check-heads 2 --iters 10
    done
done
run phase3_forward_4d --impl cpu --step 3 --B 1 --H 8 --S 4096 --D 64 --threads 2 --check-heads 1 --iters 3

for D in 64 128; do
    for causal in "" "--causal"; do
        for dq in deterministic atomic; do
            run phase4_backward --impl cuda --B 4 --H 16 --S 4096 --D $D $causal --dq $dq --check-heads 2 --iters 10
        done
    done
done

# Phase 5 times step 1 (float32 on the rounded inputs), steps 2 and 3 (the half type) and phase 3 step 3 in one run.
for D in 64 128; do
    for causal in "" "--causal"; do
        for dtype in bf16 fp16; do
            run phase5_tensor_cores --impl cuda --dtype $dtype --B 4 --H 16 --S 4096 --D $D $causal --check-heads 2 \
                --iters 10
        done
    done
done

# Step 3i at 128 x 128, FlashAttention-2's tile at D = 64 (with these tiles --step 3 runs step 3i alone).
for D in 64 128; do
    for causal in "" "--causal"; do
        for dtype in bf16 fp16; do
            run phase5_tensor_cores --impl cuda --step 3 --block-m 128 --block-n 128 --dtype $dtype --B 4 --H 16 \
                --S 4096 --D $D $causal --check-heads 2 --iters 10
        done
    done
done

# Phase 5 step 4, the backward on tensor cores (docs/07-tensor-core-backward.md): both dQ variants in one run.
for dtype in fp16 bf16; do
    for D in 64 128; do
        for causal in "" "--causal"; do
            run phase5_tensor_cores --impl cuda --step 4 --dq both --dtype $dtype --B 4 --H 16 --S 4096 --D $D $causal \
                --check-heads 1 --warmup 2 --iters 10
        done
    done
done

# Phase 6 (docs/08-extensions.md): the feature kernels with their feature off beside phase 3 step 3, softcapping on,
# split-KV decoding at the goal shape, and the window and varlen runs beside the full and padded runs they replace.
for D in 64 128; do
    for causal in "" "--causal"; do
        run phase6_extensions --impl cuda --B 4 --H 16 --S 4096 --D $D $causal --check-heads 2 --iters 20
    done
done
run phase6_extensions --impl cuda --B 4 --H 16 --S 4096 --D 64 --softcap 30 --check-heads 2 --iters 20
for causal in "" "--causal"; do
    run phase6_extensions --impl cuda --B 4 --H 16 --S 4096 --D 64 $causal --dropout 0.1 --check-heads 2 --iters 20
done
for Sk in 8192 32768 131072; do
    run phase6_extensions --impl cuda --B 4 --H 32 --Sq 1 --Sk $Sk --D 128 --check-heads 2 --iters 20
done
for window in "--window 1024,0" ""; do
    run phase6_extensions --impl cuda --B 1 --H 16 --S 16384 --D 64 $window --causal --block-m 64 --block-n 64 \
        --check-heads 2 --iters 20
done
run phase6_extensions --impl cuda --seqlens 512,8192,100,3000,16384,7 --H 16 --D 64 --causal --check-heads 200 \
    --iters 20
run_for 6 phase3_forward_4d --impl cuda --step 3 --B 6 --H 16 --S 16384 --D 64 --causal --check-heads 1 --iters 20  # padded
# The features' backward passes (each after its forward) beside phase 4's, deterministic dQ, same problem and tiles.
for D in 64 128; do
    run_for 6 phase4_backward --impl cuda --B 4 --H 16 --S 4096 --D $D --causal --dq deterministic --block-m 64 \
        --block-n 64 --check-heads 1 --iters 10
    for feature in "--softcap 30" "--dropout 0.1" "--H-kv 4" "--window 1024,0"; do
        run phase6_extensions --impl cuda --backward $feature --B 4 --H 16 --S 4096 --D $D --causal --block-m 64 \
            --block-n 64 --check-heads 4 --iters 10
    done
done

# PyTorch: the ceilings (a float32 matmul, a device copy), then at the same shape its float32 math (S materialised)
# and memory-efficient kernels, and FlashAttention-2 and cuDNN in fp16 and bf16.
if [[ " $PHASES " == *" pytorch "* ]]; then
    csv=$(mktemp)
    echo; echo "\$ pytorch_compare.py --ceilings"
    python3 "$(dirname "$0")/pytorch_compare.py" --ceilings 2>&1
    shape="--B 4 --H 16 --S 4096 --D 64 128 --passes forward backward --iters 10"
    for kernels in "--backends math efficient --dtypes fp32" "--backends flash cudnn --dtypes fp16 bf16"; do
        echo; echo "\$ pytorch_compare.py --csv CSV $shape $kernels"
        python3 "$(dirname "$0")/pytorch_compare.py" --csv "$csv" $shape $kernels 2>&1
        rc=$?
        [ $rc -eq 0 ] || [ $rc -eq 77 ] || status=1
    done
    rm -f "$csv"
fi
exit $status
