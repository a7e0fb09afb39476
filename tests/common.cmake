# common/: unit tests of the shared harness.
add_executable(test_common test_common.c)
target_link_libraries(test_common PRIVATE fa_common)
foreach(t verify verify_zero_tensor verify_local npy oracle_hand oracle_gradcheck shape random)
  add_test(NAME common_${t} COMMAND test_common ${t} ${CMAKE_CURRENT_BINARY_DIR}/common_${t}_tmp)
  set_tests_properties(common_${t} PROPERTIES LABELS "common;cpu")
endforeach()
