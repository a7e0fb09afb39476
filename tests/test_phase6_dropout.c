// test_phase6_dropout.c - the generator and the mask behind phase 6's dropout, and that the oracle checks the mask.
//
// Usage: test_phase6_dropout
//
//   1. Philox4x32-10 (phase6_extensions/philox.h) gives the three known-answer vectors its authors publish
//      (Random123's tests/kat_vectors).
//   2. dropout_keep (one key) agrees with dropout_keep4 (four keys per call), key by key.
//   3. The mask drops a fraction p of the keys, within 5 standard deviations, for p = 0.1, 0.5 and 0.9 (and none for
//      p = 0); rows, heads and seeds get masks of their own (two different ones agree on about p^2 + (1 - p)^2 of
//      the keys, not on all).
//   4. The CPU dropout forward matches the float64 oracle drawn with the same seed, and misses the oracle drawn with
//      another seed by far more than the check's tolerance: the check sees the mask, so a kernel that drew the wrong
//      one would fail it.
#include "extensions.h"
#include "oracle_ext.h"

#include "fa_tensor.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void check_known_answers(void) {
    static const uint32_t vectors[3][10] = {
        // counter[4], key[2], expected[4]
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x408f276du, 0x41c83b0eu,
         0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0xd16cfe09u, 0x94fdccebu,
         0x5001e420u, 0x24126ea1u},
    };
    for (int v = 0; v < 3; v++) {
        philox4 counter;
        for (int w = 0; w < 4; w++) counter.w[w] = vectors[v][w];
        const philox4 r = philox4x32_10(counter, vectors[v][4], vectors[v][5]);
        for (int w = 0; w < 4; w++)
            EXPECT_MSG(r.w[w] == vectors[v][6 + w], "Philox known answer %d, word %d: %08x, expected %08x", v, w,
                   (unsigned)r.w[w], (unsigned)vectors[v][6 + w]);
    }
}

static void check_mask_statistics(void) {
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
    const int64_t rows = 256, keys = 4096, n = rows * keys;
    for (int x = 0; x < 4; x++) {
        const float p = ps[x];
        const dropout_params drop = dropout_params_for(p, 1234567);
        const dropout_params other_seed = dropout_params_for(p, 1234568);
        int64_t dropped = 0, mismatched_keep4 = 0, same_row = 0, same_head = 0, same_seed = 0;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < keys; j++) {
                const int keep = dropout_keep(drop.seed, drop.threshold, 3, i, j);
                const unsigned keep4 = dropout_keep4(drop.seed, drop.threshold, 3, i, j / 4);
                mismatched_keep4 += keep != (int)(keep4 >> (j % 4) & 1u);
                dropped += !keep;
                same_row += keep == dropout_keep(drop.seed, drop.threshold, 3, i + rows, j);
                same_head += keep == dropout_keep(drop.seed, drop.threshold, 4, i, j);
                same_seed += keep == dropout_keep(other_seed.seed, other_seed.threshold, 3, i, j);
            }
        EXPECT_MSG(mismatched_keep4 == 0, "p=%g: dropout_keep and dropout_keep4 disagree on %lld keys", (double)p,
               (long long)mismatched_keep4);
        const double sigma = sqrt((double)n * p * (1.0 - p)), expected = (double)n * p;
        EXPECT_MSG(fabs((double)dropped - expected) <= 5.0 * sigma, "p=%g: %lld of %lld dropped, expected %.0f +- %.0f",
               (double)p, (long long)dropped, (long long)n, expected, 5.0 * sigma);
        // Two independent masks agree on a fraction p^2 + (1 - p)^2 of the keys (all of them when p = 0).
        const double agree = p * p + (1.0 - p) * (1.0 - p), agree_sigma = sqrt((double)n * agree * (1.0 - agree));
        const int64_t agreements[3] = {same_row, same_head, same_seed};
        static const char *const WHAT[3] = {"another row", "another head", "another seed"};
        for (int a = 0; a < 3; a++)
            EXPECT_MSG(fabs((double)agreements[a] - (double)n * agree) <= 5.0 * agree_sigma + 0.5,
                   "p=%g: the mask of %s agrees on %lld of %lld keys, expected %.0f", (double)p, WHAT[a],
                   (long long)agreements[a], (long long)n, (double)n * agree);
        printf("p=%.1f: dropped %lld of %lld (%.4f)\n", (double)p, (long long)dropped, (long long)n,
               (double)dropped / (double)n);
    }
}

