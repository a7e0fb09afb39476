// fa_cuda_check.h - one error-check macro for CUDA calls and one after every kernel launch.
#ifndef FA_CUDA_CHECK_H
#define FA_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "fa_tensor.h"

static inline void fa_cuda_check_(cudaError_t status, const char *what, const char *file, int line) {
    if (status != cudaSuccess) {
        fprintf(stderr, "error: %s:%d: %s failed: %s\n", file, line, what, cudaGetErrorString(status));
        exit(FA_EXIT_GPU_ERROR);
    }
}

#define FA_CUDA_CHECK(call) fa_cuda_check_((call), #call, __FILE__, __LINE__)
// A launch reports a bad configuration (too many threads, too much shared memory) only through cudaGetLastError.
#define FA_CUDA_CHECK_LAUNCH() fa_cuda_check_(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

#endif
