# Hardening: the .npy reader fuzzed and its crashes replayed, broken input files refused, numerical stress
# and non-finite inputs for every phase, and a shape past 2^31 elements. What each input produces is listed in
# docs/robustness.md. Labels: hardening, plus cpu or gpu (and big for the 2^31 runs, which gpu_check.sh's
# compute-sanitizer sweeps leave out).

# --- The fuzz target of the .npy reader (tests/fuzz/) -----------------------------------------------------------------
# The replay build: the same target compiled by the project's compiler with a main() that feeds it files. It replays
# the seed corpus and every saved crash on every `make test`, and under `make sanitize` with ASan and UBSan.
add_executable(fuzz_npy_replay fuzz/fuzz_npy.c)
target_compile_definitions(fuzz_npy_replay PRIVATE FA_FUZZ_REPLAY)
target_link_libraries(fuzz_npy_replay PRIVATE fa_common)
add_test(NAME hardening_npy_replay
         COMMAND fuzz_npy_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions)
set_tests_properties(hardening_npy_replay PROPERTIES LABELS "hardening;cpu")

# The fuzzer: libFuzzer needs clang (-fsanitize=fuzzer). It is built from the sources directly, apart from the
# project's compiler, and only when a probe shows that this clang can link a libFuzzer target.
find_program(FA_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14 DOC "clang, for the libFuzzer target")
set(FA_FUZZER ${CMAKE_BINARY_DIR}/bin/fuzz_npy)
set(fuzz_flags -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Wall -Wextra
               -Wno-unknown-pragmas)
set(fuzz_ok FALSE)
if(FA_CLANG)
  set(probe_dir ${CMAKE_BINARY_DIR}/fuzz_probe)
  file(WRITE ${probe_dir}/probe.c
       "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${FA_CLANG} -fsanitize=fuzzer,address,undefined ${probe_dir}/probe.c -o ${probe_dir}/probe
                  RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(probe_rc EQUAL 0)
    set(fuzz_ok TRUE)
  endif()
endif()
if(fuzz_ok)
  set(fuzz_sources ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_npy.c ${CMAKE_SOURCE_DIR}/common/fa_npy.c
                   ${CMAKE_SOURCE_DIR}/common/fa_tensor.c)
  add_custom_command(OUTPUT ${FA_FUZZER}
                     COMMAND ${FA_CLANG} ${fuzz_flags} -I${CMAKE_SOURCE_DIR}/common ${fuzz_sources} -o ${FA_FUZZER}
                     DEPENDS ${fuzz_sources} ${CMAKE_SOURCE_DIR}/common/fa_npy.h ${CMAKE_SOURCE_DIR}/common/fa_tensor.h
                     COMMENT "Building the libFuzzer target fuzz_npy with ${FA_CLANG}")
  add_custom_target(fuzz_npy ALL DEPENDS ${FA_FUZZER})
else()
  message(STATUS "fuzz_npy: no clang that links libFuzzer targets; hardening_fuzz_npy will report itself skipped")
endif()
# A short bounded run as a test (.ci/run adds a longer one). The sanitizer build leaves it out: the fuzzer is the
# same clang binary there, already run once by `make test`.
if(NOT FA_SANITIZE)
  add_test(NAME hardening_fuzz_npy
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh ${FA_FUZZER} 20 ${CMAKE_CURRENT_BINARY_DIR}/fuzz_npy_work)
  set_tests_properties(hardening_fuzz_npy PROPERTIES LABELS "hardening;cpu" SKIP_RETURN_CODE 77)
endif()

# --- Stress and bad-file tests through the phase binaries -------------------------------------------------------------
add_executable(stress_inputs stress/make_inputs.c)
target_link_libraries(stress_inputs PRIVATE fa_common)

# fa_add_stress_test(NAME <name> BINARY <target> IMPL cpu|cuda [BIG] [CASE <case> SHAPE "B|H|Sq|Sk|D"]
#                    STATUS 0|1|2 [STDERR <regex>] [CHECKS <items...>] [ARGS <flags...>])
# With CASE, stress_inputs writes the case's inputs and the binary reads them (--load-dir) at the SHAPE, whose flags
# are added. tests/stress/run_case.cmake checks the exit status, the one-line error (STATUS 2) and the check rows
# (CHECKS: TENSOR/PASS or TENSOR/FIRST/MIN/MAX NaN/Inf elements, FIRST being "b,h,s,d").
function(fa_add_stress_test)
  cmake_parse_arguments(T "BIG" "NAME;BINARY;IMPL;CASE;SHAPE;STATUS;STDERR" "CHECKS;ARGS" ${ARGN})
  if(NOT TARGET ${T_BINARY})
    return()
  endif()
  set(args --impl ${T_IMPL} --iters 0 --warmup 0 ${T_ARGS})
  if(T_SHAPE)
    string(REPLACE "|" ";" dims "${T_SHAPE}")
    list(GET dims 0 B)
    list(GET dims 1 H)
    list(GET dims 2 Sq)
    list(GET dims 3 Sk)
    list(GET dims 4 D)
    list(APPEND args --B ${B} --H ${H} --Sq ${Sq} --Sk ${Sk} --D ${D})
  endif()
  set(device cpu)
  set(launcher "")
  if(T_IMPL STREQUAL "cuda")
    set(device gpu)
    string(REPLACE ";" "|" launcher "${FA_GPU_TEST_LAUNCHER}")
  endif()
  string(REPLACE ";" "|" args "${args}")
  string(REPLACE ";" "|" checks "${T_CHECKS}")
  add_test(NAME ${T_NAME}
           COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:${T_BINARY}> "-DARGS=${args}" "-DLAUNCHER=${launcher}"
                   -DGEN=$<TARGET_FILE:stress_inputs> -DCASE=${T_CASE} "-DSHAPE=${T_SHAPE}"
                   -DDIR=${CMAKE_CURRENT_BINARY_DIR}/stress/${T_NAME} -DSTATUS=${T_STATUS} "-DSTDERR=${T_STDERR}"
                   "-DCHECKS=${checks}" -DOOM_SKIP=${T_BIG}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/stress/run_case.cmake)
  set(labels hardening ${device})
  if(T_BIG)
    # big: left out of the compute-sanitizer sweeps (tools/gpu_check.sh); hugemem: left out of `make sanitize`.
    list(APPEND labels big hugemem)
    # One at a time: a big run needs most of the machine's memory.
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL ON)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${labels}" SKIP_REGULAR_EXPRESSION "SKIPPED:")
  if(T_CASE STREQUAL "bad_fifo")
    set_tests_properties(${T_NAME} PROPERTIES TIMEOUT 30)   # a reader that waits on the pipe fails, never hangs
  endif()
