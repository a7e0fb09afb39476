# --save-dir then --load-dir: the second run reads the first run's inputs and must reproduce its outputs exactly.
# With NUMPY_ONLY, it instead checks that NumPy loads every saved file (skipped when NumPy is missing).
# A file whose shape disagrees with the flags must be refused with exit status 2 and one line.
file(REMOVE_RECURSE ${DIR})
set(common_args --impl cpu --B 2 --H 2 --Sq 9 --Sk 13 --D 16 --causal --iters 0 --warmup 0)
execute_process(COMMAND ${BINARY} ${common_args} --seed 5 --save-dir ${DIR}/a RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "saving run failed with ${rc}")
endif()

if(NUMPY_ONLY)
  # ctest reports the test as skipped when its output says "SKIPPED:" (SKIP_REGULAR_EXPRESSION).
  if(NOT PYTHON)
    message(FATAL_ERROR "SKIPPED: no Python interpreter")
  endif()
  execute_process(COMMAND ${PYTHON} ${CHECKER} ${DIR}/a RESULT_VARIABLE rc)
  if(rc EQUAL 77)
    message(FATAL_ERROR "SKIPPED: NumPy is not installed")
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "NumPy could not read the saved files")
  endif()
  return()
endif()

execute_process(COMMAND ${BINARY} ${common_args} --seed 999 --load-dir ${DIR}/a --save-dir ${DIR}/b
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "loading run failed with ${rc}")
endif()
foreach(name q k v o lse)
  file(SHA256 ${DIR}/a/${name}.npy ha)
  file(SHA256 ${DIR}/b/${name}.npy hb)
  if(NOT ha STREQUAL hb)
    message(FATAL_ERROR "${name}.npy differs between the saving and the loading run")
  endif()
endforeach()

execute_process(COMMAND ${BINARY} --impl cpu --B 2 --H 2 --Sq 10 --Sk 13 --D 16 --iters 0 --load-dir ${DIR}/a
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: .*shape")
  message(FATAL_ERROR "a mismatched q.npy should give exit 2 and a line about its shape; got ${rc}: ${err}")
endif()
message(STATUS "save/load reproduced the run; mismatch refused: ${err}")
