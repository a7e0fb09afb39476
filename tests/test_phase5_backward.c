// test_phase5_backward.c - phase 5 step 4, the backward on tensor cores: the half-precision rule for gradients, and
// the deterministic dQ's bits.
//
// Usage: test_phase5_backward cpu|cuda
//   cpu:  each bf16 unit this CPU has computes bf16_dot.h's 32 x 32 block (against sums in double); then for fp16
//         and bf16 (bf16 on the float32 passes and on the bf16 passes with every unit this CPU has, emulated in C on
//         any), causal and not, Sq=130 Sk=100 (ragged tiles), D = 64 and 128: the CPU twin passes the rule
//         (common/fa_driver.c, fa_make_half_backward_rule) in both dQ variants and at odd tiles; the deterministic
//         variant gives the same bits with 1 and 2 threads; one element moved just past the rule fails it; and a
//         backward fed a log-sum-exp off by 0.02 (P off by 2%) fails it, so the rule is no wider than the arithmetic
//         needs.
//   cuda: the same problems on the GPU, for step 4 and step 4b (flash_backward_lean_cuda, the same backward with fewer
//         instructions): both variants pass the rule, two deterministic runs give the same bits. Steps 4c and 4d
//         (flash_backward_held_cuda, flash_backward_occupancy_cuda) change only where operands live and how many
//         blocks share an SM: they pass the same checks and give step 4b's bits.
//         Exits 77 (skipped) without a GPU or without the sm_80+ kernels.
// O and LSE come from the step 3 forward on the same device, as in the driver.
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_test_device.h"
#include "fa_test_grads.h"
#include "tensor_cores.h"
#include "bf16_dot.h"
#include "fa_cpu_units.h"
#include "fa_test_expect.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const fa_cli_spec SPEC = {.program = "test_phase5_backward", .summary = "",
                                 .defaults = {1, 1, 1, 1, 1, 0, 0.0f}, .default_block_m = 64,
                                 .default_block_n = 64, .has_dtype = 1};

// One problem: the rounded inputs (float and half), the oracle with gradients, and the rule.
typedef struct {
    fa_options opt;
    fa_report report;
    fa_inputs in;
    fa_reference ref;
    fa_half_inputs half;
    fa_half_rule rule;
    fa_rule rule_dq, rule_dk, rule_dv;   // the rule as fa_verify_rows takes it
    fa_strides qs, ks;
} problem;

static void make_problem(problem *p, const char *dtype, const char *D, int causal) {
    char *argv[] = {"test_phase5_backward", "--dtype", (char *)dtype, "--B", "2", "--H", "2", "--Sq", "130", "--Sk",
                    "100", "--D", (char *)D, "--causal", NULL};
    memset(p, 0, sizeof *p);   // the rule's forward arrays stay NULL (fa_free_half_rule frees them all)
    fa_parse_options(causal ? 14 : 13, argv, &SPEC, &p->opt);
    fa_report_init(&p->report, SPEC.program, &p->opt);
    fa_make_inputs(&p->opt, 1, &p->in);
    fa_make_reference(&p->opt, &p->in, 1, &p->ref);
    fa_make_half_backward_rule(&p->report, &p->opt, &p->in, &p->ref, &p->rule);
    // The reference's own rows pass their bound, and the rule is 3 x their error plus the float32 tolerance.
    EXPECT_MSG(p->report.n_checks == 3 && p->report.checks[0].pass && p->report.checks[1].pass &&
           p->report.checks[2].pass, "the half reference backward fails its own bound");
    EXPECT_MSG(p->rule.max_dq > 0.0 && p->rule.head_dq, "the rule for dQ is not set");
    const double tol = p->ref.tol_backward;
    p->rule_dq = (fa_rule){.tolerance = tol, .bounds = p->ref.scale.dq, .head_extra = p->rule.head_dq};
    p->rule_dk = (fa_rule){.tolerance = tol, .bounds = p->ref.scale.dk, .head_extra = p->rule.head_dk};
    p->rule_dv = (fa_rule){.tolerance = tol, .bounds = p->ref.scale.dv, .head_extra = p->rule.head_dv};
    fa_make_half_inputs(&p->opt, &p->in, &p->half);
    p->qs = fa_strides_contiguous(p->opt.shape.H, p->opt.shape.Sq, p->opt.shape.D);
    p->ks = fa_strides_contiguous(p->opt.shape.H, p->opt.shape.Sk, p->opt.shape.D);
}

