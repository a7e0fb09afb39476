# Runs BINARY with ARGS (a CMake list) and passes only when it exits 0 and its standard output is the text of EXPECTED
# (a committed figure that must stay what the code prints).
execute_process(COMMAND ${BINARY} ${ARGS} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "exit status ${status}\nstderr: ${err}")
endif()
file(READ ${EXPECTED} expected)
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "the output differs from ${EXPECTED}; regenerate it with: ${BINARY} ${ARGS} > ${EXPECTED}\n"
                      "got:\n${out}")
endif()
