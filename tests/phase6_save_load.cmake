# Phase 6, --save-dir then --load-dir: a feature run saves its inputs and outputs (K and V with the feature's own
# shape: GQA's [B, H_kv, Sk, D]) and its whole command line, the feature's flags included; a second run that loads
# them (with another --seed: the inputs come from the files) must reproduce every output bit for bit. (Dropout's
# mask comes from --seed, so FEATURE_ARGS that hold --dropout hold --seed too, which wins over both runs' own.) A
# file whose shape disagrees with the feature's flags is refused with exit status 2 and one line.
file(REMOVE_RECURSE ${DIR})
string(REPLACE "|" ";" feature_args "${FEATURE_ARGS}")
set(common_args --impl cpu --iters 0 --warmup 0)
execute_process(COMMAND ${BINARY} ${common_args} --B 2 --H 4 --Sq 37 --Sk 53 --D 16 --seed 5 ${feature_args}
                        --save-dir ${DIR}/a RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "saving run failed with ${rc}")
endif()
file(READ ${DIR}/a/command.txt command)
foreach(flag ${feature_args})
  string(FIND "${command}" "${flag}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "command.txt does not name the feature's flag ${flag}: ${command}")
  endif()
endforeach()
# No shape flags: the files hold the shape (H_kv comes from the feature's flag, and K must agree with it).
execute_process(COMMAND ${BINARY} ${common_args} --seed 999 ${feature_args} --load-dir ${DIR}/a --save-dir ${DIR}/b
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "loading run failed with ${rc}")
endif()
file(GLOB saved RELATIVE ${DIR}/a ${DIR}/a/*.npy)
list(LENGTH saved n_saved)
if(n_saved LESS 5)
  message(FATAL_ERROR "the saving run wrote only ${saved}")
endif()
foreach(name ${saved})
  file(SHA256 ${DIR}/a/${name} ha)
  file(SHA256 ${DIR}/b/${name} hb)
  if(NOT ha STREQUAL hb)
    message(FATAL_ERROR "${name} differs between the saving and the loading run")
  endif()
endforeach()
if(MISMATCH_ARGS)
  string(REPLACE "|" ";" mismatch_args "${MISMATCH_ARGS}")
  execute_process(COMMAND ${BINARY} ${common_args} ${mismatch_args} --load-dir ${DIR}/a
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: [^\n]*k.npy has shape[^\n]*\n$")
    message(FATAL_ERROR "K/V files that disagree with the flags should give exit 2 and one line; got ${rc}: ${err}")
  endif()
endif()
message(STATUS "phase 6 save/load reproduced ${n_saved} files (${saved})")
