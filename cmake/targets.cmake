# Convenience targets, available both at the root (through the Makefile) and inside the build folder:
#   make demo          the class demo: every phase, CPU and GPU, default class-sized shapes
#   make test-phaseN   one phase's tests (ctest label phaseN); test-common, test-gpu, test-big likewise
#   make bench, make plots   see tools/
foreach(label common phase1 phase2 phase3 phase4 phase5 phase6 hardening tools docs lineage gpu big python)
  add_custom_target(test-${label}
    COMMAND ${CMAKE_CTEST_COMMAND} --output-on-failure -L "^${label}$$" -j ${FA_TEST_JOBS}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR} USES_TERMINAL)
endforeach()

set(FA_DEMO_COMMANDS "")
foreach(binary phase1_naive phase2_online_softmax phase3_forward_4d phase4_backward phase5_tensor_cores
               phase6_extensions)
  list(APPEND FA_DEMO_COMMANDS COMMAND $<TARGET_FILE:${binary}>)
endforeach()
add_custom_target(demo ${FA_DEMO_COMMANDS} WORKING_DIRECTORY ${CMAKE_BINARY_DIR} USES_TERMINAL)
