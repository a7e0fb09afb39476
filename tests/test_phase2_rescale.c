// test_phase2_rescale.c - proves that the online softmax's rescaling is exercised, and right.
//
// Usage: test_phase2_rescale cpu|cuda      (cuda exits 77, skipped, without a GPU)
//
// The inputs are built so that, for every query row, the largest logit of each K tile is larger than every logit
// of the tile before: the running max m_i grows at every tile, so every tile after the first must rescale l_i and
// acc by alpha = 2^(m_old - m_new) < 1. The logits pass 88.7 = ln(FLT_MAX): exp() of an unshifted logit would
// overflow float32 to Inf. The test checks, in this order:
//   1. the construction: per row, the tile maxima really grow (computed here in double precision);
//   2. that the rescale matters: the same tiled loop without alpha (simulated here in double) is far off the oracle;
//   3. the kernel against the float64 oracle (fa_verify_results), with no NaN or Inf.
#include "fa_gpu.h"
#include "fa_test_device.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_verify.h"
#include "online_softmax.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_Q 100          // rows: one full Q tile of 64 and a ragged one
#define S_K 167          // keys: 5 full K tiles of 32 and a ragged one of 7
#define HEAD_DIM 16
#define BLOCK_M 64
#define BLOCK_N 32       // the tiles the kernel runs with: the growth below is per tile of this size
#define SCALE 8.0f


// q_i = (~1, small noise); k_j = (~2 * (tile of j + 1), small noise): q_i . k_j grows by about 2 per tile, times SCALE.
static void make_inputs(float *q, float *k, float *v) {
    float *noise = malloc(sizeof(float) * (S_Q + 2 * S_K) * HEAD_DIM);
    fa_fill_random(noise, (S_Q + 2 * S_K) * HEAD_DIM, 7, 1, 1.0f);
    const float *nq = noise, *nk = noise + S_Q * HEAD_DIM, *nv = nk + S_K * HEAD_DIM;
    for (int i = 0; i < S_Q; i++)
        for (int d = 0; d < HEAD_DIM; d++)
            q[i * HEAD_DIM + d] = d == 0 ? 1.0f + 0.1f * nq[i * HEAD_DIM] : 0.1f * nq[i * HEAD_DIM + d];
    for (int j = 0; j < S_K; j++)
        for (int d = 0; d < HEAD_DIM; d++) {
            const int tile = j / BLOCK_N;
            k[j * HEAD_DIM + d] = d == 0 ? 2.0f * (float)(tile + 1) + 0.5f * nk[j * HEAD_DIM]
                                         : 0.1f * nk[j * HEAD_DIM + d];
            v[j * HEAD_DIM + d] = nv[j * HEAD_DIM + d];
        }
    free(noise);
}

static double logit(const float *q, const float *k, int i, int j) {
    double dot = 0.0;
    for (int d = 0; d < HEAD_DIM; d++) dot += (double)q[i * HEAD_DIM + d] * k[j * HEAD_DIM + d];
    return SCALE * dot;
}

// 1. Every row's tile maxima grow strictly: returns the number of rescales a correct kernel performs (rows times
//    tiles after the first), or -1 when the construction failed.
static int count_rescales(const float *q, const float *k, double *largest_logit) {
    int rescales = 0;
    *largest_logit = -INFINITY;
    for (int i = 0; i < S_Q; i++) {
        double m_i = -INFINITY;
        for (int k_start = 0; k_start < S_K; k_start += BLOCK_N) {
            double m_tile = -INFINITY;
            for (int j = k_start; j < S_K && j < k_start + BLOCK_N; j++) m_tile = fmax(m_tile, logit(q, k, i, j));
            if (m_tile <= m_i) {
                fprintf(stderr, "construction: row %d, tile at key %d does not raise the max\n", i, k_start);
                return -1;
            }
            if (k_start > 0) rescales++;
            m_i = m_tile;
        }
        *largest_logit = fmax(*largest_logit, m_i);
    }
    return rescales;
}

// 2. The tiled loop with the correction left out (alpha taken as 1), in double: the answer a kernel that forgot
//    to rescale would give. Returns its largest error relative to the oracle's largest |O|.
static double error_without_rescale(const float *q, const float *k, const float *v, const double *o_ref) {
    double worst = 0.0, scale_ref = 0.0;
    for (int x = 0; x < S_Q * HEAD_DIM; x++) scale_ref = fmax(scale_ref, fabs(o_ref[x]));
    for (int i = 0; i < S_Q; i++) {
        double m_i = -INFINITY, l_i = 0.0, acc[HEAD_DIM] = {0};
        for (int k_start = 0; k_start < S_K; k_start += BLOCK_N) {
            const int end = k_start + BLOCK_N < S_K ? k_start + BLOCK_N : S_K;
            for (int j = k_start; j < end; j++) m_i = fmax(m_i, logit(q, k, i, j));
            for (int j = k_start; j < end; j++) {
                const double p = exp(logit(q, k, i, j) - m_i);
                l_i += p;   // missing: l_i *= alpha and acc *= alpha before this tile
                for (int d = 0; d < HEAD_DIM; d++) acc[d] += p * v[j * HEAD_DIM + d];
            }
        }
        for (int d = 0; d < HEAD_DIM; d++) worst = fmax(worst, fabs(acc[d] / l_i - o_ref[i * HEAD_DIM + d]));
    }
    return worst / scale_ref;
}

