# Phase 8: ring attention, against the float64 oracle on the whole sequence. Each shape runs the single-GPU kernel on
# the whole problem and the ring (--zigzag: the contiguous ring and the zigzag one; --backward: dQ, dK, dV too) on
# the CPU twin and on the GPU (the loopback transport: every rank on one GPU; without a GPU the cuda tests exit 77).
# Sequence lengths that do not divide by the ranks (nor by 2N for the zigzag), ranks with no rows (S < N), one rank,
# tile sizes the sequence does not fill, fp16/bf16 blocks (checked by the half-precision rule).
set(phase8_shapes
  "ranks1_B1_H2_S100_D64|--ranks|1|--H|2|--S|100|--D|64|--causal|--zigzag|--backward"
  "ranks2_B2_H2_S129_D64|--ranks|2|--B|2|--H|2|--S|129|--D|64"
  "ranks3_B1_H3_S1001_D64_causal|--ranks|3|--H|3|--S|1001|--D|64|--causal|--zigzag"
  "ranks4_B1_H2_S1001_D128_causal|--ranks|4|--H|2|--S|1001|--D|128|--causal|--zigzag"
  "ranks5_B2_H1_S333_D32|--ranks|5|--B|2|--H|1|--S|333|--D|32|--zigzag"
  "ranks4_B1_H2_S3_D64_empty_ranks_causal|--ranks|4|--H|2|--S|3|--D|64|--causal|--zigzag|--backward"
  "ranks8_B1_H2_S77_D64_causal|--ranks|8|--H|2|--S|77|--D|64|--causal|--zigzag"
  "backward_ranks3_B2_H2_S301_D64_causal|--ranks|3|--B|2|--H|2|--S|301|--D|64|--causal|--zigzag|--backward"
  "backward_ranks4_B1_H2_S250_D64|--ranks|4|--H|2|--S|250|--D|64|--backward"
  "backward_ranks2_B1_H2_S200_D128_causal_contiguous|--ranks|2|--H|2|--S|200|--D|128|--causal|--backward"
  "bf16_ranks4_B1_H2_S300_D64_causal|--dtype|bf16|--ranks|4|--H|2|--S|300|--D|64|--causal|--zigzag"
  "fp16_ranks3_B1_H2_S257_D128|--dtype|fp16|--ranks|3|--H|2|--S|257|--D|128"
  "bf16_backward_ranks3_B1_H2_S200_D64_causal|--dtype|bf16|--ranks|3|--H|2|--S|200|--D|64|--causal|--zigzag|--backward"
  "fp16_backward_ranks2_B1_H2_S130_D128|--dtype|fp16|--ranks|2|--H|2|--S|130|--D|128|--backward")
