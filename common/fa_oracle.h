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

// What each output row's error is measured against, computed in float64 beside the answer: the bounds are per row
// (a query row of O, LSE, dQ; a key row of dK, dV), so that one large input loosens the check of its own rows only.
//
// scale: the size of the sums that make the row's elements. A float32 sum is off by a few ulps of the terms it adds,
// whatever its result; so a row's scale is the largest, over its elements, of the sum of the absolute values of their
// terms (for LSE, the row's largest |score| plus the log of its sum, or, when larger, sum_j p_ij a_ij, the size of the
// logits' own terms, a_ij below):
//   O_id: sum_j p_ij |v_jd|          dV_jd: sum_i p_ij |dO_id|          LSE_i: |max_j s_ij| + log(sum_j exp(s_ij - max))
//   dQ_id: scale sum_j p_ij (|dP_ij| + |Delta_i|) |k_jd|     dK_jd: scale sum_i p_ij (|dP_ij| + |Delta_i|) |q_id|
// (dS_ij = p_ij (dP_ij - Delta_i): its error is on the scale of the two terms, not of their difference; and |dP_ij|
// and |Delta_i| stand for the sizes of their own terms, sum_d |dO_id v_jd| and sum_d |dO_id O_id|, since each is a
// float32 dot product that may cancel.)
//
// logit: what the float32 rounding of the logits may move the row by, relative to its scale. A float32 logit s_ij
// is a dot product of D terms: it is off by up to about eps * sqrt(D) * a_ij, where a_ij = scale * sum_d |q_id k_jd|
// is the size of its terms (fa_logit_error gives the bound, FA_LOGIT_ERROR_FACTOR times that). An error delta_ij in a
// logit moves p_ij by p_ij (delta_ij - sum_k p_ik delta_ik) to first order, so it reaches the row only through the
// keys the row weighs: O_id moves by at most sum_j p_ij g_ij |v_jd| + (sum_j p_ij g_ij) sum_j p_ij |v_jd|, with
// g_ij = expm1(bound of delta_ij) (expm1, so that a large error is never understated); the gradients likewise, through
// P, dS and Delta. A large logit that the softmax gives no weight changes nothing, and a row whose logits are small
// keeps a tight check, whatever the rest of the input holds.
//
// tiny: what float32 underflow may lose in the row, in absolute terms. A probability (or dS) below float32's
// smallest normal number, FLT_MIN = 2^-126, is flushed or kept with its absolute error: each term may lose up to
// FLT_MIN times its other factor, whatever the row's scale. A row whose keys all get a weight of 1e-100 has a
// scale of 1e-100 and a float32 result of 0: correct, and passed by this term.
typedef struct {
    double *scale;   // [rows]: the row's scale (see above)
    double *logit;   // [rows]: the logits' float32 error in the row, relative to its scale
    double *tiny;    // [rows]: what underflow may lose in the row, absolute
} fa_row_bounds;
typedef struct {
    fa_row_bounds o, lse, dq, dk, dv;
} fa_magnitudes;

// The bound on a float32 logit's error, FA_LOGIT_ERROR_FACTOR * eps * sqrt(D) * abs_terms (abs_terms = a_ij above),
// returned as the factor expm1(bound) by which it may move exp(logit). A float32 dot product of D terms of one sign is
// off by about eps * sqrt(D) / 3 of a_ij (one standard deviation; terms of random signs give less), and the
// exponent's argument adds a rounding of its own: the factor 1 covers both with a margin of about three standard
// deviations, and the p-weighted sums above average over many keys.
#define FA_LOGIT_ERROR_FACTOR 1.0
double fa_logit_error(double abs_terms, int64_t D);

// Beyond this the first-order rule above no longer bounds what float32 logits do: a row whose logits' rounding may
// move it by more than this fraction of its scale cannot be told right from wrong, and the run is refused
// (fa_refuse_unjudgeable_rows) instead of checked with a tolerance that passes anything.
#define FA_LOGIT_LIMIT 0.1

// dout may be NULL: then only o and lse are set. o and lse are fa_oracle_forward's. Allocates every array of *mag
// (rows of the heads marked in `heads`; fa_free_magnitudes frees them).
void fa_oracle_magnitudes(const fa_shape *shape, const double *q, const double *k, const double *v, const double *dout,
                          const double *o, const double *lse, const unsigned char *heads, fa_magnitudes *mag);
void fa_free_magnitudes(fa_magnitudes *mag);

// Allocates bounds for rows_per_head rows of each head of `shape` (only the heads marked in `heads` are touched).
void fa_alloc_row_bounds(fa_row_bounds *b, const fa_shape *shape, const unsigned char *heads, int64_t rows_per_head,
                         const char *what);
// Row r of an output with per-element scale sums scale_d[0..D), logit sums logit_d[0..D) and sums of the other
// factors' sizes factors_d[0..D) (for O_id: sum_j |v_jd|): stores the row's scale (the largest), its logit part
// relative to it, and FLT_MIN times the largest factors_d. NaN sums (NaN inputs) are left out: those elements fail.
void fa_set_row_bounds(fa_row_bounds *b, int64_t r, const double *scale_d, const double *logit_d,
                       const double *factors_d, int64_t D);

// Refuses the run (one line, exit 2) when a row of `tensor` (dims (b, h, s, d), heads marked in `heads`) has a logit
// part above FA_LOGIT_LIMIT: its check could not fail a wrong result.
void fa_refuse_unjudgeable_rows(const char *tensor, const fa_row_bounds *b, const int64_t dims[4],
                                const unsigned char *heads);

#ifdef __cplusplus
}
#endif

#endif
