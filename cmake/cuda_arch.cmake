# Decide whether to build CUDA code, and for which GPUs.
# - the user's CMAKE_CUDA_ARCHITECTURES always wins;
# - otherwise build for the GPU visible now (nvidia-smi reports its compute capability);
# - otherwise a portable list, sm_75 and newer (a plain "native" fails on a machine without a GPU).
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
        # Machine code for Turing (sm_75), Ampere (sm_80) and Hopper (sm_90), plus compute_75 PTX that the driver
        # compiles at load time for every other GPU from sm_75 on (sm_86, sm_89, Blackwell). Each architecture is a
        # full nvcc pass over every kernel instantiation, so the list stays short: CI builds it on 2 cores.
        message(STATUS "CUDA: no GPU visible, building a portable list (sm_75, sm_80, sm_90, and PTX for the rest)")
        set(CMAKE_CUDA_ARCHITECTURES "75;80-real;90-real" CACHE STRING "CUDA architectures")
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