endfunction()

# Broken q.npy files, each refused with exit 2 and one line naming the problem (k, v, do are valid). The runs give
# the shape as flags too, so a file whose shape disagrees is refused as contradicting them. The shape is
# small; the phases share the reader, so phase 1 and the 4-D phases test it through their own binaries.
set(bad_file_cases
  "bad_truncated_header|npy header is truncated"
  "bad_truncated_data|data is [0-9]+ bytes, the header declares [0-9]+"
  "bad_dtype|dtype is not little-endian float32 or float64"
  "bad_big_endian|dtype is not little-endian float32 or float64"
  "bad_fortran|Fortran order"
  "bad_rank|q.npy and k.npy must be \\[B, H, S, D\\] arrays \\(they have 3 and 4 dimensions\\)"
  "bad_shape|--Sq 8 contradicts .*q.npy, which holds 9"
  "bad_huge_shape|declared shape is too large"
  "bad_huge_declared|--Sq 8 contradicts .*q.npy, which holds 34359738368"
  "bad_magic|not a .npy file \\(bad magic\\)"
  "bad_empty|not a .npy file \\(bad magic\\)"
  "bad_nul|header contains a NUL byte"
  "bad_version|unsupported .npy format version"
  "bad_missing_k|cannot open .*k.npy: No such file"
  "bad_directory|cannot read .*q.npy: Is a directory"
  "bad_duplicate_key|'shape' appears twice"
  "bad_extra_key|a key other than 'descr', 'fortran_order' and 'shape'"
  "bad_minor_version|unsupported .npy format version"
  "bad_fifo|q.npy is not a regular file")

