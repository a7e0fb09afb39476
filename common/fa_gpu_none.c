// fa_gpu_none.c - the GPU half of a build without the CUDA toolkit: there is no GPU, and the drivers say so.
#include "fa_gpu.h"

#include <stdio.h>

int fa_gpu_available(char *why, size_t why_len) {
    snprintf(why, why_len, "built without CUDA");
    return 0;
}

const char *fa_gpu_name(void) { return "none"; }

const fa_gpu_facts *fa_gpu_info(void) {
    static const fa_gpu_facts none;
    return &none;
}

double fa_gpu_fp32_peak_tflops(void) { return 0.0; }