static void free_problem(problem *p) {
    fa_free_half_inputs(&p->half);
    fa_free_half_rule(&p->rule);
    fa_free_reference(&p->ref);
    fa_free_inputs(&p->in);
}

// Checks dQ, dK, dV by the rule; returns 1 when all three pass. `quiet` leaves the lines out (planted failures).
static int passes_rule(const problem *p, const fa_grads *g, const char *what, int quiet) {
    const fa_shape *s = &p->opt.shape;
    int64_t dims_q[4], dims_kv[4];
    fa_dims_q(s, dims_q);
    fa_dims_kv(s, dims_kv);
    const fa_check c[3] = {fa_verify_rows(what, "dQ", g->dq, p->ref.dq, dims_q, p->ref.heads, &p->rule_dq),
                           fa_verify_rows(what, "dK", g->dk, p->ref.dk, dims_kv, p->ref.heads, &p->rule_dk),
                           fa_verify_rows(what, "dV", g->dv, p->ref.dv, dims_kv, p->ref.heads, &p->rule_dv)};
    if (!quiet)
        printf("  %-40s dQ %.2e (tol %.2e)  dK %.2e (tol %.2e)  dV %.2e (tol %.2e)\n", what, c[0].rel_err,
               c[0].tolerance, c[1].rel_err, c[1].tolerance, c[2].rel_err, c[2].tolerance);
    return c[0].pass && c[1].pass && c[2].pass;
}

static tc_backward_tensors tensors(const problem *p, const void *q, const void *k, const void *v, const void *dout,
                                   const float *o, const float *lse, float *delta, const fa_grads *g) {
    tc_backward_tensors t = {q, k, v, o, lse, dout, p->qs, p->ks, p->ks, p->qs, p->qs, delta,
                             g->dq, g->dk, g->dv, p->qs, p->ks, p->ks};
    return t;
}

