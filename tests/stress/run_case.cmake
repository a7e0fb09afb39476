# run_case.cmake - one stress or bad-input test: optionally writes a case's .npy inputs (stress_inputs), runs a phase
# binary on them, and checks its exit status, its stderr and, row by row, its check block. Used by
# tests/hardening.cmake (fa_add_stress_test); every list argument is '|'-separated.
#
#   BINARY, ARGS      the binary and its flags
#   LAUNCHER          prepended to the command (compute-sanitizer in tools/gpu_check.sh), may be empty
#   GEN, CASE, SHAPE  when CASE is set: `GEN CASE DIR B H Sq Sk D` writes the inputs and --load-dir DIR is added
#   STATUS            the exit status the binary must give (0 pass, 1 a check failed, 2 refused)
#   STDERR            with STATUS 2: a regular expression the one "error: ..." line must match
#   CHECKS            with STATUS 0 or 1: items TENSOR/PASS, TENSOR/FIRST/MIN/MAX or TENSOR/ABS/LIMIT, applied to every
#                     check row of that tensor (one per implementation and step; at least one must exist):
#                       PASS             the row passes;
#                       FIRST/MIN/MAX    the row fails with MIN..MAX NaN/Inf elements, the first at (b,h,s,d) = FIRST,
#                                        written "b,h,s,d" (a regular expression: "0,1,[0-9]+,3" accepts any row);
#                       ABS/LIMIT        no NaN/Inf and a max abs err of at most LIMIT, pass or fail (for a tensor
#                                        whose exact value is 0, where the relative error means nothing).
#                     An item may start with "causal:" or "plain:": it then applies only to the rows whose label has
#                     "(causal)" in it, or only to the others (phase 3 runs its steps both ways in one run).
#   OOM_SKIP          when set, a refusal for lack of memory (exit 2, one line "error: out of ... memory") is reported
#                     as skipped: the machine could not hold the run, which says nothing about the code
string(REPLACE "|" ";" arg_list "${ARGS}")
string(REPLACE "|" ";" launcher "${LAUNCHER}")
string(REPLACE "|" ";" checks "${CHECKS}")

if(CASE)
  string(REPLACE "|" ";" shape "${SHAPE}")
  file(REMOVE_RECURSE ${DIR})
  file(MAKE_DIRECTORY ${DIR})
  execute_process(COMMAND ${GEN} ${CASE} ${DIR} ${shape} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "writing the inputs of case ${CASE} failed (${rc}): ${out}${err}")
  endif()
  list(APPEND arg_list --load-dir ${DIR})
endif()

execute_process(COMMAND ${launcher} ${BINARY} ${arg_list} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}")
message("stderr:\n${err}")
string(REPLACE ";" " " shown "${launcher} ${BINARY} ${arg_list}")
message("command: ${shown}")

if(status EQUAL 77 AND out MATCHES "(^|\n)skipped: ")
  message("SKIPPED: no GPU")
  return()
endif()
if("${out}${err}" MATCHES "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]")
  message(FATAL_ERROR "compute-sanitizer reported errors (above)")
endif()
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines err_lines)
if(OOM_SKIP AND status EQUAL 2 AND err_lines EQUAL 1 AND err MATCHES "^error: out of [a-zA-Z]+ memory")
  message("SKIPPED: the machine has too little free memory for this run; it refused cleanly: ${err}")
  return()
endif()
if(NOT status EQUAL STATUS)
  message(FATAL_ERROR "expected exit status ${STATUS}, got ${status}")
endif()

if(STATUS EQUAL 2)
  # Bad input: one line on stderr, starting "error: ", saying what is wrong.
  if(NOT err_lines EQUAL 1 OR NOT err MATCHES "^error: ")
    message(FATAL_ERROR "expected exactly one line 'error: ...' on stderr, got ${err_lines} lines")
  endif()
  if(STDERR AND NOT err MATCHES "${STDERR}")
    message(FATAL_ERROR "the error line does not match '${STDERR}'")
  endif()
  return()
endif()

# The check block: "  <label> <tensor> <max abs err> <rel err> <tol>  (b,h,s,d) PASS|FAIL[ (N NaN/Inf)]".
string(REPLACE "\n" ";" lines "${out}")
foreach(item ${checks})
  # "causal:" or "plain:" before an item limits it to the rows whose label says "(causal)", or to the others.
  set(select "")
  if(item MATCHES "^(causal|plain):(.*)$")
    set(select "${CMAKE_MATCH_1}")
    set(item "${CMAKE_MATCH_2}")
  endif()
  string(REPLACE "/" ";" fields "${item}")
  list(GET fields 0 tensor)
  list(GET fields 1 want)
  set(rows 0)
  foreach(line ${lines})
    if(NOT line MATCHES "^  (.+[^ ]) +${tensor} +([-+0-9.a-z]+) +[-+0-9.a-z]+ +[-+0-9.a-z]+ +\\(([-0-9]+,[-0-9]+,[-0-9]+,[-0-9]+)\\) +(PASS|FAIL)( \\(([0-9]+) NaN/Inf\\))?$")
      continue()
    endif()
    set(label "${CMAKE_MATCH_1}")
    set(abs_err "${CMAKE_MATCH_2}")
    set(first "${CMAKE_MATCH_3}")
    set(result "${CMAKE_MATCH_4}")
    set(count "${CMAKE_MATCH_6}")
    if((select STREQUAL "causal" AND NOT label MATCHES "\\(causal\\)") OR
       (select STREQUAL "plain" AND label MATCHES "\\(causal\\)"))
      continue()
    endif()
    math(EXPR rows "${rows} + 1")
    if(want STREQUAL "PASS")
      if(NOT result STREQUAL "PASS")
        message(FATAL_ERROR "${label} ${tensor}: expected PASS, got: ${line}")
      endif()
      continue()
    endif()
    if(want STREQUAL "ABS")
      list(GET fields 2 limit)
      if(NOT count STREQUAL "" OR NOT abs_err LESS_EQUAL limit)
        message(FATAL_ERROR "${label} ${tensor}: expected no NaN/Inf and max abs err <= ${limit}, got: ${line}")
      endif()
      continue()
    endif()
    list(GET fields 2 lo)
    list(GET fields 3 hi)
    if(NOT result STREQUAL "FAIL" OR count STREQUAL "")
      message(FATAL_ERROR "${label} ${tensor}: expected NaN/Inf in the result (the math puts them there), got: ${line}")
    endif()
    if(count LESS lo OR count GREATER hi)
      message(FATAL_ERROR "${label} ${tensor}: expected ${lo}..${hi} NaN/Inf elements, got ${count}: ${line}")
    endif()
    if(NOT first MATCHES "^${want}$")
      message(FATAL_ERROR "${label} ${tensor}: expected the first NaN/Inf at ${want}, got ${first}: ${line}")
    endif()
  endforeach()
  if(rows EQUAL 0)
    message(FATAL_ERROR "no ${select} check row for ${tensor} in the output")
  endif()
  message("ok: ${select} ${tensor} ${want} in ${rows} check row(s)")
endforeach()
