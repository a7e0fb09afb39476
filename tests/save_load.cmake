# --save-dir then --load-dir: the second run reads the first run's inputs and must reproduce its outputs exactly.
# (NumPy's view of the saved files: saved_matches_numpy.cmake.)
# A file whose shape disagrees with the flags must be refused with exit status 2 and one line.
file(REMOVE_RECURSE ${DIR})
set(common_args --impl cpu --B 2 --H 2 --Sq 9 --Sk 13 --D 16 --causal --iters 0 --warmup 0)
execute_process(COMMAND ${BINARY} ${common_args} --seed 5 --save-dir ${DIR}/a RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "saving run failed with ${rc}")
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

# The files hold the shape: --load-dir alone (no shape flag) runs the same problem.
execute_process(COMMAND ${BINARY} --impl cpu --causal --iters 0 --warmup 0 --load-dir ${DIR}/a --save-dir ${DIR}/c
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "loading run without shape flags failed with ${rc}")
endif()
foreach(name o lse)
  file(SHA256 ${DIR}/a/${name}.npy ha)
  file(SHA256 ${DIR}/c/${name}.npy hc)
  if(NOT ha STREQUAL hc)
    message(FATAL_ERROR "${name}.npy differs between the saving run and a --load-dir run without shape flags")
  endif()
endforeach()

# A flag that contradicts the files is refused.
execute_process(COMMAND ${BINARY} --impl cpu --B 2 --H 2 --Sq 10 --Sk 13 --D 16 --iters 0 --load-dir ${DIR}/a
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: --Sq 10 contradicts .*q.npy, which holds 9\n$")
  message(FATAL_ERROR "a flag that contradicts q.npy should give exit 2 and one line; got ${rc}: ${err}")
endif()
message(STATUS "save/load reproduced the run; mismatch refused: ${err}")
