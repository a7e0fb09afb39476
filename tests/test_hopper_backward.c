// test_hopper_backward.c - phase 7 steps 6 and 6a to 6j, the backward with wgmma: the half-precision rule for
// gradients on odd shapes, and the deterministic dQ's bits.
//
// Usage: test_hopper_backward cuda      (exits 77, skipped, without a Hopper GPU)
//
// For fp16 and bf16, D = 64 and 128, causal and not, on shapes with ragged tiles (Sq != Sk both ways, lengths one past
// a tile, one query row, causal with Sq > Sk): step 3's forward gives O and LSE, then step 6's backward runs twice
// deterministic and once atomic (outputs poisoned before each run). Both variants pass the rule (3x the error of a
// straightforward backward at the same precision, common/fa_driver.c, fa_make_half_backward_rule), the two
// deterministic runs give the same bits, and dK and dV do not depend on the dQ variant (the same bits: dQ is the only
// product the variants compute differently). Steps 6a to 6j (dQ on wgmma, added by the TMA) run once each: they pass
// the rule, and their dK and dV are step 6's bits (the exp2_ftz of 6e to 6j differs from exp2f only where
// p < 2^-126, which these inputs' scores never reach).
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_test_grads.h"
#include "hopper.h"
#include "fa_test_hopper.h"
#include "fa_test_expect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const fa_cli_spec SPEC = {.program = "test_hopper_backward", .summary = "",
                                 .defaults = {1, 1, 1, 1, 1, 0, 0.0f}, .default_block_m = 64,
                                 .default_block_n = 64, .has_dtype = 1};

typedef struct {
    const char *dtype, *D, *Sq, *Sk;
    int causal;
} case_spec;

// Checks dQ, dK, dV of g by the rule; 1 when all three pass.
static int passes_rule(const fa_options *opt, const fa_reference *ref, const fa_half_rule *rule, const fa_grads *g,
                       const char *what) {
    const fa_shape *s = &opt->shape;
    int64_t dims_q[4], dims_kv[4];
    fa_dims_q(s, dims_q);
    fa_dims_kv(s, dims_kv);
    const double tol = ref->tol_backward;
    const fa_rule r_dq = {.tolerance = tol, .bounds = ref->scale.dq, .head_extra = rule->head_dq};
    const fa_rule r_dk = {.tolerance = tol, .bounds = ref->scale.dk, .head_extra = rule->head_dk};
    const fa_rule r_dv = {.tolerance = tol, .bounds = ref->scale.dv, .head_extra = rule->head_dv};
    const fa_check c[3] = {fa_verify_rows(what, "dQ", g->dq, ref->dq, dims_q, ref->heads, &r_dq),
                           fa_verify_rows(what, "dK", g->dk, ref->dk, dims_kv, ref->heads, &r_dk),
                           fa_verify_rows(what, "dV", g->dv, ref->dv, dims_kv, ref->heads, &r_dv)};
    printf("  %-14s dQ %.2e (tol %.2e)  dK %.2e (tol %.2e)  dV %.2e (tol %.2e)\n", what, c[0].rel_err,
           c[0].tolerance, c[1].rel_err, c[1].tolerance, c[2].rel_err, c[2].tolerance);
    return c[0].pass && c[1].pass && c[2].pass;
}

