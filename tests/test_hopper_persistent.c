// test_hopper_persistent.c - phase 7 steps 4f to 4j (the persistent forwards) give step 4e's bits, run after run.
//
// Usage: test_hopper_persistent cuda      (exits 77, skipped, without a Hopper GPU)
//
// Step 4f computes every tile exactly as step 4e does; only which block computes it, and when, changes: a block takes
// tiles from a queue, and which block gets which tile depends on who finishes first. Step 4g works out which tiles need
// the mask, and each row's last key, in another way, and must mask the same scores. Step 4h lists the causal heavy
// tiles in groups of heads sized to the L2, the first group smaller where the heads do not divide evenly, then every
// head's lightest tiles together. Step 4i finds its operands through descriptors built once, moved by additions, and
// must point every wgmma at the same bytes; step 4j finds each lane's two row maxima in another order, and must find
// the same. So on shapes of 6 to 320 tiles, four of them more than an H100 or H200 holds blocks (132: some blocks take
// two or more), with B H not a multiple of 8, causal tiles of every length (Sq > Sk and Sq < Sk, keys fewer than one
// tile), each of step 4e's tile shapes, and one whose heads' K and V are too large for one group, their O and LSE must
// equal step 4e's bit for bit, on two runs in a row, each into outputs poisoned first. Their accuracy against the
// float64 oracle is checked with the other steps (tests/phase7.cmake).
#include "fa_contract.h"
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "hopper.h"
#include "fa_test_hopper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS 2

typedef struct {
    fa_shape shape;
    int dtype, block_m, block_n;
} persistent_case;

typedef void (*forward_fn)(const fa_shape *, int, int, int, const tc_forward_tensors *);
static const struct {
    const char *name;
    forward_fn run;
} STEPS[] = {{"step 4f", flash_forward_persistent_cuda},
             {"step 4g", flash_forward_stages_once_cuda},
             {"step 4h", flash_forward_l2_head_groups_cuda},
             {"step 4i", flash_forward_descriptors_once_cuda},
             {"step 4j", flash_forward_two_rows_together_cuda}};

// The first element where a and b differ, or -1.
static int64_t first_difference(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return -1;
}

static int check_case(const persistent_case *c, uint64_t seed) {
    fa_shape s = c->shape;
    s.scale = 0.125f;
    const int64_t nq = fa_numel_q(&s), nk = fa_numel_kv(&s), nl = fa_numel_lse(&s);
    float *q = fa_alloc_floats(nq, "q"), *k = fa_alloc_floats(nk, "k"), *v = fa_alloc_floats(nk, "v");
    fa_fill_random(q, nq, seed, FA_STREAM_Q, 1.0f);
    fa_fill_random(k, nk, seed, FA_STREAM_K, 1.0f);
    fa_fill_random(v, nk, seed, FA_STREAM_V, 1.0f);
    fa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.shape = s;
    opt.dtype = c->dtype;
    fa_half_inputs half;
    fa_make_half_inputs(&opt, &(fa_inputs){q, k, v, NULL}, &half);
    fa_device_half_inputs dev = {0};
    fa_upload_half_inputs(&opt, &half, &dev);
    float *o_dev = fa_gpu_alloc(nq, "O"), *lse_dev = fa_gpu_alloc(nl, "LSE");
    const fa_strides sq = fa_strides_contiguous(s.H, s.Sq, s.D), sk = fa_strides_contiguous(s.H, s.Sk, s.D);
    const tc_forward_tensors t = {dev.q, dev.k, dev.v, sq, sk, sk, o_dev, sq, lse_dev};

    // Step 4e's outputs: what every run of steps 4f to 4j must give.
    float *o_4e = fa_alloc_floats(nq, "O"), *lse_4e = fa_alloc_floats(nl, "LSE");
    fa_gpu_poison(o_dev, nq), fa_gpu_poison(lse_dev, nl);
    flash_forward_overlap_in_turn_cuda(&s, c->dtype, c->block_m, c->block_n, &t);
    fa_gpu_synchronize("step 4e");
    fa_gpu_download(o_4e, o_dev, nq), fa_gpu_download(lse_4e, lse_dev, nl);

    float *o = fa_alloc_floats(nq, "O"), *lse = fa_alloc_floats(nl, "LSE");
    int ok = 1;
    const int n_steps = (int)(sizeof STEPS / sizeof STEPS[0]);
    for (int i = 0; i < n_steps * RUNS; i++) {   // each step, RUNS times
        const int step = i / RUNS, run = i % RUNS + 1;
        fa_gpu_poison(o_dev, nq), fa_gpu_poison(lse_dev, nl);
        STEPS[step].run(&s, c->dtype, c->block_m, c->block_n, &t);
        fa_gpu_synchronize(STEPS[step].name);
        fa_gpu_download(o, o_dev, nq), fa_gpu_download(lse, lse_dev, nl);
        const int64_t o_at = first_difference(o, o_4e, nq), lse_at = first_difference(lse, lse_4e, nl);
        const int same = o_at < 0 && lse_at < 0;
        printf("%s %s seed %llu B=%lld H=%lld Sq=%lld Sk=%lld D=%lld%s tiles %dx%d, run %d: ", STEPS[step].name,
               fa_dtype_name(c->dtype), (unsigned long long)seed, (long long)s.B, (long long)s.H, (long long)s.Sq,
               (long long)s.Sk, (long long)s.D, s.causal ? " causal" : "", c->block_m, c->block_n, run);
        if (same)
            printf("O and LSE are step 4e's bits  ok\n");
        else if (o_at >= 0)
            printf("O[%lld] = %.9g, step 4e's %.9g  FAIL\n", (long long)o_at, o[o_at], o_4e[o_at]);
        else
            printf("LSE[%lld] = %.9g, step 4e's %.9g  FAIL\n", (long long)lse_at, lse[lse_at], lse_4e[lse_at]);
        ok = ok && same;
    }
    fa_gpu_free(o_dev), fa_gpu_free(lse_dev);
    fa_free_device_half_inputs(&dev);
    fa_free_half_inputs(&half);
    free(o), free(lse), free(o_4e), free(lse_4e), free(q), free(k), free(v);
    return ok;
}

