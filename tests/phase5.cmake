# Phase 5: how FlashAttention gets fast (forward), CPU and CUDA, against the float64 oracle.
# Every run of the driver checks every row it runs, O and LSE: step 1 (register tiles), phase 3 step 3 and, on the
# CPU where a BLAS was found, naive attention with BLAS.
# Shapes: B and H > 1; Sq and Sk in {1, 17, 100, 500, 1000}, Sq != Sk both ways; D in {16, 32, 64, 128} causal and not
# (the CPU also odd D); the three CUDA tiles 128x64 (default), 64x64 and 64x32, and any tile on the CPU (ragged tiles,
# tiles of one row, tiles far larger than S); large logits.
set(phase5_shapes
  "B2_H3_S1_D16|--B|2|--H|3|--S|1|--D|16"
  "B2_H2_S17_D32_causal|--B|2|--H|2|--S|17|--D|32|--causal"
  "B2_H2_Sq17_Sk100_D64|--B|2|--H|2|--Sq|17|--Sk|100|--D|64"
  "B2_H2_Sq100_Sk17_D128_causal|--B|2|--H|2|--Sq|100|--Sk|17|--D|128|--causal"
  "B2_H2_Sq100_Sk17_D16_tile64x32|--B|2|--H|2|--Sq|100|--Sk|17|--D|16|--block-m|64|--block-n|32"
  "B2_H2_Sq17_Sk100_D128_causal_tile64x64|--B|2|--H|2|--Sq|17|--Sk|100|--D|128|--causal|--block-m|64|--block-n|64"
  "B1_H2_S1000_D64|--B|1|--H|2|--S|1000|--D|64"
  "B1_H2_S1000_D128_causal|--B|1|--H|2|--S|1000|--D|128|--causal"
  "B2_H2_S500_D32_tile64x64|--B|2|--H|2|--S|500|--D|32|--block-m|64|--block-n|64"
  "B2_H2_S500_D16_causal_tile64x32|--B|2|--H|2|--S|500|--D|16|--causal|--block-m|64|--block-n|32"
  "B2_H2_Sq1000_Sk500_D64_causal|--B|2|--H|2|--Sq|1000|--Sk|500|--D|64|--causal"
  "B1_H3_Sq100_Sk1000_D128_tile64x32|--B|1|--H|3|--Sq|100|--Sk|1000|--D|128|--block-m|64|--block-n|32"
  "B1_H2_Sq500_Sk1000_D32_causal|--B|1|--H|2|--Sq|500|--Sk|1000|--D|32|--causal"
  "B3_H1_Sq1_Sk1000_D64_causal|--B|3|--H|1|--Sq|1|--Sk|1000|--D|64|--causal"
  "B1_H2_Sq1000_Sk1_D128|--B|1|--H|2|--Sq|1000|--Sk|1|--D|128"
  "B1_H2_S500_D64_logits80|--B|1|--H|2|--S|500|--D|64|--scale|8"
  "B1_H2_S300_D128_causal_logits100|--B|1|--H|2|--S|300|--D|128|--causal|--scale|20")
