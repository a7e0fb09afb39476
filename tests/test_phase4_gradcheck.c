// test_phase4_gradcheck.c - a gradient check of the whole float32 path: phase 3's forward, then phase 4's backward.
//
// Usage: test_phase4_gradcheck cpu|cuda
// The loss is L(Q, K, V) = sum(O * dO) for a fixed random dO, so dL/dO = dO and the backward's dQ, dK, dV must be
// dL/dQ, dL/dK, dL/dV. Each is compared with central finite differences of L computed by the float64 oracle,
// (L(x + h) - L(x - h)) / 2h for every element x of Q, K and V: a check that does not trust the oracle's backward
// formulas, only its forward. Tiny shapes (every element is perturbed twice), causal on and off, Sq > Sk and Sq < Sk,
// both dQ variants. cuda exits 77 (skipped) without a GPU.
#include "fa_baselines.h"
#include "fa_gpu.h"
#include "fa_test_device.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_verify.h"
#include "fa_contract.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD_STEP 1e-6   // central differences in float64: truncation ~h^2, rounding ~1e-16/h, both far below 1e-8


// L = sum(O * dO) by the float64 oracle.
static double loss(const fa_shape *s, const double *q, const double *k, const double *v, const double *dout,
                   double *o, double *lse) {
    fa_oracle_forward(s, q, k, v, NULL, o, lse);
    double sum = 0.0;
    for (int64_t i = 0; i < fa_numel_q(s); i++) sum += o[i] * dout[i];
    return sum;
}

// dL/dx by central differences, for every element of x (which is one of q, k, v).
static void finite_differences(const fa_shape *s, double *x, int64_t n, const double *q, const double *k,
                               const double *v, const double *dout, double *grad) {
    double *o = fa_alloc_doubles(fa_numel_q(s), "O"), *lse = fa_alloc_doubles(fa_numel_lse(s), "LSE");
    for (int64_t i = 0; i < n; i++) {
        const double saved = x[i];
        x[i] = saved + FD_STEP;
        const double up = loss(s, q, k, v, dout, o, lse);
        x[i] = saved - FD_STEP;
        const double down = loss(s, q, k, v, dout, o, lse);
        x[i] = saved;
        grad[i] = (up - down) / (2.0 * FD_STEP);
    }
    free(o), free(lse);
}

// Forward then backward in float32, on the CPU or the GPU; the gradients land in dq, dk, dv (host).
static void float32_path(const fa_shape *s, int on_gpu, int dq_mode, int block_m, int block_n, const float *q,
                         const float *k, const float *v, const float *dout, float *dq, float *dk, float *dv) {
    const int64_t nq = fa_numel_q(s), nk = fa_numel_kv(s), nl = fa_numel_lse(s);
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    fa_poison(dq, nq), fa_poison(dk, nk), fa_poison(dv, nk);
    if (!on_gpu) {
        float *o = fa_alloc_floats(nq, "O"), *lse = fa_alloc_floats(nl, "LSE"), *delta = fa_alloc_floats(nl, "Delta");
        const forward_tensors f = {q, k, v, sq, sk, sk, o, sq, lse, NULL};
        flash_forward_lse_cpu(s, block_m, block_n, &f, NULL);
        backward_tensors t = {q, k, v, o, lse, dout, sq, sk, sk, sq, sq, delta, dq, dk, dv, sq, sk, sk, NULL};
        flash_backward_cpu(s, block_m, block_n, dq_mode, &t);
        free(o), free(lse), free(delta);
        return;
    }
#if FA_HAVE_CUDA
    float *q_d = fa_gpu_alloc(nq, "q"), *k_d = fa_gpu_alloc(nk, "k"), *v_d = fa_gpu_alloc(nk, "v");
    float *do_d = fa_gpu_alloc(nq, "dO"), *o_d = fa_gpu_alloc(nq, "O"), *lse_d = fa_gpu_alloc(nl, "LSE");
    float *delta_d = fa_gpu_alloc(nl, "Delta");
    float *dq_d = fa_gpu_alloc(nq, "dQ"), *dk_d = fa_gpu_alloc(nk, "dK"), *dv_d = fa_gpu_alloc(nk, "dV");
    fa_gpu_upload(q_d, q, nq), fa_gpu_upload(k_d, k, nk), fa_gpu_upload(v_d, v, nk), fa_gpu_upload(do_d, dout, nq);
    fa_gpu_poison(dq_d, nq), fa_gpu_poison(dk_d, nk), fa_gpu_poison(dv_d, nk);
    const forward_tensors f = {q_d, k_d, v_d, sq, sk, sk, o_d, sq, lse_d, NULL};
    flash_forward_lse_cuda(s, block_m, block_n, &f);
    backward_tensors t = {q_d, k_d, v_d, o_d, lse_d, do_d, sq, sk, sk, sq, sq,
                          delta_d, dq_d, dk_d, dv_d, sq, sk, sk, NULL};
    flash_backward_cuda(s, block_m, block_n, dq_mode, &t);
    fa_gpu_synchronize("forward + backward");
    fa_gpu_download(dq, dq_d, nq), fa_gpu_download(dk, dk_d, nk), fa_gpu_download(dv, dv_d, nk);
    fa_gpu_free(q_d), fa_gpu_free(k_d), fa_gpu_free(v_d), fa_gpu_free(do_d), fa_gpu_free(o_d), fa_gpu_free(lse_d);
    fa_gpu_free(delta_d), fa_gpu_free(dq_d), fa_gpu_free(dk_d), fa_gpu_free(dv_d);
#endif
}

