// test_phase3_tiles.c - the causal kernels of phase 3 skip the tiles they cannot see, and only those.
//
// Usage: test_phase3_tiles
//
// 1. causal_tile_stage() (common/fa_contract.h), the rule the kernels and the figure use, against a brute
//    force over the elements of each (Q tile, K tile) pair: future when no row of the tile sees any key of it, full
//    when every row sees every key, diagonal otherwise; and k_tiles_visited() and first_masked_tile(), what a K loop
//    works out before it starts, against the rule applied tile by tile.
// 2. The CPU kernels of steps 2 and 3 report how many (Q tile, K tile) pairs they processed (tiles_visited): it must
//    equal the number of pairs on or below the diagonal, counted here element by element, without the rule; and,
//    without the causal mask, every pair. Their output is checked against the float64 oracle at the same time, so a
//    kernel that skipped a tile it needed would fail too.
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_verify.h"
#include "forward4d.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>


// The stage of one pair, from its elements: rows q_start.. and keys k_start.. that exist, and j <= i.
static int brute_force_stage(int64_t q_start, int64_t k_start, int bm, int bn, int64_t S_q, int64_t S_k) {
    int64_t seen = 0, pairs = 0;
    for (int64_t i = q_start; i < q_start + bm && i < S_q; i++)
        for (int64_t j = k_start; j < k_start + bn && j < S_k; j++) {
            pairs++;
            if (j <= i) seen++;
        }
    if (seen == 0) return TILE_FUTURE;
    return seen == pairs ? TILE_FULL : TILE_DIAGONAL;
}

// 1. The rule, over many shapes and tiles, square and not.
static void test_rule(void) {
    const int64_t sizes[] = {1, 2, 7, 17, 64, 65, 100, 128};
    const int tiles[] = {1, 3, 16, 32, 64, 100};
    int64_t checked = 0;
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            for (int x = 0; x < 6; x++)
                for (int y = 0; y < 6; y++) {
                    const int64_t S_q = sizes[a], S_k = sizes[b];
                    const int bm = tiles[x], bn = tiles[y];
                    for (int64_t q_start = 0; q_start < S_q; q_start += bm)
                        for (int64_t k_start = 0; k_start < S_k; k_start += bn) {
                            const int want = brute_force_stage(q_start, k_start, bm, bn, S_q, S_k);
                            const int got = causal_tile_stage(1, q_start, k_start, bm, bn, S_q, S_k);
                            checked++;
                            EXPECT_MSG(got == want, "causal_tile_stage(Sq=%lld Sk=%lld %dx%d, q %lld, k %lld) = %d, "
                                       "expected %d", (long long)S_q, (long long)S_k, bm, bn, (long long)q_start,
                                       (long long)k_start, got, want);
                            EXPECT_MSG(causal_tile_stage(0, q_start, k_start, bm, bn, S_q, S_k) == TILE_FULL,
                                       "without causal every tile must be full");
                        }
                }
    printf("causal_tile_stage: %lld (Q tile, K tile) pairs agree with the element-by-element count\n",
           (long long)checked);
}

// 1b. What a K loop works out before it starts (k_tiles_visited(), first_masked_tile()), against the rule applied tile
// by tile: the loop visits the tiles up to the first in the future, and the first that needs the mask is the first
// diagonal tile or a last tile that S_k cuts short; every visited tile before it is full and whole.
static void test_loop_bounds(void) {
    const int64_t sizes[] = {1, 2, 7, 17, 64, 65, 100, 128, 257};
    const int tiles[] = {1, 3, 16, 32, 64, 100, 128, 192};
    int64_t checked = 0;
    for (int a = 0; a < 9; a++)
        for (int b = 0; b < 9; b++)
            for (int x = 0; x < 8; x++)
                for (int y = 0; y < 8; y++)
                    for (int causal = 0; causal <= 1; causal++) {
                        const int64_t S_q = sizes[a], S_k = sizes[b];
                        const int bm = tiles[x], bn = tiles[y];
                        for (int64_t q_start = 0; q_start < S_q; q_start += bm) {
                            int64_t visited = 0, first_masked = -1;
                            for (int64_t k = 0; k < S_k; k += bn, visited++) {
                                const int stage = causal_tile_stage(causal, q_start, k, bm, bn, S_q, S_k);
                                if (stage == TILE_FUTURE) break;
                                if (first_masked < 0 && (stage == TILE_DIAGONAL || k + bn > S_k))
                                    first_masked = visited;
                            }
                            const int64_t got_visited = k_tiles_visited(causal, q_start, bm, bn, S_q, S_k);
                            const int64_t got_first = first_masked_tile(causal, q_start, bn, S_k);
                            checked++;
                            EXPECT_MSG(got_visited == visited, "k_tiles_visited(causal %d, Sq=%lld Sk=%lld %dx%d, "
                                       "q %lld) = %lld, expected %lld", causal, (long long)S_q, (long long)S_k, bm, bn,
                                       (long long)q_start, (long long)got_visited, (long long)visited);
                            // Past the visited tiles the first masked one does not matter: the loop never gets there.
                            EXPECT_MSG(first_masked < 0 ? got_first >= visited : got_first == first_masked,
                                       "first_masked_tile(causal %d, Sk=%lld, bn %d, q %lld) = %lld, expected %lld",
                                       causal, (long long)S_k, bn, (long long)q_start, (long long)got_first,
                                       (long long)first_masked);
                        }
                    }
    printf("k_tiles_visited, first_masked_tile: %lld Q tiles agree with the rule applied tile by tile\n",
           (long long)checked);
}