foreach(entry ${phase5_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase5_${impl}_${name} LABEL phase5 BINARY phase5_tensor_cores IMPL ${impl}
                      ARGS --step 1 ${parts})
  endforeach()
endforeach()

# CPU only: any D and any tile size, including tiles of one row and tiles far larger than S.
set(phase5_cpu_shapes
  "B2_H2_Sq33_Sk20_D3_tile1x1|--B|2|--H|2|--Sq|33|--Sk|20|--D|3|--block-m|1|--block-n|1"
  "B1_H2_S128_D80_tile300x700_causal|--B|1|--H|2|--S|128|--D|80|--block-m|300|--block-n|700|--causal"
  "B2_H1_Sq500_Sk128_D24_tile17x5|--B|2|--H|1|--Sq|500|--Sk|128|--D|24|--block-m|17|--block-n|5"
  "B1_H2_Sq128_Sk500_D48_tile40x24_causal|--B|1|--H|2|--Sq|128|--Sk|500|--D|48|--block-m|40|--block-n|24|--causal")
foreach(entry ${phase5_cpu_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  fa_add_check_test(NAME phase5_cpu_${name} LABEL phase5 BINARY phase5_tensor_cores IMPL cpu ARGS --step 1 ${parts})
endforeach()

# GPU only, the benchmark shapes (the CPU would take minutes): too large for the compute-sanitizer sweeps.
foreach(D 64 128)
  fa_add_check_test(NAME phase5_cuda_B4_H16_S4096_D${D} LABEL phase5 BINARY phase5_tensor_cores IMPL cuda BIG
                    ARGS --step 1 --B 4 --H 16 --S 4096 --D ${D} --check-heads 2)
  fa_add_check_test(NAME phase5_cuda_B4_H16_S4096_D${D}_causal LABEL phase5 BINARY phase5_tensor_cores IMPL cuda BIG
                    ARGS --step 1 --B 4 --H 16 --S 4096 --D ${D} --causal --check-heads 2)
endforeach()

# The naive BLAS row: checked (O and LSE) where a BLAS was found; otherwise left out with a note, never a failure.
if(TARGET phase1_naive_blas)
  add_test(NAME phase5_naive_blas_row COMMAND phase5_tensor_cores --impl cpu --step 1 --B 2 --H 2 --Sq 300 --Sk 200
                                              --D 64 --causal --iters 0)
  set_tests_properties(phase5_naive_blas_row PROPERTIES LABELS "phase5;cpu"
                       PASS_REGULAR_EXPRESSION "naive BLAS [(][A-Za-z]+[)] +cpu +LSE [^\n]* PASS" FAIL_REGULAR_EXPRESSION "FAIL")
else()
  add_test(NAME phase5_naive_blas_row_skipped COMMAND phase5_tensor_cores --impl cpu --step 1 --S 100 --iters 0)
  set_tests_properties(phase5_naive_blas_row_skipped PROPERTIES LABELS "phase5;cpu"
                       PASS_REGULAR_EXPRESSION "naive BLAS row skipped" FAIL_REGULAR_EXPRESSION "FAIL")
endif()

# Bad input: one line on stderr, exit status 2, before any work.
fa_add_bad_input_test(NAME phase5_bad_step_6 LABEL phase5 BINARY phase5_tensor_cores ARGS --step 6)
fa_add_bad_input_test(NAME phase5_bad_step_0 LABEL phase5 BINARY phase5_tensor_cores ARGS --step 0)
fa_add_bad_input_test(NAME phase5_bad_step_text LABEL phase5 BINARY phase5_tensor_cores ARGS --step one)
fa_add_bad_input_test(NAME phase5_bad_D_cuda LABEL phase5 BINARY phase5_tensor_cores ARGS --impl cuda --D 48)
fa_add_bad_input_test(NAME phase5_bad_D_cuda_default_impl LABEL phase5 BINARY phase5_tensor_cores ARGS --D 24)
fa_add_bad_input_test(NAME phase5_bad_tiles_cuda LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --impl cuda --block-m 32 --block-n 32)
fa_add_bad_input_test(NAME phase5_bad_tiles_cuda_128x32 LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --block-m 128 --block-n 32)
fa_add_bad_input_test(NAME phase5_bad_block_zero LABEL phase5 BINARY phase5_tensor_cores ARGS --impl cpu --block-m 0)
fa_add_bad_input_test(NAME phase5_bad_H_zero LABEL phase5 BINARY phase5_tensor_cores ARGS --H 0)
fa_add_bad_input_test(NAME phase5_bad_Sq_negative LABEL phase5 BINARY phase5_tensor_cores ARGS --impl cpu --Sq -3)
include(${CMAKE_CURRENT_SOURCE_DIR}/phase5_half.cmake)   # steps 2 to 4: fp16/bf16 on tensor cores

# Step 5, the float32 register-tiled backward: checked against the float64 oracle beside phase 4's backward, causal
# and not, odd sizes and cross attention; --step 5 with a half type is refused.
foreach(args "--B 2 --H 3 --S 200 --D 64" "--B 1 --H 2 --Sq 77 --Sk 300 --D 40 --causal" "--B 1 --H 2 --S 257 --D 128 --causal --block-m 32 --block-n 48")
  string(REPLACE " " ";" arg_list "${args}")
  string(REGEX REPLACE "[^A-Za-z0-9]+" "_" name "${args}")
  add_test(NAME phase5_step5_f32_backward${name} COMMAND phase5_tensor_cores --impl cpu --step 5 --iters 0 ${arg_list})
  set_tests_properties(phase5_step5_f32_backward${name} PROPERTIES LABELS "phase5;cpu"
                       PASS_REGULAR_EXPRESSION "step 5 bwd atomic fp32 cpu +dV [^\n]* PASS" FAIL_REGULAR_EXPRESSION "FAIL")
endforeach()
fa_add_bad_input_test(NAME phase5_bad_step5_half LABEL phase5 BINARY phase5_tensor_cores ARGS --step 5 --dtype bf16)
