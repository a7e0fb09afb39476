// naive_blas_cpu.c - naive attention with BLAS on the CPU: two sgemm calls and a vectorised softmax per head.
//
// The baseline phase 5 measures itself against: what a CPU user gets from an optimised BLAS (OpenBLAS) without
// FlashAttention. Its two matrix products run near the machine's peak; what costs is the softmax (an exp per score,
// which is why it uses the vectorised fa_exp2 instead of the C library's expf, in the CPU's widest vectors:
// FA_SIMD_CLONES) and S: Sq * Sk floats per head, written by the first sgemm, read and written by the softmax, read
// by the second sgemm, too large for the caches. Which BLAS ran matters as much as the algorithm (the reference
// Netlib library is single-threaded and not blocked for the caches): naive_blas_library() asks the library, and the
// row and the header name it.
// Run: build/bin/phase5_tensor_cores --impl cpu --step 1 --B 1 --H 8 --S 4096 --D 64 --threads 2 --check-heads 1
#define _GNU_SOURCE   // dladdr, before any system header
#include "fa_baselines.h"

#include "fa_exp2.h"
#include "fa_math.h"   // LOG2E, LN2
#include "fa_simd.h"   // FA_SIMD_CLONES: the softmax in the CPU's widest vectors

#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

// --- Which BLAS is this? ----------------------------------------------------------------------------------------
// Each optimised BLAS has a query function of its own; the reference library has none. They are declared weak: the
// one the loaded library defines resolves, the others stay NULL. (Where Debian's alternatives swap libblas.so.3,
// this asks the library that is actually loaded, not the one CMake found.)
#if defined(__GNUC__) && defined(__ELF__)
#define FA_WEAK __attribute__((weak))
#else
#define FA_WEAK
#endif
char *openblas_get_config(void) FA_WEAK;          // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
int openblas_get_parallel(void) FA_WEAK;          // 0 sequential, 1 its own threads, 2 OpenMP's
void mkl_get_version_string(char *buf, int len) FA_WEAK;
const char *bli_info_get_version_str(void) FA_WEAK;   // BLIS

static char blas_name[32], blas_text[224];

static void ask_the_blas(void) {
    if (blas_name[0]) return;
    char file[160] = "";
    Dl_info where;
    if (dladdr((void *)sgemm_, &where) && where.dli_fname) {
        const char *base = strrchr(where.dli_fname, '/');
        snprintf(file, sizeof file, "%s", base ? base + 1 : where.dli_fname);
    }
    if (openblas_get_config) {
        const int parallel = openblas_get_parallel ? openblas_get_parallel() : -1;
        snprintf(blas_name, sizeof blas_name, "OpenBLAS");
        snprintf(blas_text, sizeof blas_text, "%s; %s (%s)", openblas_get_config(),
                 parallel == 2 ? "OpenMP threads (--threads)" : parallel == 1 ? "its own threads" : "single-threaded",
                 file);
    } else if (mkl_get_version_string) {
        char version[160];
        mkl_get_version_string(version, (int)sizeof version);
        snprintf(blas_name, sizeof blas_name, "MKL");
        snprintf(blas_text, sizeof blas_text, "%s (%s)", version, file);
    } else if (bli_info_get_version_str) {
        snprintf(blas_name, sizeof blas_name, "BLIS");
        snprintf(blas_text, sizeof blas_text, "BLIS %s (%s)", bli_info_get_version_str(), file);
    } else {
        // No vendor's query answers: the reference implementation (or one we do not know), which is plain Fortran
        // loops, one thread, no blocking for the caches.
        snprintf(blas_name, sizeof blas_name, "reference");
        snprintf(blas_text, sizeof blas_text, "the reference BLAS (Netlib: single-threaded, unblocked loops; no "
                 "vendor query answers) (%s); install OpenBLAS for an honest baseline", file);
    }
}

const char *naive_blas_library(void) {
    ask_the_blas();
    return blas_text;
}

const char *naive_blas_library_short(void) {
    ask_the_blas();
    return blas_name;
}

// P = softmax(S) for one head, in place, not yet divided by the row sums; their inverses into inv_sum, the rows'
// LSE into lse. Causal: row i sees keys 0..i only; the rest of the row gets 0.
FA_SIMD_CLONES
static void softmax_rows(const fa_shape *shape, float *scores, float *inv_sum, float *lse) {
    const int64_t Sq = shape->Sq, Sk = shape->Sk;
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
        lse[i] = fmaf(m, LN2, logf(sum));
    }
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

        softmax_rows(shape, scores, inv_sum, lse + bh * Sq);

        // O = P V, then each row divided by its sum.
        float *o_head = o + bh * Sq * D;
        sgemm_row_major(0, (int)Sq, (int)D, (int)Sk, 1.0f, scores, v + bh * Sk * D, o_head);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t d = 0; d < D; d++) o_head[i * D + d] *= inv_sum[i];
    }
}
