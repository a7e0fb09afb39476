// test_hopper_large_logits.c - phase 7's forward LSE at large logits, every step, on several seeds and shapes.
//
// Usage: test_hopper_large_logits cuda      (exits 77, skipped, without a Hopper GPU)
//
// q and k are uniform in [-LOGIT_AMPLITUDE, LOGIT_AMPLITUDE) (the spread of 8 * randn), rounded to fp16 or bf16, so
// the scores reach a few hundred: there float32 steps by 3e-5, and the kernels' float32 running max (a wgmma sum of D
// products) is a few units off in its last place. Each phase 7 step builds its LSE from its max key's score computed
// again in double (phase7_hopper/max_key.cuh), and is checked against the float64 oracle on the same half inputs by
// the suite's half-precision rule (FlashAttention's): at most 2x the error of the straightforward attention at the
// same precision (fa_half_reference_forward: float32 scores and LSE), row by row with relative errors; and, since at
// these logits the rule's allowance for the logits is wide, to within LSE_ULPS units in the last place of float32 at
// the largest |LSE| (the best a float32 LSE can do is half of one; the straightforward attention, whose max score is
// a float32 sum, is off by up to 3.6 on these draws, and so would a kernel without the max key). One draw proves
// little, so both are held on every draw of every shape.
#include "fa_contract.h"
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_test_lse.h"
#include "fa_verify.h"
#include "hopper.h"
#include "fa_test_hopper.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_AMPLITUDE 14.0f   // uniform in [-14, 14): standard deviation 8.1, as 8 * randn
#define SEEDS 3
#define LSE_ULPS 2.0            // units in the last place of float32 at the largest |LSE|

static int failures = 0;

typedef void (*forward_fn)(const fa_shape *, int, int, int, const tc_forward_tensors *);
typedef struct {
    const char *label;
    forward_fn run;
    int block_m, block_n;
    int64_t only_d;   // 0: D = 64 and 128; else the one head dimension these tiles are built for
} step_kind;

static const step_kind STEPS[] = {
    {"step 1 wgmma", flash_forward_wgmma_cuda, 128, 64, 0},
    {"step 2 tma", flash_forward_tma_cuda, 128, 64, 0},
    {"step 3 warp roles", flash_forward_warp_specialized_cuda, 128, 128, 0},
    {"step 4 ping-pong", flash_forward_pingpong_cuda, 128, 64, 0},
    {"step 4a wide wgmma", flash_forward_wide_wgmma_cuda, 128, 128, 0},
    {"step 4b exp2 ftz", flash_forward_wgmma_exp2_ftz_cuda, 128, 128, 0},
    {"step 4c three consumers", flash_forward_three_consumers_cuda, 192, 128, 64},
    {"step 4d split barriers", flash_forward_split_barriers_cuda, 128, 128, 0},
    {"step 4d split barriers", flash_forward_split_barriers_cuda, 192, 128, 64},
    {"step 4e overlap in turn", flash_forward_overlap_in_turn_cuda, 128, 128, 0},
    {"step 4e overlap in turn", flash_forward_overlap_in_turn_cuda, 192, 128, 64},
    {"step 4f persistent", flash_forward_persistent_cuda, 128, 128, 0},
    {"step 4f persistent", flash_forward_persistent_cuda, 192, 128, 64},
    {"step 4g stages once", flash_forward_stages_once_cuda, 128, 128, 0},
    {"step 4g stages once", flash_forward_stages_once_cuda, 192, 128, 64},
    {"step 4h l2 head groups", flash_forward_l2_head_groups_cuda, 128, 128, 0},
    {"step 4h l2 head groups", flash_forward_l2_head_groups_cuda, 192, 128, 64},
    {"step 4i descriptors", flash_forward_descriptors_once_cuda, 128, 128, 0},
    {"step 4i descriptors", flash_forward_descriptors_once_cuda, 192, 128, 64},
    {"step 4j rows together", flash_forward_two_rows_together_cuda, 128, 128, 0},
    {"step 4j rows together", flash_forward_two_rows_together_cuda, 192, 128, 64},
    {"step 5 overlap", flash_forward_overlap_cuda, 128, 128, 0},
};

