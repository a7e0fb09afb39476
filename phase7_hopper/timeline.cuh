// timeline.cuh - phase 7: per-warp %globaltimer stamps around each role's work in step 3 (timeline.h says why).
//
// Step 3 opens one warp_timeline per warp and brackets each piece of work with begin() and end(role, tile). In the
// release build (HOPPER_TIMELINE not defined) warp_timeline is an empty struct whose functions are empty: the kernel
// compiles to the same instructions as without them. In the timeline build, lane 0 of each warp of the recorded
// blocks reads the clock at begin() and at end() and stores one hopper_timeline_event.
#ifndef TIMELINE_CUH
#define TIMELINE_CUH

#include <stdint.h>

#include "timeline.h"

#ifdef HOPPER_TIMELINE

// The GPU's global nanosecond clock (the same on every SM; it advances in steps of about a microsecond on some
// GPUs, 32 ns or less on an H100). volatile: the compiler may not move it across the work it brackets.
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t ns;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns)::"memory");
    return ns;
}

// Where the events go: [HOPPER_TIMELINE_BLOCKS][HOPPER_TIMELINE_WARPS][HOPPER_TIMELINE_SLOTS], set by the host
// (timeline_cuda.cu) before the launch; NULL records nothing.
__device__ hopper_timeline_event *timeline_events;

struct warp_timeline {
    hopper_timeline_event *slots = nullptr;   // this warp's slots; NULL: not recorded (another block, another lane)
    int count = 0;
    uint64_t started = 0;
    __device__ void open() {
        const int warp = threadIdx.x / 32;
        if (timeline_events && blockIdx.y == 0 && blockIdx.x < HOPPER_TIMELINE_BLOCKS && threadIdx.x % 32 == 0 &&
            warp < HOPPER_TIMELINE_WARPS)
            slots = timeline_events + ((int64_t)blockIdx.x * HOPPER_TIMELINE_WARPS + warp) * HOPPER_TIMELINE_SLOTS;
    }
    __device__ void begin() {
        if (slots) started = globaltimer();
    }
    __device__ void end(int role, int64_t tile) {
        if (!slots || count >= HOPPER_TIMELINE_SLOTS) return;
        const uint64_t now = globaltimer();
        slots[count++] = {started, now, (int32_t)blockIdx.x, (int32_t)(threadIdx.x / 32), role, (int32_t)tile};
    }
};

#else

struct warp_timeline {   // the release build: nothing is recorded
    __device__ __forceinline__ void open() {}
    __device__ __forceinline__ void begin() {}
    __device__ __forceinline__ void end(int, int64_t) {}
};

#endif

#endif