int main(int argc, char **argv) {
    const int on_gpu = fa_test_wants_gpu(argc, argv);

    const fa_shape shape = {.B = 1, .H = 1, .Sq = S_Q, .Sk = S_K, .D = HEAD_DIM, .causal = 0, .scale = SCALE};
    float *q = fa_alloc_floats(S_Q * HEAD_DIM, "Q"), *k = fa_alloc_floats(S_K * HEAD_DIM, "K");
    float *v = fa_alloc_floats(S_K * HEAD_DIM, "V"), *o = fa_alloc_floats(S_Q * HEAD_DIM, "O");
    make_inputs(q, k, v);

    double largest_logit;
    const int rescales = count_rescales(q, k, &largest_logit);
    if (rescales < 0) return 1;
    printf("construction: every row's max grows at every K tile: %d rescales expected; logits reach %.1f\n",
           rescales, largest_logit);
    EXPECT_MSG(largest_logit >= 88.8, "construction: logits should pass ln(FLT_MAX) = 88.7");

    double *qd = fa_to_double(q, S_Q * HEAD_DIM, "Q"), *kd = fa_to_double(k, S_K * HEAD_DIM, "K");
    double *vd = fa_to_double(v, S_K * HEAD_DIM, "V");
    double *o_ref = fa_alloc_doubles(S_Q * HEAD_DIM, "O"), *lse_ref = fa_alloc_doubles(S_Q, "LSE");
    fa_oracle_forward(&shape, qd, kd, vd, NULL, o_ref, lse_ref);

    const double off = error_without_rescale(q, k, v, o_ref);
    printf("without the rescale, the same tiles would be off by %.3e of the output's scale\n", off);
    EXPECT_MSG(off >= 1e-2, "construction: skipping the rescale should change the answer visibly");

    fa_poison(o, S_Q * HEAD_DIM);
    if (!on_gpu) {
        const forward_2d_tensors t = {q, k, v, o};
        flash_forward_2d_cpu(&shape, BLOCK_M, BLOCK_N, &t);
    } else {
#if FA_HAVE_CUDA
        float *q_dev = fa_gpu_alloc(S_Q * HEAD_DIM, "Q"), *k_dev = fa_gpu_alloc(S_K * HEAD_DIM, "K");
        float *v_dev = fa_gpu_alloc(S_K * HEAD_DIM, "V"), *o_dev = fa_gpu_alloc(S_Q * HEAD_DIM, "O");
        fa_gpu_upload(q_dev, q, S_Q * HEAD_DIM);
        fa_gpu_upload(k_dev, k, S_K * HEAD_DIM);
        fa_gpu_upload(v_dev, v, S_K * HEAD_DIM);
        fa_gpu_poison(o_dev, S_Q * HEAD_DIM);
        const forward_2d_tensors t = {q_dev, k_dev, v_dev, o_dev};
        flash_forward_2d_cuda(&shape, BLOCK_M, BLOCK_N, &t);
        fa_gpu_synchronize("phase 2 rescale test");
        fa_gpu_download(o, o_dev, S_Q * HEAD_DIM);
        fa_gpu_free(q_dev);
        fa_gpu_free(k_dev);
        fa_gpu_free(v_dev);
        fa_gpu_free(o_dev);
#endif
    }

    // The float32 logits carry an error of about eps * |logit|, which exp() turns into a relative error of the
    // same size: the tolerance grows with the logits (as fa_tolerance_for_inputs does for the drivers).
    const double tolerance = fmax(FA_TOL_FORWARD, 20.0 * 1.2e-7 * largest_logit);
    const int64_t dims[4] = {1, 1, S_Q, HEAD_DIM};
    fa_check c = fa_verify_results(on_gpu ? "online softmax cuda" : "online softmax cpu", "O", o, o_ref, dims, NULL,
                                   tolerance);
    printf("kernel: max abs err %.3e, rel err %.3e (tolerance %.1e), %lld NaN/Inf: %s\n", c.max_abs_err, c.rel_err,
           tolerance, (long long)c.nonfinite, c.pass ? "PASS" : "FAIL");
    EXPECT(c.pass);

    free(q);
    free(k);
    free(v);
    free(o);
    free(qd);
    free(kd);
    free(vd);
    free(o_ref);
    free(lse_ref);
    return failures ? 1 : 0;
}
