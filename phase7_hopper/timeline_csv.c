// timeline_csv.c - phase 7: the timeline build's events as CSV (timeline.h), for tools/plot_timeline.py.
#include "timeline.h"

#include <stdio.h>

const char *hopper_timeline_role_name(int role) {
    switch (role) {
    case TIMELINE_PRODUCER_WAIT: return "producer wait";
    case TIMELINE_PRODUCER_ISSUE: return "producer TMA issue";
    case TIMELINE_CONSUMER_WAIT: return "consumer wait";
    case TIMELINE_GEMM1: return "GEMM1 S=QK^T";
    case TIMELINE_SOFTMAX: return "softmax";
    case TIMELINE_GEMM2: return "GEMM2 O+=PV";
    default: return "?";
    }
}

int64_t hopper_timeline_write_csv(const char *path, const hopper_timeline_event *events, int64_t count) {
    // The clock's origin is arbitrary: times start at the earliest event.
    uint64_t origin = UINT64_MAX;
    for (int64_t i = 0; i < count; i++)
        if (events[i].end_ns != 0 && events[i].start_ns < origin) origin = events[i].start_ns;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "block,warp,role,tile,start_ns,end_ns\n");
    int64_t written = 0;
    for (int64_t i = 0; i < count; i++) {
        const hopper_timeline_event *e = &events[i];
        if (e->end_ns == 0) continue;   // a slot no warp wrote
        fprintf(f, "%d,%d,%s,%d,%llu,%llu\n", (int)e->block, (int)e->warp, hopper_timeline_role_name(e->role),
                (int)e->tile, (unsigned long long)(e->start_ns - origin), (unsigned long long)(e->end_ns - origin));
        written++;
    }
    if (fclose(f) != 0) return -1;
    return written;
}