static void check_draw(fa_shape s, int dtype, uint64_t seed) {
    s.scale = (float)(1.0 / sqrt((double)s.D));
    const int64_t nq = fa_numel_q(&s), nk = fa_numel_kv(&s), nl = fa_numel_lse(&s);
    float *q = fa_alloc_floats(nq, "q"), *k = fa_alloc_floats(nk, "k"), *v = fa_alloc_floats(nk, "v");
    fa_fill_random(q, nq, seed, FA_STREAM_Q, LOGIT_AMPLITUDE);
    fa_fill_random(k, nk, seed, FA_STREAM_K, LOGIT_AMPLITUDE);
    fa_fill_random(v, nk, seed, FA_STREAM_V, 1.0f);
    fa_round_floats(q, nq, dtype), fa_round_floats(k, nk, dtype), fa_round_floats(v, nk, dtype);

    // The oracle, on the numbers the kernels see.
    double *q64 = fa_to_double(q, nq, "q"), *k64 = fa_to_double(k, nk, "k"), *v64 = fa_to_double(v, nk, "v");
    double *o64 = fa_alloc_doubles(nq, "O"), *lse64 = fa_alloc_doubles(nl, "LSE");
    fa_oracle_forward(&s, q64, k64, v64, NULL, o64, lse64);
    fa_magnitudes mag;
    fa_oracle_magnitudes(&s, q64, k64, v64, NULL, o64, lse64, NULL, &mag);
    const int64_t dims_lse[4] = {s.B, s.H, s.Sq, 1};

    // The yardstick: the straightforward attention at the same precision (its LSE is float32 math).
    float *ref_o = fa_alloc_floats(nq, "reference O"), *ref_lse = fa_alloc_floats(nl, "reference LSE");
    fa_half_reference_forward(&s, dtype, q, k, v, NULL, ref_o, ref_lse);
    const fa_rule plain = {.tolerance = FA_TOL_FORWARD, .bounds = mag.lse};
    const fa_check reference = fa_verify_rows("fp16 reference", "LSE", ref_lse, lse64, dims_lse, NULL, &plain);
    const double ulp = ulp_of_largest(lse64, nl);

    fa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.shape = s;
    opt.dtype = dtype;
    fa_half_inputs half;   // q, k and v are already rounded to dtype: these are their bits
    fa_make_half_inputs(&opt, &(fa_inputs){q, k, v, NULL}, &half);
    fa_device_half_inputs dev = {0};
    fa_upload_half_inputs(&opt, &half, &dev);
    float *o_dev = fa_gpu_alloc(nq, "O"), *lse_dev = fa_gpu_alloc(nl, "LSE");
    float *lse = fa_alloc_floats(nl, "LSE");
    const fa_strides sq = fa_strides_contiguous(s.H, s.Sq, s.D), sk = fa_strides_contiguous(s.H, s.Sk, s.D);
    const tc_forward_tensors t = {dev.q, dev.k, dev.v, sq, sk, sk, o_dev, sq, lse_dev};

    for (size_t i = 0; i < sizeof STEPS / sizeof STEPS[0]; i++) {
        const step_kind *step = &STEPS[i];
        if (step->only_d && step->only_d != s.D) continue;
        fa_gpu_poison(o_dev, nq), fa_gpu_poison(lse_dev, nl);
        step->run(&s, dtype, step->block_m, step->block_n, &t);
        fa_gpu_synchronize(step->label);
        fa_gpu_download(lse, lse_dev, nl);
        const fa_rule rule = {.tolerance = FA_TOL_FORWARD, .bounds = mag.lse, .reference = &reference,
                              .reference_factor = 2.0};
        const fa_check c = fa_verify_rows(step->label, "LSE", lse, lse64, dims_lse, NULL, &rule);
        const double ulps = max_abs_err(lse, lse64, nl) / ulp;
        const int ok = reference.pass && c.pass && ulps <= LSE_ULPS;
        printf("%s %s seed %llu B=%lld H=%lld Sq=%lld Sk=%lld D=%lld%s tiles %dx%d: LSE %.2fx the reference's "
               "rel err (%.2e vs %.2e), %.2f ulp (reference %.2f)%s  %s\n",
               step->label, fa_dtype_name(dtype), (unsigned long long)seed, (long long)s.B, (long long)s.H,
               (long long)s.Sq, (long long)s.Sk, (long long)s.D, s.causal ? " causal" : "", step->block_m,
               step->block_n, reference.max_rel_err > 0.0 ? c.max_rel_err / reference.max_rel_err : 0.0,
               c.max_rel_err, reference.max_rel_err, ulps,
               max_abs_err(ref_lse, lse64, nl) / ulp, reference.pass ? "" : " (the reference itself failed)",
               ok ? "ok" : "FAIL");
        if (!ok) failures++;
    }
    fa_gpu_free(o_dev), fa_gpu_free(lse_dev);
    fa_free_device_half_inputs(&dev);
    fa_free_half_inputs(&half);
    free(lse), free(ref_o), free(ref_lse);
    free(q), free(k), free(v), free(q64), free(k64), free(v64), free(o64), free(lse64);
    fa_free_magnitudes(&mag);
}

int main(int argc, char **argv) {
    fa_test_require_hopper(argc, argv);
    // Causal and not, Sq != Sk both ways, lengths one past a tile, both D.
    const fa_shape shapes[] = {
        {.B = 1, .H = 2, .Sq = 300, .Sk = 300, .D = 64, .causal = 1},
        {.B = 1, .H = 2, .Sq = 130, .Sk = 400, .D = 128, .causal = 0},
        {.B = 2, .H = 1, .Sq = 400, .Sk = 129, .D = 64, .causal = 1},
        {.B = 1, .H = 2, .Sq = 257, .Sk = 257, .D = 128, .causal = 1},
    };
    const int dtypes[2] = {FA_DTYPE_FP16, FA_DTYPE_BF16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (uint64_t seed = 1; seed <= SEEDS; seed++) check_draw(shapes[i], dtypes[(i + seed) % 2], seed);
    if (failures) {
        fprintf(stderr, "%d large-logit check(s) of phase 7 failed\n", failures);
        return 1;
    }
    printf("all large-logit checks of phase 7 passed\n");
    return 0;
}
