# Phase 7: the forward on Hopper (sm_90a), every step against the float64 oracle by the half-precision rule, beside
# phase 5 step 3 (its CPU row is the twin every phase 7 step shares). The GPU tests exit 77 (skipped) on a machine
# without a Hopper GPU, or where the build has no sm_90.
# Shapes: fp16 and bf16; D 64 and 128; Sq != Sk both ways; lengths one past a tile; a single query row; causal with
# Sq > Sk and Sq < Sk; the tiles 128x64 (default), 64x64 (steps 1 and 2), 128x128 and 192x64/192x128 (steps 4c
# to 4f, D = 64).
set(phase7_shapes
  "fp16_B2_H3_S1_D64|--dtype|fp16|--B|2|--H|3|--S|1|--D|64"
  "bf16_B2_H2_Sq130_Sk100_D64_causal|--dtype|bf16|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--causal"
  "fp16_B1_H3_Sq100_Sk130_D128|--dtype|fp16|--B|1|--H|3|--Sq|100|--Sk|130|--D|128"
  "bf16_B3_H1_Sq1_Sk1000_D128_causal|--dtype|bf16|--B|3|--H|1|--Sq|1|--Sk|1000|--D|128|--causal"
  "fp16_B1_H2_Sq1000_Sk129_D64_causal_tile128x128|--dtype|fp16|--B|1|--H|2|--Sq|1000|--Sk|129|--D|64|--causal|--block-m|128|--block-n|128"
  "bf16_B1_H2_Sq129_Sk1000_D128_tile128x128|--dtype|bf16|--B|1|--H|2|--Sq|129|--Sk|1000|--D|128|--block-m|128|--block-n|128"
  "bf16_B2_H2_S257_D128_causal_tile128x128|--dtype|bf16|--B|2|--H|2|--S|257|--D|128|--causal|--block-m|128|--block-n|128"
  "fp16_B1_H2_S500_D64_logits60|--dtype|fp16|--B|1|--H|2|--S|500|--D|64|--scale|8")
