// fa_gpu.cu - GPU detection, buffers, copies and event timing for the C drivers.
#include "fa_cuda_check.h"
#include "fa_gpu.h"
#include "fa_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_name[256] = "none";
static fa_gpu_facts g_facts;

// float32 FMA lanes per SM by compute capability: the "32-bit floating-point add, multiply, multiply-add" row of the
// arithmetic-instruction throughput table in NVIDIA's CUDA C++ Programming Guide. Unlisted architectures give 0
// (unknown), and no peak is printed for them.
static int fp32_lanes_per_sm(int major, int minor) {
    static const struct { int major, minor, lanes; } table[] = {
        {7, 0, 64}, {7, 5, 64}, {8, 0, 64}, {8, 6, 128}, {8, 7, 128}, {8, 9, 128}, {9, 0, 128}, {10, 0, 128},
        {12, 0, 128},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].major == major && table[i].minor == minor) return table[i].lanes;
    return 0;
}

extern "C" int fa_gpu_available(char *why, size_t why_len) {
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        snprintf(why, why_len, "no CUDA device (%s)", status != cudaSuccess ? cudaGetErrorString(status) : "none found");
        cudaGetLastError();   // clear the sticky error so that later calls are not confused by it
        return 0;
    }
    cudaDeviceProp prop;
    FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    snprintf(g_name, sizeof g_name, "%s", prop.name);
    int khz = 0, memory_khz = 0;
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, 0));
    g_facts.sms = prop.multiProcessorCount;
    g_facts.clock_mhz = khz / 1000;
    g_facts.memory_clock_mhz = memory_khz / 1000;
    g_facts.cc_major = prop.major;
    g_facts.cc_minor = prop.minor;
    g_facts.fp32_lanes_per_sm = fp32_lanes_per_sm(prop.major, prop.minor);
    return 1;
}

extern "C" const char *fa_gpu_name(void) { return g_name; }

extern "C" const fa_gpu_facts *fa_gpu_info(void) { return &g_facts; }

extern "C" double fa_gpu_fp32_peak_tflops(void) {
    return (double)g_facts.sms * g_facts.fp32_lanes_per_sm * 2.0 * g_facts.clock_mhz * 1e6 / 1e12;
}

extern "C" float *fa_gpu_try_alloc(int64_t count) {
    void *ptr = NULL;
    if (cudaMalloc(&ptr, (size_t)count * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return (float *)ptr;
}

extern "C" float *fa_gpu_alloc(int64_t count, const char *what) {
    float *ptr = fa_gpu_try_alloc(count);
    if (!ptr) {
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        fa_die("out of GPU memory: %s needs %.0f bytes, %.0f are free", what, (double)count * sizeof(float),
               (double)free_bytes);
    }
    return ptr;
}

extern "C" void fa_gpu_free(void *ptr) { FA_CUDA_CHECK(cudaFree(ptr)); }

extern "C" void fa_gpu_upload(float *device, const float *host, int64_t count) {
    FA_CUDA_CHECK(cudaMemcpy(device, host, (size_t)count * sizeof(float), cudaMemcpyHostToDevice));
}

extern "C" void fa_gpu_download(float *host, const float *device, int64_t count) {
    FA_CUDA_CHECK(cudaMemcpy(host, device, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost));
}

extern "C" void fa_gpu_poison(float *device, int64_t count) {
    // All bits set is a NaN in IEEE-754 float32.
    FA_CUDA_CHECK(cudaMemset(device, 0xFF, (size_t)count * sizeof(float)));
}

extern "C" void fa_gpu_synchronize(const char *what) {
    cudaError_t status = cudaDeviceSynchronize();
    if (status != cudaSuccess) {
        fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(status));
        exit(FA_EXIT_GPU_ERROR);
    }
}

extern "C" fa_timing fa_gpu_time(void (*fn)(void *ctx), void *ctx, int warmup, int iters) {
    for (int i = 0; i < warmup; i++) fn(ctx);
    fa_gpu_synchronize("warm-up run");
    fa_timing t = {0.0, 0.0, iters};
    if (iters <= 0) return t;
    cudaEvent_t start, stop;
    FA_CUDA_CHECK(cudaEventCreate(&start));
    FA_CUDA_CHECK(cudaEventCreate(&stop));
    double *ms = (double *)malloc((size_t)iters * sizeof(double));
    for (int i = 0; i < iters; i++) {
        FA_CUDA_CHECK(cudaEventRecord(start));
        fn(ctx);
        FA_CUDA_CHECK(cudaEventRecord(stop));
        FA_CUDA_CHECK(cudaEventSynchronize(stop));
        float elapsed = 0.0f;
        FA_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
        ms[i] = elapsed;
    }
    fa_gpu_synchronize("timed runs");
    t.median_ms = fa_median(ms, iters);
    t.min_ms = ms[0];
    free(ms);
    FA_CUDA_CHECK(cudaEventDestroy(start));
    FA_CUDA_CHECK(cudaEventDestroy(stop));
    return t;
}
