# Convenience targets, available both at the root (through the Makefile) and inside the build folder:
#   make demo          the class demo: every phase, CPU and GPU, default class-sized shapes
#   make test-phaseN   one phase's tests (ctest label phaseN, big ones left out); test-common, test-hardening,
#                      test-tools, test-docs, test-gpu likewise; test-big the big ones alone
#   make bench, make plots   see tools/
# Like `make test`, every per-label target leaves out the tests labelled big (2^31-element runs that need most of the
# machine's memory); `make test-big` is the one target that runs them.
foreach(label common phase1 phase2 phase3 phase4 phase5 phase6 phase7 phase8 hardening tools docs lineage gpu python)
  add_custom_target(test-${label}
    COMMAND ${CMAKE_CTEST_COMMAND} --output-on-failure -L "^${label}$$" -LE "^big$$" -j ${FA_TEST_JOBS}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR} USES_TERMINAL)
endforeach()
add_custom_target(test-big
  COMMAND ${CMAKE_CTEST_COMMAND} --output-on-failure -L "^big$$" -j ${FA_TEST_JOBS}
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR} USES_TERMINAL)

set(FA_DEMO_COMMANDS "")
foreach(binary phase1_naive phase2_online_softmax phase3_forward_4d phase4_backward phase5_tensor_cores
               phase6_extensions phase8_ring)
  list(APPEND FA_DEMO_COMMANDS COMMAND $<TARGET_FILE:${binary}>)
endforeach()
# Phase 7 computes in half precision only (its GPU rows need a Hopper GPU; the CPU row is its twin).
list(APPEND FA_DEMO_COMMANDS COMMAND $<TARGET_FILE:phase7_hopper> --dtype bf16)
add_custom_target(demo ${FA_DEMO_COMMANDS} WORKING_DIRECTORY ${CMAKE_BINARY_DIR} USES_TERMINAL)
