# Phase 5 steps 2 to 4: tensor cores in fp16 and bf16, CPU twins and CUDA, each run checked by the half-precision
# rule (common/fa_driver.c, fa_make_half_rule): at most 2x the error of the straightforward implementation at the same
# precision, measured in the same run, plus the float32 tolerance (3x for step 4's gradients,
# fa_make_half_backward_rule). A run without --step runs steps 1 to 4 and the baselines on the same rounded inputs
# (the float32 rows keep the float32 tolerance).
# Shapes: B and H > 1; S in {1, 17, 100, 130, 1000}, Sq != Sk both ways; D = 64 and 128 (the CPU also other D);
# causal and not; the CUDA tiles 128x64 (default) and 64x64, any tile on the CPU; large logits.
set(phase5_half_shapes
  "B2_H3_S1_D64|--B|2|--H|3|--S|1|--D|64"
  "B2_H2_S17_D128_causal|--B|2|--H|2|--S|17|--D|128|--causal"
  "B2_H2_Sq100_Sk130_D64|--B|2|--H|2|--Sq|100|--Sk|130|--D|64"
  "B2_H2_Sq130_Sk100_D128_causal|--B|2|--H|2|--Sq|130|--Sk|100|--D|128|--causal"
  "B2_H2_Sq130_Sk100_D64_causal_tile64x64|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--causal|--block-m|64|--block-n|64"
  "B2_H2_Sq100_Sk130_D128_tile64x64|--B|2|--H|2|--Sq|100|--Sk|130|--D|128|--block-m|64|--block-n|64"
  "B1_H2_S1000_D64_causal|--B|1|--H|2|--S|1000|--D|64|--causal"
  "B1_H2_S1000_D128|--B|1|--H|2|--S|1000|--D|128"
  "B3_H1_Sq1_Sk1000_D64_causal|--B|3|--H|1|--Sq|1|--Sk|1000|--D|64|--causal"
  "B1_H2_Sq1000_Sk1_D128|--B|1|--H|2|--Sq|1000|--Sk|1|--D|128"
  "B1_H2_S300_D64_causal_logits80|--B|1|--H|2|--S|300|--D|64|--causal|--scale|8")
