// fa_gpu.h - what the C drivers need from the GPU: detection, buffers, copies, event timing.
//
// Implemented in fa_gpu.cu when the CUDA toolkit is present; in a CPU-only build fa_gpu_none.c reports that there
// is no GPU, and the drivers skip their GPU rows. Device errors print one line with file and line and exit 3
// (an allocation that fails exits 2 and says how many bytes it needed, as for any request the machine cannot meet).
#ifndef FA_GPU_H
#define FA_GPU_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>
#include <stddef.h>

#include "fa_tensor.h"
#include "fa_timer.h"

// 1 when a CUDA device can be used; otherwise 0 and a short reason in why ("built without CUDA", "no CUDA device").
int fa_gpu_available(char *why, size_t why_len);
// The device's name, e.g. "NVIDIA H100 80GB HBM3", or "none" (before fa_gpu_available() found one).
const char *fa_gpu_name(void);
// What the device says of itself (cudaGetDeviceProperties, cudaDeviceGetAttribute); 0 where there is no GPU.
typedef struct {
    int sms;                   // streaming multiprocessors
    int clock_mhz;             // the SM clock the device reports (its boost clock)
    int memory_clock_mhz;
    int cc_major, cc_minor;    // compute capability
    int fp32_lanes_per_sm;     // float32 FMA results per SM per clock (fa_gpu.cu: from a documented table; 0 unknown)
} fa_gpu_facts;
const fa_gpu_facts *fa_gpu_info(void);
// The float32 FMA peak derived from those facts: sms * fp32_lanes_per_sm * 2 FLOPs * clock, in TFLOP/s (0 unknown).
// A data-sheet number, not a measurement: a matmul reaches less (docs/05-measuring.md).
double fa_gpu_fp32_peak_tflops(void);

#if FA_HAVE_CUDA
float *fa_gpu_try_alloc(int64_t count);                   // NULL when the device is out of memory
float *fa_gpu_alloc(int64_t count, const char *what);     // exits 2 with the bytes needed
void fa_gpu_free(void *ptr);
void fa_gpu_upload(float *device, const float *host, int64_t count);
void fa_gpu_download(float *host, const float *device, int64_t count);
void fa_gpu_poison(float *device, int64_t count);          // every element becomes NaN
void fa_gpu_synchronize(const char *what);                 // waits and reports any asynchronous kernel error
// Runs fn(ctx) (which launches kernels) warmup times, then iters times, each timed with CUDA events.
fa_timing fa_gpu_time(void (*fn)(void *ctx), void *ctx, int warmup, int iters);
#endif

#ifdef __cplusplus
}
#endif

#endif