# Numerical stress on random inputs: logits near +-100 (--scale 20, D = 64), a tiny and a huge --scale, and causal
# attention with Sq much larger and much smaller than Sk; also a sequence of 1.1 million queries, more rows than a
# CUDA grid's y or z dimension (65535 blocks) can cover at 16 rows per block. Each must pass its check.
# Entries: name|causal (0/1)|flags... (B and H are added: 1 and 2, or 1 and 1 for a one-head phase.)
set(stress_flag_cases
  "scale20_D64|0|--S|256|--D|64|--scale|20"
  "scale20_D64_causal|1|--S|256|--D|64|--scale|20"
  "scale1e-6|0|--S|256|--D|64|--scale|1e-6"
  "scale1e3|0|--S|256|--D|64|--scale|1000"
  "scale1e3_causal|1|--S|256|--D|64|--scale|1000"
  "Sq2000_Sk7|0|--Sq|2000|--Sk|7|--D|64"
  "Sq5_Sk3000|0|--Sq|5|--Sk|3000|--D|64"
  "causal_Sq2000_Sk7|1|--Sq|2000|--Sk|7|--D|64"
  "causal_Sq5_Sk3000|1|--Sq|5|--Sk|3000|--D|64"
  "causal_Sq1_Sk1|1|--Sq|1|--Sk|1|--D|64"
  "Sq1100000_Sk3|0|--Sq|1100000|--Sk|3|--D|16"
  "causal_Sq1100000_Sk3|1|--Sq|1100000|--Sk|3|--D|16")

# fa_add_hardening_suite(<prefix> <binary> D <d> [TWO_D] [NO_LSE] [BOTH_VARIANTS] [EXTRA <flags...>])
# Adds, for one forward binary, the bad-file cases, the flag cases above and the .npy cases below, on the CPU and with
# the same expectations on the GPU. TWO_D: the phase works on one [N, d] head (B = H = 1, no causal). NO_LSE: none of
# its implementations outputs LSE. BOTH_VARIANTS: with --compare-causal (in EXTRA) every run prints causal rows
# (labelled "(causal)") and non-causal rows side by side (phase 3), so one run per case checks both expectations.
# EXTRA: flags every run needs.
#
# The .npy cases run at B = 1, H = 2 (1 for TWO_D), S = 16, D = d, with the value planted in the last head at row 5,
# column 3 (tests/stress/make_inputs.c). The expected NaN/Inf counts are what the math gives: a NaN query row 5 makes
# row 5 of O (d elements) and of LSE NaN; a NaN key 5 reaches every row that sees it (all 16; causal: rows 5..15,
# 11 rows); a NaN or Inf value row reaches column 3 of O in those rows only, and not LSE. With causal, a kernel may
# also multiply the zero probability of a masked key by the NaN value (0 * NaN = NaN) and so reach rows 0..4 of
# column 3: loud, never silent, so 11..16 rows pass. An Inf in a query makes its logits +-Inf and exp(Inf - Inf) NaN;
# a -Inf key logit is a mask written in the data (weight exactly 0), so neginf_k must pass. Equal scores (equal_k,
# zero_q), float64 files and a version 3.0 header must pass too.
function(fa_add_hardening_suite prefix binary)
  cmake_parse_arguments(S "TWO_D;NO_LSE;BOTH_VARIANTS" "D" "EXTRA" ${ARGN})
  set(d ${S_D})
  if(S_TWO_D)
    set(H 1)
    set(h "0,0")
  else()
    set(H 2)
    set(h "0,1")
  endif()
  math(EXPR d16 "16 * ${d}")
  math(EXPR d11 "11 * ${d}")
  set(pass O/PASS LSE/PASS)
  set(row5 O/${h},5,0/${d}/${d} LSE/${h},5,0/1/1)
  # Expectations of each case: <case>_plain without the causal mask, <case>_causal with it.
  foreach(c random f64 v3 equal_k zero_q neginf_k)
    set(${c}_plain ${pass})
    set(${c}_causal ${pass})
  endforeach()
  set(nan_q_plain ${row5})
  set(nan_q_causal ${row5})
  set(inf_q_plain ${row5})
  set(inf_q_causal ${row5})
  set(nan_k_plain O/${h},0,0/${d16}/${d16} LSE/${h},0,0/16/16)
  set(nan_k_causal O/${h},5,0/${d11}/${d11} LSE/${h},5,0/11/11)
  set(nan_v_plain O/${h},0,3/16/16 LSE/PASS)
  set(nan_v_causal O/${h},[0-9]+,3/11/16 LSE/PASS)
  set(inf_v_plain ${nan_v_plain})
  set(inf_v_causal ${nan_v_causal})
  set(cases random f64 v3 equal_k zero_q neginf_k nan_q nan_k nan_v inf_q inf_v)

  foreach(entry ${bad_file_cases})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 case)
    list(GET parts 1 regex)
    string(REPLACE "(1,2," "(1,${H}," regex "${regex}")   # the messages name the shapes: adapt them to H
    string(REPLACE "(2,8," "(${H},8," regex "${regex}")
    if(S_TWO_D)
      string(REPLACE "34359738368" "68719476736" regex "${regex}")
    endif()
    fa_add_stress_test(NAME ${prefix}_cpu_${case} BINARY ${binary} IMPL cpu CASE ${case} SHAPE "1|${H}|8|8|16"
                       STATUS 2 STDERR "${regex}" ARGS ${S_EXTRA})
  endforeach()

  foreach(impl cpu cuda)
    foreach(entry ${stress_flag_cases})
      string(REPLACE "|" ";" parts "${entry}")
      list(POP_FRONT parts name causal)
      if(causal AND (S_TWO_D OR S_BOTH_VARIANTS))
        continue()   # no causal mask; or the non-causal run already prints the causal rows too
      endif()
      set(flags --B 1 --H ${H} ${parts} ${S_EXTRA})
      if(causal)
        list(APPEND flags --causal)
      endif()
      fa_add_stress_test(NAME ${prefix}_${impl}_${name} BINARY ${binary} IMPL ${impl} STATUS 0 CHECKS O/PASS
                         ARGS ${flags})
    endforeach()

    foreach(case ${cases})
      set(plain ${${case}_plain})
      set(causal ${${case}_causal})
      if(S_NO_LSE)
        list(FILTER plain EXCLUDE REGEX "^LSE/")
        list(FILTER causal EXCLUDE REGEX "^LSE/")
      endif()
      set(status 0)
      if("${plain};${causal}" MATCHES "/[0-9]+/[0-9]+")
        set(status 1)
      endif()
      set(common NAME ${prefix}_${impl}_${case} BINARY ${binary} IMPL ${impl} CASE ${case} SHAPE "1|${H}|16|16|${d}")
      if(S_BOTH_VARIANTS)
        list(TRANSFORM plain PREPEND "plain:")
        list(TRANSFORM causal PREPEND "causal:")
        fa_add_stress_test(${common} STATUS ${status} CHECKS ${plain} ${causal} ARGS ${S_EXTRA})
        continue()
      endif()
      fa_add_stress_test(${common} STATUS ${status} CHECKS ${plain} ARGS ${S_EXTRA})
      if(NOT S_TWO_D)
        set(status 0)
        if("${causal}" MATCHES "/[0-9]+/[0-9]+")
          set(status 1)
        endif()
        fa_add_stress_test(NAME ${prefix}_${impl}_${case}_causal BINARY ${binary} IMPL ${impl} CASE ${case}
                           SHAPE "1|${H}|16|16|${d}" STATUS ${status} CHECKS ${causal} ARGS ${S_EXTRA} --causal)
      endif()
    endforeach()
  endforeach()
