// naive_blas_cpu.c - naive attention with BLAS on the CPU: two sgemm calls and a vectorised softmax per head.
//
// The baseline phase 5 measures itself against: what a CPU user gets from an optimised BLAS (OpenBLAS) without
// FlashAttention. Its two matrix products run near the machine's peak; what costs is the softmax (an exp per score,
// which is why it uses the vectorised fa_exp2 instead of the C library's expf) and S: Sq * Sk floats per head,
// written by the first sgemm, read and written by the softmax, read by the second sgemm, too large for the caches.
// Run: build/bin/phase5_tensor_cores --impl cpu --step 1 --B 1 --H 8 --S 4096 --D 64 --threads 2 --check-heads 1
#include "fa_baselines.h"

#include "fa_exp2.h"
#include "fa_math.h"   // LOG2E, LN2

#include <math.h>
#include <stddef.h>

// The Fortran BLAS interface, which every BLAS has and CMake's FindBLAS looks for (the C header, cblas.h, is not
// always installed where a BLAS is). Fortran is column-major and takes every argument by address; the two trailing
// lengths are those of the character arguments, which gfortran-built BLAS libraries expect.
void sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k, const float *alpha,
            const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
            const int *ldc, size_t transa_len, size_t transb_len);

// C = alpha * A B^T (b_transposed) or alpha * A B, all row-major: A is [m, k], B is [n, k] or [k, n], C is [m, n].
// A row-major matrix is its transpose in column-major, so C^T = B^T A^T is what Fortran computes for us.
static void sgemm_row_major(int b_transposed, int m, int n, int k, float alpha, const float *a, const float *b,
                            float *c) {
    const float beta = 0.0f;
    const int lda = k, ldb = b_transposed ? k : n, ldc = n;
    sgemm_(b_transposed ? "T" : "N", "N", &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc, 1, 1);
}

void naive_attention_blas_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, float *scores,
                              float *o, float *lse) {
    const int64_t BH = shape->B * shape->H, Sq = shape->Sq, Sk = shape->Sk, D = shape->D;
    const float qk_scale = shape->scale * LOG2E;
    float *inv_sum = scores + Sq * Sk;   // [Sq], after S
    // One head at a time: the BLAS parallelises each sgemm over the OpenMP threads, the softmax is split by rows.
    for (int64_t bh = 0; bh < BH; bh++) {
        // S = qk_scale * Q K^T, in base 2.
        sgemm_row_major(1, (int)Sq, (int)Sk, (int)D, qk_scale, q + bh * Sq * D, k + bh * Sk * D, scores);

        // P = softmax(S), row by row, in place, not yet divided by the row sums. Causal: row i sees keys 0..i only;
        // the rest of the row gets 0.
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < Sq; i++) {
            float *s = scores + i * Sk;
            const int64_t seen = shape->causal && i + 1 < Sk ? i + 1 : Sk;
            float m = -INFINITY;
#pragma omp simd reduction(max : m)
            for (int64_t j = 0; j < seen; j++) m = s[j] > m ? s[j] : m;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < seen; j++) {
                s[j] = fa_exp2(s[j] - m);
                sum += s[j];
            }
            for (int64_t j = seen; j < Sk; j++) s[j] = 0.0f;
            // The division by the sum waits for O (D numbers a row, not Sk): one pass less over S.
            inv_sum[i] = 1.0f / sum;
            // m is in base 2: LSE = ln(2) * m + ln(sum), one rounding at the end.
            lse[bh * Sq + i] = fmaf(m, LN2, logf(sum));
        }

        // O = P V, then each row divided by its sum.
        float *o_head = o + bh * Sq * D;
        sgemm_row_major(0, (int)Sq, (int)D, (int)Sk, 1.0f, scores, v + bh * Sk * D, o_head);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t d = 0; d < D; d++) o_head[i * D + d] *= inv_sum[i];
    }
}