static void test_cpu_case(const char *dtype, const char *D, int causal) {
    problem p;
    make_problem(&p, dtype, D, causal);
    const fa_shape *s = &p.opt.shape;
    printf("cpu %s D=%s%s: %s\n", dtype, D, causal ? " causal" : "", bf16_dot_products(p.opt.dtype));
    float *o = fa_alloc_floats(fa_numel_q(s), "O"), *lse = fa_alloc_floats(fa_numel_lse(s), "LSE");
    float *delta = fa_alloc_floats(fa_numel_lse(s), "Delta");
    const tc_forward_tensors f = {p.half.q, p.half.k, p.half.v, p.qs, p.ks, p.ks, o, p.qs, lse};
    flash_forward_pipeline_cpu(s, p.opt.dtype, 128, 64, &f, NULL);
    fa_grads det1 = grads_alloc(s), det2 = grads_alloc(s), atomic = grads_alloc(s);
    tc_backward_tensors t = tensors(&p, p.half.q, p.half.k, p.half.v, p.half.dout, o, lse, delta, &det1);
    omp_set_num_threads(1);
    flash_backward_tc_cpu(s, p.opt.dtype, 64, 64, FA_DQ_DETERMINISTIC, &t);
    t = tensors(&p, p.half.q, p.half.k, p.half.v, p.half.dout, o, lse, delta, &det2);
    omp_set_num_threads(2);
    flash_backward_tc_cpu(s, p.opt.dtype, 64, 64, FA_DQ_DETERMINISTIC, &t);
    t = tensors(&p, p.half.q, p.half.k, p.half.v, p.half.dout, o, lse, delta, &atomic);
    flash_backward_tc_cpu(s, p.opt.dtype, 32, 48, FA_DQ_ATOMIC, &t);   // other tiles: the CPU takes any
    fa_grads odd = grads_alloc(s);
    t = tensors(&p, p.half.q, p.half.k, p.half.v, p.half.dout, o, lse, delta, &odd);
    flash_backward_tc_cpu(s, p.opt.dtype, 17, 5, FA_DQ_DETERMINISTIC, &t);   // tiles of odd sizes

    EXPECT_MSG(passes_rule(&p, &det1, "deterministic, 1 thread", 0), "%s D=%s: deterministic fails the rule", dtype, D);
    EXPECT_MSG(passes_rule(&p, &atomic, "atomic, 2 threads, tiles 32x48", 0), "%s D=%s: atomic fails the rule", dtype, D);
    EXPECT_MSG(passes_rule(&p, &odd, "deterministic, tiles 17x5", 0), "%s D=%s: tiles 17x5 fail the rule", dtype, D);
    grads_free(&odd);
    expect_same_bits(s, &det1, &det2, "deterministic, 1 vs 2 threads");

    // One element of dK moved by 1.01 x the allowed error fails the rule.
    const int64_t at = fa_numel_kv(s) - 3;
    const float saved = det1.dk[at];
    const int64_t row = at / s->D;
    det1.dk[at] = (float)(p.ref.dk[at] + (p.ref.dk[at] > 0 ? -1.01 : 1.01) * fa_row_tolerance(&p.rule_dk, row, s->Sk) *
                                             p.ref.scale.dk.scale[row]);
    EXPECT_MSG(!passes_rule(&p, &det1, "planted", 1), "%s D=%s: a planted dK element passes", dtype, D);
    det1.dk[at] = saved;

    // A log-sum-exp 0.02 too large makes every P 2% too small: the gradients must fail.
    for (int64_t i = 0; i < fa_numel_lse(s); i++) lse[i] += 0.02f;
    fa_grads off = grads_alloc(s);
    t = tensors(&p, p.half.q, p.half.k, p.half.v, p.half.dout, o, lse, delta, &off);
    flash_backward_tc_cpu(s, p.opt.dtype, 64, 64, FA_DQ_DETERMINISTIC, &t);
    EXPECT_MSG(!passes_rule(&p, &off, "LSE + 0.02", 0), "%s D=%s: a backward with P 2%% off passes", dtype, D);

    grads_free(&det1), grads_free(&det2), grads_free(&atomic), grads_free(&off);
    free(o), free(lse), free(delta);
    free_problem(&p);
}

// Whether this CPU (and build) can run a bf16 unit: the emulated one everywhere, the others where the CPU has them.
static int unit_available(bf16_dot_unit unit) {
    if (unit == BF16_DOT_AVX512) return FA_CPU_UNITS && fa_cpu_has_avx512_bf16();
    if (unit == BF16_DOT_AMX) return FA_CPU_UNITS && fa_cpu_amx_granted();
    return 1;
}

