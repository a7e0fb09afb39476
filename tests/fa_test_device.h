// fa_test_device.h - the command line of the test programs that run on the CPU or the GPU: `test cpu|cuda`.
#ifndef FA_TEST_DEVICE_H
#define FA_TEST_DEVICE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_gpu.h"
#include "fa_tensor.h"

// Returns 1 for "cuda", 0 for "cpu". Anything else prints the usage and exits 2; "cuda" on a machine without a GPU
// prints why and exits 77, which ctest reports as skipped.
static inline int fa_test_wants_gpu(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "cpu") != 0 && strcmp(argv[1], "cuda") != 0)) {
        fprintf(stderr, "usage: %s cpu|cuda\n", argv[0]);
        exit(FA_EXIT_BAD_INPUT);
    }
    if (strcmp(argv[1], "cpu") == 0) return 0;
    char why[160];
    if (!fa_gpu_available(why, sizeof why)) {
        printf("skipped: %s\n", why);
        exit(FA_EXIT_SKIP);
    }
    return 1;
}

#endif