foreach(entry ${phase7_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase7_${impl}_${name} LABEL phase7 BINARY phase7_hopper IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()
# Steps 1 and 2 also have 64 x 64 tiles (one consumer warpgroup).
fa_add_check_test(NAME phase7_cuda_step1_fp16_B2_H2_Sq300_Sk200_D64_causal_tile64x64 LABEL phase7 BINARY phase7_hopper
                  IMPL cuda ARGS --step 1 --dtype fp16 --B 2 --H 2 --Sq 300 --Sk 200 --D 64 --causal --block-m 64
                  --block-n 64)
fa_add_check_test(NAME phase7_cuda_step2_bf16_B2_H2_Sq200_Sk300_D128_tile64x64 LABEL phase7 BINARY phase7_hopper
                  IMPL cuda ARGS --step 2 --dtype bf16 --B 2 --H 2 --Sq 200 --Sk 300 --D 128 --block-m 64 --block-n 64)
# Steps 4c to 4j also have 192-row tiles at D = 64 (three consumer warpgroups); --step 4 runs them (steps 4 to 4b,
# whose tiles are 128-row, are left out with a note), beside the CPU twin at the same tiles.
set(phase7_192_shapes
  "bf16_B2_H2_Sq1000_Sk129_D64_causal_tile192x128|--dtype|bf16|--B|2|--H|2|--Sq|1000|--Sk|129|--D|64|--causal|--block-m|192|--block-n|128"
  "fp16_B1_H2_Sq129_Sk1000_D64_tile192x64|--dtype|fp16|--B|1|--H|2|--Sq|129|--Sk|1000|--D|64|--block-m|192|--block-n|64"
  "bf16_B2_H3_S1_D64_tile192x128|--dtype|bf16|--B|2|--H|3|--S|1|--D|64|--block-m|192|--block-n|128"
  "fp16_B1_H2_S385_D64_causal_tile192x64|--dtype|fp16|--B|1|--H|2|--S|385|--D|64|--causal|--block-m|192|--block-n|64")
foreach(entry ${phase7_192_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase7_${impl}_step4_${name} LABEL phase7 BINARY phase7_hopper IMPL ${impl}
                      ARGS --step 4 ${parts})
  endforeach()
endforeach()
# More tiles (231) than an H100 or H200 holds blocks, so that the blocks of steps 4f to 4j take two each: the GPU
# rows only (the CPU twin's code is the same at the smaller shapes above).
fa_add_check_test(NAME phase7_cuda_step4_bf16_B3_H11_Sq1153_Sk1000_D64_causal_tile192x128 LABEL phase7 BINARY
                  phase7_hopper IMPL cuda ARGS --step 4 --dtype bf16 --B 3 --H 11 --Sq 1153 --Sk 1000 --D 64 --causal
                  --block-m 192 --block-n 128)
# The benchmark shape, every step (too large for the compute-sanitizer sweeps).
foreach(D 64 128)
  fa_add_check_test(NAME phase7_cuda_bf16_B4_H16_S4096_D${D}_causal_tile128x128 LABEL phase7 BINARY phase7_hopper
                    IMPL cuda BIG ARGS --dtype bf16 --B 4 --H 16 --S 4096 --D ${D} --causal --block-m 128
                    --block-n 128 --check-heads 2)
endforeach()

# Bad input: one line, exit 2, whatever the machine.
fa_add_bad_input_test(NAME phase7_bad_fp32 LABEL phase7 BINARY phase7_hopper ARGS --B 1 --S 64 --D 64)
fa_add_bad_input_test(NAME phase7_bad_tiles LABEL phase7 BINARY phase7_hopper
                      ARGS --impl cuda --dtype fp16 --step 3 --S 64 --D 64 --block-m 64 --block-n 64)
fa_add_bad_input_test(NAME phase7_bad_step LABEL phase7 BINARY phase7_hopper ARGS --dtype fp16 --step 7 --S 64 --D 64)
# 192-row tiles exist at D = 64 only: no step 4 kernel has them at D = 128.
fa_add_bad_input_test(NAME phase7_bad_tiles_192_d128 LABEL phase7 BINARY phase7_hopper
                      ARGS --impl cuda --dtype bf16 --step 4 --S 64 --D 128 --block-m 192 --block-n 128)

# The LSE at large logits (q, k ~ 8 * randn): every step by the half-precision rule, several seeds and shapes (C only;
# built where the kernels are, exits 77 without a Hopper GPU).
if(TARGET phase7_hopper_kernels)
  add_executable(test_hopper_large_logits test_hopper_large_logits.c)
  target_link_libraries(test_hopper_large_logits PRIVATE phase7_hopper_kernels)
  add_test(NAME phase7_cuda_large_logits COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_hopper_large_logits> cuda)
  set_tests_properties(phase7_cuda_large_logits PROPERTIES LABELS "phase7;gpu" SKIP_RETURN_CODE 77)
  # Steps 4f to 4j (persistent) against step 4e, bit for bit, on shapes of up to 320 tiles (more than the GPU holds
  # blocks).
  add_executable(test_hopper_persistent test_hopper_persistent.c)
  target_link_libraries(test_hopper_persistent PRIVATE phase7_hopper_kernels)
  add_test(NAME phase7_cuda_persistent COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_hopper_persistent> cuda)
  set_tests_properties(phase7_cuda_persistent PROPERTIES LABELS "phase7;gpu" SKIP_RETURN_CODE 77)
endif()

# The timeline build's CSV writer and its chart, without a GPU: made-up events written and read back, then drawn
# (tools/plot_timeline.py; skipped without matplotlib). The driver refuses --timeline in the release build.
add_executable(test_hopper_timeline test_hopper_timeline.c)
target_link_libraries(test_hopper_timeline PRIVATE phase7_timeline_csv)
add_test(NAME phase7_timeline_csv COMMAND test_hopper_timeline ${CMAKE_CURRENT_BINARY_DIR}/phase7_timeline_test.csv)
set_tests_properties(phase7_timeline_csv PROPERTIES LABELS "phase7;cpu" FIXTURES_SETUP phase7_timeline_csv)
if(Python3_Interpreter_FOUND)
  add_test(NAME phase7_timeline_plot
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/plot_timeline.py
                   ${CMAKE_CURRENT_BINARY_DIR}/phase7_timeline_test.csv -o ${CMAKE_CURRENT_BINARY_DIR}/phase7_timeline_test.png)
  set_tests_properties(phase7_timeline_plot PROPERTIES LABELS "phase7;cpu" FIXTURES_REQUIRED phase7_timeline_csv
                       SKIP_RETURN_CODE 77)
endif()
fa_add_bad_input_test(NAME phase7_bad_timeline LABEL phase7 BINARY phase7_hopper
                      STDERR "timeline build" ARGS --dtype fp16 --S 64 --D 64 --timeline timeline.csv)

# Step 6, the backward: phase 5 step 4's CPU twin and GPU kernels beside step 6's (wgmma), both dQ variants, every
# gradient by the half-precision rule for gradients (3x a same-precision straightforward backward) on odd shapes:
# Sq != Sk both ways, lengths one past a tile, one query row, causal with Sq > Sk; D 64 and 128; fp16 and bf16.
set(phase7_backward_shapes
  "fp16_B2_H2_Sq130_Sk100_D64_causal|--dtype|fp16|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--causal"
  "bf16_B1_H3_Sq100_Sk130_D128|--dtype|bf16|--B|1|--H|3|--Sq|100|--Sk|130|--D|128"
  "bf16_B2_H1_S65_D64_causal|--dtype|bf16|--B|2|--H|1|--S|65|--D|64|--causal"
  "fp16_B1_H2_Sq1_Sk129_D128|--dtype|fp16|--B|1|--H|2|--Sq|1|--Sk|129|--D|128"
  "fp16_B1_H2_Sq257_Sk64_D128_causal|--dtype|fp16|--B|1|--H|2|--Sq|257|--Sk|64|--D|128|--causal")
foreach(entry ${phase7_backward_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase7_${impl}_backward_${name} LABEL phase7 BINARY phase7_hopper IMPL ${impl}
                      ARGS --step 6 --dq both ${parts})
  endforeach()
endforeach()
fa_add_bad_input_test(NAME phase7_bad_dq_forward LABEL phase7 BINARY phase7_hopper
                      ARGS --dtype fp16 --step 3 --dq atomic --S 64 --D 64)
# The rule on several problems, and two deterministic runs give the same bits (GPU only; exits 77 elsewhere).
if(TARGET phase7_hopper_kernels)
  add_executable(test_hopper_backward test_hopper_backward.c)
  target_link_libraries(test_hopper_backward PRIVATE phase7_hopper_kernels)
  add_test(NAME phase7_cuda_backward_rule_determinism
           COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_hopper_backward> cuda)
  set_tests_properties(phase7_cuda_backward_rule_determinism PROPERTIES LABELS "phase7;gpu" SKIP_RETURN_CODE 77)
endif()
