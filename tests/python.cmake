# The PyTorch binding (python/, label python).
#
# test_python_shim: the C functions the binding calls (python/csrc/flash_steps_shim.h), from C, with no PyTorch:
# fs_check refuses what the kernels do not take and returns; fs_forward / fs_backward route float32, GQA, window,
# softcap and bf16/fp16 problems to their kernels, checked against phase 6's float64 oracle. CI runs it.
add_executable(test_python_shim test_python_shim.c ${CMAKE_SOURCE_DIR}/python/csrc/flash_steps_shim.c)
target_include_directories(test_python_shim PRIVATE ${CMAKE_SOURCE_DIR}/python/csrc)
target_link_libraries(test_python_shim PRIVATE phase3_forward_4d_kernels phase4_backward_kernels phase5_kernels
                                               phase6_extensions_kernels)
add_test(NAME python_shim COMMAND test_python_shim)
set_tests_properties(python_shim PROPERTIES LABELS "python;cpu")

# python_binding: the pytest suite (python/tests/) against PyTorch's attention, on the CPU and, where there is one, the
# GPU. python/tests/ctest_entry.py exits 77 (skipped) when the interpreter below cannot import torch and pytest, or
# when the build has no binding library (configure with -DFA_PYTHON=ON, as `make python` does).
set(FA_TORCH_PYTHON "${Python3_EXECUTABLE}" CACHE FILEPATH "The Python interpreter with PyTorch that runs the binding's tests")
if(NOT FA_TORCH_PYTHON)
  return()
endif()
if(FA_PYTHON)
  set(binding_library $<TARGET_FILE:flash_steps_c>)
else()
  set(binding_library "")
endif()
add_test(NAME python_binding
         COMMAND ${FA_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}/python/tests/ctest_entry.py "${binding_library}")
set_tests_properties(python_binding PROPERTIES LABELS "python" SKIP_RETURN_CODE 77)