endfunction()

# fa_add_backward_hardening_suite(<prefix> <binary> [EXTRA <flags...>])
# Phase 4: the same bad files and flag cases, and the .npy cases (plus nan_do, a NaN in dO) with the gradients'
# expectations at B = 1, H = 2, S = 16, D = 16, the value planted in head (0,1), row 5, column 3. What the math gives:
#   nan_q, inf_q  row 5 of O, LSE and dQ; every dK_j and dV_j (row 5's P_5j and dS_5j are NaN): 256 each
#   nan_k         the whole head in every output
#   nan_v, inf_v  column 3 of O; Delta_i = dO_i . O_i is then NaN/Inf in every row, so all of dQ and dK;
#                 dV = P^T dO does not involve V and stays finite
#   nan_do        Delta_5 and dP_5j: row 5 of dQ, every dK_j, and column 3 of dV
#   neginf_k      the forward passes (key 5 has weight 0), but dQ_i = scale * sum_j dS_ij K_j multiplies dS_i5 = 0 by
#                 K_5,3 = -Inf: column 3 of dQ is NaN in every row that sees key 5, by IEEE arithmetic and the oracle
# With causal, the math confines a NaN to the rows and keys that see each other; kernels that compute a masked
# entry of the diagonal tile as 0 and then multiply it (0 * NaN) can reach further inside the same head, so the
# counts are ranges from what the math gives up to the whole head, and the first element stays where the math puts it.
function(fa_add_backward_hardening_suite prefix binary)
  cmake_parse_arguments(S "" "" "EXTRA" ${ARGN})
  set(h "0,1")
  set(pass O/PASS LSE/PASS dQ/PASS dK/PASS dV/PASS)
  foreach(c random f64 v3 zero_q)
    set(${c}_plain ${pass})
    set(${c}_causal ${pass})
  endforeach()
  # Equal keys: dQ_i = scale * K_0 * sum_j dS_ij = 0 exactly (sum_j dS_ij = dO_i . O_i - Delta_i = 0). The oracle's
  # dQ is 0 to within 1e-17, the kernels' float32 sums leave about 3e-8: correct, and the check, which measures the
  # error against the size of the terms summed (fa_verify_results_scaled), passes it.
  set(equal_k_plain ${pass})
  set(equal_k_causal ${pass})
  set(neginf_k_plain O/PASS LSE/PASS dQ/${h},0,3/16/16 dK/PASS dV/PASS)
  set(neginf_k_causal O/PASS LSE/PASS dQ/${h},[0-9]+,3/11/16 dK/PASS dV/PASS)
  set(nan_q_plain O/${h},5,0/16/16 LSE/${h},5,0/1/1 dQ/${h},5,0/16/16 dK/${h},0,0/256/256 dV/${h},0,0/256/256)
  set(nan_q_causal O/${h},5,0/16/16 LSE/${h},5,0/1/1 dQ/${h},5,0/16/16 dK/${h},0,0/96/256 dV/${h},0,0/96/256)
  set(inf_q_plain ${nan_q_plain})
  set(inf_q_causal ${nan_q_causal})
  set(nan_k_plain O/${h},0,0/256/256 LSE/${h},0,0/16/16 dQ/${h},0,0/256/256 dK/${h},0,0/256/256
                  dV/${h},0,0/256/256)
  set(nan_k_causal O/${h},5,0/176/176 LSE/${h},5,0/11/11 dQ/${h},[0-9]+,[0-9]+/176/256 dK/${h},0,0/256/256
                   dV/${h},0,0/256/256)
  set(nan_v_plain O/${h},0,3/16/16 LSE/PASS dQ/${h},0,0/256/256 dK/${h},0,0/256/256 dV/PASS)
  set(nan_v_causal O/${h},[0-9]+,3/11/16 LSE/PASS dQ/${h},[0-9]+,0/176/256 dK/${h},0,0/256/256 dV/PASS)
  set(inf_v_plain ${nan_v_plain})
  set(inf_v_causal ${nan_v_causal})
  set(nan_do_plain O/PASS LSE/PASS dQ/${h},5,0/16/16 dK/${h},0,0/256/256 dV/${h},0,3/16/16)
  set(nan_do_causal O/PASS LSE/PASS dQ/${h},5,0/16/16 dK/${h},0,0/96/256 dV/${h},0,3/6/16)
  set(cases random f64 v3 equal_k zero_q neginf_k nan_q nan_k nan_v inf_q inf_v nan_do)

  foreach(entry ${bad_file_cases})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 case)
    list(GET parts 1 regex)
    fa_add_stress_test(NAME ${prefix}_cpu_${case} BINARY ${binary} IMPL cpu CASE ${case} SHAPE "1|2|8|8|16"
                       STATUS 2 STDERR "${regex}" ARGS ${S_EXTRA})
  endforeach()
  foreach(impl cpu cuda)
    foreach(entry ${stress_flag_cases})
      string(REPLACE "|" ";" parts "${entry}")
      list(POP_FRONT parts name causal)
      if(name MATCHES "Sq1100000")
        continue()   # the naive backward's P and dS would be fine, but the oracle's backward takes minutes there
      endif()
      # (--scale 1000: logits in the thousands, P one-hot but for near-ties that rounding decides, in the naive
      # reference as in the flash kernels; the ratio rule allows each row's logit part, so these pass too.)
      set(flags --B 1 --H 2 ${parts} ${S_EXTRA})
      if(causal)
        list(APPEND flags --causal)
      endif()
      fa_add_stress_test(NAME ${prefix}_${impl}_${name} BINARY ${binary} IMPL ${impl} STATUS 0 CHECKS O/PASS dQ/PASS
                         ARGS ${flags})
    endforeach()
    foreach(case ${cases})
      foreach(variant plain causal)
        set(checks ${${case}_${variant}})
        set(status 0)
        if("${checks}" MATCHES "/[0-9]+/[0-9]+|/ABS/")
          set(status 1)
        endif()
        set(name ${prefix}_${impl}_${case})
        set(flags ${S_EXTRA})
        if(variant STREQUAL "causal")
          set(name ${name}_causal)
          list(APPEND flags --causal)
        endif()
        fa_add_stress_test(NAME ${name} BINARY ${binary} IMPL ${impl} CASE ${case} SHAPE "1|2|16|16|16"
                           STATUS ${status} CHECKS ${checks} ARGS ${flags})
      endforeach()
    endforeach()
  endforeach()