// Each bf16 unit this CPU has computes bf16_dot_block()'s 32 x 32 block: against sums in double, from zero and on
// top of what out holds, writing nothing past its 32 columns.
static void test_bf16_blocks(void) {
    enum { K = 96, A_PAD = 112, B_PAD = 48, OUT_PAD = 40 };
    static uint16_t a[BF16_DOT_BLOCK * A_PAD], b[(K / 2) * B_PAD * 2];
    static float out[BF16_DOT_BLOCK * OUT_PAD], start[BF16_DOT_BLOCK * OUT_PAD], values[(K / 2) * B_PAD * 2];
    fa_fill_random(values, BF16_DOT_BLOCK * A_PAD, 12345, 0, 2.0f);
    for (int x = 0; x < BF16_DOT_BLOCK * A_PAD; x++) a[x] = fa_float_to_half(values[x], FA_DTYPE_BF16);
    fa_fill_random(values, (K / 2) * B_PAD * 2, 12345, 1, 2.0f);
    for (int x = 0; x < (K / 2) * B_PAD * 2; x++) b[x] = fa_float_to_half(values[x], FA_DTYPE_BF16);
    fa_fill_random(start, BF16_DOT_BLOCK * OUT_PAD, 12345, 2, 8.0f);
    const bf16_dot_unit units[3] = {BF16_DOT_EMULATED, BF16_DOT_AVX512, BF16_DOT_AMX};
    const char *names[3] = {"emulated", "AVX512_BF16", "AMX-BF16"};
    for (int u = 0; u < 3; u++) {
        if (!unit_available(units[u])) continue;
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            memcpy(out, start, sizeof out);
            bf16_dot_thread_begin(units[u]);
            bf16_dot_block(units[u], a, A_PAD, b, B_PAD, K, out, OUT_PAD, accumulate);
            bf16_dot_thread_end(units[u]);
            double worst = 0.0;
            for (int r = 0; r < BF16_DOT_BLOCK; r++)
                for (int c = 0; c < BF16_DOT_BLOCK; c++) {
                    double sum = accumulate ? start[r * OUT_PAD + c] : 0.0, size = fabs(sum);
                    for (int k = 0; k < K; k++) {
                        const double x = fa_half_to_float(a[r * A_PAD + k], FA_DTYPE_BF16) *
                                         fa_half_to_float(b[((k / 2) * B_PAD + c) * 2 + k % 2], FA_DTYPE_BF16);
                        sum += x, size += fabs(x);
                    }
                    // float32 sums of K + 1 terms: each addition rounds by at most 2^-24 of the running size.
                    const double err = fabs(out[r * OUT_PAD + c] - sum) / (size * (K + 1) * 0x1p-24);
                    worst = err > worst ? err : worst;
                }
            for (int r = 0; r < BF16_DOT_BLOCK; r++)
                for (int c = BF16_DOT_BLOCK; c < OUT_PAD; c++)
                    EXPECT_MSG(out[r * OUT_PAD + c] == start[r * OUT_PAD + c],
                               "bf16 block on %s: wrote past its 32 columns (row %d)", names[u], r);
            printf("  bf16 block on %s, accumulate %d: worst error %.3f of the float32 bound\n", names[u], accumulate,
                   worst);
            EXPECT_MSG(worst <= 1.0, "bf16 block on %s: error %.3f of the bound", names[u], worst);
        }
    }
}

#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
typedef void (*tc_backward_fn)(const fa_shape *, int, int, int, int, const tc_backward_tensors *);

