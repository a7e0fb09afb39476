# Phase 1: naive attention, CPU and CUDA, against the float64 oracle.
# Shapes: S=1, S=17 and S=1000 (a multiple of nothing), Sq != Sk both ways, causal on and off, D in {16,32,64,128},
# B and H > 1. The tolerances are FA_TOL_FORWARD (common/fa_verify.h), where the reason for their size is written.
set(phase1_shapes
  "S1_D16|--B|2|--H|3|--S|1|--D|16"
  "S17_D32_causal|--B|2|--H|2|--S|17|--D|32|--causal"
  "S1000_D64|--B|1|--H|2|--S|1000|--D|64"
  "S1000_D64_causal|--B|1|--H|2|--S|1000|--D|64|--causal"
  "Sq17_Sk100_D128_causal|--B|2|--H|2|--Sq|17|--Sk|100|--D|128|--causal"
  "Sq100_Sk17_D64_causal|--B|2|--H|2|--Sq|100|--Sk|17|--D|64|--causal"
  "Sq100_Sk17_D16|--B|2|--H|2|--Sq|100|--Sk|17|--D|16"
  "Sq33_Sk250_D32|--B|3|--H|2|--Sq|33|--Sk|250|--D|32"
  "S64_D128_causal|--B|3|--H|2|--S|64|--D|128|--causal")
foreach(entry ${phase1_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase1_${impl}_${name} LABEL phase1 BINARY phase1_naive IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()

# Bad input: one line on stderr, exit status 2.
fa_add_bad_input_test(NAME phase1_bad_S_zero LABEL phase1 BINARY phase1_naive ARGS --S 0)
fa_add_bad_input_test(NAME phase1_bad_S_negative LABEL phase1 BINARY phase1_naive ARGS --S -3)
fa_add_bad_input_test(NAME phase1_bad_B_zero LABEL phase1 BINARY phase1_naive ARGS --B 0)
fa_add_bad_input_test(NAME phase1_bad_D_zero LABEL phase1 BINARY phase1_naive ARGS --D 0)
fa_add_bad_input_test(NAME phase1_bad_S_text LABEL phase1 BINARY phase1_naive ARGS --S abc)
fa_add_bad_input_test(NAME phase1_bad_S_overflow LABEL phase1 BINARY phase1_naive ARGS --S 99999999999999999999)
fa_add_bad_input_test(NAME phase1_bad_shape_too_big LABEL phase1 BINARY phase1_naive ARGS --B 65536 --H 65536 --S 65536)
fa_add_bad_input_test(NAME phase1_bad_unknown_flag LABEL phase1 BINARY phase1_naive ARGS --frobnicate)
fa_add_bad_input_test(NAME phase1_bad_missing_value LABEL phase1 BINARY phase1_naive ARGS --S)
fa_add_bad_input_test(NAME phase1_bad_positional LABEL phase1 BINARY phase1_naive ARGS extra)
fa_add_bad_input_test(NAME phase1_bad_impl LABEL phase1 BINARY phase1_naive ARGS --impl gpu)
fa_add_bad_input_test(NAME phase1_bad_scale LABEL phase1 BINARY phase1_naive ARGS --scale -1)
fa_add_bad_input_test(NAME phase1_bad_threads LABEL phase1 BINARY phase1_naive ARGS --threads 0)
fa_add_bad_input_test(NAME phase1_bad_block_m LABEL phase1 BINARY phase1_naive ARGS --block-m 32)
fa_add_bad_input_test(NAME phase1_bad_load_missing LABEL phase1 BINARY phase1_naive ARGS --load-dir /nonexistent/dir)
# Every value is checked as typed: a typed -1 is not "not given" (it used to run the default problem); a number too long
# for 64 bits gets the same message as one past the limit; a --scale that float32 makes 0 or Inf is refused.
foreach(flag B H S Sq Sk D)
  fa_add_bad_input_test(NAME phase1_bad_${flag}_minus_one LABEL phase1 BINARY phase1_naive
                        STDERR "--${flag} must be between 1 and 2147483648 \\(got -1\\)" ARGS --${flag} -1)
endforeach()
fa_add_bad_input_test(NAME phase1_bad_S_too_long LABEL phase1 BINARY phase1_naive
                      STDERR "--S must be between 1 and 2147483648 \\(got 99999999999999999999\\)"
                      ARGS --S 99999999999999999999)
fa_add_bad_input_test(NAME phase1_bad_S_too_large LABEL phase1 BINARY phase1_naive
                      STDERR "--S must be between 1 and 2147483648 \\(got 9999999999999\\)" ARGS --S 9999999999999)
fa_add_bad_input_test(NAME phase1_bad_seed_too_long LABEL phase1 BINARY phase1_naive
                      STDERR "--seed must be between 0 and" ARGS --seed 99999999999999999999)
fa_add_bad_input_test(NAME phase1_bad_check_heads_zero LABEL phase1 BINARY phase1_naive
                      STDERR "--check-heads must be between 1" ARGS --check-heads 0)
fa_add_bad_input_test(NAME phase1_bad_scale_float32_zero LABEL phase1 BINARY phase1_naive
                      STDERR "--scale 1e-46 becomes 0 in float32" ARGS --scale 1e-46)
fa_add_bad_input_test(NAME phase1_bad_scale_float32_inf LABEL phase1 BINARY phase1_naive
                      STDERR "--scale 1e39 is too large for float32" ARGS --scale 1e39)
fa_add_bad_input_test(NAME phase1_bad_out_of_memory LABEL phase1 BINARY phase1_naive
                      ARGS --impl cpu --B 1 --H 1 --S 1048576 --D 16 --iters 0)

# --save-dir writes .npy files; --load-dir reproduces the run bit for bit; a mismatched file is refused.
add_test(NAME phase1_save_load
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:phase1_naive> -DDIR=${CMAKE_CURRENT_BINARY_DIR}/phase1_save_load
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/save_load.cmake)
set_tests_properties(phase1_save_load PROPERTIES LABELS "phase1;cpu")
fa_add_saved_numpy_tests(LABEL phase1 BINARY phase1_naive)
