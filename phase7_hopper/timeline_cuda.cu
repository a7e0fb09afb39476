// timeline_cuda.cu - phase 7: step 3 with its per-warp clock stamps on, run once (the timeline build only).
//
// The target phase7_timeline compiles this file, with HOPPER_TIMELINE defined, in place of
// 3_warp_specialized_cuda.cu: the same kernel, whose warp_timeline (timeline.cuh) now records, and the host function
// that points the kernel at a buffer, runs it and copies the events back. The stamps need registers in the producer
// (two 64-bit times and a slot address), so it keeps 40 and each consumer 232 (40 + 2 x 232 = 504, as in step 3).
// Run: build/bin/phase7_timeline --impl cuda --step 3 --dtype bf16 --B 4 --H 16 --S 4096 --D 128 --block-n 128
//          --check-heads 1 --timeline timeline.csv
//      python3 tools/plot_timeline.py timeline.csv -o timeline.png
#ifndef HOPPER_TIMELINE
#error "timeline_cuda.cu is the timeline build of step 3: compile it with HOPPER_TIMELINE defined"
#endif
#define PRODUCER_REGISTERS 40
#define CONSUMER_REGISTERS 232
#include "3_warp_specialized_cuda.cu"

extern "C" void flash_forward_warp_specialized_timeline_cuda(const fa_shape *shape, int dtype, int block_m,
                                                             int block_n, const tc_forward_tensors *t,
                                                             hopper_timeline_event *events) {
    const size_t bytes = sizeof(hopper_timeline_event) * HOPPER_TIMELINE_EVENTS;
    hopper_timeline_event *events_device = NULL, *none = NULL;
    FA_CUDA_CHECK(cudaMalloc((void **)&events_device, bytes));
    FA_CUDA_CHECK(cudaMemset(events_device, 0, bytes));   // end_ns = 0: a slot nobody wrote
    FA_CUDA_CHECK(cudaMemcpyToSymbol(timeline_events, &events_device, sizeof events_device));
    flash_forward_warp_specialized_cuda(shape, dtype, block_m, block_n, t);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    FA_CUDA_CHECK(cudaMemcpy(events, events_device, bytes, cudaMemcpyDeviceToHost));
    FA_CUDA_CHECK(cudaMemcpyToSymbol(timeline_events, &none, sizeof none));   // later launches record nothing
    FA_CUDA_CHECK(cudaFree(events_device));
}