// The number of pairs with at least one visible (i, j), per head; all pairs without the causal mask.
static int64_t expected_tiles(const fa_shape *s, int bm, int bn) {
    int64_t count = 0;
    for (int64_t q_start = 0; q_start < s->Sq; q_start += bm)
        for (int64_t k_start = 0; k_start < s->Sk; k_start += bn)
            if (!s->causal || brute_force_stage(q_start, k_start, bm, bn, s->Sq, s->Sk) != TILE_FUTURE) count++;
    return count * s->B * s->H;
}

// 2. The kernels' own count, and their output.
static void test_kernels(fa_shape shape, int bm, int bn) {
    const int64_t nq = fa_numel_q(&shape), nkv = fa_numel_kv(&shape);
    float *q = fa_alloc_floats(nq, "Q"), *k = fa_alloc_floats(nkv, "K"), *v = fa_alloc_floats(nkv, "V");
    float *o = fa_alloc_floats(nq, "O"), *lse = fa_alloc_floats(fa_numel_lse(&shape), "LSE");
    fa_fill_random(q, nq, 3, FA_STREAM_Q, 1.0f);
    fa_fill_random(k, nkv, 3, FA_STREAM_K, 1.0f);
    fa_fill_random(v, nkv, 3, FA_STREAM_V, 1.0f);
    double *qd = fa_to_double(q, nq, "Q"), *kd = fa_to_double(k, nkv, "K"), *vd = fa_to_double(v, nkv, "V");
    double *o_ref = fa_alloc_doubles(nq, "O"), *lse_ref = fa_alloc_doubles(fa_numel_lse(&shape), "LSE");
    fa_oracle_forward(&shape, qd, kd, vd, NULL, o_ref, lse_ref);
    const fa_strides qs = fa_strides_contiguous(shape.H, shape.Sq, shape.D);
    const fa_strides ks = fa_strides_contiguous(shape.H, shape.Sk, shape.D);
    const int64_t want = expected_tiles(&shape, bm, bn);
    int64_t dims[4], lse_dims[4] = {shape.B, shape.H, shape.Sq, 1};
    dims[0] = shape.B, dims[1] = shape.H, dims[2] = shape.Sq, dims[3] = shape.D;

    for (int step = 2; step <= 3; step++) {
        int64_t visited = -1;
        fa_poison(o, nq);
        fa_poison(lse, fa_numel_lse(&shape));
        const forward_tensors t = {q, k, v, qs, ks, ks, o, qs, lse, NULL};
        if (step == 2) flash_forward_causal_cpu(&shape, bm, bn, &t, &visited);
        else flash_forward_lse_cpu(&shape, bm, bn, &t, &visited);
        fa_check c = fa_verify_results("tiles", "O", o, o_ref, dims, NULL, FA_TOL_FORWARD);
        int ok = visited == want && c.pass;
        if (step == 3) ok = ok && fa_verify_results("tiles", "LSE", lse, lse_ref, lse_dims, NULL, FA_TOL_FORWARD).pass;
        printf("step %d  B=%lld H=%lld Sq=%-4lld Sk=%-4lld %3dx%-3d causal=%d: visited %5lld tiles, expected %5lld, "
               "O rel err %.1e: %s\n", step, (long long)shape.B, (long long)shape.H, (long long)shape.Sq,
               (long long)shape.Sk, bm, bn, shape.causal, (long long)visited, (long long)want, c.rel_err,
               ok ? "ok" : "FAIL");
        EXPECT(ok);
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    free(qd);
    free(kd);
    free(vd);
    free(o_ref);
    free(lse_ref);
}

int main(void) {
    test_rule();
    test_loop_bounds();
    const struct {
        int64_t B, H, Sq, Sk, D;
        int bm, bn;
    } cases[] = {
        {1, 1, 256, 256, 16, 64, 32},    // square: 4 Q tiles x 8 K tiles, 4 + 8 + ... on or below the diagonal
        {2, 3, 100, 100, 8, 32, 32},     // square, ragged last tile
        {1, 2, 300, 77, 16, 64, 32},     // Sq > Sk: the rows past Sk see every key
        {1, 2, 77, 300, 16, 32, 64},     // Sq < Sk: most K tiles lie in the future of every row
        {2, 1, 129, 129, 4, 128, 16},    // BLOCK_M > BLOCK_N
        {1, 1, 130, 130, 4, 16, 128},    // BLOCK_M < BLOCK_N
        {1, 1, 50, 50, 4, 7, 5},         // tiles that divide nothing
        {1, 1, 1, 1, 4, 64, 64},         // one row, one key
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int causal = 0; causal <= 1; causal++) {
            fa_shape shape = {cases[c].B, cases[c].H, cases[c].Sq, cases[c].Sk, cases[c].D, causal,
                              (float)(1.0 / sqrt((double)cases[c].D))};
            test_kernels(shape, cases[c].bm, cases[c].bn);
        }
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("all tile checks passed\n");
    return failures ? 1 : 0;
}
