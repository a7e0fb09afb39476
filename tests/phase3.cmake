# Phase 3: the 4D forward in three steps (grid, causal pruning, LSE), CPU and CUDA, against the float64 oracle.
# Every run of the driver checks all steps at once: step 1, steps 2 and 3 both without and with the causal mask
# (each with its own oracle), and phase 1's naive version, O and (step 3, naive) LSE.
# Shapes: B and H > 1; Sq and Sk in {1, 17, 128, 500, 1000}, Sq != Sk both ways; D in {16, 32, 64, 128} (the CPU
# also odd D); tiles 64x32 (default), 64x64, 128x64 on the GPU and any size on the CPU, BLOCK_M != BLOCK_N; large
# logits. Strided (non-contiguous) views and the count of tiles the causal kernels skip have their own programs.
set(phase3_shapes
  "B2_H3_S1_D16|--B|2|--H|3|--S|1|--D|16"
  "B2_H2_S17_D32|--B|2|--H|2|--S|17|--D|32"
  "B2_H2_S128_D64_tile64x64|--B|2|--H|2|--S|128|--D|64|--block-m|64|--block-n|64"
  "B2_H2_S500_D128|--B|2|--H|2|--S|500|--D|128"
  "B1_H2_S1000_D64_tile128x64|--B|1|--H|2|--S|1000|--D|64|--block-m|128|--block-n|64"
  "B2_H2_Sq17_Sk500_D64|--B|2|--H|2|--Sq|17|--Sk|500|--D|64"
  "B2_H2_Sq500_Sk17_D32_tile128x64|--B|2|--H|2|--Sq|500|--Sk|17|--D|32|--block-m|128|--block-n|64"
  "B1_H3_Sq128_Sk1000_D16|--B|1|--H|3|--Sq|128|--Sk|1000|--D|16"
  "B1_H2_Sq1000_Sk128_D128_tile64x64|--B|1|--H|2|--Sq|1000|--Sk|128|--D|128|--block-m|64|--block-n|64"
  "B3_H1_Sq1_Sk1000_D64|--B|3|--H|1|--Sq|1|--Sk|1000|--D|64"
  "B1_H2_Sq1000_Sk1_D32|--B|1|--H|2|--Sq|1000|--Sk|1|--D|32"
  "B2_H2_Sq1000_Sk500_D64_causal|--B|2|--H|2|--Sq|1000|--Sk|500|--D|64|--causal"
  "B2_H2_Sq128_Sk500_D128_causal_tile128x64|--B|2|--H|2|--Sq|128|--Sk|500|--D|128|--causal|--block-m|128|--block-n|64"
  "B1_H2_S500_D64_logits80|--B|1|--H|2|--S|500|--D|64|--scale|8"
  "B1_H2_S300_D16_logits100_step3|--B|1|--H|2|--S|300|--D|16|--scale|20|--step|3"
  "B2_H2_S200_D32_step2_causal|--B|2|--H|2|--S|200|--D|32|--step|2|--causal")
