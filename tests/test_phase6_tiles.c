// test_phase6_tiles.c - the window kernels of phase 6 visit the tiles their band reaches, and only those.
//
// Usage: test_phase6_tiles
//
// window_tile_stage() and window_first_tile() (phase6_extensions/extensions.h), the rule both window kernels follow,
// against a brute force over the elements of each (Q tile, K tile) pair, with the visibility of ext_key_range() (the
// oracle's rule): over many shapes, windows and tiles, the K-tile loop of one Q tile (from window_first_tile() until
// the first TILE_FUTURE) must
//   - visit every tile in which some row sees some key (a tile it skips would lose keys),
//   - visit no tile in which no row sees any key (the pruning is exact: time follows the work),
//   - and call a tile TILE_FULL only when every row of it sees every key (a full tile is computed without a mask).
#include "extensions.h"
#include "fa_test_expect.h"

#include <stdio.h>


// Visible (row, key) pairs of one tile, and the pairs there are.
static void count_pairs(const ext_options *e, int causal, int64_t q_start, int64_t k_start, int bm, int bn,
                        int64_t S_q, int64_t S_k, int64_t *visible, int64_t *pairs) {
    *visible = *pairs = 0;
    for (int64_t i = q_start; i < q_start + bm && i < S_q; i++) {
        int64_t first, last;
        ext_key_range(causal, e, S_q, S_k, i, &first, &last);
        for (int64_t j = k_start; j < k_start + bn && j < S_k; j++) {
            (*pairs)++;
            if (j >= first && j <= last) (*visible)++;
        }
    }
}

static void check_shape(int64_t S_q, int64_t S_k, int64_t left, int64_t right, int bm, int bn, int64_t *checked) {
    const ext_options e = {.H_kv = 1, .window_left = left, .window_right = right, .softcap = 0.0f, .bottom_right = 0};
    for (int64_t q_start = 0; q_start < S_q; q_start += bm) {
        const int64_t first_tile = window_first_tile(left, q_start, bn);
        int stopped = 0;
        for (int64_t k_start = 0; k_start < S_k; k_start += bn) {
            int64_t visible, pairs;
            count_pairs(&e, 0, q_start, k_start, bm, bn, S_q, S_k, &visible, &pairs);
            int visited = 0, stage = -1;
            if (k_start >= first_tile && !stopped) {
                stage = window_tile_stage(left, right, q_start, k_start, bm, bn, S_q, S_k);
                if (stage == TILE_FUTURE) stopped = 1;
                else visited = 1;
            }
            const int wrong = (visible > 0 && !visited) || (visible == 0 && visited) ||
                              (stage == TILE_FULL && visible != pairs);
            (*checked)++;
            EXPECT_MSG(!wrong, "window (%lld, %lld), Sq=%lld Sk=%lld, tiles %dx%d, q %lld, k %lld: %s (stage %d, "
                       "%lld of %lld pairs visible)", (long long)left, (long long)right, (long long)S_q,
                       (long long)S_k, bm, bn, (long long)q_start, (long long)k_start,
                       visited ? "visited" : "skipped", stage, (long long)visible, (long long)pairs);
        }
    }
}

int main(void) {
    const int64_t sizes[] = {1, 7, 17, 64, 100, 130};
    const int64_t sides[] = {-1, 0, 1, 5, 40, 200};
    const int tiles[] = {1, 5, 16, 64};
    int64_t checked = 0;
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 6; b++)
            for (int l = 0; l < 6; l++)
                for (int r = 0; r < 6; r++)
                    for (int x = 0; x < 4; x++)
                        for (int y = 0; y < 4; y++)
                            check_shape(sizes[a], sizes[b], sides[l], sides[r], tiles[x], tiles[y], &checked);
    printf("window tile rule: %lld (Q tile, K tile) pairs checked, %d wrong\n", (long long)checked, failures);
    return failures ? 1 : 0;
}
