# Phase 4: the backward pass, CPU and CUDA, against the float64 oracle.
# Shapes as in phase 3: S=1, S=17, S=128, S=500 (multiples of no tile), Sq != Sk both ways, causal on and off, every
# CUDA head dim (16, 32, 64, 128), several tiles including BLOCK_M != BLOCK_N. Each run checks the forward (O, LSE),
# phase 1's naive backward, and both dQ variants (dQ, dK, dV) with the tolerance FA_TOL_BACKWARD (common/fa_verify.h).

# The deterministic dQ variant gives the same bits every run (CPU: 1, 2 and 3 threads, and a strided view; GPU: two
# runs). O and LSE come from the oracle, so this test needs only the backward.
add_executable(test_phase4_determinism test_phase4_determinism.c)
target_link_libraries(test_phase4_determinism PRIVATE phase4_backward_kernels)
add_test(NAME phase4_cpu_determinism COMMAND test_phase4_determinism cpu)
set_tests_properties(phase4_cpu_determinism PROPERTIES LABELS "phase4;cpu")
add_test(NAME phase4_cuda_determinism COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_phase4_determinism> cuda)
set_tests_properties(phase4_cuda_determinism PROPERTIES LABELS "phase4;gpu" SKIP_RETURN_CODE 77)

if(NOT TARGET phase4_backward)
  return()   # the driver and the gradient check need phase 3's forward (see phase4_backward/CMakeLists.txt)
endif()

# The whole float32 path (phase 3's forward, then the backward) against central finite differences of the float64
# oracle's loss sum(O * dO).
add_executable(test_phase4_gradcheck test_phase4_gradcheck.c)
target_link_libraries(test_phase4_gradcheck PRIVATE phase4_backward_kernels phase3_forward_4d_kernels)
add_test(NAME phase4_cpu_gradcheck COMMAND test_phase4_gradcheck cpu)
set_tests_properties(phase4_cpu_gradcheck PROPERTIES LABELS "phase4;cpu")
add_test(NAME phase4_cuda_gradcheck COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_phase4_gradcheck> cuda)
set_tests_properties(phase4_cuda_gradcheck PROPERTIES LABELS "phase4;gpu" SKIP_RETURN_CODE 77)

# The driver on each shape, CPU and CUDA (tiles from the CUDA list, fa_contract.h).
set(phase4_shapes
  "S1_D16|--B|2|--H|3|--S|1|--D|16"
  "S17_D32_causal|--B|2|--H|2|--S|17|--D|32|--causal"
  "S128_D64_m32n64|--B|1|--H|2|--S|128|--D|64|--block-m|32|--block-n|64"
  "S128_D64_causal_m64n32|--B|1|--H|2|--S|128|--D|64|--causal|--block-m|64|--block-n|32"
  "S500_D64_causal|--B|1|--H|2|--S|500|--D|64|--causal"
  "S500_D128_m32n64|--B|1|--H|2|--S|500|--D|128|--block-m|32|--block-n|64"
  "S500_D16_causal_m64n32|--B|1|--H|2|--S|500|--D|16|--causal|--block-m|64|--block-n|32"
  "Sq17_Sk100_D128_causal|--B|2|--H|2|--Sq|17|--Sk|100|--D|128|--causal"
  "Sq100_Sk17_D64_causal|--B|2|--H|2|--Sq|100|--Sk|17|--D|64|--causal"
  "Sq100_Sk17_D16|--B|2|--H|2|--Sq|100|--Sk|17|--D|16"
  "Sq33_Sk250_D32_m64n32|--B|3|--H|2|--Sq|33|--Sk|250|--D|32|--block-m|64|--block-n|32"
  "Sq250_Sk33_D32_causal_m32n64|--B|1|--H|3|--Sq|250|--Sk|33|--D|32|--causal|--block-m|32|--block-n|64"
  "Sq130_Sk300_D64_causal_det|--B|1|--H|2|--Sq|130|--Sk|300|--D|64|--causal|--dq|deterministic"
  "Sq300_Sk130_D128_atomic|--B|1|--H|2|--Sq|300|--Sk|130|--D|128|--dq|atomic")