static void compare(const char *what, const char *name, const float *got, const double *want, const int64_t dims[4]) {
    fa_check c = fa_verify_results(what, name, got, want, dims, NULL, FA_TOL_BACKWARD);
    printf("  %-44s %s: max abs err %.2e, rel err %.2e  %s\n", what, name, c.max_abs_err, c.rel_err,
           c.pass ? "ok" : "FAIL");
    EXPECT(c.pass);
}

static void check_shape(fa_shape s, int on_gpu, int block_m, int block_n) {
    s.scale = (float)(1.0 / sqrt((double)s.D));
    const int64_t nq = fa_numel_q(&s), nk = fa_numel_kv(&s);
    float *q = fa_alloc_floats(nq, "q"), *k = fa_alloc_floats(nk, "k"), *v = fa_alloc_floats(nk, "v");
    float *dout = fa_alloc_floats(nq, "dO");
    fa_fill_random(q, nq, 7, FA_STREAM_Q, 1.5f);   // larger than the drivers' inputs: a less uniform softmax
    fa_fill_random(k, nk, 7, FA_STREAM_K, 1.5f);
    fa_fill_random(v, nk, 7, FA_STREAM_V, 1.0f);
    fa_fill_random(dout, nq, 7, FA_STREAM_DO, 1.0f);

    // The finite differences start from exactly the float32 inputs, widened to double.
    double *q64 = fa_to_double(q, nq, "q"), *k64 = fa_to_double(k, nk, "k"), *v64 = fa_to_double(v, nk, "v");
    double *do64 = fa_to_double(dout, nq, "dO");
    double *fd_q = fa_alloc_doubles(nq, "FD dQ"), *fd_k = fa_alloc_doubles(nk, "FD dK");
    double *fd_v = fa_alloc_doubles(nk, "FD dV");
    finite_differences(&s, q64, nq, q64, k64, v64, do64, fd_q);
    finite_differences(&s, k64, nk, q64, k64, v64, do64, fd_k);
    finite_differences(&s, v64, nk, q64, k64, v64, do64, fd_v);

    float *dq = fa_alloc_floats(nq, "dQ"), *dk = fa_alloc_floats(nk, "dK"), *dv = fa_alloc_floats(nk, "dV");
    const int64_t dims_q[4] = {s.B, s.H, s.Sq, s.D}, dims_kv[4] = {s.B, s.H, s.Sk, s.D};
    const int modes[2] = {FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC};
    for (int m = 0; m < 2; m++) {
        char what[96];
        snprintf(what, sizeof what, "%s %s Sq=%lld Sk=%lld D=%lld%s %dx%d", on_gpu ? "cuda" : "cpu",
                 m == 0 ? "det" : "atomic", (long long)s.Sq, (long long)s.Sk, (long long)s.D,
                 s.causal ? " causal" : "", block_m, block_n);
        float32_path(&s, on_gpu, modes[m], block_m, block_n, q, k, v, dout, dq, dk, dv);
        compare(what, "dQ", dq, fd_q, dims_q);
        compare(what, "dK", dk, fd_k, dims_kv);
        compare(what, "dV", dv, fd_v, dims_kv);
    }
    free(q), free(k), free(v), free(dout), free(q64), free(k64), free(v64), free(do64);
    free(fd_q), free(fd_k), free(fd_v), free(dq), free(dk), free(dv);
}

int main(int argc, char **argv) {
    const int on_gpu = fa_test_wants_gpu(argc, argv);
    // Sq > Sk and Sq < Sk, so that causal rows past Sk and keys no row sees are both covered.
    const fa_shape shapes[] = {
        {.B = 1, .H = 2, .Sq = 9, .Sk = 6, .D = 16, .causal = 1},
        {.B = 1, .H = 2, .Sq = 6, .Sk = 9, .D = 16, .causal = 1},
        {.B = 2, .H = 1, .Sq = 7, .Sk = 7, .D = 16, .causal = 0},
    };
    for (int i = 0; i < 3; i++) {
        if (on_gpu) {
            check_shape(shapes[i], 1, 64, 64);
        } else {
            check_shape(shapes[i], 0, 4, 3);   // several tiles per head: skipped, masked and full ones
            check_shape(shapes[i], 0, 64, 64);
        }
    }
    if (failures) {
        fprintf(stderr, "%d gradient check(s) failed\n", failures);
        return 1;
    }
    printf("all gradient checks passed\n");
    return 0;
}