// The largest |O - O_oracle| of a row, over the row's scale (what the check measures).
static double o_error(const fa_shape *s, const float *o, const double *o_ref, const fa_row_bounds *bounds) {
    double worst = 0.0;
    for (int64_t x = 0; x < fa_numel_q(s); x++)
        worst = fmax(worst, fabs((double)o[x] - o_ref[x]) / bounds->scale[x / s->D]);
    return worst;
}

static void check_oracle_sees_the_mask(void) {
    const fa_shape s = {.B = 2, .H = 3, .Sq = 70, .Sk = 90, .D = 32, .causal = 1, .scale = 0.17677669f};
    const uint64_t seed = 42;
    const int64_t nq = fa_numel_q(&s), nkv = fa_numel_kv(&s), nl = fa_numel_lse(&s);
    float *q = fa_alloc_floats(nq, "Q"), *k = fa_alloc_floats(nkv, "K"), *v = fa_alloc_floats(nkv, "V");
    float *o = fa_alloc_floats(nq, "O"), *lse = fa_alloc_floats(nl, "LSE");
    fa_fill_random(q, nq, seed, 1, 1.0f);
    fa_fill_random(k, nkv, seed, 2, 1.0f);
    fa_fill_random(v, nkv, seed, 3, 1.0f);
    for (int64_t x = 0; x < nq; x++) o[x] = NAN;   // poison: every element must be written
    const fa_strides st_q = fa_strides_contiguous(s.H, s.Sq, s.D), st_kv = fa_strides_contiguous(s.H, s.Sk, s.D);
    const forward_tensors t = {.q = q, .k = k, .v = v, .q_strides = st_q, .k_strides = st_kv, .v_strides = st_kv,
                               .o = o, .o_strides = st_q, .lse = lse, .lse_residual = NULL};
    flash_forward_dropout_cpu(&s, 0.3f, seed, 16, 24, &t, NULL);

    double *qd = fa_to_double(q, nq, "Q"), *kd = fa_to_double(k, nkv, "K"), *vd = fa_to_double(v, nkv, "V");
    double *o_ref = fa_alloc_doubles(nq, "oracle O"), *lse_ref = fa_alloc_doubles(nl, "oracle LSE");
    const uint64_t seeds[2] = {seed, seed + 1};
    double errors[2];
    for (int x = 0; x < 2; x++) {
        const ext_options e = {.H_kv = s.H, .window_left = -1, .window_right = -1, .dropout_p = 0.3f,
                               .dropout_seed = seeds[x]};
        fa_magnitudes mag = {0};
        ext_oracle_forward(&s, &e, qd, kd, vd, NULL, o_ref, lse_ref, &mag);
        errors[x] = o_error(&s, o, o_ref, &mag.o);
        fa_free_magnitudes(&mag);
    }
    printf("dropout forward against the oracle: same seed %.3g, another seed %.3g (relative to each row's scale)\n",
           errors[0], errors[1]);
    EXPECT_MSG(errors[0] < 1e-5, "the CPU dropout forward misses the oracle of its own seed by %.3g", errors[0]);
    EXPECT_MSG(errors[1] > 1e-2, "the oracle of another seed is only %.3g away: the check would not see a wrong mask",
           errors[1]);
    free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(o_ref), free(lse_ref);
}

int main(void) {
    check_known_answers();
    check_mask_statistics();
    check_oracle_sees_the_mask();
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("All dropout checks passed.\n");
    return failures ? 1 : 0;
}
