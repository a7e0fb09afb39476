// causal_blocks.c - prints the causal stage of every (Q tile, K tile) pair, as the phase 3 kernels decide it.
//
// Usage: causal_blocks S_q S_k BLOCK_M BLOCK_N
// Output: one line per Q tile, one character per K tile: 'F' full (in the past, computed without a mask),
//         'D' diagonal (computed, masked element by element), '.' future (never loaded: the K-tile loop has ended),
//         then a summary line "# full F diagonal D future X". tools/plot_causal_blocks.py draws it
//         (docs/figures/causal_blocks.png). The decision is causal_tile_stage() from common/fa_contract.h,
//         the function phase3_forward_4d/2_causal_cpu.c and 2_causal_cuda.cu call in their K-tile loops.
#include "fa_contract.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s S_q S_k BLOCK_M BLOCK_N\n", argv[0]);
        return 2;
    }
    const int64_t S_q = atoll(argv[1]), S_k = atoll(argv[2]);
    const int block_m = atoi(argv[3]), block_n = atoi(argv[4]);
    if (S_q < 1 || S_k < 1 || block_m < 1 || block_n < 1 || S_q > 1 << 20 || S_k > 1 << 20) {
        fprintf(stderr, "error: sizes must be between 1 and 2^20\n");
        return 2;
    }
    int64_t count[3] = {0, 0, 0};
    for (int64_t q_start = 0; q_start < S_q; q_start += block_m) {
        for (int64_t k_start = 0; k_start < S_k; k_start += block_n) {
            const int stage = causal_tile_stage(1, q_start, k_start, block_m, block_n, S_q, S_k);
            count[stage]++;
            putchar(stage == TILE_FULL ? 'F' : stage == TILE_DIAGONAL ? 'D' : '.');
        }
        putchar('\n');
    }
    printf("# full %lld diagonal %lld future %lld\n", (long long)count[TILE_FULL], (long long)count[TILE_DIAGONAL],
           (long long)count[TILE_FUTURE]);
    return 0;
}
