// test_large_logits_tc.c - phase 5's forwards (step 1 in float32, steps 2 and 3 in fp16 and bf16) at large logits, on
// several seeds and shapes: the sibling of test_large_logits.c, by the same rule.
//
// Usage: test_large_logits_tc cpu|cuda      (cuda exits 77, skipped, without a GPU that runs the kernels)
//
// q and k are uniform in [-LOGIT_AMPLITUDE, LOGIT_AMPLITUDE) (the spread of 8 * randn), so the scores reach a few
// hundred, where float32 steps by 3e-5. For the half steps the inputs are rounded to the half type first, and the
// float64 oracle runs on the rounded values. Each draw checks, against the oracle:
//   - FlashAttention's rule: O and LSE within 2x the error of the straightforward implementation at the same precision
//     (step 1: phase 1's naive attention in float32; steps 2 and 3: fa_half_reference_forward, which rounds where the
//     tensor-core kernels round), row by row with relative errors (fa_verify_rows);
//   - LSE no further from the oracle than the straightforward implementation's LSE plus one unit in the last place of
//     float32 at the largest |LSE|: the forwards remember which key gave each row's max and compute that score again
//     in double, from the (half-rounded) q and k they multiplied (fa_math.h, score_in_double), so the rounding of the
//     largest score does not reach LSE. (Phase 3's test asks one ulp alone. Here the scores are float32 sums along d
//     in one chain, a few ulp off at a few hundred, and the scores of the keys next to the max reach LSE through
//     l = sum_j exp(s_j - s_max): as much as they do in standard attention, never the max's rounding on top.)
#include "fa_baselines.h"
#include "fa_contract.h"
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_test_device.h"
#include "fa_test_lse.h"
#include "fa_verify.h"
#include "register_tiles.h"
#include "tensor_cores.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_AMPLITUDE 14.0f   // uniform in [-14, 14): standard deviation 8.1, as 8 * randn
#define SEEDS 4
#define LSE_ULPS 1.0            // units in the last place of float32 at the largest |LSE|, past the reference's error
#define BLOCK_M_REGTILE 64      // tiles every step's CUDA kernel is built for
#define BLOCK_N_REGTILE 64
#define BLOCK_M_TC 128
#define BLOCK_N_TC 64

static int failures = 0;

// The forwards under test: step 1 (float32), and steps 2 and 3 in a half dtype.
typedef struct {
    const char *name;
    int step, dtype;
} forward_case;

// Inputs of one draw: float32 values (rounded to dtype for the half steps) and, for those, their half bits.
typedef struct {
    fa_options opt;         // the shape and dtype, for the driver's half-input functions
    fa_inputs f32;
    fa_half_inputs half;
} inputs;

static void run_forward(const fa_shape *s, int on_gpu, const forward_case *fc, const inputs *in, float *o,
                        float *lse) {
    const int64_t nq = fa_numel_q(s), nl = fa_numel_lse(s);
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    if (!on_gpu) {
        if (fc->step == 1) {
            const forward_tensors f = {in->f32.q, in->f32.k, in->f32.v, sq, sk, sk, o, sq, lse, NULL};
            flash_forward_regtile_cpu(s, BLOCK_M_REGTILE, BLOCK_N_REGTILE, &f);
        } else {
            const tc_forward_tensors f = {in->half.q, in->half.k, in->half.v, sq, sk, sk, o, sq, lse};
            if (fc->step == 2) flash_forward_mma_cpu(s, fc->dtype, BLOCK_M_TC, BLOCK_N_TC, &f, NULL);
            else flash_forward_pipeline_cpu(s, fc->dtype, BLOCK_M_TC, BLOCK_N_TC, &f, NULL);
        }
        return;
    }
#if FA_HAVE_CUDA
    float *o_d = fa_gpu_alloc(nq, "O"), *lse_d = fa_gpu_alloc(nl, "LSE");
    fa_gpu_poison(o_d, nq), fa_gpu_poison(lse_d, nl);
    if (fc->step == 1) {
        fa_device_inputs dev;
        fa_upload_inputs(&in->opt, &in->f32, &dev);
        const forward_tensors f = {dev.q, dev.k, dev.v, sq, sk, sk, o_d, sq, lse_d, NULL};
        flash_forward_regtile_cuda(s, BLOCK_M_REGTILE, BLOCK_N_REGTILE, &f);
        fa_gpu_synchronize("phase 5 forward");
        fa_free_device_inputs(&dev);
    } else {
        fa_device_half_inputs dev;
        fa_upload_half_inputs(&in->opt, &in->half, &dev);
        const tc_forward_tensors f = {dev.q, dev.k, dev.v, sq, sk, sk, o_d, sq, lse_d};
        if (fc->step == 2) flash_forward_mma_cuda(s, fc->dtype, BLOCK_M_TC, BLOCK_N_TC, &f);
        else flash_forward_pipeline_cuda(s, fc->dtype, BLOCK_M_TC, BLOCK_N_TC, &f);
        fa_gpu_synchronize("phase 5 forward");
        fa_free_device_half_inputs(&dev);
    }
    fa_gpu_download(o, o_d, nq), fa_gpu_download(lse, lse_d, nl);
    fa_gpu_free(o_d), fa_gpu_free(lse_d);
#else
    (void)nq, (void)nl, (void)fc, (void)in, (void)o, (void)lse;
#endif
}