endfunction()

# One call per phase binary; a phase whose binary is not built yet adds nothing (fa_add_stress_test checks).
fa_add_hardening_suite(hardening_phase1 phase1_naive D 16)
fa_add_hardening_suite(hardening_phase2 phase2_online_softmax D 16 TWO_D)
fa_add_hardening_suite(hardening_phase3 phase3_forward_4d D 16 BOTH_VARIANTS EXTRA --compare-causal)
fa_add_backward_hardening_suite(hardening_phase4 phase4_backward)

# --- 64-bit sizes ----------------------------------------------------------------------------------------------------
# B*H*Sq*D = 4*1024*4097*128 = 2^31 + 2^19 elements in Q and in O (8 GiB each, float32): the flat indices of the last
# head run past 2^31, so 32-bit signed index arithmetic would read or write the wrong place (a mutant of
# naive_attention_cpu() with an int32_t index crashes here). Sk = 3 keeps the work small, and --check-heads 2 has the
# oracle check the first and the last head; it materialises only those two (fa_make_reference()). About 16.5 GiB of
# memory and 75 s on the 2-core machine. Where the machine has too little free memory the binary refuses with one
# line (exit 2) and the test reports itself skipped. Left out of `make sanitize` (label big): under ASan it would need
# more memory than the CI machine has.
# The GPU runs the same shape, and one past 2^32 elements (B = 8: 16 GiB per tensor, 32 GiB host and GPU memory),
# which also catches unsigned 32-bit indices.
set(big_2p31 --B 4 --H 1024 --Sq 4097 --Sk 3 --D 128 --check-heads 2 --causal)
set(big_2p32 --B 8 --H 1024 --Sq 4097 --Sk 3 --D 128 --check-heads 2 --causal)
function(fa_add_big_tests prefix binary)
  cmake_parse_arguments(S "" "" "EXTRA" ${ARGN})
  fa_add_stress_test(NAME ${prefix}_cpu_2p31 BINARY ${binary} IMPL cpu BIG STATUS 0 CHECKS O/PASS
                     ARGS ${big_2p31} ${S_EXTRA})
  fa_add_stress_test(NAME ${prefix}_cuda_2p31 BINARY ${binary} IMPL cuda BIG STATUS 0 CHECKS O/PASS
                     ARGS ${big_2p31} ${S_EXTRA})
  fa_add_stress_test(NAME ${prefix}_cuda_2p32 BINARY ${binary} IMPL cuda BIG STATUS 0 CHECKS O/PASS
                     ARGS ${big_2p32} ${S_EXTRA})
