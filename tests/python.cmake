# The PyTorch binding (python/, label python): its pytest suite (python/tests/) against PyTorch's attention, on the
# CPU and, where there is one, the GPU. PyTorch is optional: python/tests/ctest_entry.py exits 77 (skipped) when the
# interpreter below cannot import torch and pytest, or when the build has no binding library (configure with
# -DFA_PYTHON=ON, as `make python` does).
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
