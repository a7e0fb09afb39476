// test_python_shim.c - the C functions the PyTorch binding calls (python/csrc/flash_steps_shim.h), tested from C, so
// that a machine without PyTorch checks them too:
//   - fs_check refuses every problem the kernels do not take, with one line, and returns (the kernels themselves
//     would exit), and accepts the ones they do;
//   - fs_forward and fs_backward on the CPU send each problem to the right kernel with the right arguments: O, LSE,
//     dQ, dK and dV against the float64 oracle of phase 6 (every feature), for float32, GQA, the window, softcapping
//     and bf16, on fresh random inputs with every output poisoned (NaN) first.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_test_expect.h"
#include "flash_steps_shim.h"
#include "oracle_ext.h"

static fs_problem base_problem(void) {
    const fs_problem p = {.B = 2, .H = 4, .H_kv = 4, .Sq = 37, .Sk = 45, .D = 32, .causal = 0, .scale = 0.176f,
                          .window_left = -1, .window_right = -1, .softcap = 0.0f, .dtype = FA_DTYPE_FP32,
                          .on_gpu = 0, .deterministic = 1};
    return p;
}

static void expect_refused(fs_problem p, const char *what) {
    char why[256] = "";
    EXPECT_MSG(fs_check(&p, why, sizeof why) == -1, "fs_check accepted %s", what);
    EXPECT_MSG(strlen(why) > 10 && !strchr(why, '\n'), "%s: no one-line reason (got \"%s\")", what, why);
}

static void test_refusals(void) {
    char why[256];
    fs_problem p = base_problem();
    EXPECT(fs_check(&p, why, sizeof why) == 0);
    p.Sq = 0;
    expect_refused(p, "Sq = 0");
    p = base_problem(), p.scale = NAN;
    expect_refused(p, "a NaN scale");
    p = base_problem(), p.dtype = 7;
    expect_refused(p, "an unknown dtype");
    p = base_problem(), p.H_kv = 3;
    expect_refused(p, "H = 4 over H_kv = 3");
    p = base_problem(), p.window_left = -2;
    expect_refused(p, "a window bound of -2");
    p = base_problem(), p.causal = 1, p.window_left = 8, p.window_right = 3;
    expect_refused(p, "a causal window with a right bound");
    p = base_problem(), p.softcap = -1.0f;
    expect_refused(p, "a negative softcap");
    p = base_problem(), p.softcap = INFINITY;
    expect_refused(p, "an infinite softcap");
    p = base_problem(), p.H_kv = 2, p.softcap = 5.0f;
    expect_refused(p, "GQA with a softcap");
    p = base_problem(), p.dtype = FA_DTYPE_BF16, p.window_left = 4;
    expect_refused(p, "bf16 with a window");
    p = base_problem(), p.softcap = 5.0f, p.deterministic = 0;
    expect_refused(p, "a softcap with the atomic dQ");
    p = base_problem(), p.on_gpu = 1, p.D = 24;
    expect_refused(p, "D = 24 on the GPU");   // refused in a CPU-only build too: no CUDA at all
    p = base_problem(), p.on_gpu = 1, p.D = 32, p.dtype = FA_DTYPE_FP16;
    expect_refused(p, "fp16 at D = 32 on the GPU");
}