static void check_draw(fa_shape s, int on_gpu, const forward_case *fc, uint64_t seed) {
    s.scale = (float)(1.0 / sqrt((double)s.D));
    const int64_t nq = fa_numel_q(&s), nk = fa_numel_kv(&s), nl = fa_numel_lse(&s);
    inputs in;
    memset(&in, 0, sizeof in);
    in.opt.shape = s, in.opt.dtype = fc->dtype;
    in.f32 = (fa_inputs){fa_alloc_floats(nq, "q"), fa_alloc_floats(nk, "k"), fa_alloc_floats(nk, "v"), NULL};
    fa_fill_random(in.f32.q, nq, seed, FA_STREAM_Q, LOGIT_AMPLITUDE);
    fa_fill_random(in.f32.k, nk, seed, FA_STREAM_K, LOGIT_AMPLITUDE);
    fa_fill_random(in.f32.v, nk, seed, FA_STREAM_V, 1.0f);
    if (fc->step > 1) {
        fa_round_floats(in.f32.q, nq, fc->dtype), fa_round_floats(in.f32.k, nk, fc->dtype);
        fa_round_floats(in.f32.v, nk, fc->dtype);
        fa_make_half_inputs(&in.opt, &in.f32, &in.half);
    }

    double *q64 = fa_to_double(in.f32.q, nq, "q"), *k64 = fa_to_double(in.f32.k, nk, "k");
    double *v64 = fa_to_double(in.f32.v, nk, "v");
    double *o64 = fa_alloc_doubles(nq, "O"), *lse64 = fa_alloc_doubles(nl, "LSE");
    fa_oracle_forward(&s, q64, k64, v64, NULL, o64, lse64);
    fa_magnitudes mag;
    fa_oracle_magnitudes(&s, q64, k64, v64, NULL, o64, lse64, NULL, &mag);

    // The straightforward implementation at the same precision, the rule's yardstick.
    float *ref_o = fa_alloc_floats(nq, "reference O"), *ref_lse = fa_alloc_floats(nl, "reference LSE");
    if (fc->step == 1) {
        const int64_t ns = fa_numel_scores(&s);
        float *scores = fa_alloc_floats(ns, "S"), *probs = fa_alloc_floats(ns, "P");
        naive_attention_cpu(&s, in.f32.q, in.f32.k, in.f32.v, scores, probs, ref_o, ref_lse);
        free(scores), free(probs);
    } else {
        fa_half_reference_forward(&s, fc->dtype, in.f32.q, in.f32.k, in.f32.v, NULL, ref_o, ref_lse);
    }
    float *o = fa_alloc_floats(nq, "O"), *lse = fa_alloc_floats(nl, "LSE");
    fa_poison(o, nq), fa_poison(lse, nl);
    run_forward(&s, on_gpu, fc, &in, o, lse);

    const int64_t dims_q[4] = {s.B, s.H, s.Sq, s.D}, dims_lse[4] = {s.B, s.H, s.Sq, 1};
    const char *names[2] = {"O", "LSE"};
    const float *ref_got[2] = {ref_o, ref_lse}, *got[2] = {o, lse};
    const double *want[2] = {o64, lse64};
    const int64_t *dims[2] = {dims_q, dims_lse};
    const fa_row_bounds bounds[2] = {mag.o, mag.lse};
    printf("%s %s seed %llu B=%lld H=%lld Sq=%lld Sk=%lld D=%lld%s:", on_gpu ? "cuda" : "cpu", fc->name,
           (unsigned long long)seed, (long long)s.B, (long long)s.H, (long long)s.Sq, (long long)s.Sk,
           (long long)s.D, s.causal ? " causal" : "");
    int ok = 1;
    for (int x = 0; x < 2; x++) {
        // The half reference's own error is the yardstick, not a float32 tolerance: it gets the half bound of the
        // driver's check (a few units of the half type), float32 the float32 tolerance.
        const double ref_tol = fc->step == 1 ? FA_TOL_FORWARD : 4.0 * fa_dtype_unit_roundoff(fc->dtype);
        const fa_rule ref_rule = {.tolerance = ref_tol, .bounds = bounds[x]};
        const fa_check reference = fa_verify_rows("reference", names[x], ref_got[x], want[x], dims[x], NULL,
                                                  &ref_rule);
        if (!reference.pass) {   // the yardstick must be right for the rule to mean anything
            printf(" (reference %s: rel err %.2e > %.0e)", names[x], reference.rel_err, reference.tolerance);
            ok = 0;
        }
        const fa_rule rule = {.tolerance = 2.0 * reference.max_rel_err + FA_TOL_FORWARD, .bounds = bounds[x],
                              .reference = &reference, .reference_factor = 2.0};
        const fa_check c = fa_verify_rows("flash", names[x], got[x], want[x], dims[x], NULL, &rule);
        printf(" %s %.2fx", names[x], c.max_rel_err / reference.max_rel_err);
        if (!c.pass) {
            printf(" (FAIL: rel err %.2e)", c.rel_err);
            ok = 0;
        }
    }
    const double ulp = ulp_of_largest(lse64, nl);
    const double lse_err = max_abs_err(lse, lse64, nl), ref_lse_err = max_abs_err(ref_lse, lse64, nl);
    printf(" | LSE err %.2f ulp (reference %.2f)", lse_err / ulp, ref_lse_err / ulp);
    if (!(lse_err <= ref_lse_err + LSE_ULPS * ulp)) {
        printf(" (FAIL: more than the reference's + %.1f ulp)", LSE_ULPS);
        ok = 0;
    }
    printf("  %s\n", ok ? "ok" : "FAIL");
    if (!ok) failures++;

    free(in.f32.q), free(in.f32.k), free(in.f32.v);
    if (fc->step > 1) fa_free_half_inputs(&in.half);
    free(q64), free(k64), free(v64), free(o64), free(lse64), free(ref_o), free(ref_lse), free(o), free(lse);
    fa_free_magnitudes(&mag);
}

