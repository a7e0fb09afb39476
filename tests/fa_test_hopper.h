// fa_test_hopper.h - the command line of phase 7's GPU tests: `test cuda`, run on a Hopper GPU only.
#ifndef FA_TEST_HOPPER_H
#define FA_TEST_HOPPER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_gpu.h"
#include "fa_tensor.h"   // FA_EXIT_BAD_INPUT, FA_EXIT_SKIP
#include "hopper.h"

// Anything but "cuda" prints the usage and exits 2; without a GPU, or on one that is not a Hopper (sm_90), it prints
// why and exits 77, which ctest reports as skipped.
static inline void fa_test_require_hopper(int argc, char **argv) {
    if (argc != 2 || strcmp(argv[1], "cuda") != 0) {
        fprintf(stderr, "usage: %s cuda\n", argv[0]);
        exit(FA_EXIT_BAD_INPUT);
    }
    char why[256];
    if (!fa_gpu_available(why, sizeof why) || hopper_cuda_check_device(why, sizeof why) != 0) {
        printf("skipped: %s\n", why);
        exit(FA_EXIT_SKIP);
    }
}

#endif