// The error of got against the oracle's want, relative to the largest |want|.
static double relative_error(const float *got, const double *want, int64_t n) {
    double err = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        err = fmax(err, fabs(got[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    return err / fmax(scale, 1e-300);
}

static fs_tensor contiguous(void *data, int64_t H, int64_t S, int64_t D) {
    const fs_tensor t = {data, fa_strides_contiguous(H, S, D)};
    return t;
}

// One problem through fs_forward and fs_backward on the CPU, against the oracle; tol is relative to the largest
// value of each tensor (float32: a few roundings; bf16: a few units of its 2^-8).
static void check_against_oracle(const fs_problem *p, const char *name, const char *kernel, double tol) {
    EXPECT_MSG(strcmp(fs_kernel_name(p), kernel) == 0, "%s: fs_kernel_name says \"%s\"", name, fs_kernel_name(p));
    char why[256];
    EXPECT_MSG(fs_check(p, why, sizeof why) == 0, "%s refused: %s", name, why);
    const int64_t nq = p->B * p->H * p->Sq * p->D, nkv = p->B * p->H_kv * p->Sk * p->D, nrow = p->B * p->H * p->Sq;
    float *in = fa_alloc_floats(2 * nq + 2 * nkv, "the inputs");   // q, k, v, dO
    float *q = in, *k = q + nq, *v = k + nkv, *dout = v + nkv;
    fa_fill_random(in, 2 * nq + 2 * nkv, 61, 0, 1.0f);
    fa_round_floats(in, 2 * nq + 2 * nkv, p->dtype);   // the values the kernels see (bf16: rounded)
    void *q_in = q, *k_in = k, *v_in = v, *do_in = dout;
    uint16_t *half = NULL;   // fp16 / bf16: the same values as the half type's bits
    if (p->dtype != FA_DTYPE_FP32) {
        half = malloc(sizeof(uint16_t) * (2 * nq + 2 * nkv));
        if (!half) fa_die("out of host memory for the half inputs");
        fa_floats_to_half(in, half, 2 * nq + 2 * nkv, p->dtype);
        q_in = half, k_in = half + nq, v_in = half + nq + nkv, do_in = half + nq + 2 * nkv;
    }

    float *out = fa_alloc_floats(2 * nq + 2 * nkv + 3 * nrow, "the outputs");
    fa_poison(out, 2 * nq + 2 * nkv + 3 * nrow);
    float *o = out, *dq = o + nq, *dk = dq + nq, *dv = dk + nkv, *lse = dv + nkv, *residual = lse + nrow;
    float *delta = residual + nrow;
    const fs_tensor tq = contiguous(q_in, p->H, p->Sq, p->D), tk = contiguous(k_in, p->H_kv, p->Sk, p->D),
                    tv = contiguous(v_in, p->H_kv, p->Sk, p->D), tdo = contiguous(do_in, p->H, p->Sq, p->D),
                    to = contiguous(o, p->H, p->Sq, p->D), tdq = contiguous(dq, p->H, p->Sq, p->D),
                    tdk = contiguous(dk, p->H_kv, p->Sk, p->D), tdv = contiguous(dv, p->H_kv, p->Sk, p->D);
    for (int64_t i = 0; i < nrow; i++) residual[i] = 0.0f;   // the half kernels leave it alone, as the binding's zeros
    fs_forward(p, &tq, &tk, &tv, &to, lse, residual);
    fs_backward(p, &tq, &tk, &tv, &to, lse, residual, &tdo, delta, &tdq, &tdk, &tdv);

    const fa_shape shape = {.B = p->B, .H = p->H, .Sq = p->Sq, .Sk = p->Sk, .D = p->D, .causal = p->causal,
                            .scale = p->scale};
    const ext_options e = {.H_kv = p->H_kv, .window_left = p->window_left, .window_right = p->window_right,
                           .softcap = p->softcap};
    double *in64 = fa_to_double(in, 2 * nq + 2 * nkv, "the inputs in float64");
    double *want = fa_alloc_doubles(2 * nq + 2 * nkv + nrow, "the oracle's outputs");
    double *wo = want, *wdq = wo + nq, *wdk = wdq + nq, *wdv = wdk + nkv, *wlse = wdv + nkv;
    fa_magnitudes mag;
    memset(&mag, 0, sizeof mag);
    ext_oracle_forward(&shape, &e, in64, in64 + nq, in64 + nq + nkv, NULL, wo, wlse, &mag);
    ext_oracle_backward(&shape, &e, in64, in64 + nq, in64 + nq + nkv, in64 + nq + 2 * nkv, wo, wlse, NULL, wdq, wdk,
                        wdv, &mag);
    const struct { const char *tensor; const float *got; const double *want; int64_t n; } checks[] = {
        {"O", o, wo, nq}, {"LSE", lse, wlse, nrow}, {"dQ", dq, wdq, nq}, {"dK", dk, wdk, nkv}, {"dV", dv, wdv, nkv}};
    for (int c = 0; c < 5; c++) {
        const double err = relative_error(checks[c].got, checks[c].want, checks[c].n);
        EXPECT_MSG(err <= tol, "%s, %s: error %.3g against the oracle, more than %.1g", name, checks[c].tensor, err, tol);
    }
    fa_free_magnitudes(&mag);
    free(in), free(half), free(out), free(in64), free(want);
}

int main(void) {
    test_refusals();
    const char *phase34 = "phase 3 step 3 forward, phase 4 backward";
    fs_problem p = base_problem();
    check_against_oracle(&p, "float32", phase34, 1e-5);
    p.causal = 1, p.deterministic = 0;
    check_against_oracle(&p, "float32 causal, atomic dQ", phase34, 1e-5);
    p = base_problem(), p.H_kv = 2, p.causal = 1;
    check_against_oracle(&p, "GQA causal", "phase 6 gqa (forward and backward)", 1e-5);
    p = base_problem(), p.window_left = 9, p.window_right = 4;
    check_against_oracle(&p, "window (9, 4)", "phase 6 window (forward and backward)", 1e-5);
    p = base_problem(), p.softcap = 1.5f;
    check_against_oracle(&p, "softcap 1.5", "phase 6 softcap (forward and backward)", 1e-5);
    p = base_problem(), p.dtype = FA_DTYPE_BF16, p.causal = 1, p.D = 64;
    check_against_oracle(&p, "bf16 causal", "phase 5 step 3 forward, step 4 backward", 2e-2);
    p = base_problem(), p.dtype = FA_DTYPE_FP16, p.D = 64;
    check_against_oracle(&p, "fp16", "phase 5 step 3 forward, step 4 backward", 4e-3);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("the binding's C functions: every check passed\n");
    return failures ? 1 : 0;
}