int main(int argc, char **argv) {
    const int on_gpu = fa_test_wants_gpu(argc, argv);
#if TC_HAVE_MMA_CUDA
    char why[256];
    if (on_gpu && tc_cuda_check_device(why, sizeof why) != 0) {
        printf("skipped: %s\n", why);
        return FA_EXIT_SKIP;
    }
#else
    if (on_gpu) {
        printf("skipped: this build holds no tensor-core kernels\n");
        return FA_EXIT_SKIP;
    }
#endif
    const forward_case cases[] = {
        {"step 1 fp32", 1, FA_DTYPE_FP32},
        {"step 2 fp16", 2, FA_DTYPE_FP16}, {"step 2 bf16", 2, FA_DTYPE_BF16},
        {"step 3 fp16", 3, FA_DTYPE_FP16}, {"step 3 bf16", 3, FA_DTYPE_BF16},
    };
    // Causal and not, Sq != Sk both ways, lengths one past a tile, one query row, the D the CUDA kernels take.
    const fa_shape shapes[] = {
        {.B = 2, .H = 2, .Sq = 129, .Sk = 129, .D = 64, .causal = 1},
        {.B = 1, .H = 2, .Sq = 130, .Sk = 400, .D = 128, .causal = 0},
        {.B = 1, .H = 2, .Sq = 300, .Sk = 65, .D = 64, .causal = 1},
        {.B = 1, .H = 3, .Sq = 1, .Sk = 300, .D = 128, .causal = 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (uint64_t seed = 1; seed <= SEEDS; seed++) check_draw(shapes[i], on_gpu, &cases[c], seed);
    if (failures) {
        fprintf(stderr, "%d large-logit check(s) failed\n", failures);
        return 1;
    }
    printf("all large-logit checks passed\n");
    return 0;
}
