# Runs BINARY with ARGS ('|'-separated) and passes only when it exits with status 2 and prints exactly one line,
# starting with "error:", on stderr (docs/architecture.md, "Conventions": bad input gets one clear line and exit status 2).
string(REPLACE "|" ";" arg_list "${ARGS}")
execute_process(COMMAND ${BINARY} ${arg_list} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines lines)
if(NOT status EQUAL 2)
  message(FATAL_ERROR "expected exit status 2, got ${status}\nstderr: ${err}")
endif()
if(NOT lines EQUAL 1 OR NOT err MATCHES "^error: ")
  message(FATAL_ERROR "expected one line 'error: ...' on stderr, got ${lines} lines:\n${err}")
endif()
message(STATUS "exit 2 with: ${err}")