foreach(entry ${phase4_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase4_${impl}_${name} LABEL phase4 BINARY phase4_backward IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()

# The CPU takes any head dim and any tiles: odd ones, many tiles per head, BLOCK_M != BLOCK_N.
fa_add_check_test(NAME phase4_cpu_S77_D48_causal_m7n5 LABEL phase4 BINARY phase4_backward IMPL cpu
                  ARGS --B 2 --H 2 --S 77 --D 48 --causal --block-m 7 --block-n 5)
fa_add_check_test(NAME phase4_cpu_Sq61_Sk130_D20_m16n48 LABEL phase4 BINARY phase4_backward IMPL cpu
                  ARGS --B 1 --H 3 --Sq 61 --Sk 130 --D 20 --block-m 16 --block-n 48)
fa_add_check_test(NAME phase4_cpu_Sq130_Sk61_D8_causal_m48n16 LABEL phase4 BINARY phase4_backward IMPL cpu
                  ARGS --B 1 --H 3 --Sq 130 --Sk 61 --D 8 --causal --block-m 48 --block-n 16)

# Bigger runs: many tiles per head, every thread busy (left out of the compute-sanitizer sweeps).
foreach(impl cpu cuda)
  fa_add_check_test(NAME phase4_${impl}_big_S1024_D64_causal LABEL phase4 BINARY phase4_backward IMPL ${impl} BIG
                    ARGS --B 2 --H 4 --S 1024 --D 64 --causal --check-heads 2)
  fa_add_check_test(NAME phase4_${impl}_big_Sq2000_Sk700_D128 LABEL phase4 BINARY phase4_backward IMPL ${impl} BIG
                    ARGS --B 1 --H 2 --Sq 2000 --Sk 700 --D 128 --check-heads 1)
endforeach()
# More heads than gridDim.y holds (65 535): both passes launch twice (common/fa_contract.h, MAX_GRID_Y), and the oracle checks
# the first head and the last, which is in the second launch.
fa_add_check_test(NAME phase4_cuda_B1_H66000_S40_D16_causal_grid_limit LABEL phase4 BINARY phase4_backward IMPL cuda
                  BIG ARGS --B 1 --H 66000 --S 40 --D 16 --causal --check-heads 2)

# Bad input: one line on stderr, exit status 2.
fa_add_bad_input_test(NAME phase4_bad_dq LABEL phase4 BINARY phase4_backward ARGS --dq sideways)
fa_add_bad_input_test(NAME phase4_bad_dq_missing LABEL phase4 BINARY phase4_backward ARGS --dq)
fa_add_bad_input_test(NAME phase4_bad_cuda_D LABEL phase4 BINARY phase4_backward ARGS --impl cuda --D 48)
fa_add_bad_input_test(NAME phase4_bad_cuda_tiles LABEL phase4 BINARY phase4_backward
                      ARGS --impl cuda --block-m 16 --block-n 16)
fa_add_bad_input_test(NAME phase4_bad_block_zero LABEL phase4 BINARY phase4_backward ARGS --impl cpu --block-n 0)
fa_add_bad_input_test(NAME phase4_bad_step LABEL phase4 BINARY phase4_backward ARGS --step 2)

# --save-dir writes do, dq, dk, dv besides the inputs and O, LSE; --load-dir reproduces the run bit for bit.
add_test(NAME phase4_save_load
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:phase4_backward> -DDIR=${CMAKE_CURRENT_BINARY_DIR}/phase4_save_load
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/save_load.cmake)
set_tests_properties(phase4_save_load PROPERTIES LABELS "phase4;cpu" FIXTURES_SETUP phase4_saved)
# The gradients of the saving run and of the loading run are the same files (at this shape each dQ row gets one
# addition per head even in the atomic variant, so both variants are reproducible here).
foreach(name do dq dk dv)
  add_test(NAME phase4_save_load_${name}
           COMMAND ${CMAKE_COMMAND} -E compare_files ${CMAKE_CURRENT_BINARY_DIR}/phase4_save_load/a/${name}.npy
                   ${CMAKE_CURRENT_BINARY_DIR}/phase4_save_load/b/${name}.npy)
  set_tests_properties(phase4_save_load_${name} PROPERTIES LABELS "phase4;cpu" FIXTURES_REQUIRED phase4_saved)
endforeach()
fa_add_saved_numpy_tests(LABEL phase4 BINARY phase4_backward)

# Large logits (q, k ~ 8 * randn: scores of a few hundred), where recomputing P from LSE loses accuracy unless the
# backward recomputes the forward's scores bit for bit and gets LSE back without loss (docs/04-backward.md): the flash
# rows must stay within FlashAttention's 2x / 3x of the naive rows, which keep their forward's P.
if(Python3_Interpreter_FOUND)
  foreach(impl cpu cuda)
    foreach(D 16 64)
      fa_device_label(${impl} device)
      add_test(NAME phase4_${impl}_large_logits_D${D}
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/large_logits.py --no-pytorch --impl ${impl}
                       --D ${D} --bin $<TARGET_FILE_DIR:phase4_backward> --dir ${CMAKE_CURRENT_BINARY_DIR}/ll_${impl}_${D})
      set_tests_properties(phase4_${impl}_large_logits_D${D} PROPERTIES LABELS "phase4;${device}" SKIP_RETURN_CODE 77)
    endforeach()
  endforeach()
endif()