foreach(entry ${phase8_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase8_${impl}_${name} LABEL phase8 BINARY phase8_ring IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()

# CPU only: any D and any tile size, the scale that makes logits large.
set(phase8_cpu_shapes
  "ranks3_B1_H2_S100_D24_tile17x5_causal|--ranks|3|--H|2|--S|100|--D|24|--block-m|17|--block-n|5|--causal|--zigzag|--backward"
  "ranks6_B1_H1_S50_D7_tile8x3|--ranks|6|--H|1|--S|50|--D|7|--block-m|8|--block-n|3|--zigzag|--backward"
  "ranks4_B1_H2_S200_D64_scale4_causal|--ranks|4|--H|2|--S|200|--D|64|--scale|4|--causal|--zigzag|--backward")
foreach(entry ${phase8_cpu_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  fa_add_check_test(NAME phase8_cpu_${name} LABEL phase8 BINARY phase8_ring IMPL cpu ARGS ${parts})
endforeach()

# GPU only, the goal's shape at a size one GPU holds in every rank (the loopback), bf16 D = 128.
fa_add_check_test(NAME phase8_cuda_bf16_ranks4_B1_H8_S8192_D128_causal LABEL phase8 BINARY phase8_ring IMPL cuda BIG
                  ARGS --dtype bf16 --ranks 4 --H 8 --S 8192 --D 128 --causal --zigzag --backward --check-heads 1)

fa_add_bad_input_test(NAME phase8_bad_cross_attention LABEL phase8 BINARY phase8_ring ARGS --Sq 100 --Sk 200)
fa_add_bad_input_test(NAME phase8_bad_ranks_zero LABEL phase8 BINARY phase8_ring ARGS --ranks 0)
fa_add_bad_input_test(NAME phase8_bad_ranks_too_many LABEL phase8 BINARY phase8_ring ARGS --ranks 65)
fa_add_bad_input_test(NAME phase8_bad_ranks_text LABEL phase8 BINARY phase8_ring ARGS --ranks four)
fa_add_bad_input_test(NAME phase8_bad_ranks_missing LABEL phase8 BINARY phase8_ring ARGS --ranks)
fa_add_bad_input_test(NAME phase8_bad_transport LABEL phase8 BINARY phase8_ring ARGS --transport carrier-pigeon)
fa_add_bad_input_test(NAME phase8_bad_half_head_dim LABEL phase8 BINARY phase8_ring ARGS --impl cuda --dtype bf16 --D 32)
fa_add_bad_input_test(NAME phase8_bad_backward_tiles LABEL phase8 BINARY phase8_ring
                      ARGS --impl cuda --backward --block-m 128 --block-n 64)

# The schedule figures of docs/10-ring.md are what phase8_ring/ring_schedule prints today.
foreach(variant "contiguous_causal|--causal" "zigzag_causal|--causal|--zigzag")
  string(REPLACE "|" ";" parts "${variant}")
  list(POP_FRONT parts name)
  add_test(NAME phase8_schedule_figure_${name}
           COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:ring_schedule> "-DARGS=${parts}"
                   -DEXPECTED=${CMAKE_SOURCE_DIR}/docs/figures/ring-schedule-${name}.txt
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_same_output.cmake)
  set_tests_properties(phase8_schedule_figure_${name} PROPERTIES LABELS "phase8;cpu")
endforeach()

# NCCL between GPUs, where the build has NCCL and the machine has the GPUs (otherwise skipped, exit 77).
foreach(ranks 2 4 8)
  fa_add_check_test(NAME phase8_cuda_nccl_ranks${ranks}_B1_H2_S1001_D64_causal LABEL phase8 BINARY phase8_ring
                    IMPL cuda ARGS --transport nccl --ranks ${ranks} --H 2 --S 1001 --D 64 --causal --zigzag --backward)
endforeach()
fa_add_check_test(NAME phase8_cuda_nccl_ranks2_bf16_B1_H2_S300_D128 LABEL phase8 BINARY phase8_ring IMPL cuda
                  ARGS --transport nccl --ranks 2 --dtype bf16 --H 2 --S 300 --D 128 --causal --zigzag --backward)
fa_add_check_test(NAME phase8_cuda_nccl_ranks4_bf16_B1_H2_S1001_D128 LABEL phase8 BINARY phase8_ring IMPL cuda
                  ARGS --transport nccl --ranks 4 --dtype bf16 --H 2 --S 1001 --D 128 --causal --zigzag --backward)

# --timeline: every GPU ring row run once more with the transport's trace on, then tools/plot_ring_timeline.py reads
# the CSV back and checks it (every traced row has every rank, each with its blocks; every transfer's end after its
# start) before it draws it. With the loopback on one GPU, and over NCCL where the machine has the GPUs.
foreach(transport loopback nccl)
  set(csv ${CMAKE_CURRENT_BINARY_DIR}/phase8_timeline_${transport}.csv)
  add_test(NAME phase8_cuda_timeline_${transport}
           COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:phase8_ring> --impl cuda --transport ${transport} --ranks 2
                   --dtype bf16 --H 2 --S 300 --D 64 --causal --zigzag --backward --iters 1 --warmup 0
                   --timeline ${csv})
  set_tests_properties(phase8_cuda_timeline_${transport} PROPERTIES LABELS "phase8;gpu" SKIP_RETURN_CODE 77
                       FIXTURES_SETUP phase8_timeline_${transport})
  if(Python3_Interpreter_FOUND)
    # Skipped (77) where the GPU run was: it then wrote no CSV.
    add_test(NAME phase8_cuda_timeline_${transport}_plot
             COMMAND sh -c "[ -f \"$0\" ] || { echo 'skipped: no timeline (the GPU run was skipped)'; exit 77; }; exec \"$@\""
                     ${csv} ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/plot_ring_timeline.py ${csv} --ranks 2
                     --rows 3 -o ${CMAKE_CURRENT_BINARY_DIR}/phase8_timeline_${transport}.png)
    set_tests_properties(phase8_cuda_timeline_${transport}_plot PROPERTIES LABELS "phase8;gpu" SKIP_RETURN_CODE 77
                         FIXTURES_REQUIRED phase8_timeline_${transport})
  endif()
endforeach()
fa_add_bad_input_test(NAME phase8_bad_timeline_cpu LABEL phase8 BINARY phase8_ring STDERR "--timeline"
                      ARGS --impl cpu --timeline timeline.csv)
fa_add_bad_input_test(NAME phase8_bad_timeline_missing LABEL phase8 BINARY phase8_ring STDERR "--timeline"
                      ARGS --timeline)

# --time-only (the big timing runs, whose float64 check would take longer than the run): it runs and times every row.
add_test(NAME phase8_cpu_time_only COMMAND phase8_ring --impl cpu --time-only --iters 1 --warmup 0 --ranks 3 --H 1
                                           --S 100 --causal --zigzag --backward)
set_tests_properties(phase8_cpu_time_only PROPERTIES LABELS "phase8;cpu" PASS_REGULAR_EXPRESSION "zigzag bwd 3 ranks")

# The forwards that merge partials (phase 6's split-KV decoding, phase 8's ring, contiguous and zigzag) at large
# logits: FlashAttention's 2x rule against standard attention in float32 and LSE within one ulp, on four seeds of
# four shapes each (test_large_logits_ext.c; test_large_logits.c does phases 3 and 4).
add_executable(test_large_logits_ext test_large_logits_ext.c)
target_link_libraries(test_large_logits_ext PRIVATE phase6_extensions_kernels phase8_ring_kernels)
add_test(NAME phase8_cpu_large_logits_merges COMMAND test_large_logits_ext cpu)
set_tests_properties(phase8_cpu_large_logits_merges PROPERTIES LABELS "phase6;phase8;cpu")
add_test(NAME phase8_cuda_large_logits_merges COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_large_logits_ext> cuda)
set_tests_properties(phase8_cuda_large_logits_merges PROPERTIES LABELS "phase6;phase8;gpu" SKIP_RETURN_CODE 77)