endfunction()
fa_add_big_tests(hardening_phase1 phase1_naive)
fa_add_big_tests(hardening_phase3 phase3_forward_4d EXTRA --step 3)   # naive, then step 3 non-causal and causal
# Phase 2 is one head: the oracle would need the whole 2^31-element head in double (32 GiB), so only the GPU machine
# (128 GiB of host memory) runs it. Phase 4 holds Q, O, dO and dQ (32 GiB): GPU only as well.
fa_add_stress_test(NAME hardening_phase2_cuda_2p31 BINARY phase2_online_softmax IMPL cuda BIG STATUS 0 CHECKS O/PASS
                   ARGS --Sq 16777217 --Sk 3 --D 128)
fa_add_stress_test(NAME hardening_phase4_cuda_2p31 BINARY phase4_backward IMPL cuda BIG STATUS 0
                   CHECKS O/PASS dQ/PASS dK/PASS dV/PASS ARGS ${big_2p31})

# --- A check that can always fail ------------------------------------------------------------------------------------
# Each output row is checked against its own scale and logit part (fa_oracle.h), so one large input loosens only the
# rows it reaches; inputs whose logits are too large for any float32 check to judge are refused (one line, exit 2)
# instead of checked with a tolerance that passes anything: a q element of 3e38, --scale 1e5, and phase 4's
# --scale 1e8, which used to fail a correct dV by FlashAttention's ratio rule.
set(unjudgeable "outside the range the float32 check can judge")
foreach(phase phase1_naive phase2_online_softmax phase3_forward_4d phase4_backward)
  set(H 2)
  if(phase STREQUAL "phase2_online_softmax")
    set(H 1)
  endif()
  fa_add_stress_test(NAME hardening_${phase}_cpu_huge_q BINARY ${phase} IMPL cpu CASE huge_q SHAPE "1|${H}|16|16|16"
                     STATUS 2 STDERR "${unjudgeable}")
