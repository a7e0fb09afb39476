// test_hopper_timeline.c - the timeline build's CSV writer (phase7_hopper/timeline_csv.c), without a GPU.
//
// Usage: test_hopper_timeline OUT.csv
//
// Events of a made-up block (a producer warp and two consumer warps, three tiles, in the order a warp writes them,
// with unwritten slots between them and a clock that starts far from 0) are written to OUT.csv and read back: every
// written event is there once, unwritten slots are not, times start at 0 and keep their order and lengths, and the
// roles have their names. tests/phase7.cmake then draws OUT.csv with tools/plot_timeline.py.
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORIGIN 1700000000000000000ull   // a %globaltimer reading: nanoseconds since 1970
#define SLOTS 64

static int failures = 0;
static void expect(int ok, const char *what) {
    if (!ok) {
        printf("FAIL: %s\n", what);
        failures++;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.csv\n", argv[0]);
        return 2;
    }
    hopper_timeline_event events[SLOTS];
    memset(events, 0, sizeof events);
    int n = 0, written_expected = 0;
    uint64_t now = ORIGIN + 5000;
    // The producer (warp 0): the Q tile, then per tile a wait and an issue. Slots 20.. stay empty.
    events[n++] = (hopper_timeline_event){now, now + 300, 0, 0, TIMELINE_PRODUCER_ISSUE, -1};
    for (int tile = 0; tile < 3; tile++) {
        events[n++] = (hopper_timeline_event){now + 300 + 1000 * tile, now + 800 + 1000 * tile, 0, 0,
                                              TIMELINE_PRODUCER_WAIT, tile};
        events[n++] = (hopper_timeline_event){now + 800 + 1000 * tile, now + 900 + 1000 * tile, 0, 0,
                                              TIMELINE_PRODUCER_ISSUE, tile};
    }
    written_expected += n;
    // Two consumer warps (4 and 8), from slot 24 on, each: wait, GEMM1, softmax, GEMM2 per tile.
    int slot = 24;
    for (int warp = 4; warp <= 8; warp += 4)
        for (int tile = 0; tile < 3; tile++) {
            const uint64_t t0 = now + 1000 + 1000 * tile + 10 * warp;
            const int roles[4] = {TIMELINE_CONSUMER_WAIT, TIMELINE_GEMM1, TIMELINE_SOFTMAX, TIMELINE_GEMM2};
            for (int r = 0; r < 4; r++, slot++, written_expected++)
                events[slot] = (hopper_timeline_event){t0 + 200 * r, t0 + 200 * r + 150, 0, warp, roles[r], tile};
        }
    // The earliest event is not the first slot: one more warp, stamped before all the others.
    events[SLOTS - 1] = (hopper_timeline_event){ORIGIN, ORIGIN + 40, 0, 5, TIMELINE_CONSUMER_WAIT, 0};
    written_expected++;

    const int64_t written = hopper_timeline_write_csv(argv[1], events, SLOTS);
    expect(written == written_expected, "the writer reports every written event and no empty slot");
    expect(hopper_timeline_write_csv("/nonexistent-directory/x.csv", events, SLOTS) == -1,
           "an unwritable path gives -1");

    FILE *f = fopen(argv[1], "r");
    if (!f) {
        printf("FAIL: cannot read back %s\n", argv[1]);
        return 1;
    }
    char line[256];
    expect(fgets(line, sizeof line, f) && strcmp(line, "block,warp,role,tile,start_ns,end_ns\n") == 0, "the header");
    int rows = 0, zero_seen = 0, in_order = 1;
    unsigned long long last_producer_start = 0;
    while (fgets(line, sizeof line, f)) {
        int block, warp, tile;
        char role[64];
        unsigned long long start, end;
        if (sscanf(line, "%d,%d,%63[^,],%d,%llu,%llu", &block, &warp, role, &tile, &start, &end) != 6) {
            printf("FAIL: not an event line: %s", line);
            failures++;
            continue;
        }
        rows++;
        if (start == 0) zero_seen = 1;
        expect(end >= start && end - start <= 500, "an event keeps its length");
        expect(strcmp(role, "?") != 0, "every role has its name");
        if (warp == 0) {
            if (start < last_producer_start) in_order = 0;
            last_producer_start = start;
            expect(strcmp(role, "producer wait") == 0 || strcmp(role, "producer TMA issue") == 0,
                   "the producer's roles");
        }
        if (warp == 5) expect(start == 0 && end == 40, "the earliest event starts at 0");
        if (warp == 0 && tile == -1) expect(start == 5000 && end == 5300, "times relative to the earliest event");
    }
    fclose(f);
    expect(rows == written_expected, "as many lines as events");
    expect(zero_seen, "some event starts at 0");
    expect(in_order, "a warp's events keep their order");
    expect(strcmp(hopper_timeline_role_name(TIMELINE_GEMM2), "GEMM2 O+=PV") == 0, "role names");
    expect(strcmp(hopper_timeline_role_name(99), "?") == 0, "an unknown role");
    if (failures) return 1;
    printf("timeline CSV: %d events written and read back\n", rows);
    return 0;
}
