# Decide whether to build CUDA code, and for which GPUs.
# - the user's CMAKE_CUDA_ARCHITECTURES always wins: the CUDA code compiles for it, GPU or not (the portable list,
#   -DCMAKE_CUDA_ARCHITECTURES="75;80-real;90-real", compiles every kernel for every GPU generation the README
#   promises; CI passes "75-virtual", PTX for the oldest generation: no source branches on the generation, so that
#   is every line, and phase 7 compiles for sm_90a, the one it exists for);
# - otherwise build for the GPU visible now (nvidia-smi reports its compute capability);
# - otherwise (no GPU here: a learner's laptop) the CPU versions only. Nothing compiled for a GPU could run here, and
#   compiling every kernel even for one architecture takes about ten minutes on 2 cores, against one for the C code.
#   The GPU tests are registered all the same and report themselves skipped. -DCMAKE_CUDA_ARCHITECTURES=80 compiles
#   the CUDA code for checking (a plain "native" fails on a machine without a GPU).
set(FA_HAVE_CUDA OFF)
if(FA_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  set(_fa_gpu_code ${CMAKE_CUDA_COMPILER})   # cleared below when there is no GPU to build for
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
        message(STATUS "CUDA: no GPU visible, building the CPU versions only (GPU tests report themselves skipped); "
                       "-DCMAKE_CUDA_ARCHITECTURES=80 compiles the CUDA code too, "
                       "-DCMAKE_CUDA_ARCHITECTURES=\"75;80-real;90-real\" for every GPU generation")
        set(_fa_gpu_code "")
      endif()
    endif()
  endif()
  if(_fa_gpu_code)
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
  elseif(NOT CMAKE_CUDA_COMPILER)
    message(STATUS "CUDA: no CUDA compiler found; building the CPU versions only")
  endif()
endif()