int main(int argc, char **argv) {
    fa_test_require_hopper(argc, argv);
    // 264, 108, 140, 221, 14, 24, 6 and 320 tiles; Sq != Sk both ways, causal too; lengths one past a tile, keys
    // fewer than a tile; each of step 4e's tiles. The last: 8.4 MB of K and V a head (Sk = 16500 at D = 128) and 64
    // Q tiles a head, so that step 4h's causal queue lists 11 heavy ranks of the 5 heads in a group of 2 and one of 3
    // on a 50 or 60 MiB L2, then 53 light ranks of all 5 (two light tiles for each of 132 blocks).
    const persistent_case cases[] = {
        {{.B = 3, .H = 11, .Sq = 1000, .Sk = 777, .D = 64, .causal = 1}, FA_DTYPE_FP16, 128, 64},
        {{.B = 2, .H = 9, .Sq = 700, .Sk = 1300, .D = 128, .causal = 0}, FA_DTYPE_BF16, 128, 128},
        {{.B = 4, .H = 5, .Sq = 1153, .Sk = 1153, .D = 64, .causal = 1}, FA_DTYPE_BF16, 192, 128},
        {{.B = 1, .H = 13, .Sq = 2049, .Sk = 2049, .D = 128, .causal = 1}, FA_DTYPE_FP16, 128, 128},
        {{.B = 2, .H = 7, .Sq = 129, .Sk = 4000, .D = 64, .causal = 0}, FA_DTYPE_FP16, 192, 64},
        {{.B = 3, .H = 4, .Sq = 200, .Sk = 700, .D = 64, .causal = 1}, FA_DTYPE_BF16, 192, 128},
        {{.B = 2, .H = 3, .Sq = 300, .Sk = 100, .D = 128, .causal = 1}, FA_DTYPE_BF16, 128, 128},
        {{.B = 1, .H = 5, .Sq = 8192, .Sk = 16500, .D = 128, .causal = 1}, FA_DTYPE_BF16, 128, 128},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!check_case(&cases[i], 1 + i)) failures++;
    if (failures) {
        fprintf(stderr, "steps 4f to 4j differed from step 4e on %d shape(s)\n", failures);
        return 1;
    }
    printf("steps 4f to 4j gave step 4e's bits on every shape and run\n");
    return 0;
}
