// tile_maps.c - prints which (Q tile, K tile) pairs a kernel visits, and how, for the tile-map figures of the docs.
//
// Usage: tile_maps causal S_q S_k BLOCK_M BLOCK_N
//        tile_maps window S_q S_k BLOCK_M BLOCK_N LEFT RIGHT        (RIGHT 0: causal with a window)
//        tile_maps varlen BLOCK_M BLOCK_N L1,L2,...                 (causal, sequences packed one after another)
//        tile_maps splitkv S_q S_k                                  (split-KV decoding: one block per split)
// Output: one line per tile, "q_first q_end k_first k_end STAGE" (token ranges [first, end) of the packed or plain
// axes), STAGE F (computed without a mask), D (computed, masked element by element), . (in the future: the K-tile
// loop has ended before it), - (before the band: the loop starts after it); for splitkv one line per split,
// "0 S_q k_first k_end S<n>". Then a summary line "# ...". tools/plot_tile_maps.py draws it.
// The decisions are the kernels' own: causal_tile_stage() (common/fa_contract.h), window_first_tile() and
// window_tile_stage(), varlen_q_tiles() and splitkv_num_splits() (phase6_extensions/extensions.h), called the way
// phase3_forward_4d/3_lse_cpu.c, phase6_extensions/window/window_cpu.c, varlen/varlen_cpu.c and splitkv/splitkv_cpu.c
// call them.
#include "extensions.h"
#include "fa_contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char STAGE_CHAR[] = {[TILE_FULL] = 'F', [TILE_DIAGONAL] = 'D', [TILE_FUTURE] = '.'};

static int64_t parse_size(const char *text, const char *what) {
    char *end = NULL;
    const long long value = strtoll(text, &end, 10);
    if (!end || *end || value < 0 || value > (1 << 20)) {
        fprintf(stderr, "error: %s '%s' must be an integer between 0 and 2^20\n", what, text);
        exit(2);
    }
    return value;
}

// One head of S_q x S_k, offset by (q_base, k_base) on the packed axes: the tiles of every Q tile, as the kernels
// walk them. left < -1 means "no window" (the causal kernels); counts[0..3]: full, diagonal, future, before.
static void walk_head(int64_t q_base, int64_t k_base, int64_t S_q, int64_t S_k, int block_m, int block_n,
                      int window, int64_t left, int64_t right, int64_t counts[4]) {
    for (int64_t q_start = 0; q_start < S_q; q_start += block_m) {
        const int64_t q_end = q_start + block_m < S_q ? q_start + block_m : S_q;
        const int64_t first = window ? window_first_tile(left, q_start, block_n) : 0;
        int ended = 0;
        for (int64_t k_start = 0; k_start < S_k; k_start += block_n) {
            const int64_t k_end = k_start + block_n < S_k ? k_start + block_n : S_k;
            char stage_char;
            if (k_start < first) {
                stage_char = '-';
                counts[3]++;
            } else {
                const int stage = ended ? TILE_FUTURE
                                  : window ? window_tile_stage(left, right, q_start, k_start, block_m, block_n, S_q, S_k)
                                           : causal_tile_stage(1, q_start, k_start, block_m, block_n, S_q, S_k);
                ended = stage == TILE_FUTURE;
                stage_char = STAGE_CHAR[stage];
                counts[stage]++;
            }
            printf("%lld %lld %lld %lld %c\n", (long long)(q_base + q_start), (long long)(q_base + q_end),
                   (long long)(k_base + k_start), (long long)(k_base + k_end), stage_char);
        }
    }
}

static int usage(const char *self) {
    fprintf(stderr, "usage: %s causal S_q S_k BLOCK_M BLOCK_N | window S_q S_k BLOCK_M BLOCK_N LEFT RIGHT |\n"
                    "       %s varlen BLOCK_M BLOCK_N L1,L2,... | splitkv S_q S_k\n", self, self);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(argv[0]);
    int64_t counts[4] = {0, 0, 0, 0};
    if ((!strcmp(argv[1], "causal") && argc == 6) || (!strcmp(argv[1], "window") && argc == 8)) {
        const int window = !strcmp(argv[1], "window");
        const int64_t S_q = parse_size(argv[2], "S_q"), S_k = parse_size(argv[3], "S_k");
        const int block_m = (int)parse_size(argv[4], "BLOCK_M"), block_n = (int)parse_size(argv[5], "BLOCK_N");
        const int64_t left = window ? atoll(argv[6]) : -2, right = window ? atoll(argv[7]) : 0;
        if (!S_q || !S_k || !block_m || !block_n) return usage(argv[0]);
        walk_head(0, 0, S_q, S_k, block_m, block_n, window, left, right, counts);
    } else if (!strcmp(argv[1], "varlen") && argc == 5) {
        const int block_m = (int)parse_size(argv[2], "BLOCK_M"), block_n = (int)parse_size(argv[3], "BLOCK_N");
        int64_t cu_seqlens[65] = {0}, cu_q_tiles[65], n = 0;
        for (char *item = strtok(argv[4], ","); item; item = strtok(NULL, ",")) {
            if (n == 64) return usage(argv[0]);
            cu_seqlens[n + 1] = cu_seqlens[n] + parse_size(item, "a sequence length");
            n++;
        }
        if (!n || !block_m || !block_n) return usage(argv[0]);
        varlen_q_tiles(n, cu_seqlens, block_m, cu_q_tiles);
        // Each sequence is a causal head of its own length, placed at its offset in the packed tokens: its queries
        // see its own keys only, so every pair of two different sequences is never visited (not printed).
        for (int64_t b = 0; b < n; b++) {
            const int64_t len = cu_seqlens[b + 1] - cu_seqlens[b];
            walk_head(cu_seqlens[b], cu_seqlens[b], len, len, block_m, block_n, 0, -2, 0, counts);
        }
        printf("# sequences %lld tokens %lld q_tiles %lld\n", (long long)n, (long long)cu_seqlens[n],
               (long long)cu_q_tiles[n]);
    } else if (!strcmp(argv[1], "splitkv") && argc == 4) {
        const int64_t S_q = parse_size(argv[2], "S_q"), S_k = parse_size(argv[3], "S_k");
        if (!S_q || !S_k) return usage(argv[0]);
        const int64_t splits = splitkv_num_splits(S_k);
        for (int64_t s = 0; s < splits; s++) {
            const int64_t k_end = (s + 1) * SPLITKV_KEYS_PER_SPLIT < S_k ? (s + 1) * SPLITKV_KEYS_PER_SPLIT : S_k;
            printf("0 %lld %lld %lld S%lld\n", (long long)S_q, (long long)(s * SPLITKV_KEYS_PER_SPLIT),
                   (long long)k_end, (long long)s);
        }
        printf("# splits %lld keys_per_split %d\n", (long long)splits, SPLITKV_KEYS_PER_SPLIT);
        return 0;
    } else {
        return usage(argv[0]);
    }
    printf("# full %lld diagonal %lld future %lld before %lld\n", (long long)counts[0], (long long)counts[1],
           (long long)counts[2], (long long)counts[3]);
    return 0;
}
