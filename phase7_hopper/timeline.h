// timeline.h - phase 7: the warp roles over time, measured from step 3's kernel itself (a debug build only).
//
// The build target phase7_timeline compiles the kernels with HOPPER_TIMELINE defined: step 3's warps then read the
// GPU's nanosecond clock (%globaltimer, timeline.cuh) at the start and end of each piece of their work and store one
// event per piece, lane 0 of each warp, for the first HOPPER_TIMELINE_BLOCKS blocks of the first head. The driver's
// --timeline FILE writes the events as CSV (hopper_timeline_write_csv) and tools/plot_timeline.py draws them, one
// lane per warp. The release kernels (target phase7_hopper) are compiled without it: no stamp, no extra register.
#ifndef HOPPER_TIMELINE_H
#define HOPPER_TIMELINE_H

#include <stdint.h>
#include <stdio.h>

#include "fa_baselines.h"   // tc_forward_tensors
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HOPPER_TIMELINE_BLOCKS 4     // blocks recorded: blockIdx.x 0..3 of head 0 (the first launched)
#define HOPPER_TIMELINE_WARPS 12     // warps of a step 3 block: 1 producer and 2 consumer warpgroups of 4
#define HOPPER_TIMELINE_SLOTS 256    // events each warp may record (more are dropped)
#define HOPPER_TIMELINE_EVENTS (HOPPER_TIMELINE_BLOCKS * HOPPER_TIMELINE_WARPS * HOPPER_TIMELINE_SLOTS)

// What a warp was doing between start_ns and end_ns.
enum {
    TIMELINE_PRODUCER_WAIT = 1,   // the producer waits until the consumers have emptied a ring buffer
    TIMELINE_PRODUCER_ISSUE = 2,  // ... and asks the copy engine for the tile (the copy itself runs on after)
    TIMELINE_CONSUMER_WAIT = 3,   // a consumer waits for its tile to land
    TIMELINE_GEMM1 = 4,           // S = Q K^T, issued and waited for
    TIMELINE_SOFTMAX = 5,         // the mask and the online softmax, P packed
    TIMELINE_GEMM2 = 6,           // O += P V, issued and waited for
};
const char *hopper_timeline_role_name(int role);   // "producer wait", ...; "?" for anything else

// One event; a slot that was never written has end_ns = 0.
typedef struct {
    uint64_t start_ns, end_ns;   // %globaltimer, nanoseconds
    int32_t block, warp;         // blockIdx.x, and the warp in the block (0-3: the producer warpgroup)
    int32_t role, tile;          // TIMELINE_*, and the K/V tile (-1: the Q tile)
} hopper_timeline_event;

// Writes the written events of events[0..count) as CSV, one line each, times relative to the earliest start:
//   block,warp,role,tile,start_ns,end_ns
// Returns the number of events written, or -1 when the file cannot be written.
int64_t hopper_timeline_write_csv(const char *path, const hopper_timeline_event *events, int64_t count);

// Timeline build only: runs step 3 once with stamps on and copies its HOPPER_TIMELINE_EVENTS events into events.
void flash_forward_warp_specialized_timeline_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                                  const tc_forward_tensors *t, hopper_timeline_event *events);

#ifdef __cplusplus
}
#endif

#endif