foreach(entry ${phase3_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase3_${impl}_${name} LABEL phase3 BINARY phase3_forward_4d IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()

# CPU only: any D and any tile size, including tiles of one row and tiles far larger than S.
set(phase3_cpu_shapes
  "B2_H2_Sq33_Sk20_D3_tile1x1|--B|2|--H|2|--Sq|33|--Sk|20|--D|3|--block-m|1|--block-n|1"
  "B1_H2_S128_D80_tile300x700|--B|1|--H|2|--S|128|--D|80|--block-m|300|--block-n|700"
  "B2_H1_Sq500_Sk128_D24_tile17x5|--B|2|--H|1|--Sq|500|--Sk|128|--D|24|--block-m|17|--block-n|5"
  "B1_H2_Sq128_Sk500_D48_tile40x24_causal|--B|1|--H|2|--Sq|128|--Sk|500|--D|48|--block-m|40|--block-n|24|--causal")
foreach(entry ${phase3_cpu_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  fa_add_check_test(NAME phase3_cpu_${name} LABEL phase3 BINARY phase3_forward_4d IMPL cpu ARGS ${parts})
endforeach()

# GPU only, the benchmark shapes (the CPU would take minutes): too large for the compute-sanitizer sweeps.
fa_add_check_test(NAME phase3_cuda_B4_H16_S4096_D64 LABEL phase3 BINARY phase3_forward_4d IMPL cuda BIG
                  ARGS --B 4 --H 16 --S 4096 --D 64 --check-heads 2)
fa_add_check_test(NAME phase3_cuda_B4_H16_S4096_D128_tile64x64 LABEL phase3 BINARY phase3_forward_4d IMPL cuda BIG
                  ARGS --B 4 --H 16 --S 4096 --D 128 --block-m 64 --block-n 64 --check-heads 2)
# More heads than gridDim.y holds (65 535): the launchers launch twice (common/fa_contract.h, MAX_GRID_Y), and the oracle checks
# the first head and the last, which is in the second launch.
fa_add_check_test(NAME phase3_cuda_B1_H66000_S40_D16_grid_limit LABEL phase3 BINARY phase3_forward_4d IMPL cuda BIG
                  ARGS --B 1 --H 66000 --S 40 --D 16 --check-heads 2)

# Non-contiguous tensors passed as strided views ([B, S, H, D] buffers, padded rows, a transposed K on the CPU).
add_executable(test_phase3_strides test_phase3_strides.c)
target_link_libraries(test_phase3_strides PRIVATE phase3_forward_4d_kernels)
add_test(NAME phase3_strides_cpu COMMAND test_phase3_strides cpu)
set_tests_properties(phase3_strides_cpu PROPERTIES LABELS "phase3;cpu")
add_test(NAME phase3_strides_cuda COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_phase3_strides> cuda)
set_tests_properties(phase3_strides_cuda PROPERTIES LABELS "phase3;gpu" SKIP_RETURN_CODE 77)

# The causal kernels skip the tiles entirely in the future, and only those (counted by the CPU kernels).
add_executable(test_phase3_tiles test_phase3_tiles.c)
target_link_libraries(test_phase3_tiles PRIVATE phase3_forward_4d_kernels)
add_test(NAME phase3_tiles COMMAND test_phase3_tiles)
set_tests_properties(phase3_tiles PROPERTIES LABELS "phase3;cpu")

# The causal-stage figure's data comes from the kernels' rule: its summary line must match the count.
add_test(NAME phase3_causal_blocks COMMAND causal_blocks 256 256 64 32)
set_tests_properties(phase3_causal_blocks PROPERTIES LABELS "phase3;cpu"
                     PASS_REGULAR_EXPRESSION "# full 12 diagonal 8 future 12")

# Bad input: one line on stderr, exit status 2, before any work.
fa_add_bad_input_test(NAME phase3_bad_causal_step1 LABEL phase3 BINARY phase3_forward_4d ARGS --causal --step 1)
fa_add_bad_input_test(NAME phase3_bad_step_4 LABEL phase3 BINARY phase3_forward_4d ARGS --step 4)
fa_add_bad_input_test(NAME phase3_bad_step_0 LABEL phase3 BINARY phase3_forward_4d ARGS --step 0)
fa_add_bad_input_test(NAME phase3_bad_step_text LABEL phase3 BINARY phase3_forward_4d ARGS --step two)
fa_add_bad_input_test(NAME phase3_bad_D_cuda LABEL phase3 BINARY phase3_forward_4d ARGS --impl cuda --D 48)
fa_add_bad_input_test(NAME phase3_bad_D_cuda_default_impl LABEL phase3 BINARY phase3_forward_4d ARGS --D 24)
fa_add_bad_input_test(NAME phase3_bad_tiles_cuda LABEL phase3 BINARY phase3_forward_4d
                      ARGS --impl cuda --block-m 32 --block-n 32)
fa_add_bad_input_test(NAME phase3_bad_tiles_cuda_128x32 LABEL phase3 BINARY phase3_forward_4d
                      ARGS --block-m 128 --block-n 32)
fa_add_bad_input_test(NAME phase3_bad_block_zero LABEL phase3 BINARY phase3_forward_4d ARGS --impl cpu --block-n 0)
fa_add_bad_input_test(NAME phase3_bad_H_zero LABEL phase3 BINARY phase3_forward_4d ARGS --H 0)

# --save-dir saves the problem the flags describe: NumPy's own attention on the saved inputs agrees.
# With --compare-causal the flipped rows run too, and still only the problem asked for is saved.
fa_add_saved_numpy_tests(LABEL phase3 BINARY phase3_forward_4d ARGS --compare-causal)
