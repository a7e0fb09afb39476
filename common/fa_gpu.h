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
// The device's name, e.g. "NVIDIA H100 80GB HBM3", or "none".
const char *fa_gpu_name(void);

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
