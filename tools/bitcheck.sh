#!/usr/bin/env bash
# bitcheck.sh - the outputs of every phase, saved as .npy files, to compare two builds bit for bit.
#
#   tools/bitcheck.sh BIN_DIR cpu|cuda OUT_DIR      run every phase on a fixed set of shapes, save into OUT_DIR
#   tools/bitcheck.sh --compare OUT_A OUT_B         cmp every saved file of A with B; exit 1 on any difference
#
# Each run goes to OUT_DIR/<phase>-<case>/ through --save-dir (q, k, v, o, lse; do, dq, dk, dv for a backward).
# Phase 6 also keeps its check block (errors and worst index, no timings) in check.txt, which a build whose phase 6
# has no --save-dir can still be compared on. A run the binary refuses (exit 2: a case it does not support) is
# recorded as refused.txt, so both builds must refuse the same cases. The atomic dQ variants add into dQ in an order
# that changes from run to run (on the CPU with more than one thread too): their dq.npy is left out of the
# comparison (and the runs use one CPU thread). Typical use, on a machine with a GPU:
#   tools/bitcheck.sh build-old/bin cuda /tmp/old && tools/bitcheck.sh build/bin cuda /tmp/new
#   tools/bitcheck.sh --compare /tmp/old /tmp/new
set -uo pipefail

if [ "${1:-}" = "--compare" ]; then
    a=$2 b=$3 differ=0 files=0
    while IFS= read -r f; do
        files=$((files + 1))
        if [ ! -f "$b/$f" ]; then echo "only in $a: $f"; differ=1; continue; fi
        cmp -s "$a/$f" "$b/$f" || { echo "differs: $f"; differ=1; }
    done < <(cd "$a" && find . -type f \( -name '*.npy' -o -name check.txt -o -name refused.txt \) \
                 ! -path '*-atomic-*/npy/dq.npy' | sort)
    echo "compared $files files: $([ $differ = 0 ] && echo 'all identical' || echo 'DIFFERENCES')"
    exit $differ
fi

bin=$1 impl=$2 out=$3
mkdir -p "$out"
common=(--impl "$impl" --iters 0 --warmup 0 --seed 7)

# run NAME BINARY ARGS...: one saved run (and, for phase 6, its check block).
run() {
    local name=$1 binary=$2; shift 2
    local dir="$out/$name"
    rm -rf "$dir"; mkdir -p "$dir"
    "$bin/$binary" "${common[@]}" "$@" --save-dir "$dir/npy" > "$dir/stdout.txt" 2> "$dir/stderr.txt"
    local rc=$?
    if [ $rc = 2 ] && [ "$binary" = phase6_extensions ] && grep -q 'save-dir' "$dir/stderr.txt"; then
        # a phase 6 without --save-dir: its check block only
        "$bin/$binary" "${common[@]}" "$@" > "$dir/stdout.txt" 2> "$dir/stderr.txt"; rc=$?
    fi
    if [ $rc = 2 ]; then echo "exit 2" > "$dir/refused.txt"; fi
    if [ "$binary" = phase6_extensions ]; then
        # the check block: from its header to the first empty line after it
        awk '/^Check against/{on=1} on&&/^$/{exit} on' "$dir/stdout.txt" > "$dir/check.txt"
    fi
    echo "$name: exit $rc"
}

shapes=("--B 2 --H 3 --S 70 --D 32" "--B 1 --H 2 --Sq 33 --Sk 77 --D 64 --causal" "--B 2 --H 2 --Sq 100 --Sk 60 --D 16 --causal"
        "--B 1 --H 2 --S 130 --D 128 --causal")
phase2_head_dims=(32 64 64 64)   # phase 2 is one [N, d] head: its own shape beside each of the above
for i in "${!shapes[@]}"; do
    read -ra s <<< "${shapes[$i]}"
    run "p1-s$i" phase1_naive "${s[@]}"
    run "p2-s$i" phase2_online_softmax --Sq 75 --Sk 91 --D "${phase2_head_dims[$i]}"
    for step in 1 2 3; do run "p3-step$step-s$i" phase3_forward_4d --step "$step" "${s[@]}"; done
    for dq in deterministic atomic; do run "p4-$dq-s$i" phase4_backward --dq "$dq" --threads 1 "${s[@]}"; done
    for dtype in fp32 fp16 bf16; do
        for step in 1 2 3; do run "p5-step$step-$dtype-s$i" phase5_tensor_cores --step "$step" --dtype "$dtype" "${s[@]}"; done
        for dq in deterministic atomic; do
            run "p5-step4-$dq-$dtype-s$i" phase5_tensor_cores --step 4 --dq "$dq" --dtype "$dtype" --threads 1 "${s[@]}"
        done
    done
    run "p6-gqa-s$i" phase6_extensions --H-kv 1 --backward "${s[@]}"
    run "p6-window-s$i" phase6_extensions --window 9,5 --backward "${s[@]}"
    run "p6-softcap-s$i" phase6_extensions --softcap 20 --backward "${s[@]}"
    run "p6-dropout-s$i" phase6_extensions --dropout 0.2 --backward "${s[@]}"
    run "p6-align-s$i" phase6_extensions --causal-align bottom-right --causal "${s[@]}"
done
run p6-varlen phase6_extensions --seqlens 17,64,3 --H 2 --D 32
run p6-varlen-causal phase6_extensions --seqlens 40,9 --H 3 --D 64 --causal
run p6-splitkv phase6_extensions --B 2 --H 4 --Sq 1 --Sk 3000 --D 64
run p6-splitkv-causal phase6_extensions --B 1 --H 2 --Sq 8 --Sk 2100 --D 128 --causal
