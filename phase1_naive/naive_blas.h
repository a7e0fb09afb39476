// naive_blas.h - the baseline a CPU user would pick instead of FlashAttention: naive attention with BLAS.
//
//   S = scale * Q K^T   one sgemm per head           [Sq, Sk]  (S materialised, one head at a time)
//   P = softmax(S)      a vectorised exp (fa_exp2)   in place of S (causal: P[i][j] = 0 for j > i), not yet divided
//                                                    by the row sums
//   O = P V             one sgemm per head           [Sq, D], then each row divided by its sum
//   LSE[i] = log(sum_j exp(S[i][j]))                 [B, H, Sq]
//
// Built only when CMake finds a BLAS (FA_HAVE_BLAS); the phase 5 driver shows it as the "naive BLAS" row.
// q, o: contiguous [B, H, Sq, D]; k, v: contiguous [B, H, Sk, D]; scores: Sq * (Sk + 1) floats of working memory
// (S of one head, then its Sq row sums).
// Sq, Sk and D must each fit in an int (the BLAS interface takes ints).
#ifndef NAIVE_BLAS_H
#define NAIVE_BLAS_H

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

void naive_attention_blas_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, float *scores,
                              float *o, float *lse);
// The BLAS that runs, as the library itself says (OpenBLAS, MKL, BLIS), or the reference implementation when none of
// their queries answers: a line for the report's header, and a short name for the row ("OpenBLAS", "reference").
const char *naive_blas_library(void);
const char *naive_blas_library_short(void);

#ifdef __cplusplus
}
#endif

#endif