endforeach()
fa_add_stress_test(NAME hardening_phase1_cpu_scale1e5 BINARY phase1_naive IMPL cpu STATUS 2 STDERR "${unjudgeable}"
                   ARGS --B 1 --H 2 --S 256 --D 64 --scale 1e5)
fa_add_stress_test(NAME hardening_phase4_cpu_scale1e8 BINARY phase4_backward IMPL cpu STATUS 2 STDERR "${unjudgeable}"
                   ARGS --B 1 --H 1 --S 64 --D 16 --scale 1e8)
fa_add_stress_test(NAME hardening_phase6_cpu_scale1e5 BINARY phase6_extensions IMPL cpu STATUS 2
                   STDERR "${unjudgeable}" ARGS --B 1 --H 2 --S 64 --D 16 --scale 1e5 --H-kv 1)

# --- Half precision: a finite input that does not fit the type is refused, one that fits is checked ------------------
fa_add_stress_test(NAME hardening_phase5_cpu_fp16_large_v BINARY phase5_tensor_cores IMPL cpu CASE large_v
                   SHAPE "1|2|16|16|64" STATUS 2 STDERR "v.npy holds 100000 at \\(b,h,s,d\\) = \\(0,1,5,3\\), which does not fit fp16"
                   ARGS --dtype fp16)
fa_add_stress_test(NAME hardening_phase5_cpu_bf16_large_q BINARY phase5_tensor_cores IMPL cpu CASE large_q
                   SHAPE "1|2|16|16|64" STATUS 0 CHECKS O/PASS LSE/PASS dQ/PASS dK/PASS dV/PASS ARGS --dtype bf16)

# --- Saves whole or absent (common/fa_save.h) ------------------------------------------------------------------------
# Unwritable --csv and --save-dir refused before the run, a foreign folder refused and left alone, a reused folder's
# set replaced whole, a full disk (a 64 KiB tmpfs where mount is allowed; /dev/full for --csv) leaving nothing behind.
add_test(NAME hardening_saves_whole_or_absent
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_saves.sh ${CMAKE_BINARY_DIR}/bin ${CMAKE_CURRENT_BINARY_DIR}/saves)
set_tests_properties(hardening_saves_whole_or_absent PROPERTIES LABELS "hardening;cpu")

# --- The .npy reader agrees with NumPy ------------------------------------------------------------------------------
# One table of headers (tests/fixtures/npy_headers.txt): the reader reads those NumPy reads as the same array and
# refuses the rest (test_npy_headers, no NumPy needed); NumPy is held to the same table (check_npy_headers.py, skipped
# without NumPy). Also a header past NumPy's 10000 characters, and a pipe and a folder given as the file.
add_executable(test_npy_headers test_npy_headers.c)
target_link_libraries(test_npy_headers PRIVATE fa_common)
add_test(NAME hardening_npy_headers
         COMMAND test_npy_headers ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/npy_headers.txt
                 ${CMAKE_CURRENT_BINARY_DIR}/npy_headers)
set_tests_properties(hardening_npy_headers PROPERTIES LABELS "hardening;cpu" TIMEOUT 60)
if(Python3_EXECUTABLE)
  add_test(NAME hardening_npy_headers_numpy
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_npy_headers.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/npy_headers.txt ${CMAKE_CURRENT_BINARY_DIR}/npy_headers_numpy)
  set_tests_properties(hardening_npy_headers_numpy PROPERTIES LABELS "hardening;cpu;tools" SKIP_RETURN_CODE 77)
endif()

# --- The make targets (cmake/targets.cmake, Makefile) -----------------------------------------------------------------
add_test(NAME hardening_make_targets
         COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/check_targets.cmake)
set_tests_properties(hardening_make_targets PROPERTIES LABELS "hardening;cpu" SKIP_REGULAR_EXPRESSION "SKIPPED:")