// same_bits_as: NULL, or a backward whose deterministic gradients this step's must equal bit for bit.
static void test_cuda_case(const char *dtype, const char *D, int causal, const char *step, tc_backward_fn backward,
                           tc_backward_fn same_bits_as) {
    problem p;
    make_problem(&p, dtype, D, causal);
    const fa_shape *s = &p.opt.shape;
    printf("cuda %s %s D=%s%s\n", step, dtype, D, causal ? " causal" : "");
    fa_device_half_inputs dev;
    fa_upload_half_inputs(&p.opt, &p.half, &dev);
    float *o = fa_gpu_alloc(fa_numel_q(s), "O"), *lse = fa_gpu_alloc(fa_numel_lse(s), "LSE");
    float *delta = fa_gpu_alloc(fa_numel_lse(s), "Delta");
    fa_grads device = {fa_gpu_alloc(fa_numel_q(s), "dQ"), fa_gpu_alloc(fa_numel_kv(s), "dK"),
                    fa_gpu_alloc(fa_numel_kv(s), "dV")};
    const tc_forward_tensors f = {dev.q, dev.k, dev.v, p.qs, p.ks, p.ks, o, p.qs, lse};
    flash_forward_pipeline_cuda(s, p.opt.dtype, 128, 64, &f);
    const tc_backward_tensors t = tensors(&p, dev.q, dev.k, dev.v, dev.dout, o, lse, delta, &device);
    const int modes[3] = {FA_DQ_DETERMINISTIC, FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC};
    fa_grads runs[4];   // deterministic twice, atomic, and same_bits_as's deterministic
    const int n_runs = same_bits_as ? 4 : 3;
    for (int r = 0; r < n_runs; r++) {
        fa_gpu_poison(device.dq, fa_numel_q(s));
        fa_gpu_poison(device.dk, fa_numel_kv(s));
        fa_gpu_poison(device.dv, fa_numel_kv(s));
        if (r < 3)
            backward(s, p.opt.dtype, 64, 64, modes[r], &t);
        else
            same_bits_as(s, p.opt.dtype, 64, 64, FA_DQ_DETERMINISTIC, &t);
        fa_gpu_synchronize("the tensor-core backward");
        runs[r] = grads_alloc(s);
        fa_gpu_download(runs[r].dq, device.dq, fa_numel_q(s));
        fa_gpu_download(runs[r].dk, device.dk, fa_numel_kv(s));
        fa_gpu_download(runs[r].dv, device.dv, fa_numel_kv(s));
    }
    EXPECT_MSG(passes_rule(&p, &runs[0], "deterministic", 0), "%s %s D=%s: deterministic fails the rule", step, dtype,
               D);
    EXPECT_MSG(passes_rule(&p, &runs[2], "atomic", 0), "%s %s D=%s: atomic fails the rule", step, dtype, D);
    expect_same_bits(s, &runs[0], &runs[1], "deterministic, run 1 vs run 2");
    if (same_bits_as) expect_same_bits(s, &runs[0], &runs[3], "deterministic, this step vs its base");
    for (int r = 0; r < n_runs; r++) grads_free(&runs[r]);
    fa_gpu_free(device.dq), fa_gpu_free(device.dk), fa_gpu_free(device.dv);
    fa_gpu_free(o), fa_gpu_free(lse), fa_gpu_free(delta);
    fa_free_device_half_inputs(&dev);
    free_problem(&p);
}
#endif

int main(int argc, char **argv) {
    const int gpu = fa_test_wants_gpu(argc, argv);
    const char *dtypes[2] = {"fp16", "bf16"}, *dims[2] = {"64", "128"};
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
    if (gpu) {
        char why[256];
        if (tc_cuda_check_device(why, sizeof why) != 0) {
            printf("skipped: %s\n", why);
            return FA_EXIT_SKIP;
        }
    }
#else
    if (gpu) {
        printf("skipped: this build has no tensor-core kernels (no architecture sm_80 or newer)\n");
        return FA_EXIT_SKIP;
    }
#endif
    if (!gpu) test_bf16_blocks();
    // bf16 on the CPU: the float32 passes, then the bf16 passes on every unit this CPU has (emulated on any).
    const bf16_dot_unit units[4] = {BF16_DOT_NONE, BF16_DOT_EMULATED, BF16_DOT_AVX512, BF16_DOT_AMX};
    for (int d = 0; d < 2; d++)
        for (int dim = 0; dim < 2; dim++)
            for (int causal = 0; causal < 2; causal++) {
                if (!gpu)
                    for (int u = 0; u < (d == 1 ? 4 : 1); u++) {
                        if (!unit_available(units[u])) continue;
                        bf16_dot_force(units[u]);
                        test_cpu_case(dtypes[d], dims[dim], causal);
                    }
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
                else {
                    test_cuda_case(dtypes[d], dims[dim], causal, "step 4", flash_backward_tc_cuda, NULL);
                    test_cuda_case(dtypes[d], dims[dim], causal, "step 4b", flash_backward_lean_cuda, NULL);
                    test_cuda_case(dtypes[d], dims[dim], causal, "step 4c", flash_backward_held_cuda,
                                   flash_backward_lean_cuda);
                    test_cuda_case(dtypes[d], dims[dim], causal, "step 4d", flash_backward_occupancy_cuda,
                                   flash_backward_lean_cuda);
                }
#endif
            }
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("all passed\n");
    return failures ? 1 : 0;
}
