// fa_oracle.h - the float64 reference: the single source of truth every check compares against.
//
// Plain textbook attention in double precision, written for clarity, not speed (it is only parallelised):
//   S = scale * Q K^T,  causal: S[i][j] = -inf for j > i,  P = softmax_rows(S),  O = P V,  LSE_i = log sum_j exp(S_ij)
// and its gradients for a loss L with dL/dO = dO:
//   dV = P^T dO,  dP = dO V^T,  Delta_i = rowsum(dO * O)_i,  dS = P * (dP - Delta),  dQ = scale dS K,  dK = scale dS^T Q
// Inputs are contiguous [B, H, S, D] double arrays (fa_to_double converts float32 ones). `heads` is a mask of B*H
// bytes: only heads whose byte is nonzero are computed, the rest of the outputs are left untouched; NULL means all.
#ifndef FA_ORACLE_H
#define FA_ORACLE_H

#ifdef __cplusplus
extern "C" {
#endif

#include "fa_shape.h"

// Copies count floats into a new double array (exits 2 when memory runs out).
double *fa_to_double(const float *x, int64_t count, const char *what);

// The oracle's arrays for a sample of heads. They are indexed like the full tensor, [B*H, per_head] (so that a result
// and its reference share every index), but only the heads marked in `heads` (NULL = all) are ever written or read.
// calloc gives a large block as fresh zero pages that the kernel maps on first touch, so the heads left out cost
// address space, not memory; the memory guard is asked for the heads kept. Exits 2 when those do not fit.
double *fa_oracle_alloc_heads(const fa_shape *shape, const unsigned char *heads, int64_t per_head, const char *what);
// fa_oracle_alloc_heads, then the marked heads of the float32 tensor x ([B*H, per_head]) converted to double.
double *fa_oracle_heads_to_double(const float *x, const fa_shape *shape, const unsigned char *heads,
                                  int64_t per_head, const char *what);

// o: [B, H, Sq, D], lse: [B, H, Sq] (natural log).
void fa_oracle_forward(const fa_shape *shape, const double *q, const double *k, const double *v,
                       const unsigned char *heads, double *o, double *lse);

// dq: [B, H, Sq, D], dk and dv: [B, H, Sk, D]. o and lse are fa_oracle_forward's for the same inputs.
void fa_oracle_backward(const fa_shape *shape, const double *q, const double *k, const double *v, const double *dout,
                        const double *o, const double *lse, const unsigned char *heads, double *dq, double *dk,
                        double *dv);

// The size of the sums that make each output: what fa_verify_results_scaled measures errors against. A float32 sum
// is off by a few ulps of the terms it adds, whatever its result; so each output's scale is the largest, over its
// elements, of the sum of the absolute values of its terms (for LSE, the row's largest |score| plus log of its sum):
//   O_id: sum_j p_ij |v_jd|          dV_jd: sum_i p_ij |dO_id|          LSE_i: |max_j s_ij| + log(sum_j exp(s_ij - max))
//   dQ_id: scale sum_j p_ij (|dP_ij| + |Delta_i|) |k_jd|     dK_jd: scale sum_i p_ij (|dP_ij| + |Delta_i|) |q_id|
// (dS_ij = p_ij (dP_ij - Delta_i): its error is on the scale of the two terms, not of their difference.)
typedef struct {
    double o, lse, dq, dk, dv;
} fa_magnitudes;
// dout may be NULL: then only o and lse are set. o and lse are fa_oracle_forward's.
void fa_oracle_magnitudes(const fa_shape *shape, const double *q, const double *k, const double *v, const double *dout,
                          const double *o, const double *lse, const unsigned char *heads, fa_magnitudes *mag);

#ifdef __cplusplus
}
#endif

#endif