static void test_case(const case_spec *c) {
    char *argv[] = {"test_hopper_backward", "--dtype", (char *)c->dtype, "--B", "2", "--H", "2", "--Sq", (char *)c->Sq,
                    "--Sk", (char *)c->Sk, "--D", (char *)c->D, "--causal", NULL};
    fa_options opt;
    fa_parse_options(c->causal ? 14 : 13, argv, &SPEC, &opt);
    const fa_shape *s = &opt.shape;
    printf("cuda %s D=%s Sq=%s Sk=%s%s\n", c->dtype, c->D, c->Sq, c->Sk, c->causal ? " causal" : "");
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    fa_inputs in;
    fa_make_inputs(&opt, 1, &in);
    fa_reference ref;
    fa_make_reference(&opt, &in, 1, &ref);
    fa_half_rule rule;
    memset(&rule, 0, sizeof rule);   // the forward's arrays stay NULL (fa_free_half_rule frees them all)
    fa_make_half_backward_rule(&report, &opt, &in, &ref, &rule);
    fa_half_inputs half = {0};
    fa_make_half_inputs(&opt, &in, &half);
    fa_device_half_inputs dev;
    fa_upload_half_inputs(&opt, &half, &dev);

    const fa_strides qs = fa_strides_contiguous(s->H, s->Sq, s->D), ks = fa_strides_contiguous(s->H, s->Sk, s->D);
    float *o = fa_gpu_alloc(fa_numel_q(s), "O"), *lse = fa_gpu_alloc(fa_numel_lse(s), "LSE");
    float *delta = fa_gpu_alloc(fa_numel_lse(s), "Delta");
    fa_grads device = {fa_gpu_alloc(fa_numel_q(s), "dQ"), fa_gpu_alloc(fa_numel_kv(s), "dK"),
                       fa_gpu_alloc(fa_numel_kv(s), "dV")};
    const tc_forward_tensors f = {dev.q, dev.k, dev.v, qs, ks, ks, o, qs, lse};
    flash_forward_warp_specialized_cuda(s, opt.dtype, 128, 64, &f);
    const tc_backward_tensors t = {dev.q, dev.k, dev.v, o, lse, dev.dout, qs, ks, ks, qs, qs, delta,
                                   device.dq, device.dk, device.dv, qs, ks, ks};
    // Runs 0 and 1: step 6, deterministic; run 2: step 6, atomic; runs 3 to 12: steps 6a to 6j (the TMA adds dQ:
    // atomic only).
    enum { RUNS = 13 };
    const int modes[RUNS] = {FA_DQ_DETERMINISTIC, FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC, FA_DQ_ATOMIC, FA_DQ_ATOMIC,
                             FA_DQ_ATOMIC,        FA_DQ_ATOMIC,        FA_DQ_ATOMIC, FA_DQ_ATOMIC, FA_DQ_ATOMIC,
                             FA_DQ_ATOMIC,        FA_DQ_ATOMIC,        FA_DQ_ATOMIC};
    fa_grads runs[RUNS];
    for (int r = 0; r < RUNS; r++) {
        fa_gpu_poison(device.dq, fa_numel_q(s));
        fa_gpu_poison(device.dk, fa_numel_kv(s));
        fa_gpu_poison(device.dv, fa_numel_kv(s));
        if (r < 3) flash_backward_wgmma_cuda(s, opt.dtype, 64, 64, modes[r], &t);
        else if (r == 3) flash_backward_tma_dq_cuda(s, opt.dtype, 64, 64, modes[r], &t);
        else if (r == 4) flash_backward_dq_beside_dkdv_cuda(s, opt.dtype, 64, 64, modes[r], &t);
        else if (r == 5) flash_backward_two_warpgroups_cuda(s, opt.dtype, 64, 128, modes[r], &t);
        else if (r == 6) flash_backward_descriptors_once_cuda(s, opt.dtype, 64, 128, modes[r], &t);
        else if (r == 7) flash_backward_exp2_ftz_cuda(s, opt.dtype, 64, 128, modes[r], &t);
        else if (r == 8) flash_backward_overlap_products_cuda(s, opt.dtype, 64, 128, modes[r], &t);
        else if (r == 9) flash_backward_q_tiles_by_tma_cuda(s, opt.dtype, 64, 128, modes[r], &t);
        else if (r == 10) flash_backward_dq_per_warpgroup_cuda(s, opt.dtype, 64, 128, modes[r], &t);
        else if (r == 11)
            flash_backward_wide_q_tiles_cuda(s, opt.dtype, flash_backward_wide_q_tiles_block_m(s->D), 128, modes[r],
                                             &t);
        else
            flash_backward_transposed_dq_cuda(s, opt.dtype, flash_backward_transposed_dq_block_m(s->D), 128, modes[r],
                                              &t);
        fa_gpu_synchronize("the wgmma backward");
        runs[r] = grads_alloc(s);
        fa_gpu_download(runs[r].dq, device.dq, fa_numel_q(s));
        fa_gpu_download(runs[r].dk, device.dk, fa_numel_kv(s));
        fa_gpu_download(runs[r].dv, device.dv, fa_numel_kv(s));
    }
    EXPECT_MSG(passes_rule(&opt, &ref, &rule, &runs[0], "deterministic"), "%s D=%s: deterministic fails the rule",
               c->dtype, c->D);
    EXPECT_MSG(passes_rule(&opt, &ref, &rule, &runs[2], "atomic"), "%s D=%s: atomic fails the rule", c->dtype, c->D);
    for (int r = 3; r < RUNS; r++) {
        const char step[] = {'6', (char)('a' + r - 3), '\0'};
        EXPECT_MSG(passes_rule(&opt, &ref, &rule, &runs[r], step), "%s D=%s: step %s fails the rule", c->dtype, c->D,
                   step);
    }
    expect_same_bits(s, &runs[0], &runs[1], "deterministic, run 1 vs run 2");
    EXPECT_MSG(memcmp(runs[0].dk, runs[2].dk, (size_t)fa_numel_kv(s) * sizeof(float)) == 0 &&
                   memcmp(runs[0].dv, runs[2].dv, (size_t)fa_numel_kv(s) * sizeof(float)) == 0,
               "%s D=%s: dK or dV depends on the dQ variant", c->dtype, c->D);
    // Steps 6a to 6j compute dK and dV as step 6 does, with the same products in the same order: the same bits (the
    // 128-key tiles of 6c to 6j add products of masked, zero P^T and dS^T to some keys on the causal diagonal: exact
    // zeros).
    for (int r = 3; r < RUNS; r++)
        EXPECT_MSG(memcmp(runs[0].dk, runs[r].dk, (size_t)fa_numel_kv(s) * sizeof(float)) == 0 &&
                       memcmp(runs[0].dv, runs[r].dv, (size_t)fa_numel_kv(s) * sizeof(float)) == 0,
                   "%s D=%s: step 6%c's dK or dV differs from step 6's", c->dtype, c->D, 'a' + r - 3);
    for (int r = 0; r < RUNS; r++) grads_free(&runs[r]);
    fa_gpu_free(device.dq), fa_gpu_free(device.dk), fa_gpu_free(device.dv);
    fa_gpu_free(o), fa_gpu_free(lse), fa_gpu_free(delta);
    fa_free_device_half_inputs(&dev);
    fa_free_half_inputs(&half);
    fa_free_half_rule(&rule);
    fa_free_reference(&ref);
    fa_free_inputs(&in);
}

int main(int argc, char **argv) {
    fa_test_require_hopper(argc, argv);
    const case_spec cases[] = {
        {"fp16", "64", "130", "100", 1}, {"bf16", "64", "100", "130", 0}, {"bf16", "128", "130", "100", 0},
        {"fp16", "128", "65", "65", 1},  {"fp16", "64", "1", "129", 0},   {"bf16", "128", "257", "64", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("all passed\n");
    return failures ? 1 : 0;
}