foreach(entry ${phase5_half_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(dtype fp16 bf16)
    foreach(impl cpu cuda)
      fa_add_check_test(NAME phase5_${impl}_${dtype}_${name} LABEL phase5 BINARY phase5_tensor_cores IMPL ${impl}
                        ARGS --dtype ${dtype} ${parts})
    endforeach()
  endforeach()
endforeach()

# Step 3 alone (--step 3: the rows 3a swizzle, 3b cp.async, 3 pipeline and 3c to 3j, one technique each; 3a, 3b and
# 3c to 3j are GPU rows, their CPU twins are steps 2 and 3) on the odd shapes: lengths one past a tile, Sq != Sk both
# ways, one query row, causal with Sq > Sk, every CUDA tile (128 x 128: steps 3i and 3j alone, the other GPU rows
# skipped).
set(phase5_step3_shapes
  "B2_H2_Sq129_Sk65_D64_causal|--B|2|--H|2|--Sq|129|--Sk|65|--D|64|--causal"
  "B2_H2_Sq65_Sk129_D128|--B|2|--H|2|--Sq|65|--Sk|129|--D|128"
  "B2_H2_Sq129_Sk65_D128_causal_tile64x64|--B|2|--H|2|--Sq|129|--Sk|65|--D|128|--causal|--block-m|64|--block-n|64"
  "B3_H1_Sq1_Sk129_D64|--B|3|--H|1|--Sq|1|--Sk|129|--D|64"
  "B2_H2_Sq257_Sk129_D64_causal_tile128x128|--B|2|--H|2|--Sq|257|--Sk|129|--D|64|--causal|--block-m|128|--block-n|128"
  "B2_H2_Sq129_Sk300_D64_tile128x128|--B|2|--H|2|--Sq|129|--Sk|300|--D|64|--block-m|128|--block-n|128"
  "B2_H2_Sq300_Sk129_D128_tile128x128|--B|2|--H|2|--Sq|300|--Sk|129|--D|128|--block-m|128|--block-n|128"
  "B3_H1_Sq1_Sk257_D64_causal_tile128x128|--B|3|--H|1|--Sq|1|--Sk|257|--D|64|--causal|--block-m|128|--block-n|128")
foreach(entry ${phase5_step3_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(dtype fp16 bf16)
    foreach(impl cpu cuda)
      fa_add_check_test(NAME phase5_${impl}_${dtype}_step3_${name} LABEL phase5 BINARY phase5_tensor_cores IMPL ${impl}
                        ARGS --step 3 --dtype ${dtype} ${parts})
    endforeach()
  endforeach()
endforeach()

# CPU only: D that the GPU kernels do not take, and any tile size (steps 2 and 3 only: step 1's CUDA list is moot).
foreach(dtype fp16 bf16)
  fa_add_check_test(NAME phase5_cpu_${dtype}_B2_H2_Sq33_Sk20_D40_tile17x5_causal LABEL phase5 BINARY phase5_tensor_cores
                    IMPL cpu ARGS --dtype ${dtype} --B 2 --H 2 --Sq 33 --Sk 20 --D 40 --block-m 17 --block-n 5 --causal)
  fa_add_check_test(NAME phase5_cpu_${dtype}_B1_H2_S130_D96_tile300x700 LABEL phase5 BINARY phase5_tensor_cores
                    IMPL cpu ARGS --dtype ${dtype} --B 1 --H 2 --S 130 --D 96 --block-m 300 --block-n 700)
endforeach()

# GPU only, the benchmark shapes: steps 1 to 4 at B=4 H=16 S=4096, fp16 and bf16, D = 64 and 128, causal and not.
foreach(dtype fp16 bf16)
  foreach(D 64 128)
    foreach(causal "" "--causal")
      set(name phase5_cuda_${dtype}_B4_H16_S4096_D${D})
      if(causal)
        set(name ${name}_causal)
      endif()
      fa_add_check_test(NAME ${name} LABEL phase5 BINARY phase5_tensor_cores IMPL cuda BIG
                        ARGS --dtype ${dtype} --B 4 --H 16 --S 4096 --D ${D} ${causal} --check-heads 2)
      # With 128 x 128 tiles --step 3 runs steps 3i and 3j, the two compiled for them.
      fa_add_check_test(NAME ${name}_step3ij_tile128x128 LABEL phase5 BINARY phase5_tensor_cores IMPL cuda BIG
                        ARGS --step 3 --block-m 128 --block-n 128 --dtype ${dtype} --B 4 --H 16 --S 4096 --D ${D}
                             ${causal} --check-heads 2)
    endforeach()
  endforeach()
endforeach()

# The conversions (every fp16 and bf16 bit pattern, ties, a sweep of float32), their inlined form that step 4's CPU
# twin runs (the bits of the definition, computed in double), and the rule itself: the CPU twins pass it, and one
# element moved just past it, in O or in LSE, fails it.
add_executable(test_phase5_half test_phase5_half.c)
target_link_libraries(test_phase5_half PRIVATE phase5_kernels)
foreach(t convert inline rule)
  add_test(NAME phase5_half_${t} COMMAND test_phase5_half ${t})
  set_tests_properties(phase5_half_${t} PROPERTIES LABELS "phase5;cpu")
endforeach()

# Step 4, the backward (the runs above, without --step, run it too, beside the forward steps): --step 4 alone, both
# dQ variants, on the shapes that matter to its tiles: ragged Sq != Sk both ways, causal and not, D = 64 and 128,
# one query row or one key; the CPU on other tiles and D. The check is the rule for gradients (3x the straightforward
# backward at the same precision, fa_make_half_backward_rule).
set(phase5_backward_shapes
  "B2_H2_Sq130_Sk100_D64_causal|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--causal"
  "B2_H2_Sq100_Sk130_D64|--B|2|--H|2|--Sq|100|--Sk|130|--D|64"
  "B2_H2_Sq130_Sk100_D128|--B|2|--H|2|--Sq|130|--Sk|100|--D|128"
  "B2_H2_Sq100_Sk130_D128_causal|--B|2|--H|2|--Sq|100|--Sk|130|--D|128|--causal"
  "B1_H2_S256_D64_causal|--B|1|--H|2|--S|256|--D|64|--causal"
  "B3_H1_Sq1_Sk200_D64_causal|--B|3|--H|1|--Sq|1|--Sk|200|--D|64|--causal"
  "B1_H2_Sq200_Sk1_D128|--B|1|--H|2|--Sq|200|--Sk|1|--D|128"
  "B1_H2_S300_D64_causal_logits80|--B|1|--H|2|--S|300|--D|64|--causal|--scale|8")
foreach(entry ${phase5_backward_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(dtype fp16 bf16)
    foreach(impl cpu cuda)
      fa_add_check_test(NAME phase5_${impl}_${dtype}_backward_${name} LABEL phase5 BINARY phase5_tensor_cores
                        IMPL ${impl} ARGS --step 4 --dq both --dtype ${dtype} ${parts})
    endforeach()
  endforeach()
endforeach()
foreach(dtype fp16 bf16)
  fa_add_check_test(NAME phase5_cpu_${dtype}_backward_B2_H2_Sq33_Sk20_D40_tile17x5_causal LABEL phase5
                    BINARY phase5_tensor_cores IMPL cpu
                    ARGS --step 4 --dtype ${dtype} --B 2 --H 2 --Sq 33 --Sk 20 --D 40 --block-m 17 --block-n 5 --causal)
endforeach()
# --cpu-bf16 emulated: the bf16 passes (bf16_dot.h's layouts, each block in plain C) through the driver on any CPU,
# odd shapes and odd tiles; --cpu-bf16 fma: the float32 passes, which a CPU with bf16 units would not pick itself.
foreach(unit emulated fma)
  fa_add_check_test(NAME phase5_cpu_bf16_backward_${unit}_B2_H2_Sq33_Sk20_D40_tile17x5_causal LABEL phase5
                    BINARY phase5_tensor_cores IMPL cpu
                    ARGS --step 4 --dtype bf16 --cpu-bf16 ${unit} --B 2 --H 2 --Sq 33 --Sk 20 --D 40 --block-m 17
                         --block-n 5 --causal)
  fa_add_check_test(NAME phase5_cpu_bf16_backward_${unit}_B1_H2_Sq130_Sk100_D64 LABEL phase5
                    BINARY phase5_tensor_cores IMPL cpu
                    ARGS --step 4 --dq both --dtype bf16 --cpu-bf16 ${unit} --B 1 --H 2 --Sq 130 --Sk 100 --D 64)
endforeach()
# The benchmark shapes run step 4 too: the GPU tests of every step at B=4 H=16 S=4096 above.
# The rule for gradients passes the CPU twin (or the GPU kernels) and fails a planted element and a backward fed a
# log-sum-exp 0.02 off; the deterministic dQ gives the same bits on every run (test_phase5_backward.c).
add_executable(test_phase5_backward test_phase5_backward.c)
target_link_libraries(test_phase5_backward PRIVATE phase5_kernels)
add_test(NAME phase5_cpu_backward_rule_determinism COMMAND test_phase5_backward cpu)
set_tests_properties(phase5_cpu_backward_rule_determinism PROPERTIES LABELS "phase5;cpu")
add_test(NAME phase5_cuda_backward_rule_determinism
         COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_phase5_backward> cuda)
set_tests_properties(phase5_cuda_backward_rule_determinism PROPERTIES LABELS "phase5;gpu" SKIP_RETURN_CODE 77)

# Bad input: one line on stderr, exit status 2, before any work.
fa_add_bad_input_test(NAME phase5_bad_dtype LABEL phase5 BINARY phase5_tensor_cores ARGS --dtype fp8)
fa_add_bad_input_test(NAME phase5_bad_dtype_empty LABEL phase5 BINARY phase5_tensor_cores ARGS --dtype)
fa_add_bad_input_test(NAME phase5_bad_step2_fp32 LABEL phase5 BINARY phase5_tensor_cores ARGS --step 2)
fa_add_bad_input_test(NAME phase5_bad_step3_dtype_fp32 LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --step 3 --dtype fp32)
fa_add_bad_input_test(NAME phase5_bad_half_D32_cuda LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --impl cuda --dtype fp16 --step 2 --D 32)
fa_add_bad_input_test(NAME phase5_bad_half_tiles_cuda LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --impl cuda --dtype bf16 --step 3 --block-m 64 --block-n 32)
fa_add_bad_input_test(NAME phase5_bad_half_tiles_cuda_64x128 LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --impl cuda --dtype bf16 --step 3 --block-m 64 --block-n 128)
fa_add_bad_input_test(NAME phase5_bad_dtype_phase3 LABEL phase5 BINARY phase3_forward_4d ARGS --dtype fp16)
fa_add_bad_input_test(NAME phase5_bad_step4_fp32 LABEL phase5 BINARY phase5_tensor_cores ARGS --step 4)
fa_add_bad_input_test(NAME phase5_bad_step4_D32_cuda LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --impl cuda --dtype fp16 --step 4 --D 32)
fa_add_bad_input_test(NAME phase5_bad_dq_mode LABEL phase5 BINARY phase5_tensor_cores ARGS --dtype fp16 --step 4 --dq some)
fa_add_bad_input_test(NAME phase5_bad_cpu_bf16_unit LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --dtype bf16 --step 4 --cpu-bf16 tensor)
fa_add_bad_input_test(NAME phase5_bad_cpu_bf16_fp16 LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --dtype fp16 --step 4 --cpu-bf16 emulated)
fa_add_bad_input_test(NAME phase5_bad_cpu_bf16_forward LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --dtype bf16 --step 3 --cpu-bf16 emulated)
fa_add_bad_input_test(NAME phase5_bad_cpu_bf16_phase4 LABEL phase5 BINARY phase4_backward ARGS --cpu-bf16 amx)
fa_add_bad_input_test(NAME phase5_bad_dq_forward_step LABEL phase5 BINARY phase5_tensor_cores
                      ARGS --dtype fp16 --step 3 --dq atomic)

# Large logits (q, k with the spread of 8 * randn): steps 1 to 3, CPU and CUDA, fp16 and bf16 for the tensor-core
# steps, on four seeds of four shapes: FlashAttention's rule against the straightforward implementation at the same
# precision, and LSE within one unit in float32's last place (test_large_logits_tc.c).
add_executable(test_large_logits_tc test_large_logits_tc.c)
target_link_libraries(test_large_logits_tc PRIVATE phase5_kernels phase1_naive_kernels)
add_test(NAME phase5_cpu_large_logits COMMAND test_large_logits_tc cpu)
set_tests_properties(phase5_cpu_large_logits PROPERTIES LABELS "phase5;cpu")
add_test(NAME phase5_cuda_large_logits COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_large_logits_tc> cuda)
set_tests_properties(phase5_cuda_large_logits PROPERTIES LABELS "phase5;gpu" SKIP_RETURN_CODE 77)
