# Phase 2: the online-softmax forward for one [N, d] head, CPU and CUDA, against the float64 oracle.
# Every run also checks phase 1's naive version on the same input (the driver runs both).
# Shapes: N in {1, 17, 64, 1000, 4096}, Nk != N both ways, D in {16, 32, 64, 128} (CPU: any D), tiles larger than N,
# BLOCK_M != BLOCK_N, ragged edges, and large logits (--scale): scores of 50 to 100, where exp() without the running
# max would overflow. The CUDA kernel is compiled for the tiles 64x32 (default), 64x64 and 128x64.
set(phase2_shapes
  "N1_D16|--S|1|--D|16"
  "N17_D32|--S|17|--D|32"
  "N64_D64_tile64x64|--S|64|--D|64|--block-m|64|--block-n|64"
  "N1000_D128|--S|1000|--D|128"
  "N1000_D64_tile128x64|--S|1000|--D|64|--block-m|128|--block-n|64"
  "N1000_D32_tile64x64|--S|1000|--D|32|--block-m|64|--block-n|64"
  "N17_Nk1000_D64|--Sq|17|--Sk|1000|--D|64"
  "N1000_Nk17_D16_tile128x64|--Sq|1000|--Sk|17|--D|16|--block-m|128|--block-n|64"
  "N100_Nk33_D128_tile64x64|--Sq|100|--Sk|33|--D|128|--block-m|64|--block-n|64"
  "N1000_D16_logits100|--S|1000|--D|16|--scale|20"
  "N500_D64_logits80|--S|500|--D|64|--scale|8"
  "N300_D128_logits60_tile128x64|--S|300|--D|128|--scale|5|--block-m|128|--block-n|64"
  "N4096_D64|--S|4096|--D|64")
foreach(entry ${phase2_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase2_${impl}_${name} LABEL phase2 BINARY phase2_online_softmax IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()
# Too slow for the compute-sanitizer sweeps (naive's S and P alone are 128 MiB).
foreach(impl cpu cuda)
  fa_add_check_test(NAME phase2_${impl}_N4096_D128 LABEL phase2 BINARY phase2_online_softmax IMPL ${impl} BIG
                    ARGS --S 4096 --D 128 --block-m 64 --block-n 64)
endforeach()

# CPU only: any D and any tile size, including tiles of one key and tiles far larger than N.
set(phase2_cpu_shapes
  "N100_D3_tile1x1|--S|100|--D|3|--block-m|1|--block-n|1"
  "N100_D24_tile256x512|--S|100|--D|24|--block-m|256|--block-n|512"
  "N333_Nk100_D80_tile17x5|--Sq|333|--Sk|100|--D|80|--block-m|17|--block-n|5"
  "N17_Nk250_D200_tile32x48|--Sq|17|--Sk|250|--D|200|--block-m|32|--block-n|48")
foreach(entry ${phase2_cpu_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  fa_add_check_test(NAME phase2_cpu_${name} LABEL phase2 BINARY phase2_online_softmax IMPL cpu ARGS ${parts})
endforeach()

# The rescale is exercised: every row's max grows at every K tile (see the test's header).
add_executable(test_phase2_rescale test_phase2_rescale.c)
target_link_libraries(test_phase2_rescale PRIVATE phase2_online_softmax_kernels)
add_test(NAME phase2_rescale_cpu COMMAND test_phase2_rescale cpu)
set_tests_properties(phase2_rescale_cpu PROPERTIES LABELS "phase2;cpu")
add_test(NAME phase2_rescale_cuda COMMAND ${FA_GPU_TEST_LAUNCHER} $<TARGET_FILE:test_phase2_rescale> cuda)
set_tests_properties(phase2_rescale_cuda PROPERTIES LABELS "phase2;gpu" SKIP_RETURN_CODE 77)

# fa_exp2, the vectorisable 2^x of the CPU kernels: within 2 ulp of exp2() over the float range.
add_executable(test_phase2_exp2 test_phase2_exp2.c)
target_link_libraries(test_phase2_exp2 PRIVATE fa_common)
add_test(NAME phase2_exp2 COMMAND test_phase2_exp2)
set_tests_properties(phase2_exp2 PROPERTIES LABELS "phase2;cpu")

# Bad input: one line on stderr, exit status 2, before any work.
fa_add_bad_input_test(NAME phase2_bad_D_cuda LABEL phase2 BINARY phase2_online_softmax ARGS --impl cuda --D 48)
fa_add_bad_input_test(NAME phase2_bad_tiles_cuda LABEL phase2 BINARY phase2_online_softmax
                      ARGS --impl cuda --block-m 32 --block-n 32)
fa_add_bad_input_test(NAME phase2_bad_tiles_cuda_default_impl LABEL phase2 BINARY phase2_online_softmax
                      ARGS --block-m 128 --block-n 32)
fa_add_bad_input_test(NAME phase2_bad_block_zero LABEL phase2 BINARY phase2_online_softmax ARGS --impl cpu --block-m 0)
fa_add_bad_input_test(NAME phase2_bad_causal LABEL phase2 BINARY phase2_online_softmax ARGS --causal)
fa_add_bad_input_test(NAME phase2_bad_batch LABEL phase2 BINARY phase2_online_softmax ARGS --B 2)
fa_add_bad_input_test(NAME phase2_bad_step LABEL phase2 BINARY phase2_online_softmax ARGS --step 1)

# --save-dir saves the problem the flags describe: NumPy's own attention on the saved inputs agrees.
fa_add_saved_numpy_tests(LABEL phase2 BINARY phase2_online_softmax TWO_D)
