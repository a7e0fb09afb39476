// oracle_ext.h - the float64 oracle of phase 6: common/fa_oracle.h's textbook attention, with every feature.
//
//   S_ij = scale * q_i . k_{g(h), j}      K/V head g(h) = h / (H / H_kv)                      (GQA / MQA)
//   S_ij = C * tanh(S_ij / C)             when softcap C > 0                                  (softcapping)
//   S_ij = -inf outside [first_i, last_i] (ext_key_range: causal, window, alignment)
//   P = softmax_rows(S), LSE_i = log sum_j exp(S_ij)
//   Z = P * M / (1 - p)                   M_ij the kernels' own mask (dropout_keep4), when p > 0    (dropout)
//   O = Z V                               (Z = P without dropout)
// A row that sees no key gets O = 0 and LSE = EMPTY_ROW_LSE, the convention the kernels follow (extensions.h).
// It also measures the scales the checks use, as fa_oracle_magnitudes does: for O the largest sum_j p_ij |v_jd|,
// for LSE the largest |max_j S_ij| + log(sum_j exp(S_ij - max)), over the rows that see a key.
#ifndef ORACLE_EXT_H
#define ORACLE_EXT_H

#include "extensions.h"
#include "fa_oracle.h"

// q: [B, H, Sq, D]; k, v: [B, H_kv, Sk, D]; o: [B, H, Sq, D]; lse: [B, H, Sq]. Only the heads marked in `heads`
// (NULL = all) are computed, and they are the only ones k and v need.
void ext_oracle_forward(const fa_shape *shape, const ext_options *e, const double *q, const double *k,
                        const double *v, const unsigned char *heads, double *o, double *lse, fa_magnitudes *mag);

// Variable-length batches: q, k, v, o packed [total, H, D], lse [total, H], sequence b at tokens cu_seqlens[b] ..
// cu_seqlens[b + 1] - 1 (shape->B sequences; its H, D, scale and causal apply). Only the query tokens marked in
// `tokens` (total bytes, NULL = all) are computed.
void ext_oracle_varlen(const fa_shape *shape, const int64_t *cu_seqlens, const double *q, const double *k,
                       const double *v, const unsigned char *tokens, double *o, double *lse, fa_magnitudes *mag);

// The backward: dq [B, H, Sq, D], dk and dv [B, H_kv, Sk, D], from the forward's o and lse (ext_oracle_forward's)
// and dout [B, H, Sq, D]: dP_ij = (dO_i . V_j) M_ij / (1 - p) (dO_i . V_j without dropout), dS_ij = P_ij (dP_ij -
// Delta_i) times the slope of the cap (1 - tanh^2(S_ij / C); 1 without softcapping), dQ = scale dS K, dK = scale
// dS^T Q and dV = Z^T dO, dK and dV summed over each K/V head's group.
// `heads` marks query heads, a GQA group whole or not at all (dK and dV of a K/V head need its whole group). The
// scales of dQ, dK, dV are fa_oracle_magnitudes' (fa_oracle.h), with the slope of the cap in every dS term.
void ext_oracle_backward(const fa_shape *shape, const ext_options *e, const double *q, const double *k,
                         const double *v, const double *dout, const double *o, const double *lse,
                         const unsigned char *heads, double *dq, double *dk, double *dv, fa_magnitudes *mag);

// The (query, key) pairs the mask lets through, over all heads: the work a kernel that prunes perfectly does.
double ext_visible_pairs(const fa_shape *shape, const ext_options *e);

#endif
