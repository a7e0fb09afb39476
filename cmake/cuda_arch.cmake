# Decide whether to build CUDA code, and for which GPUs.
# - the user's CMAKE_CUDA_ARCHITECTURES always wins;
# - otherwise build for the GPU visible now (nvidia-smi reports its compute capability);
# - otherwise (no GPU here: a learner's laptop, a CI machine) one architecture, sm_80: every CUDA file compiles, the
#   tensor-core steps included, in a few minutes on 2 cores, and the binaries run on any GPU from Ampere on. Each
#   architecture is a full nvcc pass over every kernel instantiation, so three would take three times as long; CI asks
#   for the portable list, -DCMAKE_CUDA_ARCHITECTURES="75;80-real;90-real" (.ci/run). A plain "native" fails on a
#   machine without a GPU.
set(FA_HAVE_CUDA OFF)
if(FA_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(_fa_arch "")
      find_program(FA_NVIDIA_SMI nvidia-smi)
      if(FA_NVIDIA_SMI)
        execute_process(COMMAND ${FA_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                        OUTPUT_VARIABLE _fa_cc RESULT_VARIABLE _fa_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
        if(_fa_rc EQUAL 0 AND _fa_cc MATCHES "^([0-9]+)\\.([0-9]+)")
          set(_fa_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
        endif()
      endif()
      if(_fa_arch)
        message(STATUS "CUDA: building for the visible GPU, sm_${_fa_arch}")
        set(CMAKE_CUDA_ARCHITECTURES ${_fa_arch} CACHE STRING "CUDA architectures")
      else()
        # Machine code for Ampere (sm_80) and its PTX, which the driver compiles at load time for every later GPU.
        message(STATUS "CUDA: no GPU visible, building for sm_80 only (and its PTX); "
                       "-DCMAKE_CUDA_ARCHITECTURES=\"75;80-real;90-real\" builds the portable list")
        set(CMAKE_CUDA_ARCHITECTURES 80 CACHE STRING "CUDA architectures")
      endif()
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(FA_HAVE_CUDA ON)
    # The compiler's per-kernel report: registers, shared memory, stack and spills (tools/gpu_check.sh turns it on).
    option(FA_CUDA_RESOURCE_REPORT "Print each kernel's register and shared-memory use while compiling" OFF)
    if(FA_CUDA_RESOURCE_REPORT)
      add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>")
    endif()
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>"
                        "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>")
  else()
    message(STATUS "CUDA: no CUDA compiler found; building the CPU versions only")
  endif()
endif()
